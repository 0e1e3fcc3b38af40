// slm/models/nam56r/tensors.hpp - the tensors a NAM56R canonical checkpoint (model_type
// "nam56r") holds, computed from its config.json: names, shapes, element types and how a
// random stand-in of each is filled (models/tensor_spec.hpp), for writing synthetic
// checkpoints at any dimensions.
//
// The list follows the loader, not a copy of its rules: the config is parsed by
// nam56r_config::from_json (models/nam56r/model.hpp), so the layer plan (hybrid_pattern
// tiling, DSA A-ranks, R layers, MTP depths), the per-layer sizes (nam56r_config::mla,
// mamba, m2rnn) and the optional parts (n-gram hash, structure embedding, bare attention
// layers) are the ones the loader derives; the names and shapes are those the loader
// reads (models/nam56r/model_impl.hpp load_weights, models/nam56r/bind.hpp). A config the
// loader refuses is refused here with the same error. The tests check the list against
// the committed checkpoints and load a checkpoint written from it.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "slm/core/hash.hpp"
#include "slm/core/status.hpp"
#include "slm/io/json.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/models/tensor_spec.hpp"

namespace slm {

// The tensors of a NAM56R canonical checkpoint (model_type "nam56r") of this config, named
// and shaped as the loader (models/nam56r/bind.hpp) reads them.
result<std::vector<tensor_spec>> nam56r_checkpoint_tensors(const json::value& config);

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE result<std::vector<tensor_spec>> nam56r_checkpoint_tensors(const json::value& config) {
  auto parsed = nam56r_config::from_json(config);
  if (!parsed.ok()) return std::move(parsed).take_error();
  const nam56r_config& c = *parsed;

  // The loader takes each size up to 2^40 (config_reader), where products of two already
  // overflow. Widths up to 2^20 keep every product of three (Mamba-3's R G N) within 64
  // bits, the expert count bounds the length of the list, and no tensor may exceed 2^48
  // elements (tensor_spec::elements and a writer's byte counts stay exact).
  constexpr std::size_t max_width = std::size_t{1} << 20, max_experts = 4096;
  constexpr std::uint64_t max_elements = std::uint64_t{1} << 48;
  const std::pair<const char*, std::size_t> widths[] = {
      {"hidden_size", c.hidden_size},
      {"ffn_hidden_size", c.ffn_hidden_size},
      {"num_attention_heads", c.num_attention_heads},
      {"q_lora_rank", c.q_lora_rank},
      {"kv_lora_rank", c.kv_lora_rank},
      {"qk_head_dim", c.qk_head_dim},
      {"qk_pos_emb_head_dim", c.qk_pos_emb_head_dim},
      {"v_head_dim", c.v_head_dim},
      {"dsa_indexer_n_heads", c.dsa_indexer_n_heads},
      {"dsa_indexer_head_dim", c.dsa_indexer_head_dim},
      {"moe_ffn_hidden_size", c.moe_ffn_hidden_size},
      {"moe_shared_expert_intermediate_size", c.moe_shared_expert_intermediate_size},
      {"mamba_state_dim", c.mamba_state_dim},
      {"mamba_head_dim", c.mamba_head_dim},
      {"mamba_expand", c.mamba_expand},
      {"mamba_num_groups", c.mamba_num_groups},
      {"mamba3_mimo_rank", c.mamba3_mimo_rank},
      {"m2rnn_k_head_dim", c.m2rnn_k_head_dim},
      {"m2rnn_v_head_dim", c.m2rnn_v_head_dim},
      {"m2rnn_num_heads", c.m2rnn_num_heads},
      {"m2rnn_conv_kernel", c.m2rnn_conv_kernel},
      {"ngram_hash.embed_dim", c.ngram_hash ? c.ngram_hash->embed_dim : 0},
      {"structure_embedding.bottleneck", c.structure_embedding ? c.structure_embedding->bottleneck : 0},
  };
  for (const auto& [key, value] : widths)
    if (value > max_width)
      return make_error(errc::out_of_range, "NAM56R config.json: ", key, " ", value,
                        " is beyond the tensor list's limit of ", max_width);
  if (c.num_moe_experts > max_experts)
    return make_error(errc::out_of_range, "NAM56R config.json: num_moe_experts ", c.num_moe_experts,
                      " is beyond the tensor list's limit of ", max_experts);

  using fill = tensor_spec::fill;
  const std::size_t d = c.hidden_size;
  std::vector<tensor_spec> t;
  auto add = [&](std::string name, std::initializer_list<std::size_t> dims, fill init) -> tensor_spec& {
    tensor_spec& s = t.emplace_back();
    s.name = std::move(name);
    for (std::size_t n : dims) s.shape.push_back(static_cast<std::int64_t>(n));
    s.init = init;
    return s;
  };
  auto linear = [&](const std::string& module, std::size_t out, std::size_t in) {
    add(module + ".weight", {out, in}, fill::weight);
  };
  auto norm = [&](std::string name, std::size_t n) { add(std::move(name), {n}, fill::ones); };
  auto constant = [&](std::string name, std::size_t n, std::int64_t value) {
    add(std::move(name), {n}, fill::values).values.assign(n, value);
  };
  auto listed = [](const std::vector<std::size_t>& list, std::size_t i) {
    return std::find(list.begin(), list.end(), i) != list.end();
  };

  // Megatron MLA under `prefix` (nam56r::load_mla), the lightning indexer on DSA layers;
  // the input norm unless config.json lists the layer as stored without one.
  auto attention = [&](const std::string& prefix, bool dsa, bool bare) {
    if (!bare) norm(prefix + ".input_layernorm.weight", d);
    const nam56r::mla_config m = c.mla(dsa);
    const std::string a = prefix + ".self_attention";
    linear(a + ".linear_q_down_proj", m.q_lora, m.hidden);
    linear(a + ".linear_q_up_proj", m.n_heads * (m.nope + m.rope), m.q_lora);
    linear(a + ".linear_kv_down_proj", m.kv_lora + m.rope, m.hidden);
    linear(a + ".linear_kv_up_proj", m.n_heads * (m.nope + m.v), m.kv_lora);
    linear(a + ".linear_proj", m.hidden, m.n_heads * m.v);
    if (m.indexer) {  // stored on every DSA layer, also those that borrow their top-k (IndexCache)
      const nam56r::indexer_config& ix = *m.indexer;
      const std::string x = a + ".core_attention.indexer";
      linear(x + ".linear_wq_b", ix.n_heads * ix.head_dim, ix.q_lora);
      linear(x + ".linear_wk", ix.head_dim, ix.hidden);
      linear(x + ".linear_weights_proj", ix.n_heads, ix.hidden);
      norm(x + ".k_norm.weight", ix.head_dim);
      add(x + ".k_norm.bias", {ix.head_dim}, fill::zeros);
    }
  };

  // The recurrences' time constants are constants, not random draws. Random dt_bias near 0
  // gives dt = softplus(0 +- 1) ~ 0.7: each token then mostly overwrites the state, and
  // draws of either sign make some heads far faster than others. dt_bias = -3 gives
  // dt ~ softplus(-3) = 0.05, inside Mamba's dt initialisation range [1e-3, 0.1], so the
  // state decays by exp(A dt) ~ 0.95 per token and stays bounded by its inputs; M2RNN's
  // A_log = 0 (A = 1, the low end of Mamba-2's A initialisation range [1, 16]) keeps its
  // forget gate near the same 0.95. D (the skip term) is 1, as Mamba initialises it.
  constexpr std::int64_t dt_bias = -3, a_log = 0;

  // Mamba-3 (nam56r::load_mamba3) with its two norms (the layer's and mixer.impl.pre_norm).
  auto mamba3 = [&](const std::string& prefix, std::size_t layer) {
    const mamba3_config m = c.mamba(layer);
    const std::size_t H = m.heads(), R = m.rank(), N = m.d_state, P = m.headdim;
    norm(prefix + ".norm.weight", d);
    norm(prefix + ".mixer.impl.pre_norm.weight", d);
    const std::string x = prefix + ".mixer.impl.mixer";
    linear(x + ".in_proj", m.in_proj_dim(), m.d_model);
    linear(x + ".out_proj", m.d_model, m.inner());
    constant(x + ".dt_bias", H, dt_bias);
    add(x + ".D", {H}, fill::ones);
    add(x + ".B_bias", {H, R, N}, fill::zeros);
    add(x + ".C_bias", {H, R, N}, fill::zeros);
    norm(x + ".B_norm.weight", N);
    norm(x + ".C_norm.weight", N);
    if (m.is_mimo)  // per-rank gains of x, z and the output: neutral
      for (const char* gain : {".mimo_x", ".mimo_z", ".mimo_o"}) add(x + gain, {H, R, P}, fill::ones);
    if (m.outproj_norm) norm(x + ".norm.weight", m.inner());
  };

  // M2RNN (nam56r::load_m2rnn) with the layer's norm.
  auto m2rnn = [&](const std::string& prefix) {
    const m2rnn_config m = c.m2rnn();
    const std::size_t H = m.heads(), V = m.v_head_dim;
    norm(prefix + ".norm.weight", d);
    const std::string x = prefix + ".mixer.impl";
    linear(x + ".input_projection", m.in_proj_dim(), m.d_model);
    linear(x + ".output_projection", m.d_model, m.hv());
    if (m.conv_kernel) {  // a depthwise filter: fan-in = its taps
      add(x + ".conv1d.weight", {m.conv_dim(), 1, m.conv_kernel}, fill::weight);
      add(x + ".conv1d.bias", {m.conv_dim()}, fill::zeros);
    }
    constant(x + ".A_log", H, a_log);
    constant(x + ".dt_bias", H, dt_bias);
    add(x + ".state_weight", {H, V, V}, fill::weight);  // inside a tanh: any scale stays bounded
    if (m.use_residual) add(x + ".D", {H, V}, fill::ones);
    norm(x + ".g_norm.weight", H * V);
  };

  // Megatron MoE (nam56r::load_moe): router, TE's grouped experts (.weight{e}), one shared expert.
  auto moe = [&](const std::string& prefix) {
    norm(prefix + ".pre_mlp_layernorm.weight", d);
    const std::string x = prefix + ".mlp";
    linear(x + ".router", c.num_moe_experts, d);
    if (c.moe_router_score_function == "sigmoid") add(x + ".router.expert_bias", {c.num_moe_experts}, fill::zeros);
    for (std::size_t e = 0; e < c.num_moe_experts; ++e) {
      add(cat(x, ".experts.linear_fc1.weight", e), {c.moe_ffn_hidden_size, d}, fill::weight);
      add(cat(x, ".experts.linear_fc2.weight", e), {d, c.moe_ffn_hidden_size}, fill::weight);
    }
    if (c.moe_shared_expert_intermediate_size > 0) {
      linear(x + ".shared_experts.linear_fc1", c.moe_shared_expert_intermediate_size, d);
      linear(x + ".shared_experts.linear_fc2", d, c.moe_shared_expert_intermediate_size);
    }
  };

  linear("embedding.word_embeddings", c.padded_vocab_size, d);
  if (c.ngram_hash) {
    const ngram_hash_config& n = *c.ngram_hash;
    const std::string x = nam56r::ngram_hash_prefix();
    const std::size_t J = n.num_tables(), M = n.largest_order();
    linear(x + ".unified_table", n.total_rows(), n.embed_dim);
    linear(x + ".out_proj", d, n.concat_dim());
    // Trained checkpoints hold random draws from construction (odd multipliers in
    // [1, 2^31), biases in [0, 2^31)); splitmix64 gives fixed ones of the same kind that
    // differ per table and position, so the tables hash independently.
    auto mix = [](std::uint64_t z) { return splitmix64(z); };  // splitmix64 from state z
    tensor_spec& mults = add(x + ".hash_mults", {J, M}, fill::values);
    mults.type = dtype::i64;
    for (std::size_t k = 0; k < J * M; ++k) mults.values.push_back(static_cast<std::int64_t>((mix(k) >> 33) | 1u));
    tensor_spec& bias = add(x + ".hash_bias", {J}, fill::values);  // after mults is filled: adding moves t
    bias.type = dtype::i64;
    for (std::size_t j = 0; j < J; ++j) bias.values.push_back(static_cast<std::int64_t>(mix(J * M + j) >> 33));
  }
  if (c.structure_embedding) {
    const structure_embedding_config& s = *c.structure_embedding;
    const std::string x = nam56r::structure_prefix();
    // Production checkpoints keep the table and up_proj at their zero initialisation (no
    // structure ids in the training data, spec §2.1), and the loader then skips the term.
    add(x + ".stacked_emb.weight", {s.total_vocab(), s.bottleneck}, fill::zeros);
    add(x + ".component_scales", {s.num_active()}, fill::ones);  // gains (0.5 in training)
    add(x + ".up_proj.weight", {d, s.bottleneck}, fill::zeros);
  }
  for (std::size_t i = 0; i < c.num_layers; ++i) {
    const nam56r_layer& l = c.plan.layers[i];
    switch (l.kind) {
      case nam56r_layer_kind::mla:
      case nam56r_layer_kind::dsa:
        attention(l.prefix, l.kind == nam56r_layer_kind::dsa, listed(c.attention_layers_without_input_norm, i));
        break;
      case nam56r_layer_kind::moe: moe(l.prefix); break;
      case nam56r_layer_kind::mamba3: mamba3(l.prefix, i); break;
      case nam56r_layer_kind::m2rnn: m2rnn(l.prefix); break;
      case nam56r_layer_kind::mlp:
        return make_error(errc::invalid_argument, "NAM56R: a dense MLP layer in the main stack");
    }
  }
  for (std::size_t k = 0; k < c.mtp_num_layers; ++k) {
    const std::string p = nam56r_mtp_prefix(k);
    norm(p + ".enorm.weight", d);
    norm(p + ".hnorm.weight", d);
    linear(p + ".eh_proj", d, 2 * d);
    norm(p + ".final_layernorm.weight", d);
    attention(p + ".mtp_model_layer.layers.0", false, listed(c.mtp_attention_layers_without_input_norm, k));
    const std::string mlp = p + ".mtp_model_layer.layers.1.mlp";
    norm(mlp + ".linear_fc1.layer_norm_weight", d);
    linear(mlp + ".linear_fc1", c.ffn_hidden_size, d);
    linear(mlp + ".linear_fc2", d, c.ffn_hidden_size);
  }
  norm("decoder.final_norm.weight", d);
  linear("output_layer", c.padded_vocab_size, d);  // untied: Megatron's --untie-embeddings-and-output-weights

  for (const tensor_spec& s : t) {
    std::uint64_t n = 1;
    for (std::int64_t dim : s.shape) {
      const auto u = static_cast<std::uint64_t>(dim);
      if (dim <= 0 || n > max_elements / u)
        return make_error(errc::out_of_range, "NAM56R config.json: tensor '", s.name, "' would have ",
                          dim <= 0 ? "an empty dimension" : "more than 2^48 elements");
      n *= u;
    }
  }
  return t;
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
