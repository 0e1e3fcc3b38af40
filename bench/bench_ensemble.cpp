// The specialist thesis, measured (issue 9), and what each ensemble strategy costs.
//
// From ONE forward per held-out file per model (the file's first 512 tokens, logits for
// every row, f32 activations of the NVFP4 products: the exact path) it keeps every token's
// log-probability under every model and derives:
//   1. bits per byte and top-1 accuracy of each model on each domain (the 3x3 table, plus
//      any generalist given);
//   2. the routed ensemble: per file the specialist a router picks (rules with and without
//      the file name, the classifier, perplexity over the whole text and over the first 64
//      tokens, the oracle) and its bits per byte; router accuracy per domain;
//   3. token-level mixing: EM mixture weights (fit_mixture_weights) fitted on the
//      even-indexed files, evaluated on the odd-indexed ones, globally and per domain
//      (oracle domain), with T = 1 and with per-member temperatures (fit_temperature) fitted
//      on a strided subset of the even files' rows (--calib-rows per model: storing every
//      row would take ~1.5 GB per model);
// and, apart from the held-out text,
//   4. ensemble::run with each strategy on three ~60-token prompts (C++, CMake, shell),
//      64 greedy tokens (cascade / vote: one-line answers), median wall time of --reps (3)
//      rounds over all cases after a warm-up round that maps the members (interleaved, so a
//      burst of load from elsewhere hits every case alike); route-only latency per router kind.
// The bits per byte of a file are the NLL (nats, double) of its tokens 1..T-1 over ln 2 over
// the bytes those tokens decode to (as perplexity_router counts them); a domain's figure
// pools its files' NLL and bytes.
//
//   build/bin/bench_ensemble [--model NAME=DIR[:DOMAIN]]... [--heldout DIR] [--files-per-domain N]
//                            [--json FILE] [--threads N] [--calib-rows N] [--router FILE]
//                            [--ensemble FILE] [--reps N] [--no-strategies] [--no-thesis]
//   defaults: the three shipped members (cpp, cmake, shell), the held-out split of the issue-9
//   corpus when it exists, else tests/data/ensemble/heldout; 60 files per domain; all
//   hardware threads (one thread_pool shared by everything; files run one after another;
//   --threads 1 runs serially, which is the steadier figure on a machine shared with others).
//   A model of domain "all" (a generalist) appears in the thesis table and the mixing, not
//   in routing.
//
// A plain program rather than Google Benchmark: the figures are model quality first and
// the timings are whole requests.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/ensemble/ensemble.hpp"
#include "slm/io/json.hpp"
#include "slm/core/parallel.hpp"
#include "slm/text/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
namespace ens = slm::ensemble;
using clock_type = std::chrono::steady_clock;

const std::vector<std::string> domains = {"cpp", "cmake", "shell"};
constexpr double ln2 = 0.69314718055994530942;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

int fail(const slm::status& s) {
  std::fprintf(stderr, "bench_ensemble: %s\n", s.to_string().c_str());
  return 1;
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// ---- options ---------------------------------------------------------------------------

struct model_arg {
  std::string name;
  fs::path dir;
  std::string domain;  // "all": no single domain (not routed to)
};

struct options {
  std::vector<model_arg> models;
  fs::path heldout, router_file, ensemble_file;
  std::size_t files_per_domain = 60, max_tokens = 512, calib_rows = 6144, threads = 0, prefix_tokens = 64, reps = 3;
  std::string json_file;
  bool strategies = true, thesis = true;
};

// NAME=DIR[:DOMAIN]; the domain defaults to NAME. A ':' followed by a '/' belongs to DIR.
std::optional<model_arg> parse_model(std::string_view s) {
  const auto eq = s.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq + 1 == s.size()) return std::nullopt;
  model_arg a;
  a.name = std::string(s.substr(0, eq));
  std::string_view rest = s.substr(eq + 1);
  const auto colon = rest.rfind(':');
  if (colon != std::string_view::npos && rest.substr(colon + 1).find('/') == std::string_view::npos && colon + 1 < rest.size()) {
    a.domain = std::string(rest.substr(colon + 1));
    rest = rest.substr(0, colon);
  } else {
    a.domain = a.name;
  }
  a.dir = std::string(rest);
  return a;
}

std::optional<options> parse_args(int argc, char** argv) {
  options o;
  const fs::path models = SLM_MODELS_DIR;
  o.router_file = models / "router.safetensors";
  o.ensemble_file = models / "ensemble.json";
  // The labeled held-out files a fresh clone has; the figures in bench/README.md come from
  // the whole held-out split of the training corpus (--heldout DIR; tools/train/README.md).
  o.heldout = fs::path(SLM_BENCH_DATA_DIR) / "ensemble" / "heldout";
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    auto num = [&](std::size_t& out) {
      if (!has_value) return false;
      char* end = nullptr;
      out = static_cast<std::size_t>(std::strtoull(argv[++i], &end, 10));
      return end && *end == 0;
    };
    if (a == "--model" && has_value) {
      auto m = parse_model(argv[++i]);
      if (!m) return std::nullopt;
      o.models.push_back(std::move(*m));
    } else if (a == "--heldout" && has_value) o.heldout = argv[++i];
    else if (a == "--router" && has_value) o.router_file = argv[++i];
    else if (a == "--ensemble" && has_value) o.ensemble_file = argv[++i];
    else if (a == "--json" && has_value) o.json_file = argv[++i];
    else if (a == "--files-per-domain") { if (!num(o.files_per_domain) || o.files_per_domain == 0) return std::nullopt; }
    else if (a == "--threads") { if (!num(o.threads)) return std::nullopt; }
    else if (a == "--reps") { if (!num(o.reps) || o.reps == 0) return std::nullopt; }
    else if (a == "--calib-rows") { if (!num(o.calib_rows)) return std::nullopt; }
    else if (a == "--max-tokens") { if (!num(o.max_tokens) || o.max_tokens < 2) return std::nullopt; }
    else if (a == "--no-strategies") o.strategies = false;
    else if (a == "--no-thesis") o.thesis = false;
    else return std::nullopt;
  }
  if (o.models.empty()) {
    o.models.push_back({"cpp", models / "nam56r-cpp-14m", "cpp"});
    o.models.push_back({"cmake", models / "nam56r-cmake-10m", "cmake"});
    o.models.push_back({"shell", models / "nam56r-shell-10m", "shell"});
  }
  if (o.threads == 0) o.threads = slm::hardware_threads();
  return o;
}

// ---- a tiny JSON writer (the --json file) ------------------------------------------------

struct json_out {
  std::string s;
  void key(std::string_view k) {
    s += '"';
    s.append(k);
    s += "\":";
  }
  void num(double v) { s += std::isfinite(v) ? fmt("%.6g", v) : std::string("null"); }
  void str(std::string_view v) {
    s += '"';
    for (char c : v) {
      if (c == '"' || c == '\\') s += '\\';
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        s += buf;
      } else {
        s += c;
      }
    }
    s += '"';
  }
  void comma() {
    if (!s.empty() && s.back() != '{' && s.back() != '[' && s.back() != ':') s += ',';
  }
};

// ---- held-out files and their scores -----------------------------------------------------

struct member {
  model_arg arg;
  ens::member_model model;
  slm::tokenizer tok;
  std::size_t vocab = 0;    // tokenizer's size (<= the model's logit row)
  std::size_t context = 0;  // the session's max_tokens
  double temperature = 1.0;
  std::optional<ens::temperature_fit> fit;
};

struct heldout_file {
  std::size_t domain = 0, index = 0;   // index in the domain's sorted list
  std::string name;                    // the real name (hash prefix dropped)
  std::string route_text;              // the bytes the models score
  std::vector<std::vector<std::int32_t>> ids;  // per model
  std::vector<std::size_t> bytes;              // per model: bytes of tokens 1..T-1
};

struct file_score {
  std::vector<double> nll;      // per scored token, T = 1
  std::vector<double> nll_cal;  // at the member's fitted temperature (odd files only)
  std::size_t correct = 0;      // argmax == target
};

std::string read_prefix(const fs::path& p, std::size_t max_bytes) {
  std::ifstream in(p, std::ios::binary);
  std::string s(max_bytes, '\0');
  in.read(s.data(), static_cast<std::streamsize>(max_bytes));
  s.resize(static_cast<std::size_t>(in.gcount()));
  return s;
}

// Per-domain pooled bits/byte (index domains.size() = all domains).
struct bpb_acc {
  std::vector<double> nats = std::vector<double>(domains.size() + 1, 0.0);
  std::vector<double> bytes = std::vector<double>(domains.size() + 1, 0.0);
  void add(std::size_t d, double n, double b) {
    nats[d] += n;
    bytes[d] += b;
    nats.back() += n;
    bytes.back() += b;
  }
  double bpb(std::size_t d) const { return bytes[d] > 0 ? nats[d] / ln2 / bytes[d] : NAN; }
};

struct hit_acc {
  std::vector<double> hit = std::vector<double>(domains.size() + 1, 0.0);
  std::vector<double> n = std::vector<double>(domains.size() + 1, 0.0);
  void add(std::size_t d, bool ok) {
    hit[d] += ok;
    n[d] += 1;
    hit.back() += ok;
    n.back() += 1;
  }
  double rate(std::size_t d) const { return n[d] > 0 ? hit[d] / n[d] : NAN; }
};

std::string domain_header(std::string_view what) {
  std::string h;
  for (const auto& d : domains) h += " " + d + " " + std::string(what) + " |";
  return h + " all " + std::string(what) + " |";
}

std::string bpb_cells(const bpb_acc& a, const std::vector<double>* best = nullptr) {
  std::string s;
  for (std::size_t d = 0; d <= domains.size(); ++d) {
    const std::string v = fmt("%.3f", a.bpb(d));
    const bool bold = best && std::fabs((*best)[d] - a.bpb(d)) < 5e-4;
    s += " " + (bold ? "**" + v + "**" : v) + " |";
  }
  return s;
}

double log_sum_exp_mix(std::span<const double> log_w, std::span<const double> lp) {
  double mx = -INFINITY;
  for (std::size_t i = 0; i < lp.size(); ++i) mx = std::max(mx, log_w[i] + lp[i]);
  if (mx == -INFINITY) return mx;
  double s = 0;
  for (std::size_t i = 0; i < lp.size(); ++i) s += std::exp(log_w[i] + lp[i] - mx);
  return mx + std::log(s);
}

// ---- the held-out part -------------------------------------------------------------------

int run_thesis(const options& o, slm::compute_context& cx, json_out& js) {
  const auto t_all = clock_type::now();
  // Models
  std::vector<member> ms;
  for (const model_arg& a : o.models) {
    auto m = ens::member_model::load(a.dir);
    if (!m.ok()) return fail(std::move(m).take_error().with_context(a.name));
    auto t = slm::tokenizer::load_dir(a.dir);
    if (!t.ok()) return fail(std::move(t).take_error().with_context(a.name));
    const std::size_t vocab = std::min(t->vocab_size(), m->vocab());
    const std::size_t ctx = m->new_session().max_tokens();
    ms.push_back(member{a, std::move(*m), std::move(*t), vocab, ctx, 1.0, std::nullopt});
  }
  const std::size_t M = ms.size();

  // Files
  std::vector<heldout_file> files;
  std::size_t skipped = 0;
  for (std::size_t d = 0; d < domains.size(); ++d) {
    std::vector<fs::path> paths;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(o.heldout / domains[d], ec))
      if (e.is_regular_file()) paths.push_back(e.path());
    if (ec) return fail(slm::make_error(slm::errc::not_found, (o.heldout / domains[d]).string(), ": ", ec.message()));
    std::sort(paths.begin(), paths.end());
    std::size_t taken = 0;
    for (const fs::path& p : paths) {
      if (taken == o.files_per_domain) break;
      heldout_file f;
      f.domain = d;
      f.name = p.filename().string();
      if (f.name.size() > 13 && f.name[12] == '_') f.name = f.name.substr(13);
      const std::string text = read_prefix(p, 64 * 1024);  // 512 tokens never need more
      bool ok = true;
      for (const member& m : ms) {
        auto ids = m.tok.encode(text, slm::encode_options{.add_special_tokens = true, .parse_special = false});
        if (!ids.ok()) return fail(std::move(ids).take_error().with_context(p.string()));
        ids->resize(std::min({ids->size(), o.max_tokens, m.context}));
        if (ids->size() < 2) ok = false;
        if (!ok) break;
        auto scored = m.tok.decode(std::span<const std::int32_t>(*ids).subspan(1));
        if (!scored.ok()) return fail(std::move(scored).take_error().with_context(p.string()));
        if (scored->empty()) ok = false;
        if (f.ids.empty()) f.route_text = *scored;
        f.bytes.push_back(scored->size());
        f.ids.push_back(std::move(*ids));
      }
      if (!ok) {
        ++skipped;
        continue;
      }
      f.index = taken++;
      files.push_back(std::move(f));
    }
  }
  bool shared_tokens = true;
  for (const heldout_file& f : files)
    for (std::size_t m = 1; m < M; ++m) shared_tokens = shared_tokens && f.ids[m] == f.ids[0];

  // Calibration rows: a stride over the even files' rows so that at most calib_rows are kept.
  std::vector<std::size_t> even_rows(M, 0);
  for (const heldout_file& f : files)
    if (f.index % 2 == 0)
      for (std::size_t m = 0; m < M; ++m) even_rows[m] += f.ids[m].size() - 1;
  std::vector<std::size_t> stride(M, 1), seen(M, 0);
  std::vector<ens::heldout_rows> calib(M);
  std::vector<std::vector<std::size_t>> calib_domain(M);
  for (std::size_t m = 0; m < M; ++m) {
    calib[m].vocab = ms[m].vocab;
    if (o.calib_rows > 0) stride[m] = std::max<std::size_t>(1, (even_rows[m] + o.calib_rows - 1) / o.calib_rows);
  }

  // The pass: even files first (they fit the temperatures), then odd ones.
  std::vector<std::vector<file_score>> sc(files.size(), std::vector<file_score>(M));
  std::vector<float> logits;
  const auto t_fwd = clock_type::now();
  std::size_t forwards = 0, tokens_fwd = 0;
  double fit_seconds = 0;
  for (int parity = 0; parity < 2; ++parity) {
    if (parity == 1 && o.calib_rows > 0) {  // fit the temperatures on the even files' rows
      const auto t_fit = clock_type::now();
      for (std::size_t m = 0; m < M; ++m) {
        auto fit = ens::fit_temperature(calib[m]);
        if (!fit.ok()) return fail(std::move(fit).take_error().with_context(ms[m].arg.name));
        ms[m].temperature = fit->temperature;
        ms[m].fit = *fit;
      }
      fit_seconds += seconds_since(t_fit);
    }
    for (std::size_t fi = 0; fi < files.size(); ++fi) {
      const heldout_file& f = files[fi];
      if (static_cast<int>(f.index % 2) != parity) continue;
      for (std::size_t m = 0; m < M; ++m) {
        const std::vector<std::int32_t>& ids = f.ids[m];
        const std::size_t T = ids.size(), row = ms[m].model.vocab(), V = ms[m].vocab;
        logits.resize(T * row);
        ens::member_session s = ms[m].model.new_session();
        // [T tokens] -> logits [T, row]: row r predicts ids[r + 1]
        if (auto st = s.forward(ids, T, logits.data(), cx); !st.ok()) return fail(std::move(st).with_context(f.name));
        ++forwards;
        tokens_fwd += T;
        file_score& out = sc[fi][m];
        out.nll.reserve(T - 1);
        const double cal_scale = 1.0 / ms[m].temperature;
        for (std::size_t r = 0; r + 1 < T; ++r) {
          const std::span<const float> z(logits.data() + r * row, V);
          const std::int32_t y = ids[r + 1];
          out.nll.push_back(slm::token_nll(z, y, 1.0));
          out.correct += static_cast<std::size_t>(std::max_element(z.begin(), z.end()) - z.begin()) == static_cast<std::size_t>(y);
          if (parity == 1 && o.calib_rows > 0) out.nll_cal.push_back(slm::token_nll(z, y, cal_scale));
          if (parity == 0 && o.calib_rows > 0 && seen[m]++ % stride[m] == 0) {
            calib[m].logits.insert(calib[m].logits.end(), z.begin(), z.end());
            calib[m].targets.push_back(y);
            calib_domain[m].push_back(f.domain);
          }
        }
      }
      if (forwards % (30 * M) == 0)
        std::fprintf(stderr, "bench_ensemble: %zu forwards, %.0f s\n", forwards, seconds_since(t_fwd));
    }
  }
  const double fwd_seconds = seconds_since(t_fwd) - fit_seconds;

  // ---- 1. the thesis table ----
  std::vector<std::size_t> nfiles(domains.size(), 0), ntok(domains.size(), 0), nbytes(domains.size(), 0);
  for (const heldout_file& f : files) {
    ++nfiles[f.domain];
    ntok[f.domain] += f.ids[0].size() - 1;
    nbytes[f.domain] += f.bytes[0];
  }
  std::printf("## Held-out text\n\n`%s`, files in sorted order, at most %zu per domain, each file's first %zu tokens "
              "(one forward per file per model, f32 activations, %zu threads); %zu files skipped (fewer than 2 tokens).\n\n",
              o.heldout.string().c_str(), o.files_per_domain, o.max_tokens, o.threads, skipped);
  std::printf("| domain | files | scored tokens | bytes |\n|---|---|---|---|\n");
  for (std::size_t d = 0; d < domains.size(); ++d)
    std::printf("| %s | %zu | %zu | %zu |\n", domains[d].c_str(), nfiles[d], ntok[d], nbytes[d]);
  std::printf("\n%zu forwards (%zu tokens) in %.1f s: %.0f tokens/s prefill with logits for every row.\n\n", forwards,
              tokens_fwd, fwd_seconds, tokens_fwd / fwd_seconds);

  std::vector<bpb_acc> per_model(M);
  std::vector<hit_acc> top1(M);
  std::vector<std::vector<double>> tok_correct(M, std::vector<double>(domains.size() + 1, 0)),
      tok_count(M, std::vector<double>(domains.size() + 1, 0));
  for (std::size_t fi = 0; fi < files.size(); ++fi)
    for (std::size_t m = 0; m < M; ++m) {
      const file_score& s = sc[fi][m];
      double n = 0;
      for (double x : s.nll) n += x;
      per_model[m].add(files[fi].domain, n, static_cast<double>(files[fi].bytes[m]));
      for (std::size_t d : {files[fi].domain, domains.size()}) {
        tok_correct[m][d] += static_cast<double>(s.correct);
        tok_count[m][d] += static_cast<double>(s.nll.size());
      }
    }
  std::vector<double> best(domains.size() + 1, INFINITY);
  for (const bpb_acc& a : per_model)
    for (std::size_t d = 0; d <= domains.size(); ++d) best[d] = std::min(best[d], a.bpb(d));
  std::printf("## 1. Bits per byte and top-1 accuracy of each model on each domain (all files; bold: best)\n\n");
  std::printf("| model (domain) |%s%s\n|---|", domain_header("bpb").c_str(), domain_header("top-1").c_str());
  for (std::size_t k = 0; k < 2 * (domains.size() + 1); ++k) std::printf("---|");
  std::printf("\n");
  for (std::size_t m = 0; m < M; ++m) {
    std::printf("| %s (%s) |%s", ms[m].arg.name.c_str(), ms[m].arg.domain.c_str(), bpb_cells(per_model[m], &best).c_str());
    for (std::size_t d = 0; d <= domains.size(); ++d) std::printf(" %.3f |", tok_correct[m][d] / tok_count[m][d]);
    std::printf("\n");
  }
  std::printf("\n");

  js.comma();
  js.key("heldout");
  js.s += "{";
  js.key("dir");
  js.str(o.heldout.string());
  js.comma();
  js.key("files_per_domain");
  js.num(static_cast<double>(o.files_per_domain));
  js.comma();
  js.key("forward_seconds");
  js.num(fwd_seconds);
  js.comma();
  js.key("models");
  js.s += "[";
  for (std::size_t m = 0; m < M; ++m) {
    js.comma();
    js.s += "{";
    js.key("name");
    js.str(ms[m].arg.name);
    js.comma();
    js.key("domain");
    js.str(ms[m].arg.domain);
    js.comma();
    js.key("dir");
    js.str(ms[m].arg.dir.string());
    for (std::size_t d = 0; d <= domains.size(); ++d) {
      const std::string dn = d < domains.size() ? domains[d] : "all";
      js.comma();
      js.key("bpb_" + dn);
      js.num(per_model[m].bpb(d));
      js.comma();
      js.key("top1_" + dn);
      js.num(tok_correct[m][d] / tok_count[m][d]);
    }
    js.s += "}";
  }
  js.s += "]";

  // ---- 2. routing ----
  std::vector<std::size_t> specialist(domains.size(), M);  // the first model of each domain
  for (std::size_t d = 0; d < domains.size(); ++d)
    for (std::size_t m = M; m-- > 0;)
      if (ms[m].arg.domain == domains[d]) specialist[d] = m;
  const bool can_route = std::find(specialist.begin(), specialist.end(), M) == specialist.end();
  if (!can_route) {
    std::printf("## 2. Routed ensemble: skipped (no model for every domain)\n\n");
  } else {
    std::vector<std::string> labels = domains;
    auto rules = ens::rules_router::with_defaults(labels);
    if (!rules.ok()) return fail(std::move(rules).take_error());
    auto clf = ens::classifier_router::load(o.router_file);
    if (!clf.ok()) return fail(std::move(clf).take_error().with_context(o.router_file.string()));
    std::vector<std::size_t> clf_to_domain;
    for (const std::string& l : clf->labels()) {
      const auto it = std::find(domains.begin(), domains.end(), l);
      if (it == domains.end()) return fail(slm::make_error(slm::errc::invalid_argument, "classifier label ", l, " is no domain"));
      clf_to_domain.push_back(static_cast<std::size_t>(it - domains.begin()));
    }
    struct routed {
      std::string name;
      bpb_acc bpb;
      hit_acc acc;
      double seconds = 0;
    };
    std::vector<routed> rs = {{"oracle (the file's domain)", {}, {}, 0},
                              {"rules, file name + content", {}, {}, 0},
                              {"rules, content only", {}, {}, 0},
                              {"classifier (" + o.router_file.filename().string() + ")", {}, {}, 0},
                              {"perplexity, whole scored text", {}, {}, 0},
                              {"perplexity, first " + std::to_string(o.prefix_tokens) + " tokens", {}, {}, 0}};
    for (std::size_t fi = 0; fi < files.size(); ++fi) {
      const heldout_file& f = files[fi];
      std::size_t pick[6];
      pick[0] = f.domain;
      auto t0 = clock_type::now();
      auto a = rules->route({f.route_text, f.name});
      rs[1].seconds += seconds_since(t0);
      t0 = clock_type::now();
      auto b = rules->route({f.route_text, {}});
      rs[2].seconds += seconds_since(t0);
      t0 = clock_type::now();
      auto c = clf->route({f.route_text, {}});
      rs[3].seconds += seconds_since(t0);
      if (!a.ok() || !b.ok() || !c.ok()) return fail(slm::make_error(slm::errc::invalid_argument, "routing ", f.name));
      pick[1] = a->best();
      pick[2] = b->best();
      pick[3] = clf_to_domain[c->best()];
      // perplexity: the specialist with the lowest bits/byte (whole text) or NLL (prefix)
      double best_whole = INFINITY, best_prefix = INFINITY;
      pick[4] = pick[5] = 0;
      for (std::size_t d = 0; d < domains.size(); ++d) {
        const std::size_t m = specialist[d];
        double whole = 0, prefix = 0;
        for (std::size_t t = 0; t < sc[fi][m].nll.size(); ++t) {
          whole += sc[fi][m].nll[t];
          if (t < o.prefix_tokens) prefix += sc[fi][m].nll[t];
        }
        whole /= static_cast<double>(f.bytes[m]);
        if (whole < best_whole) best_whole = whole, pick[4] = d;
        if (prefix < best_prefix) best_prefix = prefix, pick[5] = d;
      }
      for (std::size_t k = 0; k < rs.size(); ++k) {
        const std::size_t m = specialist[pick[k]];
        double n = 0;
        for (double x : sc[fi][m].nll) n += x;
        rs[k].bpb.add(f.domain, n, static_cast<double>(f.bytes[m]));
        rs[k].acc.add(f.domain, pick[k] == f.domain);
      }
    }
    std::vector<double> rbest(domains.size() + 1, INFINITY);
    for (const routed& r : rs)
      for (std::size_t d = 0; d <= domains.size(); ++d) rbest[d] = std::min(rbest[d], r.bpb.bpb(d));
    std::printf("## 2. Routed ensemble (top-1: the picked domain's specialist scores the file; all files)\n\n");
    std::printf("Specialists:");
    for (std::size_t d = 0; d < domains.size(); ++d) std::printf(" %s -> %s;", domains[d].c_str(), ms[specialist[d]].arg.name.c_str());
    std::printf(" perplexity routing compares the specialists' NLL of the same tokens (whole text: it has seen the text it is "
                "scored on, so it is the per-file best specialist).\n\n");
    std::printf("| router |%s%s us/file |\n|---|", domain_header("accuracy").c_str(), domain_header("bpb").c_str());
    for (std::size_t k = 0; k < 2 * (domains.size() + 1) + 1; ++k) std::printf("---|");
    std::printf("\n");
    for (std::size_t k = 0; k < rs.size(); ++k) {
      std::printf("| %s |", rs[k].name.c_str());
      for (std::size_t d = 0; d <= domains.size(); ++d) std::printf(" %.3f |", rs[k].acc.rate(d));
      std::printf("%s", bpb_cells(rs[k].bpb, &rbest).c_str());
      if (k >= 1 && k <= 3) std::printf(" %.0f |\n", 1e6 * rs[k].seconds / static_cast<double>(files.size()));
      else std::printf(" - |\n");
    }
    std::printf("\n");
    js.comma();
    js.key("routing");
    js.s += "[";
    for (const routed& r : rs) {
      js.comma();
      js.s += "{";
      js.key("router");
      js.str(r.name);
      for (std::size_t d = 0; d <= domains.size(); ++d) {
        const std::string dn = d < domains.size() ? domains[d] : "all";
        js.comma();
        js.key("accuracy_" + dn);
        js.num(r.acc.rate(d));
        js.comma();
        js.key("bpb_" + dn);
        js.num(r.bpb.bpb(d));
      }
      js.s += "}";
    }
    js.s += "]";
  }

  // ---- 3. token-level mixing ----
  if (!shared_tokens) {
    std::printf("## 3. Token-level mixing: skipped (the models do not tokenize the files alike)\n\n");
  } else {
    // EM inputs: log p of every even token (T = 1), all domains and per domain.
    std::vector<double> lp_all;
    std::vector<std::vector<double>> lp_dom(domains.size());
    for (std::size_t fi = 0; fi < files.size(); ++fi) {
      if (files[fi].index % 2 != 0) continue;
      for (std::size_t t = 0; t < sc[fi][0].nll.size(); ++t)
        for (std::size_t m = 0; m < M; ++m) {
          lp_all.push_back(-sc[fi][m].nll[t]);
          lp_dom[files[fi].domain].push_back(-sc[fi][m].nll[t]);
        }
    }
    for (double& x : lp_all) x = std::min(x, 0.0);  // token_nll may round to -1e-17
    for (auto& v : lp_dom)
      for (double& x : v) x = std::min(x, 0.0);
    auto w_all = ens::fit_mixture_weights(lp_all, M);
    if (!w_all.ok()) return fail(std::move(w_all).take_error());
    std::vector<ens::weight_fit> w_dom;
    for (std::size_t d = 0; d < domains.size(); ++d) {
      if (lp_dom[d].empty()) return fail(slm::make_error(slm::errc::invalid_argument, "no even files in ", domains[d]));
      auto w = ens::fit_mixture_weights(lp_dom[d], M);
      if (!w.ok()) return fail(std::move(w).take_error());
      w_dom.push_back(std::move(*w));
    }
    // Calibrated: EM on the calibration rows at the fitted temperatures.
    const bool calibrated = o.calib_rows > 0;
    std::optional<ens::weight_fit> wc_all;
    std::vector<ens::weight_fit> wc_dom;
    if (calibrated) {
      const std::size_t R = calib[0].size();
      std::vector<double> lpc(R * M);
      std::vector<std::vector<double>> lpc_dom(domains.size());
      for (std::size_t m = 0; m < M; ++m) calib[m].target_log_probs(ms[m].temperature, m, M, lpc);
      for (double& x : lpc) x = std::min(x, 0.0);
      for (std::size_t r = 0; r < R; ++r)
        lpc_dom[calib_domain[0][r]].insert(lpc_dom[calib_domain[0][r]].end(), lpc.begin() + static_cast<std::ptrdiff_t>(r * M),
                                           lpc.begin() + static_cast<std::ptrdiff_t>((r + 1) * M));
      auto w = ens::fit_mixture_weights(lpc, M);
      if (!w.ok()) return fail(std::move(w).take_error());
      wc_all = std::move(*w);
      for (std::size_t d = 0; d < domains.size(); ++d) {
        auto wd = ens::fit_mixture_weights(lpc_dom[d], M);
        if (!wd.ok()) return fail(std::move(wd).take_error());
        wc_dom.push_back(std::move(*wd));
      }
      std::printf("## 3a. Per-member temperature (fit_temperature on %zu rows of the even files, every %zu-th row)\n\n",
                  calib[0].size(), stride[0]);
      std::printf("| model | T | NLL at T=1 (nats/token) | NLL at T |\n|---|---|---|---|\n");
      for (std::size_t m = 0; m < M; ++m)
        std::printf("| %s | %.3f%s | %.4f | %.4f |\n", ms[m].arg.name.c_str(), ms[m].temperature,
                    ms[m].fit->at_bound ? " (at bound)" : "", ms[m].fit->nll_at_1, ms[m].fit->nll);
      std::printf("\n");
    }
    for (auto& h : calib) h = ens::heldout_rows{};  // free the rows

    // Evaluation on the odd files.
    const auto eval = [&](const std::vector<double>& w, bool cal, bpb_acc& out, std::optional<std::size_t> only_domain) {
      std::vector<double> log_w(M), lp(M);
      for (std::size_t m = 0; m < M; ++m) log_w[m] = w[m] > 0 ? std::log(w[m]) : -INFINITY;
      for (std::size_t fi = 0; fi < files.size(); ++fi) {
        if (files[fi].index % 2 != 1 || (only_domain && files[fi].domain != *only_domain)) continue;
        double n = 0;
        for (std::size_t t = 0; t < sc[fi][0].nll.size(); ++t) {
          for (std::size_t m = 0; m < M; ++m) lp[m] = -(cal ? sc[fi][m].nll_cal[t] : sc[fi][m].nll[t]);
          n -= log_sum_exp_mix(log_w, lp);
        }
        out.add(files[fi].domain, n, static_cast<double>(files[fi].bytes[0]));
      }
    };
    struct row {
      std::string name;
      bpb_acc a;
    };
    std::vector<row> rows;
    for (std::size_t m = 0; m < M; ++m) {
      std::vector<double> w(M, 0.0);
      w[m] = 1;
      row r{ms[m].arg.name + " alone", {}};
      eval(w, false, r.a, std::nullopt);
      rows.push_back(std::move(r));
    }
    if (can_route) {
      row r{"specialist of the file's domain (oracle routing)", {}};
      for (std::size_t d = 0; d < domains.size(); ++d) {
        std::vector<double> w(M, 0.0);
        w[specialist[d]] = 1;
        eval(w, false, r.a, d);
      }
      rows.push_back(std::move(r));
    }
    {
      row r{"mix, one weight set (EM on even files, all domains), T = 1", {}};
      eval(w_all->weights, false, r.a, std::nullopt);
      rows.push_back(std::move(r));
    }
    if (calibrated) {
      row r{"mix, one weight set, calibrated T", {}};
      eval(wc_all->weights, true, r.a, std::nullopt);
      rows.push_back(std::move(r));
    }
    {
      row r{"mix per domain (oracle domain, EM per domain), T = 1", {}};
      for (std::size_t d = 0; d < domains.size(); ++d) eval(w_dom[d].weights, false, r.a, d);
      rows.push_back(std::move(r));
    }
    if (calibrated) {
      row r{"mix per domain, calibrated T", {}};
      for (std::size_t d = 0; d < domains.size(); ++d) eval(wc_dom[d].weights, true, r.a, d);
      rows.push_back(std::move(r));
    }
    std::vector<double> mbest(domains.size() + 1, INFINITY);
    for (const row& r : rows)
      for (std::size_t d = 0; d <= domains.size(); ++d) mbest[d] = std::min(mbest[d], r.a.bpb(d));
    std::printf("## 3b. Token-level mixing: bits per byte on the odd-indexed files (weights fitted on the even ones)\n\n");
    std::printf("| predictor |%s\n|---|", domain_header("bpb").c_str());
    for (std::size_t k = 0; k <= domains.size(); ++k) std::printf("---|");
    std::printf("\n");
    for (const row& r : rows) std::printf("| %s |%s\n", r.name.c_str(), bpb_cells(r.a, &mbest).c_str());
    std::printf("\n## 3c. Mixture weights (EM)\n\n| fitted on |");
    for (const member& m : ms) std::printf(" %s |", m.arg.name.c_str());
    std::printf(" mean log-lik (nats/token) |\n|---|");
    for (std::size_t m = 0; m <= M; ++m) std::printf("---|");
    std::printf("\n");
    const auto wrow = [&](const std::string& name, const ens::weight_fit& w) {
      std::printf("| %s |", name.c_str());
      for (double x : w.weights) std::printf(" %.3f |", x);
      std::printf(" %.4f |\n", w.mean_log_likelihood);
    };
    wrow("all domains, T = 1", *w_all);
    for (std::size_t d = 0; d < domains.size(); ++d) wrow(domains[d] + ", T = 1", w_dom[d]);
    if (calibrated) {
      wrow("all domains, calibrated T", *wc_all);
      for (std::size_t d = 0; d < domains.size(); ++d) wrow(domains[d] + ", calibrated T", wc_dom[d]);
    }
    std::printf("\n");

    js.comma();
    js.key("temperatures");
    js.s += "{";
    for (std::size_t m = 0; m < M; ++m) {
      js.comma();
      js.key(ms[m].arg.name);
      js.num(ms[m].temperature);
    }
    js.s += "}";
    js.comma();
    js.key("mixing_odd_files");
    js.s += "[";
    for (const row& r : rows) {
      js.comma();
      js.s += "{";
      js.key("predictor");
      js.str(r.name);
      for (std::size_t d = 0; d <= domains.size(); ++d) {
        js.comma();
        js.key("bpb_" + (d < domains.size() ? domains[d] : std::string("all")));
        js.num(r.a.bpb(d));
      }
      js.s += "}";
    }
    js.s += "]";
    js.comma();
    js.key("weights");
    js.s += "{";
    const auto jw = [&](const std::string& k, const ens::weight_fit& w) {
      js.comma();
      js.key(k);
      js.s += "[";
      for (double x : w.weights) {
        js.comma();
        js.num(x);
      }
      js.s += "]";
    };
    jw("all", *w_all);
    for (std::size_t d = 0; d < domains.size(); ++d) jw(domains[d], w_dom[d]);
    if (calibrated) {
      jw("all_calibrated", *wc_all);
      for (std::size_t d = 0; d < domains.size(); ++d) jw(domains[d] + "_calibrated", wc_dom[d]);
    }
    js.s += "}";
  }
  js.s += "}";
  std::printf("Held-out part: %.1f s in all (forwards %.1f s, temperature fits %.1f s).\n\n", seconds_since(t_all),
              fwd_seconds, fit_seconds);
  return 0;
}

// ---- 4. strategies -----------------------------------------------------------------------

struct prompt_case {
  const char* domain;
  const char* text;
};
const prompt_case prompts[] = {
    {"cpp",
     "#include <string>\n#include <vector>\n\n// Splits s at spaces.\n"
     "std::vector<std::string> split(const std::string& s) {\n  std::vector<std::string> out;\n  for (char c : s) {\n"},
    {"cmake",
     "cmake_minimum_required(VERSION 3.16)\nproject(demo LANGUAGES CXX)\n\nset(CMAKE_CXX_STANDARD 20)\n\n"
     "add_library(demo_core STATIC src/core.cpp)\ntarget_include_directories(demo_core PUBLIC include)\n"},
    {"shell",
     "#!/bin/sh\nset -e\n\nCONF_DIR=/etc/demo\nif [ ! -d \"$CONF_DIR\" ]; then\n    mkdir -p \"$CONF_DIR\"\nfi\n"
     "for f in default.conf local.conf; do\n"},
};

// models/ensemble.json with its "router" / "strategy" sections replaced, member paths
// resolved against the file's directory (ensemble_config::parse with that base).
slm::result<ens::ensemble> make_ensemble(const fs::path& file, std::string_view router_json, std::string_view strategy_json) {
  auto text = slm::read_text_file(file, std::size_t{1} << 20);
  if (!text.ok()) return std::move(text).take_error();
  auto doc = slm::json::parse(*text);
  if (!doc.ok()) return std::move(doc).take_error().with_context(file.string());
  if (!router_json.empty()) {
    auto r = slm::json::parse(router_json);
    if (!r.ok()) return std::move(r).take_error();
    doc->set("router", std::move(*r));
  }
  auto s = slm::json::parse(strategy_json);
  if (!s.ok()) return std::move(s).take_error();
  doc->set("strategy", std::move(*s));
  auto cfg = ens::ensemble_config::parse(slm::json::dump(*doc), file.parent_path());
  if (!cfg.ok()) return std::move(cfg).take_error().with_context(file.string());
  return ens::ensemble::create(std::move(*cfg));
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run_strategies(const options& o, slm::compute_context& cx, json_out& js) {
  const auto t_all = clock_type::now();
  struct strategy_case {
    const char* name;
    const char* json;
  };
  const strategy_case cases[] = {
      {"top1", R"({"kind": "top1"})"},
      {"top2", R"({"kind": "top2"})"},
      {"mix", R"({"kind": "mix"})"},
      {"cascade", R"({"kind": "cascade"})"},
      {"vote", R"({"kind": "vote"})"},
      {"refine", R"({"kind": "refine", "drafter": "shell", "reviewer": "cpp"})"},
      {"speculative", R"({"kind": "speculative", "drafter": "cmake", "target": "cpp", "draft_tokens": 2})"},
  };
  // prompt token counts (the cpp member's tokenizer)
  std::printf("## 4. Strategy cost (`%s`, its router; 64 greedy tokens, cascade / vote one line; median of %zu "
              "interleaved rounds after a warm-up round; %zu thread%s, f32 activations)\n\nPrompts:",
              o.ensemble_file.filename().string().c_str(), o.reps, o.threads, o.threads == 1 ? ": serial" : "s");
  {
    auto e = make_ensemble(o.ensemble_file, {}, R"({"kind": "top1"})");
    if (!e.ok()) return fail(std::move(e).take_error());
    auto m = e->members().acquire(0);
    if (!m.ok()) return fail(std::move(m).take_error());
    for (const prompt_case& p : prompts) {
      auto ids = (*m)->tok->encode(p.text);
      std::printf(" %s %zu tokens;", p.domain, ids.ok() ? ids->size() : 0);
    }
  }
  std::printf("\n\n| strategy | prompt | members that ran | tokens | seconds | tokens/s | route ms | detail |\n"
              "|---|---|---|---|---|---|---|---|\n");
  // Every (strategy, prompt) case once as a warm-up (maps the members), then `reps` rounds
  // over all cases: a burst of load from elsewhere on the machine hits every case alike.
  struct result_case {
    const strategy_case* c;
    const prompt_case* p;
    std::vector<double> secs, route;
    std::optional<ens::response> last;
  };
  std::vector<ens::ensemble> es;
  std::vector<result_case> rc_all;
  for (const strategy_case& c : cases) {
    auto e = make_ensemble(o.ensemble_file, {}, c.json);
    if (!e.ok()) return fail(std::move(e).take_error().with_context(c.name));
    es.push_back(std::move(*e));
    for (const prompt_case& p : prompts) rc_all.push_back(result_case{&c, &p, {}, {}, std::nullopt});
  }
  for (std::size_t rep = 0; rep <= o.reps; ++rep)
    for (std::size_t k = 0; k < rc_all.size(); ++k) {
      result_case& x = rc_all[k];
      ens::request q;
      q.prompt = x.p->text;
      q.max_new_tokens = 64;
      auto r = es[k / std::size(prompts)].run(q, cx);
      if (!r.ok())
        return fail(std::move(r).take_error().with_context(std::string(x.c->name) + " on the " + x.p->domain + " prompt"));
      if (rep > 0) {
        x.secs.push_back(r->seconds);
        x.route.push_back(r->route_seconds);
      }
      x.last = std::move(*r);
    }
  js.comma();
  js.key("strategies");
  js.s += "[";
  for (result_case& x : rc_all) {
    std::string who;
    for (const std::string& n : x.last->members) who += (who.empty() ? "" : "+") + n;
    const double s = median(x.secs);
    std::string detail = x.last->detail;
    for (char& ch : detail)
      if (ch == '|') ch = '/';
    std::printf("| %s | %s | %s | %zu | %.3f | %.1f | %.2f | %s |\n", x.c->name, x.p->domain, who.c_str(), x.last->tokens,
                s, static_cast<double>(x.last->tokens) / s, 1e3 * median(x.route), detail.c_str());
    js.comma();
    js.s += "{";
    js.key("strategy");
    js.str(x.c->name);
    js.comma();
    js.key("prompt");
    js.str(x.p->domain);
    js.comma();
    js.key("members");
    js.str(who);
    js.comma();
    js.key("tokens");
    js.num(static_cast<double>(x.last->tokens));
    js.comma();
    js.key("seconds");
    js.num(s);
    js.comma();
    js.key("route_seconds");
    js.num(median(x.route));
    js.s += "}";
  }
  js.s += "]";

  // Route-only latency per router kind.
  struct router_case {
    const char* name;
    std::string json;
  };
  const router_case routers[] = {
      {"rules", R"({"kind": "rules", "default": "cpp"})"},
      {"classifier", R"({"kind": "classifier", "file": ")" + o.router_file.string() + R"(", "default": "cpp"})"},
      {"perplexity", R"({"kind": "perplexity", "default": "cpp"})"},
  };
  std::printf("\nRoute only (`ensemble::route`, median of %zu after a warm-up that maps the members), milliseconds:\n\n"
              "| router | cpp prompt | cmake prompt | shell prompt | picks |\n|---|---|---|---|---|\n",
              o.reps);
  js.comma();
  js.key("route_ms");
  js.s += "{";
  for (const router_case& rc : routers) {
    auto e = make_ensemble(o.ensemble_file, rc.json, R"({"kind": "top1"})");
    if (!e.ok()) return fail(std::move(e).take_error().with_context(rc.name));
    std::printf("| %s |", rc.name);
    std::string picks;
    js.comma();
    js.key(rc.name);
    js.s += "[";
    for (const prompt_case& p : prompts) {
      std::vector<double> secs;
      std::size_t best = 0;
      for (std::size_t rep = 0; rep <= o.reps; ++rep) {
        const auto t0 = clock_type::now();
        auto d = e->route(ens::route_request{p.text, {}}, cx);
        const double s = seconds_since(t0);
        if (!d.ok()) return fail(std::move(d).take_error().with_context(rc.name));
        best = d->best();
        if (rep > 0) secs.push_back(s);
      }
      std::printf(" %.3f |", 1e3 * median(secs));
      picks += (picks.empty() ? "" : ", ") + e->config().members[best].name;
      js.comma();
      js.num(1e3 * median(secs));
    }
    js.s += "]";
    std::printf(" %s |\n", picks.c_str());
  }
  js.s += "}";
  std::printf("\nStrategy part: %.1f s.\n\n", seconds_since(t_all));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  auto o = parse_args(argc, argv);
  if (!o) {
    std::fprintf(stderr,
                 "usage: bench_ensemble [--model NAME=DIR[:DOMAIN]]... [--heldout DIR] [--files-per-domain N] [--json FILE]\n"
                 "                      [--threads N] [--calib-rows N] [--max-tokens N] [--router FILE] [--ensemble FILE]\n"
                 "                      [--reps N] [--no-strategies] [--no-thesis]\n");
    return 2;
  }
  auto pool = slm::thread_pool::create(o->threads);
  if (!pool.ok()) return fail(std::move(pool).take_error());
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;
  json_out js;
  js.s = "{";
  js.key("threads");
  js.num(static_cast<double>(o->threads));
  std::printf("# bench_ensemble\n\nModels:");
  for (const model_arg& m : o->models) std::printf(" %s = %s (%s);", m.name.c_str(), m.dir.string().c_str(), m.domain.c_str());
  std::printf(" thread_pool of %zu threads, f32 activations.\n\n", o->threads);
  if (o->thesis)
    if (int rc = run_thesis(*o, cx, js); rc != 0) return rc;
  if (o->strategies)
    if (int rc = run_strategies(*o, cx, js); rc != 0) return rc;
  js.s += "}\n";
  if (!o->json_file.empty()) {
    std::ofstream out(o->json_file, std::ios::binary);
    out << js.s;
    if (!out) {
      std::fprintf(stderr, "bench_ensemble: cannot write %s\n", o->json_file.c_str());
      return 1;
    }
  }
  return 0;
}
