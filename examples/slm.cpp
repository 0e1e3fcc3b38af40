// slm - the command-line front end of the slm library.
//
//   slm inspect --model DIR|FILE.safetensors [--no-tensors]
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
#include <string>
#include <string_view>
#include <vector>

#include "slm/convert.hpp"
#include "slm/kernel_bench.hpp"
#include "slm/slm.hpp"

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
                        "num_experts", "n_routed_experts", "num_experts_per_tok", "state_size", "tie_word_embeddings"};
  std::string line;
  for (const char* k : keys) {
    const slm::json::value* v = config.find(k);
    if (!v || v->is_null()) continue;
    line += slm::cat(line.empty() ? "" : " ", k, "=", v->is_string() ? std::string(v->as_string()) : slm::json::dump(*v));
  }
  std::printf("config    %s\n", line.c_str());
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
  print_tensors([&](std::size_t i) -> const auto& { return ck->info(ck->tensors()[i]); }, ck->size(), list);
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
  std::printf("probe read_bandwidth: %.1f GB/s\nprobe f32_fma: %.1f GFLOP/s\nthreads: %zu, isa: %.*s\n",
              probe.read_bytes_per_s / 1e9, probe.f32_flops_per_s / 1e9, probe.threads,
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
                              {slm::weight_format::mxfp4, slm::activation_precision::int8, "mxfp4_w4a8"}};
  for (const variant& v : variants) {
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
    if (s.size() > 2 && s.substr(0, 2) == "--") {
      std::string key(s.substr(2));
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
