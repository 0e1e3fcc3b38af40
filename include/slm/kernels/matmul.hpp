// slm/kernels/matmul.hpp - fused dequantize-and-multiply: Y = X W^T for every weight format.
//
//   status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
//                 float* y, std::size_t ldy, executor_ref ex, isa which = isa::best);
//
//   Y[t, n] = sum_k X[t, k] * W[n, k]   for t < n_tok, n < N, k < K
//
// X is f32 [n_tok, K] with row stride ldx (elements), Y is f32 [n_tok, N] with row stride
// ldy. Weights are dequantized on the fly (W4A16 semantics: never rounded to anything
// narrower than f32), products accumulate in f32. n_tok = 1 is GEMV (decode), larger
// n_tok is GEMM (prefill). Any pointer alignment works (checkpoint data is unaligned).
//
// Dequantized weight (formats/weights.hpp): W[n, k] = element(n, k) x (block_scale(n, k) x global),
// the factor computed once per block in that order (for NVFP4 exactly ModelOpt's
// e2m1 x (e4m3(scale) x weight_scale_2)).
//
// Kernels per format and instruction set (isa, core/cpu.hpp):
//
//   format     scalar      avx2 (AVX2+FMA+F16C)              avx512 (F+BW+VL+DQ)
//   f32        reference   GEMV fused, GEMM panel            GEMV fused, GEMM panel
//   bf16       reference   GEMV fused, GEMM panel            GEMV fused, GEMM panel
//   f16        reference   GEMV fused (F16C), GEMM panel     GEMV fused, GEMM panel
//   fp8_e4m3   reference   GEMV+GEMM via decoded panel       GEMV+GEMM via decoded panel
//   nvfp4      reference   GEMV fused (pshufb), GEMM panel   GEMV fused (vpermps), GEMM panel
//   mxfp4      reference   as nvfp4, one E8M0 scale/32       as nvfp4, one E8M0 scale/32
//
//   On AArch64 the families are scalar and neon (ARMv8.0-A Advanced SIMD, kernels/matmul_neon.hpp):
//   GEMV fused for every format (fp8 included: E4M3 rebuilt as f16 bits and widened by
//   FCVTL; fp4 looked up as bf16 byte pairs with TBL), GEMM panel (16 rows x 4 tokens).
//
//   reference  detail::mm::reference(): one row at a time, k = 0..K-1 in order, each
//              weight dequantized as above; obviously correct, slow. isa::scalar runs it.
//   GEMV fused decode codes in registers and multiply-accumulate against x in f32; the
//              block factor is applied once per block (acc += f_b * dot(elements_b, x_b)).
//              Four rows per iteration, the next rows software-prefetched into L2. AVX-512
//              nvfp4/mxfp4 take 128 columns per step: 64 code bytes as 16 words, one
//              vpermps E2M1 lookup per nibble position (no widening), one factor vector
//              per step; AVX-512 bf16 splits each word into even/odd columns. Both read x
//              through a per-call copy permuted to that lane order.
//   GEMM panel a thread decodes PR rows x KC columns of W (PR = 64 on AVX-512, 16 on
//              AVX2) into an f32 panel laid out k-major (dequantized exactly as the
//              reference does), then a register-tiled microkernel multiplies it with a
//              tile of up to 6 tokens: broadcast x[t, k], FMA into PR-wide row
//              vectors (4 x 6 accumulators on AVX-512, 2 x 6 on AVX2), so each weight
//              is decoded once per call whatever n_tok is.
//   fp8 has no fused GEMV: it runs the panel path with one token (decode is a table
//   lookup, scalar); the panel path is also what n_tok >= 3 uses for every format.
//
// Determinism: rows are split across threads with partition() in fixed units, and
// every output element is computed by exactly one thread with an operation sequence
// that depends only on (format, isa, n_tok path, K): results are bit-identical for any
// thread count (tested). Different isa values differ only in summation order.
//
// Reduced-precision activations, opt-in per call here (activation_precision below; the
// model layers default to bf16 for NVFP4/MXFP4 weights, see compute_context): W4A8 (int8 activations, AVX-512 VNNI, nvfp4 / mxfp4) in kernels/matmul_w4a8.hpp, bf16
// activations (AVX-512 BF16 vdpbf16ps, nvfp4 / mxfp4 / bf16) in kernels/matmul_bf16.hpp; both
// are included at the end of this file, as is kernels/matmul_neon.hpp on AArch64.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string_view>

#include "slm/core/cpu.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"
#include "slm/formats/weights.hpp"

#ifdef SLM_X86
#if SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER  // the kernels; hsum_512 for layers/attention.hpp
#include <immintrin.h>
#endif
#define SLM_MM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")))
#define SLM_MM_AVX2 __attribute__((target("avx2,fma,f16c")))
#endif

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

// Rows processed together by the fused GEMV kernels (partition unit).
inline constexpr std::size_t gemv_rows = 4;
// Column block of the GEMM panel.
inline constexpr std::size_t gemm_kc = 256;

#ifdef SLM_X86
// GCC 12's AVX-512 intrinsics pass an uninitialised "undefined" vector as the unused
// merge operand, and -Wuninitialized reports it once inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// ===================================================================================
// AVX-512

// x permuted for the fp4 / bf16 AVX-512 GEMV kernels.
//   fp4 (chunk128 = true): per 128-column chunk c, xp[128c + 16p + i] = x[128c + 8i + p]
//     (p = 0..7: the nibble position inside a 32-bit word of codes, i = the word), then
//     per remaining 32-column group the even/odd order below.
//   even/odd, per 32-column group: [x0, x2, ..., x30, x1, x3, ..., x31].
// Columns past the last whole group are not copied (kernels read them from x).
SLM_MM_AVX512 void permute_x_512(const float* x, std::size_t K, float* xp, bool chunk128) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX512 SLM_INLINE void permute_x_512(const float* x, std::size_t K, float* xp, bool chunk128) noexcept {
  std::size_t g = 0;
  if (chunk128) {
    for (; g + 128 <= K; g += 128)
      for (std::size_t q = 0; q < 8; ++q)
        for (std::size_t i = 0; i < 16; ++i) xp[g + 16 * q + i] = x[g + 8 * i + q];
  }
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  for (; g + 32 <= K; g += 32) {
    const __m512 a = _mm512_loadu_ps(x + g), b = _mm512_loadu_ps(x + g + 16);
    _mm512_storeu_ps(xp + g, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(xp + g + 16, _mm512_permutex2var_ps(a, io, b));
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER  // also used by layers/attention.hpp's kernels
// Horizontal sum in a fixed order. (Not _mm512_reduce_add_ps / plain _mm512_cvtph_ps:
// GCC 12 warns about their undefined pass-through operands, GCC bug 105593.)
SLM_MM_AVX512 inline float hsum_512(__m512 v) noexcept {
  const __m512i s8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i s4 = _mm512_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  const __m512i s2 = _mm512_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  const __m512i s1 = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  v = _mm512_add_ps(v, _mm512_permutexvar_ps(s8, v));
  v = _mm512_add_ps(v, _mm512_permutexvar_ps(s4, v));
  v = _mm512_add_ps(v, _mm512_permutexvar_ps(s2, v));
  v = _mm512_add_ps(v, _mm512_permutexvar_ps(s1, v));
  return _mm512_cvtss_f32(v);
}
#endif  // SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER

#if SLM_DEFINE_KERNELS  // kernel templates and helpers: only the kernels unit instantiates them
// [a x8, b x8]
SLM_MM_AVX512 inline __m512 halves_512(float a, float b) noexcept {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

// Block factors (scale x global) for 4 groups of 32 columns starting at group j: nvfp4
// 8 blocks (lanes 0..7), mxfp4 4 blocks (lanes 0..3). Normal E4M3 / E8M0 codes are
// decoded with integer arithmetic; a lane holding a subnormal, zero or NaN code sends
// the whole set through the exact table decode (rare in checkpoints). The values are
// the same f32 products as block_factor's.
template <bool NV>
SLM_MM_AVX512 inline __m256 factors4_512(const std::byte* sc, std::size_t j, float g) noexcept {
  if constexpr (NV) {
    std::uint64_t eight;
    std::memcpy(&eight, sc + 2 * j, 8);
    // Any byte with a subnormal/zero magnitude (bits 6..3 clear) or NaN (magnitude 0x7F)?
    // Checked in general-purpose registers (zero-byte test), off the vector ports.
    constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    const std::uint64_t mag = eight & 0x7F7F7F7F7F7F7F7Full;
    const std::uint64_t e = mag & 0x7878787878787878ull, n = mag ^ 0x7F7F7F7F7F7F7F7Full;
    const bool odd = (((e - ones) & ~e & highs) | ((n - ones) & ~n & highs)) != 0;
    if (!odd && (eight & highs) == 0) {  // all positive (as checkpoints have): no sign bits
      const __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(eight)));
      const __m256i bits = _mm256_add_epi32(_mm256_slli_epi32(c, 20), _mm256_set1_epi32(120 << 23));
      return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(g));
    }
    if (!odd) {
      const __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(eight)));
      const __m256i bits = _mm256_or_si256(
          _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7F)), 20), _mm256_set1_epi32(120 << 23)),
          _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24));
      return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(g));
    }
    alignas(32) float f[8];
    for (std::size_t i = 0; i < 8; ++i) f[i] = e4m3_to_f32(ld_u8(sc + 2 * j + i)) * g;
    return _mm256_load_ps(f);
  } else {
    std::uint32_t four;
    std::memcpy(&four, sc + j, 4);
    const std::uint32_t inv = ~four;  // 0x00 (2^-127, an f32 denormal) or 0xFF (NaN)?
    const bool odd = (((four - 0x01010101u) & ~four & 0x80808080u) | ((inv - 0x01010101u) & ~inv & 0x80808080u)) != 0;
    if (!odd) {
      const __m256i c = _mm256_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(four)));  // lanes 4..7 are 0
      return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(c, 23)), _mm256_set1_ps(g));
    }
    alignas(32) float f[8] = {};
    for (std::size_t i = 0; i < 4; ++i) f[i] = e8m0_to_f32(ld_u8(sc + j + i)) * g;
    return _mm256_load_ps(f);
  }
}

// nvfp4 / mxfp4 fused GEMV over R rows starting at row r. xp: permuted x (whole groups).
// Per group of 32 columns and row: one widening load, one shift, two vpermps (E2M1 table
// lookups, even and odd columns), mul + fma against x, one fma with the block factors.
template <int R, bool NV>
SLM_MM_AVX512 void gemv_fp4_512(const weight_matrix& w, std::size_t r, const float* x, const float* xp,
                                float* y) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const __m512 tbl = _mm512_loadu_ps(e2m1_table.data());
  const std::byte* codes[R];
  const std::byte* sc[R];
  __m512 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    sc[i] = w.scales + (r + static_cast<std::size_t>(i)) * w.scale_stride;
    acc[i] = _mm512_setzero_ps();
  }
  const float g = w.global;
  // 128-column chunks: 64 code bytes = 16 words of 8 nibbles; nibble position q of every
  // word is one vector (lane i = column 8i + q), looked up straight from the word (vpermps
  // reads the low 4 bits of each lane), no widening. Lanes 2b, 2b+1 (nvfp4) or 4b..4b+3
  // (mxfp4) belong to block b in every such vector, so one factor vector serves all 8.
  const __m512i spread = NV ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                            : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  // Nibble positions 2o (o = 0..3) of every word come from a load at byte offset o (the
  // low nibble of byte 4i + o is in the low bits of lane i), positions 2o + 1 from that
  // load shifted right by 4: four loads and four shifts instead of one load and seven
  // shifts (loads use the load ports, shifts compete with vpermps). The offset loads read
  // up to 3 bytes past the chunk (ignored lanes' bytes); when the chunk ends the row's
  // codes, masked loads (fault-suppressing; slower, once per row) stop at its end.
  constexpr __mmask64 m61 = (__mmask64{1} << 61) - 1;
  std::size_t j = 0;
  for (; j + 4 <= groups; j += 4) {
    const float* xc = xp + 32 * j;
    const bool edge = j + 4 == groups && 32 * groups == K;
    __m512 xq[8];
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) xq[q] = _mm512_loadu_ps(xc + 16 * q);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const std::byte* cp = codes[i] + 16 * j;
      const __m512i v0 = _mm512_loadu_si512(cp);
      __m512i v1, v2, v3;
      if (!edge) {
        v1 = _mm512_loadu_si512(cp + 1);
        v2 = _mm512_loadu_si512(cp + 2);
        v3 = _mm512_loadu_si512(cp + 3);
      } else {  // the row's last bytes: bytes past them may not be mapped
        v1 = _mm512_maskz_loadu_epi8(m61, cp + 1);
        v2 = _mm512_maskz_loadu_epi8(m61, cp + 2);
        v3 = _mm512_maskz_loadu_epi8(m61, cp + 3);
      }
      // The same line of the row R rows on (the next iteration's): short rows give the
      // hardware prefetcher little time to lock on. Prefetches never fault.
      _mm_prefetch(reinterpret_cast<const char*>(cp + R * w.row_stride), _MM_HINT_T1);  // into L2, as bf16 below
      if ((j & 15) == 0) _mm_prefetch(reinterpret_cast<const char*>(sc[i] + (NV ? 2 : 1) * j + R * w.scale_stride), _MM_HINT_T1);
      __m512 s0 = _mm512_mul_ps(_mm512_permutexvar_ps(v0, tbl), xq[0]);
      __m512 s1 = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v0, 4), tbl), xq[1]);
      s0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(v1, tbl), xq[2], s0);
      s1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v1, 4), tbl), xq[3], s1);
      s0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(v2, tbl), xq[4], s0);
      s1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v2, 4), tbl), xq[5], s1);
      s0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(v3, tbl), xq[6], s0);
      s1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(v3, 4), tbl), xq[7], s1);
      const __m512 f = _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(factors4_512<NV>(sc[i], j, g)));
      acc[i] = _mm512_fmadd_ps(_mm512_add_ps(s0, s1), f, acc[i]);
    }
  }
  for (; j < groups; ++j) {
    const __m512 xe = _mm512_loadu_ps(xp + 32 * j), xo = _mm512_loadu_ps(xp + 32 * j + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes[i] + 16 * j)));
      const __m512 e = _mm512_permutexvar_ps(b, tbl);
      const __m512 o = _mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tbl);
      __m512 p = _mm512_mul_ps(e, xe);
      p = _mm512_fmadd_ps(o, xo, p);
      const std::size_t row = r + static_cast<std::size_t>(i);
      const __m512 s = NV ? halves_512(block_factor(w, row, 32 * j), block_factor(w, row, 32 * j + 16))
                          : _mm512_set1_ps(block_factor(w, row, 32 * j));
      acc[i] = _mm512_fmadd_ps(p, s, acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = hsum_512(acc[i]);
    if (groups * 32 < K) {  // one trailing 16-element nvfp4 block
      const std::size_t k = groups * 32;
      sum += fp4_dot_scalar(codes[i] + k / 2, x + k, 16) * block_factor(w, r + static_cast<std::size_t>(i), k);
    }
    y[i] = sum;
  }
}

// bf16 fused GEMV: even columns are the low halves of each 32-bit lane, odd the high.
template <int R>
SLM_MM_AVX512 void gemv_bf16_512(const weight_matrix& w, std::size_t r, const float* x, const float* xp,
                                 float* y) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const std::byte* row[R];
  __m512 acc[R], acc2[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    row[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    acc[i] = _mm512_setzero_ps();
    acc2[i] = _mm512_setzero_ps();
  }
  for (std::size_t j = 0; j < groups; ++j) {
    const __m512 xe = _mm512_loadu_ps(xp + 32 * j), xo = _mm512_loadu_ps(xp + 32 * j + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const __m512i v = _mm512_loadu_si512(row[i] + 64 * j);
      // Into L2 (T1), not L1: paired runs at K = 4096 measured 0.87-0.91 of the read probe
      // with T0 and 0.93-1.05 with T1 (L1 miss slots are the scarcer resource).
      _mm_prefetch(reinterpret_cast<const char*>(row[i] + 64 * j + R * w.row_stride), _MM_HINT_T1);
      acc[i] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), xe, acc[i]);
      acc2[i] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, hi_mask)), xo, acc2[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = hsum_512(_mm512_add_ps(acc[i], acc2[i]));
    for (std::size_t k = groups * 32; k < K; ++k) sum += x[k] * bf16_to_f32(ld_u16(row[i] + 2 * k));
    y[i] = w.global == 1.0f ? sum : sum * w.global;
  }
}

// f32 / f16 fused GEMV, natural order, 32 columns per step.
template <int R, bool F16>
SLM_MM_AVX512 void gemv_f_512(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const std::byte* row[R];
  __m512 acc[R], acc2[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    row[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    acc[i] = _mm512_setzero_ps();
    acc2[i] = _mm512_setzero_ps();
  }
  for (std::size_t j = 0; j < groups; ++j) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * j), x1 = _mm512_loadu_ps(x + 32 * j + 16);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m512 w0, w1;
      if constexpr (F16) {
        w0 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i] + 64 * j)));
        w1 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i] + 64 * j + 32)));
      } else {
        w0 = _mm512_loadu_ps(row[i] + 128 * j);
        w1 = _mm512_loadu_ps(row[i] + 128 * j + 64);
      }
      acc[i] = _mm512_fmadd_ps(w0, x0, acc[i]);
      acc2[i] = _mm512_fmadd_ps(w1, x1, acc2[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = hsum_512(_mm512_add_ps(acc[i], acc2[i]));
    for (std::size_t k = groups * 32; k < K; ++k) sum += x[k] * element(w.format, row[i], k);
    y[i] = w.global == 1.0f ? sum : sum * w.global;
  }
}
#endif  // SLM_DEFINE_KERNELS

// Dequantizes columns [k0, k0 + n) of row r into out (natural order), values identical
// to decode_scalar (same element x factor products).
SLM_MM_AVX512 void decode_row_512(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n,
                                  float* out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX512 SLM_INLINE void decode_row_512(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n,
                                             float* out) noexcept {
  const std::byte* row = w.data + r * w.row_stride;
  std::size_t k = k0;
  const std::size_t end = k0 + n;
  const __m512 g = _mm512_set1_ps(w.global);
  switch (w.format) {
    case weight_format::f32:
      for (; k + 16 <= end; k += 16) _mm512_storeu_ps(out + (k - k0), _mm512_mul_ps(_mm512_loadu_ps(row + 4 * k), g));
      break;
    case weight_format::bf16:
      for (; k + 16 <= end; k += 16) {
        const __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
        _mm512_storeu_ps(out + (k - k0), _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), g));
      }
      break;
    case weight_format::f16:
      for (; k + 16 <= end; k += 16) {
        const __m512 v = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
        _mm512_storeu_ps(out + (k - k0), _mm512_mul_ps(v, g));
      }
      break;
    case weight_format::nvfp4:
    case weight_format::mxfp4: {
      // k0 is a multiple of 32 (gemm_kc is), so groups of 32 align with blocks.
      const __m512 tbl = _mm512_loadu_ps(e2m1_table.data());
      const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
      const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
      const bool nv = w.format == weight_format::nvfp4;
      for (; k + 32 <= end; k += 32) {
        const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2)));
        const __m512 s = nv ? halves_512(block_factor(w, r, k), block_factor(w, r, k + 16))
                            : _mm512_set1_ps(block_factor(w, r, k));
        const __m512 e = _mm512_mul_ps(_mm512_permutexvar_ps(b, tbl), s);
        const __m512 o = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tbl), s);
        _mm512_storeu_ps(out + (k - k0), _mm512_permutex2var_ps(e, ilo, o));
        _mm512_storeu_ps(out + (k - k0) + 16, _mm512_permutex2var_ps(e, ihi, o));
      }
      break;
    }
    default: break;
  }
  if (k < end) decode_scalar(w, r, k, end - k, out + (k - k0));
}
#endif  // SLM_DEFINE_KERNELS

// Microkernel: T tokens x 64 rows over kc columns of a k-major panel (64 floats per k).
// y points at Y[t0, r0]; nr <= 64 rows are written; first: store, else add. 4 row
// vectors x 6 tokens: one broadcast per 4 FMAs (2 x 12 left the FMA pipes idle a third
// of the time: the broadcasts compete with the FMAs for the vector pipes).
inline constexpr std::size_t gemm_pr = 64, gemm_tt = 6;
#if SLM_DEFINE_KERNELS
template <int T>
SLM_MM_AVX512 void micro_512(const float* panel, std::size_t kc, const float* x, std::size_t ldx, float* y,
                             std::size_t ldy, std::size_t nr, bool first) noexcept {
  constexpr int V = 4;
  __mmask16 m[V];
  for (int v = 0; v < V; ++v) {
    const std::size_t lo = 16 * static_cast<std::size_t>(v);
    m[v] = static_cast<__mmask16>(nr >= lo + 16 ? 0xFFFFu : nr <= lo ? 0u : ((1u << (nr - lo)) - 1u));
  }
  __m512 a[V][T];
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) a[v][t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[v], yt + 16 * v);
  }
  for (std::size_t k = 0; k < kc; ++k) {
    __m512 wv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) wv[v] = _mm512_load_ps(panel + gemm_pr * k + 16 * static_cast<std::size_t>(v));
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m512 xb = _mm512_set1_ps(x[static_cast<std::size_t>(t) * ldx + k]);
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[v][t] = _mm512_fmadd_ps(xb, wv[v], a[v][t]);
    }
  }
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(yt + 16 * v, m[v], a[v][t]);
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_MM_AVX512 void micro_512_any(std::size_t T, const float* panel, std::size_t kc, const float* x,
                                 std::size_t ldx, float* y, std::size_t ldy, std::size_t nr, bool first) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX512 SLM_INLINE void micro_512_any(std::size_t T, const float* panel, std::size_t kc, const float* x,
                                            std::size_t ldx, float* y, std::size_t ldy, std::size_t nr, bool first) noexcept {
  switch (T) {
    case 1: return micro_512<1>(panel, kc, x, ldx, y, ldy, nr, first);
    case 2: return micro_512<2>(panel, kc, x, ldx, y, ldy, nr, first);
    case 3: return micro_512<3>(panel, kc, x, ldx, y, ldy, nr, first);
    case 4: return micro_512<4>(panel, kc, x, ldx, y, ldy, nr, first);
    case 5: return micro_512<5>(panel, kc, x, ldx, y, ldy, nr, first);
    default: return micro_512<6>(panel, kc, x, ldx, y, ldy, nr, first);
  }
}
#endif  // SLM_DEFINE_KERNELS

// Panel fill: each row decoded into `tmp`, then scattered k-major (scalar stores).
SLM_MM_AVX512 void gemm_rows_512(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                                 float* y, std::size_t ldy, std::size_t r0, std::size_t r1,
                                 float* panel, float* tmp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX512 SLM_INLINE void gemm_rows_512(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                                            float* y, std::size_t ldy, std::size_t r0, std::size_t r1,
                                            float* panel, float* tmp) noexcept {
  constexpr std::size_t PR = gemm_pr, TT = gemm_tt;
  const std::size_t K = w.cols;
  for (std::size_t rb = r0; rb < r1; rb += PR) {
    const std::size_t nr = std::min(PR, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += gemm_kc) {
      const std::size_t kc = std::min(gemm_kc, K - k0);
      for (std::size_t i = 0; i < PR; ++i) {
        if (i < nr) decode_row_512(w, rb + i, k0, kc, tmp);
        else std::memset(tmp, 0, kc * sizeof(float));
        for (std::size_t k = 0; k < kc; ++k) panel[k * PR + i] = tmp[k];
      }
      for (std::size_t t0 = 0; t0 < n_tok; t0 += TT)
        micro_512_any(std::min(TT, n_tok - t0), panel, kc, x + t0 * ldx + k0, ldx, y + t0 * ldy + rb, ldy, nr,
                      k0 == 0);
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

// ===================================================================================
// AVX2

#if SLM_DEFINE_KERNELS  // kernel templates and helpers: only the kernels unit instantiates them
SLM_MM_AVX2 inline float hsum_256(__m256 v) noexcept {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// 16 codes bytes (32 elements) -> doubled E2M1 int8 in natural order: lo = elements
// 0..15, hi = 16..31.
SLM_MM_AVX2 inline void fp4_doubled_256(const std::byte* p, __m128i& lo, __m128i& hi) noexcept {
  const __m128i tbl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e2m1_doubled_table.data()));
  const __m128i m = _mm_set1_epi8(0x0F);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i l = _mm_and_si128(b, m), h = _mm_and_si128(_mm_srli_epi16(b, 4), m);
  lo = _mm_shuffle_epi8(tbl, _mm_unpacklo_epi8(l, h));
  hi = _mm_shuffle_epi8(tbl, _mm_unpackhi_epi8(l, h));
}

SLM_MM_AVX2 inline __m256 i8lo_ps(__m128i v) noexcept { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }
SLM_MM_AVX2 inline __m256 i8hi_ps(__m128i v) noexcept {
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(v, v)));
}

template <int R, bool NV>
SLM_MM_AVX2 void gemv_fp4_256(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const float* e4m3 = e4m3_table.data();
  const std::byte* codes[R];
  const std::byte* sc[R];
  __m256 acc[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    codes[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    sc[i] = w.scales + (r + static_cast<std::size_t>(i)) * w.scale_stride;
    acc[i] = _mm256_setzero_ps();
  }
  const float gh = w.global * 0.5f;  // the table is doubled
  for (std::size_t j = 0; j < groups; ++j) {
    const float* xj = x + 32 * j;
    const __m256 x0 = _mm256_loadu_ps(xj), x1 = _mm256_loadu_ps(xj + 8), x2 = _mm256_loadu_ps(xj + 16),
                 x3 = _mm256_loadu_ps(xj + 24);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m128i lo, hi;
      fp4_doubled_256(codes[i] + 16 * j, lo, hi);
      __m256 p0 = _mm256_mul_ps(i8lo_ps(lo), x0);
      p0 = _mm256_fmadd_ps(i8hi_ps(lo), x1, p0);
      __m256 p1 = _mm256_mul_ps(i8lo_ps(hi), x2);
      p1 = _mm256_fmadd_ps(i8hi_ps(hi), x3, p1);
      if constexpr (NV) {
        acc[i] = _mm256_fmadd_ps(p0, _mm256_set1_ps(e4m3[ld_u8(sc[i] + 2 * j)] * gh), acc[i]);
        acc[i] = _mm256_fmadd_ps(p1, _mm256_set1_ps(e4m3[ld_u8(sc[i] + 2 * j + 1)] * gh), acc[i]);
      } else {
        acc[i] = _mm256_fmadd_ps(_mm256_add_ps(p0, p1), _mm256_set1_ps(e8m0_to_f32(ld_u8(sc[i] + j)) * gh), acc[i]);
      }
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = hsum_256(acc[i]);
    if (groups * 32 < K) {
      const std::size_t k = groups * 32;
      sum += fp4_dot_scalar(codes[i] + k / 2, x + k, 16) * block_factor(w, r + static_cast<std::size_t>(i), k);
    }
    y[i] = sum;
  }
}

// f32 / bf16 / f16 fused GEMV, natural order, 16 columns per step.
template <int R, weight_format F>
SLM_MM_AVX2 void gemv_f_256(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y) noexcept {
  const std::size_t K = w.cols, groups = K / 16;
  const std::byte* row[R];
  __m256 acc[R], acc2[R];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    row[i] = w.data + (r + static_cast<std::size_t>(i)) * w.row_stride;
    acc[i] = _mm256_setzero_ps();
    acc2[i] = _mm256_setzero_ps();
  }
  for (std::size_t j = 0; j < groups; ++j) {
    const __m256 x0 = _mm256_loadu_ps(x + 16 * j), x1 = _mm256_loadu_ps(x + 16 * j + 8);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      __m256 w0, w1;
      if constexpr (F == weight_format::f32) {
        w0 = _mm256_loadu_ps(reinterpret_cast<const float*>(row[i] + 64 * j));
        w1 = _mm256_loadu_ps(reinterpret_cast<const float*>(row[i] + 64 * j + 32));
      } else if constexpr (F == weight_format::f16) {
        w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[i] + 32 * j)));
        w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row[i] + 32 * j + 16)));
      } else {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row[i] + 32 * j));
        w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
        w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
      }
      acc[i] = _mm256_fmadd_ps(w0, x0, acc[i]);
      acc2[i] = _mm256_fmadd_ps(w1, x1, acc2[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i) {
    float sum = hsum_256(_mm256_add_ps(acc[i], acc2[i]));
    for (std::size_t k = groups * 16; k < K; ++k) sum += x[k] * element(w.format, row[i], k);
    y[i] = w.global == 1.0f ? sum : sum * w.global;
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_MM_AVX2 void decode_row_256(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n,
                                float* out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX2 SLM_INLINE void decode_row_256(const weight_matrix& w, std::size_t r, std::size_t k0, std::size_t n,
                                           float* out) noexcept {
  const std::byte* row = w.data + r * w.row_stride;
  std::size_t k = k0;
  const std::size_t end = k0 + n;
  const __m256 g = _mm256_set1_ps(w.global);
  switch (w.format) {
    case weight_format::f32:
      for (; k + 8 <= end; k += 8)
        _mm256_storeu_ps(out + (k - k0), _mm256_mul_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(row + 4 * k)), g));
      break;
    case weight_format::bf16:
      for (; k + 8 <= end; k += 8) {
        const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
        _mm256_storeu_ps(out + (k - k0), _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), g));
      }
      break;
    case weight_format::f16:
      for (; k + 8 <= end; k += 8)
        _mm256_storeu_ps(out + (k - k0),
                         _mm256_mul_ps(_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k))), g));
      break;
    case weight_format::nvfp4:
    case weight_format::mxfp4: {
      const bool nv = w.format == weight_format::nvfp4;
      const __m256 tbl = _mm256_loadu_ps(e2m1_table.data());      // +0 .. +6
      const __m256 ntbl = _mm256_loadu_ps(e2m1_table.data() + 8); // -0 .. -6
      for (; k + 32 <= end; k += 32) {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + k / 2));
        const __m128i m = _mm_set1_epi8(0x0F);
        const __m128i l = _mm_and_si128(b, m), h = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        const __m128i n0 = _mm_unpacklo_epi8(l, h), n1 = _mm_unpackhi_epi8(l, h);
        const float f0 = block_factor(w, r, k), f1 = nv ? block_factor(w, r, k + 16) : f0;
        const __m128i parts[4] = {n0, _mm_unpackhi_epi64(n0, n0), n1, _mm_unpackhi_epi64(n1, n1)};
        for (int q = 0; q < 4; ++q) {
          const __m256i idx = _mm256_cvtepu8_epi32(parts[q]);
          // Float table lookup (exact values, so products equal the reference's).
          const __m256 pos = _mm256_permutevar8x32_ps(tbl, idx), neg = _mm256_permutevar8x32_ps(ntbl, idx);
          const __m256 v = _mm256_blendv_ps(pos, neg, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
          _mm256_storeu_ps(out + (k - k0) + 8 * static_cast<std::size_t>(q), _mm256_mul_ps(v, _mm256_set1_ps(q < 2 ? f0 : f1)));
        }
      }
      break;
    }
    default: break;
  }
  if (k < end) decode_scalar(w, r, k, end - k, out + (k - k0));
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
template <int T>
SLM_MM_AVX2 void micro_256(const float* panel, std::size_t kc, const float* x, std::size_t ldx, float* y,
                           std::size_t ldy, std::size_t nr, bool first) noexcept {
  __m256 a0[T], a1[T];
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t) {
    a0[t] = _mm256_setzero_ps();
    a1[t] = _mm256_setzero_ps();
  }
  for (std::size_t k = 0; k < kc; ++k) {
    const __m256 w0 = _mm256_load_ps(panel + 16 * k), w1 = _mm256_load_ps(panel + 16 * k + 8);
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      const __m256 xb = _mm256_broadcast_ss(x + static_cast<std::size_t>(t) * ldx + k);
      a0[t] = _mm256_fmadd_ps(xb, w0, a0[t]);
      a1[t] = _mm256_fmadd_ps(xb, w1, a1[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, a0[t]);
    _mm256_store_ps(tmp + 8, a1[t]);
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    for (std::size_t i = 0; i < nr; ++i) yt[i] = first ? tmp[i] : yt[i] + tmp[i];
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_MM_AVX2 void micro_256_any(std::size_t T, const float* panel, std::size_t kc, const float* x,
                               std::size_t ldx, float* y, std::size_t ldy, std::size_t nr, bool first) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX2 SLM_INLINE void micro_256_any(std::size_t T, const float* panel, std::size_t kc, const float* x,
                                          std::size_t ldx, float* y, std::size_t ldy, std::size_t nr, bool first) noexcept {
  switch (T) {
    case 1: return micro_256<1>(panel, kc, x, ldx, y, ldy, nr, first);
    case 2: return micro_256<2>(panel, kc, x, ldx, y, ldy, nr, first);
    case 3: return micro_256<3>(panel, kc, x, ldx, y, ldy, nr, first);
    case 4: return micro_256<4>(panel, kc, x, ldx, y, ldy, nr, first);
    case 5: return micro_256<5>(panel, kc, x, ldx, y, ldy, nr, first);
    default: return micro_256<6>(panel, kc, x, ldx, y, ldy, nr, first);
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_MM_AVX2 void gemm_rows_256(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                               float* y, std::size_t ldy, std::size_t r0, std::size_t r1, float* panel,
                               float* tmp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_MM_AVX2 SLM_INLINE void gemm_rows_256(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                                          float* y, std::size_t ldy, std::size_t r0, std::size_t r1, float* panel,
                                          float* tmp) noexcept {
  constexpr std::size_t PR = 16, TT = 6;
  const std::size_t K = w.cols;
  for (std::size_t rb = r0; rb < r1; rb += PR) {
    const std::size_t nr = std::min(PR, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += gemm_kc) {
      const std::size_t kc = std::min(gemm_kc, K - k0);
      for (std::size_t i = 0; i < PR; ++i) {
        if (i < nr) decode_row_256(w, rb + i, k0, kc, tmp);
        else std::memset(tmp, 0, kc * sizeof(float));
        for (std::size_t k = 0; k < kc; ++k) panel[k * PR + i] = tmp[k];
      }
      for (std::size_t t0 = 0; t0 < n_tok; t0 += TT)
        micro_256_any(std::min(TT, n_tok - t0), panel, kc, x + t0 * ldx + k0, ldx, y + t0 * ldy + rb, ldy, nr,
                      k0 == 0);
    }
  }
}
#endif  // SLM_DEFINE_KERNELS
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // SLM_X86

// ---------------------------------------------------------------------------------
// Dispatch helpers.

using gemv_fn = void (*)(const weight_matrix&, std::size_t, const float*, const float*, float*);

struct gemv_kernels {
  gemv_fn by_rows[gemv_rows + 1] = {};  // [R] processes R rows (1..4); null: none
  bool permuted_x = false;              // reads x permuted even/odd per 32 columns
};

#if SLM_DEFINE_KERNELS  // used by find_gemv (and find_gemv_neon) only
template <template <int> class K>
constexpr gemv_kernels make_gemv(bool permuted) {
  gemv_kernels g;
  g.by_rows[1] = &K<1>::run;
  g.by_rows[2] = &K<2>::run;
  g.by_rows[3] = &K<3>::run;
  g.by_rows[4] = &K<4>::run;
  g.permuted_x = permuted;
  return g;
}

#ifdef SLM_X86
template <bool NV> struct fp4_512 { template <int R> struct k { static void run(const weight_matrix& w, std::size_t r, const float* x, const float* xp, float* y) noexcept { gemv_fp4_512<R, NV>(w, r, x, xp, y); } }; };
template <int R> struct bf16_512 { static void run(const weight_matrix& w, std::size_t r, const float* x, const float* xp, float* y) noexcept { gemv_bf16_512<R>(w, r, x, xp, y); } };
template <bool F16> struct f_512 { template <int R> struct k { static void run(const weight_matrix& w, std::size_t r, const float* x, const float* xp, float* y) noexcept { gemv_f_512<R, F16>(w, r, x, xp, y); } }; };
template <bool NV> struct fp4_256 { template <int R> struct k { static void run(const weight_matrix& w, std::size_t r, const float* x, const float* xp, float* y) noexcept { gemv_fp4_256<R, NV>(w, r, x, xp, y); } }; };
template <weight_format F> struct f_256 { template <int R> struct k { static void run(const weight_matrix& w, std::size_t r, const float* x, const float* xp, float* y) noexcept { gemv_f_256<R, F>(w, r, x, xp, y); } }; };
#endif
#endif  // SLM_DEFINE_KERNELS

#ifdef SLM_NEON
// Defined in kernels/matmul_neon.hpp (included at the end of this file).
SLM_INLINE gemv_kernels find_gemv_neon(weight_format f) noexcept;
SLM_INLINE void gemm_rows_neon(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                               std::size_t ldy, std::size_t r0, std::size_t r1, float* panel, float* tmp) noexcept;
#endif

// The fused GEMV kernels for (format, isa); all null when there are none.
gemv_kernels find_gemv(weight_format f, isa which) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE gemv_kernels find_gemv(weight_format f, isa which) noexcept {
#ifdef SLM_NEON
  if (which == isa::neon) return find_gemv_neon(f);
#endif
#ifdef SLM_X86
  if (which == isa::avx512) {
    switch (f) {
      case weight_format::nvfp4: return make_gemv<fp4_512<true>::k>(true);
      case weight_format::mxfp4: return make_gemv<fp4_512<false>::k>(true);
      case weight_format::bf16: return make_gemv<bf16_512>(true);
      case weight_format::f32: return make_gemv<f_512<false>::k>(false);
      case weight_format::f16: return make_gemv<f_512<true>::k>(false);
      default: return {};
    }
  }
  if (which == isa::avx2) {
    switch (f) {
      case weight_format::nvfp4: return make_gemv<fp4_256<true>::k>(false);
      case weight_format::mxfp4: return make_gemv<fp4_256<false>::k>(false);
      case weight_format::bf16: return make_gemv<f_256<weight_format::bf16>::k>(false);
      case weight_format::f32: return make_gemv<f_256<weight_format::f32>::k>(false);
      case weight_format::f16: return make_gemv<f_256<weight_format::f16>::k>(false);
      default: return {};
    }
  }
#elif !defined(SLM_NEON)
  (void)f;
  (void)which;
#endif
  return {};
}
#endif  // SLM_DEFINE_KERNELS

status validate(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, const float* y,
                std::size_t ldy);
#if SLM_DEFINE_KERNELS
SLM_INLINE status validate(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, const float* y,
                           std::size_t ldy) {
  const std::size_t N = w.rows, K = w.cols;
  const std::string_view fmt = to_string(w.format);
  switch (w.format) {
    case weight_format::f32: case weight_format::bf16: case weight_format::f16: case weight_format::fp8_e4m3:
    case weight_format::nvfp4: case weight_format::mxfp4: break;
    default: return make_error(errc::invalid_argument, "matmul: unknown weight format ", static_cast<int>(w.format));
  }
  const std::size_t bs = block_size(w.format);
  if (K % bs != 0)
    return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "]: K must be a multiple of ", bs);
  if (n_tok == 0 || N == 0) return ok_status();
  if (!y) return make_error(errc::invalid_argument, "matmul: y is null");
  if (ldy < N) return make_error(errc::invalid_argument, "matmul: ldy ", ldy, " is less than N ", N);
  if (K == 0) return ok_status();
  if (!x) return make_error(errc::invalid_argument, "matmul: x is null");
  if (ldx < K) return make_error(errc::invalid_argument, "matmul: ldx ", ldx, " is less than K ", K);
  if (!w.data) return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "] has no data");
  if (N > 1 && w.row_stride < row_bytes(w.format, K))
    return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "]: row_stride ", w.row_stride,
                      " is less than a row's ", row_bytes(w.format, K), " bytes");
  if (w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4) {
    if (!w.scales) return make_error(errc::invalid_argument, "matmul: ", fmt, " weight has no block scales");
    if (N > 1 && w.scale_stride < K / bs)
      return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "]: scale_stride ",
                        w.scale_stride, " is less than ", K / bs, " scales per row");
  }
  if (w.format == weight_format::fp8_e4m3 && w.scale_block_cols != 0) {
    if (!w.scales) return make_error(errc::invalid_argument, "matmul: fp8 weight with block scales has no scales");
    if (w.scale_block_rows == 0) return make_error(errc::invalid_argument, "matmul: fp8 scale_block_rows is 0");
    const std::size_t sc = (K + w.scale_block_cols - 1) / w.scale_block_cols;
    const std::size_t sr = (N + w.scale_block_rows - 1) / w.scale_block_rows;
    if (sr > 1 && w.scale_stride < 4 * sc)
      return make_error(errc::invalid_argument, "matmul: fp8 weight [", N, ", ", K, "]: scale_stride ", w.scale_stride,
                        " is less than ", sc, " f32 scales per row");
  }
  return ok_status();
}
#endif  // SLM_DEFINE_KERNELS

// Units of rows handed to threads: fixed, so which thread computes a row never changes
// what is computed.
inline constexpr std::size_t row_unit = 32;

}  // namespace detail::mm

// Y[t, n] = sum_k X[t, k] * W[n, k]; see the file comment. Returns invalid_argument for
// bad shapes or pointers, unsupported when `which` names an isa this CPU lacks,
// out_of_memory when scratch cannot be allocated. y is untouched on error.
status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
              std::size_t ldy, executor_ref ex, isa which = isa::best);
#if SLM_DEFINE_KERNELS
SLM_INLINE status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                         std::size_t ldy, executor_ref ex, isa which) {
  namespace mm = detail::mm;
  SLM_TRY(mm::validate(w, x, n_tok, ldx, y, ldy));
  const isa chosen = resolve_isa(which);
  if (!isa_supported(chosen, host_cpu()))
    return make_error(errc::unsupported, "matmul: instruction set ", to_string(chosen), " is not available on this CPU");
  const std::size_t N = w.rows, K = w.cols;
  if (n_tok == 0 || N == 0) return ok_status();
  if (K == 0) {
    for (std::size_t t = 0; t < n_tok; ++t)
      for (std::size_t n = 0; n < N; ++n) y[t * ldy + n] = 0.0f;
    return ok_status();
  }
  const std::size_t units = (N + mm::row_unit - 1) / mm::row_unit;
  const static_partition part = partition(0, units, ex.concurrency());
  auto rows_of = [&](std::size_t c) {
    const index_range u = part.chunk(c);
    return index_range{u.begin * mm::row_unit, std::min(N, u.end * mm::row_unit)};
  };

  if (chosen == isa::scalar) {
    return parallel_for_chunks(ex, part.count, [&](std::size_t c) {
      const index_range r = rows_of(c);
      mm::reference(w, x, n_tok, ldx, y, ldy, r.begin, r.end);
    });
  }

  // Fused GEMV for one or two tokens where the format has one. Short tasks (little
  // work each, no scratch): cut finer, see balanced_chunks.
  const mm::gemv_kernels gk = mm::find_gemv(w.format, chosen);
  if (n_tok <= 2 && gk.by_rows[1]) {
    const static_partition gpart = partition(0, units, balanced_chunks(ex));
    aligned_buffer xp;
    if (gk.permuted_x) {
      auto b = aligned_buffer::allocate(K * sizeof(float));
      if (!b.ok()) return std::move(b).take_error().with_context("matmul");
      xp = std::move(*b);
    }
    for (std::size_t t = 0; t < n_tok; ++t) {
      const float* xt = x + t * ldx;
      float* xpp = reinterpret_cast<float*>(xp.data());
#ifdef SLM_X86
      if (gk.permuted_x) mm::permute_x_512(xt, K, xpp, w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4);
#endif
      SLM_TRY(parallel_for_chunks(ex, gpart.count, [&](std::size_t c) {
        const index_range u = gpart.chunk(c);
        const index_range r{u.begin * mm::row_unit, std::min(N, u.end * mm::row_unit)};
        std::size_t n = r.begin;
        for (; n + mm::gemv_rows <= r.end; n += mm::gemv_rows) gk.by_rows[mm::gemv_rows](w, n, xt, xpp, y + t * ldy + n);
        if (n < r.end) gk.by_rows[r.end - n](w, n, xt, xpp, y + t * ldy + n);
      }));
    }
    return ok_status();
  }

#if defined(SLM_X86) || defined(SLM_NEON)
  // Panel GEMM: scratch per chunk = panel (64 x KC, AVX-512; 16 x KC, AVX2 and NEON) +
  // one decoded row (KC).
  const std::size_t per_chunk = 64 * mm::gemm_kc + mm::gemm_kc;
  auto scratch = aligned_buffer::allocate(part.count * per_chunk * sizeof(float));
  if (!scratch.ok()) return std::move(scratch).take_error().with_context("matmul");
  float* base = reinterpret_cast<float*>(scratch->data());
  return parallel_for_chunks(ex, part.count, [&](std::size_t c) {
    const index_range r = rows_of(c);
    float* panel = base + c * per_chunk;
    float* tmp = panel + 64 * mm::gemm_kc;
#ifdef SLM_X86
    if (chosen == isa::avx512) mm::gemm_rows_512(w, x, n_tok, ldx, y, ldy, r.begin, r.end, panel, tmp);
    else mm::gemm_rows_256(w, x, n_tok, ldx, y, ldy, r.begin, r.end, panel, tmp);
#else
    mm::gemm_rows_neon(w, x, n_tok, ldx, y, ldy, r.begin, r.end, panel, tmp);
#endif
  });
#else
  return parallel_for_chunks(ex, part.count, [&](std::size_t c) {
    const index_range r = rows_of(c);
    mm::reference(w, x, n_tok, ldx, y, ldy, r.begin, r.end);
  });
#endif
}
#endif  // SLM_DEFINE_KERNELS

// Activation precision of one call. The weights are dequantized exactly on every path;
// what differs is what the activations are rounded to before the products:
//   f32   none: matmul() above, the default everywhere (exact f32 math, gamma bound)
//   int8  per-block int8 (nvfp4 / mxfp4; AVX-512 VNNI): kernels/matmul_w4a8.hpp
//   bf16  bf16, round to nearest even, once per call (nvfp4 / mxfp4 / bf16 weights;
//         AVX-512 BF16 vdpbf16ps): kernels/matmul_bf16.hpp
// Never chosen behind the caller's back (no environment variable): a model's numerics
// are the host's decision, per call.
enum class activation_precision : std::uint8_t { f32, int8, bf16 };

constexpr std::string_view to_string(activation_precision a) noexcept {
  switch (a) {
    case activation_precision::f32: return "f32";
    case activation_precision::int8: return "int8";
    case activation_precision::bf16: return "bf16";
  }
  return "?";
}

// Defined in kernels/matmul_w4a8.hpp and kernels/matmul_bf16.hpp (included below).
SLM_INLINE status matmul_w4a8(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                              std::size_t ldy, executor_ref ex, isa which = isa::best);
SLM_INLINE status matmul_bf16_activations(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                                          float* y, std::size_t ldy, executor_ref ex, isa which = isa::best);

// matmul with a choice of activation precision: f32 is matmul() itself.
status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
              std::size_t ldy, executor_ref ex, isa which, activation_precision act);
#if SLM_DEFINE_KERNELS
SLM_INLINE status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                         std::size_t ldy, executor_ref ex, isa which, activation_precision act) {
  switch (act) {
    case activation_precision::int8: return matmul_w4a8(w, x, n_tok, ldx, y, ldy, ex, which);
    case activation_precision::bf16: return matmul_bf16_activations(w, x, n_tok, ldx, y, ldy, ex, which);
    case activation_precision::f32: break;
  }
  return matmul(w, x, n_tok, ldx, y, ldy, ex, which);
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm

// The opt-in reduced-precision paths build on the helpers above.
#include "slm/kernels/matmul_w4a8.hpp"  // IWYU pragma: export
#include "slm/kernels/matmul_bf16.hpp"  // IWYU pragma: export
#ifdef SLM_NEON
#include "slm/kernels/matmul_neon.hpp"  // IWYU pragma: export
#endif
