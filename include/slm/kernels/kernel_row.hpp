// slm/kernels/kernel_row.hpp - one row of the kernel table: the kernels that multiply one
// weight format at one activation precision on one instruction set.
//
// kernels/table.hpp keys the rows by (weight format, activation precision, isa) and
// kernels/matmul.hpp is the one driver that runs any row. A row says what the driver must do
// around its kernels: prepare a copy of the activations (rounded to bf16, quantized to
// int8 per block, permuted to a kernel's lane order), and how much scratch a GEMM chunk
// needs. The kernels live in one file per isa: kernels/reference.hpp, avx2.hpp, avx512.hpp,
// avx512_bf16.hpp, avx512_vnni.hpp, avx2_int8.hpp, amx.hpp, neon.hpp.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slm/formats/weights.hpp"

namespace slm {

// Activation precision of one product. The weights are dequantized exactly on every path;
// what differs is what the activations are rounded to before the products:
//   f32   none: the default of matmul() (exact f32 math, gamma bound)
//   int8  per-block int8 (nvfp4 / mxfp4; AVX-512 VNNI: kernels/avx512_vnni.hpp; AVX2:
//         kernels/avx2_int8.hpp)
//   bf16  bf16, round to nearest even, once per call (nvfp4 / mxfp4 / bf16 weights;
//         AVX-512 BF16 vdpbf16ps): kernels/avx512_bf16.hpp
// Never chosen behind the caller's back (no environment variable): a model's numerics
// are the host's decision, per call (layers/linear.hpp's product_precision for the layers).
enum class activation_precision : std::uint8_t { f32, int8, bf16 };

constexpr std::string_view to_string(activation_precision a) noexcept {
  switch (a) {
    case activation_precision::f32: return "f32";
    case activation_precision::int8: return "int8";
    case activation_precision::bf16: return "bf16";
  }
  return "?";
}

namespace detail::mm {

// Rows processed together by the fused GEMV kernels.
inline constexpr std::size_t gemv_rows = 4;
// Tokens at most that the driver runs through the fused GEMV (kernels/matmul.hpp).
inline constexpr std::size_t gemv_max_tokens = 16;

// The activations as a row's GEMM reads them: the caller's f32 rows (ldx apart) and the
// copy its prepare step made (null when it has none).
struct acts {
  const float* x;
  std::size_t ldx;
  const std::byte* p;
};

// Writes token t of n_tok (x: its w.cols activations) into the row's layout at out.
using prepare_fn = void (*)(const weight_matrix& w, const float* x, std::size_t t, std::size_t n_tok,
                            std::byte* out) noexcept;
// Bytes of that layout for n_tok tokens of K activations.
using bytes_fn = std::size_t (*)(std::size_t K, std::size_t n_tok) noexcept;
// y[r .. r + R) for one token: x its activations, xp its prepared copy.
using gemv_fn = void (*)(const weight_matrix& w, std::size_t r, const float* x, const std::byte* xp,
                         float* y) noexcept;
// Rows [r0, r1) for n_tok tokens: token t's activations at x + t ldx, its prepared copy at
// xp + t xstride, its rows at y + t ldy (y: row r0 of token 0).
using gemv_span_fn = void (*)(const weight_matrix& w, std::size_t r0, std::size_t r1, std::size_t n_tok,
                              const float* x, std::size_t ldx, const std::byte* xp, std::size_t xstride, float* y,
                              std::size_t ldy) noexcept;
// Y rows [r0, r1) for every token; scratch: gemm_scratch bytes of this chunk, 64-aligned.
using gemm_fn = void (*)(const weight_matrix& w, const acts& a, std::size_t n_tok, float* y, std::size_t ldy,
                         std::size_t r0, std::size_t r1, std::byte* scratch) noexcept;

struct kernel_row {
  std::string_view name;  // what runs: "reference", "avx2", "avx512", "avx512_bf16", ...
  // The bf16 definition on f32 kernels (no bf16 dot product here): the driver rounds X
  // to bf16 once, then runs this row as for f32 activations.
  bool round_bf16 = false;
  // Fused GEMV for up to gemv_max_tokens tokens: gemv[R] computes R rows (1..gemv_rows).
  // Null: the GEMM runs at every n_tok.
  gemv_fn gemv[gemv_rows + 1] = {};
  // A task's rows [r0, r1) for all its tokens in one call, each row computed exactly as
  // gemv[] computes it. Null: gemv[] over blocks of gemv_rows.
  gemv_span_fn gemv_span = nullptr;
  prepare_fn gemv_prepare = nullptr;  // per token, before its rows; null: the kernels read x
  bytes_fn gemv_bytes = nullptr;
  gemm_fn gemm = nullptr;             // every row has one
  prepare_fn gemm_prepare = nullptr;  // every token once per call; null: the kernels read x
  bytes_fn gemm_bytes = nullptr;
  std::size_t gemm_scratch = 0;  // bytes per chunk of rows
};

#if SLM_DEFINE_KERNELS
// gemv[1..4] = &K<R>::run.
template <template <int> class K>
constexpr void set_gemv(kernel_row& k) noexcept {
  k.gemv[1] = &K<1>::run;
  k.gemv[2] = &K<2>::run;
  k.gemv[3] = &K<3>::run;
  k.gemv[4] = &K<4>::run;
}

// Rows ahead that the software prefetches of K<R>::blocks reach, for a block advance adv:
// the rows of the block after next in streams (adv = 1), the next block's for neighbouring
// rows (adv = R). One policy for every family.
constexpr std::size_t prefetch_rows(std::size_t adv) noexcept { return adv == 1 ? 2 : adv; }

// One block of R neighbouring rows through a family that computes blocks of rows
// (K<R>::blocks(w, r, x, xp, y, nblk, dr, adv): nblk blocks of R rows, block b holding rows
// r + b adv + i dr (i < R) and writing y at the same offsets from r).
template <template <int> class K, int R>
void gemv_block(const weight_matrix& w, std::size_t r, const float* x, const std::byte* xp, float* y) noexcept {
  K<R>::blocks(w, r, x, xp, y, 1, 1, R);
}

// Rows [r0, r1) as four sequential streams (adv = 1, dr = a quarter of the rows), then the
// last (r1 - r0) % 4 rows. Why streams: neighbouring rows of a short matrix (K = 1024 at 4
// bits: four rows are 2 KiB of one page) read column group by column group make a pattern
// the hardware prefetcher does not follow; four streams it does (qwen3-0.6b's matrices in
// decode order, 2-core Xeon, W4A8: 19 -> 26 GB/s). One token: each stream runs its whole
// length in one call. Several (a verification forward): every token per block of four
// stream rows, so the block's weights come from memory once and from L1 for the others.
template <template <int> class K>
void gemv_streams(const weight_matrix& w, std::size_t r0, std::size_t r1, std::size_t n_tok, const float* x,
                  std::size_t ldx, const std::byte* xp, std::size_t xstride, float* y, std::size_t ldy) noexcept {
  const std::size_t n4 = (r1 - r0) / 4, r = r0 + 4 * n4;
  if (n_tok == 1) {
    if (n4) K<4>::blocks(w, r0, x, xp, y, n4, n4, 1);
  } else {
    for (std::size_t b = 0; b < n4; ++b)
      for (std::size_t t = 0; t < n_tok; ++t)  // [4, K] x [K] -> [4] per token
        K<4>::blocks(w, r0 + b, x + t * ldx, xp + t * xstride, y + t * ldy + b, 1, n4, 1);
  }
  for (std::size_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * ldx;
    const std::byte* pt = xp + t * xstride;
    float* yt = y + t * ldy + 4 * n4;
    switch (r1 - r) {
      case 1: gemv_block<K, 1>(w, r, xt, pt, yt); break;
      case 2: gemv_block<K, 2>(w, r, xt, pt, yt); break;
      case 3: gemv_block<K, 3>(w, r, xt, pt, yt); break;
      default: break;
    }
  }
}

// For a family of K<R>::blocks: gemv[1..4] one block each, gemv_span = gemv_streams<K>.
template <template <int> class K>
constexpr void set_gemv_streams(kernel_row& k) noexcept {
  k.gemv[1] = &gemv_block<K, 1>;
  k.gemv[2] = &gemv_block<K, 2>;
  k.gemv[3] = &gemv_block<K, 3>;
  k.gemv[4] = &gemv_block<K, 4>;
  k.gemv_span = &gemv_streams<K>;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail::mm

}  // namespace slm
