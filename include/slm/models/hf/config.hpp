// slm/models/hf/config.hpp - what a config.json says about a decoder-only transformer.
//
// One struct describes every supported arrangement (the HF model_types llama, mistral,
// qwen2, qwen3, qwen3_moe, mixtral, starcoder2, deepseek_v3, deepseek_v32, and the
// state-space and hybrid mamba2, nemotron_h and granitemoehybrid), per layer: which
// mixer fills the sequence slot (GQA or MLA attention, dense or DSA-sparse, full or sliding window; a Mamba-2 mixer;
// or nothing) and which feed-forward fills the channel slot (dense, MoE, or nothing).
// That per-layer list is the hybrid pattern: Nemotron-H's "M*M-ME" is six layers with
// one filled slot each, NAM56R's pattern is the same idea with more kinds. Both config styles load: transformers 5.x
// (`rope_parameters`, `dtype`, `num_local_experts`) and 4.x (`rope_theta` +
// `rope_scaling`, `torch_dtype`, `num_experts`). A value slm cannot honour (an unknown
// model_type or activation, a RoPE type, a routing method, a shape that does not
// divide) is an error naming the key; keys that do not change the math (dropout,
// initializer_range, token ids, ...) are ignored, as transformers ignores them at
// inference.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "slm/io/config_reader.hpp"
#include "slm/io/json.hpp"
#include "slm/layers/activation.hpp"
#include "slm/layers/moe_routing.hpp"
#include "slm/layers/rope.hpp"
#include "slm/core/status.hpp"

namespace slm {

enum class attention_kind : std::uint8_t { gqa, mla, mamba2, none };
enum class ffn_kind : std::uint8_t { dense, moe, none };

struct layer_spec {
  attention_kind attention = attention_kind::gqa;
  bool sparse = false;            // DSA: attend only to the lightning indexer's top-k keys
  std::size_t window = 0;         // sliding window (keys per query, itself included); 0 = full
  ffn_kind ffn = ffn_kind::dense;
};

struct model_config {
  std::string model_type;
  std::size_t vocab = 0, hidden = 0, n_layers = 0, max_positions = 0;
  float norm_eps = 1e-6f;
  bool tie_embeddings = false;
  // The blocks' and the final norm: RMSNorm (weight), or LayerNorm with weight and bias
  // (StarCoder2: <name>.weight, <name>.bias).
  bool layer_norm = false;
  // Set: every projection of every layer has a bias (true) or none has (false), checked
  // at load, so a checkpoint that disagrees with its config is an error rather than other
  // logits (StarCoder2's use_bias). Unset: a projection's bias is used where stored
  // (Qwen2's q/k/v).
  std::optional<bool> projection_bias;

  // Attention (GQA).
  std::size_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  bool qk_norm = false;  // per-head RMSNorm on q and k before RoPE (Qwen3)
  rope_params rope;
  bool rope_interleave = false;  // pairing: (2i, 2i+1) instead of (i, i + r/2)

  // MLA (DeepSeek).
  std::size_t q_lora_rank = 0;  // 0 = no low-rank query (q_proj directly)
  std::size_t kv_lora_rank = 0, qk_nope_dim = 0, qk_rope_dim = 0, v_head_dim = 0;

  // DSA lightning indexer (DeepSeek-V3.2).
  std::size_t index_heads = 0, index_head_dim = 0, index_topk = 0;

  // Feed-forward.
  activation act = activation::silu;
  std::size_t intermediate = 0;  // dense layers
  // MoE.
  std::size_t n_experts = 0, experts_per_token = 0, expert_intermediate = 0;
  std::size_t n_shared_experts = 0;  // DeepSeek: shared MLP of width expert_intermediate * n
  router_kind router = router_kind::softmax_topk;
  bool norm_topk_prob = true;
  std::size_t n_group = 1, topk_group = 1;
  float routed_scaling_factor = 1.0f;

  std::vector<layer_spec> layers;

  // Names. Llama-style: model.layers.N.{input_layernorm, self_attn, post_attention_layernorm,
  // mlp}, model.embed_tokens, model.norm. Mamba-style (mamba2, nemotron_h): one block per
  // layer, backbone.layers.N.{norm, mixer}, backbone.embeddings, backbone.norm_f.
  std::string layers_prefix = "model.layers", embed_name = "model.embed_tokens", final_norm_name = "model.norm";
  bool single_norm_blocks = false;  // mamba-style: each layer is norm + one mixer
  std::string attention_name = "self_attn", ffn_name = "mlp", mamba_name = "mixer";
  // The plain (ungated) MLP's two projections under ffn_name (StarCoder2: c_fc, c_proj).
  std::string mlp_up_name = "up_proj", mlp_down_name = "down_proj";

  // Granite's muP multipliers: x = embed * embedding_multiplier; x += branch *
  // residual_multiplier; attention scores * attention_multiplier (0: head_dim^-0.5);
  // logits / logits_scaling.
  float embedding_multiplier = 1.0f, residual_multiplier = 1.0f, attention_multiplier = 0.0f, logits_scaling = 1.0f;

  // Feed-forward details beyond the activation.
  bool mlp_gated = true;                 // SwiGLU family; false: down(act(up(x))) (Nemotron-H, relu^2)
  std::size_t shared_expert_intermediate = 0;  // width of the shared expert MLP (0: none)

  // Mamba-2 mixers.
  std::size_t ssm_heads = 0, ssm_head_dim = 0, ssm_state = 0, ssm_groups = 1, ssm_conv = 4, ssm_chunk = 256;
  std::size_t ssm_norm_group = 0;        // gated RMSNorm group size (0: d_inner / groups)
  float ssm_eps = 1e-5f, ssm_dt_min = 0.0f, ssm_dt_max = 0.0f;  // dt clamp; max 0 = +inf

  std::string layer_prefix(std::size_t i) const { return cat(layers_prefix, ".", i); }
  std::string attention_prefix(std::size_t i) const {
    return cat(layer_prefix(i), ".", layers[i].attention == attention_kind::mamba2 ? mamba_name : attention_name);
  }
  std::string ffn_prefix(std::size_t i) const { return cat(layer_prefix(i), ".", ffn_name); }

  std::size_t qk_head_dim() const noexcept { return qk_nope_dim + qk_rope_dim; }

  // What layer i needs, in words (for errors that say why a composition does not fit).
  std::string describe_layer(std::size_t i) const;

  static result<model_config> from_json(const json::value& cfg);

 private:
  static result<model_config> from_json_mamba_style(const json::value& cfg);
  static status from_json_granite(const json::value& cfg, model_config& c);
  static status from_json_starcoder2(const json::value& cfg, model_config& c);
};

// RoPE's parameters from a config.json object, in either style (rope_parameters or the
// older rope_scaling). max_position_embeddings fills original_max_position_embeddings where
// a scaled type needs it and none is given, as transformers does.
result<rope_params> rope_params_from_config(const json::value& cfg);

#if SLM_DEFINE_IO

SLM_INLINE result<rope_params> rope_params_from_config(const json::value& cfg) {
  rope_params p;
  const json::value* dict = cfg.find("rope_parameters");
  std::string where = "rope_parameters";
  if (!dict || dict->is_null()) {
    dict = cfg.find("rope_scaling");
    where = "rope_scaling";
  }
  if (dict && !dict->is_null() && !dict->is_object())
    return make_error(errc::unsupported, "config.json: \"", where, "\" is not an object (per-layer-type RoPE is not supported)");
  p.theta = cfg.get_double("rope_theta", p.theta);
  p.partial_rotary_factor = cfg.get_double("partial_rotary_factor", 1.0);
  std::string_view type = "default";
  if (dict && dict->is_object()) {
    // Per-layer-type dicts ({"full_attention": {...}, ...}) hold objects, not a type.
    for (const json::member& m : dict->members())
      if (m.val.is_object())
        return make_error(errc::unsupported, "config.json: \"", where, ".", m.key,
                          "\": per-layer-type RoPE parameters are not supported");
    type = dict->get_string("rope_type", dict->get_string("type", "default"));
    const std::string source = cat("config.json, ", where);
    const config_reader r{*dict, source};
    SLM_TRY(r.number("rope_theta", p.theta));
    SLM_TRY(r.number("partial_rotary_factor", p.partial_rotary_factor));
    SLM_TRY(r.number("factor", p.factor));
    SLM_TRY(r.number("low_freq_factor", p.low_freq_factor));
    SLM_TRY(r.number("high_freq_factor", p.high_freq_factor));
    SLM_TRY(r.number("original_max_position_embeddings", p.original_max_position_embeddings));
    SLM_TRY(r.number("beta_fast", p.beta_fast));
    SLM_TRY(r.number("beta_slow", p.beta_slow));
    SLM_TRY(r.number("mscale", p.mscale));
    SLM_TRY(r.number("mscale_all_dim", p.mscale_all_dim));
    SLM_TRY(r.number("attention_factor", p.attention_factor));
    if (const json::value* t = dict->find("truncate"); t && t->is_bool()) p.truncate = t->as_bool();
  }
  if (type == "default") p.type = rope_type::standard;
  else if (type == "linear") p.type = rope_type::linear;
  else if (type == "llama3") p.type = rope_type::llama3;
  else if (type == "yarn") p.type = rope_type::yarn;
  else
    return make_error(errc::unsupported, "config.json: \"", where, ".rope_type\" = \"", type,
                      "\" is not supported (default, linear, llama3 and yarn are)");
  if (!(p.theta > 0) || !std::isfinite(p.theta))
    return make_error(errc::format_error, "config.json: rope_theta ", p.theta, " is not a positive number");
  if (!(p.partial_rotary_factor > 0) || p.partial_rotary_factor > 1)
    return make_error(errc::format_error, "config.json: partial_rotary_factor ", p.partial_rotary_factor, " is not in (0, 1]");
  if (p.type != rope_type::standard && !(p.factor > 0))
    return make_error(errc::format_error, "config.json: \"", where, ".factor\" ", p.factor, " is not a positive number");
  if (p.original_max_position_embeddings == 0)
    p.original_max_position_embeddings = cfg.get_double("max_position_embeddings", 0);
  if ((p.type == rope_type::llama3 || p.type == rope_type::yarn) && !(p.original_max_position_embeddings > 0))
    return make_error(errc::format_error, "config.json: \"", where, ".original_max_position_embeddings\" is missing");
  for (const char* key : {"dtype", "torch_dtype"}) {
    const std::string_view d = cfg.get_string(key);
    if (d == "bfloat16") p.inv_freq_dtype = dtype::bf16;
    else if (d == "float16") p.inv_freq_dtype = dtype::f16;
  }
  if (p.type == rope_type::llama3 && !(p.high_freq_factor > p.low_freq_factor))
    return make_error(errc::format_error, "config.json: \"", where, "\": high_freq_factor must exceed low_freq_factor");
  return p;
}

SLM_INLINE std::string model_config::describe_layer(std::size_t i) const {
  const layer_spec& l = layers[i];
  std::string s = l.attention == attention_kind::mla    ? (l.sparse ? "MLA attention with DSA" : "MLA attention")
                  : l.attention == attention_kind::gqa  ? "GQA attention"
                  : l.attention == attention_kind::mamba2 ? "a Mamba-2 mixer"
                                                          : "no sequence mixer";
  if (l.attention == attention_kind::gqa || l.attention == attention_kind::mla)
    s += rope.type == rope_type::none ? ", no RoPE" : rope_interleave ? ", interleaved RoPE" : ", half-split RoPE";
  if (l.window) s += cat(", a sliding window of ", l.window);
  s += l.ffn == ffn_kind::none ? ", no feed-forward"
       : l.ffn == ffn_kind::dense ? ", a dense MLP"
       : router == router_kind::softmax_topk ? ", MoE with softmax top-k routing"
                                             : ", MoE with sigmoid group-limited routing";
  return s;
}

// mamba2 (pure Mamba-2 stack) and nemotron_h (a pattern of Mamba-2, attention without
// RoPE, relu^2 MLP and MoE blocks): backbone.layers.N.{norm, mixer}.
SLM_INLINE result<model_config> model_config::from_json_mamba_style(const json::value& cfg) {
  const config_reader r{cfg};
  model_config c;
  c.model_type = std::string(cfg.get_string("model_type"));
  const bool nemotron = c.model_type == "nemotron_h";
  c.layers_prefix = "backbone.layers";
  c.embed_name = "backbone.embeddings";
  c.final_norm_name = "backbone.norm_f";
  c.single_norm_blocks = true;
  c.attention_name = c.ffn_name = "mixer";
  c.rope.type = rope_type::none;  // neither has positional encodings: the SSM layers carry position
  for (const char* key : {"dtype", "torch_dtype"}) {
    const std::string_view d = cfg.get_string(key, "float32");
    if (d != "float32" && d != "bfloat16" && d != "float16" && d != "auto")
      return make_error(errc::unsupported, "config.json: \"", key, "\" = \"", d, "\" is not supported");
  }
  SLM_TRY(r.size("vocab_size", c.vocab, true, std::size_t{1} << 26));
  SLM_TRY(r.size("hidden_size", c.hidden, true, std::size_t{1} << 20));
  if (c.vocab == 0 || c.hidden == 0)
    return make_error(errc::format_error, "config.json: vocab_size and hidden_size must be positive");
  SLM_TRY(r.number("layer_norm_epsilon", c.norm_eps));
  if (!(c.norm_eps > 0)) return make_error(errc::format_error, "config.json: \"layer_norm_epsilon\" must be positive");
  c.ssm_eps = c.norm_eps;
  c.tie_embeddings = !nemotron;  // Mamba2Config ties by default, NemotronHConfig does not
  SLM_TRY(r.boolean("tie_word_embeddings", c.tie_embeddings));
  SLM_TRY(r.size("max_position_embeddings", c.max_positions, false));
  SLM_TRY(r.size(nemotron ? "ssm_state_size" : "state_size", c.ssm_state, true, 1 << 16));
  SLM_TRY(r.size("n_groups", c.ssm_groups, false, 1 << 16));
  SLM_TRY(r.size(nemotron ? "mamba_num_heads" : "num_heads", c.ssm_heads, true, 1 << 16));
  SLM_TRY(r.size(nemotron ? "mamba_head_dim" : "head_dim", c.ssm_head_dim, true, 1 << 16));
  SLM_TRY(r.size("conv_kernel", c.ssm_conv, false, 1 << 10));
  SLM_TRY(r.size("chunk_size", c.ssm_chunk, false, 1 << 16));
  if (cfg.get_bool(nemotron ? "mamba_proj_bias" : "use_bias", false))
    return make_error(errc::unsupported, "config.json: \"", nemotron ? "mamba_proj_bias" : "use_bias",
                      "\" = true (projection biases in the Mamba-2 mixer) is not supported");
  if (!cfg.get_bool("rms_norm", true))
    return make_error(errc::unsupported, "config.json: \"rms_norm\" = false (an ungated Mamba-2 output) is not supported");
  if (const std::string_view a = cfg.get_string(nemotron ? "mamba_hidden_act" : "hidden_act", "silu"); a != "silu")
    return make_error(errc::unsupported, "config.json: the Mamba-2 activation \"", a, "\" is not supported (silu is)");
  if (nemotron) {
    // transformers' NemotronHMamba2Mixer clamps dt to (time_step_min, inf) whatever
    // time_step_limit says, and normalizes per group of d_inner / n_groups.
    float dt_min = 0.001f;
    SLM_TRY(r.number("time_step_min", dt_min));
    c.ssm_dt_min = dt_min;
  } else {
    // Mamba2ForCausalLM: time_step_limit as given ((0, inf) = no clamp), and its gated
    // RMSNorm normalizes over the whole inner width, not per group.
    const json::value& lim = cfg["time_step_limit"];
    if (lim.is_array() && lim.size() == 2) {
      c.ssm_dt_min = static_cast<float>(lim[0].as_double());
      c.ssm_dt_max = lim[1].is_number() ? static_cast<float>(lim[1].as_double()) : 0.0f;  // non-number: Infinity
    }
    c.ssm_norm_group = c.ssm_heads * c.ssm_head_dim;
  }
  if (c.ssm_state == 0 || c.ssm_heads == 0 || c.ssm_head_dim == 0 || c.ssm_groups == 0 || c.ssm_heads % c.ssm_groups)
    return make_error(errc::format_error, "config.json: the Mamba-2 sizes (heads ", c.ssm_heads, ", head dim ",
                      c.ssm_head_dim, ", state ", c.ssm_state, ", groups ", c.ssm_groups, ") are inconsistent");

  // The pattern.
  std::vector<std::string_view> kinds;
  if (nemotron) {
    if (const json::value* t = cfg.find("layers_block_type"); t && t->is_array()) {
      for (const json::value& v : t->items()) {
        if (!v.is_string()) return make_error(errc::format_error, "config.json: \"layers_block_type\" holds a non-string");
        kinds.push_back(v.as_string());
      }
    } else if (const std::string_view pat = cfg.get_string("hybrid_override_pattern"); !pat.empty()) {
      for (char ch : pat) {  // the older pattern string: M mamba, * attention, - MLP, E MoE
        kinds.push_back(ch == 'M' ? "linear_attention" : ch == '*' ? "full_attention" : ch == '-' ? "mlp"
                        : ch == 'E' ? "moe" : std::string_view(&ch, 0));
        if (kinds.back().empty())
          return make_error(errc::unsupported, "config.json: \"hybrid_override_pattern\" has '", std::string(1, ch),
                            "' (M, *, - and E are supported)");
      }
    } else {
      return make_error(errc::format_error, "config.json: nemotron_h needs \"layers_block_type\" or \"hybrid_override_pattern\"");
    }
    c.n_layers = kinds.size();
  } else {
    SLM_TRY(r.size("num_hidden_layers", c.n_layers, true, 4096));
  }
  if (c.n_layers == 0 || c.n_layers > 4096)
    return make_error(errc::format_error, "config.json: the model has ", c.n_layers, " layers");
  c.layers.resize(c.n_layers);
  bool any_attention = false, any_mlp = false, any_moe = false;
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    layer_spec& l = c.layers[i];
    l.attention = attention_kind::none;
    l.ffn = ffn_kind::none;
    const std::string_view k = nemotron ? kinds[i] : "linear_attention";
    if (k == "linear_attention" || k == "mamba") l.attention = attention_kind::mamba2;
    else if (k == "full_attention" || k == "attention") { l.attention = attention_kind::gqa; any_attention = true; }
    else if (k == "mlp") { l.ffn = ffn_kind::dense; any_mlp = true; }
    else if (k == "moe") { l.ffn = ffn_kind::moe; any_moe = true; }
    else return make_error(errc::unsupported, "config.json: \"layers_block_type\"[", i, "] = \"", k, "\" is not supported");
  }
  if (any_attention) {
    SLM_TRY(r.size("num_attention_heads", c.n_heads, true, 4096));
    c.n_kv_heads = c.n_heads;
    SLM_TRY(r.size("num_key_value_heads", c.n_kv_heads, false, 4096));
    c.head_dim = c.n_heads ? c.hidden / c.n_heads : 0;
    SLM_TRY(r.size("head_dim", c.head_dim, false, 4096));
    if (c.head_dim > 4096)  // derived from hidden_size when "head_dim" is absent: the same limit
      return make_error(errc::out_of_range, "config.json: head_dim ", c.head_dim,
                        " (hidden_size / num_attention_heads) exceeds 4096");
    if (c.n_heads == 0 || c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads || c.head_dim == 0)
      return make_error(errc::format_error, "config.json: num_attention_heads, num_key_value_heads and head_dim are inconsistent");
    if (cfg.get_bool("attention_bias", false))
      return make_error(errc::unsupported, "config.json: \"attention_bias\" = true is not supported for nemotron_h");
  }
  if (any_mlp || any_moe) {
    auto act = parse_activation(cfg.get_string("mlp_hidden_act", "relu2"), "mlp_hidden_act");
    if (!act.ok()) return std::move(act).take_error();
    c.act = *act;
    c.mlp_gated = false;  // NemotronHMLP and its experts: down(act(up(x)))
    if (cfg.get_bool("mlp_bias", false))
      return make_error(errc::unsupported, "config.json: \"mlp_bias\" = true is not supported for nemotron_h");
  }
  if (any_mlp) SLM_TRY(r.size("intermediate_size", c.intermediate, true, std::size_t{1} << 24));
  if (any_moe) {
    if (const json::value* lat = cfg.find("moe_latent_size"); lat && !lat->is_null())
      return make_error(errc::unsupported, "config.json: \"moe_latent_size\" (latent MoE projections) is not supported");
    SLM_TRY(r.size("n_routed_experts", c.n_experts, true, 1 << 16));
    SLM_TRY(r.size("num_experts_per_tok", c.experts_per_token, true, 1 << 16));
    SLM_TRY(r.size("moe_intermediate_size", c.expert_intermediate, true, std::size_t{1} << 24));
    SLM_TRY(r.size("moe_shared_expert_intermediate_size", c.shared_expert_intermediate, false, std::size_t{1} << 24));
    SLM_TRY(r.size("n_group", c.n_group, false, 1 << 16));
    SLM_TRY(r.size("topk_group", c.topk_group, false, 1 << 16));
    SLM_TRY(r.boolean("norm_topk_prob", c.norm_topk_prob));
    SLM_TRY(r.number("routed_scaling_factor", c.routed_scaling_factor));
    c.router = router_kind::sigmoid_grouped;
    if (c.n_experts == 0 || c.experts_per_token == 0 || c.experts_per_token > c.n_experts || c.expert_intermediate == 0)
      return make_error(errc::format_error, "config.json: the MoE sizes are inconsistent");
    if (c.n_group == 0 || c.n_experts % c.n_group || c.topk_group == 0 || c.topk_group > c.n_group ||
        (c.n_group > 1 && c.n_experts / c.n_group < 2))
      return make_error(errc::format_error, "config.json: \"n_group\" / \"topk_group\" do not fit ", c.n_experts, " experts");
  }
  return c;
}

// granitemoehybrid: Llama-style names, each layer Mamba-2 (model.layers.N.mamba) or
// attention, then a softmax top-k MoE (block_sparse_moe, stacked input_linear /
// output_linear experts) plus a gated shared MLP (shared_mlp), and muP multipliers.
SLM_INLINE status model_config::from_json_granite(const json::value& cfg, model_config& c) {
  const config_reader r{cfg};
  c.mamba_name = "mamba";
  c.ffn_name = "block_sparse_moe";
  SLM_TRY(r.number("embedding_multiplier", c.embedding_multiplier));
  SLM_TRY(r.number("residual_multiplier", c.residual_multiplier));
  SLM_TRY(r.number("attention_multiplier", c.attention_multiplier));
  SLM_TRY(r.number("logits_scaling", c.logits_scaling));
  if (!(c.attention_multiplier > 0) || !(c.logits_scaling != 0) || !std::isfinite(c.embedding_multiplier) ||
      !std::isfinite(c.residual_multiplier))
    return make_error(errc::format_error, "config.json: a granite multiplier is not a finite positive number");
  if (cfg.get_string("position_embedding_type", "") != "rope") c.rope.type = rope_type::none;
  SLM_TRY(r.size("mamba_d_state", c.ssm_state, true, 1 << 16));
  SLM_TRY(r.size("mamba_n_groups", c.ssm_groups, false, 1 << 16));
  SLM_TRY(r.size("mamba_n_heads", c.ssm_heads, true, 1 << 16));
  SLM_TRY(r.size("mamba_d_head", c.ssm_head_dim, true, 1 << 16));
  SLM_TRY(r.size("mamba_d_conv", c.ssm_conv, false, 1 << 10));
  SLM_TRY(r.size("mamba_chunk_size", c.ssm_chunk, false, 1 << 16));
  c.ssm_eps = c.norm_eps;
  c.ssm_norm_group = c.ssm_heads * c.ssm_head_dim;  // GraniteMoeHybridRMSNormGated: the whole width
  if (cfg.get_bool("mamba_proj_bias", false))
    return make_error(errc::unsupported, "config.json: \"mamba_proj_bias\" = true is not supported");
  const json::value& lim = cfg["time_step_limit"];
  if (lim.is_array() && lim.size() == 2) {
    c.ssm_dt_min = static_cast<float>(lim[0].as_double());
    c.ssm_dt_max = lim[1].is_number() ? static_cast<float>(lim[1].as_double()) : 0.0f;
  }
  std::vector<std::string_view> types;
  SLM_TRY(r.strings("layer_types", c.n_layers, types));
  if (types.empty()) SLM_TRY(r.strings("layers_block_type", c.n_layers, types));
  if (types.empty()) return make_error(errc::format_error, "config.json: granitemoehybrid needs \"layer_types\"");
  SLM_TRY(r.size("num_local_experts", c.n_experts, true, 1 << 16));
  SLM_TRY(r.size("num_experts_per_tok", c.experts_per_token, true, 1 << 16));
  c.expert_intermediate = c.intermediate;
  SLM_TRY(r.size("shared_intermediate_size", c.shared_expert_intermediate, true, std::size_t{1} << 24));
  c.router = router_kind::softmax_topk;
  c.norm_topk_prob = true;  // softmax over the top-k logits = renormalized top-k probabilities
  if (c.n_experts == 0)
    return make_error(errc::unsupported, "config.json: granitemoehybrid without experts (a dense shared MLP only) is not supported");
  if (c.experts_per_token == 0 || c.experts_per_token > c.n_experts || c.expert_intermediate == 0)
    return make_error(errc::format_error, "config.json: the MoE sizes are inconsistent");
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    if (types[i] == "linear_attention" || types[i] == "mamba") c.layers[i].attention = attention_kind::mamba2;
    else if (types[i] == "full_attention" || types[i] == "attention") c.layers[i].attention = attention_kind::gqa;
    else return make_error(errc::unsupported, "config.json: \"layer_types\"[", i, "] = \"", types[i], "\" is not supported");
    c.layers[i].window = 0;
    c.layers[i].ffn = ffn_kind::moe;
  }
  if (c.ssm_state == 0 || c.ssm_heads == 0 || c.ssm_head_dim == 0 || c.ssm_groups == 0 || c.ssm_heads % c.ssm_groups)
    return make_error(errc::format_error, "config.json: the Mamba-2 sizes are inconsistent");
  return {};
}

// starcoder2 beyond the Llama-style keys (transformers' Starcoder2Config and modeling):
// LayerNorm (norm_epsilon, read with the other keys) in the blocks and at the end,
// use_bias on q/k/v/o and on the plain MLP mlp.c_fc -> hidden_act -> mlp.c_proj, and
// sliding_window on every layer (read with Mistral's). Its RoPE takes the whole head_dim
// (partial_rotary_factor is not read by its default RoPE), so a factor is refused rather
// than guessed.
SLM_INLINE status model_config::from_json_starcoder2(const json::value& cfg, model_config& c) {
  const config_reader r{cfg};
  c.layer_norm = true;
  bool bias = true;  // Starcoder2Config's default
  SLM_TRY(r.boolean("use_bias", bias));
  c.projection_bias = bias;
  c.mlp_gated = false;
  c.mlp_up_name = "c_fc";
  c.mlp_down_name = "c_proj";
  if (c.rope.partial_rotary_factor != 1.0)
    return make_error(errc::unsupported, "config.json: \"partial_rotary_factor\" = ", c.rope.partial_rotary_factor,
                      " is not supported by model_type starcoder2 (its RoPE rotates the whole head)");
  return {};
}

SLM_INLINE result<model_config> model_config::from_json(const json::value& cfg) {
  if (!cfg.is_object()) return make_error(errc::format_error, "config.json is not an object");
  const config_reader r{cfg};
  model_config c;
  c.model_type = std::string(cfg.get_string("model_type"));
  const std::string_view mt = c.model_type;
  const bool granite = mt == "granitemoehybrid";
  const bool starcoder2 = mt == "starcoder2";
  const bool llama_like = mt == "llama" || mt == "mistral" || mt == "qwen2" || mt == "qwen3" || mt == "qwen3_moe" ||
                          mt == "mixtral" || granite || starcoder2;
  const bool deepseek = mt == "deepseek_v3" || mt == "deepseek_v32";
  if (mt == "mamba2" || mt == "nemotron_h") return from_json_mamba_style(cfg);
  if (!llama_like && !deepseek)
    return make_error(errc::unsupported, "config.json: \"model_type\" = \"", mt,
                      "\" is not supported (llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, starcoder2, deepseek_v3, deepseek_v32, ",
                      "mamba2, nemotron_h, granitemoehybrid are)");

  for (const char* key : {"dtype", "torch_dtype"}) {
    const std::string_view d = cfg.get_string(key, "float32");
    if (d != "float32" && d != "bfloat16" && d != "float16" && d != "auto")
      return make_error(errc::unsupported, "config.json: \"", key, "\" = \"", d, "\" is not supported");
  }

  SLM_TRY(r.size("vocab_size", c.vocab, true, std::size_t{1} << 26));
  SLM_TRY(r.size("hidden_size", c.hidden, true, std::size_t{1} << 20));
  SLM_TRY(r.size("num_hidden_layers", c.n_layers, true, 4096));
  SLM_TRY(r.size("num_attention_heads", c.n_heads, true, 4096));
  c.n_kv_heads = c.n_heads;
  SLM_TRY(r.size("num_key_value_heads", c.n_kv_heads, false, 4096));
  SLM_TRY(r.size("max_position_embeddings", c.max_positions, false));
  SLM_TRY(r.size("intermediate_size", c.intermediate, false, std::size_t{1} << 24));
  // StarCoder2's LayerNorm epsilon has its own key; its config ties the embeddings by default.
  const char* eps_key = starcoder2 ? "norm_epsilon" : "rms_norm_eps";
  if (starcoder2) {
    c.norm_eps = 1e-5f;
    c.tie_embeddings = true;
  }
  SLM_TRY(r.number(eps_key, c.norm_eps));
  SLM_TRY(r.boolean("tie_word_embeddings", c.tie_embeddings));
  if (c.vocab == 0 || c.hidden == 0 || c.n_layers == 0 || c.n_heads == 0)
    return make_error(errc::format_error, "config.json: vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive");
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0)
    return make_error(errc::format_error, "config.json: \"num_key_value_heads\" ", c.n_kv_heads,
                      " does not divide num_attention_heads ", c.n_heads);
  c.head_dim = c.hidden / c.n_heads;
  SLM_TRY(r.size("head_dim", c.head_dim, false, 4096));
  if (c.head_dim > 4096)  // derived from hidden_size when "head_dim" is absent: the same limit
    return make_error(errc::out_of_range, "config.json: head_dim ", c.head_dim,
                      " (hidden_size / num_attention_heads) exceeds 4096");
  if (c.head_dim == 0) return make_error(errc::format_error, "config.json: \"head_dim\" is 0");
  if (!(c.norm_eps > 0)) return make_error(errc::format_error, "config.json: \"", eps_key, "\" must be positive");

  auto act = parse_activation(cfg.get_string("hidden_act", starcoder2 ? "gelu_pytorch_tanh" : "silu"));
  if (!act.ok()) return std::move(act).take_error();
  c.act = *act;
  if (const json::value* a = cfg.find("attn_logit_softcapping"); a && !a->is_null())
    return make_error(errc::unsupported, "config.json: \"attn_logit_softcapping\" is not supported by model_type ", mt);

  auto rope = rope_params_from_config(cfg);
  if (!rope.ok()) return std::move(rope).take_error();
  c.rope = *rope;

  c.qk_norm = mt == "qwen3" || mt == "qwen3_moe";
  if (starcoder2) SLM_TRY(from_json_starcoder2(cfg, c));

  // Per-layer attention.
  c.layers.resize(c.n_layers);
  if (granite) {
    SLM_TRY(from_json_granite(cfg, c));
    return c;
  }
  std::size_t window = 0;
  SLM_TRY(r.size("sliding_window", window, false));
  std::vector<std::string_view> layer_types;
  SLM_TRY(r.strings("layer_types", c.n_layers, layer_types));

  if (deepseek) {
    SLM_TRY(r.size("q_lora_rank", c.q_lora_rank, false, 1 << 20));
    SLM_TRY(r.size("kv_lora_rank", c.kv_lora_rank, true, 1 << 20));
    SLM_TRY(r.size("qk_nope_head_dim", c.qk_nope_dim, true, 4096));
    SLM_TRY(r.size("qk_rope_head_dim", c.qk_rope_dim, true, 4096));
    SLM_TRY(r.size("v_head_dim", c.v_head_dim, true, 4096));
    c.rope_interleave = true;
    SLM_TRY(r.boolean("rope_interleave", c.rope_interleave));
    if (c.kv_lora_rank == 0 || c.qk_rope_dim == 0 || c.qk_rope_dim % 2 != 0 || c.v_head_dim == 0)
      return make_error(errc::format_error, "config.json: MLA needs positive kv_lora_rank, v_head_dim and an even qk_rope_head_dim");
    if (c.n_kv_heads != c.n_heads)
      return make_error(errc::unsupported, "config.json: MLA with num_key_value_heads ", c.n_kv_heads,
                        " != num_attention_heads ", c.n_heads, " is not supported");
    const bool v32 = mt == "deepseek_v32";
    if (v32) {
      SLM_TRY(r.size("index_n_heads", c.index_heads, true, 4096));
      SLM_TRY(r.size("index_head_dim", c.index_head_dim, true, 4096));
      SLM_TRY(r.size("index_topk", c.index_topk, true));
      if (c.q_lora_rank == 0)
        return make_error(errc::unsupported, "config.json: deepseek_v32 needs \"q_lora_rank\" (its indexer reads the query latent)");
      if (c.index_heads == 0 || c.index_topk == 0 || c.index_head_dim < c.qk_rope_dim)
        return make_error(errc::format_error, "config.json: index_n_heads and index_topk must be positive and index_head_dim >= qk_rope_head_dim");
    }
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      c.layers[i].attention = attention_kind::mla;
      c.layers[i].sparse = v32;
      if (!layer_types.empty()) {
        const std::string_view t = layer_types[i];
        if (t == "deepseek_sparse_attention" && v32) continue;
        if (t == "full_attention" || t == "attention") { c.layers[i].sparse = false; continue; }
        return make_error(errc::unsupported, "config.json: \"layer_types\"[", i, "] = \"", t, "\" is not supported");
      }
    }
  } else {
    // Sliding windows: layer_types when given (Qwen2/3, transformers 5.x); else Mistral,
    // Mixtral and StarCoder2 apply `sliding_window` to every layer, Qwen2/3 only with
    // use_sliding_window, from layer max_window_layers on.
    const bool every_layer = mt == "mistral" || mt == "mixtral" || starcoder2;
    bool use_sliding = every_layer;
    if (mt == "qwen2" || mt == "qwen3" || mt == "qwen3_moe") SLM_TRY(r.boolean("use_sliding_window", use_sliding));
    std::size_t max_window_layers = 0;
    SLM_TRY(r.size("max_window_layers", max_window_layers, false));
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      if (!layer_types.empty()) {
        const std::string_view t = layer_types[i];
        if (t == "sliding_attention") {
          if (window == 0)
            return make_error(errc::format_error, "config.json: \"layer_types\"[", i, "] is sliding_attention but \"sliding_window\" is not set");
          c.layers[i].window = window;
        } else if (t != "full_attention") {
          return make_error(errc::unsupported, "config.json: \"layer_types\"[", i, "] = \"", t, "\" is not supported");
        }
      } else if (use_sliding && window != 0 && (every_layer || i >= max_window_layers)) {
        c.layers[i].window = window;
      }
    }
  }

  // Feed-forward per layer.
  if (mt == "qwen3_moe" || mt == "mixtral") {
    c.n_experts = 0;
    SLM_TRY(r.size("num_experts", c.n_experts, false, 1 << 16));
    SLM_TRY(r.size("num_local_experts", c.n_experts, false, 1 << 16));
    SLM_TRY(r.size("num_experts_per_tok", c.experts_per_token, true, 1 << 16));
    c.router = router_kind::softmax_topk;
    if (mt == "mixtral") {
      c.expert_intermediate = c.intermediate;
      c.norm_topk_prob = true;  // Mixtral always renormalizes its top-k weights
    } else {
      SLM_TRY(r.size("moe_intermediate_size", c.expert_intermediate, true, std::size_t{1} << 24));
      c.norm_topk_prob = false;
      SLM_TRY(r.boolean("norm_topk_prob", c.norm_topk_prob));
    }
    std::size_t sparse_step = 1;
    SLM_TRY(r.size("decoder_sparse_step", sparse_step, false, 4096));
    // One flag per layer (not a search of the list per layer: a hostile list of 500k
    // entries times 4096 layers would be quadratic). Indices past the last layer match
    // no layer, as in transformers' `layer_idx not in mlp_only_layers`.
    std::vector<bool> mlp_only(c.n_layers, false);
    if (const json::value* m = cfg.find("mlp_only_layers"); m && !m->is_null()) {
      if (!m->is_array()) return make_error(errc::format_error, "config.json: \"mlp_only_layers\" is not a list");
      for (const json::value& v : m->items()) {
        auto n = v.as_uint64();
        if (!n) return make_error(errc::format_error, "config.json: \"mlp_only_layers\" holds a non-integer");
        if (*n < c.n_layers) mlp_only[static_cast<std::size_t>(*n)] = true;
      }
    }
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      const bool dense_only = mlp_only[i];
      const bool sparse = c.n_experts > 0 && sparse_step > 0 && (i + 1) % sparse_step == 0;
      c.layers[i].ffn = !dense_only && sparse ? ffn_kind::moe : ffn_kind::dense;
    }
  } else if (deepseek) {
    SLM_TRY(r.size("n_routed_experts", c.n_experts, true, 1 << 16));
    SLM_TRY(r.size("num_experts_per_tok", c.experts_per_token, true, 1 << 16));
    SLM_TRY(r.size("moe_intermediate_size", c.expert_intermediate, true, std::size_t{1} << 24));
    SLM_TRY(r.size("n_shared_experts", c.n_shared_experts, false, 1 << 16));
    c.shared_expert_intermediate = c.expert_intermediate * c.n_shared_experts;
    SLM_TRY(r.size("n_group", c.n_group, false, 1 << 16));
    SLM_TRY(r.size("topk_group", c.topk_group, false, 1 << 16));
    SLM_TRY(r.boolean("norm_topk_prob", c.norm_topk_prob));
    SLM_TRY(r.number("routed_scaling_factor", c.routed_scaling_factor));
    c.router = router_kind::sigmoid_grouped;
    if (const std::string_view s = cfg.get_string("scoring_func", "sigmoid"); s != "sigmoid")
      return make_error(errc::unsupported, "config.json: \"scoring_func\" = \"", s, "\" is not supported (sigmoid is)");
    if (const std::string_view s = cfg.get_string("topk_method", "noaux_tc"); s != "noaux_tc")
      return make_error(errc::unsupported, "config.json: \"topk_method\" = \"", s, "\" is not supported (noaux_tc is)");
    std::size_t first_dense = 0;
    SLM_TRY(r.size("first_k_dense_replace", first_dense, false));
    std::vector<std::string_view> mlp_types;
    SLM_TRY(r.strings("mlp_layer_types", c.n_layers, mlp_types));
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      if (!mlp_types.empty()) {
        if (mlp_types[i] != "dense" && mlp_types[i] != "sparse")
          return make_error(errc::unsupported, "config.json: \"mlp_layer_types\"[", i, "] = \"", mlp_types[i], "\" is not supported");
        c.layers[i].ffn = mlp_types[i] == "sparse" ? ffn_kind::moe : ffn_kind::dense;
      } else {
        c.layers[i].ffn = i >= first_dense ? ffn_kind::moe : ffn_kind::dense;
      }
    }
    if (c.n_group == 0 || c.n_experts % c.n_group != 0 || c.topk_group == 0 || c.topk_group > c.n_group)
      return make_error(errc::format_error, "config.json: \"n_group\" ", c.n_group, " must divide n_routed_experts ",
                        c.n_experts, " and \"topk_group\" ", c.topk_group, " must be in [1, n_group]");
    if (c.n_experts / c.n_group < 2)
      return make_error(errc::unsupported, "config.json: group-limited routing needs at least 2 experts per group");
  }
  for (const layer_spec& l : c.layers) {
    if (l.ffn == ffn_kind::moe) {
      if (c.n_experts == 0 || c.experts_per_token == 0 || c.experts_per_token > c.n_experts)
        return make_error(errc::format_error, "config.json: num_experts_per_tok ", c.experts_per_token,
                          " must be in [1, number of experts ", c.n_experts, "]");
      if (c.expert_intermediate == 0) return make_error(errc::format_error, "config.json: the expert width is 0");
    } else if (c.intermediate == 0) {
      return make_error(errc::format_error, "config.json: \"intermediate_size\" is missing or 0");
    }
  }
  return c;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
