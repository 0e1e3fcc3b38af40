// slm/models/nanochat/block.hpp - what a nanochat block runs around the layer stack's two
// slots (models/stack.hpp's block policy; nanochat `gpt.py` Block.forward):
//
//   before:  x = resid_lambda x + x0_lambda x0                  (x0: the normed embeddings)
//   slots:   x_attn = x + Mixer(rms(x));  base = x_attn + MLP(rms(x_attn))
//   after:   Engram layers:  eng = base + Engram(rms(x))         (layers/engram.hpp)
//            mHC layers:     x = mix([base, x, (eng)])           (layers/mhc.hpp)
//            else            x = eng or base
//
// where x in the last two lines is the block's input after the lambdas, which before()
// keeps. The norms are nanochat's parameter-free RMSNorm with f32 machine epsilon
// (rms_row below; nanochat_norm() is the same norm as a stack slot's block_norm).
//
// Per layer, beside the mixer's cache, a sequence keeps the Engram branch's n-gram history
// (a recurrent cache) and the mHC branch rows of every position so far: mHC pools each
// call over positions [0, pos0 + T), the call's included (models/nanochat/model.hpp says
// what that means for a session).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <span>

#include "slm/core/buffer.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/layers/engram.hpp"
#include "slm/layers/mhc.hpp"
#include "slm/layers/norm.hpp"

namespace slm {

namespace detail::nanochat {

inline constexpr float softcap = 15.0f;
inline constexpr float eps = std::numeric_limits<float>::epsilon();  // F.rms_norm(eps=None) in f32

// Parameter-free RMSNorm of one row (f32 machine epsilon); in and out may alias.
void rms_row(const float* in, float* out, std::size_t d) noexcept;
inline void rms_rows(const float* in, std::size_t T, std::size_t d, float* out) noexcept {
  for (std::size_t t = 0; t < T; ++t) rms_row(in + t * d, out + t * d, d);
}

}  // namespace detail::nanochat

// The same norm as a stack slot's norm: rms_norm without a weight computes exactly what
// rms_row computes (layers/norm.hpp).
inline block_norm nanochat_norm() {
  block_norm n;
  n.rms.kind = norm_weight_kind::none;
  n.rms.eps = detail::nanochat::eps;
  return n;
}

struct nanochat_block {
  struct layer {
    float resid_lambda = 1.0f, x0_lambda = 0.0f;
    bool has_engram = false, has_mhc = false;
    engram_branch engram;
    mhc_mixer mhc;
    std::size_t branches() const noexcept { return has_engram ? 3 : 2; }
  };

  // What one layer keeps across calls beside its mixer's cache.
  struct state {
    engram_branch::cache engram;  // Engram layers: the n-gram history
    floats mhc_hist;              // mHC layers: [positions, N, C] branch rows seen so far
  };

  // One call: x0 [T, C], the first position, every layer's state, and scratch.
  struct context {
    const float* x0 = nullptr;
    std::size_t pos0 = 0;
    std::span<state> layers;
    floats* input = nullptr;   // [T, C] the block's input after the lambdas
    floats* normed = nullptr;  // [T, C] its norm, Engram's input
    floats* eng = nullptr;     // [T, C]
    floats* pooled = nullptr;  // [N, C]
  };

  static status before(const layer& L, std::size_t i, float* x, std::size_t T, std::size_t d, context& c,
                       workspace& ws, compute_context& cx);
  static status after(const layer& L, std::size_t i, float* x, std::size_t T, std::size_t d, context& c,
                      workspace& ws, compute_context& cx);
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE void detail::nanochat::rms_row(const float* in, float* out, std::size_t d) noexcept {
  const float inv = rms_inverse(in, d, eps);
  for (std::size_t i = 0; i < d; ++i) out[i] = in[i] * inv;
}

SLM_INLINE status nanochat_block::before(const layer& L, std::size_t i, float* x, std::size_t T, std::size_t d,
                                         context& c, workspace&, compute_context&) {
  if (!c.x0 || i >= c.layers.size() || !c.input || !c.normed || !c.eng || !c.pooled)
    return make_error(errc::invalid_argument, "nanochat block: the call's context is incomplete");
  for (std::size_t k = 0; k < T * d; ++k) x[k] = L.resid_lambda * x[k] + L.x0_lambda * c.x0[k];
  if (L.has_engram || L.has_mhc) {
    SLM_TRY(c.input->resize(T * d));
    std::copy(x, x + T * d, c.input->data());
  }
  return {};
}

SLM_INLINE status nanochat_block::after(const layer& L, std::size_t i, float* x, std::size_t T, std::size_t d,
                                        context& c, workspace& ws, compute_context& cx) {
  if (!L.has_engram && !L.has_mhc) return {};  // x is base
  state& S = c.layers[i];
  const float* base = x;  // mHC mixes element by element, so its output may overwrite it
  const float* input = c.input->data();
  float* eng = nullptr;
  if (L.has_engram) {
    SLM_TRY(c.normed->resize(T * d));
    SLM_TRY(c.eng->resize(T * d));
    eng = c.eng->data();
    detail::nanochat::rms_rows(input, T, d, c.normed->data());  // the mixer's input, again
    SLM_TRY(L.engram.forward(c.normed->data(), T, eng, S.engram, ws, cx));  // [T, C] -> [T, C]
    for (std::size_t k = 0; k < T * d; ++k) eng[k] += base[k];
  }
  if (!L.has_mhc) {
    std::copy(eng, eng + T * d, x);
    return {};
  }
  const std::size_t N = L.branches(), row = N * d, n = c.pos0 + T;
  const float* br[3] = {base, input, eng};
  // The branch rows of this call join the history, then every branch is pooled over
  // positions [0, pos0 + T).
  if (S.mhc_hist.size() < n * row) SLM_TRY(S.mhc_hist.resize(std::max(n * row, 2 * S.mhc_hist.size())));
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t j = 0; j < N; ++j)
      std::copy(br[j] + t * d, br[j] + (t + 1) * d, S.mhc_hist.data() + (c.pos0 + t) * row + j * d);
  SLM_TRY(c.pooled->resize(row));
  float* pl = c.pooled->data();
  for (std::size_t j = 0; j < N; ++j)
    for (std::size_t col = 0; col < d; ++col) {
      double sum = 0;
      for (std::size_t p = 0; p < n; ++p) sum += S.mhc_hist[p * row + j * d + col];
      pl[j * d + col] = static_cast<float>(sum / static_cast<double>(n));
    }
  float w[3];
  SLM_TRY(L.mhc.weights_from_pooled(pl, N, w, ws, cx));
  L.mhc.mix(std::span<const float* const>(br, N), T, w, x);
  return {};
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
