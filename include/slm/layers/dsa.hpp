// slm/layers/dsa.hpp - DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2).
//
// For each query token t the indexer scores every visible key j with a few small heads
// and keeps the index_topk best; the main attention then attends to those keys only:
//
//   qI[t]   = wq_b(q_latent[t])                 [IH, ID]   (q_latent: MLA's normalized q_a_proj output)
//   kI[j]   = LayerNorm(wk(x[j]))               [ID]       (cached: the indexer's key cache)
//   RoPE on the first qk_rope_head_dim values of each, half-split pairing (MLA itself
//   pairs interleaved; DeepSeek's reference fixed exactly this mismatch in Nov 2025)
//   w[t]    = weights_proj(x[t]) / sqrt(IH)     [IH]
//   I(t, j) = sum_h w[t,h] * relu(qI[t,h] . kI[j] / sqrt(ID))
//   keys(t) = the index_topk largest I(t, j), j <= t (all of them while t < index_topk)
//
// transformers computes the same in float32 (its comment: DeepSeek's Hadamard rotation
// preserves the dot products and the FP8 scoring is a precision optimization).
// Ties at the top-k boundary are resolved as torch.topk resolves them on CPU (see select).
//
// Megatron flavour (NAM56R, spec nam56r.md §2.3; models/nam56r/bind.hpp): qI = wq_b(c^q) on the raw
// q latent (Megatron MLA has no latent norms), LayerNorm eps 1e-5 on the key, RoPE over
// the whole indexer head with adjacent pairs (2i, 2i+1) as Megatron MLA pairs, weights
// scaled by IH^-1/2 ID^-1/2 outside the ReLU (the same value: ReLU is positively
// homogeneous), optionally no ReLU (use_relu; Megatron HEAD's dsa_indexer_scoring_relu).
// Megatron's optional Hadamard rotation of q and k is orthonormal, so it leaves every
// qI . kI unchanged up to rounding: it is skipped. The scoring and the top-k choice are
// free functions (dsa_index_score, dsa_select_top_k) so tests can feed golden inputs.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "slm/layers/attention.hpp"
#include "slm/core/buffer.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/norm.hpp"
#include "slm/layers/rope.hpp"
#include "slm/core/status.hpp"

namespace slm {

// I(t, s) for one query and one key: sum_h w[h] * act(dot_scale * (q[h] . k)), act = ReLU
// when relu (else identity); q [IH, ID] (rotated), w [IH] (already scaled), k [ID].
float dsa_index_score(const float* q, const float* w, const float* k, std::size_t IH, std::size_t ID,
                      float dot_scale, bool relu) noexcept;

// The causal top-k of one query: score [n_all] over the keys of the call, the first
// `visible` of them visible; out [top_k] gets the chosen key indices, -1 where fewer than
// top_k keys are visible (all of them are then chosen). pairs: scratch of n_all.
// torch.topk's CPU selection (aten TopKImpl.h): (score, index) pairs over every key of
// the call, future keys at float32's lowest (transformers adds finfo.min as the causal
// mask), then nth_element (or partial_sort when k * 64 <= n) with "larger score first".
// Exact-zero ties (ReLU) are common, and this is the only tie order that reproduces
// transformers' sparse pattern. stable_ties instead ranks equal scores by key index (lower
// first): a total order, so the chosen set does not depend on how many future keys the
// call holds, and a prefill selects exactly what token-by-token decoding selects (the
// Megatron flavour's choice: GPU top-k order is unspecified anyway).
void dsa_select_top_k(const float* score, std::size_t visible, std::size_t n_all, std::size_t top_k,
                      std::pair<float, std::int64_t>* pairs, std::int32_t* out,
                      bool stable_ties = false) noexcept;

struct lightning_indexer {
  linear wq_b, wk, weights_proj;
  layer_norm k_norm;
  rope_table rope;
  std::size_t n_heads = 0, head_dim = 0, top_k = 0;
  float weight_scale = 1.0f;      // on weights_proj's output
  float dot_scale = 1.0f;         // on q . k, inside the ReLU
  bool use_relu = true;
  bool interleaved_rope = false;  // Megatron: adjacent pairs over the whole head
  bool stable_ties = false;       // Megatron: ties by key index (dsa_select_top_k)

  // Appends the keys of x [T, d] (positions keys.n..) to `keys` and writes, per query,
  // top_k selected key indices to sel [T, top_k] (-1 where fewer keys are visible).
  status select(const float* x, const float* q_latent, std::size_t T, kv_rows& keys, std::size_t& n_keys,
                std::int32_t* sel, floats& scratch, compute_context& cx) const;
};

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE float dsa_index_score(const float* q, const float* w, const float* k, std::size_t IH, std::size_t ID,
                                 float dot_scale, bool relu) noexcept {
  float s = 0;
  for (std::size_t h = 0; h < IH; ++h) {
    const float* qh = q + h * ID;
    float dot = 0;
    for (std::size_t i = 0; i < ID; ++i) dot += qh[i] * k[i];
    s += w[h] * (relu ? std::max(dot * dot_scale, 0.0f) : dot * dot_scale);
  }
  return s;
}

SLM_INLINE void dsa_select_top_k(const float* score, std::size_t visible, std::size_t n_all, std::size_t top_k,
                                 std::pair<float, std::int64_t>* pairs, std::int32_t* out, bool stable_ties) noexcept {
  if (visible <= top_k) {  // every visible key
    for (std::size_t j = 0; j < top_k; ++j) out[j] = j < visible ? static_cast<std::int32_t>(j) : -1;
    return;
  }
  using ranked = std::pair<float, std::int64_t>;
  for (std::size_t j = 0; j < n_all; ++j)
    pairs[j] = {j < visible ? score[j] : std::numeric_limits<float>::lowest(), static_cast<std::int64_t>(j)};
  auto larger = [](const ranked& a, const ranked& b) {
    return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
  };
  auto larger_stable = [](const ranked& a, const ranked& b) {
    const bool an = std::isnan(a.first), bn = std::isnan(b.first);
    if (an != bn) return an;
    if (!an && a.first != b.first) return a.first > b.first;
    return a.second < b.second;
  };
  const std::size_t kept = std::min(top_k, n_all);
  if (stable_ties) std::nth_element(pairs, pairs + (kept - 1), pairs + n_all, larger_stable);
  else if (kept * 64 <= n_all) std::partial_sort(pairs, pairs + kept, pairs + n_all, larger);
  else std::nth_element(pairs, pairs + (kept - 1), pairs + n_all, larger);
  for (std::size_t j = 0; j < top_k; ++j)
    out[j] = j < kept && static_cast<std::size_t>(pairs[j].second) < visible ? static_cast<std::int32_t>(pairs[j].second)
                                                                            : -1;
}

SLM_INLINE status lightning_indexer::select(const float* x, const float* q_latent, std::size_t T, kv_rows& keys,
                                            std::size_t& n_keys, std::int32_t* sel, floats& scratch,
                                            compute_context& cx) const {
  const std::size_t IH = n_heads, ID = head_dim, pos0 = n_keys;
  if (keys.capacity() < pos0 + T) SLM_TRY(keys.reserve(std::max(pos0 + T, 2 * keys.capacity())));
  const std::size_t n_all = pos0 + T;  // keys of this call, visible or not
  using ranked = std::pair<float, std::int64_t>;  // (score, key), as torch.topk ranks them
  static_assert(sizeof(ranked) == 4 * sizeof(float) && alignof(ranked) <= 4 * sizeof(float));
  // Floats before the ranked pairs, rounded up to whole pairs so they stay aligned.
  const std::size_t head = (T * IH * ID + T * ID + T * IH + n_all + std::max(rope.rotary_dim, ID) + 3) / 4 * 4;
  SLM_TRY(scratch.resize(head + 4 * n_all));
  float* q = scratch.data();    // [T, IH, ID]
  float* k = q + T * IH * ID;   // [T, ID]
  float* w = k + T * ID;        // [T, IH]
  float* score = w + T * IH;    // [n_all]
  float* rope_tmp = score + n_all;
  auto* pairs = reinterpret_cast<ranked*>(scratch.data() + head);  // [n_all]
  SLM_TRY(wq_b.apply(q_latent, T, q, cx));       // [T, q_lora] x [q_lora, IH*ID] -> [T, IH*ID]
  SLM_TRY(wk.apply(x, T, k, cx));                // [T, d] x [d, ID] -> [T, ID]
  SLM_TRY(weights_proj.apply(x, T, w, cx));      // [T, d] x [d, IH] -> [T, IH]
  for (std::size_t t = 0; t < T; ++t) {
    k_norm.apply_row(k + t * ID, k + t * ID, ID);
    if (interleaved_rope) {
      apply_rope<rope_interleaved>(rope, pos0 + t, k + t * ID, 1, ID, rope_tmp);
      apply_rope<rope_interleaved>(rope, pos0 + t, q + t * IH * ID, IH, ID, rope_tmp);
    } else {
      apply_rope<rope_half_split>(rope, pos0 + t, k + t * ID, 1, ID, rope_tmp);
      apply_rope<rope_half_split>(rope, pos0 + t, q + t * IH * ID, IH, ID, rope_tmp);
    }
    keys.store(pos0 + t, k + t * ID);
    for (std::size_t h = 0; h < IH; ++h) w[t * IH + h] *= weight_scale;
  }
  n_keys = pos0 + T;
  for (std::size_t t = 0; t < T; ++t) {
    const std::size_t visible = pos0 + t + 1;
    if (visible > top_k) {
      for (std::size_t j = 0; j < visible; ++j) {
        if (keys.type == kv_dtype::f32) {
          score[j] = dsa_index_score(q + t * IH * ID, w + t * IH, keys.f32_data() + j * ID, IH, ID, dot_scale, use_relu);
        } else {
          const std::uint16_t* kj = keys.bf16_data() + j * ID;
          for (std::size_t i = 0; i < ID; ++i) rope_tmp[i] = bf16_to_f32(kj[i]);
          score[j] = dsa_index_score(q + t * IH * ID, w + t * IH, rope_tmp, IH, ID, dot_scale, use_relu);
        }
      }
    }
    dsa_select_top_k(score, visible, n_all, top_k, pairs, sel + t * top_k, stable_ties);
  }
  return {};
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
