// slm/layers/mla.hpp - Multi-head Latent Attention (DeepSeek-V2/V3), optionally sparse (DSA).
//
//   q        = q_b(RMSNorm(q_a(x)))  or q_proj(x)       [H, nope + rope]
//   [c, kr]  = kv_a_proj_with_mqa(x)                    [kv_lora], [rope]
//   c        = RMSNorm(c)                               cached: the latent KV cache
//   kr       = RoPE(kr), q[:, nope:] = RoPE(...)        cached: one RoPE key shared by all heads
//   [kn, v]  = kv_b(c)                                  [H, nope], [H, v_dim] per key
//   score    = (q_nope . kn + q_rope . kr) * qk_head_dim^-0.5 (* YaRN mscale^2)
//
// The cache holds only c and kr per position ((kv_lora + rope) values, 576 for
// DeepSeek-V3, instead of H x (nope + rope + v)). Two ways to attend, same math:
//  * expanded: kv_b expands every cached latent into per-head keys and values, then
//    ordinary attention. Cheap for prefill (the expansion is one GEMM over the prompt).
//  * absorbed: kv_b's key half is folded into the query (q_lat_h = Wkb_h^T q_nope_h, so
//    q_nope . kn = q_lat_h . c) and its value half applied after attention (out_h =
//    Wvb_h o_lat_h): attention runs in the latent space and a decode step reads the
//    latent cache once instead of expanding it. The default for decode.
// Tests check that both give the same logits.
//
// Megatron flavour (NAM56R, spec nam56r.md §2.2; models/nam56r/bind.hpp): linear_q_down_proj /
// linear_q_up_proj / linear_kv_down_proj / linear_kv_up_proj / linear_proj in the roles of
// q_a / q_b / kv_a / kv_b / o, no latent norms (latent_norms = false), adjacent-pair RoPE
// (rope_interleaved, base rotary_base, no YaRN), softmax scale 1/sqrt(nope + rope).
// Megatron stores the rotated lanes de-interleaved; that permutation is the same for q and
// k and changes no dot product. IndexCache (spec §2.3): a forward can hand its DSA top-k
// out (sel_out) or take another layer's instead of running its own indexer (shared_sel).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "slm/layers/attention.hpp"
#include "slm/core/buffer.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/layers/dsa.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/norm.hpp"
#include "slm/layers/rope.hpp"
#include "slm/core/status.hpp"

namespace slm {

enum class mla_mode : std::uint8_t {
  automatic,  // expanded for prompts (T > 1), absorbed for single-token decode
  expanded,
  absorbed,
};

// Rope: the pairing of the RoPE part (DeepSeek: rope_interleaved), or rope_by_config.
template <rope_policy Rope = rope_by_config>
struct basic_mla_attention {
  linear q_a, q_b, q_proj, kv_a, kv_b, o;  // q_a/q_b when q_lora_rank > 0, else q_proj
  rms_norm q_a_norm, kv_a_norm;
  rope_table rope;
  bool interleave = true;
  std::size_t n_heads = 0, nope = 0, rope_dim = 0, v_dim = 0, kv_lora = 0, q_lora = 0;
  float scale = 1.0f;
  bool latent_norms = true;  // q_a_norm / kv_a_norm applied (DeepSeek); Megatron MLA has none
  std::optional<lightning_indexer> indexer;  // DSA layers

  struct cache {
    kv_rows latent;      // [positions, kv_lora]
    kv_rows k_rope;      // [positions, rope_dim]
    kv_rows index_keys;  // DSA: [positions, index_head_dim]
    std::size_t n = 0, n_index = 0;
    mla_mode mode = mla_mode::automatic;
    std::size_t size() const noexcept { return n; }
    void truncate(std::size_t len) noexcept {
      n = std::min(n, len);
      n_index = std::min(n_index, len);
    }
    // Session state (models/hf/model.hpp): any truncation is exact. `mode` belongs to the session
    // (session_options::mla) and is neither copied nor saved.
    bool can_truncate(std::size_t) const noexcept { return true; }
    std::size_t rollback_limit() const noexcept { return n; }
    std::string_view kind() const noexcept { return "mla"; }
    void fingerprint(state_hasher& h) const {
      h.add(static_cast<std::uint64_t>(latent.type));
      h.add(latent.width);
      h.add(k_rope.width);
      h.add(index_keys.width);
    }
    // Into a cache initialized for the same layer and KV dtype: the rows in use only.
    status copy_from(const cache& src) {
      SLM_TRY(latent.copy_from(src.latent, src.n));
      SLM_TRY(k_rope.copy_from(src.k_rope, src.n));
      SLM_TRY(index_keys.copy_from(src.index_keys, src.n_index));
      n = src.n;
      n_index = src.n_index;
      return {};
    }
    // u64 n, u64 n_index, latents, RoPE keys (n rows each), DSA index keys (n_index rows,
    // n_index = n with an indexer, else 0); each a rows block.
    status save(state_writer& w) const {
      SLM_TRY(w.u64(n));
      SLM_TRY(w.u64(n_index));
      SLM_TRY(latent.save(w, n));
      SLM_TRY(k_rope.save(w, n));
      return index_keys.save(w, n_index);
    }
    status load(state_reader& r) {
      std::size_t rows = 0, rows_index = 0;
      SLM_TRY(r.size(rows, "cached positions"));
      SLM_TRY(r.size(rows_index, "indexed positions"));
      const std::size_t expect_index = index_keys.width ? rows : 0;
      if (rows_index != expect_index)
        return make_error(errc::format_error, "", rows_index, " indexer keys for ", rows,
                          " positions, expected ", expect_index);
      SLM_TRY(latent.load(r, rows, "latents"));
      SLM_TRY(k_rope.load(r, rows, "RoPE keys"));
      SLM_TRY(index_keys.load(r, rows_index, "indexer keys"));
      n = rows;
      n_index = rows_index;
      return {};
    }
  };

  template <class Options>
  status init_cache(cache& kc, const Options& opt) const {
    SLM_TRY(init_cache(kc, opt.kv, opt.reserve_tokens));
    kc.mode = opt.mla;
    return {};
  }
  status init_cache(cache& kc, kv_dtype type, std::size_t reserve_tokens) const {
    kc.latent.type = kc.k_rope.type = type;
    // The indexer's keys stay f32 whatever the KV dtype: its top-k choice is discrete, and
    // bf16 keys would flip near-ties (ReLU makes exact ties common); they are small
    // (index_head_dim per position).
    kc.index_keys.type = kv_dtype::f32;
    kc.latent.width = kv_lora;
    kc.k_rope.width = rope_dim;
    kc.index_keys.width = indexer ? indexer->head_dim : 0;
    kc.n = kc.n_index = 0;
    SLM_TRY(kc.latent.reserve(reserve_tokens));
    SLM_TRY(kc.k_rope.reserve(reserve_tokens));
    if (indexer) SLM_TRY(kc.index_keys.reserve(reserve_tokens));
    return {};
  }

  status forward(const float* x, std::size_t T, float* out, cache& kc, workspace& ws, compute_context& cx) const {
    return forward(x, T, out, kc, ws.proj, ws.attn, ws.index, cx, kc.mode);
  }

  // x [T, d] at positions kc.n.. -> out [T, d]; appends T positions to the cache.
  // IndexCache hooks (DSA): sel_out [T, indexer->top_k] receives this layer's top-k;
  // shared_sel [T, shared_k] (another layer's top-k of the same positions) replaces this
  // layer's indexer, which then does not run (and caches no indexer keys).
  status forward(const float* x, std::size_t T, float* out, cache& kc, floats& scratch, floats& attn_scratch,
                 floats& index_scratch, compute_context& cx, mla_mode mode, const std::int32_t* shared_sel = nullptr,
                 std::size_t shared_k = 0, std::int32_t* sel_out = nullptr) const {
    const std::size_t H = n_heads, qk = nope + rope_dim, pos0 = kc.n, n_keys = pos0 + T;
    const bool run_indexer = indexer && !shared_sel;
    const bool absorbed = mode == mla_mode::absorbed || (mode == mla_mode::automatic && T == 1);
    if (kc.latent.capacity() < n_keys) {
      SLM_TRY(kc.latent.reserve(std::max(n_keys, 2 * kc.latent.capacity())));
      SLM_TRY(kc.k_rope.reserve(std::max(n_keys, 2 * kc.k_rope.capacity())));
    }
    const std::size_t top_k = run_indexer ? indexer->top_k : 0;
    const std::size_t attn_out = absorbed ? H * kv_lora : H * v_dim;
    // expanded: per-head keys and values of every cached position; absorbed: the queries.
    const std::size_t expand = absorbed ? T * H * kv_lora : n_keys * H * (nope + v_dim);
    // An expanded attention over a bf16 cache reads f32 copies of it.
    const bool convert = !absorbed && kc.latent.type == kv_dtype::bf16;
    const std::size_t conv = convert ? n_keys * (kv_lora + rope_dim) : 0;
    SLM_TRY(scratch.resize(T * q_lora + T * H * qk + T * (kv_lora + rope_dim) + expand + T * attn_out +
                           T * H * v_dim + T * top_k + rope.rotary_dim + kv_lora + conv));
    float* q_latent = scratch.data();            // [T, q_lora]
    float* q = q_latent + T * q_lora;            // [T, H, qk]
    float* kv = q + T * H * qk;                  // [T, kv_lora + rope]
    float* ex = kv + T * (kv_lora + rope_dim);   // expanded K/V, or absorbed queries
    float* att = ex + expand;                    // [T, H, v_dim] or [T, H, kv_lora]
    float* heads = att + T * attn_out;           // absorbed: [T, H, v_dim]
    auto* sel = reinterpret_cast<std::int32_t*>(heads + T * H * v_dim);  // [T, top_k]
    float* rope_tmp = reinterpret_cast<float*>(sel + T * top_k);
    float* row = rope_tmp + rope.rotary_dim;     // one dequantized kv_b row [kv_lora]
    float* conv_latent = row + kv_lora;          // bf16 cache, expanded: [n_keys, kv_lora]
    float* conv_rope = conv_latent + n_keys * kv_lora;  // and [n_keys, rope]
    static_assert(sizeof(std::int32_t) == sizeof(float));

    if (q_lora > 0) {
      SLM_TRY(q_a.apply(x, T, q_latent, cx));                       // [T, d] x [d, q_lora] -> [T, q_lora]
      if (latent_norms) q_a_norm.apply(q_latent, T, q_lora, q_lora, q_latent, q_lora);
      SLM_TRY(q_b.apply(q_latent, T, q, cx));                       // [T, q_lora] x [q_lora, H*qk] -> [T, H*qk]
    } else {
      SLM_TRY(q_proj.apply(x, T, q, cx));                           // [T, d] x [d, H*qk] -> [T, H*qk]
    }
    SLM_TRY(kv_a.apply(x, T, kv, cx));                              // [T, d] x [d, kv_lora+rope] -> [T, kv_lora+rope]
    for (std::size_t t = 0; t < T; ++t) {
      float* kvt = kv + t * (kv_lora + rope_dim);
      if (latent_norms) kv_a_norm.apply_row(kvt, kvt, kv_lora);
      apply_rope<Rope>(rope, interleave, pos0 + t, kvt + kv_lora, 1, rope_dim, rope_tmp);
      apply_rope<Rope>(rope, interleave, pos0 + t, q + t * H * qk + nope, H, qk, rope_tmp);
      kc.latent.store(pos0 + t, kvt);
      kc.k_rope.store(pos0 + t, kvt + kv_lora);
    }
    kc.n = n_keys;
    if (run_indexer) {
      SLM_TRY(indexer->select(x, q_latent, T, kc.index_keys, kc.n_index, sel, index_scratch, cx));
      if (sel_out) std::copy(sel, sel + T * top_k, sel_out);
    }

    attention_problem p;
    p.T = T;
    p.H = H;
    p.group = 1;  // per-head keys (expanded); shared ones (latent, RoPE key) have head stride 0
    p.pos0 = pos0;
    p.scale = scale;
    p.q2 = q + nope; p.q2_tok = H * qk; p.q2_head = qk; p.d2 = rope_dim;
    p.k2 = kv_view::of(kc.k_rope, 0, 0);
    if (run_indexer) {
      p.selected = sel;
      p.sel_stride = p.n_selected = top_k;
    } else if (shared_sel) {
      p.selected = shared_sel;
      p.sel_stride = p.n_selected = shared_k;
    }
    if (absorbed) {
      // q_lat[t, h] = Wkb_h^T q_nope[t, h]: [nope] x [nope, kv_lora] -> [kv_lora] per head,
      // reading kv_b's rows once per call (a transposed product: no matmul kernel for it).
      std::fill(ex, ex + T * H * kv_lora, 0.0f);
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t i = 0; i < nope; ++i) {
          dequantize_row(kv_b.w, h * (nope + v_dim) + i, std::span<float>(row, kv_lora));
          for (std::size_t t = 0; t < T; ++t) {
            const float qi = q[t * H * qk + h * qk + i];
            float* ql = ex + (t * H + h) * kv_lora;
            for (std::size_t r = 0; r < kv_lora; ++r) ql[r] += qi * row[r];
          }
        }
      p.q1 = ex; p.q1_tok = H * kv_lora; p.q1_head = kv_lora; p.d1 = kv_lora;
      p.k1 = kv_view::of(kc.latent, 0, 0);
      p.v = kv_view::of(kc.latent, 0, 0);
      p.dv = kv_lora;
      p.out = att; p.out_tok = H * kv_lora; p.out_head = kv_lora;
      SLM_TRY(attend(p, attn_scratch, cx));
      // heads[t, h] = Wvb_h o_lat[t, h]: [T, kv_lora] x [kv_lora, v_dim] -> [T, v_dim] per head.
      for (std::size_t h = 0; h < H; ++h) {
        auto wv = slice_rows(kv_b.w, h * (nope + v_dim) + nope, v_dim);
        if (!wv.ok()) return std::move(wv).take_error();
        SLM_TRY(matmul(*wv, att + h * kv_lora, T, H * kv_lora, heads + h * v_dim, H * v_dim, cx.ex, isa::best,
                       product_precision(*wv, cx)));
      }
      cx.weight_bytes += weight_bytes(kv_b.w);
      cx.product_flops += 2 * static_cast<std::uint64_t>(T) * H * (nope + v_dim) * kv_lora;  // both halves of kv_b
      return o.apply(heads, T, out, cx);                            // [T, H*v] x [H*v, d] -> [T, d]
    }
    // Expanded: every cached latent through kv_b.
    const float* latent = kc.latent.f32_data();
    if (convert) {
      for (std::size_t i = 0; i < n_keys * kv_lora; ++i) conv_latent[i] = bf16_to_f32(kc.latent.bf16_data()[i]);
      for (std::size_t i = 0; i < n_keys * rope_dim; ++i) conv_rope[i] = bf16_to_f32(kc.k_rope.bf16_data()[i]);
      latent = conv_latent;
      p.k2 = kv_view::of(conv_rope, rope_dim, 0);
    }
    SLM_TRY(kv_b.apply(latent, n_keys, ex, cx));                    // [n, kv_lora] x [kv_lora, H*(nope+v)] -> [n, H*(nope+v)]
    p.q1 = q; p.q1_tok = H * qk; p.q1_head = qk; p.d1 = nope;
    p.k1 = kv_view::of(ex, H * (nope + v_dim), nope + v_dim);
    p.v = kv_view::of(ex + nope, H * (nope + v_dim), nope + v_dim);
    p.dv = v_dim;
    p.out = att; p.out_tok = H * v_dim; p.out_head = v_dim;
    SLM_TRY(attend(p, attn_scratch, cx));
    return o.apply(att, T, out, cx);                                // [T, H*v] x [H*v, d] -> [T, d]
  }

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    if (q_lora > 0) {
      fn("q_a_proj", q_a, true);
      fn("q_b_proj", q_b, true);
    } else {
      fn("q_proj", q_proj, true);
    }
    fn("kv_a_proj_with_mqa", kv_a, true);
    fn("kv_b_proj", kv_b, true);
    fn("o_proj", o, true);
    if (indexer) {
      fn("indexer.wq_b", indexer->wq_b, true);
      fn("indexer.wk", indexer->wk, true);
      fn("indexer.weights_proj", indexer->weights_proj, false);  // a score weighting, kept precise
    }
  }
};

using mla_attention = basic_mla_attention<>;

}  // namespace slm
