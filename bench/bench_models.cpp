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
//    up so the bf16 weights are 300-400 MB, random bf16 weights written with the
//    safetensors writer, then converted to NVFP4 with convert_checkpoint (the path of
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
#include "slm/io/safetensors.hpp"

namespace {

std::size_t env_size(const char* name, std::size_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? static_cast<std::size_t>(std::strtoull(v, nullptr, 10)) : fallback;
}

int fail(const slm::status& s) {
  std::fprintf(stderr, "bench_models: %s\n", s.to_string().c_str());
  return 1;
}

// ---- synthetic checkpoints -------------------------------------------------------------

struct tensor_spec {
  std::string name;
  std::vector<std::int64_t> shape;
  enum { weight, ones, zeros } fill = weight;
};

// The tensors a Hugging Face checkpoint of this config holds, named and shaped as
// transformers saves them (checked against the goldens' own files at start-up).
std::vector<tensor_spec> checkpoint_tensors(const slm::model_config& c) {
  using I = std::int64_t;
  const I d = static_cast<I>(c.hidden), V = static_cast<I>(c.vocab);
  std::vector<tensor_spec> t;
  auto mat = [&](std::string n, std::size_t rows, std::size_t cols) {
    t.push_back({std::move(n), {static_cast<I>(rows), static_cast<I>(cols)}, tensor_spec::weight});
  };
  auto vec = [&](std::string n, std::size_t len, bool one = true) {
    t.push_back({std::move(n), {static_cast<I>(len)}, one ? tensor_spec::ones : tensor_spec::zeros});
  };
  auto mlp = [&](const std::string& p, std::size_t width) {
    mat(p + ".gate_proj.weight", width, c.hidden);
    mat(p + ".up_proj.weight", width, c.hidden);
    mat(p + ".down_proj.weight", c.hidden, width);
  };
  t.push_back({"model.embed_tokens.weight", {V, d}, tensor_spec::weight});
  vec("model.norm.weight", c.hidden);
  if (!c.tie_embeddings) mat("lm_head.weight", c.vocab, c.hidden);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    const slm::layer_spec& L = c.layers[i];
    const std::string p = slm::cat("model.layers.", i);
    vec(p + ".input_layernorm.weight", c.hidden);
    vec(p + ".post_attention_layernorm.weight", c.hidden);
    const std::string a = p + ".self_attn";
    if (L.attention == slm::attention_kind::gqa) {
      mat(a + ".q_proj.weight", c.n_heads * c.head_dim, c.hidden);
      mat(a + ".k_proj.weight", c.n_kv_heads * c.head_dim, c.hidden);
      mat(a + ".v_proj.weight", c.n_kv_heads * c.head_dim, c.hidden);
      mat(a + ".o_proj.weight", c.hidden, c.n_heads * c.head_dim);
      if (c.qk_norm) {
        vec(a + ".q_norm.weight", c.head_dim);
        vec(a + ".k_norm.weight", c.head_dim);
      }
    } else {
      if (c.q_lora_rank > 0) {
        mat(a + ".q_a_proj.weight", c.q_lora_rank, c.hidden);
        vec(a + ".q_a_layernorm.weight", c.q_lora_rank);
        mat(a + ".q_b_proj.weight", c.n_heads * c.qk_head_dim(), c.q_lora_rank);
      } else {
        mat(a + ".q_proj.weight", c.n_heads * c.qk_head_dim(), c.hidden);
      }
      mat(a + ".kv_a_proj_with_mqa.weight", c.kv_lora_rank + c.qk_rope_dim, c.hidden);
      vec(a + ".kv_a_layernorm.weight", c.kv_lora_rank);
      mat(a + ".kv_b_proj.weight", c.n_heads * (c.qk_nope_dim + c.v_head_dim), c.kv_lora_rank);
      mat(a + ".o_proj.weight", c.hidden, c.n_heads * c.v_head_dim);
      if (L.sparse) {
        mat(a + ".indexer.wq_b.weight", c.index_heads * c.index_head_dim, c.q_lora_rank);
        mat(a + ".indexer.wk.weight", c.index_head_dim, c.hidden);
        mat(a + ".indexer.weights_proj.weight", c.index_heads, c.hidden);
        vec(a + ".indexer.k_norm.weight", c.index_head_dim);
        vec(a + ".indexer.k_norm.bias", c.index_head_dim, false);
      }
    }
    if (L.ffn == slm::ffn_kind::dense) {
      mlp(p + ".mlp", c.intermediate);
    } else {
      mat(p + ".mlp.gate.weight", c.n_experts, c.hidden);
      if (c.router == slm::router_kind::sigmoid_grouped) vec(p + ".mlp.gate.e_score_correction_bias", c.n_experts, false);
      for (std::size_t e = 0; e < c.n_experts; ++e) mlp(slm::cat(p, ".mlp.experts.", e), c.expert_intermediate);
      if (c.n_shared_experts > 0) mlp(p + ".mlp.shared_experts", c.expert_intermediate * c.n_shared_experts);
    }
  }
  return t;
}

// The generator must name and shape exactly what transformers wrote for the goldens.
slm::status check_against(const slm::checkpoint& ck, const slm::model_config& c) {
  const auto specs = checkpoint_tensors(c);
  if (specs.size() != ck.size())
    return slm::make_error(slm::errc::format_error, ck.dir().string(), ": the generator makes ", specs.size(),
                           " tensors, the checkpoint holds ", ck.size());
  for (const tensor_spec& s : specs) {
    const auto* e = ck.find(s.name);
    if (!e) return slm::make_error(slm::errc::format_error, ck.dir().string(), ": no tensor '", s.name, "'");
    const slm::shape& have = ck.info(*e).shape;
    if (!std::equal(have.dims().begin(), have.dims().end(), s.shape.begin(), s.shape.end()))
      return slm::make_error(slm::errc::format_error, ck.dir().string(), ": '", s.name, "' is ", have.to_string(),
                             ", the generator says otherwise");
  }
  return {};
}

// Uniform values with variance 1/K for a [N, K] weight, so activations keep their
// scale through the layers (random models only need to stay finite and route somewhere).
void fill_bf16(const tensor_spec& s, std::vector<std::uint16_t>& out) {
  std::uint64_t n = 1;
  for (auto x : s.shape) n *= static_cast<std::uint64_t>(x);
  out.resize(n);
  if (s.fill != tensor_spec::weight) {
    std::fill(out.begin(), out.end(), slm::f32_to_bf16(s.fill == tensor_spec::ones ? 1.0f : 0.0f));
    return;
  }
  const double k = static_cast<double>(s.shape.back());
  const float a = static_cast<float>(std::sqrt(3.0 / k));
  std::uint64_t state = std::hash<std::string>{}(s.name) | 1;
  for (auto& v : out) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;  // LCG; top 24 bits
    const float u = static_cast<float>(state >> 40) * (1.0f / 16777216.0f);
    v = slm::f32_to_bf16((2.0f * u - 1.0f) * a);
  }
}

slm::status write_checkpoint(const std::filesystem::path& dir, const slm::json::value& config) {
  auto cfg = slm::model_config::from_json(config);
  if (!cfg.ok()) return std::move(cfg).take_error();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return slm::make_error(slm::errc::io_error, dir.string(), ": ", ec.message());
  SLM_TRY(slm::detail::write_json_file(dir / "config.json", config));
  const auto specs = checkpoint_tensors(*cfg);
  slm::safetensors::writer w;
  w.set_metadata("format", "pt");
  for (const tensor_spec& s : specs) {
    auto shape = slm::shape::from(s.shape);
    if (!shape.ok()) return std::move(shape).take_error();
    SLM_TRY(w.plan(s.name, slm::dtype::bf16, *shape));
  }
  auto stream = w.begin_stream(dir / "model.safetensors");  // one tensor in memory at a time
  if (!stream.ok()) return std::move(stream).take_error();
  std::vector<std::uint16_t> values;
  while (!stream->done()) {
    const std::string name(stream->next_name());
    const auto it = std::find_if(specs.begin(), specs.end(), [&](const tensor_spec& s) { return s.name == name; });
    fill_bf16(*it, values);
    SLM_TRY(stream->append(name, std::as_bytes(std::span(values))));
  }
  return stream->finish();
}

// The golden's config with the sizes that set the weight bytes scaled up.
struct family {
  const char* name;     // the golden it starts from
  std::vector<std::pair<const char*, std::int64_t>> sizes;
};

slm::json::value scaled_config(const slm::json::value& golden, const family& f) {
  slm::json::value c = golden;
  std::int64_t layers = 0;
  for (const auto& [key, v] : f.sizes) {
    c.set(key, slm::json::value(v));
    if (std::string_view(key) == "num_hidden_layers") layers = v;
  }
  // Per-layer lists follow the new depth: the last entry repeats.
  for (const char* key : {"layer_types", "mlp_layer_types"}) {
    const slm::json::value* old = golden.find(key);
    if (!old || !old->is_array() || old->size() == 0) continue;
    slm::json::value list = slm::json::value::make_array();
    for (std::int64_t i = 0; i < layers; ++i)
      list.push_back((*old)[std::min<std::size_t>(static_cast<std::size_t>(i), old->size() - 1)]);
    c.set(key, std::move(list));
  }
  return c;
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
    if (auto s = check_against(m->weights(), m->config()); !s.ok()) return fail(s);
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
    if (auto s = write_checkpoint(bf16_dir, scaled_config(golden->config(), fam)); !s.ok()) { rc = fail(s); break; }
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
