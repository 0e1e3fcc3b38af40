// slm/kernels/matmul.hpp - fused dequantize-and-multiply: Y = X W^T for every weight format.
//
//   status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
//                 float* y, std::size_t ldy, executor_ref ex, isa which = isa::best);
//
//   Y[t, n] = sum_k X[t, k] * W[n, k]   for t < n_tok, n < N, k < K
//
// X is f32 [n_tok, K] with row stride ldx (elements), Y is f32 [n_tok, N] with row stride
// ldy. Weights are dequantized on the fly (W4A16 semantics: never rounded to anything
// narrower than f32), products accumulate in f32. n_tok = 1 is GEMV (decode), larger
// n_tok is GEMM (prefill). Any pointer alignment works (checkpoint data is unaligned).
//
// Dequantized weight (formats/weights.hpp): W[n, k] = element(n, k) x (block_scale(n, k) x global),
// the factor computed once per block in that order (for NVFP4 exactly ModelOpt's
// e2m1 x (e4m3(scale) x weight_scale_2)).
//
// Kernels per format and instruction set (isa, core/cpu.hpp):
//
//   format     scalar      avx2 (AVX2+FMA+F16C)              avx512 (F+BW+VL+DQ)
//   f32        reference   GEMV fused, GEMM panel            GEMV fused, GEMM panel
//   bf16       reference   GEMV fused, GEMM panel            GEMV fused, GEMM panel
//   f16        reference   GEMV fused (F16C), GEMM panel     GEMV fused, GEMM panel
//   fp8_e4m3   reference   GEMV+GEMM via decoded panel       GEMV+GEMM via decoded panel
//   nvfp4      reference   GEMV fused (pshufb), GEMM panel   GEMV fused (vpermps), GEMM panel
//   mxfp4      reference   as nvfp4, one E8M0 scale/32       as nvfp4, one E8M0 scale/32
//
//   On AArch64 the families are scalar and neon (ARMv8.0-A Advanced SIMD, kernels/neon.hpp):
//   GEMV fused for every format (fp8 included: E4M3 rebuilt as f16 bits and widened by
//   FCVTL; fp4 looked up as bf16 byte pairs with TBL), GEMM panel (16 rows x 4 tokens).
//
//   reference  detail::mm::reference() (kernels/reference.hpp): one row at a time, k = 0..K-1
//              in order, each weight dequantized as above; obviously correct, slow.
//              isa::scalar runs it.
//   GEMV fused decode codes in registers and multiply-accumulate against x in f32; the
//              block factor is applied once per block (acc += f_b * dot(elements_b, x_b)).
//              Four rows per iteration, the next rows software-prefetched into L2. AVX-512
//              nvfp4/mxfp4 take 128 columns per step: 64 code bytes as 16 words, one
//              vpermps E2M1 lookup per nibble position (no widening), one factor vector
//              per step; AVX-512 bf16 splits each word into even/odd columns. Both read x
//              through a per-call copy permuted to that lane order.
//   GEMM panel a thread decodes PR rows x KC columns of W (PR = 64 on AVX-512, 16 on
//              AVX2) into an f32 panel laid out k-major (dequantized exactly as the
//              reference does), then a register-tiled microkernel multiplies it with a
//              tile of up to 6 tokens: broadcast x[t, k], FMA into PR-wide row
//              vectors (4 x 6 accumulators on AVX-512, 2 x 6 on AVX2), so each weight
//              is decoded once per call whatever n_tok is.
//   fp8 has no fused GEMV: it runs the panel path with one token (decode is a table
//   lookup, scalar); the panel path is also what n_tok > gemv_max_tokens uses for every
//   format. Up to gemv_max_tokens tokens (verification of drafts, a few sequences) run the
//   fused GEMV per token over each group of rows, the group's weights read from memory
//   once: decoding a weight per token costs less there than the panel's f32 round trip.
//
// Determinism: rows are split across threads with partition() in fixed units, and
// every output element is computed by exactly one thread with an operation sequence
// that depends only on (format, isa, n_tok path, K): results are bit-identical for any
// thread count (tested). Different isa values differ only in summation order.
//
// One driver, one table. matmul() below is the only loop over rows, tokens and threads;
// what it runs is one row of the kernel table (kernels/table.hpp), keyed by (weight format,
// activation precision, isa). The kernels live in one file per isa: kernels/reference.hpp,
// avx2.hpp, avx512.hpp, avx512_bf16.hpp and amx.hpp (bf16 activations), avx512_vnni.hpp and
// avx2_int8.hpp (int8 activations) and neon.hpp. The activation precision is the caller's,
// per call (activation_precision, kernels/kernel_row.hpp); default_activations()
// (kernels/table.hpp) is the one place that says what the layers and the format policies
// run.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slm/core/cpu.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"
#include "slm/formats/weights.hpp"
#include "slm/kernels/kernel_row.hpp"
#include "slm/kernels/table.hpp"

namespace slm {

namespace detail::mm {

status validate(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, const float* y,
                std::size_t ldy);
#if SLM_DEFINE_KERNELS
SLM_INLINE status validate(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, const float* y,
                           std::size_t ldy) {
  const std::size_t N = w.rows, K = w.cols;
  const std::string_view fmt = to_string(w.format);
  switch (w.format) {
    case weight_format::f32: case weight_format::bf16: case weight_format::f16: case weight_format::fp8_e4m3:
    case weight_format::nvfp4: case weight_format::mxfp4: break;
    default: return make_error(errc::invalid_argument, "matmul: unknown weight format ", static_cast<int>(w.format));
  }
  const std::size_t bs = block_size(w.format);
  if (K % bs != 0)
    return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "]: K must be a multiple of ", bs);
  if (n_tok == 0 || N == 0) return ok_status();
  if (!y) return make_error(errc::invalid_argument, "matmul: y is null");
  if (ldy < N) return make_error(errc::invalid_argument, "matmul: ldy ", ldy, " is less than N ", N);
  if (K == 0) return ok_status();
  if (!x) return make_error(errc::invalid_argument, "matmul: x is null");
  if (ldx < K) return make_error(errc::invalid_argument, "matmul: ldx ", ldx, " is less than K ", K);
  if (!w.data) return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "] has no data");
  if (N > 1 && w.row_stride < row_bytes(w.format, K))
    return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "]: row_stride ", w.row_stride,
                      " is less than a row's ", row_bytes(w.format, K), " bytes");
  if (w.format == weight_format::nvfp4 || w.format == weight_format::mxfp4) {
    if (!w.scales) return make_error(errc::invalid_argument, "matmul: ", fmt, " weight has no block scales");
    if (N > 1 && w.scale_stride < K / bs)
      return make_error(errc::invalid_argument, "matmul: ", fmt, " weight [", N, ", ", K, "]: scale_stride ",
                        w.scale_stride, " is less than ", K / bs, " scales per row");
  }
  if (w.format == weight_format::fp8_e4m3 && w.scale_block_cols != 0) {
    if (!w.scales) return make_error(errc::invalid_argument, "matmul: fp8 weight with block scales has no scales");
    if (w.scale_block_rows == 0) return make_error(errc::invalid_argument, "matmul: fp8 scale_block_rows is 0");
    const std::size_t sc = (K + w.scale_block_cols - 1) / w.scale_block_cols;
    const std::size_t sr = (N + w.scale_block_rows - 1) / w.scale_block_rows;
    if (sr > 1 && w.scale_stride < 4 * sc)
      return make_error(errc::invalid_argument, "matmul: fp8 weight [", N, ", ", K, "]: scale_stride ", w.scale_stride,
                        " is less than ", sc, " f32 scales per row");
  }
  return ok_status();
}
#endif  // SLM_DEFINE_KERNELS

// Units of rows handed to threads: fixed, so which thread computes a row never changes
// what is computed.
inline constexpr std::size_t row_unit = 32;

// The driver: Y = X W^T through row k of the table, for arguments matmul_at has checked
// (n_tok, N and K > 0).
status run(const kernel_row& k, const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
           std::size_t ldy, executor_ref ex);
#if SLM_DEFINE_KERNELS
SLM_INLINE status run(const kernel_row& k, const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                      float* y, std::size_t ldy, executor_ref ex) {
  const std::size_t N = w.rows, K = w.cols;
  auto round64 = [](std::size_t b) { return (b + 63) / 64 * 64; };

  // The bf16 definition on f32 kernels: X rounded once (tokens split over the threads).
  aligned_buffer rounded;
  if (k.round_bf16) {
    const static_partition tpart = partition(0, n_tok, ex.concurrency());
    auto buf = aligned_buffer::allocate(n_tok * K * sizeof(float));
    if (!buf.ok()) return std::move(buf).take_error().with_context("matmul");
    rounded = std::move(*buf);
    float* xr = reinterpret_cast<float*>(rounded.data());
    SLM_TRY(parallel_for_chunks(ex, tpart.count, [&](std::size_t c) {
      const index_range tr = tpart.chunk(c);
      for (std::size_t t = tr.begin; t < tr.end; ++t)
        for (std::size_t i = 0; i < K; ++i) xr[t * K + i] = bf16_to_f32(a16::to_bf16(x[t * ldx + i]));
    }));
    x = xr;
    ldx = K;
  }

  const std::size_t units = (N + row_unit - 1) / row_unit;

  // Fused GEMV for up to gemv_max_tokens tokens where the row has one: each token's
  // prepared copy first (made here: K values are cheaper inline than a round trip through
  // the pool), then per group of rows every token, so the group's weights come from memory
  // once and from L1/L2 for the other tokens. A row of a token is computed exactly as a
  // one-token call computes it: a verification forward over k + 1 drafted positions
  // reproduces k + 1 decode steps bit for bit. Where the row has gemv_span, a task's rows
  // and tokens go to it in one call (four sequential row streams, kernel_row.hpp). Short
  // tasks (little work each, no scratch): cut finer, see balanced_chunks.
  if (n_tok <= gemv_max_tokens && k.gemv[1]) {
    const static_partition gpart = partition(0, units, balanced_chunks(ex));
    const std::size_t stride = k.gemv_prepare ? round64(k.gemv_bytes(K, 1)) : 0;
    aligned_buffer xp;
    if (k.gemv_prepare) {
      auto b = aligned_buffer::allocate(n_tok * stride);
      if (!b.ok()) return std::move(b).take_error().with_context("matmul");
      xp = std::move(*b);
      for (std::size_t t = 0; t < n_tok; ++t) k.gemv_prepare(w, x + t * ldx, 0, 1, xp.data() + t * stride);
    }
    return parallel_for_chunks(ex, gpart.count, [&](std::size_t c) {
      const index_range u = gpart.chunk(c);
      const index_range r{u.begin * row_unit, std::min(N, u.end * row_unit)};
      if (k.gemv_span)  // [rows, K] x [K] -> [rows] per token
        return k.gemv_span(w, r.begin, r.end, n_tok, x, ldx, xp.data(), stride, y + r.begin, ldy);
      for (std::size_t n = r.begin; n < r.end; n += gemv_rows) {
        const std::size_t rows = std::min(gemv_rows, r.end - n);
        for (std::size_t t = 0; t < n_tok; ++t)  // [rows, K] x [K] -> [rows] per token
          k.gemv[rows](w, n, x + t * ldx, xp.data() + t * stride, y + t * ldy + n);
      }
    });
  }

  // GEMM: every token prepared once (tokens split over the threads; inline for one or
  // two), then chunks of rows, each with its own scratch.
  const static_partition part = partition(0, units, ex.concurrency());
  const std::size_t prepared = k.gemm_prepare ? round64(k.gemm_bytes(K, n_tok)) : 0;
  const std::size_t per_chunk = round64(k.gemm_scratch);
  aligned_buffer buf;
  if (prepared + per_chunk > 0) {
    auto b = aligned_buffer::allocate(prepared + part.count * per_chunk);
    if (!b.ok()) return std::move(b).take_error().with_context("matmul");
    buf = std::move(*b);
  }
  if (k.gemm_prepare) {
    const static_partition tpart = partition(0, n_tok, ex.concurrency());
    auto prepare = [&](std::size_t c) {
      const index_range tr = tpart.chunk(c);
      for (std::size_t t = tr.begin; t < tr.end; ++t) k.gemm_prepare(w, x + t * ldx, t, n_tok, buf.data());
    };
    if (n_tok <= 2) {
      for (std::size_t c = 0; c < tpart.count; ++c) prepare(c);
    } else {
      SLM_TRY(parallel_for_chunks(ex, tpart.count, prepare));
    }
  }
  const acts a{x, ldx, k.gemm_prepare ? buf.data() : nullptr};
  std::byte* scratch = per_chunk ? buf.data() + prepared : nullptr;
  return parallel_for_chunks(ex, part.count, [&](std::size_t c) {
    const index_range u = part.chunk(c);
    const index_range r{u.begin * row_unit, std::min(N, u.end * row_unit)};
    k.gemm(w, a, n_tok, y, ldy, r.begin, r.end, scratch ? scratch + c * per_chunk : nullptr);
  });
}
#endif  // SLM_DEFINE_KERNELS

// The public entries share this: validation, the isa check, the empty and K = 0 cases,
// then the table's row for (format, act, isa).
status matmul_at(std::string_view who, const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                 float* y, std::size_t ldy, executor_ref ex, isa which, activation_precision act);
#if SLM_DEFINE_KERNELS
SLM_INLINE status matmul_at(std::string_view who, const weight_matrix& w, const float* x, std::size_t n_tok,
                            std::size_t ldx, float* y, std::size_t ldy, executor_ref ex, isa which,
                            activation_precision act) {
  SLM_TRY(validate(w, x, n_tok, ldx, y, ldy));
  const isa chosen = resolve_isa(which);
  if (!isa_supported(chosen, host_cpu()))
    return make_error(errc::unsupported, who, ": instruction set ", to_string(chosen), " is not available on this CPU");
  const std::size_t N = w.rows, K = w.cols;
  if (n_tok == 0 || N == 0) return ok_status();
  if (K == 0) {
    for (std::size_t t = 0; t < n_tok; ++t)
      for (std::size_t n = 0; n < N; ++n) y[t * ldy + n] = 0.0f;
    return ok_status();
  }
  return run(find_kernels(w.format, act, chosen), w, x, n_tok, ldx, y, ldy, ex);
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail::mm

// Y[t, n] = sum_k X[t, k] * W[n, k]; see the file comment. Returns invalid_argument for
// bad shapes or pointers, unsupported when `which` names an isa this CPU lacks,
// out_of_memory when scratch cannot be allocated. y is untouched on error.
inline status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                     std::size_t ldy, executor_ref ex, isa which = isa::best) {
  return detail::mm::matmul_at("matmul", w, x, n_tok, ldx, y, ldy, ex, which, activation_precision::f32);
}

// matmul with a choice of activation precision (kernels/kernel_row.hpp): f32 is matmul()
// itself; bf16 and int8 apply to the formats that have them (table.hpp), the others run
// with f32 activations.
inline status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                     std::size_t ldy, executor_ref ex, isa which, activation_precision act) {
  return detail::mm::matmul_at("matmul", w, x, n_tok, ldx, y, ldy, ex, which, act);
}

// Y = X W^T with X quantized to int8 per block (kernels/avx512_vnni.hpp states the
// definition and its bound); nvfp4 / mxfp4 only, other formats run matmul().
inline status matmul_w4a8(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                          std::size_t ldy, executor_ref ex, isa which = isa::best) {
  return detail::mm::matmul_at("matmul_w4a8", w, x, n_tok, ldx, y, ldy, ex, which, activation_precision::int8);
}

// Y = X W^T with X rounded to bf16 (kernels/avx512_bf16.hpp states the definition and its
// bound); nvfp4 / mxfp4 / bf16 only, other formats run matmul().
inline status matmul_bf16_activations(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx,
                                      float* y, std::size_t ldy, executor_ref ex, isa which = isa::best) {
  return detail::mm::matmul_at("matmul_bf16_activations", w, x, n_tok, ldx, y, ldy, ex, which,
                               activation_precision::bf16);
}

}  // namespace slm
