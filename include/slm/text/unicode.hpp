// slm/text/unicode.hpp - UTF-8 decoding, general categories, case folding and normalization.
//
// What the tokenizers need of Unicode, from tables generated out of the Unicode Character
// Database (slm/text/unicode_tables.hpp, tools/unicode/gen_unicode_tables.py; the version is
// tables::unicode_version).
//
// Invalid UTF-8 never stops anything: decode() turns each byte that does not start a
// well-formed sequence (stray continuation bytes, truncated or overlong sequences, encoded
// surrogates, values past U+10FFFF) into the pseudo code point invalid_byte(b) =
// 0x110000 + b, one unit per byte, so every byte of the input belongs to exactly one unit
// and append_utf8() gives the same bytes back. Such a unit is of category Co: a raw invalid
// byte acts like a private-use character (a letter-less, digit-less, non-space symbol), and
// normalization passes it through unchanged and never composes across it.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

// The tables are data for the definitions only: a compiled-mode host never parses them.
#if SLM_DEFINE_TEXT
#include "slm/text/unicode_tables.hpp"
#endif

namespace slm::unicode {

constexpr char32_t invalid_byte(unsigned char b) noexcept { return 0x110000u + b; }
constexpr bool is_invalid_byte(char32_t cp) noexcept { return cp >= 0x110000u && cp < 0x110100u; }

// Decodes the code point at s[i] (i < s.size()); len = its length in bytes (1..4).
char32_t decode(std::string_view s, std::size_t i, std::size_t& len) noexcept;

// Appends cp (< 0x110000) as UTF-8; invalid_byte(b) appends the raw byte b. Surrogates and
// other values are written as U+FFFD.
void append_utf8(std::string& out, char32_t cp);

enum class category : std::uint8_t { Lu, Ll, Lt, Lm, Lo, Mn, Mc, Me, Nd, Nl, No, Pc, Pd, Ps, Pe, Pi, Pf, Po, Sm, Sc, Sk, So, Zs, Zl, Zp, Cc, Cf, Cs, Co, Cn };

// The Unicode general category; invalid_byte(b) -> Co (see the top of this file), other
// values past U+10FFFF -> Cn.
category general_category(char32_t cp) noexcept;

// The White_Space property (what Oniguruma's \s matches in Unicode mode).
bool is_white_space(char32_t cp) noexcept;

// What Oniguruma's \w matches in Unicode mode (checked against it over every code point):
// categories L*, M*, Nd, Nl, Pc, the other Alphabetic code points, and U+00B2 U+00B3 U+00B9
// U+00BC..U+00BE.
bool is_word(char32_t cp) noexcept;

// Simple case folding (CaseFolding.txt C + S): the code point (?i) compares by.
char32_t simple_fold(char32_t cp) noexcept;

// Appends every code point whose simple folding equals simple_fold(cp), cp included.
void fold_equivalents(char32_t cp, std::vector<char32_t>& out);

std::uint8_t combining_class(char32_t cp) noexcept;

std::string nfc(std::string_view utf8);
std::string nfd(std::string_view utf8);
std::string nfkc(std::string_view utf8);
std::string nfkd(std::string_view utf8);

#if SLM_DEFINE_TEXT

SLM_INLINE char32_t decode(std::string_view s, std::size_t i, std::size_t& len) noexcept {
  const auto b0 = static_cast<unsigned char>(s[i]);
  len = 1;
  if (b0 < 0x80) return b0;
  const std::size_t left = s.size() - i;
  auto cont = [&](std::size_t k) -> unsigned {
    return k < left ? static_cast<unsigned char>(s[i + k]) : 0u;
  };
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    const unsigned b1 = cont(1);
    if ((b1 & 0xC0) != 0x80) return invalid_byte(b0);
    len = 2;
    return static_cast<char32_t>(((b0 & 0x1Fu) << 6) | (b1 & 0x3Fu));
  }
  if (b0 >= 0xE0 && b0 <= 0xEF) {
    const unsigned b1 = cont(1), b2 = cont(2);
    const unsigned lo = b0 == 0xE0 ? 0xA0 : 0x80, hi = b0 == 0xED ? 0x9F : 0xBF;  // no overlong, no surrogate
    if (b1 < lo || b1 > hi || (b2 & 0xC0) != 0x80) return invalid_byte(b0);
    len = 3;
    return static_cast<char32_t>(((b0 & 0x0Fu) << 12) | ((b1 & 0x3Fu) << 6) | (b2 & 0x3Fu));
  }
  if (b0 >= 0xF0 && b0 <= 0xF4) {
    const unsigned b1 = cont(1), b2 = cont(2), b3 = cont(3);
    const unsigned lo = b0 == 0xF0 ? 0x90 : 0x80, hi = b0 == 0xF4 ? 0x8F : 0xBF;  // no overlong, <= U+10FFFF
    if (b1 < lo || b1 > hi || (b2 & 0xC0) != 0x80 || (b3 & 0xC0) != 0x80) return invalid_byte(b0);
    len = 4;
    return static_cast<char32_t>(((b0 & 0x07u) << 18) | ((b1 & 0x3Fu) << 12) | ((b2 & 0x3Fu) << 6) | (b3 & 0x3Fu));
  }
  return invalid_byte(b0);
}
SLM_INLINE void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x110000) {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (is_invalid_byte(cp)) {
    out.push_back(static_cast<char>(cp - 0x110000u));
  } else {
    append_utf8(out, 0xFFFD);
  }
}

SLM_INLINE category general_category(char32_t cp) noexcept {
  if (cp < tables::gc_limit) {
    const std::uint32_t block = tables::gc_stage1[cp / tables::gc_block];
    return static_cast<category>(tables::gc_stage2[block * tables::gc_block + cp % tables::gc_block] - 'a');
  }
  if (cp == 0xE0001 || (cp >= 0xE0020 && cp <= 0xE007F)) return category::Cf;
  if (cp >= 0xE0100 && cp <= 0xE01EF) return category::Mn;
  if ((cp >= 0xF0000 && cp <= 0xFFFFD) || (cp >= 0x100000 && cp <= 0x10FFFD)) return category::Co;
  if (is_invalid_byte(cp)) return category::Co;
  return category::Cn;
}

namespace detail {
template <class R>
bool in_ranges(const R& ranges, char32_t cp) noexcept {
  auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                             [](char32_t c, const tables::range& r) { return c < r.first; });
  return it != std::begin(ranges) && cp <= (it - 1)->last;
}
}  // namespace detail

SLM_INLINE bool is_white_space(char32_t cp) noexcept {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return detail::in_ranges(tables::white_space, cp);
}
SLM_INLINE bool is_word(char32_t cp) noexcept {
  if (cp < 0x80) return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') || cp == '_';
  const category c = general_category(cp);
  if (c <= category::Me || c == category::Nd || c == category::Nl || c == category::Pc) return true;
  return detail::in_ranges(tables::word_extra, cp);
}
SLM_INLINE char32_t simple_fold(char32_t cp) noexcept {
  if (cp < 0x80) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  auto it = std::lower_bound(std::begin(tables::simple_fold), std::end(tables::simple_fold), cp,
                             [](const tables::fold_pair& p, char32_t c) { return p.from < c; });
  return (it != std::end(tables::simple_fold) && it->from == cp) ? it->to : cp;
}
SLM_INLINE void fold_equivalents(char32_t cp, std::vector<char32_t>& out) {
  const char32_t f = simple_fold(cp);
  out.push_back(f);
  for (const auto& p : tables::simple_fold)
    if (p.to == f) out.push_back(p.from);
}
SLM_INLINE std::uint8_t combining_class(char32_t cp) noexcept {
  if (cp < 0x300) return 0;
  auto it = std::upper_bound(std::begin(tables::combining_class), std::end(tables::combining_class), cp,
                             [](char32_t c, const tables::ccc_range& r) { return c < r.first; });
  return (it != std::begin(tables::combining_class) && cp <= (it - 1)->last) ? (it - 1)->ccc : 0;
}

namespace detail {

inline constexpr char32_t hangul_s = 0xAC00, hangul_l = 0x1100, hangul_v = 0x1161, hangul_t = 0x11A7;
inline constexpr char32_t hangul_lcount = 19, hangul_vcount = 21, hangul_tcount = 28;
inline constexpr char32_t hangul_ncount = hangul_vcount * hangul_tcount, hangul_scount = hangul_lcount * hangul_ncount;

template <std::size_t N>
const tables::decomposition* find_decomposition(const tables::decomposition (&t)[N], char32_t cp) noexcept {
  auto it = std::lower_bound(std::begin(t), std::end(t), cp,
                             [](const tables::decomposition& d, char32_t c) { return d.cp < c; });
  return (it != std::end(t) && it->cp == cp) ? it : nullptr;
}

// Appends the full canonical (compat: compatibility) decomposition of cp.
inline void decompose(char32_t cp, bool compat, std::vector<char32_t>& out) {
  if (cp >= hangul_s && cp < hangul_s + hangul_scount) {
    const char32_t s = cp - hangul_s;
    out.push_back(hangul_l + s / hangul_ncount);
    out.push_back(hangul_v + (s % hangul_ncount) / hangul_tcount);
    if (s % hangul_tcount) out.push_back(hangul_t + s % hangul_tcount);
    return;
  }
  if (cp >= 0xA0 && cp < 0x110000) {
    if (compat) {
      if (const auto* d = find_decomposition(tables::compat, cp)) {
        out.insert(out.end(), tables::compat_pool + d->offset, tables::compat_pool + d->offset + d->length);
        return;
      }
    }
    if (cp >= 0xC0) {
      if (const auto* d = find_decomposition(tables::canonical, cp)) {
        out.insert(out.end(), tables::canonical_pool + d->offset, tables::canonical_pool + d->offset + d->length);
        return;
      }
    }
  }
  out.push_back(cp);
}

// The primary composite of (a, b), or 0.
inline char32_t compose_pair(char32_t a, char32_t b) noexcept {
  if (a >= hangul_l && a < hangul_l + hangul_lcount && b >= hangul_v && b < hangul_v + hangul_vcount)
    return hangul_s + ((a - hangul_l) * hangul_vcount + (b - hangul_v)) * hangul_tcount;
  if (a >= hangul_s && a < hangul_s + hangul_scount && (a - hangul_s) % hangul_tcount == 0 && b > hangul_t &&
      b < hangul_t + hangul_tcount)
    return a + (b - hangul_t);
  auto it = std::lower_bound(std::begin(tables::compositions), std::end(tables::compositions), std::pair{a, b},
                             [](const tables::composition& c, std::pair<char32_t, char32_t> k) {
                               return c.first != k.first ? c.first < k.first : c.second < k.second;
                             });
  return (it != std::end(tables::compositions) && it->first == a && it->second == b) ? it->composite : 0;
}

// Can cp be the second half of a composition with ccc 0 (Hangul V/T, a few vowel signs)?
// Such a starter may still join what came before, so a segment does not end before it.
inline bool may_compose_with_previous(char32_t cp) noexcept {
  if (cp < 0x300) return false;
  if (cp >= hangul_v && cp < hangul_v + hangul_vcount) return true;
  if (cp > hangul_t && cp < hangul_t + hangul_tcount) return true;
  return std::binary_search(std::begin(tables::composing_starters), std::end(tables::composing_starters), cp);
}

// Reorders (canonical ordering) and, when `compose`, composes buf, then appends it to out.
inline void flush_segment(std::vector<char32_t>& buf, bool compose, std::string& out) {
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < buf.size();) {
    if (combining_class(buf[i]) == 0) { ++i; continue; }
    std::size_t j = i;
    while (j < buf.size() && combining_class(buf[j]) != 0) ++j;
    if (j - i > 1)
      std::stable_sort(buf.begin() + static_cast<std::ptrdiff_t>(i), buf.begin() + static_cast<std::ptrdiff_t>(j),
                       [](char32_t a, char32_t b) { return combining_class(a) < combining_class(b); });
    i = j;
  }
  if (compose && buf.size() > 1) {
    std::size_t starter = combining_class(buf[0]) == 0 ? 0 : SIZE_MAX;
    std::size_t kept = 1;
    int last_cc = -1;  // class of the last kept character after the starter; -1: none yet
    for (std::size_t i = 1; i < buf.size(); ++i) {
      const char32_t c = buf[i];
      const int cc = combining_class(c);
      if (starter != SIZE_MAX && (last_cc == -1 || last_cc < cc)) {
        if (const char32_t comp = compose_pair(buf[starter], c)) {
          buf[starter] = comp;
          continue;
        }
      }
      if (cc == 0) {
        starter = kept;
        last_cc = -1;
      } else {
        last_cc = cc;
      }
      buf[kept++] = c;
    }
    buf.resize(kept);
  }
  for (char32_t c : buf) append_utf8(out, c);
  buf.clear();
}

// NFD (compat=false, compose=false), NFC, NFKD, NFKC. Invalid bytes pass through and end
// segments on both sides.
inline std::string normalize(std::string_view s, bool compat, bool compose) {
  std::string out;
  out.reserve(s.size());
  std::vector<char32_t> buf, dec;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    // ASCII followed by ASCII (or the end) is final: nothing composes with it. A run of it
    // is copied at once, but for its last byte when a non-ASCII character follows (a
    // combining mark may compose with it).
    if (b < 0x80) {
      std::size_t j = i + 1;
      while (j < s.size() && static_cast<unsigned char>(s[j]) < 0x80) ++j;
      const std::size_t end = j < s.size() ? j - 1 : j;
      if (end > i) {
        if (!buf.empty()) flush_segment(buf, compose, out);
        out.append(s.data() + i, end - i);
        i = end;
        continue;
      }
    }
    std::size_t len = 0;
    const char32_t cp = decode(s, i, len);
    i += len;
    if (is_invalid_byte(cp)) {
      if (!buf.empty()) flush_segment(buf, compose, out);
      out.push_back(static_cast<char>(b));
      continue;
    }
    dec.clear();
    decompose(cp, compat, dec);
    for (char32_t c : dec) {
      if (!buf.empty() && combining_class(c) == 0 && !(compose && may_compose_with_previous(c)))
        flush_segment(buf, compose, out);
      buf.push_back(c);
    }
  }
  if (!buf.empty()) flush_segment(buf, compose, out);
  return out;
}

}  // namespace detail

SLM_INLINE std::string nfc(std::string_view utf8) { return detail::normalize(utf8, false, true); }
SLM_INLINE std::string nfd(std::string_view utf8) { return detail::normalize(utf8, false, false); }
SLM_INLINE std::string nfkc(std::string_view utf8) { return detail::normalize(utf8, true, true); }
SLM_INLINE std::string nfkd(std::string_view utf8) { return detail::normalize(utf8, true, false); }

#endif  // SLM_DEFINE_TEXT

}  // namespace slm::unicode
