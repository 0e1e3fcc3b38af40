// config.json and checkpoint robustness of the model loader (issue 4):
//  * both config styles (transformers 5.x `rope_parameters` / `dtype` / `num_local_experts`
//    and 4.x `rope_theta` + `rope_scaling` / `torch_dtype` / `num_experts`) load and give
//    bit-identical logits;
//  * every unsupported or malformed value is an error that names the key, the module or
//    the tensor, never a silently different model;
//  * tied embeddings use the embedding matrix as lm_head; an untied model without
//    lm_head is an error;
//  * a host-written composition gives the config-driven model's logits and refuses a
//    checkpoint it cannot run.
// Suite names start with "model" so that `ctest -R "model|layers"` selects them.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using slm::errc;
using slm::json::value;
using slm_test::fails_with;

fs::path golden_dir(const std::string& arch) { return slm_test::test_data("golden/hf/" + arch); }

value read_config(const fs::path& dir) {
  std::ifstream f(dir / "config.json", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto v = slm::json::parse(text);
  EXPECT_TRUE(v.ok()) << v.error().message();
  return v.ok() ? std::move(*v) : value();
}

// An object without `key` (json::value has set() but no erase()).
value without(const value& obj, std::string_view key) {
  value out = value::make_object();
  for (const auto& m : obj.members())
    if (m.key != key) out.set(m.key, m.val);
  return out;
}

// The golden checkpoint copied to a scratch directory, its config edited by `edit`.
void copy_golden(const std::string& arch, const fs::path& to, const std::function<void(value&)>& edit = {}) {
  for (const auto& e : fs::directory_iterator(golden_dir(arch)))
    fs::copy_file(e.path(), to / e.path().filename(), fs::copy_options::overwrite_existing);
  if (edit) {
    value cfg = read_config(to);
    edit(cfg);
    ASSERT_TRUE(slm_test::write_file(to / "config.json", slm::json::dump(cfg)));
  }
}

// Rewrites model.safetensors: `edit` sees each tensor and returns its replacement
// (type, shape, bytes), or nullopt to keep it; `drop` names tensors to leave out and
// `add` appends new ones.
struct new_tensor {
  std::string name;
  slm::dtype type;
  slm::shape shape;
  std::vector<std::byte> bytes;
};
void rewrite_tensors(const fs::path& dir, const std::function<std::optional<new_tensor>(const std::string&, const slm::tensor_view&)>& edit,
                     const std::vector<std::string>& drop = {}, std::vector<new_tensor> add = {}) {
  auto f = slm::safetensors::file::open(dir / "model.safetensors");
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::vector<new_tensor> keep;  // owns replacement bytes until the writer has written them
  keep.reserve(f->tensors().size() + add.size());
  slm::safetensors::writer w;
  for (const auto& t : f->tensors()) {
    if (std::find(drop.begin(), drop.end(), t.name) != drop.end()) continue;
    const slm::tensor_view v = f->view(t);
    if (auto r = edit ? edit(t.name, v) : std::nullopt) {
      keep.push_back(std::move(*r));
      ASSERT_TRUE(w.add(t.name, keep.back().type, keep.back().shape, keep.back().bytes).ok());
    } else {
      ASSERT_TRUE(w.add(t.name, v).ok());
    }
  }
  for (new_tensor& n : add) {
    keep.push_back(std::move(n));
    ASSERT_TRUE(w.add(keep.back().name, keep.back().type, keep.back().shape, keep.back().bytes).ok());
  }
  const fs::path tmp = dir / "model.new";
  ASSERT_TRUE(w.write(tmp).ok());
  f = slm::result<slm::safetensors::file>(errc::not_found, "closed");  // unmap before replacing
  fs::rename(tmp, dir / "model.safetensors");
}

std::vector<std::byte> copy_bytes(const slm::tensor_view& v) {
  const auto b = v.bytes();
  return {b.begin(), b.end()};
}

// The golden prompt (its input_ids) and the full-sequence logits of `m` on it.
std::vector<std::int32_t> golden_ids(const std::string& arch) {
  auto f = slm::safetensors::file::open(golden_dir(arch) / "golden.safetensors");
  EXPECT_TRUE(f.ok());
  std::vector<std::int32_t> ids;
  if (!f.ok()) return ids;
  const auto* t = f->find("input_ids");
  std::vector<float> v(static_cast<std::size_t>(t->shape.numel()));
  EXPECT_TRUE(f->view(*t).to_f32(v).ok());
  for (float x : v) ids.push_back(static_cast<std::int32_t>(x));
  return ids;
}

template <class Model>
std::vector<float> logits_of(const Model& m, const std::vector<std::int32_t>& ids) {
  std::vector<float> out(ids.size() * m.vocab());
  slm::compute_context cx{slm_test::the_pools().p2};
  auto s = m.new_session();
  const slm::status st = s.forward(ids, ids.size(), out.data(), cx);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

std::vector<float> logits_of_dir(const fs::path& dir, const std::vector<std::int32_t>& ids) {
  auto m = slm::model::load(dir);
  EXPECT_TRUE(m.ok()) << m.error().message();
  if (!m.ok()) return {};
  return logits_of(*m, ids);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && !a.empty() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// ---------------------------------------------------------------------------------
// Both config styles.

// The 4.x spelling of a 5.x config: rope_parameters -> top-level rope_theta + rope_scaling
// (null for the default type; `type_key` picks "type" or "rope_type"), dtype -> torch_dtype.
value to_4x_style(const value& cfg5, const char* type_key) {
  value cfg = without(without(cfg5, "rope_parameters"), "dtype");
  const value& rp = cfg5["rope_parameters"];
  cfg.set("torch_dtype", std::string(cfg5.get_string("dtype")));
  cfg.set("rope_theta", rp.get_double("rope_theta", 0));
  if (rp.get_string("rope_type") == "default") {
    cfg.set("rope_scaling", value());
  } else {
    value sc = without(rp, "rope_theta");
    sc = without(sc, "rope_type");
    sc.set(type_key, std::string(rp.get_string("rope_type")));
    cfg.set("rope_scaling", std::move(sc));
  }
  if (const value* n = cfg5.find("num_local_experts")) {
    cfg = without(cfg, "num_local_experts");
    cfg.set("num_experts", *n);
  }
  return cfg;
}

class modelConfigStyles : public ::testing::TestWithParam<const char*> {};

TEST_P(modelConfigStyles, Transformers4xStyleGivesBitIdenticalLogits) {
  const std::string arch = GetParam();
  const value cfg5 = read_config(golden_dir(arch));
  // The edit really changed the spelling (else the test compares a config with itself).
  ASSERT_NE(cfg5.find("rope_parameters"), nullptr);
  ASSERT_NE(cfg5.find("dtype"), nullptr);
  for (const char* type_key : {"type", "rope_type"}) {
    slm_test::temp_dir tmp(type_key);
    copy_golden(arch, tmp.path(), [&](value& cfg) { cfg = to_4x_style(cfg5, type_key); });
    const value cfg4 = read_config(tmp.path());
    ASSERT_EQ(cfg4.find("rope_parameters"), nullptr);
    ASSERT_EQ(cfg4.find("dtype"), nullptr);
    ASSERT_EQ(cfg4.find("num_local_experts"), nullptr);
    ASSERT_NE(cfg4.find("torch_dtype"), nullptr);
    // The parsed configs agree on everything the math reads.
    auto c5 = slm::model_config::from_json(cfg5);
    auto c4 = slm::model_config::from_json(cfg4);
    ASSERT_TRUE(c5.ok()) << c5.error().message();
    ASSERT_TRUE(c4.ok()) << c4.error().message();
    EXPECT_EQ(c4->rope.type, c5->rope.type);
    EXPECT_EQ(c4->rope.theta, c5->rope.theta);
    EXPECT_EQ(c4->rope.factor, c5->rope.factor);
    EXPECT_EQ(c4->rope.original_max_position_embeddings, c5->rope.original_max_position_embeddings);
    EXPECT_EQ(c4->rope.inv_freq_dtype, c5->rope.inv_freq_dtype);
    EXPECT_EQ(c4->n_experts, c5->n_experts);

    const auto ids = golden_ids(arch);
    EXPECT_TRUE(same_bits(logits_of_dir(tmp.path(), ids), logits_of_dir(golden_dir(arch), ids)))
        << arch << " with rope_scaling." << type_key;
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, modelConfigStyles, ::testing::Values("llama", "llama3_rope", "qwen3_moe", "deepseek_v3"));

// ---------------------------------------------------------------------------------
// Unsupported and malformed config values: errors naming the key.

slm::result<slm::model_config> parse_edited(const std::string& arch, const std::function<void(value&)>& edit) {
  value cfg = read_config(golden_dir(arch));
  edit(cfg);
  return slm::model_config::from_json(cfg);
}

TEST(modelConfigErrors, UnknownModelTypeNamesTheKey) {
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("model_type", "gpt2"); }), errc::unsupported,
                         {"\"model_type\"", "gpt2"}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c = without(c, "model_type"); }), errc::unsupported,
                         {"\"model_type\""}));
}

TEST(modelConfigErrors, UnknownActivationNamesTheKey) {
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("hidden_act", "quick_gelu"); }), errc::unsupported,
                         {"\"hidden_act\"", "quick_gelu"}));
}

TEST(modelConfigErrors, UnsupportedRopeTypesNameTheKey) {
  for (const char* type : {"dynamic", "longrope", "no_such_rope"}) {
    // 5.x style.
    EXPECT_TRUE(fails_with(parse_edited("llama3_rope",
                                        [&](value& c) {
                                          value rp = c["rope_parameters"];
                                          rp.set("rope_type", type);
                                          c.set("rope_parameters", rp);
                                        }),
                           errc::unsupported, {"rope_parameters.rope_type", type}));
    // 4.x style, with either spelling of the type key.
    for (const char* key : {"type", "rope_type"}) {
      EXPECT_TRUE(fails_with(parse_edited("llama",
                                          [&](value& c) {
                                            c = without(c, "rope_parameters");
                                            c.set("rope_theta", 10000.0);
                                            value sc = value::make_object();
                                            sc.set(key, type);
                                            sc.set("factor", 2.0);
                                            c.set("rope_scaling", sc);
                                          }),
                             errc::unsupported, {"rope_scaling.rope_type", type}));
    }
  }
}

TEST(modelConfigErrors, MalformedRopeValuesNameTheKey) {
  auto edit_rp = [](const char* key, value v) {
    return [=](value& c) {
      value rp = c["rope_parameters"];
      rp.set(key, v);
      c.set("rope_parameters", rp);
    };
  };
  EXPECT_TRUE(fails_with(parse_edited("llama3_rope", edit_rp("factor", "eight")), errc::format_error,
                         {"config.json, rope_parameters", "\"factor\"", "is not a finite number"}));
  EXPECT_TRUE(fails_with(parse_edited("llama3_rope", edit_rp("factor", -8.0)), errc::format_error, {"factor"}));
  EXPECT_TRUE(fails_with(parse_edited("llama3_rope", edit_rp("rope_theta", 0.0)), errc::format_error, {"rope_theta"}));
  EXPECT_TRUE(fails_with(parse_edited("llama3_rope", edit_rp("partial_rotary_factor", 1.5)), errc::format_error,
                         {"partial_rotary_factor"}));
  EXPECT_TRUE(fails_with(parse_edited("llama3_rope", edit_rp("low_freq_factor", 4.0)), errc::format_error,
                         {"high_freq_factor"}));
}

TEST(modelConfigErrors, DeepSeekRoutingMethodsNameTheKey) {
  EXPECT_TRUE(fails_with(parse_edited("deepseek_v3", [](value& c) { c.set("scoring_func", "softmax"); }),
                         errc::unsupported, {"\"scoring_func\"", "softmax"}));
  EXPECT_TRUE(fails_with(parse_edited("deepseek_v3", [](value& c) { c.set("topk_method", "greedy"); }),
                         errc::unsupported, {"\"topk_method\"", "greedy"}));
}

TEST(modelConfigErrors, UnknownLayerTypeNamesTheKeyAndIndex) {
  EXPECT_TRUE(fails_with(parse_edited("qwen3",
                                      [](value& c) {
                                        value lt = value::make_array();
                                        for (const char* t : {"full_attention", "linear_attention", "full_attention"})
                                          lt.push_back(t);
                                        c.set("layer_types", lt);
                                      }),
                         errc::unsupported, {"\"layer_types\"[1]", "linear_attention"}));
  EXPECT_TRUE(fails_with(parse_edited("deepseek_v32",
                                      [](value& c) {
                                        value lt = value::make_array();
                                        lt.push_back("deepseek_sparse_attention");
                                        lt.push_back("mamba");
                                        c.set("layer_types", lt);
                                      }),
                         errc::unsupported, {"\"layer_types\"[1]", "mamba"}));
  // A list of the wrong length is an error, not a partial read.
  EXPECT_TRUE(fails_with(parse_edited("qwen3",
                                      [](value& c) {
                                        value lt = value::make_array();
                                        lt.push_back("full_attention");
                                        c.set("layer_types", lt);
                                      }),
                         errc::format_error, {"\"layer_types\""}));
  // sliding_attention without a window to slide.
  EXPECT_TRUE(fails_with(parse_edited("qwen3",
                                      [](value& c) {
                                        value lt = value::make_array();
                                        for (int i = 0; i < 3; ++i) lt.push_back("sliding_attention");
                                        c.set("layer_types", lt);
                                      }),
                         errc::format_error, {"\"layer_types\"[0]", "sliding_window"}));
}

TEST(modelConfigErrors, GroupsThatDoNotDivideNameTheKey) {
  EXPECT_TRUE(fails_with(parse_edited("deepseek_v3", [](value& c) { c.set("n_group", 3); }), errc::format_error,
                         {"\"n_group\" 3", "n_routed_experts 8"}));
  EXPECT_TRUE(fails_with(parse_edited("deepseek_v3", [](value& c) { c.set("topk_group", 5); }), errc::format_error,
                         {"\"topk_group\" 5"}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("num_key_value_heads", 3); }), errc::format_error,
                         {"\"num_key_value_heads\" 3", "num_attention_heads 8"}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("num_key_value_heads", 0); }), errc::format_error,
                         {"\"num_key_value_heads\""}));
  EXPECT_TRUE(fails_with(parse_edited("qwen3_moe", [](value& c) { c.set("num_experts_per_tok", 9); }),
                         errc::format_error, {"num_experts_per_tok 9"}));
}

TEST(modelConfigErrors, MissingOrBadSizesNameTheKey) {
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c = without(c, "hidden_size"); }), errc::format_error,
                         {"\"hidden_size\" is missing"}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("hidden_size", value()); }), errc::format_error,
                         {"\"hidden_size\" is missing"}));
  for (value bad : {value(-128), value(128.5), value("128"), value(true), value(1e30)}) {
    for (const char* key : {"hidden_size", "vocab_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                            "head_dim", "max_position_embeddings"}) {
      EXPECT_TRUE(fails_with(parse_edited("llama", [&](value& c) { c.set(key, bad); }), errc::format_error,
                             {std::string("\"") + key + "\""}))
          << key << " = " << slm::json::dump(bad);
    }
  }
  for (const char* key : {"kv_lora_rank", "qk_rope_head_dim", "n_routed_experts", "moe_intermediate_size"}) {
    EXPECT_TRUE(fails_with(parse_edited("deepseek_v3", [&](value& c) { c = without(c, key); }), errc::format_error,
                           {std::string("\"") + key + "\" is missing"}));
    EXPECT_TRUE(fails_with(parse_edited("deepseek_v3", [&](value& c) { c.set(key, -1); }), errc::format_error,
                           {std::string("\"") + key + "\""}));
  }
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("rms_norm_eps", "tiny"); }), errc::format_error,
                         {"\"rms_norm_eps\""}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("rms_norm_eps", -1e-5); }), errc::format_error,
                         {"\"rms_norm_eps\""}));
  // Zero sizes of the state-space configs (found by fuzz_model_config: a mamba2 config
  // with vocab_size 0 was accepted).
  for (const char* arch : {"mamba2", "nemotron_h"})
    for (const char* key : {"vocab_size", "hidden_size"})
      EXPECT_TRUE(fails_with(parse_edited(arch, [&](value& c) { c.set(key, 0); }), errc::format_error,
                             {"vocab_size and hidden_size must be positive"}))
          << arch << " " << key;
  // The hybrid models' spelling too (found by fuzz_model_config: 0 was accepted).
  EXPECT_TRUE(fails_with(parse_edited("nemotron_h", [](value& c) { c.set("layer_norm_epsilon", 0.0); }),
                         errc::format_error, {"\"layer_norm_epsilon\""}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("tie_word_embeddings", "yes"); }),
                         errc::format_error, {"\"tie_word_embeddings\""}));
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("dtype", "int8"); }), errc::unsupported,
                         {"\"dtype\"", "int8"}));
  EXPECT_TRUE(fails_with(slm::model_config::from_json(value(3)), errc::format_error, {"not an object"}));
}

TEST(modelConfigErrors, SoftcappingIsRefusedNotIgnored) {
  EXPECT_TRUE(fails_with(parse_edited("llama", [](value& c) { c.set("attn_logit_softcapping", 50.0); }),
                         errc::unsupported, {"\"attn_logit_softcapping\""}));
  // null means "off", as transformers reads it.
  EXPECT_TRUE(parse_edited("llama", [](value& c) { c.set("attn_logit_softcapping", value()); }).ok());
}

// ---------------------------------------------------------------------------------
// Tensors that disagree with the config.

TEST(modelCheckpointErrors, ShapeMismatchNamesTheModuleAndBothShapes) {
  slm_test::temp_dir tmp("m");
  copy_golden("llama", tmp.path());
  // k_proj is [n_kv_heads * head_dim, hidden] = [32, 128]; store it as [16, 128].
  rewrite_tensors(tmp.path(), [](const std::string& name, const slm::tensor_view& v) -> std::optional<new_tensor> {
    if (name != "model.layers.1.self_attn.k_proj.weight") return std::nullopt;
    auto b = copy_bytes(v);
    b.resize(b.size() / 2);
    return new_tensor{name, v.type(), slm::shape{16, 128}, std::move(b)};
  });
  EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::format_error,
                         {"model.layers.1.self_attn.k_proj", "[16, 128]", "[32, 128]"}));
}

TEST(modelCheckpointErrors, NormShapeMismatchNamesTheTensor) {
  slm_test::temp_dir tmp("m");
  copy_golden("qwen3", tmp.path());
  rewrite_tensors(tmp.path(), [](const std::string& name, const slm::tensor_view& v) -> std::optional<new_tensor> {
    if (name != "model.layers.2.self_attn.k_norm.weight") return std::nullopt;
    auto b = copy_bytes(v);
    b.resize(b.size() + 4);
    return new_tensor{name, v.type(), slm::shape{static_cast<std::int64_t>(v.shape()[0] + 2)}, std::move(b)};
  });
  EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::format_error,
                         {"model.layers.2.self_attn.k_norm.weight", "[50]", "[48]"}));
}

TEST(modelCheckpointErrors, ExpertShapeMismatchNamesTheExpert) {
  slm_test::temp_dir tmp("m");
  copy_golden("qwen3_moe", tmp.path());
  // moe_intermediate_size 64: expert 5's up_proj stored as [32, 128].
  bool found = false;
  rewrite_tensors(tmp.path(), [&](const std::string& name, const slm::tensor_view& v) -> std::optional<new_tensor> {
    if (name != "model.layers.2.mlp.experts.5.up_proj.weight") return std::nullopt;
    found = true;
    auto b = copy_bytes(v);
    b.resize(b.size() / 2);
    return new_tensor{name, v.type(), slm::shape{32, 128}, std::move(b)};
  });
  if (!found) GTEST_SKIP() << "qwen3_moe golden stores its experts stacked";
  EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::format_error,
                         {"model.layers.2.mlp.experts.5.up_proj", "[32, 128]", "[64, 128]"}));
}

TEST(modelCheckpointErrors, MissingTensorIsNamed) {
  for (const char* name : {"model.layers.2.mlp.down_proj.weight", "model.norm.weight", "model.embed_tokens.weight",
                           "model.layers.0.post_attention_layernorm.weight"}) {
    slm_test::temp_dir tmp("m");
    copy_golden("llama", tmp.path());
    rewrite_tensors(tmp.path(), {}, {name});
    const std::string n = name;
    const std::string module = n.substr(0, n.size() - std::string(".weight").size());
    EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::not_found, {module})) << name;
  }
  // DeepSeek: a missing router correction bias, a missing shared expert.
  for (const char* name : {"model.layers.1.mlp.gate.e_score_correction_bias",
                           "model.layers.2.mlp.shared_experts.down_proj.weight"}) {
    slm_test::temp_dir tmp("d");
    copy_golden("deepseek_v3", tmp.path());
    rewrite_tensors(tmp.path(), {}, {name});
    const std::string n = name;
    EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::not_found,
                           {n.ends_with(".weight") ? n.substr(0, n.size() - 7) : n}))
        << name;
  }
}

// A bf16 tensor whose value `at` is replaced by `x`.
std::optional<new_tensor> with_value(const std::string& name, const slm::tensor_view& v, std::size_t at, float x) {
  EXPECT_EQ(v.type(), slm::dtype::bf16);
  auto b = copy_bytes(v);
  const std::uint16_t h = slm::f32_to_bf16(x);
  std::memcpy(b.data() + 2 * at, &h, 2);
  return new_tensor{name, v.type(), v.shape(), std::move(b)};
}

TEST(modelCheckpointErrors, NonFiniteNormWeightIsNamed) {
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    slm_test::temp_dir tmp("m");
    copy_golden("llama", tmp.path());
    rewrite_tensors(tmp.path(), [&](const std::string& name, const slm::tensor_view& v) -> std::optional<new_tensor> {
      if (name != "model.layers.1.input_layernorm.weight") return std::nullopt;
      return with_value(name, v, 7, bad);
    });
    EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::format_error,
                           {"model.layers.1.input_layernorm.weight", " at 7"}));
  }
}

// ---------------------------------------------------------------------------------
// Tied embeddings.

TEST(modelTiedEmbeddings, TiedGoldensHaveNoLmHeadAndUseTheEmbedding) {
  for (const char* arch : {"llama3_rope", "qwen3"}) {
    const value cfg = read_config(golden_dir(arch));
    ASSERT_TRUE(cfg.get_bool("tie_word_embeddings", false)) << arch;
    auto ck = slm::checkpoint::open(golden_dir(arch));
    ASSERT_TRUE(ck.ok());
    ASSERT_EQ(ck->find("lm_head.weight"), nullptr) << arch << " has an lm_head: the test would prove nothing";
    const auto ids = golden_ids(arch);
    const auto tied = logits_of_dir(golden_dir(arch), ids);

    // An explicit lm_head equal to the embedding gives the same bits: the tied head is
    // the embedding matrix itself (not a transpose, a copy in another precision, ...).
    slm_test::temp_dir same("same");
    copy_golden(arch, same.path());
    std::vector<std::byte> emb;
    rewrite_tensors(same.path(), [&](const std::string& name, const slm::tensor_view& v) -> std::optional<new_tensor> {
      if (name == "model.embed_tokens.weight") emb = copy_bytes(v);
      return std::nullopt;
    });
    ASSERT_FALSE(emb.empty());
    const auto V = static_cast<std::int64_t>(cfg.get_uint64("vocab_size", 0)),
               d = static_cast<std::int64_t>(cfg.get_uint64("hidden_size", 0));
    rewrite_tensors(same.path(), {}, {}, {new_tensor{"lm_head.weight", slm::dtype::bf16, slm::shape{V, d}, emb}});
    EXPECT_TRUE(same_bits(logits_of_dir(same.path(), ids), tied)) << arch;

    // A different explicit head in an untied config changes the logits: the head read is
    // the one the checkpoint says.
    slm_test::temp_dir other("other");
    copy_golden(arch, other.path(), [](value& c) { c.set("tie_word_embeddings", false); });
    std::vector<std::byte> scaled = emb;  // lm_head = 2 x embedding (bf16: exponent + 1)
    for (std::size_t i = 0; i + 1 < scaled.size(); i += 2) {
      std::uint16_t h;
      std::memcpy(&h, scaled.data() + i, 2);
      h = slm::f32_to_bf16(2.0f * slm::bf16_to_f32(h));
      std::memcpy(scaled.data() + i, &h, 2);
    }
    rewrite_tensors(other.path(), {}, {}, {new_tensor{"lm_head.weight", slm::dtype::bf16, slm::shape{V, d}, scaled}});
    const auto doubled = logits_of_dir(other.path(), ids);
    ASSERT_EQ(doubled.size(), tied.size());
    for (std::size_t i = 0; i < tied.size(); i += 97) EXPECT_FLOAT_EQ(doubled[i], 2.0f * tied[i]) << arch << " " << i;
  }
}

TEST(modelTiedEmbeddings, UntiedModelWithoutLmHeadIsAnError) {
  slm_test::temp_dir tmp("m");
  copy_golden("qwen3", tmp.path(), [](value& c) { c.set("tie_word_embeddings", false); });
  EXPECT_TRUE(fails_with(slm::model::load(tmp.path()), errc::not_found, {"lm_head"}));
  slm_test::temp_dir tmp2("m2");
  copy_golden("llama", tmp2.path());
  rewrite_tensors(tmp2.path(), {}, {"lm_head.weight"});
  EXPECT_TRUE(fails_with(slm::model::load(tmp2.path()), errc::not_found, {"lm_head"}));
}

// ---------------------------------------------------------------------------------
// A host-written composition.

using dense_llama = slm::decoder<slm::gqa_attention, slm::feed_forward>;

TEST(modelComposition, GqaFeedForwardDecoderMatchesTheConfigDrivenModel) {
  auto host = dense_llama::load(golden_dir("llama"));
  ASSERT_TRUE(host.ok()) << host.error().message();
  auto any = slm::model::load(golden_dir("llama"));
  ASSERT_TRUE(any.ok());
  const auto ids = golden_ids("llama");
  EXPECT_TRUE(same_bits(logits_of(*host, ids), logits_of(*any, ids)));
}

TEST(modelComposition, GqaFeedForwardDecoderRefusesDeepSeek) {
  EXPECT_TRUE(fails_with(dense_llama::load(golden_dir("deepseek_v3")), errc::unsupported,
                         {"layer 0", "deepseek_v3", "MLA attention"}));
  // The MoE layers are refused too, even where the attention would fit.
  EXPECT_TRUE(fails_with(dense_llama::load(golden_dir("qwen3_moe")), errc::unsupported,
                         {"layer 1", "MoE with softmax top-k routing"}));
}

}  // namespace
