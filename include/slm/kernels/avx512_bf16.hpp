// slm/kernels/avx512_bf16.hpp - the bf16-activation path: weights dequantized exactly, activations
// rounded to bf16 once per call, products on AVX-512 BF16 (vdpbf16ps).
//
//   status matmul(w, x, n_tok, ldx, y, ldy, ex, which, activation_precision::bf16);
//   status matmul_bf16_activations(w, x, n_tok, ldx, y, ldy, ex, which = isa::best);
//
// The kernel API stays exact: the plain matmul() (kernels/matmul.hpp) keeps f32 activations and
// this path runs when a caller asks for it. The model layers ask for it by default for
// NVFP4/MXFP4 weights (compute_context::quantized_activations, layers/linear.hpp), and for
// bf16 weights when the host opts in (compute_context::dense_activations). It is "W4A16"
// as GPU inference stacks use the word (4-bit weights, 16-bit activations). nvfp4, mxfp4 and bf16 weights have
// kernels; other formats ignore the request and run matmul() (exact f32 math).
//
// Definition: y = W · bf16(x), where
//   bf16(x)  rounds every activation to the nearest bf16, ties to even, once per call;
//            f32 subnormals become a signed zero (what vcvtneps2bf16 does, and what
//            vdpbf16ps would do to them anyway: it treats bf16 subnormals as zero).
//   W        the exact dequantized weights of kernels/matmul.hpp (element x block scale x global).
//   ·        products and sums in f32, in a kernel-specific order.
// Every product of an E2M1 element (or a bf16 weight, or E2M1 x E4M3 scale: at most 6
// significant bits) with a bf16 activation is exact in f32, so only the rounding of x and
// the f32 summation differ from the exact product with f32 activations:
//   |y - y_exact| <= 2^-8 S + gamma_{K+10} (1 + 2^-8) S + (subnormal terms),
//   S = sum_k |x_k w_k|, gamma_m = m u / (1 - m u), u = 2^-24;
// the subnormal terms are 2^-126 sum_k |w_k| (x flushed) plus, for mxfp4 scales of 2^-127
// in the GEMM, 2^-126 sum_k |x_k| (weights flushed); both are below 1e-35 for weights and
// activations of normal size. Measured (test MatmulBf16Activations.ErrorOnRealisticGemv,
// 512 x 4096, x ~ N(0,1) with every 97th value x8, random codes, ModelOpt-like scales;
// GEMV and an 8-token GEMM agree to two digits):
//   nvfp4  |err| / S: max 2.2e-4, RMS 6.1e-5; RMS(err) / RMS(y) 1.7e-3
//   mxfp4  |err| / S: max 5.9e-4, RMS 1.3e-4; RMS(err) / RMS(y) 1.8e-3
//   bf16   |err| / S: max 1.7e-4, RMS 4.5e-5; RMS(err) / RMS(y) 1.7e-3
// i.e. at most 14 % of the bound; W4A8 (kernels/avx512_vnni.hpp) measures RMS(err) / RMS(y)
// 6.5e-3 (nvfp4) and 9.3e-3 (mxfp4), f32 activations |err| / S ~ 2e-8.
//
// Kernels (runtime dispatch; they need isa::avx512 and avx512bf16):
//   GEMV   n_tok <= 2. fp4: 128 columns (64 code bytes) per step and row: one load, three
//          word shifts, four vpermw (the E2M1 -> bf16 table, 16 entries duplicated to 32
//          so the fifth index bit, the next nibble's low bit, is ignored), four vdpbf16ps
//          into one f32 vector whose lanes 2b, 2b+1 hold block b's partial dots, one fma
//          with the block factors (scale x global, as block_factor()). x is read through
//          a per-call bf16 copy permuted to that order. bf16 weights: one vdpbf16ps per 32
//          columns, x in natural order. Four rows at a time, the next rows prefetched.
//   GEMM   n_tok >= 3. Per 64 rows x 256 columns a thread decodes a panel of bf16 weight
//          pairs (fp4: element x block scale, exact in bf16; the global multiplier is
//          applied to y at the end), k-pair major: dword 64 p + i = columns 2p, 2p+1 of
//          row i; then per tile of up to 6 tokens: four vdpbf16ps per k-pair and token
//          with the token's two activations broadcast, 24 accumulators.
//   other isas, or no AVX512_BF16: matmul() on the bf16-rounded activations (the
//          definition itself, on the exact kernels of that isa).
//   bf16_activations_accelerated(which) says whether the vdpbf16ps kernels would run.
// Determinism: as kernels/matmul.hpp, results are bit-identical for any thread count.
#pragma once
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "slm/kernels/avx512.hpp"
#include "slm/kernels/reference.hpp"

#ifdef SLM_X86
#if SLM_DEFINE_KERNELS  // only the kernels unit compiles the intrinsics
#include "slm/kernels/x86_intrinsics.hpp"
#endif
#define SLM_A16_512 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2")))
#endif

namespace slm {
namespace detail::a16 {

// bf16 weight pair (columns k, k+1 of a row) as one dword, low half = column k. fp4:
// element x block scale (exact in f32 and in bf16, so the top half of the f32 is it).
inline std::uint32_t scaled_bits(const weight_matrix& w, std::size_t r, std::size_t k) noexcept {
  const std::byte* row = w.data + r * w.row_stride;
  if (w.format == weight_format::bf16) return k < w.cols ? mm::ld_u16(row + 2 * k) : 0u;
  if (k >= w.cols) return 0u;
  const std::uint8_t code = mm::ld_u8(w.scales + r * w.scale_stride + k / block_size(w.format));
  const float s = w.format == weight_format::nvfp4 ? e4m3_to_f32(code) : e8m0_to_f32(code);
  const float v = mm::element(w.format, row, k) * s;
  std::uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return bits >> 16;
}

// fp4 GEMV lane order: per 128-column chunk c, xp[128c + 32q + i] = bf16(x[128c + 4i + q])
// (q = 0..3: the nibble inside a 16-bit word of codes, i = the word). Columns past the
// last whole chunk stay in natural order.
inline constexpr std::size_t chunk = 128;

#ifdef SLM_X86
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#if SLM_DEFINE_KERNELS  // kernel templates and helpers: only the kernels unit instantiates them
SLM_A16_512 inline __m512bh as_bh(__m512i v) noexcept { return (__m512bh)v; }
#endif  // SLM_DEFINE_KERNELS

// n activations -> bf16 (natural order), the same bits as to_bf16().
SLM_A16_512 void round_row_512(const float* x, std::size_t n, std::uint16_t* out) noexcept;
#if SLM_DEFINE_KERNELS
SLM_A16_512 SLM_INLINE void round_row_512(const float* x, std::size_t n, std::uint16_t* out) noexcept {
  std::size_t k = 0;
  for (; k + 16 <= n; k += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + k));
    std::memcpy(out + k, &b, 32);
  }
  for (; k < n; ++k) out[k] = to_bf16(x[k]);
}
#endif  // SLM_DEFINE_KERNELS

// x -> the fp4 GEMV order above. tmp: K bf16 of scratch.
SLM_A16_512 void permute_fp4_512(const float* x, std::size_t K, std::uint16_t* tmp, std::uint16_t* xp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_A16_512 SLM_INLINE void permute_fp4_512(const float* x, std::size_t K, std::uint16_t* tmp, std::uint16_t* xp) noexcept {
  round_row_512(x, K, tmp);
  const std::size_t whole = K / chunk * chunk;
  for (std::size_t c = 0; c < whole; c += chunk)
    for (std::size_t q = 0; q < 4; ++q)
      for (std::size_t i = 0; i < 32; ++i) xp[c + 32 * q + i] = tmp[c + 4 * i + q];
  std::memcpy(xp + whole, tmp + whole, (K - whole) * 2);
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// E2M1 code -> bf16 bits, 16 entries twice (vpermw reads 5 index bits).
SLM_A16_512 inline __m512i e2m1_bf16_table_512() noexcept {
  return _mm512_set_epi16(static_cast<short>(0xC0C0), static_cast<short>(0xC080), static_cast<short>(0xC040),
                          static_cast<short>(0xC000), static_cast<short>(0xBFC0), static_cast<short>(0xBF80),
                          static_cast<short>(0xBF00), static_cast<short>(0x8000), 0x40C0, 0x4080, 0x4040, 0x4000,
                          0x3FC0, 0x3F80, 0x3F00, 0x0000, static_cast<short>(0xC0C0), static_cast<short>(0xC080),
                          static_cast<short>(0xC040), static_cast<short>(0xC000), static_cast<short>(0xBFC0),
                          static_cast<short>(0xBF80), static_cast<short>(0xBF00), static_cast<short>(0x8000), 0x40C0,
                          0x4080, 0x4040, 0x4000, 0x3FC0, 0x3F80, 0x3F00, 0x0000);
}

// nvfp4 / mxfp4 GEMV over nblk blocks of R rows; xp in the order above. Block b holds rows
// r + b adv + i dr (i < R) and writes y at the same offsets from r: dr = 1, adv = R for
// neighbouring rows (several tokens per row group), adv = 1 for R streams
// (kernels/kernel_row.hpp's gemv_streams).
template <int R, bool NV>
SLM_A16_512 void gemv_fp4_512(const weight_matrix& w, std::size_t r, const std::uint16_t* xp, float* y,
                              std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, chunks = K / chunk, bs = NV ? 16 : 32;
  const std::size_t rs = dr * w.row_stride, ss = dr * w.scale_stride;  // row i to row i + 1 of a block
  const std::size_t ahead = mm::prefetch_rows(adv);
  const std::size_t pc = ahead * w.row_stride, ps = ahead * w.scale_stride;
  const __m512i tbl = e2m1_bf16_table_512();
  // f32 lane j of every dot covers columns 8j .. 8j + 7 of the chunk: block j/2 (nvfp4)
  // or j/4 (mxfp4) of the chunk's 8 (4) blocks.
  const __m512i spread = NV ? _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7)
                            : _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const float g = w.global;
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* codes = w.data + r * w.row_stride;  // row i of the block at codes + i rs
    const std::byte* sc = w.scales + r * w.scale_stride;
    __m512 acc[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
    for (std::size_t c = 0; c < chunks; ++c) {
      const std::uint16_t* xc = xp + chunk * c;
      const __m512bh x0 = as_bh(_mm512_loadu_si512(xc)), x1 = as_bh(_mm512_loadu_si512(xc + 32));
      const __m512bh x2 = as_bh(_mm512_loadu_si512(xc + 64)), x3 = as_bh(_mm512_loadu_si512(xc + 96));
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const std::byte* cp = codes + static_cast<std::size_t>(i) * rs + 64 * c;
        const std::byte* si = sc + static_cast<std::size_t>(i) * ss;
        const __m512i v = _mm512_loadu_si512(cp);
        // The same line of the rows `ahead` on: short rows give the hardware prefetcher
        // little time to lock on. Prefetches never fault.
        // Into L2 (T1): a one-iteration-ahead prefetch into L1 measured 0.66-0.72 of the
        // read probe at K = 4096 against 0.76-0.95 into L2 (L1 misses are the scarcer slots).
        _mm_prefetch(reinterpret_cast<const char*>(cp + pc), _MM_HINT_T1);
        if ((c & 7) == 0) _mm_prefetch(reinterpret_cast<const char*>(si + (NV ? 8 : 4) * c + ps), _MM_HINT_T1);
        __m512 s = _mm512_dpbf16_ps(_mm512_setzero_ps(), as_bh(_mm512_permutexvar_epi16(v, tbl)), x0);
        s = _mm512_dpbf16_ps(s, as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 4), tbl)), x1);
        s = _mm512_dpbf16_ps(s, as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 8), tbl)), x2);
        s = _mm512_dpbf16_ps(s, as_bh(_mm512_permutexvar_epi16(_mm512_srli_epi16(v, 12), tbl)), x3);
        const __m512 f = _mm512_permutexvar_ps(spread, _mm512_castps256_ps512(mm::factors4_512<NV>(si, 4 * c, g)));
        acc[i] = _mm512_fmadd_ps(s, f, acc[i]);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      float sum = mm::hsum_512(acc[i]);
      const std::size_t row = r + static_cast<std::size_t>(i) * dr;
      const std::byte* codes_i = codes + static_cast<std::size_t>(i) * rs;
      for (std::size_t b = chunks * chunk; b < K; b += bs) {  // trailing blocks, in order
        float d = 0.0f;
        for (std::size_t k = b; k < b + bs; ++k) d += mm::element(w.format, codes_i, k) * bf16_to_f32(xp[k]);
        sum = std::fma(d, mm::block_factor(w, row, b), sum);
      }
      y[static_cast<std::size_t>(i) * dr] = sum;
    }
  }
}

// bf16-weight GEMV over nblk blocks of R rows (rows and y as gemv_fp4_512); xb natural
// order. Two accumulators per row cover the vdpbf16ps latency.
template <int R>
SLM_A16_512 void gemv_bf16_512(const weight_matrix& w, std::size_t r, const std::uint16_t* xb, float* y,
                               std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
  const std::size_t K = w.cols, groups = K / 64;
  const std::size_t rs = dr * w.row_stride, pc = mm::prefetch_rows(adv) * w.row_stride;
  for (std::size_t blk = 0; blk < nblk; ++blk, r += adv, y += adv) {
    const std::byte* rows = w.data + r * w.row_stride;  // row i of the block at rows + i rs
    __m512 acc[R], acc2[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      acc[i] = _mm512_setzero_ps();
      acc2[i] = _mm512_setzero_ps();
    }
    for (std::size_t j = 0; j < groups; ++j) {
      const __m512bh x0 = as_bh(_mm512_loadu_si512(xb + 64 * j)), x1 = as_bh(_mm512_loadu_si512(xb + 64 * j + 32));
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) {
        const std::byte* p = rows + static_cast<std::size_t>(i) * rs + 128 * j;
        _mm_prefetch(reinterpret_cast<const char*>(p + pc), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(p + 64 + pc), _MM_HINT_T1);
        acc[i] = _mm512_dpbf16_ps(acc[i], as_bh(_mm512_loadu_si512(p)), x0);
        acc2[i] = _mm512_dpbf16_ps(acc2[i], as_bh(_mm512_loadu_si512(p + 64)), x1);
      }
    }
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const std::byte* row = rows + static_cast<std::size_t>(i) * rs;
      float sum = mm::hsum_512(_mm512_add_ps(acc[i], acc2[i]));
      for (std::size_t k = groups * 64; k < K; ++k) sum += bf16_to_f32(mm::ld_u16(row + 2 * k)) * bf16_to_f32(xb[k]);
      y[static_cast<std::size_t>(i) * dr] = w.global == 1.0f ? sum : sum * w.global;
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

// GEMM panel geometry: 64 rows x 256 columns, as bf16 pairs (128 dwords per row). The
// microkernel holds 4 row vectors x 6 tokens of accumulators: one broadcast per 4
// vdpbf16ps (2 x 12 measured 1.9 cycles per vdpbf16ps in cache, 4 x 6 1.05: the
// broadcasts compete with the dot products for the vector pipes).
inline constexpr std::size_t gemm_pr = 64, gemm_kc = 256, gemm_tt = 6;

#if SLM_DEFINE_KERNELS
// Columns [col, col + 32) of an fp4 row (col a multiple of 32: two nvfp4 blocks, one mxfp4)
// as 16 bf16 pairs, dword j = columns col + 2j, + 1 (element x block scale, exact in bf16):
// byte j of the codes holds both. tbl: e2m1_table, top: 0xFFFF0000 in every lane.
SLM_A16_512 inline __m512i fp4_pairs_512(const std::byte* row, const std::byte* sc, std::size_t col, bool nv,
                                         __m512 tbl, __m512i top) noexcept {
  const __m512i b = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + col / 2)));
  const __m512 s = nv ? mm::halves_512(e4m3_to_f32(mm::ld_u8(sc + col / 16)), e4m3_to_f32(mm::ld_u8(sc + col / 16 + 1)))
                      : _mm512_set1_ps(e8m0_to_f32(mm::ld_u8(sc + col / 32)));
  const __m512i even = _mm512_castps_si512(_mm512_mul_ps(_mm512_permutexvar_ps(b, tbl), s));
  const __m512i odd = _mm512_castps_si512(_mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), tbl), s));
  return _mm512_or_si512(_mm512_and_si512(odd, top), _mm512_srli_epi32(even, 16));
}
#endif  // SLM_DEFINE_KERNELS

// Rows [rb, rb + nr) x columns [k0, k0 + kc) -> panel dword 64 p + i = scaled_bits pair
// (k0 + 2p, k0 + 2p + 1) of row rb + i; rows past nr and the column past an odd K are 0.
// tmp: gemm_kc / 2 dwords, 64-aligned.
SLM_A16_512 void decode_panel_512(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                  std::size_t kc, std::uint32_t* panel, std::uint32_t* tmp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_A16_512 SLM_INLINE void decode_panel_512(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                             std::size_t kc, std::uint32_t* panel, std::uint32_t* tmp) noexcept {
  const std::size_t pairs = (kc + 1) / 2;
  const bool fp4 = w.format != weight_format::bf16, nv = w.format == weight_format::nvfp4;
  const __m512 tbl = _mm512_loadu_ps(e2m1_table.data());
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::size_t i = 0; i < gemm_pr; ++i) {
    if (i >= nr) {
      for (std::size_t p = 0; p < pairs; ++p) panel[gemm_pr * p + i] = 0;
      continue;
    }
    const std::size_t r = rb + i;
    const std::byte* row = w.data + r * w.row_stride;
    std::size_t k = 0;
    if (fp4) {
      const std::byte* sc = w.scales + r * w.scale_stride;
      for (; k + 32 <= kc; k += 32)  // k0 + k is a multiple of 32: two nvfp4 blocks, one mxfp4
        _mm512_store_si512(tmp + k / 2, fp4_pairs_512(row, sc, k0 + k, nv, tbl, top));
    } else {
      for (; k + 32 <= kc; k += 32) std::memcpy(tmp + k / 2, row + 2 * (k0 + k), 64);
    }
    for (; k < kc; k += 2) tmp[k / 2] = scaled_bits(w, r, k0 + k) | (scaled_bits(w, r, k0 + k + 1) << 16);
    for (std::size_t p = 0; p < pairs; ++p) panel[gemm_pr * p + i] = tmp[p];
  }
}
#endif  // SLM_DEFINE_KERNELS

#if SLM_DEFINE_KERNELS
// T tokens x 64 rows over `pairs` k-pairs of a panel. xb: token 0's activation at the
// panel's first column, token t is ldxb further; y: Y[t0, rb]. first: start from zero,
// else from y; last: y = g x sum.
template <int T>
SLM_A16_512 void micro_512(const std::uint32_t* panel, std::size_t pairs, const std::uint16_t* xb, std::size_t ldxb,
                           float* y, std::size_t ldy, std::size_t nr, bool first, bool last, float g) noexcept {
  constexpr int V = 4;  // row vectors
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
  for (std::size_t p = 0; p < pairs; ++p) {
    __m512bh wv[V];
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) wv[v] = as_bh(_mm512_load_si512(panel + gemm_pr * p + 16 * static_cast<std::size_t>(v)));
#pragma GCC unroll 6
    for (int t = 0; t < T; ++t) {
      std::int32_t two;
      std::memcpy(&two, xb + static_cast<std::size_t>(t) * ldxb + 2 * p, 4);
      const __m512bh xv = as_bh(_mm512_set1_epi32(two));
#pragma GCC unroll 4
      for (int v = 0; v < V; ++v) a[v][t] = _mm512_dpbf16_ps(a[v][t], wv[v], xv);
    }
  }
  const __m512 gv = _mm512_set1_ps(g);
#pragma GCC unroll 6
  for (int t = 0; t < T; ++t) {
    float* yt = y + static_cast<std::size_t>(t) * ldy;
#pragma GCC unroll 4
    for (int v = 0; v < V; ++v) _mm512_mask_storeu_ps(yt + 16 * v, m[v], last ? _mm512_mul_ps(a[v][t], gv) : a[v][t]);
  }
}
#endif  // SLM_DEFINE_KERNELS

SLM_A16_512 void micro_512_any(std::size_t T, const std::uint32_t* panel, std::size_t pairs,
                               const std::uint16_t* xb, std::size_t ldxb, float* y, std::size_t ldy,
                               std::size_t nr, bool first, bool last, float g) noexcept;
#if SLM_DEFINE_KERNELS
SLM_A16_512 SLM_INLINE void micro_512_any(std::size_t T, const std::uint32_t* panel, std::size_t pairs,
                                          const std::uint16_t* xb, std::size_t ldxb, float* y, std::size_t ldy,
                                          std::size_t nr, bool first, bool last, float g) noexcept {
  switch (T) {
    case 1: return micro_512<1>(panel, pairs, xb, ldxb, y, ldy, nr, first, last, g);
    case 2: return micro_512<2>(panel, pairs, xb, ldxb, y, ldy, nr, first, last, g);
    case 3: return micro_512<3>(panel, pairs, xb, ldxb, y, ldy, nr, first, last, g);
    case 4: return micro_512<4>(panel, pairs, xb, ldxb, y, ldy, nr, first, last, g);
    case 5: return micro_512<5>(panel, pairs, xb, ldxb, y, ldy, nr, first, last, g);
    default: return micro_512<6>(panel, pairs, xb, ldxb, y, ldy, nr, first, last, g);
  }
}
#endif  // SLM_DEFINE_KERNELS

// Rows [r0, r1) for all tokens. xb: n_tok rows of ldxb bf16 (ldxb even, zero past K).
SLM_A16_512 void gemm_rows_512(const weight_matrix& w, const std::uint16_t* xb, std::size_t ldxb,
                               std::size_t n_tok, float* y, std::size_t ldy, std::size_t r0, std::size_t r1,
                               std::uint32_t* panel, std::uint32_t* tmp) noexcept;
#if SLM_DEFINE_KERNELS
SLM_A16_512 SLM_INLINE void gemm_rows_512(const weight_matrix& w, const std::uint16_t* xb, std::size_t ldxb,
                                          std::size_t n_tok, float* y, std::size_t ldy, std::size_t r0, std::size_t r1,
                                          std::uint32_t* panel, std::uint32_t* tmp) noexcept {
  const std::size_t K = w.cols;
  const float g = w.global;
  for (std::size_t rb = r0; rb < r1; rb += gemm_pr) {
    const std::size_t nr = std::min(gemm_pr, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += gemm_kc) {
      const std::size_t kc = std::min(gemm_kc, K - k0);
      decode_panel_512(w, rb, nr, k0, kc, panel, tmp);
      for (std::size_t t0 = 0; t0 < n_tok; t0 += gemm_tt)
        micro_512_any(std::min(gemm_tt, n_tok - t0), panel, (kc + 1) / 2, xb + t0 * ldxb + k0, ldxb,
                      y + t0 * ldy + rb, ldy, nr, k0 == 0, k0 + kc == K, g);
    }
  }
}
#endif  // SLM_DEFINE_KERNELS

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // SLM_X86

#if defined(SLM_X86) && SLM_DEFINE_KERNELS
SLM_A16_512 SLM_INLINE void prepare_gemv(const weight_matrix& w, const float* x, std::size_t, std::size_t,
                                         std::byte* out) noexcept {
  const std::size_t K = w.cols;
  std::uint16_t* xb = reinterpret_cast<std::uint16_t*>(out);
  if (w.format == weight_format::bf16) round_row_512(x, K, xb);
  else permute_fp4_512(x, K, reinterpret_cast<std::uint16_t*>(out + (2 * K + 63) / 64 * 64), xb);
}
inline std::size_t gemv_bytes(std::size_t K, std::size_t) noexcept { return 2 * ((2 * K + 63) / 64 * 64); }
// X rounded once, token t at ldxb = K rounded up to even (the pad column is 0).
inline std::size_t ldxb(std::size_t K) noexcept { return (K + 1) / 2 * 2; }
SLM_A16_512 SLM_INLINE void prepare_gemm(const weight_matrix& w, const float* x, std::size_t t, std::size_t,
                                         std::byte* out) noexcept {
  const std::size_t K = w.cols, ld = ldxb(K);
  std::uint16_t* xb = reinterpret_cast<std::uint16_t*>(out) + t * ld;
  round_row_512(x, K, xb);
  if (ld > K) xb[K] = 0;
}
inline std::size_t gemm_bytes(std::size_t K, std::size_t n_tok) noexcept { return n_tok * ldxb(K) * 2; }
template <bool NV> struct fp4 { template <int R> struct k {
  static void blocks(const weight_matrix& w, std::size_t r, const float*, const std::byte* xp, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_fp4_512<R, NV>(w, r, reinterpret_cast<const std::uint16_t*>(xp), y, nblk, dr, adv);
  }
}; };
template <int R> struct bf16 {
  static void blocks(const weight_matrix& w, std::size_t r, const float*, const std::byte* xp, float* y,
                     std::size_t nblk, std::size_t dr, std::size_t adv) noexcept {
    gemv_bf16_512<R>(w, r, reinterpret_cast<const std::uint16_t*>(xp), y, nblk, dr, adv);
  }
};

SLM_A16_512 SLM_INLINE void gemm(const weight_matrix& w, const mm::acts& a, std::size_t n_tok, float* y,
                                 std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  gemm_rows_512(w, reinterpret_cast<const std::uint16_t*>(a.p), ldxb(w.cols), n_tok, y, ldy, r0, r1,
                reinterpret_cast<std::uint32_t*>(scratch),
                reinterpret_cast<std::uint32_t*>(scratch + (gemm_pr * gemm_kc * 2 + 63) / 64 * 64));
}
// The AVX-512 BF16 row (vdpbf16ps): nvfp4, mxfp4 and bf16 weights.
SLM_INLINE mm::kernel_row avx512_bf16_row(weight_format f) noexcept {
  mm::kernel_row k;
  k.name = "avx512_bf16";
  if (f == weight_format::nvfp4) mm::set_gemv_streams<fp4<true>::k>(k);
  else if (f == weight_format::mxfp4) mm::set_gemv_streams<fp4<false>::k>(k);
  else mm::set_gemv_streams<bf16>(k);
  k.gemv_prepare = &prepare_gemv;
  k.gemv_bytes = &gemv_bytes;
  k.gemm = &gemm;
  k.gemm_prepare = &prepare_gemm;
  k.gemm_bytes = &gemm_bytes;
  k.gemm_scratch = (gemm_pr * gemm_kc * 2 + 63) / 64 * 64 + (gemm_kc * 2 + 63) / 64 * 64;
  return k;
}
#endif  // SLM_X86 && SLM_DEFINE_KERNELS

}  // namespace detail::a16

}  // namespace slm
