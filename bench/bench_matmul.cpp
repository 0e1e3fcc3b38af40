// matmul benchmarks: GEMV (decode, n_tok = 1) as weight bytes/s over the read-bandwidth
// probe, GEMM (prefill) as FLOP/s over the f32 FMA probe. GEMV cycles through enough
// copies of the weights (>= 160 MiB) that every call reads them from DRAM, not L3.
//
//   build/bin/bench_matmul [--benchmark_filter=...]
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_PROBE_MIB (default 1024),
//        SLM_ISA (cap the default instruction set: scalar|avx2|avx512),
//        SLM_GEMV_MIB (weight copies cycled by GEMV, default 160; 0 = one copy, so a
//        small shape such as 512x4096 stays in cache and shows the compute ceiling)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "slm/kernels/probes.hpp"
#include "slm/core/cpu.hpp"
#include "slm/kernels/kernel_bench.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/slm.hpp"

namespace {

slm::probe_result g_probe;
slm::thread_pool* g_pool = nullptr;

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

// Valid, varied weight copies from the library's generator (kernels/kernel_bench.hpp), the same
// ones `slm bench --kernels` measures.
slm::synthetic_weights make_weights(slm::weight_format f, std::size_t N, std::size_t K, std::size_t min_total) {
  auto w = slm::make_synthetic_weights(f, N, K, min_total, *g_pool);
  return w.ok() ? std::move(*w) : slm::synthetic_weights{};
}

void bm_gemv(benchmark::State& state, slm::weight_format f, std::size_t N, std::size_t K, slm::isa which,
             slm::activation_precision act = slm::activation_precision::f32) {
  slm::synthetic_weights w = make_weights(f, N, K, env_size("SLM_GEMV_MIB", 160) << 20);
  if (w.copies.empty()) return state.SkipWithError("cannot allocate weights");
  std::vector<float> x(K, 0.5f), y(N);
  for (std::size_t k = 0; k < K; ++k) x[k] = static_cast<float>(k % 7) * 0.25f - 0.7f;
  std::size_t c = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const slm::status s = slm::matmul(w.copies[c], x.data(), 1, K, y.data(), N, *g_pool, which, act);
    if (!s.ok()) return state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % w.copies.size();
  }
  const double sec = slm::seconds_since(t0);
  const double bytes = static_cast<double>(w.bytes_per_copy) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
  state.counters["GBps"] = bytes / sec / 1e9;
  state.counters["ratio_to_read_bw"] = bytes / sec / g_probe.read_bytes_per_s;
  state.counters["copies"] = static_cast<double>(w.copies.size());
}

void bm_gemm(benchmark::State& state, slm::weight_format f, std::size_t N, std::size_t K, std::size_t n_tok,
             slm::isa which, slm::activation_precision act = slm::activation_precision::f32) {
  slm::synthetic_weights w = make_weights(f, N, K, 0);
  if (w.copies.empty()) return state.SkipWithError("cannot allocate weights");
  std::vector<float> x(n_tok * K), y(n_tok * N);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 13) * 0.1f - 0.6f;
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const slm::status s = slm::matmul(w.copies[0], x.data(), n_tok, K, y.data(), N, *g_pool, which, act);
    if (!s.ok()) return state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(y.data());
  }
  const double sec = slm::seconds_since(t0);
  const double flops = 2.0 * static_cast<double>(n_tok * N * K) * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = flops / sec / 1e9;
  state.counters["ratio_to_fma_peak"] = flops / sec / g_probe.f32_flops_per_s;
  if (act == slm::activation_precision::bf16 && g_probe.bf16_flops_per_s > 0)
    state.counters["ratio_to_bf16_peak"] = flops / sec / g_probe.bf16_flops_per_s;
  if (act == slm::activation_precision::bf16 && g_probe.amx_bf16_flops_per_s > 0 && slm::amx_bf16_accelerated(which) &&
      K % 32 == 0 && n_tok > slm::detail::mm::gemv_max_tokens)  // on AMX tiles (kernels/amx.hpp)
    state.counters["ratio_to_amx_peak"] = flops / sec / g_probe.amx_bf16_flops_per_s;
  if (act == slm::activation_precision::int8 && g_probe.int8_ops_per_s > 0 && slm::w4a8_accelerated(which))
    state.counters["ratio_to_int8_peak"] = flops / sec / g_probe.int8_ops_per_s;
  if (act == slm::activation_precision::int8 && g_probe.amx_int8_ops_per_s > 0 && slm::amx_int8_accelerated(which) &&
      n_tok > slm::detail::mm::gemv_max_tokens)  // on AMX-INT8 tiles (kernels/amx_int8.hpp)
    state.counters["ratio_to_amx_peak"] = flops / sec / g_probe.amx_int8_ops_per_s;
}

// attend() over a KV cache (layers/attention.hpp): a prompt of n_tok tokens from position
// 0 (causal), or one decode query at position ctx. Qwen3 heads: 16 query heads over 8 KV
// heads of 128, the cache head-major as the GQA layer keeps it. FLOP: 4 x 128 per (query
// head, visible key): the score and the weighted value sum; decode also as cache bytes read
// against the read probe.
void bm_attention(benchmark::State& state, std::size_t n_tok, std::size_t ctx, slm::kv_dtype type, slm::isa which) {
  const std::size_t H = 16, Hkv = 8, d = 128, pos0 = n_tok == 1 ? ctx : 0, n = pos0 + n_tok;
  slm::kv_rows k, v;
  k.type = v.type = type;
  k.width = v.width = Hkv * d;
  k.heads = v.heads = Hkv;  // head-major, as the GQA layer stores them
  if (!k.reserve(n).ok() || !v.reserve(n).ok()) return state.SkipWithError("cannot allocate the cache");
  std::vector<float> row(Hkv * d), q(n_tok * H * d), out(n_tok * H * d);
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>((i * 7 + j * 3) % 17) * 0.05f - 0.4f;
    k.store(j, row.data());
    v.store(j, row.data());
  }
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 11) * 0.07f - 0.35f;
  slm::attention_problem p;
  p.T = n_tok; p.H = H; p.group = H / Hkv; p.pos0 = pos0; p.scale = 0.088f;
  p.q1 = q.data(); p.q1_tok = H * d; p.q1_head = d; p.d1 = d;
  p.k1 = slm::kv_view::per_head(k);
  p.v = slm::kv_view::per_head(v);
  p.dv = d;
  p.out = out.data(); p.out_tok = H * d; p.out_head = d;
  slm::floats scratch;
  slm::compute_context cx{*g_pool};
  const auto t0 = std::chrono::steady_clock::now();
  for (auto _ : state) {
    const slm::status s = slm::attend(p, scratch, cx, which);
    if (!s.ok()) return state.SkipWithError(s.message().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  const double sec = slm::seconds_since(t0);
  double pairs = 0;  // visible (query, key) pairs of one head
  for (std::size_t t = 0; t < n_tok; ++t) pairs += static_cast<double>(pos0 + t + 1);
  const double flops = 4.0 * static_cast<double>(d * H) * pairs * static_cast<double>(state.iterations());
  state.counters["GFLOPs"] = flops / sec / 1e9;
  state.counters["ratio_to_fma_peak"] = flops / sec / g_probe.f32_flops_per_s;
  if (n_tok == 1) {  // decode reads the whole cache once: bytes against the read probe
    const double bytes = 2.0 * static_cast<double>(n * Hkv * d * (type == slm::kv_dtype::f32 ? 4 : 2)) *
                         static_cast<double>(state.iterations());
    state.counters["GBps"] = bytes / sec / 1e9;
    state.counters["ratio_to_read_bw"] = bytes / sec / g_probe.read_bytes_per_s;
  }
}

void register_all() {
  using slm::weight_format;
  const slm::isa best = slm::default_isa();
  struct shape { std::size_t n, k; };
  const shape gemv_shapes[] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {2048, 8192}, {512, 4096}};
  for (weight_format f : {weight_format::nvfp4, weight_format::bf16, weight_format::mxfp4, weight_format::f32}) {
    for (const shape& s : gemv_shapes) {
      if (f == weight_format::f32 || f == weight_format::mxfp4) {
        if (s.n != 4096 || s.k != 14336) continue;  // one shape for the secondary formats
      }
      benchmark::RegisterBenchmark(
          slm::cat("gemv/", slm::to_string(f), "/", s.n, "x", s.k, "/", slm::to_string(best)).c_str(),
          [=](benchmark::State& st) { bm_gemv(st, f, s.n, s.k, best); })
          ->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
    }
  }
  // The AVX2 path on the same machine, for the record.
  if (best == slm::isa::avx512 && slm::isa_supported(slm::isa::avx2, slm::host_cpu())) {
    for (weight_format f : {weight_format::nvfp4, weight_format::bf16})
      benchmark::RegisterBenchmark(slm::cat("gemv/", slm::to_string(f), "/4096x14336/avx2").c_str(),
                                   [=](benchmark::State& st) { bm_gemv(st, f, 4096, 14336, slm::isa::avx2); })
          ->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
  }
  for (weight_format f : {weight_format::nvfp4, weight_format::bf16, weight_format::f32}) {
    for (std::size_t n_tok : {16u, 128u, 512u}) {
      if (f == weight_format::f32 && n_tok != 128) continue;
      benchmark::RegisterBenchmark(
          slm::cat("gemm/", slm::to_string(f), "/4096x4096/n=", n_tok, "/", slm::to_string(best)).c_str(),
          [=](benchmark::State& st) { bm_gemm(st, f, 4096, 4096, n_tok, best); })
          ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
    }
  }
  // The opt-in W4A8 path (int8 activations: AVX-512 VNNI, its GEMM on AMX-INT8 tiles where
  // present, or AVX2; kernels/avx512_vnni.hpp, amx_int8.hpp, avx2_int8.hpp). GFLOP/s are
  // "effective" (2 N K n_tok per call), divided by the f32 FMA probe and by the int8 ones.
  const char* w4a8_isa = slm::amx_int8_accelerated(best) ? "amx_int8"
                         : slm::w4a8_vnni(best)          ? "vnni"
                         : slm::w4a8_accelerated(best)   ? "avx2_int8"
                                                         : "scalar";
  for (weight_format f : {weight_format::nvfp4, weight_format::mxfp4}) {
    for (const shape& s : gemv_shapes) {
      if (f == weight_format::mxfp4 && (s.n != 4096 || s.k != 14336)) continue;
      benchmark::RegisterBenchmark(
          slm::cat("gemv_w4a8/", slm::to_string(f), "/", s.n, "x", s.k, "/", w4a8_isa).c_str(),
          [=](benchmark::State& st) { bm_gemv(st, f, s.n, s.k, best, slm::activation_precision::int8); })
          ->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
    }
    for (std::size_t n_tok : {16u, 128u, 512u}) {
      if (f == weight_format::mxfp4 && n_tok != 512) continue;
      benchmark::RegisterBenchmark(
          slm::cat("gemm_w4a8/", slm::to_string(f), "/4096x4096/n=", n_tok, "/", w4a8_isa).c_str(),
          [=](benchmark::State& st) { bm_gemm(st, f, 4096, 4096, n_tok, best, slm::activation_precision::int8); })
          ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
    }
  }
  // Attention: the scalar reference, then the blocked kernels of each SIMD isa this CPU has.
  for (slm::isa which : {slm::isa::scalar, slm::isa::avx2, slm::isa::avx512}) {
    if (!slm::isa_supported(which, slm::host_cpu())) continue;
    for (slm::kv_dtype type : {slm::kv_dtype::f32, slm::kv_dtype::bf16}) {
      const char* kv = type == slm::kv_dtype::f32 ? "f32" : "bf16";
      benchmark::RegisterBenchmark(slm::cat("attention/prefill/T=512/", kv, "/", slm::to_string(which)).c_str(),
                                   [=](benchmark::State& st) { bm_attention(st, 512, 0, type, which); })
          ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.3);
      benchmark::RegisterBenchmark(slm::cat("attention/decode/ctx=4096/", kv, "/", slm::to_string(which)).c_str(),
                                   [=](benchmark::State& st) { bm_attention(st, 1, 4096, type, which); })
          ->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
    }
  }
  // The opt-in bf16-activation path (vdpbf16ps; kernels/avx512_bf16.hpp).
  const char* a16_isa = slm::bf16_activations_accelerated(best) ? "avx512bf16" : "rounded";
  for (weight_format f : {weight_format::nvfp4, weight_format::mxfp4, weight_format::bf16}) {
    for (const shape& s : gemv_shapes) {
      if (f != weight_format::nvfp4 && (s.n != 4096 || s.k != 14336)) continue;
      benchmark::RegisterBenchmark(
          slm::cat("gemv_bf16act/", slm::to_string(f), "/", s.n, "x", s.k, "/", a16_isa).c_str(),
          [=](benchmark::State& st) { bm_gemv(st, f, s.n, s.k, best, slm::activation_precision::bf16); })
          ->UseRealTime()->Unit(benchmark::kMicrosecond)->MinTime(0.3);
    }
    for (std::size_t n_tok : {16u, 128u, 512u}) {
      if (f != weight_format::nvfp4 && n_tok != 512) continue;
      benchmark::RegisterBenchmark(
          slm::cat("gemm_bf16act/", slm::to_string(f), "/4096x4096/n=", n_tok, "/", a16_isa).c_str(),
          [=](benchmark::State& st) { bm_gemm(st, f, 4096, 4096, n_tok, best, slm::activation_precision::bf16); })
          ->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(0.5);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::size_t threads = env_size("SLM_BENCH_THREADS", slm::hardware_threads());
  auto pool = slm::thread_pool::create(threads);
  if (!pool.ok()) {
    std::fprintf(stderr, "bench: %s\n", pool.error().message().c_str());
    return 1;
  }
  g_pool = &*pool;
  g_probe = slm::measure_probes(*pool, env_size("SLM_PROBE_MIB", 1024) << 20);
  const slm::cpu_features& cpu = slm::host_cpu();
  std::printf("probe: read bandwidth %.2f GB/s over %zu MiB, f32 FMA peak %.1f GFLOP/s, bf16 dot peak %.1f GFLOP/s, "
              "AMX bf16 peak %.1f GFLOP/s, int8 dot peak %.1f GOP/s, AMX int8 peak %.1f GOP/s, %zu threads\n",
              g_probe.read_bytes_per_s / 1e9, g_probe.probe_bytes >> 20, g_probe.f32_flops_per_s / 1e9,
              g_probe.bf16_flops_per_s / 1e9, g_probe.amx_bf16_flops_per_s / 1e9, g_probe.int8_ops_per_s / 1e9,
              g_probe.amx_int8_ops_per_s / 1e9, threads);
  std::printf("cpu: avx2 %d fma %d f16c %d avx512f %d bw %d vl %d vnni %d bf16 %d amx-bf16 %d amx-int8 %d; "
              "matmul isa %s; compiled %s\n",
              cpu.avx2, cpu.fma, cpu.f16c, cpu.avx512f, cpu.avx512bw, cpu.avx512vl, cpu.avx512vnni, cpu.avx512bf16,
              cpu.amx_bf16 && slm::amx_usable(), cpu.amx_int8 && slm::amx_usable(),
              std::string(slm::to_string(slm::default_isa())).c_str(),
#if defined(__AVX512F__)
              "with AVX-512 (-march)"
#elif defined(__AVX2__)
              "with AVX2 (-march)"
#else
              "for baseline x86-64 (runtime dispatch)"
#endif
  );
  benchmark::AddCustomContext("probe_read_GBps", std::to_string(g_probe.read_bytes_per_s / 1e9));
  benchmark::AddCustomContext("probe_f32_GFLOPs", std::to_string(g_probe.f32_flops_per_s / 1e9));
  benchmark::AddCustomContext("probe_bf16_GFLOPs", std::to_string(g_probe.bf16_flops_per_s / 1e9));
  benchmark::AddCustomContext("probe_amx_bf16_GFLOPs", std::to_string(g_probe.amx_bf16_flops_per_s / 1e9));
  benchmark::AddCustomContext("probe_int8_GOPs", std::to_string(g_probe.int8_ops_per_s / 1e9));
  benchmark::AddCustomContext("probe_amx_int8_GOPs", std::to_string(g_probe.amx_int8_ops_per_s / 1e9));
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
