// slm/ensemble/cross_speculative.hpp - speculative decoding across members: a small member
// drafts for a larger one that shares its tokenizer.
//
// One round, after token x was chosen (fed to neither session yet):
//   draft   the drafter feeds x (after any tokens it still lags behind) and chooses
//           d_1 .. d_m one forward at a time, with the sampler's rule (greedy: argmax);
//   verify  one target forward over the m + 1 positions {x, d_1, .., d_m}: row j holds the
//           target's distribution after d_j;
//   accept  greedy: d_{j+1} is kept while it equals the target's choice from row j; the
//           first row that disagrees (or row m when all are kept) gives the next token.
//           Sampled: speculative_accept() (generate/speculative.hpp) per draft in order, so every
//           token is distributed exactly as the target's own sampling (Leviathan et al.
//           2023; q is the drafter's distribution under the same sampler settings);
//   undo    the target rolls back the m - j rejected drafts; the drafter, which fed x and
//           d_1 .. d_{m-1}, rolls back m - 1 - j of them (or, all kept, feeds d_m with the
//           next round's x). Both sessions need session_options::rollback_tokens >= m
//           (recurrent layers keep that many states); this function sets it.
// Greedy output is therefore the target's plain greedy output, whatever the drafter (up
// to rounding between the target's (m + 1)-row forward and m + 1 one-row forwards: use
// f32 quantized activations where identity matters - the bf16 activation path rounds
// differently for one and several rows).
// The choice rule is slm::sampler's (temperature 0 = argmax, logit bias and penalties
// included), applied over the shared vocabulary (padding rows of either head are not read).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "slm/ensemble/member.hpp"
#include "slm/ensemble/mixing.hpp"
#include "slm/generate/generator.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/generate/speculative.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

sampler_config greedy_sampling();

struct cross_speculative_options {
  std::size_t max_new_tokens = 128;
  std::size_t draft_tokens = 4;           // m: drafts per round (0: the target alone)
  std::vector<std::int32_t> stop_tokens;  // end generation, not emitted
  sampler_config sampling = greedy_sampling();  // temperature 0: greedy
  std::size_t vocab = 0;                  // 0: the shared tokenizer's (see shared_vocab)
  session_options session;                // both sessions (rollback_tokens raised to m)
};

struct cross_speculative_result {
  std::vector<std::int32_t> tokens;  // generated (a stop token is not among them)
  stop_reason reason = stop_reason::max_tokens;
  std::int32_t stop_token = -1;
  speculative_stats stats;           // main_forwards = target forwards (the prompt's included)
  std::size_t drafter_forwards = 0;
  std::size_t rejections = 0;        // rounds that rejected a draft
  std::size_t target_rolled_back = 0, drafter_rolled_back = 0;  // tokens dropped by rollback
  double seconds = 0.0;              // prefill + generation
};

result<cross_speculative_result> generate_cross_speculative(const member_ref& drafter, const member_ref& target,
                                                                   std::span<const std::int32_t> prompt,
                                                                   const cross_speculative_options& o,
                                                                   compute_context& cx);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE sampler_config greedy_sampling() {
  sampler_config c;
  c.temperature = 0.0f;
  return c;
}

SLM_INLINE result<cross_speculative_result> generate_cross_speculative(const member_ref& drafter, const member_ref& target,
                                                                   std::span<const std::int32_t> prompt,
                                                                   const cross_speculative_options& o,
                                                                   compute_context& cx) {
  const auto t0 = std::chrono::steady_clock::now();
  const member_ref both[2] = {drafter, target};
  auto vocab_r = shared_vocab(both, o.vocab);
  if (!vocab_r.ok()) return std::move(vocab_r).take_error();
  const std::size_t vocab = *vocab_r;
  if (prompt.empty()) return make_error(errc::invalid_argument, "speculative: an empty prompt");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || static_cast<std::size_t>(prompt[i]) >= vocab)
      return make_error(errc::out_of_range, "speculative: prompt token ", prompt[i], " at index ", i,
                        " is outside the vocabulary [0, ", vocab, ")");
  SLM_TRY(validate(o.sampling, vocab));
  const std::size_t m_max = o.draft_tokens;
  session_options so = o.session;
  so.rollback_tokens = std::max(so.rollback_tokens, m_max);
  member_session ds = drafter.model->new_session(so), ts = target.model->new_session(so);
  for (const member_session* s : {&ds, &ts})
    if (prompt.size() > s->max_tokens())
      return make_error(errc::out_of_range, "speculative: the prompt has ", prompt.size(),
                        " tokens, more than a member's context of ", s->max_tokens());
  const std::size_t d_rows = drafter.model->vocab(), t_rows = target.model->vocab();
  const bool greedy = o.sampling.temperature == 0.0f;

  cross_speculative_result r;
  speculative_stats& st = r.stats;
  sampler smp(o.sampling);
  auto uniform = [&smp] { return smp.generator().uniform(); };
  auto draw = [&](const std::vector<float>& probs) { return draw_inverse_cdf(probs, uniform()); };
  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  std::vector<float> d_row(d_rows), verify, p;
  std::vector<std::vector<float>> q(m_max);
  std::int32_t x = 0;
  const auto t_view = [&](std::size_t j) { return std::span<const float>(verify.data() + j * t_rows, vocab); };

  {  // the target's first token
    std::vector<float> row(t_rows);
    SLM_TRY(ts.forward(prompt, 1, row.data(), cx));
    ++st.main_forwards;
    auto id = smp.sample(std::span<const float>(row.data(), vocab), history);
    if (!id.ok()) return std::move(id).take_error();
    x = *id;
  }
  std::vector<std::int32_t> lag(prompt.begin(), prompt.end());  // fed to the target, not yet to the drafter
  std::vector<std::int32_t> seq, dfeed;
  const auto emit = [&](std::int32_t id) {  // false: a stop token (not emitted)
    if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), id) != o.stop_tokens.end()) {
      r.reason = stop_reason::stop_token;
      r.stop_token = id;
      return false;
    }
    r.tokens.push_back(id);
    history.push_back(id);
    ++st.generated;
    return true;
  };
  for (;;) {
    if (!emit(x)) break;
    const std::size_t left = o.max_new_tokens - std::min(o.max_new_tokens, r.tokens.size());
    if (left == 0) break;
    if (cx.cancel && cx.cancel->cancelled()) {
      r.reason = stop_reason::cancelled;
      break;
    }
    if (ts.position() + 1 > ts.max_tokens()) {
      r.reason = stop_reason::context_full;
      break;
    }
    // Drafts: at most left - 1 (the round's own next token is always emitted) and what
    // both contexts hold (a drafter out of context leaves the target alone).
    const std::size_t d_room = ds.max_tokens() - std::min(ds.max_tokens(), ds.position() + lag.size() + 1);
    const std::size_t m = std::min({m_max, left - 1, ts.max_tokens() - ts.position() - 1, d_room});
    seq.assign(1, x);
    const std::size_t h0 = history.size();  // prompt + emitted, x included
    for (std::size_t i = 0; i < m; ++i) {
      dfeed = lag;
      dfeed.push_back(seq.back());
      lag.clear();
      SLM_TRY(ds.forward(dfeed, 1, d_row.data(), cx));
      ++r.drafter_forwards;
      const std::span<const float> dv(d_row.data(), vocab);
      std::int32_t d = 0;
      if (greedy) {
        auto id = smp.sample(dv, history);
        if (!id.ok()) return std::move(id).take_error();
        d = *id;
      } else {
        SLM_TRY(smp.distribution(dv, history, q[i]));
        d = draw(q[i]);
        if (d < 0) return make_error(errc::invalid_argument, "speculative: an empty draft distribution");
      }
      seq.push_back(d);
      history.push_back(d);
    }
    if (m == 0) lag.push_back(x);  // the drafter feeds it next time
    st.drafted += m;
    verify.resize((m + 1) * t_rows);
    // [m + 1 positions] -> logits [m + 1, t_rows]: row j follows seq[j]
    SLM_TRY(ts.forward(seq, m + 1, verify.data(), cx));
    ++st.main_forwards;
    std::size_t j = 0;
    std::int32_t next = -1;
    for (; j < m; ++j) {
      const auto h = std::span<const std::int32_t>(history).first(h0 + j);  // sees x, d_1 .. d_j
      if (greedy) {
        auto id = smp.sample(t_view(j), h);
        if (!id.ok()) return std::move(id).take_error();
        if (*id != seq[j + 1]) {
          next = *id;
          break;
        }
      } else {
        SLM_TRY(smp.distribution(t_view(j), h, p));
        bool accepted = false;
        const std::int32_t t = speculative_accept(p, q[j], seq[j + 1], uniform, accepted);
        if (!accepted) {
          next = t;
          break;
        }
      }
    }
    st.accepted += j;
    history.resize(h0);  // the kept drafts go through emit() below
    if (m > j) {
      ++r.rejections;
      SLM_TRY(ts.rollback(m - j));
      r.target_rolled_back += m - j;
      if (m - 1 > j) {
        SLM_TRY(ds.rollback(m - 1 - j));
        r.drafter_rolled_back += m - 1 - j;
      }
    } else if (m > 0) {
      lag.push_back(seq[m]);  // all kept: the drafter has not fed d_m
    }
    bool stopped = false;
    for (std::size_t a = 1; a <= j && !stopped; ++a) stopped = !emit(seq[a]);
    if (stopped) break;
    if (next < 0) {  // every draft kept (or none made): the next token from the last row
      if (greedy) {
        auto id = smp.sample(t_view(m), history);
        if (!id.ok()) return std::move(id).take_error();
        next = *id;
      } else {
        SLM_TRY(smp.distribution(t_view(m), history, p));
        next = draw(p);
        if (next < 0) return make_error(errc::invalid_argument, "speculative: an empty distribution");
      }
    }
    x = next;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
