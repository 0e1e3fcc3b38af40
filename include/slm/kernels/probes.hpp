// slm/kernels/probes.hpp - machine-limit probes: the yardsticks every benchmark figure is divided by.
//
//   read bandwidth  a streaming read (sum of 64-bit words) over a buffer much larger
//                   than the last-level cache, one contiguous slice per thread read as
//                   one stream or as four prefetched streams, best of several passes of
//                   each. What a memory-bound kernel (decode GEMV) can at best reach.
//   f32 FMA peak    independent FMA chains held in registers, one per accumulator,
//                   enough of them to cover the FMA latency. What a compute-bound
//                   kernel (prefill GEMM) can at best reach.
//   bf16 dot peak   the same with vdpbf16ps (AVX512_BF16: 32 bf16 products summed in
//                   pairs into 16 f32 lanes, 64 FLOP per instruction); 0 on CPUs
//                   without it. The ceiling of the bf16-activation GEMM (kernels/avx512_bf16.hpp).
//   int8 dot peak   the same with vpdpbusd (AVX512_VNNI: 64 u8 x s8 products summed in
//                   fours into 16 i32 lanes, 128 operations per instruction); on AVX2
//                   without it, vpmaddubsw + vpaddw (32 products summed in pairs into 16
//                   i16 lanes, then added: 64 operations per pair of instructions), the
//                   instructions of kernels/avx2_int8.hpp; 0 on other CPUs. The ceiling of
//                   the int8-activation (W4A8) GEMM.
//   AMX bf16 peak   tdpbf16ps on tiles held in registers (16 x 16 x 32 products, 16384
//                   FLOP per instruction), four independent accumulators; 0 where
//                   amx_usable() is false. The ceiling of the bf16-activation GEMM where it
//                   runs on tiles (kernels/amx.hpp).
//   AMX int8 peak   tdpbssd likewise (16 x 16 x 64 products, 32768 operations per
//                   instruction); 0 without AMX-INT8 or amx_usable(). The tile product of
//                   the W4A8 GEMM on tiles (kernels/amx_int8.hpp), which that kernel's
//                   per-segment scaling, not the tiles, bounds.
//
// Both use the executor given, so they measure the same threads as the benchmark. The
// FMA probe picks its instruction set at run time (core/cpu.hpp), like the kernels.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && SLM_DEFINE_KERNELS  // only the (guarded) probe loops use it
#include "slm/kernels/x86_intrinsics.hpp"
#endif

#include "slm/core/cpu.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/tensor.hpp"
#include "slm/kernels/amx.hpp"
#include "slm/kernels/amx_int8.hpp"

namespace slm {

struct probe_result {
  double read_bytes_per_s = 0;
  double f32_flops_per_s = 0;
  double bf16_flops_per_s = 0;  // 0: no AVX512_BF16
  double int8_ops_per_s = 0;    // AVX512_VNNI, else AVX2 (vpmaddubsw); 0: neither
  double amx_bf16_flops_per_s = 0;  // 0: no AMX-BF16 usable (amx_usable())
  double amx_int8_ops_per_s = 0;    // 0: no AMX-INT8 usable

  // The ceiling of a bf16-activation GEMM: AMX's where its kernels run, else vdpbf16ps's
  // (0 without either).
  double bf16_gemm_peak(bool on_tiles) const noexcept { return on_tiles ? amx_bf16_flops_per_s : bf16_flops_per_s; }
  // The ceiling of an int8-activation (W4A8) GEMM: likewise AMX-INT8's or vpdpbusd's.
  double int8_gemm_peak(bool on_tiles) const noexcept { return on_tiles ? amx_int8_ops_per_s : int8_ops_per_s; }
  std::size_t threads = 1;
  std::size_t probe_bytes = 0;
};

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

namespace detail {
inline void prefetch_read(const void* p) noexcept {
#if defined(__GNUC__) || defined(__clang__)
  __builtin_prefetch(p, 0, 2);
#else
  (void)p;
#endif
}
}  // namespace detail

// Bytes/s of a parallel streaming read over `bytes` bytes.
double probe_read_bandwidth(executor_ref ex, std::size_t bytes, int passes = 4);
#if SLM_DEFINE_KERNELS
SLM_INLINE double probe_read_bandwidth(executor_ref ex, std::size_t bytes, int passes) {
  auto buf = aligned_buffer::allocate(bytes, 4096);
  if (!buf.ok()) return 0;
  const std::size_t words = bytes / 8;
  auto* p = reinterpret_cast<std::uint64_t*>(buf->data());
  // Touch every page from the threads that will read it (first-touch placement).
  (void)parallel_for(ex, 0, words, [&](std::size_t lo, std::size_t hi) {
    for (std::size_t i = lo; i < hi; ++i) p[i] = i * 0x9E3779B97F4A7C15ull;
  });
  std::vector<std::uint64_t> sink(ex.concurrency() * 8, 0);
  double best = 0;
  // Two ways to read, each timed `passes` times, alternately: one sequential stream per
  // thread, and four streams per thread (the quarters of its slice, read in step) with
  // software prefetch ahead, which is how the GEMV kernels read four weight rows at a time.
  // Where memory latency is high (virtual machines, many-core servers) one stream per core
  // cannot keep enough misses in flight, and the kernels beat a one-stream probe.
  for (int pass = 0; pass < 2 * passes; ++pass) {
    const bool streams4 = pass % 2 == 1;
    const auto t0 = std::chrono::steady_clock::now();
    (void)parallel_for_chunks(ex, ex.concurrency(), [&](std::size_t c) {
      const auto r = partition(0, words, ex.concurrency()).chunk(c);
      std::uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
      std::size_t i = r.begin;
      if (streams4) {
        const std::size_t q = (r.end - r.begin) / 32 * 8;  // a quarter, in whole cache lines
        const std::uint64_t* s0 = p + r.begin;
        for (std::size_t k = 0; k < q; k += 8) {
          const std::size_t ahead = std::min(k + 256, q - 8);  // 2 KiB ahead, within the quarter
          for (std::size_t stream = 0; stream < 4; ++stream) detail::prefetch_read(s0 + stream * q + ahead);
          a0 += s0[k] + s0[k + 1] + s0[k + 2] + s0[k + 3];
          a1 += s0[k + 4] + s0[k + 5] + s0[k + 6] + s0[k + 7];
          a2 += s0[q + k] + s0[q + k + 1] + s0[q + k + 2] + s0[q + k + 3];
          a3 += s0[q + k + 4] + s0[q + k + 5] + s0[q + k + 6] + s0[q + k + 7];
          a4 += s0[2 * q + k] + s0[2 * q + k + 1] + s0[2 * q + k + 2] + s0[2 * q + k + 3];
          a5 += s0[2 * q + k + 4] + s0[2 * q + k + 5] + s0[2 * q + k + 6] + s0[2 * q + k + 7];
          a6 += s0[3 * q + k] + s0[3 * q + k + 1] + s0[3 * q + k + 2] + s0[3 * q + k + 3];
          a7 += s0[3 * q + k + 4] + s0[3 * q + k + 5] + s0[3 * q + k + 6] + s0[3 * q + k + 7];
        }
        i = r.begin + 4 * q;
      }
      for (; i + 8 <= r.end; i += 8) {
        a0 += p[i]; a1 += p[i + 1]; a2 += p[i + 2]; a3 += p[i + 3];
        a4 += p[i + 4]; a5 += p[i + 5]; a6 += p[i + 6]; a7 += p[i + 7];
      }
      for (; i < r.end; ++i) a0 += p[i];
      sink[c * 8] = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;  // one cache line per chunk
    });
    const double s = seconds_since(t0);
    if (s > 0 && static_cast<double>(bytes) / s > best) best = static_cast<double>(bytes) / s;
  }
  volatile std::uint64_t keep = 0;
  for (auto v : sink) keep = keep + v;
  return best;
}
#endif  // SLM_DEFINE_KERNELS

namespace detail {

// One thread's FMA chains; returns a value that depends on every chain (so none is
// optimised away). Each ISA's body is compiled for that ISA through a target attribute
// and chosen at run time, so the probe measures the vector peak whatever flags the
// including program was built with.
constexpr int probe_chains = 12;  // > FMA latency x issue width on current x86 cores
// Every loop over the chains is unrolled: otherwise g++ keeps some of them in memory.

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx512f"))) float fma_chains_avx512(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("avx512f"))) SLM_INLINE float fma_chains_avx512(std::size_t steps) noexcept {
  __m512 acc[probe_chains];
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) acc[j] = _mm512_set1_ps(0.5f + 0.01f * static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-6f);
  for (std::size_t i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < probe_chains; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
  }
  alignas(64) float tmp[16];
  float s = 0;
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) {
    _mm512_store_ps(tmp, acc[j]);
    for (float t : tmp) s += t;
  }
  return s;
}
#endif  // SLM_DEFINE_KERNELS
__attribute__((target("avx2,fma"))) float fma_chains_avx2(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("avx2,fma"))) SLM_INLINE float fma_chains_avx2(std::size_t steps) noexcept {
  __m256 acc[probe_chains];
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) acc[j] = _mm256_set1_ps(0.5f + 0.01f * static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-6f);
  for (std::size_t i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < probe_chains; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
  }
  alignas(32) float tmp[8];
  float s = 0;
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) {
    _mm256_store_ps(tmp, acc[j]);
    for (float t : tmp) s += t;
  }
  return s;
}
#endif  // SLM_DEFINE_KERNELS
__attribute__((target("avx512f,avx512bf16"))) float bf16_dot_chains_avx512(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("avx512f,avx512bf16"))) SLM_INLINE float bf16_dot_chains_avx512(std::size_t steps) noexcept {
  __m512 acc[probe_chains];
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) acc[j] = _mm512_set1_ps(0.5f + 0.01f * static_cast<float>(j));
  const __m512i one = _mm512_set1_epi32(0x3F803F80);  // bf16 pairs (1, 1)
  const __m512bh a = (__m512bh)one, b = (__m512bh)_mm512_set1_epi32(0x33D633D6);  // (1e-7, 1e-7)
  for (std::size_t i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < probe_chains; ++j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b);
  }
  alignas(64) float tmp[16];
  float s = 0;
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) {
    _mm512_store_ps(tmp, acc[j]);
    for (float t : tmp) s += t;
  }
  return s;
}
#endif  // SLM_DEFINE_KERNELS
__attribute__((target("avx512f,avx512vnni"))) std::uint32_t int8_dot_chains_avx512(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("avx512f,avx512vnni"))) SLM_INLINE std::uint32_t int8_dot_chains_avx512(std::size_t steps) noexcept {
  __m512i acc[probe_chains];
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(1), b = _mm512_set1_epi8(-1);  // u8 x s8 pairs
  for (std::size_t i = 0; i < steps; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < probe_chains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b);
  }
  alignas(64) std::uint32_t tmp[16];
  std::uint32_t s = 0;  // the lanes wrap (as vpdpbusd's do): unsigned, so the sum is defined
#pragma GCC unroll 12
  for (int j = 0; j < probe_chains; ++j) {
    _mm512_store_si512(tmp, acc[j]);
    for (std::uint32_t t : tmp) s += t;
  }
  return s;
}
#endif  // SLM_DEFINE_KERNELS
__attribute__((target("avx2"))) std::uint32_t int8_dot_chains_avx2(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("avx2"))) SLM_INLINE std::uint32_t int8_dot_chains_avx2(std::size_t steps) noexcept {
  // In assembly: from intrinsics clang hoisted the product of two constants (2 TOP/s on a
  // CPU that does 0.3) and g++ kept chains in memory (half the rate). Each chain's
  // product reads the chain itself (its u8 side) and the s8 constant, then adds in.
  __m256i a0 = _mm256_set1_epi16(0), a1 = _mm256_set1_epi16(1), a2 = _mm256_set1_epi16(2),
          a3 = _mm256_set1_epi16(3), a4 = _mm256_set1_epi16(4), a5 = _mm256_set1_epi16(5),
          a6 = _mm256_set1_epi16(6), a7 = _mm256_set1_epi16(7), a8 = _mm256_set1_epi16(8),
          a9 = _mm256_set1_epi16(9), a10 = _mm256_set1_epi16(10), a11 = _mm256_set1_epi16(11);
  const __m256i b = _mm256_set1_epi8(-1);
#define SLM_PROBE_STEP(r) "vpmaddubsw %[b], %[" #r "], %%ymm15\n\tvpaddw %%ymm15, %[" #r "], %[" #r "]\n\t"
  for (std::size_t i = 0; i < steps; ++i)
    __asm__(SLM_PROBE_STEP(a0) SLM_PROBE_STEP(a1) SLM_PROBE_STEP(a2) SLM_PROBE_STEP(a3) SLM_PROBE_STEP(a4)
                SLM_PROBE_STEP(a5) SLM_PROBE_STEP(a6) SLM_PROBE_STEP(a7) SLM_PROBE_STEP(a8) SLM_PROBE_STEP(a9)
                    SLM_PROBE_STEP(a10) SLM_PROBE_STEP(a11)
            : [a0] "+x"(a0), [a1] "+x"(a1), [a2] "+x"(a2), [a3] "+x"(a3), [a4] "+x"(a4), [a5] "+x"(a5),
              [a6] "+x"(a6), [a7] "+x"(a7), [a8] "+x"(a8), [a9] "+x"(a9), [a10] "+x"(a10), [a11] "+x"(a11)
            : [b] "x"(b)
            : "xmm15");
#undef SLM_PROBE_STEP
  static_assert(probe_chains == 12, "the assembly above runs twelve chains");
  const __m256i acc[probe_chains] = {a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11};
  alignas(32) std::uint16_t tmp[16];
  std::uint32_t s = 0;  // the lanes wrap (vpaddw): unsigned, so the sum is defined
  for (const __m256i& v : acc) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
    for (std::uint16_t t : tmp) s += t;
  }
  return s;
}
#endif  // SLM_DEFINE_KERNELS
__attribute__((target("amx-tile,amx-bf16"))) float tile_dot_chains_amx(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("amx-tile,amx-bf16"))) SLM_INLINE float tile_dot_chains_amx(std::size_t steps) noexcept {
  const amx::tile_config cfg;
  alignas(64) std::uint16_t a[16 * 32], b[16 * 32];
  alignas(64) float c[16 * 16];
  std::fill(a, a + 16 * 32, std::uint16_t{0x3F80});  // 1
  std::fill(b, b + 16 * 32, std::uint16_t{0x33D6});  // 1e-7
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (std::size_t i = 0; i < steps; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float s = 0;
  _tile_stored(0, c, 64);
  s += c[0];
  _tile_stored(3, c, 64);
  s += c[255];
  _tile_release();
  return s;
}
#endif  // SLM_DEFINE_KERNELS
__attribute__((target("amx-tile,amx-int8"))) std::int32_t tile_dot_chains_amx8(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
__attribute__((target("amx-tile,amx-int8"))) SLM_INLINE std::int32_t tile_dot_chains_amx8(std::size_t steps) noexcept {
  const amx::tile_config cfg;  // all eight tiles 16 rows of 64 bytes: A 16 x 64 bytes, B 16 x 16 dwords
  alignas(64) std::int8_t a[16 * 64], b[16 * 64];
  alignas(64) std::int32_t c[16 * 16];
  std::fill(a, a + 16 * 64, std::int8_t{1});
  std::fill(b, b + 16 * 64, std::int8_t{1});  // 64 a step: int32 holds 2^25 steps
  _tile_loadconfig(&cfg);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, b, 64);
  _tile_loadd(7, b, 64);
  for (std::size_t i = 0; i < steps; ++i) {
    _tile_dpbssd(0, 4, 6);
    _tile_dpbssd(1, 4, 7);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 5, 7);
  }
  std::int32_t s = 0;
  _tile_stored(0, c, 64);
  s += c[0];
  _tile_stored(3, c, 64);
  s += c[255];
  _tile_release();
  return s;
}
#endif  // SLM_DEFINE_KERNELS
#endif

float fma_chains_scalar(std::size_t steps) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE float fma_chains_scalar(std::size_t steps) noexcept {
  float acc[probe_chains];
  for (int j = 0; j < probe_chains; ++j) acc[j] = 0.5f + 0.01f * static_cast<float>(j);
  for (std::size_t i = 0; i < steps; ++i)
    for (int j = 0; j < probe_chains; ++j) acc[j] = acc[j] * 0.999999f + 1e-6f;
  float s = 0;
  for (float v : acc) s += v;
  return s;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail

namespace detail {
// The best of three passes of `chain()` run once on every thread, as operations per
// second; `ops` is what one call performs. Each call's result is kept, so none is
// optimised away.
template <class Chain>
double best_rate(executor_ref ex, double ops, Chain&& chain) {
  std::vector<double> sink(ex.concurrency() * 8, 0.0);  // one cache line per thread
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)parallel_for_chunks(ex, ex.concurrency(), [&](std::size_t c) { sink[c * 8] = static_cast<double>(chain()); });
    const double sec = seconds_since(t0);
    const double rate = ops * static_cast<double>(ex.concurrency()) / sec;
    if (sec > 0 && rate > best) best = rate;
  }
  volatile double keep = 0;
  for (double v : sink) keep = keep + v;
  return best;
}
// A tile probe: `instructions` tile products a thread, four a step of `chain`, each of
// `ops` operations.
template <class R>
double tile_rate(executor_ref ex, std::size_t instructions, double ops, R (*chain)(std::size_t) noexcept) {
  const std::size_t steps = instructions / 4;
  return best_rate(ex, 4.0 * ops * static_cast<double>(steps), [&] { return chain(steps); });
}
}  // namespace detail

// FLOP/s (2 per FMA lane) of independent f32 FMA chains on every thread, with the
// widest FMA this CPU has (AVX-512, else AVX2+FMA, else scalar).
double probe_fma_f32(executor_ref ex, std::size_t elements = 20'000'000);
#if SLM_DEFINE_KERNELS
SLM_INLINE double probe_fma_f32(executor_ref ex, std::size_t elements) {
  const cpu_features& cpu = host_cpu();
  std::size_t lanes = 1;
  float (*body)(std::size_t) noexcept = detail::fma_chains_scalar;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (cpu.avx512f) lanes = 16, body = detail::fma_chains_avx512;
  else if (cpu.avx2 && cpu.fma) lanes = 8, body = detail::fma_chains_avx2;
#else
  (void)cpu;
#endif
  const std::size_t steps = elements / lanes;
  return detail::best_rate(ex, 2.0 * detail::probe_chains * static_cast<double>(steps * lanes),
                           [&] { return body(steps); });
}
#endif  // SLM_DEFINE_KERNELS

// FLOP/s (64 per vdpbf16ps) of independent bf16 dot chains on every thread; 0 without
// AVX512_BF16.
double probe_dot_bf16(executor_ref ex, std::size_t products = 160'000'000);
#if SLM_DEFINE_KERNELS
SLM_INLINE double probe_dot_bf16(executor_ref ex, std::size_t products) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const cpu_features& cpu = host_cpu();
  if (!cpu.avx512bf16) return 0;
  const std::size_t steps = products / 32;
  return detail::best_rate(ex, 64.0 * detail::probe_chains * static_cast<double>(steps),
                           [&] { return detail::bf16_dot_chains_avx512(steps); });
#else
  (void)ex;
  (void)products;
  return 0;
#endif
}
#endif  // SLM_DEFINE_KERNELS

// Operations/s (two per int8 product, a multiply and an add: 128 per vpdpbusd, 64 per
// vpmaddubsw + vpaddw) of independent int8 dot chains on every thread, with AVX512_VNNI
// where the CPU has it, else AVX2; 0 on other CPUs. The ceiling of the int8-activation
// (W4A8) GEMM (kernels/avx512_vnni.hpp, kernels/avx2_int8.hpp).
double probe_dot_int8(executor_ref ex, std::size_t products = 320'000'000);
#if SLM_DEFINE_KERNELS
SLM_INLINE double probe_dot_int8(executor_ref ex, std::size_t products) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (host_cpu().avx512vnni) {
    const std::size_t steps = products / 64;
    return detail::best_rate(ex, 128.0 * detail::probe_chains * static_cast<double>(steps),
                             [&] { return detail::int8_dot_chains_avx512(steps); });
  }
  if (!isa_supported(isa::avx2, host_cpu())) return 0;
  const std::size_t steps = products / 32;
  return detail::best_rate(ex, 64.0 * detail::probe_chains * static_cast<double>(steps),
                           [&] { return detail::int8_dot_chains_avx2(steps); });
#else
  (void)ex;
  (void)products;
  return 0;
#endif
}
#endif  // SLM_DEFINE_KERNELS

// FLOP/s (16384 per tdpbf16ps) of four independent tile accumulators on every thread; 0
// without AMX-BF16 or where amx_usable() is false.
double probe_tile_bf16(executor_ref ex, std::size_t instructions = 200'000);
#if SLM_DEFINE_KERNELS
SLM_INLINE double probe_tile_bf16(executor_ref ex, std::size_t instructions) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!host_cpu().amx_bf16 || !amx_usable()) return 0;
  return detail::tile_rate(ex, instructions, 16384.0, &detail::tile_dot_chains_amx);
#else
  (void)ex;
  (void)instructions;
  return 0;
#endif
}
#endif  // SLM_DEFINE_KERNELS

// Operations/s (32768 per tdpbssd) of four independent int8 tile accumulators on every
// thread; 0 without AMX-INT8 or where amx_usable() is false.
double probe_tile_int8(executor_ref ex, std::size_t instructions = 200'000);
#if SLM_DEFINE_KERNELS
SLM_INLINE double probe_tile_int8(executor_ref ex, std::size_t instructions) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (!host_cpu().amx_int8 || !amx_usable()) return 0;
  return detail::tile_rate(ex, instructions, 32768.0, &detail::tile_dot_chains_amx8);
#else
  (void)ex;
  (void)instructions;
  return 0;
#endif
}
#endif  // SLM_DEFINE_KERNELS

// All probes on the executor's threads, read bandwidth over `probe_bytes`.
probe_result measure_probes(executor_ref ex, std::size_t probe_bytes = std::size_t(1) << 30);
#if SLM_DEFINE_KERNELS
SLM_INLINE probe_result measure_probes(executor_ref ex, std::size_t probe_bytes) {
  probe_result r;
  r.threads = ex.concurrency();
  r.probe_bytes = probe_bytes;
  r.read_bytes_per_s = probe_read_bandwidth(ex, probe_bytes);
  r.f32_flops_per_s = probe_fma_f32(ex);
  r.bf16_flops_per_s = probe_dot_bf16(ex);
  r.int8_ops_per_s = probe_dot_int8(ex);
  r.amx_bf16_flops_per_s = probe_tile_bf16(ex);
  r.amx_int8_ops_per_s = probe_tile_int8(ex);
  return r;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm
