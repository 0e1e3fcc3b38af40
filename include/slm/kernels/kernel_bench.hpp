// slm/kernels/kernel_bench.hpp - measuring the matmul kernels against this machine's limits.
//
// Used by `slm bench --kernels` (and usable from a host that wants to know what a
// format costs on its hardware). Weights are synthetic but valid for their format
// (finite dense values, block scales in a normal range), which is all a bandwidth or
// FLOP measurement needs. GEMV cycles through enough copies of the weights (at least
// `gemv_bytes`, default 160 MiB, several times a typical last-level cache) that every
// call streams them from DRAM, as a real decode step does; GEMM reuses one copy.
//
//   GEMV figure: weight bytes (codes + scales) per second / read-bandwidth probe
//   GEMM figure: 2 N K n_tok FLOP per second / f32 FMA probe (bf16 activations: / bf16
//                dot probe where the CPU has one; int8 activations: / int8 dot probe where
//                the W4A8 kernels are SIMD, else / f32 FMA)
//
// kernel_bench_cases() lists what `slm bench --kernels` measures, in the order it prints.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "slm/kernels/matmul.hpp"
#include "slm/core/parallel.hpp"
#include "slm/kernels/probes.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"
#include "slm/formats/weights.hpp"

namespace slm {

struct synthetic_weights {
  aligned_buffer buffer;
  std::vector<weight_matrix> copies;
  std::size_t bytes_per_copy = 0;  // data + scales of one copy
};

// `copies` of an N x K matrix of format f, filled from a xorshift generator by the
// executor's threads (first touch places pages near their readers).
result<synthetic_weights> make_synthetic_weights(weight_format f, std::size_t n, std::size_t k,
                                                 std::size_t min_bytes, executor_ref ex);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<synthetic_weights> make_synthetic_weights(weight_format f, std::size_t n, std::size_t k,
                                                            std::size_t min_bytes, executor_ref ex) {
  if (k % block_size(f) != 0) return make_error(errc::invalid_argument, "K = ", k, " is not a multiple of the ", to_string(f), " block");
  synthetic_weights out;
  const std::size_t data = n * row_bytes(f, k), blocks = block_size(f) > 1 ? n * (k / block_size(f)) : 0;
  const std::size_t per = (data + blocks + 4095) / 4096 * 4096;
  const std::size_t count = std::max<std::size_t>(1, (min_bytes + per - 1) / per);
  auto buf = aligned_buffer::allocate(per * count, 4096);
  if (!buf.ok()) return std::move(buf).take_error();
  out.buffer = std::move(*buf);
  out.bytes_per_copy = data + blocks;
  auto* words = reinterpret_cast<std::uint64_t*>(out.buffer.data());
  // Masks keep dense values finite and small: bf16/f16 |v| < 2, f32 |v| < 2, e4m3 < 2; the
  // exponent's lowest bit set keeps them normal. A subnormal operand costs Intel cores a
  // microcode assist per instruction: with 1 bf16 value in 128 subnormal (as plain random
  // bits give) the f32-activation bf16 GEMM measured 13 GFLOP/s on a Xeon whose FMA probe
  // gives 430, a figure of the data, not of the kernel (checkpoints hold no subnormals).
  const std::uint64_t mask = f == weight_format::bf16 || f == weight_format::f16 ? 0x3FFF3FFF3FFF3FFFull
                             : f == weight_format::f32                          ? 0x3FFFFFFF3FFFFFFFull
                             : f == weight_format::fp8_e4m3                     ? 0x3F3F3F3F3F3F3F3Full
                                                                                : ~0ull;
  const std::uint64_t normal = f == weight_format::bf16       ? 0x0080008000800080ull
                               : f == weight_format::f16      ? 0x0400040004000400ull
                               : f == weight_format::f32      ? 0x0080000000800000ull
                               : f == weight_format::fp8_e4m3 ? 0x0808080808080808ull
                                                              : 0ull;
  SLM_TRY(parallel_for(ex, 0, per * count / 8, [&](std::size_t lo, std::size_t hi) {
    std::uint64_t s = 0x9E3779B97F4A7C15ull * (lo + 1);
    for (std::size_t i = lo; i < hi; ++i) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      words[i] = (s & mask) | normal;
    }
  }));
  for (std::size_t c = 0; c < count; ++c) {
    std::byte* base = out.buffer.data() + c * per;
    weight_matrix w;
    w.format = f;
    w.rows = n;
    w.cols = k;
    w.data = base;
    w.row_stride = row_bytes(f, k);
    if (blocks) {
      w.scales = base + data;
      w.scale_stride = k / block_size(f);
      for (std::size_t i = 0; i < blocks; ++i) {  // e4m3 0.25 .. 3.5, or e8m0 2^-7 .. 2^8
        const auto v = static_cast<std::uint8_t>(base[data + i]);
        base[data + i] = std::byte{static_cast<std::uint8_t>(f == weight_format::nvfp4 ? 0x28 + (v & 0x1F) : 120 + (v & 0x0F))};
      }
      w.global = f == weight_format::nvfp4 ? 0.01f : 1.0f;
    }
    out.copies.push_back(w);
  }
  return out;
}
#endif  // SLM_DEFINE_KERNELS

struct kernel_figure {
  double value = 0;  // GB/s (GEMV) or GFLOP/s (GEMM)
  double ratio = 0;  // of the probe
  std::size_t calls = 0;
};

// Runs matmul for at least `seconds` (and at least 3 calls) and returns the figure.
// `act` int8 selects the W4A8 path (kernels/avx512_vnni.hpp, avx2_int8.hpp) for nvfp4 / mxfp4, bf16 the
// bf16-activation path (kernels/avx512_bf16.hpp) for nvfp4 / mxfp4 / bf16.
result<kernel_figure> measure_kernel(weight_format f, std::size_t n, std::size_t k, std::size_t n_tok,
                                     const probe_result& probe, executor_ref ex, double seconds = 0.5,
                                     std::size_t gemv_bytes = std::size_t(160) << 20,
                                     activation_precision act = activation_precision::f32);
#if SLM_DEFINE_KERNELS
SLM_INLINE result<kernel_figure> measure_kernel(weight_format f, std::size_t n, std::size_t k, std::size_t n_tok,
                                                const probe_result& probe, executor_ref ex, double seconds,
                                                std::size_t gemv_bytes, activation_precision act) {
  const bool gemv = n_tok == 1;
  auto w = make_synthetic_weights(f, n, k, gemv ? gemv_bytes : 0, ex);
  if (!w.ok()) return std::move(w).take_error();
  std::vector<float> x(n_tok * k), y(n_tok * n);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  SLM_TRY(matmul(w->copies[0], x.data(), n_tok, k, y.data(), n, ex, isa::best, act));  // warm-up
  kernel_figure fig;
  const auto t0 = std::chrono::steady_clock::now();
  double elapsed = 0;
  while (fig.calls < 3 || elapsed < seconds) {
    SLM_TRY(matmul(w->copies[fig.calls % w->copies.size()], x.data(), n_tok, k, y.data(), n, ex, isa::best, act));
    ++fig.calls;
    elapsed = seconds_since(t0);
  }
  const double calls = static_cast<double>(fig.calls);
  if (gemv) {
    fig.value = static_cast<double>(w->bytes_per_copy) * calls / elapsed / 1e9;
    fig.ratio = fig.value * 1e9 / probe.read_bytes_per_s;
  } else {
    fig.value = 2.0 * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(n_tok) * calls / elapsed / 1e9;
    const bool bf16_ceiling = act == activation_precision::bf16 && probe.bf16_flops_per_s > 0 &&
                              bf16_activations_accelerated();
    // On AMX tiles (kernels/amx.hpp: K % 32 == 0, more tokens than the GEMV takes) the tile probe.
    const bool tiles = bf16_ceiling && amx_bf16_accelerated() && k % 32 == 0 && n_tok > detail::mm::gemv_max_tokens &&
                       (f == weight_format::nvfp4 || f == weight_format::mxfp4 || f == weight_format::bf16);
    const bool int8_ceiling = act == activation_precision::int8 && probe.int8_ops_per_s > 0 && w4a8_accelerated() &&
                              (f == weight_format::nvfp4 || f == weight_format::mxfp4);
    // The W4A8 GEMM on AMX-INT8 tiles (kernels/amx_int8.hpp): the int8 tile probe.
    const bool int8_tiles = int8_ceiling && amx_int8_accelerated() && probe.amx_int8_ops_per_s > 0 &&
                            n_tok > detail::mm::gemv_max_tokens;
    fig.ratio = fig.value * 1e9 / (bf16_ceiling   ? probe.bf16_gemm_peak(tiles)
                                   : int8_ceiling ? probe.int8_gemm_peak(int8_tiles)
                                                  : probe.f32_flops_per_s);
  }
  return fig;
}
#endif  // SLM_DEFINE_KERNELS

// One case of `slm bench --kernels`: a weight format and activation path (its label:
// the format, suffixed _w4a8 for int8 activations or _bf16act for bf16 activations) on an
// N x K matrix times n_tok tokens (1: GEMV).
struct kernel_case {
  std::string_view label;
  weight_format format;
  activation_precision act;
  std::size_t n, k, n_tok;
};

// The cases in print order: each variant - nvfp4, bf16, mxfp4, f32 (f32 activations), then
// the opt-in nvfp4_w4a8, mxfp4_w4a8, nvfp4_bf16act, mxfp4_bf16act, bf16_bf16act - on each
// shape 4096x4096, 4096x14336, 14336x4096, 2048x8192 at n_tok 1, 16, 128, 512. quick: the
// 2048x8192 shape at n_tok 1 and 16 only. only: a comma-separated list of labels (empty:
// every variant).
std::vector<kernel_case> kernel_bench_cases(bool quick = false, std::string_view only = {});

#if SLM_DEFINE_KERNELS
SLM_INLINE std::vector<kernel_case> kernel_bench_cases(bool quick, std::string_view only) {
  struct variant {
    std::string_view label;
    weight_format format;
    activation_precision act;
  };
  static constexpr variant variants[] = {{"nvfp4", weight_format::nvfp4, activation_precision::f32},
                                         {"bf16", weight_format::bf16, activation_precision::f32},
                                         {"mxfp4", weight_format::mxfp4, activation_precision::f32},
                                         {"f32", weight_format::f32, activation_precision::f32},
                                         {"nvfp4_w4a8", weight_format::nvfp4, activation_precision::int8},
                                         {"mxfp4_w4a8", weight_format::mxfp4, activation_precision::int8},
                                         {"nvfp4_bf16act", weight_format::nvfp4, activation_precision::bf16},
                                         {"mxfp4_bf16act", weight_format::mxfp4, activation_precision::bf16},
                                         {"bf16_bf16act", weight_format::bf16, activation_precision::bf16}};
  static constexpr std::size_t shapes[][2] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {2048, 8192}};
  static constexpr std::size_t tokens[] = {1, 16, 128, 512};
  const auto wanted = [&](std::string_view label) {
    if (only.empty()) return true;
    for (std::size_t b = 0; b <= only.size();) {
      const std::size_t e = std::min(only.find(',', b), only.size());
      if (only.substr(b, e - b) == label) return true;
      b = e + 1;
    }
    return false;
  };
  std::vector<kernel_case> out;
  for (const variant& v : variants) {
    if (!wanted(v.label)) continue;
    for (const auto& s : shapes) {
      if (quick && s[0] != 2048) continue;
      for (std::size_t n_tok : tokens)
        if (!quick || n_tok <= 16) out.push_back(kernel_case{v.label, v.format, v.act, s[0], s[1], n_tok});
    }
  }
  return out;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm
