// slm/kernels/avx512_vnni.hpp - the optional W4A8 path: NVFP4 / MXFP4 weights times int8
// activations (quantized per call), integer dot products on AVX-512 VNNI.
//
//   status matmul(w, x, n_tok, ldx, y, ldy, ex, which, activation_precision::int8);
//   status matmul_w4a8(w, x, n_tok, ldx, y, ldy, ex, which = isa::best);
//
// Never the default: the plain matmul() (kernels/matmul.hpp) is W4A16 and stays so; this path
// runs only when a caller asks for it per call. There is deliberately no environment
// variable: it would change a model's numerics behind the host's back. Formats other
// than nvfp4 / mxfp4 ignore the request and run the W4A16 kernels (exact f32 math).
//
// Math (the scalar reference, detail::w4a8::reference_rows, defines it):
//   1. Each row of X is quantized per activation block of QB elements (QB = 16 for
//      nvfp4, the weight block; 32 for mxfp4, the weight block, as llama.cpp's q8_0):
//      amax = max |x|, d = amax / 127 (f32), q = clamp(nearbyint(x / d), -127, 127)
//      (round to nearest even, exact f32 division). A block with d == 0 (all zero, or
//      amax < 127 x 2^-149) quantizes to zeros; a block holding inf/NaN to zeros with a
//      NaN scale, so the rows it meets come out NaN as with f32 activations.
//   2. Weights decode to doubled E2M1 integers e' = 2 e in {0, +-1, +-2, +-3, +-4, +-6,
//      +-8, +-12} (spec 1.1): exact, 4-bit codes to int8.
//   3. Per segment s of 16 columns (one nvfp4 block; half an mxfp4 block) the integer
//      dot D_s = sum q_k e'_k is exact (|D_s| <= 16 x 127 x 12 < 2^24, so also exact in
//      f32), and  y = sum_s fma(float(D_s), c_s, .)  with c_s = f_s x h_s, f_s the weight
//      block factor exactly as block_factor() (e4m3/e8m0 scale x global), h_s = d / 2.
// The scalar reference adds the terms in segment order; the AVX-512 GEMM does the very
// same operations in the same order (bit-identical to it); the AVX-512 GEMV keeps one
// accumulator per segment position mod 16 and adds the lanes at the end, so it differs
// from the reference only in the summation order of the per-segment terms.
//
// Exact integer formulation (vpdpbusd multiplies u8 x s8): weights enter as unsigned
// u = e' + 12 in [0, 24], activations as signed q, and the offset is removed with the
// activation-only term 12 x sum_{k in s} q_k, computed once per quantization and used as
// the accumulator's initial value: D_s = sum u_k q_k - 12 sum q_k. No saturation can
// occur (|sum| <= 16 x 24 x 127).
//
// Kernels (runtime dispatch; the VNNI kernels need isa::avx512 and avx512vnni):
//   quantize   AVX-512: 16 floats per step, horizontal max, vdivps, vcvtps2dq, vpmovdb;
//              values identical to the scalar quantizer (same IEEE operations).
//   GEMV       n_tok <= 2. 256 columns (16 segments) per step and row: two 64-byte code
//              loads, two vpermt2d (lane i <- the two code dwords of segment i), four
//              nibble vpshufb lookups, four vpdpbusd into one accumulator whose lane i is
//              D_i exactly, one cvt and one fma with the 16 factors c_i; x is read
//              through a per-call copy of q permuted to that lane order. 4 rows at a
//              time, next rows prefetched. Trailing segments (K % 256) scalar.
//   GEMM       n_tok >= 3. Per 32 rows x 256 columns a thread decodes u into an int8
//              panel (dword-transposed: 4 columns x 32 rows per 128 bytes) and the 32 x 16
//              factors once, then per tile of 6 tokens and segment: 8 vpdpbusd with the
//              token's 4 activation bytes broadcast, then cvt + mul + fma per 16 rows.
//   avx2, and avx512 without VNNI, run kernels/avx2_int8.hpp (vpmaddubsw); other isas
//              (scalar, neon) the scalar reference (slow: prefer the W4A16 matmul there).
//   w4a8_vnni(which) says whether the VNNI kernels would run, w4a8_accelerated(which)
//              whether either SIMD family would.
//
// Error versus the exact product with f32 activations (derived in tests/test_matmul.cpp,
// W4A8 tests): per element |x - d q| <= d/2 (1 + 2^-16), so
//   |y - y_exact| <= (1 + g) sum_b (d_b/2)(1+2^-16) sum_{k in b} |w_k| + (g + u) sum_k |x_k w_k|
// with u = 2^-24, g = gamma_{S+24} (S = K/16 segments). Measured (test
// MatmulW4A8.ErrorOnRealisticGemv: 512 x 4096, x ~ N(0,1) with every 97th value x8,
// random codes, scales as in checkpoints), |y - y_exact| / sum_k |x_k w_k|:
//   nvfp4 (int8 per 16): max 7.8e-4, RMS 2.4e-4; RMS(err) / RMS(y) 6.5e-3
//   mxfp4 (int8 per 32): max 2.4e-3, RMS 6.9e-4; RMS(err) / RMS(y) 9.3e-3
// (W4A16 f32: ~2e-8), at most 12 % of the bound above. Determinism: as kernels/matmul.hpp,
// results are bit-identical for any thread count.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "slm/kernels/avx2_int8.hpp"
#include "slm/kernels/reference.hpp"

#ifdef SLM_X86
#if SLM_DEFINE_KERNELS  // only the kernels unit compiles the intrinsics
#include "slm/kernels/x86_intrinsics.hpp"
#endif
#define SLM_W4A8_512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c,bmi,bmi2")))
#endif

namespace slm {

namespace detail::w4a8 {

// GEMM panel geometry (AVX-512 VNNI kernels).
inline constexpr std::size_t gemm_pr = 32, gemm_kc = 256, gemm_tt = 6;

// GEMV lane order: per 256-column group g, qp[256g + 64c + 4i + m] = q[256g + 16i +
// 8(c/2) + 2m + c%2] (c = 0..3: low/high nibbles of the segment's first/second code
// dword; i = segment; m = byte in the dword). Columns past the last group unchanged.
void permute_gemv(const std::int8_t* q, std::size_t K, std::int8_t* qp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void permute_gemv(const std::int8_t* q, std::size_t K, std::int8_t* qp) noexcept {
  const std::size_t G = K / group;
  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t c = 0; c < 4; ++c)
      for (std::size_t i = 0; i < 16; ++i)
        for (std::size_t m = 0; m < 4; ++m)
          qp[group * g + 64 * c + 4 * i + m] = q[group * g + 16 * i + 8 * (c / 2) + 2 * m + (c % 2)];
  if (G * group < K) std::memcpy(qp + G * group, q + G * group, K - G * group);
}
#endif  // SLM_DEFINE_KERNELS

#ifdef SLM_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if SLM_DEFINE_KERNELS  // kernel templates and helpers: only the kernels unit instantiates them
SLM_W4A8_512 inline float hmax_512(__m512 v) noexcept {
  const __m512i s8 = _mm512_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  const __m512i s4 = _mm512_setr_epi32(4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  const __m512i s2 = _mm512_setr_epi32(2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  const __m512i s1 = _mm512_setr_epi32(1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
  v = _mm512_max_ps(v, _mm512_permutexvar_ps(s8, v));
  v = _mm512_max_ps(v, _mm512_permutexvar_ps(s4, v));
  v = _mm512_max_ps(v, _mm512_permutexvar_ps(s2, v));
  v = _mm512_max_ps(v, _mm512_permutexvar_ps(s1, v));
  return _mm512_cvtss_f32(v);
}
#endif  // SLM_DEFINE_KERNELS

// Same values as quantize_scalar (qb = 16 or 32).
// q_step: bytes from one segment's 16 q values to the next (16: the row-major q of the
// GEMV and VNNI GEMM; 256: the AMX-INT8 tiles, kernels/amx_int8.hpp). o.nc may be null.
SLM_W4A8_512 void quantize_512(const float* x, std::size_t K, std::size_t qb, qrow o, std::size_t q_step = seg) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_512 SLM_INLINE void quantize_512(const float* x, std::size_t K, std::size_t qb, qrow o,
                                          std::size_t q_step) noexcept {
  const __m512 absmask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  const __m512 big = _mm512_set1_ps(std::numeric_limits<float>::max());
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const std::size_t parts = qb / seg;
  for (std::size_t b = 0; b < K; b += qb) {
    __m512 a[2];
    __m512 mx = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (std::size_t j = 0; j < parts; ++j) {
      a[j] = _mm512_loadu_ps(x + b + seg * j);
      const __m512 ab = _mm512_and_ps(a[j], absmask);
      bad = static_cast<__mmask16>(bad | _mm512_cmp_ps_mask(ab, big, _CMP_NLE_UQ));
      mx = _mm512_max_ps(mx, ab);
    }
    const float d = hmax_512(mx) / 127.0f;
    const bool zero = bad != 0 || d == 0.0f;
    const __m512 dv = _mm512_set1_ps(d);
    for (std::size_t j = 0; j < parts; ++j) {
      const std::size_t s = b / seg + j;
      __m512i qi = _mm512_setzero_si512();
      if (!zero) qi = _mm512_min_epi32(hi, _mm512_max_epi32(lo, _mm512_cvtps_epi32(_mm512_div_ps(a[j], dv))));
      const __m128i q8 = _mm512_cvtepi32_epi8(qi);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + s * q_step), q8);
      if (o.nc) o.nc[s] = -offset * sum_i8x16(q8);
      o.h[s] = bad ? std::numeric_limits<float>::quiet_NaN() : 0.5f * d;
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// 16 segment factors f_s (block_factor values) for segments 16g .. 16g+15. The bit
// conversion below is exact for normal scales; a subnormal or zero (exponent bits clear)
// or NaN byte sends the group to block_factor's per-value conversion, found by two byte
// compares on the loaded scales (vector masks, no scalar pass over the bytes).
template <bool NV>
SLM_W4A8_512 inline __m512 factors16_512(const std::byte* sc, std::size_t g, float gl) noexcept {
  if constexpr (NV) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16 * g));
    const __mmask16 odd = _mm_testn_epi8_mask(b, _mm_set1_epi8(0x78)) |
                          _mm_cmpeq_epi8_mask(_mm_and_si128(b, _mm_set1_epi8(0x7F)), _mm_set1_epi8(0x7F));
    if (odd == 0) {
      const __m512i c = _mm512_cvtepu8_epi32(b);
      const __m512i bits = _mm512_or_si512(
          _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x7F)), 20),
                           _mm512_set1_epi32(120 << 23)),
          _mm512_slli_epi32(_mm512_and_si512(c, _mm512_set1_epi32(0x80)), 24));
      return _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(gl));
    }
    alignas(64) float f[16];
    for (std::size_t i = 0; i < 16; ++i) f[i] = e4m3_to_f32(mm::ld_u8(sc + 16 * g + i)) * gl;
    return _mm512_load_ps(f);
  } else {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8 * g));
    // 0x00 (2^-127, an f32 denormal) or 0xFF (NaN), in the 8 bytes loaded?
    const __mmask16 odd = static_cast<__mmask16>(
        (_mm_cmpeq_epi8_mask(b, _mm_setzero_si128()) | _mm_cmpeq_epi8_mask(b, _mm_set1_epi8(-1))) & 0xFF);
    if (odd == 0) {
      const __m512i c = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b));  // each scale twice
      return _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(c, 23)), _mm512_set1_ps(gl));
    }
    alignas(64) float f[16];
    for (std::size_t i = 0; i < 16; ++i) f[i] = e8m0_to_f32(mm::ld_u8(sc + 8 * g + i / 2)) * gl;
    return _mm512_load_ps(f);
  }
}

// u = e' + 12 for the 16 nibble codes, in every 128-bit lane (vpshufb table).
SLM_W4A8_512 inline __m512i utable_512() noexcept {
  return _mm512_broadcast_i32x4(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// GEMV over nblk blocks of R rows. Block b holds rows r + b adv + i dr (i < R) and writes
// y at the same offsets from r: dr = 1, adv = R for neighbouring rows (a few rows, or
// several tokens per row group); adv = 1 for R streams (kernels/kernel_row.hpp's
// gemv_streams). qp: permuted q (see permute_gemv); h, nc per segment. Rows are addressed
// as one base pointer plus multiples of a stride (per-row pointers g++ keeps on the
// stack). The software prefetches reach the rows of the block after next (streams) or of
// the next block (neighbours) at the same columns.
template <int R, bool NV>
SLM_W4A8_512 void gemv_512(const weight_matrix& w, std::size_t r, const std::int8_t* qp, const float* h,
                           const std::int32_t* nc, float* y, std::size_t nblk, std::size_t dr,
                           std::size_t adv) noexcept {
  const std::size_t K = w.cols, S = K / seg, G = K / group;
  const std::size_t rs = dr * w.row_stride, ss = dr * w.scale_stride;  // row i to row i + 1 of a block
  const std::size_t ahead = mm::prefetch_rows(adv);
  const std::size_t pc = ahead * w.row_stride, ps = ahead * w.scale_stride;
  const __m512i tbl = utable_512(), m4 = _mm512_set1_epi8(0x0F);
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const float gl = w.global;
  for (std::size_t b = 0; b < nblk; ++b, r += adv, y += adv) {
    const std::byte* codes = w.data + r * w.row_stride;  // row i of the block at codes + i rs
    const std::byte* sc = w.scales + r * w.scale_stride;
    __m512 acc[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    for (std::size_t g = 0; g < G; ++g, codes += 128) {
      const std::int8_t* xq = qp + group * g;
      const __m512i x0 = _mm512_loadu_si512(xq), x1 = _mm512_loadu_si512(xq + 64);
      const __m512i x2 = _mm512_loadu_si512(xq + 128), x3 = _mm512_loadu_si512(xq + 192);
      const __m512i n0 = _mm512_loadu_si512(nc + 16 * g);
      const __m512 hv = _mm512_loadu_ps(h + 16 * g);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const std::byte* c = codes + static_cast<std::size_t>(i) * rs;
        const __m512i v0 = _mm512_loadu_si512(c), v1 = _mm512_loadu_si512(c + 64);
        _mm_prefetch(reinterpret_cast<const char*>(c + pc), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(c + 64 + pc), _MM_HINT_T0);
        const std::byte* si = sc + static_cast<std::size_t>(i) * ss;
        if ((g & 3) == 0) _mm_prefetch(reinterpret_cast<const char*>(si + (NV ? 16 : 8) * g + ps), _MM_HINT_T0);
        const __m512i P = _mm512_permutex2var_epi32(v0, ie, v1), Q = _mm512_permutex2var_epi32(v0, io, v1);
        __m512i a = _mm512_dpbusd_epi32(n0, _mm512_shuffle_epi8(tbl, _mm512_and_si512(P, m4)), x0);
        a = _mm512_dpbusd_epi32(a, _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(P, 4), m4)), x1);
        a = _mm512_dpbusd_epi32(a, _mm512_shuffle_epi8(tbl, _mm512_and_si512(Q, m4)), x2);
        a = _mm512_dpbusd_epi32(a, _mm512_shuffle_epi8(tbl, _mm512_and_si512(_mm512_srli_epi16(Q, 4), m4)), x3);
        const __m512 f = factors16_512<NV>(si, g, gl);
        acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(a), _mm512_mul_ps(f, hv), acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)  // trailing segments, natural order
      y[static_cast<std::size_t>(i) * dr] =
          segment_terms(w, r + static_cast<std::size_t>(i) * dr, qp, h, G * 16, S, mm::hsum_512(acc[i]));
  }
}
#endif  // SLM_DEFINE_KERNELS

// Decodes rows [rb, rb + nr) x columns [k0, k0 + kc) into the panel: byte
// panel[128 j + 4 i + m] = u(row rb + i, column k0 + 4 j + m); rows past nr are zero. Factors:
// fp[32 s + i] = f(row rb + i, segment k0/16 + s).
SLM_W4A8_512 void decode_panel_512(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                   std::size_t kc, std::uint8_t* panel, float* fp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_512 SLM_INLINE void decode_panel_512(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                              std::size_t kc, std::uint8_t* panel, float* fp) noexcept {
  const __m512i tbl = utable_512();
  const __m512i lo = _mm512_set1_epi16(0x000F), hi = _mm512_set1_epi16(0x0F00);
  alignas(64) std::uint8_t tmp[gemm_kc];
  for (std::size_t i = 0; i < gemm_pr; ++i) {
    if (i >= nr) {
      for (std::size_t j = 0; j < kc / 4; ++j) std::memset(panel + 128 * j + 4 * i, 0, 4);
      for (std::size_t s = 0; s < kc / seg; ++s) fp[32 * s + i] = 0.0f;
      continue;
    }
    const std::size_t r = rb + i;
    const std::byte* row = w.data + r * w.row_stride + k0 / 2;
    std::size_t k = 0;
    for (; k + 64 <= kc; k += 64) {  // 32 code bytes -> 64 u in natural order
      const __m512i b = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k / 2)));
      const __m512i nib = _mm512_or_si512(_mm512_and_si512(b, lo), _mm512_and_si512(_mm512_slli_epi16(b, 4), hi));
      _mm512_store_si512(tmp + k, _mm512_shuffle_epi8(tbl, nib));
    }
    for (; k < kc; k += 2) {
      const std::uint8_t b = mm::ld_u8(row + k / 2);
      tmp[k] = static_cast<std::uint8_t>(e2m1x2[fp4_lo(b)] + offset);
      tmp[k + 1] = static_cast<std::uint8_t>(e2m1x2[fp4_hi(b)] + offset);
    }
    for (std::size_t j = 0; j < kc / 4; ++j) std::memcpy(panel + 128 * j + 4 * i, tmp + 4 * j, 4);
    for (std::size_t s = 0; s < kc / seg; ++s) fp[32 * s + i] = mm::block_factor(w, r, k0 + seg * s);
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// T tokens x 32 rows over ns segments of a panel. q, h, nc point at token 0's column
// k0 / segment k0/16; token t is K (q) or S (h, nc) further. y: token 0's row rb.
template <int T>
SLM_W4A8_512 void micro_512(const std::uint8_t* panel, const float* fp, std::size_t ns, const std::int8_t* q,
                            const float* h, const std::int32_t* nc, std::size_t K, std::size_t S, float* y,
                            std::size_t ldy, std::size_t nr, bool first) noexcept {
  const __mmask16 m0 = nr >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << nr) - 1u);
  const __mmask16 m1 = nr >= 32 ? static_cast<__mmask16>(0xFFFF)
                                : static_cast<__mmask16>(nr > 16 ? (1u << (nr - 16)) - 1u : 0u);
  __m512 a0[T], a1[T];
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    a0[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m0, yt);
    a1[t] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m1, yt + 16);
  }
  for (std::size_t s = 0; s < ns; ++s) {
    const std::uint8_t* p = panel + 512 * s;
    const __m512i w00 = _mm512_load_si512(p), w01 = _mm512_load_si512(p + 64);
    const __m512i w10 = _mm512_load_si512(p + 128), w11 = _mm512_load_si512(p + 192);
    const __m512i w20 = _mm512_load_si512(p + 256), w21 = _mm512_load_si512(p + 320);
    const __m512i w30 = _mm512_load_si512(p + 384), w31 = _mm512_load_si512(p + 448);
    const __m512 f0 = _mm512_load_ps(fp + 32 * s), f1 = _mm512_load_ps(fp + 32 * s + 16);
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const std::size_t ut = static_cast<std::size_t>(t);
      const std::int8_t* xt = q + ut * K + seg * s;
      std::int32_t xw[4];
      std::memcpy(xw, xt, 16);
      const __m512i init = _mm512_set1_epi32(nc[ut * S + s]);
      __m512i i0 = _mm512_dpbusd_epi32(init, w00, _mm512_set1_epi32(xw[0]));
      __m512i i1 = _mm512_dpbusd_epi32(init, w01, _mm512_set1_epi32(xw[0]));
      i0 = _mm512_dpbusd_epi32(i0, w10, _mm512_set1_epi32(xw[1]));
      i1 = _mm512_dpbusd_epi32(i1, w11, _mm512_set1_epi32(xw[1]));
      i0 = _mm512_dpbusd_epi32(i0, w20, _mm512_set1_epi32(xw[2]));
      i1 = _mm512_dpbusd_epi32(i1, w21, _mm512_set1_epi32(xw[2]));
      i0 = _mm512_dpbusd_epi32(i0, w30, _mm512_set1_epi32(xw[3]));
      i1 = _mm512_dpbusd_epi32(i1, w31, _mm512_set1_epi32(xw[3]));
      const __m512 hb = _mm512_set1_ps(h[ut * S + s]);
      a0[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i0), _mm512_mul_ps(f0, hb), a0[t]);
      a1[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(i1), _mm512_mul_ps(f1, hb), a1[t]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    _mm512_mask_storeu_ps(yt, m0, a0[t]);
    _mm512_mask_storeu_ps(yt + 16, m1, a1[t]);
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_W4A8_512 void micro_512_any(std::size_t T, const std::uint8_t* panel, const float* fp, std::size_t ns,
                                const std::int8_t* q, const float* h, const std::int32_t* nc, std::size_t K,
                                std::size_t S, float* y, std::size_t ldy, std::size_t nr, bool first) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_512 SLM_INLINE void micro_512_any(std::size_t T, const std::uint8_t* panel, const float* fp, std::size_t ns,
                                           const std::int8_t* q, const float* h, const std::int32_t* nc, std::size_t K,
                                           std::size_t S, float* y, std::size_t ldy, std::size_t nr, bool first) noexcept {
  switch (T) {
    case 1: return micro_512<1>(panel, fp, ns, q, h, nc, K, S, y, ldy, nr, first);
    case 2: return micro_512<2>(panel, fp, ns, q, h, nc, K, S, y, ldy, nr, first);
    case 3: return micro_512<3>(panel, fp, ns, q, h, nc, K, S, y, ldy, nr, first);
    case 4: return micro_512<4>(panel, fp, ns, q, h, nc, K, S, y, ldy, nr, first);
    case 5: return micro_512<5>(panel, fp, ns, q, h, nc, K, S, y, ldy, nr, first);
    default: return micro_512<6>(panel, fp, ns, q, h, nc, K, S, y, ldy, nr, first);
  }
}
#endif  // SLM_DEFINE_KERNELS

// Rows [r0, r1) for all tokens. panel: gemm_pr x gemm_kc bytes (64-aligned); fp:
// gemm_pr x gemm_kc / 16 floats (64-aligned).
SLM_W4A8_512 void gemm_rows_512(const weight_matrix& w, const std::int8_t* q, const float* h,
                                const std::int32_t* nc, std::size_t n_tok, float* y, std::size_t ldy,
                                std::size_t r0, std::size_t r1, std::uint8_t* panel, float* fp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_512 SLM_INLINE void gemm_rows_512(const weight_matrix& w, const std::int8_t* q, const float* h,
                                           const std::int32_t* nc, std::size_t n_tok, float* y, std::size_t ldy,
                                           std::size_t r0, std::size_t r1, std::uint8_t* panel, float* fp) noexcept {
  const std::size_t K = w.cols, S = K / seg;
  for (std::size_t rb = r0; rb < r1; rb += gemm_pr) {
    const std::size_t nr = std::min(gemm_pr, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += gemm_kc) {
      const std::size_t kc = std::min(gemm_kc, K - k0), s0 = k0 / seg;
      decode_panel_512(w, rb, nr, k0, kc, panel, fp);
      for (std::size_t t0 = 0; t0 < n_tok; t0 += gemm_tt)
        micro_512_any(std::min(gemm_tt, n_tok - t0), panel, fp, kc / seg, q + t0 * K + k0, h + t0 * S + s0,
                      nc + t0 * S + s0, K, S, y + t0 * ldy + rb, ldy, nr, k0 == 0);
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // SLM_X86

#if defined(SLM_X86) && SLM_DEFINE_KERNELS
// The GEMV's copy of one token: q, q permuted to the kernel's lane order, h and nc.
inline std::size_t gemv_bytes(std::size_t K, std::size_t) noexcept { return 2 * q_bytes(K, 1) + 2 * hs_bytes(K, 1); }
SLM_W4A8_512 SLM_INLINE void prepare_gemv(const weight_matrix& w, const float* x, std::size_t, std::size_t,
                                          std::byte* out) noexcept {
  const std::size_t K = w.cols;
  const qrow o = token_row(out, K, 0, 1);  // q, then h and nc after the permuted copy below
  const qrow g{o.q, reinterpret_cast<float*>(out + 2 * q_bytes(K, 1)),
               reinterpret_cast<std::int32_t*>(out + 2 * q_bytes(K, 1) + hs_bytes(K, 1))};
  quantize_512(x, K, act_block(w.format), g);
  permute_gemv(g.q, K, reinterpret_cast<std::int8_t*>(out + q_bytes(K, 1)));
}
// The kernels on one token's prepared copy: q permuted, then h and nc.
template <bool NV> struct gemv_k { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float*, const std::byte* xp, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    const std::size_t K = w.cols;
    gemv_512<R, NV>(w, r, reinterpret_cast<const std::int8_t*>(xp + q_bytes(K, 1)),
                    reinterpret_cast<const float*>(xp + 2 * q_bytes(K, 1)),
                    reinterpret_cast<const std::int32_t*>(xp + 2 * q_bytes(K, 1) + hs_bytes(K, 1)), y, nblk, dr, adv);
  }
}; };
SLM_W4A8_512 SLM_INLINE void prepare_gemm(const weight_matrix& w, const float* x, std::size_t t, std::size_t n_tok,
                                          std::byte* out) noexcept {
  quantize_512(x, w.cols, act_block(w.format), token_row(out, w.cols, t, n_tok));
}
SLM_W4A8_512 SLM_INLINE void gemm(const weight_matrix& w, const mm::acts& a, std::size_t n_tok, float* y,
                                  std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  const qrow q = token_row(const_cast<std::byte*>(a.p), w.cols, 0, n_tok);
  gemm_rows_512(w, q.q, q.h, q.nc, n_tok, y, ldy, r0, r1, reinterpret_cast<std::uint8_t*>(scratch),
                reinterpret_cast<float*>(scratch + gemm_pr * gemm_kc));
}
// The AVX-512 VNNI row: nvfp4 and mxfp4 weights.
SLM_INLINE mm::kernel_row vnni_row(weight_format f) noexcept {
  mm::kernel_row k;
  k.name = "avx512_vnni";
  if (f == weight_format::nvfp4) mm::set_gemv_streams<gemv_k<true>::k>(k);
  else mm::set_gemv_streams<gemv_k<false>::k>(k);
  k.gemv_prepare = &prepare_gemv;
  k.gemv_bytes = &gemv_bytes;
  k.gemm = &gemm;
  k.gemm_prepare = &prepare_gemm;
  k.gemm_bytes = &w4a8::gemm_bytes;
  k.gemm_scratch = gemm_pr * gemm_kc + gemm_pr * (gemm_kc / seg) * 4;
  return k;
}
#endif  // SLM_X86 && SLM_DEFINE_KERNELS

}  // namespace detail::w4a8

}  // namespace slm
