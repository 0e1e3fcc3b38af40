// slm/kernels/reference.hpp - the scalar reference kernels: what every SIMD kernel of the
// table (kernels/table.hpp) is tested against, and what isa::scalar runs.
//
//   f32 activations   detail::mm::reference(): one row at a time, k = 0..K-1 in order,
//                     each weight dequantized exactly (element x block scale x global,
//                     formats/weights.hpp); obviously correct, slow.
//   bf16 activations  the definition y = W . bf16(x): detail::a16::to_bf16 rounds x, then
//                     the f32 kernels (kernels/avx512_bf16.hpp states the bound).
//   int8 activations  W4A8 (nvfp4 / mxfp4): detail::w4a8::quantize_scalar per activation
//                     block, then reference_rows, segments in order (the definition and
//                     its error bound: kernels/avx512_vnni.hpp).
// Also the scalar helpers the SIMD files share (unaligned loads, block factors, the
// exact row decode).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "slm/core/numeric.hpp"
#include "slm/formats/weights.hpp"
#include "slm/kernels/kernel_row.hpp"

namespace slm {

namespace detail::mm {

// ---------------------------------------------------------------------------------
// Unaligned scalar access.

inline std::uint8_t ld_u8(const std::byte* p) noexcept { return static_cast<std::uint8_t>(*p); }
inline std::uint16_t ld_u16(const std::byte* p) noexcept {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
inline float ld_f32(const std::byte* p) noexcept {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}

// block_scale(r, k) x global, for the block holding column k of row r.
inline float block_factor(const weight_matrix& w, std::size_t r, std::size_t k) noexcept {
  switch (w.format) {
    case weight_format::nvfp4: return e4m3_to_f32(ld_u8(w.scales + r * w.scale_stride + k / 16)) * w.global;
    case weight_format::mxfp4: return e8m0_to_f32(ld_u8(w.scales + r * w.scale_stride + k / 32)) * w.global;
    case weight_format::fp8_e4m3:
      if (w.scale_block_cols == 0) return w.global;
      return ld_f32(w.scales + (r / w.scale_block_rows) * w.scale_stride + (k / w.scale_block_cols) * 4) * w.global;
    default: return w.global;
  }
}

// The stored element (before any scale) at column k of a row starting at `row`.
inline float element(weight_format f, const std::byte* row, std::size_t k) noexcept {
  switch (f) {
    case weight_format::f32: return ld_f32(row + 4 * k);
    case weight_format::bf16: return bf16_to_f32(ld_u16(row + 2 * k));
    case weight_format::f16: return f16_to_f32(ld_u16(row + 2 * k));
    case weight_format::fp8_e4m3: return e4m3_to_f32(ld_u8(row + k));
    case weight_format::nvfp4:
    case weight_format::mxfp4: {
      const std::uint8_t b = ld_u8(row + k / 2);
      return e2m1_to_f32((k & 1) ? fp4_hi(b) : fp4_lo(b));
    }
  }
  return 0.0f;
}

// How many columns from k share one block factor (to the end of the row at most).
inline std::size_t factor_run(const weight_matrix& w, std::size_t k) noexcept {
  std::size_t bk = 0;
  switch (w.format) {
    case weight_format::nvfp4: bk = 16; break;
    case weight_format::mxfp4: bk = 32; break;
    case weight_format::fp8_e4m3: bk = w.scale_block_cols; break;
    default: break;
  }
  if (bk == 0) return w.cols - k;
  return std::min(w.cols, (k / bk + 1) * bk) - k;
}

// Dequantizes columns [k0, k0 + n) of row r into out[0..n): element x factor, exactly
// the reference's values.
void decode_scalar(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n, float* out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void decode_scalar(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n, float* out) noexcept {
  const std::byte* row = w.data + r * w.row_stride;
  std::size_t k = k0;
  const std::size_t end = k0 + n;
  while (k < end) {
    const float f = block_factor(w, r, k);
    const std::size_t stop = std::min(end, k + factor_run(w, k));
    for (; k < stop; ++k) out[k - k0] = element(w.format, row, k) * f;
  }
}
#endif  // SLM_DEFINE_KERNELS

// ---------------------------------------------------------------------------------
// Reference: y[t, r] = sum_{k = 0..K-1} x[t, k] * (element(r, k) * factor(r, k)), in
// order, f32. Rows [r0, r1).
void reference(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
               std::size_t ldy, std::size_t r0, std::size_t r1) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void reference(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                          std::size_t ldy, std::size_t r0, std::size_t r1) noexcept {
  const std::size_t K = w.cols;
  for (std::size_t r = r0; r < r1; ++r) {
    const std::byte* row = w.data + r * w.row_stride;
    for (std::size_t t = 0; t < n_tok; ++t) {
      const float* xt = x + t * ldx;
      float acc = 0.0f;
      std::size_t k = 0;
      while (k < K) {
        const float f = block_factor(w, r, k);
        const std::size_t stop = k + factor_run(w, k);
        for (; k < stop; ++k) acc += xt[k] * (element(w.format, row, k) * f);
      }
      y[t * ldy + r] = acc;
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

// Sum over one 16-element nvfp4 block (or any 2-aligned run) of x * e2m1, in order.
inline float fp4_dot_scalar(const std::byte* codes, const float* x, std::size_t n) noexcept {
  float acc = 0.0f;
  for (std::size_t i = 0; i < n; i += 2) {
    const std::uint8_t b = ld_u8(codes + i / 2);
    acc += x[i] * e2m1_to_f32(fp4_lo(b));
    acc += x[i + 1] * e2m1_to_f32(fp4_hi(b));
  }
  return acc;
}

// Column block of the GEMM panels.
inline constexpr std::size_t gemm_kc = 256;
// Scratch of one chunk of the f32-activation panel GEMMs (AVX2, AVX-512, NEON): a panel of
// up to 64 rows and one decoded row.
inline constexpr std::size_t panel_scratch = (64 * gemm_kc + gemm_kc) * sizeof(float);

#if SLM_DEFINE_KERNELS
// The f32 reference as a row of the table: every n_tok, no scratch.
SLM_INLINE void reference_gemm(const weight_matrix& w, const acts& a, std::size_t n_tok, float* y, std::size_t ldy,
                               std::size_t r0, std::size_t r1, std::byte*) noexcept {
  reference(w, a.x, n_tok, a.ldx, y, ldy, r0, r1);
}
SLM_INLINE kernel_row reference_row() noexcept {
  kernel_row k;
  k.name = "reference";
  k.gemm = &reference_gemm;
  return k;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail::mm

namespace detail::a16 {

// The definition's rounding of one activation (bit-identical to vcvtneps2bf16).
inline std::uint16_t to_bf16(float x) noexcept {
  std::uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7F800000u) == 0) return static_cast<std::uint16_t>((bits >> 16) & 0x8000u);  // zero, subnormal
  return f32_to_bf16(x);
}

}  // namespace detail::a16

namespace detail::w4a8 {

inline constexpr std::size_t seg = 16;     // columns per exact integer dot
inline constexpr std::size_t group = 256;  // columns per GEMV step (16 segments)
inline constexpr std::int32_t offset = 12;  // weights enter vpdpbusd as e' + 12
inline constexpr std::array<std::int8_t, 16> e2m1x2 = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
// GEMM panel geometry (AVX-512 VNNI kernels; sizes the scratch on every target).
// Activation block (elements sharing one int8 scale).
constexpr std::size_t act_block(weight_format f) noexcept { return f == weight_format::mxfp4 ? 32 : 16; }

// Quantized activations of one token: q [K] int8, h [K/16] (d/2 per segment, repeated
// for both halves of a 32-block), nc [K/16] = -12 x sum of the segment's q.
struct qrow {
  std::int8_t* q;
  float* h;
  std::int32_t* nc;
};

void quantize_scalar(const float* x, std::size_t K, std::size_t qb, qrow o) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void quantize_scalar(const float* x, std::size_t K, std::size_t qb, qrow o) noexcept {
  for (std::size_t b = 0; b < K; b += qb) {
    float amax = 0.0f;
    bool bad = false;
    for (std::size_t k = b; k < b + qb; ++k) {
      const float a = std::fabs(x[k]);
      if (!(a <= std::numeric_limits<float>::max())) bad = true;
      else amax = std::max(amax, a);
    }
    const float d = amax / 127.0f;
    const bool zero = bad || d == 0.0f;
    for (std::size_t s = b / seg; s < (b + qb) / seg; ++s) {
      std::int32_t sum = 0;
      for (std::size_t k = s * seg; k < (s + 1) * seg; ++k) {
        float r = zero ? 0.0f : std::nearbyint(x[k] / d);
        r = std::min(127.0f, std::max(-127.0f, r));
        o.q[k] = static_cast<std::int8_t>(r);
        sum += o.q[k];
      }
      o.nc[s] = -offset * sum;
      o.h[s] = bad ? std::numeric_limits<float>::quiet_NaN() : 0.5f * d;
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// sum + the terms of segments [s0, s1) of one row, in order: fma(D_s, f_s x h_s, .), D_s the
// exact integer dot of the row's codes with q. The reference's whole row, and the SIMD
// GEMVs' trailing segments.
inline float segment_terms(const weight_matrix& w, std::size_t r, const std::int8_t* q, const float* h,
                           std::size_t s0, std::size_t s1, float sum) noexcept {
  const std::byte* row = w.data + r * w.row_stride;
  for (std::size_t s = s0; s < s1; ++s) {
    std::int32_t dot = 0;
    for (std::size_t k = s * seg; k < (s + 1) * seg; k += 2) {
      const std::uint8_t b = mm::ld_u8(row + k / 2);
      dot += q[k] * e2m1x2[fp4_lo(b)] + q[k + 1] * e2m1x2[fp4_hi(b)];
    }
    sum = std::fma(static_cast<float>(dot), mm::block_factor(w, r, s * seg) * h[s], sum);
  }
  return sum;
}
#endif  // SLM_DEFINE_KERNELS

// y[t, r] for rows [r0, r1): the definition above, segments in order. qx holds n_tok
// rows of K (q) and K/16 (h) values.
void reference_rows(const weight_matrix& w, const std::int8_t* q, const float* h, std::size_t n_tok,
                    float* y, std::size_t ldy, std::size_t r0, std::size_t r1) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void reference_rows(const weight_matrix& w, const std::int8_t* q, const float* h, std::size_t n_tok,
                               float* y, std::size_t ldy, std::size_t r0, std::size_t r1) noexcept {
  const std::size_t K = w.cols, S = K / seg;
  for (std::size_t r = r0; r < r1; ++r)
    for (std::size_t t = 0; t < n_tok; ++t) y[t * ldy + r] = segment_terms(w, r, q + t * K, h + t * S, 0, S, 0.0f);
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// Quantized activations of n_tok tokens, as the W4A8 GEMM rows read them: q [n_tok x K],
// then h and nc [n_tok x K/16] each, every array 64-byte aligned.
inline std::size_t q_bytes(std::size_t K, std::size_t n_tok) noexcept { return (n_tok * K + 63) / 64 * 64; }
inline std::size_t hs_bytes(std::size_t K, std::size_t n_tok) noexcept { return (n_tok * (K / seg) * 4 + 63) / 64 * 64; }
inline std::size_t gemm_bytes(std::size_t K, std::size_t n_tok) noexcept { return q_bytes(K, n_tok) + 2 * hs_bytes(K, n_tok); }
inline qrow token_row(std::byte* p, std::size_t K, std::size_t t, std::size_t n_tok) noexcept {
  const std::size_t S = K / seg;
  return {reinterpret_cast<std::int8_t*>(p) + t * K, reinterpret_cast<float*>(p + q_bytes(K, n_tok)) + t * S,
          reinterpret_cast<std::int32_t*>(p + q_bytes(K, n_tok) + hs_bytes(K, n_tok)) + t * S};
}
SLM_INLINE void prepare_scalar(const weight_matrix& w, const float* x, std::size_t t, std::size_t n_tok,
                               std::byte* out) noexcept {
  quantize_scalar(x, w.cols, act_block(w.format), token_row(out, w.cols, t, n_tok));
}
SLM_INLINE void reference_gemm(const weight_matrix& w, const mm::acts& a, std::size_t n_tok, float* y, std::size_t ldy,
                               std::size_t r0, std::size_t r1, std::byte*) noexcept {
  const qrow q = token_row(const_cast<std::byte*>(a.p), w.cols, 0, n_tok);
  reference_rows(w, q.q, q.h, n_tok, y, ldy, r0, r1);
}
// The W4A8 reference as a row of the table (nvfp4 / mxfp4 on every isa without VNNI).
SLM_INLINE mm::kernel_row reference_row() noexcept {
  mm::kernel_row k;
  k.name = "w4a8_reference";
  k.gemm = &reference_gemm;
  k.gemm_prepare = &prepare_scalar;
  k.gemm_bytes = &gemm_bytes;
  return k;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail::w4a8

}  // namespace slm
