// slm/dsa.hpp - DeepSeek Sparse Attention's lightning indexer (DeepSeek-V3.2).
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
#pragma once

#include <algorithm>
#include <limits>
#include <utility>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "slm/attention.hpp"
#include "slm/buffer.hpp"
#include "slm/checkpoint.hpp"
#include "slm/linear.hpp"
#include "slm/model_config.hpp"
#include "slm/norm.hpp"
#include "slm/rope.hpp"
#include "slm/status.hpp"

namespace slm {

struct lightning_indexer {
  linear wq_b, wk, weights_proj;
  layer_norm k_norm;
  rope_table rope;
  std::size_t n_heads = 0, head_dim = 0, top_k = 0;

  static result<lightning_indexer> load(const checkpoint& ck, const std::string& prefix, const model_config& c) {
    lightning_indexer ix;
    ix.n_heads = c.index_heads;
    ix.head_dim = c.index_head_dim;
    ix.top_k = c.index_topk;
    ix.rope = rope_table::make(c.rope, c.qk_rope_dim);
    auto q = load_linear(ck, prefix + ".wq_b", c.index_heads * c.index_head_dim, c.q_lora_rank);
    if (!q.ok()) return std::move(q).take_error();
    auto k = load_linear(ck, prefix + ".wk", c.index_head_dim, c.hidden);
    if (!k.ok()) return std::move(k).take_error();
    auto w = load_linear(ck, prefix + ".weights_proj", c.index_heads, c.hidden);
    if (!w.ok()) return std::move(w).take_error();
    auto nw = load_vector(ck, prefix + ".k_norm.weight", c.index_head_dim);
    if (!nw.ok()) return std::move(nw).take_error();
    auto nb = load_vector(ck, prefix + ".k_norm.bias", c.index_head_dim);
    if (!nb.ok()) return std::move(nb).take_error();
    ix.wq_b = std::move(*q);
    ix.wk = std::move(*k);
    ix.weights_proj = std::move(*w);
    ix.k_norm.weight = std::move(*nw);
    ix.k_norm.bias = std::move(*nb);
    ix.k_norm.eps = 1e-6f;  // fixed in the reference (nn.LayerNorm(head_dim, eps=1e-6))
    return ix;
  }

  // Appends the keys of x [T, d] (positions keys.n..) to `keys` and writes, per query,
  // top_k selected key indices to sel [T, top_k] (-1 where fewer keys are visible).
  status select(const float* x, const float* q_latent, std::size_t T, kv_rows& keys, std::size_t& n_keys,
                std::int32_t* sel, floats& scratch, compute_context& cx) const {
    const std::size_t IH = n_heads, ID = head_dim, pos0 = n_keys;
    if (keys.capacity() < pos0 + T) SLM_TRY(keys.reserve(std::max(pos0 + T, 2 * keys.capacity())));
    const std::size_t n_all = pos0 + T;  // keys of this call, visible or not
    using ranked = std::pair<float, std::int64_t>;  // (score, key), as torch.topk ranks them
    static_assert(sizeof(ranked) == 4 * sizeof(float) && alignof(ranked) <= 4 * sizeof(float));
    // Floats before the ranked pairs, rounded up to whole pairs so they stay aligned.
    const std::size_t head = (T * IH * ID + T * ID + T * IH + n_all + rope.rotary_dim + 3) / 4 * 4;
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
    const float w_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(IH)));
    const float s_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(ID)));
    for (std::size_t t = 0; t < T; ++t) {
      k_norm.apply_row(k + t * ID, k + t * ID, ID);
      apply_rope<rope_half_split>(rope, pos0 + t, k + t * ID, 1, ID, rope_tmp);
      apply_rope<rope_half_split>(rope, pos0 + t, q + t * IH * ID, IH, ID, rope_tmp);
      keys.store(pos0 + t, k + t * ID);
      for (std::size_t h = 0; h < IH; ++h) w[t * IH + h] *= w_scale;
    }
    n_keys = pos0 + T;
    for (std::size_t t = 0; t < T; ++t) {
      const std::size_t visible = pos0 + t + 1;
      std::int32_t* out = sel + t * top_k;
      if (visible <= top_k) {  // every visible key
        for (std::size_t j = 0; j < top_k; ++j) out[j] = j < visible ? static_cast<std::int32_t>(j) : -1;
        continue;
      }
      for (std::size_t j = 0; j < visible; ++j) {
        float s = 0;
        for (std::size_t h = 0; h < IH; ++h) {
          const float* qh = q + (t * IH + h) * ID;
          float dot = 0;
          if (keys.type == kv_dtype::f32) {
            const float* kj = keys.f32_data() + j * ID;
            for (std::size_t i = 0; i < ID; ++i) dot += qh[i] * kj[i];
          } else {
            const std::uint16_t* kj = keys.bf16_data() + j * ID;
            for (std::size_t i = 0; i < ID; ++i) dot += qh[i] * bf16_to_f32(kj[i]);
          }
          s += w[t * IH + h] * std::max(dot * s_scale, 0.0f);
        }
        score[j] = s;
      }
      // torch.topk's CPU selection (aten TopKImpl.h): (score, index) pairs over every key
      // of this call, future keys at float32's lowest (transformers adds finfo.min as
      // the causal mask), then nth_element (or partial_sort when k * 64 <= n) with
      // "larger score first". Exact-zero ties (ReLU) are common, and this is the only
      // tie order that reproduces transformers' sparse pattern.
      for (std::size_t j = 0; j < n_all; ++j)
        pairs[j] = {j < visible ? score[j] : std::numeric_limits<float>::lowest(), static_cast<std::int64_t>(j)};
      auto larger = [](const ranked& a, const ranked& b) {
        return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
      };
      const std::size_t kept = std::min(top_k, n_all);
      if (kept * 64 <= n_all) std::partial_sort(pairs, pairs + kept, pairs + n_all, larger);
      else std::nth_element(pairs, pairs + (kept - 1), pairs + n_all, larger);
      for (std::size_t j = 0; j < top_k; ++j)
        out[j] = j < kept && static_cast<std::size_t>(pairs[j].second) < visible ? static_cast<std::int32_t>(pairs[j].second) : -1;
    }
    return {};
  }
};

}  // namespace slm
