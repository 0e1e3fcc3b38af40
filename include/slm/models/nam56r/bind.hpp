// slm/models/nam56r/bind.hpp - where NAM56R's parts are in its Megatron checkpoint (spec
// nam56r.md §2): the tensor names under each module's prefix, and the sizes each part takes
// from config.json (models/nam56r/model.hpp reads the config and names the prefixes).
//
//   MLA        `decoder.layers.{L}.self_attention`: linear_q_down_proj, linear_q_up_proj,
//              linear_kv_down_proj, linear_kv_up_proj, linear_proj (no latent norms)
//   indexer    `...self_attention.core_attention.indexer`: linear_wq_b, linear_wk, k_norm,
//              linear_weights_proj
//   MoE        `decoder.layers.{L}.mlp`: router (+ expert_bias), experts.linear_fc{1,2}.weight{e},
//              shared_experts.linear_fc{1,2}
//   Mamba-3    `decoder.layers.{L}.mixer.impl.mixer`: state-spaces/mamba's Mamba3 names
//   M2RNN      `decoder.layers.{L}.mixer.impl`: cppmega's M2RNN names
//   n-gram     `embedding.cppmega_ngram_hash`, structure `embedding.cppmega_structure`
//
// A prefix may be empty (the module's bare names, as the component oracles store them).
// Every loader checks each shape against the sizes and names the tensor in its error.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/status.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/formats/quant_config.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/io/shaped_tensor.hpp"
#include "slm/layers/dsa.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/m2rnn.hpp"
#include "slm/layers/mamba3.hpp"
#include "slm/layers/mla.hpp"
#include "slm/layers/mlp.hpp"
#include "slm/layers/moe.hpp"
#include "slm/layers/ngram_embedding.hpp"
#include "slm/layers/structure_embedding.hpp"
#include "slm/models/bind.hpp"

namespace slm::nam56r {

// The DSA indexer's sizes.
struct indexer_config {
  std::size_t hidden = 0, q_lora = 0, n_heads = 0, head_dim = 0, top_k = 0;
  double rotary_base = 10000.0;
  bool use_relu = true;  // Megatron HEAD's dsa_indexer_scoring_relu
};

// The MLA sizes; `indexer` is set on DSA layers.
struct mla_config {
  std::size_t hidden = 0, n_heads = 0, q_lora = 0, kv_lora = 0, nope = 0, rope = 0, v = 0;
  double rotary_base = 10000.0;
  std::optional<indexer_config> indexer;
};

// The MoE sizes.
struct moe_config {
  std::size_t hidden = 0, n_experts = 0, top_k = 0, expert_ffn = 0, shared_ffn = 0;  // shared_ffn 0: none
  bool sigmoid = false;  // moe_router_score_function "sigmoid" (needs router.expert_bias)
  activation act = activation::gelu;
};

// Module prefixes that do not depend on the layer plan.
inline std::string ngram_hash_prefix() { return "embedding.cppmega_ngram_hash"; }
inline std::string structure_prefix() { return "embedding.cppmega_structure"; }
// `decoder.layers.{layer}.mixer.impl` (layer 0-based: NAM56R's R layers 12, 24, 36, 48 are
// 11, 23, 35, 47).
inline std::string m2rnn_prefix(std::size_t layer) { return cat("decoder.layers.", layer, ".mixer.impl"); }


// Whether the checkpoint has the optional embeddings under prefix.
inline bool has_ngram_hash(const checkpoint& ck, std::string_view prefix) {
  return ck.find(join_module(prefix, "hash_mults")) != nullptr;
}
inline bool has_structure_embedding(const checkpoint& ck, std::string_view prefix) {
  return ck.find(join_module(prefix, "component_scales")) != nullptr;
}

// The Megatron indexer: linear_wq_b [IH ID, q_lora], linear_wk [ID, d], k_norm.{weight,
// bias} [ID], linear_weights_proj [IH, d]. RoPE over the whole head with adjacent pairs,
// ties ranked by key index, LayerNorm eps 1e-5, weights scaled by (IH ID)^-1/2.
result<lightning_indexer> load_indexer(const checkpoint& ck, const std::string& prefix, const indexer_config& c);

// Megatron MLA: linear_q_down_proj [q_lora, d], linear_q_up_proj [H (nope + rope), q_lora],
// linear_kv_down_proj [kv_lora + rope, d], linear_kv_up_proj [H (nope + v), kv_lora] (per
// head: nope K rows, then v rows), linear_proj [d, H v]; the indexer under
// core_attention.indexer on DSA layers.
template <rope_policy Rope>
result<basic_mla_attention<Rope>> load_mla(const checkpoint& ck, const std::string& prefix, const mla_config& c);

// Megatron MoELayer: router.weight [E, d], router.expert_bias [E] (sigmoid only),
// experts.linear_fc1.weight{e} [ffn, d] and experts.linear_fc2.weight{e} [d, ffn] (plain,
// ungated experts; Transformer Engine's grouped names carry the expert number after
// "weight", and quantized experts their scales as .weight_scale{e} / .weight_scale_2{e}:
// load_linear_weight's index), shared_experts.linear_fc1 / linear_fc2 (one shared expert,
// no gate). Routing: "softmax" = softmax over the top-k logits = softmax over all, top-k,
// renormalized (softmax_topk, normalized); "sigmoid" = s = sigmoid(l), top-k of
// s + expert_bias, weights s / (sum + 1e-20) (sigmoid_grouped with one group, scaling 1).
template <router_policy Router>
result<basic_moe_ffn<Router>> load_moe(const checkpoint& ck, const std::string& prefix, const moe_config& c);

// state-spaces/mamba's Mamba3 module: in_proj, out_proj, dt_bias, D, B_bias, C_bias,
// B_norm, C_norm, mimo_{x,z,o} (MIMO), norm (outproj_norm).
result<mamba3_mixer> load_mamba3(const checkpoint& ck, std::string_view prefix, const mamba3_config& c);

// cppmega's M2RNN: input_projection, output_projection, conv1d (when the config has a
// conv kernel; a stored conv beside a kernel of 0 is refused), A_log, dt_bias,
// state_weight, D (use_residual), g_norm.
result<m2rnn_mixer> load_m2rnn(const checkpoint& ck, std::string_view prefix, const m2rnn_config& c);

// cppmega's n-gram hash embedding: unified_table (kept as a view: the checkpoint must
// outlive the module), out_proj, hash_mults, hash_bias; the derived buffers
// (table_offsets, table_sizes_t, order_for_table, order_mask) are checked against the
// config when present.
result<ngram_hash_embedding> load_ngram_hash(const checkpoint& ck, std::string_view prefix,
                                             const ngram_hash_config& c);

// cppmega's structure embedding: stacked_emb, component_scales, up_proj.
result<structure_embedding> load_structure_embedding(const checkpoint& ck, std::string_view prefix,
                                                     const structure_embedding_config& c);

// ---- Templates ----

template <rope_policy Rope>
result<basic_mla_attention<Rope>> load_mla(const checkpoint& ck, const std::string& prefix, const mla_config& c) {
  basic_mla_attention<Rope> a;
  a.n_heads = c.n_heads;
  a.nope = c.nope;
  a.rope_dim = c.rope;
  a.v_dim = c.v;
  a.kv_lora = c.kv_lora;
  a.q_lora = c.q_lora;
  a.interleave = true;
  a.latent_norms = false;
  rope_params rp;
  rp.theta = c.rotary_base;
  a.rope = rope_table::make(rp, c.rope);
  a.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.nope + c.rope)));
  if (c.q_lora == 0) return make_error(errc::invalid_argument, "Megatron MLA '", prefix, "': q_lora_rank is 0");
  const std::size_t H = c.n_heads, d = c.hidden, qk = c.nope + c.rope;
  auto take = [&](linear& dst, const char* name, std::size_t out, std::size_t in) {
    return load_linear_into(dst, ck, prefix + name, out, in);
  };
  // [T, d] x [d, q_lora] -> [T, q_lora] x [q_lora, H qk] -> [T, H qk]
  SLM_TRY(take(a.q_a, ".linear_q_down_proj", c.q_lora, d));
  SLM_TRY(take(a.q_b, ".linear_q_up_proj", H * qk, c.q_lora));
  // [T, d] x [d, kv_lora + rope] -> latent | RoPE key; latent x [kv_lora, H (nope + v)]
  SLM_TRY(take(a.kv_a, ".linear_kv_down_proj", c.kv_lora + c.rope, d));
  SLM_TRY(take(a.kv_b, ".linear_kv_up_proj", H * (c.nope + c.v), c.kv_lora));
  SLM_TRY(take(a.o, ".linear_proj", d, H * c.v));  // [T, H v] x [H v, d] -> [T, d]
  if (c.indexer) {
    auto ix = load_indexer(ck, prefix + ".core_attention.indexer", *c.indexer);
    if (!ix.ok()) return std::move(ix).take_error();
    a.indexer = std::move(*ix);
  }
  return a;
}

template <router_policy Router>
result<basic_moe_ffn<Router>> load_moe(const checkpoint& ck, const std::string& prefix, const moe_config& c) {
  basic_moe_ffn<Router> m;
  const std::size_t E = c.n_experts, d = c.hidden, I = c.expert_ffn;
  if (E == 0 || c.top_k == 0 || c.top_k > E)
    return make_error(errc::invalid_argument, "MoE '", prefix, "': top-k ", c.top_k, " of ", E, " experts");
  m.top_k = c.top_k;
  m.norm_topk_prob = true;
  m.router = c.sigmoid ? router_kind::sigmoid_grouped : router_kind::softmax_topk;
  // Megatron's router has no bias parameter: a stored one is some other layout, and
  // dropping it silently would change the routing.
  if (ck.find(prefix + ".router.bias"))
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", prefix,
                      ".router.bias' exists, but a Megatron MoE router has no bias (expert_bias is the selection "
                      "bias of sigmoid routing)");
  auto g = load_linear(ck, prefix + ".router", E, d);  // [T, d] x [d, E] -> [T, E] logits
  if (!g.ok()) return std::move(g).take_error();
  m.gate = std::move(*g);
  const std::string bias_name = prefix + ".router.expert_bias";
  if (c.sigmoid) {
    auto b = load_vector(ck, bias_name, E);
    if (!b.ok()) return std::move(b).take_error();
    m.correction_bias = std::move(*b);
  } else if (ck.find(bias_name)) {
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", bias_name,
                      "' exists but moe_router_score_function is \"softmax\" (expert bias comes with sigmoid "
                      "routing: confirm the score function)");
  }
  // Expert e's matrix: any layout load_linear_weight reads, under TE's grouped names.
  auto expert = [&](const std::string& module, std::size_t e, std::size_t rows, std::size_t cols) -> result<weight_matrix> {
    auto w = load_linear_weight(ck, module, std::to_string(e));
    if (!w.ok()) return std::move(w).take_error();
    if (w->rows != rows || w->cols != cols)
      return make_error(errc::format_error, ck.dir().string(), ": tensor '", module, ".weight", e, "' is [", w->rows,
                        ", ", w->cols, "], expected [", rows, ", ", cols, "]");
    return *w;
  };
  m.experts.resize(E);
  for (std::size_t e = 0; e < E; ++e) {
    auto up = expert(prefix + ".experts.linear_fc1", e, I, d);  // [T, d] x [d, I] -> [T, I]
    if (!up.ok()) return std::move(up).take_error();
    auto down = expert(prefix + ".experts.linear_fc2", e, d, I);  // [T, I] x [I, d] -> [T, d]
    if (!down.ok()) return std::move(down).take_error();
    m.experts[e].act = c.act;
    m.experts[e].up.w = *up;
    m.experts[e].down.w = *down;
  }
  if (c.shared_ffn > 0) {
    auto f = load_feed_forward(ck, prefix + ".shared_experts.linear_fc1", prefix + ".shared_experts.linear_fc2", d,
                               c.shared_ffn, c.act);
    if (!f.ok()) return std::move(f).take_error();
    m.shared = std::move(*f);
  }
  return m;
}

// ---- Implementation (compiled once by the nam56r unit in compiled mode) ----

#if SLM_DEFINE_NAM56R

SLM_INLINE result<lightning_indexer> load_indexer(const checkpoint& ck, const std::string& prefix,
                                                  const indexer_config& c) {
  lightning_indexer ix;
  ix.n_heads = c.n_heads;
  ix.head_dim = c.head_dim;
  ix.top_k = c.top_k;
  rope_params rp;
  rp.theta = c.rotary_base;
  ix.rope = rope_table::make(rp, c.head_dim);
  ix.interleaved_rope = true;
  ix.stable_ties = true;
  ix.use_relu = c.use_relu;
  ix.weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.n_heads * c.head_dim)));
  ix.dot_scale = 1.0f;
  SLM_TRY(load_indexer_weights(ck, prefix, {".linear_wq_b", ".linear_wk", ".linear_weights_proj"}, c.q_lora, c.hidden,
                               ix));
  ix.k_norm.eps = 1e-5f;  // Megatron's LayerNorm(eps = layernorm_epsilon)
  return ix;
}

SLM_INLINE result<mamba3_mixer> load_mamba3(const checkpoint& ck, std::string_view prefix, const mamba3_config& c) {
  SLM_TRY(c.validate());
  mamba3_mixer m;
  m.cfg = c;
  const std::size_t H = c.heads(), P = c.headdim, N = c.d_state, R = c.rank(), Di = c.inner();
  auto ip = load_linear(ck, join_module(prefix, "in_proj"), c.in_proj_dim(), c.d_model);  // [T, d] -> [T, in_proj_dim]
  if (!ip.ok()) return std::move(ip).take_error();
  m.in_proj = std::move(*ip);
  auto op = load_linear(ck, join_module(prefix, "out_proj"), c.d_model, Di);  // [T, Di] -> [T, d]
  if (!op.ok()) return std::move(op).take_error();
  m.out_proj = std::move(*op);
  struct param {
    floats* dst;
    const char* name;
    std::initializer_list<std::size_t> dims;
    bool wanted;
  };
  const param params[] = {
      {&m.dt_bias, "dt_bias", {H}, true},
      {&m.D, "D", {H}, true},
      {&m.B_bias, "B_bias", {H, R, N}, true},
      {&m.C_bias, "C_bias", {H, R, N}, true},
      {&m.B_norm_w, "B_norm.weight", {N}, true},
      {&m.C_norm_w, "C_norm.weight", {N}, true},
      {&m.mimo_x, "mimo_x", {H, R, P}, c.is_mimo},
      {&m.mimo_z, "mimo_z", {H, R, P}, c.is_mimo},
      {&m.mimo_o, "mimo_o", {H, R, P}, c.is_mimo},
      {&m.norm_w, "norm.weight", {Di}, c.outproj_norm},
  };
  for (const param& p : params) {
    if (!p.wanted) continue;
    auto v = load_shaped(ck, join_module(prefix, p.name), p.dims);
    if (!v.ok()) return std::move(v).take_error();
    *p.dst = std::move(*v);
  }
  return m;
}

SLM_INLINE result<m2rnn_mixer> load_m2rnn(const checkpoint& ck, std::string_view prefix, const m2rnn_config& c) {
  SLM_TRY(c.validate());
  m2rnn_mixer m;
  m.cfg = c;
  const std::size_t H = c.heads(), V = c.v_head_dim, cd = c.conv_dim(), Kc = c.conv_kernel;
  auto ip = load_linear(ck, join_module(prefix, "input_projection"), c.in_proj_dim(), c.d_model);  // [T, d] -> [T, d_in]
  if (!ip.ok()) return std::move(ip).take_error();
  m.in_proj = std::move(*ip);
  auto op = load_linear(ck, join_module(prefix, "output_projection"), c.d_model, c.hv());  // [T, H V] -> [T, d]
  if (!op.ok()) return std::move(op).take_error();
  m.out_proj = std::move(*op);
  if (Kc == 0 && ck.find(join_module(prefix, "conv1d.weight")))  // the config would silently drop a trained conv
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", join_module(prefix, "conv1d.weight"),
                      "' exists but the config's conv kernel (m2rnn_conv_kernel) is 0");
  if (Kc) {
    SLM_TRY(load_shaped(ck, join_module(prefix, "conv1d.weight"), {cd, 1, Kc}, m.conv_w));
    SLM_TRY(load_shaped(ck, join_module(prefix, "conv1d.bias"), {cd}, m.conv_b));
  }
  SLM_TRY(load_shaped(ck, join_module(prefix, "A_log"), {H}, m.A));
  for (std::size_t h = 0; h < H; ++h) m.A[h] = std::exp(m.A[h]);
  SLM_TRY(load_shaped(ck, join_module(prefix, "dt_bias"), {H}, m.dt_bias));
  SLM_TRY(load_shaped(ck, join_module(prefix, "state_weight"), {H, V, V}, m.W));
  if (c.use_residual) SLM_TRY(load_shaped(ck, join_module(prefix, "D"), {H, V}, m.D));
  SLM_TRY(load_shaped(ck, join_module(prefix, "g_norm.weight"), {H * V}, m.g_norm.weight));
  m.g_norm.eps = c.eps;
  m.g_norm.kind = norm_weight_kind::plain;
  return m;
}

SLM_INLINE result<ngram_hash_embedding> load_ngram_hash(const checkpoint& ck, std::string_view prefix,
                                                        const ngram_hash_config& c) {
  using config = ngram_hash_config;
  constexpr std::size_t M_max = ngram_hash_embedding::M_max;
  SLM_TRY(c.validate());
  ngram_hash_embedding m;
  const std::size_t J = c.num_tables(), M = c.largest_order(), E = c.embed_dim;
  SLM_TRY(m.init_hash(c, {}, {}));
  auto tw = load_linear_weight(ck, join_module(prefix, "unified_table"));
  if (!tw.ok()) return std::move(tw).take_error();
  if (tw->rows != c.total_rows() || tw->cols != E)
    return make_error(errc::format_error, ck.dir().string(), ": module '", join_module(prefix, "unified_table"), "' is [",
                      tw->rows, ", ", tw->cols, "], the config implies [", c.total_rows(), ", ", E, "]");
  m.table = *tw;
  auto op = load_linear(ck, join_module(prefix, "out_proj"), c.d_model, c.concat_dim());  // [T, J E] -> [T, d]
  if (!op.ok()) return std::move(op).take_error();
  m.out_proj = std::move(*op);

  std::array<std::int64_t, config::max_tables * M_max> buf{};
  std::array<std::int64_t, config::max_tables> hb{};
  SLM_TRY(load_shaped_ints(ck, join_module(prefix, "hash_mults"), {J, M}, buf.data()));
  SLM_TRY(load_shaped_ints(ck, join_module(prefix, "hash_bias"), {J}, hb.data()));
  SLM_TRY(m.init_hash(c, std::span<const std::int64_t>(buf.data(), J * M), std::span<const std::int64_t>(hb.data(), J)));

  // Derived buffers: checked against the config when present.
  auto check = [&](const char* name, std::initializer_list<std::size_t> dims, auto expect) -> status {
    const std::string full = join_module(prefix, name);
    if (!ck.find(full)) return {};
    SLM_TRY(load_shaped_ints(ck, full, dims, buf.data()));
    std::size_t n = 1;
    for (std::size_t v : dims) n *= v;
    for (std::size_t k = 0; k < n; ++k)
      if (buf[k] != expect(k))
        return make_error(errc::format_error, ck.dir().string(), ": tensor '", full, "' holds ", buf[k], " at ", k,
                          ", the config implies ", expect(k));
    return {};
  };
  SLM_TRY(check("table_offsets", {J}, [&](std::size_t j) { return m.offsets[j]; }));
  SLM_TRY(check("table_sizes_t", {J}, [&](std::size_t j) { return m.sizes[j]; }));
  SLM_TRY(check("order_for_table", {J}, [&](std::size_t j) { return static_cast<std::int64_t>(c.order_of_table(j)); }));
  SLM_TRY(check("order_mask", {M, J}, [&](std::size_t k) {
    return static_cast<std::int64_t>(k / J < c.order_of_table(k % J) ? 1 : 0);
  }));
  return m;
}

SLM_INLINE result<structure_embedding> load_structure_embedding(const checkpoint& ck, std::string_view prefix,
                                                                const structure_embedding_config& c) {
  SLM_TRY(c.validate());
  structure_embedding m;
  m.cfg = c;
  SLM_TRY(load_shaped(ck, join_module(prefix, "stacked_emb.weight"), {c.total_vocab(), c.bottleneck}, m.table));
  SLM_TRY(load_shaped(ck, join_module(prefix, "component_scales"), {c.num_active()}, m.scales));
  auto up = load_linear(ck, join_module(prefix, "up_proj"), c.d_model, c.bottleneck);  // [T, B] -> [T, d]
  if (!up.ok()) return std::move(up).take_error();
  m.up_proj = std::move(*up);
  // Production checkpoints keep these at their zero initialisation: the term is then skipped.
  bool table_zero = std::all_of(m.table.data(), m.table.data() + m.table.size(), [](float v) { return v == 0.0f; });
  bool up_zero = true;
  {
    floats row;
    SLM_TRY(row.resize(c.bottleneck));
    for (std::size_t r = 0; r < c.d_model && up_zero; ++r) {
      dequantize_row(m.up_proj.w, r, row.span());
      up_zero = std::all_of(row.data(), row.data() + c.bottleneck, [](float v) { return v == 0.0f; });
    }
  }
  m.zero = table_zero || up_zero;
  return m;
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm::nam56r
