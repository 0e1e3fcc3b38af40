// slm/model_config.hpp - what a config.json says about a decoder-only transformer.
//
// One struct describes every supported arrangement (the HF model_types llama, mistral,
// qwen2, qwen3, qwen3_moe, mixtral, deepseek_v3, deepseek_v32), per layer: which
// attention (GQA or MLA, dense or DSA-sparse, full or sliding window) and which
// feed-forward (dense or MoE). Both config styles load: transformers 5.x
// (`rope_parameters`, `dtype`, `num_local_experts`) and 4.x (`rope_theta` +
// `rope_scaling`, `torch_dtype`, `num_experts`). A value slm cannot honour (an unknown
// model_type or activation, a RoPE type, a routing method, a shape that does not
// divide) is an error naming the key; keys that do not change the math (dropout,
// initializer_range, token ids, ...) are ignored, as transformers ignores them at
// inference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "slm/json.hpp"
#include "slm/activation.hpp"
#include "slm/rope.hpp"
#include "slm/status.hpp"

namespace slm {

enum class attention_kind : std::uint8_t { gqa, mla };
enum class ffn_kind : std::uint8_t { dense, moe };
enum class router_kind : std::uint8_t {
  softmax_topk,     // softmax over all experts, then top-k (Qwen-MoE, Mixtral)
  sigmoid_grouped,  // sigmoid scores, + correction bias for selection, group-limited top-k (DeepSeek-V3)
};

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

  std::size_t qk_head_dim() const noexcept { return qk_nope_dim + qk_rope_dim; }

  // What layer i needs, in words (for errors that say why a composition does not fit).
  std::string describe_layer(std::size_t i) const {
    const layer_spec& l = layers[i];
    std::string s = l.attention == attention_kind::mla ? (l.sparse ? "MLA attention with DSA" : "MLA attention")
                                                       : "GQA attention";
    s += rope_interleave ? ", interleaved RoPE" : ", half-split RoPE";
    if (l.window) s += cat(", a sliding window of ", l.window);
    s += l.ffn == ffn_kind::dense ? ", a dense MLP"
         : router == router_kind::softmax_topk ? ", MoE with softmax top-k routing"
                                               : ", MoE with sigmoid group-limited routing";
    return s;
  }

  static result<model_config> from_json(const json::value& cfg);
};

namespace detail::cfg {

struct reader {
  const json::value& cfg;

  status size(std::string_view key, std::size_t& out, bool required, std::size_t max = std::size_t{1} << 40) const {
    const json::value* v = cfg.find(key);
    if (!v || v->is_null()) {
      if (required) return make_error(errc::format_error, "config.json: \"", key, "\" is missing");
      return {};
    }
    auto n = v->as_uint64();
    if (!n || *n > max)
      return make_error(errc::format_error, "config.json: \"", key, "\" is not an integer in [0, ", max, "]");
    out = static_cast<std::size_t>(*n);
    return {};
  }
  status number(std::string_view key, float& out) const {
    const json::value* v = cfg.find(key);
    if (!v || v->is_null()) return {};
    if (!v->is_number()) return make_error(errc::format_error, "config.json: \"", key, "\" is not a number");
    out = static_cast<float>(v->as_double());
    return {};
  }
  status boolean(std::string_view key, bool& out) const {
    const json::value* v = cfg.find(key);
    if (!v || v->is_null()) return {};
    if (!v->is_bool()) return make_error(errc::format_error, "config.json: \"", key, "\" is not true or false");
    out = v->as_bool();
    return {};
  }
  // A list of strings, one per layer.
  status layer_strings(std::string_view key, std::size_t n, std::vector<std::string_view>& out) const {
    const json::value* v = cfg.find(key);
    if (!v || v->is_null()) return {};
    if (!v->is_array() || v->size() != n)
      return make_error(errc::format_error, "config.json: \"", key, "\" is not a list of ", n, " strings (one per layer)");
    for (const json::value& s : v->items()) {
      if (!s.is_string()) return make_error(errc::format_error, "config.json: \"", key, "\" holds a non-string");
      out.push_back(s.as_string());
    }
    return {};
  }
};

}  // namespace detail::cfg

inline result<model_config> model_config::from_json(const json::value& cfg) {
  if (!cfg.is_object()) return make_error(errc::format_error, "config.json is not an object");
  const detail::cfg::reader r{cfg};
  model_config c;
  c.model_type = std::string(cfg.get_string("model_type"));
  const std::string_view mt = c.model_type;
  const bool llama_like = mt == "llama" || mt == "mistral" || mt == "qwen2" || mt == "qwen3" || mt == "qwen3_moe" ||
                          mt == "mixtral";
  const bool deepseek = mt == "deepseek_v3" || mt == "deepseek_v32";
  if (!llama_like && !deepseek)
    return make_error(errc::unsupported, "config.json: \"model_type\" = \"", mt,
                      "\" is not supported (llama, mistral, qwen2, qwen3, qwen3_moe, mixtral, deepseek_v3, deepseek_v32 are)");

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
  SLM_TRY(r.number("rms_norm_eps", c.norm_eps));
  SLM_TRY(r.boolean("tie_word_embeddings", c.tie_embeddings));
  if (c.vocab == 0 || c.hidden == 0 || c.n_layers == 0 || c.n_heads == 0)
    return make_error(errc::format_error, "config.json: vocab_size, hidden_size, num_hidden_layers and num_attention_heads must be positive");
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0)
    return make_error(errc::format_error, "config.json: \"num_key_value_heads\" ", c.n_kv_heads,
                      " does not divide num_attention_heads ", c.n_heads);
  c.head_dim = c.hidden / c.n_heads;
  SLM_TRY(r.size("head_dim", c.head_dim, false, 4096));
  if (c.head_dim == 0) return make_error(errc::format_error, "config.json: \"head_dim\" is 0");
  if (!(c.norm_eps > 0)) return make_error(errc::format_error, "config.json: \"rms_norm_eps\" must be positive");

  auto act = parse_activation(cfg.get_string("hidden_act", "silu"));
  if (!act.ok()) return std::move(act).take_error();
  c.act = *act;
  if (const json::value* a = cfg.find("attn_logit_softcapping"); a && !a->is_null())
    return make_error(errc::unsupported, "config.json: \"attn_logit_softcapping\" is not supported by model_type ", mt);

  auto rope = rope_params::from_config(cfg);
  if (!rope.ok()) return std::move(rope).take_error();
  c.rope = *rope;
  c.qk_norm = mt == "qwen3" || mt == "qwen3_moe";

  // Per-layer attention.
  c.layers.resize(c.n_layers);
  std::size_t window = 0;
  SLM_TRY(r.size("sliding_window", window, false));
  std::vector<std::string_view> layer_types;
  SLM_TRY(r.layer_strings("layer_types", c.n_layers, layer_types));

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
    // Sliding windows: layer_types when given (Qwen2/3, transformers 5.x); else Mistral
    // and Mixtral apply `sliding_window` to every layer, Qwen2/3 only with
    // use_sliding_window, from layer max_window_layers on.
    bool use_sliding = mt == "mistral" || mt == "mixtral";
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
      } else if (use_sliding && window != 0 && (mt == "mistral" || mt == "mixtral" || i >= max_window_layers)) {
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
    std::vector<std::size_t> mlp_only;
    if (const json::value* m = cfg.find("mlp_only_layers"); m && !m->is_null()) {
      if (!m->is_array()) return make_error(errc::format_error, "config.json: \"mlp_only_layers\" is not a list");
      for (const json::value& v : m->items()) {
        auto n = v.as_uint64();
        if (!n) return make_error(errc::format_error, "config.json: \"mlp_only_layers\" holds a non-integer");
        mlp_only.push_back(static_cast<std::size_t>(*n));
      }
    }
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      const bool dense_only = std::find(mlp_only.begin(), mlp_only.end(), i) != mlp_only.end();
      const bool sparse = c.n_experts > 0 && sparse_step > 0 && (i + 1) % sparse_step == 0;
      c.layers[i].ffn = !dense_only && sparse ? ffn_kind::moe : ffn_kind::dense;
    }
  } else if (deepseek) {
    SLM_TRY(r.size("n_routed_experts", c.n_experts, true, 1 << 16));
    SLM_TRY(r.size("num_experts_per_tok", c.experts_per_token, true, 1 << 16));
    SLM_TRY(r.size("moe_intermediate_size", c.expert_intermediate, true, std::size_t{1} << 24));
    SLM_TRY(r.size("n_shared_experts", c.n_shared_experts, false, 1 << 16));
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
    SLM_TRY(r.layer_strings("mlp_layer_types", c.n_layers, mlp_types));
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

}  // namespace slm
