// slm/layers/mhc.hpp - mHC, the Sinkhorn-normalized branch mixer of the nanochat lineage
// (nanochat `nanochat/mhc.py` ManifoldBranchMixer; spec nam56r.md §2.10). Not part of the
// Megatron NAM56R, and not cppmega's n_streams = 4 hyper-connection config nor the MLX
// mixer (three incompatible "mHC"s exist; this is nanochat's, the one with a runtime).
//
// Sizes: C = n_embd, h = hidden = max(8, min(256, C / 4)), N branches (nanochat's GPT block
// passes [base, x_block_input] or [base, x_block_input, engram_out]: N = 2 or 3), T tokens.
//
// Parameters (nanochat names under `transformer.h.{i}.mhc.`, models/nanochat/bind.hpp; no
// biases):
//   score_proj.weight [h, C]
//   score_out.weight  [1, h]   (zero at training init: uniform weights)
//
// Forward over one sequence, branches B_n [T, C] (B_0 is the base):
//   p_n     = (1/T) sum_t B_n[t]                       [T, C] -> [C]   (mean over ALL T)
//   l_n     = W_out tanh(W_proj p_n)                   [C] x [C, h] -> [h]; [h] x [h, 1] -> [1]
//   M_ab    = (l_a + l_b) / max(tau, eps)              [N, N], f32
//   S       = max(exp(M - max M), eps)                 elementwise
//   repeat sinkhorn_iters times: S_ab /= (sum_b S_ab + eps) (rows), then
//                                S_ab /= (sum_a S_ab + eps) (columns)
//   S_ab   /= (sum_b S_ab + eps)                       a final row normalisation
//   w_n     = (1/N) sum_a S_an,  w_n /= (sum_m w_m + eps)   (1/N each if any S is not finite)
//   mixed   = sum_n w_n B_n                            [N] x [N, T, C] -> [T, C]
//   y       = mixed                                    when alpha = clamp(blend_alpha, 0, 1) == 1
//           = B_0 + alpha (mixed - B_0)                otherwise
// One branch returns B_0 unchanged; more than max_branches (when > 0) is an error.
//
// Inference: the weights depend on the mean over the whole sequence, future tokens
// included (non-causal in training), so there is no exact incremental decode: a decoder
// that wants nanochat's training-time function recomputes p_n over the visible prefix
// (weights_from_pooled() takes the means, so a caller may keep running sums instead of
// re-reading the prefix; the branch outputs of earlier tokens are not recomputed here).
//
// Numerics: f32 as the oracle; the pooled means are summed in double then rounded (torch
// sums f32 in a blocked order: both are within a few ulps of the exact mean); the two
// small products and the Sinkhorn loop follow torch's order. Against the golden data the
// differences are a few f32 ulps, amplified at most by exp (|M| is O(1) here).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/buffer.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/status.hpp"

namespace slm {

struct mhc_config {
  std::size_t n_embd = 0;          // C
  std::size_t sinkhorn_iters = 5;  // nanochat clamps negatives to 0
  double temperature = 1.0;
  double epsilon = 1e-6;
  double blend_alpha = 1.0;        // clamped to [0, 1]
  std::size_t max_branches = 0;    // 0: no limit

  std::size_t hidden() const noexcept { return std::max<std::size_t>(8, std::min<std::size_t>(256, n_embd / 4)); }
  float alpha() const noexcept { return static_cast<float>(std::min(std::max(blend_alpha, 0.0), 1.0)); }
  float tau() const noexcept { return static_cast<float>(std::max(temperature, epsilon)); }

  status validate() const;
};

// nanochat `_sinkhorn` on one [N, N] matrix: raw [N, N] -> transport [N, N] (may alias).
void mhc_sinkhorn(const float* raw, std::size_t N, std::size_t iters, float eps, float* transport) noexcept;

// What weights() can report besides the weights (tests, probes): each [N, N] or null.
struct mhc_detail {
  float* raw = nullptr;        // M
  float* transport = nullptr;  // S after Sinkhorn
  bool* fell_back = nullptr;   // true when S was not finite (uniform weights)
};

class mhc_mixer {
 public:
  mhc_config cfg;
  linear score_proj;  // [h, C]
  linear score_out;   // [1, h]

  // The mixing weights w [N] from the pooled branch means pooled [N, C] (p_n above).
  status weights_from_pooled(const float* pooled, std::size_t N, float* w, workspace& ws, compute_context& cx,
                             const mhc_detail& d = {}) const;

  // The mixing weights w [N] of N branches, each [T, C] (T >= 1; pooled over all T).
  status weights(std::span<const float* const> branches, std::size_t T, float* w, workspace& ws, compute_context& cx,
                 const mhc_detail& d = {}) const;

  // y [T, C] = the mix of N branches [T, C] (see the file comment). y may be one of the
  // branches (each output value is computed from the same position of every branch).
  status forward(std::span<const float* const> branches, std::size_t T, float* y, workspace& ws, compute_context& cx,
                 const mhc_detail& d = {}) const;

  // y [T, C] from given weights w [N] (the second half of forward()).
  void mix(std::span<const float* const> branches, std::size_t T, const float* w, float* y) const noexcept;

  // Branches beyond this are refused whatever max_branches says (the weights live on the
  // stack; nanochat's GPT uses 2 or 3).
  static constexpr std::size_t branch_limit = 64;

  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("score_proj", score_proj, true);
    fn("score_out", score_out, true);
  }

 private:
  status check_n(std::size_t N) const;
  status check_branches(std::span<const float* const> branches, std::size_t T) const;
  // p [C] = mean over t of b [T, C], summed in double.
  void pool(const float* b, std::size_t T, float* p) const noexcept;
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status mhc_config::validate() const {
  if (n_embd == 0) return make_error(errc::invalid_argument, "mhc: n_embd must be positive");
  if (!std::isfinite(temperature) || !std::isfinite(epsilon) || !std::isfinite(blend_alpha))
    return make_error(errc::invalid_argument, "mhc: temperature ", temperature, ", epsilon ", epsilon,
                      " and blend_alpha ", blend_alpha, " must be finite");
  if (epsilon < 0) return make_error(errc::invalid_argument, "mhc: epsilon ", epsilon, " is negative");
  if (!(std::max(temperature, epsilon) > 0))
    return make_error(errc::invalid_argument, "mhc: max(temperature, epsilon) = ", std::max(temperature, epsilon),
                      " must be positive");
  if (sinkhorn_iters > 100000) return make_error(errc::out_of_range, "mhc: ", sinkhorn_iters, " Sinkhorn iterations");
  return {};
}

SLM_INLINE void mhc_sinkhorn(const float* raw, std::size_t N, std::size_t iters, float eps, float* transport) noexcept {
  const std::size_t NN = N * N;
  float mx = raw[0];
  for (std::size_t i = 1; i < NN; ++i) mx = std::max(mx, raw[i]);
  for (std::size_t i = 0; i < NN; ++i) transport[i] = std::max(std::exp(raw[i] - mx), eps);
  const auto rows = [&] {
    for (std::size_t a = 0; a < N; ++a) {
      float s = 0.0f;
      for (std::size_t c = 0; c < N; ++c) s += transport[a * N + c];
      s += eps;
      for (std::size_t c = 0; c < N; ++c) transport[a * N + c] /= s;
    }
  };
  for (std::size_t it = 0; it < iters; ++it) {
    rows();
    for (std::size_t c = 0; c < N; ++c) {
      float s = 0.0f;
      for (std::size_t a = 0; a < N; ++a) s += transport[a * N + c];
      s += eps;
      for (std::size_t a = 0; a < N; ++a) transport[a * N + c] /= s;
    }
  }
  rows();
}

SLM_INLINE status mhc_mixer::weights_from_pooled(const float* pooled, std::size_t N, float* w, workspace& ws,
                                                 compute_context& cx, const mhc_detail& d) const {
  SLM_TRY(check_n(N));
  if (!pooled || !w) return make_error(errc::invalid_argument, "mhc: null pooled means or weights");
  const std::size_t C = cfg.n_embd, h = cfg.hidden();
  if (score_proj.out() != h || score_proj.in() != C || score_out.out() != 1 || score_out.in() != h)
    return make_error(errc::invalid_argument, "mhc: the mixer's weights do not match its config");
  // Scratch: hid [N, h], logit [N], S [N, N].
  SLM_TRY(ws.attn.resize(N * h + N + N * N));
  float* hid = ws.attn.data();
  float* logit = hid + N * h;
  float* S = logit + N;
  SLM_TRY(score_proj.apply(pooled, N, C, hid, h, cx));  // [N, C] x [C, h] -> [N, h]
  for (std::size_t i = 0; i < N * h; ++i) hid[i] = std::tanh(hid[i]);
  SLM_TRY(score_out.apply(hid, N, h, logit, 1, cx));  // [N, h] x [h, 1] -> [N]
  const float tau = cfg.tau(), eps = static_cast<float>(cfg.epsilon);
  for (std::size_t a = 0; a < N; ++a)
    for (std::size_t c = 0; c < N; ++c) S[a * N + c] = (logit[a] + logit[c]) / tau;
  if (d.raw) std::memcpy(d.raw, S, N * N * sizeof(float));
  mhc_sinkhorn(S, N, cfg.sinkhorn_iters, eps, S);
  if (d.transport) std::memcpy(d.transport, S, N * N * sizeof(float));
  bool finite = true;
  for (std::size_t i = 0; i < N * N; ++i) finite = finite && std::isfinite(S[i]);
  if (d.fell_back) *d.fell_back = !finite;
  if (!finite) {
    for (std::size_t n = 0; n < N; ++n) w[n] = 1.0f / static_cast<float>(N);
    return {};
  }
  const float fN = static_cast<float>(N);
  float sum = 0.0f;
  for (std::size_t n = 0; n < N; ++n) {
    float s = 0.0f;
    for (std::size_t a = 0; a < N; ++a) s += S[a * N + n];
    w[n] = s / fN;
    sum += w[n];
  }
  sum += eps;
  for (std::size_t n = 0; n < N; ++n) w[n] /= sum;
  return {};
}

SLM_INLINE status mhc_mixer::weights(std::span<const float* const> branches, std::size_t T, float* w, workspace& ws,
                                     compute_context& cx, const mhc_detail& d) const {
  SLM_TRY(check_branches(branches, T));
  const std::size_t N = branches.size(), C = cfg.n_embd;
  SLM_TRY(ws.index.resize(N * C));
  float* pooled = ws.index.data();
  for (std::size_t n = 0; n < N; ++n) pool(branches[n], T, pooled + n * C);
  return weights_from_pooled(pooled, N, w, ws, cx, d);
}

SLM_INLINE status mhc_mixer::forward(std::span<const float* const> branches, std::size_t T, float* y, workspace& ws,
                                     compute_context& cx, const mhc_detail& d) const {
  SLM_TRY(check_branches(branches, T));
  if (!y) return make_error(errc::invalid_argument, "mhc: null output");
  const std::size_t N = branches.size(), C = cfg.n_embd;
  if (N == 1) {
    if (y != branches[0]) std::memmove(y, branches[0], T * C * sizeof(float));
    return {};
  }
  float w[64];
  SLM_TRY(weights(branches, T, w, ws, cx, d));
  mix(branches, T, w, y);
  return {};
}

SLM_INLINE void mhc_mixer::mix(std::span<const float* const> branches, std::size_t T, const float* w,
                               float* y) const noexcept {
  const std::size_t N = branches.size(), n = T * cfg.n_embd;
  const float alpha = cfg.alpha();
  for (std::size_t i = 0; i < n; ++i) {
    float m = 0.0f;
    for (std::size_t k = 0; k < N; ++k) m += branches[k][i] * w[k];
    const float b0 = branches[0][i];
    y[i] = alpha == 1.0f ? m : b0 + alpha * (m - b0);
  }
}

SLM_INLINE status mhc_mixer::check_n(std::size_t N) const {
  if (N == 0) return make_error(errc::invalid_argument, "mhc: no branches");
  if (cfg.max_branches > 0 && N > cfg.max_branches)
    return make_error(errc::invalid_argument, "mhc: too many branches: got ", N, ", max_branches=", cfg.max_branches);
  if (N > branch_limit)
    return make_error(errc::out_of_range, "mhc: ", N, " branches, at most ", branch_limit);
  return {};
}

SLM_INLINE status mhc_mixer::check_branches(std::span<const float* const> branches, std::size_t T) const {
  SLM_TRY(check_n(branches.size()));
  if (T == 0) return make_error(errc::invalid_argument, "mhc: no tokens (the branch means need T >= 1)");
  for (const float* b : branches)
    if (!b) return make_error(errc::invalid_argument, "mhc: null branch");
  return {};
}

SLM_INLINE void mhc_mixer::pool(const float* b, std::size_t T, float* p) const noexcept {
  const std::size_t C = cfg.n_embd;
  for (std::size_t c = 0; c < C; ++c) {
    double s = 0;
    for (std::size_t t = 0; t < T; ++t) s += b[t * C + c];
    p[c] = static_cast<float>(s / static_cast<double>(T));
  }
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
