// slm - the command-line front end of the slm library.
//
//   slm inspect --model DIR|FILE.safetensors [--no-tensors]
//   slm logits --model DIR --ids ID,... --out FILE.safetensors [--mode full|incremental] [--prefill P]
//              [--kv f32|bf16] [--mla auto|expanded|absorbed] [--act f32|bf16|int8] [--threads N]
//   slm run --model DIR --prompt-ids ID,... [-n N] [--kv ...] [--mla ...] [--act ...] [--threads N]
//           [--speculative none|mtp] [--draft K]
//   slm bench --kernels [--quick] [--threads N]
//   slm quantize --in DIR --out DIR [--format nvfp4|mxfp4|fp8|bf16] [--exclude GLOB ...] [--threads N]
//   slm --version | --help
//
// Every error prints one line "slm: error: ..." and exits non-zero (2 for usage errors).
// Subcommands are rows of one table; each is a plain function over parsed arguments.
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/convert.hpp"
#include "slm/kernel_bench.hpp"
#include "slm/nam56r.hpp"
#include "slm/nanochat.hpp"
#include "slm/slm.hpp"
#include "slm/speculative.hpp"

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

// Summary of tensors by dtype, then (optionally) one line per tensor.
template <class Source>
void print_tensors(const Source& src, std::size_t count, bool list) {
  struct totals { std::size_t tensors = 0; std::uint64_t elements = 0, bytes = 0; };
  std::map<std::string_view, totals> by_type;
  totals all;
  for (std::size_t i = 0; i < count; ++i) {
    const slm::safetensors::tensor_info& t = src(i);
    auto& b = by_type[slm::safetensors_name(t.type)];
    for (totals* x : {&b, &all}) {
      x->tensors += 1;
      x->elements += static_cast<std::uint64_t>(t.shape.numel());
      x->bytes += t.end - t.begin;
    }
  }
  std::printf("weights   %zu tensors, %llu elements, %s\n", all.tensors,
              static_cast<unsigned long long>(all.elements), human_bytes(all.bytes).c_str());
  for (const auto& [name, x] : by_type)
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

int cmd_inspect(const args& a) {
  const std::string_view model = a.get("model", a.positional.empty() ? std::string_view{} : a.positional[0]);
  if (model.empty()) return usage_error("inspect needs --model DIR (or a .safetensors file)");
  const std::filesystem::path path{std::string(model)};
  const bool list = !a.has("no-tensors");
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    auto f = slm::safetensors::file::open(path);
    if (!f.ok()) return fail(f.error());
    std::printf("file      %s\n", path.string().c_str());
    for (const auto& [k, v] : f->header().metadata) std::printf("metadata  %s = %s\n", k.c_str(), v.c_str());
    print_tensors([&](std::size_t i) -> const auto& { return f->tensors()[i]; }, f->tensors().size(), list);
    return 0;
  }
  auto ck = slm::checkpoint::open(path);
  if (!ck.ok()) return fail(ck.error());
  std::printf("model     %s\n", path.string().c_str());
  print_config(ck->config());
  std::printf("files     %zu safetensors file%s%s%s%s\n", ck->shards().size(), ck->shards().size() == 1 ? "" : "s",
              ck->generation_config() ? ", generation_config.json" : "",
              ck->hf_quant_config() ? ", hf_quant_config.json" : "", ck->has_tokenizer() ? ", tokenizer.json" : "");
  if (const auto* q = ck->quantization_config()) std::printf("quant     %s\n", slm::json::dump(*q).c_str());
  if (const auto* q = ck->hf_quant_config()) std::printf("quant     %s\n", slm::json::dump(*q).c_str());
  const slm::json::value& type = ck->config()["model_type"];
  if (type.is_string() && type.as_string() == "nam56r") {  // the specialist's layer table
    auto m = slm::nam56r_model::load(path);
    if (!m.ok()) return fail(m.error());
    print_layer_table(m->describe());
  }
  print_tensors([&](std::size_t i) -> const auto& { return ck->info(ck->tensors()[i]); }, ck->size(), list);
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

std::size_t argmax(const float* v, std::size_t n) {  // the first maximum, as torch.argmax
  return static_cast<std::size_t>(std::max_element(v, v + n) - v);
}

// Loads the model in `dir` as the kind its config.json names - the NAM56R specialist
// (model_type "nam56r"), a nanochat-lineage model ("nanochat"), or any architecture of
// the config-driven decoder - and calls fn(model). The three share the session interface
// the commands use (new_session, forward, vocab).
template <class Fn>
int with_model(std::string_view dir, Fn&& fn) {
  const std::filesystem::path path{std::string(dir)};
  std::string type;
  {
    auto ck = slm::checkpoint::open(path);
    if (!ck.ok()) return fail(ck.error());
    const slm::json::value& t = ck->config()["model_type"];
    if (t.is_string()) type = std::string(t.as_string());
  }
  if (type == "nam56r") {
    auto m = slm::nam56r_model::load(path);
    if (!m.ok()) return fail(m.error());
    return fn(*m);
  }
  if (type == "nanochat") {
    auto m = slm::nanochat_model::load(path);
    if (!m.ok()) return fail(m.error());
    return fn(*m);
  }
  auto m = slm::model::load(path);
  if (!m.ok()) return fail(m.error());
  return fn(*m);
}

// slm logits: the logits of a token sequence, as tensor "logits" F32 [T, V] in a
// safetensors file. Row t is always the next-token distribution after ids 0..t
// (inclusive); the modes differ only in how it is computed: full = one forward over all
// T ids; incremental = one forward over the first P ids (rows 0..P-1), then ids[P..T)
// one at a time through the session's KV cache (rows P..T-1). This is the layout of
// logits_full and logits_incremental in the golden files made by transformers (both
// [T, V], whatever shared/golden/README.md says of the latter's shape).
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
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());

  std::vector<float> logits;  // [T, V]
  const int rc = with_model(model, [&](const auto& m) -> int {
    const std::size_t V = m.vocab();
    if (auto s = check_vocab("ids", *ids, V); !s.ok()) return usage_error(s.message());
    logits.resize(T * V);
    slm::compute_context cx{*pool};
    cx.quantized_activations = opt->act;
    auto session = m.new_session(opt->session);
    if (mode == "full") {
      if (auto s = session.forward(*ids, T, logits.data(), cx); !s.ok()) return fail(s);
    } else {
      const std::size_t P = *prefill;
      if (auto s = session.forward(std::span(ids->data(), P), P, logits.data(), cx); !s.ok()) return fail(s);
      for (std::size_t t = P; t < T; ++t)
        if (auto s = session.forward(std::span(ids->data() + t, 1), 1, logits.data() + t * V, cx); !s.ok()) return fail(s);
    }
    return 0;
  });
  if (rc != 0) return rc;
  const std::size_t V = logits.size() / T;

  slm::safetensors::writer w;
  w.set_metadata("format", "pt");
  w.set_metadata("mode", std::string(mode));
  if (mode == "incremental") w.set_metadata("prefill", std::to_string(*prefill));
  const slm::shape shape{static_cast<std::int64_t>(T), static_cast<std::int64_t>(V)};
  if (auto s = w.add("logits", slm::dtype::f32, shape, std::as_bytes(std::span(logits))); !s.ok()) return fail(s);
  if (auto s = w.write(std::string(out)); !s.ok()) return fail(s);
  std::printf("wrote logits %s (%.*s%s) to %.*s\n", shape.to_string().c_str(), static_cast<int>(mode.size()), mode.data(),
              mode == "incremental" ? slm::cat(", prefill ", *prefill).c_str() : "", static_cast<int>(out.size()), out.data());
  return 0;
}

// slm run: greedy generation from prompt ids; prints the N generated ids on one line.
// No stop token ends it early (stop tokens and text come with the tokenizer).
int cmd_run(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || !a.has("prompt-ids")) return usage_error("run needs --model DIR and --prompt-ids ID,ID,...");
  auto prompt = parse_ids("prompt-ids", a.get("prompt-ids"));
  if (!prompt.ok()) return usage_error(prompt.error().message());
  auto n = parse_count(a, "tokens", 16);
  if (!n.ok()) return usage_error(slm::cat(n.error().message(), " (-n)"));
  auto opt = parse_run_options(a);
  if (!opt.ok()) return usage_error(opt.error().message());
  auto pool = make_pool(a);
  if (!pool.ok()) return usage_error(pool.error().message());

  const std::string_view spec = a.get("speculative", "none");
  if (spec != "none" && spec != "mtp") return usage_error(slm::cat("--speculative must be none or mtp, not '", spec, "'"));
  auto drafts = parse_count(a, "draft", 0);
  if (!drafts.ok()) return usage_error(drafts.error().message());
  return with_model(model, [&](const auto& m) -> int {
    const std::size_t V = m.vocab();
    if (auto s = check_vocab("prompt-ids", *prompt, V); !s.ok()) return usage_error(s.message());
    if (spec == "mtp") {  // self-speculative: drafts from the model's MTP heads, same greedy ids
      if constexpr (slm::mtp_session<decltype(m.new_session())>) {
        const std::size_t depths = m.config().mtp_num_layers;
        if (depths == 0) return fail(slm::make_error(slm::errc::unsupported, "--speculative mtp: the model has no MTP layers"));
        const std::size_t k = *drafts ? *drafts : depths;
        if (k > depths) return usage_error(slm::cat("--draft ", k, " exceeds the model's ", depths, " MTP depths"));
        slm::session_options o = opt->session;
        o.rollback_tokens = std::max(o.rollback_tokens, k);  // rejected drafts are rolled back
        auto session = m.new_session(o);
        slm::compute_context cx{*pool};
        cx.quantized_activations = opt->act;
        std::vector<std::int32_t> out;
        slm::speculative_stats st;
        if (auto s = slm::generate_greedy_mtp(session, *prompt, *n, k, V, out, st, cx); !s.ok()) return fail(s);
        std::string line;
        for (std::size_t i = 0; i < out.size(); ++i) line += slm::cat(i ? "," : "", out[i]);
        std::printf("%s\n", line.c_str());
        std::fprintf(stderr, "slm: mtp: %zu drafted, %zu accepted (%.1f %%), %.2f tokens per main forward\n", st.drafted,
                     st.accepted, 100.0 * st.acceptance_rate(), st.tokens_per_forward());
        return 0;
      } else {
        return fail(slm::make_error(slm::errc::unsupported,
                                    "--speculative mtp: this model has no MTP drafting in slm (NAM56R models do)"));
      }
    }
    std::vector<float> logits(V);
    slm::compute_context cx{*pool};
    cx.quantized_activations = opt->act;
    auto session = m.new_session(opt->session);
    if (auto s = session.forward(*prompt, 1, logits.data(), cx); !s.ok()) return fail(s);
    std::string line;
    for (std::size_t i = 0; i < *n; ++i) {
      const auto next = static_cast<std::int32_t>(argmax(logits.data(), V));
      line += slm::cat(i ? "," : "", next);
      if (i + 1 < *n)  // the last id needs no forward of its own
        if (auto s = session.forward(std::span(&next, 1), 1, logits.data(), cx); !s.ok()) return fail(s);
    }
    std::printf("%s\n", line.c_str());
    return 0;
  });
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

// slm bench --kernels: the matmul cases of bench/bench_matmul.cpp, one line each,
// "FORMAT OP NxK n=NTOK: VALUE UNIT ratio=R", ratios against the probes of this run.
// FORMAT is the weight format, suffixed _w4a8 (int8 activations) or _bf16act (bf16
// activations) for the opt-in reduced-precision paths.
int cmd_bench(const args& a) {
  if (!a.has("kernels")) return usage_error("bench needs --kernels (model benchmarks come with generation)");
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
  struct shape { std::size_t n, k; };
  const shape shapes[] = {{4096, 4096}, {4096, 14336}, {14336, 4096}, {2048, 8192}};
  const std::size_t tokens[] = {1, 16, 128, 512};
  const bool quick = a.has("quick");  // one shape, for tests
  // W4A16 for every format, then the optional int8-activation path of the FP4 formats.
  struct variant {
    slm::weight_format format;
    slm::activation_precision act;
    const char* label;
  };
  const variant variants[] = {{slm::weight_format::nvfp4, slm::activation_precision::f32, "nvfp4"},
                              {slm::weight_format::bf16, slm::activation_precision::f32, "bf16"},
                              {slm::weight_format::mxfp4, slm::activation_precision::f32, "mxfp4"},
                              {slm::weight_format::f32, slm::activation_precision::f32, "f32"},
                              {slm::weight_format::nvfp4, slm::activation_precision::int8, "nvfp4_w4a8"},
                              {slm::weight_format::mxfp4, slm::activation_precision::int8, "mxfp4_w4a8"},
                              {slm::weight_format::nvfp4, slm::activation_precision::bf16, "nvfp4_bf16act"},
                              {slm::weight_format::mxfp4, slm::activation_precision::bf16, "mxfp4_bf16act"},
                              {slm::weight_format::bf16, slm::activation_precision::bf16, "bf16_bf16act"}};
  // --only LABEL[,LABEL...]: just those variants (the labels printed first on each line).
  const std::string_view only = a.get("only");
  auto wanted = [&](std::string_view label) {
    if (only.empty()) return true;
    for (std::size_t b = 0; b <= only.size();) {
      const std::size_t e = std::min(only.find(',', b), only.size());
      if (only.substr(b, e - b) == label) return true;
      b = e + 1;
    }
    return false;
  };
  for (const variant& v : variants) {
    if (!wanted(v.label)) continue;
    for (const shape& s : shapes) {
      if (quick && (s.n != 2048)) continue;
      for (std::size_t n_tok : tokens) {
        if (quick && n_tok > 16) continue;
        auto fig = slm::measure_kernel(v.format, s.n, s.k, n_tok, probe, *pool, quick ? 0.05 : 0.5,
                                       quick ? std::size_t(0) : std::size_t(160) << 20, v.act);
        if (!fig.ok()) return fail(fig.error());
        std::printf("%s %s %zux%zu n=%zu: %.1f %s ratio=%.2f\n", v.label, n_tok == 1 ? "gemv" : "gemm", s.n, s.k, n_tok,
                    fig->value, n_tok == 1 ? "GB/s" : "GFLOP/s", fig->ratio);
        std::fflush(stdout);
      }
    }
  }
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
    {"run", "greedy generation from prompt token ids; prints the generated ids", cmd_run},
    {"quantize", "convert a checkpoint to NVFP4, MXFP4, FP8 (ModelOpt layout) or BF16", cmd_quantize},
    {"bench", "measure the matmul kernels against this machine's bandwidth and FMA peak", cmd_bench},
};

void print_help() {
  std::printf("slm %s - in-process inference for small specialist code models\n\nusage: slm COMMAND [options]\n\n",
              slm::version_string);
  for (const auto& c : commands)
    std::printf("  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(), static_cast<int>(c.summary.size()),
                c.summary.data());
  std::printf(
      "\ninspect options:\n"
      "  --model DIR|FILE   a Hugging Face style model directory or one .safetensors file\n"
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
      "  --kv K             KV cache element type: f32 (default) or bf16\n"
      "  --mla M            MLA form: auto (default: expanded for prompts, absorbed for decode),\n"
      "                     expanded or absorbed\n"
      "  --act A            activations of NVFP4/MXFP4 products: bf16 (default, W4A16), f32\n"
      "                     (exact, slower) or int8 (W4A8); dense weights always use f32\n"
      "  --threads N        worker threads (default: all)\n"
      "\nrun options:\n"
      "  --model DIR        as for logits\n"
      "  --prompt-ids ID,.. the prompt's token ids\n"
      "  -n N, --tokens N   ids to generate (default 16); greedy (argmax), no stop token; prints\n"
      "                     them comma-separated on one line\n"
      "  --kv, --mla, --act, --threads   as for logits\n"
      "  --speculative S    none (default) or mtp: draft with the model's MTP heads (NAM56R),\n"
      "                     verify with one main forward, roll back rejected drafts; prints the\n"
      "                     same ids as plain greedy, and the acceptance figures on stderr\n"
      "  --draft K          drafts per main forward (default: every MTP depth)\n"
      "\nquantize options:\n"
      "  --in DIR           a checkpoint with F32/BF16/F16 weights (sharded or not)\n"
      "  --out DIR          where the converted checkpoint goes\n"
      "  --format F         nvfp4 (default), mxfp4, fp8 or bf16\n"
      "  --exclude GLOB     keep matching modules in high precision (repeatable)\n"
      "  --threads N        worker threads (default: all)\n"
      "\nbench options:\n"
      "  --kernels          GEMV (n=1) and GEMM (n=16,128,512) for nvfp4, bf16, mxfp4, f32 on\n"
      "                     4096x4096, 4096x14336, 14336x4096, 2048x8192 (N x K); one line per case:\n"
      "                     FORMAT OP NxK n=NTOK: VALUE UNIT ratio=R (of the read-bandwidth or FMA probe)\n"
      "                     (GEMM ratios of the _bf16act lines are to the bf16 dot probe), then\n"
      "                     the opt-in paths nvfp4_w4a8, mxfp4_w4a8 (int8 activations) and\n"
      "                     nvfp4_bf16act, mxfp4_bf16act, bf16_bf16act (bf16 activations)\n"
      "  --only L[,L...]    only these variants (labels as printed, e.g. nvfp4,nvfp4_bf16act)\n"
      "  --quick            one small shape only, weights in cache (a smoke test, not a figure)\n"
      "  --probe-mib N      size of the read-bandwidth probe (default 1024)\n"
      "  --threads N        worker threads (default: all)\n");
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
      const bool is_flag = key == "no-tensors" || key == "kernels" || key == "quick";
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
    if (c.name == name) return c.run(a);
  return usage_error(slm::cat("unknown command '", name, "'"));
}
