// slm/text/text_ops.hpp - the string operations HF's tokenizer pipeline is made of.
//
// What text/tokenizer.hpp composes into normalizers, pre-tokenizers and decoders, each as HF's
// `tokenizers` defines it:
//   * the byte-level alphabet (GPT-2): every byte as a printable character and back;
//   * pattern matches over a whole string, gaps included, as HF's Pattern::find_matches
//     (a regex with onig's find_iter rule for empty matches, a literal, a character
//     predicate), and the five split behaviours (Isolated, Removed, MergedWithPrevious,
//     MergedWithNext, Contiguous) applied to them;
//   * literal_set: leftmost-longest matching of a set of strings (added tokens);
//   * whitespace-aware strip, replace-all (literal or regex), lowercase.
// Plain functions on string views; nothing here allocates more than its result.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/core/heap_estimate.hpp"
#include "slm/text/regex.hpp"
#include "slm/text/unicode.hpp"

namespace slm::text {

enum class split_behavior : std::uint8_t { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// ---- Byte-level alphabet (GPT-2): printable bytes stand for themselves, the others map
// to U+0100 onwards, in byte order.
std::array<char32_t, 256> byte_to_char();
// The bytes of a byte-level token's text; nullopt when a character is outside the alphabet.
std::optional<std::string> bytes_of(std::string_view s);


// Matches of `pattern` in s as HF's Pattern::find_matches: (begin, end, is_match) over
// the whole of s, gaps included, in order (onig's find_iter: an empty match right after
// the previous match is skipped by one character).
// With `steps`, the searches draw on that shared budget (regex::search); when it runs out
// (*steps == 0) the matches stop there and the rest of s is not reported.
template <class Fn>
inline void regex_matches(const regex& re, std::string_view s, Fn&& fn, std::size_t* steps = nullptr) {
  std::size_t prev = 0, last_end = 0, last_match_end = std::string_view::npos;
  while (last_end <= s.size()) {
    std::size_t b = 0, e = 0;
    if (steps ? !re.search(s, last_end, b, e, *steps) : !re.search(s, last_end, b, e)) {
      if (steps && *steps == 0) return;
      break;
    }
    if (b == e && e == last_match_end) {
      if (last_end >= s.size()) break;
      std::size_t len = 1;
      unicode::decode(s, last_end, len);
      last_end += len;
      continue;
    }
    last_end = e, last_match_end = e;
    if (prev != b) fn(prev, b, false);
    fn(b, e, true);
    prev = e;
    if (b == e && e >= s.size()) break;
  }
  if (prev != s.size()) fn(prev, s.size(), false);
}
template <class Fn>
inline void literal_matches(std::string_view lit, std::string_view s, Fn&& fn) {
  std::size_t prev = 0;
  for (std::size_t at; (at = s.find(lit, prev)) != std::string_view::npos; prev = at + lit.size()) {
    if (prev != at) fn(prev, at, false);
    fn(at, at + lit.size(), true);
  }
  if (prev != s.size()) fn(prev, s.size(), false);
}
template <class Pred, class Fn>
inline void char_matches(std::string_view s, Pred&& pred, Fn&& fn) {
  std::size_t prev = 0;
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const char32_t c = unicode::decode(s, i, len);
    if (pred(c)) {
      if (prev < i) fn(prev, i, false);
      fn(i, i + len, true);
      prev = i + len;
    }
    i += len;
  }
  if (prev < s.size()) fn(prev, s.size(), false);
}

// Applies a split behaviour to the (begin, end, is_match) stream and calls out(piece)
// for every non-empty resulting piece.
template <class Source, class Out>
inline void split_pieces(std::string_view s, split_behavior behavior, bool invert, Source&& source, Out&& out) {
  if (behavior == split_behavior::isolated) {  // the common cases, without a buffer
    source([&](std::size_t b, std::size_t e, bool) {
      if (e > b) out(s.substr(b, e - b));
    });
    return;
  }
  if (behavior == split_behavior::removed) {
    source([&](std::size_t b, std::size_t e, bool m) {
      if (m == invert && e > b) out(s.substr(b, e - b));
    });
    return;
  }
  struct span3 {
    std::size_t b, e;
    bool m;
  };
  std::vector<span3> v;
  source([&](std::size_t b, std::size_t e, bool m) { v.push_back({b, e, m != invert}); });
  std::vector<std::pair<std::size_t, std::size_t>> res;
  bool previous = false;
  switch (behavior) {
    case split_behavior::isolated: break;
    case split_behavior::removed:
      for (const span3& x : v)
        if (!x.m) res.emplace_back(x.b, x.e);
      break;
    case split_behavior::merged_with_previous:
      for (const span3& x : v) {
        if (x.m && !previous && !res.empty()) res.back().second = x.e;
        else res.emplace_back(x.b, x.e);
        previous = x.m;
      }
      break;
    case split_behavior::merged_with_next:
      for (std::size_t k = v.size(); k-- > 0;) {
        const span3& x = v[k];
        if (x.m && !previous && !res.empty()) res.back().first = x.b;
        else res.emplace_back(x.b, x.e);
        previous = x.m;
      }
      std::reverse(res.begin(), res.end());
      break;
    case split_behavior::contiguous:
      for (std::size_t k = 0; k < v.size(); ++k) {
        const span3& x = v[k];
        if (k > 0 && x.m == previous && !res.empty()) res.back().second = x.e;
        else res.emplace_back(x.b, x.e);
        previous = x.m;
      }
      break;
  }
  for (const auto& [b, e] : res)
    if (e > b) out(s.substr(b, e - b));
}


// ---- Added tokens: leftmost-longest matching of a set of strings ----
// A byte trie: add() is O(length) (no re-sorting, so loading n tokens is linear in their
// bytes), and next() walks the trie from each candidate position, so its cost per position
// is at most the longest token's length, whatever the number of tokens sharing a prefix
// (Gemma 3's ~6300 `<unusedN>` all start with '<'). Semantics: the leftmost position with a
// match, and there the longest entry; a text added twice keeps its first index.
struct literal_set {
  struct entry {
    std::string text;
    std::size_t index;  // into added_
  };
  void add(std::string text, std::size_t index);
  bool empty() const noexcept { return entries_.empty(); }
  std::size_t size() const noexcept { return entries_.size(); }
  // The leftmost-longest match at or after `from`: (begin, entry) or begin = npos.
  // With `steps`, adds the number of trie edges followed (a work count for tests: at most
  // the longest entry's length per position scanned).
  std::pair<std::size_t, const entry*> next(std::string_view s, std::size_t from, std::size_t* steps = nullptr) const;
  // Heap bytes the trie holds (slm/core/heap_estimate.hpp's method).
  std::uint64_t memory_bytes() const noexcept {
    std::uint64_t n = heap_estimate::of_buffer(entries_) + heap_estimate::of_buffer(nodes_);
    for (const entry& e : entries_) n += heap_estimate::of(e.text);
    for (const node& x : nodes_) n += heap_estimate::of_buffer(x.children);
    return n;
  }

 private:
  static constexpr std::uint32_t none = 0xFFFFFFFFu;
  struct node {
    std::uint32_t entry = none;                                   // into entries_, where a text ends here
    std::vector<std::pair<unsigned char, std::uint32_t>> children;  // sorted by byte
  };
  std::uint32_t child(std::uint32_t n, unsigned char b) const noexcept;
  std::vector<entry> entries_;
  std::vector<node> nodes_;                 // nodes_[0] is unused: 0 means "no node" in root_
  std::array<std::uint32_t, 256> root_{};  // first byte -> node (0: none)
};

bool is_word_char(char32_t c);


// Lowercase by simple case folding: exact for ASCII and for the letters whose lowercase
// is one code point (HF uses Rust's full to_lowercase; they differ on a handful of
// letters such as U+0130).
std::string lowercase(std::string_view s);
std::string strip_white(std::string_view s, bool left, bool right);
std::string replace_all(std::string_view s, const std::string& literal, const regex* re, const std::string& with);
// replace_all into `out` within limits: false when the result would pass max_out bytes (out
// then holds at most max_out + with.size() bytes: nothing larger is ever allocated), or
// when a regex ran out of the shared budget `*steps` (then *steps == 0).
bool replace_all_within(std::string& out, std::string_view s, const std::string& literal, const regex* re,
                        const std::string& with, std::size_t max_out, std::size_t* steps);

#if SLM_DEFINE_TEXT

SLM_INLINE std::uint32_t literal_set::child(std::uint32_t n, unsigned char b) const noexcept {
  const auto& c = nodes_[n].children;
  const auto it = std::lower_bound(c.begin(), c.end(), b, [](const auto& e, unsigned char x) { return e.first < x; });
  return it != c.end() && it->first == b ? it->second : none;
}

SLM_INLINE void literal_set::add(std::string text, std::size_t index) {
  if (text.empty()) return;
  if (nodes_.empty()) nodes_.emplace_back();  // the "no node" slot
  const auto first = static_cast<unsigned char>(text[0]);
  if (root_[first] == 0) {
    root_[first] = static_cast<std::uint32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  std::uint32_t n = root_[first];
  for (std::size_t i = 1; i < text.size(); ++i) {
    const auto b = static_cast<unsigned char>(text[i]);
    auto& c = nodes_[n].children;
    auto it = std::lower_bound(c.begin(), c.end(), b, [](const auto& e, unsigned char x) { return e.first < x; });
    if (it != c.end() && it->first == b) {
      n = it->second;
      continue;
    }
    const auto fresh = static_cast<std::uint32_t>(nodes_.size());
    c.insert(it, {b, fresh});  // (c is not used after nodes_ grows)
    nodes_.emplace_back();
    n = fresh;
  }
  if (nodes_[n].entry != none) return;  // the first of duplicates wins
  nodes_[n].entry = static_cast<std::uint32_t>(entries_.size());
  entries_.push_back({std::move(text), index});
}

SLM_INLINE std::pair<std::size_t, const literal_set::entry*> literal_set::next(std::string_view s, std::size_t from,
                                                                             std::size_t* steps) const {
  if (entries_.empty()) return {std::string_view::npos, nullptr};
  std::size_t walked = 0;
  for (std::size_t i = from; i < s.size(); ++i) {
    std::uint32_t n = root_[static_cast<unsigned char>(s[i])];
    if (n == 0) continue;
    std::uint32_t best = nodes_[n].entry;
    for (std::size_t j = i + 1; j < s.size(); ++j) {
      ++walked;
      n = child(n, static_cast<unsigned char>(s[j]));
      if (n == none) break;
      if (nodes_[n].entry != none) best = nodes_[n].entry;
    }
    if (best != none) {
      if (steps) *steps += walked;
      return {i, &entries_[best]};
    }
  }
  if (steps) *steps += walked;
  return {std::string_view::npos, nullptr};
}


SLM_INLINE std::array<char32_t, 256> byte_to_char() {
  std::array<char32_t, 256> m{};
  char32_t next = 256;
  for (unsigned b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    m[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return m;
}

SLM_INLINE std::optional<std::string> bytes_of(std::string_view s) {
  static constexpr auto inverse = [] {
    std::array<std::int16_t, 324> inv{};
    for (auto& v : inv) v = -1;
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      inv[printable ? b : next++] = static_cast<std::int16_t>(b);
    }
    return inv;
  }();
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const char32_t c = unicode::decode(s, i, len);
    if (c >= inverse.size() || inverse[c] < 0) return std::nullopt;
    out.push_back(static_cast<char>(inverse[c]));
    i += len;
  }
  return out;
}

SLM_INLINE bool is_word_char(char32_t c) {
  using unicode::category;
  const category k = unicode::general_category(c);
  return c == U'_' || k <= category::Lo || k == category::Nd || k == category::Nl || k == category::No;
}

SLM_INLINE std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const char32_t c = unicode::decode(s, i, len);
    if (c < 0x80) out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    else unicode::append_utf8(out, unicode::simple_fold(c));
    i += len;
  }
  return out;
}

SLM_INLINE std::string strip_white(std::string_view s, bool left, bool right) {
  std::size_t b = 0, e = s.size();
  while (left && b < e) {
    std::size_t len = 1;
    if (!unicode::is_white_space(unicode::decode(s, b, len))) break;
    b += len;
  }
  while (right && e > b) {
    std::size_t j = e - 1, len = 1;
    while (j > b && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
    if (!unicode::is_white_space(unicode::decode(s, j, len))) break;
    e = j;
  }
  return std::string(s.substr(b, e - b));
}

SLM_INLINE std::string replace_all(std::string_view s, const std::string& literal, const regex* re, const std::string& with) {
  std::string out;
  replace_all_within(out, s, literal, re, with, SIZE_MAX, nullptr);
  return out;
}

SLM_INLINE bool replace_all_within(std::string& out, std::string_view s, const std::string& literal, const regex* re,
                                   const std::string& with, std::size_t max_out, std::size_t* steps) {
  out.clear();
  std::size_t pos = 0;
  auto fits = [&] { return out.size() <= max_out; };
  if (re) {
    std::size_t from = 0, b = 0, e = 0;
    while (from <= s.size()) {
      if (steps ? !re->search(s, from, b, e, *steps) : !re->search(s, from, b, e)) {
        if (steps && *steps == 0) return false;
        break;
      }
      out.append(s.substr(pos, b - pos));
      out += with;
      if (!fits()) return false;
      pos = e;
      if (e == b) {  // an empty match: copy one code point and go on
        if (b >= s.size()) break;
        std::size_t len = 1;
        unicode::decode(s, b, len);
        out.append(s.substr(b, len));
        pos = b + len;
        from = pos;
      } else {
        from = e;
      }
    }
  } else if (!literal.empty()) {  // (an empty literal would match forever: nothing to replace)
    for (std::size_t at; (at = s.find(literal, pos)) != std::string_view::npos; pos = at + literal.size()) {
      out.append(s.substr(pos, at - pos));
      out += with;
      if (!fits()) return false;
    }
  }
  out.append(s.substr(std::min(pos, s.size())));
  return fits();
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm::text
