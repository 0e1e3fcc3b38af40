// Speculative decoding (slm/generate/speculative.hpp) against plain greedy decoding.
//
// MTP drafts, on a NAM56R checkpoint: per draft length k (1 .. the model's MTP depths), the
// acceptance rate, the tokens emitted per main-model forward, and the wall-clock speedup
// over plain greedy decoding of the same tokens measured in the same run (the outputs are
// checked to be identical: speculation must not change greedy output).
//
//   build/bin/bench_speculative [MODEL_DIR]     (default: tests/data/nam56r/tiny)
//
// Lookup drafts (prompt_lookup), `--lookup MODEL_DIR [SHAPE]`: two workloads on a trained
// model with a tokenizer (models/nam56r-cpp-14m): "rewrite" (a C++ function, then an
// instruction to write it again with a small change, then its first line) and
// "continuation" (the function's first lines, continued). Per workload and draft length
// (4, 8, 16): accepted drafts, tokens per main forward, the wall-clock speedup on that
// model, and the same ids. A 14M model is not bandwidth-bound (one forward of k + 1 rows
// costs much more than one of one row), so the speedup where it matters is measured by
// replaying each workload's schedule on a model of real size: random weights at SHAPE
// (default llama-3.2-1b, cut to SLM_BENCH_LAYERS layers, default 8; NVFP4, bf16
// activations), where the rounds of the run above (m drafts fed with the round's token,
// j of them kept, m - j rolled back) and plain greedy's single steps are timed after the
// same prompt length. The schedule is exactly the one greedy lookup decoding follows on
// the trained model; only the weights that execute it differ.
//   A MODEL_DIR with a tokenizer.json (models/nam56r-cpp-14m) starts from a C++ prompt;
//   without one, from ids 1..8.
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_BENCH_TOKENS (default 48,
//        at most what the model's context leaves after the prompt),
//        SLM_BENCH_REPEATS (default 5; the best run counts)
//
// The acceptance rate is a property of the weights: the tiny test model's MTP heads are
// random, so they accept almost nothing and speculation only adds its drafting cost; the
// bundled specialist's trained head is the real case (figures in bench/README.md).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "slm/models/any_model.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/models/synthetic.hpp"
#include "slm/formats/convert.hpp"
#include "slm/kernels/probes.hpp"
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

// The best wall time in ms of `repeats` runs of gen(session, out, stats), each on a fresh
// session of m with rollback room for k drafts; out and stats hold the last run's.
template <class Model, class Gen>
slm::result<double> best_ms(const Model& m, std::size_t k, std::size_t repeats, std::vector<std::int32_t>& out,
                            slm::speculative_stats& st, Gen&& gen) {
  double best = 1e300;
  for (std::size_t r = 0; r < repeats; ++r) {
    slm::session_options o;
    o.rollback_tokens = k;
    auto s = m.new_session(o);
    out.clear();
    st = {};
    const auto t0 = std::chrono::steady_clock::now();
    SLM_TRY(gen(s, out, st));
    best = std::min(best, slm::seconds_since(t0) * 1e3);
  }
  return best;
}

int fail(const slm::status& s) {
  std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
  return 1;
}

// One round of greedy lookup decoding: m drafts, j of them kept.
struct round {
  std::size_t m = 0, j = 0;
};

// The rounds greedy lookup decoding with up to k drafts takes after `prompt` when its
// output is `ids` (plain greedy's: speculation emits the same tokens).
std::vector<round> lookup_schedule(std::span<const std::int32_t> prompt, std::span<const std::int32_t> ids,
                                   std::size_t k, const slm::prompt_lookup& lookup) {
  std::vector<round> rounds;
  std::vector<std::int32_t> history(prompt.begin(), prompt.end()), drafts;
  std::size_t done = 0;  // tokens emitted (the first comes from the prompt's forward)
  while (done < ids.size()) {
    history.push_back(ids[done]);
    ++done;
    const std::size_t left = ids.size() - done;
    if (left == 0) break;
    drafts.clear();
    const std::size_t m = lookup.propose(history, std::min(k, left - 1), drafts);
    std::size_t j = 0;
    while (j < m && drafts[j] == ids[done + j]) ++j;
    rounds.push_back({m, j});
    for (std::size_t a = 0; a < j; ++a) history.push_back(ids[done + a]);
    done += j;
  }
  return rounds;
}

// Seconds to run `rounds` on a session of m after a prompt of `prompt_len` ids: per round
// one forward of m + 1 rows, then rollback(m - j). A round of m = 0 is a plain step.
double replay_seconds(const slm::any_model& m, std::size_t prompt_len, const std::vector<round>& rounds,
                      std::size_t max_draft, slm::compute_context& cx) {
  slm::session_options o;
  o.rollback_tokens = max_draft;
  o.max_tokens = prompt_len + 2 * (rounds.size() + 1) * (max_draft + 1);
  auto s = m.new_session(o);
  const std::size_t V = m.vocab();
  std::vector<std::int32_t> ids(prompt_len);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919 + 13) % V);
  std::vector<float> logits((max_draft + 1) * V);
  if (!s.forward(ids, 1, logits.data(), cx).ok()) return -1;
  const auto t0 = std::chrono::steady_clock::now();
  for (const round& r : rounds) {
    ids.assign(r.m + 1, static_cast<std::int32_t>(r.m % V));
    if (!s.forward(ids, r.m + 1, logits.data(), cx).ok()) return -1;  // [m + 1] ids -> [m + 1, V]
    if (r.m > r.j && !s.rollback(r.m - r.j).ok()) return -1;
  }
  return slm::seconds_since(t0);
}

int lookup_main(const std::string& dir, const std::string& shape) {
  auto m = slm::any_model::load(dir);
  if (!m) return fail(m.error());
  auto tok = slm::tokenizer::load_dir(dir);
  if (!tok) return fail(tok.error());
  auto pool = slm::thread_pool::create(env_size("SLM_BENCH_THREADS", slm::hardware_threads()));
  if (!pool) return 1;
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;  // see main(): rows must agree
  const std::string function =
      "std::vector<std::string> split(const std::string& s, char sep) {\n"
      "  std::vector<std::string> parts;\n"
      "  std::string current;\n"
      "  for (char c : s) {\n"
      "    if (c == sep) {\n"
      "      parts.push_back(current);\n"
      "      current.clear();\n"
      "    } else {\n"
      "      current += c;\n"
      "    }\n"
      "  }\n"
      "  parts.push_back(current);\n"
      "  return parts;\n"
      "}\n";
  struct workload {
    const char* name;
    std::string text;
  };
  const workload workloads[] = {
      {"rewrite", "#include <string>\n#include <vector>\n\n" + function +
                      "\n// The same function, with the separator as a std::string_view:\n"
                      "std::vector<std::string> split(const std::string& s, std::string_view sep) {\n"},
      {"continuation", "#include <string>\n#include <vector>\n\n" + function.substr(0, function.find("    if"))},
  };
  const std::size_t n = env_size("SLM_BENCH_TOKENS", 128), repeats = env_size("SLM_BENCH_REPEATS", 5);
  const std::size_t drafts[] = {4, 8, 16};
  const slm::prompt_lookup lookup;
  slm::sampler_config sc;
  sc.temperature = 0.0f;
  slm::sampler smp(sc);
  struct measured {
    std::string name;
    std::vector<std::int32_t> prompt, ids;
  };
  std::vector<measured> runs;
  std::printf("lookup drafts on %s, %zu tokens, %zu threads, best of %zu\n", dir.c_str(), n, pool->concurrency(),
              repeats);
  std::printf("%-13s %-7s %10s %14s %15s %9s %9s\n", "workload", "drafts", "ms", "accepted", "tokens/forward",
              "speedup", "same ids");
  for (const workload& w : workloads) {
    auto prompt = tok->encode(w.text);
    if (!prompt) return fail(prompt.error());
    std::vector<std::int32_t> reference;
    double plain_ms = 0;
    for (std::size_t k : {std::size_t{0}, drafts[0], drafts[1], drafts[2]}) {
      std::vector<std::int32_t> out;
      slm::speculative_stats st;
      auto ms = best_ms(*m, k, repeats, out, st, [&](auto& s, auto& o, auto& stats) {
        return slm::generate_greedy_lookup(s, *prompt, n, k, lookup, m->vocab(), smp, o, stats, cx);
      });
      if (!ms) return fail(ms.error());
      const double best = *ms;
      if (k == 0) reference = out, plain_ms = best;
      std::printf("%-13s %-7zu %10.2f %6zu/%-7zu %15.2f %8.2fx %9s\n", w.name, k, best, st.accepted, st.drafted,
                  st.tokens_per_forward(), plain_ms / best, out == reference ? "yes" : "NO");
    }
    runs.push_back({w.name, *prompt, reference});
    auto text = tok->decode(reference);
    if (text) std::printf("  %s output: %.160s...\n", w.name, text->c_str());
  }

  // The same schedules at a real model's size.
  auto cfg = slm::synthetic::shape_config(shape);
  if (!cfg) return fail(cfg.error());
  auto cut = slm::synthetic::with_layers(*cfg, env_size("SLM_BENCH_LAYERS", 8));
  if (!cut) return fail(cut.error());
  const auto tmp = std::filesystem::temp_directory_path() / slm::cat("slm_bench_lookup_", static_cast<long>(::getpid()));
  struct cleanup {
    std::filesystem::path p;
    ~cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(p, ec);
    }
  } guard{tmp};
  if (auto e = slm::synthetic::write_checkpoint(tmp / "bf16", *cut, *pool); !e) return fail(e);
  slm::convert_options co;
  if (auto r = slm::convert_checkpoint(tmp / "bf16", tmp / "nvfp4", co, *pool); !r) return fail(r.error());
  auto big = slm::any_model::load(tmp / "nvfp4");
  if (!big) return fail(big.error());
  slm::compute_context bcx{*pool};  // bf16 activations: the library's default
  std::printf("\nthe schedules replayed on %s (%zu layers, NVFP4, bf16 activations), ms best of %zu\n", shape.c_str(),
              env_size("SLM_BENCH_LAYERS", 8), repeats);
  std::printf("%-13s %-7s %10s %10s %9s\n", "workload", "drafts", "plain ms", "drafted ms", "speedup");
  for (const measured& r : runs) {
    std::vector<round> plain(r.ids.size() - 1);  // single steps: m = 0
    for (std::size_t k : drafts) {
      const std::vector<round> rounds = lookup_schedule(r.prompt, r.ids, k, lookup);
      double best_plain = 1e300, best_spec = 1e300;
      for (std::size_t rep = 0; rep < repeats; ++rep) {
        best_plain = std::min(best_plain, replay_seconds(*big, r.prompt.size(), plain, k, bcx));
        best_spec = std::min(best_spec, replay_seconds(*big, r.prompt.size(), rounds, k, bcx));
      }
      std::printf("%-13s %-7zu %10.1f %10.1f %8.2fx\n", r.name.c_str(), k, best_plain * 1e3, best_spec * 1e3,
                  best_plain / best_spec);
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "--lookup") return lookup_main(argv[2], argc > 3 ? argv[3] : "llama-3.2-1b");
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
    std::vector<std::int32_t> out;
    slm::speculative_stats st;
    auto ms = best_ms(*m, k, repeats, out, st, [&](auto& s, auto& o, auto& stats) {
      return slm::generate_greedy_mtp(s, prompt, n, k, m->vocab(), o, stats, cx);
    });
    if (!ms) return fail(ms.error());
    const double best = *ms;
    if (k == 0) {
      reference = out;
      plain_ms = best;
    }
    std::printf("%-8zu %10.3f %5zu/%-6zu %14.2f %11.2fx %9s\n", k, best, st.accepted, st.drafted, st.tokens_per_forward(),
                plain_ms / best, out == reference ? "yes" : "NO");
  }
  return 0;
}
