// slm/text/regex.hpp - the regular expressions of tokenizer pre-tokenizers (Oniguruma dialect).
//
// HF tokenizers splits text with Oniguruma (Ruby syntax, Unicode). This is a backtracking
// engine with the same leftmost, first-alternative, greedy-preference semantics, over
// UTF-8 bytes decoded with slm::unicode::decode (an invalid byte is one unit of category
// Co; `.` matches it, \s \d \w \p{L} and friends do not).
//
// Supported: alternation; (?:...), (...) (captures are not recorded), (?<name>...);
// (?i) (?-i) (?i:...) (?-i:...) with Unicode simple case folding; classes [...] with ranges,
// negation and escapes; . (anything but \n); \s \S \d \D \w \W \h \H (the sets Oniguruma
// uses: \s = White_Space, \d = Nd, \w = letters, marks, Nd, Nl, Pc and a few more; see
// unicode::is_word); \p{..} \P{..} \p{^..} with one- or two-letter categories (L, Lu, Ll, Lt, Lm, Lo,
// M, Mn, Mc, Me, N, Nd, Nl, No, P.., S.., Z.., C..), their long names (Letter,
// Uppercase_Letter, Number, Punctuation, ...) and Any; escapes \t \n \r \f \v \a \e \0
// \xHH \x{H..} \uHHHH and escaped punctuation; anchors ^ $ (line anchors, as in Ruby) \A \z \Z
// \b \B; quantifiers ? * + {n} {n,} {n,m} {,m}, each greedy, lazy (?) or possessive (+);
// lookahead (?=...) (?!...); atomic groups (?>...).
// Unsupported (errc::unsupported, with the offset): backreferences, lookbehind, \G \K \X \R,
// conditionals, absent operators, class intersection (&&), POSIX brackets, named
// properties other than the categories (scripts, e.g. \p{Han}).
//
// Engine: the pattern compiles to a flat program. The backtracking stack is explicit (never
// the C++ stack; lookahead and atomic groups recurse once per nesting level of the
// pattern, which compile() bounds), and a quantified single character (class, literal or
// .) runs as one tight loop that leaves a single resumable entry, so a 1 MB run of spaces
// costs one entry. Alternations dispatch on the next byte (each branch's possible first
// bytes), and the search skips start positions whose first byte cannot begin a match.
// Work is bounded: each search() has a step budget (2^27 + 4096 steps per byte searched);
// a pattern that backtracks catastrophically runs out of it and search() reports no match.
// A caller running many searches (a tokenizer's encode) passes one budget for all of them
// instead, and learns when it ran out.
// Fast path: a pattern that is an alternation of simple branches (literals, single-class
// loops, single-class lookaheads, optional alternations of strings: every tokenizer pattern
// in tests/data) is also compiled to item lists matched without a backtracking stack, with
// direct code for the common branch shapes (` ?\p{L}+`, `\s+(?!\S)`, `\p{N}{1,3}`, ...);
// it explores the same choices in the same order, so it finds the same matches. It counts
// its work as an upper bound of the general engine's steps and hands the search to the
// general engine when that nears the budget, so the budget's outcome is unchanged too.
// Limits at compile time: pattern 64 KiB, nesting depth 200, counted repeats up to 100000,
// program 200000 instructions.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "slm/core/heap_estimate.hpp"
#include "slm/core/status.hpp"
#include "slm/text/unicode.hpp"

namespace slm {

namespace regex_detail {
// What class regex names in its declarations; defined with the engine below.
struct program;
enum class assertion : std::uint8_t;
}  // namespace regex_detail

#if SLM_DEFINE_TEXT

namespace regex_detail {

using unicode::category;

// A set of code points: an ASCII bitmap answers most lookups; beyond ASCII, ranges,
// categories and the \s / \w properties, possibly negated.
struct char_class {
  std::array<std::uint64_t, 2> ascii{};  // final answer for cp < 128 (negation applied)
  std::vector<std::pair<char32_t, char32_t>> ranges;
  std::uint32_t categories = 0;  // bit per unicode::category
  bool white = false, not_white = false, word = false, not_word = false, negated = false;

  bool raw_contains(char32_t cp) const noexcept {  // without negation, any cp
    if (categories && (categories >> static_cast<unsigned>(unicode::general_category(cp)) & 1u)) return true;
    for (const auto& r : ranges)
      if (cp >= r.first && cp <= r.second) return true;
    if (white && unicode::is_white_space(cp)) return true;
    if (not_white && !unicode::is_white_space(cp)) return true;
    if (word && unicode::is_word(cp)) return true;
    if (not_word && !unicode::is_word(cp)) return true;
    return false;
  }
  void finish() {
    ascii = {};
    for (char32_t c = 0; c < 128; ++c)
      if (raw_contains(c) != negated) ascii[c >> 6] |= std::uint64_t{1} << (c & 63);
  }
  bool contains(char32_t cp) const noexcept {
    if (cp < 128) return ascii[cp >> 6] >> (cp & 63) & 1u;
    return raw_contains(cp) != negated;
  }
  // Can a code point >= 128 (or an invalid byte) be in the set?
  bool may_match_non_ascii() const noexcept {
    if (negated || categories || white || not_white || word || not_word) return true;
    for (const auto& r : ranges)
      if (r.second >= 128) return true;
    return false;
  }
};

using byte_set = std::array<std::uint64_t, 4>;
inline void set_byte(byte_set& s, unsigned b) { s[b >> 6] |= std::uint64_t{1} << (b & 63); }
inline bool has_byte(const byte_set& s, unsigned b) { return s[b >> 6] >> (b & 63) & 1u; }
inline void add_set(byte_set& a, const byte_set& b) {
  for (std::size_t i = 0; i < 4; ++i) a[i] |= b[i];
}
inline unsigned lead_byte(char32_t cp) {
  if (cp < 0x80) return cp;
  if (cp < 0x800) return 0xC0 | (cp >> 6);
  if (cp < 0x10000) return 0xE0 | (cp >> 12);
  return 0xF0 | (cp >> 18);
}

// The first bytes a class can start with.
inline byte_set first_bytes(const char_class& c) {
  byte_set s{};
  for (unsigned b = 0; b < 128; ++b)
    if (c.contains(b)) set_byte(s, b);
  if (c.negated || c.categories || c.white || c.not_white || c.word || c.not_word) {
    for (unsigned b = 128; b < 256; ++b) set_byte(s, b);
    return s;
  }
  for (const auto& r : c.ranges) {
    if (r.second < 128) continue;
    const char32_t lo = std::max<char32_t>(r.first, 128), hi = std::min<char32_t>(r.second, 0x10FFFF);
    if (lo > hi) continue;
    for (unsigned b = lead_byte(lo); b <= lead_byte(hi); ++b) set_byte(s, b);
  }
  return s;
}

enum class op : std::uint8_t {
  match,         // success
  literal,       // a: offset into literal pool, b: length in bytes
  cls,           // a: class index
  repeat,        // single-unit loop: a: class, b: min, c: max (UINT32_MAX: none), d: mode
  alt,           // a: alternation table index
  jmp,           // a: target
  split,         // try a first, then b
  save_pos,      // a: register: remember the position (restored on backtrack)
  check_progress,// a: register, b: exit target: leave a loop whose iteration matched nothing
  look,          // a: sub-program start, b: 1 = negative, c: continue at
  atomic,        // a: sub-program start, c: continue at
  assert_,       // a: which (assertion)
};
enum class assertion : std::uint8_t { bol, eol, bot, eot, eot_nl, word_b, not_word_b };
enum class repeat_mode : std::uint8_t { greedy, lazy, possessive };

struct inst {
  op code;
  std::uint8_t d = 0;
  std::uint32_t a = 0, b = 0, c = 0;
};

struct alt_table {
  std::vector<std::uint32_t> targets;         // up to 64 branches
  std::array<std::uint64_t, 257> possible{};  // by next byte (256: end of text): branches that may match
};

// ---- AST ----
enum class node_kind : std::uint8_t { empty, literal, cls, concat, alt, repeat, look, atomic, assert_ };
struct node {
  node_kind kind = node_kind::empty;
  char32_t cp = 0;                // literal
  std::uint32_t index = 0;        // class index, assertion
  std::uint32_t min = 0, max = 0; // repeat
  repeat_mode mode = repeat_mode::greedy;
  bool negative = false;          // look
  std::vector<std::unique_ptr<node>> kids;
};
using node_ptr = std::unique_ptr<node>;

inline constexpr std::uint32_t no_max = UINT32_MAX;

// Looks up a \p{...} name: a category mask, or 0 if unknown. `any` -> all.
inline std::uint32_t category_mask(std::string_view name) {
  using C = category;
  auto bit = [](C c) { return std::uint32_t{1} << static_cast<unsigned>(c); };
  auto range = [&](C a, C b) {
    std::uint32_t m = 0;
    for (unsigned c = static_cast<unsigned>(a); c <= static_cast<unsigned>(b); ++c) m |= 1u << c;
    return m;
  };
  std::string n;
  for (char ch : name)
    if (ch != '_' && ch != ' ' && ch != '-') n.push_back(static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch + 32 : ch));
  struct entry { const char* name; std::uint32_t mask; };
  const entry table[] = {
      {"l", range(C::Lu, C::Lo)}, {"letter", range(C::Lu, C::Lo)},
      {"lu", bit(C::Lu)}, {"uppercaseletter", bit(C::Lu)}, {"ll", bit(C::Ll)}, {"lowercaseletter", bit(C::Ll)},
      {"lt", bit(C::Lt)}, {"titlecaseletter", bit(C::Lt)}, {"lm", bit(C::Lm)}, {"modifierletter", bit(C::Lm)},
      {"lo", bit(C::Lo)}, {"otherletter", bit(C::Lo)},
      {"lc", bit(C::Lu) | bit(C::Ll) | bit(C::Lt)}, {"casedletter", bit(C::Lu) | bit(C::Ll) | bit(C::Lt)},
      {"m", range(C::Mn, C::Me)}, {"mark", range(C::Mn, C::Me)}, {"combiningmark", range(C::Mn, C::Me)},
      {"mn", bit(C::Mn)}, {"nonspacingmark", bit(C::Mn)}, {"mc", bit(C::Mc)}, {"spacingmark", bit(C::Mc)},
      {"me", bit(C::Me)}, {"enclosingmark", bit(C::Me)},
      {"n", range(C::Nd, C::No)}, {"number", range(C::Nd, C::No)}, {"nd", bit(C::Nd)}, {"decimalnumber", bit(C::Nd)},
      {"nl", bit(C::Nl)}, {"letternumber", bit(C::Nl)}, {"no", bit(C::No)}, {"othernumber", bit(C::No)},
      {"p", range(C::Pc, C::Po)}, {"punctuation", range(C::Pc, C::Po)}, {"pc", bit(C::Pc)},
      {"connectorpunctuation", bit(C::Pc)}, {"pd", bit(C::Pd)}, {"dashpunctuation", bit(C::Pd)},
      {"ps", bit(C::Ps)}, {"openpunctuation", bit(C::Ps)}, {"pe", bit(C::Pe)}, {"closepunctuation", bit(C::Pe)},
      {"pi", bit(C::Pi)}, {"initialpunctuation", bit(C::Pi)}, {"pf", bit(C::Pf)}, {"finalpunctuation", bit(C::Pf)},
      {"po", bit(C::Po)}, {"otherpunctuation", bit(C::Po)},
      {"s", range(C::Sm, C::So)}, {"symbol", range(C::Sm, C::So)}, {"sm", bit(C::Sm)}, {"mathsymbol", bit(C::Sm)},
      {"sc", bit(C::Sc)}, {"currencysymbol", bit(C::Sc)}, {"sk", bit(C::Sk)}, {"modifiersymbol", bit(C::Sk)},
      {"so", bit(C::So)}, {"othersymbol", bit(C::So)},
      {"z", range(C::Zs, C::Zp)}, {"separator", range(C::Zs, C::Zp)}, {"zs", bit(C::Zs)}, {"spaceseparator", bit(C::Zs)},
      {"zl", bit(C::Zl)}, {"lineseparator", bit(C::Zl)}, {"zp", bit(C::Zp)}, {"paragraphseparator", bit(C::Zp)},
      {"c", range(C::Cc, C::Cn)}, {"other", range(C::Cc, C::Cn)}, {"cc", bit(C::Cc)}, {"control", bit(C::Cc)},
      {"cf", bit(C::Cf)}, {"format", bit(C::Cf)}, {"cs", bit(C::Cs)}, {"surrogate", bit(C::Cs)},
      {"co", bit(C::Co)}, {"privateuse", bit(C::Co)}, {"cn", bit(C::Cn)}, {"unassigned", bit(C::Cn)},
      {"any", range(C::Lu, C::Cn)},
  };
  for (const auto& e : table)
    if (n == e.name) return e.mask;
  return 0;
}

inline void fold_close(char_class& c) {
  // Adds every simple-fold equivalent of the members that are given as ranges (twice, so
  // that K -> k -> KELVIN SIGN closes).
  for (int pass = 0; pass < 2; ++pass) {
    std::vector<std::pair<char32_t, char32_t>> add;
    auto in = [&](char32_t x) {
      for (const auto& r : c.ranges)
        if (x >= r.first && x <= r.second) return true;
      return false;
    };
    for (const auto& p : unicode::tables::simple_fold) {
      const bool f = in(p.from), t = in(p.to);
      if (f && !t) add.emplace_back(p.to, p.to);
      if (t && !f) add.emplace_back(p.from, p.from);
    }
    c.ranges.insert(c.ranges.end(), add.begin(), add.end());
  }
}

class parser {
 public:
  explicit parser(std::string_view p) : p_(p) {}
  std::vector<char_class> classes;

  result<node_ptr> parse() {
    auto r = parse_alt(0);
    if (!r.ok()) return r;
    if (i_ < p_.size()) return error(errc::parse_error, "unmatched ')'");
    return r;
  }

 private:
  std::string_view p_;
  std::size_t i_ = 0;
  bool icase_ = false;

  status error(errc code, std::string_view what) const {
    return make_error(code, "regex: ", what, " at offset ", i_, " in pattern '", p_.substr(0, 200), "'");
  }
  bool eof() const { return i_ >= p_.size(); }
  char peek() const { return p_[i_]; }

  static node_ptr make(node_kind k) {
    auto n = std::make_unique<node>();
    n->kind = k;
    return n;
  }
  node_ptr class_node(char_class c) {
    c.finish();
    auto n = make(node_kind::cls);
    n->index = static_cast<std::uint32_t>(classes.size());
    classes.push_back(std::move(c));
    return n;
  }
  node_ptr literal_node(char32_t cp) {
    if (icase_ && !unicode::is_invalid_byte(cp)) {
      std::vector<char32_t> eq;
      unicode::fold_equivalents(cp, eq);
      if (eq.size() > 1) {
        char_class c;
        for (char32_t e : eq) c.ranges.emplace_back(e, e);
        return class_node(std::move(c));
      }
    }
    auto n = make(node_kind::literal);
    n->cp = cp;
    return n;
  }

  result<node_ptr> parse_alt(int depth) {
    if (depth > 200) return error(errc::out_of_range, "nesting deeper than 200");
    const bool saved_icase = icase_;  // (?i) inside a group lasts to the group's end
    std::vector<node_ptr> branches;
    for (;;) {
      auto b = parse_concat(depth);
      if (!b.ok()) return b;
      branches.push_back(std::move(*b));
      if (!eof() && peek() == '|') {
        ++i_;
        continue;
      }
      break;
    }
    icase_ = saved_icase;
    if (branches.size() == 1) return std::move(branches[0]);
    auto n = make(node_kind::alt);
    n->kids = std::move(branches);
    return n;
  }

  result<node_ptr> parse_concat(int depth) {
    auto n = make(node_kind::concat);
    while (!eof() && peek() != '|' && peek() != ')') {
      const std::size_t atom_at = i_;
      node_ptr atom;
      bool flags_only = false;
      auto a = parse_atom(depth, flags_only);
      if (!a.ok()) return a;
      if (flags_only) {
        // (?i) applies to the rest of the enclosing group, later alternatives included
        // (Oniguruma reads a(?i)b|c as a(?i:b|c)).
        auto rest = parse_alt(depth + 1);
        if (!rest.ok()) return rest;
        n->kids.push_back(std::move(*rest));
        break;
      }
      atom = std::move(*a);
      // quantifiers (several may follow one another: a{2}{3})
      while (!eof()) {
        const char q = peek();
        std::uint32_t mn = 0, mx = 0;
        if (q == '*') { mn = 0; mx = no_max; ++i_; }
        else if (q == '+') { mn = 1; mx = no_max; ++i_; }
        else if (q == '?') { mn = 0; mx = 1; ++i_; }
        else if (q == '{') {
          const std::size_t save = i_;
          if (!parse_counted(mn, mx)) { i_ = save; break; }  // a '{' that is not a quantifier is a literal
          if (mn == no_max) return error(errc::out_of_range, "repeat count above 100000");
          if (mx != no_max && mn > mx) return error(errc::parse_error, "repeat range {n,m} with n > m");
        } else break;
        if (atom->kind == node_kind::assert_ || atom->kind == node_kind::look) {
          // Oniguruma accepts quantified anchors; a quantified assertion is at most one test.
          if (mn == 0) atom = make(node_kind::empty);
        }
        repeat_mode mode = repeat_mode::greedy;
        if (!eof() && peek() == '?') { mode = repeat_mode::lazy; ++i_; }
        else if (!eof() && peek() == '+' && q != '{') { mode = repeat_mode::possessive; ++i_; }
        if (atom->kind == node_kind::empty) continue;
        auto r = make(node_kind::repeat);
        r->min = mn;
        r->max = mx;
        r->mode = mode;
        r->kids.push_back(std::move(atom));
        atom = std::move(r);
      }
      (void)atom_at;
      n->kids.push_back(std::move(atom));
    }
    if (n->kids.size() == 1) return std::move(n->kids[0]);
    if (n->kids.empty()) return make(node_kind::empty);
    return n;
  }

  // {n} {n,} {n,m} {,m}; false if the text is not a counted quantifier.
  bool parse_counted(std::uint32_t& mn, std::uint32_t& mx) {
    ++i_;  // '{'
    auto number = [&](std::uint32_t& v) {
      const std::size_t s = i_;
      std::uint64_t x = 0;
      while (!eof() && peek() >= '0' && peek() <= '9') {
        x = x * 10 + static_cast<unsigned>(peek() - '0');
        if (x > 100000) x = 100001;
        ++i_;
      }
      v = x > 100000 ? no_max : static_cast<std::uint32_t>(x);
      return i_ > s;
    };
    const bool has_min = number(mn);
    if (!has_min) mn = 0;
    if (!eof() && peek() == '}') {
      if (!has_min) return false;
      ++i_;
      mx = mn;
      return true;
    }
    if (eof() || peek() != ',') return false;
    ++i_;
    const bool has_max = number(mx);
    if (eof() || peek() != '}') return false;
    if (!has_min && !has_max) return false;
    if (!has_max) mx = no_max;
    else if (mx == no_max) mn = no_max;  // too large: reported by the caller
    ++i_;
    return true;
  }

  result<node_ptr> parse_atom(int depth, bool& flags_only) {
    const char c = peek();
    switch (c) {
      case '(': return parse_group(depth, flags_only);
      case '[': return parse_class();
      case '.': {
        ++i_;
        char_class k;
        k.negated = true;
        k.ranges.emplace_back('\n', '\n');
        return class_node(std::move(k));
      }
      case '^': ++i_; return assert_node(assertion::bol);
      case '$': ++i_; return assert_node(assertion::eol);
      case '*': case '+': case '?': return error(errc::parse_error, "quantifier without a target");
      case '\\': return parse_escape_atom();
      default: {
        std::size_t len = 0;
        const char32_t cp = unicode::decode(p_, i_, len);
        i_ += len;
        return literal_node(cp);
      }
    }
  }

  node_ptr assert_node(assertion a) {
    auto n = make(node_kind::assert_);
    n->index = static_cast<std::uint32_t>(a);
    return n;
  }

  result<node_ptr> parse_group(int depth, bool& flags_only) {
    const std::size_t open = i_;
    ++i_;
    node_kind kind = node_kind::concat;  // plain group
    bool negative = false;
    const bool outer_icase = icase_;
    if (!eof() && peek() == '?') {
      ++i_;
      if (eof()) return error(errc::parse_error, "unterminated group");
      const char k = peek();
      if (k == ':') ++i_;
      else if (k == '=' || k == '!') { kind = node_kind::look; negative = k == '!'; ++i_; }
      else if (k == '>') { kind = node_kind::atomic; ++i_; }
      else if (k == '<' && i_ + 1 < p_.size() && (p_[i_ + 1] == '=' || p_[i_ + 1] == '!'))
        return error(errc::unsupported, "lookbehind");
      else if (k == '<' || k == '\'') {  // named group: not recorded
        const char close = k == '<' ? '>' : '\'';
        ++i_;
        while (!eof() && peek() != close) ++i_;
        if (eof()) return error(errc::parse_error, "unterminated group name");
        ++i_;
      } else if (k == 'i' || k == '-' || k == 'm' || k == 'x') {
        bool on = true, icase = icase_;
        while (!eof() && peek() != ':' && peek() != ')') {
          const char f = peek();
          if (f == '-') on = false;
          else if (f == 'i') icase = on;
          else return error(errc::unsupported, "option other than i in (?...)");
          ++i_;
        }
        if (eof()) return error(errc::parse_error, "unterminated group");
        if (peek() == ')') {  // (?i): to the end of the enclosing group
          ++i_;
          icase_ = icase;
          flags_only = true;
          return make(node_kind::empty);
        }
        ++i_;  // ':'
        icase_ = icase;
      } else {
        return error(errc::unsupported, "group kind (?" + std::string(1, k));
      }
    }
    auto body = parse_alt(depth + 1);
    if (!body.ok()) return body;
    icase_ = outer_icase;
    if (eof() || peek() != ')') {
      i_ = open;
      return error(errc::parse_error, "unterminated group");
    }
    ++i_;
    if (kind == node_kind::concat) return body;
    auto n = make(kind);
    n->negative = negative;
    n->kids.push_back(std::move(*body));
    return n;
  }

  // Reads hex digits (at most max_digits); false if none.
  bool hex(std::size_t max_digits, char32_t& v) {
    v = 0;
    std::size_t k = 0;
    while (k < max_digits && !eof() && std::isxdigit(static_cast<unsigned char>(peek()))) {
      const char h = peek();
      v = v * 16 + static_cast<char32_t>(h <= '9' ? h - '0' : (h | 0x20) - 'a' + 10);
      ++i_;
      ++k;
    }
    return k > 0;
  }

  // After a backslash: fills either cp (a single character) or cls (a set). Returns false
  // with `err` set on error.
  status parse_escape(char32_t& cp, char_class& cls, bool& is_set, bool& is_assert, assertion& a, bool in_class) {
    is_set = is_assert = false;
    if (eof()) return error(errc::parse_error, "trailing backslash");
    const char e = peek();
    ++i_;
    switch (e) {
      case 't': cp = '\t'; return {};
      case 'n': cp = '\n'; return {};
      case 'r': cp = '\r'; return {};
      case 'f': cp = '\f'; return {};
      case 'v': cp = '\v'; return {};
      case 'a': cp = 7; return {};
      case 'e': cp = 27; return {};
      case '0': {
        cp = 0;
        for (int k = 0; k < 2 && !eof() && peek() >= '0' && peek() <= '7'; ++k) cp = cp * 8 + static_cast<char32_t>(peek() - '0'), ++i_;
        return {};
      }
      case 'x': {
        if (!eof() && peek() == '{') {
          ++i_;
          if (!hex(8, cp) || eof() || peek() != '}') return error(errc::parse_error, "bad \\x{...} escape");
          ++i_;
        } else if (!hex(2, cp)) {
          return error(errc::parse_error, "bad \\x escape");
        }
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return error(errc::parse_error, "code point out of range");
        return {};
      }
      case 'u': {
        const std::size_t s = i_;
        if (!hex(4, cp) || i_ - s != 4) return error(errc::parse_error, "bad \\u escape (needs 4 hex digits)");
        if (cp >= 0xD800 && cp <= 0xDFFF) return error(errc::unsupported, "surrogate in \\u escape");
        return {};
      }
      case 's': is_set = true; cls.white = true; return {};
      case 'S': is_set = true; cls.not_white = true; return {};
      case 'w': is_set = true; cls.word = true; return {};
      case 'W': is_set = true; cls.not_word = true; return {};
      case 'd': is_set = true; cls.categories |= 1u << static_cast<unsigned>(category::Nd); return {};
      case 'D': is_set = true; cls.categories |= ~(1u << static_cast<unsigned>(category::Nd)) & ((1u << 30) - 1); return {};
      case 'h': is_set = true; cls.ranges.insert(cls.ranges.end(), {{'0', '9'}, {'a', 'f'}, {'A', 'F'}}); return {};
      case 'H': {
        is_set = true;
        // everything but hex digits (and, like any negation, invalid bytes too)
        cls.ranges.insert(cls.ranges.end(), {{0, '0' - 1}, {'9' + 1, 'A' - 1}, {'G', 'a' - 1}, {'g', 0x10FFFF}});
        cls.categories |= 1u << static_cast<unsigned>(category::Co);
        return {};
      }
      case 'p': case 'P': {
        bool neg = e == 'P';
        if (eof() || peek() != '{') return error(errc::parse_error, "\\p needs {name}");
        ++i_;
        if (!eof() && peek() == '^') { neg = !neg; ++i_; }
        const std::size_t s = i_;
        while (!eof() && peek() != '}') ++i_;
        if (eof()) return error(errc::parse_error, "unterminated \\p{");
        const std::string_view name = p_.substr(s, i_ - s);
        ++i_;
        std::uint32_t m = category_mask(name);
        if (!m) { i_ = s; return error(errc::unsupported, cat("property \\p{", name, "}")); }
        if (neg) m = ~m & ((1u << 30) - 1);
        is_set = true;
        cls.categories |= m;
        return {};
      }
      case 'A': case 'z': case 'Z': case 'b': case 'B':
        if (in_class) {
          if (e == 'b') { cp = 8; return {}; }
          return error(errc::parse_error, "anchor inside a class");
        }
        is_assert = true;
        a = e == 'A' ? assertion::bot : e == 'z' ? assertion::eot : e == 'Z' ? assertion::eot_nl
            : e == 'b' ? assertion::word_b : assertion::not_word_b;
        return {};
      default:
        if ((e >= '1' && e <= '9') || e == 'k' || e == 'g') return error(errc::unsupported, "backreference or subroutine");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          --i_;
          return error(errc::unsupported, cat("escape \\", e));
        }
        --i_;
        {
          std::size_t len = 0;
          cp = unicode::decode(p_, i_, len);
          i_ += len;
        }
        return {};
    }
  }

  result<node_ptr> parse_escape_atom() {
    const std::size_t at = i_;
    ++i_;
    char32_t cp = 0;
    char_class cls;
    bool is_set = false, is_assert = false;
    assertion a{};
    if (auto s = parse_escape(cp, cls, is_set, is_assert, a, false); !s.ok()) return s;
    (void)at;
    if (is_assert) return assert_node(a);
    if (is_set) return class_node(std::move(cls));
    return literal_node(cp);
  }

  result<node_ptr> parse_class() {
    const std::size_t open = i_;
    ++i_;  // '['
    char_class c;
    if (!eof() && peek() == '^') { c.negated = true; ++i_; }
    bool first = true;
    for (;;) {
      if (eof()) { i_ = open; return error(errc::parse_error, "unterminated class"); }
      if (peek() == ']' && !first) { ++i_; break; }
      first = false;
      if (peek() == '[') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') return error(errc::unsupported, "POSIX bracket");
        return error(errc::unsupported, "nested class");
      }
      if (peek() == '&' && i_ + 1 < p_.size() && p_[i_ + 1] == '&') return error(errc::unsupported, "class intersection &&");
      char32_t lo = 0;
      if (auto s = class_char(c, lo); !s.ok()) return s;
      if (lo == no_char) continue;  // a set escape was merged in
      if (i_ + 1 < p_.size() && peek() == '-' && p_[i_ + 1] != ']') {
        ++i_;
        char32_t hi = 0;
        const std::size_t at = i_;
        if (auto s = class_char(c, hi); !s.ok()) return s;
        if (hi == no_char) { i_ = at; return error(errc::parse_error, "class range ends in a set"); }
        if (hi < lo) { i_ = at; return error(errc::parse_error, "class range out of order"); }
        c.ranges.emplace_back(lo, hi);
      } else {
        c.ranges.emplace_back(lo, lo);
      }
    }
    if (icase_) fold_close(c);
    return class_node(std::move(c));
  }

  static constexpr char32_t no_char = 0xFFFFFFFFu;
  // One class member: a character (returned) or a set escape (merged into c; returns no_char).
  status class_char(char_class& c, char32_t& out) {
    if (peek() == '\\') {
      ++i_;
      char_class set;
      bool is_set = false, is_assert = false;
      assertion a{};
      char32_t cp = 0;
      if (auto s = parse_escape(cp, set, is_set, is_assert, a, true); !s.ok()) return s;
      if (is_set) {
        c.categories |= set.categories;
        c.white |= set.white;
        c.not_white |= set.not_white;
        c.word |= set.word;
        c.not_word |= set.not_word;
        c.ranges.insert(c.ranges.end(), set.ranges.begin(), set.ranges.end());
        out = no_char;
        return {};
      }
      out = cp;
      return {};
    }
    std::size_t len = 0;
    out = unicode::decode(p_, i_, len);
    i_ += len;
    return {};
  }
};

// ---- fast path ----
// Most tokenizer patterns are an alternation of simple branches, each a sequence of
// literals, single-class loops (` ?\p{L}+`, `\p{N}{1,3}`, `[^\r\n\p{L}\p{N}]?\p{L}+`),
// single-class lookaheads (`\s+(?!\S)`) and optional alternations of fixed strings
// (`(?i:'s|'t|...)?`). Such a pattern also compiles to a fast_program: the branches as
// item lists, matched by a loop over the items that keeps one state per item instead of
// a backtracking stack (a greedy loop backs off one unit at a time, an alternation item
// tries its next string), in exactly the order the general engine explores them. Its
// work is counted generously in the general engine's steps; if that count nears the
// search's budget, search() runs the general engine instead, so the budget gives the
// same answers as before.
struct fast_unit {       // one step of a fixed string: a literal's bytes or one unit of a class
  std::string bytes;     // empty: the class
  std::uint32_t cls = 0;
};
enum class fast_kind : std::uint8_t { literal, loop, look, alt };
struct fast_item {
  fast_kind kind = fast_kind::literal;
  repeat_mode mode = repeat_mode::greedy;  // loop: greedy or possessive
  bool negative = false;                   // look
  bool optional = false;                   // alt: `(...)?` (greedy: the empty string last)
  std::uint32_t cls = 0, min = 0, max = 0; // loop (max: no_max for none), look
  std::array<std::uint64_t, 2> ascii{};    // loop, look: the class's ASCII bitmap (read without a lookup)
  bool ascii_only = false;                 // loop, look: the class has no member >= 128 (no decoding)
  bool next_needs_unit = false;            // loop: the next item is a loop with min >= 1 or a literal
  std::string bytes;                       // literal
  std::vector<std::vector<fast_unit>> alts;  // alt: each a non-empty fixed string
  byte_set alt_first{};                    // alt: the bytes any of them can start with
};
struct fast_program {
  static constexpr std::size_t max_items = 16;
  std::vector<std::vector<fast_item>> branches;  // at most 64
  // Shapes with a direct path (same outcome as the item loop, fewer steps):
  // one_loop = [loop, min <= 1]; opt_loop = [loop {0,1} greedy, loop min 1] or that and a
  // loop min 0 (which matches whatever B leaves, so nothing is ever given back);
  // loop_look = [loop min <= 1, look] (`\s+(?!\S)`: back off one unit at a time);
  // literal = [literal]; opt_star_plus = [loop {0,1} greedy, loop min 0 greedy, loop min 1];
  // the last two may end in an optional alternation of strings, which always succeeds
  // (`...+(?i:'s|'t)?`); other.
  enum class shape : std::uint8_t { other, one_loop, opt_loop, loop_look, literal, opt_star_plus };
  std::vector<shape> shapes;
  std::vector<char_class> classes;
  std::array<std::uint64_t, 257> possible{};     // by next byte (256: end of text): branches that may match
  std::size_t branch_cost = 8;                   // work charged per branch tried (nested alternations cost more)
};

// ---- compiler ----
struct program {
  std::vector<inst> code;
  std::vector<char_class> classes;
  std::vector<alt_table> alts;
  std::string literals;
  std::uint32_t registers = 0;
  byte_set first{};       // bytes a match can start with
  bool nullable = false;  // can the whole pattern match empty (then every position is a start)
  std::unique_ptr<const fast_program> fast;  // when the pattern has the fast path's shape
};

struct first_info {
  byte_set bytes{};
  bool nullable = true;
};

class compiler {
 public:
  compiler(program& p, std::vector<char_class>& classes) : p_(p), classes_(classes) {}

  first_info first(const node& n) {
    first_info f;
    switch (n.kind) {
      case node_kind::empty: case node_kind::assert_: case node_kind::look: return f;
      case node_kind::literal: {
        f.nullable = false;
        set_byte(f.bytes, unicode::is_invalid_byte(n.cp) ? n.cp - 0x110000u : lead_byte(n.cp));
        return f;
      }
      case node_kind::cls: f.nullable = false; f.bytes = first_bytes(classes_[n.index]); return f;
      case node_kind::concat: case node_kind::atomic:
        for (const auto& k : n.kids) {
          const first_info g = first(*k);
          add_set(f.bytes, g.bytes);
          if (!g.nullable) { f.nullable = false; break; }
        }
        return f;
      case node_kind::alt:
        f.nullable = false;
        for (const auto& k : n.kids) {
          const first_info g = first(*k);
          add_set(f.bytes, g.bytes);
          f.nullable |= g.nullable;
        }
        return f;
      case node_kind::repeat: {
        const first_info g = first(*n.kids[0]);
        f.bytes = g.bytes;
        f.nullable = n.min == 0 || g.nullable;
        return f;
      }
    }
    return f;
  }

  status emit(const node& n) {
    if (p_.code.size() > 200000) return make_error(errc::out_of_range, "regex: program larger than 200000 instructions");
    switch (n.kind) {
      case node_kind::empty: return {};
      case node_kind::literal: {
        std::string bytes;
        unicode::append_utf8(bytes, n.cp);
        add_literal(bytes);
        return {};
      }
      case node_kind::cls: add({op::cls, 0, n.index}); return {};
      case node_kind::assert_: add({op::assert_, 0, n.index}); return {};
      case node_kind::concat:
        for (const auto& k : n.kids) SLM_TRY(emit(*k));
        return {};
      case node_kind::alt: return emit_alt(n);
      case node_kind::look: case node_kind::atomic: {
        const std::size_t at = add({n.kind == node_kind::look ? op::look : op::atomic, 0, 0, n.negative ? 1u : 0u});
        p_.code[at].a = static_cast<std::uint32_t>(p_.code.size());
        SLM_TRY(emit(*n.kids[0]));
        add({op::match});
        p_.code[at].c = static_cast<std::uint32_t>(p_.code.size());
        return {};
      }
      case node_kind::repeat: return emit_repeat(n);
    }
    return {};
  }

 private:
  program& p_;
  std::vector<char_class>& classes_;

  std::size_t add(inst i) {
    p_.code.push_back(i);
    return p_.code.size() - 1;
  }
  void add_literal(std::string_view bytes) {
    // Merge with a directly preceding literal (nothing can jump between them: jump targets
    // are only ever the instruction after a complete node, and merging happens within one).
    if (!p_.code.empty() && p_.code.back().code == op::literal && merge_ok_ == p_.code.size()) {
      p_.literals.append(bytes);
      p_.code.back().b += static_cast<std::uint32_t>(bytes.size());
    } else {
      add({op::literal, 0, static_cast<std::uint32_t>(p_.literals.size()), static_cast<std::uint32_t>(bytes.size())});
      p_.literals.append(bytes);
    }
    merge_ok_ = p_.code.size();
  }
  std::size_t merge_ok_ = SIZE_MAX;

  status emit_alt(const node& n) {
    // More than 64 branches: nest (a|b|...|x) as (first 63 | (rest)).
    std::vector<const node*> branches;
    for (const auto& k : n.kids) branches.push_back(k.get());
    return emit_branches(branches, 0);
  }
  status emit_branches(const std::vector<const node*>& br, std::size_t from) {
    const std::size_t count = std::min<std::size_t>(br.size() - from, 64);
    const bool nest = br.size() - from > 64;
    const std::size_t own = nest ? 63 : count;
    alt_table t;
    const std::size_t at = add({op::alt, 0, static_cast<std::uint32_t>(p_.alts.size())});
    p_.alts.emplace_back();
    std::vector<std::size_t> jumps;
    for (std::size_t k = 0; k < own + (nest ? 1 : 0); ++k) {
      t.targets.push_back(static_cast<std::uint32_t>(p_.code.size()));
      first_info f;
      merge_ok_ = SIZE_MAX;
      if (k < own) {
        f = first(*br[from + k]);
        SLM_TRY(emit(*br[from + k]));
      } else {
        for (std::size_t j = from + own; j < br.size(); ++j) {
          const first_info g = first(*br[j]);
          add_set(f.bytes, g.bytes);
        }
        SLM_TRY(emit_branches(br, from + own));
      }
      for (unsigned b = 0; b < 256; ++b)
        if (f.nullable || has_byte(f.bytes, b)) t.possible[b] |= std::uint64_t{1} << k;
      t.possible[256] |= f.nullable || (k == own) ? std::uint64_t{1} << k : 0;  // at end only nullable branches
      jumps.push_back(add({op::jmp}));
    }
    for (std::size_t j : jumps) p_.code[j].a = static_cast<std::uint32_t>(p_.code.size());
    merge_ok_ = SIZE_MAX;
    p_.alts[p_.code[at].a] = std::move(t);
    return {};
  }

  bool single_unit(const node& n, std::uint32_t& cls) {
    if (n.kind == node_kind::cls) { cls = n.index; return true; }
    if (n.kind == node_kind::literal) {
      char_class c;
      c.ranges.emplace_back(n.cp, n.cp);
      c.finish();
      cls = static_cast<std::uint32_t>(classes_.size() + extra_.size());
      extra_.push_back(std::move(c));
      return true;
    }
    return false;
  }

 public:
  std::vector<char_class> extra_;  // classes made for literal loops, appended after parse's

 private:
  status emit_repeat(const node& n) {
    const node& body = *n.kids[0];
    std::uint32_t cls = 0;
    merge_ok_ = SIZE_MAX;
    if (single_unit(body, cls)) {
      add({op::repeat, static_cast<std::uint8_t>(n.mode), cls, n.min, n.max});
      return {};
    }
    if (n.mode == repeat_mode::possessive) {
      node copy_free;  // (?>body{min,max}) without copying the AST: emit atomic around a greedy repeat
      const std::size_t at = add({op::atomic});
      p_.code[at].a = static_cast<std::uint32_t>(p_.code.size());
      SLM_TRY(emit_loop(body, n.min, n.max, false));
      add({op::match});
      p_.code[at].c = static_cast<std::uint32_t>(p_.code.size());
      (void)copy_free;
      return {};
    }
    return emit_loop(body, n.min, n.max, n.mode == repeat_mode::lazy);
  }

  status emit_loop(const node& body, std::uint32_t mn, std::uint32_t mx, bool lazy) {
    const bool nullable = first(body).nullable;
    const std::uint64_t copies = std::uint64_t{mn} + (mx == no_max ? 1 : mx - mn);
    if (copies * (p_.code.size() + 1) > 4000000 && copies > 1000)
      return make_error(errc::out_of_range, "regex: counted repeat makes the program too large");
    for (std::uint32_t k = 0; k < mn; ++k) {
      merge_ok_ = SIZE_MAX;
      SLM_TRY(emit(body));
      if (p_.code.size() > 200000) return make_error(errc::out_of_range, "regex: program larger than 200000 instructions");
    }
    merge_ok_ = SIZE_MAX;
    if (mx == no_max) {
      // L: split(body, exit); [save r]; body; [check r exit]; jmp L
      const std::size_t loop = add({op::split});
      std::size_t reg = 0;
      if (nullable) {
        reg = p_.registers++;
        add({op::save_pos, 0, static_cast<std::uint32_t>(reg)});
      }
      const std::uint32_t body_at = static_cast<std::uint32_t>(p_.code.size());
      SLM_TRY(emit(body));
      merge_ok_ = SIZE_MAX;
      std::size_t check = 0;
      if (nullable) check = add({op::check_progress, 0, static_cast<std::uint32_t>(reg)});
      add({op::jmp, 0, static_cast<std::uint32_t>(loop)});
      const std::uint32_t exit = static_cast<std::uint32_t>(p_.code.size());
      const std::uint32_t first_in = nullable ? static_cast<std::uint32_t>(loop + 1) : body_at;
      p_.code[loop].a = lazy ? exit : first_in;
      p_.code[loop].b = lazy ? first_in : exit;
      if (nullable) p_.code[check].b = exit;
      return {};
    }
    std::vector<std::size_t> splits;
    for (std::uint32_t k = mn; k < mx; ++k) {
      splits.push_back(add({op::split}));
      p_.code[splits.back()].a = static_cast<std::uint32_t>(p_.code.size());
      SLM_TRY(emit(body));
      merge_ok_ = SIZE_MAX;
      if (p_.code.size() > 200000) return make_error(errc::out_of_range, "regex: program larger than 200000 instructions");
    }
    const std::uint32_t exit = static_cast<std::uint32_t>(p_.code.size());
    for (std::size_t s : splits) {
      p_.code[s].b = exit;
      if (lazy) std::swap(p_.code[s].a, p_.code[s].b);
    }
    return {};
  }
};

// The unit at pos: code point and length (pos < size).
inline char32_t unit_at(std::string_view t, std::size_t pos, std::size_t& len) noexcept {
  const auto b = static_cast<unsigned char>(t[pos]);
  if (b < 0x80) { len = 1; return b; }
  return unicode::decode(t, pos, len);
}
// Start of the unit that ends at pos (pos > lowest), consistent with forward decoding from
// any boundary <= lowest: a well-formed sequence ending at pos, else the single byte before.
inline std::size_t back_step(std::string_view t, std::size_t pos, std::size_t lowest) noexcept {
  if (static_cast<unsigned char>(t[pos - 1]) < 0x80) return pos - 1;
  for (std::size_t k = 4; k >= 2; --k) {
    if (pos < lowest + k) continue;
    std::size_t len = 0;
    const char32_t cp = unicode::decode(t, pos - k, len);
    if (len == k && !unicode::is_invalid_byte(cp)) return pos - k;
  }
  return pos - 1;
}
// Do the bytes at q (<= size) start with lit? (Short literals: no call to memcmp.)
[[gnu::always_inline]] inline bool starts_with_at(std::string_view t, std::size_t q, const std::string& lit) noexcept {
  const std::size_t m = lit.size();
  if (t.size() - q < m) return false;
  const char* a = t.data() + q;
  for (std::size_t k = 0; k < m; ++k)
    if (a[k] != lit[k]) return false;
  return true;
}
// Is the unit at q (< size) in c; len = its length.
[[gnu::always_inline]] inline bool class_at(const char_class& c, std::string_view t, std::size_t q, std::size_t& len) noexcept {
  const auto b = static_cast<unsigned char>(t[q]);
  if (b < 0x80) {
    len = 1;
    return c.ascii[b >> 6] >> (b & 63) & 1u;
  }
  return c.contains(unicode::decode(t, q, len));
}

// Builds the fast program of a pattern's tree; false if the pattern has another shape.
class fast_builder {
 public:
  fast_builder(fast_program& f, const std::vector<char_class>& classes, compiler& cc) : f_(f), classes_(classes), cc_(cc) {}

  bool build(const node& root) {
    std::vector<const node*> branches;
    flatten_alt(root, branches);
    if (branches.size() > 64) return false;
    for (std::size_t k = 0; k < branches.size(); ++k) {
      std::vector<fast_item> items;
      if (!add_items(*branches[k], items) || items.size() > fast_program::max_items) return false;
      for (std::size_t i = 0; i < items.size(); ++i) {
        fast_item& it = items[i];
        if (it.kind == fast_kind::loop || it.kind == fast_kind::look) {
          it.ascii = f_.classes[it.cls].ascii;
          it.ascii_only = !f_.classes[it.cls].may_match_non_ascii();
        }
        if (it.kind == fast_kind::loop && i + 1 < items.size())
          it.next_needs_unit = (items[i + 1].kind == fast_kind::loop && items[i + 1].min > 0) ||
                               items[i + 1].kind == fast_kind::literal;
      }
      const first_info fi = cc_.first(*branches[k]);
      for (unsigned b = 0; b < 256; ++b)
        if (fi.nullable || has_byte(fi.bytes, b)) f_.possible[b] |= std::uint64_t{1} << k;
      if (fi.nullable) f_.possible[256] |= std::uint64_t{1} << k;
      using shape = fast_program::shape;
      shape sh = shape::other;
      if (items.size() == 1 && items[0].kind == fast_kind::loop && items[0].min <= 1) sh = shape::one_loop;
      // without a trailing optional alternation: the item count of the shape
      const std::size_t core = items.size() - (items.size() >= 3 && items.back().kind == fast_kind::alt && items.back().optional);
      const auto is_loop = [&](std::size_t j, std::uint32_t min) { return items[j].kind == fast_kind::loop && items[j].min == min; };
      const bool opt_first = core >= 2 && is_loop(0, 0) && items[0].max == 1 && items[0].mode == repeat_mode::greedy;
      if (opt_first && is_loop(1, 1) && (items.size() == 2 || (core == 3 && is_loop(2, 0)))) sh = shape::opt_loop;
      if (opt_first && core == 3 && is_loop(1, 0) && items[1].mode == repeat_mode::greedy && is_loop(2, 1))
        sh = shape::opt_star_plus;
      if (items.size() == 2 && items[0].kind == fast_kind::loop && items[0].min <= 1 && items[1].kind == fast_kind::look)
        sh = shape::loop_look;
      if (items.size() == 1 && items[0].kind == fast_kind::literal) sh = shape::literal;
      f_.shapes.push_back(sh);
      f_.branches.push_back(std::move(items));
    }
    return true;
  }

 private:
  fast_program& f_;
  const std::vector<char_class>& classes_;
  compiler& cc_;

  // A top-level alternation's branches, nested alternations spliced in (with nothing
  // after the alternation, (a|b)|c tries a, b, c in that order like a|b|c).
  void flatten_alt(const node& n, std::vector<const node*>& out, std::size_t depth = 1) {
    if (n.kind != node_kind::alt) return out.push_back(&n);
    f_.branch_cost = std::max(f_.branch_cost, 8 + 2 * depth);
    for (const auto& k : n.kids) flatten_alt(*k, out, depth + 1);
  }
  std::uint32_t add_class(const char_class& c) {
    f_.classes.push_back(c);
    return static_cast<std::uint32_t>(f_.classes.size() - 1);
  }
  static std::string utf8(char32_t cp) {
    std::string s;
    unicode::append_utf8(s, cp);
    return s;
  }
  // A fixed string: literals and single classes (concatenated); false otherwise or empty.
  bool fixed_string(const node& n, std::vector<fast_unit>& out) {
    switch (n.kind) {
      case node_kind::literal:
        if (!out.empty() && !out.back().bytes.empty()) out.back().bytes += utf8(n.cp);
        else out.push_back({utf8(n.cp), 0});
        return true;
      case node_kind::cls: out.push_back({std::string(), add_class(classes_[n.index])}); return true;
      case node_kind::concat:
        for (const auto& k : n.kids)
          if (!fixed_string(*k, out)) return false;
        return !out.empty();
      default: return false;
    }
  }
  bool add_items(const node& n, std::vector<fast_item>& items) {
    fast_item it;
    switch (n.kind) {
      case node_kind::empty: return true;
      case node_kind::concat:
        for (const auto& k : n.kids)
          if (!add_items(*k, items)) return false;
        return true;
      case node_kind::literal:
        if (!items.empty() && items.back().kind == fast_kind::literal) {
          items.back().bytes += utf8(n.cp);
          return true;
        }
        it.kind = fast_kind::literal;
        it.bytes = utf8(n.cp);
        break;
      case node_kind::cls:
        it.kind = fast_kind::loop;
        it.cls = add_class(classes_[n.index]);
        it.min = it.max = 1;
        break;
      case node_kind::look: {
        const node& body = *n.kids[0];
        if (body.kind != node_kind::cls) return false;
        it.kind = fast_kind::look;
        it.negative = n.negative;
        it.cls = add_class(classes_[body.index]);
        break;
      }
      case node_kind::repeat: {
        const node& body = *n.kids[0];
        if (body.kind == node_kind::cls || body.kind == node_kind::literal) {
          if (n.mode == repeat_mode::lazy) return false;
          it.kind = fast_kind::loop;
          it.mode = n.mode;
          it.min = n.min;
          it.max = n.max;
          if (body.kind == node_kind::cls) {
            it.cls = add_class(classes_[body.index]);
          } else {  // as the compiler's single_unit: a one-member class
            char_class c;
            c.ranges.emplace_back(body.cp, body.cp);
            c.finish();
            it.cls = add_class(c);
          }
          break;
        }
        // (fixed|fixed|...)? : greedy, tried before the empty string
        if (n.mode != repeat_mode::greedy || n.min != 0 || n.max != 1) return false;
        [[fallthrough]];
      }
      case node_kind::alt: {
        const node& body = n.kind == node_kind::repeat ? *n.kids[0] : n;
        it.kind = fast_kind::alt;
        it.optional = n.kind == node_kind::repeat;
        if (body.kind == node_kind::alt) {
          for (const auto& k : body.kids) {
            it.alts.emplace_back();
            if (!fixed_string(*k, it.alts.back())) return false;
          }
        } else {
          it.alts.emplace_back();
          if (!fixed_string(body, it.alts.back())) return false;
        }
        for (const auto& a : it.alts) {
          const fast_unit& u = a[0];
          if (!u.bytes.empty()) set_byte(it.alt_first, static_cast<unsigned char>(u.bytes[0]));
          else add_set(it.alt_first, first_bytes(f_.classes[u.cls]));
        }
        break;
      }
      default: return false;
    }
    items.push_back(std::move(it));
    return true;
  }
};

enum class fast_result : std::uint8_t { no_match, match, give_up };

// The first alternative of an alt item, from `first` on, that matches at pos; its end in e.
inline std::size_t fast_alt(const fast_program& fp, const fast_item& it, std::string_view t, std::size_t pos,
                            std::size_t first, std::size_t& e, std::size_t& work) noexcept {
  if (pos >= t.size() || !has_byte(it.alt_first, static_cast<unsigned char>(t[pos]))) return it.alts.size();
  for (std::size_t j = first; j < it.alts.size(); ++j) {
    std::size_t q = pos;
    bool ok = true;
    for (const fast_unit& u : it.alts[j]) {
      work += 2;
      if (!u.bytes.empty()) {
        if (!starts_with_at(t, q, u.bytes)) { ok = false; break; }
        q += u.bytes.size();
      } else {
        std::size_t len = 0;
        if (q >= t.size() || !class_at(fp.classes[u.cls], t, q, len)) { ok = false; break; }
        q += len;
      }
    }
    work += 4;
    if (ok) { e = q; return j; }
  }
  return it.alts.size();
}

// The end of a loop item's longest run from pos (at most max units).
[[gnu::always_inline]] inline std::size_t run_loop(const fast_program& fp, const fast_item& it, std::string_view t,
                                                   std::size_t pos) noexcept {
  const std::uint64_t lo = it.ascii[0], hi = it.ascii[1];
  const std::size_t n = t.size();
  std::size_t q = pos;
  if (it.max == no_max) {  // the common case: no count to keep
    while (q < n) {
      const auto b = static_cast<unsigned char>(t[q]);
      if (b < 0x80) {
        if (!((b < 64 ? lo : hi) >> (b & 63) & 1u)) break;
        ++q;
      } else {
        if (it.ascii_only) break;
        std::size_t len = 0;
        if (!fp.classes[it.cls].contains(unicode::decode(t, q, len))) break;
        q += len;
      }
    }
    return q;
  }
  for (std::size_t count = 0; count < it.max && q < n; ++count) {
    const auto b = static_cast<unsigned char>(t[q]);
    if (b < 0x80) {
      if (!((b < 64 ? lo : hi) >> (b & 63) & 1u)) break;
      ++q;
    } else {
      if (it.ascii_only) break;
      std::size_t len = 0;
      if (!fp.classes[it.cls].contains(unicode::decode(t, q, len))) break;
      q += len;
    }
  }
  return q;
}

// Can a loop with min >= 1 or a literal start at q (< size)?
[[gnu::always_inline]] inline bool can_start(const fast_program& fp, const fast_item& it, std::string_view t, std::size_t q) noexcept {
  const auto b = static_cast<unsigned char>(t[q]);
  if (it.kind == fast_kind::literal) return b == static_cast<unsigned char>(it.bytes[0]);
  if (b < 0x80) return it.ascii[b >> 6] >> (b & 63) & 1u;
  std::size_t len = 0;
  return !it.ascii_only && fp.classes[it.cls].contains(unicode::decode(t, q, len));
}

// One branch at start: the general engine's depth-first order over the items' choices.
// `work` grows by at least the general engine's steps for the same exploration.
[[gnu::always_inline]] inline fast_result fast_branch(const fast_program& fp, const std::vector<fast_item>& items, std::string_view t,
                               std::size_t start, std::size_t& end, std::size_t& work, std::size_t limit) noexcept {
  struct state {
    std::size_t cur, low;  // loop: current end, lowest end; alt: start (cur) and chosen alternative (low)
    bool more;             // can give something back
  };
  std::array<state, fast_program::max_items> st;
  const std::size_t k = items.size(), n = t.size();
  std::size_t i = 0, pos = start;
  for (;;) {
    if (i == k) { end = pos; return fast_result::match; }
    if (work > limit) return fast_result::give_up;
    const fast_item& it = items[i];
    bool ok = true;
    work += 8;
    switch (it.kind) {
      case fast_kind::literal:
        if (!starts_with_at(t, pos, it.bytes)) ok = false;
        else pos += it.bytes.size(), st[i].more = false;
        break;
      case fast_kind::loop: {
        std::size_t q = run_loop(fp, it, t, pos);
        work += (q - pos) / 8;  // >= the units counted / 8
        // low: the end of the first min units (the loop took at least min units iff it exists)
        std::size_t low = pos;
        std::uint32_t m = 0;
        for (; m < it.min && low < q; ++m) {
          std::size_t len = 0;
          unit_at(t, low, len);
          low += len;
        }
        if (m < it.min) { ok = false; break; }
        const bool more = it.mode == repeat_mode::greedy && q > low;
        if (it.next_needs_unit && (q >= n || !can_start(fp, items[i + 1], t, q))) {
          // The next item fails at q: give back units (as backtracking would) until it can start.
          bool found = false;
          while (more && q > low) {
            q = back_step(t, q, low);
            work += 8;
            if (can_start(fp, items[i + 1], t, q)) { found = true; break; }
          }
          if (!found) { ok = false; break; }
        }
        st[i].more = more && q > low;
        st[i].cur = q;
        st[i].low = low;
        pos = q;
        break;
      }
      case fast_kind::look: {
        const bool m = pos < n && can_start(fp, it, t, pos);
        if (m == it.negative) ok = false;
        else st[i].more = false;
        break;
      }
      case fast_kind::alt: {
        std::size_t e = pos;
        const std::size_t j = fast_alt(fp, it, t, pos, 0, e, work);
        st[i].cur = pos;
        if (j < it.alts.size()) {
          st[i].low = j;
          st[i].more = true;
          pos = e;
        } else if (it.optional) {
          st[i].low = j;
          st[i].more = false;
        } else {
          ok = false;
        }
        break;
      }
    }
    if (ok) { ++i; continue; }
    // back to the latest item with a choice left
    for (;;) {
      if (i == 0) return fast_result::no_match;
      --i;
      work += 8;
      state& s = st[i];
      if (!s.more) continue;
      const fast_item& bt = items[i];
      if (bt.kind == fast_kind::loop) {
        // Give back one unit; while the next item would fail at once there (it needs a
        // unit that is not there), give back another: the same outcome, without retrying.
        for (;;) {
          s.cur = back_step(t, s.cur, s.low);
          if (s.cur <= s.low || !bt.next_needs_unit || can_start(fp, items[i + 1], t, s.cur)) break;
          work += 8;
        }
        s.more = s.cur > s.low;
        pos = s.cur;
        ++i;
        break;
      }
      std::size_t e = s.cur;  // alt: the next alternative, then the empty string if optional
      const std::size_t j = fast_alt(fp, bt, t, s.cur, s.low + 1, e, work);
      if (j < bt.alts.size()) {
        s.low = j;
        pos = e;
        ++i;
        break;
      }
      s.more = false;
      if (bt.optional) {
        s.low = j;
        pos = s.cur;
        ++i;
        break;
      }
    }
  }
}

// The search loop over start positions; give_up when the work nears `budget`.
// `work` (zero on entry) ends as the work counted, the general engine's steps at most.
inline fast_result fast_search(const fast_program& fp, std::string_view t, std::size_t from, std::size_t budget,
                               std::size_t& begin, std::size_t& end, std::size_t& work) noexcept {
  const std::size_t n = t.size(), limit = budget / 2;
  for (std::size_t pos = from;;) {
    const bool at_end = pos >= n;
    const auto b = at_end ? 256u : static_cast<unsigned char>(t[pos]);
    std::uint64_t possible = fp.possible[b];
    if (possible) work += fp.branch_cost;
    while (possible) {
      const unsigned k = static_cast<unsigned>(std::countr_zero(possible));
      possible &= possible - 1;
      const std::vector<fast_item>& items = fp.branches[k];
      fast_result r;
      if (fp.shapes[k] == fast_program::shape::literal) {
        work += 16;
        r = starts_with_at(t, pos, items[0].bytes) ? (end = pos + items[0].bytes.size(), fast_result::match)
                                                   : fast_result::no_match;
      } else if (fp.shapes[k] == fast_program::shape::one_loop) {
        // A run of at least min (0 or 1) units is the match: nothing follows to back off for.
        const std::size_t q = run_loop(fp, items[0], t, pos);
        work += 16 + (q - pos) / 8;
        r = q > pos || items[0].min == 0 ? (end = q, fast_result::match) : fast_result::no_match;
      } else if (fp.shapes[k] == fast_program::shape::opt_loop) {
        // A?B+: A takes the unit at pos if it can and B can go on after it; else B from pos.
        const fast_item& a = items[0];
        const fast_item& bl = items[1];
        std::size_t len = 0;
        std::size_t s = pos;
        work += 40;
        if (!at_end && can_start(fp, a, t, pos)) {
          unit_at(t, pos, len);
          if (pos + len < n && can_start(fp, bl, t, pos + len)) s = pos + len;
        }
        if (s == pos && (at_end || !can_start(fp, bl, t, pos))) {
          r = fast_result::no_match;
        } else {
          end = run_loop(fp, bl, t, s);
          work += (end - s) / 8;
          if (items.size() >= 3) {
            const std::size_t c = end;
            end = run_loop(fp, items[2], t, c);
            work += 16 + (end - c) / 8;
          }
          if (items.size() == 4) {  // the optional alternation: its first string that matches, else none
            std::size_t e = end;
            if (fast_alt(fp, items[3], t, end, 0, e, work) < items[3].alts.size()) end = e;
          }
          r = fast_result::match;
        }
      } else if (fp.shapes[k] == fast_program::shape::opt_star_plus) {
        // A?B*C+: A takes the unit at pos if it can, then not; after each, B gives back units
        // from its longest run until C can start (C then takes at least one unit and wins).
        const fast_item& a = items[0];
        const fast_item& bl = items[1];
        const fast_item& c = items[2];
        std::size_t starts[2], count = 0, len = 0;
        if (!at_end && can_start(fp, a, t, pos)) unit_at(t, pos, len), starts[count++] = pos + len;
        starts[count++] = pos;
        work += 48;
        r = fast_result::no_match;
        for (std::size_t j = 0; j < count && r == fast_result::no_match; ++j) {
          const std::size_t s0 = starts[j];
          std::size_t q = run_loop(fp, bl, t, s0);
          work += 16 + (q - s0) / 8;
          for (;;) {
            if (q < n && can_start(fp, c, t, q)) {
              end = run_loop(fp, c, t, q);
              work += 16 + (end - q) / 8;
              if (items.size() == 4) {
                std::size_t e = end;
                if (fast_alt(fp, items[3], t, end, 0, e, work) < items[3].alts.size()) end = e;
              }
              r = fast_result::match;
              break;
            }
            if (q <= s0) break;
            q = back_step(t, q, s0);
            work += 16;
            if (work > limit) return fast_result::give_up;
          }
        }
      } else if (fp.shapes[k] == fast_program::shape::loop_look) {
        const fast_item& l = items[0];
        const fast_item& look = items[1];
        std::size_t q = run_loop(fp, l, t, pos);
        work += 16 + (q - pos) / 8;
        std::size_t low = pos, len = 0;
        if (l.min == 1 && q > pos) unit_at(t, pos, len), low = pos + len;
        r = fast_result::no_match;
        if (l.min == 0 || q > pos) {  // at least min units
          for (;;) {
            work += 16;
            if ((q < n && can_start(fp, look, t, q)) != look.negative) { end = q; r = fast_result::match; break; }
            if (l.mode != repeat_mode::greedy || q <= low || work > limit) break;
            q = back_step(t, q, low);
          }
        }
        if (r != fast_result::match && work > limit) return fast_result::give_up;
      } else {
        r = fast_branch(fp, items, t, pos, end, work, limit);
      }
      if (r == fast_result::match) { begin = pos; return r; }
      if (r == fast_result::give_up) return r;
      work += fp.branch_cost;
    }
    if (at_end) return fast_result::no_match;
    pos += b < 0x80 ? 1 : [&] { std::size_t len = 1; unicode::decode(t, pos, len); return len; }();
    if (work > limit) return fast_result::give_up;
  }
}

// ---- matcher ----
enum class frame_kind : std::uint8_t { resume, greedy, lazy, alt, restore };
struct frame {
  frame_kind kind;
  std::uint32_t pc;     // resume / continuation / alt instruction / register
  std::size_t pos;      // position to resume at / current loop end / old register value
  std::size_t aux;      // greedy: lowest end; lazy: count; alt: next branch
};

// A stack that lives on the C++ stack while small.
class frame_stack {
 public:
  bool empty() const { return n_ == 0; }
  void push(const frame& f) {
    if (n_ < inline_size) [[likely]] {
      small_[n_++] = f;
      return;
    }
    push_big(f);
  }
  frame& top() { return n_ <= inline_size ? small_[n_ - 1] : big_[n_ - 1 - inline_size]; }
  void pop() { --n_; }

 private:
  [[gnu::noinline]] void push_big(const frame& f) {
    if (big_.size() < n_ - inline_size + 1) big_.resize((n_ - inline_size + 1) * 2);
    big_[n_++ - inline_size] = f;
  }
  static constexpr std::size_t inline_size = 48;
  std::array<frame, inline_size> small_;
  std::vector<frame> big_;
  std::size_t n_ = 0;
};

}  // namespace regex_detail

#endif  // SLM_DEFINE_TEXT

class regex {
 public:
  static result<regex> compile(std::string_view pattern);

  // Leftmost match starting at or after `from`: [begin, end) in bytes.
  bool search(std::string_view text, std::size_t from, std::size_t& begin, std::size_t& end) const;

  // The same, drawing its steps from `steps`, a budget the caller shares between searches
  // (a tokenizer's encode() gives all of its searches one budget proportional to its input,
  // so a pattern quadratic over many searches is bounded too). On a false return, steps == 0
  // says the budget ran out (the search is undecided), else there is no match.
  bool search(std::string_view text, std::size_t from, std::size_t& begin, std::size_t& end, std::size_t& steps) const;

  const std::string& pattern() const noexcept { return pattern_; }

  // Heap bytes the pattern and the compiled program hold (slm/core/heap_estimate.hpp's
  // method); a program shared by copies is counted by each.
  std::uint64_t memory_bytes() const noexcept;

 private:
  std::string pattern_;
  std::shared_ptr<const regex_detail::program> prog_;  // immutable, shared by copies

  static char32_t unit(std::string_view t, std::size_t pos, std::size_t& len) noexcept;
  static std::size_t back_step(std::string_view t, std::size_t pos, std::size_t lowest) noexcept;
  static bool is_word_at(std::string_view t, std::size_t pos) noexcept;

  bool check(regex_detail::assertion a, std::string_view t, std::size_t pos) const noexcept;

  // Runs the program from pc at pos; on success end = the match end. Recurses only for
  // lookahead / atomic groups (bounded by the pattern's nesting).
  bool run(std::string_view t, std::uint32_t pc, std::size_t pos, std::size_t& end, std::size_t& budget,
           std::vector<std::size_t>& regs, int depth) const;
};

#if SLM_DEFINE_TEXT

SLM_INLINE result<regex> regex::compile(std::string_view pattern) {
  using namespace regex_detail;
  if (pattern.size() > 65536) return make_error(errc::out_of_range, "regex: pattern longer than 65536 bytes");
  parser ps(pattern);
  auto tree = ps.parse();
  if (!tree.ok()) return std::move(tree).take_error();
  regex r;
  r.pattern_ = std::string(pattern);
  auto p = std::make_shared<program>();
  compiler cc(*p, ps.classes);
  const first_info f = cc.first(**tree);
  p->first = f.bytes;
  p->nullable = f.nullable;
  if (auto s = cc.emit(**tree); !s.ok()) return s.with_context(cat("pattern '", pattern.substr(0, 200), "'"));
  p->code.push_back({op::match});
  if (auto fast = std::make_unique<fast_program>(); fast_builder(*fast, ps.classes, cc).build(**tree))
    p->fast = std::move(fast);
  p->classes = std::move(ps.classes);
  for (auto& c : cc.extra_) p->classes.push_back(std::move(c));
  r.prog_ = std::move(p);
  return r;
}

SLM_INLINE std::uint64_t regex::memory_bytes() const noexcept {
  using namespace regex_detail;
  using heap_estimate::block;
  using heap_estimate::of_buffer;
  std::uint64_t n = heap_estimate::of(pattern_);
  if (!prog_) return n;
  auto classes = [](const std::vector<char_class>& cs) {
    std::uint64_t c = of_buffer(cs);
    for (const char_class& k : cs) c += of_buffer(k.ranges);
    return c;
  };
  const program& p = *prog_;
  n += block(sizeof(program) + 2 * sizeof(long));  // make_shared: the control block's two counts
  n += of_buffer(p.code) + classes(p.classes) + of_buffer(p.alts) + heap_estimate::of(p.literals);
  for (const alt_table& a : p.alts) n += of_buffer(a.targets);
  if (const fast_program* f = p.fast.get()) {
    n += block(sizeof(fast_program)) + of_buffer(f->branches) + of_buffer(f->shapes) + classes(f->classes);
    for (const auto& branch : f->branches) {
      n += of_buffer(branch);
      for (const fast_item& item : branch) {
        n += heap_estimate::of(item.bytes) + of_buffer(item.alts);
        for (const auto& alt : item.alts) n += of_buffer(alt);
      }
    }
  }
  return n;
}

SLM_INLINE bool regex::search(std::string_view text, std::size_t from, std::size_t& begin, std::size_t& end) const {
  if (from > text.size()) return false;
  std::size_t budget = (std::size_t{1} << 27) + 4096 * (text.size() - from);
  return search(text, from, begin, end, budget);
}

SLM_INLINE bool regex::search(std::string_view text, std::size_t from, std::size_t& begin, std::size_t& end,
                              std::size_t& budget) const {
  if (!prog_ || from > text.size() || budget == 0) return false;
  const regex_detail::program& p = *prog_;
  if (p.fast) {
    std::size_t b = 0, e = 0, work = 0;
    const auto r = regex_detail::fast_search(*p.fast, text, from, budget, b, e, work);
    if (r != regex_detail::fast_result::give_up) {
      // The fast path's work bounds the general engine's steps: charge it. A match keeps at
      // least one step, so that steps == 0 only ever means "ran out".
      budget = r == regex_detail::fast_result::match ? std::max<std::size_t>(budget - std::min(work, budget), 1)
                                                      : budget - std::min(work, budget - 1);
      if (r == regex_detail::fast_result::match) { begin = b; end = e; return true; }
      return false;
    }
    // give_up (work > budget / 2): the general engine decides, with the whole budget.
  }
  std::vector<std::size_t> regs(p.registers, SIZE_MAX);
  for (std::size_t pos = from;;) {
    if (pos < text.size()) {
      if (p.nullable || regex_detail::has_byte(p.first, static_cast<unsigned char>(text[pos]))) {
        std::size_t e = 0;
        if (run(text, 0, pos, e, budget, regs, 0)) { begin = pos; end = e; return true; }
        if (budget == 0) return false;
      }
      std::size_t len = 1;
      if (static_cast<unsigned char>(text[pos]) >= 0x80) unicode::decode(text, pos, len);
      pos += len;
    } else {
      std::size_t e = 0;
      if (p.nullable && run(text, 0, pos, e, budget, regs, 0)) { begin = pos; end = e; return true; }
      return false;
    }
  }
}

SLM_INLINE char32_t regex::unit(std::string_view t, std::size_t pos, std::size_t& len) noexcept {
  return regex_detail::unit_at(t, pos, len);
}

SLM_INLINE std::size_t regex::back_step(std::string_view t, std::size_t pos, std::size_t lowest) noexcept {
  return regex_detail::back_step(t, pos, lowest);
}

SLM_INLINE bool regex::is_word_at(std::string_view t, std::size_t pos) noexcept {
  std::size_t len = 0;
  return pos < t.size() && unicode::is_word(unit(t, pos, len));
}

SLM_INLINE bool regex::check(regex_detail::assertion a, std::string_view t, std::size_t pos) const noexcept {
  using regex_detail::assertion;
  switch (a) {
    case assertion::bol: return pos == 0 || t[pos - 1] == '\n';
    case assertion::eol: return pos == t.size() || t[pos] == '\n';
    case assertion::bot: return pos == 0;
    case assertion::eot: return pos == t.size();
    case assertion::eot_nl: return pos == t.size() || (pos + 1 == t.size() && t[pos] == '\n');
    case assertion::word_b: case assertion::not_word_b: {
      const bool before = pos > 0 && is_word_at(t, back_step(t, pos, 0));
      const bool after = is_word_at(t, pos);
      return (before != after) == (a == assertion::word_b);
    }
  }
  return false;
}

SLM_INLINE bool regex::run(std::string_view t, std::uint32_t pc, std::size_t pos, std::size_t& end, std::size_t& budget,
         std::vector<std::size_t>& regs, int depth) const {
  using namespace regex_detail;
  const program& p = *prog_;
  const std::size_t n = t.size();
  frame_stack stack;
  for (;;) {
    bool fail = false;
    if (budget == 0) return false;
    --budget;
    const inst& in = p.code[pc];
    switch (in.code) {
      case op::match: end = pos; return true;
      case op::literal: {
        if (n - pos < in.b || std::memcmp(t.data() + pos, p.literals.data() + in.a, in.b) != 0) { fail = true; break; }
        pos += in.b;
        ++pc;
        break;
      }
      case op::cls: {
        if (pos >= n) { fail = true; break; }
        std::size_t len = 0;
        if (!p.classes[in.a].contains(unit(t, pos, len))) { fail = true; break; }
        pos += len;
        ++pc;
        break;
      }
      case op::repeat: {
        const char_class& c = p.classes[in.a];
        const std::uint32_t mn = in.b, mx = in.c;
        const auto mode = static_cast<repeat_mode>(in.d);
        std::size_t count = 0, q = pos;
        const std::uint32_t want = mode == repeat_mode::lazy ? mn : mx;
        while (count < want && q < n) {
          const auto b = static_cast<unsigned char>(t[q]);
          if (b < 0x80) {
            if (!(c.ascii[b >> 6] >> (b & 63) & 1u)) break;
            ++q;
          } else {
            std::size_t len = 0;
            if (!c.contains(unicode::decode(t, q, len))) break;
            q += len;
          }
          ++count;
        }
        if (budget > count / 8) budget -= count / 8; else budget = 0;
        if (count < mn) { fail = true; break; }
        if (mode == repeat_mode::greedy && count > mn) {
          // one resumable entry: gives back one unit per retry, down to min
          std::size_t low = pos;
          if (mn) {  // position after the first mn units
            for (std::uint32_t k = 0; k < mn; ++k) {
              std::size_t len = 0;
              unit(t, low, len);
              low += len;
            }
          }
          stack.push({frame_kind::greedy, pc + 1, q, low});
        } else if (mode == repeat_mode::lazy && (mx == no_max || count < mx)) {
          stack.push({frame_kind::lazy, pc, q, count});
        }
        pos = q;
        ++pc;
        break;
      }
      case op::alt: {
        const alt_table& a = p.alts[in.a];
        const std::uint64_t possible = a.possible[pos < n ? static_cast<unsigned char>(t[pos]) : 256];
        if (!possible) { fail = true; break; }
        const unsigned k = static_cast<unsigned>(std::countr_zero(possible));
        const std::uint64_t rest = possible & ~((std::uint64_t{2} << k) - 1);
        if (rest) stack.push({frame_kind::alt, pc, pos, static_cast<std::size_t>(std::countr_zero(rest))});
        pc = a.targets[k];
        break;
      }
      case op::jmp: pc = in.a; break;
      case op::split:
        stack.push({frame_kind::resume, in.b, pos, 0});
        pc = in.a;
        break;
      case op::save_pos:
        stack.push({frame_kind::restore, in.a, regs[in.a], 0});
        regs[in.a] = pos;
        ++pc;
        break;
      case op::check_progress:
        pc = regs[in.a] == pos ? in.b : pc + 1;
        break;
      case op::look: case op::atomic: {
        if (depth > 250) { budget = 0; return false; }
        std::size_t e = 0;
        const bool ok = run(t, in.a, pos, e, budget, regs, depth + 1);
        if (budget == 0) return false;
        if (in.code == op::look) {
          if (ok == (in.b != 0)) { fail = true; break; }
        } else {
          if (!ok) { fail = true; break; }
          pos = e;
        }
        pc = in.c;
        break;
      }
      case op::assert_:
        if (!check(static_cast<assertion>(in.a), t, pos)) { fail = true; break; }
        ++pc;
        break;
    }
    if (!fail) continue;
    // backtrack
    for (;;) {
      if (stack.empty()) return false;
      frame& f = stack.top();
      if (f.kind == frame_kind::resume) {
        pc = f.pc;
        pos = f.pos;
        stack.pop();
        break;
      }
      if (f.kind == frame_kind::restore) {
        regs[f.pc] = f.pos;
        stack.pop();
        continue;
      }
      if (f.kind == frame_kind::greedy) {
        // give back one unit
        f.pos = back_step(t, f.pos, f.aux);
        pc = f.pc;
        pos = f.pos;
        if (f.pos <= f.aux) stack.pop();
        break;
      }
      if (f.kind == frame_kind::lazy) {
        // take one more unit
        const inst& li = p.code[f.pc];
        const char_class& c = p.classes[li.a];
        if (f.pos >= n) { stack.pop(); continue; }
        std::size_t len = 0;
        if (!c.contains(unit(t, f.pos, len))) { stack.pop(); continue; }
        f.pos += len;
        ++f.aux;
        pc = f.pc + 1;
        pos = f.pos;
        if (li.c != no_max && f.aux >= li.c) stack.pop();
        break;
      }
      // alt: next possible branch
      const inst& ai = p.code[f.pc];
      const alt_table& a = p.alts[ai.a];
      const std::uint64_t possible = a.possible[f.pos < n ? static_cast<unsigned char>(t[f.pos]) : 256];
      const unsigned k = static_cast<unsigned>(f.aux);
      const std::uint64_t rest = possible & ~((std::uint64_t{2} << k) - 1);
      pc = a.targets[k];
      pos = f.pos;
      if (rest) f.aux = static_cast<std::size_t>(std::countr_zero(rest));
      else stack.pop();
      break;
    }
  }
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
