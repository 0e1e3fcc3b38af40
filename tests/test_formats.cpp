// Formats as policies: a layer written once against the weight_format_policy concept,
// instantiated at compile time by name and at run time through visit_format.
#include "slm/formats/policies.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "slm/formats/quantize.hpp"
#include "slm/layers/linear.hpp"
#include "test_helpers.hpp"

namespace {

// What a model layer looks like: templated on its weight format.
template <slm::weight_format_policy Format>
struct linear {
  slm::weight_matrix w;
  slm::status forward(const float* x, float* y, slm::executor_ref ex) const {
    return Format::matmul(w, x, 1, w.cols, y, w.rows, ex);  // [1, K] x [K, N] -> [1, N]
  }
};

struct not_a_format {};
static_assert(!slm::weight_format_policy<not_a_format>);
static_assert(slm::format::nvfp4::block == 16 && slm::format::mxfp4::block == 32 && slm::format::bf16::block == 1);
static_assert(slm::format::nvfp4::row_bytes(64) == 32 && slm::format::bf16::row_bytes(64) == 128);

}  // namespace

TEST(Formats, CompileTimeAndRuntimeSelectionAgree) {
  std::vector<float> w(8 * 32), x(32);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>((i * 37) % 11) * 0.1f - 0.5f;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  auto q = slm::quantize_nvfp4(std::span<const float>(w), 8, 32);
  ASSERT_TRUE(q.ok());
  const slm::weight_matrix m = q->view();
  slm::serial_executor serial;

  std::vector<float> by_type(8), by_tag(8), reference(8);
  ASSERT_TRUE(linear<slm::format::nvfp4>{m}.forward(x.data(), by_type.data(), serial).ok());
  const slm::status s = slm::visit_format(m.format, [&](auto policy) {
    return linear<decltype(policy)>{m}.forward(x.data(), by_tag.data(), serial);
  });
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(by_type, by_tag);

  // The policy's dequantize_row is the reference the kernels are checked against.
  std::vector<float> row(32);
  for (std::size_t r = 0; r < 8; ++r) {
    slm::format::nvfp4::dequantize_row(m, r, row);
    double acc = 0;
    for (std::size_t k = 0; k < 32; ++k) acc += static_cast<double>(row[k]) * x[k];
    EXPECT_NEAR(by_type[r], acc, 1e-5);
  }

  // A weight of another format is refused, not misread.
  std::vector<float> y(8);
  EXPECT_TRUE(slm_test::fails_with(linear<slm::format::bf16>{m}.forward(x.data(), y.data(), serial),
                                   slm::errc::invalid_argument, {"a nvfp4 weight passed to the bf16 policy"}));
}

// The compile-time path and the model layers run the same numerics: a format policy's
// matmul defaults to the activation precision linear::apply uses (product_precision:
// bf16 for NVFP4/MXFP4, f32 for the rest), through the same row of the kernel table.
TEST(Formats, PolicyAndLayerRunTheSameNumerics) {
  std::vector<float> w(40 * 64), x(3 * 64);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(0.37f * static_cast<float>(i));
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::cos(0.11f * static_cast<float>(i)) * 1.7f;  // not bf16-exact
  auto q = slm::quantize_nvfp4(std::span<const float>(w), 40, 64);
  ASSERT_TRUE(q.ok());
  const slm::weight_matrix m = q->view();
  slm::serial_executor serial;
  static_assert(slm::format::nvfp4::activations == slm::activation_precision::bf16);
  static_assert(slm::format::bf16::activations == slm::activation_precision::f32);
  const slm::linear layer{m, {}};
  for (std::size_t T : {1u, 3u}) {  // the GEMV and the GEMM rows
    std::vector<float> by_policy(T * 40), by_layer(T * 40), exact(T * 40);
    ASSERT_TRUE(slm::format::nvfp4::matmul(m, x.data(), T, 64, by_policy.data(), 40, serial).ok());
    slm::compute_context cx{serial};
    ASSERT_TRUE(layer.apply(x.data(), T, by_layer.data(), cx).ok());
    EXPECT_EQ(by_policy, by_layer) << T;
    ASSERT_TRUE(slm::format::nvfp4::matmul(m, x.data(), T, 64, exact.data(), 40, serial,
                                           slm::activation_precision::f32).ok());
    EXPECT_NE(by_policy, exact) << T;  // the bf16 rounding of x shows
    slm::compute_context exact_cx{serial};
    exact_cx.quantized_activations = slm::activation_precision::f32;
    ASSERT_TRUE(layer.apply(x.data(), T, by_layer.data(), exact_cx).ok());
    EXPECT_EQ(exact, by_layer) << T;
  }
}
