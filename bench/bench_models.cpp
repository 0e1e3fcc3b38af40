// Whole-model benchmarks: prefill and decode tokens/s per architecture, the weight
// bytes a decode step streams (compute_context::weight_bytes: what linear::apply reads)
// and those bytes/s as a ratio to the read-bandwidth probe of the same run.
//
// Two sets of models:
//  * the golden checkpoints (tests/data/golden/hf, about 1 MB each): they sit in cache
//    and a step is dominated by dispatching tiny products to the pool, so their ratio
//    is not a DRAM figure and only the tokens/s mean something;
//  * synthetic ones, one per architecture family, built in a temporary directory: the
//    golden's config.json with hidden / intermediate / layers / vocab / experts scaled
//    up so the bf16 weights are 300-400 MB, random bf16 weights written by
//    slm::synthetic::write_checkpoint (as `slm synthetic` writes them), then converted to NVFP4 with convert_checkpoint (the path of
//    `slm quantize`), run with bf16 activations of NVFP4 products (the default) and
//    with exact f32 activations. Their decode streams from DRAM, so the ratio is
//    the fraction of the machine's read bandwidth a decode step reaches. For MoE models the line also
//    gives the bytes of all weights and of the weights a step would read if it touched
//    only its k routed experts: measured bytes/token equal the latter.
//
//   build/bin/bench_models [--golden-only] [--families llama,qwen3,qwen3_moe,deepseek_v3,deepseek_v32]
//   env: SLM_BENCH_THREADS (default: all hardware threads), SLM_PROBE_MIB (default 1024)
//
// A plain program rather than Google Benchmark: each case needs a model built first and
// its figures (bytes/token, ratio) come from the model's own counters.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "slm/formats/convert.hpp"
#include "slm/models/hf/model.hpp"
#include "slm/kernels/probes.hpp"
#include "slm/models/synthetic.hpp"

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

int fail(const slm::status& s) {
  std::fprintf(stderr, "bench_models: %s\n", s.to_string().c_str());
  return 1;
}

// ---- synthetic checkpoints (slm/models/synthetic.hpp writes them) ----------------------

// The golden's config with the sizes that set the weight bytes scaled up.
struct family {
  const char* name;     // the golden it starts from
  std::vector<std::pair<const char*, std::int64_t>> sizes;
};

slm::result<slm::json::value> scaled_config(const slm::json::value& golden, const family& f) {
  slm::json::value c = golden;
  std::size_t layers = 0;
  for (const auto& [key, v] : f.sizes) {
    if (std::string_view(key) == "num_hidden_layers") layers = static_cast<std::size_t>(v);
    else c.set(key, slm::json::value(v));
  }
  return slm::synthetic::with_layers(c, layers);  // the depth, and every per-layer list with it
}

// ---- measurement -------------------------------------------------------------------------

struct weight_totals {
  std::uint64_t all = 0;          // every matrix a forward can multiply by (lm_head included)
  std::uint64_t decode_topk = 0;  // what one token reads if MoE layers touch only k experts
};

weight_totals count_weights(const slm::model& m) {
  const slm::model_config& c = m.config();
  weight_totals w;
  for (std::size_t i = 0; i < m.layers().size(); ++i) {
    const auto& L = m.layers()[i];
    std::uint64_t layer = 0, experts = 0;
    auto add = [&](std::string_view, const slm::linear& l, bool) { layer += slm::weight_bytes(l.w); };
    L.mixer.for_each_linear(add);
    L.ffn.for_each_linear(add);
    if (const auto* moe = std::get_if<slm::moe_ffn>(&L.ffn.impl))
      for (const auto& e : moe->experts) e.for_each_linear([&](std::string_view, const slm::linear& l, bool) { experts += slm::weight_bytes(l.w); });
    w.all += layer;
    w.decode_topk += layer - (experts ? experts / c.n_experts * (c.n_experts - c.experts_per_token) : 0);
  }
  const bool tied = c.tie_embeddings && !m.weights().find("lm_head.weight") && !m.weights().find("lm_head.weight_packed");
  auto head = slm::load_linear_weight(m.weights(), tied ? "model.embed_tokens" : "lm_head");
  if (head.ok()) w.all += slm::weight_bytes(*head), w.decode_topk += slm::weight_bytes(*head);
  return w;
}

struct figures {
  double prefill_tok_s = 0, decode_tok_s = 0, decode_bytes_per_tok = 0;
};

// Prefill: best of `reps` forwards of `prompt` tokens in a fresh session (logits of the
// last row only, as generation asks). Decode: after a prompt of `context` tokens, one
// token at a time for up to `max_steps` steps or `budget_s` seconds.
slm::result<figures> measure(const slm::model& m, slm::executor_ref ex, std::size_t prompt, std::size_t context,
                             std::size_t max_steps, double budget_s, int reps,
                             slm::activation_precision act = slm::activation_precision::f32) {
  figures f;
  std::vector<float> logits(m.vocab());
  std::vector<std::int32_t> ids(std::max(prompt, context) + max_steps);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919 + 13) % m.vocab());
  for (int r = 0; r < reps; ++r) {
    auto s = m.new_session();
    slm::compute_context cx{ex};
    cx.quantized_activations = act;
    const auto t0 = std::chrono::steady_clock::now();
    SLM_TRY(s.forward(std::span(ids.data(), prompt), 1, logits.data(), cx));
    f.prefill_tok_s = std::max(f.prefill_tok_s, static_cast<double>(prompt) / slm::seconds_since(t0));
  }
  auto s = m.new_session();
  slm::compute_context cx{ex};
  cx.quantized_activations = act;
  SLM_TRY(s.forward(std::span(ids.data(), context), 1, logits.data(), cx));
  const std::uint64_t bytes0 = cx.weight_bytes;
  std::size_t steps = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (steps < max_steps && (steps < 4 || slm::seconds_since(t0) < budget_s)) {
    SLM_TRY(s.forward(std::span(ids.data() + context + steps, 1), 1, logits.data(), cx));
    ++steps;
  }
  const double sec = slm::seconds_since(t0);
  f.decode_tok_s = static_cast<double>(steps) / sec;
  f.decode_bytes_per_tok = static_cast<double>(cx.weight_bytes - bytes0) / static_cast<double>(steps);
  return f;
}

void print_line(const char* arch, const char* format, const figures& f, const weight_totals& w, double read_bw) {
  const double bytes_s = f.decode_bytes_per_tok * f.decode_tok_s;
  std::printf("%-14s %-13s prefill %8.1f tok/s | decode %7.1f tok/s, %8.2f MB/token (all weights %8.2f MB, k-expert step %8.2f MB), "
              "%6.1f GB/s ratio=%.2f\n",
              arch, format, f.prefill_tok_s, f.decode_tok_s, f.decode_bytes_per_tok / 1e6, static_cast<double>(w.all) / 1e6,
              static_cast<double>(w.decode_topk) / 1e6, bytes_s / 1e9, bytes_s / read_bw);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool golden_only = false;
  std::string families_arg = "llama,qwen3,qwen3_moe,deepseek_v3,deepseek_v32";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--golden-only") golden_only = true;
    else if (a == "--families" && i + 1 < argc) families_arg = argv[++i];
    else {
      std::fprintf(stderr, "usage: bench_models [--golden-only] [--families llama,qwen3,qwen3_moe,deepseek_v3,deepseek_v32]\n");
      return 2;
    }
  }
  const std::size_t threads = env_size("SLM_BENCH_THREADS", slm::hardware_threads());
  auto pool = slm::thread_pool::create(threads);
  if (!pool.ok()) return fail(pool.error());
  const slm::probe_result probe = slm::measure_probes(*pool, env_size("SLM_PROBE_MIB", 1024) << 20);
  std::printf("probe: read bandwidth %.2f GB/s over %zu MiB, f32 FMA peak %.1f GFLOP/s, %zu threads\n",
              probe.read_bytes_per_s / 1e9, probe.probe_bytes >> 20, probe.f32_flops_per_s / 1e9, threads);
  const std::filesystem::path golden_dir = std::filesystem::path(SLM_BENCH_DATA_DIR) / "golden" / "hf";

  // 1. The goldens: in cache; prefill of 48 tokens, decode after 20.
  std::printf("\ngolden models (about 1 MB, in cache, dispatch-bound: the ratio is not a DRAM figure)\n");
  for (const char* arch : {"llama", "llama3_rope", "qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v32"}) {
    auto m = slm::model::load(golden_dir / arch);
    if (!m.ok()) return fail(m.error());
    auto f = measure(*m, *pool, 48, 20, 200, 0.3, 3);
    if (!f.ok()) return fail(f.error());
    print_line(arch, "bf16", *f, count_weights(*m), probe.read_bytes_per_s);
  }
  if (golden_only) return 0;

  // 2. Synthetic models, 300-400 MB in bf16: decode streams from DRAM.
  const family families[] = {
      {"llama",
       {{"hidden_size", 2048}, {"intermediate_size", 5632}, {"num_hidden_layers", 3}, {"num_attention_heads", 16},
        {"num_key_value_heads", 4}, {"head_dim", 128}, {"vocab_size", 12000}}},
      {"qwen3",
       {{"hidden_size", 2048}, {"intermediate_size", 5632}, {"num_hidden_layers", 3}, {"num_attention_heads", 16},
        {"num_key_value_heads", 4}, {"head_dim", 128}, {"vocab_size", 12000}}},
      {"qwen3_moe",  // layer 0 dense (mlp_only_layers), then MoE: 32 experts, 4 per token
       {{"hidden_size", 2048}, {"intermediate_size", 2048}, {"num_hidden_layers", 3}, {"num_attention_heads", 16},
        {"num_key_value_heads", 4}, {"head_dim", 128}, {"vocab_size", 8000}, {"num_local_experts", 32},
        {"num_experts_per_tok", 4}, {"moe_intermediate_size", 256}}},
      {"deepseek_v3",  // MLA; layer 0 dense, then 32 routed experts (8 per token in 2 of 4 groups) + 1 shared
       {{"hidden_size", 2048}, {"intermediate_size", 2048}, {"num_hidden_layers", 3}, {"num_attention_heads", 16},
        {"num_key_value_heads", 16}, {"q_lora_rank", 512}, {"kv_lora_rank", 256}, {"qk_nope_head_dim", 64},
        {"qk_rope_head_dim", 32}, {"qk_head_dim", 96}, {"v_head_dim", 64}, {"vocab_size", 8000},
        {"n_routed_experts", 32}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 256}}},
      {"deepseek_v32",  // deepseek_v3's sizes plus the DSA indexer (top 64 keys)
       {{"hidden_size", 2048}, {"intermediate_size", 2048}, {"num_hidden_layers", 3}, {"num_attention_heads", 16},
        {"num_key_value_heads", 16}, {"q_lora_rank", 512}, {"kv_lora_rank", 256}, {"qk_nope_head_dim", 64},
        {"qk_rope_head_dim", 32}, {"qk_head_dim", 96}, {"v_head_dim", 64}, {"vocab_size", 8000},
        {"n_routed_experts", 32}, {"num_experts_per_tok", 8}, {"moe_intermediate_size", 256}, {"index_n_heads", 16}, {"index_head_dim", 64},
        {"index_topk", 64}}},
  };
  const std::filesystem::path tmp =
      std::filesystem::temp_directory_path() / slm::cat("slm_bench_models_", static_cast<long>(::getpid()));
  std::printf("\nsynthetic models (random bf16 weights, and the same converted to NVFP4; in %s, removed at exit)\n"
              "prefill: 128 tokens; decode: after 64 tokens of context\n",
              tmp.string().c_str());
  int rc = 0;
  for (const family& fam : families) {
    if (("," + families_arg + ",").find(slm::cat(",", fam.name, ",")) == std::string::npos) continue;
    auto golden = slm::checkpoint::open(golden_dir / fam.name);
    if (!golden.ok()) { rc = fail(golden.error()); break; }
    const auto bf16_dir = tmp / slm::cat(fam.name, "_bf16"), fp4_dir = tmp / slm::cat(fam.name, "_nvfp4");
    const auto t0 = std::chrono::steady_clock::now();
    auto scaled = scaled_config(golden->config(), fam);
    if (!scaled.ok()) { rc = fail(scaled.error()); break; }
    if (auto s = slm::synthetic::write_checkpoint(bf16_dir, *scaled, *pool); !s.ok()) {
      rc = fail(s);
      break;
    }
    slm::convert_options opt;
    opt.format = slm::weight_format::nvfp4;
    if (auto r = slm::convert_checkpoint(bf16_dir, fp4_dir, opt, *pool); !r.ok()) { rc = fail(r.error()); break; }
    std::printf("%s: built and converted in %.1f s\n", fam.name, slm::seconds_since(t0));
    struct variant {
      const std::filesystem::path* dir;
      const char* label;
      slm::activation_precision act;
    };
    // NVFP4 twice: bf16 activations (compute_context's default) and exact f32 ones.
    for (const variant& v : {variant{&bf16_dir, "bf16", slm::activation_precision::f32},
                             variant{&fp4_dir, "nvfp4+f32act", slm::activation_precision::f32},
                             variant{&fp4_dir, "nvfp4", slm::activation_precision::bf16}}) {
      const char* format = v.label;
      auto m = slm::model::load(*v.dir);
      if (!m.ok()) { rc = fail(m.error()); break; }
      auto f = measure(*m, *pool, 128, 64, 64, 1.5, 2, v.act);
      if (!f.ok()) { rc = fail(f.error()); break; }
      print_line(fam.name, format, *f, count_weights(*m), probe.read_bytes_per_s);
    }
    std::error_code ec;
    std::filesystem::remove_all(bf16_dir, ec);
    std::filesystem::remove_all(fp4_dir, ec);
    if (rc) break;
  }
  std::error_code ec;
  std::filesystem::remove_all(tmp, ec);
  return rc;
}
