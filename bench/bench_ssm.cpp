// State-space mixer benchmarks: Mamba-3 MIMO, Mamba-3 SISO and Mamba-2 at a realistic
// layer size (d_model 2048, d_state 128, headdim 64, expand 2, 8 B/C groups, MIMO rank 4,
// rope_fraction 0.5; the NAM56R Mamba-3 layer at half its width), random bf16 projection
// weights (as checkpoints ship) written to a temporary checkpoint and loaded through
// the mixers' own load().
//
// Per mixer:
//  * state bytes per sequence (what a session keeps per layer instead of a KV cache);
//  * decode step: time per token, the bytes a step must read (weights as counted by
//    compute_context::weight_bytes, plus the state), those bytes/s as a ratio to the
//    read-bandwidth probe of the same run;
//  * chunked prefill of 1K and 4K tokens (SLM_BENCH_PREFILL for others): time, tokens/s,
//    and the slope t(T) / ((T / T0) t(T0)) against the shortest length T0 (1.0 = linear), with the share of the time spent in the
//    in/out projections (timed alone on the same tokens) and their GFLOP/s as a ratio to
//    the f32 FMA probe; for Mamba-3 MIMO also the prefill time per chunk size.
//
//   build/bin/bench_ssm
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_PROBE_MIB (default 1024),
//        SLM_BENCH_STEPS (decode steps timed, default 64), SLM_BENCH_ONLY (mimo, siso or mamba2),
//        SLM_BENCH_PREFILL (prefill lengths, default 1024,4096)
//
// A plain program rather than Google Benchmark: each case needs a checkpoint built first.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "slm/layers/mamba2.hpp"
#include "slm/layers/mamba3.hpp"
#include "slm/core/numeric.hpp"
#include "slm/kernels/probes.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/hf/bind.hpp"
#include "slm/models/nam56r/bind.hpp"

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

int fail(const slm::status& s) {
  std::fprintf(stderr, "bench_ssm: %s\n", s.to_string().c_str());
  return 1;
}

// One parameter of a synthetic checkpoint: matrices are bf16 with uniform(-a, a) values,
// vectors f32, filled by `fill(i)`.
struct param {
  std::string name;
  std::vector<std::int64_t> shape;
  bool matrix = false;
  float scale = 0;               // matrices: uniform(-scale, scale)
  float (*fill)(std::size_t) = nullptr;  // vectors
};

slm::status write_checkpoint(const std::filesystem::path& dir, const std::vector<param>& ps) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return slm::make_error(slm::errc::io_error, dir.string(), ": ", ec.message());
  std::mt19937 rng(1234);
  slm::safetensors::writer w;
  std::vector<std::vector<std::uint16_t>> bf;  // kept alive until write()
  std::vector<std::vector<float>> f32;
  bf.reserve(ps.size());
  f32.reserve(ps.size());
  for (const param& p : ps) {
    std::size_t n = 1;
    for (auto d : p.shape) n *= static_cast<std::size_t>(d);
    auto sh = slm::shape::from(std::span<const std::int64_t>(p.shape.data(), p.shape.size()));
    if (!sh.ok()) return std::move(sh).take_error();
    const slm::shape s = *sh;
    if (p.matrix) {
      std::uniform_real_distribution<float> U(-p.scale, p.scale);
      auto& v = bf.emplace_back(n);
      for (auto& x : v) x = slm::f32_to_bf16(U(rng));
      SLM_TRY(w.add(p.name, slm::dtype::bf16, s, std::as_bytes(std::span(v))));
    } else {
      auto& v = f32.emplace_back(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = p.fill(i);
      SLM_TRY(w.add(p.name, slm::dtype::f32, s, std::as_bytes(std::span(v))));
    }
  }
  SLM_TRY(w.write(dir / "model.safetensors"));
  std::FILE* f = std::fopen((dir / "config.json").string().c_str(), "wb");
  if (!f) return slm::make_error(slm::errc::io_error, "cannot write config.json");
  std::fputs("{}", f);
  std::fclose(f);
  return {};
}

// dt_bias = inverse softplus of dt spread log-uniformly over [0.001, 0.1] (the modules' init).
float dt_bias_fill(std::size_t i) {
  const float dt = std::exp(std::log(0.001f) + static_cast<float>(i % 17) / 16.0f * (std::log(0.1f) - std::log(0.001f)));
  return dt + std::log(-std::expm1(-dt));
}
float one(std::size_t) { return 1.0f; }
float quarter(std::size_t) { return 0.25f; }
float zero(std::size_t) { return 0.0f; }
float a_log_fill(std::size_t i) { return std::log(1.0f + static_cast<float>(i % 16)); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct figures {
  double probe_read = 0, probe_fma = 0;
};

// Runs the step / prefill measurements on any mixer with the mamba2/mamba3 state API.
// SLM_BENCH_PREFILL: comma-separated prefill lengths, ascending (default 1024,4096;
// the full set is 1024,4096,16384,65536, minutes on two cores).
std::vector<std::size_t> prefill_lengths() {
  std::vector<std::size_t> out;
  const char* v = std::getenv("SLM_BENCH_PREFILL");
  std::string s = v && *v ? v : "1024,4096";
  for (std::size_t p = 0; p < s.size();) {
    std::size_t q = s.find(',', p);
    if (q == std::string::npos) q = s.size();
    const unsigned long long n = std::strtoull(s.substr(p, q - p).c_str(), nullptr, 10);
    if (n > 0) out.push_back(static_cast<std::size_t>(n));
    p = q + 1;
  }
  if (out.empty()) out = {1024, 4096};
  std::sort(out.begin(), out.end());
  return out;
}

template <class Mixer, class State>
int bench_mixer(const char* label, const Mixer& m, std::size_t d_model, std::size_t dip, std::size_t d_inner,
                std::size_t state_bytes, slm::executor_ref ex, const figures& fg0, bool sweep_chunks) {
  std::mt19937 rng(99);
  std::normal_distribution<float> N01(0.0f, 1.0f);
  const std::vector<std::size_t> Ts = prefill_lengths();
  const std::size_t Tmax = std::max<std::size_t>(4096, *std::max_element(Ts.begin(), Ts.end()));
  const std::size_t steps = env_size("SLM_BENCH_STEPS", 64);
  std::vector<float> u(Tmax * d_model), y(Tmax * d_model);
  for (auto& v : u) v = N01(rng);
  slm::workspace ws;
  slm::compute_context cx{ex};
  State st;
  if (auto s = m.init_state(st); !s.ok()) return fail(s);
  std::printf("%s\n  state per sequence: %zu bytes (%.2f MiB)\n", label, state_bytes,
              static_cast<double>(state_bytes) / (1 << 20));
  // The probes again, right before this mixer (the machine may be shared: a ratio is only
  // meaningful against limits measured at the same time).
  figures fg = fg0;
  fg.probe_read = slm::probe_read_bandwidth(ex, env_size("SLM_PROBE_MIB", 1024) << 20);
  fg.probe_fma = slm::probe_fma_f32(ex);
  std::printf("  probes now: read bandwidth %.1f GB/s, f32 FMA peak %.0f GFLOP/s\n", fg.probe_read / 1e9,
              fg.probe_fma / 1e9);

  // Decode: a 64-token prefill, then steps over fresh inputs.
  if (auto s = m.forward(u.data(), 64, y.data(), st, ws, cx); !s.ok()) return fail(s);
  for (std::size_t k = 0; k < 8; ++k)  // warm-up
    if (auto s = m.step(u.data() + (64 + k) * d_model, y.data(), st, ws, cx); !s.ok()) return fail(s);
  std::vector<double> times;
  const std::uint64_t wb0 = cx.weight_bytes;
  for (std::size_t k = 0; k < steps; ++k) {
    const double t0 = now_s();
    if (auto s = m.step(u.data() + ((72 + k) % Tmax) * d_model, y.data(), st, ws, cx); !s.ok()) return fail(s);
    times.push_back(now_s() - t0);
  }
  const double wbytes = static_cast<double>(cx.weight_bytes - wb0) / static_cast<double>(steps);
  // The two projections alone, one token (the GEMVs a step cannot avoid).
  std::vector<double> ptimes;
  if (auto s = ws.proj.resize(dip); !s.ok()) return fail(s);
  for (std::size_t k = 0; k < steps; ++k) {
    const double t0 = now_s();
    if (auto s = m.in_proj.apply(u.data() + ((72 + k) % Tmax) * d_model, 1, ws.proj.data(), cx); !s.ok()) return fail(s);
    if (auto s = m.out_proj.apply(ws.proj.data(), 1, y.data(), cx); !s.ok()) return fail(s);
    ptimes.push_back(now_s() - t0);
  }
  std::sort(times.begin(), times.end());
  std::sort(ptimes.begin(), ptimes.end());
  const double med = times[times.size() / 2], best = times.front(), pmed = ptimes[ptimes.size() / 2];
  const double bytes = wbytes + static_cast<double>(state_bytes);
  std::printf("  decode step: median %.3f ms (best %.3f), %.0f tokens/s; reads %.1f MB (weights %.1f + state %.2f): "
              "%.1f GB/s = %.2f of read bandwidth (best step %.2f); the projections alone %.3f ms (%.0f%% of the "
              "step, %.2f of read bandwidth)\n",
              med * 1e3, best * 1e3, 1.0 / med, bytes / 1e6, wbytes / 1e6, static_cast<double>(state_bytes) / 1e6,
              bytes / med / 1e9, bytes / med / fg.probe_read, bytes / best / fg.probe_read, pmed * 1e3,
              100.0 * pmed / med, wbytes / pmed / fg.probe_read);

  // Prefill of each length from a fresh state; projections alone on the same tokens.
  std::vector<double> t_of(Ts.size(), 0.0);
  for (std::size_t i = 0; i < Ts.size(); ++i) {
    const std::size_t T = Ts[i];
    double tbest = 1e30, pbest = 1e30;
    for (int rep = 0; rep < 2; ++rep) {
      st.reset();
      double t0 = now_s();
      if (auto s = m.forward(u.data(), T, y.data(), st, ws, cx); !s.ok()) return fail(s);
      tbest = std::min(tbest, now_s() - t0);
      if (auto s = ws.proj.resize(T * dip); !s.ok()) return fail(s);
      t0 = now_s();
      if (auto s = m.in_proj.apply(u.data(), T, ws.proj.data(), cx); !s.ok()) return fail(s);
      if (auto s = m.out_proj.apply(ws.proj.data(), T, y.data(), cx); !s.ok()) return fail(s);  // [T, d_inner] rows
      pbest = std::min(pbest, now_s() - t0);
    }
    t_of[i] = tbest;
    const double flops = 2.0 * static_cast<double>(T) * static_cast<double>(d_model) * static_cast<double>(dip + d_inner);
    std::printf("  prefill %zu tokens: %.1f ms, %.0f tokens/s, %.2f ms per 1K tokens; projections %.1f ms (%.0f%%, "
                "%.0f GFLOP/s = %.2f of FMA peak), SSM core + glue %.1f ms\n",
                T, tbest * 1e3, static_cast<double>(T) / tbest, tbest * 1e3 * 1024.0 / static_cast<double>(T),
                pbest * 1e3, 100.0 * pbest / tbest, flops / pbest / 1e9, flops / pbest / fg.probe_fma,
                (tbest - pbest) * 1e3);
  }
  for (std::size_t i = 1; i < Ts.size(); ++i)  // time per token against the shortest run's
    std::printf("  prefill slope: t(%zu) / (%.0f t(%zu)) = %.2f (1.00 = linear)\n", Ts[i],
                static_cast<double>(Ts[i]) / static_cast<double>(Ts[0]), Ts[0],
                t_of[i] / (static_cast<double>(Ts[i]) / static_cast<double>(Ts[0]) * t_of[0]));
  if constexpr (requires { m.forward_chunked(u.data(), 1, y.data(), st, 1, ws, cx); }) {
    if (sweep_chunks) {
      std::printf("  prefill 1K by chunk size:");
      for (std::size_t c : {8u, 16u, 32u, 64u, 128u}) {
        double tb = 1e30;
        for (int rep = 0; rep < 2; ++rep) {
          st.reset();
          const double t0 = now_s();
          if (auto s = m.forward_chunked(u.data(), 1024, y.data(), st, c, ws, cx); !s.ok()) return fail(s);
          tb = std::min(tb, now_s() - t0);
        }
        std::printf(" %zu: %.1f ms", c, tb * 1e3);
      }
      std::printf("\n");
    }
  }
  return 0;
}

}  // namespace

int main() {
  const std::size_t threads = env_size("SLM_BENCH_THREADS", slm::hardware_threads());
  auto pool = slm::thread_pool::create(threads);
  if (!pool.ok()) return fail(pool.error());
  slm::executor_ref ex(*pool);
  figures fg;
  fg.probe_read = slm::probe_read_bandwidth(ex, env_size("SLM_PROBE_MIB", 1024) << 20);
  fg.probe_fma = slm::probe_fma_f32(ex);
  std::printf("probes (%zu threads): read bandwidth %.1f GB/s, f32 FMA peak %.0f GFLOP/s\n", threads,
              fg.probe_read / 1e9, fg.probe_fma / 1e9);

  const std::size_t dm = 2048, N = 128, P = 64, G = 8, R = 4, Di = 2 * dm, H = Di / P;
  const auto I = [](std::size_t v) { return static_cast<std::int64_t>(v); };
  const float s_in = 1.0f / std::sqrt(static_cast<float>(dm)), s_out = 1.0f / std::sqrt(static_cast<float>(Di));
  const auto base = std::filesystem::temp_directory_path() / ("slm_bench_ssm_" + std::to_string(::getpid()));
  int rc = 0;

  const char* only_env = std::getenv("SLM_BENCH_ONLY");
  const std::string only = only_env ? only_env : "";
  auto wanted = [&](const char* what) { return only.empty() || only == what; };
  for (int mimo = 1; mimo >= 0 && rc == 0; --mimo) {
    if (!wanted(mimo ? "mimo" : "siso")) continue;
    slm::mamba3_config c;
    c.d_model = dm;
    c.d_state = N;
    c.headdim = P;
    c.ngroups = G;
    c.is_mimo = mimo != 0;
    c.mimo_rank = R;
    c.rope_fraction = 0.5f;
    const std::size_t Rr = c.rank();
    std::vector<param> ps = {
        {"in_proj.weight", {I(c.in_proj_dim()), I(dm)}, true, s_in, nullptr},
        {"out_proj.weight", {I(dm), I(Di)}, true, s_out, nullptr},
        {"dt_bias", {I(H)}, false, 0, dt_bias_fill},
        {"D", {I(H)}, false, 0, one},
        {"B_bias", {I(H), I(Rr), I(N)}, false, 0, one},
        {"C_bias", {I(H), I(Rr), I(N)}, false, 0, one},
        {"B_norm.weight", {I(N)}, false, 0, one},
        {"C_norm.weight", {I(N)}, false, 0, one},
    };
    if (c.is_mimo)
      for (const char* n : {"mimo_x", "mimo_z", "mimo_o"}) ps.push_back({n, {I(H), I(R), I(P)}, false, 0, quarter});
    const auto dir = base / (mimo ? "m3_mimo" : "m3_siso");
    if (auto s = write_checkpoint(dir, ps); !s.ok()) return fail(s);
    auto ck = slm::checkpoint::open(dir);
    if (!ck.ok()) return fail(ck.error());
    auto m = slm::nam56r::load_mamba3(*ck, "", c);
    if (!m.ok()) return fail(m.error());
    slm::mamba3_state st;
    if (auto s = m->init_state(st); !s.ok()) return fail(s);
    char label[256];
    std::snprintf(label, sizeof label,
                  "mamba3 %s: d_model %zu, d_state %zu, headdim %zu, %zu heads, %zu groups, rank %zu, rope 0.5, "
                  "chunk %zu, bf16 projections (in_proj %zu x %zu)",
                  mimo ? "MIMO" : "SISO", dm, N, P, H, G, Rr, c.chunk(), c.in_proj_dim(), dm);
    rc = bench_mixer<slm::mamba3_mixer, slm::mamba3_state>(label, *m, dm, c.in_proj_dim(), Di, st.bytes(), ex, fg,
                                                           mimo != 0);
  }

  if (rc == 0 && wanted("mamba2")) {
    slm::mamba2_config c;
    c.d_model = dm;
    c.d_state = N;
    c.headdim = P;
    c.ngroups = G;
    const std::size_t cd = c.conv_dim();
    const std::vector<param> ps = {
        {"in_proj.weight", {I(c.in_proj_dim()), I(dm)}, true, s_in, nullptr},
        {"out_proj.weight", {I(dm), I(Di)}, true, s_out, nullptr},
        {"conv1d.weight", {I(cd), 1, I(c.d_conv)}, false, 0, quarter},
        {"conv1d.bias", {I(cd)}, false, 0, zero},
        {"dt_bias", {I(H)}, false, 0, dt_bias_fill},
        {"A_log", {I(H)}, false, 0, a_log_fill},
        {"D", {I(H)}, false, 0, one},
        {"norm.weight", {I(Di)}, false, 0, one},
    };
    const auto dir = base / "m2";
    if (auto s = write_checkpoint(dir, ps); !s.ok()) return fail(s);
    auto ck = slm::checkpoint::open(dir);
    if (!ck.ok()) return fail(ck.error());
    auto m = slm::hf::load_mamba2(*ck, "", c);
    if (!m.ok()) return fail(m.error());
    slm::mamba2_state st;
    if (auto s = m->init_state(st); !s.ok()) return fail(s);
    const std::size_t bytes = (st.conv.size() + st.ssm.size()) * sizeof(float);
    char label[256];
    std::snprintf(label, sizeof label,
                  "mamba2: d_model %zu, d_state %zu, headdim %zu, %zu heads, %zu groups, conv %zu, chunk %zu, bf16 "
                  "projections (in_proj %zu x %zu)",
                  dm, N, P, H, G, c.d_conv, c.chunk_size, c.in_proj_dim(), dm);
    rc = bench_mixer<slm::mamba2_mixer, slm::mamba2_state>(label, *m, dm, c.in_proj_dim(), Di, bytes, ex, fg, false);
  }
  std::error_code ec;
  std::filesystem::remove_all(base, ec);
  return rc;
}
