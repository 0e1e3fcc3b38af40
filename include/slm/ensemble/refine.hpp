// slm/ensemble/refine.hpp - sequential refinement: one member drafts, another reviews and rewrites.
//
// Likelihood review. Our members are base code models: they continue text and follow no
// instructions, so "please review this draft" is not something they can be asked. What a
// base model can do is say how likely it finds each token of the draft. So the reviewer
// scores the draft token by token (one forward over prompt + draft, in its own
// tokenisation), finds the first token it rejects - its probability is below
// min_token_prob, or its log-prob is more than max_logprob_gap below the reviewer's own top
// choice at that position - keeps the draft before it and writes the rest itself,
// generating from prompt + accepted prefix (at most the draft budget less the prefix).
// Nothing rejected: the draft stands unchanged.
//
// Members with different tokenizers hand over through text: the draft's text is re-encoded
// with the reviewer's tokenizer (no special tokens added). With the same tokenizer object the
// draft's own ids are reviewed (including the token that completed a stop string, if one
// did: the final text is then cut at the stop as the draft was).
//
// Both members' mean log-probs of the draft and of the final text are recorded (over the
// text's tokens in each member's tokenisation, the stop token not counted; 0 for no tokens),
// so a caller can see what the review bought.
//
//   auto r = refine(shell, cpp, "int main() {\n", {}, cx);   // result<refine_result>
//   r->text; r->accepted_tokens; r->rewritten;
#pragma once
#include "slm/core/build_mode.hpp"

#include <chrono>
#include <cmath>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

struct refine_options {
  double min_token_prob = 0.05;  // reject the first draft token the reviewer gives less (0: never)
  double max_logprob_gap = std::numeric_limits<double>::infinity();  // or this many nats below its top (inf: off)
  answer_options generation;     // the draft's generation; the rewrite's, with the budget left
};

struct refine_result {
  answer draft;                               // the drafter's
  std::vector<std::int32_t> reviewed;         // the draft in the reviewer's tokenisation
  std::vector<double> reviewer_logprobs;      // the reviewer's log-prob of each reviewed token
  std::vector<double> reviewer_top_logprobs;  // and of its own top choice there
  std::size_t accepted_tokens = 0;            // reviewed tokens kept (== reviewed.size(): all)
  bool rewritten = false;                     // a token was rejected
  std::string accepted_text;                  // the kept prefix's text
  answer rewrite;                             // the reviewer's continuation (when rewritten)
  std::string text;                           // the final text: accepted_text + rewrite.text
  double draft_mean_logprob_drafter = 0, draft_mean_logprob_reviewer = 0;
  double final_mean_logprob_drafter = 0, final_mean_logprob_reviewer = 0;
  double review_seconds = 0;  // the reviewer's scoring forward
  double seconds = 0;         // all of it: draft, review, rewrite and the final scores
};

status validate(const refine_options& o);

result<refine_result> refine(const member_ref& drafter, const member_ref& reviewer, std::string_view prompt,
                                    const refine_options& o, compute_context& cx);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE status validate(const refine_options& o) {
  if (!(o.min_token_prob >= 0.0 && o.min_token_prob <= 1.0))
    return make_error(errc::invalid_argument, "refine_options: min_token_prob ", o.min_token_prob,
                      " must be in [0, 1] (0: accept every token)");
  if (!(o.max_logprob_gap >= 0.0))
    return make_error(errc::invalid_argument, "refine_options: max_logprob_gap ", o.max_logprob_gap,
                      " must be >= 0 nats (infinity: off)");
  if (o.generation.max_new_tokens == 0)
    return make_error(errc::invalid_argument, "refine_options: generation.max_new_tokens must be >= 1");
  return {};
}

SLM_INLINE result<refine_result> refine(const member_ref& drafter, const member_ref& reviewer, std::string_view prompt,
                                    const refine_options& o, compute_context& cx) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  SLM_TRY(validate(o));
  SLM_TRY(detail::check_member(drafter, "refine: drafter"));
  SLM_TRY(detail::check_member(reviewer, "refine: reviewer"));
  if (prompt.empty()) return make_error(errc::invalid_argument, "refine: the prompt is empty");
  const bool same_tokens = drafter.tok == reviewer.tok;

  refine_result r;
  auto draft = member_answer(drafter, prompt, o.generation, cx);
  if (!draft.ok()) return std::move(draft).take_error().with_context("refine: draft");
  r.draft = std::move(*draft);
  r.draft_mean_logprob_drafter = mean_of(r.draft.token_logprobs);

  // The review: the draft in the reviewer's tokens, scored in one forward.
  auto review_prompt = encode_prompt(reviewer, prompt);
  if (!review_prompt.ok()) return std::move(review_prompt).take_error().with_context("refine: reviewer");
  if (same_tokens) {
    r.reviewed = r.draft.tokens;
  } else {
    encode_options eo;
    eo.add_special_tokens = false;
    auto ids = reviewer.tok->encode(r.draft.text, eo);
    if (!ids.ok()) return std::move(ids).take_error().with_context("refine: re-encoding the draft for the reviewer");
    r.reviewed = std::move(*ids);
  }
  const auto t_review = clock::now();
  auto scores = score_continuation(reviewer, *review_prompt, r.reviewed, cx, o.generation.session);
  if (!scores.ok()) return std::move(scores).take_error().with_context("refine: review");
  r.review_seconds = since(t_review);
  r.reviewer_logprobs = std::move(scores->logprobs);
  r.reviewer_top_logprobs = std::move(scores->top_logprobs);
  r.draft_mean_logprob_reviewer = mean_of(r.reviewer_logprobs);

  const double floor = std::log(o.min_token_prob);  // -inf for 0: nothing is below it
  std::size_t k = 0;
  while (k < r.reviewed.size() && !(r.reviewer_logprobs[k] < floor) &&
         !(r.reviewer_top_logprobs[k] - r.reviewer_logprobs[k] > o.max_logprob_gap))
    ++k;
  r.accepted_tokens = k;
  if (k == r.reviewed.size()) {  // nothing rejected: the draft stands
    r.accepted_text = r.text = r.draft.text;
    r.final_mean_logprob_drafter = r.draft_mean_logprob_drafter;
    r.final_mean_logprob_reviewer = r.draft_mean_logprob_reviewer;
    r.seconds = since(t0);
    return r;
  }

  // The rewrite: the reviewer goes on from prompt + accepted prefix.
  r.rewritten = true;
  const std::span<const std::int32_t> prefix(r.reviewed.data(), k);
  auto accepted = reviewer.tok->decode(prefix);
  if (!accepted.ok()) return std::move(accepted).take_error().with_context("refine: reviewer");
  r.accepted_text = std::move(*accepted);
  std::vector<std::int32_t> rewrite_prompt = *review_prompt;
  rewrite_prompt.insert(rewrite_prompt.end(), prefix.begin(), prefix.end());
  answer_options ro = o.generation;
  ro.max_new_tokens = o.generation.max_new_tokens > k ? o.generation.max_new_tokens - k : 1;
  auto rewrite = member_answer_ids(reviewer, rewrite_prompt, ro, cx);
  if (!rewrite.ok()) return std::move(rewrite).take_error().with_context("refine: rewrite");
  r.rewrite = std::move(*rewrite);
  r.text = r.accepted_text + r.rewrite.text;

  // The final text's scores: the reviewer's from the review and the rewrite; the drafter's
  // from one forward over the final text in its tokens.
  std::vector<double> reviewer_final(r.reviewer_logprobs.begin(), r.reviewer_logprobs.begin() + static_cast<std::ptrdiff_t>(k));
  reviewer_final.insert(reviewer_final.end(), r.rewrite.token_logprobs.begin(), r.rewrite.token_logprobs.end());
  r.final_mean_logprob_reviewer = mean_of(reviewer_final);
  std::vector<std::int32_t> drafter_final;
  if (same_tokens) {
    drafter_final.assign(prefix.begin(), prefix.end());
    drafter_final.insert(drafter_final.end(), r.rewrite.tokens.begin(), r.rewrite.tokens.end());
  } else {
    encode_options eo;
    eo.add_special_tokens = false;
    auto ids = drafter.tok->encode(r.text, eo);
    if (!ids.ok()) return std::move(ids).take_error().with_context("refine: re-encoding the final text for the drafter");
    drafter_final = std::move(*ids);
  }
  auto draft_prompt = encode_prompt(drafter, prompt);
  if (!draft_prompt.ok()) return std::move(draft_prompt).take_error();
  auto drafter_scores = score_continuation(drafter, *draft_prompt, drafter_final, cx, o.generation.session);
  if (!drafter_scores.ok()) return std::move(drafter_scores).take_error().with_context("refine: scoring the final text");
  r.final_mean_logprob_drafter = mean_of(drafter_scores->logprobs);
  r.seconds = since(t0);
  return r;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
