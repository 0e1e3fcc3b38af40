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
//   block_512, block_256 the blocked kernels (below): one query row against a block of 16
//                      keys, with exp_512 / exp_256 (a polynomial exp within 2 ulp) and
//                      the online-softmax update; attend() runs tiles of rows over each block.
// Roofline. One query alone is memory-bound: 2 FLOP per cached element read, so a row
// streaming its context from L2 (0.5 FLOP a byte in f32) cannot use the FMA units. The
// tiles make up to 16 rows (one KV group's heads over consecutive tokens) share each block
// while it is in L1: prefill at 512 tokens then reaches 0.14-0.18 of the FMA probe on 2
// Xeon cores (bench/README.md, "Attention"), and one decode query per group reads the
// cache once for the group's heads (0.5-0.6 of the read probe at 4096 positions). What is
// left in prefill is per-block work outside the products (reduction, exp, masks: about a
// quarter) and the products' own loads; a Q x K^T on transposed keys is the next step.
// Compiled where attention is: header-only mode and the library's decoder unit.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "slm/core/numeric.hpp"
#include "slm/kernels/avx2.hpp"
#include "slm/kernels/avx512.hpp"

#if SLM_DEFINE_DECODER
#ifdef SLM_X86
#include "slm/kernels/x86_intrinsics.hpp"
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

// ---- Blocked kernels: one query row against 16 keys at a time ----
//
// A row's keys are taken in blocks of 16 aligned to absolute key index (j0 = 0, 16, 32,
// ...), of which [a, b) are visible to the row. Per block: the 16 scores as one vector
// (each key's dot product in its own accumulator, the 16 reduced together), the block's
// maximum, the online-softmax rescale when it rises, p = exp(s - m) for the 16 lanes
// (a vector exp, masked lanes exactly 0), l += the lane sum of p, and acc += sum_j p_j v_j
// over the visible keys in order, acc held in registers 64 (AVX-512) or 32 (AVX2) values
// at a time. Everything a block does depends on the row's own inputs and position only,
// so a row gives the same bits whatever else is in the call: a prompt and the decode steps
// that replay it agree exactly. Needs d1, d2 and dv multiples of 4 vector widths (64 floats
// on AVX-512, 32 on AVX2: every published head size); other sizes, and DSA's per-query key
// lists, run the per-key kernels above. Against the scalar reference the sums run in
// another order and the exp is a polynomial (within 2 ulp over the range that matters):
// the attention test bounds the difference.
struct block_args {
  const void* k1 = nullptr; std::size_t tok1 = 0, d1 = 0;  // keys' first part: row j at k1 + j tok1
  const void* k2 = nullptr; std::size_t tok2 = 0, d2 = 0;  // optional second part (null: none)
  const void* v = nullptr; std::size_t vtok = 0, dv = 0;
  const void* zeros = nullptr;  // max(d1, d2) zero elements: the rows of the keys not visible
  float scale = 1.0f;
};
struct row_state {
  float m, l;  // running maximum and sum of the online softmax
};

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

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push  // GCC bug 105593: false warnings from the intrinsics' undefined pass-through operands
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// kp[i] = key row j0 + i of the part at `base` (tok apart) where [a, b) holds it, else the
// zero row: a key outside the row's range scores 0 and is masked after.
template <class E, std::size_t N>
inline void key_rows(const void* base, std::size_t tok, std::size_t j0, std::size_t a, std::size_t b, const void* zeros,
                     const E* (&kp)[N]) noexcept {
  const E* k = static_cast<const E*>(base);
  for (std::size_t i = 0; i < N; ++i) kp[i] = j0 + i >= a && j0 + i < b ? k + (j0 + i) * tok : static_cast<const E*>(zeros);
}

// The cache rows are a position's every head (kv_rows: [positions, heads x head size]),
// so one head's consecutive keys are a whole row apart, each on another 4 KiB page, where
// the hardware prefetchers do not follow. Into L1 ahead of use: this block's value rows
// (the scores come first) and the next block's key rows.
template <class E>
inline void prefetch_rows(const E* base, std::size_t tok, std::size_t d, std::size_t j, std::size_t j1) noexcept {
  for (; j < j1; ++j)
    for (std::size_t i = 0; i < d * sizeof(E); i += 64)
      _mm_prefetch(reinterpret_cast<const char*>(base + j * tok) + i, _MM_HINT_T0);
}
template <class E>
inline void prefetch_block(const block_args& x, std::size_t j0, std::size_t a, std::size_t b) noexcept {
  prefetch_rows(static_cast<const E*>(x.v), x.vtok, x.dv, a, b);
  // (Past the row's last key these are hints to addresses that may not be the cache's:
  // a prefetch never faults.)
  prefetch_rows(static_cast<const E*>(x.k1), x.tok1, x.d1, j0 + 16, j0 + 32);
  if (x.k2) prefetch_rows(static_cast<const E*>(x.k2), x.tok2, x.d2, j0 + 16, j0 + 32);
}

// exp(x) for x <= 0 (and NaN, which stays NaN): x clamped to -86 (below it the result,
// under 3e-38, is kept normal instead of flushed: a softmax term that small is one part in
// 1e37 of the row's sum, whose largest term is 1), Cody-Waite reduction by ln 2 and a degree-6
// polynomial on [-ln2/2, ln2/2] (Cephes' expf coefficients), scaled by 2^n.
inline constexpr float exp_lo = -86.0f, exp_log2e = 1.44269504088896341f, exp_c1 = 0.693359375f,
                       exp_c2 = -2.12194440e-4f;
inline constexpr float exp_p[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                   4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

SLM_ATTN_AVX512 inline __m512 exp_512(__m512 x) noexcept {
  x = _mm512_max_ps(_mm512_set1_ps(exp_lo), x);  // the second operand when either is NaN: NaN stays
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(exp_log2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_c1), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(exp_c2), r);
  __m512 y = _mm512_set1_ps(exp_p[0]);
  for (int i = 1; i < 6; ++i) y = _mm512_fmadd_ps(y, r, _mm512_set1_ps(exp_p[i]));
  y = _mm512_fmadd_ps(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(y, n);
}

SLM_ATTN_AVX512 inline void exp_n_512(const float* x, float* y, std::size_t n) noexcept {
  for (std::size_t i = 0; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, exp_512(_mm512_loadu_ps(x + i)));
}

SLM_ATTN_AVX512 inline float hmax_512(__m512 v) noexcept {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm512_cvtss_f32(v);
}

// s[i] lane sums -> one vector, lane i = sum of s[i]'s lanes (a fixed tree: pairs of 256-bit
// halves, 128-bit lanes, then within lanes; one permute puts key i in lane i).
SLM_ATTN_AVX512 __attribute__((always_inline)) inline __m512 reduce16_512(const __m512 s[16]) noexcept {
  __m512 r[8], u[4], w[2];
  for (int k = 0; k < 8; ++k)  // lanes 0-7: key 2k folded to 8, lanes 8-15: key 2k + 1
    r[k] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(s[2 * k], s[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int k = 0; k < 4; ++k)  // 128-bit lane L: key 4k + L folded to 4
    u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(r[2 * k], r[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(r[2 * k], r[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int k = 0; k < 2; ++k)  // lane L: [key 8k + L, key 8k + 4 + L] folded to 2 each, interleaved
    w[k] = _mm512_add_ps(_mm512_unpacklo_ps(u[2 * k], u[2 * k + 1]), _mm512_unpackhi_ps(u[2 * k], u[2 * k + 1]));
  const __m512d w0 = _mm512_castps_pd(w[0]), w1 = _mm512_castps_pd(w[1]);
  const __m512 f = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(w0, w1)),
                                 _mm512_castpd_ps(_mm512_unpackhi_pd(w0, w1)));  // lane 4L + m: key L + 4m
  return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), f);
}

// s[i] += q . k_i over d (a multiple of 64) for the 16 rows kp[i].
template <class E>
SLM_ATTN_AVX512 __attribute__((always_inline)) inline void scores_part_512(const float* q, const E* const kp[16], std::size_t d, __m512 s[16]) noexcept {
  for (std::size_t c = 0; c < d; c += 64) {
    const __m512 q0 = _mm512_loadu_ps(q + c), q1 = _mm512_loadu_ps(q + c + 16);
    const __m512 q2 = _mm512_loadu_ps(q + c + 32), q3 = _mm512_loadu_ps(q + c + 48);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      const E* k = kp[i] + c;
      s[i] = _mm512_fmadd_ps(q0, load16(k, 0xFFFF), s[i]);
      s[i] = _mm512_fmadd_ps(q1, load16(k + 16, 0xFFFF), s[i]);
      s[i] = _mm512_fmadd_ps(q2, load16(k + 32, 0xFFFF), s[i]);
      s[i] = _mm512_fmadd_ps(q3, load16(k + 48, 0xFFFF), s[i]);
    }
  }
}

// One block j0 .. j0 + 15 of one row (q1, q2), visible keys [a, b): see above.
template <class E>
SLM_ATTN_AVX512 void block_512(const block_args& x, const float* q1, const float* q2, std::size_t j0, std::size_t a,
                               std::size_t b, float* acc, row_state& st) noexcept {
  __m512 s[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) s[i] = _mm512_setzero_ps();
  const E* kp[16];
  key_rows(x.k1, x.tok1, j0, a, b, x.zeros, kp);
  scores_part_512<E>(q1, kp, x.d1, s);  // [16 keys, d1] x [d1] -> [16] partial sums
  if (x.k2) {
    key_rows(x.k2, x.tok2, j0, a, b, x.zeros, kp);
    scores_part_512<E>(q2, kp, x.d2, s);
  }
  const __mmask16 vis = static_cast<__mmask16>(((1u << (b - j0)) - 1u) & ~((1u << (a - j0)) - 1u));
  const __m512 sv = _mm512_mask_blend_ps(vis, _mm512_set1_ps(-std::numeric_limits<float>::infinity()),
                                         _mm512_mul_ps(reduce16_512(s), _mm512_set1_ps(x.scale)));
  const float bm = hmax_512(sv);
  if (bm > st.m) {  // a new maximum: rescale what has been accumulated
    const float c = std::exp(st.m - bm);
    st.l *= c;
    const __m512 cv = _mm512_set1_ps(c);
    for (std::size_t i = 0; i < x.dv; i += 16) _mm512_storeu_ps(acc + i, _mm512_mul_ps(cv, _mm512_loadu_ps(acc + i)));
    st.m = bm;
  }
  const __m512 pv = _mm512_maskz_mov_ps(vis, exp_512(_mm512_sub_ps(sv, _mm512_set1_ps(st.m))));
  st.l += detail::mm::hsum_512(pv);
  alignas(64) float pj[16];
  _mm512_store_ps(pj, pv);
  const E* v = static_cast<const E*>(x.v);
  std::size_t c = 0;
  for (; c + 128 <= x.dv; c += 128) {  // [keys] x [keys, dv] -> [dv], 128 values at a time: 8 chains
    __m512 o[8];
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) o[u] = _mm512_loadu_ps(acc + c + 16 * u);
    for (std::size_t j = a; j < b; ++j) {
      const __m512 e = _mm512_set1_ps(pj[j - j0]);
      const E* vj = v + j * x.vtok + c;
#pragma GCC unroll 8
      for (int u = 0; u < 8; ++u) o[u] = _mm512_fmadd_ps(e, load16(vj + 16 * u, 0xFFFF), o[u]);
    }
#pragma GCC unroll 8
    for (int u = 0; u < 8; ++u) _mm512_storeu_ps(acc + c + 16 * u, o[u]);
  }
  for (; c < x.dv; c += 64) {  // then 64 at a time
    __m512 o0 = _mm512_loadu_ps(acc + c), o1 = _mm512_loadu_ps(acc + c + 16);
    __m512 o2 = _mm512_loadu_ps(acc + c + 32), o3 = _mm512_loadu_ps(acc + c + 48);
    for (std::size_t j = a; j < b; ++j) {
      const __m512 e = _mm512_set1_ps(pj[j - j0]);
      const E* vj = v + j * x.vtok + c;
      o0 = _mm512_fmadd_ps(e, load16(vj, 0xFFFF), o0);
      o1 = _mm512_fmadd_ps(e, load16(vj + 16, 0xFFFF), o1);
      o2 = _mm512_fmadd_ps(e, load16(vj + 32, 0xFFFF), o2);
      o3 = _mm512_fmadd_ps(e, load16(vj + 48, 0xFFFF), o3);
    }
    _mm512_storeu_ps(acc + c, o0);
    _mm512_storeu_ps(acc + c + 16, o1);
    _mm512_storeu_ps(acc + c + 32, o2);
    _mm512_storeu_ps(acc + c + 48, o3);
  }
}

// AVX2: the same block, the scores as two vectors of 8 keys, acc 32 values at a time.
SLM_ATTN_AVX2 inline __m256 exp_256(__m256 x) noexcept {
  x = _mm256_max_ps(_mm256_set1_ps(exp_lo), x);  // NaN stays NaN
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(exp_log2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_c1), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(exp_c2), r);
  __m256 y = _mm256_set1_ps(exp_p[0]);
  for (int i = 1; i < 6; ++i) y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(exp_p[i]));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(e));  // n >= -124: 2^n is a normal float
}

SLM_ATTN_AVX2 inline void exp_n_256(const float* x, float* y, std::size_t n) noexcept {
  for (std::size_t i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp_256(_mm256_loadu_ps(x + i)));
}

SLM_ATTN_AVX2 inline float hmax_256(__m256 v) noexcept {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// s[i] lane sums -> lane i (128-bit halves, then within lanes; one permute).
SLM_ATTN_AVX2 __attribute__((always_inline)) inline __m256 reduce8_256(const __m256 s[8]) noexcept {
  __m256 r[4], w[2];
  for (int k = 0; k < 4; ++k)  // lanes 0-3: key 2k folded to 4, lanes 4-7: key 2k + 1
    r[k] = _mm256_add_ps(_mm256_permute2f128_ps(s[2 * k], s[2 * k + 1], 0x20),
                         _mm256_permute2f128_ps(s[2 * k], s[2 * k + 1], 0x31));
  for (int k = 0; k < 2; ++k)  // 128-bit lane L: [key 4k + L, key 4k + 2 + L] folded to 2 each, interleaved
    w[k] = _mm256_add_ps(_mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]), _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]));
  const __m256d w0 = _mm256_castps_pd(w[0]), w1 = _mm256_castps_pd(w[1]);
  const __m256 f = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(w0, w1)),
                                 _mm256_castpd_ps(_mm256_unpackhi_pd(w0, w1)));  // lane 4L + m: key L + 2m
  return _mm256_permutevar8x32_ps(f, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

template <class E>
SLM_ATTN_AVX2 __attribute__((always_inline)) inline void scores_part_256(const float* q, const E* const kp[8], std::size_t d, __m256 s[8]) noexcept {
  for (std::size_t c = 0; c < d; c += 32) {
    const __m256 q0 = _mm256_loadu_ps(q + c), q1 = _mm256_loadu_ps(q + c + 8);
    const __m256 q2 = _mm256_loadu_ps(q + c + 16), q3 = _mm256_loadu_ps(q + c + 24);
#pragma GCC unroll 8
    for (int i = 0; i < 8; ++i) {
      const E* k = kp[i] + c;
      s[i] = _mm256_fmadd_ps(q0, load8(k), s[i]);
      s[i] = _mm256_fmadd_ps(q1, load8(k + 8), s[i]);
      s[i] = _mm256_fmadd_ps(q2, load8(k + 16), s[i]);
      s[i] = _mm256_fmadd_ps(q3, load8(k + 24), s[i]);
    }
  }
}

// The 8 scores of keys j0 + 8 h .. j0 + 8 h + 7 (before the scale).
template <class E>
SLM_ATTN_AVX2 inline __m256 scores8_256(const block_args& x, const float* q1, const float* q2, std::size_t j0,
                                        std::size_t a, std::size_t b) noexcept {
  __m256 s[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) s[i] = _mm256_setzero_ps();
  const E* kp[8];
  key_rows(x.k1, x.tok1, j0, a, b, x.zeros, kp);
  scores_part_256<E>(q1, kp, x.d1, s);  // [8 keys, d1] x [d1] -> [8] partial sums
  if (x.k2) {
    key_rows(x.k2, x.tok2, j0, a, b, x.zeros, kp);
    scores_part_256<E>(q2, kp, x.d2, s);
  }
  return reduce8_256(s);
}

template <class E>
SLM_ATTN_AVX2 void block_256(const block_args& x, const float* q1, const float* q2, std::size_t j0, std::size_t a,
                             std::size_t b, float* acc, row_state& st) noexcept {
  const std::uint32_t vis = ((1u << (b - j0)) - 1u) & ~((1u << (a - j0)) - 1u);
  const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
  const __m256 ninf = _mm256_set1_ps(-std::numeric_limits<float>::infinity()), sc = _mm256_set1_ps(x.scale);
  __m256 sv[2], keep[2];
  for (int h = 0; h < 2; ++h) {
    const std::size_t o = 8 * static_cast<std::size_t>(h);
    keep[h] = _mm256_castsi256_ps(_mm256_cmpeq_epi32(
        _mm256_and_si256(_mm256_set1_epi32(static_cast<int>(vis >> o)), bit), bit));
    sv[h] = ninf;
    if ((vis >> o) & 0xFFu)
      sv[h] = _mm256_blendv_ps(ninf, _mm256_mul_ps(scores8_256<E>(x, q1, q2, j0 + o, a, b), sc), keep[h]);
  }
  const float bm = hmax_256(_mm256_max_ps(sv[0], sv[1]));
  if (bm > st.m) {  // a new maximum: rescale what has been accumulated
    const float c = std::exp(st.m - bm);
    st.l *= c;
    const __m256 cv = _mm256_set1_ps(c);
    for (std::size_t i = 0; i < x.dv; i += 8) _mm256_storeu_ps(acc + i, _mm256_mul_ps(cv, _mm256_loadu_ps(acc + i)));
    st.m = bm;
  }
  const __m256 mv = _mm256_set1_ps(st.m);
  const __m256 p0 = _mm256_and_ps(keep[0], exp_256(_mm256_sub_ps(sv[0], mv)));
  const __m256 p1 = _mm256_and_ps(keep[1], exp_256(_mm256_sub_ps(sv[1], mv)));
  st.l += detail::mm::hsum_256(_mm256_add_ps(p0, p1));
  alignas(32) float pj[16];
  _mm256_store_ps(pj, p0);
  _mm256_store_ps(pj + 8, p1);
  const E* v = static_cast<const E*>(x.v);
  for (std::size_t c = 0; c < x.dv; c += 32) {  // [keys] x [keys, dv] -> [dv], 32 values at a time
    __m256 o0 = _mm256_loadu_ps(acc + c), o1 = _mm256_loadu_ps(acc + c + 8);
    __m256 o2 = _mm256_loadu_ps(acc + c + 16), o3 = _mm256_loadu_ps(acc + c + 24);
    for (std::size_t j = a; j < b; ++j) {
      const __m256 e = _mm256_set1_ps(pj[j - j0]);
      const E* vj = v + j * x.vtok + c;
      o0 = _mm256_fmadd_ps(e, load8(vj), o0);
      o1 = _mm256_fmadd_ps(e, load8(vj + 8), o1);
      o2 = _mm256_fmadd_ps(e, load8(vj + 16), o2);
      o3 = _mm256_fmadd_ps(e, load8(vj + 24), o3);
    }
    _mm256_storeu_ps(acc + c, o0);
    _mm256_storeu_ps(acc + c + 8, o1);
    _mm256_storeu_ps(acc + c + 16, o2);
    _mm256_storeu_ps(acc + c + 24, o3);
  }
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
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

// The blocked kernels' vector width in floats (0: none, the per-key kernels run), and
// whether a problem's sizes suit them (multiples of 4 widths).
template <vec_isa V>
inline constexpr std::size_t block_width = V == vec_isa::avx512 ? 16 : V == vec_isa::avx2 ? 8 : 0;

// Prefetches for a block that a tile of rows is about to take (prefetch_block).
template <class E, vec_isa V>
inline void prefetch_k(const block_args& x, std::size_t j0, std::size_t a, std::size_t b) noexcept {
#ifdef SLM_X86
  if constexpr (V != vec_isa::scalar) prefetch_block<E>(x, j0, a, b);
#endif
  (void)x, (void)j0, (void)a, (void)b;
}

template <class E, vec_isa V>
inline void block_k(const block_args& x, const float* q1, const float* q2, std::size_t j0, std::size_t a,
                    std::size_t b, float* acc, row_state& st) noexcept {
#ifdef SLM_X86
  if constexpr (V == vec_isa::avx512) return block_512<E>(x, q1, q2, j0, a, b, acc, st);
  if constexpr (V == vec_isa::avx2) return block_256<E>(x, q1, q2, j0, a, b, acc, st);
#endif
  (void)x, (void)q1, (void)q2, (void)j0, (void)a, (void)b, (void)acc, (void)st;
}

}  // namespace slm::detail::attn

#endif  // SLM_DEFINE_DECODER
