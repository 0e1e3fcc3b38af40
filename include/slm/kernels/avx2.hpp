// slm/kernels/avx2.hpp - the AVX2 (+FMA, F16C) kernels with f32 activations: a fused GEMV
// for f32, bf16, f16, nvfp4 and mxfp4 weights and the 16-row panel GEMM for every format
// (kernels/matmul.hpp's file comment describes both). Their table row: avx2_row().
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "slm/kernels/reference.hpp"

#ifdef SLM_X86
#if SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER  // the kernels; hsum_256 for kernels/attention_ops.hpp
#include "slm/kernels/x86_intrinsics.hpp"
#endif
#define SLM_MM_AVX2 __attribute__((target("avx2,fma,f16c")))

namespace slm::detail::mm {

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER  // also used by layers/attention.hpp's kernels
// Horizontal sum in a fixed order.
SLM_MM_AVX2 inline float hsum_256(__m256 v) noexcept {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}
#endif  // SLM_DEFINE_KERNELS || SLM_DEFINE_DECODER

#if SLM_DEFINE_KERNELS  // kernel templates and helpers: only the kernels unit instantiates them

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

// nvfp4 / mxfp4 fused GEMV over nblk blocks of R rows: block b holds rows r + b adv + i dr
// (i < R) and writes y at the same offsets from r (dr = 1, adv = R: neighbouring rows;
// adv = 1: R streams, kernels/kernel_row.hpp's gemv_streams).
template <int R, bool NV>
SLM_MM_AVX2 void gemv_fp4_256(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y,
                              std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, groups = K / 32;
  const float* e4m3 = e4m3_table.data();
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
        sum += fp4_dot_scalar(codes[i] + k / 2, x + k, 16) * block_factor(w, r + static_cast<std::size_t>(i) * dr, k);
      }
      y[static_cast<std::size_t>(i) * dr] = sum;
    }
  }
}

// f32 / bf16 / f16 fused GEMV, natural order, 16 columns per step; blocks of rows as
// gemv_fp4_256.
template <int R, weight_format F>
SLM_MM_AVX2 void gemv_f_256(const weight_matrix& w, std::size_t r, const float* x, const float*, float* y,
                            std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, groups = K / 16;
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* row[R];
    __m256 acc[R], acc2[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      row[i] = w.data + (r + static_cast<std::size_t>(i) * dr) * w.row_stride;
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
        } else {  // two 16-byte loads, each widened from memory (from one 32-byte load and an
                  // extract, g++'s code ran at half this rate)
          const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[i] + 32 * j));
          const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row[i] + 32 * j + 16));
          w0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v0), 16));
          w1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v1), 16));
        }
        acc[i] = _mm256_fmadd_ps(w0, x0, acc[i]);
        acc2[i] = _mm256_fmadd_ps(w1, x1, acc2[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      float sum = hsum_256(_mm256_add_ps(acc[i], acc2[i]));
      for (std::size_t k = groups * 16; k < K; ++k) sum += x[k] * element(w.format, row[i], k);
      y[static_cast<std::size_t>(i) * dr] = w.global == 1.0f ? sum : sum * w.global;
    }
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
// dst[c * ldd + r] = src[r * lds + c] for an 8 x 8 block.
SLM_MM_AVX2 inline void transpose_8x8_256(const float* src, std::size_t lds, float* dst, std::size_t ldd) noexcept {
  __m256 r[8], t[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + static_cast<std::size_t>(i) * lds);
#pragma GCC unroll 4
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
#pragma GCC unroll 2
  for (int i = 0; i < 8; i += 4) {
    r[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    r[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    r[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    r[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + static_cast<std::size_t>(i) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x20));
    _mm256_storeu_ps(dst + static_cast<std::size_t>(i + 4) * ldd, _mm256_permute2f128_ps(r[i], r[i + 4], 0x31));
  }
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
  // Every loop over the accumulators is unrolled: otherwise g++ keeps them in memory and
  // stores all twelve at every k (a third of the FMA rate, measured).
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
    if (nr == 16) {  // the sums of the element loop below, 8 at a time
      _mm256_storeu_ps(yt, first ? a0[t] : _mm256_add_ps(_mm256_loadu_ps(yt), a0[t]));
      _mm256_storeu_ps(yt + 8, first ? a1[t] : _mm256_add_ps(_mm256_loadu_ps(yt + 8), a1[t]));
      continue;
    }
    alignas(32) float tmp[16];
    _mm256_store_ps(tmp, a0[t]);
    _mm256_store_ps(tmp + 8, a1[t]);
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
      // The rows decoded into tmp [PR, kc], then transposed into the panel [kc, PR].
      for (std::size_t i = 0; i < PR; ++i) {
        if (i < nr) decode_row_256(w, rb + i, k0, kc, tmp + i * gemm_kc);
        else std::memset(tmp + i * gemm_kc, 0, kc * sizeof(float));
      }
      std::size_t k = 0;
      for (; k + 8 <= kc; k += 8)
        for (std::size_t i = 0; i < PR; i += 8) transpose_8x8_256(tmp + i * gemm_kc + k, gemm_kc, panel + k * PR + i, PR);
      for (; k < kc; ++k)
        for (std::size_t i = 0; i < PR; ++i) panel[k * PR + i] = tmp[i * gemm_kc + k];
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

#if SLM_DEFINE_KERNELS
template <bool NV> struct fp4_256 { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float* x, const std::byte*, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_fp4_256<R, NV>(w, r, x, nullptr, y, nblk, dr, adv);
  }
}; };
template <weight_format F> struct f_256 { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float* x, const std::byte*, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_f_256<R, F>(w, r, x, nullptr, y, nblk, dr, adv);
  }
}; };

SLM_MM_AVX2 SLM_INLINE void gemm_256(const weight_matrix& w, const acts& a, std::size_t n_tok, float* y,
                                     std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  float* panel = reinterpret_cast<float*>(scratch);
  gemm_rows_256(w, a.x, n_tok, a.ldx, y, ldy, r0, r1, panel, panel + 16 * gemm_kc);  // tmp: [16, kc]
}

// The AVX2 row for f32 activations (the scratch is sized as AVX-512's, as before).
SLM_INLINE kernel_row avx2_row(weight_format f) noexcept {
  kernel_row k;
  k.name = "avx2";
  k.gemm = &gemm_256;
  k.gemm_scratch = panel_scratch;
  switch (f) {
    case weight_format::nvfp4: set_gemv_streams<fp4_256<true>::k>(k); break;
    case weight_format::mxfp4: set_gemv_streams<fp4_256<false>::k>(k); break;
    case weight_format::bf16: set_gemv_streams<f_256<weight_format::bf16>::k>(k); break;
    case weight_format::f32: set_gemv_streams<f_256<weight_format::f32>::k>(k); break;
    case weight_format::f16: set_gemv_streams<f_256<weight_format::f16>::k>(k); break;
    case weight_format::fp8_e4m3: break;
  }
  return k;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm::detail::mm

#endif  // SLM_X86
