// slm/formats/weights.hpp - a weight matrix in any supported storage format, as a view.
//
// Every linear layer's weight is a matrix W[N, K] (N output features = rows, K input
// features = the reduction dimension, row-major like PyTorch's nn.Linear.weight), stored
// in one of the formats below. A weight_matrix points into checkpoint memory (or a
// repacked buffer) and copies nothing; the kernels in kernels/matmul.hpp and the reference
// dequantizer in formats/dequantize.hpp read it directly.
//
//   format    data (row r starts at data + r * row_stride)      scales                           global
//   f32       K floats                                          -                                1
//   bf16      K bf16                                            -                                1
//   f16       K f16                                             -                                1
//   fp8_e4m3  K e4m3 codes                                      none (per-tensor: global), or    per-tensor multiplier
//                                                               f32 [ceil(N/bn), ceil(K/bk)]
//                                                               (DeepSeek 128x128 blocks)
//   nvfp4     K/2 bytes, E2M1 pairs, element 2i in low nibble   e4m3 [N, K/16]                   weight_scale_2 (multiplier)
//   mxfp4     K/2 bytes, as nvfp4                               ue8m0 [N, K/32]                  1
//
// Dequantized value: W[r, k] = element(r, k) x block_scale(r, k) x global. Checkpoints
// that store a divisor (compressed-tensors' weight_global_scale) are converted to this
// multiplier convention when the view is built (see formats/quant_config.hpp).
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace slm {

enum class weight_format : std::uint8_t { f32, bf16, f16, fp8_e4m3, nvfp4, mxfp4 };

constexpr std::string_view to_string(weight_format f) noexcept {
  switch (f) {
    case weight_format::f32: return "f32";
    case weight_format::bf16: return "bf16";
    case weight_format::f16: return "f16";
    case weight_format::fp8_e4m3: return "fp8";
    case weight_format::nvfp4: return "nvfp4";
    case weight_format::mxfp4: return "mxfp4";
  }
  return "?";
}

// Elements per scale block along K (1 = no block scales).
constexpr std::size_t block_size(weight_format f) noexcept {
  return f == weight_format::nvfp4 ? 16 : f == weight_format::mxfp4 ? 32 : 1;
}

// Bytes of one row of K elements (packed formats: K must be a multiple of the block).
constexpr std::size_t row_bytes(weight_format f, std::size_t k) noexcept {
  switch (f) {
    case weight_format::f32: return 4 * k;
    case weight_format::bf16: case weight_format::f16: return 2 * k;
    case weight_format::fp8_e4m3: return k;
    case weight_format::nvfp4: case weight_format::mxfp4: return k / 2;
  }
  return 0;
}

struct weight_matrix {
  weight_format format = weight_format::f32;
  std::size_t rows = 0;  // N
  std::size_t cols = 0;  // K
  const std::byte* data = nullptr;
  std::size_t row_stride = 0;  // bytes between consecutive rows of data
  // nvfp4: e4m3 bytes [N, K/16]; mxfp4: ue8m0 bytes [N, K/32]; fp8 block: f32 [N/bn, K/bk].
  const std::byte* scales = nullptr;
  std::size_t scale_stride = 0;  // bytes between consecutive rows of scales
  std::size_t scale_block_rows = 1;  // fp8 block scales only (e.g. 128)
  std::size_t scale_block_cols = 0;  // fp8 block scales only (e.g. 128); 0 = no block scales
  float global = 1.0f;  // multiplier applied to every element
};

}  // namespace slm
