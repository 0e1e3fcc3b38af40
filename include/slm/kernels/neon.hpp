// slm/kernels/neon.hpp - the AArch64 (NEON) kernels with f32 activations: fused GEMV for
// every weight format and the panel GEMM, selected by isa::neon (core/cpu.hpp). Their table
// row: neon_row() (kernels/table.hpp). Elsewhere than AArch64 this header is empty. Plain
// <arm_neon.h> intrinsics of ARMv8.0-A, which every AArch64 CPU has: no FP16
// arithmetic, no dot product, no SVE.
//
// The structure is the x86 one (kernels/matmul.hpp), with the same guarantees:
//
//   GEMV fused  four rows per iteration, decoded in registers, multiplied against x in
//               f32 with FMA; block factors (scale x global) applied once per block:
//               acc += f_b * dot(elements_b, x_b). The next rows are prefetched.
//     f32      16 columns per step, two accumulators per row.
//     bf16     the same; bf16 -> f32 is a zip with zero (bf16 bits into the high half).
//     f16      the same; f16 -> f32 by FCVTL / FCVTL2 (exact, subnormals included).
//     fp8      16 codes per step rebuilt as f16 bits (sign | magnitude << 7 is exactly
//              the E4M3 value x 2^-8, subnormals included; 0x7F / 0xFF, the NaNs, get an
//              all-ones f16 exponent) and widened by FCVTL; the 2^8 is folded into the
//              factor of each run of columns sharing one (per-tensor: the whole row;
//              DeepSeek blocks: 128 columns). Columns of a run past its last 16 go
//              through the exact scalar decode.
//     nvfp4 /  16 code bytes (32 columns) per step: every E2M1 value is a bf16, so two
//     mxfp4    TBL lookups (vqtbl1q_u8) give its high and low bytes, two zips make the
//              bf16 and a zip with zero the f32: exact values, no integer conversion.
//              Low nibbles (even columns) and high nibbles (odd columns) stay apart and
//              meet x de-interleaved by LD2 (vld2q_f32), so no zip of the codes either.
//              A trailing 16-column nvfp4 block runs the scalar block dot.
//   GEMM panel  a thread decodes 16 rows x KC columns of W (exactly the reference's
//               element x factor values) into a k-major f32 panel, then a microkernel
//               multiplies it with tiles of up to 4 tokens: 4 row vectors x 4 tokens of
//               accumulators, x read 4 columns at a time and used by lane (FMLA by
//               element), so every weight is decoded once per call.
//
// Determinism: matmul() partitions rows the same way for every isa; each output element
// is computed by one thread with an operation sequence that depends only on (format,
// n_tok path, K), so results are bit-identical for any thread count. Results differ
// from the scalar reference only in summation order (test_matmul.cpp's gamma bound).
//
// Performance has not been measured on AArch64 hardware (the project's CI runs these
// kernels under qemu-aarch64, which checks results, not speed).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "slm/kernels/reference.hpp"

#ifdef SLM_NEON
#if SLM_DEFINE_KERNELS  // only the kernels unit compiles the intrinsics
#include <arm_neon.h>
#endif

#include <array>
#include <bit>

namespace slm::detail::mm {

namespace neon {

#if SLM_DEFINE_KERNELS  // kernel templates and helpers: only the kernels unit instantiates them
// The bytes of each E2M1 value as a bf16 (all sixteen are exact bf16 values): high byte
// (sign, exponent, first mantissa bit) and low byte.
template <int Shift>
constexpr std::array<std::uint8_t, 16> e2m1_bf16_bytes() noexcept {
  std::array<std::uint8_t, 16> t{};
  for (std::size_t i = 0; i < 16; ++i)
    t[i] = static_cast<std::uint8_t>((std::bit_cast<std::uint32_t>(e2m1_table[i]) >> Shift) & 0xFFu);
  return t;
}
inline constexpr std::array<std::uint8_t, 16> e2m1_hi = e2m1_bf16_bytes<24>();
inline constexpr std::array<std::uint8_t, 16> e2m1_lo = e2m1_bf16_bytes<16>();
static_assert(e2m1_hi[7] == 0x40 && e2m1_lo[7] == 0xC0, "6.0 is bf16 0x40C0");

// Unaligned loads through byte pointers (any alignment; reinterpreted little-endian).
inline uint8x16_t ld_b16(const std::byte* p) noexcept { return vld1q_u8(reinterpret_cast<const std::uint8_t*>(p)); }
inline float32x4_t ld_f4(const std::byte* p) noexcept { return vreinterpretq_f32_u8(ld_b16(p)); }

// bf16 bits (u16 lanes) -> f32: the bits become the high half of each 32-bit lane.
inline float32x4_t bf16_lo(uint16x8_t v) noexcept { return vreinterpretq_f32_u16(vzip1q_u16(vdupq_n_u16(0), v)); }
inline float32x4_t bf16_hi(uint16x8_t v) noexcept { return vreinterpretq_f32_u16(vzip2q_u16(vdupq_n_u16(0), v)); }

// 8 f16 (u16 lanes) -> f32, exact.
inline float32x4_t f16_lo(uint16x8_t v) noexcept { return vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(v))); }
inline float32x4_t f16_hi(uint16x8_t v) noexcept { return vcvt_high_f32_f16(vreinterpretq_f16_u16(v)); }

// 16 E4M3 codes -> the f16 bits of (value x 2^-8), codes 0..7 in lo, 8..15 in hi.
// E4M3 S EEEE MMM and f16 S EEEEE MMMMMMMMMM: magnitude << 7 puts E and M in the f16's
// fields and the biases (7 and 15) differ by 8, subnormals included. Low byte of the f16
// = (magnitude & 1) << 7, high byte = sign | magnitude >> 1 (SRI keeps the sign bit).
inline void fp8_f16_bits(uint8x16_t c, uint16x8_t& lo, uint16x8_t& hi) noexcept {
  const uint8x16_t mag = vandq_u8(c, vdupq_n_u8(0x7F));
  const uint8x16_t l = vshlq_n_u8(c, 7);
  uint8x16_t h = vsriq_n_u8(c, mag, 1);
  h = vorrq_u8(h, vandq_u8(vceqq_u8(mag, vdupq_n_u8(0x7F)), vdupq_n_u8(0x7C)));  // NaN: exponent all ones
  lo = vreinterpretq_u16_u8(vzip1q_u8(l, h));
  hi = vreinterpretq_u16_u8(vzip2q_u8(l, h));
}

// E2M1 codes (low nibbles of `codes`) -> bf16 bits: codes 0..7 in a, 8..15 in b.
inline void fp4_bf16_bits(uint8x16_t codes, uint8x16_t thi, uint8x16_t tlo, uint16x8_t& a, uint16x8_t& b) noexcept {
  const uint8x16_t h = vqtbl1q_u8(thi, codes), l = vqtbl1q_u8(tlo, codes);
  a = vreinterpretq_u16_u8(vzip1q_u8(l, h));
  b = vreinterpretq_u16_u8(vzip2q_u8(l, h));
}

// The same bytes R rows on (the next iteration's rows), into L2; one per 64 bytes.
inline void prefetch(const std::byte* p) noexcept { __builtin_prefetch(p, 0, 2); }

// ---------------------------------------------------------------------------------
// GEMV.

// nvfp4 / mxfp4 over R rows from row r. Per 32 columns and row: load 16 code bytes,
// split nibbles, 4 TBL + 4 zips to bf16, 8 zips to f32, 8 FMAs against de-interleaved x.
template <int R, bool NV>
void gemv_fp4(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const uint8x16_t thi = vld1q_u8(e2m1_hi.data()), tlo = vld1q_u8(e2m1_lo.data());
  const uint8x16_t m4 = vdupq_n_u8(0x0F);
  const float* e4m3 = e4m3_table.data();
  const std::byte* codes[R];
  const std::byte* sc[R];
  float32x4_t acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    sc[i] = w.scales + (r + static_cast<std::size_t>(i)) * w.scale_stride;
    acc[i] = vdupq_n_f32(0.0f);
  }
  const float g = w.global;
  for (std::size_t j = 0; j < groups; ++j) {
    // xv[q].val[0] = x[32j + 8q + {0, 2, 4, 6}], .val[1] = x[32j + 8q + {1, 3, 5, 7}].
    float32x4x2_t xv[4];
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) xv[q] = vld2q_f32(x + 32 * j + 8 * static_cast<std::size_t>(q));
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const std::byte* cp = codes[i] + 16 * j;
      if ((j & 3) == 0) prefetch(cp + R * w.row_stride);
      const uint8x16_t b = ld_b16(cp);
      uint16x8_t e0, e1, o0, o1;  // even columns 0..14 / 16..30, odd 1..15 / 17..31
      fp4_bf16_bits(vandq_u8(b, m4), thi, tlo, e0, e1);
      fp4_bf16_bits(vshrq_n_u8(b, 4), thi, tlo, o0, o1);
      float32x4_t p0 = vmulq_f32(bf16_lo(e0), xv[0].val[0]);
      float32x4_t p0b = vmulq_f32(bf16_lo(o0), xv[0].val[1]);
      p0 = vfmaq_f32(p0, bf16_hi(e0), xv[1].val[0]);
      p0b = vfmaq_f32(p0b, bf16_hi(o0), xv[1].val[1]);
      float32x4_t p1 = vmulq_f32(bf16_lo(e1), xv[2].val[0]);
      float32x4_t p1b = vmulq_f32(bf16_lo(o1), xv[2].val[1]);
      p1 = vfmaq_f32(p1, bf16_hi(e1), xv[3].val[0]);
      p1b = vfmaq_f32(p1b, bf16_hi(o1), xv[3].val[1]);
      p0 = vaddq_f32(p0, p0b);  // columns 0..15 of the group
      p1 = vaddq_f32(p1, p1b);  // columns 16..31
      if constexpr (NV) {
        acc[i] = vfmaq_n_f32(acc[i], p0, e4m3[ld_u8(sc[i] + 2 * j)] * g);
        acc[i] = vfmaq_n_f32(acc[i], p1, e4m3[ld_u8(sc[i] + 2 * j + 1)] * g);
      } else {
        acc[i] = vfmaq_n_f32(acc[i], vaddq_f32(p0, p1), e8m0_to_f32(ld_u8(sc[i] + j)) * g);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = vaddvq_f32(acc[i]);
    if (groups * 32 < K) {  // one trailing 16-element nvfp4 block
      const std::size_t k = groups * 32;
      sum += fp4_dot_scalar(codes[i] + k / 2, x + k, 16) * block_factor(w, r + static_cast<std::size_t>(i), k);
    }
    y[i] = sum;
  }
}

// The 16 columns from byte `p` of an f32 / bf16 / f16 row, as f32.
template <weight_format F>
inline void load16(const std::byte* p, float32x4_t (&v)[4]) noexcept {
  if constexpr (F == weight_format::f32) {
    v[0] = ld_f4(p);
    v[1] = ld_f4(p + 16);
    v[2] = ld_f4(p + 32);
    v[3] = ld_f4(p + 48);
  } else {
    const uint16x8_t a = vreinterpretq_u16_u8(ld_b16(p)), b = vreinterpretq_u16_u8(ld_b16(p + 16));
    if constexpr (F == weight_format::bf16) {
      v[0] = bf16_lo(a), v[1] = bf16_hi(a), v[2] = bf16_lo(b), v[3] = bf16_hi(b);
    } else {
      v[0] = f16_lo(a), v[1] = f16_hi(a), v[2] = f16_lo(b), v[3] = f16_hi(b);
    }
  }
}

// f32 / bf16 / f16, natural order, 16 columns per step.
template <int R, weight_format F>
void gemv_f(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y) noexcept {
  constexpr std::size_t eb = F == weight_format::f32 ? 4 : 2;  // bytes per element
  const std::size_t K = w.cols, groups = K / 16;
  const std::byte* row[R];
  float32x4_t acc[R], acc2[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    row[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    acc[i] = vdupq_n_f32(0.0f);
    acc2[i] = vdupq_n_f32(0.0f);
  }
  for (std::size_t j = 0; j < groups; ++j) {
    const float* xj = x + 16 * j;
    const float32x4_t x0 = vld1q_f32(xj), x1 = vld1q_f32(xj + 4), x2 = vld1q_f32(xj + 8), x3 = vld1q_f32(xj + 12);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const std::byte* p = row[i] + 16 * eb * j;
      if (eb == 4 || (j & 1) == 0) prefetch(p + R * w.row_stride);
      float32x4_t v[4];
      load16<F>(p, v);
      acc[i] = vfmaq_f32(acc[i], v[0], x0);
      acc2[i] = vfmaq_f32(acc2[i], v[1], x1);
      acc[i] = vfmaq_f32(acc[i], v[2], x2);
      acc2[i] = vfmaq_f32(acc2[i], v[3], x3);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = vaddvq_f32(vaddq_f32(acc[i], acc2[i]));
    for (std::size_t k = groups * 16; k < K; ++k) sum += x[k] * element(w.format, row[i], k);
    y[i] = w.global == 1.0f ? sum : sum * w.global;
  }
}

// fp8 E4M3, per-tensor or block-scaled: per run of columns sharing one factor f, 16
// columns per step as f16 (value x 2^-8), then acc += (f x 2^8) x partial; the run's
// last k % 16 columns are summed exactly in scalar.
template <int R>
void gemv_fp8(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y) noexcept {
  const std::size_t K = w.cols;
  const std::byte* row[R];
  float32x4_t acc[R];
  float tail[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    row[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    acc[i] = vdupq_n_f32(0.0f);
    tail[i] = 0.0f;
  }
  std::size_t k = 0;
  while (k < K) {
    const std::size_t stop = k + factor_run(w, k);
    float f[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) f[i] = block_factor(w, r + static_cast<std::size_t>(i), k);
    float32x4_t a[R], b[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) a[i] = b[i] = vdupq_n_f32(0.0f);
    std::size_t kk = k;
    for (; kk + 16 <= stop; kk += 16) {
      const float32x4_t x0 = vld1q_f32(x + kk), x1 = vld1q_f32(x + kk + 4), x2 = vld1q_f32(x + kk + 8),
                        x3 = vld1q_f32(x + kk + 12);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        if (((kk - k) & 63) == 0) prefetch(row[i] + kk + R * w.row_stride);
        uint16x8_t lo, hi;
        fp8_f16_bits(ld_b16(row[i] + kk), lo, hi);
        a[i] = vfmaq_f32(a[i], f16_lo(lo), x0);
        b[i] = vfmaq_f32(b[i], f16_hi(lo), x1);
        a[i] = vfmaq_f32(a[i], f16_lo(hi), x2);
        b[i] = vfmaq_f32(b[i], f16_hi(hi), x3);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      if (kk > k) acc[i] = vfmaq_n_f32(acc[i], vaddq_f32(a[i], b[i]), f[i] * 256.0f);
      float t = 0.0f;
      for (std::size_t c = kk; c < stop; ++c) t += x[c] * e4m3_to_f32(ld_u8(row[i] + c));
      if (kk < stop) tail[i] += t * f[i];
    }
    k = stop;
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) y[i] = vaddvq_f32(acc[i]) + tail[i];
}

template <bool NV> struct fp4_k { template <int R> struct k { static void run(const weight_matrix& w, std::size_t r, const float* x, const std::byte*, float* y) noexcept { gemv_fp4<R, NV>(w, r, x, nullptr, y); } }; };
template <weight_format F> struct f_k { template <int R> struct k { static void run(const weight_matrix& w, std::size_t r, const float* x, const std::byte*, float* y) noexcept { gemv_f<R, F>(w, r, x, nullptr, y); } }; };
template <int R> struct fp8_k { static void run(const weight_matrix& w, std::size_t r, const float* x, const std::byte*, float* y) noexcept { gemv_fp8<R>(w, r, x, nullptr, y); } };
#endif  // SLM_DEFINE_KERNELS

// ---------------------------------------------------------------------------------
// GEMM panel.

// Columns [k0, k0 + n) of row r as element x factor (natural order): the values of
// decode_scalar, bit for bit.
void decode_row(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n, float* out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void decode_row(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n, float* out) noexcept {
  const std::byte* row = w.data + r * w.row_stride;
  std::size_t k = k0;
  const std::size_t end = k0 + n;
  const float32x4_t g = vdupq_n_f32(w.global);
  // out[c - k0 .. + 16) = v x f
  auto store4 = [&](std::size_t c, const float32x4_t (&v)[4], float32x4_t f) {
    float* o = out + (c - k0);
    vst1q_f32(o, vmulq_f32(v[0], f));
    vst1q_f32(o + 4, vmulq_f32(v[1], f));
    vst1q_f32(o + 8, vmulq_f32(v[2], f));
    vst1q_f32(o + 12, vmulq_f32(v[3], f));
  };
  switch (w.format) {
    case weight_format::f32:
      for (; k + 16 <= end; k += 16) {
        float32x4_t v[4];
        load16<weight_format::f32>(row + 4 * k, v);
        store4(k, v, g);
      }
      break;
    case weight_format::bf16:
      for (; k + 16 <= end; k += 16) {
        float32x4_t v[4];
        load16<weight_format::bf16>(row + 2 * k, v);
        store4(k, v, g);
      }
      break;
    case weight_format::f16:
      for (; k + 16 <= end; k += 16) {
        float32x4_t v[4];
        load16<weight_format::f16>(row + 2 * k, v);
        store4(k, v, g);
      }
      break;
    case weight_format::fp8_e4m3: {
      const float32x4_t two8 = vdupq_n_f32(256.0f);  // f16 bits hold value x 2^-8
      while (k < end) {
        const std::size_t stop = std::min(end, k + factor_run(w, k));
        const float32x4_t f = vdupq_n_f32(block_factor(w, r, k));
        for (; k + 16 <= stop; k += 16) {
          uint16x8_t lo, hi;
          fp8_f16_bits(ld_b16(row + k), lo, hi);
          // (v x 2^8) is the E4M3 value exactly; then x factor, as decode_scalar.
          const float32x4_t v[4] = {vmulq_f32(f16_lo(lo), two8), vmulq_f32(f16_hi(lo), two8),
                                    vmulq_f32(f16_lo(hi), two8), vmulq_f32(f16_hi(hi), two8)};
          store4(k, v, f);
        }
        if (k < stop) {
          decode_scalar(w, r, k, stop - k, out + (k - k0));
          k = stop;
        }
      }
      break;
    }
    case weight_format::nvfp4:
    case weight_format::mxfp4: {
      // k0 is a multiple of 32 (gemm_kc is), so groups of 32 align with blocks.
      const uint8x16_t thi = vld1q_u8(e2m1_hi.data()), tlo = vld1q_u8(e2m1_lo.data());
      const bool nv = w.format == weight_format::nvfp4;
      for (; k + 32 <= end; k += 32) {
        const uint8x16_t b = ld_b16(row + k / 2);
        const uint8x16_t l = vandq_u8(b, vdupq_n_u8(0x0F)), h = vshrq_n_u8(b, 4);
        uint16x8_t a0, a1, b0, b1;  // natural order: columns 0..7, 8..15, 16..23, 24..31
        fp4_bf16_bits(vzip1q_u8(l, h), thi, tlo, a0, a1);
        fp4_bf16_bits(vzip2q_u8(l, h), thi, tlo, b0, b1);
        const float f0 = block_factor(w, r, k), f1 = nv ? block_factor(w, r, k + 16) : f0;
        const float32x4_t v0[4] = {bf16_lo(a0), bf16_hi(a0), bf16_lo(a1), bf16_hi(a1)};
        store4(k, v0, vdupq_n_f32(f0));
        const float32x4_t v1[4] = {bf16_lo(b0), bf16_hi(b0), bf16_lo(b1), bf16_hi(b1)};
        store4(k + 16, v1, vdupq_n_f32(f1));
      }
      break;
    }
  }
  if (k < end) decode_scalar(w, r, k, end - k, out + (k - k0));
}
#endif  // SLM_DEFINE_KERNELS

inline constexpr std::size_t gemm_pr = 16, gemm_tt = 4;

#if SLM_DEFINE_KERNELS
// One column (lane L of the x vectors) of the microkernel: 4 x T FMAs by element.
template <int L, int T>
inline void micro_col(const float* p, const float32x4_t (&xv)[T], float32x4_t (&a)[4][T]) noexcept {
  const float32x4_t w0 = vld1q_f32(p), w1 = vld1q_f32(p + 4), w2 = vld1q_f32(p + 8), w3 = vld1q_f32(p + 12);
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    a[0][t] = vfmaq_laneq_f32(a[0][t], w0, xv[t], L);
    a[1][t] = vfmaq_laneq_f32(a[1][t], w1, xv[t], L);
    a[2][t] = vfmaq_laneq_f32(a[2][t], w2, xv[t], L);
    a[3][t] = vfmaq_laneq_f32(a[3][t], w3, xv[t], L);
  }
}

// T tokens x 16 rows over kc columns of a k-major panel (16 floats per k). y points at
// Y[t0, r0]; nr <= 16 rows are written; first: store, else add. x is read four columns
// at a time and used by lane.
template <int T>
void micro(const float* panel, std::size_t kc, const float* x, std::size_t ldx, float* y, std::size_t ldy,
           std::size_t nr, bool first) noexcept {
  float32x4_t a[4][T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) a[v][t] = vdupq_n_f32(0.0f);
  std::size_t k = 0;
  for (; k + 4 <= kc; k += 4) {
    float32x4_t xv[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) xv[t] = vld1q_f32(x + static_cast<std::size_t>(t) * ldx + k);
    const float* p = panel + gemm_pr * k;
    micro_col<0, T>(p, xv, a);
    micro_col<1, T>(p + gemm_pr, xv, a);
    micro_col<2, T>(p + 2 * gemm_pr, xv, a);
    micro_col<3, T>(p + 3 * gemm_pr, xv, a);
  }
  for (; k < kc; ++k) {
    const float* p = panel + gemm_pr * k;
    const float32x4_t w0 = vld1q_f32(p), w1 = vld1q_f32(p + 4), w2 = vld1q_f32(p + 8), w3 = vld1q_f32(p + 12);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const float32x4_t xt = vdupq_n_f32(x[static_cast<std::size_t>(t) * ldx + k]);
      a[0][t] = vfmaq_f32(a[0][t], w0, xt);
      a[1][t] = vfmaq_f32(a[1][t], w1, xt);
      a[2][t] = vfmaq_f32(a[2][t], w2, xt);
      a[3][t] = vfmaq_f32(a[3][t], w3, xt);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    float tmp[16];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) vst1q_f32(tmp + 4 * v, a[v][t]);
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    for (std::size_t i = 0; i < nr; ++i) yt[i] = first ? tmp[i] : yt[i] + tmp[i];
  }
}
#endif  // SLM_DEFINE_KERNELS

void micro_any(std::size_t T, const float* panel, std::size_t kc, const float* x, std::size_t ldx, float* y,
               std::size_t ldy, std::size_t nr, bool first) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void micro_any(std::size_t T, const float* panel, std::size_t kc, const float* x, std::size_t ldx, float* y,
                          std::size_t ldy, std::size_t nr, bool first) noexcept {
  switch (T) {
    case 1: return micro<1>(panel, kc, x, ldx, y, ldy, nr, first);
    case 2: return micro<2>(panel, kc, x, ldx, y, ldy, nr, first);
    case 3: return micro<3>(panel, kc, x, ldx, y, ldy, nr, first);
    default: return micro<4>(panel, kc, x, ldx, y, ldy, nr, first);
  }
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace neon

// Rows [r0, r1) of Y for n_tok tokens through 16-row panels. panel: 16 x gemm_kc floats,
// tmp: gemm_kc floats (gemm_neon provides more).
#if SLM_DEFINE_KERNELS
SLM_INLINE void gemm_rows_neon(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                               std::size_t ldy, std::size_t r0, std::size_t r1, float* panel, float* tmp) noexcept {
  constexpr std::size_t PR = neon::gemm_pr, TT = neon::gemm_tt;
  const std::size_t K = w.cols;
  for (std::size_t rb = r0; rb < r1; rb += PR) {
    const std::size_t nr = std::min(PR, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += gemm_kc) {
      const std::size_t kc = std::min(gemm_kc, K - k0);
      for (std::size_t i = 0; i < PR; ++i) {
        if (i < nr) neon::decode_row(w, rb + i, k0, kc, tmp);
        else std::memset(tmp, 0, kc * sizeof(float));
        for (std::size_t k = 0; k < kc; ++k) panel[k * PR + i] = tmp[k];
      }
      for (std::size_t t0 = 0; t0 < n_tok; t0 += TT)
        neon::micro_any(std::min(TT, n_tok - t0), panel, kc, x + t0 * ldx + k0, ldx, y + t0 * ldy + rb, ldy, nr,
                        k0 == 0);
    }
  }
}

SLM_INLINE void gemm_neon(const weight_matrix& w, const acts& a, std::size_t n_tok, float* y, std::size_t ldy,
                          std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  float* panel = reinterpret_cast<float*>(scratch);
  gemm_rows_neon(w, a.x, n_tok, a.ldx, y, ldy, r0, r1, panel, panel + 64 * gemm_kc);
}

// The NEON row for f32 activations: a fused GEMV for every format, the panel GEMM.
SLM_INLINE kernel_row neon_row(weight_format f) noexcept {
  kernel_row k;
  k.name = "neon";
  k.gemm = &gemm_neon;
  k.gemm_scratch = panel_scratch;
  switch (f) {
    case weight_format::nvfp4: set_gemv<neon::fp4_k<true>::k>(k); break;
    case weight_format::mxfp4: set_gemv<neon::fp4_k<false>::k>(k); break;
    case weight_format::bf16: set_gemv<neon::f_k<weight_format::bf16>::k>(k); break;
    case weight_format::f32: set_gemv<neon::f_k<weight_format::f32>::k>(k); break;
    case weight_format::f16: set_gemv<neon::f_k<weight_format::f16>::k>(k); break;
    case weight_format::fp8_e4m3: set_gemv<neon::fp8_k>(k); break;
  }
  return k;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm::detail::mm

#endif  // SLM_NEON
