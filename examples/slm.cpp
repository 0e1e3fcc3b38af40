// slm - the command-line front end of the slm library: `slm COMMAND [options]`. `slm --help`
// lists the commands and every option; README.md ("The `slm` command") shows them in use.
//
// Every error prints one line "slm: error: ..." and exits non-zero (2 for usage errors).
// Subcommands are rows of one table; each is a plain function over parsed arguments. Every
// option is a row of another (`options`), which the parser and the help both read.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/slm.hpp"

namespace {

struct args {
  std::vector<std::string_view> positional;
  std::vector<std::pair<std::string, std::string>> options;  // --key value, or --flag -> ""

  bool has(std::string_view k) const {
    return std::any_of(options.begin(), options.end(), [&](const auto& o) { return o.first == k; });
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
  // A positive integer option (checked as the command line is read), or `fallback` when
  // absent or empty.
  std::size_t count(std::string_view k, std::size_t fallback) const {
    const std::string_view t = get(k);
    std::size_t n = fallback;
    if (!t.empty()) std::from_chars(t.data(), t.data() + t.size(), n);
    return n;
  }
};

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "slm: error: %s (see 'slm --help')\n", msg.c_str());
  return 2;
}
int usage_error(const slm::status& s) { return usage_error(s.message()); }
int fail(const slm::status& s) {
  std::fprintf(stderr, "slm: error: %s\n", s.to_string().c_str());
  return 1;
}

// The words of `s` between `sep`s.
std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (std::size_t b = 0, e = 0; e < s.size(); b = e + 1) {
    e = std::min(s.find(sep, b), s.size());
    out.push_back(s.substr(b, e - b));
  }
  return out;
}

// Every option of every command, once: its name (--name), its value as the help shows it
// ("" for a flag; a choice lists its values, a|b|c, the first the default where there is
// one), the commands whose help lists it (the first describes it, the others refer to it),
// what it does, and what its value must be, checked as the command line is read (a
// positive integer, one of the choices). A row without a name is a line of help only. An
// option no row names is refused: a misspelt option is an error, not silently ignored. An
// option whose meaning differs between commands has a row for each.
enum class kind : std::uint8_t { text, count, choice };
struct option {
  std::string_view name, value, commands, help;
  kind type = kind::text;
};
constexpr option options[] = {
    {"model", "DIR|FILE", "inspect", "a Hugging Face style model directory, one .safetensors file, or an ensemble.json "
     "(each member's bytes, the total against the budget, and the NAM56R-scale arithmetic of eight specialists); or "
     "given bare, as the first word"},
    {"no-tensors", "", "inspect", "print the summary only, not one line per tensor"},

    {"model", "DIR", "logits", "a checkpoint of a supported architecture (bf16, f32, NVFP4, ...): Hugging Face, NAM56R "
     "canonical or nanochat (by config.json model_type)"},
    {"ids", "ID,ID,...", "logits", "the token ids, T of them"},
    {"out", "FILE", "logits", "writes tensor 'logits' F32 [T, V]; row t is the next-token distribution after ids 0..t "
     "(inclusive), in both modes"},
    {"mode", "full|incremental", "logits", "full (default): one forward over all T ids; incremental: rows 0..P-1 from "
     "one forward over the first P ids, rows P..T-1 from feeding the rest one id at a time through the KV cache (the "
     "layout of logits_full / logits_incremental in the golden files)", kind::choice},
    {"prefill", "P", "logits", "incremental mode: ids in the first forward (default 1, 1 <= P <= T)", kind::count},
    {"ctx", "N", "logits run", "context limit in tokens (default: the model's); more ids are refused", kind::count},
    {"kv", "f32|bf16", "logits run perplexity bench", "KV cache element type: f32 (default) or bf16", kind::choice},
    {"mla", "auto|expanded|absorbed", "logits run perplexity bench", "MLA form: auto (default: expanded for prompts, "
     "absorbed for decode), expanded or absorbed", kind::choice},
    {"act", "f32|bf16|int8", "logits run perplexity bench ensemble", "activations of NVFP4/MXFP4 products: f32 "
     "(default, exact), bf16 (W4A16, the library's default, faster) or int8 (W4A8); other weights use f32, bf16 "
     "weights unless --dense-act bf16", kind::choice},
    {"dense-act", "f32|bf16", "logits run perplexity bench ensemble", "activations of products with bf16 weights: "
     "f32 (default, exact) or bf16 (rounded once per product, as llama.cpp runs bf16 weights; AMX tiles for "
     "prompts where the CPU has them)", kind::choice},
    {"threads", "N", "logits run perplexity quantize bench ensemble synthetic", "worker threads (default: all)", kind::count},
    {"mmap", "", "logits run perplexity bench ensemble", "map the weight files instead of reading them into memory (no "
     "copy, shared pages; but a file truncated or rewritten in place while slm runs kills it with SIGBUS: replace "
     "model files by rename)"},

    {"model", "DIR", "run", "as for logits; its tokenizer.json encodes and decodes text"},
    {"prompt", "TEXT", "run", "the prompt as text (special tokens written in it count, unless --no-parse-special; BOS "
     "as the tokenizer's post-processor adds it)"},
    {"prompt-ids", "ID,..", "run", "the prompt as token ids; the output is then ids, comma-separated"},
    {"fim-prefix", "TEXT", "run", "fill in the middle: the model writes the code between --fim-prefix and "
     "--fim-suffix"},
    {"fim-suffix", "TEXT", "run", "the code after the middle"},
    {"fim-order", "psm|spm", "run", "the FIM tokens' order (default: the model's own, tokenizer_config.json "
     "\"fim_order\", else psm)", kind::choice},
    {"tokens", "N", "run ensemble", "tokens to generate at most (default 128; 16 with --prompt-ids)", kind::count},
    {"temp", "T", "run ensemble", "temperature; 0 = greedy (the default, unless generation_config.json sets "
     "do_sample)"},
    {"top-k", "K", "run ensemble", "top-k truncation (0 = off)"},
    {"top-p", "P", "run ensemble", "top-p (nucleus) truncation (1 = off)"},
    {"min-p", "P", "run ensemble", "min-p truncation (0 = off)"},
    {"repeat-penalty", "R", "run ensemble", "repetition penalty on the tokens of the penalty window (1 = off)"},
    {"frequency-penalty", "F", "run ensemble", "subtracts F times a token's count in the penalty window (0 = off)"},
    {"presence-penalty", "P", "run ensemble", "subtracts P from a token present in the penalty window (0 = off)"},
    {"repeat-last-n", "N", "run ensemble", "the penalty window in tokens (default 64; 0 = off, -1 = the whole "
     "history)"},
    {"logit-bias", "ID=B", "run ensemble", "add B to a token's logit (-inf bans it; repeatable)"},
    {"seed", "S", "run ensemble", "sampling seed (default fixed: the same command gives the same text)"},
    {"stop", "STR", "run ensemble", "stop before this text (repeatable); the EOS ids of the tokenizer, config.json and "
     "generation_config.json stop too, unless --ignore-eos"},
    {"ignore-eos", "", "run", "do not stop at the EOS ids"},
    {"stream", "", "run", "print the text as it is generated (whole UTF-8 characters)"},
    {"progress", "", "run", "show the weight-reading progress even for a small model (it is shown from 64 MiB on: a "
     "bar on a terminal, a line per quarter otherwise)"},
    {"save-state", "FILE", "run", "after generating, save the session (caches, history, sampler state)"},
    {"load-state", "FILE", "run", "continue a saved session (the prompt, if any, is appended)"},
    {"speculative", "none|mtp|lookup", "run", "none (default), mtp: draft with the model's MTP heads (NAM56R), or "
     "lookup: draft by copying what followed the latest earlier occurrence of the last 3, 2 or 1 tokens (any model; "
     "edits repeat their context); verify with "
     "one main forward, roll back rejected drafts; greedy: the same tokens as plain greedy; sampled: each token "
     "distributed exactly as plain sampling (speculative sampling); the same logit bias, penalties and stops; no "
     "--stream or state files; acceptance figures on stderr", kind::choice},
    {"draft", "K", "run", "drafts per main forward at most (default: every MTP depth; lookup: 8)", kind::count},

    {"model", "DIR", "tokenize detokenize", "a directory with tokenizer.json (and optionally tokenizer_config.json)"},
    {"text", "TEXT", "tokenize", "the input; ids are printed space-separated on one line"},
    {"file", "PATH", "tokenize", "the input, from a file"},
    {"no-add-special", "", "tokenize", "without the post-processor's tokens (BOS/EOS)"},
    {"no-parse-special", "", "tokenize run", "special tokens written in the text are plain text"},

    {"ids", "ID ...", "detokenize", "ids separated by spaces or commas; the exact bytes go to stdout"},
    {"skip-special", "", "detokenize", "leave special tokens out"},

    {"model", "DIR", "perplexity", "as for run; its tokenizer.json encodes the documents (BOS prepended if it has one; "
     "special tokens written in the text are plain text)"},
    {"file", "PATH", "perplexity", "a document (repeatable); a directory: every file under it, sorted"},
    {"text", "TEXT", "perplexity", "one document given inline"},
    {"ctx", "N", "perplexity", "window length in tokens (default 512, at most the model's context)", kind::count},
    {"stride", "S", "perplexity", "a longer document is scored in windows starting every S tokens (default ctx/2, 1 <= "
     "S <= ctx), each a fresh session; every token after the first is predicted once, with >= ctx-S tokens of "
     "context", kind::count},
    {"max-tokens", "N", "perplexity", "stop after the document in which N predicted tokens are reached (later "
     "documents count neither tokens nor bytes)", kind::count},
    {"verbose", "", "perplexity", "a line per document too"},
    {"json", "FILE", "perplexity", "write the figures (total and per document) as JSON"},
    {"", "", "perplexity", "prints: tokens N  bytes B  nll X nats/token  ppl P  bits/byte Y  top1 Z%"},
    {"", "", "perplexity", "(bits/byte = sum NLL / ln 2 / UTF-8 bytes; over the tokenizer's vocabulary)"},

    {"in", "DIR", "quantize", "a checkpoint with F32/BF16/F16 weights (sharded or not)"},
    {"out", "DIR", "quantize", "where the converted checkpoint goes: written beside it and renamed into place when "
     "complete; an existing non-empty DIR is refused"},
    {"force", "", "quantize", "replace a non-empty --out DIR whole (only once the new one is complete)"},
    {"format", "nvfp4|mxfp4|fp8|bf16", "quantize bench", "the format to write (default nvfp4)", kind::choice},
    {"exclude", "GLOB", "quantize", "keep matching modules in high precision (repeatable; wins over --include)"},
    {"include", "GLOB", "quantize", "quantize matching embeddings / output heads too (repeatable; never norms, "
     "routers, the DSA indexer or mHC scorers)"},
    {"quantize-embeddings", "", "quantize bench", "include the input embeddings and output heads: *word_embeddings, "
     "*embed_tokens, *output_layer, *lm_head, *unified_table (the n-gram table)"},

    {"config", "FILE", "ensemble", "an ensemble.json: members, router, strategy, memory budget "
     "(include/slm/ensemble/config.hpp has the schema)"},
    {"prompt", "TEXT", "ensemble", "the prompt"},
    {"prompt-file", "FILE", "ensemble", "the prompt, from a file (its name also feeds the rules router)"},
    {"file", "NAME", "ensemble", "the file name the prompt belongs to (CMakeLists.txt, x.sh, ...)"},
    {"strategy", "top1|top2|mix|cascade|vote|refine|speculative", "ensemble", "the strategy (default: the config's); "
     "cascade and vote give one-line answers", kind::choice},
    {"data", "DIR", "ensemble", "route, calibrate, train-router: the files of DIR/<domain>/"},
    {"content-only", "", "ensemble", "route: ignore the files' names"},
    {"max-tokens", "N", "ensemble", "calibrate: held-out tokens (default 2048)", kind::count},
    {"out", "FILE", "ensemble", "train-router: where the router goes"},
    {"max-files", "N", "ensemble", "train-router: files per domain at most (the first 4096 bytes of each; default "
     "600)", kind::count},
    {"", "[run]", "ensemble", "route the prompt to the right specialists and run the strategy (greedy by default)"},
    {"", "route FILE... | route --data DIR", "ensemble", "where each file goes; --data DIR/<domain>/FILES also prints "
     "the router's accuracy per domain"},
    {"", "calibrate FILE... | calibrate --data DIR", "ensemble", "fit each member's temperature and the mixture "
     "weights (EM) on held-out text"},
    {"", "train-router --data DIR --out FILE", "ensemble", "train the classifier router on DIR/<domain>/FILES"},

    {"model", "DIR", "bench", "prefill and decode tok/s of one session, the weight bytes read per decode token and "
     "their rate against the read-bandwidth probe"},
    {"synthetic", "SHAPE", "bench", "the same figures for random weights at a real model's dimensions, in --format F "
     "(default nvfp4; bf16: as written): SHAPE is a preset (qwen3-0.6b, llama-3.2-1b, qwen3-30b-a3b, mamba2-370m, "
     "nam56r) or a config.json; the prompt is timed --reps times, each a fresh session; one line per phase, "
     "'prefill: ...' (GFLOP/s of the weight products against the probe of their arithmetic) and 'decode: ...' (weight "
     "bytes read per token against the read-bandwidth probe), each ending in ratio=R"},
    {"layers", "N", "bench synthetic", "cut the synthetic model to its first N layers (every per-layer list "
     "follows), so a large shape fits this machine's memory", kind::count},
    {"reps", "N", "bench", "--synthetic: timed runs (default 3); figures are their median and spread "
     "((max - min) / median)", kind::count},
    {"dir", "DIR", "bench", "--synthetic: write the checkpoints under DIR and keep them, reusing what a run before "
     "left there for the same shape (default: a temporary directory, removed at exit)"},
    {"prompt-tokens", "N", "bench", "prompt size (default 64; 512 with --synthetic)", kind::count},
    {"gen-tokens", "N", "bench", "tokens decoded (default 32; 128 with --synthetic), after the prompt: what "
     "llama-bench calls 'tg N @ d P' (--prompt-tokens 1 for its plain 'tg N', which starts from an empty cache)",
     kind::count},
    {"kernels", "", "bench", "GEMV (n=1) and GEMM (n=16,128,512) for nvfp4, bf16, mxfp4, f32 on 4096x4096, 4096x14336, "
     "14336x4096, 2048x8192 (N x K); one line per case: FORMAT OP NxK n=NTOK: VALUE UNIT ratio=R (of the "
     "read-bandwidth or FMA probe; GEMM ratios of the _bf16act lines are to the bf16 dot probe, or to the AMX "
     "bf16 probe where they run on tiles; of the _w4a8 lines to the int8 dot probe where their kernels are SIMD), "
     "then the opt-in paths "
     "nvfp4_w4a8, mxfp4_w4a8 (int8 activations) and nvfp4_bf16act, mxfp4_bf16act, bf16_bf16act (bf16 activations)"},
    {"only", "L[,L...]", "bench", "only these variants (labels as printed, e.g. nvfp4,nvfp4_bf16act)"},
    {"quick", "", "bench", "one small shape only, weights in cache (a smoke test, not a figure)"},
    {"probe-mib", "N", "bench", "size of the read-bandwidth probe (default 1024)", kind::count},

    {"", "SHAPE DIR", "synthetic", "write DIR/config.json and DIR/model.safetensors: random bf16 weights at SHAPE's "
     "dimensions (a preset of bench --synthetic, or a config.json), the same bytes on every run"},
};

const option* find_option(std::string_view name) {
  for (const option& o : options)
    if (!name.empty() && o.name == name) return &o;
  return nullptr;
}

// The index of `v` among the values of a choice row; their number when it is none of them.
std::size_t choice_index(const option& o, std::string_view v) {
  const std::vector<std::string_view> values = split(o.value, '|');
  return static_cast<std::size_t>(std::find(values.begin(), values.end(), v) - values.begin());
}

// --key's index among its row's values (checked as the command line was read); 0 when absent.
std::size_t pick(const args& a, std::string_view key) {
  return a.has(key) ? choice_index(*find_option(key), a.get(key)) : 0;
}

// A value as its row's kind requires: a positive integer (an empty one: the default), or
// one of the choices.
slm::status check_value(const option& o, std::string_view v) {
  std::size_t n = 0;
  const auto r = std::from_chars(v.data(), v.data() + v.size(), n);
  if (o.type == kind::count && !v.empty() && (r.ec != std::errc() || r.ptr != v.data() + v.size() || n == 0))
    return slm::make_error(slm::errc::invalid_argument, "--", o.name, " needs a positive integer, got '", v, "'",
                           o.name == "tokens" ? " (-n)" : "");
  const std::vector<std::string_view> values = split(o.value, '|');
  if (o.type != kind::choice || choice_index(o, v) < values.size()) return {};
  std::string list;
  for (std::size_t i = 0; i < values.size(); ++i)
    list += slm::cat(i == 0 ? "" : i + 1 == values.size() ? " or " : ", ", values[i]);
  return slm::make_error(slm::errc::invalid_argument, "--", o.name, " must be ", list, ", not '", v, "'");
}

// --threads N (default: every hardware thread).
slm::result<slm::thread_pool> make_pool(const args& a) {
  return slm::thread_pool::create(a.count("threads", slm::hardware_threads()));
}

// What the commands that run a model share: the session (--kv, --mla, and --ctx, a context
// limit, where `ctx_limit`), the activations of NVFP4/MXFP4 products (--act) and of bf16
// products (--dense-act), per forward call, and the worker threads. context() refers to the
// pool: the runtime stays put.
struct runtime {
  slm::session_options session;
  slm::activation_precision act, dense_act;
  slm::thread_pool pool;

  slm::compute_context context() {
    slm::compute_context cx{pool};
    cx.quantized_activations = act;
    cx.dense_activations = dense_act;
    return cx;
  }
};
slm::result<runtime> make_runtime(const args& a, bool ctx_limit) {
  using slm::activation_precision;
  static constexpr slm::kv_dtype kv[] = {slm::kv_dtype::f32, slm::kv_dtype::bf16};  // in the order of the rows
  static constexpr slm::mla_mode mla[] = {slm::mla_mode::automatic, slm::mla_mode::expanded, slm::mla_mode::absorbed};
  static constexpr activation_precision act[] = {activation_precision::f32, activation_precision::bf16,
                                                 activation_precision::int8};
  slm::session_options o;
  o.kv = kv[pick(a, "kv")];
  o.mla = mla[pick(a, "mla")];
  if (ctx_limit && a.count("ctx", 0)) o.max_tokens = a.count("ctx", 0);
  auto pool = make_pool(a);
  if (!pool.ok()) return std::move(pool).take_error();
  static constexpr activation_precision dense[] = {activation_precision::f32, activation_precision::bf16};
  return runtime{o, act[pick(a, "act")], dense[pick(a, "dense-act")], std::move(*pool)};
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
                   width - filled, "", pct, slm::human_bytes(total).c_str());
      if (pct == 100) std::fprintf(stderr, "\n");
    } else if (shown_ < 0 || pct / 25 != shown_ / 25 || pct == 100) {
      std::fprintf(stderr, "slm: reading weights: %d%% of %s\n", pct, slm::human_bytes(total).c_str());
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

// slm::load (the checkpoint once: model, tokenizer, generation defaults) for a command that
// needs the directory's tokenizer where `need` (`why` completes the error): a directory
// without tokenizer.json is refused before the weights are read.
slm::result<slm::loaded_model> load_model(const args& a, const std::filesystem::path& dir, bool need,
                                          std::string_view why, weight_progress* progress = nullptr) {
  const auto missing = [&] {
    return slm::make_error(slm::errc::not_found, dir.string(), ": no tokenizer.json (", why, ")");
  };
  std::error_code ec;
  if (need && !std::filesystem::exists(dir / "tokenizer.json", ec)) return missing();
  auto loaded = slm::load(dir, slm::load_options{load_options(a, progress), true});
  if (loaded.ok() && need && !loaded->tok) return missing();
  return loaded;
}

// slm inspect: a model directory, a .safetensors file or a tokenizer directory as
// slm::inspect_model describes it, or an ensemble.json (ensemble::inspect_ensemble); no
// weight is read.
int cmd_inspect(const args& a) {
  const std::string_view model = a.get("model", a.positional.empty() ? std::string_view{} : a.positional[0]);
  if (model.empty()) return usage_error("inspect needs --model DIR (or a .safetensors file)");
  const std::filesystem::path path{std::string(model)};
  std::error_code ec;
  auto lines = path.extension() == ".json" && std::filesystem::is_regular_file(path, ec)
                   ? slm::ensemble::inspect_ensemble(path)
                   : slm::inspect_model(path, !a.has("no-tensors"));
  if (!lines.ok()) return fail(lines.error());
  for (const std::string& line : *lines) std::printf("%s\n", line.c_str());
  return 0;
}

// slm logits: the logits of a token sequence (slm::sequence_logits: row t the next-token
// distribution after ids 0..t, by one forward, or --mode incremental through the KV
// cache), as tensor "logits" F32 [T, V] in a safetensors file.
int cmd_logits(const args& a) {
  const std::string_view model = a.get("model"), out = a.get("out");
  if (model.empty() || out.empty() || !a.has("ids"))
    return usage_error("logits needs --model DIR, --ids ID,ID,... and --out FILE.safetensors");
  const bool incremental = pick(a, "mode") == 1;
  auto ids = slm::parse_token_ids(a.get("ids"));
  if (!ids.ok()) return usage_error(slm::cat("--ids: ", ids.error().message()));
  const std::size_t T = ids->size();
  const std::size_t prefill = a.count("prefill", 1);
  if (!incremental && a.has("prefill")) return usage_error("--prefill applies to --mode incremental only");
  if (prefill > T) return usage_error(slm::cat("--prefill ", prefill, " exceeds the ", T, " ids given"));
  auto rt = make_runtime(a, true);
  if (!rt.ok()) return usage_error(rt.error());

  auto m = slm::any_model::load(std::filesystem::path{std::string(model)}, load_options(a));
  if (!m.ok()) return fail(m.error());
  const std::size_t V = m->vocab();
  if (auto s = slm::check_vocabulary(*ids, V); !s.ok()) return usage_error(slm::cat("--ids: ", s.message()));
  slm::compute_context cx = rt->context();
  const slm::sequence_logits_options lo{incremental ? slm::logits_mode::incremental : slm::logits_mode::full, prefill,
                                        rt->session};
  auto logits = slm::sequence_logits(*m, *ids, lo, cx);  // [T, V]
  if (!logits.ok()) return fail(logits.error());

  const std::string mode_name = incremental ? "incremental" : "full";
  slm::safetensors::writer w;
  w.set_metadata("format", "pt");
  w.set_metadata("mode", mode_name);
  if (incremental) w.set_metadata("prefill", std::to_string(prefill));
  const slm::shape shape{static_cast<std::int64_t>(T), static_cast<std::int64_t>(V)};
  if (auto s = w.add("logits", slm::dtype::f32, shape, std::as_bytes(logits->span())); !s.ok()) return fail(s);
  if (auto s = w.write(std::string(out)); !s.ok()) return fail(s);
  std::printf("wrote logits %s (%s%s) to %.*s\n", shape.to_string().c_str(), mode_name.c_str(),
              incremental ? slm::cat(", prefill ", prefill).c_str() : "", static_cast<int>(out.size()), out.data());
  return 0;
}

// The sampling settings: the model's defaults (generation_config.json as transformers
// reads it: slm::load's defaults.sampling), then the command line over them, in order (the
// last of a setting wins; each --logit-bias adds one). --temp 0 is greedy.
slm::result<slm::sampler_config> parse_sampling(const args& a, slm::sampler_config c) {
  for (const auto& [key, value] : a.options)
    if (std::ranges::find(slm::sampling_option_names, key) != std::end(slm::sampling_option_names))
      if (auto s = slm::set_sampling_option(c, key, value); !s.ok())
        return slm::make_error(s.code(), "--", s.message());
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
    return usage_error(
        "run needs --model DIR and one of --prompt TEXT, --prompt-ids ID,ID,... or --fim-prefix/--fim-suffix");
  std::vector<std::int32_t> prompt;
  if (ids_mode) {
    auto p = slm::parse_token_ids(a.get("prompt-ids"));
    if (!p.ok()) return usage_error(slm::cat("--prompt-ids: ", p.error().message()));
    prompt = std::move(*p);
  }
  auto rt = make_runtime(a, true);
  if (!rt.ok()) return usage_error(rt.error());

  // The sampling options are checked before the (long) load; applied over the model's
  // defaults after it.
  if (auto s = parse_sampling(a, slm::sampler_config{}); !s.ok()) return usage_error(s.error());
  weight_progress progress(a.has("progress"));  // the weights are read (or, --mmap, touched) before the first forward
  auto loaded = load_model(a, std::filesystem::path{std::string(model)}, !ids_mode, "use --prompt-ids", &progress);
  if (!loaded.ok()) return fail(loaded.error());
  auto sampling = parse_sampling(a, loaded->defaults.sampling);
  if (!sampling.ok()) return usage_error(sampling.error());
  const slm::tokenizer* t = loaded->tok ? &*loaded->tok : nullptr;
  if (text_mode) {
    slm::encode_options eo;
    eo.parse_special = !a.has("no-parse-special");
    auto p = t->encode(a.get("prompt"), eo);
    if (!p.ok()) return fail(p.error());
    prompt = std::move(*p);
    if (prompt.empty() && t->specials().bos >= 0) prompt.push_back(t->specials().bos);
  } else if (fim_mode) {
    // Without --fim-order, the model's own order (tokenizer_config.json "fim_order"), else PSM.
    std::optional<slm::fim_order> o;
    if (a.has("fim-order")) o = pick(a, "fim-order") == 0 ? slm::fim_order::psm : slm::fim_order::spm;
    auto p = slm::fim_prompt(*t, a.get("fim-prefix"), a.get("fim-suffix"), o);
    if (!p.ok()) return fail(p.error());
    prompt = std::move(*p);
  }
  slm::generation_options go;
  go.max_new_tokens = a.count("tokens", ids_mode ? 16 : 128);
  if (!a.has("ignore-eos")) go.stop_tokens = loaded->defaults.eos_ids;
  go.stop_strings = a.all("stop");
  const bool stream = a.has("stream");
  // The output: the ids (comma-separated) in ids mode, else the text unless it was
  // streamed; then a newline. The text's bytes as they are (fwrite).
  const auto print = [&](const std::vector<std::int32_t>& ids, const std::string& text) {
    const std::string out = ids_mode ? slm::format_token_ids(ids) : stream ? std::string() : text;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::printf("\n");
  };

  return std::visit([&](const auto& m) -> int {  // the family's own type (MTP drafting is NAM56R's)
    slm::prefetch_weights(m.weights(), std::ref(progress));  // --mmap: read ahead, shown as a load
    const std::size_t V = m.vocab();
    if (auto s = slm::check_vocabulary(prompt, V); !s.ok())
      return usage_error(slm::cat(ids_mode ? "--prompt-ids: " : "--prompt: ", s.message()));
    slm::compute_context cx = rt->context();
    if (const std::size_t source = pick(a, "speculative"); source != 0) {  // mtp or lookup: plain generation's tokens
      const char* flag = source == 1 ? "--speculative mtp" : "--speculative lookup";
      if (resume || a.has("save-state")) return usage_error(slm::cat(flag, " does not take --load-state / --save-state"));
      if (stream && !ids_mode) return usage_error(slm::cat(flag, " does not stream: drop --stream"));
      slm::speculation spec;
      spec.source = source == 1 ? slm::draft_source::mtp : slm::draft_source::lookup;
      spec.draft_tokens = a.count("draft", 8);  // lookup: up to 8 copied tokens per round
      if (source == 1) {
        if constexpr (slm::mtp_session<decltype(m.new_session())>) {
          const std::size_t depths = m.config().mtp_num_layers;
          if (depths == 0)
            return fail(slm::make_error(slm::errc::unsupported, "--speculative mtp: the model has no MTP layers"));
          spec.draft_tokens = a.count("draft", depths);
          if (spec.draft_tokens > depths)
            return usage_error(slm::cat("--draft ", spec.draft_tokens, " exceeds the model's ", depths, " MTP depths"));
        } else {
          return fail(slm::make_error(slm::errc::unsupported,
                                      "--speculative mtp: this model has no MTP drafting in slm (NAM56R models do)"));
        }
      }
      slm::session_options o = rt->session;
      o.rollback_tokens = std::max(o.rollback_tokens, spec.draft_tokens);  // rejected drafts are rolled back
      auto session = m.new_session(o);
      // The sampler plain generation uses (generator: vocab_size = the tokenizer's
      // rows), so bias, penalties, padding rows and non-finite logits are treated alike.
      slm::sampler_config sc = *sampling;
      if (sc.vocab_size == 0) sc.vocab_size = t ? std::min(V, t->vocab_size()) : V;
      if (auto s = slm::validate(sc, V); !s.ok()) return usage_error(s);
      slm::sampler smp(sc);
      const auto t0 = std::chrono::steady_clock::now();
      auto r = slm::generate_speculative(session, prompt, spec, V, smp, go, t, cx);
      if (!r.ok()) return fail(r.error());
      const double seconds = slm::seconds_since(t0);
      const slm::speculative_stats& st = r->stats;
      print(r->tokens, r->text);
      std::fprintf(stderr, "slm: %s: %zu drafted, %zu accepted (%.1f %%), %.2f tokens per main forward; %zu tokens in "
                   "%.3f s with the prompt\n", source == 1 ? "mtp" : "lookup", st.drafted, st.accepted,
                   100.0 * st.acceptance_rate(), st.tokens_per_forward(), r->tokens.size(), seconds);
      return 0;
    }
    slm::generator gen(m.new_session(rt->session), t, V, *sampling);
    if (auto s = gen.validate(); !s.ok()) return usage_error(s);
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
    print(r->tokens, r->text);
    if (a.has("save-state"))
      if (auto s = gen.save(std::string(a.get("save-state"))); !s.ok()) return fail(s);
    std::fprintf(stderr, "slm: %zu prompt tokens in %.3f s, %zu generated in %.3f s (%.1f tok/s), stop: %.*s\n",
                 prompt.size(), prefill_s, r->tokens.size(), r->seconds,
                 r->seconds > 0 ? static_cast<double>(r->tokens.size()) / r->seconds : 0.0,
                 static_cast<int>(slm::to_string(r->reason).size()), slm::to_string(r->reason).data());
    return 0;
  }, loaded->model.get());
}

// slm tokenize: the ids of a text, space-separated on one line. The directory may hold
// only a tokenizer.json.
int cmd_tokenize(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || a.has("text") == a.has("file"))
    return usage_error("tokenize needs --model DIR and one of --text TEXT or --file PATH");
  auto tok = slm::tokenizer::load_dir(std::filesystem::path(std::string(model)));
  if (!tok.ok()) return fail(tok.error());
  std::string text(a.get("text"));
  if (a.has("file")) {
    auto f = slm::read_text_file(std::string(a.get("file")), std::size_t{1} << 30);
    if (!f.ok()) return fail(f.error());
    text = std::move(*f);
  }
  slm::encode_options eo;
  eo.add_special_tokens = !a.has("no-add-special");
  eo.parse_special = !a.has("no-parse-special");
  auto ids = tok->encode(text, eo);
  if (!ids.ok()) return fail(ids.error());
  std::printf("%s\n", slm::format_token_ids(*ids, ' ').c_str());
  return 0;
}

// slm detokenize: the exact bytes of ids on stdout (no newline added).
int cmd_detokenize(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || !a.has("ids")) return usage_error("detokenize needs --model DIR and --ids ID ...");
  auto ids = slm::parse_token_ids(a.get("ids"));
  if (!ids.ok()) return usage_error(slm::cat("--ids: ", ids.error().message()));
  auto tok = slm::tokenizer::load_dir(std::filesystem::path(std::string(model)));
  if (!tok.ok()) return fail(tok.error());
  slm::decode_options d;
  d.skip_special_tokens = a.has("skip-special");
  auto text = tok->decode(*ids, d);
  if (!text.ok()) return fail(text.error());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
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

// slm perplexity: how well a model predicts text, as llama.cpp's llama-perplexity and
// HF's perplexity guide measure it: slm::score_documents (generate/scoring.hpp has the
// method: encoding, windows of --ctx every --stride, NLL over the tokenizer's rows, bits
// per byte, --max-tokens at a document boundary). On a nanochat model the windows run
// through the session, the function `slm run` generates with (DSA dense, strictly
// causal), not the no-cache training forward of `slm logits --mode full` (README: why).
int cmd_perplexity(const args& a) {
  const std::string_view model = a.get("model");
  if (model.empty() || a.has("text") == a.has("file"))
    return usage_error("perplexity needs --model DIR and one of --file PATH (repeatable) or --text TEXT");
  const std::size_t ctx_arg = a.count("ctx", 512), stride_arg = a.count("stride", 0);  // 0: ctx / 2, once ctx is known
  if (ctx_arg < 2) return usage_error(slm::cat("--ctx must be at least 2 (a token and its successor), got ", ctx_arg));
  if (stride_arg > ctx_arg) return usage_error(slm::cat("--stride ", stride_arg, " exceeds --ctx ", ctx_arg));
  auto rt = make_runtime(a, false);
  if (!rt.ok()) return usage_error(rt.error());
  const std::string_view json_path = a.get("json");
  if (a.has("json") && json_path.empty()) return usage_error("--json needs a file name");

  auto docs = read_documents(a);
  if (!docs.ok()) return fail(docs.error());
  auto loaded = load_model(a, std::filesystem::path{std::string(model)}, true, "perplexity needs text");
  if (!loaded.ok()) return fail(loaded.error());
  const slm::tokenizer& t = *loaded->tok;

  const slm::any_model& m = loaded->model;
  const std::size_t V = std::min(t.vocab_size(), m.vocab());
  const std::size_t model_ctx = m.new_session(rt->session).max_tokens();
  const std::size_t ctx = std::min(ctx_arg, model_ctx), stride = stride_arg ? stride_arg : ctx / 2;
  if (ctx < 2)
    return fail(
        slm::make_error(slm::errc::invalid_argument, "the model's context of ", model_ctx, " tokens is under 2"));
  if (stride > ctx)
    return usage_error(slm::cat("--stride ", stride, " exceeds the context of ", ctx, " tokens (the model's limit)"));
  slm::compute_context cx = rt->context();
  slm::score_options so;  // windows of ctx tokens every stride, each one batched prefill
  so.ctx = ctx;
  so.stride = stride;
  so.vocab = V;
  so.session = rt->session;
  const auto t0 = std::chrono::steady_clock::now();
  const std::size_t budget = a.count("max-tokens", std::numeric_limits<std::size_t>::max());
  auto scores = slm::score_documents(m, t, *docs, so, budget, cx, [&](const slm::document_score& d) {
    if (a.has("verbose")) std::printf("doc %s  %s\n", slm::to_string(d.score).c_str(), d.name.c_str());
  });
  if (!scores.ok()) return fail(scores.error());
  const slm::score_tally& total = scores->total;
  const auto& per_doc = scores->documents;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (total.tokens == 0)
    return fail(slm::make_error(slm::errc::invalid_argument, "nothing to predict: every document is a single token"));
  std::printf("%s\n", slm::to_string(total).c_str());
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

// What --format and --quantize-embeddings ask of a conversion (quantize, and bench
// --synthetic's).
slm::convert_options convert_options_of(const args& a) {
  static constexpr slm::weight_format formats[] = {slm::weight_format::nvfp4, slm::weight_format::mxfp4,
                                                   slm::weight_format::fp8_e4m3, slm::weight_format::bf16};
  slm::convert_options opt;
  opt.format = formats[pick(a, "format")];  // in the order of the row
  if (a.has("quantize-embeddings")) opt.include = slm::embedding_include_patterns();
  return opt;
}

int cmd_quantize(const args& a) {
  const std::string_view in = a.get("in"), out = a.get("out"), fmt = a.get("format", "nvfp4");
  if (in.empty() || out.empty()) return usage_error("quantize needs --in DIR and --out DIR");
  slm::convert_options opt = convert_options_of(a);
  const std::vector<std::string> include = a.all("include");
  opt.include.insert(opt.include.begin(), include.begin(), include.end());
  opt.exclude = a.all("exclude");
  opt.replace = a.has("force");
  auto pool = make_pool(a);
  if (!pool.ok()) return fail(pool.error());
  const bool tty = isatty(fileno(stderr)) != 0;
  std::printf("%-56s %-26s %10s %10s\n", "tensor", "action", "rel_rms", "max_err");
  auto progress = [&](const slm::tensor_report& r, std::size_t done, std::size_t total) {
    std::printf("%-56s %-26s %10.3e %10.3e\n", r.name.c_str(), r.action.c_str(), r.rel_rms_error, r.max_abs_error);
    std::fflush(stdout);
    if (tty) {  // a progress bar on the terminal; plain lines (above) otherwise
      const int width = 30, filled = static_cast<int>(width * done / (total ? total : 1));
      std::fprintf(stderr, "\r[%.*s%*s] %zu/%zu", filled, "##############################", width - filled, "", done,
                   total);
      if (done == total) std::fprintf(stderr, "\n");
    }
  };
  auto reports = slm::convert_checkpoint(std::string(in), std::string(out), opt, *pool, progress);
  if (!reports.ok()) return fail(reports.error());
  const slm::convert_totals t = slm::convert_totals::of(*reports);
  std::printf("converted %zu of %zu tensors to %.*s: %s -> %s, worst relative RMS error %.3e; wrote %.*s\n",
              t.converted, t.tensors, static_cast<int>(fmt.size()), fmt.data(), slm::human_bytes(t.bytes_in).c_str(),
              slm::human_bytes(t.bytes_out).c_str(), t.worst_rel_rms_error, static_cast<int>(out.size()), out.data());
  return 0;
}

// slm bench --model DIR: prefill and decode speed of one session on this machine, and
// the decode step's weight traffic against the read-bandwidth probe of the same run.
int cmd_bench_model(const args& a) {
  auto rt = make_runtime(a, false);
  if (!rt.ok()) return usage_error(rt.error());
  const std::size_t np = a.count("prompt-tokens", 64), ng = a.count("gen-tokens", 32);
  auto m = slm::any_model::load(std::filesystem::path{std::string(a.get("model"))}, load_options(a));
  if (!m.ok()) return fail(m.error());
  const std::uint64_t bytes_per_token = slm::decode_weight_bytes(m->weights());
  const slm::probe_result probe = slm::measure_probes(rt->pool, std::size_t{256} << 20);
  slm::compute_context cx = rt->context();
  auto r = slm::measure_throughput(*m, np, ng, rt->session, cx);
  if (!r.ok()) return fail(r.error());
  const double dec_tps = r->decode_tokens_per_s();
  std::printf("probe read_bandwidth: %.1f GB/s, threads: %zu\n", probe.read_bytes_per_s / 1e9, probe.threads);
  std::printf("prefill: %zu tokens in %.3f s = %.1f tok/s\n", np, r->prefill_seconds, r->prefill_tokens_per_s());
  std::printf("decode: %zu tokens in %.3f s = %.1f tok/s\n", ng, r->decode_seconds, dec_tps);
  std::printf("weights read per decode token: %s (estimate: all but the embedding table, routed experts x top-k/E)\n",
              slm::human_bytes(bytes_per_token).c_str());
  std::printf("decode weight traffic: %.2f GB/s = %.3f of the read-bandwidth probe\n",
              static_cast<double>(bytes_per_token) * dec_tps / 1e9,
              static_cast<double>(bytes_per_token) * dec_tps / probe.read_bytes_per_s);
  return 0;
}

// A shape's config (--synthetic / the first word of `slm synthetic`), cut to --layers N,
// and its depth before and after the cut.
struct synthetic_shape {
  slm::json::value config;
  std::size_t layers = 0, full_layers = 0;
};
slm::result<synthetic_shape> synthetic_config(const args& a, std::string_view name) {
  auto base = slm::synthetic::shape_config(name);
  if (!base.ok()) return std::move(base).take_error();
  auto full = slm::synthetic::layer_count(*base);
  if (!full.ok()) return std::move(full).take_error();
  auto cut = a.has("layers") ? slm::synthetic::with_layers(*base, a.count("layers", 1)) : std::move(base);
  if (!cut.ok()) return std::move(cut).take_error();
  return synthetic_shape{std::move(*cut), a.has("layers") ? a.count("layers", 1) : *full, *full};
}

// A directory that is removed with everything in it when this goes out of scope, unless
// it is the user's (--dir).
struct scratch_dir {
  std::filesystem::path path;
  bool keep = false;
  ~scratch_dir() {
    std::error_code ec;
    if (!keep && !path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// slm bench --synthetic SHAPE: a random checkpoint at SHAPE's dimensions, written (bf16)
// and converted to --format, then loaded and timed as --model times a model, --reps
// times. Figures are medians; each phase's ratio is to the probe that bounds it:
// prefill against the compute probe of its products' arithmetic (bf16 or int8 dot when
// NVFP4/MXFP4 products take bf16 or int8 activations, else f32 FMA), decode against the
// read bandwidth.
int cmd_bench_synthetic(const args& a) {
  auto rt = make_runtime(a, false);
  if (!rt.ok()) return usage_error(rt.error());
  const std::string_view shape = a.get("synthetic");
  auto sh = synthetic_config(a, shape);
  if (!sh.ok()) return usage_error(sh.error());
  const slm::json::value* cfg = &sh->config;
  auto specs = slm::synthetic::checkpoint_tensors(*cfg);
  if (!specs.ok()) return fail(specs.error());
  std::uint64_t params = 0;
  for (const slm::tensor_spec& t : *specs) params += t.elements();

  scratch_dir dir{a.has("dir") ? std::filesystem::path(std::string(a.get("dir")))
                               : std::filesystem::temp_directory_path() /
                                     slm::cat("slm-synthetic-", static_cast<long>(::getpid())),
                  a.has("dir")};
  const std::string_view fmt = a.get("format", "nvfp4");
  const std::filesystem::path bf16_dir = dir.path / "bf16",
                              model_dir = fmt == "bf16" ? bf16_dir
                                                        : dir.path / slm::cat(fmt, a.has("quantize-embeddings") ? "-emb" : "");
  // A kept directory (--dir) that already holds this shape, as this variant, is reused:
  // both writes put their files in place only when complete.
  const std::string config_text = slm::json::dump(*cfg);
  auto holds_shape = [&](const std::filesystem::path& d) {
    auto text = slm::read_file_prefix(d / "config.json", std::size_t{1} << 24);
    std::error_code ec;
    return text.ok() && *text == config_text && std::filesystem::exists(d / "model.safetensors", ec);
  };
  if (dir.keep && holds_shape(model_dir)) {
    std::fprintf(stderr, "slm bench: reusing %s\n", model_dir.string().c_str());
  } else {
    if (!(dir.keep && holds_shape(bf16_dir))) {
      const auto t0 = std::chrono::steady_clock::now();
      if (auto s = slm::synthetic::write_checkpoint(bf16_dir, *cfg, rt->pool); !s.ok()) return fail(s);
      std::fprintf(stderr, "slm bench: wrote %s in %.1f s\n", bf16_dir.string().c_str(), slm::seconds_since(t0));
    }
    if (fmt != "bf16") {
      slm::convert_options opt = convert_options_of(a);
      opt.replace = true;
      const auto t0 = std::chrono::steady_clock::now();
      auto r = slm::convert_checkpoint(bf16_dir, model_dir, opt, rt->pool);
      if (!r.ok()) return fail(r.error());
      std::fprintf(stderr, "slm bench: converted to %.*s in %.1f s\n", static_cast<int>(fmt.size()), fmt.data(),
                   slm::seconds_since(t0));
      if (!dir.keep) {
        std::error_code ec;
        std::filesystem::remove_all(bf16_dir, ec);  // the disk holds one copy at a time
      }
    }
  }
  auto m = slm::any_model::load(model_dir, load_options(a));
  if (!m.ok()) return fail(m.error());

  const slm::probe_result probe = slm::measure_probes(rt->pool, a.count("probe-mib", 1024) << 20);
  // The probe of the products' arithmetic: bf16 or int8 dot for products with bf16 / int8
  // activations (NVFP4/MXFP4 weights at --act, bf16 weights at --dense-act) where the CPU has
  // them, else f32 FMA.
  const bool fp4 = fmt == "nvfp4" || fmt == "mxfp4";
  const slm::activation_precision prod = slm::default_activations(
      fp4 ? slm::weight_format::nvfp4 : fmt == "bf16" ? slm::weight_format::bf16 : slm::weight_format::f32, rt->act,
      rt->dense_act);
  const bool bf16_products = prod == slm::activation_precision::bf16 && probe.bf16_flops_per_s > 0;
  const bool int8_products = prod == slm::activation_precision::int8 && probe.int8_ops_per_s > 0;
  // A prompt's products (more tokens than the GEMV takes) run on AMX tiles where they can.
  const std::size_t np = a.count("prompt-tokens", 512), ng = a.count("gen-tokens", 128), reps = a.count("reps", 3);
  const bool tiles = bf16_products && np > slm::detail::mm::gemv_max_tokens && slm::amx_bf16_accelerated() &&
                     probe.amx_bf16_flops_per_s > 0;
  const bool int8_tiles = int8_products && np > slm::detail::mm::gemv_max_tokens && slm::amx_int8_accelerated() &&
                          probe.amx_int8_ops_per_s > 0;
  const double compute_peak = bf16_products   ? probe.bf16_gemm_peak(tiles)
                              : int8_products ? probe.int8_gemm_peak(int8_tiles)
                                              : probe.f32_flops_per_s;
  const char* compute_probe = tiles           ? "amx_bf16"
                              : bf16_products ? "bf16_dot"
                              : int8_tiles    ? "amx_int8"
                              : int8_products ? "int8_dot"
                                              : "f32_fma";
  const bool billions = params >= 1000000000;
  std::printf("shape %.*s: %s, %zu of %zu layers, %.3f %s parameters; weights %.*s%s, activations %s; threads %zu\n",
              static_cast<int>(shape.size()), shape.data(), std::string(cfg->get_string("model_type")).c_str(),
              sh->layers, sh->full_layers, static_cast<double>(params) / (billions ? 1e9 : 1e6),
              billions ? "B" : "M",
              static_cast<int>(fmt.size()), fmt.data(), a.has("quantize-embeddings") ? " (embeddings too)" : "",
              std::string(slm::to_string(prod)).c_str(), probe.threads);
  std::printf("probe read_bandwidth: %.1f GB/s, f32_fma: %.1f GFLOP/s, bf16_dot: %.1f GFLOP/s, int8_dot: %.1f GOP/s, "
              "amx_bf16: %.1f GFLOP/s, amx_int8: %.1f GOP/s, isa: %.*s\n",
              probe.read_bytes_per_s / 1e9, probe.f32_flops_per_s / 1e9, probe.bf16_flops_per_s / 1e9,
              probe.int8_ops_per_s / 1e9, probe.amx_bf16_flops_per_s / 1e9, probe.amx_int8_ops_per_s / 1e9,
              static_cast<int>(slm::to_string(slm::default_isa()).size()), slm::to_string(slm::default_isa()).data());

  std::vector<double> prefill_tps, prefill_flops_s, decode_tps, decode_bytes_s;
  double bytes_per_token = 0;
  std::uint64_t session_bytes = 0;
  for (std::size_t r = 0; r < reps; ++r) {
    slm::compute_context cx = rt->context();
    auto t = slm::measure_throughput(*m, np, ng, rt->session, cx);
    if (!t.ok()) return fail(t.error());
    prefill_tps.push_back(t->prefill_tokens_per_s());
    prefill_flops_s.push_back(static_cast<double>(t->prefill_flops) / t->prefill_seconds);
    decode_tps.push_back(t->decode_tokens_per_s());
    decode_bytes_s.push_back(t->decode_bytes_per_token() * t->decode_tokens_per_s());
    bytes_per_token = t->decode_bytes_per_token();
    session_bytes = t->session_bytes;
  }
  const slm::summary pt = slm::summarize(prefill_tps), pf = slm::summarize(prefill_flops_s);
  const slm::summary dt = slm::summarize(decode_tps), db = slm::summarize(decode_bytes_s);
  std::printf("prefill: %zu tokens, %.2f tok/s (median of %zu, spread %.1f%%), %.1f GFLOP/s of weight products "
              "against %s, ratio=%.3g\n",
              np, pt.median, pt.runs, 100 * pt.spread, pf.median / 1e9, compute_probe, pf.median / compute_peak);
  std::printf("decode: %zu tokens, %.2f tok/s (median of %zu, spread %.1f%%), %s of weights per token, %.2f GB/s "
              "against read_bandwidth, ratio=%.3g\n",
              ng, dt.median, dt.runs, 100 * dt.spread, slm::human_bytes(static_cast<std::uint64_t>(bytes_per_token)).c_str(),
              db.median / 1e9, db.median / probe.read_bytes_per_s);
  std::printf("session: %s of state after %zu tokens (caches, recurrent states, history), %.1f KiB per token\n",
              slm::human_bytes(session_bytes).c_str(), np + ng,
              static_cast<double>(session_bytes) / 1024.0 / static_cast<double>(np + ng));
  return 0;
}

// slm synthetic SHAPE DIR: the checkpoint bench --synthetic writes, kept.
int cmd_synthetic(const args& a) {
  if (a.positional.size() != 2) return usage_error("synthetic needs SHAPE and DIR");
  auto sh = synthetic_config(a, a.positional[0]);
  if (!sh.ok()) return usage_error(sh.error());
  auto pool = make_pool(a);
  if (!pool.ok()) return fail(pool.error());
  const std::filesystem::path dir{std::string(a.positional[1])};
  if (auto s = slm::synthetic::write_checkpoint(dir, sh->config, *pool); !s.ok()) return fail(s);
  std::printf("wrote %s: %.*s, %zu of %zu layers, random bf16\n", dir.string().c_str(),
              static_cast<int>(a.positional[0].size()), a.positional[0].data(), sh->layers, sh->full_layers);
  return 0;
}

// slm bench --kernels: the matmul cases of slm::kernel_bench_cases, one line each,
// "LABEL OP NxK n=NTOK: VALUE UNIT ratio=R", ratios against the probes of this run.
int cmd_bench(const args& a) {
  if (a.has("model")) return cmd_bench_model(a);
  if (a.has("synthetic")) return cmd_bench_synthetic(a);
  if (!a.has("kernels")) return usage_error("bench needs --kernels, --model DIR or --synthetic SHAPE");
  auto pool = make_pool(a);
  if (!pool.ok()) return fail(pool.error());
  const slm::probe_result probe = slm::measure_probes(*pool, a.count("probe-mib", 1024) << 20);
  std::printf("probe read_bandwidth: %.1f GB/s\nprobe f32_fma: %.1f GFLOP/s\nprobe bf16_dot: %.1f GFLOP/s\n"
              "probe int8_dot: %.1f GOP/s\nprobe amx_bf16: %.1f GFLOP/s\nprobe amx_int8: %.1f GOP/s\n"
              "threads: %zu, isa: %.*s\n",
              probe.read_bytes_per_s / 1e9, probe.f32_flops_per_s / 1e9, probe.bf16_flops_per_s / 1e9,
              probe.int8_ops_per_s / 1e9, probe.amx_bf16_flops_per_s / 1e9, probe.amx_int8_ops_per_s / 1e9,
              probe.threads,
              static_cast<int>(slm::to_string(slm::default_isa()).size()), slm::to_string(slm::default_isa()).data());
  const bool quick = a.has("quick");  // one shape, for tests
  for (const slm::kernel_case& c : slm::kernel_bench_cases(quick, a.get("only"))) {
    auto fig = slm::measure_kernel(c.format, c.n, c.k, c.n_tok, probe, *pool, quick ? 0.05 : 0.5,
                                   quick ? std::size_t(0) : std::size_t(160) << 20, c.act);
    if (!fig.ok()) return fail(fig.error());
    std::printf("%.*s %s %zux%zu n=%zu: %.1f %s ratio=%.2f\n", static_cast<int>(c.label.size()), c.label.data(),
                c.n_tok == 1 ? "gemv" : "gemm", c.n, c.k, c.n_tok, fig->value, c.n_tok == 1 ? "GB/s" : "GFLOP/s",
                fig->ratio);
    std::fflush(stdout);
  }
  return 0;
}

// ---- slm ensemble ----

// slm ensemble route: where each file would go (and, with --data DIR/<domain>/FILES, the
// router's accuracy per domain).
int cmd_ensemble_route(const args& a, const slm::ensemble::ensemble& e, slm::compute_context& cx) {
  std::vector<slm::ensemble::labeled_file> files;
  if (a.has("data")) {
    files = slm::ensemble::labeled_files(std::filesystem::path(std::string(a.get("data"))));
    if (files.empty()) return usage_error(slm::cat("--data ", a.get("data"), ": no files under DIR/<domain>/"));
  }
  for (std::size_t i = 1; i < a.positional.size(); ++i)
    files.push_back({"", std::filesystem::path(std::string(a.positional[i]))});
  if (files.empty()) return usage_error("ensemble route needs files (or --data DIR with DIR/<domain>/FILES)");
  auto acc = slm::ensemble::route_files(e, files, a.has("content-only"), cx, [&](const auto& f, const auto& d) {
    std::printf("%s -> %s (%s)\n", f.path.string().c_str(), e.config().members[d.best()].name.c_str(),
                d.reason.c_str());
  });
  if (!acc.ok()) return fail(acc.error());
  for (const auto& t : acc->labels)
    std::printf("accuracy %-8s %zu/%zu = %.3f\n", t.label.c_str(), t.right, t.total, t.rate());
  if (acc->all.total)
    std::printf("accuracy %-8s %zu/%zu = %.3f\n", "all", acc->all.right, acc->all.total, acc->all.rate());
  return 0;
}

// slm ensemble train-router: the classifier router from DIR/<domain>/FILES.
int cmd_ensemble_train_router(const args& a) {
  const std::string_view data = a.get("data"), out = a.get("out");
  if (data.empty() || out.empty())
    return usage_error("ensemble train-router needs --data DIR (DIR/<domain>/FILES) and --out FILE");
  auto r = slm::ensemble::train_classifier_from_directory(std::filesystem::path(std::string(data)),
                                                          a.count("max-files", 600), {});
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
  if (files.empty())
    return usage_error("ensemble calibrate needs held-out files (FILE... or --data DIR/<domain>/FILES)");
  const std::size_t cap = a.count("max-tokens", 2048);
  if (cap < 2) return usage_error("--max-tokens needs an integer >= 2");
  auto c = slm::ensemble::calibrate(e, files, cap, cx, [](const slm::ensemble::member_calibration& m) {
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
  auto rt = make_runtime(a, false);
  if (!rt.ok()) return usage_error(rt.error());
  slm::compute_context cx = rt->context();
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
  auto sampling = parse_sampling(a, slm::sampling_from_generation_config(nullptr));  // greedy unless told
  if (!sampling.ok()) return usage_error(sampling.error());
  slm::ensemble::request q;
  q.prompt = prompt;
  q.file_name = file_name;
  q.max_new_tokens = a.count("tokens", 128);
  q.sampling = *sampling;
  q.stop_strings = a.all("stop");
  if (a.has("strategy")) {
    using k = slm::ensemble::strategy_kind;  // in the order of the row
    static constexpr k strategies[] = {k::top1, k::top2, k::mix, k::cascade, k::vote, k::refine, k::speculative};
    q.strategy = strategies[pick(a, "strategy")];
  }
  auto r = e->run(q, cx);
  if (!r.ok()) return fail(r.error());
  std::fwrite(r->text.data(), 1, r->text.size(), stdout);
  std::printf("\n");
  std::fflush(stdout);
  std::string ran;
  for (const std::string& m : r->members) ran += (ran.empty() ? "" : ", ") + m;
  std::fprintf(stderr,
               "slm ensemble: route %s -> %s\nslm ensemble: %s; ran %s; %zu tokens in %.3f s (routing %.3f s)\n",
               r->route.reason.c_str(), e->config().members[r->route.best()].name.c_str(), r->detail.c_str(),
               ran.c_str(), r->tokens, r->seconds, r->route_seconds);
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
    {"perplexity", "score a model on text: bits per byte, perplexity and top-1 accuracy of the next token",
     cmd_perplexity},
    {"ensemble", "route a prompt to the right specialists of an ensemble.json and run its strategy", cmd_ensemble},
    {"bench", "measure a model's prefill/decode speed or the matmul kernels against this machine's limits", cmd_bench},
    {"synthetic", "write a checkpoint of random weights at a real model's dimensions", cmd_synthetic},
};

// One line of the help: `head`, then `text` from column 21 (or two spaces after a longer
// head), wrapped before column 100.
void print_row(std::string line, std::string_view text) {
  line.resize(std::max<std::size_t>(line.size() + 2, 21), ' ');
  bool fresh = true;  // nothing of `text` on this line yet
  for (const std::string_view word : split(text, ' ')) {
    if (line.size() + !fresh + word.size() > 99 && line.size() > 21) {  // (a longer head ends its line alone)
      std::printf("%s\n", line.substr(0, line.find_last_not_of(' ') + 1).c_str());
      line.assign(21, ' ');
      fresh = true;
    }
    line.append(fresh ? "" : " ").append(word);
    fresh = false;
  }
  std::printf("%s\n", line.c_str());
}

// The commands, then each command's options as the table has them: the rows it describes,
// the options it shares with the command that describes them, then its lines of help.
void print_help() {
  std::printf("slm %s - in-process inference for small specialist code models\n\nusage: slm COMMAND [options]\n\n",
              slm::version_string);
  for (const auto& c : commands)
    std::printf("  %-10.*s %.*s\n", static_cast<int>(c.name.size()), c.name.data(), static_cast<int>(c.summary.size()),
                c.summary.data());
  for (const auto& c : commands) {
    std::printf("\n%.*s options:\n", static_cast<int>(c.name.size()), c.name.data());
    std::map<std::string_view, std::string> shared;  // by the command that describes them
    for (const option& o : options) {
      const std::vector<std::string_view> in = split(o.commands, ' ');
      if (o.name.empty() || std::find(in.begin(), in.end(), c.name) == in.end()) continue;
      const std::string_view dashes = o.name == "tokens" ? "-n, --" : "--";  // -n is short for --tokens
      if (in[0] != c.name) shared[in[0]] += slm::cat(shared[in[0]].empty() ? "" : ", ", dashes, o.name);
      else print_row(slm::cat("  ", dashes, o.name, o.value.empty() ? "" : " ", o.value), o.help);
    }
    for (const auto& [owner, names] : shared) print_row(slm::cat("  as for ", owner, ":"), names);
    for (const option& o : options)
      if (o.name.empty() && o.commands == c.name) print_row(o.value.empty() ? "" : slm::cat("  ", o.value), o.help);
  }
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
      const std::string key(s == "-n" ? std::string_view("tokens") : s.substr(2));
      const option* o = find_option(key);
      if (!o) return usage_error(slm::cat("unknown option --", key));
      if (o->value.empty()) {  // a flag
        a.options.emplace_back(key, "");
      } else {
        if (i + 1 >= argc) return usage_error(slm::cat("option --", key, " needs a value"));
        if (auto v = check_value(*o, argv[++i]); !v.ok()) return usage_error(v);
        a.options.emplace_back(key, argv[i]);
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
