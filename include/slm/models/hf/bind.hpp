// slm/models/hf/bind.hpp - where the config-driven decoder's layers are in a Hugging Face
// checkpoint: the tensor names, the config fields each layer takes, and the layouts the
// families store (Mixtral's w1/w3/w2 and block_sparse_moe, transformers 5.x's stacked
// experts, Granite's input_linear / output_linear, DeepSeek's MLA and indexer). The layers
// (layers/) know their own sizes, weights and math, not these names.
//
// binding<L> says, for a layer type L of decoder<> (models/hf/model.hpp):
//   accepts(cfg, i)  whether L can be layer i of the model config.json describes
//   load(ck, cfg, i) layer i's weights from the checkpoint, shapes checked, as an L
// A layer type with static accepts / load of its own (a host's own layer) binds itself;
// the per-layer variants and the empty slots of models/stack.hpp are bound below.
#pragma once
#include "slm/core/build_mode.hpp"

#include <concepts>
#include <cstddef>
#include <string>
#include <string_view>

#include "slm/core/status.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/layers/attention.hpp"
#include "slm/layers/dsa.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/mamba2.hpp"
#include "slm/layers/mla.hpp"
#include "slm/layers/mlp.hpp"
#include "slm/layers/moe.hpp"
#include "slm/layers/norm.hpp"
#include "slm/io/shaped_tensor.hpp"
#include "slm/models/bind.hpp"
#include "slm/models/hf/config.hpp"
#include "slm/models/stack.hpp"

namespace slm::hf {

template <class L>
struct binding;

template <class L>
concept self_binding = requires(const checkpoint& ck, const model_config& c) {
  { L::accepts(c, std::size_t{}) } -> std::same_as<bool>;
  { L::load(ck, c, std::size_t{}) } -> std::same_as<result<L>>;
};

template <self_binding L>
struct binding<L> {
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return L::accepts(c, layer); }
  static result<L> load(const checkpoint& ck, const model_config& c, std::size_t layer) { return L::load(ck, c, layer); }
};

// A layer type the decoder can load from a Hugging Face checkpoint.
template <class L>
concept bound_layer = requires(const checkpoint& ck, const model_config& c) {
  { binding<L>::accepts(c, std::size_t{}) } -> std::same_as<bool>;
  { binding<L>::load(ck, c, std::size_t{}) } -> std::same_as<result<L>>;
};

// A per-layer choice (models/stack.hpp): the first alternative that accepts the layer.
// One binding serves both variants: V is attention_variant<Ls...> or ffn_variant<Ls...>.
template <class V, class... Ls>
struct variant_binding {
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return (binding<Ls>::accepts(c, layer) || ...); }
  static result<V> load(const checkpoint& ck, const model_config& c, std::size_t layer, std::string_view what) {
    result<V> out = make_error(errc::unsupported, "layer ", layer, ": no ", what, " type fits the config");
    (void)((binding<Ls>::accepts(c, layer) ? (out = wrap<Ls>(binding<Ls>::load(ck, c, layer)), true) : false) || ...);
    return out;
  }

 private:
  template <class L>
  static result<V> wrap(result<L> r) {
    if (!r.ok()) return std::move(r).take_error();
    V v;
    v.impl.template emplace<L>(std::move(*r));
    return v;
  }
};
template <class... As>
struct binding<attention_variant<As...>> : private variant_binding<attention_variant<As...>, As...> {
  using base = variant_binding<attention_variant<As...>, As...>;
  using base::accepts;
  static result<attention_variant<As...>> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    return base::load(ck, c, layer, "attention");
  }
};
template <class... Fs>
struct binding<ffn_variant<Fs...>> : private variant_binding<ffn_variant<Fs...>, Fs...> {
  using base = variant_binding<ffn_variant<Fs...>, Fs...>;
  using base::accepts;
  static result<ffn_variant<Fs...>> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    return base::load(ck, c, layer, "feed-forward");
  }
};
// The empty slots: where config.json leaves a layer's mixer or feed-forward out.
template <>
struct binding<no_mixer> {
  static bool accepts(const model_config& c, std::size_t layer) noexcept {
    return c.layers[layer].attention == attention_kind::none;
  }
  static result<no_mixer> load(const checkpoint&, const model_config&, std::size_t) { return no_mixer{}; }
};
template <>
struct binding<no_ffn> {
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return c.layers[layer].ffn == ffn_kind::none; }
  static result<no_ffn> load(const checkpoint&, const model_config&, std::size_t) { return no_ffn{}; }
};

// A feed-forward block: `prefix`.{gate,up,down}_proj (gated) or `prefix`.{up,down}_proj
// (plain), or the Mixtral names w1 (gate), w3 (up), w2 (down) when `mixtral_names`.
result<feed_forward> load_mlp(const checkpoint& ck, const std::string& prefix, std::size_t d, std::size_t hidden,
                              activation act, bool gated, bool mixtral_names = false);
// DeepSeek-V3.2's lightning indexer: `prefix`.{wq_b, wk, k_norm, weights_proj}.
result<lightning_indexer> load_indexer(const checkpoint& ck, const std::string& prefix, const model_config& c);
// The block norm `module` as the config says: RMSNorm (.weight, of the decoder's norm
// kind) or LayerNorm (.weight and .bias; StarCoder2).
status load_block_norm(const checkpoint& ck, const model_config& c, const std::string& module, norm_weight_kind kind,
                       block_norm& out);

// Where the config fixes projection biases (StarCoder2's use_bias), the stored biases of
// layer `part` (its attention or its FFN, under `prefix`) must match it: a missing one
// would silently change the logits.
template <class Part>
status check_biases(const checkpoint& ck, const model_config& c, const std::string& prefix, const Part& part) {
  if (!c.projection_bias) return {};
  const bool want = *c.projection_bias;
  status s;
  part.for_each_linear([&](std::string_view name, const linear& l, bool) {
    if (!s.ok() || l.bias.empty() != want) return;
    // feed_forward names its projections up_proj/down_proj; the plain MLP's stored names
    // come from the config (StarCoder2: c_fc, c_proj).
    const std::string_view stored = name == "up_proj"     ? std::string_view(c.mlp_up_name)
                                    : name == "down_proj" ? std::string_view(c.mlp_down_name)
                                                          : name;
    s = make_error(errc::format_error, ck.dir().string(), ": '", prefix, ".", stored, want ? "' has no bias" : "' has a bias",
                   ", but config.json says \"use_bias\": ", want ? "true" : "false");
  });
  return s;
}

// A Mamba-2 mixer under `prefix` (no prefix: the bare names), with the names of
// transformers' Mamba2Mixer and state-spaces/mamba's Mamba2 (in_proj, conv1d, dt_bias, A_log,
// D, norm, out_proj), shapes checked against c; an error names the tensor.
result<mamba2_mixer> load_mamba2(const checkpoint& ck, std::string_view prefix, const mamba2_config& c);

// Llama / Qwen / Mistral attention: model.layers.N.self_attn.{q,k,v,o}_proj (+ q_norm,
// k_norm for Qwen3; biases where the checkpoint has them).
template <rope_policy Rope>
struct binding<basic_gqa_attention<Rope>> {
  using L = basic_gqa_attention<Rope>;
  static bool accepts(const model_config& c, std::size_t layer) noexcept {
    return c.layers[layer].attention == attention_kind::gqa && !c.layers[layer].sparse &&
           rope_fits<Rope>(c.rope_interleave);
  }
  static result<L> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    return load(ck, c.attention_prefix(layer), c, layer);
  }

  static result<L> load(const checkpoint& ck, const std::string& prefix, const model_config& c,
                                          std::size_t layer) {
    L a;
    a.n_heads = c.n_heads;
    a.n_kv_heads = c.n_kv_heads;
    a.head_dim = c.head_dim;
    a.window = c.layers[layer].window;
    a.interleave = c.rope_interleave;
    a.scale = c.attention_multiplier > 0 ? c.attention_multiplier  // Granite's muP scale
                                         : static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
    a.rope = rope_table::make(c.rope, c.head_dim);
    const std::size_t qd = c.n_heads * c.head_dim, kvd = c.n_kv_heads * c.head_dim;
    auto lq = load_linear(ck, prefix + ".q_proj", qd, c.hidden);
    if (!lq.ok()) return std::move(lq).take_error();
    auto lk = load_linear(ck, prefix + ".k_proj", kvd, c.hidden);
    if (!lk.ok()) return std::move(lk).take_error();
    auto lv = load_linear(ck, prefix + ".v_proj", kvd, c.hidden);
    if (!lv.ok()) return std::move(lv).take_error();
    auto lo = load_linear(ck, prefix + ".o_proj", c.hidden, qd);
    if (!lo.ok()) return std::move(lo).take_error();
    a.q = std::move(*lq);
    a.k = std::move(*lk);
    a.v = std::move(*lv);
    a.o = std::move(*lo);
    if (c.qk_norm) {
      auto qn = load_vector(ck, prefix + ".q_norm.weight", c.head_dim);
      if (!qn.ok()) return std::move(qn).take_error();
      auto kn = load_vector(ck, prefix + ".k_norm.weight", c.head_dim);
      if (!kn.ok()) return std::move(kn).take_error();
      a.q_norm.weight = std::move(*qn);
      a.k_norm.weight = std::move(*kn);
      a.q_norm.eps = a.k_norm.eps = c.norm_eps;
    }
    return a;
  }
};

// DeepSeek MLA: q_a_proj / q_a_layernorm / q_b_proj (or q_proj), kv_a_proj_with_mqa,
// kv_a_layernorm, kv_b_proj, o_proj; the indexer under .indexer on DSA layers.
template <rope_policy Rope>
struct binding<basic_mla_attention<Rope>> {
  using L = basic_mla_attention<Rope>;
  static bool accepts(const model_config& c, std::size_t layer) noexcept {
    return c.layers[layer].attention == attention_kind::mla && rope_fits<Rope>(c.rope_interleave);
  }
  static result<L> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    return load(ck, c.attention_prefix(layer), c, layer);
  }

  static result<L> load(const checkpoint& ck, const std::string& prefix, const model_config& c,
                                          std::size_t layer) {
    L a;
    a.n_heads = c.n_heads;
    a.nope = c.qk_nope_dim;
    a.rope_dim = c.qk_rope_dim;
    a.v_dim = c.v_head_dim;
    a.kv_lora = c.kv_lora_rank;
    a.q_lora = c.q_lora_rank;
    a.interleave = c.rope_interleave;
    a.rope = rope_table::make(c.rope, c.qk_rope_dim);
    a.scale = static_cast<float>(c.rope.softmax_scale_multiplier() / std::sqrt(static_cast<double>(c.qk_head_dim())));
    const std::size_t H = c.n_heads, d = c.hidden, qk = c.qk_head_dim();
    auto take = [&](linear& dst, const std::string& name, std::size_t out, std::size_t in) {
      return load_linear_into(dst, ck, prefix + name, out, in);
    };
    auto norm = [&](rms_norm& dst, const std::string& name, std::size_t n) -> status {
      auto v = load_vector(ck, prefix + name, n);
      if (!v.ok()) return std::move(v).take_error();
      dst.weight = std::move(*v);
      dst.eps = 1e-6f;  // DeepSeek's q_a/kv_a RMSNorms use their default eps, not rms_norm_eps
      return {};
    };
    if (a.q_lora > 0) {
      SLM_TRY(take(a.q_a, ".q_a_proj", a.q_lora, d));
      SLM_TRY(norm(a.q_a_norm, ".q_a_layernorm.weight", a.q_lora));
      SLM_TRY(take(a.q_b, ".q_b_proj", H * qk, a.q_lora));
    } else {
      SLM_TRY(take(a.q_proj, ".q_proj", H * qk, d));
    }
    SLM_TRY(take(a.kv_a, ".kv_a_proj_with_mqa", a.kv_lora + a.rope_dim, d));
    SLM_TRY(norm(a.kv_a_norm, ".kv_a_layernorm.weight", a.kv_lora));
    SLM_TRY(take(a.kv_b, ".kv_b_proj", H * (a.nope + a.v_dim), a.kv_lora));
    SLM_TRY(take(a.o, ".o_proj", d, H * a.v_dim));
    if (c.layers[layer].sparse) {
      auto ix = load_indexer(ck, prefix + ".indexer", c);
      if (!ix.ok()) return std::move(ix).take_error();
      a.indexer = std::move(*ix);
    }
    return a;
  }
};

// A dense MLP: model.layers.N.mlp.
template <>
struct binding<feed_forward> {
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return c.layers[layer].ffn == ffn_kind::dense; }
  static result<feed_forward> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    if (!c.mlp_gated)  // the plain form's names come from the config (up_proj/down_proj; StarCoder2: c_fc/c_proj)
      return load_feed_forward(ck, cat(c.ffn_prefix(layer), ".", c.mlp_up_name),
                               cat(c.ffn_prefix(layer), ".", c.mlp_down_name), c.hidden, c.intermediate, c.act);
    return load_mlp(ck, c.ffn_prefix(layer), c.hidden, c.intermediate, c.act, c.mlp_gated);
  }
};

// Mixture of experts: model.layers.N.mlp (or Mixtral's block_sparse_moe).{gate, experts.E.*,
// shared_experts.*}, DeepSeek's gate.e_score_correction_bias, transformers 5.x's stacked
// experts, Granite's router.layer + input_linear / output_linear + shared_mlp.
template <router_policy Router>
struct binding<basic_moe_ffn<Router>> {
  using L = basic_moe_ffn<Router>;
  static result<L> load(const checkpoint& ck, const std::string& prefix, const model_config& c) {
    L m;
    m.router = c.router;
    m.top_k = c.experts_per_token;
    m.n_group = c.router == router_kind::sigmoid_grouped ? c.n_group : 1;
    m.topk_group = c.router == router_kind::sigmoid_grouped ? c.topk_group : 1;
    m.norm_topk_prob = c.norm_topk_prob;
    m.routed_scaling = c.router == router_kind::sigmoid_grouped ? c.routed_scaling_factor : 1.0f;
    if (m.n_group > 256) return make_error(errc::unsupported, "config.json: n_group ", m.n_group, " is over 256");
    const std::size_t E = c.n_experts, d = c.hidden, I = c.expert_intermediate;
    if (ck.find(prefix + ".router.layer.weight")) {  // Granite: router.layer, input_linear / output_linear
      SLM_TRY(load_granite(ck, prefix, c, m));
      return m;
    }
    auto g = load_linear(ck, prefix + ".gate", E, d);
    if (!g.ok()) return std::move(g).take_error();
    m.gate = std::move(*g);
    if (c.router == router_kind::sigmoid_grouped) {
      auto b = load_vector(ck, prefix + ".gate.e_score_correction_bias", E);
      if (!b.ok()) return std::move(b).take_error();
      m.correction_bias = std::move(*b);
    }
    m.experts.resize(E);
    const std::string stacked = prefix + ".experts.gate_up_proj";
    if (ck.find(stacked)) {  // transformers 5.x in-memory layout: [E, 2I, d] and [E, d, I]
      SLM_TRY(load_stacked(ck, prefix, c, m));
    } else {
      // Experts as Mixtral names them (w1 = gate, w3 = up, w2 = down) or as everyone else does.
      const bool w123 = has_module(ck, prefix + ".experts.0.w1");
      for (std::size_t e = 0; e < E; ++e) {
        auto f = load_mlp(ck, cat(prefix, ".experts.", e), d, I, c.act, c.mlp_gated, w123);
        if (!f.ok()) return std::move(f).take_error();
        m.experts[e] = std::move(*f);
      }
    }
    if (c.shared_expert_intermediate > 0) {
      auto f = load_mlp(ck, prefix + ".shared_experts", d, c.shared_expert_intermediate, c.act, c.mlp_gated);
      if (!f.ok()) return std::move(f).take_error();
      m.shared = std::move(*f);
    }
    return m;
  }

  static bool accepts(const model_config& c, std::size_t layer) noexcept {
    if (c.layers[layer].ffn != ffn_kind::moe) return false;
    if constexpr (std::same_as<Router, softmax_topk_router>) return c.router == router_kind::softmax_topk;
    else if constexpr (std::same_as<Router, sigmoid_grouped_router>) return c.router == router_kind::sigmoid_grouped;
    else return true;
  }
  static result<L> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    // Mixtral checkpoints name the block block_sparse_moe; transformers 5.x calls it mlp.
    const std::string mixtral = cat(c.layer_prefix(layer), ".block_sparse_moe");
    return load(ck, has_module(ck, mixtral + ".gate") ? mixtral : c.ffn_prefix(layer), c);
  }
  static bool has_module(const checkpoint& ck, const std::string& module) {
    return ck.find(module + ".weight") || ck.find(module + ".weight_packed");
  }
  // Granite MoE: router.layer [E, d]; experts input_linear [E, 2I, d] (gate rows, then up
  // rows) and output_linear [E, d, I]; beside the block, shared_mlp.input_linear [2Is, d]
  // and output_linear [d, Is]. Dense (bf16/f16/f32) tensors only.
  static status load_granite(const checkpoint& ck, const std::string& prefix, const model_config& c, L& m) {
    const std::size_t E = c.n_experts, d = c.hidden, I = c.expert_intermediate;
    auto g = load_linear(ck, prefix + ".router.layer", E, d);
    if (!g.ok()) return std::move(g).take_error();
    m.gate = std::move(*g);
    m.experts.resize(E);
    SLM_TRY(load_stacked_pair(ck, prefix + ".input_linear.weight", prefix + ".output_linear.weight", c, m));
    const std::size_t Is = c.shared_expert_intermediate;
    const std::string shared = prefix.substr(0, prefix.rfind('.')) + ".shared_mlp";
    auto in = load_linear(ck, shared + ".input_linear", 2 * Is, d);
    if (!in.ok()) return std::move(in).take_error();
    auto out = load_linear(ck, shared + ".output_linear", d, Is);
    if (!out.ok()) return std::move(out).take_error();
    auto gate_rows = slice_rows(in->w, 0, Is);
    auto up_rows = slice_rows(in->w, Is, Is);
    if (!gate_rows.ok()) return std::move(gate_rows).take_error();
    if (!up_rows.ok()) return std::move(up_rows).take_error();
    m.shared.act = c.act;
    m.shared.gate.w = *gate_rows;
    m.shared.up.w = *up_rows;
    m.shared.down = std::move(*out);
    (void)I;
    return {};
  }

  static status load_stacked(const checkpoint& ck, const std::string& prefix, const model_config& c, L& m) {
    return load_stacked_pair(ck, prefix + ".experts.gate_up_proj", prefix + ".experts.down_proj", c, m);
  }
  static status load_stacked_pair(const checkpoint& ck, const std::string& gate_up_name, const std::string& down_name,
                                  const model_config& c, L& m) {
    const std::size_t E = c.n_experts, d = c.hidden, I = c.expert_intermediate;
    auto gu = ck.tensor(gate_up_name);
    auto dn = ck.tensor(down_name);
    if (!gu.ok()) return std::move(gu).take_error();
    if (!dn.ok()) return std::move(dn).take_error();
    auto dims_are = [](const tensor_view& t, std::size_t a, std::size_t b, std::size_t cc) {
      return t.rank() == 3 && static_cast<std::size_t>(t.dim(0)) == a && static_cast<std::size_t>(t.dim(1)) == b &&
             static_cast<std::size_t>(t.dim(2)) == cc;
    };
    if (!dims_are(*gu, E, 2 * I, d) || !dims_are(*dn, E, d, I))
      return make_error(errc::format_error, ck.dir().string(), ": '", gate_up_name, "' / '", down_name, "' are ",
                        gu->shape().to_string(), " / ", dn->shape().to_string(), ", the config implies [", E, ", ", 2 * I,
                        ", ", d, "] / [", E, ", ", d, ", ", I, "]");
    for (std::size_t e = 0; e < E; ++e) {
      const auto ei = static_cast<std::int64_t>(e);
      auto gs = gu->slice(0, ei, ei + 1);
      auto ds = dn->slice(0, ei, ei + 1);
      if (!gs.ok()) return std::move(gs).take_error();
      if (!ds.ok()) return std::move(ds).take_error();
      auto g2 = gs->reshape(slm::shape{static_cast<std::int64_t>(2 * I), static_cast<std::int64_t>(d)});
      auto d2 = ds->reshape(slm::shape{static_cast<std::int64_t>(d), static_cast<std::int64_t>(I)});
      if (!g2.ok()) return std::move(g2).take_error();
      if (!d2.ok()) return std::move(d2).take_error();
      auto gw = make_dense(*g2);
      auto dw = make_dense(*d2);
      if (!gw.ok()) return std::move(gw).take_error();
      if (!dw.ok()) return std::move(dw).take_error();
      feed_forward& f = m.experts[e];
      f.act = c.act;
      auto gate_rows = slice_rows(*gw, 0, I);  // chunk(2): gate first, then up
      auto up_rows = slice_rows(*gw, I, I);
      if (!gate_rows.ok()) return std::move(gate_rows).take_error();
      if (!up_rows.ok()) return std::move(up_rows).take_error();
      f.gate.w = *gate_rows;
      f.up.w = *up_rows;
      f.down.w = *dw;
    }
    return {};
  }
};

// The Mamba-2 layer's sizes in a config (every Mamba-2 layer of a model has them).
inline mamba2_config mamba2_config_of(const model_config& c) {
  mamba2_config m;
  m.d_model = c.hidden;
  m.d_state = c.ssm_state;
  m.d_conv = c.ssm_conv;
  m.headdim = c.ssm_head_dim;
  m.ngroups = c.ssm_groups;
  m.chunk_size = c.ssm_chunk;
  m.d_inner = c.ssm_heads * c.ssm_head_dim;
  m.norm_group_size = c.ssm_norm_group;
  m.eps = c.ssm_eps;
  m.dt_min = c.ssm_dt_min;
  if (c.ssm_dt_max > 0) m.dt_max = c.ssm_dt_max;
  return m;
}

// Mamba-2 mixers: backbone.layers.N.mixer (mamba2, nemotron_h) or model.layers.N.mamba
// (granitemoehybrid).
template <>
struct binding<mamba2_mixer> {
  static bool accepts(const model_config& c, std::size_t layer) noexcept {
    return c.layers[layer].attention == attention_kind::mamba2;
  }
  static result<mamba2_mixer> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    return load_mamba2(ck, c.attention_prefix(layer), mamba2_config_of(c));
  }
};

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE result<feed_forward> load_mlp(const checkpoint& ck, const std::string& prefix, std::size_t d, std::size_t hidden,
                                         activation act, bool gated, bool mixtral_names) {
  feed_forward f;
  f.act = act;
  const char* g = mixtral_names ? ".w1" : ".gate_proj";
  const char* u = mixtral_names ? ".w3" : ".up_proj";
  const char* dn = mixtral_names ? ".w2" : ".down_proj";
  if (gated) {
    auto l = load_linear(ck, prefix + g, hidden, d);
    if (!l.ok()) return std::move(l).take_error();
    f.gate = std::move(*l);
  }
  auto lu = load_linear(ck, prefix + u, hidden, d);
  if (!lu.ok()) return std::move(lu).take_error();
  f.up = std::move(*lu);
  auto ld = load_linear(ck, prefix + dn, d, hidden);
  if (!ld.ok()) return std::move(ld).take_error();
  f.down = std::move(*ld);
  return f;
}

SLM_INLINE result<lightning_indexer> load_indexer(const checkpoint& ck, const std::string& prefix, const model_config& c) {
  lightning_indexer ix;
  ix.n_heads = c.index_heads;
  ix.head_dim = c.index_head_dim;
  ix.top_k = c.index_topk;
  ix.rope = rope_table::make(c.rope, c.qk_rope_dim);
  SLM_TRY(load_indexer_weights(ck, prefix, {".wq_b", ".wk", ".weights_proj"}, c.q_lora_rank, c.hidden, ix));
  ix.k_norm.eps = 1e-6f;  // fixed in the reference (nn.LayerNorm(head_dim, eps=1e-6))
  ix.weight_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.index_heads)));
  ix.dot_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.index_head_dim)));
  return ix;
}

SLM_INLINE status load_block_norm(const checkpoint& ck, const model_config& c, const std::string& module,
                                  norm_weight_kind kind, block_norm& out) {
  auto w = load_vector(ck, module + ".weight", c.hidden);
  if (!w.ok()) return std::move(w).take_error();
  out.layer = c.layer_norm;
  if (!c.layer_norm) {
    out.rms.weight = std::move(*w);
    out.rms.eps = c.norm_eps;
    out.rms.kind = kind;
    return {};
  }
  auto b = load_vector(ck, module + ".bias", c.hidden);
  if (!b.ok()) return std::move(b).take_error();
  out.ln.weight = std::move(*w);
  out.ln.bias = std::move(*b);
  out.ln.eps = c.norm_eps;
  return {};
}

SLM_INLINE result<mamba2_mixer> load_mamba2(const checkpoint& ck, std::string_view prefix, const mamba2_config& c) {
  SLM_TRY(c.validate());
  mamba2_mixer m;
  m.cfg = c;
  const std::size_t H = c.heads(), Di = c.inner(), cd = c.conv_dim(), K = c.d_conv;
  auto ip = load_linear(ck, join_module(prefix, "in_proj"), c.in_proj_dim(), c.d_model);  // [T, d] -> [T, in_proj_dim]
  if (!ip.ok()) return std::move(ip).take_error();
  m.in_proj = std::move(*ip);
  auto op = load_linear(ck, join_module(prefix, "out_proj"), c.d_model, Di);  // [T, Di] -> [T, d]
  if (!op.ok()) return std::move(op).take_error();
  m.out_proj = std::move(*op);

  const std::string wname = join_module(prefix, "conv1d.weight");
  auto w = ck.float_tensor(wname);
  if (!w.ok()) return std::move(w).take_error();
  if (w->rank() != 3 || static_cast<std::size_t>(w->dim(0)) != cd || w->dim(1) != 1 ||
      static_cast<std::size_t>(w->dim(2)) != K)
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", wname, "' has shape ",
                      w->shape().to_string(), ", expected [", cd, ", 1, ", K, "]");
  SLM_TRY(m.conv_w.resize(cd * K));
  if (auto s = w->to_f32(m.conv_w.span()); !s.ok()) return std::move(s).with_context(cat("tensor '", wname, "'"));
  if (ck.find(join_module(prefix, "conv1d.bias"))) {
    auto b = load_vector(ck, join_module(prefix, "conv1d.bias"), cd);
    if (!b.ok()) return std::move(b).take_error();
    m.conv_b = std::move(*b);
  } else {
    SLM_TRY(m.conv_b.assign_zero(cd));
  }
  auto dtb = load_vector(ck, join_module(prefix, "dt_bias"), H);
  if (!dtb.ok()) return std::move(dtb).take_error();
  m.dt_bias = std::move(*dtb);
  auto alog = load_vector(ck, join_module(prefix, "A_log"), H);
  if (!alog.ok()) return std::move(alog).take_error();
  m.A = std::move(*alog);
  for (std::size_t h = 0; h < H; ++h) m.A[h] = -std::exp(m.A[h]);

  const std::string dname = join_module(prefix, "D");
  auto dt = ck.tensor(dname);
  if (!dt.ok()) return std::move(dt).take_error();
  m.d_per_channel = dt->rank() == 1 && static_cast<std::size_t>(dt->dim(0)) == Di && Di != H;
  auto dv = load_vector(ck, dname, m.d_per_channel ? Di : H);
  if (!dv.ok()) return std::move(dv).take_error();
  m.D = std::move(*dv);
  if (c.rmsnorm) {
    auto nw = load_vector(ck, join_module(prefix, "norm.weight"), Di);
    if (!nw.ok()) return std::move(nw).take_error();
    m.norm_w = std::move(*nw);
  }
  return m;
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm::hf
