// MTP self-speculative decoding (slm/speculative.hpp) against plain greedy decoding on a
// NAM56R checkpoint: per draft length k (1 .. the model's MTP depths), the acceptance
// rate, the tokens emitted per main-model forward, and the wall-clock speedup over plain
// greedy decoding of the same tokens measured in the same run (the outputs are checked
// to be identical: speculation must not change greedy output).
//
//   build/bin/bench_speculative [MODEL_DIR]     (default: tests/data/nam56r/tiny)
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_BENCH_TOKENS (default 48,
//        at most what the model's context leaves after the prompt),
//        SLM_BENCH_REPEATS (default 5; the best run counts)
//
// The acceptance rate is a property of the weights: the bundled tiny model's MTP heads
// are random, so they accept almost nothing and speculation only adds its drafting cost;
// a trained model's figures come with issue 8's bundled specialist.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "slm/nam56r.hpp"
#include "slm/parallel.hpp"
#include "slm/speculative.hpp"

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  const long n = std::strtol(v, nullptr, 10);
  return n > 0 ? static_cast<std::size_t>(n) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(SLM_BENCH_DATA_DIR) + "/nam56r/tiny";
  auto m = slm::nam56r_model::load(dir);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().to_string().c_str());
    return 1;
  }
  const std::size_t depths = m->config().mtp_num_layers;
  if (depths == 0) {
    std::fprintf(stderr, "error: %s has no MTP layers\n", dir.c_str());
    return 1;
  }
  auto pool = slm::thread_pool::create(env_size("SLM_BENCH_THREADS", slm::hardware_threads()));
  if (!pool) return 1;
  slm::compute_context cx{*pool};
  const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::size_t context = m->config().max_position_embeddings ? m->config().max_position_embeddings : 1 << 20;
  const std::size_t n = std::min(env_size("SLM_BENCH_TOKENS", 48), context - std::min(context, prompt.size() + 1));
  const std::size_t repeats = env_size("SLM_BENCH_REPEATS", 5);

  std::printf("model %s (%zu layers, %zu MTP depths), %zu tokens after an %zu-token prompt, %zu threads\n", dir.c_str(),
              m->config().num_layers, depths, n, prompt.size(), pool->concurrency());
  std::printf("%-8s %10s %12s %14s %12s %9s\n", "drafts", "ms", "accepted", "tokens/forward", "speedup", "same ids");
  std::vector<std::int32_t> reference;
  double plain_ms = 0;
  for (std::size_t k = 0; k <= depths; ++k) {
    double best = 1e300;
    std::vector<std::int32_t> out;
    slm::speculative_stats st;
    for (std::size_t r = 0; r < repeats; ++r) {
      slm::session_options o;
      o.rollback_tokens = k;
      auto s = m->new_session(o);
      out.clear();
      st = {};
      const auto t0 = std::chrono::steady_clock::now();
      if (auto e = slm::generate_greedy_mtp(s, prompt, n, k, m->vocab(), out, st, cx); !e) {
        std::fprintf(stderr, "error: %s\n", e.to_string().c_str());
        return 1;
      }
      best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    if (k == 0) {
      reference = out;
      plain_ms = best;
    }
    std::printf("%-8zu %10.3f %5zu/%-6zu %14.2f %11.2fx %9s\n", k, best, st.accepted, st.drafted, st.tokens_per_forward(),
                plain_ms / best, out == reference ? "yes" : "NO");
  }
  return 0;
}
