// slm/ensemble/vocab_align.hpp - a vocabulary alignment between two members' tokenizers.
//
// Members with different tokenizers meet through bytes: a byte-level tokenizer's token is
// a fixed byte string (tokenizer::token_bytes), so two vocabularies share every token whose
// byte string both hold. From that:
//   * the exact map: a one-to-one pairing of the byte strings both vocabularies hold
//     (special tokens are paired by content, then by role - BOS with BOS - never by bytes:
//     "<BOS>" typed in a file is text, not a control token);
//   * project(): a next-token distribution of A moved onto B's vocabulary, for mixing;
//   * handover(): a token sequence of A re-tokenised for B through its bytes;
//   * common_boundaries(): the byte offsets where both tokenisations of one text cut.
//
//   auto ab = slm::ensemble::vocab_alignment::build(tok_a, tok_b);   // result<>
//   ab->project(p_a, p_b);                     // p_b [B vocab] sums to 1
//   auto ids_b = ab->handover(ids_a);          // decode_B(ids_b) == decode_A(ids_a)
//
// The projection rule. An A token whose bytes some B token has gives that B token its
// probability. An A token with no identical B token gives all of its mass to the B token
// whose bytes are the LONGEST PREFIX of its bytes: the token B would most likely start
// that text with (usually, not always, the first token of B's own encoding of those bytes;
// the prefix rule is context-free and so fixed at build time). A byte-level vocabulary
// holds all 256 single bytes, so such a prefix exists for every non-empty token; build()
// fails, naming the token, if one does not. A special token of A goes to its paired B
// special. Mass on A tokens that have no target at all (unpaired specials, gaps in the id
// range) is dropped and the rest renormalised. Every kept unit of mass lands on exactly
// one B token, so the projection sums to 1 (to float rounding; the sums are in double).
// It is a many-to-one map: a B token may collect the mass of several A tokens.
//
// Handover (text from A to B). ids -> A's bytes -> B's encode() with no post-processor
// tokens (add_special_tokens = false: a BOS already in ids is not added twice) and specials
// not parsed (parse_special = false: text that looks like "<BOS>" stays text); A's special
// tokens in ids are mapped to their paired B specials, never re-encoded. Exactness:
// decode_B(handover(ids)) == decode_A(ids) byte for byte when both tokenizers are
// lossless() and every special in ids is paired by content (a role-paired special decodes
// to B's own spelling); exact() says whether the tokenizers qualify.
//
// Streaming. Token boundaries of the two tokenisations need not agree: B's encoding of a
// prefix of a text can end differently from its encoding of the whole (the last B token
// may grow as more bytes arrive). Handing over a growing prefix must therefore keep B's
// tokens only up to the last byte offset where both tokenisations cut (common_boundaries)
// and re-tokenise from there when more text arrives. The hidden-space map
// (hidden_map.hpp) pairs hidden states at those same offsets.
//
// Tokenizers whose tokens have no context-free bytes (decoders other than ByteLevel alone:
// sentencepiece-style '▁' Metaspace with <0xNN> byte fallback, whose first token loses its
// space) are refused by build() and common_boundaries() with errc::unsupported; handover()
// itself only needs decode/encode, but is exact only under lossless tokenizers.
//
// An alignment holds pointers to its two tokenizers: they must outlive it. It is immutable
// after build() and may be shared by threads.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::ensemble {

// What the alignment of A onto B covers, in A tokens unless said otherwise.
struct vocab_coverage {
  std::size_t a_vocab = 0, b_vocab = 0;  // tokenizer vocab_size()s
  std::size_t shared_strings = 0;        // distinct non-special byte strings both hold (the exact map's size)
  std::size_t exact = 0;                 // non-special A tokens with an identical B token
  std::size_t specials_by_content = 0;   // A specials paired with the B special of the same content
  std::size_t specials_by_role = 0;      // ... else with the B special of the same role (bos, eos, pad, unk, fim_*)
  std::size_t prefix = 0;                // A tokens projected onto their longest-prefix B token
  std::size_t dropped = 0;               // A ids with no target: unpaired specials, gaps
};

namespace detail {
// The token's bytes as text, for error messages (control bytes escaped).
std::string printable(std::string_view s);
status need_token_bytes(const tokenizer& t, const char* which);
}  // namespace detail

class vocab_alignment {
 public:
  static result<vocab_alignment> build(const tokenizer& a, const tokenizer& b);

  const tokenizer& a() const noexcept { return *a_; }
  const tokenizer& b() const noexcept { return *b_; }
  const vocab_coverage& coverage() const noexcept { return cov_; }
  // The one-to-one exact map: (A id, B id) per shared byte string (lowest id on each side)
  // and per special pair.
  std::span<const std::pair<std::int32_t, std::int32_t>> pairs() const noexcept { return pairs_; }
  // The B token with a's bytes (or a's paired special); nullopt if none.
  std::optional<std::int32_t> exact(std::int32_t a_id) const noexcept {
    if (a_id < 0 || static_cast<std::size_t>(a_id) >= exact_.size() || exact_[static_cast<std::size_t>(a_id)] < 0)
      return std::nullopt;
    return exact_[static_cast<std::size_t>(a_id)];
  }
  // The A token of the one-to-one pair that holds b; nullopt if none.
  std::optional<std::int32_t> exact_inverse(std::int32_t b_id) const noexcept {
    if (b_id < 0 || static_cast<std::size_t>(b_id) >= b_to_a_.size() || b_to_a_[static_cast<std::size_t>(b_id)] < 0)
      return std::nullopt;
    return b_to_a_[static_cast<std::size_t>(b_id)];
  }
  // Where project() sends a's mass: the exact partner, else the longest-prefix B token;
  // -1 where the mass is dropped.
  std::int32_t target(std::int32_t a_id) const noexcept {
    return a_id >= 0 && static_cast<std::size_t>(a_id) < target_.size() ? target_[static_cast<std::size_t>(a_id)] : -1;
  }

  // p_b = A's distribution p_a on B's vocabulary (rule at the top). p_a may be longer than
  // A's tokenizer vocabulary (a model's padded rows: no bytes, dropped); p_b must hold at
  // least B's vocab_size() entries (those beyond get 0). p_a: finite, non-negative, some
  // mass on a token with a target.
  status project(std::span<const float> p_a, std::span<float> p_b) const;

  // Whether handover() is exact byte for byte (both tokenizers lossless; see the top).
  bool exact_handover() const noexcept { return a_->lossless() && b_->lossless(); }

  // A's ids re-tokenised for B through their bytes (see the top); appends nothing B's
  // post-processor would add. An A special without a B partner is an error naming it.
  result<std::vector<std::int32_t>> handover(std::span<const std::int32_t> ids_a) const;

 private:
  // B's special paired with A's special id: same content first, then same role.
  static std::int32_t special_partner(const tokenizer& a, const tokenizer& b, std::int32_t id, bool& by_role);

  const tokenizer* a_ = nullptr;
  const tokenizer* b_ = nullptr;
  vocab_coverage cov_;
  std::vector<std::int32_t> exact_, target_, b_to_a_;  // A id -> B id; A id -> B id; B id -> A id (-1: none)
  std::vector<std::pair<std::int32_t, std::int32_t>> pairs_;
};

// A byte offset where both tokenisations of one text cut: `offset` bytes lie before it,
// token a_token of A (index into ids_a) and token b_token of B are the last tokens that
// end there (a token of no bytes, a gap, ends where its predecessor does: the later one
// counts, having seen everything before the offset).
struct shared_boundary {
  std::size_t offset = 0, a_token = 0, b_token = 0;
};

// The shared boundaries after each token of ids_a and ids_b, in increasing offset (the
// end of the text, if non-empty, is always one). Both must decode to the same bytes
// (errc::invalid_argument with the first differing offset otherwise); both tokenizers
// must decode token by token.
result<std::vector<shared_boundary>> common_boundaries(const tokenizer& a, std::span<const std::int32_t> ids_a,
                                                              const tokenizer& b, std::span<const std::int32_t> ids_b);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE std::string detail::printable(std::string_view s) {
  std::string out;
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c >= 0x20 && c < 0x7F && c != '\\') out.push_back(static_cast<char>(c));
    else out += cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
  }
  return out;
}

SLM_INLINE status detail::need_token_bytes(const tokenizer& t, const char* which) {
  if (t.decodes_token_by_token()) return {};
  return make_error(errc::unsupported, "vocabulary alignment: tokenizer ", which,
                    " does not decode token by token (its decoder is not ByteLevel alone, e.g. a "
                    "sentencepiece-style '\xE2\x96\x81' / <0xNN> byte-fallback vocabulary), so its tokens have no "
                    "context-free byte strings");
}

SLM_INLINE result<vocab_alignment> vocab_alignment::build(const tokenizer& a, const tokenizer& b) {
  SLM_TRY(detail::need_token_bytes(a, "A"));
  SLM_TRY(detail::need_token_bytes(b, "B"));
  vocab_alignment al;
  al.a_ = &a;
  al.b_ = &b;
  const std::size_t na = a.vocab_size(), nb = b.vocab_size();
  al.cov_.a_vocab = na;
  al.cov_.b_vocab = nb;
  // B's non-special byte strings -> the lowest id holding them (duplicates are rare:
  // an added token spelling a vocabulary entry).
  std::unordered_map<std::string_view, std::int32_t> b_of;
  b_of.reserve(nb);
  for (std::size_t i = 0; i < nb; ++i) {
    const auto id = static_cast<std::int32_t>(i);
    const std::string_view s = b.token_bytes(id);
    if (!s.empty() && !b.is_special(id)) b_of.emplace(s, id);
  }
  al.exact_.assign(na, -1);
  al.target_.assign(na, -1);
  std::vector<bool> b_taken(nb, false);
  for (std::size_t i = 0; i < na; ++i) {
    const auto id = static_cast<std::int32_t>(i);
    if (a.is_special(id)) {
      bool by_role = false;
      const std::int32_t t = special_partner(a, b, id, by_role);
      if (t < 0) {
        ++al.cov_.dropped;
        continue;
      }
      al.exact_[i] = al.target_[i] = t;
      ++(by_role ? al.cov_.specials_by_role : al.cov_.specials_by_content);
      continue;
    }
    const std::string_view s = a.token_bytes(id);
    if (s.empty()) {  // a gap in the id range
      ++al.cov_.dropped;
      continue;
    }
    if (auto it = b_of.find(s); it != b_of.end()) {
      al.exact_[i] = al.target_[i] = it->second;
      ++al.cov_.exact;
      if (!b_taken[static_cast<std::size_t>(it->second)]) {  // one pair per shared byte string
        b_taken[static_cast<std::size_t>(it->second)] = true;
        al.pairs_.emplace_back(id, it->second);
      }
      continue;
    }
    for (std::size_t len = s.size() - 1; len > 0; --len)  // longest proper prefix B holds
      if (auto it = b_of.find(s.substr(0, len)); it != b_of.end()) {
        al.target_[i] = it->second;
        break;
      }
    if (al.target_[i] < 0)
      return make_error(errc::unsupported, "vocabulary alignment: A token ", id, " \"", detail::printable(s),
                        "\" has no byte prefix in B's vocabulary (B lacks the single-byte token \"",
                        detail::printable(s.substr(0, 1)), "\")");
    ++al.cov_.prefix;
  }
  al.cov_.shared_strings = al.pairs_.size();
  al.b_to_a_.assign(nb, -1);
  for (auto [x, y] : al.pairs_) al.b_to_a_[static_cast<std::size_t>(y)] = x;
  for (std::size_t i = 0; i < na; ++i)  // special pairs, one-to-one as well
    if (a.is_special(static_cast<std::int32_t>(i)) && al.exact_[i] >= 0 &&
        al.b_to_a_[static_cast<std::size_t>(al.exact_[i])] < 0) {
      al.b_to_a_[static_cast<std::size_t>(al.exact_[i])] = static_cast<std::int32_t>(i);
      al.pairs_.emplace_back(static_cast<std::int32_t>(i), al.exact_[i]);
    }
  return al;
}

SLM_INLINE status vocab_alignment::project(std::span<const float> p_a, std::span<float> p_b) const {
  if (p_b.size() < b_->vocab_size())
    return make_error(errc::invalid_argument, "project: the output holds ", p_b.size(), " entries, B's vocabulary has ",
                      b_->vocab_size());
  std::vector<double> acc(b_->vocab_size(), 0.0);
  double kept = 0;
  for (std::size_t i = 0; i < p_a.size(); ++i) {
    const float p = p_a[i];
    if (!(p >= 0.0f) || !std::isfinite(p))
      return make_error(errc::invalid_argument, "project: probability ", i, " is ", p, " (must be finite and >= 0)");
    const std::int32_t t = i < target_.size() ? target_[i] : -1;
    if (t < 0) continue;
    acc[static_cast<std::size_t>(t)] += p;
    kept += p;
  }
  if (!(kept > 0))
    return make_error(errc::invalid_argument, "project: no probability mass on an A token that B can represent");
  for (std::size_t j = 0; j < acc.size(); ++j) p_b[j] = static_cast<float>(acc[j] / kept);
  for (std::size_t j = acc.size(); j < p_b.size(); ++j) p_b[j] = 0.0f;
  return {};
}

SLM_INLINE result<std::vector<std::int32_t>> vocab_alignment::handover(std::span<const std::int32_t> ids_a) const {
  std::vector<std::int32_t> out;
  encode_scratch scratch;
  const encode_options plain{.add_special_tokens = false, .parse_special = false};
  std::size_t run = 0;  // start of the current run of non-special ids
  auto flush = [&](std::size_t end) -> status {
    if (end == run) return {};
    auto text = a_->decode(ids_a.subspan(run, end - run));
    if (!text.ok()) return std::move(text).take_error().with_context("handover");
    return b_->encode(*text, out, scratch, plain);
  };
  for (std::size_t i = 0; i < ids_a.size(); ++i) {
    const std::int32_t id = ids_a[i];
    if (id < 0 || static_cast<std::size_t>(id) >= a_->vocab_size())
      return make_error(errc::out_of_range, "handover: token id ", id, " at index ", i,
                        " is outside A's vocabulary [0, ", a_->vocab_size(), ")");
    if (!a_->is_special(id)) continue;
    SLM_TRY(flush(i));
    run = i + 1;
    const std::int32_t t = exact_[static_cast<std::size_t>(id)];
    if (t < 0)
      return make_error(errc::unsupported, "handover: special token \"", a_->token(id), "\" (id ", id, ") at index ", i,
                        " has no counterpart in B's vocabulary");
    out.push_back(t);
  }
  SLM_TRY(flush(ids_a.size()));
  return out;
}

SLM_INLINE std::int32_t vocab_alignment::special_partner(const tokenizer& a, const tokenizer& b, std::int32_t id, bool& by_role) {
  by_role = false;
  if (auto t = b.find(a.token(id)); t && b.is_special(*t)) return *t;
  const special_token_ids &sa = a.specials(), &sb = b.specials();
  const std::pair<std::int32_t, std::int32_t> roles[] = {{sa.bos, sb.bos},
                                                         {sa.eos, sb.eos},
                                                         {sa.pad, sb.pad},
                                                         {sa.unk, sb.unk},
                                                         {sa.fim_prefix, sb.fim_prefix},
                                                         {sa.fim_middle, sb.fim_middle},
                                                         {sa.fim_suffix, sb.fim_suffix}};
  for (auto [ra, rb] : roles)
    if (ra == id && rb >= 0 && b.is_special(rb)) {
      by_role = true;
      return rb;
    }
  return -1;
}

SLM_INLINE result<std::vector<shared_boundary>> common_boundaries(const tokenizer& a, std::span<const std::int32_t> ids_a,
                                                              const tokenizer& b, std::span<const std::int32_t> ids_b) {
  SLM_TRY(detail::need_token_bytes(a, "A"));
  SLM_TRY(detail::need_token_bytes(b, "B"));
  auto text_a = a.decode(ids_a);
  if (!text_a.ok()) return std::move(text_a).take_error().with_context("common_boundaries: A");
  auto text_b = b.decode(ids_b);
  if (!text_b.ok()) return std::move(text_b).take_error().with_context("common_boundaries: B");
  if (*text_a != *text_b) {
    std::size_t k = 0;
    while (k < text_a->size() && k < text_b->size() && (*text_a)[k] == (*text_b)[k]) ++k;
    return make_error(errc::invalid_argument, "common_boundaries: the two token sequences decode to different bytes (",
                      text_a->size(), " and ", text_b->size(), " bytes, first difference at byte ", k, ")");
  }
  std::vector<shared_boundary> out;
  std::size_t i = 0, j = 0, end_a = 0, end_b = 0;
  // Advance each side past every token that ends at or before the other side's end.
  while (i < ids_a.size() && j < ids_b.size()) {
    const std::size_t next_a = end_a + a.token_bytes(ids_a[i]).size(), next_b = end_b + b.token_bytes(ids_b[j]).size();
    if (next_a < next_b) {
      end_a = next_a, ++i;
    } else if (next_b < next_a) {
      end_b = next_b, ++j;
    } else {  // both cut at next_a: take the last tokens ending there
      end_a = end_b = next_a;
      while (i + 1 < ids_a.size() && a.token_bytes(ids_a[i + 1]).empty()) ++i;
      while (j + 1 < ids_b.size() && b.token_bytes(ids_b[j + 1]).empty()) ++j;
      if (next_a > 0) out.push_back({next_a, i, j});
      ++i, ++j;
    }
  }
  return out;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
