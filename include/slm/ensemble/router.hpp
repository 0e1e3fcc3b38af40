// slm/ensemble/router.hpp - routers: which member should answer a request.
//
// A router is a policy over an ordered list of labels (the members' domains, e.g.
// {"cpp", "cmake", "shell"}): route() scores a request against every label and ranks
// them, best first, with a one-line reason a person can read. Three policies:
//   rules_router       (router_rules.hpp)      file name, extension, shebang, content cues
//   classifier_router  (router_classifier.hpp) logistic regression over hashed byte n-grams
//   perplexity_router  (this header)            the prompt's bits per byte under each member
// Including this header brings all three. The other two include only its first part, the
// shared types (route_request, route_decision, the router concept): that part has its own
// include guard, and the rest -- the perplexity router, which reaches every model family
// through member.hpp -- is skipped while SLM_ENSEMBLE_ROUTER_TYPES_ONLY is defined, so a
// file that needs only the rules or the classifier router does not parse the models.
// Either include order works.
//
//   auto r = slm::ensemble::rules_router::with_defaults({"cpp", "cmake", "shell"});
//   auto d = r->route({.text = prompt, .file_name = "CMakeLists.txt"});  // result<route_decision>
//   members[d->ranking[0]] ...                                              // d->reason: why
#include "slm/core/build_mode.hpp"

#ifndef SLM_ENSEMBLE_ROUTER_TYPES_HPP_
#define SLM_ENSEMBLE_ROUTER_TYPES_HPP_

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/core/status.hpp"

namespace slm::ensemble {

struct route_request {
  std::string_view text;
  std::string_view file_name = {};  // optional: a path or a bare name
};

struct route_decision {
  std::vector<double> scores;        // aligned with the router's labels; higher is better
  std::vector<std::size_t> ranking;  // label indices, best first
  std::string reason;                // one line: which rule fired, or the probabilities
  std::size_t best() const noexcept { return ranking.empty() ? 0 : ranking.front(); }
};

template <class R>
concept router = requires(const R& r, const route_request& q) {
  { r.route(q) } -> std::same_as<result<route_decision>>;
  { r.labels() } -> std::convertible_to<std::span<const std::string>>;
};

// Label indices by descending score; ties keep label order (the first label wins).
std::vector<std::size_t> rank_by_score(std::span<const double> scores);

// Labels a router is built over: at least one, none empty, no duplicates.
status check_labels(std::span<const std::string> labels);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE std::vector<std::size_t> rank_by_score(std::span<const double> scores) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  return order;
}

SLM_INLINE status check_labels(std::span<const std::string> labels) {
  if (labels.empty()) return make_error(errc::invalid_argument, "router: no labels");
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (labels[i].empty()) return make_error(errc::invalid_argument, "router: label ", i, " is empty");
    for (std::size_t j = 0; j < i; ++j)
      if (labels[j] == labels[i]) return make_error(errc::invalid_argument, "router: label \"", labels[i], "\" given twice");
  }
  return {};
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble

#endif  // SLM_ENSEMBLE_ROUTER_TYPES_HPP_

#if !defined(SLM_ENSEMBLE_ROUTER_TYPES_ONLY) && !defined(SLM_ENSEMBLE_ROUTER_HPP_)
#define SLM_ENSEMBLE_ROUTER_HPP_

#include "slm/core/buffer.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/generate/scoring.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/parallel.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::ensemble {

// ---------------------------------------------------------------------------------------
// perplexity_router: score the prompt under each member, prefill only, and prefer the one
// that finds it least surprising. Scores are -bits per byte (bytes of the scored tokens,
// so members with different tokenizers compare fairly). Cost: one prefill per member.

struct perplexity_options {
  std::size_t max_tokens = 256;  // score at most the last this many tokens of the prompt
  std::size_t chunk_rows = 64;   // prefill in chunks: logits [chunk_rows, vocab] at a time
};

class perplexity_router {
 public:
  // members[i] scores labels[i]. The pointees of member_ref and the executor must outlive
  // the router. route() builds a compute_context over `ex` per call, so a router may be
  // shared by threads when its executor may be (thread_pool, serial_executor per thread).
  static result<perplexity_router> create(std::vector<std::string> labels, std::span<const member_ref> members,
                                          executor_ref ex, perplexity_options opt = {});

  std::span<const std::string> labels() const noexcept { return labels_; }

  result<route_decision> route(const route_request& q) const {
    compute_context cx{ex_};
    return route(q, cx);
  }

  result<route_decision> route(const route_request& q, compute_context& cx) const;

  // Bits per byte of the text's tokens 1..T-1 (of its last max_tokens) under one member.
  result<double> bits_per_byte(const member_ref& m, std::string_view text, compute_context& cx) const;

 private:
  perplexity_router(std::vector<std::string> labels, std::span<const member_ref> members, executor_ref ex, perplexity_options opt)
      : labels_(std::move(labels)), members_(members.begin(), members.end()), ex_(ex), opt_(opt) {}
  std::vector<std::string> labels_;
  std::vector<member_ref> members_;
  executor_ref ex_;
  perplexity_options opt_;
};

static_assert(router<perplexity_router>);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<perplexity_router> perplexity_router::create(std::vector<std::string> labels, std::span<const member_ref> members,
                                        executor_ref ex, perplexity_options opt) {
  SLM_TRY(check_labels(labels));
  if (members.size() != labels.size())
    return make_error(errc::invalid_argument, "perplexity_router: ", members.size(), " members for ", labels.size(), " labels");
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!members[i].model || !members[i].tok)
      return make_error(errc::invalid_argument, "perplexity_router: member ", i, " (", labels[i], ") has no model or tokenizer");
    if (!(members[i].temperature > 0.0f) || !std::isfinite(members[i].temperature))
      return make_error(errc::invalid_argument, "perplexity_router: member ", i, " temperature ", members[i].temperature, " is not positive");
  }
  if (opt.max_tokens < 2 || opt.chunk_rows == 0)
    return make_error(errc::invalid_argument, "perplexity_router: max_tokens must be >= 2 and chunk_rows >= 1");
  return perplexity_router(std::move(labels), members, ex, opt);
}

SLM_INLINE result<route_decision> perplexity_router::route(const route_request& q, compute_context& cx) const {
  route_decision d;
  d.reason = "perplexity, bits/byte:";
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto bpb = bits_per_byte(members_[i], q.text, cx);
    if (!bpb.ok()) return std::move(bpb).take_error().with_context(cat("perplexity_router: member '", labels_[i], "'"));
    d.scores.push_back(-*bpb);
    char buf[32];
    const auto r = std::to_chars(buf, buf + sizeof buf, *bpb, std::chars_format::fixed, 3);
    d.reason += cat(" ", labels_[i], " ", std::string_view(buf, static_cast<std::size_t>(r.ptr - buf)));
  }
  d.ranking = rank_by_score(d.scores);
  return d;
}

SLM_INLINE result<double> perplexity_router::bits_per_byte(const member_ref& m, std::string_view text, compute_context& cx) const {
  auto enc = m.tok->encode(text, encode_options{.add_special_tokens = true, .parse_special = false});
  if (!enc.ok()) return std::move(enc).take_error();
  std::vector<std::int32_t> ids = std::move(*enc);
  if (ids.size() > opt_.max_tokens) {  // keep a leading special token (BOS) as the context's start
    const bool keep_first = m.tok->is_special(ids.front());
    std::vector<std::int32_t> tail;
    if (keep_first) tail.push_back(ids.front());
    tail.insert(tail.end(), ids.end() - static_cast<std::ptrdiff_t>(opt_.max_tokens - tail.size()), ids.end());
    ids = std::move(tail);
  }
  if (ids.size() < 2) return make_error(errc::invalid_argument, "text of ", text.size(), " bytes has fewer than 2 tokens to score");
  auto scored = m.tok->decode(std::span<const std::int32_t>(ids).subspan(1));
  if (!scored.ok()) return std::move(scored).take_error();
  if (scored->empty()) return make_error(errc::invalid_argument, "the scored tokens decode to no bytes");
  const std::size_t limit = m.model->new_session().max_tokens();
  if (ids.size() > limit) return make_error(errc::out_of_range, ids.size(), " tokens exceed the member's context of ", limit);
  // One window over all of ids (it fits the context), prefilled in chunks of chunk_rows rows.
  score_options so;
  so.ctx = so.stride = ids.size();
  so.chunk_rows = opt_.chunk_rows;
  so.scale = 1.0 / static_cast<double>(m.temperature);
  auto t = score_tokens(*m.model, ids, so, cx);
  if (!t.ok()) return std::move(t).take_error();
  t->bytes = scored->size();
  return t->bits_per_byte();
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble

#include "slm/ensemble/router_classifier.hpp"
#include "slm/ensemble/router_rules.hpp"

#endif  // SLM_ENSEMBLE_ROUTER_HPP_
