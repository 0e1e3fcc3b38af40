// slm quantize's engine: a checkpoint directory converted to ModelOpt NVFP4 / MXFP4 /
// FP8 or to BF16, checked by loading the result through the quantized-layout loader
// and comparing with the quantizer run directly on the original weights.
#include "slm/convert.hpp"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "test_helpers.hpp"

using slm::dtype;
using slm::errc;
using slm_test::fails_with;
namespace st = slm::safetensors;

namespace {

struct source_model {
  std::vector<float> q_proj, down_proj;
  std::vector<std::uint16_t> embed, gate, lm_head, norm;

  explicit source_model(const std::filesystem::path& dir) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    auto fill = [&](auto& v, std::size_t n) {
      v.resize(n);
      for (auto& x : v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, float>) x = normal(rng);
        else x = slm::f32_to_bf16(normal(rng));
      }
    };
    fill(q_proj, 48 * 64);
    fill(down_proj, 64 * 48);
    fill(embed, 32 * 64);
    fill(gate, 4 * 64);
    fill(lm_head, 32 * 64);
    fill(norm, 64);
    st::writer w;
    w.set_metadata("format", "pt");
    EXPECT_TRUE(w.add("model.layers.0.self_attn.q_proj.weight", dtype::f32, slm::shape{48, 64}, std::as_bytes(std::span(q_proj))).ok());
    EXPECT_TRUE(w.add("model.layers.0.mlp.down_proj.weight", dtype::f32, slm::shape{64, 48}, std::as_bytes(std::span(down_proj))).ok());
    EXPECT_TRUE(w.add("model.embed_tokens.weight", dtype::bf16, slm::shape{32, 64}, std::as_bytes(std::span(embed))).ok());
    EXPECT_TRUE(w.add("model.layers.0.mlp.gate.weight", dtype::bf16, slm::shape{4, 64}, std::as_bytes(std::span(gate))).ok());
    EXPECT_TRUE(w.add("lm_head.weight", dtype::bf16, slm::shape{32, 64}, std::as_bytes(std::span(lm_head))).ok());
    EXPECT_TRUE(w.add("model.layers.0.input_layernorm.weight", dtype::bf16, slm::shape{64}, std::as_bytes(std::span(norm))).ok());
    EXPECT_TRUE(slm_test::write_file(dir / "config.json", R"({"model_type": "llama", "hidden_size": 64})"));
    EXPECT_TRUE(slm_test::write_file(dir / "tokenizer.json", R"({"model": {"type": "BPE"}})"));
    EXPECT_TRUE(w.write(dir / "model.safetensors").ok());
  }
};

slm::thread_pool make_pool() { return std::move(*slm::thread_pool::create(2)); }

}  // namespace

TEST(Convert, Nvfp4MatchesTheQuantizerAndKeepsTheRest) {
  slm_test::temp_dir in("in"), out("out");
  source_model src(in.path());
  auto pool = make_pool();
  std::vector<std::string> seen;
  slm::convert_options opt;
  auto reports = slm::convert_checkpoint(in.path(), out.path(), opt, pool,
                                         [&](const slm::tensor_report& r, std::size_t, std::size_t) { seen.push_back(r.name); });
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  EXPECT_EQ(reports->size(), 6u);
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_TRUE(std::filesystem::exists(out / "tokenizer.json"));

  auto ck = slm::checkpoint::open(out.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  auto cfg = slm::quant_config::from_checkpoint(*ck);
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->method, slm::quant_method::modelopt);
  EXPECT_EQ(cfg->algo, "NVFP4");
  EXPECT_TRUE(cfg->is_excluded("model.embed_tokens"));
  EXPECT_TRUE(cfg->is_excluded("lm_head"));
  EXPECT_TRUE(cfg->is_excluded("model.layers.0.mlp.gate"));
  EXPECT_FALSE(cfg->is_excluded("model.layers.0.self_attn.q_proj"));

  // The converted codes are exactly what the quantizer gives on the original weights.
  auto direct = slm::quantize_nvfp4(std::span<const float>(src.q_proj), 48, 64);
  ASSERT_TRUE(direct.ok());
  auto w = slm::load_linear_weight(*ck, "model.layers.0.self_attn.q_proj");
  ASSERT_TRUE(w.ok()) << w.error().message();
  ASSERT_EQ(w->format, slm::weight_format::nvfp4);
  EXPECT_EQ(w->global, direct->weight_scale_2);
  EXPECT_EQ(0, std::memcmp(w->data, direct->codes.data(), direct->codes.size()));
  EXPECT_EQ(0, std::memcmp(w->scales, direct->scales.data(), direct->scales.size()));

  // Kept tensors are byte-identical.
  auto emb = ck->tensor("model.embed_tokens.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->type(), dtype::bf16);
  EXPECT_EQ(0, std::memcmp(emb->data(), src.embed.data(), src.embed.size() * 2));
  for (const auto& r : *reports) {
    if (r.action == "nvfp4") {
      EXPECT_GT(r.rel_rms_error, 0.0);
      EXPECT_LT(r.rel_rms_error, 0.2) << r.name;  // 4-bit: about 0.1 on Gaussian weights
    } else {
      EXPECT_EQ(r.action.rfind("kept", 0), 0u) << r.name << ": " << r.action;
    }
  }
}

TEST(Convert, OtherFormats) {
  slm_test::temp_dir in("in");
  source_model src(in.path());
  auto pool = make_pool();
  for (auto f : {slm::weight_format::mxfp4, slm::weight_format::fp8_e4m3, slm::weight_format::bf16}) {
    SCOPED_TRACE(std::string(slm::to_string(f)));
    slm_test::temp_dir out(slm::to_string(f));
    slm::convert_options opt;
    opt.format = f;
    auto reports = slm::convert_checkpoint(in.path(), out.path(), opt, pool);
    ASSERT_TRUE(reports.ok()) << reports.error().message();
    auto ck = slm::checkpoint::open(out.path());
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    auto q = slm::load_linear_weight(*ck, "model.layers.0.self_attn.q_proj");
    ASSERT_TRUE(q.ok()) << q.error().message();
    EXPECT_EQ(q->format, f);
    std::vector<float> row(64);
    slm::dequantize_row(*q, 5, row);
    for (std::size_t k = 0; k < 64; ++k) {
      const float original = src.q_proj[5 * 64 + k];
      if (f == slm::weight_format::bf16) EXPECT_EQ(row[k], slm::bf16_to_f32(slm::f32_to_bf16(original)));  // RNE, exactly
      else EXPECT_NEAR(row[k], original, 0.03);
    }
    auto down = slm::load_linear_weight(*ck, "model.layers.0.mlp.down_proj");
    ASSERT_TRUE(down.ok());
    // K = 48 is not a multiple of MXFP4's block of 32: kept in F32.
    EXPECT_EQ(down->format, f == slm::weight_format::mxfp4 ? slm::weight_format::f32 : f);
  }
}

TEST(Convert, ShardedInputKeepsItsShardsAndIndex) {
  slm_test::temp_dir out("out");
  auto pool = make_pool();
  auto reports = slm::convert_checkpoint(slm_test::test_data("oracle/sharded_llama"), out.path(), {}, pool);
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  auto ck = slm::checkpoint::open(out.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->shards().size(), 5u);
  ASSERT_TRUE(std::filesystem::exists(out / "model.safetensors.index.json"));
  std::size_t quantized = 0;
  for (const auto& r : *reports) {
    if (r.action != "nvfp4") continue;
    ++quantized;
    const std::string module = r.name.substr(0, r.name.size() - 7);
    auto w = slm::load_linear_weight(*ck, module);
    ASSERT_TRUE(w.ok()) << w.error().message();
    EXPECT_EQ(w->format, slm::weight_format::nvfp4);
  }
  EXPECT_EQ(quantized, 2u * 7);  // q, k, v, o, gate, up, down in each of 2 layers
}

TEST(Convert, Errors) {
  slm_test::temp_dir in("in"), out("out");
  source_model src(in.path());
  auto pool = make_pool();
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(in.path(), in.path(), {}, pool), errc::invalid_argument, {"--out must differ"}));
  ASSERT_TRUE(slm::convert_checkpoint(in.path(), out.path(), {}, pool).ok());
  slm_test::temp_dir again("again");
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(out.path(), again.path(), {}, pool), errc::unsupported, {"already quantized"}));
  slm::cancellation cancel;
  cancel.cancel();
  slm::convert_options opt;
  opt.cancel = &cancel;
  slm_test::temp_dir cancelled("cancelled");
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(in.path(), cancelled.path(), opt, pool), errc::cancelled, {}));
  EXPECT_FALSE(std::filesystem::exists(cancelled / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(cancelled / "model.safetensors.tmp"));
}

// NAM56R's canonical (Megatron) names: Transformer Engine's grouped experts carry their
// index after the parameter name (`linear_fc1.weight3`) and are quantized under the same
// convention (`.weight_scale3`, `.weight_scale_23`); the keep-list holds the n-gram
// tables, the output layer, the DSA indexer and the router in high precision.
TEST(Convert, Nam56rNamesGroupedExpertsAndKeepList) {
  slm_test::temp_dir in("in"), out("out");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<std::vector<float>> data;
  st::writer w;
  auto add = [&](const std::string& name, std::int64_t r, std::int64_t c) {
    data.emplace_back(static_cast<std::size_t>(r * c));
    for (float& x : data.back()) x = normal(rng);
    ASSERT_TRUE(w.add(name, dtype::f32, slm::shape{r, c}, std::as_bytes(std::span(data.back()))).ok());
  };
  const std::string L = "decoder.layers.1.";
  add("embedding.word_embeddings.weight", 40, 32);
  add("embedding.cppmega_ngram_hash.unified_table.weight", 50, 16);
  add("embedding.cppmega_ngram_hash.out_proj.weight", 32, 64);
  add("output_layer.weight", 40, 32);
  add(L + "mlp.router.weight", 4, 32);
  add(L + "mlp.experts.linear_fc1.weight0", 48, 32);
  add(L + "mlp.experts.linear_fc1.weight1", 48, 32);
  add(L + "mlp.experts.linear_fc2.weight0", 32, 48);
  add(L + "mlp.experts.linear_fc2.weight1", 32, 48);
  add("decoder.layers.0.self_attention.core_attention.indexer.linear_wk.weight", 16, 32);
  add("decoder.layers.0.self_attention.linear_q_down_proj.weight", 16, 32);
  ASSERT_TRUE(slm_test::write_file(in / "config.json", R"({"model_type": "nam56r"})"));
  ASSERT_TRUE(w.write(in / "model.safetensors").ok());

  auto pool = make_pool();
  auto reports = slm::convert_checkpoint(in.path(), out.path(), slm::convert_options{}, pool, {});
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  std::map<std::string, std::string> action;
  for (const auto& r : *reports) action[r.name] = r.action;
  EXPECT_EQ(action["embedding.word_embeddings.weight"], "kept F32: embedding");
  EXPECT_EQ(action["embedding.cppmega_ngram_hash.unified_table.weight"], "kept F32: embedding");
  EXPECT_EQ(action["output_layer.weight"], "kept F32: output head");
  EXPECT_EQ(action[L + "mlp.router.weight"], "kept F32: router");
  EXPECT_EQ(action["decoder.layers.0.self_attention.core_attention.indexer.linear_wk.weight"], "kept F32: DSA indexer");
  EXPECT_EQ(action["decoder.layers.0.self_attention.linear_q_down_proj.weight"], "nvfp4");
  EXPECT_EQ(action[L + "mlp.experts.linear_fc1.weight1"], "nvfp4");

  auto ck = slm::checkpoint::open(out.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_TRUE(ck->find(L + "mlp.experts.linear_fc1.weight_scale1"));
  EXPECT_TRUE(ck->find(L + "mlp.experts.linear_fc1.weight_scale_21"));
  // Expert 1 reads back as the quantizer's own output for its matrix, expert 0 differs.
  auto direct = slm::quantize_nvfp4(std::span<const float>(data[6]), 48, 32);
  ASSERT_TRUE(direct.ok());
  auto e1 = slm::load_linear_weight(*ck, L + "mlp.experts.linear_fc1", "1");
  ASSERT_TRUE(e1.ok()) << e1.error().message();
  ASSERT_EQ(e1->format, slm::weight_format::nvfp4);
  EXPECT_EQ(e1->rows, 48u);
  EXPECT_EQ(e1->global, direct->weight_scale_2);
  EXPECT_EQ(0, std::memcmp(e1->data, direct->codes.data(), direct->codes.size()));
  EXPECT_TRUE(fails_with(slm::load_linear_weight(*ck, L + "mlp.experts.linear_fc1", "2"), errc::not_found,
                         {"linear_fc1.weight2"}));
  auto cfg = slm::quant_config::from_checkpoint(*ck);
  ASSERT_TRUE(cfg.ok());
  EXPECT_TRUE(cfg->is_excluded("output_layer"));
  EXPECT_FALSE(cfg->is_excluded(L + "mlp.experts.linear_fc1"));
}
