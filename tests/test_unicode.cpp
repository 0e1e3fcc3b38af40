// slm::unicode: UTF-8 decoding of every byte string shape, categories, folding, and
// NFC/NFD/NFKC against HF tokenizers' normalizers (tests/data/tokenizers/regex_golden.json).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "slm/io/json.hpp"
#include "slm/text/unicode.hpp"
#include "slm/text/unicode_tables.hpp"  // the tables themselves (text/unicode.hpp includes them only where its code is compiled)
#include "test_helpers.hpp"

namespace {

namespace u = slm::unicode;

std::string roundtrip(std::string_view s, std::size_t* units = nullptr) {
  std::string out;
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 0;
    const char32_t cp = u::decode(s, i, len);
    EXPECT_GE(len, 1u);
    EXPECT_LE(len, 4u);
    if (u::is_invalid_byte(cp)) {
      EXPECT_EQ(len, 1u);
    }
    u::append_utf8(out, cp);
    i += len;
    ++n;
  }
  if (units) *units = n;
  return out;
}

TEST(Unicode, DecodeAppendRoundTripsEveryShortByteString) {
  // Every 1- and 2-byte string, and every 3-byte string with a lead byte from each class.
  for (int a = 0; a < 256; ++a) {
    std::string s1(1, static_cast<char>(a));
    EXPECT_EQ(roundtrip(s1), s1);
    for (int b = 0; b < 256; ++b) {
      std::string s2 = s1 + static_cast<char>(b);
      EXPECT_EQ(roundtrip(s2), s2);
    }
  }
  for (int a : {0x41, 0x80, 0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF})
    for (int b = 0; b < 256; ++b)
      for (int c = 0; c < 256; c += 3) {
        const std::string s = {static_cast<char>(a), static_cast<char>(b), static_cast<char>(c)};
        ASSERT_EQ(roundtrip(s), s);
        const std::string s4 = s + '\x80';
        ASSERT_EQ(roundtrip(s4), s4);
      }
  // Every scalar value encodes and decodes to itself as one unit.
  for (char32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) continue;
    std::string s;
    u::append_utf8(s, cp);
    std::size_t len = 0;
    ASSERT_EQ(u::decode(s, 0, len), cp);
    ASSERT_EQ(len, s.size());
  }
}

TEST(Unicode, InvalidSequencesGiveOneUnitPerFirstByte) {
  std::size_t len = 0;
  EXPECT_EQ(u::decode("\xC0\xAF", 0, len), u::invalid_byte(0xC0));  // overlong
  EXPECT_EQ(len, 1u);
  EXPECT_EQ(u::decode("\xED\xA0\x80", 0, len), u::invalid_byte(0xED));  // surrogate
  EXPECT_EQ(u::decode("\xF4\x90\x80\x80", 0, len), u::invalid_byte(0xF4));  // > U+10FFFF
  EXPECT_EQ(u::decode("\xE2\x82", 0, len), u::invalid_byte(0xE2));  // truncated
  EXPECT_EQ(u::decode("\xE2\x82\xAC", 0, len), U'\u20AC');
  EXPECT_EQ(len, 3u);
  std::size_t units = 0;
  EXPECT_EQ(roundtrip("\xE2\x82(\xF0\x9F\x98\x80\x80", &units), "\xE2\x82(\xF0\x9F\x98\x80\x80");
  EXPECT_EQ(units, 5u);  // E2, 82, '(', U+1F600, 80
  EXPECT_EQ(u::general_category(u::invalid_byte(0xFF)), u::category::Co);
  EXPECT_FALSE(u::is_white_space(u::invalid_byte(0x20)));
}

TEST(Unicode, CategoriesPropertiesAndFolding) {
  using C = u::category;
  EXPECT_EQ(u::general_category(U'a'), C::Ll);
  EXPECT_EQ(u::general_category(U'Ǆ'), C::Lu);
  EXPECT_EQ(u::general_category(U'ǅ'), C::Lt);
  EXPECT_EQ(u::general_category(U'变'), C::Lo);
  EXPECT_EQ(u::general_category(0x0301), C::Mn);
  EXPECT_EQ(u::general_category(0x0663), C::Nd);
  EXPECT_EQ(u::general_category(0x2163), C::Nl);
  EXPECT_EQ(u::general_category(0x00A0), C::Zs);
  EXPECT_EQ(u::general_category(0x2028), C::Zl);
  EXPECT_EQ(u::general_category(0x0085), C::Cc);
  EXPECT_EQ(u::general_category(0x1F44D), C::So);
  EXPECT_EQ(u::general_category(0xE0041), C::Cf);
  EXPECT_EQ(u::general_category(0xE0100), C::Mn);
  EXPECT_EQ(u::general_category(0x10FFFD), C::Co);
  EXPECT_EQ(u::general_category(0x10FFFF), C::Cn);
  EXPECT_EQ(u::general_category(0x323AF), C::Lo);  // CJK extension H (Unicode 15.0)
  EXPECT_TRUE(u::is_white_space(0x85));
  EXPECT_TRUE(u::is_white_space(0x3000));
  EXPECT_FALSE(u::is_white_space(0x200B));
  EXPECT_EQ(u::simple_fold(U'K'), U'k');
  EXPECT_EQ(u::simple_fold(0x212A), U'k');
  EXPECT_EQ(u::simple_fold(0x17F), U's');
  EXPECT_EQ(u::simple_fold(0x1E9E), U'ß');
  EXPECT_EQ(u::simple_fold(U'Σ'), U'σ');
  EXPECT_EQ(u::simple_fold(U'ς'), U'σ');
  EXPECT_EQ(u::simple_fold(U'1'), U'1');
  EXPECT_STREQ(slm::unicode::tables::unicode_version, "15.0.0");
}

TEST(Unicode, NormalizationMatchesTokenizers) {
  std::ifstream f(slm_test::test_data("tokenizers/regex_golden.json"), std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  auto doc = slm::json::parse(ss.str());
  ASSERT_TRUE(doc.ok()) << doc.message();
  const auto& cases = (*doc)["normalize"];
  ASSERT_GE(cases.size(), 15u);
  for (const auto& c : cases.items()) {
    const std::string in(c["in"].as_string());
    EXPECT_EQ(u::nfc(in), c["nfc"].as_string()) << in;
    EXPECT_EQ(u::nfd(in), c["nfd"].as_string()) << in;
    EXPECT_EQ(u::nfkc(in), c["nfkc"].as_string()) << in;
    EXPECT_EQ(u::nfkd(in), c["nfkd"].as_string()) << in;
  }
}

TEST(Unicode, NormalizationKeepsInvalidBytesAsBarriers) {
  // e + invalid byte + combining acute: nothing composes across the byte.
  EXPECT_EQ(u::nfc("e\xff\xcc\x81"), "e\xff\xcc\x81");
  EXPECT_EQ(u::nfc("e\xcc\x81\xff"), "\xc3\xa9\xff");
  EXPECT_EQ(u::nfd("\xc3\xa9\x80"), "e\xcc\x81\x80");
  EXPECT_EQ(u::nfc("plain ascii\n"), "plain ascii\n");
  // A long run of combining marks is reordered without quadratic cost.
  std::string marks = "a";
  for (int i = 0; i < 100000; ++i) marks += (i % 2) ? "\xcc\x81" : "\xcc\xa3";  // U+0301 (230), U+0323 (220)
  const std::string out = u::nfd(marks);
  EXPECT_EQ(out.size(), marks.size());
  EXPECT_EQ(out.substr(1, 2), "\xcc\xa3");  // class 220 first
  EXPECT_EQ(out.substr(out.size() - 2), "\xcc\x81");
}

}  // namespace
