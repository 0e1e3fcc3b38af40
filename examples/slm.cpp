// slm - the command-line front end of the slm library.
//
//   slm inspect --model DIR|FILE.safetensors [--no-tensors]
//   slm logits --model DIR --ids ID,... --out FILE.safetensors [--mode full|incremental] [--prefill P] [--ctx N]
//              [--kv f32|bf16] [--mla auto|expanded|absorbed] [--act f32|bf16|int8] [--threads N]
//   slm run --model DIR (--prompt TEXT | --prompt-ids ID,... | --fim-prefix TEXT --fim-suffix TEXT)
//           [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p P] [--seed S] [--stream] [--stop STR]...
//           [--kv ...] [--mla ...] [--act ...] [--threads N] [--speculative none|mtp] [--draft K]
//   slm tokenize --model DIR (--text TEXT | --file PATH)      slm detokenize --model DIR --ids ID ...
//   slm perplexity --model DIR (--file PATH ... | --text TEXT) [--ctx N] [--stride S] [--max-tokens N]
//                  [--verbose] [--json FILE] [--kv ...] [--mla ...] [--act ...] [--threads N]
//   slm bench --kernels [--quick] [--threads N]  |  slm bench --model DIR [--prompt-tokens N] [--gen-tokens N]
//   slm quantize --in DIR --out DIR [--force] [--format nvfp4|mxfp4|fp8|bf16] [--exclude GLOB ...] [--threads N]
//   slm --version | --help
//
// Every error prints one line "slm: error: ..." and exits non-zero (2 for usage errors).
// Subcommands are rows of one table; each is a plain function over parsed arguments.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/formats/convert.hpp"
#include "slm/ensemble/ensemble.hpp"
#include "slm/kernels/kernel_bench.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/models/nanochat/model.hpp"
#include "slm/slm.hpp"
#include "slm/generate/speculative.hpp"
#include "slm/generate/generator.hpp"
#include "slm/generate/throughput.hpp"
#include "slm/models/sequence_logits.hpp"
#include "slm/text/tokenizer.hpp"

namespace {

struct args {
  std::vector<std::string_view> positional;
  std::vector<std::pair<std::string, std::string>> options;  // --key value, or --flag -> ""

  bool has(std::string_view k) const {
    for (const auto& [key, v] : options)
      if (key == k) return true;
    return false;
  }
  std::string_view get(std::string_view k, std::string_view fallback = {}) const {
    std::string_view found = fallback;
    for (const auto& [key, v] : options)
      if (key == k) found = v;  // the last one wins
    return found;
  }
  std::vector<std::string> all(std::string_view k) const {  // repeatable options
    std::vector<std::string> out;
    for (const auto& [key, v] : options)
      if (key == k) out.push_back(v);
    return out;
  }
};

// --threads N (default: every hardware thread).
slm::result<slm::thread_pool> make_pool(const args& a) {
  const std::string_view t = a.get("threads");
  std::size_t n = slm::hardware_threads();
  if (!t.empty()) {
    auto r = std::from_chars(t.data(), t.data() + t.size(), n);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size() || n == 0)
      return slm::make_error(slm::errc::invalid_argument, "--threads needs a positive integer, got '", t, "'");
  }
  return slm::thread_pool::create(n);
}

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "slm: error: %s (see 'slm --help')\n", msg.c_str());
  return 2;
}
int fail(const slm::status& s) {
  std::fprintf(stderr, "slm: error: %s\n", s.to_string().c_str());
  return 1;
}

std::string human_bytes(std::uint64_t n) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

// Summary of tensors by dtype (slm::weight_totals), then (optionally) one line per tensor.
template <class Source>
void print_tensors(const slm::weight_totals& w, const Source& src, std::size_t count, bool list) {
  std::printf("weights   %zu tensors, %llu elements, %s\n", w.all.tensors,
              static_cast<unsigned long long>(w.all.elements), human_bytes(w.all.bytes).c_str());
  for (const auto& [name, x] : w.by_dtype)
    std::printf("  %-8.*s %6zu tensors %14llu elements %12s\n", static_cast<int>(name.size()), name.data(),
                x.tensors, static_cast<unsigned long long>(x.elements), human_bytes(x.bytes).c_str());
  if (!list) return;
  std::printf("\n%-56s %-8s %-22s %12s\n", "tensor", "dtype", "shape", "bytes");
  for (std::size_t i = 0; i < count; ++i) {
    const auto& t = src(i);
    std::printf("%-56s %-8.*s %-22s %12llu\n", t.name.c_str(), static_cast<int>(slm::safetensors_name(t.type).size()),
                slm::safetensors_name(t.type).data(), t.shape.to_string().c_str(),
                static_cast<unsigned long long>(t.end - t.begin));
  }
}

void print_config(const slm::json::value& config) {
  const slm::json::value& archs = config["architectures"];
  std::string arch = archs.size() && archs[0].is_string() ? std::string(archs[0].as_string()) : "?";
  std::printf("type      %s (%s)\n", std::string(config["model_type"].is_string() ? config["model_type"].as_string() : "?").c_str(),
              arch.c_str());
  // The dimensions most architectures share; anything else is in config.json itself.
  const char* keys[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
                        "num_experts", "n_routed_experts", "num_experts_per_tok", "state_size", "tie_word_embeddings",
                        "num_layers", "hybrid_pattern", "num_moe_experts", "moe_router_topk", "mtp_num_layers",
                        "n_layer", "n_head", "n_kv_head", "n_embd", "sequence_len"};
  std::string line;
  for (const char* k : keys) {
    const slm::json::value* v = config.find(k);
    if (!v || v->is_null()) continue;
    line += slm::cat(line.empty() ? "" : " ", k, "=", v->is_string() ? std::string(v->as_string()) : slm::json::dump(*v));
  }
  std::printf("config    %s\n", line.c_str());
}

// One row per layer (and per embedding, head and MTP sublayer): kind, parameters, bytes
// as stored and in which formats, parameters active per token (MoE: the routed top-k,
// the shared expert and the router); then the totals.
template <class Rows>
void print_layer_table(const Rows& rows) {
  std::printf("\n%-6s %-12s %14s %12s %-14s %14s\n", "layer", "kind", "params", "bytes", "formats", "active/token");
  std::uint64_t params = 0, bytes = 0, active = 0;
  for (const auto& r : rows) {
    const bool layer = r.kind == "mla" || r.kind == "dsa" || r.kind == "moe" || r.kind == "mamba3" || r.kind == "m2rnn";
    std::printf("%-6s %-12s %14llu %12s %-14s %14llu\n", layer ? std::to_string(r.index).c_str() : "-", r.kind.c_str(),
                static_cast<unsigned long long>(r.params),
                human_bytes(r.bytes).c_str(), r.formats.c_str(), static_cast<unsigned long long>(r.active_params));
    params += r.params;
    bytes += r.bytes;
    active += r.active_params;
  }
  std::printf("%-6s %-12s %14llu %12s %-14s %14llu\n\n", "total", "", static_cast<unsigned long long>(params),
              human_bytes(bytes).c_str(), "", static_cast<unsigned long long>(active));
}

// A checkpoint opened for its config files and tensor headers only (inspect, and what a
// command needs to know before it loads the model): mapped, so no weight is read. Its
// headers are parsed within open(); its tensor data is never touched, so a weight file
// replaced or truncated later cannot fault it. Models run from the commands' own load.
slm::result<slm::checkpoint> open_metadata(const std::filesystem::path& dir) {
  slm::checkpoint_options o;
  o.weights = slm::load_mode::map;
  return slm::checkpoint::open(dir, o);
}

// Shows the reading of the weights: a bar on a terminal, a plain line per quarter
// otherwise. Quiet for models under 64 MiB unless --progress is given, so small runs stay
// clean.
class weight_progress {
 public:
  explicit weight_progress(bool forced) : forced_(forced), tty_(isatty(fileno(stderr)) != 0) {}
  void operator()(std::uint64_t done, std::uint64_t total) {
    if (!forced_ && total < (std::uint64_t{64} << 20)) return;
    const int pct = static_cast<int>(total ? 100 * std::min(done, total) / total : 100);
    if (pct == shown_) return;
    if (tty_) {
      const int width = 30, filled = width * pct / 100;
      std::fprintf(stderr, "\rslm: reading weights [%.*s%*s] %3d%% %s", filled, "##############################",
                   width - filled, "", pct, human_bytes(total).c_str());
      if (pct == 100) std::fprintf(stderr, "\n");
    } else if (shown_ < 0 || pct / 25 != shown_ / 25 || pct == 100) {
      std::fprintf(stderr, "slm: reading weights: %d%% of %s\n", pct, human_bytes(total).c_str());
    }
    shown_ = pct;
  }

 private:
  bool forced_, tty_;
  int shown_ = -1;
};

// How the commands that run a model load its weights: read into private memory (the
// default, so nothing done to the files while slm runs can reach it), or mapped with
// --mmap (no copy; a weight file truncated or rewritten in place meanwhile kills slm with
// SIGBUS or changes the model: for files nothing else writes). `progress` (slm run) is
// told of the reading.
slm::checkpoint_options load_options(const args& a, weight_progress* progress = nullptr) {
  slm::checkpoint_options o;
  if (a.has("mmap")) o.weights = slm::load_mode::map;
  if (progress) o.progress = [progress](std::uint64_t done, std::uint64_t total) { (*progress)(done, total); };
  return o;
}

int cmd_inspect(const args& a) {
  const std::string_view model = a.get("model", a.positional.empty() ? std::string_view{} : a.positional[0]);
  if (model.empty()) return usage_error("inspect needs --model DIR (or a .safetensors file)");
  const std::filesystem::path path{std::string(model)};
  const bool list = !a.has("no-tensors");
  std::error_code ec;
  if (path.extension() == ".json" && std::filesystem::is_regular_file(path, ec)) {  // an ensemble.json
    auto cfg = slm::ensemble::ensemble_config::load(path);
    if (!cfg.ok()) return fail(cfg.error());
    auto reg = slm::ensemble::registry::from_config(*cfg);
    if (!reg.ok()) return fail(reg.error());
    std::printf("ensemble  %s: router %s, strategy %s\n", path.string().c_str(),
                std::string(slm::ensemble::to_string(cfg->router.kind)).c_str(),
                std::string(slm::ensemble::to_string(cfg->strategy.kind)).c_str());
    for (const std::string& line : reg->inspect()) std::printf("%s\n", line.c_str());
    return 0;
  }
  if (std::filesystem::is_regular_file(path, ec)) {
    auto f = slm::safetensors::file::open(path, {}, slm::load_mode::map);  // the header only, as open_metadata
    if (!f.ok()) return fail(f.error());
    std::printf("file      %s\n", path.string().c_str());
    for (const auto& [k, v] : f->header().metadata) std::printf("metadata  %s = %s\n", k.c_str(), v.c_str());
    print_tensors(slm::weight_totals::of(f->tensors()), [&](std::size_t i) -> const auto& { return f->tensors()[i]; },
                  f->tensors().size(), list);
    return 0;
  }
  std::error_code ec2;
  if (!std::filesystem::exists(path / "config.json", ec2) && std::filesystem::exists(path / "tokenizer.json", ec2)) {
    auto tok = slm::tokenizer::load_dir(path);  // a tokenizer-only directory
    if (!tok.ok()) return fail(tok.error());
    std::printf("tokenizer %s\n          %s\n", (path / "tokenizer.json").string().c_str(), tok->summary().c_str());
    return 0;
  }
  auto ck = open_metadata(path);
  if (!ck.ok()) return fail(ck.error());
  std::printf("model     %s\n", path.string().c_str());
  print_config(ck->config());
  std::printf("files     %zu safetensors file%s%s%s%s\n", ck->shards().size(), ck->shards().size() == 1 ? "" : "s",
              ck->generation_config() ? ", generation_config.json" : "",
              ck->hf_quant_config() ? ", hf_quant_config.json" : "", ck->has_tokenizer() ? ", tokenizer.json" : "");
  if (ck->has_tokenizer()) {
    auto tok = slm::tokenizer::load_dir(path);
    if (!tok.ok()) return fail(tok.error());
    const auto& sp = tok->specials();
    std::printf("tokenizer %s; bos %d eos %d pad %d unk %d, fim %d/%d/%d\n", tok->summary().c_str(), sp.bos, sp.eos,
                sp.pad, sp.unk, sp.fim_prefix, sp.fim_suffix, sp.fim_middle);
  }
  if (const auto* q = ck->quantization_config()) std::printf("quant     %s\n", slm::json::dump(*q).c_str());
  if (const auto* q = ck->hf_quant_config()) std::printf("quant     %s\n", slm::json::dump(*q).c_str());
  const slm::json::value& type = ck->config()["model_type"];
  if (type.is_string() && type.as_string() == "nam56r") {  // the specialist's layer table
    slm::checkpoint_options o;
    o.weights = slm::load_mode::map;  // the layer table needs shapes, not weights
    auto m = slm::nam56r_model::load(path, o);
    if (!m.ok()) return fail(m.error());
    print_layer_table(m->describe());
  }
  print_tensors(slm::weight_totals::of(*ck), [&](std::size_t i) -> const auto& { return ck->info(ck->tensors()[i]); },
                ck->size(), list);
  return 0;
}

// A list of token ids, "5,17,3": decimal integers in [0, 2^31), no spaces, at least one.
slm::result<std::vector<std::int32_t>> parse_ids(std::string_view option, std::string_view text) {
  std::vector<std::int32_t> ids;
  if (text.empty()) return slm::make_error(slm::errc::invalid_argument, "--", option, " needs a comma-separated list of token ids");
  for (std::size_t b = 0; b <= text.size();) {
    const std::size_t e = std::min(text.find(',', b), text.size());
    const std::string_view item = text.substr(b, e - b);
    std::int32_t id = 0;
    const auto r = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size() || id < 0)
      return slm::make_error(slm::errc::invalid_argument, "--", option, ": '", item, "' (item ", ids.size(),
                             ") is not a token id (a non-negative integer)");
    ids.push_back(id);
    b = e + 1;
  }
  return ids;
}

// A positive integer option, or `fallback` when absent.
slm::result<std::size_t> parse_count(const args& a, std::string_view key, std::size_t fallback) {
  const std::string_view t = a.get(key);
  if (t.empty()) return fallback;
  std::size_t n = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), n);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size() || n == 0)
    return slm::make_error(slm::errc::invalid_argument, "--", key, " needs a positive integer, got '", t, "'");
  return n;
}

// How a model runs: --kv f32|bf16, --mla auto|expanded|absorbed (the session) and
// --act f32|bf16|int8 (the activations of NVFP4/MXFP4 products, per forward call).
struct run_options {
  slm::session_options session;
  slm::activation_precision act = slm::activation_precision::bf16;  // compute_context's default
};
slm::result<run_options> parse_run_options(const args& a) {
  run_options r;
  slm::session_options& o = r.session;
  const std::string_view kv = a.get("kv", "f32"), mla = a.get("mla", "auto"), act = a.get("act", "f32");
  if (kv == "f32") o.kv = slm::kv_dtype::f32;
  else if (kv == "bf16") o.kv = slm::kv_dtype::bf16;
  else return slm::make_error(slm::errc::invalid_argument, "--kv must be f32 or bf16, not '", kv, "'");
  if (mla == "auto") o.mla = slm::mla_mode::automatic;
  else if (mla == "expanded") o.mla = slm::mla_mode::expanded;
  else if (mla == "absorbed") o.mla = slm::mla_mode::absorbed;
  else return slm::make_error(slm::errc::invalid_argument, "--mla must be auto, expanded or absorbed, not '", mla, "'");
  if (act == "f32") r.act = slm::activation_precision::f32;
  else if (act == "bf16") r.act = slm::activation_precision::bf16;
  else if (act == "int8") r.act = slm::activation_precision::int8;
  else return slm::make_error(slm::errc::invalid_argument, "--act must be f32, bf16 or int8, not '", act, "'");
  return r;
}

// Ids outside the vocabulary are the caller's mistake, caught before any work.
slm::status check_vocab(std::string_view option, const std::vector<std::int32_t>& ids, std::size_t vocab) {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (static_cast<std::size_t>(ids[i]) >= vocab)
      return slm::make_error(slm::errc::invalid_argument, "--", option, ": token id ", ids[i], " (item ", i,
                             ") is outside the model's vocabulary [0, ", vocab, ")");
  return {};
}

// slm logits: the logits of a token sequence (slm::sequence_logits: row t the next-token
// distribution after ids 0..t, by one forward, or --mode incremental through the KV
// cache), as tensor "logits" F32 [T, V] in a safetensors file.
int cmd_logits(const args& a) {
  const std::string_view model = a.get("model"), out = a.get("out"), mode = a.get("mode", "full");
  if (model.empty() || out.empty() || !a.has("ids"))
    return usage_error("logits needs --model DIR, --ids ID,ID,... and --out FILE.safetensors");
  if (mode != "full" && mode != "incremental")
    return usage_error(slm::cat("--mode must be full or incremental, not '", mode, "'"));
  auto ids = parse_ids("ids", a.get("ids"));
  if (!ids.ok()) return usage_error(ids.error().message());
  const std::size_t T = ids->size();
  auto prefill = parse_count(a, "prefill", 1);
  if (!prefill.ok()) return usage_error(prefill.error().message());
  if (mode == "full" && a.has("prefill")) return usage_error("--prefill applies to --mode incremental only");
  if (*prefill > T) return usage_error(slm::cat("--prefill ", *prefill, " exceeds the ", T, " ids given"));
  auto opt = parse_run_options(a);
  if (!opt.ok()) return usage_error(opt.error().message());
  if (auto ctx = parse_count(a, "ctx", 0); !ctx.ok()) return usage_error(ctx.error().message());
  else if (*ctx) opt->session.max_tokens = *ctx;  // a context limit, as slm run takes it
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());

  auto m = slm::any_model::load(std::filesystem::path{std::string(model)}, load_options(a));
  if (!m.ok()) return fail(m.error());
  const std::size_t V = m->vocab();
  if (auto s = check_vocab("ids", *ids, V); !s.ok()) return usage_error(s.message());
  slm::compute_context cx{*pool};
  cx.quantized_activations = opt->act;
  const slm::sequence_logits_options lo{mode == "full" ? slm::logits_mode::full : slm::logits_mode::incremental, *prefill,
                                        opt->session};
  auto logits = slm::sequence_logits(*m, *ids, lo, cx);  // [T, V]
  if (!logits.ok()) return fail(logits.error());

  slm::safetensors::writer w;
  w.set_metadata("format", "pt");
  w.set_metadata("mode", std::string(mode));
  if (mode == "incremental") w.set_metadata("prefill", std::to_string(*prefill));
  const slm::shape shape{static_cast<std::int64_t>(T), static_cast<std::int64_t>(V)};
  if (auto s = w.add("logits", slm::dtype::f32, shape, std::as_bytes(logits->span())); !s.ok()) return fail(s);
  if (auto s = w.write(std::string(out)); !s.ok()) return fail(s);
  std::printf("wrote logits %s (%.*s%s) to %.*s\n", shape.to_string().c_str(), static_cast<int>(mode.size()), mode.data(),
              mode == "incremental" ? slm::cat(", prefill ", *prefill).c_str() : "", static_cast<int>(out.size()), out.data());
  return 0;
}

// A floating-point option, or `fallback` when absent.
slm::result<float> parse_float(const args& a, std::string_view key, float fallback) {
  const std::string_view t = a.get(key);
  if (t.empty()) return fallback;
  float v = 0;
  const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
  if (r.ec != std::errc() || r.ptr != t.data() + t.size())
    return slm::make_error(slm::errc::invalid_argument, "--", key, " needs a number, got '", t, "'");
  return v;
}

// The sampling settings: the model's defaults (generation_config.json as transformers
// reads it: slm::load's defaults.sampling), then the command line over them. --temp 0 is
// greedy.
slm::result<slm::sampler_config> parse_sampling(const args& a, slm::sampler_config c) {
  auto f = [&](std::string_view key, float& slot) -> slm::status {
    auto v = parse_float(a, key, slot);
    if (!v.ok()) return std::move(v).error();
    slot = *v;
    return {};
  };
  SLM_TRY(f("temp", c.temperature));
  SLM_TRY(f("top-p", c.top_p));
  SLM_TRY(f("min-p", c.min_p));
  SLM_TRY(f("repeat-penalty", c.repetition_penalty));
  SLM_TRY(f("frequency-penalty", c.frequency_penalty));
  SLM_TRY(f("presence-penalty", c.presence_penalty));
  // Integers, read as integers: a float cast to int is undefined past its range (1e10, nan).
  auto i32 = [&](std::string_view key, std::int32_t lo, std::int32_t& slot) -> slm::status {
    const std::string_view t = a.get(key);
    if (t.empty()) return {};
    std::int32_t v = 0;
    const auto r = std::from_chars(t.data(), t.data() + t.size(), v);
    if (r.ec != std::errc() || r.ptr != t.data() + t.size() || v < lo)
      return slm::make_error(slm::errc::invalid_argument, "--", key, " needs an integer from ", lo, " to ",
                             std::numeric_limits<std::int32_t>::max(), ", got '", t, "'");
    slot = v;
    return {};
  };
  SLM_TRY(i32("top-k", 0, c.top_k));
  SLM_TRY(i32("repeat-last-n", -1, c.penalty_last_n));
  if (const std::string_view seed = a.get("seed"); !seed.empty()) {
    const auto r = std::from_chars(seed.data(), seed.data() + seed.size(), c.seed);
    if (r.ec != std::errc() || r.ptr != seed.data() + seed.size())
      return slm::make_error(slm::errc::invalid_argument, "--seed needs a non-negative integer, got '", seed, "'");
  }
  for (const std::string& b : a.all("logit-bias")) {  // ID=BIAS, BIAS may be -inf
    const auto eq = b.find('=');
    std::int32_t id = -1;
    float bias = 0;
    const bool ok = eq != std::string::npos &&
                    std::from_chars(b.data(), b.data() + eq, id).ptr == b.data() + eq && id >= 0 &&
                    (b.substr(eq + 1) == "-inf" ? (bias = -std::numeric_limits<float>::infinity(), true)
                                                : std::from_chars(b.data() + eq + 1, b.data() + b.size(), bias).ptr ==
                                                      b.data() + b.size());
    if (!ok) return slm::make_error(slm::errc::invalid_argument, "--logit-bias needs ID=BIAS (e.g. 42=-inf), got '", b, "'");
    c.logit_bias.emplace_back(id, bias);
  }
  return c;
}

// slm run: generation. The prompt is text (--prompt, encoded with the model's tokenizer,
// BOS as its post-processor says), ids (--prompt-ids: the output is ids too) or a
// fill-in-the-middle pair (--fim-prefix/--fim-suffix: prefix, suffix, then the model
// writes the middle). Greedy unless generation_config.json or --temp says otherwise.
int cmd_run(const args& a) {
  const std::string_view model = a.get("model");
  const bool ids_mode = a.has("prompt-ids"), text_mode = a.has("prompt"),
             fim_mode = a.has("fim-prefix") || a.has("fim-suffix"), resume = a.has("load-state");
  if (model.empty() || (ids_mode + text_mode + fim_mode != 1 && !(resume && ids_mode + text_mode + fim_mode == 0)))
    return usage_error("run needs --model DIR and one of --prompt TEXT, --prompt-ids ID,ID,... or --fim-prefix/--fim-suffix");
  std::vector<std::int32_t> prompt;
  if (ids_mode) {
    auto p = parse_ids("prompt-ids", a.get("prompt-ids"));
    if (!p.ok()) return usage_error(p.error().message());
    prompt = std::move(*p);
  }
  auto n = parse_count(a, "tokens", ids_mode ? 16 : 128);
  if (!n.ok()) return usage_error(slm::cat(n.error().message(), " (-n)"));
  auto opt = parse_run_options(a);
  if (!opt.ok()) return usage_error(opt.error().message());
  if (auto ctx = parse_count(a, "ctx", 0); !ctx.ok()) return usage_error(ctx.error().message());
  else if (*ctx) opt->session.max_tokens = *ctx;
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());
  const std::string_view spec = a.get("speculative", "none");
  if (spec != "none" && spec != "mtp") return usage_error(slm::cat("--speculative must be none or mtp, not '", spec, "'"));
  auto drafts = parse_count(a, "draft", 0);
  if (!drafts.ok()) return usage_error(drafts.error().message());

  // The sampling options are checked before the (long) load; applied over the model's
  // defaults after it.
  if (auto s = parse_sampling(a, slm::sampler_config{}); !s.ok()) return usage_error(s.error().message());
  const std::filesystem::path dir{std::string(model)};
  std::error_code ec;
  if (!ids_mode && !std::filesystem::exists(dir / "tokenizer.json", ec))
    return fail(slm::make_error(slm::errc::not_found, dir.string(), ": no tokenizer.json (use --prompt-ids)"));
  weight_progress progress(a.has("progress"));  // the weights are read (or, --mmap, touched) before the first forward
  slm::load_options lo;
  lo.checkpoint = load_options(a, &progress);
  auto loaded = slm::load(dir, lo);  // the checkpoint once: model, tokenizer, generation defaults
  if (!loaded.ok()) return fail(loaded.error());
  auto sampling = parse_sampling(a, loaded->defaults.sampling);
  if (!sampling.ok()) return usage_error(sampling.error().message());
  const slm::tokenizer* t = loaded->tok ? &*loaded->tok : nullptr;
  if (!ids_mode && !t) return fail(slm::make_error(slm::errc::not_found, dir.string(), ": no tokenizer.json (use --prompt-ids)"));
  if (text_mode) {
    slm::encode_options eo;
    eo.parse_special = !a.has("no-parse-special");
    auto p = t->encode(a.get("prompt"), eo);
    if (!p.ok()) return fail(p.error());
    prompt = std::move(*p);
    if (prompt.empty() && t->specials().bos >= 0) prompt.push_back(t->specials().bos);
  } else if (fim_mode) {
    // Without --fim-order, the model's own order (tokenizer_config.json "fim_order"), else PSM.
    const std::string_view order = a.get("fim-order");
    if (a.has("fim-order") && order != "psm" && order != "spm")
      return usage_error(slm::cat("--fim-order must be psm or spm, not '", order, "'"));
    std::optional<slm::fim_order> o;
    if (a.has("fim-order")) o = order == "psm" ? slm::fim_order::psm : slm::fim_order::spm;
    auto p = slm::fim_prompt(*t, a.get("fim-prefix"), a.get("fim-suffix"), o);
    if (!p.ok()) return fail(p.error());
    prompt = std::move(*p);
  }
  slm::generation_options go;
  go.max_new_tokens = *n;
  if (!a.has("ignore-eos")) go.stop_tokens = loaded->defaults.eos_ids;
  go.stop_strings = a.all("stop");
  const bool stream = a.has("stream");

  return std::visit([&](const auto& m) -> int {  // the family's own type (MTP drafting is NAM56R's)
    slm::prefetch_weights(m.weights(), std::ref(progress));  // --mmap: read ahead, shown as a load
    const std::size_t V = m.vocab();
    if (auto s = check_vocab(ids_mode ? "prompt-ids" : "prompt", prompt, V); !s.ok()) return usage_error(s.message());
    slm::compute_context cx{*pool};
    cx.quantized_activations = opt->act;
    auto print_ids = [](const std::vector<std::int32_t>& ids) {
      std::string line;
      for (std::size_t i = 0; i < ids.size(); ++i) line += slm::cat(i ? "," : "", ids[i]);
      std::printf("%s\n", line.c_str());
    };
    if (spec == "mtp") {  // self-speculative: drafts from the model's MTP heads, plain generation's tokens
      if constexpr (slm::mtp_session<decltype(m.new_session())>) {
        if (resume || a.has("save-state")) return usage_error("--speculative mtp does not take --load-state / --save-state");
        if (stream && !ids_mode) return usage_error("--speculative mtp does not stream: drop --stream");
        const std::size_t depths = m.config().mtp_num_layers;
        if (depths == 0) return fail(slm::make_error(slm::errc::unsupported, "--speculative mtp: the model has no MTP layers"));
        const std::size_t k = *drafts ? *drafts : depths;
        if (k > depths) return usage_error(slm::cat("--draft ", k, " exceeds the model's ", depths, " MTP depths"));
        slm::session_options o = opt->session;
        o.rollback_tokens = std::max(o.rollback_tokens, k);  // rejected drafts are rolled back
        auto session = m.new_session(o);
        // The sampler plain generation uses (generator: vocab_size = the tokenizer's
        // rows), so bias, penalties, padding rows and non-finite logits are treated alike.
        slm::sampler_config sc = *sampling;
        if (sc.vocab_size == 0) sc.vocab_size = t ? std::min(V, t->vocab_size()) : V;
        if (auto s = slm::validate(sc, V); !s.ok()) return usage_error(s.message());
        slm::sampler smp(sc);
        auto r = slm::generate_mtp(session, prompt, k, V, smp, go, t, cx);
        if (!r.ok()) return fail(r.error());
        const slm::speculative_stats& st = r->stats;
        if (ids_mode) {
          print_ids(r->tokens);
        } else {
          std::fwrite(r->text.data(), 1, r->text.size(), stdout);
          std::printf("\n");
        }
        std::fprintf(stderr, "slm: mtp: %zu drafted, %zu accepted (%.1f %%), %.2f tokens per main forward\n", st.drafted,
                     st.accepted, 100.0 * st.acceptance_rate(), st.tokens_per_forward());
        return 0;
      } else {
        return fail(slm::make_error(slm::errc::unsupported,
                                    "--speculative mtp: this model has no MTP drafting in slm (NAM56R models do)"));
      }
    }
    slm::generator gen(m.new_session(opt->session), t, V, *sampling);
    if (auto s = gen.validate(); !s.ok()) return usage_error(s.message());
    if (resume)
      if (auto s = gen.load(std::string(a.get("load-state"))); !s.ok()) return fail(s);
    const auto t0 = std::chrono::steady_clock::now();
    if (!prompt.empty())
      if (auto s = gen.prefill(prompt, cx); !s.ok()) return fail(s);
    const double prefill_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto r = gen.generate(go, cx, [&](std::string_view piece) {
      if (stream && !ids_mode) {
        std::fwrite(piece.data(), 1, piece.size(), stdout);
        std::fflush(stdout);
      }
      return true;
    });
    if (!r.ok()) return fail(r.error());
    if (ids_mode) print_ids(r->tokens);
    else {
      if (!stream) std::fwrite(r->text.data(), 1, r->text.size(), stdout);
      std::printf("\n");
    }
    if (a.has("save-state"))
      if (auto s = gen.save(std::string(a.get("save-state"))); !s.ok()) return fail(s);
    std::fprintf(stderr, "slm: %zu prompt tokens in %.3f s, %zu generated in %.3f s (%.1f tok/s), stop: %.*s\n",
                 prompt.size(), prefill_s, r->tokens.size(), r->seconds,
                 r->seconds > 0 ? static_cast<double>(r->tokens.size()) / r->seconds : 0.0,
                 static_cast<int>(slm::to_string(r->reason).size()), slm::to_string(r->reason).data());
    return 0;
  }, loaded->model.get());
}

// Token ids as printed by `slm tokenize` (spaces) or used by --prompt-ids (commas).
slm::result<std::vector<std::int32_t>> parse_id_list(std::string_view text) {
  std::string joined(text);
  for (char& c : joined)
    if (c == ' ' || c == '\t' || c == '\n') c = ',';
  std::string_view v = joined;
  while (!v.empty() && v.front() == ',') v.remove_prefix(1);
  while (!v.empty() && v.back() == ',') v.remove_suffix(1);
  std::string collapsed;
  for (char c : v)
    if (!(c == ',' && !collapsed.empty() && collapsed.back() == ',')) collapsed.push_back(c);
  return parse_ids("ids", collapsed);
}

// slm tokenize: the ids of a text, space-separated on one line. The directory may hold
// only a tokenizer.json.
int cmd_tokenize(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || a.has("text") == a.has("file")) return usage_error("tokenize needs --model DIR and one of --text TEXT or --file PATH");
  auto tok = slm::tokenizer::load_dir(std::filesystem::path(std::string(model)));
  if (!tok.ok()) return fail(tok.error());
  std::string text;
  if (a.has("file")) {
    auto f = slm::read_text_file(std::string(a.get("file")), std::size_t{1} << 30);
    if (!f.ok()) return fail(f.error());
    text = std::move(*f);
  } else {
    text = std::string(a.get("text"));
  }
  slm::encode_options eo;
  eo.add_special_tokens = !a.has("no-add-special");
  eo.parse_special = !a.has("no-parse-special");
  auto ids = tok->encode(text, eo);
  if (!ids.ok()) return fail(ids.error());
  std::string line;
  for (std::size_t i = 0; i < ids->size(); ++i) line += slm::cat(i ? " " : "", (*ids)[i]);
  std::printf("%s\n", line.c_str());
  return 0;
}

// slm detokenize: the exact bytes of ids on stdout (no newline added).
int cmd_detokenize(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || !a.has("ids")) return usage_error("detokenize needs --model DIR and --ids ID ...");
  auto ids = parse_id_list(a.get("ids"));
  if (!ids.ok()) return usage_error(ids.error().message());
  auto tok = slm::tokenizer::load_dir(std::filesystem::path(std::string(model)));
  if (!tok.ok()) return fail(tok.error());
  slm::decode_options d;
  d.skip_special_tokens = a.has("skip-special");
  auto text = tok->decode(*ids, d);
  if (!text.ok()) return fail(text.error());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

// slm perplexity: how well a model predicts text, as llama.cpp's llama-perplexity and
// HF's perplexity guide measure it: slm::score_documents (generate/scoring.hpp has the
// method: encoding, windows of --ctx every --stride, NLL over the tokenizer's rows, bits
// per byte, --max-tokens at a document boundary). On a nanochat model the windows run
// through the session, the function `slm run` generates with (DSA dense, strictly
// causal), not the no-cache training forward of `slm logits --mode full` (README: why).
// One figures line of slm perplexity (README: its format).
std::string score_line(const slm::score_tally& score) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "tokens %zu  bytes %llu  nll %.6f nats/token  ppl %.4f  bits/byte %.6f  top1 %.2f%%",
                score.tokens, static_cast<unsigned long long>(score.bytes), score.nll_per_token(), score.perplexity(),
                score.bits_per_byte(), 100.0 * score.top1_rate());
  return buf;
}

// The documents of --file (repeatable; slm::read_documents: a directory stands for every
// regular file under it, sorted by path) or --text. An unreadable or empty one is an error.
slm::result<std::vector<slm::document>> read_documents(const args& a) {
  if (a.has("text")) {
    if (a.get("text").empty()) return slm::make_error(slm::errc::invalid_argument, "--text: empty document");
    return std::vector<slm::document>{{"--text", std::string(a.get("text"))}};
  }
  const std::vector<std::string> files = a.all("file");
  return slm::read_documents(std::vector<std::filesystem::path>(files.begin(), files.end()));
}

int cmd_perplexity(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || a.has("text") == a.has("file"))
    return usage_error("perplexity needs --model DIR and one of --file PATH (repeatable) or --text TEXT");
  auto ctx_arg = parse_count(a, "ctx", 512);
  if (!ctx_arg.ok()) return usage_error(ctx_arg.error().message());
  if (*ctx_arg < 2) return usage_error(slm::cat("--ctx must be at least 2 (a token and its successor), got ", *ctx_arg));
  auto stride_arg = parse_count(a, "stride", 0);  // 0: ctx / 2, once ctx is known
  if (!stride_arg.ok()) return usage_error(stride_arg.error().message());
  if (*stride_arg > *ctx_arg) return usage_error(slm::cat("--stride ", *stride_arg, " exceeds --ctx ", *ctx_arg));
  auto budget = parse_count(a, "max-tokens", std::numeric_limits<std::size_t>::max());
  if (!budget.ok()) return usage_error(budget.error().message());
  auto opt = parse_run_options(a);
  if (!opt.ok()) return usage_error(opt.error().message());
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());
  const std::string_view json_path = a.get("json");
  if (a.has("json") && json_path.empty()) return usage_error("--json needs a file name");

  auto docs = read_documents(a);
  if (!docs.ok()) return fail(docs.error());
  const std::filesystem::path dir{std::string(model)};
  std::error_code ec;
  if (!std::filesystem::exists(dir / "tokenizer.json", ec))  // before the weights are read
    return fail(slm::make_error(slm::errc::not_found, dir.string(), ": no tokenizer.json (perplexity needs text)"));
  auto loaded = slm::load(dir, slm::load_options{load_options(a), true});
  if (!loaded.ok()) return fail(loaded.error());
  if (!loaded->tok) return fail(slm::make_error(slm::errc::not_found, dir.string(), ": no tokenizer.json (perplexity needs text)"));
  const slm::tokenizer& t = *loaded->tok;

  const slm::any_model& m = loaded->model;
  const std::size_t V = std::min(t.vocab_size(), m.vocab());
  const std::size_t model_ctx = m.new_session(opt->session).max_tokens();
  const std::size_t ctx = std::min(*ctx_arg, model_ctx), stride = *stride_arg ? *stride_arg : ctx / 2;
  if (ctx < 2) return fail(slm::make_error(slm::errc::invalid_argument, "the model's context of ", model_ctx, " tokens is under 2"));
  if (stride > ctx)
    return usage_error(slm::cat("--stride ", stride, " exceeds the context of ", ctx, " tokens (the model's limit)"));
  slm::compute_context cx{*pool};
  cx.quantized_activations = opt->act;
  slm::score_options so;  // windows of ctx tokens every stride, each one batched prefill
  so.ctx = ctx;
  so.stride = stride;
  so.vocab = V;
  so.session = opt->session;
  const auto t0 = std::chrono::steady_clock::now();
  auto scores = slm::score_documents(m, t, *docs, so, *budget, cx, [&](const slm::document_score& d) {
    if (a.has("verbose")) std::printf("doc %s  %s\n", score_line(d.score).c_str(), d.name.c_str());
  });
  if (!scores.ok()) return fail(scores.error());
  const slm::score_tally& total = scores->total;
  const auto& per_doc = scores->documents;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (total.tokens == 0)
    return fail(slm::make_error(slm::errc::invalid_argument, "nothing to predict: every document is a single token"));
  std::printf("%s\n", score_line(total).c_str());
  std::fprintf(stderr, "slm: %zu of %zu documents, ctx %zu, stride %zu, vocab %zu: %zu tokens in %.3f s (%.1f tok/s)\n",
               per_doc.size(), docs->size(), ctx, stride, V, total.tokens, seconds,
               seconds > 0 ? static_cast<double>(total.tokens) / seconds : 0.0);
  if (!json_path.empty()) {
    slm::json::value j = slm::to_json(total);
    j.set("model", slm::json::value(std::string(model)));
    j.set("ctx", slm::json::value(ctx));
    j.set("stride", slm::json::value(stride));
    j.set("vocab", slm::json::value(V));
    j.set("documents_scored", slm::json::value(per_doc.size()));
    j.set("documents_total", slm::json::value(docs->size()));
    slm::json::value& list = j.set("documents", slm::json::value::make_array());
    for (const auto& d : per_doc) list.push_back(slm::to_json(d.score, d.name));
    const std::string text = slm::json::dump(j) + "\n";
    if (auto s = slm::write_file_atomically(std::string(json_path), std::as_bytes(std::span(text.data(), text.size())));
        !s.ok())
      return fail(s);
  }
  return 0;
}

int cmd_quantize(const args& a) {
  const std::string_view in = a.get("in"), out = a.get("out"), fmt = a.get("format", "nvfp4");
  if (in.empty() || out.empty()) return usage_error("quantize needs --in DIR and --out DIR");
  slm::convert_options opt;
  if (fmt == "nvfp4") opt.format = slm::weight_format::nvfp4;
  else if (fmt == "mxfp4") opt.format = slm::weight_format::mxfp4;
  else if (fmt == "fp8") opt.format = slm::weight_format::fp8_e4m3;
  else if (fmt == "bf16") opt.format = slm::weight_format::bf16;
  else return usage_error(slm::cat("--format must be nvfp4, mxfp4, fp8 or bf16, not '", fmt, "'"));
  opt.exclude = a.all("exclude");
  opt.include = a.all("include");
  opt.replace = a.has("force");
  if (a.has("quantize-embeddings"))
    for (std::string& p : slm::embedding_include_patterns()) opt.include.push_back(std::move(p));
  auto pool = make_pool(a);
  if (!pool.ok()) return fail(pool.error());
  const bool tty = isatty(fileno(stderr)) != 0;
  std::printf("%-56s %-26s %10s %10s\n", "tensor", "action", "rel_rms", "max_err");
  auto progress = [&](const slm::tensor_report& r, std::size_t done, std::size_t total) {
    std::printf("%-56s %-26s %10.3e %10.3e\n", r.name.c_str(), r.action.c_str(), r.rel_rms_error, r.max_abs_error);
    std::fflush(stdout);
    if (tty) {  // a progress bar on the terminal; plain lines (above) otherwise
      const int width = 30, filled = static_cast<int>(width * done / (total ? total : 1));
      std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu", filled, "##############################", width - filled, "", done, total);
      if (done == total) std::fprintf(stderr, "\n");
    }
  };
  auto reports = slm::convert_checkpoint(std::string(in), std::string(out), opt, *pool, progress);
  if (!reports.ok()) return fail(reports.error());
  std::uint64_t bytes_in = 0, bytes_out = 0;
  std::size_t converted = 0;
  double worst = 0;
  for (const auto& r : *reports) {
    bytes_in += r.bytes_in;
    bytes_out += r.bytes_out;
    if (r.action.rfind("kept", 0) != 0) ++converted, worst = std::max(worst, r.rel_rms_error);
  }
  std::printf("converted %zu of %zu tensors to %.*s: %s -> %s, worst relative RMS error %.3e; wrote %.*s\n", converted,
              reports->size(), static_cast<int>(fmt.size()), fmt.data(), human_bytes(bytes_in).c_str(),
              human_bytes(bytes_out).c_str(), worst, static_cast<int>(out.size()), out.data());
  return 0;
}

// slm bench --model DIR: prefill and decode speed of one session on this machine, and
// the decode step's weight traffic against the read-bandwidth probe of the same run.
int cmd_bench_model(const args& a) {
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());
  auto np = parse_count(a, "prompt-tokens", 64);
  if (!np.ok()) return usage_error(np.error().message());
  auto ng = parse_count(a, "gen-tokens", 32);
  if (!ng.ok()) return usage_error(ng.error().message());
  auto opt = parse_run_options(a);
  if (!opt.ok()) return usage_error(opt.error().message());
  auto m = slm::any_model::load(std::filesystem::path{std::string(a.get("model"))}, load_options(a));
  if (!m.ok()) return fail(m.error());
  const std::uint64_t bytes_per_token = slm::decode_weight_bytes(m->weights());
  const slm::probe_result probe = slm::measure_probes(*pool, std::size_t{256} << 20);
  slm::compute_context cx{*pool};
  cx.quantized_activations = opt->act;
  auto r = slm::measure_throughput(*m, *np, *ng, opt->session, cx);
  if (!r.ok()) return fail(r.error());
  const double dec_tps = r->decode_tokens_per_s();
  std::printf("probe read_bandwidth: %.1f GB/s, threads: %zu\n", probe.read_bytes_per_s / 1e9, probe.threads);
  std::printf("prefill: %zu tokens in %.3f s = %.1f tok/s\n", *np, r->prefill_seconds, r->prefill_tokens_per_s());
  std::printf("decode: %zu tokens in %.3f s = %.1f tok/s\n", *ng, r->decode_seconds, dec_tps);
  std::printf("weights read per decode token: %s (estimate: all but the embedding table, routed experts x top-k/E)\n",
              human_bytes(bytes_per_token).c_str());
  std::printf("decode weight traffic: %.2f GB/s = %.3f of the read-bandwidth probe\n",
              static_cast<double>(bytes_per_token) * dec_tps / 1e9,
              static_cast<double>(bytes_per_token) * dec_tps / probe.read_bytes_per_s);
  return 0;
}

// slm bench --kernels: the matmul cases of slm::kernel_bench_cases, one line each,
// "LABEL OP NxK n=NTOK: VALUE UNIT ratio=R", ratios against the probes of this run.
int cmd_bench(const args& a) {
  if (a.has("model")) return cmd_bench_model(a);
  if (!a.has("kernels")) return usage_error("bench needs --kernels or --model DIR");
  auto pool = make_pool(a);
  if (!pool.ok()) return fail(pool.error());
  std::size_t probe_mib = 1024;
  if (const std::string_view m = a.get("probe-mib"); !m.empty()) {
    auto r = std::from_chars(m.data(), m.data() + m.size(), probe_mib);
    if (r.ec != std::errc() || probe_mib == 0) return usage_error("--probe-mib needs a positive integer");
  }
  const slm::probe_result probe = slm::measure_probes(*pool, probe_mib << 20);
  std::printf("probe read_bandwidth: %.1f GB/s\nprobe f32_fma: %.1f GFLOP/s\nprobe bf16_dot: %.1f GFLOP/s\n"
              "threads: %zu, isa: %.*s\n",
              probe.read_bytes_per_s / 1e9, probe.f32_flops_per_s / 1e9, probe.bf16_flops_per_s / 1e9, probe.threads,
              static_cast<int>(slm::to_string(slm::default_isa()).size()), slm::to_string(slm::default_isa()).data());
  const bool quick = a.has("quick");  // one shape, for tests
  for (const slm::kernel_case& c : slm::kernel_bench_cases(quick, a.get("only"))) {
    auto fig = slm::measure_kernel(c.format, c.n, c.k, c.n_tok, probe, *pool, quick ? 0.05 : 0.5,
                                   quick ? std::size_t(0) : std::size_t(160) << 20, c.act);
    if (!fig.ok()) return fail(fig.error());
    std::printf("%.*s %s %zux%zu n=%zu: %.1f %s ratio=%.2f\n", static_cast<int>(c.label.size()), c.label.data(),
                c.n_tok == 1 ? "gemv" : "gemm", c.n, c.k, c.n_tok, fig->value, c.n_tok == 1 ? "GB/s" : "GFLOP/s", fig->ratio);
    std::fflush(stdout);
  }
  return 0;
}

// ---- slm ensemble ----

slm::result<slm::ensemble::strategy_kind> parse_strategy(std::string_view s) {
  using k = slm::ensemble::strategy_kind;
  for (k v : {k::top1, k::top2, k::cascade, k::vote, k::refine, k::mix, k::speculative})
    if (slm::ensemble::to_string(v) == s) return v;
  return slm::make_error(slm::errc::invalid_argument, "--strategy must be top1, top2, mix, cascade, vote, refine or ",
                         "speculative, not '", s, "'");
}

// slm ensemble route: where each file would go (and, with --data DIR/<domain>/FILES, the
// router's accuracy per domain).
int cmd_ensemble_route(const args& a, const slm::ensemble::ensemble& e, slm::compute_context& cx) {
  std::vector<slm::ensemble::labeled_file> files;
  if (a.has("data")) {
    files = slm::ensemble::labeled_files(std::filesystem::path(std::string(a.get("data"))));
    if (files.empty()) return usage_error(slm::cat("--data ", a.get("data"), ": no files under DIR/<domain>/"));
  }
  for (std::size_t i = 1; i < a.positional.size(); ++i) files.push_back({"", std::filesystem::path(std::string(a.positional[i]))});
  if (files.empty()) return usage_error("ensemble route needs files (or --data DIR with DIR/<domain>/FILES)");
  const bool names = !a.has("content-only");
  slm::ensemble::route_accuracy acc;
  for (const auto& [label, path] : files) {
    auto text = slm::read_text_file(path, std::size_t{64} << 20);
    if (!text.ok()) return fail(text.error());
    const std::string name = path.filename().string();
    auto d = e.route(slm::ensemble::route_request{*text, names ? std::string_view(name) : std::string_view{}}, cx);
    if (!d.ok()) return fail(std::move(d).take_error().with_context(path.string()));
    const auto& m = e.config().members[d->best()];
    std::printf("%s -> %s (%s)\n", path.string().c_str(), m.name.c_str(), d->reason.c_str());
    if (!label.empty()) acc.add(label, m.domain == label);
  }
  for (const auto& t : acc.labels) std::printf("accuracy %-8s %zu/%zu = %.3f\n", t.label.c_str(), t.right, t.total, t.rate());
  if (acc.all.total)
    std::printf("accuracy %-8s %zu/%zu = %.3f\n", "all", acc.all.right, acc.all.total, acc.all.rate());
  return 0;
}

// slm ensemble train-router: the classifier router from DIR/<domain>/FILES.
int cmd_ensemble_train_router(const args& a) {
  const std::string_view data = a.get("data"), out = a.get("out");
  if (data.empty() || out.empty()) return usage_error("ensemble train-router needs --data DIR (DIR/<domain>/FILES) and --out FILE");
  auto n = parse_count(a, "max-files", 600);
  if (!n.ok()) return usage_error(n.error().message());
  auto r = slm::ensemble::train_classifier_from_directory(std::filesystem::path(std::string(data)), *n, {});
  if (!r.ok()) return fail(r.error());
  if (auto s = r->save(std::filesystem::path(std::string(out))); !s.ok()) return fail(s);
  std::printf("wrote %.*s: labels", static_cast<int>(out.size()), out.data());
  for (const std::string& l : r->labels()) std::printf(" %s", l.c_str());
  std::printf("\n");
  return 0;
}

// slm ensemble calibrate: per-member temperatures and mixture weights on held-out text
// (slm::ensemble::calibrate), printed as the ensemble.json values to paste.
int cmd_ensemble_calibrate(const args& a, const slm::ensemble::ensemble& e, slm::compute_context& cx) {
  std::vector<std::filesystem::path> files;  // --data: round robin over the domains
  if (a.has("data")) files = slm::ensemble::round_robin(slm::ensemble::labeled_files(std::string(a.get("data"))));
  for (std::size_t i = 1; i < a.positional.size(); ++i) files.emplace_back(std::string(a.positional[i]));
  if (files.empty()) return usage_error("ensemble calibrate needs held-out files (FILE... or --data DIR/<domain>/FILES)");
  auto cap = parse_count(a, "max-tokens", 2048);
  if (!cap.ok() || *cap < 2) return usage_error("--max-tokens needs an integer >= 2");
  auto c = slm::ensemble::calibrate(e, files, *cap, cx, [](const slm::ensemble::member_calibration& m) {
    std::printf("member %-8s temperature %.3f  (%zu tokens; NLL %.4f nats/token at T 1, %.4f at T %.3f%s)\n",
                m.name.c_str(), m.fit.temperature, m.tokens, m.fit.nll_at_1, m.fit.nll, m.fit.temperature,
                m.fit.at_bound ? ", at the search bound" : "");
  });
  if (!c.ok()) return fail(c.error());
  if (!c->weights) {
    std::printf("members tokenise the text differently (%zu vs %zu tokens): no mixture weights\n",
                c->members.back().tokens, c->members.front().tokens);
    return 0;
  }
  std::printf("mixture weights (EM, calibrated members): mean log-likelihood %.4f nats/token\n  \"weights\": {",
              c->weights->mean_log_likelihood);
  for (std::size_t i = 0; i < c->members.size(); ++i)
    std::printf("%s\"%s\": %.4f", i ? ", " : "", c->members[i].name.c_str(), c->weights->weights[i]);
  std::printf("}\n");
  return 0;
}

int cmd_ensemble(const args& a) {
  const std::string_view sub = a.positional.empty() ? std::string_view("run") : a.positional[0];
  if (sub == "train-router") return cmd_ensemble_train_router(a);
  if (sub != "run" && sub != "route" && sub != "calibrate")
    return usage_error(slm::cat("unknown ensemble subcommand '", sub, "' (run, route, calibrate, train-router)"));
  const std::string_view config = a.get("config");
  if (config.empty()) return usage_error("ensemble needs --config FILE (an ensemble.json)");
  auto opt = parse_run_options(a);
  if (!opt.ok()) return usage_error(opt.error().message());
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());
  slm::compute_context cx{*pool};
  cx.quantized_activations = opt->act;
  auto e = slm::ensemble::ensemble::load(std::filesystem::path(std::string(config)), load_options(a));
  if (!e.ok()) return fail(e.error());
  if (sub == "route") return cmd_ensemble_route(a, *e, cx);
  if (sub == "calibrate") return cmd_ensemble_calibrate(a, *e, cx);

  std::string prompt(a.get("prompt")), file_name(a.get("file"));
  if (a.has("prompt-file")) {
    if (a.has("prompt")) return usage_error("give --prompt or --prompt-file, not both");
    const std::filesystem::path pf{std::string(a.get("prompt-file"))};
    auto t = slm::read_text_file(pf, std::size_t{64} << 20);
    if (!t.ok()) return fail(t.error());
    prompt = std::move(*t);
    if (file_name.empty()) file_name = pf.filename().string();
  }
  if (prompt.empty()) return usage_error("ensemble needs --prompt TEXT or --prompt-file FILE");
  auto n = parse_count(a, "tokens", 128);
  if (!n.ok()) return usage_error(slm::cat(n.error().message(), " (-n)"));
  auto sampling = parse_sampling(a, slm::sampling_from_generation_config(nullptr));  // greedy unless told
  if (!sampling.ok()) return usage_error(sampling.error().message());
  slm::ensemble::request q;
  q.prompt = prompt;
  q.file_name = file_name;
  q.max_new_tokens = *n;
  q.sampling = *sampling;
  q.stop_strings = a.all("stop");
  if (a.has("strategy")) {
    auto k = parse_strategy(a.get("strategy"));
    if (!k.ok()) return usage_error(k.error().message());
    q.strategy = *k;
  }
  auto r = e->run(q, cx);
  if (!r.ok()) return fail(r.error());
  std::fwrite(r->text.data(), 1, r->text.size(), stdout);
  std::printf("\n");
  std::fflush(stdout);
  std::string ran;
  for (const std::string& m : r->members) ran += (ran.empty() ? "" : ", ") + m;
  std::fprintf(stderr, "slm ensemble: route %s -> %s\nslm ensemble: %s; ran %s; %zu tokens in %.3f s (routing %.3f s)\n",
               r->route.reason.c_str(), e->config().members[r->route.best()].name.c_str(), r->detail.c_str(), ran.c_str(),
               r->tokens, r->seconds, r->route_seconds);
  return 0;
}

struct command {
  std::string_view name;
  std::string_view summary;
  int (*run)(const args&);
};
constexpr command commands[] = {
    {"inspect", "print a checkpoint's architecture, files, tensors and sizes", cmd_inspect},
    {"logits", "run a model over token ids and write the logits to a safetensors file", cmd_logits},
    {"run", "generate text (or ids) from a prompt: greedy or sampled, streamed, fill-in-the-middle", cmd_run},
    {"tokenize", "print the token ids of a text (a directory with a tokenizer.json is enough)", cmd_tokenize},
    {"detokenize", "write the exact bytes of token ids to stdout", cmd_detokenize},
    {"quantize", "convert a checkpoint to NVFP4, MXFP4, FP8 (ModelOpt layout) or BF16", cmd_quantize},
    {"perplexity", "score a model on text: bits per byte, perplexity and top-1 accuracy of the next token", cmd_perplexity},
    {"ensemble", "route a prompt to the right specialists of an ensemble.json and run its strategy", cmd_ensemble},
    {"bench", "measure a model's prefill/decode speed or the matmul kernels against this machine's limits", cmd_bench},
};

// Every option of every command, as `slm --help` prints it. An option this text does not
// name is refused (known_option): a misspelt option is an error, not silently ignored.
constexpr std::string_view options_help =
    "\ninspect options:\n"
    "  --model DIR|FILE   a Hugging Face style model directory, one .safetensors file, or an\n"
    "                     ensemble.json (each member's bytes, the total against the budget, and\n"
    "                     the NAM56R-scale arithmetic of eight specialists)\n"
    "  --no-tensors       print the summary only, not one line per tensor\n"
    "\nlogits options:\n"
    "  --model DIR        a checkpoint of a supported architecture (bf16, f32, NVFP4, ...):\n"
    "                     Hugging Face, NAM56R canonical or nanochat (by config.json model_type)\n"
    "  --ids ID,ID,...    the token ids, T of them\n"
    "  --out FILE         writes tensor 'logits' F32 [T, V]; row t is the next-token\n"
    "                     distribution after ids 0..t (inclusive), in both modes\n"
    "  --mode M           full (default): one forward over all T ids;\n"
    "                     incremental: rows 0..P-1 from one forward over the first P ids, rows\n"
    "                     P..T-1 from feeding the rest one id at a time through the KV cache\n"
    "                     (the layout of logits_full / logits_incremental in the golden files)\n"
    "  --prefill P        incremental mode: ids in the first forward (default 1, 1 <= P <= T)\n"
    "  --ctx N            context limit in tokens (default: the model's); more ids are refused\n"
    "  --kv K             KV cache element type: f32 (default) or bf16\n"
    "  --mla M            MLA form: auto (default: expanded for prompts, absorbed for decode),\n"
    "                     expanded or absorbed\n"
    "  --act A            activations of NVFP4/MXFP4 products: f32 (default, exact), bf16\n"
    "                     (W4A16, the library's default, faster) or int8 (W4A8); dense weights\n"
    "                     always use f32\n"
    "  --threads N        worker threads (default: all)\n"
    "  --mmap             map the weight files instead of reading them into memory (no copy,\n"
    "                     shared pages; but a file truncated or rewritten in place while slm\n"
    "                     runs kills it with SIGBUS: replace model files by rename); also for\n"
    "                     run, perplexity, bench --model and ensemble\n"
    "\nrun options:\n"
    "  --model DIR        as for logits; its tokenizer.json encodes and decodes text\n"
    "  --prompt TEXT      the prompt as text (special tokens written in it count, unless\n"
    "                     --no-parse-special; BOS as the tokenizer's post-processor adds it)\n"
    "  --prompt-ids ID,.. the prompt as token ids; the output is then ids, comma-separated\n"
    "  --fim-prefix TEXT, --fim-suffix TEXT   fill in the middle: the model writes the code\n"
    "                     between them (the tokenizer's FIM tokens; --fim-order psm|spm,\n"
    "                     default: the model's own, tokenizer_config.json \"fim_order\", else psm)\n"
    "  -n N, --tokens N   tokens to generate at most (default 128; 16 with --prompt-ids)\n"
    "  --temp T           temperature; 0 = greedy (the default, unless generation_config.json\n"
    "                     sets do_sample)\n"
    "  --top-k K, --top-p P, --min-p P   truncation (0, 1, 0 = off)\n"
    "  --repeat-penalty R, --frequency-penalty F, --presence-penalty P, --repeat-last-n N\n"
    "  --logit-bias ID=B  add B to a token's logit (-inf bans it; repeatable)\n"
    "  --seed S           sampling seed (default fixed: the same command gives the same text)\n"
    "  --stop STR         stop before this text (repeatable); the EOS ids of the tokenizer,\n"
    "                     config.json and generation_config.json stop too, unless --ignore-eos\n"
    "  --stream           print the text as it is generated (whole UTF-8 characters)\n"
    "  --ctx N            context limit in tokens (default: the model's)\n"
    "  --progress         show the weight-reading progress even for a small model (it is shown\n"
    "                     from 64 MiB on: a bar on a terminal, a line per quarter otherwise)\n"
    "  --save-state FILE  after generating, save the session (caches, history, sampler state)\n"
    "  --load-state FILE  continue a saved session (the prompt, if any, is appended)\n"
    "  --kv, --mla, --act, --threads   as for logits\n"
    "  --speculative S    none (default) or mtp: draft with the model's MTP heads (NAM56R),\n"
    "                     verify with one main forward, roll back rejected drafts; greedy: the\n"
    "                     same tokens as plain greedy; sampled: each token distributed exactly\n"
    "                     as plain sampling (speculative sampling); the same logit bias,\n"
    "                     penalties and stops; no --stream or state files; acceptance\n"
    "                     figures on stderr\n"
    "  --draft K          drafts per main forward (default: every MTP depth)\n"
    "\ntokenize options:\n"
    "  --model DIR        a directory with tokenizer.json (and optionally tokenizer_config.json)\n"
    "  --text TEXT | --file PATH   the input; ids are printed space-separated on one line\n"
    "  --no-add-special   without the post-processor's tokens (BOS/EOS)\n"
    "  --no-parse-special special tokens written in the text are plain text\n"
    "\ndetokenize options:\n"
    "  --model DIR        as for tokenize\n"
    "  --ids ID ...       ids separated by spaces or commas; the exact bytes go to stdout\n"
    "  --skip-special     leave special tokens out\n"
    "\nperplexity options:\n"
    "  --model DIR        as for run; its tokenizer.json encodes the documents (BOS prepended\n"
    "                     if it has one; special tokens written in the text are plain text)\n"
    "  --file PATH        a document (repeatable); a directory: every file under it, sorted\n"
    "  --text TEXT        one document given inline\n"
    "  --ctx N            window length in tokens (default 512, at most the model's context)\n"
    "  --stride S         a longer document is scored in windows starting every S tokens\n"
    "                     (default ctx/2, 1 <= S <= ctx), each a fresh session; every token\n"
    "                     after the first is predicted once, with >= ctx-S tokens of context\n"
    "  --max-tokens N     stop after the document in which N predicted tokens are reached\n"
    "                     (later documents count neither tokens nor bytes)\n"
    "  --verbose          a line per document too\n"
    "  --json FILE        write the figures (total and per document) as JSON\n"
    "  --kv, --mla, --act, --threads   as for logits\n"
    "                     prints: tokens N  bytes B  nll X nats/token  ppl P  bits/byte Y  top1 Z%\n"
    "                     (bits/byte = sum NLL / ln 2 / UTF-8 bytes; over the tokenizer's vocabulary)\n"
    "\nquantize options:\n"
    "  --in DIR           a checkpoint with F32/BF16/F16 weights (sharded or not)\n"
    "  --out DIR          where the converted checkpoint goes: written beside it and renamed\n"
    "                     into place when complete; an existing non-empty DIR is refused\n"
    "  --force            replace a non-empty --out DIR whole (only once the new one is complete)\n"
    "  --format F         nvfp4 (default), mxfp4, fp8 or bf16\n"
    "  --exclude GLOB     keep matching modules in high precision (repeatable; wins over --include)\n"
    "  --include GLOB     quantize matching embeddings / output heads too (repeatable; never\n"
    "                     norms, routers, the DSA indexer or mHC scorers)\n"
    "  --quantize-embeddings   include the input embeddings and output heads: *word_embeddings,\n"
    "                     *embed_tokens, *output_layer, *lm_head, *unified_table (the n-gram table)\n"
    "  --threads N        worker threads (default: all)\n"
    "\nensemble options (slm ensemble [run|route|train-router] ...):\n"
    "  --config FILE      an ensemble.json: members, router, strategy, memory budget\n"
    "                     (include/slm/ensemble/config.hpp has the schema)\n"
    "  --prompt TEXT | --prompt-file FILE   the prompt (a file's name also feeds the rules router)\n"
    "  --file NAME        the file name the prompt belongs to (CMakeLists.txt, x.sh, ...)\n"
    "  --strategy K       top1, top2, mix, cascade, vote, refine or speculative (default: the\n"
    "                     config's); cascade and vote give one-line answers\n"
    "  -n N, --temp T, --top-k K, --top-p P, --seed S, --stop STR, --act A, --threads N   as for run\n"
    "                     (greedy by default)\n"
    "  route FILE... | route --data DIR   where each file goes; --data DIR/<domain>/FILES also\n"
    "                     prints the router's accuracy per domain (--content-only: ignore names)\n"
    "  calibrate FILE... | calibrate --data DIR [--max-tokens N]   fit each member's temperature\n"
    "                     and the mixture weights (EM) on held-out text (N tokens, default 2048)\n"
    "  train-router --data DIR --out FILE [--max-files N]   train the classifier router on\n"
    "                     DIR/<domain>/FILES (the first 4096 bytes of at most N files per domain)\n"
    "\nbench options:\n"
    "  --model DIR        prefill and decode tok/s of one session, the weight bytes read per\n"
    "                     decode token and their rate against the read-bandwidth probe\n"
    "  --prompt-tokens N, --gen-tokens N   sizes (default 64, 32); --kv/--mla/--act as for run\n"
    "  --kernels          GEMV (n=1) and GEMM (n=16,128,512) for nvfp4, bf16, mxfp4, f32 on\n"
    "                     4096x4096, 4096x14336, 14336x4096, 2048x8192 (N x K); one line per case:\n"
    "                     FORMAT OP NxK n=NTOK: VALUE UNIT ratio=R (of the read-bandwidth or FMA probe)\n"
    "                     (GEMM ratios of the _bf16act lines are to the bf16 dot probe), then\n"
    "                     the opt-in paths nvfp4_w4a8, mxfp4_w4a8 (int8 activations) and\n"
    "                     nvfp4_bf16act, mxfp4_bf16act, bf16_bf16act (bf16 activations)\n"
    "  --only L[,L...]    only these variants (labels as printed, e.g. nvfp4,nvfp4_bf16act)\n"
    "  --quick            one small shape only, weights in cache (a smoke test, not a figure)\n"
    "  --probe-mib N      size of the read-bandwidth probe (default 1024)\n"
    "  --threads N        worker threads (default: all)\n";

// Whether --key is an option of some command: named in options_help as "--key" followed by
// a character that cannot continue an option name.
bool known_option(std::string_view key) {
  const auto name_char = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; };
  for (std::size_t at = options_help.find("--"); at != std::string_view::npos; at = options_help.find("--", at + 2)) {
    const std::size_t end = at + 2 + key.size();
    if (options_help.substr(at + 2, key.size()) == key && (end >= options_help.size() || !name_char(options_help[end])))
      return true;
  }
  return false;
}

void print_help() {
  std::printf("slm %s - in-process inference for small specialist code models\n\nusage: slm COMMAND [options]\n\n",
              slm::version_string);
  for (const auto& c : commands)
    std::printf("  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(), static_cast<int>(c.summary.size()),
                c.summary.data());
  std::fputs(options_help.data(), stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error("no command given");
  const std::string_view name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") return print_help(), 0;
  if (name == "--version") return std::printf("slm %s\n", slm::version_string), 0;
  args a;
  for (int i = 2; i < argc; ++i) {
    std::string_view s = argv[i];
    if (s == "--help" || s == "-h") return print_help(), 0;  // `slm run --help` as well as `slm --help`
    if ((s.size() > 2 && s.substr(0, 2) == "--") || s == "-n") {
      std::string key(s == "-n" ? std::string("tokens") : std::string(s.substr(2)));
      if (!known_option(key)) return usage_error(slm::cat("unknown option --", key));
      const bool is_flag = key == "no-tensors" || key == "kernels" || key == "quick" || key == "stream" ||
                           key == "ignore-eos" || key == "no-add-special" || key == "no-parse-special" ||
                           key == "skip-special" || key == "progress" || key == "verbose" || key == "quantize-embeddings" ||
                           key == "content-only" || key == "mmap" || key == "force";
      if (is_flag) {
        a.options.emplace_back(key, "");
      } else {
        if (i + 1 >= argc) return usage_error(slm::cat("option --", key, " needs a value"));
        a.options.emplace_back(key, argv[++i]);
      }
    } else {
      a.positional.push_back(s);
    }
  }
  for (const auto& c : commands)
    if (c.name == name) {
      const int rc = c.run(a);
      // What was printed must have reached stdout (a full disk, a closed pipe, /dev/full):
      // otherwise the output is lost and the exit status says so.
      if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "slm: error: cannot write the output: %s\n", std::strerror(errno));
        return rc != 0 ? rc : 1;
      }
      return rc;
    }
  return usage_error(slm::cat("unknown command '", name, "'"));
}
