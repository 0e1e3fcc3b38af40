// slm::regex against Oniguruma as HF tokenizers runs it: the golden splits of
// tests/data/tokenizers/regex_golden.json (tools/unicode/make_regex_golden.py) must be
// reproduced exactly, piece for piece; plus errors, limits and hostile inputs.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "slm/io/json.hpp"
#include "slm/text/regex.hpp"
#include "test_helpers.hpp"

namespace {

using slm::regex;

const slm::json::value& golden() {
  static const slm::json::value doc = [] {
    std::ifstream f(slm_test::test_data("tokenizers/regex_golden.json"), std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    auto v = slm::json::parse(ss.str());
    return v.ok() ? *v : slm::json::value{};
  }();
  return doc;
}

// Split(pattern, "isolated"): gaps and matches in order, empty pieces dropped; after an
// empty match the scan moves on one unit. Returns the piece lengths in bytes.
std::vector<std::size_t> isolated(const regex& re, std::string_view text) {
  std::vector<std::size_t> out;
  std::size_t pos = 0, last = 0, b = 0, e = 0;
  while (pos <= text.size() && re.search(text, pos, b, e)) {
    if (b > last) out.push_back(b - last);
    if (e > b) out.push_back(e - b);
    last = std::max(last, e);
    if (e == b) {
      if (e >= text.size()) break;
      std::size_t len = 0;
      slm::unicode::decode(text, e, len);
      pos = e + len;
    } else {
      pos = e;
    }
  }
  if (text.size() > last) out.push_back(text.size() - last);
  return out;
}

TEST(Regex, GoldenSplitsMatchOniguruma) {
  const auto& g = golden();
  ASSERT_TRUE(g.is_object()) << "missing or bad tests/data/tokenizers/regex_golden.json";
  std::size_t checked = 0;
  for (const auto& pm : g["patterns"].members()) {
    auto re = regex::compile(pm.val.as_string());
    ASSERT_TRUE(re.ok()) << pm.key << ": " << re.message();
    EXPECT_EQ(re->pattern(), pm.val.as_string());
    for (const auto& tm : g["texts"].members()) {
      const auto& want = g["splits"][pm.key][tm.key];
      ASSERT_TRUE(want.is_array()) << pm.key << "/" << tm.key;
      const auto got = isolated(*re, tm.val.as_string());
      std::vector<std::size_t> exp;
      for (const auto& x : want.items()) exp.push_back(static_cast<std::size_t>(x.as_double()));
      EXPECT_EQ(got, exp) << "pattern " << pm.key << " on text " << tm.key;
      ++checked;
    }
  }
  EXPECT_GE(checked, 300u);
}

// \s \d \w and the \p classes over every code point, against Oniguruma's sets. The oracle
// runs Unicode 16.0 and our tables are 15.0: code points unassigned in 15.0 are skipped, as
// is U+1171E (Mn in 15.0, Mc in 16.0).
TEST(Regex, ClassesMatchOnigurumaOverAllCodePoints) {
  const auto& g = golden();
  ASSERT_TRUE(g.is_object());
  const char* names[][2] = {{"s", "\\s"}, {"d", "\\d"}, {"w", "\\w"}, {"dot", "."}, {"L", "\\p{L}"}, {"Lu", "\\p{Lu}"},
                            {"Ll", "\\p{Ll}"}, {"Lt", "\\p{Lt}"}, {"Lm", "\\p{Lm}"}, {"Lo", "\\p{Lo}"}, {"M", "\\p{M}"},
                            {"Mn", "\\p{Mn}"}, {"Nd", "\\p{Nd}"}, {"N", "\\p{N}"}, {"P", "\\p{P}"}, {"S", "\\p{S}"},
                            {"Z", "\\p{Z}"}, {"Co", "\\p{Co}"}, {"Cc", "\\p{Cc}"}, {"Cf", "\\p{Cf}"},
                            {"fold_s", "(?i:s)"}, {"fold_k", "(?i:k)"}, {"fold_ß", "(?i:ß)"}, {"fold_σ", "(?i:σ)"},
                            {"fold_t", "(?i:t)"}, {"fold_l", "(?i:l)"}, {"fold_d", "(?i:d)"}};
  for (const auto& nm : names) {
    auto re = regex::compile(nm[1]);
    ASSERT_TRUE(re.ok()) << re.message();
    std::vector<bool> oracle(0x110000, false);
    for (const auto& r : g["sweeps"][nm[0]].items())
      for (auto c = static_cast<std::size_t>(r[0].as_double()); c <= static_cast<std::size_t>(r[1].as_double()); ++c)
        oracle[c] = true;
    std::size_t wrong = 0;
    for (char32_t c = 0; c < 0x110000; ++c) {
      if (c >= 0xD800 && c <= 0xDFFF) continue;
      if (slm::unicode::general_category(c) == slm::unicode::category::Cn || c == 0x1171E) continue;
      std::string s;
      slm::unicode::append_utf8(s, c);
      std::size_t b = 0, e = 0;
      const bool m = re->search(s, 0, b, e) && b == 0 && e == s.size();
      if (m != oracle[c] && ++wrong < 5) ADD_FAILURE() << nm[1] << " U+" << std::hex << static_cast<unsigned>(c);
    }
    EXPECT_EQ(wrong, 0u) << nm[1];
  }
}

TEST(Regex, InvalidBytesAreSingleCoUnits) {
  auto re = regex::compile("\\p{L}+|\\s+|.");
  ASSERT_TRUE(re.ok());
  const std::string text = "ab\xff\xc3(\xe2\x82 \x80\xf0\x9f\x98";
  const auto pieces = isolated(*re, text);
  std::size_t total = 0;
  for (auto p : pieces) total += p;
  EXPECT_EQ(total, text.size());
  EXPECT_EQ(pieces, (std::vector<std::size_t>{2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  auto co = regex::compile("\\p{Co}+");
  std::size_t b = 0, e = 0;
  ASSERT_TRUE(co->search("a\xff\xfe", 0, b, e));
  EXPECT_EQ(b, 1u);
  EXPECT_EQ(e, 3u);
  auto dot = regex::compile(".+");
  ASSERT_TRUE(dot->search("\xff\n", 0, b, e));
  EXPECT_EQ(e, 1u);  // . stops at \n, not at an invalid byte
}

TEST(Regex, CompileErrorsNameTheOffset) {
  using slm::errc;
  using slm_test::fails_with;
  EXPECT_TRUE(fails_with(regex::compile("(ab"), errc::parse_error, {"unterminated group", "offset 0"}));
  EXPECT_TRUE(fails_with(regex::compile("ab)"), errc::parse_error, {"unmatched ')'", "offset 2"}));
  EXPECT_TRUE(fails_with(regex::compile("[a-"), errc::parse_error, {"unterminated class"}));
  EXPECT_TRUE(fails_with(regex::compile("[z-a]"), errc::parse_error, {"out of order"}));
  EXPECT_TRUE(fails_with(regex::compile("*a"), errc::parse_error, {"quantifier without a target", "offset 0"}));
  EXPECT_TRUE(fails_with(regex::compile("a{3,2}"), errc::parse_error, {"n > m"}));
  EXPECT_TRUE(fails_with(regex::compile("\\x{110000}"), errc::parse_error, {"out of range"}));
  EXPECT_TRUE(fails_with(regex::compile("(?<=a)b"), errc::unsupported, {"lookbehind", "offset 2"}));
  EXPECT_TRUE(fails_with(regex::compile("(a)\\1"), errc::unsupported, {"backreference"}));
  EXPECT_TRUE(fails_with(regex::compile("\\p{Han}"), errc::unsupported, {"\\p{Han}", "offset 3"}));
  EXPECT_TRUE(fails_with(regex::compile("[a&&b]"), errc::unsupported, {"intersection"}));
  EXPECT_TRUE(fails_with(regex::compile("[[:alpha:]]"), errc::unsupported, {"POSIX"}));
  EXPECT_TRUE(fails_with(regex::compile("a{100001}"), errc::out_of_range, {"100000"}));
  EXPECT_TRUE(fails_with(regex::compile(std::string(300, '(') + std::string(300, ')')), errc::out_of_range, {"nesting"}));
  EXPECT_TRUE(fails_with(regex::compile("(?:(?:a{1000}){1000}){1000}"), errc::out_of_range, {"program larger than"}));
  EXPECT_TRUE(fails_with(regex::compile("\\"), errc::parse_error, {"trailing backslash"}));
  EXPECT_TRUE(regex::compile("a{,3}|x{2}{3}|\\{|a{|}").ok());
}

TEST(Regex, OneMegabyteRunsUseNoDeepStack) {
  for (const char* p : {"\\s+(?!\\S)|\\s+", "(?:\\s)+x|\\s+", "(?: |\\t)+", "\\p{L}+", "(?>a+)b|a+", "a*?$", "(?:a|b)*c|a"}) {
    auto re = regex::compile(p);
    ASSERT_TRUE(re.ok()) << p;
    for (char fill : {' ', 'a'}) {
      const std::string text(1 << 20, fill);
      std::size_t b = 0, e = 0;
      const bool found = re->search(text, 0, b, e);
      if (found) {
        EXPECT_LE(e, text.size()) << p;
      }
    }
  }
  auto ws = regex::compile("\\s+(?!\\S)|\\s+");
  const std::string text = std::string(1 << 20, ' ') + "x";
  std::size_t b = 0, e = 0;
  ASSERT_TRUE(ws->search(text, 0, b, e));
  EXPECT_EQ(e, (1u << 20) - 1);  // leaves one space for " x"
}

TEST(Regex, CatastrophicBacktrackingIsBounded) {
  auto re = regex::compile("(?:a|a)*(?:a|a)*(?:a|a)*b|(a*)*c");
  ASSERT_TRUE(re.ok());
  const std::string text(40, 'a');
  std::size_t b = 0, e = 0;
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(re->search(text, 0, b, e));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
}

// A budget shared by many searches (a tokenizer's encode): each search draws on it, and a
// false return with the budget at zero means "ran out", not "no match".
TEST(Regex, SharedBudgetSpansSearchesAndSaysWhenItRanOut) {
  auto re = regex::compile("a*b|a");  // O(n) per search, one byte per match: O(n^2) in all
  ASSERT_TRUE(re.ok());
  const std::string text(20000, 'a');
  std::size_t steps = 100 * text.size(), b = 0, e = 0, pos = 0, matches = 0;
  while (re->search(text, pos, b, e, steps)) pos = e, ++matches;
  EXPECT_EQ(steps, 0u);             // ran out ...
  EXPECT_LT(matches, text.size());  // ... before the end
  // Enough budget: the same matches as without one, and a real "no match" keeps steps.
  std::size_t plenty = std::size_t{1} << 30;
  ASSERT_TRUE(re->search("xxab", 0, b, e, plenty));
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(e, 4u);
  EXPECT_FALSE(re->search("xyz", 0, b, e, plenty));
  EXPECT_GT(plenty, 0u);
  // The general engine (a pattern without the fast path) draws on it too.
  auto nested = regex::compile("(?:a|a)*(?:a|a)*b|(a*)*c");
  ASSERT_TRUE(nested.ok());
  std::size_t few = 10000;
  EXPECT_FALSE(nested->search(std::string(40, 'a'), 0, b, e, few));
  EXPECT_EQ(few, 0u);
}

TEST(Regex, SemanticsSpotChecks) {
  struct tc { const char* p; const char* t; std::size_t b, e; };
  const tc cases[] = {
      {"(?i:'s|'t)", "x'ſ", 1, 4}, {"(?i)straße", "STRASSE straẞe", 8, 16}, {"a(?i)b|c", "C aB aC", 2, 4},
      {"(?i:K)", "\xe2\x84\xaa", 0, 3}, {"\\bfoo\\b", "afoo foo", 5, 8}, {"^b", "a\nb", 2, 3}, {"a$", "a\nb", 0, 1},
      {"\\Ab|b\\z", "bab", 0, 1}, {"x*", "ab", 0, 0}, {"a{2,}?", "aaaa", 0, 2}, {"(?:ab)+?c", "ababc", 0, 5},
      {"(?:a|)*b", "aab", 0, 3}, {"[\\x{3040}-\\x{309F}]+", "aぁゟb", 1, 7}, {"\\u00e9", "é", 0, 2},
      {"[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+", " x", 0, 2}, {"(?=ab)a", "aab", 1, 2}, {"\\h+", "xBEEFy", 1, 5},
  };
  for (const auto& c : cases) {
    auto re = regex::compile(c.p);
    ASSERT_TRUE(re.ok()) << c.p << ": " << re.message();
    std::size_t b = 99, e = 99;
    ASSERT_TRUE(re->search(c.t, 0, b, e)) << c.p;
    EXPECT_EQ(b, c.b) << c.p;
    EXPECT_EQ(e, c.e) << c.p;
  }
  auto re = regex::compile("b");
  std::size_t b = 0, e = 0;
  EXPECT_FALSE(re->search("abc", 2, b, e));
  EXPECT_FALSE(re->search("abc", 9, b, e));
}

}  // namespace
