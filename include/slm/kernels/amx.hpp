// slm/kernels/amx.hpp - the bf16-activation GEMM on AMX-BF16 tiles (Intel Sapphire Rapids and
// later): the prefill products of W4A16 (nvfp4, mxfp4) and of bf16 weights with bf16
// activations.
//
// The same definition as kernels/avx512_bf16.hpp, whose GEMV (decode) this row keeps:
//   y = g x (Wp . bf16(x)),  Wp = element x block scale as bf16 (exact), g the global scale,
// products exact in f32, sums in f32 in a kernel-specific order. Only the summation order
// differs from the vdpbf16ps GEMM, so the bound stated there holds as it is (the tests sweep
// it): tdpbf16ps, like vdpbf16ps, treats bf16 subnormal inputs as zero and flushes subnormal
// results, and rounds each pair's sum to nearest even.
//
// Kernel (needs isa::avx512, AVX512_BF16 and amx_usable(), core/cpu.hpp: amx_bf16_accelerated()
// in kernels/table.hpp says whether it runs; K a multiple of 32, else the vdpbf16ps GEMM runs):
//   C[t, n] = sum_k X[t, k] W[n, k] as tile products: A = 16 tokens x 32 activations, B = 16
//   k-pairs x 16 weight rows (bf16 pairs as dwords), C = 16 tokens x 16 rows of f32. Both
//   operands are laid out as contiguous 1 KiB tiles: X by the preparation (once per call),
//   W by the panel decoder. Per 256 rows x 1024 columns a thread decodes one panel (512
//   KiB, L2; 16 rows x 32 columns at a time, transposed in registers), then per two token
//   blocks and two row blocks runs 32 steps of 2 + 2 tile loads and 4 tdpbf16ps (2 x 2
//   register blocking: 4 accumulator tiles, 2 A, 2 B; the tiles two steps on prefetched),
//   and adds the four C tiles into y (first chunk: stores them; last: times g). Each
//   tdpbf16ps is 16 x 16 x 32 multiply-adds. Tokens are padded to whole blocks of 16 by
//   the preparation (zero rows), so every tile load stays inside the buffer; the padding's
//   results are never stored.
// Roofline (bench/README.md, "AMX"): the tile probe (probes.hpp, tdpbf16ps on registers)
//   gives 6.2-7.0 TFLOP/s on 2 Xeon cores; this GEMM reaches 0.2-0.26 of it at 128-512
//   tokens. Tile loads from L2 cost a quarter of the rate even in a loop that does
//   nothing else (1.9 against 2.5-2.7 TFLOP/s a core, L1-resident), loads of X from L3
//   (prompts over ~128 tokens at K = 4096 exceed L2) far more, and the panel decode takes
//   about a tenth of the time at 512 tokens and a third at 128.
// Determinism: as kernels/matmul.hpp: every output is computed by one thread, in an order
// that depends only on K and on which 16-token block and 16-row block it is in.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "slm/core/cpu.hpp"
#include "slm/kernels/avx512_bf16.hpp"
#include "slm/kernels/kernel_row.hpp"

#if defined(SLM_X86) && SLM_DEFINE_KERNELS
#include "slm/kernels/x86_intrinsics.hpp"
#define SLM_AMX_512 \
  __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c,bmi,bmi2")))
#endif

namespace slm {

namespace detail::amx {

// A panel: pr rows x kc columns. 256 rows (16 row blocks) read each A tile 8 times per
// panel, where 64 read it twice: 64 -> 256 measured +15 % at 512 tokens. kc 1024: C goes
// through y once per 32 steps (kc 256 and 512 measured slower, 2048 and 4096 about the same).
inline constexpr std::size_t kc = 1024;
inline constexpr std::size_t pr = 256;
inline constexpr std::size_t tb = 16;  // tokens per tile

inline std::size_t padded_tokens(std::size_t n_tok) noexcept { return (n_tok + tb - 1) / tb * tb; }

// Palette 1 with tiles 0-7 all 16 rows of 64 bytes: here 0-3 the C accumulators (16 f32 a
// row), 4-5 A (32 bf16 a row), 6-7 B (16 k-pairs of 16 dwords). The tile probe uses it too.
struct alignas(64) tile_config {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  std::uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// Prepared activations, K % 32 == 0: bf16 tiles of 16 tokens x 32 columns, each 1 KiB
// contiguous (token j of the block at byte 64 j), block-major then column-step-major:
// tile (b, s) at ((b x K / 32) + s) KiB. Tokens past n_tok are zero rows, written with the
// last token. (Row-major rows K apart would put a tile's 16 lines 2K bytes apart: for K a
// multiple of 2048 they all fall in one L1 set.) Other K: the vdpbf16ps GEMM's layout.
#if defined(SLM_X86) && SLM_DEFINE_KERNELS
SLM_AMX_512 SLM_INLINE void prepare_gemm(const weight_matrix& w, const float* x, std::size_t t, std::size_t n_tok,
                                         std::byte* out) noexcept {
  const std::size_t K = w.cols;
  if (K % 32 != 0) return a16::prepare_gemm(w, x, t, n_tok, out);
  const std::size_t steps = K / 32;
  auto tile_row = [&](std::size_t token, std::size_t s) {
    return reinterpret_cast<std::uint16_t*>(out + (((token / tb) * steps + s) * tb + token % tb) * 64);
  };
  for (std::size_t s = 0; s < steps; ++s) a16::round_row_512(x + 32 * s, 32, tile_row(t, s));
  if (t + 1 == n_tok)
    for (std::size_t p = n_tok; p < padded_tokens(n_tok); ++p)
      for (std::size_t s = 0; s < steps; ++s) std::fill(tile_row(p, s), tile_row(p, s) + 32, std::uint16_t{0});
}
inline std::size_t gemm_bytes(std::size_t K, std::size_t n_tok) noexcept {
  return K % 32 == 0 ? padded_tokens(n_tok) * K * 2 : a16::gemm_bytes(K, n_tok);
}


// Two token blocks (a0, a1: their tiles for the panel's columns, 1 KiB apart) x two row
// blocks (b0, b1: their panel tiles, 1 KiB apart) over `steps` x 32 columns -> c[0..3] =
// (a0,b0), (a0,b1), (a1,b0), (a1,b1), 16 x 16 f32 each.
SLM_AMX_512 inline void tiles_2x2(const std::uint16_t* a0, const std::uint16_t* a1, const std::uint32_t* b0,
                                  const std::uint32_t* b1, std::size_t steps, float* c) noexcept {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::size_t s = 0; s < steps; ++s) {
    // The tiles two steps on, into L1: a tile load that misses waits for its 16 lines in
    // turn (measured: +12 % at 512 tokens on 2 cores of a Xeon).
    if (s + 2 < steps)
      for (int l = 0; l < 16; ++l) {
        _mm_prefetch(reinterpret_cast<const char*>(a0 + 512 * (s + 2) + 32 * l), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(a1 + 512 * (s + 2) + 32 * l), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b0 + 256 * (s + 2) + 16 * l), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(b1 + 256 * (s + 2) + 16 * l), _MM_HINT_T0);
      }
    _tile_loadd(4, a0 + 512 * s, 64);
    _tile_loadd(5, a1 + 512 * s, 64);
    _tile_loadd(6, b0 + 256 * s, 64);
    _tile_loadd(7, b1 + 256 * s, 64);
    _tile_dpbf16ps(0, 4, 6);  // [16 tok, 32 k] x [32 k, 16 rows] -> [16 tok, 16 rows]
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
  _tile_stored(2, c + 512, 64);
  _tile_stored(3, c + 768, 64);
}

// One token block x two row blocks: c[0..1].
SLM_AMX_512 inline void tiles_1x2(const std::uint16_t* a0, const std::uint32_t* b0, const std::uint32_t* b1,
                                  std::size_t steps, float* c) noexcept {
  _tile_zero(0);
  _tile_zero(1);
  for (std::size_t s = 0; s < steps; ++s) {
    _tile_loadd(4, a0 + 512 * s, 64);
    _tile_loadd(6, b0 + 256 * s, 64);
    _tile_loadd(7, b1 + 256 * s, 64);
    _tile_dpbf16ps(0, 4, 6);  // [16 tok, 32 k] x [32 k, 16 rows] -> [16 tok, 16 rows]
    _tile_dpbf16ps(1, 4, 7);
  }
  _tile_stored(0, c, 64);
  _tile_stored(1, c + 256, 64);
}

// One C tile (16 tokens x 16 rows, rows of 16 f32) into Y: tokens < nt, rows < nr.
// first: y = c, else y += c; last: then y *= g.
SLM_AMX_512 inline void add_tile(const float* c, std::size_t nt, std::size_t nr, float* y, std::size_t ldy,
                                 bool first, bool last, float g) noexcept {
  const __mmask16 m = static_cast<__mmask16>(nr >= 16 ? 0xFFFFu : (1u << nr) - 1u);
  const __m512 gv = _mm512_set1_ps(g);
  for (std::size_t t = 0; t < nt; ++t) {
    float* yt = y + t * ldy;
    __m512 v = _mm512_load_ps(c + 16 * t);
    if (!first) v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, yt), v);
    if (last && g != 1.0f) v = _mm512_mul_ps(v, gv);
    _mm512_mask_storeu_ps(yt, m, v);
  }
}

// 16 x 16 dwords: r[i] lane j -> r[j] lane i (unpack 32, unpack 64, two 128-bit lane shuffles).
SLM_AMX_512 inline void transpose_16x16(__m512i r[16]) noexcept {
  __m512i t[16];
  for (int i = 0; i < 8; ++i) {  // lane L: [a 4L, b 4L, a 4L+1, b 4L+1], [a 4L+2, b 4L+2, ...]
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  __m512i u[4][4];  // u[q][g] lane L: rows 4g .. 4g + 3 of column 4L + q
  for (int g = 0; g < 4; ++g) {
    u[0][g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    u[1][g] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    u[2][g] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    u[3][g] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int q = 0; q < 4; ++q) {  // a 4 x 4 transpose of 128-bit lanes
    const __m512i v0 = _mm512_shuffle_i32x4(u[q][0], u[q][1], 0x44), v1 = _mm512_shuffle_i32x4(u[q][0], u[q][1], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[q][2], u[q][3], 0x44), v3 = _mm512_shuffle_i32x4(u[q][2], u[q][3], 0xEE);
    r[q] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    r[4 + q] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    r[8 + q] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    r[12 + q] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// Rows [rb, rb + nr) x columns [k0, k0 + kk) as B tiles: tile (v, s) of row block v (rows
// rb + 16 v ..) and column step s is 1 KiB at ((v x kk / 32) + s) KiB, its dword 16 p + i the
// bf16 pair (columns k0 + 32 s + 2 p, + 1) of row 16 v + i (rows past nr zero), as
// a16::scaled_bits. Decoded 16 rows x 32 columns at a time, transposed in registers.
SLM_AMX_512 inline void decode_panel(const weight_matrix& w, std::size_t rb, std::size_t nr, std::size_t k0,
                                     std::size_t kk, std::uint32_t* panel) noexcept {
  const bool bf16 = w.format == weight_format::bf16, nv = w.format == weight_format::nvfp4;
  const __m512 tbl = _mm512_loadu_ps(e2m1_table.data());
  const __m512i top = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (std::size_t i0 = 0; i0 < pr; i0 += 16) {
    for (std::size_t k = 0; k < kk; k += 32) {
      const std::size_t col = k0 + k;
      __m512i r[16];
      for (std::size_t i = 0; i < 16; ++i) {
        if (i0 + i >= nr) {
          r[i] = _mm512_setzero_si512();
          continue;
        }
        const std::byte* row = w.data + (rb + i0 + i) * w.row_stride;
        if (bf16) {
          r[i] = _mm512_loadu_si512(row + 2 * col);
          continue;
        }
        r[i] = a16::fp4_pairs_512(row, w.scales + (rb + i0 + i) * w.scale_stride, col, nv, tbl, top);
      }
      transpose_16x16(r);
      std::uint32_t* tile = panel + ((i0 / 16) * (kk / 32) + k / 32) * 256;
      for (std::size_t p = 0; p < 16; ++p) _mm512_store_si512(tile + 16 * p, r[p]);
    }
  }
}

// Rows [r0, r1) of Y for every token; xb: the prepared activations. scratch: gemm_scratch.
SLM_AMX_512 SLM_INLINE void gemm(const weight_matrix& w, const mm::acts& a, std::size_t n_tok, float* y,
                                 std::size_t ldy, std::size_t r0, std::size_t r1, std::byte* scratch) noexcept {
  const std::size_t K = w.cols;
  if (K % 32 != 0) return a16::gemm(w, a, n_tok, y, ldy, r0, r1, scratch);
  const std::uint16_t* xb = reinterpret_cast<const std::uint16_t*>(a.p);
  const std::size_t steps_k = K / 32, blocks = padded_tokens(n_tok) / tb;
  auto* panel = reinterpret_cast<std::uint32_t*>(scratch);    // pr / 16 x kc / 32 tiles of 1 KiB
  float* c = reinterpret_cast<float*>(panel + kc / 2 * pr);  // four 16 x 16 tiles
  const tile_config cfg;
  _tile_loadconfig(&cfg);
  const float g = w.global;
  for (std::size_t rb = r0; rb < r1; rb += pr) {
    const std::size_t nr = std::min(pr, r1 - rb);
    for (std::size_t k0 = 0; k0 < K; k0 += kc) {
      const std::size_t kk = std::min(kc, K - k0), steps = kk / 32;
      const bool first = k0 == 0, last = k0 + kk == K;
      decode_panel(w, rb, nr, k0, kk, panel);
      for (std::size_t b = 0; b < blocks; b += 2) {
        const std::size_t t0 = b * tb, nt0 = std::min(tb, n_tok - t0);
        const std::uint16_t* a0 = xb + (b * steps_k + k0 / 32) * 512;  // token block b's tile at column k0
        for (std::size_t v = 0; v < pr / 16 && 16 * v < nr; v += 2) {  // row blocks v, v + 1
          const std::uint32_t* b0 = panel + v * steps * 256;
          const std::size_t nr0 = std::min<std::size_t>(16, nr - 16 * v);
          const std::size_t nr1 = nr > 16 * (v + 1) ? std::min<std::size_t>(16, nr - 16 * (v + 1)) : 0;
          float* yv = y + t0 * ldy + rb + 16 * v;
          if (b + 1 < blocks) {
            tiles_2x2(a0, a0 + steps_k * 512, b0, b0 + steps * 256, steps, c);
            const std::size_t nt1 = std::min(tb, n_tok - t0 - tb);
            add_tile(c, nt0, nr0, yv, ldy, first, last, g);
            if (nr1) add_tile(c + 256, nt0, nr1, yv + 16, ldy, first, last, g);
            add_tile(c + 512, nt1, nr0, yv + tb * ldy, ldy, first, last, g);
            if (nr1) add_tile(c + 768, nt1, nr1, yv + tb * ldy + 16, ldy, first, last, g);
          } else {
            tiles_1x2(a0, b0, b0 + steps * 256, steps, c);
            add_tile(c, nt0, nr0, yv, ldy, first, last, g);
            if (nr1) add_tile(c + 256, nt0, nr1, yv + 16, ldy, first, last, g);
          }
        }
      }
    }
  }
  _tile_release();
}

// The panel and four C tiles.
inline constexpr std::size_t gemm_scratch = kc / 2 * pr * 4 + 4 * 256 * 4;

// The vdpbf16ps row with its GEMM on AMX tiles (nvfp4, mxfp4 and bf16 weights); the GEMV
// and its preparation stay the vdpbf16ps kernels' (decode reads each weight once: memory,
// not arithmetic, bounds it).
SLM_INLINE mm::kernel_row amx_bf16_row(weight_format f) noexcept {
  mm::kernel_row k = a16::avx512_bf16_row(f);
  k.name = "amx_bf16";
  k.gemm = &gemm;
  k.gemm_prepare = &prepare_gemm;
  k.gemm_bytes = &gemm_bytes;
  k.gemm_scratch = std::max(gemm_scratch, k.gemm_scratch);  // K % 32 != 0 runs the vdpbf16ps GEMM
  return k;
}
#endif  // SLM_X86 && SLM_DEFINE_KERNELS

}  // namespace detail::amx

}  // namespace slm
