// slm/ensemble/router_model.hpp - a member as the router.
//
// An orchestration member reads the prompt, then a routing cue (the template), and the
// router takes the label it finds the most likely continuation:
//   score(label) = log P(label text | prompt tokens + template tokens), summed over the
//   label's tokens (the member's calibrated distribution, answer.hpp).
// A model trained to route emits a routing token after the cue; this scores exactly that
// decision (a label that is one token scores that token's log-prob) and also works with
// labels of several tokens. With a base code model as the orchestrator it is a weak
// router: it has never been taught the cue (tests/test_ensemble.cpp measures it); the
// policy is here for the orchestration specialist the seeds describe.
//
// Cost: one prefill of the prompt + cue (at most max_prompt_tokens of the prompt, its end)
// per label, each a fresh session; the label rows only are computed.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/ensemble/router.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

struct model_router_options {
  std::string cue = "\n// language: ";  // what the orchestrator reads between prompt and label
  std::size_t max_prompt_tokens = 256;   // the prompt's last tokens that are scored (BOS kept)
};

class model_router {
 public:
  // labels[i] is scored as the text label_texts[i] (empty: the labels themselves). The
  // orchestrator's pointees and the executor must outlive the router.
  static result<model_router> create(std::vector<std::string> labels, member_ref orchestrator, executor_ref ex,
                                     model_router_options opt = {}, std::vector<std::string> label_texts = {});

  std::span<const std::string> labels() const noexcept { return labels_; }

  result<route_decision> route(const route_request& q) const {
    compute_context cx{ex_};
    return route(q, cx);
  }

  result<route_decision> route(const route_request& q, compute_context& cx) const;

 private:
  model_router(std::vector<std::string> labels, member_ref m, executor_ref ex, model_router_options opt)
      : labels_(std::move(labels)), m_(m), ex_(ex), opt_(std::move(opt)) {}

  static encode_options no_specials();

  std::vector<std::string> labels_;
  member_ref m_;
  executor_ref ex_;
  model_router_options opt_;
  std::vector<std::int32_t> cue_;
  std::vector<std::vector<std::int32_t>> label_ids_;
};

static_assert(router<model_router>);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<model_router> model_router::create(std::vector<std::string> labels, member_ref orchestrator, executor_ref ex,
                                   model_router_options opt, std::vector<std::string> label_texts) {
  SLM_TRY(check_labels(labels));
  SLM_TRY(detail::check_member(orchestrator, "model_router: the orchestrator"));
  if (label_texts.empty()) label_texts = labels;
  if (label_texts.size() != labels.size())
    return make_error(errc::invalid_argument, "model_router: ", label_texts.size(), " label texts for ", labels.size(),
                      " labels");
  if (opt.max_prompt_tokens == 0) return make_error(errc::invalid_argument, "model_router: max_prompt_tokens is 0");
  model_router r(std::move(labels), orchestrator, ex, std::move(opt));
  auto cue = orchestrator.tok->encode(r.opt_.cue, no_specials());
  if (!cue.ok()) return std::move(cue).take_error().with_context("model_router: the cue");
  r.cue_ = std::move(*cue);
  for (std::size_t i = 0; i < label_texts.size(); ++i) {
    auto ids = orchestrator.tok->encode(label_texts[i], no_specials());
    if (!ids.ok()) return std::move(ids).take_error().with_context(cat("model_router: label '", r.labels_[i], "'"));
    if (ids->empty()) return make_error(errc::invalid_argument, "model_router: label '", r.labels_[i], "' has no tokens");
    r.label_ids_.push_back(std::move(*ids));
  }
  return r;
}

SLM_INLINE result<route_decision> model_router::route(const route_request& q, compute_context& cx) const {
  auto prompt = encode_prompt(m_, q.text);
  if (!prompt.ok()) return std::move(prompt).take_error().with_context("model_router");
  // Keep the prompt's end (and a leading BOS): the cue must follow the text it routes.
  std::vector<std::int32_t> ids;
  const std::vector<std::int32_t>& p = *prompt;
  const bool bos = !p.empty() && p.front() == m_.tok->specials().bos;
  if (p.size() > opt_.max_prompt_tokens) {
    if (bos) ids.push_back(p.front());
    ids.insert(ids.end(), p.end() - static_cast<std::ptrdiff_t>(opt_.max_prompt_tokens - (bos ? 1 : 0)), p.end());
  } else {
    ids = p;
  }
  ids.insert(ids.end(), cue_.begin(), cue_.end());
  route_decision d;
  d.reason = cat("model router (", m_.name, "), log P(label):");
  for (std::size_t i = 0; i < labels_.size(); ++i) {
    auto s = score_continuation(m_, ids, label_ids_[i], cx);
    if (!s.ok()) return std::move(s).take_error().with_context(cat("model_router: label '", labels_[i], "'"));
    double total = 0;
    for (double l : s->logprobs) total += l;
    d.scores.push_back(total);
    d.reason += cat(" ", labels_[i], " ", std::round(total * 1000.0) / 1000.0);
  }
  d.ranking = rank_by_score(d.scores);
  return d;
}

SLM_INLINE encode_options model_router::no_specials() {
  encode_options o;
  o.add_special_tokens = false;
  o.parse_special = false;
  return o;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
