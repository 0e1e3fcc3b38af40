// slm/ensemble/mixing.hpp - token-level mixing of members that share a tokenizer.
//
// Members that share one tokenizer predict over the same token ids, so their next-token
// distributions can be averaged token by token:
//   p_mix(v) = sum_i w_i softmax(z_i / T_i)(v)     for v < vocab (the tokenizer's size)
// w_i >= 0 normalised to sum 1, T_i > 0 the member's calibrated temperature, z_i its logit
// row (rows may be wider than the vocabulary - a padded head - and are read up to vocab).
// Everything here is computed in double: a mixture of sharp distributions needs the tails
// of each one (log-sum-exp per member, then per token across members).
//
// The pieces:
//   token_mixture          weights + temperatures + vocab, checked once; mix() gives
//                          log p_mix, logits() the row the sampler takes (below);
//   heldout_rows           a member's logit rows over held-out ids, stored once;
//   fit_temperature()      the T minimising the held-out mean NLL (convex in 1/T: a
//                          safeguarded Newton iteration on beta = 1/T within [0.05, 20]);
//   fit_mixture_weights()  EM for the weights given each member's probability of every
//                          held-out token (exact maximum likelihood: the log-likelihood is
//                          concave in w and EM increases it monotonically);
//   generate_mixture()     one session per member, all fed the same tokens; each step mixes
//                          the members' rows and samples the mixture with slm::sampler;
//   routing_weights()      top-1 / top-2 routing from a router's ranking, as mixture weights.
//
// Sampling the mixture: sampler (generate/sampling.hpp) takes logits and applies
// softmax(logits / temperature) after its processors. Feeding it log p_mix makes
// temperature 1 sample p_mix exactly; another sampler temperature t samples p_mix^(1/t)
// renormalised (t = 0: argmax p_mix), and top-k / top-p / min-p / penalties act on the
// mixture as they would on one model. The row handed over is log p_mix - max log p_mix
// (the same distribution): near the top it is close to 0, where float keeps the full
// precision of the double values, so a single member at weight 1 gives exactly its own
// argmax and ordering.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

#include "slm/ensemble/member.hpp"
#include "slm/generate/scoring.hpp"
#include "slm/generate/generator.hpp"
#include "slm/layers/linear.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

// Weights >= 0 (finite, not NaN, not all zero) scaled to sum 1.
result<std::vector<double>> normalized_weights(std::span<const double> w);

status check_temperature(double t, std::size_t member);

namespace detail::mix {
// log softmax(z[0 .. vocab) / t) into out, in double; an error on NaN / +inf (a row of all
// -inf bans everything and is an error too: it is no distribution).
status log_softmax(std::span<const float> z, double t, std::size_t member, std::span<double> out);
}  // namespace detail::mix

// p_mix over a fixed vocabulary for fixed members; owns its scratch (one per thread).
class token_mixture {
 public:
  // weights: one per member (normalised here); temperatures: one per member, > 0.
  static result<token_mixture> create(std::span<const double> weights, std::span<const double> temperatures,
                                      std::size_t vocab);

  std::size_t members() const noexcept { return weights_.size(); }
  std::size_t vocab() const noexcept { return vocab_; }
  std::span<const double> weights() const noexcept { return weights_; }          // normalised
  std::span<const double> temperatures() const noexcept { return temperatures_; }

  // log p_mix[v], v < vocab. rows[i]: member i's logits, at least vocab wide (wider rows:
  // padding, not read). Members of weight 0 are not read (their row may be empty).
  status mix(std::span<const std::span<const float>> rows, std::span<double> log_p);

  // The sampler's row: log p_mix - max log p_mix as float (see the header comment).
  // log_p receives the unshifted double values.
  status logits(std::span<const std::span<const float>> rows, std::span<double> log_p, std::span<float> out);

 private:
  std::vector<double> weights_, temperatures_, member_lp_, log_w_;
  std::size_t vocab_ = 0;
};

// ---- Calibration on held-out data ----

// A member's logit rows over held-out token ids, kept so that every temperature tried
// reuses them: row t predicts target t. Rows are stored vocab wide (padding dropped).
struct heldout_rows {
  std::size_t vocab = 0;
  std::vector<float> logits;          // [n, vocab]
  std::vector<std::int32_t> targets;  // [n]

  std::size_t size() const noexcept { return targets.size(); }

  // Adds the predictions of ids[1 ..] from ids[.. n-1]: a fresh session per window of at
  // most `window` tokens (0: the session's context), each window's first token only read.
  status append(const member_model& m, std::span<const std::int32_t> ids, compute_context& cx, std::size_t window = 0);

  // Mean negative log-likelihood (nats per token) at temperature t.
  double mean_nll(double t) const;
  // log softmax(row r / t)[target r].
  double log_prob(std::size_t r, double t) const;
  // log_probs[r * members + member] = log_prob(r, t): the input of fit_mixture_weights.
  void target_log_probs(double t, std::size_t member, std::size_t members, std::vector<double>& log_probs) const;
};

struct temperature_fit {
  double temperature = 1.0;
  double nll = 0.0;       // mean NLL at the fitted temperature (nats / token)
  double nll_at_1 = 0.0;  // ... and at T = 1
  std::size_t iterations = 0;
  bool at_bound = false;  // the optimum lies at (or past) 0.05 or 20
};

// argmin_T mean NLL(T) over T in [t_min, t_max]. With beta = 1/T and row r's logits z:
//   NLL(beta)   = mean_r [ log sum_v exp(beta z_v) - beta z_y ]      (convex in beta)
//   NLL'(beta)  = mean_r [ E_p[z] - z_y ],  NLL''(beta) = mean_r Var_p[z] >= 0
// with p = softmax(beta z). Newton steps on beta, kept inside a bracket [lo, hi] that the
// sign of NLL' shrinks (a step leaving it bisects instead): converges whenever NLL' has a
// root inside, quadratically near it; at a bound otherwise.
result<temperature_fit> fit_temperature(const heldout_rows& h, double t_min = 0.05, double t_max = 20.0);

struct weight_fit {
  std::vector<double> weights;
  double mean_log_likelihood = 0.0;  // mean_t log sum_i w_i p_i(t), nats / token
  std::size_t iterations = 0;
};

// EM for mixture weights: log_probs[t * members + i] = log p_i(token t) (each member's
// calibrated probability of the held-out token). E step r_ti = w_i p_i(t) / sum_j w_j p_j(t),
// M step w_i = mean_t r_ti; stops when no weight moves by more than tol.
result<weight_fit> fit_mixture_weights(std::span<const double> log_probs, std::size_t members,
                                              std::size_t max_iterations = 1000, double tol = 1e-10);

// ---- Routing as weights ----

enum class routing : std::uint8_t { top1, top2 };
enum class router_scores : std::uint8_t {
  logits,         // a classifier's logits or log-probabilities, -loss of perplexity routing:
                  // top-2 weights = softmax of the two scores
  probabilities,  // scores >= 0: top-2 weights = the two scores / their sum
};

// Mixture weights over `members` members from a router's ranking: ranked[k] the member
// index at rank k (best first), scores[k] its score (higher is better). top-1: weight 1 on
// ranked[0]; top-2: the two best, weighted by their scores as `kind` says; others 0 (and
// generate_mixture does not run members of weight 0).
result<std::vector<double>> routing_weights(std::size_t members, std::span<const std::size_t> ranked,
                                                   std::span<const double> scores, routing r,
                                                   router_scores kind = router_scores::logits);

// ---- Generation from the mixture ----

struct mixture_options {
  std::size_t max_new_tokens = 128;
  std::vector<std::int32_t> stop_tokens;  // end generation, not emitted
  sampler_config sampling;                // applied to log p_mix (see the header comment)
  std::size_t vocab = 0;                  // 0: the shared tokenizer's (or the members' common rows)
  bool calibrated = true;                 // use member_ref::temperature (else T = 1)
  session_options session;                // for every member's session
};

struct mixture_result {
  std::vector<std::int32_t> tokens;  // generated (a stop token is not among them)
  std::vector<double> log_probs;     // log p_mix of each token (the mixture's, before the sampler's warpers)
  stop_reason reason = stop_reason::max_tokens;
  std::int32_t stop_token = -1;
  double seconds = 0.0;              // prefill + generation
};

// The vocabulary members share: options.vocab, else their common tokenizer's size, else
// (no tokenizers) their common logit-row width. Members with different tokenizers are an
// error: their ids mean different things (vocabulary alignment handles that case).
result<std::size_t> shared_vocab(std::span<const member_ref> members, std::size_t requested = 0);

// Generates from sum_i w_i softmax(z_i / T_i): every member of positive weight gets a
// session prefilled with `prompt`; each step mixes their last rows, samples one token and
// feeds it to all of them (the last token is not fed: nothing reads its row).
result<mixture_result> generate_mixture(std::span<const member_ref> members, std::span<const double> weights,
                                               std::span<const std::int32_t> prompt, const mixture_options& o,
                                               compute_context& cx);

// Top-1 / top-2 routing: generate_mixture with routing_weights(...).
result<mixture_result> generate_routed(std::span<const member_ref> members, std::span<const std::size_t> ranked,
                                              std::span<const double> scores, routing how, router_scores kind,
                                              std::span<const std::int32_t> prompt, const mixture_options& o,
                                              compute_context& cx);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<std::vector<double>> normalized_weights(std::span<const double> w) {
  if (w.empty()) return make_error(errc::invalid_argument, "mixture: no members (no weights)");
  double sum = 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || w[i] < 0.0)
      return make_error(errc::invalid_argument, "mixture: weight ", i, " is ", w[i], "; weights must be finite and >= 0");
    sum += w[i];
  }
  if (!(sum > 0.0)) return make_error(errc::invalid_argument, "mixture: the ", w.size(), " weights sum to 0");
  std::vector<double> out(w.begin(), w.end());
  for (double& x : out) x /= sum;
  return out;
}

SLM_INLINE status check_temperature(double t, std::size_t member) {
  if (!std::isfinite(t) || t <= 0.0)
    return make_error(errc::invalid_argument, "mixture: member ", member, " has temperature ", t,
                      "; it must be a finite number > 0");
  return {};
}

SLM_INLINE status detail::mix::log_softmax(std::span<const float> z, double t, std::size_t member, std::span<double> out) {
  const std::size_t n = out.size();
  double mx = -std::numeric_limits<double>::infinity();
  for (std::size_t v = 0; v < n; ++v) {
    const float x = z[v];
    if (!(x < std::numeric_limits<float>::infinity()))
      return make_error(errc::invalid_argument, "mixture: member ", member, " logit ", v, " is ",
                        std::isnan(x) ? "NaN" : "+infinity");
    out[v] = static_cast<double>(x) / t;
    mx = std::max(mx, out[v]);
  }
  if (mx == -std::numeric_limits<double>::infinity())
    return make_error(errc::invalid_argument, "mixture: every logit of member ", member, " is -infinity");
  double s = 0.0;
  for (std::size_t v = 0; v < n; ++v) s += std::exp(out[v] - mx);
  const double lse = mx + std::log(s);
  for (std::size_t v = 0; v < n; ++v) out[v] -= lse;
  return {};
}

SLM_INLINE result<token_mixture> token_mixture::create(std::span<const double> weights, std::span<const double> temperatures,
                                    std::size_t vocab) {
  if (vocab == 0) return make_error(errc::invalid_argument, "mixture: a vocabulary of 0 tokens");
  if (temperatures.size() != weights.size())
    return make_error(errc::invalid_argument, "mixture: ", weights.size(), " weights but ", temperatures.size(),
                      " temperatures");
  auto w = normalized_weights(weights);
  if (!w.ok()) return std::move(w).take_error();
  for (std::size_t i = 0; i < temperatures.size(); ++i) SLM_TRY(check_temperature(temperatures[i], i));
  token_mixture m;
  m.weights_ = std::move(*w);
  m.temperatures_.assign(temperatures.begin(), temperatures.end());
  m.vocab_ = vocab;
  return m;
}

SLM_INLINE status token_mixture::mix(std::span<const std::span<const float>> rows, std::span<double> log_p) {
  if (rows.size() != members())
    return make_error(errc::invalid_argument, "mixture: ", rows.size(), " logit rows for ", members(), " members");
  if (log_p.size() != vocab_)
    return make_error(errc::invalid_argument, "mixture: the output has ", log_p.size(), " entries, the vocabulary ",
                      vocab_);
  std::size_t live = 0;
  for (std::size_t i = 0; i < members(); ++i) {
    if (weights_[i] == 0.0) continue;
    if (rows[i].size() < vocab_)
      return make_error(errc::invalid_argument, "mixture: member ", i, " has a logit row of ", rows[i].size(),
                        " entries, fewer than the shared vocabulary of ", vocab_);
    ++live;
  }
  member_lp_.resize(live * vocab_);
  log_w_.clear();
  for (std::size_t i = 0, k = 0; i < members(); ++i) {
    if (weights_[i] == 0.0) continue;
    SLM_TRY(detail::mix::log_softmax(rows[i], temperatures_[i], i,
                                     std::span<double>(member_lp_).subspan(k * vocab_, vocab_)));
    log_w_.push_back(std::log(weights_[i]));
    ++k;
  }
  // log p_mix[v] = logsumexp_k (log w_k + lp_k[v])
  for (std::size_t v = 0; v < vocab_; ++v) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::size_t k = 0; k < live; ++k) mx = std::max(mx, log_w_[k] + member_lp_[k * vocab_ + v]);
    if (mx == -std::numeric_limits<double>::infinity()) {
      log_p[v] = mx;
      continue;
    }
    double s = 0.0;
    for (std::size_t k = 0; k < live; ++k) s += std::exp(log_w_[k] + member_lp_[k * vocab_ + v] - mx);
    log_p[v] = mx + std::log(s);
  }
  return {};
}

SLM_INLINE status token_mixture::logits(std::span<const std::span<const float>> rows, std::span<double> log_p, std::span<float> out) {
  if (out.size() != vocab_)
    return make_error(errc::invalid_argument, "mixture: the logit row has ", out.size(), " entries, the vocabulary ",
                      vocab_);
  SLM_TRY(mix(rows, log_p));
  const double mx = *std::max_element(log_p.begin(), log_p.end());
  for (std::size_t v = 0; v < vocab_; ++v) out[v] = static_cast<float>(log_p[v] - mx);
  return {};
}

SLM_INLINE status heldout_rows::append(const member_model& m, std::span<const std::int32_t> ids, compute_context& cx, std::size_t window) {
  if (vocab == 0) return make_error(errc::invalid_argument, "heldout_rows: set vocab first");
  const std::size_t rows = m.vocab();
  if (rows < vocab)
    return make_error(errc::invalid_argument, "heldout_rows: the member's logit rows (", rows,
                      ") are narrower than the vocabulary (", vocab, ")");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocab)
      return make_error(errc::out_of_range, "heldout_rows: token id ", ids[i], " at index ", i,
                        " is outside the vocabulary [0, ", vocab, ")");
  member_session s = m.new_session();
  if (window == 0 || window > s.max_tokens()) window = s.max_tokens();
  if (window < 2) return make_error(errc::invalid_argument, "heldout_rows: a window of ", window, " tokens");
  std::vector<float> buf;
  for (std::size_t at = 0; at + 1 < ids.size(); at += window - 1) {  // windows overlap by one token
    const std::size_t len = std::min(window, ids.size() - at);
    const std::size_t n = len - 1;  // predictions of this window
    s.reset();
    buf.resize(n * rows);
    // [n positions] -> logits [n, rows]: row j follows ids[at + j]
    SLM_TRY(s.forward(ids.subspan(at, n), n, buf.data(), cx));
    const std::size_t old = targets.size();
    logits.resize((old + n) * vocab);
    for (std::size_t j = 0; j < n; ++j)
      std::copy_n(buf.data() + j * rows, vocab, logits.data() + (old + j) * vocab);
    targets.insert(targets.end(), ids.begin() + static_cast<std::ptrdiff_t>(at + 1),
                   ids.begin() + static_cast<std::ptrdiff_t>(at + len));
  }
  return {};
}

SLM_INLINE double heldout_rows::mean_nll(double t) const {
  double s = 0.0;
  for (std::size_t r = 0; r < size(); ++r) s -= log_prob(r, t);
  return size() ? s / static_cast<double>(size()) : 0.0;
}

SLM_INLINE double heldout_rows::log_prob(std::size_t r, double t) const {
  return -token_nll(std::span<const float>(logits.data() + r * vocab, vocab), targets[r], 1.0 / t);
}

SLM_INLINE void heldout_rows::target_log_probs(double t, std::size_t member, std::size_t members, std::vector<double>& log_probs) const {
  log_probs.resize(size() * members);
  for (std::size_t r = 0; r < size(); ++r) log_probs[r * members + member] = log_prob(r, t);
}

SLM_INLINE result<temperature_fit> fit_temperature(const heldout_rows& h, double t_min, double t_max) {
  if (h.size() == 0) return make_error(errc::invalid_argument, "fit_temperature: no held-out tokens");
  if (h.logits.size() != h.size() * h.vocab || h.vocab == 0)
    return make_error(errc::invalid_argument, "fit_temperature: ", h.logits.size(), " logits for ", h.size(),
                      " rows of ", h.vocab);
  if (!(t_min > 0.0 && t_min < t_max && std::isfinite(t_max)))
    return make_error(errc::invalid_argument, "fit_temperature: bounds [", t_min, ", ", t_max, "]");
  for (std::size_t r = 0; r < h.size(); ++r)
    if (h.targets[r] < 0 || static_cast<std::size_t>(h.targets[r]) >= h.vocab)
      return make_error(errc::out_of_range, "fit_temperature: target ", r, " (id ", h.targets[r],
                        ") is outside the vocabulary [0, ", h.vocab, ")");
  for (float z : h.logits)
    if (!std::isfinite(z)) return make_error(errc::invalid_argument, "fit_temperature: a logit is not finite");
  // NLL' and NLL'' at beta
  const auto derivs = [&h](double beta, double& g, double& hess) {
    g = hess = 0.0;
    for (std::size_t r = 0; r < h.size(); ++r) {
      const float* z = h.logits.data() + r * h.vocab;
      const double mx = *std::max_element(z, z + h.vocab);
      double s0 = 0.0, s1 = 0.0, s2 = 0.0;
      for (std::size_t v = 0; v < h.vocab; ++v) {
        const double d = static_cast<double>(z[v]) - mx;  // shifted: same mean-centred moments
        const double e = std::exp(beta * d);
        s0 += e;
        s1 += e * d;
        s2 += e * d * d;
      }
      const double mean = s1 / s0;
      g += mean - (static_cast<double>(z[static_cast<std::size_t>(h.targets[r])]) - mx);
      hess += std::max(0.0, s2 / s0 - mean * mean);
    }
    g /= static_cast<double>(h.size());
    hess /= static_cast<double>(h.size());
  };
  double lo = 1.0 / t_max, hi = 1.0 / t_min, g = 0.0, hess = 0.0;
  temperature_fit f;
  derivs(lo, g, hess);
  if (g >= 0.0) {  // increasing from the smallest beta: the largest T
    f.temperature = t_max;
    f.at_bound = true;
  } else {
    derivs(hi, g, hess);
    if (g <= 0.0) {
      f.temperature = t_min;
      f.at_bound = true;
    } else {
      double beta = std::clamp(1.0, lo, hi);
      for (f.iterations = 1; f.iterations <= 100; ++f.iterations) {
        derivs(beta, g, hess);
        if (g > 0.0) hi = beta;
        else lo = beta;
        if (g == 0.0 || hi - lo <= 1e-12 * hi) break;
        const double step = hess > 0.0 ? g / hess : std::numeric_limits<double>::infinity();
        if (std::fabs(step) <= 1e-12 * beta) break;  // Newton has converged (the bracket may not have)
        const double next = beta - step;
        beta = next > lo && next < hi ? next : 0.5 * (lo + hi);
      }
      f.temperature = 1.0 / beta;
    }
  }
  f.nll = h.mean_nll(f.temperature);
  f.nll_at_1 = h.mean_nll(1.0);
  return f;
}

SLM_INLINE result<weight_fit> fit_mixture_weights(std::span<const double> log_probs, std::size_t members,
                                              std::size_t max_iterations, double tol) {
  if (members == 0) return make_error(errc::invalid_argument, "fit_mixture_weights: no members");
  if (log_probs.empty() || log_probs.size() % members != 0)
    return make_error(errc::invalid_argument, "fit_mixture_weights: ", log_probs.size(),
                      " log-probabilities is not a positive multiple of ", members, " members");
  for (std::size_t k = 0; k < log_probs.size(); ++k)
    if (std::isnan(log_probs[k]) || log_probs[k] > 0.0)
      return make_error(errc::invalid_argument, "fit_mixture_weights: log-probability ", k, " is ", log_probs[k]);
  const std::size_t n = log_probs.size() / members;
  weight_fit f;
  f.weights.assign(members, 1.0 / static_cast<double>(members));
  std::vector<double> next(members), r(members);
  for (f.iterations = 1; f.iterations <= max_iterations; ++f.iterations) {
    std::fill(next.begin(), next.end(), 0.0);
    double ll = 0.0;
    for (std::size_t t = 0; t < n; ++t) {
      double mx = -std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i < members; ++i) {
        r[i] = f.weights[i] > 0.0 ? std::log(f.weights[i]) + log_probs[t * members + i]
                                  : -std::numeric_limits<double>::infinity();
        mx = std::max(mx, r[i]);
      }
      if (mx == -std::numeric_limits<double>::infinity())
        return make_error(errc::invalid_argument, "fit_mixture_weights: token ", t,
                          " has probability 0 under every member of positive weight");
      double s = 0.0;
      for (std::size_t i = 0; i < members; ++i) s += (r[i] = std::exp(r[i] - mx));
      for (std::size_t i = 0; i < members; ++i) next[i] += r[i] / s;
      ll += mx + std::log(s);
    }
    double moved = 0.0;
    for (std::size_t i = 0; i < members; ++i) {
      next[i] /= static_cast<double>(n);
      moved = std::max(moved, std::fabs(next[i] - f.weights[i]));
    }
    f.mean_log_likelihood = ll / static_cast<double>(n);  // of the weights before this step
    f.weights = next;
    if (moved <= tol) break;
  }
  f.iterations = std::min(f.iterations, max_iterations);
  return f;
}

SLM_INLINE result<std::vector<double>> routing_weights(std::size_t members, std::span<const std::size_t> ranked,
                                                   std::span<const double> scores, routing r,
                                                   router_scores kind) {
  const std::size_t need = r == routing::top1 ? 1 : 2;
  if (ranked.size() < need || scores.size() != ranked.size())
    return make_error(errc::invalid_argument, "routing: ", ranked.size(), " ranked members and ", scores.size(),
                      " scores; top-", need, " needs ", need, " of each");
  for (std::size_t k = 0; k < need; ++k) {
    if (ranked[k] >= members)
      return make_error(errc::out_of_range, "routing: rank ", k, " names member ", ranked[k], " of ", members);
    if (!std::isfinite(scores[k]) || (kind == router_scores::probabilities && scores[k] < 0.0))
      return make_error(errc::invalid_argument, "routing: score ", scores[k], " at rank ", k);
  }
  std::vector<double> w(members, 0.0);
  if (r == routing::top1 || ranked[0] == ranked[1]) {
    w[ranked[0]] = 1.0;
    return w;
  }
  double a = scores[0], b = scores[1];
  if (kind == router_scores::logits) {
    const double m = std::max(a, b);
    a = std::exp(a - m);
    b = std::exp(b - m);
  }
  if (!(a + b > 0.0)) return make_error(errc::invalid_argument, "routing: the two best scores sum to 0");
  w[ranked[0]] = a / (a + b);
  w[ranked[1]] = b / (a + b);
  return w;
}

SLM_INLINE result<std::size_t> shared_vocab(std::span<const member_ref> members, std::size_t requested) {
  if (members.empty()) return make_error(errc::invalid_argument, "mixture: no members");
  const tokenizer* tok = nullptr;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (!members[i].model) return make_error(errc::invalid_argument, "mixture: member ", i, " has no model");
    if (members[i].tok && tok && members[i].tok != tok)
      return make_error(errc::invalid_argument, "mixture: member ", i, " (", members[i].name,
                        ") does not share the tokenizer of the members before it");
    if (members[i].tok) tok = members[i].tok;
  }
  std::size_t vocab = requested;
  if (vocab == 0 && tok) vocab = tok->vocab_size();
  if (vocab == 0) {
    vocab = members[0].model->vocab();
    for (std::size_t i = 1; i < members.size(); ++i)
      if (members[i].model->vocab() != vocab)
        return make_error(errc::invalid_argument, "mixture: member ", i, " (", members[i].name, ") has ",
                          members[i].model->vocab(), " logit rows, member 0 has ", vocab,
                          "; without a shared tokenizer the rows must match (or set the vocabulary)");
  }
  for (std::size_t i = 0; i < members.size(); ++i)
    if (members[i].model->vocab() < vocab)
      return make_error(errc::invalid_argument, "mixture: member ", i, " (", members[i].name, ") has ",
                        members[i].model->vocab(), " logit rows, fewer than the shared vocabulary of ", vocab);
  return vocab;
}

SLM_INLINE result<mixture_result> generate_mixture(std::span<const member_ref> members, std::span<const double> weights,
                                               std::span<const std::int32_t> prompt, const mixture_options& o,
                                               compute_context& cx) {
  const auto t0 = std::chrono::steady_clock::now();
  auto vocab = shared_vocab(members, o.vocab);
  if (!vocab.ok()) return std::move(vocab).take_error();
  if (weights.size() != members.size())
    return make_error(errc::invalid_argument, "mixture: ", weights.size(), " weights for ", members.size(), " members");
  auto w = normalized_weights(weights);
  if (!w.ok()) return std::move(w).take_error();
  if (prompt.empty()) return make_error(errc::invalid_argument, "mixture: an empty prompt");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || static_cast<std::size_t>(prompt[i]) >= *vocab)
      return make_error(errc::out_of_range, "mixture: prompt token ", prompt[i], " at index ", i,
                        " is outside the vocabulary [0, ", *vocab, ")");
  SLM_TRY(validate(o.sampling, *vocab));

  // The members that run: positive weight.
  std::vector<double> live_w, live_t;
  std::vector<member_session> sessions;
  std::vector<std::vector<float>> rows;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if ((*w)[i] == 0.0) continue;
    const double t = o.calibrated ? static_cast<double>(members[i].temperature) : 1.0;
    SLM_TRY(check_temperature(t, i));
    live_w.push_back((*w)[i]);
    live_t.push_back(t);
    sessions.push_back(members[i].model->new_session(o.session));
    rows.emplace_back(members[i].model->vocab());
  }
  auto mixture = token_mixture::create(live_w, live_t, *vocab);
  if (!mixture.ok()) return std::move(mixture).take_error();
  for (const member_session& s : sessions)
    if (prompt.size() > s.max_tokens())
      return make_error(errc::out_of_range, "mixture: the prompt has ", prompt.size(),
                        " tokens, more than a member's context of ", s.max_tokens());

  const auto feed = [&](std::span<const std::int32_t> ids) -> status {
    for (std::size_t k = 0; k < sessions.size(); ++k) {
      if (cx.cancel && cx.cancel->cancelled()) return make_error(errc::cancelled, "cancelled");
      SLM_TRY(sessions[k].forward(ids, 1, rows[k].data(), cx));
    }
    return {};
  };
  SLM_TRY(feed(prompt));

  mixture_result r;
  sampler smp(o.sampling);
  std::vector<std::int32_t> history(prompt.begin(), prompt.end());
  std::vector<std::span<const float>> views(rows.begin(), rows.end());
  std::vector<double> log_p(*vocab);
  std::vector<float> row(*vocab);
  for (std::size_t i = 0; i < o.max_new_tokens; ++i) {
    SLM_TRY(mixture->logits(views, log_p, row));
    auto id = smp.sample(row, history);
    if (!id.ok()) return std::move(id).take_error().with_context(cat("mixture: token ", i));
    if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), *id) != o.stop_tokens.end()) {
      r.reason = stop_reason::stop_token;
      r.stop_token = *id;
      break;
    }
    r.tokens.push_back(*id);
    r.log_probs.push_back(log_p[static_cast<std::size_t>(*id)]);
    history.push_back(*id);
    if (i + 1 == o.max_new_tokens) break;
    bool full = false;
    for (const member_session& s : sessions) full |= s.position() + 1 > s.max_tokens();
    if (full) {
      r.reason = stop_reason::context_full;
      break;
    }
    if (status st = feed(std::span<const std::int32_t>(&*id, 1)); !st.ok()) {
      if (st.code() == errc::cancelled) {
        r.reason = stop_reason::cancelled;
        break;
      }
      return std::move(st).with_context(cat("mixture: token ", i));
    }
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

SLM_INLINE result<mixture_result> generate_routed(std::span<const member_ref> members, std::span<const std::size_t> ranked,
                                              std::span<const double> scores, routing how, router_scores kind,
                                              std::span<const std::int32_t> prompt, const mixture_options& o,
                                              compute_context& cx) {
  auto w = routing_weights(members.size(), ranked, scores, how, kind);
  if (!w.ok()) return std::move(w).take_error();
  return generate_mixture(members, *w, prompt, o, cx);
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
