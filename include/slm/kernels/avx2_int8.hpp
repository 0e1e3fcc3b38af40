// slm/kernels/avx2_int8.hpp - the W4A8 path (int8 activations for nvfp4 / mxfp4 weights) on
// AVX2, for CPUs without AVX-512 VNNI: AMD Zen 2/3, Intel client cores before AVX-VNNI,
// and AVX-512 cores without VNNI. Same definition as kernels/avx512_vnni.hpp (its file
// comment states it and the bound), same integers D_s, same factors c_s.
//
// AVX2 has no u8 x s8 -> s32 dot product (vpdpbusd is VNNI). vpmaddubsw multiplies u8 by s8
// and adds adjacent pairs into saturating s16; vpmaddwd against ones adds adjacent s16 pairs
// into s32. Both are exact here, because no sum can reach the s16 limit:
//   GEMV  weights u = e' + 12 in [0, 24] (unsigned), activations q in [-127, 127]:
//         a pair <= 2 x 24 x 127 = 6096, the four nibble products of a lane added in s16
//         <= 24384 < 32767; then D_s = sum u q + nc_s (nc_s = -12 sum q, as the VNNI GEMV).
//   GEMM  activations enter unsigned as v = q + 128 in [1, 255] (the byte q ^ 0x80),
//         weights signed e' in [-12, 12]: a pair <= 2 x 255 x 12 = 6120, four added
//         <= 24480; then D_s = sum v e' + wc_s with the weight-only term
//         wc_s = -128 sum_{k in s} e'_k, computed once per panel (so the prepared
//         activations need no per-token offset, and the weights are the memory operand).
//
// Kernels (runtime dispatch: isa::avx2, or isa::avx512 without VNNI):
//   quantize  8 floats per step; the scalar quantizer's IEEE operations (vdivps,
//             vcvtps2dq round-to-nearest-even, clamp), so the same q, h and nc.
//   GEMV      n_tok <= 16, as the driver runs it per token. 128 columns (8 segments) per
//             step and row: two 32-byte code loads, two vshufps (lane j <- the two code
//             dwords of segment sigma(j), sigma = 0 1 4 5 2 3 6 7, the in-lane order
//             vshufps gives), four nibble vpshufb lookups, four vpmaddubsw added in s16,
//             one vpmaddwd: lane j holds D_sigma(j) exactly. One cvt and one fma with the
//             lane-ordered factors; x, h and nc are read through a per-call copy
//             permuted to that order. 4 rows at a time, next rows prefetched. Trailing
//             segments (K % 128) scalar in natural order. It differs from the reference
//             only in the summation order of the per-segment terms (8 lanes, then a lane
//             sum), as the VNNI GEMV does.
//   GEMM      n_tok > 16. Per 16 rows x 256 columns a thread decodes e' into an int8 panel
//             (4 columns x 8 rows per 32 bytes), the 16 x 16 factors and the 16 x 16
//             corrections wc once; then per token and segment: four dword broadcasts of
//             v, per 8 rows four vpmaddubsw (weights from the panel) added in s16, one
//             vpmaddwd, + wc, cvt, and fma with f x h. Segments in order, one accumulator
//             per (token, row): the reference's operations in its order, bit-identical.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "slm/kernels/avx2.hpp"
#include "slm/kernels/reference.hpp"

#ifdef SLM_X86
#if SLM_DEFINE_KERNELS  // only the kernels unit compiles the intrinsics
#include "slm/kernels/x86_intrinsics.hpp"
#endif
#define SLM_W4A8_256 __attribute__((target("avx2,fma,f16c")))

namespace slm::detail::w4a8 {

// GEMV step (8 segments) and GEMM panel geometry of the AVX2 kernels.
inline constexpr std::size_t group_256 = 128;
inline constexpr std::size_t pr_256 = 16, kc_256 = 256, tt_256 = 4;
// Lane j of a GEMV step holds segment sigma(j) of its 8.
inline constexpr std::size_t sigma_256[8] = {0, 1, 4, 5, 2, 3, 6, 7};

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if SLM_DEFINE_KERNELS
// The exact sum of 16 int8: sign-extended to s16 pairs, summed to s32, then the 4 lanes
// (the quantizers' nc = -12 x this, here and in kernels/avx512_vnni.hpp).
SLM_W4A8_256 inline std::int32_t sum_i8x16(__m128i q8) noexcept {
  const __m128i w16 = _mm_add_epi16(_mm_cvtepi8_epi16(q8), _mm_cvtepi8_epi16(_mm_unpackhi_epi64(q8, q8)));
  __m128i s32 = _mm_madd_epi16(w16, _mm_set1_epi16(1));
  s32 = _mm_add_epi32(s32, _mm_unpackhi_epi64(s32, s32));
  s32 = _mm_add_epi32(s32, _mm_shuffle_epi32(s32, 1));
  return _mm_cvtsi128_si32(s32);
}
#endif  // SLM_DEFINE_KERNELS

// The scalar quantizer's values (qb = 16 or 32); q stored as q ^ flip (0, or 0x80 for the
// GEMM's unsigned v = q + 128); h and nc as quantize_scalar.
SLM_W4A8_256 void quantize_256(const float* x, std::size_t K, std::size_t qb, qrow o, std::uint8_t flip) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_256 SLM_INLINE void quantize_256(const float* x, std::size_t K, std::size_t qb, qrow o,
                                          std::uint8_t flip) noexcept {
  const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 big = _mm256_set1_ps(std::numeric_limits<float>::max());
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  const __m128i fl = _mm_set1_epi8(static_cast<char>(flip));
  const std::size_t parts = qb / 8;  // 2 or 4 vectors of 8
  for (std::size_t b = 0; b < K; b += qb) {
    __m256 a[4];
    __m256 mx = _mm256_setzero_ps();
    int bad = 0;
    for (std::size_t j = 0; j < parts; ++j) {
      a[j] = _mm256_loadu_ps(x + b + 8 * j);
      const __m256 ab = _mm256_and_ps(a[j], absmask);
      bad |= _mm256_movemask_ps(_mm256_cmp_ps(ab, big, _CMP_NLE_UQ));
      mx = _mm256_max_ps(mx, ab);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float d = _mm_cvtss_f32(m4) / 127.0f;
    const bool zero = bad != 0 || d == 0.0f;
    const __m256 dv = _mm256_set1_ps(d);
    for (std::size_t j = 0; j < parts; j += 2) {  // one segment of 16 per pass
      const std::size_t s = b / seg + j / 2;
      __m128i q8 = _mm_setzero_si128();
      if (!zero) {
        const __m256i i0 = _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_div_ps(a[j], dv))));
        const __m256i i1 =
            _mm256_min_epi32(hi, _mm256_max_epi32(lo, _mm256_cvtps_epi32(_mm256_div_ps(a[j + 1], dv))));
        // s32 -> s16 (in-lane interleave, put back in order) -> s8; no value saturates.
        const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0xD8);
        q8 = _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
      }
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o.q + s * seg), _mm_xor_si128(q8, fl));
      o.nc[s] = -offset * sum_i8x16(q8);
      o.h[s] = bad ? std::numeric_limits<float>::quiet_NaN() : 0.5f * d;
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

// GEMV lane order (segments sigma(j) of each 128-column step): per step g, lane j, byte m:
// qp[128g + 32c + 4j + m] = q[128g + 16 sigma(j) + 8(c/2) + 2m + c%2] (c = 0..3: the low /
// high nibbles of the segment's first / second code dword); hp, ncp [8g + j] = h, nc
// [8g + sigma(j)]. Columns and segments past the last full step unchanged.
void permute_gemv_256(const qrow& in, std::size_t K, qrow out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void permute_gemv_256(const qrow& in, std::size_t K, qrow out) noexcept {
  const std::size_t G = K / group_256, S = K / seg;
  for (std::size_t g = 0; g < G; ++g)
    for (std::size_t j = 0; j < 8; ++j) {
      const std::size_t s = 8 * g + sigma_256[j];
      for (std::size_t c = 0; c < 4; ++c)
        for (std::size_t m = 0; m < 4; ++m)
          out.q[group_256 * g + 32 * c + 4 * j + m] = in.q[seg * s + 8 * (c / 2) + 2 * m + (c % 2)];
      out.h[8 * g + j] = in.h[s];
      out.nc[8 * g + j] = in.nc[s];
    }
  if (G * group_256 < K) std::memcpy(out.q + G * group_256, in.q + G * group_256, K - G * group_256);
  for (std::size_t s = 8 * G; s < S; ++s) {
    out.h[s] = in.h[s];
    out.nc[s] = in.nc[s];
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// The 8 segment factors f_s (block_factor values) of step g, in lane order sigma.
template <bool NV>
SLM_W4A8_256 inline __m256 factors8_256(const std::byte* sc, std::size_t g, float gl) noexcept {
  if constexpr (NV) {
    constexpr std::uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    std::uint64_t eight;
    std::memcpy(&eight, sc + 8 * g, 8);
    const std::uint64_t mag = eight & 0x7F7F7F7F7F7F7F7Full;  // subnormal/zero or NaN byte?
    const std::uint64_t e = mag & 0x7878787878787878ull, n = mag ^ 0x7F7F7F7F7F7F7F7Full;
    if ((((e - ones) & ~e & highs) | ((n - ones) & ~n & highs)) == 0) {
      const __m128i b = _mm_shuffle_epi8(_mm_cvtsi64_si128(static_cast<long long>(eight)),
                                         _mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 0, 0, 0, 0, 0, 0, 0, 0));
      const __m256i c = _mm256_cvtepu8_epi32(b);
      const __m256i bits = _mm256_or_si256(
          _mm256_add_epi32(_mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7F)), 20),
                           _mm256_set1_epi32(120 << 23)),
          _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24));
      return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(gl));
    }
    alignas(32) float f[8];
    for (std::size_t j = 0; j < 8; ++j) f[j] = e4m3_to_f32(mm::ld_u8(sc + 8 * g + sigma_256[j])) * gl;
    return _mm256_load_ps(f);
  } else {
    std::uint32_t four;  // one e8m0 scale per two segments
    std::memcpy(&four, sc + 4 * g, 4);
    const std::uint32_t inv = ~four;  // 0x00 (2^-127, an f32 denormal) or 0xFF (NaN)?
    constexpr std::uint32_t o4 = 0x01010101u, h4 = 0x80808080u;
    if ((((four - o4) & ~four & h4) | ((inv - o4) & ~inv & h4)) == 0) {
      const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(four)),
                                         _mm_setr_epi8(0, 0, 2, 2, 1, 1, 3, 3, 0, 0, 0, 0, 0, 0, 0, 0));
      return _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu8_epi32(b), 23)), _mm256_set1_ps(gl));
    }
    alignas(32) float f[8];
    for (std::size_t j = 0; j < 8; ++j) f[j] = e8m0_to_f32(mm::ld_u8(sc + 4 * g + sigma_256[j] / 2)) * gl;
    return _mm256_load_ps(f);
  }
}

// u = e' + 12 for the 16 nibble codes, in both 128-bit lanes (vpshufb table).
SLM_W4A8_256 inline __m256i utable_256() noexcept {
  return _mm256_broadcastsi128_si256(_mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
}

// GEMV over nblk blocks of R rows: block b holds rows r + b adv + i dr (i < R) and writes y
// at the same offsets from r (dr = 1, adv = R: neighbouring rows; adv = 1: R streams,
// kernels/kernel_row.hpp's gemv_streams). p: this token's permuted copy (permute_gemv_256).
template <int R, bool NV>
SLM_W4A8_256 void gemv_256(const weight_matrix& w, std::size_t r, qrow p, float* y, std::size_t nblk, std::size_t dr,
                           std::size_t adv) noexcept {
  const std::size_t K = w.cols, S = K / seg, G = K / group_256;
  const __m256i tbl = utable_256(), m4 = _mm256_set1_epi8(0x0F), one16 = _mm256_set1_epi16(1);
  const std::size_t ahead = mm::prefetch_rows(adv);
  const std::size_t pc = ahead * w.row_stride, ps = ahead * w.scale_stride;
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* codes[R];
    const std::byte* sc[R];
    __m256 acc[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      codes[i] = w.data + (r + static_cast<std::size_t>(i) * dr) * w.row_stride;
      sc[i] = w.scales + (r + static_cast<std::size_t>(i) * dr) * w.scale_stride;
      acc[i] = _mm256_setzero_ps();
    }
    const float gl = w.global;
    for (std::size_t g = 0; g < G; ++g) {
      const std::int8_t* xq = p.q + group_256 * g;
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 32));
      const __m256i x2 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 64));
      const __m256i x3 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + 96));
      const __m256i n0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.nc + 8 * g));
      const __m256 hv = _mm256_loadu_ps(p.h + 8 * g);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const std::byte* c = codes[i] + 64 * g;
        const __m256 v0 = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c)));
        const __m256 v1 = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 32)));
        _mm_prefetch(reinterpret_cast<const char*>(c + pc), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(c + 32 + pc), _MM_HINT_T0);
        if ((g & 7) == 0) _mm_prefetch(reinterpret_cast<const char*>(sc[i] + (NV ? 8 : 4) * g + ps), _MM_HINT_T0);
        const __m256i P = _mm256_castps_si256(_mm256_shuffle_ps(v0, v1, 0x88));  // first code dwords
        const __m256i Q = _mm256_castps_si256(_mm256_shuffle_ps(v0, v1, 0xDD));  // second code dwords
        __m256i s16 = _mm256_maddubs_epi16(_mm256_shuffle_epi8(tbl, _mm256_and_si256(P, m4)), x0);
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(
                                        _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(P, 4), m4)), x1));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(_mm256_shuffle_epi8(tbl, _mm256_and_si256(Q, m4)), x2));
        s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(
                                        _mm256_shuffle_epi8(tbl, _mm256_and_si256(_mm256_srli_epi16(Q, 4), m4)), x3));
        const __m256i dot = _mm256_add_epi32(_mm256_madd_epi16(s16, one16), n0);
        const __m256 f = factors8_256<NV>(sc[i], g, gl);
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_mul_ps(f, hv), acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)  // trailing segments, natural order
      y[static_cast<std::size_t>(i) * dr] = segment_terms(w, r + static_cast<std::size_t>(i) * dr, p.q, p.h, 8 * G, S, mm::hsum_256(acc[i]));
  }
}
#endif  // SLM_DEFINE_KERNELS

// Decodes rows [rb, rb + nr) x columns [k0, k0 + kc) into the panel: byte
// panel[256 s + 64 c + 32 (i / 8) + 4 (i % 8) + m] = e'(row rb + i, column k0 + 16 s + 4 c + m);
// fp[16 s + i] = f(row rb + i, segment k0/16 + s); wc[16 s + i] = -128 x the segment's sum
// of e'. Rows past nr are zero.
SLM_W4A8_256 void decode_panel_256(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                   std::size_t kc, std::int8_t* panel, float* fp, std::int32_t* wc) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_256 SLM_INLINE void decode_panel_256(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                              std::size_t kc, std::int8_t* panel, float* fp,
                                              std::int32_t* wc) noexcept {
  const __m128i tbl = _mm_loadu_si128(reinterpret_cast<const __m128i*>(e2m1_doubled_table.data()));
  const __m128i m4 = _mm_set1_epi8(0x0F), one8 = _mm_set1_epi8(1), one16 = _mm_set1_epi16(1);
  const std::size_t ns = kc / seg;
  alignas(32) std::int8_t tmp[kc_256];
  for (std::size_t i = 0; i < pr_256; ++i) {
    const std::size_t off = 32 * (i / 8) + 4 * (i % 8);
    if (i >= nr) {
      for (std::size_t s = 0; s < ns; ++s) {
        for (std::size_t c = 0; c < 4; ++c) std::memset(panel + 256 * s + 64 * c + off, 0, 4);
        fp[16 * s + i] = 0.0f;
        wc[16 * s + i] = 0;
      }
      continue;
    }
    const std::size_t r = rb + i;
    const std::byte* row = w.data + r * w.row_stride + k0 / 2;
    for (std::size_t s = 0; s < ns; ++s) {  // 8 code bytes -> 16 e' in natural order
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + 8 * s));
      const __m128i nib = _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
      const __m128i e = _mm_shuffle_epi8(tbl, nib);
      _mm_store_si128(reinterpret_cast<__m128i*>(tmp + seg * s), e);
      __m128i s32 = _mm_madd_epi16(_mm_maddubs_epi16(one8, e), one16);
      s32 = _mm_add_epi32(s32, _mm_unpackhi_epi64(s32, s32));
      s32 = _mm_add_epi32(s32, _mm_shuffle_epi32(s32, 1));
      wc[16 * s + i] = -128 * _mm_cvtsi128_si32(s32);
      fp[16 * s + i] = mm::block_factor(w, r, k0 + seg * s);
    }
    for (std::size_t s = 0; s < ns; ++s)
      for (std::size_t c = 0; c < 4; ++c) std::memcpy(panel + 256 * s + 64 * c + off, tmp + seg * s + 4 * c, 4);
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
SLM_W4A8_256 inline __m256i ld_panel(const std::int8_t* p) noexcept {
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
}

// T tokens x 16 rows over ns segments of a panel. v: token 0's unsigned activations at
// column k0 (token t is K further); h: token 0's segment k0/16 (t is S further). y: token
// 0's row rb.
template <int T>
SLM_W4A8_256 void micro_256i(const std::int8_t* panel, const float* fp, const std::int32_t* wc, std::size_t ns,
                             const std::uint8_t* v, const float* h, std::size_t K, std::size_t S, float* y,
                             std::size_t ldy, std::size_t nr, bool first) noexcept {
  const __m256i one16 = _mm256_set1_epi16(1);
  __m256 a0[T], a1[T];
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    const float* yt = y + static_cast<std::size_t>(t) * ldy;
    if (first || nr < 16) {  // (a call of memcpy for 16 rows was 8 % of the GEMM)
      alignas(32) float tmp[16] = {};
      if (!first) std::memcpy(tmp, yt, nr * sizeof(float));
      a0[t] = _mm256_load_ps(tmp);
      a1[t] = _mm256_load_ps(tmp + 8);
    } else {
      a0[t] = _mm256_loadu_ps(yt);
      a1[t] = _mm256_loadu_ps(yt + 8);
    }
  }
  for (std::size_t s = 0; s < ns; ++s) {
    const std::int8_t* p = panel + 256 * s;
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const std::size_t ut = static_cast<std::size_t>(t);
      // Each group of 4 activation bytes broadcast from memory (vpbroadcastd; through a
      // general register, as set1_epi32 of a loaded int compiles, it took two more uops).
      const std::uint8_t* xg = v + ut * K + seg * s;
      const __m256i b0 = _mm256_broadcastd_epi32(_mm_loadu_si32(xg)), b1 = _mm256_broadcastd_epi32(_mm_loadu_si32(xg + 4));
      const __m256i b2 = _mm256_broadcastd_epi32(_mm_loadu_si32(xg + 8)), b3 = _mm256_broadcastd_epi32(_mm_loadu_si32(xg + 12));
      const __m256 hb = _mm256_set1_ps(h[ut * S + s]);
      __m256i l = _mm256_maddubs_epi16(b0, ld_panel(p + 0));
      __m256i u = _mm256_maddubs_epi16(b0, ld_panel(p + 32));
      l = _mm256_add_epi16(l, _mm256_maddubs_epi16(b1, ld_panel(p + 64)));
      u = _mm256_add_epi16(u, _mm256_maddubs_epi16(b1, ld_panel(p + 96)));
      l = _mm256_add_epi16(l, _mm256_maddubs_epi16(b2, ld_panel(p + 128)));
      u = _mm256_add_epi16(u, _mm256_maddubs_epi16(b2, ld_panel(p + 160)));
      l = _mm256_add_epi16(l, _mm256_maddubs_epi16(b3, ld_panel(p + 192)));
      u = _mm256_add_epi16(u, _mm256_maddubs_epi16(b3, ld_panel(p + 224)));
      const __m256i d0 = _mm256_add_epi32(_mm256_madd_epi16(l, one16),
                                          _mm256_load_si256(reinterpret_cast<const __m256i*>(wc + 16 * s)));
      const __m256i d1 = _mm256_add_epi32(_mm256_madd_epi16(u, one16),
                                          _mm256_load_si256(reinterpret_cast<const __m256i*>(wc + 16 * s + 8)));
      a0[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d0), _mm256_mul_ps(_mm256_load_ps(fp + 16 * s), hb), a0[t]);
      a1[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d1), _mm256_mul_ps(_mm256_load_ps(fp + 16 * s + 8), hb), a1[t]);
    }
  }
#pragma GCC unroll 4
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    if (nr == 16) {
      _mm256_storeu_ps(yt, a0[t]);
      _mm256_storeu_ps(yt + 8, a1[t]);
      continue;
    }
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, a0[t]);
    _mm256_store_ps(tmp + 8, a1[t]);
    std::memcpy(yt, tmp, nr * sizeof(float));
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_W4A8_256 void micro_256i_any(std::size_t T, const std::int8_t* panel, const float* fp, const std::int32_t* wc,
                                 std::size_t ns, const std::uint8_t* v, const float* h, std::size_t K, std::size_t S,
                                 float* y, std::size_t ldy, std::size_t nr, bool first) noexcept;
#if SLM_DEFINE_KERNELS
SLM_W4A8_256 SLM_INLINE void micro_256i_any(std::size_t T, const std::int8_t* panel, const float* fp,
                                            const std::int32_t* wc, std::size_t ns, const std::uint8_t* v,
                                            const float* h, std::size_t K, std::size_t S, float* y, std::size_t ldy,
                                            std::size_t nr, bool first) noexcept {
  switch (T) {
    case 1: return micro_256i<1>(panel, fp, wc, ns, v, h, K, S, y, ldy, nr, first);
    case 2: return micro_256i<2>(panel, fp, wc, ns, v, h, K, S, y, ldy, nr, first);
    case 3: return micro_256i<3>(panel, fp, wc, ns, v, h, K, S, y, ldy, nr, first);
    default: return micro_256i<4>(panel, fp, wc, ns, v, h, K, S, y, ldy, nr, first);
  }
}
#endif  // SLM_DEFINE_KERNELS

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if SLM_DEFINE_KERNELS
// The GEMV's copy of one token: q, h, nc as quantized, then permuted to the lane order.
inline std::size_t gemv_bytes_256(std::size_t K, std::size_t) noexcept {
  return 2 * (q_bytes(K, 1) + 2 * hs_bytes(K, 1));
}
inline qrow gemv_half_256(std::byte* p, std::size_t K, int half) noexcept {
  return token_row(p + static_cast<std::size_t>(half) * gemm_bytes(K, 1), K, 0, 1);
}
SLM_W4A8_256 SLM_INLINE void prepare_gemv_256(const weight_matrix& w, const float* x, std::size_t, std::size_t,
                                              std::byte* out) noexcept {
  const std::size_t K = w.cols;
  const qrow plain = gemv_half_256(out, K, 1);
  quantize_256(x, K, act_block(w.format), plain, 0);
  permute_gemv_256(plain, K, gemv_half_256(out, K, 0));
}
template <bool NV> struct gemv_k256 { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float*, const std::byte* xp, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_256<R, NV>(w, r, gemv_half_256(const_cast<std::byte*>(xp), w.cols, 0), y, nblk, dr, adv);
  }
}; };
SLM_W4A8_256 SLM_INLINE void prepare_gemm_256(const weight_matrix& w, const float* x, std::size_t t, std::size_t n_tok,
                                              std::byte* out) noexcept {
  quantize_256(x, w.cols, act_block(w.format), token_row(out, w.cols, t, n_tok), 0x80);
}
inline constexpr std::size_t gemm_scratch_256 = pr_256 * kc_256 + 2 * pr_256 * (kc_256 / seg) * 4;
SLM_W4A8_256 SLM_INLINE void gemm_256i(const weight_matrix& w, const mm::acts& a, std::size_t n_tok, float* y,
                                       std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  const std::size_t K = w.cols, S = K / seg;
  const qrow q = token_row(const_cast<std::byte*>(a.p), K, 0, n_tok);
  const std::uint8_t* v = reinterpret_cast<const std::uint8_t*>(q.q);
  std::int8_t* panel = reinterpret_cast<std::int8_t*>(scratch);
  float* fp = reinterpret_cast<float*>(scratch + pr_256 * kc_256);
  std::int32_t* wc = reinterpret_cast<std::int32_t*>(scratch + pr_256 * kc_256 + pr_256 * (kc_256 / seg) * 4);
  for (std::size_t rb = r0; rb < r1; rb += pr_256) {
    const std::size_t nr = std::min(pr_256, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += kc_256) {
      const std::size_t kc = std::min(kc_256, K - k0), s0 = k0 / seg;
      decode_panel_256(w, rb, nr, k0, kc, panel, fp, wc);
      for (std::size_t t0 = 0; t0 < n_tok; t0 += tt_256)
        micro_256i_any(std::min(tt_256, n_tok - t0), panel, fp, wc, kc / seg, v + t0 * K + k0, q.h + t0 * S + s0, K,
                       S, y + t0 * ldy + rb, ldy, nr, k0 == 0);
    }
  }
}
// The AVX2 int8 row: nvfp4 and mxfp4 weights.
SLM_INLINE mm::kernel_row avx2_int8_row(weight_format f) noexcept {
  mm::kernel_row k;
  k.name = "avx2_int8";
  if (f == weight_format::nvfp4) mm::set_gemv_streams<gemv_k256<true>::k>(k);
  else mm::set_gemv_streams<gemv_k256<false>::k>(k);
  k.gemv_prepare = &prepare_gemv_256;
  k.gemv_bytes = &gemv_bytes_256;
  k.gemm = &gemm_256i;
  k.gemm_prepare = &prepare_gemm_256;
  k.gemm_bytes = &gemm_bytes;
  k.gemm_scratch = gemm_scratch_256;
  return k;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm::detail::w4a8

#endif  // SLM_X86
