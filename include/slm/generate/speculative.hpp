// slm/generate/speculative.hpp - speculative decoding: drafts from a model's own
// multi-token-prediction heads (NAM56R's MTP depths, spec nam56r.md §2.7) or copied from
// the context (prompt lookup), verified by one main forward; and the speculative-sampling
// acceptance rule.
//
// One round, after the main model has chosen token x_p:
//   draft   d_1 .. d_m, from one of two sources:
//           MTP: the heads, draft({x_p}) gives d_1, draft({x_p, d_1}) gives d_2, ...
//           (depth i + 1 predicts token p + i + 1);
//           lookup: the tokens that followed the latest earlier occurrence of the
//           context's last n tokens (n from prompt_lookup::max_ngram down to min_ngram;
//           transformers' prompt_lookup_num_tokens, llama.cpp's lookup decoding). Edits
//           repeat their context, so a rewrite copies long runs of it; where nothing
//           matches, the round drafts nothing and is one plain step. Any session with
//           forward and rollback can take these drafts: they need no model of their own;
//   verify  one main forward over the m + 1 positions {x_p, d_1, .., d_m}: row j holds the
//           main model's distribution after d_j (row 0: after x_p);
//   accept  greedy: d_{j+1} is kept while it equals row j's greedy pick (the argmax after
//           the sampler's logit bias and penalties, as plain greedy generation picks);
//           the first row whose pick differs (or row m when every draft is kept) gives
//           the next token for free. Sampling: speculative_accept() below, per draft in
//           order;
//   undo    rollback(m - j) drops the rejected drafts from every cache (KV rows, Mamba-3
//           and M2RNN states, n-gram history), so the session_options::rollback_tokens
//           of the session must be at least m.
// Greedy speculation therefore emits exactly the tokens plain greedy decoding emits (up to
// float rounding between one (m + 1)-position forward and m + 1 single steps, which is
// far below any argmax margin the tests meet); the test holds it to identity.
//
// Sampling with lookup drafts takes each draft as drawn from a one-hot q: kept with
// probability p(d), else the next token is drawn from p without d, renormalized; so every
// token is distributed as plain sampling draws it.
//
// A session drives this through the members speculative_session (lookup) and mtp_session
// (MTP, adding draft()) name; every family's session has the first, NAM56R's the second.
//
// generate_speculative() is what a host calls: generation as generator::generate gives it
// (the same stop tokens, stop strings, context limit and text), with the tokens drafted and
// verified as above; generate_mtp() is it with MTP drafts. apply_stop_rules() is its last
// step: generator::generate's stop rules applied to tokens generated without them.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/layers/linear.hpp"
#include "slm/generate/generator.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/core/status.hpp"
#include "slm/text/detokenizer.hpp"
#include "slm/text/stop_strings.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm {

template <class S>
concept speculative_session = requires(S& s, std::span<const std::int32_t> ids, float* logits, compute_context& cx) {
  { s.forward(ids, std::size_t{}, logits, cx) } -> std::same_as<status>;
  { s.rollback(std::size_t{}) } -> std::same_as<status>;
};

template <class S>
concept mtp_session = speculative_session<S> && requires(S& s, std::span<const std::int32_t> ids, float* logits,
                                                         compute_context& cx) {
  { s.draft(ids, logits, cx) } -> std::same_as<status>;
};

// Drafts copied from the context (see the top of the file).
struct prompt_lookup {
  std::size_t max_ngram = 3, min_ngram = 1;  // the n-gram sizes tried, longest first

  // Appends to `out` up to m tokens that followed the latest earlier occurrence of the
  // last n tokens of `context` (the longest n that occurs), and returns how many (0: none
  // found, or m == 0). The copied run may reach into the suffix itself (a repeating
  // pattern continues). O(context size x max_ngram).
  std::size_t propose(std::span<const std::int32_t> context, std::size_t m, std::vector<std::int32_t>& out) const {
    const std::size_t len = context.size();
    if (m == 0) return 0;
    for (std::size_t n = std::min(max_ngram, len ? len - 1 : 0); n >= std::max<std::size_t>(min_ngram, 1); --n) {
      const std::int32_t* tail = context.data() + len - n;
      for (std::size_t start = len - n; start-- > 0;) {  // the latest occurrence first
        if (!std::equal(tail, tail + n, context.data() + start)) continue;
        const std::size_t from = start + n, k = std::min(m, len - from);
        out.insert(out.end(), context.begin() + static_cast<std::ptrdiff_t>(from),
                   context.begin() + static_cast<std::ptrdiff_t>(from + k));
        return k;
      }
    }
    return 0;
  }
};

namespace detail {
inline bool is_stop(std::span<const std::int32_t> stops, std::int32_t id) noexcept {
  return std::find(stops.begin(), stops.end(), id) != stops.end();
}
}  // namespace detail

struct speculative_stats {
  std::size_t generated = 0;      // tokens emitted
  std::size_t main_forwards = 0;  // main-model forward calls, the prompt's included
  std::size_t drafted = 0, accepted = 0;
  double acceptance_rate() const noexcept {
    return drafted ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
  // Tokens emitted per main forward, the prompt's included (it yields the first token):
  // 1 without speculation, up to k + 1 with k drafts all accepted.
  double tokens_per_forward() const noexcept {
    return main_forwards ? static_cast<double>(generated) / static_cast<double>(main_forwards) : 0.0;
  }
};

namespace detail {

// Up to m lookup drafts after `history`, appended to seq and history; `found` holds them.
inline std::size_t lookup_drafts(const prompt_lookup& lookup, std::vector<std::int32_t>& seq,
                                 std::vector<std::int32_t>& history, std::size_t m, std::vector<std::int32_t>& found) {
  found.clear();
  const std::size_t k = lookup.propose(history, m, found);
  seq.insert(seq.end(), found.begin(), found.end());
  history.insert(history.end(), found.begin(), found.end());
  return k;
}

// The greedy rounds of speculative decoding (see generate_greedy_mtp, whose contract this
// is) over a draft source: propose(seq, history, m, next_index) appends up to m drafts to
// seq (which holds the round's token) and to history, and returns how many (a result).
template <speculative_session Session, class Propose>
status greedy_rounds(Session& s, std::span<const std::int32_t> prompt, std::size_t n, std::size_t draft_tokens,
                     std::size_t vocab, sampler& smp, std::vector<std::int32_t>& out, speculative_stats& st,
                     compute_context& cx, std::span<const std::int32_t> stops, const char* what, Propose&& propose) {
  if (n == 0) return {};
  if (vocab == 0) return make_error(errc::invalid_argument, "generate: vocabulary of 0");
  if (smp.config().temperature != 0.0f)
    return make_error(errc::invalid_argument, what, ": the sampler's temperature is ", smp.config().temperature,
                      ", not 0 (use the sampled form)");
  std::vector<float> row(vocab), verify_logits;
  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  history.insert(history.end(), out.begin(), out.end());
  const std::size_t first_out = out.size();
  SLM_TRY(s.forward(prompt, 1, row.data(), cx));
  ++st.main_forwards;
  auto first = smp.sample(std::span<const float>(row.data(), vocab), history);
  if (!first.ok()) return std::move(first).take_error().with_context("generate: token 0");
  std::int32_t x = *first;
  std::vector<std::int32_t> seq;
  for (;;) {
    out.push_back(x);
    history.push_back(x);
    ++st.generated;
    const std::size_t left = n - std::min(n, st.generated);
    if (left == 0 || is_stop(stops, x)) return {};
    // At most left - 1 drafts: the round's own next token is then always emitted at the
    // top of the loop and never fed, so the session ends holding every token but the last.
    const std::size_t h0 = history.size(), next_index = out.size() - first_out;
    seq.assign(1, x);
    auto drafted = propose(seq, history, std::min(draft_tokens, left - 1), next_index);
    if (!drafted.ok()) return std::move(drafted).take_error();
    const std::size_t m = *drafted;
    st.drafted += m;
    verify_logits.resize((m + 1) * vocab);
    // [m + 1 positions] -> logits [m + 1, V]: row j follows seq[j]
    SLM_TRY(s.forward(seq, m + 1, verify_logits.data(), cx));
    ++st.main_forwards;
    // Row j's pick sees x, d_1 .. d_j: the history plain decoding has at that token.
    std::size_t j = 0;
    std::int32_t next = -1;
    for (;; ++j) {
      auto t = smp.sample(std::span<const float>(verify_logits.data() + j * vocab, vocab),
                          std::span<const std::int32_t>(history).first(h0 + j));
      if (!t.ok()) return std::move(t).take_error().with_context(cat("generate: token ", next_index + j));
      if (j == m || *t != seq[j + 1]) {
        next = *t;
        break;
      }
    }
    for (std::size_t a = 1; a <= j; ++a) {
      out.push_back(seq[a]);
      ++st.generated;
      ++st.accepted;
      // A stop among the kept drafts ends it there: the session keeps x .. d_{a-1}.
      if (is_stop(stops, seq[a])) return s.rollback(m - a + 1);
    }
    history.resize(h0 + j);
    if (m > j) SLM_TRY(s.rollback(m - j));
    x = next;
  }
}

}  // namespace detail

// Greedy decoding of n tokens after `prompt` (fed from the session's current position),
// drafting up to `draft_tokens` tokens per round with the MTP heads (0: plain greedy, one
// main forward per token). Every pick, drafts included, is `smp.sample()` at temperature
// 0 with the history up to that position (prompt + emitted + earlier drafts), so logit
// bias, the penalties over the same window, padding rows (vocab_size) and the NaN /
// +infinity / all-banned errors are exactly plain generation's (generator::step): each
// emitted token is the one a generator with the same sampler would pick. Errors name the
// token as generator::generate does ("generate: token i"). Appends the tokens to `out`;
// the last one is not fed back (as in plain greedy decoding, it needs no forward of its
// own). A token in `stops` (EOS) ends generation as it ends plain generation, before
// n tokens: it is the last token appended and, like any last token, not fed, so nothing
// after it is computed. On an error the tokens so far are in `out` and the session holds
// every token emitted before the failing call. `smp` must be configured for `vocab` rows
// with temperature 0.
template <mtp_session Session>
status generate_greedy_mtp(Session& s, std::span<const std::int32_t> prompt, std::size_t n, std::size_t draft_tokens,
                           std::size_t vocab, sampler& smp, std::vector<std::int32_t>& out, speculative_stats& st,
                           compute_context& cx, std::span<const std::int32_t> stops = {}) {
  std::vector<float> draft_logits;
  auto propose = [&](std::vector<std::int32_t>& seq, std::vector<std::int32_t>& history, std::size_t m,
                     std::size_t next_index) -> result<std::size_t> {
    draft_logits.resize(m * vocab);
    for (std::size_t i = 0; i < m; ++i) {  // d_{i+1}: the pick from depth i + 1
      SLM_TRY(s.draft(seq, draft_logits.data(), cx));
      auto d = smp.sample(std::span<const float>(draft_logits.data() + i * vocab, vocab), history);
      if (!d.ok()) return std::move(d).take_error().with_context(cat("generate: MTP draft of token ", next_index + i));
      seq.push_back(*d);
      history.push_back(*d);
    }
    return m;
  };
  return detail::greedy_rounds(s, prompt, n, draft_tokens, vocab, smp, out, st, cx, stops, "generate_greedy_mtp",
                               propose);
}

// The same with drafts from the context (prompt_lookup): up to `draft_tokens` per round,
// as many as the lookup finds. Any speculative_session: the model needs no MTP heads.
template <speculative_session Session>
status generate_greedy_lookup(Session& s, std::span<const std::int32_t> prompt, std::size_t n,
                              std::size_t draft_tokens, const prompt_lookup& lookup, std::size_t vocab, sampler& smp,
                              std::vector<std::int32_t>& out, speculative_stats& st, compute_context& cx,
                              std::span<const std::int32_t> stops = {}) {
  std::vector<std::int32_t> found;
  auto propose = [&](std::vector<std::int32_t>& seq, std::vector<std::int32_t>& history, std::size_t m,
                     std::size_t) -> result<std::size_t> { return detail::lookup_drafts(lookup, seq, history, m, found); };
  return detail::greedy_rounds(s, prompt, n, draft_tokens, vocab, smp, out, st, cx, stops, "generate_greedy_lookup",
                               propose);
}

// The same with plain greedy rules (no bias, no penalties, every row a candidate): a
// sampler_config at temperature 0 with nothing else set.
template <mtp_session Session>
status generate_greedy_mtp(Session& s, std::span<const std::int32_t> prompt, std::size_t n, std::size_t draft_tokens,
                           std::size_t vocab, std::vector<std::int32_t>& out, speculative_stats& st,
                           compute_context& cx, std::span<const std::int32_t> stops = {}) {
  sampler_config c;
  c.temperature = 0.0f;
  sampler smp(std::move(c));
  return generate_greedy_mtp(s, prompt, n, draft_tokens, vocab, smp, out, st, cx, stops);
}

// The speculative-sampling rule for one drafted token (Leviathan et al. 2023, Chen et al.
// 2023): `token` was drawn from the draft distribution q; it is kept with probability
// min(1, p(token) / q(token)), else replaced by a draw from max(0, p - q) renormalized.
// The result is distributed exactly as p. p and q are probabilities over the same
// vocabulary (each summing to 1); `uniform` returns independent draws in [0, 1).
// Returns the token to emit; `accepted` says whether it is the draft.
// A draw from probs (summing to ~1) by the inverse CDF at u in [0, 1), ids in increasing
// order; zero-probability ids are never drawn (rounding past the end gives the last
// positive one; -1 only when every probability is 0).
std::int32_t draw_inverse_cdf(std::span<const float> probs, double u) noexcept;

template <class Uniform>
  requires std::is_invocable_r_v<double, Uniform&>
std::int32_t speculative_accept(std::span<const float> p, std::span<const float> q, std::int32_t token,
                                Uniform& uniform, bool& accepted) {
  const auto t = static_cast<std::size_t>(token);
  const double pt = t < p.size() ? p[t] : 0.0, qt = t < q.size() ? q[t] : 0.0;
  accepted = qt > 0.0 && uniform() * qt < pt;  // u < p / q, without dividing by a tiny q
  if (accepted) return token;
  double mass = 0.0;  // sum of max(0, p - q)
  for (std::size_t i = 0; i < p.size(); ++i) mass += std::max(0.0, static_cast<double>(p[i]) - (i < q.size() ? q[i] : 0.0));
  if (!(mass > 0.0)) {  // p == q up to rounding: any rejection came from rounding; sample p
    double u = uniform(), c = 0.0;
    for (std::size_t i = 0; i < p.size(); ++i)
      if ((c += p[i]) > u) return static_cast<std::int32_t>(i);
    return static_cast<std::int32_t>(p.size() - 1);
  }
  const double u = uniform() * mass;
  double c = 0.0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const double r = std::max(0.0, static_cast<double>(p[i]) - (i < q.size() ? q[i] : 0.0));
    if (r > 0.0) last = i;
    if ((c += r) > u) return static_cast<std::int32_t>(i);
  }
  return static_cast<std::int32_t>(last);
}

namespace detail {

// The sampled rounds of speculative decoding (see generate_sampled_mtp, whose contract this
// is) over a draft source: propose(seq, history, m, q) appends up to m drafts to seq and
// history, the distribution each was drawn from to q (q[i] for draft i), and returns how
// many (a result).
template <speculative_session Session, class Sampler, class Propose>
status sampled_rounds(Session& s, std::span<const std::int32_t> prompt, std::size_t n, std::size_t draft_tokens,
                      std::size_t vocab, Sampler& smp, std::vector<std::int32_t>& out, speculative_stats& st,
                      compute_context& cx, std::span<const std::int32_t> stops, Propose&& propose) {
  if (n == 0) return {};
  if (vocab == 0) return make_error(errc::invalid_argument, "generate: vocabulary of 0");
  std::vector<float> row(vocab), verify_logits, p;
  std::vector<std::vector<float>> q;
  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  history.insert(history.end(), out.begin(), out.end());
  auto uniform = [&smp] { return smp.generator().uniform(); };
  auto draw = [&](const std::vector<float>& probs) { return draw_inverse_cdf(probs, uniform()); };
  SLM_TRY(s.forward(prompt, 1, row.data(), cx));
  ++st.main_forwards;
  auto first = smp.sample(row, history);
  if (!first.ok()) return std::move(first).take_error();
  std::int32_t x = *first;
  std::vector<std::int32_t> seq;
  for (;;) {
    out.push_back(x);
    history.push_back(x);
    ++st.generated;
    const std::size_t left = n - std::min(n, st.generated);
    if (left == 0 || is_stop(stops, x)) return {};
    seq.assign(1, x);
    const std::size_t h0 = history.size();  // history = prompt + emitted (x included)
    auto drafted = propose(seq, history, std::min(draft_tokens, left - 1), q);
    if (!drafted.ok()) return std::move(drafted).take_error();
    const std::size_t m = *drafted;
    st.drafted += m;
    verify_logits.resize((m + 1) * vocab);
    // [m + 1 positions] -> logits [m + 1, V]: row j follows seq[j]
    SLM_TRY(s.forward(seq, m + 1, verify_logits.data(), cx));
    ++st.main_forwards;
    std::size_t j = 0;
    std::int32_t next = -1;
    for (; j < m; ++j) {
      // the main distribution at position j sees x, d_1 .. d_j
      SLM_TRY(smp.distribution(std::span<const float>(verify_logits.data() + j * vocab, vocab),
                               std::span<const std::int32_t>(history).first(h0 + j), p));
      bool accepted = false;
      const std::int32_t t = speculative_accept(p, q[j], seq[j + 1], uniform, accepted);
      if (!accepted) {
        next = t;
        break;
      }
      out.push_back(seq[j + 1]);
      ++st.generated;
      ++st.accepted;
      // A stop among the kept drafts ends it there: the session keeps x .. d_j.
      if (is_stop(stops, seq[j + 1])) return s.rollback(m - j);
    }
    history.resize(h0 + j);
    if (m > j) SLM_TRY(s.rollback(m - j));
    if (next < 0) {  // every draft kept: the bonus token from the last row
      SLM_TRY(smp.distribution(std::span<const float>(verify_logits.data() + m * vocab, vocab), history, p));
      next = draw(p);
      if (next < 0) return make_error(errc::invalid_argument, "generate: an empty distribution");
    }
    x = next;
  }
}

}  // namespace detail

// Sampled decoding of n tokens after `prompt` with MTP drafts: every draft is drawn from
// the sampler's distribution over the draft head's logits (q), the main model's rows give
// p (the same sampler settings, the history up to that position), and
// speculative_accept() keeps or replaces each draft in order; after m accepted drafts the
// bonus token is drawn from p. So every emitted token is distributed exactly as plain
// sampling with `smp` would draw it (Leviathan et al. 2023); the random stream differs,
// so a seed does not give plain sampling's tokens. Penalties see prompt + emitted tokens
// (+ earlier drafts for later positions). Session contract, `stops` and `out` / error
// behaviour as generate_greedy_mtp; `smp` must be configured for `vocab` rows.
template <mtp_session Session, class Sampler>
status generate_sampled_mtp(Session& s, std::span<const std::int32_t> prompt, std::size_t n, std::size_t draft_tokens,
                            std::size_t vocab, Sampler& smp, std::vector<std::int32_t>& out, speculative_stats& st,
                            compute_context& cx, std::span<const std::int32_t> stops = {}) {
  std::vector<float> draft_logits;
  auto propose = [&](std::vector<std::int32_t>& seq, std::vector<std::int32_t>& history, std::size_t m,
                     std::vector<std::vector<float>>& q) -> result<std::size_t> {
    draft_logits.resize(m * vocab);
    q.resize(m);
    for (std::size_t i = 0; i < m; ++i) {  // d_{i+1} ~ q_i
      SLM_TRY(s.draft(seq, draft_logits.data(), cx));
      SLM_TRY(smp.distribution(std::span<const float>(draft_logits.data() + i * vocab, vocab), history, q[i]));
      const std::int32_t d = draw_inverse_cdf(q[i], smp.generator().uniform());
      if (d < 0) return make_error(errc::invalid_argument, "generate: an empty draft distribution");
      seq.push_back(d);
      history.push_back(d);
    }
    return m;
  };
  return detail::sampled_rounds(s, prompt, n, draft_tokens, vocab, smp, out, st, cx, stops, propose);
}

// The same with drafts from the context (prompt_lookup), each taken as drawn from a
// one-hot q: kept with probability p(d), else replaced by a draw from p without d.
template <speculative_session Session, class Sampler>
status generate_sampled_lookup(Session& s, std::span<const std::int32_t> prompt, std::size_t n,
                               std::size_t draft_tokens, const prompt_lookup& lookup, std::size_t vocab, Sampler& smp,
                               std::vector<std::int32_t>& out, speculative_stats& st, compute_context& cx,
                               std::span<const std::int32_t> stops = {}) {
  std::vector<std::int32_t> found;
  auto propose = [&](std::vector<std::int32_t>& seq, std::vector<std::int32_t>& history, std::size_t m,
                     std::vector<std::vector<float>>& q) -> result<std::size_t> {
    const std::size_t k = detail::lookup_drafts(lookup, seq, history, m, found);
    q.resize(k);
    for (std::size_t i = 0; i < k; ++i) {  // one-hot: the draft was "drawn" with certainty
      q[i].assign(vocab, 0.0f);
      if (static_cast<std::size_t>(found[i]) < vocab) q[i][static_cast<std::size_t>(found[i])] = 1.0f;
    }
    return k;
  };
  return detail::sampled_rounds(s, prompt, n, draft_tokens, vocab, smp, out, st, cx, stops, propose);
}

// Tokens generated without stop rules (speculative decoding), cut as generator::generate
// cuts them: up to the first of go.stop_tokens (excluded); with a tokenizer, their text
// through the same detokenizer (go.decode) and go.stop_strings, ending at the token whose
// text completes a stop string (the text before the string). Without a tokenizer the text
// is empty and stop strings are not looked for.
struct stopped_output {
  std::vector<std::int32_t> tokens;
  std::string text;
};
result<stopped_output> apply_stop_rules(std::span<const std::int32_t> ids, const generation_options& go,
                                        const tokenizer* t);

struct speculative_output {
  std::vector<std::int32_t> tokens;  // as generation_result::tokens (no stop token)
  std::string text;                  // their text, up to a stop string (empty without a tokenizer)
  speculative_stats stats;
};

// Where the drafts of generate_speculative come from.
enum class draft_source : std::uint8_t { mtp, lookup };

struct speculation {
  draft_source source = draft_source::mtp;
  std::size_t draft_tokens = 1;  // drafts per main forward at most
  prompt_lookup lookup;          // draft_source::lookup's n-gram sizes
};

// Generation after `prompt` with up to `spec.draft_tokens` drafts per main forward from
// spec.source: greedy (plain greedy's tokens) when smp's temperature is 0, else
// speculative sampling (each token distributed as plain sampling draws it). As
// generator::generate: at most go.max_new_tokens, and no more than the context holds after
// the prompt (max_tokens - prompt tokens); go's stop tokens and stop strings (stop strings
// need a tokenizer `t`). The session must be fresh, with session_options::rollback_tokens
// >= draft_tokens; `smp` validated for `vocab` rows (generator's sampler: vocab_size the
// tokenizer's rows). MTP drafts need an mtp_session; otherwise it is an error.
template <speculative_session Session>
result<speculative_output> generate_speculative(Session& s, std::span<const std::int32_t> prompt,
                                                const speculation& spec, std::size_t vocab, sampler& smp,
                                                const generation_options& go, const tokenizer* t,
                                                compute_context& cx) {
  if (!t && !go.stop_strings.empty()) return make_error(errc::invalid_argument, "generate: stop strings need a tokenizer");
  const std::size_t limit = s.max_tokens();
  const std::size_t room = limit > prompt.size() ? limit - prompt.size() : 0;
  const std::size_t count = prompt.size() <= limit ? std::min(go.max_new_tokens, room) : go.max_new_tokens;
  const std::size_t k = spec.draft_tokens;
  const bool greedy = smp.config().temperature == 0.0f;
  std::vector<std::int32_t> out;
  speculative_stats st;
  if (spec.source == draft_source::lookup) {
    SLM_TRY(greedy ? generate_greedy_lookup(s, prompt, count, k, spec.lookup, vocab, smp, out, st, cx, go.stop_tokens)
                   : generate_sampled_lookup(s, prompt, count, k, spec.lookup, vocab, smp, out, st, cx, go.stop_tokens));
  } else if constexpr (mtp_session<Session>) {  // drafts from q, kept or replaced by the speculative-sampling rule
    SLM_TRY(greedy ? generate_greedy_mtp(s, prompt, count, k, vocab, smp, out, st, cx, go.stop_tokens)
                   : generate_sampled_mtp(s, prompt, count, k, vocab, smp, out, st, cx, go.stop_tokens));
  } else {
    return make_error(errc::unsupported, "generate: MTP drafts need a model with MTP heads");
  }
  auto r = apply_stop_rules(out, go, t);  // drops the stop token; stop strings as generate()
  if (!r.ok()) return std::move(r).take_error();
  return speculative_output{std::move(r->tokens), std::move(r->text), st};
}

// generate_speculative with `draft_tokens` MTP drafts per main forward.
template <mtp_session Session>
result<speculative_output> generate_mtp(Session& s, std::span<const std::int32_t> prompt, std::size_t draft_tokens,
                                        std::size_t vocab, sampler& smp, const generation_options& go,
                                        const tokenizer* t, compute_context& cx) {
  speculation spec;
  spec.draft_tokens = draft_tokens;
  return generate_speculative(s, prompt, spec, vocab, smp, go, t, cx);
}

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE std::int32_t draw_inverse_cdf(std::span<const float> probs, double u) noexcept {
  double c = 0.0;
  std::int32_t last = -1;
  for (std::size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] > 0.0f) last = static_cast<std::int32_t>(i);
    if ((c += probs[i]) > u && probs[i] > 0.0f) return static_cast<std::int32_t>(i);
  }
  return last;
}

SLM_INLINE result<stopped_output> apply_stop_rules(std::span<const std::int32_t> ids, const generation_options& go,
                                                   const tokenizer* t) {
  stopped_output r;
  std::optional<detokenizer> detok;
  if (t) detok.emplace(*t, go.decode);
  stop_strings stops(go.stop_strings);
  for (const std::int32_t id : ids) {
    if (detail::is_stop(go.stop_tokens, id)) break;
    r.tokens.push_back(id);
    if (detok) {
      auto piece = detok->push(id);
      if (!piece.ok()) return std::move(piece).take_error();
      r.text += stops.push(*piece);
    }
    if (stops.stopped()) return r;
  }
  if (detok) {
    r.text += stops.push(detok->flush());
    if (!stops.stopped()) r.text += stops.flush();
  }
  return r;
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
