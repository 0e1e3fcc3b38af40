// slm/kernels/amx_int8.hpp - the W4A8 GEMM (NVFP4 / MXFP4 weights x int8 activations) on
// AMX-INT8 tiles (Intel Sapphire Rapids and later): the prefill products of W4A8.
//
// The definition is kernels/avx512_vnni.hpp's, and so are the results, bit for bit: per
// token and row, y = sum over 16-column segments s, in order, of fma(float(D_s), f_s x h_s, .),
// D_s the exact integer dot of the segment's doubled E2M1 weights e' with the token's int8
// activations q (|D_s| <= 16 x 12 x 127: exact in int32 and in f32). tdpbssd multiplies
// signed by signed bytes, so the weights enter as e' itself and the VNNI kernels' +12 offset
// and its correction term are not needed; the integer D_s, and all f32 operations after it,
// are the same. The GEMV (decode, up to gemv_max_tokens tokens) stays the VNNI kernel.
//
// Kernel (needs isa::avx512 with VNNI and AMX-INT8, and amx_usable(), core/cpu.hpp:
// amx_int8_accelerated() in kernels/table.hpp says whether it runs):
//   Per segment, one tdpbssd C[16 tokens, 16 rows] = A[16 tokens, 16 q] . B[16 e', 16 rows]
//   (A: 16 rows of 16 bytes; B: 4 rows of 16 dwords, each 4 consecutive e' of one weight
//   row), then C is stored (1 KiB, L1) and its 16 rows are scaled into 16 f32 accumulator
//   registers: cvt, f_s x h_ts, fma. The per-segment scales (NVFP4's 16-element blocks, the
//   activations' 16- or 32-element blocks) are why a tile cannot sum more than 16 columns
//   before its result must leave it.
//   Layouts: the activations as 256-byte A tiles, block of 16 tokens x segment (prepare,
//   once per call; tokens padded to whole blocks with zeros), h per block and segment as
//   16 floats; the weights per 128 rows x 1024 columns as 256-byte B tiles decoded by the
//   panel decoder (16 rows x 64 columns at a time: 4-bit codes to e' by vpshufb, dwords
//   transposed in registers, amx.hpp's transpose_16x16), with their f32 factors f_s (16
//   segments of 16 rows at a time, transposed likewise).
//   Pipelined: a step issues one segment's product, stores the one issued two steps
//   before, and scales the one stored a step before.
// Roofline, measured on one core of a Xeon (Sapphire Rapids class, 2026-12-04; a
//   microbenchmark of one output tile over 64 L1-resident segments): a tdpbssd costs what
//   a full-depth one does (16 x 16 x 16 here, 4.9 ns a segment: a quarter of the tile
//   probe's 16 x 16 x 64 rate), the scaling (48 vector operations per 4096 multiply-adds)
//   8.6 ns, and the two do not overlap: 19 ns a segment, about 430 GOP/s a core, however
//   the steps are pipelined (unpipelined, one and two steps deep measured the same). The VNNI GEMM,
//   16 + 6 operations per 512 multiply-adds, runs at about 200 GOP/s a core on the same
//   CPU, so this kernel is 1.5-1.7x it, and far from the tiles' peak.
// Determinism: each output is computed by one thread in segment order: bit-identical to the
// scalar W4A8 reference for any thread count.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "slm/core/cpu.hpp"
#include "slm/kernels/amx.hpp"
#include "slm/kernels/avx512_vnni.hpp"
#include "slm/kernels/kernel_row.hpp"

#if defined(SLM_X86) && SLM_DEFINE_KERNELS
#include "slm/kernels/x86_intrinsics.hpp"
// amx-bf16 and avx512bf16 only so that amx.hpp's transpose_16x16 (compiled for them) can
// be inlined here; nothing here emits them, and every CPU with AMX-INT8 has both.
#define SLM_AMX8_512                                                                                            \
  __attribute__((target("amx-tile,amx-int8,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni," \
                        "avx2,fma,f16c,bmi,bmi2")))
#endif

namespace slm {

namespace detail::amx8 {

inline constexpr std::size_t tb = 16;    // tokens per tile
inline constexpr std::size_t seg = 16;   // columns per segment (one tdpbssd)
inline constexpr std::size_t pr = 128;   // rows per panel
inline constexpr std::size_t kc = 1024;  // columns per panel
inline constexpr std::size_t tile = 256;  // bytes of one A or B tile

inline std::size_t padded_tokens(std::size_t n_tok) noexcept { return (n_tok + tb - 1) / tb * tb; }

// amx.hpp's palette-1 layout with tiles 0-3 as C (16 rows of 16 int32), 4 and 6 as A (16
// rows of 16 q) and 5 and 7 as B (4 rows of 16 dwords of e').
inline amx::tile_config tile_layout() noexcept {
  amx::tile_config c;
  c.colsb[4] = c.colsb[6] = 16;
  c.rows[5] = c.rows[7] = 4;
  return c;
}

#if defined(SLM_X86) && SLM_DEFINE_KERNELS
// Prepared activations, P = padded_tokens(n_tok), S = K / 16: q as A tiles, tile (b, s) at
// byte (b S + s) x 256, token j of the block at 16 j; then h, (b S + s) x 16 + j floats.
// Tokens past n_tok are zeros (q and h), written with the last token.
inline std::size_t gemm_bytes(std::size_t K, std::size_t n_tok) noexcept {
  const std::size_t P = padded_tokens(n_tok);
  return P * K + (P * (K / seg) * 4 + 63) / 64 * 64;
}
SLM_AMX8_512 SLM_INLINE void prepare_gemm(const weight_matrix& w, const float* x, std::size_t t, std::size_t n_tok,
                                          std::byte* out) noexcept {
  const std::size_t K = w.cols, S = K / seg, P = padded_tokens(n_tok);
  auto* q = reinterpret_cast<std::int8_t*>(out);
  auto* h = reinterpret_cast<float*>(out + P * K);
  const std::size_t b = t / tb, j = t % tb;
  // q straight into the tiles (segment step 256); h through tmp (quantize_512 writes it
  // per segment, contiguously), then to block b's h: token j of segment s at 16 s + j.
  float* hrow = h + b * S * tb;
  alignas(64) float tmp[256];
  for (std::size_t k0 = 0; k0 < K; k0 += 256 * seg) {  // at most 256 segments a pass
    const std::size_t kk = std::min(256 * seg, K - k0), s0 = k0 / seg;
    w4a8::quantize_512(x + k0, kk, w4a8::act_block(w.format), w4a8::qrow{q + (b * S + s0) * tile + j * 16, tmp, nullptr},
                       tile);
    for (std::size_t s = 0; s < kk / seg; ++s) hrow[(s0 + s) * tb + j] = tmp[s];
  }
  if (t + 1 == n_tok)
    for (std::size_t p = n_tok; p < P; ++p)
      for (std::size_t s = 0; s < S; ++s) {
        std::memset(q + ((p / tb) * S + s) * tile + (p % tb) * 16, 0, 16);
        h[((p / tb) * S + s) * tb + p % tb] = 0.0f;
      }
}

// Rows [rb, rb + nr) x columns [k0, k0 + kk) (kk a multiple of 16) as B tiles: tile (v, s)
// of row block v and segment s at byte (v x kk / 16 + s) x 256, its dword 16 p + i the e' of
// row rb + 16 v + i at columns k0 + 16 s + 4 p .. + 3 (rows past nr zero); factors
// fp[(v x kk / 16 + s) x 16 + i] = f_s of that row (block_factor, as the reference).
SLM_AMX8_512 inline void decode_panel(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                      std::size_t kk, std::int8_t* panel, float* fp) noexcept {
  const __m512i tbl = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  const __m512i lo = _mm512_set1_epi16(0x000F), hi = _mm512_set1_epi16(0x0F00);
  const std::size_t ns = kk / seg;
  const bool nv = w.format == weight_format::nvfp4;
  for (std::size_t i0 = 0; i0 < pr && i0 < nr; i0 += 16) {
    const std::size_t v = i0 / 16;
    for (std::size_t c = 0; c < kk; c += 64) {
      const std::size_t n = std::min<std::size_t>(64, kk - c);  // columns of this step
      const __mmask32 m = n == 64 ? ~__mmask32{0} : static_cast<__mmask32>((1u << (n / 2)) - 1u);
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i) {
        if (i0 + i >= nr) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const std::byte* row = w.data + (rb + i0 + i) * w.row_stride + (k0 + c) / 2;
        // 32 code bytes -> 64 e' in column order (byte k: low nibble column 2k, high 2k + 1).
        const __m512i b = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(m, row));
        const __m512i nib = _mm512_or_si512(_mm512_and_si512(b, lo), _mm512_and_si512(_mm512_slli_epi16(b, 4), hi));
        r[i] = _mm512_shuffle_epi8(tbl, nib);
      }
      amx::transpose_16x16(r);  // r[p] lane i: row i's columns c + 4p .. + 3
      std::int8_t* t0 = panel + (v * ns + c / seg) * tile;
      for (std::size_t p = 0; p < n / 4; ++p) _mm512_store_si512(t0 + 64 * p, r[p]);
    }
    // Factors 16 segments at a time: each row's as factors16_512 computes them (block_factor's
    // values), transposed to a row per lane; the tail of K, and odd scales, scalar.
    const std::size_t full = ns / 16 * 16;
    for (std::size_t g = 0; g < full; g += 16) {
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i) {
        if (i0 + i >= nr) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const std::byte* sc = w.scales + (rb + i0 + i) * w.scale_stride;
        const std::size_t grp = (k0 / seg + g) / 16;
        r[i] = _mm512_castps_si512(nv ? w4a8::factors16_512<true>(sc, grp, w.global)
                                      : w4a8::factors16_512<false>(sc, grp, w.global));
      }
      amx::transpose_16x16(r);  // r[s] lane i: row i's factor of segment g + s
      for (std::size_t s = 0; s < 16; ++s) _mm512_store_si512(fp + (v * ns + g + s) * 16, r[s]);
    }
    for (std::size_t s = full; s < ns; ++s)
      for (std::size_t i = 0; i < 16; ++i)
        fp[(v * ns + s) * 16 + i] = i0 + i < nr ? mm::block_factor(w, rb + i0 + i, k0 + seg * s) : 0.0f;
  }
}

// The tile instructions with the tile as a template argument (g++'s intrinsics paste their
// tile number into the assembly text, so it must be a literal). Unlike those intrinsics,
// the loads say that they read memory: nothing written before one can be moved after it.
template <int T>
inline void tile_load(const void* p, std::size_t stride) noexcept {
  __asm__ __volatile__("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(p), "r"(stride), "i"(T) : "memory");
}
template <int T>
inline void tile_store(void* p, std::size_t stride) noexcept {
  __asm__ __volatile__("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(p), "r"(stride), "i"(T) : "memory");
}
template <int T>
inline void tile_zero() noexcept {
  __asm__ __volatile__("tilezero %%tmm%c0" ::"i"(T));
}
template <int C, int A, int B>
inline void tile_dpbssd() noexcept {  // C[16 tok, 16 rows] += A[16 tok, 16 q] . B[16 e', 16 rows], int32
  __asm__ __volatile__("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
}

// acc[t] = fma(float(C[t]), f x h[t], acc[t]) for the 16 tokens of one stored C tile.
SLM_AMX8_512 inline void scale_into(const std::int32_t* c, const float* f, const float* h, __m512 (&acc)[16]) noexcept {
  const __m512 fv = _mm512_load_ps(f);
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t) {
    const __m512 d = _mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t));
    acc[t] = _mm512_fmadd_ps(d, _mm512_mul_ps(fv, _mm512_set1_ps(h[t])), acc[t]);
  }
}

// Segment j's tile product into C tile C (j mod 4), from A / B tiles 4 / 5 (j even) or 6 / 7.
template <int C, int A, int B>
SLM_AMX8_512 inline void issue(const std::int8_t* a, const std::int8_t* b, std::size_t j) noexcept {
  tile_load<A>(a + tile * j, 16);
  tile_load<B>(b + tile * j, 64);
  tile_zero<C>();
  tile_dpbssd<C, A, B>();
}
SLM_AMX8_512 inline void issue_any(const std::int8_t* a, const std::int8_t* b, std::size_t j) noexcept {
  switch (j % 4) {
    case 0: return issue<0, 4, 5>(a, b, j);
    case 1: return issue<1, 6, 7>(a, b, j);
    case 2: return issue<2, 4, 5>(a, b, j);
    default: return issue<3, 6, 7>(a, b, j);
  }
}
// Segment j's product out of its C tile (j mod 4) into C buffer j mod 2.
template <int C>
inline void store_c(std::int32_t* c, std::size_t j) noexcept {
  tile_store<C>(c + 256 * (j % 2), 64);
}
inline void store_any(std::int32_t* c, std::size_t j) noexcept {
  switch (j % 4) {
    case 0: return store_c<0>(c, j);
    case 1: return store_c<1>(c, j);
    case 2: return store_c<2>(c, j);
    default: return store_c<3>(c, j);
  }
}

// One output tile: 16 tokens (nt of them real) x 16 rows (nr real) over ns segments. a: the
// token block's A tile of the first segment, b and f: the row block's B tile and factors,
// h: the block's h at the first segment. first: y = the sum, else y += it (y's value is the
// accumulator's start: the same f32 chain as one pass over every segment).
SLM_AMX8_512 inline void tile_run(const std::int8_t* a, const std::int8_t* b, const float* f, const float* h,
                                  std::size_t ns, float* y, std::size_t ldy, std::size_t nt, std::size_t nr, bool first,
                                  std::int32_t* c) noexcept {
  const __mmask16 m = static_cast<__mmask16>(nr >= 16 ? 0xFFFFu : (1u << nr) - 1u);
  __m512 acc[16];
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t)
    acc[t] = first || static_cast<std::size_t>(t) >= nt ? _mm512_setzero_ps()
                                                        : _mm512_maskz_loadu_ps(m, y + static_cast<std::size_t>(t) * ldy);
  // Pipelined: step j issues segment j's tile product, stores segment j - 2's result and
  // scales segment j - 3's, so a store waits for a product issued two steps before and
  // the scaling reads a store made a step before. (The tile instructions run in order, a
  // store waits for its product, and a load of what a tile store wrote waits for that
  // store to complete: done in turn they add up to about three times the scaling alone.)
  // Four C tiles in turn, two pairs of A / B tiles, two C buffers.
  for (std::size_t j = 0; j < ns + 3; ++j) {
    if (j < ns) issue_any(a, b, j);
    if (j >= 2 && j - 2 < ns) store_any(c, j - 2);
    if (j >= 3) scale_into(c + 256 * ((j - 3) % 2), f + 16 * (j - 3), h + 16 * (j - 3), acc);
  }
#pragma GCC unroll 16
  for (int t = 0; t < 16; ++t)
    if (static_cast<std::size_t>(t) < nt) _mm512_mask_storeu_ps(y + static_cast<std::size_t>(t) * ldy, m, acc[t]);
}

// The panel (pr x kc bytes), its factors (pr x kc / 16 floats) and two C tiles.
inline constexpr std::size_t gemm_scratch = pr * kc + pr * (kc / seg) * 4 + 2 * 1024;

// Rows [r0, r1) of Y for every token. scratch: gemm_scratch bytes, 64-aligned.
SLM_AMX8_512 SLM_INLINE void gemm(const weight_matrix& w, const mm::acts& a, std::size_t n_tok, float* y,
                                  std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  const std::size_t K = w.cols, S = K / seg, P = padded_tokens(n_tok), blocks = P / tb;
  const auto* q = reinterpret_cast<const std::int8_t*>(a.p);
  const auto* h = reinterpret_cast<const float*>(a.p + P * K);
  auto* panel = reinterpret_cast<std::int8_t*>(scratch);
  auto* fp = reinterpret_cast<float*>(scratch + pr * kc);
  auto* c = reinterpret_cast<std::int32_t*>(scratch + pr * kc + pr * (kc / seg) * 4);
  const amx::tile_config cfg = tile_layout();
  _tile_loadconfig(&cfg);
  for (std::size_t rb = r0; rb < r1; rb += pr) {
    const std::size_t nr = std::min(pr, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += kc) {
      const std::size_t kk = std::min(kc, K - k0), ns = kk / seg, s0 = k0 / seg;
      decode_panel(w, rb, nr, k0, kk, panel, fp);
      for (std::size_t bl = 0; bl < blocks; ++bl) {
        const std::size_t nt = std::min(tb, n_tok - bl * tb);
        for (std::size_t v = 0; 16 * v < nr; ++v)
          tile_run(q + (bl * S + s0) * tile, panel + v * ns * tile, fp + v * ns * 16, h + (bl * S + s0) * tb, ns,
                   y + bl * tb * ldy + rb + 16 * v, ldy, nt, std::min<std::size_t>(16, nr - 16 * v), k0 == 0, c);
      }
    }
  }
  _tile_release();
}

// The VNNI row with its GEMM on AMX-INT8 tiles (nvfp4 and mxfp4 weights); the GEMV and its
// preparation stay the VNNI kernels' (decode reads each weight once: memory, not
// arithmetic, bounds it).
SLM_INLINE mm::kernel_row amx_int8_row(weight_format f) noexcept {
  mm::kernel_row k = w4a8::vnni_row(f);
  k.name = "amx_int8";
  k.gemm = &gemm;
  k.gemm_prepare = &prepare_gemm;
  k.gemm_bytes = &gemm_bytes;
  k.gemm_scratch = gemm_scratch;
  return k;
}
#endif  // SLM_X86 && SLM_DEFINE_KERNELS

}  // namespace detail::amx8

}  // namespace slm
