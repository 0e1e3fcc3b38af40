// Fixtures made by the reference implementations (tools/oracle/make_safetensors_fixtures.py,
// run with safetensors 0.8.0, torch 2.11, transformers 5.17; see the JSON notes):
//  - a file of every dtype written by the Rust safetensors writer: slm decodes every value
//    as torch does, and slm's writer reproduces the file byte for byte;
//  - torch's casts of ~22k float32 values to bf16, f16, e4m3fn, e5m2 (and e8m0): slm's
//    encoders give the same codes;
//  - a sharded checkpoint written by transformers' save_pretrained: slm loads every
//    tensor from the right shard, with the sums torch computed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>

#include "slm/io/checkpoint.hpp"
#include "slm/core/numeric.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

namespace st = slm::safetensors;
using slm::dtype;

namespace {

slm::json::value load_json(const std::filesystem::path& p) {
  auto text = slm::read_text_file(p);
  if (!text.ok()) return {};
  auto v = slm::json::parse(*text);
  return v.ok() ? std::move(*v) : slm::json::value{};
}

std::filesystem::path oracle(std::string_view f) { return slm_test::test_data("oracle") / f; }

template <class T>
std::vector<T> read_as(const slm::tensor_view& v) {
  std::vector<T> out(static_cast<std::size_t>(v.numel()));
  std::memcpy(out.data(), v.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace

TEST(Oracle, EveryDtypeDecodesAsTorch) {
  const auto note = load_json(oracle("all_dtypes.json"));
  ASSERT_TRUE(note["tensors"].is_object());
  auto f = st::file::open(oracle("all_dtypes.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message();
  EXPECT_EQ(f->tensors().size(), note["tensors"].size());
  for (const auto& m : note["tensors"].members()) {
    SCOPED_TRACE(m.key);
    auto v = f->tensor(m.key);
    ASSERT_TRUE(v.ok());
    EXPECT_EQ(slm::safetensors_name(v->type()), m.val["dtype"].as_string());
    EXPECT_EQ(v->shape(), (slm::shape{4, 8}));
    const auto& values = m.val["values"];
    ASSERT_EQ(values.size(), 32u);
    std::vector<float> got(32);
    ASSERT_TRUE(v->to_f32(got).ok());
    const auto f64 = v->type() == dtype::f64 ? read_as<double>(*v) : std::vector<double>{};
    for (std::size_t i = 0; i < 32; ++i) {
      if (values[i].is_string()) {  // floats, exactly, as float.hex() (or nan/inf)
        const std::string s(values[i].as_string());
        const double want = std::strtod(s.c_str(), nullptr);
        const double have = v->type() == dtype::f64 ? f64[i] : static_cast<double>(got[i]);
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(have)) << i;
        } else {
          EXPECT_EQ(have, want) << i << " (" << s << ")";
          EXPECT_EQ(std::signbit(have), std::signbit(want)) << i;
        }
      } else {  // integers and bools
        EXPECT_EQ(static_cast<double>(got[i]), values[i].as_double()) << i;
      }
    }
  }
}

// Same tensors and metadata in, same bytes out: order (element size, then the Rust
// dtype order, then name), header JSON and padding all match the reference writer.
TEST(Oracle, WriterIsByteIdenticalToReference) {
  auto mapped = slm::mapped_file::open(oracle("all_dtypes.safetensors"));
  ASSERT_TRUE(mapped.ok());
  auto f = st::file::from_memory(mapped->bytes());
  ASSERT_TRUE(f.ok());
  st::writer w;
  for (const auto& [k, v] : f->header().metadata) w.set_metadata(k, v);
  for (const auto& t : f->tensors()) ASSERT_TRUE(w.add(t.name, f->view(t)).ok());
  auto bytes = w.serialize();
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->size(), mapped->size());
  EXPECT_EQ(0, std::memcmp(bytes->data(), mapped->bytes().data(), bytes->size()))
      << "header ours:   " << std::string(reinterpret_cast<const char*>(bytes->data()) + 8, 200);
}

TEST(Oracle, EncodersMatchTorchCasts) {
  auto f = st::file::open(oracle("conversions.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message();
  const auto x = read_as<float>(*f->tensor("input_f32"));
  const auto bf16 = read_as<std::uint16_t>(*f->tensor("bf16"));
  const auto f16 = read_as<std::uint16_t>(*f->tensor("f16"));
  const auto e4m3 = read_as<std::uint8_t>(*f->tensor("e4m3"));
  const auto e5m2 = read_as<std::uint8_t>(*f->tensor("e5m2"));
  std::size_t nan_inputs = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "input " << i << " = " << x[i] << " (bits 0x" << std::hex
                                    << std::bit_cast<std::uint32_t>(x[i]) << ")");
    if (std::isnan(x[i])) {  // payloads may differ; NaN must stay NaN
      ++nan_inputs;
      EXPECT_TRUE(std::isnan(slm::bf16_to_f32(slm::f32_to_bf16(x[i]))));
      EXPECT_TRUE(std::isnan(slm::bf16_to_f32(bf16[i])));
      EXPECT_TRUE(std::isnan(slm::f16_to_f32(slm::f32_to_f16(x[i]))));
      EXPECT_TRUE(std::isnan(slm::e4m3_to_f32(slm::f32_to_e4m3(x[i], slm::fp8_overflow::nan_on_overflow))));
      EXPECT_TRUE(std::isnan(slm::e5m2_to_f32(slm::f32_to_e5m2(x[i]))));
      continue;
    }
    ASSERT_EQ(slm::f32_to_bf16(x[i]), bf16[i]);
    ASSERT_EQ(slm::f32_to_f16(x[i]), f16[i]);
    ASSERT_EQ(slm::f32_to_e4m3(x[i], slm::fp8_overflow::nan_on_overflow), e4m3[i]);
    ASSERT_EQ(slm::f32_to_e5m2(x[i], slm::fp8_overflow::infinity), e5m2[i]);
  }
  std::printf("matched torch on %zu inputs (%zu NaN inputs checked as NaN)\n", x.size(), nan_inputs);
  EXPECT_GT(x.size(), 20000u);
}

// torch's float8_e8m0fnu cast against slm's E8M0 encoders. They agree everywhere except
// where the conventions differ, and the test pins those differences exactly:
//  - ties (x = 1.5 x 2^k): torch rounds up, slm's f32_to_e8m0 rounds to the even code;
//  - x >= 1.5 x 2^127: torch overflows to NaN (0xFF), slm saturates to 0xFE (2^127).
TEST(Oracle, E8m0AgainstTorch) {
  auto f = st::file::open(oracle("conversions.safetensors"));
  ASSERT_TRUE(f.ok());
  if (!f->find("e8m0")) GTEST_SKIP() << "the fixture's torch had no float8_e8m0fnu";
  const auto x = read_as<float>(*f->tensor("e8m0_input"));
  const auto code = read_as<std::uint8_t>(*f->tensor("e8m0"));
  std::size_t ties = 0, overflows = 0, others = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "input " << x[i]);
    int e = 0;
    const bool tie = std::frexp(x[i], &e) == 0.75f;  // x = 0.75 x 2^e = 1.5 x 2^(e-1)
    if (x[i] >= 0x1.8p127f) {
      ++overflows;
      EXPECT_EQ(code[i], 0xFF);
      EXPECT_EQ(slm::f32_to_e8m0(x[i]), 0xFE);
    } else if (tie) {
      ++ties;
      EXPECT_EQ(code[i], slm::f32_to_e8m0_ceil(x[i]));
      EXPECT_EQ(slm::f32_to_e8m0(x[i]) % 2, 0);
    } else {
      ++others;
      EXPECT_EQ(slm::f32_to_e8m0(x[i]), code[i]);
    }
  }
  std::printf("e8m0 vs torch: %zu agree, %zu ties (torch up), %zu overflows (torch NaN)\n", others, ties, overflows);
  EXPECT_GT(others, 20000u);
}

TEST(Oracle, ShardedCheckpointFromTransformers) {
  const auto dir = oracle("sharded_llama");
  auto ck = slm::checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->shards().size(), 5u);
  const auto sums = load_json(dir / "sums.json");
  ASSERT_TRUE(sums["tensors"].is_object());
  EXPECT_EQ(ck->size(), sums["tensors"].size());
  for (const auto& m : sums["tensors"].members()) {
    SCOPED_TRACE(m.key);
    auto v = ck->tensor(m.key);
    ASSERT_TRUE(v.ok()) << v.error().message();
    EXPECT_EQ(v->type(), dtype::bf16);
    std::vector<std::int64_t> shape;
    for (const auto& d : m.val["shape"].items()) shape.push_back(*d.as_int64());
    EXPECT_EQ(std::vector<std::int64_t>(v->shape().dims().begin(), v->shape().dims().end()), shape);
    std::vector<float> vals(static_cast<std::size_t>(v->numel()));
    ASSERT_TRUE(v->to_f32(vals).ok());
    double sum = 0;
    for (float x : vals) sum += x;
    const double want = m.val["sum"].as_double();
    EXPECT_NEAR(sum, want, 1e-9 * std::max(1.0, std::fabs(want)));
  }
}
