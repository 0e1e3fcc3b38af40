// slm/models/synthetic.hpp - random checkpoints at real models' dimensions, for figures
// that need a model of real size without a download (`slm bench --synthetic SHAPE`,
// `slm synthetic SHAPE DIR`, bench/README.md).
//
// A shape is a config.json: one of the presets below (the published configs' sizes), or
// any config of a family whose tensor list slm knows (models/hf/tensors.hpp,
// models/nam56r/tensors.hpp). with_layers() cuts the depth so a large model fits a small
// machine's memory; every per-layer list of the config follows. write_checkpoint() writes
// config.json and model.safetensors (bf16, like the published weights) into a directory:
//
//   weights   uniform in +-sqrt(3 / fan_in), variance 1 / fan_in (fan_in: the last dimension),
//             so activations keep their scale through the layers and MoE gates route
//             somewhere; random models only need to stay finite;
//   others    as the family's list says (norms 1, biases 0, SSM decay constants, integer
//             tables).
//
// The values come from a counter-based generator keyed by the tensor's name and the
// element's index, so a checkpoint's bytes depend on neither the thread count nor the order
// of writing. The file is streamed through the safetensors writer (one tensor in memory at
// a time) and appears only when complete.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "slm/core/hash.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/io/atomic_file.hpp"
#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/hf/config.hpp"
#include "slm/models/hf/tensors.hpp"
#include "slm/models/nam56r/pattern.hpp"
#include "slm/models/nam56r/tensors.hpp"
#include "slm/models/tensor_spec.hpp"

namespace slm::synthetic {

// A named shape: the config.json of a published model (its sizes; nothing else of it).
struct preset {
  std::string_view name;   // what `--synthetic` takes: qwen3-0.6b, llama-3.2-1b, ...
  std::string_view about;  // one line for help texts
  std::string_view config;  // config.json text
};

// The presets, in the order help texts list them.
std::span<const preset> presets();

// A preset's config by name, or the config.json at a path (a file, or a directory holding
// one); anything else is an error that lists the presets.
result<json::value> shape_config(std::string_view name_or_path);

// The number of layers of a config (num_hidden_layers, num_layers, or the length of
// nemotron_h's per-layer list).
result<std::size_t> layer_count(const json::value& config);

// The config with its depth cut (or grown) to `layers`: the layer count and every
// per-layer list (layer_types, mlp_layer_types, layers_block_type,
// hybrid_override_pattern: the first `layers` entries, the list repeated when it is
// shorter); mlp_only_layers past the new depth dropped. NAM56R: the pattern tiles to the
// new depth by itself; the DSA A-ranks beyond its A layers are dropped, IndexCache keeps
// its full ranks that remain (rank 0 at least, or "off" without a DSA layer), and layer
// numbers past the depth (r_layer_numbers, the bare attention layers) are dropped.
result<json::value> with_layers(const json::value& config, std::size_t layers);

// The tensors a checkpoint of this config holds (the family's list).
result<std::vector<tensor_spec>> checkpoint_tensors(const json::value& config);

// Writes `dir`/config.json and `dir`/model.safetensors (see the top of the file); `dir` is
// created if needed. Values are generated on ex's threads.
status write_checkpoint(const std::filesystem::path& dir, const json::value& config, executor_ref ex);

// The value of element i of a weight of this fan_in, from the tensor's key: what
// write_checkpoint stores (rounded to bf16).
inline float weight_value(std::uint64_t key, std::uint64_t i, std::size_t fan_in) noexcept {
  std::uint64_t x = key + i * 0x9E3779B97F4A7C15ull;  // the i-th step of splitmix64 from key
  const std::uint64_t z = splitmix64(x);
  const float u = static_cast<float>(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  return (2.0f * u - 1.0f) * std::sqrt(3.0f / static_cast<float>(fan_in ? fan_in : 1));
}

// FNV-1a of a tensor's name: its generator key.
inline std::uint64_t name_key(std::string_view name) noexcept { return fnv1a64(name); }

#if SLM_DEFINE_MODELS

SLM_INLINE std::span<const preset> presets() {
  // Sizes as the published config.json files give them (Hugging Face, 2025); keys the loaders
  // do not need are left out.
  static constexpr preset list[] = {
      {"qwen3-0.6b", "Qwen3-0.6B: 28 layers, d 1024, GQA 16/8 heads of 128, QK-norm, tied 151936 vocab",
       R"({"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
 "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 8,
 "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true,
 "max_position_embeddings": 40960, "hidden_act": "silu", "attention_bias": false, "torch_dtype": "bfloat16"})"},
      {"llama-3.2-1b", "Llama-3.2-1B: 16 layers, d 2048, GQA 32/8 heads of 64, llama3 RoPE, tied 128256 vocab",
       R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048,
 "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
 "head_dim": 64, "vocab_size": 128256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
 "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                  "original_max_position_embeddings": 8192, "rope_type": "llama3"},
 "tie_word_embeddings": true, "max_position_embeddings": 131072, "hidden_act": "silu", "torch_dtype": "bfloat16"})"},
      {"qwen3-30b-a3b", "Qwen3-30B-A3B: 48 MoE layers, d 2048, 128 experts of 768, top-8, 32/4 heads of 128",
       R"({"model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
 "intermediate_size": 6144, "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
 "norm_topk_prob": true, "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": 48,
 "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-06,
 "rope_theta": 1000000.0, "tie_word_embeddings": false, "max_position_embeddings": 40960, "hidden_act": "silu",
 "torch_dtype": "bfloat16"})"},
      {"mamba2-370m", "Mamba2-370M: 48 Mamba-2 layers, d 1024, 32 heads of 64, state 128, tied 50288 vocab",
       R"({"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"], "hidden_size": 1024,
 "num_hidden_layers": 48, "state_size": 128, "expand": 2, "head_dim": 64, "num_heads": 32, "n_groups": 1,
 "conv_kernel": 4, "chunk_size": 256, "vocab_size": 50288, "tie_word_embeddings": true, "layer_norm_epsilon": 1e-05,
 "rms_norm": true, "use_conv_bias": true, "use_bias": false, "residual_in_fp32": true, "torch_dtype": "bfloat16"})"},
      {"nam56r", "NAM56R (spec nam56r.md, H200): 52 layers AEMEAEMEAEMR, d 4096, MLA/DSA (IndexCache), 16 experts top-4, "
                 "Mamba-3 MIMO, M2RNN, n-gram hash, 2 MTP depths; 5.9 B + 0.44 B MTP",
       R"({"model_type": "nam56r", "format_version": 1, "vocab_size": 131072, "padded_vocab_size": 131072,
 "hidden_size": 4096, "num_layers": 52, "hybrid_pattern": "AEMEAEMEAEMR",
 "dsa_a_layer_ranks": [1, 2, 3, 5, 6, 7, 9, 10, 11], "mtp_num_layers": 2, "layernorm_epsilon": 1e-5,
 "max_position_embeddings": 65536, "ffn_hidden_size": 21504, "activation": "gelu", "num_attention_heads": 32,
 "q_lora_rank": 64, "kv_lora_rank": 64, "qk_head_dim": 64, "qk_pos_emb_head_dim": 64, "v_head_dim": 64,
 "rotary_base": 10000, "dsa_indexer_n_heads": 32, "dsa_indexer_head_dim": 64, "dsa_indexer_topk": 256,
 "dsa_index_cache": "causal", "dsa_index_cache_full_ranks": [0, 3, 6], "num_moe_experts": 16, "moe_router_topk": 4,
 "moe_ffn_hidden_size": 896, "moe_shared_expert_intermediate_size": 1024, "moe_router_score_function": "softmax",
 "mamba_state_dim": 128, "mamba_head_dim": 64, "mamba_expand": 2, "mamba_num_groups": 8, "mamba3_mimo_rank": 4,
 "mamba3_rope_fraction": 0.5, "mamba3_a_floor": 1e-4, "mamba3_a_activation": "softplus",
 "m2rnn_k_head_dim": 64, "m2rnn_v_head_dim": 16, "m2rnn_num_heads": 51, "m2rnn_conv_kernel": 4,
 "ngram_hash": {"orders": [2, 3], "num_heads": 8, "table_size": 500000, "embed_dim": 16},
 "structure_embedding": {"components": "core", "bottleneck": 64}})"},
  };
  return list;
}

SLM_INLINE result<json::value> shape_config(std::string_view name_or_path) {
  for (const preset& p : presets())
    if (p.name == name_or_path) return json::parse(p.config);
  std::filesystem::path path{std::string(name_or_path)};
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) path /= "config.json";
  if (!std::filesystem::is_regular_file(path, ec)) {
    std::string names;
    for (const preset& p : presets()) names += cat(names.empty() ? "" : ", ", p.name);
    return make_error(errc::not_found, "no shape '", name_or_path, "': a preset (", names,
                      ") or a config.json (a file or its directory)");
  }
  auto text = read_file_prefix(path, std::size_t{1} << 24);
  if (!text.ok()) return std::move(text).take_error();
  auto cfg = json::parse(*text);
  if (!cfg.ok()) return std::move(cfg).take_error().with_context(path.string());
  return cfg;
}

SLM_INLINE result<std::size_t> layer_count(const json::value& config) {
  for (const char* key : {"num_hidden_layers", "num_layers"})
    if (const json::value* v = config.find(key))
      if (auto n = v->as_uint64()) return static_cast<std::size_t>(*n);
  if (const json::value* v = config.find("layers_block_type"); v && v->is_array()) return v->size();
  if (const std::string_view p = config.get_string("hybrid_override_pattern"); !p.empty()) return p.size();
  return make_error(errc::format_error, "config.json: no layer count (num_hidden_layers, num_layers)");
}

SLM_INLINE result<json::value> with_layers(const json::value& config, std::size_t layers) {
  if (layers == 0 || layers > 4096) return make_error(errc::invalid_argument, "a depth of ", layers, " layers");
  json::value c = config;
  for (const char* key : {"num_hidden_layers", "num_layers"})
    if (c.find(key)) c.set(key, json::value(static_cast<std::int64_t>(layers)));
  for (const char* key : {"layer_types", "mlp_layer_types", "layers_block_type"}) {
    const json::value* old = config.find(key);
    if (!old || !old->is_array() || old->size() == 0) continue;
    json::value list = json::value::make_array();
    for (std::size_t i = 0; i < layers; ++i) list.push_back((*old)[i % old->size()]);
    c.set(key, std::move(list));
  }
  if (const std::string_view p = config.get_string("hybrid_override_pattern"); !p.empty()) {
    std::string cut(layers, ' ');
    for (std::size_t i = 0; i < layers; ++i) cut[i] = p[i % p.size()];
    c.set("hybrid_override_pattern", json::value(std::move(cut)));
  }
  // The entries of a list of integers below `limit`.
  auto below = [&](const char* key, std::uint64_t limit) -> std::size_t {
    const json::value* m = c.find(key);
    if (!m || !m->is_array()) return 0;
    json::value kept = json::value::make_array();
    for (const json::value& v : m->items())
      if (auto n = v.as_uint64(); n && *n < limit) kept.push_back(v);
    const std::size_t n = kept.size();
    c.set(key, std::move(kept));
    return n;
  };
  below("mlp_only_layers", layers);
  if (config.get_string("model_type") == "nam56r") {
    auto symbols = expand_nam56r_symbols(config.get_string("hybrid_pattern", "AEMEAEMEAEMR"), layers);
    if (!symbols.ok()) return std::move(symbols).take_error();
    const auto a_layers = static_cast<std::size_t>(std::count(symbols->begin(), symbols->end(), 'A'));
    const std::size_t dsa = below("dsa_a_layer_ranks", a_layers);
    below("dsa_index_cache_full_ranks", dsa);
    if (dsa == 0) c.set("dsa_index_cache", json::value("off"));
    if (const json::value* f = c.find("dsa_index_cache_full_ranks"); dsa > 0 && f && f->size() == 0) {
      json::value zero = json::value::make_array();
      zero.push_back(json::value(std::int64_t{0}));
      c.set("dsa_index_cache_full_ranks", std::move(zero));
    }
    for (const char* key : {"r_layer_numbers", "attention_layers_without_input_norm"}) below(key, layers + 1);
  }
  return c;
}

SLM_INLINE result<std::vector<tensor_spec>> checkpoint_tensors(const json::value& config) {
  if (config.get_string("model_type") == "nam56r") return nam56r_checkpoint_tensors(config);
  auto c = model_config::from_json(config);
  if (!c.ok()) return std::move(c).take_error();
  return hf::checkpoint_tensors(*c);
}

SLM_INLINE status write_checkpoint(const std::filesystem::path& dir, const json::value& config, executor_ref ex) {
  auto specs = checkpoint_tensors(config);
  if (!specs.ok()) return std::move(specs).take_error();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(errc::io_error, "cannot create ", dir.string(), ": ", ec.message());
  const std::string text = json::dump(config);
  SLM_TRY(write_file_atomically(dir / "config.json", std::as_bytes(std::span(text.data(), text.size()))));

  safetensors::writer w;
  w.set_metadata("format", "pt");
  for (const tensor_spec& s : *specs) {
    auto shape = slm::shape::from(s.shape);
    if (!shape.ok()) return std::move(shape).take_error().with_context(s.name);
    SLM_TRY(w.plan(s.name, s.type, *shape));
  }
  auto stream = w.begin_stream(dir / "model.safetensors");
  if (!stream.ok()) return std::move(stream).take_error();
  // The writer asks for the tensors in its file order: each found by name once (a model of
  // 48 MoE layers holds some 18,000 tensors).
  std::unordered_map<std::string_view, const tensor_spec*> by_name;
  for (const tensor_spec& x : *specs) by_name.emplace(x.name, &x);
  std::vector<std::byte> bytes;
  while (!stream->done()) {
    const std::string_view name = stream->next_name();
    const auto found = by_name.find(name);
    if (found == by_name.end()) return make_error(errc::invalid_argument, "the writer asks for an unknown tensor ", name);
    const tensor_spec* s = found->second;
    const std::uint64_t n = s->elements();
    if (s->init == tensor_spec::fill::values) {
      if (s->values.size() != n || (s->type != dtype::i64 && s->type != dtype::i32 && s->type != dtype::bf16))
        return make_error(errc::invalid_argument, "tensor ", name, ": ", s->values.size(), " values for ", n,
                          " elements of ", safetensors_name(s->type));
      bytes.resize(n * size_of(s->type));
      for (std::uint64_t i = 0; i < n; ++i) {  // little-endian, as every target slm builds for
        if (s->type == dtype::i64) {
          std::memcpy(bytes.data() + 8 * i, &s->values[i], 8);
        } else if (s->type == dtype::i32) {
          const auto v = static_cast<std::int32_t>(s->values[i]);
          std::memcpy(bytes.data() + 4 * i, &v, 4);
        } else {
          const std::uint16_t v = f32_to_bf16(static_cast<float>(s->values[i]));
          std::memcpy(bytes.data() + 2 * i, &v, 2);
        }
      }
    } else {
      if (s->type != dtype::bf16) return make_error(errc::invalid_argument, "tensor ", name, ": random ", safetensors_name(s->type));
      bytes.resize(n * 2);
      auto* out = reinterpret_cast<std::uint16_t*>(bytes.data());
      const std::uint16_t constant = f32_to_bf16(s->init == tensor_spec::fill::ones ? 1.0f : 0.0f);
      const std::uint64_t key = name_key(name);
      const std::size_t fan_in = s->shape.empty() ? 1 : static_cast<std::size_t>(s->shape.back());
      const bool random = s->init == tensor_spec::fill::weight;
      SLM_TRY(parallel_for(ex, 0, static_cast<std::size_t>(n), std::size_t{1} << 16,
                           [&](std::size_t lo, std::size_t hi) {
                             for (std::size_t i = lo; i < hi; ++i)
                               out[i] = random ? f32_to_bf16(weight_value(key, i, fan_in)) : constant;
                           }));
    }
    SLM_TRY(stream->append(name, bytes));
  }
  return stream->finish();
}

#endif  // SLM_DEFINE_MODELS

}  // namespace slm::synthetic
