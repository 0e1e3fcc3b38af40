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
//   dot_k, axpy_k      the reference or AVX-512, chosen at compile time by the caller's
//                      Simd flag (attend() picks it once per call from the CPU).
// Each is memory-bound for one query (2 FLOP per cached element read); the attention layer
// is what makes many queries share a key row.
// Compiled where attention is: header-only mode and the library's decoder unit.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "slm/core/numeric.hpp"
#include "slm/kernels/avx512.hpp"

#if SLM_DEFINE_DECODER
#ifdef SLM_X86
#include <immintrin.h>
#endif

namespace slm::detail::attn {

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
#endif

// Which kernels one_query uses: the scalar reference, or AVX-512 where the CPU has it.
template <class E, bool Simd>
inline float dot_k(const float* q, const E* k, std::size_t n) noexcept {
#ifdef SLM_X86
  if constexpr (Simd) return dot_512(q, k, n);
#endif
  return dot(q, k, n);
}
template <class E, bool Simd>
inline void axpy_k(float* acc, float e, const E* v, std::size_t n) noexcept {
#ifdef SLM_X86
  if constexpr (Simd) return axpy_512(acc, e, v, n);
#endif
  axpy(acc, e, v, n);
}

}  // namespace slm::detail::attn

#endif  // SLM_DEFINE_DECODER
