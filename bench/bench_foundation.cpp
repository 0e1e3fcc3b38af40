// Foundation benchmarks: JSON and safetensors parsing, checkpoint open, element
// decoding, the thread pool's dispatch cost and a parallel streaming read. Memory-bound
// figures are also printed as a ratio to the read-bandwidth probe of the same run.
//
//   build/bin/bench_foundation [--benchmark_filter=...]
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_PROBE_MIB (default 1024)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "slm/kernels/probes.hpp"
#include "slm/slm.hpp"

namespace {

slm::probe_result g_probe;

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

// Wall-clock timing of the loop body, for ratios (Google Benchmark's rates use the
// main thread's CPU time unless UseRealTime, and a ratio must use wall time).
struct wall_timer {
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  double seconds() const { return slm::seconds_since(t0); }
};

void report_bandwidth(benchmark::State& state, double bytes_per_iter, double wall_seconds) {
  const double total = bytes_per_iter * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["ratio_to_read_bw"] = total / wall_seconds / g_probe.read_bytes_per_s;
}

// A safetensors header like a 7B model's: n tensors with long names.
std::string synthetic_header(std::size_t n) {
  slm::json::value doc = slm::json::value::make_object();
  std::uint64_t off = 0;
  for (std::size_t i = 0; i < n; ++i) {
    slm::json::value t = slm::json::value::make_object();
    t.set("dtype", slm::json::value(std::string("BF16")));
    slm::json::value shape = slm::json::value::make_array();
    shape.push_back(slm::json::value(std::int64_t{4096}));
    shape.push_back(slm::json::value(std::int64_t{1}));
    t.set("shape", std::move(shape));
    slm::json::value offs = slm::json::value::make_array();
    offs.push_back(slm::json::value(off));
    offs.push_back(slm::json::value(off + 8192));
    off += 8192;
    t.set("data_offsets", std::move(offs));
    doc.set(slm::cat("model.layers.", i / 16, ".self_attn.q_proj.weight_", i % 16), std::move(t));
  }
  return slm::json::dump(doc);
}

void BM_JsonParse(benchmark::State& state) {
  const std::string text = synthetic_header(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    auto v = slm::json::parse(text);
    if (!v.ok()) state.SkipWithError(v.error().message().c_str());
    benchmark::DoNotOptimize(v);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(text.size()) * state.iterations());
}
BENCHMARK(BM_JsonParse)->Arg(1000)->Arg(20000)->Unit(benchmark::kMillisecond);

void BM_SafetensorsParseHeader(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  std::string head = synthetic_header(n);
  while (head.size() % 8) head.push_back(' ');
  std::vector<std::byte> file(8 + head.size() + n * 8192);
  const std::uint64_t len = head.size();
  std::memcpy(file.data(), &len, 8);  // little-endian host (x86, arm64)
  std::memcpy(file.data() + 8, head.data(), head.size());
  for (auto _ : state) {
    auto h = slm::safetensors::parse_header(file);
    if (!h.ok()) state.SkipWithError(h.error().message().c_str());
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(head.size()) * state.iterations());
  state.counters["tensors"] = static_cast<double>(n);
}
BENCHMARK(BM_SafetensorsParseHeader)->Arg(20000)->Unit(benchmark::kMillisecond);

void BM_CheckpointOpen(benchmark::State& state) {
  const std::string dir = std::string(SLM_BENCH_DATA_DIR) + "/golden/hf/llama";
  for (auto _ : state) {
    auto ck = slm::checkpoint::open(dir);
    if (!ck.ok()) state.SkipWithError(ck.error().message().c_str());
    benchmark::DoNotOptimize(ck);
  }
}
BENCHMARK(BM_CheckpointOpen)->Unit(benchmark::kMicrosecond);

// The generic (any dtype, any stride) decoder: a reference path, not a kernel.
void BM_TensorToF32Bf16(benchmark::State& state) {
  const std::size_t n = 16u << 20;  // 32 MiB of bf16
  std::vector<std::uint16_t> src(n, 0x3F80);
  std::vector<float> dst(n);
  const slm::tensor_view v(slm::dtype::bf16, slm::shape{static_cast<std::int64_t>(n)}, src.data());
  wall_timer t;
  for (auto _ : state) {
    if (!v.to_f32(dst).ok()) state.SkipWithError("to_f32 failed");
    benchmark::DoNotOptimize(dst.data());
  }
  report_bandwidth(state, static_cast<double>(n * 2), t.seconds());
}
BENCHMARK(BM_TensorToF32Bf16)->Unit(benchmark::kMillisecond);

void BM_ThreadPoolEmptyRun(benchmark::State& state) {
  auto pool = slm::thread_pool::create(static_cast<std::size_t>(state.range(0)));
  if (!pool.ok()) return state.SkipWithError(pool.error().message().c_str());
  for (auto _ : state) pool->run(pool->concurrency(), [](std::size_t) {});
}
BENCHMARK(BM_ThreadPoolEmptyRun)->Arg(1)->Arg(2)->Arg(4)->UseRealTime()->Unit(benchmark::kMicrosecond);

// A parallel streaming read through parallel_for: how close the pool gets to the probe.
void BM_ParallelForSum(benchmark::State& state) {
  auto pool = slm::thread_pool::create(env_size("SLM_BENCH_THREADS", slm::hardware_threads()));
  if (!pool.ok()) return state.SkipWithError(pool.error().message().c_str());
  const std::size_t n = 64u << 20;  // 256 MiB of f32
  std::vector<float> x(n, 1.0f);
  std::vector<double> partial(pool->concurrency() * 8);
  wall_timer t;
  for (auto _ : state) {
    (void)slm::parallel_for_chunks(*pool, pool->concurrency(), [&](std::size_t c) {
      const auto r = slm::partition(0, n, pool->concurrency()).chunk(c);
      float a[8] = {};
      std::size_t i = r.begin;
      for (; i + 8 <= r.end; i += 8)
        for (int k = 0; k < 8; ++k) a[k] += x[i + static_cast<std::size_t>(k)];
      partial[c * 8] = a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
    });
    benchmark::DoNotOptimize(partial.data());
  }
  report_bandwidth(state, static_cast<double>(n * 4), t.seconds());
  state.counters["threads"] = static_cast<double>(pool->concurrency());
}
BENCHMARK(BM_ParallelForSum)->UseRealTime()->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const std::size_t threads = env_size("SLM_BENCH_THREADS", slm::hardware_threads());
  auto pool = slm::thread_pool::create(threads);
  if (!pool.ok()) {
    std::fprintf(stderr, "bench: %s\n", pool.error().message().c_str());
    return 1;
  }
  g_probe = slm::measure_probes(*pool, env_size("SLM_PROBE_MIB", 1024) << 20);
  std::printf("probe: read bandwidth %.2f GB/s over %zu MiB, f32 FMA peak %.1f GFLOP/s, %zu threads\n",
              g_probe.read_bytes_per_s / 1e9, g_probe.probe_bytes >> 20, g_probe.f32_flops_per_s / 1e9, threads);
  benchmark::AddCustomContext("probe_read_GBps", std::to_string(g_probe.read_bytes_per_s / 1e9));
  benchmark::AddCustomContext("probe_f32_GFLOPs", std::to_string(g_probe.f32_flops_per_s / 1e9));
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
