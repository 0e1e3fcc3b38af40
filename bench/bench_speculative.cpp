// MTP self-speculative decoding (slm/generate/speculative.hpp) against plain greedy decoding on a
// NAM56R checkpoint: per draft length k (1 .. the model's MTP depths), the acceptance
// rate, the tokens emitted per main-model forward, and the wall-clock speedup over plain
// greedy decoding of the same tokens measured in the same run (the outputs are checked
// to be identical: speculation must not change greedy output).
//
//   build/bin/bench_speculative [MODEL_DIR]     (default: tests/data/nam56r/tiny)
//   A MODEL_DIR with a tokenizer.json (models/nam56r-cpp-14m) starts from a C++ prompt;
//   without one, from ids 1..8.
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_BENCH_TOKENS (default 48,
//        at most what the model's context leaves after the prompt),
//        SLM_BENCH_REPEATS (default 5; the best run counts)
//
// The acceptance rate is a property of the weights: the tiny test model's MTP heads are
// random, so they accept almost nothing and speculation only adds its drafting cost; the
// bundled specialist's trained head is the real case (figures in bench/README.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "slm/models/nam56r/model.hpp"
#include "slm/core/parallel.hpp"
#include "slm/generate/speculative.hpp"
#include "slm/text/tokenizer.hpp"

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
  // f32 activations for the NVFP4 products, as `slm run` uses by default: the library's
  // bf16 default (W4A16) rounds differently in its GEMV (one row) and GEMM kernels, so a
  // verification forward over k + 1 rows would not reproduce one-row decoding exactly.
  cx.quantized_activations = slm::activation_precision::f32;
  std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    auto tok = slm::tokenizer::load_dir(dir);
    if (!tok) {
      std::fprintf(stderr, "error: %s\n", tok.error().to_string().c_str());
      return 1;
    }
    auto ids = tok->encode("#include <string>\n#include <vector>\n\nnamespace util {\n\n// Splits s at every sep.\n"
                           "std::vector<std::string> split(const std::string& s, char sep) {\n");
    if (!ids) return 1;
    prompt = std::move(*ids);
  }
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
