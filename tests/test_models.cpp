// Whole models against HF transformers 5.17, made in float32 from the bf16 weights beside
// them: tests/data/golden/hf/<arch> (the shared goldens: attention, MoE, and the Mamba-2
// hybrids mamba2, nemotron_h; granitemoehybrid regenerated smaller by
// tools/oracle/make_hf_models.py to fit the test-data budget) and tests/data/oracle/hf/<arch>
// (qwen2, mistral with a sliding window, mixtral in the hub's and in transformers 5.x's
// stacked-expert layout, starcoder2 with LayerNorm, biases everywhere, a plain gelu_tanh
// MLP and a window of 12 < the prefill; tools/oracle/make_hf_models.py). For every architecture
//  * a full forward reproduces logits_full within 1e-3 x max|logit| (the issue's bound;
//    measured: about 1e-6, see the printed figures) with the same argmax everywhere;
//  * prefill of P tokens then one token at a time reproduces the same rows;
//  * greedy generation from the first P tokens reproduces greedy_tokens exactly;
//  * the results do not depend on the thread count, and MLA's expanded and absorbed
//    forms agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "slm/models/inspect.hpp"
#include "slm/models/any_model.hpp"
#include "slm/models/synthetic.hpp"
#include "slm/generate/throughput.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

namespace {

struct golden {
  std::vector<std::int32_t> ids, greedy;
  std::size_t prefill = 0, V = 0;
  std::vector<float> logits_full;  // [T, V]
};

golden read_golden(const std::filesystem::path& dir) {
  golden g;
  auto f = slm::safetensors::file::open(dir / "golden.safetensors");
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (!f.ok()) return g;
  auto ints = [&](const char* name) {
    std::vector<std::int32_t> out;
    const auto* t = f->find(name);
    EXPECT_NE(t, nullptr) << name;
    if (!t) return out;
    std::vector<float> v(static_cast<std::size_t>(t->shape.numel()));
    EXPECT_TRUE(f->view(*t).to_f32(v).ok());
    for (float x : v) out.push_back(static_cast<std::int32_t>(x));
    return out;
  };
  g.ids = ints("input_ids");
  g.greedy = ints("greedy_tokens");
  g.prefill = static_cast<std::size_t>(ints("prefill_len").at(0));
  const auto* lf = f->find("logits_full");
  g.V = static_cast<std::size_t>(lf->shape[1]);
  g.logits_full.resize(static_cast<std::size_t>(lf->shape.numel()));
  EXPECT_TRUE(f->view(*lf).to_f32(g.logits_full).ok());
  return g;
}

std::size_t argmax(const float* v, std::size_t n) { return static_cast<std::size_t>(std::max_element(v, v + n) - v); }

struct comparison {
  double max_err = 0, max_ref = 0;
  std::size_t argmax_mismatches = 0;
};
comparison compare_rows(const float* got, const float* ref, std::size_t rows, std::size_t V) {
  comparison c;
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t v = 0; v < V; ++v) {
      c.max_err = std::max(c.max_err, static_cast<double>(std::fabs(got[r * V + v] - ref[r * V + v])));
      c.max_ref = std::max(c.max_ref, static_cast<double>(std::fabs(ref[r * V + v])));
    }
    c.argmax_mismatches += argmax(got + r * V, V) != argmax(ref + r * V, V);
  }
  return c;
}

class Models : public ::testing::TestWithParam<const char*> {
 protected:
  std::filesystem::path dir() const { return slm_test::test_data(GetParam()); }
};

TEST_P(Models, FullForwardMatchesTransformers) {
  auto m = slm::model::load(dir());
  ASSERT_TRUE(m.ok()) << m.error().message();
  const golden g = read_golden(dir());
  ASSERT_EQ(g.V, m->vocab());
  const std::size_t T = g.ids.size();
  for (slm::executor_ref ex : {slm::executor_ref(slm_test::the_pools().p2), slm::executor_ref(slm_test::the_pools().p3)}) {
    slm::compute_context cx{ex};
    auto s = m->new_session();
    std::vector<float> out(T * g.V);
    ASSERT_TRUE(s.forward(g.ids, T, out.data(), cx).ok());
    const comparison c = compare_rows(out.data(), g.logits_full.data(), T, g.V);
    std::printf("[ figures  ] %s full forward: max |err| %.3g = %.3g x max|logit| (%.4g), argmax mismatches %zu / %zu\n",
                GetParam(), c.max_err, c.max_err / c.max_ref, c.max_ref, c.argmax_mismatches, T);
    EXPECT_LE(c.max_err, 1e-3 * c.max_ref);
    EXPECT_EQ(c.argmax_mismatches, 0u);
    EXPECT_EQ(s.position(), T);
  }
}

TEST_P(Models, IncrementalDecodeMatchesFullForward) {
  auto m = slm::model::load(dir());
  ASSERT_TRUE(m.ok()) << m.error().message();
  const golden g = read_golden(dir());
  const std::size_t T = g.ids.size(), P = g.prefill, V = g.V;
  for (slm::kv_dtype kv : {slm::kv_dtype::f32, slm::kv_dtype::bf16}) {
    slm::session_options o;
    o.kv = kv;
    auto s = m->new_session(o);
    slm::compute_context cx{slm_test::the_pools().p2};
    std::vector<float> out((T - P + 1) * V);
    ASSERT_TRUE(s.forward(std::span(g.ids.data(), P), 1, out.data(), cx).ok());
    for (std::size_t t = P; t < T; ++t)
      ASSERT_TRUE(s.forward(std::span(g.ids.data() + t, 1), 1, out.data() + (t - P + 1) * V, cx).ok());
    const comparison c = compare_rows(out.data(), g.logits_full.data() + (P - 1) * V, T - P + 1, V);
    std::printf("[ figures  ] %s incremental (%s KV cache): max |err| %.3g = %.3g x max|logit|, argmax mismatches %zu\n",
                GetParam(), kv == slm::kv_dtype::f32 ? "f32" : "bf16", c.max_err, c.max_err / c.max_ref,
                c.argmax_mismatches);
    if (kv == slm::kv_dtype::f32) {
      EXPECT_LE(c.max_err, 1e-3 * c.max_ref);
      EXPECT_EQ(c.argmax_mismatches, 0u);
    } else {
      // bf16 keys and values round each cached value by up to 2^-9; how far that moves
      // the logits depends on the model (granitemoehybrid's attention_multiplier 1.0
      // makes its softmax sharp: 2.7e-3 on the regenerated golden, 3.6e-2 on the shared
      // one). A sanity bound, and the figure is printed.
      EXPECT_LE(c.max_err, 5e-2 * c.max_ref);
    }
  }
}

TEST_P(Models, GreedyGenerationMatchesTransformers) {
  auto m = slm::model::load(dir());
  ASSERT_TRUE(m.ok()) << m.error().message();
  const golden g = read_golden(dir());
  auto s = m->new_session();
  slm::compute_context cx{slm_test::the_pools().p2};
  std::vector<float> logits(g.V);
  ASSERT_TRUE(s.forward(std::span(g.ids.data(), g.prefill), 1, logits.data(), cx).ok());
  std::vector<std::int32_t> produced;
  for (std::size_t i = 0; i < g.greedy.size(); ++i) {
    const auto next = static_cast<std::int32_t>(argmax(logits.data(), g.V));
    produced.push_back(next);
    ASSERT_TRUE(s.forward(std::span(&next, 1), 1, logits.data(), cx).ok());
  }
  EXPECT_EQ(produced, g.greedy);
}

TEST_P(Models, MlaExpandedAndAbsorbedFormsAgree) {
  auto m = slm::model::load(dir());
  ASSERT_TRUE(m.ok()) << m.error().message();
  if (m->config().layers[0].attention != slm::attention_kind::mla) GTEST_SKIP() << "not an MLA model";
  const golden g = read_golden(dir());
  const std::size_t T = g.ids.size(), V = g.V;
  std::vector<float> a(T * V), b(T * V);
  slm::compute_context cx{slm_test::the_pools().p2};
  slm::session_options o;
  o.mla = slm::mla_mode::expanded;
  auto s1 = m->new_session(o);
  ASSERT_TRUE(s1.forward(g.ids, T, a.data(), cx).ok());
  o.mla = slm::mla_mode::absorbed;
  auto s2 = m->new_session(o);
  ASSERT_TRUE(s2.forward(g.ids, T, b.data(), cx).ok());
  const comparison c = compare_rows(a.data(), b.data(), T, V);
  std::printf("[ figures  ] %s MLA expanded vs absorbed: max |diff| %.3g\n", GetParam(), c.max_err);
  EXPECT_LE(c.max_err, 1e-4 * c.max_ref);
  EXPECT_EQ(c.argmax_mismatches, 0u);
}

// ---- weights that change on disk while the model runs --------------------------------

using slm_test::llama_copy;

// The golden ids' logits [T, V] through a fresh session (empty on error).
template <class Model>
std::vector<float> golden_logits(const Model& m, const golden& g, slm::status* error = nullptr) {
  slm::serial_executor ex;
  slm::compute_context cx{ex};
  auto s = m.new_session();
  std::vector<float> out(g.ids.size() * g.V);
  slm::status st = s.forward(g.ids, g.ids.size(), out.data(), cx);
  if (error) *error = st;
  EXPECT_TRUE(error || st.ok()) << st.message();
  return st.ok() ? out : std::vector<float>{};
}

// The default load reads the weights into private memory: the model gives the same
// logits, bit for bit, after its file is truncated and after it is overwritten with other
// bytes (mapped, the first killed the process with SIGBUS and the second changed the
// "immutable" model).
TEST(ModelWeights, ReadModelSurvivesItsFileChanging) {
  llama_copy c;
  const golden g = read_golden(slm_test::test_data("golden/hf/llama"));
  auto m = slm::model::load(c.dir.path());
  ASSERT_TRUE(m.ok()) << m.error().message();
  const std::vector<float> before = golden_logits(*m, g);
  ASSERT_FALSE(before.empty());
  const comparison ref = compare_rows(before.data(), g.logits_full.data(), g.ids.size(), g.V);
  EXPECT_LE(ref.max_err, 1e-3 * ref.max_ref);
  const auto size = static_cast<std::size_t>(std::filesystem::file_size(c.weights()));
  std::filesystem::resize_file(c.weights(), 0);
  EXPECT_EQ(golden_logits(*m, g), before);
  ASSERT_TRUE(slm_test::write_file(c.weights(), std::vector<std::byte>(size, std::byte{0x3c})));
  EXPECT_EQ(golden_logits(*m, g), before);
}

// Mapped (load_mode::map, a host's explicit choice), a session created after the file
// changed is refused: its forward() returns the error, and usable() says so at once.
TEST(ModelWeights, MappedModelRefusesSessionsOnAChangedFile) {
  llama_copy c;
  const golden g = read_golden(slm_test::test_data("golden/hf/llama"));
  slm::checkpoint_options o;
  o.weights = slm::load_mode::map;
  auto m = slm::model::load(c.dir.path(), o);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(golden_logits(*m, g).size(), g.ids.size() * g.V);
  {  // grown in place: never faults the mapped range, but the file is not the one mapped
    std::FILE* f = std::fopen(c.weights().string().c_str(), "ab");
    ASSERT_NE(f, nullptr);
    std::fputc(0, f);
    std::fclose(f);
  }
  EXPECT_TRUE(slm_test::fails_with(m->new_session().usable(), slm::errc::io_error, {"changed in place since it was mapped"}));
  slm::status st;
  EXPECT_TRUE(golden_logits(*m, g, &st).empty());
  EXPECT_TRUE(slm_test::fails_with(st, slm::errc::io_error, {"model.safetensors", "reload the model"}));
}

// Config and tensors must agree (issue 18): every stored tensor is bound or reported, and a
// norm weight must be a float. Each of these loaded and ran with exit 0 before, logits off.
TEST(ModelWeights, ConfigAndTensorsMustAgree) {
  {  // num_hidden_layers 2 of the 3 stored: layer 2's weights were ignored
    llama_copy c;
    std::string cfg;
    {
      std::ifstream in(c.dir / "config.json", std::ios::binary);
      cfg.assign(std::istreambuf_iterator<char>(in), {});
    }
    const auto at = cfg.find("\"num_hidden_layers\": 3");
    ASSERT_NE(at, std::string::npos);
    cfg.replace(at, 22, "\"num_hidden_layers\": 2");
    ASSERT_TRUE(slm_test::write_file(c.dir / "config.json", cfg));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error,
                                     {"tensor 'model.layers.2.", "more", "config.json"}));
  }
  {  // a norm stored as I32 ran with its integer values
    llama_copy c;
    ASSERT_TRUE(slm_test::rewrite_safetensors(c.weights(), {}, "model.layers.1.post_attention_layernorm.weight"));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error,
                                     {"model.layers.1.post_attention_layernorm.weight", "I32"}));
  }
  {  // a tensor no layer binds
    llama_copy c;
    ASSERT_TRUE(slm_test::rewrite_safetensors(c.weights(), {}, {}, {"model.layers.0.self_attn.q_norm.weight"}));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error,
                                     {"tensor 'model.layers.0.self_attn.q_norm.weight'"}));
  }
  {  // a missing norm is missing, never "no norm"
    llama_copy c;
    ASSERT_TRUE(slm_test::rewrite_safetensors(c.weights(), {"model.layers.0.input_layernorm.weight"}));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::not_found,
                                     {"model.layers.0.input_layernorm.weight"}));
  }
  {  // what published layouts ship and the model does not need still loads: older
     // transformers' rotary inv_freq buffers, static activation and KV-cache scales
    llama_copy c;
    ASSERT_TRUE(slm_test::rewrite_safetensors(
        c.weights(), {}, {},
        {"model.layers.0.self_attn.rotary_emb.inv_freq", "model.layers.2.self_attn.rotary_emb.inv_freq",
         "model.layers.0.self_attn.q_proj.input_scale", "model.layers.1.self_attn.k_scale"}));
    auto m = slm::model::load(c.dir.path());
    EXPECT_TRUE(m.ok()) << m.error().message();
  }
  {  // DeepSeek-V3 stores its num_nextn_predict_layers MTP layers after the decoder's:
     // allowed, and only those
    slm_test::temp_dir dir{"deepseek"};
    for (const char* f : {"config.json", "model.safetensors"})
      std::filesystem::copy_file(slm_test::test_data("golden/hf/deepseek_v3") / f, dir / f);
    ASSERT_TRUE(slm_test::rewrite_safetensors(dir / "model.safetensors", {}, {},
                                              {"model.layers.3.enorm.weight", "model.layers.3.eh_proj.weight"}));
    auto m = slm::model::load(dir.path());
    EXPECT_TRUE(m.ok()) << m.error().message();
    ASSERT_TRUE(slm_test::rewrite_safetensors(dir / "model.safetensors", {}, {}, {"model.layers.4.enorm.weight"}));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(dir.path()), slm::errc::format_error,
                                     {"tensor 'model.layers.4.enorm.weight'"}));
  }
}

// StarCoder2's config and tensors must agree too: what slm cannot honour, a missing key,
// and biases that disagree with use_bias are refused with the key or tensor named (a
// dropped bias would otherwise run and give other logits).
TEST(ModelWeights, Starcoder2RefusesWhatItCannotHonour) {
  const std::filesystem::path src = slm_test::test_data("oracle/hf/starcoder2");
  std::string cfg;
  {
    std::ifstream in(src / "config.json", std::ios::binary);
    cfg.assign(std::istreambuf_iterator<char>(in), {});
  }
  // A copy of the fixture with config.json edited (each `from` -> `to`) and tensors dropped or added.
  struct copy {
    slm_test::temp_dir dir{"starcoder2"};
    std::filesystem::path weights() const { return dir / "model.safetensors"; }
  };
  using edits = std::vector<std::pair<std::string_view, std::string_view>>;
  auto make_edited = [&](copy& c, const edits& e) {
    for (const char* f : {"config.json", "model.safetensors"}) std::filesystem::copy_file(src / f, c.dir / f);
    std::string edited = cfg;
    for (const auto& [from, to] : e) {
      const auto at = edited.find(from);
      ASSERT_NE(at, std::string::npos) << from;
      edited.replace(at, from.size(), to);
    }
    ASSERT_TRUE(slm_test::write_file(c.dir / "config.json", edited));
  };
  auto make = [&](copy& c, std::string_view from, std::string_view to) { make_edited(c, {{from, to}}); };
  {  // the fixture, and the same without the keys whose defaults are StarCoder2's own
     // (Starcoder2Config: gelu_pytorch_tanh, norm_epsilon 1e-5, tied, use_bias): an
     // exact gelu or eps 1e-6 moves these logits by only 2e-4 and 6e-4 x max|logit|, under
     // the 1e-3 bound of the golden comparisons, so the parsed values are checked here
    copy c;
    make_edited(c, {{"\"hidden_act\": \"gelu_pytorch_tanh\",", ""}, {"\"norm_epsilon\": 1e-05,", ""},
                    {"\"tie_word_embeddings\": true,", ""}, {"\"use_bias\": true,", ""}});
    for (const std::filesystem::path& dir : {src, c.dir.path()}) {
      auto m = slm::model::load(dir);
      ASSERT_TRUE(m.ok()) << m.error().message();
      const slm::model_config& mc = m->config();
      EXPECT_TRUE(mc.layer_norm);
      EXPECT_EQ(mc.act, slm::activation::gelu_tanh);
      EXPECT_EQ(mc.norm_eps, 1e-5f);
      EXPECT_TRUE(mc.tie_embeddings);
      EXPECT_EQ(mc.projection_bias, std::optional<bool>(true));
      EXPECT_FALSE(mc.mlp_gated);
      EXPECT_EQ(mc.layers[0].window, 12u);
      EXPECT_EQ(mc.layers[1].window, 12u);
    }
  }
  {
    copy c;
    make(c, "\"gelu_pytorch_tanh\"", "\"gelu_fancy\"");
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::unsupported, {"\"hidden_act\"", "gelu_fancy"}));
  }
  {
    copy c;
    make(c, "\"intermediate_size\": 64,", "");
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error, {"\"intermediate_size\""}));
  }
  {
    copy c;
    make(c, "\"norm_epsilon\": 1e-05", "\"norm_epsilon\": 0");
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error, {"\"norm_epsilon\""}));
  }
  {
    copy c;
    make(c, "\"use_bias\": true,", "\"use_bias\": true, \"partial_rotary_factor\": 0.5,");
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::unsupported,
                                     {"\"partial_rotary_factor\"", "starcoder2"}));
  }
  {  // biases stored, config says none: transformers would drop them, slm would add them
    copy c;
    make(c, "\"use_bias\": true", "\"use_bias\": false");
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error,
                                     {"model.layers.0.self_attn.q_proj", "has a bias", "\"use_bias\": false"}));
  }
  {  // a projection's bias missing
    copy c;
    make(c, "\"use_bias\": true", "\"use_bias\": true");
    ASSERT_TRUE(slm_test::rewrite_safetensors(c.weights(), {"model.layers.1.mlp.c_proj.bias"}));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error,
                                     {"model.layers.1.mlp.c_proj", "has no bias", "\"use_bias\": true"}));
  }
  {  // a LayerNorm's bias missing
    copy c;
    make(c, "\"use_bias\": true", "\"use_bias\": true");
    ASSERT_TRUE(slm_test::rewrite_safetensors(c.weights(), {"model.norm.bias"}));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::not_found, {"model.norm.bias"}));
  }
  {  // a gated MLP's gate is no part of StarCoder2: reported, never ignored
    copy c;
    make(c, "\"use_bias\": true", "\"use_bias\": true");
    ASSERT_TRUE(slm_test::rewrite_safetensors(c.weights(), {}, {}, {"model.layers.0.mlp.gate_proj.weight"}));
    EXPECT_TRUE(slm_test::fails_with(slm::model::load(c.dir.path()), slm::errc::format_error,
                                     {"tensor 'model.layers.0.mlp.gate_proj.weight'"}));
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, Models,
                         ::testing::Values("golden/hf/llama", "golden/hf/llama3_rope", "golden/hf/qwen3",
                                           "golden/hf/qwen3_moe", "golden/hf/deepseek_v3", "golden/hf/deepseek_v32",
                                           "golden/hf/mamba2", "golden/hf/nemotron_h", "golden/hf/granitemoehybrid",
                                           "oracle/hf/qwen2", "oracle/hf/mistral", "oracle/hf/mixtral",
                                           "oracle/hf/mixtral_stacked", "oracle/hf/starcoder2"),
                         [](const auto& info) {
                           const std::string p = info.param;
                           return p.substr(p.find_last_of('/') + 1);
                         });

// inspect_model (what `slm inspect` prints): a model directory's architecture, config,
// files, totals per dtype and one line per tensor (or not); the NAM56R layer table; one
// .safetensors file; a tokenizer-only directory; a missing path is the checkpoint's error.
TEST(Inspect, ModelFileAndTokenizerAsLines) {
  const auto llama = slm_test::test_data("golden/hf/llama");
  auto lines = slm::inspect_model(llama);
  ASSERT_TRUE(lines.ok()) << lines.error().message();
  const std::vector<std::string>& l = *lines;
  ASSERT_EQ(l.size(), 38u);  // 6 summary lines, a blank one, a header, 30 tensors
  EXPECT_EQ(l[0], "model     " + llama.string());
  EXPECT_EQ(l[1], "type      llama (LlamaForCausalLM)");
  EXPECT_EQ(l[2].rfind("config    vocab_size=320 hidden_size=128 ", 0), 0u) << l[2];
  EXPECT_EQ(l[3], "files     1 safetensors file, generation_config.json");
  EXPECT_EQ(l[4], "weights   30 tensors, 500608 elements, 977.75 KiB");
  EXPECT_EQ(l[5], "  BF16         30 tensors         500608 elements   977.75 KiB");
  EXPECT_EQ(l[6], "");
  EXPECT_EQ(l[7].rfind("tensor ", 0), 0u) << l[7];
  EXPECT_EQ(l[8],
            "lm_head.weight                                           BF16     [320, 128]                    81920");
  auto summary = slm::inspect_model(llama, false);
  ASSERT_TRUE(summary.ok());
  EXPECT_EQ(*summary, std::vector<std::string>(l.begin(), l.begin() + 6));

  auto file = slm::inspect_model(llama / "model.safetensors", false);
  ASSERT_TRUE(file.ok()) << file.error().message();
  EXPECT_EQ(*file, (std::vector<std::string>{"file      " + (llama / "model.safetensors").string(),
                                             "metadata  format = pt", l[4], l[5]}));

  auto nam = slm::inspect_model(slm_test::test_data("nam56r/tiny"), false);
  ASSERT_TRUE(nam.ok()) << nam.error().message();
  const auto row = [&](std::string_view start) {
    return std::find_if(nam->begin(), nam->end(), [&](const std::string& x) { return x.rfind(start, 0) == 0; });
  };
  ASSERT_NE(row("layer  kind "), nam->end());
  EXPECT_EQ(*row("2      mamba3 "), "2      mamba3                 9760    19.06 KiB bf16                     9760");
  EXPECT_EQ(*row("total "), "total                        95252   186.16 KiB                         79548");
  EXPECT_EQ(*(row("total ") + 1), "");

  auto tok = slm::inspect_model(slm_test::test_data("tokenizers/nam56r_cpp"));
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  ASSERT_EQ(tok->size(), 2u);
  EXPECT_EQ((*tok)[1].rfind("          BPE, 4300 tokens", 0), 0u) << (*tok)[1];

  EXPECT_FALSE(slm::inspect_model(slm_test::test_data("no-such-model")).ok());
  EXPECT_EQ(slm::human_bytes(512), "512 B");
  EXPECT_EQ(slm::human_bytes(std::uint64_t{17} << 19), "8.50 MiB");
}

// ---- synthetic checkpoints (models/synthetic.hpp, `slm bench --synthetic`) ----

// The tensor list of every family slm can synthesise names, shapes and types exactly what
// transformers saved for the golden of that family: the list is what the benchmark writes
// at real sizes, so a wrong name or shape would bench a model that cannot load.
TEST(Synthetic, TensorListsMatchTheGoldensOwnFiles) {
  for (const char* arch : {"llama", "llama3_rope", "qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v32", "mamba2",
                           "nemotron_h", "granitemoehybrid"}) {
    SCOPED_TRACE(arch);
    auto ck = slm::checkpoint::open(slm_test::test_data(std::string("golden/hf/") + arch));
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    auto specs = slm::synthetic::checkpoint_tensors(ck->config());
    ASSERT_TRUE(specs.ok()) << specs.error().message();
    EXPECT_EQ(specs->size(), ck->size());
    for (const slm::tensor_spec& t : *specs) {
      const auto* e = ck->find(t.name);
      ASSERT_NE(e, nullptr) << t.name;
      const slm::shape& have = ck->info(*e).shape;
      EXPECT_TRUE(std::equal(have.dims().begin(), have.dims().end(), t.shape.begin(), t.shape.end())) << t.name;
      EXPECT_EQ(ck->info(*e).type, t.type) << t.name;
    }
  }
  auto other = slm::json::parse(R"({"model_type": "gpt2", "vocab_size": 10, "hidden_size": 8})");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(slm::synthetic::checkpoint_tensors(*other).ok());
}

// A written checkpoint loads and runs, for a dense, an MoE, an MLA/DSA and a Mamba-2
// family, and NAM56R cut to 5 layers (MLA, DSA, MoE, Mamba-3, MTP), and the same config
// gives the same bytes whatever the thread count.
TEST(Synthetic, WrittenCheckpointsLoadAndRun) {
  for (const char* arch : {"golden/hf/qwen3", "golden/hf/qwen3_moe", "golden/hf/deepseek_v32", "golden/hf/nemotron_h",
                           "nam56r/tiny"}) {
    SCOPED_TRACE(arch);
    auto cfg = slm::synthetic::shape_config(slm_test::test_data(arch).string());
    ASSERT_TRUE(cfg.ok()) << cfg.error().message();
    if (std::string_view(arch) == "nam56r/tiny") cfg = slm::synthetic::with_layers(*cfg, 5);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message();
    slm_test::temp_dir dir{std::string(arch).substr(std::string(arch).rfind('/') + 1)};
    slm::serial_executor one;
    const slm::status wa = slm::synthetic::write_checkpoint(dir / "a", *cfg, one);
    ASSERT_TRUE(wa.ok()) << wa.message();
    auto pool = slm::thread_pool::create(3);
    ASSERT_TRUE(pool.ok());
    const slm::status wb = slm::synthetic::write_checkpoint(dir / "b", *cfg, *pool);
    ASSERT_TRUE(wb.ok()) << wb.message();
    auto bytes = [&](const char* sub) {
      auto b = slm::read_file_prefix(dir / sub / "model.safetensors", std::size_t{1} << 30);
      return b.ok() ? *b : std::string();
    };
    EXPECT_FALSE(bytes("a").empty());
    EXPECT_EQ(bytes("a"), bytes("b"));
    auto m = slm::any_model::load(dir / "a");
    ASSERT_TRUE(m.ok()) << m.error().message();
    slm::compute_context cx{one};
    auto t = slm::measure_throughput(*m, 6, 3, slm::session_options{}, cx);
    ASSERT_TRUE(t.ok()) << t.error().message();
    EXPECT_GT(t->prefill_flops, 0u);
    EXPECT_GT(t->decode_weight_bytes, 0u);
    EXPECT_GT(t->session_bytes, 0u);  // its saved state: caches for 9 tokens
    // A decode step reads each weight matrix it uses once (an MoE layer: only the routed
    // experts), so never more than the file holds.
    EXPECT_LE(t->decode_bytes_per_token(), static_cast<double>(std::filesystem::file_size(dir / "a" / "model.safetensors")));
  }
}

// with_layers cuts the depth and every per-layer list follows; the config still lists its
// tensors (and, for the tiny NAM56R, still loads and runs: tests/test_nam56r.cpp checks the
// NAM56R list against real checkpoints).
TEST(Synthetic, DepthCutKeepsTheConfigConsistent) {
  auto nem = slm::synthetic::shape_config(slm_test::test_data("golden/hf/nemotron_h").string());
  ASSERT_TRUE(nem.ok());
  auto cut = slm::synthetic::with_layers(*nem, 4);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(*slm::synthetic::layer_count(*cut), 4u);
  auto c = slm::model_config::from_json(*cut);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->n_layers, 4u);
  auto grown = slm::synthetic::with_layers(*nem, 9);  // the list repeats
  ASSERT_TRUE(grown.ok());
  EXPECT_EQ((*grown)["layers_block_type"].size(), 9u);
  EXPECT_EQ((*grown)["layers_block_type"][6].as_string(), (*nem)["layers_block_type"][0].as_string());

  auto moe = slm::synthetic::shape_config("qwen3-30b-a3b");
  ASSERT_TRUE(moe.ok());
  EXPECT_EQ(*slm::synthetic::layer_count(*moe), 48u);
  auto two = slm::synthetic::with_layers(*moe, 2);
  ASSERT_TRUE(two.ok());
  auto specs = slm::synthetic::checkpoint_tensors(*two);
  ASSERT_TRUE(specs.ok());
  std::uint64_t params = 0;
  for (const auto& t : *specs) params += t.elements();
  // 2 x (128 experts x 3 x 2048 x 768 + attention 2048 x (4096 + 2 x 512 + 4096)) + 2 x 151936 x 2048
  EXPECT_EQ(params, 2 * (128ull * 3 * 2048 * 768 + 2048ull * (4096 + 512 + 512) + 4096ull * 2048 + 128 * 2048 +
                         2 * 2048 + 2 * 128) +
                        2 * 151936ull * 2048 + 2048);
  EXPECT_FALSE(slm::synthetic::with_layers(*moe, 0).ok());
  for (const slm::synthetic::preset& p : slm::synthetic::presets()) {
    SCOPED_TRACE(std::string(p.name));
    auto cfg = slm::synthetic::shape_config(p.name);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message();
    EXPECT_TRUE(slm::synthetic::checkpoint_tensors(*cfg).ok());
  }
  // NAM56R: the DSA ranks and IndexCache's full ranks follow the A layers that remain.
  auto nam = slm::synthetic::shape_config("nam56r");
  ASSERT_TRUE(nam.ok());
  for (std::size_t depth : {1, 4, 5, 12, 13}) {
    SCOPED_TRACE(depth);
    auto d = slm::synthetic::with_layers(*nam, depth);
    ASSERT_TRUE(d.ok()) << d.error().message();
    auto specs = slm::synthetic::checkpoint_tensors(*d);
    ASSERT_TRUE(specs.ok()) << specs.error().message();
  }
  auto twelve = slm::synthetic::with_layers(*nam, 12);  // AEMEAEMEAEMR: A-ranks 0 1 2, DSA 1 2
  EXPECT_EQ((*twelve)["dsa_a_layer_ranks"].size(), 2u);
  EXPECT_EQ((*twelve)["dsa_index_cache_full_ranks"].size(), 1u);  // [0]
  auto four = slm::synthetic::with_layers(*nam, 4);  // AEME: one A layer, rank 0, dense MLA
  EXPECT_EQ((*four)["dsa_a_layer_ranks"].size(), 0u);
  EXPECT_EQ((*four)["dsa_index_cache"].as_string(), "off");

  auto none = slm::synthetic::shape_config("no-such-shape");
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message().find("qwen3-0.6b"), std::string::npos) << none.error().message();
}

TEST(Synthetic, SummaryIsMedianAndSpread) {
  const slm::summary s = slm::summarize({4.0, 1.0, 2.0});
  EXPECT_EQ(s.median, 2.0);
  EXPECT_EQ(s.spread, 1.5);
  EXPECT_EQ(s.runs, 3u);
  EXPECT_EQ(slm::summarize({1.0, 3.0}).median, 2.0);
  EXPECT_EQ(slm::summarize({}).median, 0.0);
}

}  // namespace
