// Quantized checkpoint layouts: the config files, the exclude list, and weight views
// built from ModelOpt, compressed-tensors, DeepSeek FP8 and gpt-oss tensors. The same
// stored NVFP4 data (ModelOpt's golden m1 case) is written in both the ModelOpt and the
// compressed-tensors convention, and both must dequantize to ModelOpt's values.
#include "slm/formats/quant_config.hpp"

#include <gtest/gtest.h>

#include <cmath>

#include "slm/formats/dequantize.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

using slm::dtype;
using slm::errc;
using slm_test::fails_with;
using slm_test::write_file;
namespace st = slm::safetensors;

namespace {

std::vector<float> dequantize_all(const slm::weight_matrix& w) {
  std::vector<float> out(w.rows * w.cols);
  EXPECT_TRUE(slm::dequantize(w, out).ok());  // validates the view, then every row
  return out;
}

struct golden_case {
  slm::result<st::file> file = st::file::open(slm_test::test_data("golden/nvfp4/nvfp4_shared.safetensors"));
  slm::tensor_view codes() const { return *file->tensor("m1.weight"); }
  slm::tensor_view scales() const { return *file->tensor("m1.weight_scale"); }
  float scale2() const {
    float g = 0;
    (void)file->tensor("m1.weight_scale_2")->to_f32(std::span(&g, 1));
    return g;
  }
  std::vector<float> dequantized() const {
    auto t = *file->tensor("m1.dequantized");
    std::vector<float> v(static_cast<std::size_t>(t.numel()));
    (void)t.to_f32(v);
    return v;
  }
};

// A directory with config.json (+ optional hf_quant_config.json) and one shard.
void write_checkpoint(const std::filesystem::path& d, std::string_view config, const st::writer& w,
                      std::string_view hf_quant = {}) {
  ASSERT_TRUE(write_file(d / "config.json", config));
  if (!hf_quant.empty()) {
    ASSERT_TRUE(write_file(d / "hf_quant_config.json", hf_quant));
  }
  ASSERT_TRUE(w.write(d / "model.safetensors").ok());
}

}  // namespace

TEST(Glob, ShellWildcards) {
  EXPECT_TRUE(slm::glob_match("lm_head", "lm_head"));
  EXPECT_TRUE(slm::glob_match("model.layers.0.self_attn*", "model.layers.0.self_attn.q_proj"));
  EXPECT_TRUE(slm::glob_match("model.layers.0.self_attn*", "model.layers.0.self_attn"));
  EXPECT_TRUE(slm::glob_match("*mlp.gate", "model.layers.7.mlp.gate"));
  EXPECT_FALSE(slm::glob_match("*mlp.gate", "model.layers.7.mlp.gate_proj"));
  EXPECT_TRUE(slm::glob_match("model.layers.*.mlp.router", "model.layers.12.mlp.router"));
  EXPECT_TRUE(slm::glob_match("layer.?", "layer.3"));
  EXPECT_FALSE(slm::glob_match("layer.?", "layer.13"));
  EXPECT_TRUE(slm::glob_match("layer.[0-3]", "layer.2"));
  EXPECT_FALSE(slm::glob_match("layer.[!0-3]", "layer.2"));
  EXPECT_TRUE(slm::glob_match("a[", "a["));  // unclosed set: literal
  EXPECT_TRUE(slm::glob_match("*", ""));
  EXPECT_FALSE(slm::glob_match("a*b*c", std::string(10000, 'a')));  // no blow-up
}

TEST(QuantConfig, ModelOptFileAndExcludes) {
  auto doc = slm::json::parse(R"({"producer": {"name": "modelopt", "version": "0.29"},
    "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                     "exclude_modules": ["lm_head", "model.layers.0.self_attn*", "*mlp.gate", "mamba.conv1d"]}})");
  ASSERT_TRUE(doc.ok());
  auto c = slm::quant_config::from_hf_quant_config(*doc);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->method, slm::quant_method::modelopt);
  EXPECT_EQ(c->algo, "NVFP4");
  EXPECT_EQ(c->group_size, 16);
  EXPECT_TRUE(c->is_excluded("lm_head.weight"));
  EXPECT_TRUE(c->is_excluded("model.layers.0.self_attn.o_proj"));
  EXPECT_FALSE(c->is_excluded("model.layers.1.self_attn.o_proj"));
  EXPECT_TRUE(c->is_excluded("model.layers.4.mlp.gate"));
  EXPECT_FALSE(c->is_excluded("model.layers.4.mlp.gate_proj"));
  EXPECT_TRUE(c->is_excluded("backbone.layers.2.mamba.conv1d"));  // substring, as older exports need
}

TEST(QuantConfig, MixedPrecisionAndConfigJsonForms) {
  auto mixed = slm::json::parse(R"({"quantization": {"quant_algo": "MIXED_PRECISION",
    "quantized_layers": {"model.layers.0.self_attn.q_proj": {"quant_algo": "FP8"},
                         "model.layers.0.mlp.experts": {"quant_algo": "NVFP4", "group_size": 16}}}})");
  ASSERT_TRUE(mixed.ok());
  auto c = slm::quant_config::from_hf_quant_config(*mixed);
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_EQ(c->layers.size(), 2u);
  EXPECT_FALSE(c->is_excluded("model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(c->is_excluded("model.layers.0.mlp.experts.3.down_proj"));
  EXPECT_TRUE(c->is_excluded("model.layers.0.self_attn.k_proj"));

  auto ct = slm::json::parse(R"({"quant_method": "compressed-tensors", "quantization_status": "compressed",
    "config_groups": {"group_0": {"format": "nvfp4-pack-quantized", "targets": ["Linear"]}}, "ignore": ["lm_head", "re:.*router"]})");
  auto cc = slm::quant_config::from_quantization_config(*ct);
  ASSERT_TRUE(cc.ok()) << cc.error().message();
  EXPECT_EQ(cc->method, slm::quant_method::compressed_tensors);
  EXPECT_EQ(cc->algo, "nvfp4-pack-quantized");
  EXPECT_TRUE(cc->is_excluded("lm_head"));
  EXPECT_FALSE(cc->is_excluded("model.layers.0.mlp.router"));  // "re:" patterns are not evaluated

  auto gptoss = slm::json::parse(R"({"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "lm_head"]})");
  auto cg = slm::quant_config::from_quantization_config(*gptoss);
  ASSERT_TRUE(cg.ok());
  EXPECT_EQ(cg->method, slm::quant_method::mxfp4);
  EXPECT_TRUE(cg->is_excluded("model.layers.3.self_attn"));

  auto unknown = slm::json::parse(R"({"quant_method": "gptq"})");
  EXPECT_TRUE(fails_with(slm::quant_config::from_quantization_config(*unknown), errc::unsupported, {"\"gptq\""}));
  auto bad = slm::json::parse(R"({"quantization": {"quant_algo": "NVFP4", "exclude_modules": "lm_head"}})");
  EXPECT_TRUE(fails_with(slm::quant_config::from_hf_quant_config(*bad), errc::format_error, {"exclude_modules", "not a list"}));
}

// The same stored data in both conventions dequantizes to ModelOpt's values: exactly
// for ModelOpt's multiplier; for compressed-tensors' divisor g = 1/weight_scale_2 the
// multiplier slm derives (1/g) is within 1 ulp of weight_scale_2, so values agree to
// 1 ulp of the block scale (spec 3.3) and are bit-identical when 1/(1/s) == s.
TEST(QuantLayouts, ModelOptAndCompressedTensorsAgree) {
  golden_case g;
  ASSERT_TRUE(g.file.ok());
  const auto want = g.dequantized();
  const float scale2 = g.scale2();

  slm_test::temp_dir mo("modelopt");
  {
    st::writer w;
    ASSERT_TRUE(w.add("model.layers.1.mlp.down_proj.weight", g.codes()).ok());
    ASSERT_TRUE(w.add("model.layers.1.mlp.down_proj.weight_scale", g.scales()).ok());
    ASSERT_TRUE(w.add("model.layers.1.mlp.down_proj.weight_scale_2", dtype::f32, slm::shape{}, std::as_bytes(std::span(&scale2, 1))).ok());
    write_checkpoint(mo.path(), R"({"model_type": "llama"})", w,
                     R"({"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": ["lm_head"]}})");
  }
  const float divisor = 1.0f / scale2;
  slm_test::temp_dir ct("ct");
  {
    st::writer w;
    ASSERT_TRUE(w.add("model.layers.1.mlp.down_proj.weight_packed", g.codes()).ok());
    ASSERT_TRUE(w.add("model.layers.1.mlp.down_proj.weight_scale", g.scales()).ok());
    ASSERT_TRUE(w.add("model.layers.1.mlp.down_proj.weight_global_scale", dtype::f32, slm::shape{1}, std::as_bytes(std::span(&divisor, 1))).ok());
    write_checkpoint(ct.path(), R"({"model_type": "llama", "quantization_config": {"quant_method": "compressed-tensors",
      "format": "nvfp4-pack-quantized", "ignore": ["lm_head"]}})", w);
  }
  for (const auto* dir : {&mo, &ct}) {
    auto ck = slm::checkpoint::open(dir->path());
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    auto cfg = slm::quant_config::from_checkpoint(*ck);
    ASSERT_TRUE(cfg.ok()) << cfg.error().message();
    EXPECT_EQ(cfg->method, dir == &mo ? slm::quant_method::modelopt : slm::quant_method::compressed_tensors);
    auto w = slm::load_linear_weight(*ck, "model.layers.1.mlp.down_proj");
    ASSERT_TRUE(w.ok()) << w.error().message();
    EXPECT_EQ(w->format, slm::weight_format::nvfp4);
    EXPECT_EQ(w->rows, 96u);
    EXPECT_EQ(w->cols, 512u);
    const auto got = dequantize_all(*w);
    ASSERT_EQ(got.size(), want.size());
    const bool exact_global = w->global == scale2;
    std::size_t differing = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (dir == &mo || exact_global) {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i] + 0.0f), std::bit_cast<std::uint32_t>(want[i] + 0.0f)) << i;
      } else {
        const float tol = std::fabs(want[i]) * 2 * 0x1p-23f;  // 1 ulp of the product, from 1 ulp in the scale
        ASSERT_NEAR(got[i], want[i], tol) << i;
        differing += got[i] != want[i];
      }
    }
    if (dir == &ct)
      std::printf("compressed-tensors convention: 1/(1/s2) %s s2; %zu of %zu values differ by <= 1 ulp\n",
                  exact_global ? "==" : "!=", differing, got.size());
  }
}

// With a power-of-two global scale the reciprocal is exact, and the two conventions give
// bit-identical values for the same stored codes and block scales.
TEST(QuantLayouts, ConventionsBitIdenticalForPowerOfTwoGlobal) {
  golden_case g;
  ASSERT_TRUE(g.file.ok());
  const float multiplier = 0x1p-7f, divisor = 128.0f;
  std::vector<std::vector<float>> results;
  for (int convention = 0; convention < 2; ++convention) {
    slm_test::temp_dir d(convention ? "ct" : "mo");
    st::writer w;
    const std::string p = "model.layers.0.mlp.up_proj";
    ASSERT_TRUE(w.add(p + (convention ? ".weight_packed" : ".weight"), g.codes()).ok());
    ASSERT_TRUE(w.add(p + ".weight_scale", g.scales()).ok());
    if (convention)
      ASSERT_TRUE(w.add(p + ".weight_global_scale", dtype::f32, slm::shape{1}, std::as_bytes(std::span(&divisor, 1))).ok());
    else
      ASSERT_TRUE(w.add(p + ".weight_scale_2", dtype::f32, slm::shape{}, std::as_bytes(std::span(&multiplier, 1))).ok());
    write_checkpoint(d.path(), R"({"model_type": "llama"})", w);
    auto ck = slm::checkpoint::open(d.path());
    ASSERT_TRUE(ck.ok());
    auto m = slm::load_linear_weight(*ck, p);
    ASSERT_TRUE(m.ok()) << m.error().message();
    results.push_back(dequantize_all(*m));
  }
  ASSERT_EQ(results[0].size(), results[1].size());
  EXPECT_EQ(0, std::memcmp(results[0].data(), results[1].data(), results[0].size() * sizeof(float)));
}

TEST(QuantLayouts, DenseFp8AndErrors) {
  slm_test::temp_dir d("dense");
  std::vector<std::uint16_t> bf16(8 * 32, 0x3F80);
  std::vector<std::uint8_t> fp8(4 * 32, 0x38);  // 1.0
  const float scale = 0.5f, nan = std::nanf(""), per_channel[4] = {1, 2, 3, 4};
  std::vector<float> block_inv(1, 0.25f);
  std::vector<std::uint8_t> codes(4 * 16), bad_scales(4 * 3);
  st::writer w;
  ASSERT_TRUE(w.add("dense.weight", dtype::bf16, slm::shape{8, 32}, std::as_bytes(std::span(bf16))).ok());
  ASSERT_TRUE(w.add("fp8.weight", dtype::f8_e4m3, slm::shape{4, 32}, std::as_bytes(std::span(fp8))).ok());
  ASSERT_TRUE(w.add("fp8.weight_scale", dtype::f32, slm::shape{}, std::as_bytes(std::span(&scale, 1))).ok());
  ASSERT_TRUE(w.add("fp8c.weight", dtype::f8_e4m3, slm::shape{4, 32}, std::as_bytes(std::span(fp8))).ok());
  ASSERT_TRUE(w.add("fp8c.weight_scale", dtype::f32, slm::shape{4, 1}, std::as_bytes(std::span(per_channel))).ok());
  ASSERT_TRUE(w.add("ds.weight", dtype::f8_e4m3, slm::shape{4, 32}, std::as_bytes(std::span(fp8))).ok());
  ASSERT_TRUE(w.add("ds.weight_scale_inv", dtype::f32, slm::shape{1, 1}, std::as_bytes(std::span(block_inv))).ok());
  ASSERT_TRUE(w.add("nanq.weight", dtype::u8, slm::shape{4, 16}, std::as_bytes(std::span(codes))).ok());
  ASSERT_TRUE(w.add("nanq.weight_scale", dtype::f8_e4m3, slm::shape{4, 2}, std::as_bytes(std::span(codes).first(8))).ok());
  ASSERT_TRUE(w.add("nanq.weight_scale_2", dtype::f32, slm::shape{}, std::as_bytes(std::span(&nan, 1))).ok());
  ASSERT_TRUE(w.add("orphan.weight", dtype::u8, slm::shape{4, 16}, std::as_bytes(std::span(codes))).ok());
  ASSERT_TRUE(w.add("badshape.weight", dtype::u8, slm::shape{4, 16}, std::as_bytes(std::span(codes))).ok());
  ASSERT_TRUE(w.add("badshape.weight_scale", dtype::f8_e4m3, slm::shape{4, 3}, std::as_bytes(std::span(bad_scales))).ok());
  ASSERT_TRUE(w.add("badshape.weight_scale_2", dtype::f32, slm::shape{}, std::as_bytes(std::span(&scale, 1))).ok());
  write_checkpoint(d.path(), R"({"model_type": "llama"})", w);
  auto ck = slm::checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();

  auto dense = slm::load_linear_weight(*ck, "dense");
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(dense->format, slm::weight_format::bf16);
  EXPECT_EQ(dequantize_all(*dense)[17], 1.0f);

  auto f8 = slm::load_linear_weight(*ck, "fp8");
  ASSERT_TRUE(f8.ok()) << f8.error().message();
  EXPECT_EQ(f8->global, 0.5f);
  EXPECT_EQ(dequantize_all(*f8)[5], 0.5f);
  auto f8c = slm::load_linear_weight(*ck, "fp8c");
  ASSERT_TRUE(f8c.ok()) << f8c.error().message();
  EXPECT_EQ(dequantize_all(*f8c)[3 * 32 + 7], 4.0f);  // row 3 scale
  auto ds = slm::load_linear_weight(*ck, "ds");
  ASSERT_TRUE(ds.ok()) << ds.error().message();
  EXPECT_EQ(ds->scale_block_cols, 128u);
  EXPECT_EQ(dequantize_all(*ds)[40], 0.25f);

  EXPECT_TRUE(fails_with(slm::load_linear_weight(*ck, "nanq"), errc::format_error,
                         {"nanq.weight_scale_2", "not a finite non-negative number"}));
  EXPECT_TRUE(fails_with(slm::load_linear_weight(*ck, "orphan"), errc::format_error,
                         {"module 'orphan'", "'orphan.weight' is U8 but has no 'orphan.weight_scale'"}));
  EXPECT_TRUE(fails_with(slm::load_linear_weight(*ck, "badshape"), errc::format_error,
                         {"module 'badshape'", "weight_scale: expected F8_E4M3 [4, 2]", "found F8_E4M3 [4, 3]"}));
  EXPECT_TRUE(fails_with(slm::load_linear_weight(*ck, "missing"), errc::not_found, {"no tensor 'missing.weight'"}));
}

TEST(QuantLayouts, GptOssStackedMxfp4Experts) {
  slm_test::temp_dir d("gptoss");
  // E = 2 experts, N = 3 rows, K = 64 (2 blocks of 32 = 16 bytes each).
  std::vector<std::uint8_t> blocks(2 * 3 * 2 * 16), scales(2 * 3 * 2);
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<std::uint8_t>((i * 7 + 3) & 0xFF);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(120 + i);
  st::writer w;
  ASSERT_TRUE(w.add("model.layers.0.mlp.experts.down_proj_blocks", dtype::u8, slm::shape{2, 3, 2, 16}, std::as_bytes(std::span(blocks))).ok());
  ASSERT_TRUE(w.add("model.layers.0.mlp.experts.down_proj_scales", dtype::u8, slm::shape{2, 3, 2}, std::as_bytes(std::span(scales))).ok());
  write_checkpoint(d.path(), R"({"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4"}})", w);
  auto ck = slm::checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok());
  auto m = slm::load_mxfp4_expert(*ck, "model.layers.0.mlp.experts.down_proj", 1);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->format, slm::weight_format::mxfp4);
  EXPECT_EQ(m->rows, 3u);
  EXPECT_EQ(m->cols, 64u);
  const auto got = dequantize_all(*m);
  // W[e, r, k] = e2m1(nibble) x 2^(scale[e, r, k/32] - 127), byte j of a block = elements 2j, 2j+1
  for (std::size_t r = 0; r < 3; ++r)
    for (std::size_t k = 0; k < 64; ++k) {
      const std::uint8_t byte = blocks[((1 * 3 + r) * 2 + k / 32) * 16 + (k % 32) / 2];
      const float e = slm::e2m1_to_f32(k % 2 ? byte >> 4 : byte & 0xF);
      const float want = e * std::ldexp(1.0f, scales[(1 * 3 + r) * 2 + k / 32] - 127);
      ASSERT_EQ(got[r * 64 + k], want) << r << "," << k;
    }
  EXPECT_TRUE(fails_with(slm::load_mxfp4_expert(*ck, "model.layers.0.mlp.experts.down_proj", 2), errc::out_of_range,
                         {"expert 2", "holds 2"}));
}
