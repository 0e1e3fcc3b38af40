// slm/formats/dequantize.hpp - what a stored weight means: checking a weight_matrix view,
// building one from checkpoint tensors, and the exact reference dequantizer.
//
// The reference dequantizer is the definition every kernel is tested against, so it is
// written to read like the spec (shared/spec/nvfp4.md), not to be fast:
//
//   W[r, k] = element(r, k) x (block_scale(r, k) x global)
//
//   format    element(r, k)                 block_scale(r, k)                    global
//   f32       the float                     1                                    1 (any multiplier)
//   bf16/f16  the decoded 16-bit value      1                                    1 (any multiplier)
//   fp8_e4m3  e4m3(code)                    1, or f32 scale[r / bn][k / bk]      per-tensor multiplier
//   nvfp4     e2m1(nibble)                  e4m3(scale[r][k / 16])               weight_scale_2
//   mxfp4     e2m1(nibble)                  e8m0(scale[r][k / 32]) = 2^(e-127)   1 (any multiplier)
//
// The product order is ModelOpt's (NVFP4QTensor.dequantize): the block scale times the
// global scale first, once per block, then times the element. In fp32 that order is
// part of the result: tests/test_quantize.cpp checks it bit for bit against ModelOpt's
// own `dequantized` tensors. (For mxfp4 and for fp8 with global = 1 every order gives
// the same bits: a power-of-two or unit factor is exact.) A global of exactly 1 is not
// multiplied in at all for the dense formats, so an f32 row comes back unchanged.
//
// Two details that decide bits:
//  * E2M1 code 0x8 ("negative zero", spec 1.3) decodes to +0.0 here, the value
//    ModelOpt's table holds at 0x8, so dequantized tensors match the golden bit
//    patterns (none of ModelOpt's dequantized zeros is negative). core/numeric.hpp's
//    e2m1_to_f32(0x8) is -0.0, the code's IEEE meaning; the two compare equal.
//  * NaN scale codes (E4M3 0x7F/0xFF, E8M0 0xFF) are not special-cased: IEEE arithmetic
//    makes every element of that block NaN (zero codes too, 0 x NaN = NaN) and nothing
//    else. A NaN block scale means a broken checkpoint (spec 10, pitfall 4); the
//    dequantizer shows it instead of hiding it.
//
// Checkpoint bytes may sit at any alignment (safetensors offsets are arbitrary), so
// every multi-byte load goes through memcpy.
#pragma once
#include "slm/core/build_mode.hpp"

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "slm/core/dtype.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"
#include "slm/formats/weights.hpp"

namespace slm {

namespace detail {

// E2M1 values as ModelOpt's dequantizer tables them: code 0x8 is +0.0 (see above).
inline constexpr std::array<float, 16> e2m1_dequant_table = {
    0.0f, 0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

template <class T>
inline T load_unaligned(const std::byte* p) noexcept {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept { return a / b + (a % b != 0 ? 1 : 0); }

// Bytes of one row of block scales: nvfp4 K/16 e4m3, mxfp4 K/32 e8m0, fp8 ceil(K/bk) f32.
constexpr std::size_t scale_row_bytes(const weight_matrix& w) noexcept {
  switch (w.format) {
    case weight_format::nvfp4: case weight_format::mxfp4: return w.cols / block_size(w.format);
    case weight_format::fp8_e4m3:
      return w.scale_block_cols == 0 ? 0 : sizeof(float) * ceil_div(w.cols, w.scale_block_cols);
    default: return 0;
  }
}

inline std::string describe(const weight_matrix& w) {
  return cat("weight_matrix ", to_string(w.format), " [", w.rows, ", ", w.cols, "]");
}

}  // namespace detail

// ---------------------------------------------------------------------------------
// validate: is this view something the dequantizer and the kernels can read?
//
// Checks the geometry, never the data (a NaN scale byte is data; see above):
//  * format is one of weight_format;
//  * data is non-null, and for nvfp4/mxfp4 and blocked fp8 so is scales;
//  * nvfp4: K % 16 == 0, mxfp4: K % 32 == 0 (so K is even for the packed formats);
//  * row_stride >= row_bytes(format, K) and, where there are scales, scale_stride >= the
//    bytes of one row of scales; strides are only read when N > 1, so only then checked;
//  * fp8 block scales: scale_block_rows >= 1; an fp8 view with scales but
//    scale_block_cols == 0, or any other format with scale_block_cols != 0, is refused
//    (a half-described view is a bug, not a per-tensor fp8 matrix);
//  * global is finite (a NaN or infinite per-tensor scale cannot be a checkpoint's).
// An empty matrix (N == 0 or K == 0) is valid whatever its pointers.
status validate(const weight_matrix& w);
#if SLM_DEFINE_KERNELS
SLM_INLINE status validate(const weight_matrix& w) {
  auto bad = [&](const auto&... what) {
    return make_error(errc::invalid_argument, detail::describe(w), ": ", what...);
  };
  switch (w.format) {
    case weight_format::f32: case weight_format::bf16: case weight_format::f16:
    case weight_format::fp8_e4m3: case weight_format::nvfp4: case weight_format::mxfp4: break;
    default:
      return make_error(errc::invalid_argument, "weight_matrix: unknown format code ",
                        static_cast<unsigned>(w.format));
  }
  if (w.rows == 0 || w.cols == 0) return {};
  const std::size_t block = block_size(w.format);
  if (w.cols % block != 0)
    return bad("K = ", w.cols, " is not a multiple of the ", to_string(w.format), " block size ", block);
  if (w.data == nullptr) return bad("data is null");
  const std::size_t rb = row_bytes(w.format, w.cols);
  if (w.rows > 1 && w.row_stride < rb)
    return bad("row_stride ", w.row_stride, " is less than the ", rb, " bytes of one row");
  if (!std::isfinite(w.global)) return bad("global scale is ", w.global, ", not a finite number");

  const bool blocked_fp8 = w.format == weight_format::fp8_e4m3 && w.scale_block_cols != 0;
  const bool needs_scales = w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4 || blocked_fp8;
  if (w.scale_block_cols != 0 && w.format != weight_format::fp8_e4m3)
    return bad("scale_block_cols = ", w.scale_block_cols, " is only meaningful for fp8 block scales");
  if (blocked_fp8 && w.scale_block_rows == 0) return bad("fp8 block scales with scale_block_rows = 0");
  if (!needs_scales) {
    if (w.scales != nullptr)
      return bad(w.format == weight_format::fp8_e4m3
                     ? "scales is set but scale_block_cols = 0 (per-tensor fp8); set the block geometry or clear scales"
                     : "scales is set, but this format has no block scales");
    return {};
  }
  if (w.scales == nullptr)
    return bad("scales is null (", w.format == weight_format::nvfp4   ? "nvfp4 needs e4m3 scales [N, K/16]"
                                   : w.format == weight_format::mxfp4 ? "mxfp4 needs e8m0 scales [N, K/32]"
                                                                      : "fp8 block scales need f32 scales",
               ")");
  const std::size_t srows = blocked_fp8 ? detail::ceil_div(w.rows, w.scale_block_rows) : w.rows;
  const std::size_t sb = detail::scale_row_bytes(w);
  if (srows > 1 && w.scale_stride < sb)
    return bad("scale_stride ", w.scale_stride, " is less than the ", sb, " bytes of one row of scales");
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// ---------------------------------------------------------------------------------
// The reference dequantizer.

// Row `row` of W as K floats into out[0, K). Preconditions: validate(w) is ok, row < N,
// out.size() >= K; if the last two do not hold it writes nothing.
void dequantize_row(const weight_matrix& w, std::size_t row, std::span<float> out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void dequantize_row(const weight_matrix& w, std::size_t row, std::span<float> out) noexcept {
  const std::size_t K = w.cols;
  if (row >= w.rows || out.size() < K || K == 0) return;
  const std::byte* src = w.data + row * w.row_stride;
  const float g = w.global;
  switch (w.format) {
    case weight_format::f32:
      for (std::size_t k = 0; k < K; ++k) out[k] = detail::load_unaligned<float>(src + 4 * k);
      break;
    case weight_format::bf16:
      for (std::size_t k = 0; k < K; ++k) out[k] = bf16_to_f32(detail::load_unaligned<std::uint16_t>(src + 2 * k));
      break;
    case weight_format::f16:
      for (std::size_t k = 0; k < K; ++k) out[k] = f16_to_f32(detail::load_unaligned<std::uint16_t>(src + 2 * k));
      break;
    case weight_format::fp8_e4m3: {
      const auto* codes = reinterpret_cast<const std::uint8_t*>(src);
      if (w.scale_block_cols == 0) {  // per-tensor: e4m3(code) x global
        for (std::size_t k = 0; k < K; ++k) out[k] = e4m3_to_f32(codes[k]) * g;
        return;
      }
      // DeepSeek-style blocks: e4m3(code) x (scale[r / bn][k / bk] x global).
      const std::byte* srow = w.scales + (row / w.scale_block_rows) * w.scale_stride;
      for (std::size_t k0 = 0; k0 < K; k0 += w.scale_block_cols) {
        const float bs = detail::load_unaligned<float>(srow + sizeof(float) * (k0 / w.scale_block_cols)) * g;
        const std::size_t k1 = k0 + w.scale_block_cols < K ? k0 + w.scale_block_cols : K;
        for (std::size_t k = k0; k < k1; ++k) out[k] = e4m3_to_f32(codes[k]) * bs;
      }
      return;
    }
    case weight_format::nvfp4:
    case weight_format::mxfp4: {
      const bool nv = w.format == weight_format::nvfp4;
      const std::size_t block = block_size(w.format);
      const auto* codes = reinterpret_cast<const std::uint8_t*>(src);
      const auto* scales = reinterpret_cast<const std::uint8_t*>(w.scales + row * w.scale_stride);
      for (std::size_t b = 0; b < K / block; ++b) {
        // The block's scale times the global scale first, then times each element.
        const float bs = (nv ? e4m3_to_f32(scales[b]) : e8m0_to_f32(scales[b])) * g;
        for (std::size_t i = 0; i < block; i += 2) {
          const std::size_t k = b * block + i;
          const std::uint8_t byte = codes[k / 2];  // element 2j in the low nibble (spec 1.4)
          out[k] = detail::e2m1_dequant_table[fp4_lo(byte)] * bs;
          out[k + 1] = detail::e2m1_dequant_table[fp4_hi(byte)] * bs;
        }
      }
      return;
    }
  }
  // Dense formats: the global multiplier, when there is one.
  if (g != 1.0f)
    for (std::size_t k = 0; k < K; ++k) out[k] *= g;
}
#endif  // SLM_DEFINE_KERNELS

// One element W[r, k], computed on its own (tests, debugging; the same arithmetic as
// dequantize_row). Preconditions: validate(w) is ok; NaN when r or k is out of range.
float dequantize_at(const weight_matrix& w, std::size_t r, std::size_t k) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE float dequantize_at(const weight_matrix& w, std::size_t r, std::size_t k) noexcept {
  if (r >= w.rows || k >= w.cols) return std::numeric_limits<float>::quiet_NaN();
  const std::byte* row = w.data + r * w.row_stride;
  const float g = w.global;
  auto dense = [g](float v) { return g != 1.0f ? v * g : v; };
  switch (w.format) {
    case weight_format::f32: return dense(detail::load_unaligned<float>(row + 4 * k));
    case weight_format::bf16: return dense(bf16_to_f32(detail::load_unaligned<std::uint16_t>(row + 2 * k)));
    case weight_format::f16: return dense(f16_to_f32(detail::load_unaligned<std::uint16_t>(row + 2 * k)));
    case weight_format::fp8_e4m3: {
      const float e = e4m3_to_f32(static_cast<std::uint8_t>(row[k]));
      if (w.scale_block_cols == 0) return e * g;
      const std::byte* s = w.scales + (r / w.scale_block_rows) * w.scale_stride + sizeof(float) * (k / w.scale_block_cols);
      return e * (detail::load_unaligned<float>(s) * g);
    }
    case weight_format::nvfp4:
    case weight_format::mxfp4: {
      const auto byte = static_cast<std::uint8_t>(row[k / 2]);
      const auto sc = static_cast<std::uint8_t>(w.scales[r * w.scale_stride + k / block_size(w.format)]);
      const float bs = w.format == weight_format::nvfp4 ? e4m3_to_f32(sc) : e8m0_to_f32(sc);
      return detail::e2m1_dequant_table[k % 2 == 0 ? fp4_lo(byte) : fp4_hi(byte)] * (bs * g);
    }
  }
  return std::numeric_limits<float>::quiet_NaN();
}
#endif  // SLM_DEFINE_KERNELS

// All of W, row-major, into out (N x K floats). Validates the view first.
status dequantize(const weight_matrix& w, std::span<float> out);
#if SLM_DEFINE_KERNELS
SLM_INLINE status dequantize(const weight_matrix& w, std::span<float> out) {
  SLM_TRY(validate(w));
  if (w.cols != 0 && w.rows > std::numeric_limits<std::size_t>::max() / w.cols)
    return make_error(errc::out_of_range, detail::describe(w), ": N x K overflows");
  if (out.size() != w.rows * w.cols)
    return make_error(errc::invalid_argument, "dequantize: output holds ", out.size(), " floats, ",
                      detail::describe(w), " has ", w.rows * w.cols);
  for (std::size_t r = 0; r < w.rows; ++r) dequantize_row(w, r, out.subspan(r * w.cols, w.cols));
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// ---------------------------------------------------------------------------------
// Building views from checkpoint tensors, with dtype and shape checks. Each returns a
// view into the tensors' memory (nothing is copied), already validated.

namespace detail {

struct matrix_geometry {
  std::size_t rows = 0, cols = 0;  // in elements of the tensor's dtype (bytes for U8)
  std::size_t row_stride = 0;      // bytes
};

// A rank-2 tensor whose rows are contiguous (the last stride is 1; the row stride may be
// larger, as for a column slice). Packed F4 tensors are always contiguous.
result<matrix_geometry> rows_of(const tensor_view& t, std::string_view what);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<matrix_geometry> rows_of(const tensor_view& t, std::string_view what) {
  if (t.rank() != 2)
    return make_error(errc::invalid_argument, what, ": expected a rank-2 tensor, found ",
                      safetensors_name(t.type()), " ", t.shape().to_string());
  matrix_geometry g;
  g.rows = static_cast<std::size_t>(t.dim(0));
  g.cols = static_cast<std::size_t>(t.dim(1));
  if (t.type() == dtype::f4) {  // sub-byte: the shape counts elements, two per byte
    g.row_stride = g.cols / 2;
    return g;
  }
  if (g.cols > 1 && t.stride(1) != 1)
    return make_error(errc::invalid_argument, what, ": rows are not contiguous (strides [", t.stride(0), ", ",
                      t.stride(1), "])");
  if (t.data() == nullptr && g.rows * g.cols != 0) return make_error(errc::invalid_argument, what, ": data is null");
  g.row_stride = g.rows > 1 ? static_cast<std::size_t>(t.stride(0)) * size_of(t.type()) : g.cols * size_of(t.type());
  return g;
}
#endif  // SLM_DEFINE_KERNELS

inline std::string shape_text(std::size_t a, std::size_t b) { return cat("[", a, ", ", b, "]"); }

// Codes of a packed FP4 matrix: U8 [N, K/2], F4 [N, K] (safetensors' sub-byte tag counts
// elements), or for mxfp4 the gpt-oss blocks U8 [N, K/32, 16]. Sets rows, cols = K.
result<matrix_geometry> fp4_codes(const tensor_view& codes, std::string_view what, bool allow_blocks);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<matrix_geometry> fp4_codes(const tensor_view& codes, std::string_view what, bool allow_blocks) {
  if (allow_blocks && codes.rank() == 3 && codes.type() == dtype::u8) {
    if (codes.dim(2) != 16 || (codes.dim(1) > 1 && codes.stride(1) != 16) || codes.stride(2) != 1)
      return make_error(errc::invalid_argument, what, ": gpt-oss blocks must be contiguous U8 [N, K/32, 16], found U8 ",
                        codes.shape().to_string());
    matrix_geometry g;
    g.rows = static_cast<std::size_t>(codes.dim(0));
    g.cols = static_cast<std::size_t>(codes.dim(1)) * 32;
    g.row_stride = g.rows > 1 ? static_cast<std::size_t>(codes.stride(0)) : g.cols / 2;
    return g;
  }
  if (codes.type() != dtype::u8 && codes.type() != dtype::f4)
    return make_error(errc::invalid_argument, what, ": expected U8 [N, K/2] (two E2M1 codes per byte) or F4 [N, K]",
                      allow_blocks ? " or U8 [N, K/32, 16]" : "", ", found ", safetensors_name(codes.type()), " ",
                      codes.shape().to_string());
  auto g = rows_of(codes, what);
  if (!g.ok()) return g;
  if (codes.type() == dtype::u8) g->cols *= 2;  // bytes -> elements
  return g;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail

// F32, BF16 or F16 [N, K].
result<weight_matrix> make_dense(const tensor_view& t);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<weight_matrix> make_dense(const tensor_view& t) {
  weight_format f;
  switch (t.type()) {
    case dtype::f32: f = weight_format::f32; break;
    case dtype::bf16: f = weight_format::bf16; break;
    case dtype::f16: f = weight_format::f16; break;
    default:
      return make_error(errc::invalid_argument, "dense weight: expected F32, BF16 or F16 [N, K], found ",
                        safetensors_name(t.type()), " ", t.shape().to_string());
  }
  auto g = detail::rows_of(t, "dense weight");
  if (!g.ok()) return std::move(g).take_error();
  weight_matrix w;
  w.format = f;
  w.rows = g->rows;
  w.cols = g->cols;
  w.data = t.data();
  w.row_stride = g->row_stride;
  SLM_TRY(validate(w));
  return w;
}
#endif  // SLM_DEFINE_KERNELS

// FP8 E4M3 [N, K] with a per-tensor multiplier (ModelOpt/compressed-tensors FP8:
// weight_scale).
result<weight_matrix> make_fp8(const tensor_view& codes, float global = 1.0f);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<weight_matrix> make_fp8(const tensor_view& codes, float global) {
  if (codes.type() != dtype::f8_e4m3)
    return make_error(errc::invalid_argument, "fp8 weight: expected F8_E4M3 [N, K], found ",
                      safetensors_name(codes.type()), " ", codes.shape().to_string());
  auto g = detail::rows_of(codes, "fp8 weight");
  if (!g.ok()) return std::move(g).take_error();
  weight_matrix w;
  w.format = weight_format::fp8_e4m3;
  w.rows = g->rows;
  w.cols = g->cols;
  w.data = codes.data();
  w.row_stride = g->row_stride;
  w.global = global;
  SLM_TRY(validate(w));
  return w;
}
#endif  // SLM_DEFINE_KERNELS

// FP8 E4M3 [N, K] with DeepSeek-style f32 block scales [ceil(N/bn), ceil(K/bk)]
// (weight_scale_inv, a multiplier despite its name), e.g. bn = bk = 128.
result<weight_matrix> make_fp8(const tensor_view& codes, const tensor_view& scales, std::size_t block_rows,
                               std::size_t block_cols, float global = 1.0f);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<weight_matrix> make_fp8(const tensor_view& codes, const tensor_view& scales, std::size_t block_rows,
                                          std::size_t block_cols, float global) {
  if (block_rows == 0 || block_cols == 0)
    return make_error(errc::invalid_argument, "fp8 block scales: block size ", block_rows, " x ", block_cols,
                      " must be at least 1 x 1");
  auto w = make_fp8(codes, global);
  if (!w.ok()) return w;
  const std::size_t want_r = detail::ceil_div(w->rows, block_rows), want_c = detail::ceil_div(w->cols, block_cols);
  if (scales.type() != dtype::f32 || scales.rank() != 2 || static_cast<std::size_t>(scales.dim(0)) != want_r ||
      static_cast<std::size_t>(scales.dim(1)) != want_c)
    return make_error(errc::invalid_argument, "fp8 block scales: expected F32 ", detail::shape_text(want_r, want_c),
                      " (ceil(N/", block_rows, "), ceil(K/", block_cols, ") for weight ",
                      detail::shape_text(w->rows, w->cols), "), found ", safetensors_name(scales.type()), " ",
                      scales.shape().to_string());
  auto sg = detail::rows_of(scales, "fp8 block scales");
  if (!sg.ok()) return std::move(sg).take_error();
  w->scales = scales.data();
  w->scale_stride = sg->row_stride;
  w->scale_block_rows = block_rows;
  w->scale_block_cols = block_cols;
  SLM_TRY(validate(*w));
  return w;
}
#endif  // SLM_DEFINE_KERNELS

namespace detail {

// The shared body of make_nvfp4 and make_mxfp4: packed E2M1 codes [N, K/2] (F4 [N, K];
// for mxfp4 also gpt-oss blocks) with one scale per `block` elements, [N, K/block].
result<weight_matrix> make_packed_fp4(weight_format format, const tensor_view& codes, const tensor_view& scales,
                                      float global);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<weight_matrix> make_packed_fp4(weight_format format, const tensor_view& codes, const tensor_view& scales,
                                                 float global) {
  const bool nv = format == weight_format::nvfp4;
  const std::string_view what = nv ? "nvfp4 weight" : "mxfp4 weight";
  const std::string_view scales_what = nv ? "nvfp4 weight_scale" : "mxfp4 scales";
  const std::size_t block = block_size(format);
  auto g = fp4_codes(codes, what, /*allow_blocks=*/!nv);
  if (!g.ok()) return std::move(g).take_error();
  if (g->cols % block != 0)
    return make_error(errc::invalid_argument, what, ": K = ", g->cols, " (codes ", safetensors_name(codes.type()), " ",
                      codes.shape().to_string(), ") is not a multiple of the block size ", block);
  const std::size_t want_c = g->cols / block;
  const bool scale_type_ok = nv ? scales.type() == dtype::f8_e4m3
                                : scales.type() == dtype::u8 || scales.type() == dtype::f8_e8m0;
  if (!scale_type_ok || scales.rank() != 2 || static_cast<std::size_t>(scales.dim(0)) != g->rows ||
      static_cast<std::size_t>(scales.dim(1)) != want_c)
    return make_error(errc::invalid_argument, scales_what, ": expected ", nv ? "F8_E4M3 " : "U8 or F8_E8M0 ",
                      shape_text(g->rows, want_c), " (N, K/", block, " for codes ", safetensors_name(codes.type()), " ",
                      codes.shape().to_string(), "), found ", safetensors_name(scales.type()), " ",
                      scales.shape().to_string());
  auto sg = rows_of(scales, scales_what);
  if (!sg.ok()) return std::move(sg).take_error();
  weight_matrix w;
  w.format = format;
  w.rows = g->rows;
  w.cols = g->cols;
  w.data = codes.data();
  w.row_stride = g->row_stride;
  w.scales = scales.data();
  w.scale_stride = sg->row_stride;
  w.global = global;
  SLM_TRY(validate(w));
  return w;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail

// NVFP4: codes U8 [N, K/2] (or F4 [N, K]), scales F8_E4M3 [N, K/16], and the ModelOpt
// multiplier weight_scale_2. A compressed-tensors checkpoint stores the divisor
// weight_global_scale instead: pass 1 / weight_global_scale (spec 3.3; the conversion
// can move a dequantized value by 1 ulp of its block scale, see test_quantize.cpp).
inline result<weight_matrix> make_nvfp4(const tensor_view& codes, const tensor_view& scales, float global) {
  return detail::make_packed_fp4(weight_format::nvfp4, codes, scales, global);
}

// MXFP4: codes U8 [N, K/2] (or F4 [N, K], or gpt-oss blocks U8 [N, K/32, 16]) and E8M0
// scales [N, K/32] stored as U8 or F8_E8M0. `global` is 1 for every MXFP4 checkpoint.
inline result<weight_matrix> make_mxfp4(const tensor_view& codes, const tensor_view& scales, float global = 1.0f) {
  return detail::make_packed_fp4(weight_format::mxfp4, codes, scales, global);
}

}  // namespace slm
