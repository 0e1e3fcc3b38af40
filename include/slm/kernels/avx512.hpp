// slm/kernels/avx512.hpp - the AVX-512 (F+BW+VL+DQ) kernels with f32 activations: a fused
// GEMV for f32, bf16, f16, nvfp4 and mxfp4 weights and the panel GEMM for every format
// (kernels/matmul.hpp's file comment describes both). Their table row: avx512_row().
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "slm/kernels/reference.hpp"

#ifdef SLM_X86
#if SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER  // the kernels; hsum_512 for kernels/attention_ops.hpp
#include "slm/kernels/x86_intrinsics.hpp"
#endif
#define SLM_MM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c,bmi,bmi2")))

namespace slm::detail::mm {

// GCC 12's AVX-512 intrinsics pass an uninitialised "undefined" vector as the unused
// merge operand, and -Wuninitialized reports it once inlined (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
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

// nvfp4 / mxfp4 fused GEMV over nblk blocks of R rows: block b holds rows r + b adv + i dr
// (i < R) and writes y at the same offsets from r (dr = 1, adv = R: neighbouring rows;
// adv = 1: R streams, kernels/kernel_row.hpp's gemv_streams). xp: permuted x (whole groups).
// Per group of 32 columns and row: one widening load, one shift, two vpermps (E2M1 table
// lookups, even and odd columns), mul + fma against x, one fma with the block factors.
template <int R, bool NV>
SLM_MM_AVX512 void gemv_fp4_512(const weight_matrix& w, std::size_t r, const float* x, const float* xp,
                                float* y, std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const std::size_t ahead = prefetch_rows(adv);
  const std::size_t pc = ahead * w.row_stride, ps = ahead * w.scale_stride;
  const __m512 tbl = _mm512_loadu_ps(e2m1_table.data());
  const float g = w.global;
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* codes[R];
    const std::byte* sc[R];
    __m512 acc[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      codes[i] = w.data + (r + static_cast<std::size_t>(i) * dr) * w.row_stride;
      sc[i] = w.scales + (r + static_cast<std::size_t>(i) * dr) * w.scale_stride;
      acc[i] = _mm512_setzero_ps();
    }
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
        // The same line of the row `ahead` rows on: short rows give the hardware prefetcher
        // little time to lock on. Prefetches never fault.
        _mm_prefetch(reinterpret_cast<const char*>(cp + pc), _MM_HINT_T1);  // into L2, as bf16 below
        if ((j & 15) == 0) _mm_prefetch(reinterpret_cast<const char*>(sc[i] + (NV ? 2 : 1) * j + ps), _MM_HINT_T1);
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
        const std::size_t row = r + static_cast<std::size_t>(i) * dr;
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
        sum += fp4_dot_scalar(codes[i] + k / 2, x + k, 16) * block_factor(w, r + static_cast<std::size_t>(i) * dr, k);
      }
      y[static_cast<std::size_t>(i) * dr] = sum;
    }
  }
}

// bf16 fused GEMV: even columns are the low halves of each 32-bit lane, odd the high.
// nblk blocks of R rows: block b holds rows r + b adv + i dr (i < R) and writes y at the
// same offsets from r. dr = 1, adv = R: neighbouring rows (several tokens per row group);
// adv = 1 for R streams (kernels/kernel_row.hpp's gemv_streams).
template <int R>
SLM_MM_AVX512 void gemv_bf16_512(const weight_matrix& w, std::size_t r, const float* x, const float* xp,
                                 float* y, std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const std::size_t rs = dr * w.row_stride, pc = prefetch_rows(adv) * w.row_stride;
  const __m512i hi_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* rows = w.data + r * w.row_stride;  // row i of the block at rows + i rs
    __m512 acc[R], acc2[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm512_setzero_ps();
      acc2[i] = _mm512_setzero_ps();
    }
    for (std::size_t j = 0; j < groups; ++j) {
      const __m512 xe = _mm512_loadu_ps(xp + 32 * j), xo = _mm512_loadu_ps(xp + 32 * j + 16);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const std::byte* p = rows + static_cast<std::size_t>(i) * rs + 64 * j;
        const __m512i v = _mm512_loadu_si512(p);
        // Into L2 (T1), not L1: paired runs at K = 4096 measured 0.87-0.91 of the read probe
        // with T0 and 0.93-1.05 with T1 (L1 miss slots are the scarcer resource).
        _mm_prefetch(reinterpret_cast<const char*>(p + pc), _MM_HINT_T1);
        acc[i] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_slli_epi32(v, 16)), xe, acc[i]);
        acc2[i] = _mm512_fmadd_ps(_mm512_castsi512_ps(_mm512_and_si512(v, hi_mask)), xo, acc2[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const std::byte* row = rows + static_cast<std::size_t>(i) * rs;
      float sum = hsum_512(_mm512_add_ps(acc[i], acc2[i]));
      for (std::size_t k = groups * 32; k < K; ++k) sum += x[k] * bf16_to_f32(ld_u16(row + 2 * k));
      y[static_cast<std::size_t>(i) * dr] = w.global == 1.0f ? sum : sum * w.global;
    }
  }
}

// f32 / f16 fused GEMV, natural order, 32 columns per step; blocks of rows as gemv_fp4_512.
template <int R, bool F16>
SLM_MM_AVX512 void gemv_f_512(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y,
                              std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* row[R];
    __m512 acc[R], acc2[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      row[i] = w.data + (r + static_cast<std::size_t>(i) * dr) * w.row_stride;
      acc[i] = _mm512_setzero_ps();
      acc2[i] = _mm512_setzero_ps();
    }
    for (std::size_t j = 0; j < groups; ++j) {
      const __m512 x0 = _mm512_loadu_ps(x + 32 * j), x1 = _mm512_loadu_ps(x + 32 * j + 16);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        __m512 w0, w1;
        if constexpr (F16) {
          const auto* h = reinterpret_cast<const __m256i*>(row[i] + 64 * j);
          w0 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(h));
          w1 = _mm512_maskz_cvtph_ps(0xFFFF, _mm256_loadu_si256(h + 1));
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
      y[static_cast<std::size_t>(i) * dr] = w.global == 1.0f ? sum : sum * w.global;
    }
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
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#if SLM_DEFINE_KERNELS
template <bool NV> struct fp4_512 { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float* x, const std::byte* xp, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_fp4_512<R, NV>(w, r, x, reinterpret_cast<const float*>(xp), y, nblk, dr, adv);
  }
}; };
template <int R> struct bf16_512 {
  static void blocks(const weight_matrix& w, std::size_t r, const float* x, const std::byte* xp, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_bf16_512<R>(w, r, x, reinterpret_cast<const float*>(xp), y, nblk, dr, adv);
  }
};

template <bool F16> struct f_512 { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float* x, const std::byte*, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_f_512<R, F16>(w, r, x, nullptr, y, nblk, dr, adv);
  }
}; };

// x permuted for the GEMV kernels that read it so (fp4, bf16): K floats.
SLM_MM_AVX512 SLM_INLINE void prepare_512(const weight_matrix& w, const float* x, std::size_t, std::size_t,
                                          std::byte* out) noexcept {
  permute_x_512(x, w.cols, reinterpret_cast<float*>(out),
                w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4);
}
inline std::size_t permuted_bytes(std::size_t K, std::size_t) noexcept { return K * sizeof(float); }
SLM_MM_AVX512 SLM_INLINE void gemm_512(const weight_matrix& w, const acts& a, std::size_t n_tok, float* y,
                                       std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  float* panel = reinterpret_cast<float*>(scratch);
  gemm_rows_512(w, a.x, n_tok, a.ldx, y, ldy, r0, r1, panel, panel + 64 * gemm_kc);
}

// The AVX-512 row for f32 activations: the fused GEMV where the format has one (fp8:
// the panel path at every n_tok), the panel GEMM.
SLM_INLINE kernel_row avx512_row(weight_format f) noexcept {
  kernel_row k;
  k.name = "avx512";
  k.gemm = &gemm_512;
  k.gemm_scratch = panel_scratch;
  switch (f) {
    case weight_format::nvfp4: set_gemv_streams<fp4_512<true>::k>(k); break;
    case weight_format::mxfp4: set_gemv_streams<fp4_512<false>::k>(k); break;
    case weight_format::bf16: set_gemv_streams<bf16_512>(k); break;
    case weight_format::f32: set_gemv_streams<f_512<false>::k>(k); break;
    case weight_format::f16: set_gemv_streams<f_512<true>::k>(k); break;
    case weight_format::fp8_e4m3: break;
  }
  if (f == weight_format::nvfp4 || f == weight_format::mxfp4 || f == weight_format::bf16) {
    k.gemv_prepare = &prepare_512;
    k.gemv_bytes = &permuted_bytes;
  }
  return k;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm::detail::mm

#endif  // SLM_X86
