// slm/models/hf/tensors.hpp - the tensors a Hugging Face checkpoint of a config holds, named
// and shaped as transformers saves them, for the families the tests check against a real
// checkpoint (tests/test_models.cpp: every golden's own file): llama, qwen3, qwen3_moe,
// deepseek_v3, deepseek_v32, mamba2, nemotron_h and granitemoehybrid. The list is computed
// from the model_config the loader itself reads, so it cannot drift from what the loader
// asks for. models/synthetic.hpp writes random checkpoints from it.
#pragma once
#include "slm/core/build_mode.hpp"

#include <string>
#include <string_view>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/layers/mamba2.hpp"
#include "slm/models/hf/bind.hpp"
#include "slm/models/hf/config.hpp"
#include "slm/models/tensor_spec.hpp"

namespace slm::hf {

// See the top of the file. Another model_type is refused with an error naming it.
result<std::vector<tensor_spec>> checkpoint_tensors(const model_config& c);

#if SLM_DEFINE_DECODER

SLM_INLINE result<std::vector<tensor_spec>> checkpoint_tensors(const model_config& c) {
  const std::string_view type = c.model_type;
  if (type != "llama" && type != "qwen3" && type != "qwen3_moe" && type != "deepseek_v3" && type != "deepseek_v32" &&
      type != "mamba2" && type != "nemotron_h" && type != "granitemoehybrid")
    return make_error(errc::unsupported, "no tensor list for model_type \"", type,
                      "\" (llama, qwen3, qwen3_moe, deepseek_v3, deepseek_v32, mamba2, nemotron_h, granitemoehybrid)");
  using I = std::int64_t;
  using fill = tensor_spec::fill;
  const bool granite = type == "granitemoehybrid";
  std::vector<tensor_spec> t;
  auto add = [&](std::string name, std::vector<I> shape, fill f) {
    tensor_spec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.init = f;
    t.push_back(std::move(s));
  };
  auto mat = [&](std::string name, std::size_t rows, std::size_t cols) {
    add(std::move(name), {static_cast<I>(rows), static_cast<I>(cols)}, fill::weight);
  };
  auto vec = [&](std::string name, std::size_t n, fill f = fill::ones) {
    add(std::move(name), {static_cast<I>(n)}, f);
  };
  auto mlp = [&](const std::string& p, std::size_t width, bool gated) {  // [d] -> [width] -> [d]
    if (gated) mat(p + ".gate_proj.weight", width, c.hidden);
    mat(cat(p, ".", gated ? "up_proj" : c.mlp_up_name, ".weight"), width, c.hidden);
    mat(cat(p, ".", gated ? "down_proj" : c.mlp_down_name, ".weight"), c.hidden, width);
  };

  mat(c.embed_name + ".weight", c.vocab, c.hidden);
  vec(c.final_norm_name + ".weight", c.hidden);
  if (!c.tie_embeddings) mat("lm_head.weight", c.vocab, c.hidden);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    const layer_spec& L = c.layers[i];
    const std::string p = c.layer_prefix(i);
    if (c.single_norm_blocks) {
      vec(p + ".norm.weight", c.hidden);
    } else {
      vec(p + ".input_layernorm.weight", c.hidden);
      vec(p + ".post_attention_layernorm.weight", c.hidden);
    }
    const std::string a = c.attention_prefix(i);
    if (L.attention == attention_kind::gqa) {
      mat(a + ".q_proj.weight", c.n_heads * c.head_dim, c.hidden);
      mat(a + ".k_proj.weight", c.n_kv_heads * c.head_dim, c.hidden);
      mat(a + ".v_proj.weight", c.n_kv_heads * c.head_dim, c.hidden);
      mat(a + ".o_proj.weight", c.hidden, c.n_heads * c.head_dim);
      if (c.qk_norm) {
        vec(a + ".q_norm.weight", c.head_dim);
        vec(a + ".k_norm.weight", c.head_dim);
      }
    } else if (L.attention == attention_kind::mla) {
      if (c.q_lora_rank > 0) {
        mat(a + ".q_a_proj.weight", c.q_lora_rank, c.hidden);
        vec(a + ".q_a_layernorm.weight", c.q_lora_rank);
        mat(a + ".q_b_proj.weight", c.n_heads * c.qk_head_dim(), c.q_lora_rank);
      } else {
        mat(a + ".q_proj.weight", c.n_heads * c.qk_head_dim(), c.hidden);
      }
      mat(a + ".kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_dim, c.hidden);
      vec(a + ".kv_a_layernorm.weight", c.kv_lora_rank);
      mat(a + ".kv_b_proj.weight", c.n_heads * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank);
      mat(a + ".o_proj.weight", c.hidden, c.n_heads * c.v_head_dim);
      if (L.sparse) {
        mat(a + ".indexer.wq_b.weight", c.index_heads * c.index_head_dim, c.q_lora_rank);
        mat(a + ".indexer.wk.weight", c.index_head_dim, c.hidden);
        mat(a + ".indexer.weights_proj.weight", c.index_heads, c.hidden);
        vec(a + ".indexer.k_norm.weight", c.index_head_dim);
        vec(a + ".indexer.k_norm.bias", c.index_head_dim, fill::zeros);
      }
    } else if (L.attention == attention_kind::mamba2) {
      const mamba2_config m = mamba2_config_of(c);
      const std::size_t H = m.heads(), cd = m.conv_dim();
      mat(a + ".in_proj.weight", m.in_proj_dim(), c.hidden);  // [d] -> [z, xBC, dt]
      add(a + ".conv1d.weight", {static_cast<I>(cd), 1, static_cast<I>(c.ssm_conv)}, fill::weight);
      vec(a + ".conv1d.bias", cd, fill::zeros);
      // A = -exp(A_log) = -1 and dt = softplus(dt_bias) = ln 2 for every head: a decay of
      // 0.5 per token, stable whatever the input; D = 1 passes the input through.
      vec(a + ".dt_bias", H, fill::zeros);
      vec(a + ".A_log", H, fill::zeros);
      vec(a + ".D", H);
      vec(a + ".norm.weight", m.inner());
      mat(a + ".out_proj.weight", c.hidden, m.inner());
    }
    if (L.ffn == ffn_kind::none) continue;
    const std::string f = c.ffn_prefix(i);
    if (L.ffn == ffn_kind::dense) {
      mlp(f, c.intermediate, c.mlp_gated);
    } else if (granite) {  // stacked experts: gate and up rows in one [E, 2I, d]
      const I E = static_cast<I>(c.n_experts), Ie = static_cast<I>(c.expert_intermediate), d = static_cast<I>(c.hidden);
      mat(f + ".router.layer.weight", c.n_experts, c.hidden);
      add(f + ".input_linear.weight", {E, 2 * Ie, d}, fill::weight);
      add(f + ".output_linear.weight", {E, d, Ie}, fill::weight);
      mat(p + ".shared_mlp.input_linear.weight", 2 * c.shared_expert_intermediate, c.hidden);
      mat(p + ".shared_mlp.output_linear.weight", c.hidden, c.shared_expert_intermediate);
    } else {
      mat(f + ".gate.weight", c.n_experts, c.hidden);
      if (c.router == router_kind::sigmoid_grouped) vec(f + ".gate.e_score_correction_bias", c.n_experts, fill::zeros);
      for (std::size_t e = 0; e < c.n_experts; ++e) mlp(cat(f, ".experts.", e), c.expert_intermediate, c.mlp_gated);
      if (c.shared_expert_intermediate > 0) mlp(f + ".shared_experts", c.shared_expert_intermediate, c.mlp_gated);
    }
  }
  return t;
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm::hf
