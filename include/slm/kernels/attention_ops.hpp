// slm/kernels/attention_ops.hpp - the vector kernels of attention (layers/attention.hpp): one
// query row against one cached key row (dot) and the weighted sum of value rows (axpy),
// over f32 or bf16 cache storage.
//
//   dot(q, k, n)       sum_i q[i] k[i], in order: the scalar reference
//   axpy(acc, e, v, n) acc[i] += e v[i]
//   dot_512, axpy_512  AVX-512: 16-lane FMAs, two accumulators for dot, masked tails, bf16
//                      widened by a shift; they differ from the reference only in the
//                      summation order (test_attention_kernels.cpp sweeps head sizes around
//                      the 16- and 32-lane boundaries and misaligned rows against it)
//   dot_256, axpy_256  AVX2 + FMA: the same with 8-lane FMAs (two accumulators for dot),
//                      tails of fewer than 8 elements in order after the lane sum
//   dot_k, axpy_k      the reference, AVX2 or AVX-512, chosen at compile time by the
//                      caller's vec_isa (attend() picks it once per call from the CPU).
// Each is memory-bound for one query (2 FLOP per cached element read); the attention layer
// is what makes many queries share a key row.
// Compiled where attention is: header-only mode and the library's decoder unit.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "slm/core/numeric.hpp"
#include "slm/kernels/avx2.hpp"
#include "slm/kernels/avx512.hpp"

#if SLM_DEFINE_DECODER
#ifdef SLM_X86
#include <immintrin.h>
#endif

namespace slm::detail::attn {

// The kernels one_query runs.
enum class vec_isa { scalar, avx2, avx512 };

template <class E> inline float ld(const E* p, std::size_t i) noexcept {
  if constexpr (std::is_same_v<E, float>) return p[i];
  else return bf16_to_f32(p[i]);
}

// The reference: one sum, in order.
template <class E>
inline float dot(const float* q, const E* k, std::size_t n) noexcept {
  float s = 0;
  for (std::size_t i = 0; i < n; ++i) s += q[i] * ld(k, i);
  return s;
}
template <class E>
inline void axpy(float* acc, float e, const E* v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) acc[i] += e * ld(v, i);
}

#ifdef SLM_X86
#define SLM_ATTN_AVX512 SLM_MM_AVX512  // the matmul kernels' feature set, so their helpers inline here
// The fast path: 16-lane FMAs (two accumulators), masked tails; bf16 widened by a shift.
template <class E>
SLM_ATTN_AVX512 inline __m512 load16(const E* p, __mmask16 m) noexcept {
  if constexpr (std::is_same_v<E, float>) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    // The maskz forms: gcc 12 warns (falsely) about the unmasked forms' undefined source.
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(m, _mm512_maskz_cvtepu16_epi32(m, h), 16));
  }
}
template <class E>
SLM_ATTN_AVX512 inline float dot_512(const float* q, const E* k, std::size_t n) noexcept {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(k + i, 0xFFFF), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(q + i + 16), load16(k + i + 16, 0xFFFF), a1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, q + i), load16(k + i, m), a0);
  }
  return detail::mm::hsum_512(_mm512_add_ps(a0, a1));  // fixed order; no GCC 105593 warning
}
template <class E>
SLM_ATTN_AVX512 inline void axpy_512(float* acc, float e, const E* v, std::size_t n) noexcept {
  const __m512 ev = _mm512_set1_ps(e);
  for (std::size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(acc + i, m, _mm512_fmadd_ps(ev, load16(v + i, m), _mm512_maskz_loadu_ps(m, acc + i)));
  }
}

#define SLM_ATTN_AVX2 SLM_MM_AVX2
// AVX2: 8-lane FMAs (two accumulators), the last n % 8 elements in order; bf16 widened by
// a shift.
template <class E>
SLM_ATTN_AVX2 inline __m256 load8(const E* p) noexcept {
  if constexpr (std::is_same_v<E, float>) {
    return _mm256_loadu_ps(p);
  } else {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
  }
}
template <class E>
SLM_ATTN_AVX2 inline float dot_256(const float* q, const E* k, std::size_t n) noexcept {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i + 8), load8(k + i + 8), a1);
  }
  if (i + 8 <= n) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), load8(k + i), a0);
    i += 8;
  }
  float s = detail::mm::hsum_256(_mm256_add_ps(a0, a1));
  for (; i < n; ++i) s += q[i] * ld(k, i);
  return s;
}
template <class E>
SLM_ATTN_AVX2 inline void axpy_256(float* acc, float e, const E* v, std::size_t n) noexcept {
  const __m256 ev = _mm256_set1_ps(e);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(ev, load8(v + i), _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += e * ld(v, i);
}
#endif

// Which kernels one_query uses: the scalar reference, AVX2 or AVX-512 as the CPU has them.
template <class E, vec_isa V>
inline float dot_k(const float* q, const E* k, std::size_t n) noexcept {
#ifdef SLM_X86
  if constexpr (V == vec_isa::avx512) return dot_512(q, k, n);
  if constexpr (V == vec_isa::avx2) return dot_256(q, k, n);
#endif
  return dot(q, k, n);
}
template <class E, vec_isa V>
inline void axpy_k(float* acc, float e, const E* v, std::size_t n) noexcept {
#ifdef SLM_X86
  if constexpr (V == vec_isa::avx512) return axpy_512(acc, e, v, n);
  if constexpr (V == vec_isa::avx2) return axpy_256(acc, e, v, n);
#endif
  axpy(acc, e, v, n);
}

}  // namespace slm::detail::attn

#endif  // SLM_DEFINE_DECODER
