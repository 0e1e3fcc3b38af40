// slm/layers/linear.hpp - a linear layer y = x W^T (+ b) over a weight in any format. Binders
// (models/bind.hpp: load_linear) fill it from checkpoint tensors with their shapes checked.
//
// Every matrix product of the model code goes through linear::apply, which also counts
// the weight bytes it streams (codes + scales) into the caller's compute context: that
// count is how tests prove a MoE decode step reads only the experts it selected.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "slm/core/buffer.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/formats/weights.hpp"

namespace slm {

// What one forward call runs on: the executor, the activation precision of quantized
// products, and counters the layers add to.
struct compute_context {
  executor_ref ex;
  std::uint64_t weight_bytes = 0;  // weight bytes streamed by linear::apply
  std::uint64_t product_flops = 0;  // 2 T out in of every weight product (attention scores not counted)
  const cancellation* cancel = nullptr;
  // Activations of products with NVFP4/MXFP4 weights. bf16 (the default) is W4A16 as GPU
  // stacks run it: x rounded to bf16 once per product, weights exact, f32 sums
  // (kernels/avx512_bf16.hpp states the bound: RMS error ~1.7e-3 of RMS y, against ~10 % for
  // the 4-bit weights themselves), about twice the f32 path's speed on AVX512_BF16.
  // f32 is the exact reference (what matmul() computes), int8 the W4A8 path. Other
  // weights multiply f32 activations, bf16 weights unless dense_activations says otherwise.
  activation_precision quantized_activations = activation_precision::bf16;
  // Activations of products with bf16 weights: f32 (the default: exact, as transformers
  // runs a bf16 checkpoint on a CPU) or bf16, the host's opt-in: x rounded to bf16 once per
  // product, as llama.cpp runs bf16 weights, under the bound of kernels/avx512_bf16.hpp, and
  // on AMX tiles for prompts where the CPU has them (kernels/amx.hpp). Other values mean f32.
  activation_precision dense_activations = activation_precision::f32;
};

// The activation precision of a product with w: the context's for packed 4-bit weights
// (NVFP4, MXFP4), its dense choice for bf16 weights, f32 for every other format. Every layer
// asks here, and this asks the kernel table's default_activations (kernels/table.hpp), as a
// format policy's matmul does: one decision for the layers and the compile-time path.
inline activation_precision product_precision(const weight_matrix& w, const compute_context& cx) noexcept {
  return default_activations(w.format, cx.quantized_activations, cx.dense_activations);
}

// Bytes a kernel reads for one pass over w: codes plus block scales.
inline std::uint64_t weight_bytes(const weight_matrix& w) noexcept {
  std::uint64_t b = static_cast<std::uint64_t>(w.rows) * row_bytes(w.format, w.cols);
  if (w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4)
    b += static_cast<std::uint64_t>(w.rows) * (w.cols / block_size(w.format));
  return b;
}

// Rows [r0, r0 + n) of w as a view of the same storage (expert slices of a stacked
// tensor, one head's rows of a projection). fp8 block scales must stay block-aligned.
result<weight_matrix> slice_rows(const weight_matrix& w, std::size_t r0, std::size_t n);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<weight_matrix> slice_rows(const weight_matrix& w, std::size_t r0, std::size_t n) {
  if (r0 > w.rows || n > w.rows - r0)
    return make_error(errc::out_of_range, "rows [", r0, ", ", r0 + n, ") of a weight with ", w.rows, " rows");
  weight_matrix s = w;
  s.rows = n;
  s.data = w.data + r0 * w.row_stride;
  if (w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4) {
    s.scales = w.scales + r0 * w.scale_stride;
  } else if (w.format == weight_format::fp8_e4m3 && w.scale_block_cols != 0) {
    if (r0 % w.scale_block_rows != 0)
      return make_error(errc::unsupported, "rows from ", r0, " of an fp8 weight with ", w.scale_block_rows,
                        "-row scale blocks");
    s.scales = w.scales + (r0 / w.scale_block_rows) * w.scale_stride;
  }
  return s;
}
#endif  // SLM_DEFINE_KERNELS

struct linear {
  weight_matrix w;
  floats bias;  // [out], or empty

  std::size_t in() const noexcept { return w.cols; }
  std::size_t out() const noexcept { return w.rows; }

  // [T, in] x [in, out] -> [T, out]; x rows are ldx apart, y rows ldy apart.
  status apply(const float* x, std::size_t T, std::size_t ldx, float* y, std::size_t ldy, compute_context& cx) const;
  status apply(const float* x, std::size_t T, float* y, compute_context& cx) const {
    return apply(x, T, in(), y, out(), cx);
  }
};

#if SLM_DEFINE_KERNELS
SLM_INLINE status linear::apply(const float* x, std::size_t T, std::size_t ldx, float* y, std::size_t ldy,
                                compute_context& cx) const {
  SLM_TRY(matmul(w, x, T, ldx, y, ldy, cx.ex, isa::best, product_precision(w, cx)));
  cx.weight_bytes += weight_bytes(w);
  cx.product_flops += 2 * static_cast<std::uint64_t>(T) * w.rows * w.cols;
  if (!bias.empty())
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t o = 0; o < out(); ++o) y[t * ldy + o] += bias[o];
  return {};
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm
