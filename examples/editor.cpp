// examples/editor.cpp - an editor plugin's completion loop, replayed: type the characters of
// a real source file one keystroke at a time, ask for an infill completion after each,
// and print each keystroke's latency to the first token. It runs the same keystrokes
// twice: through one completion_engine (prefix reuse and recurrent-state checkpoints),
// and with the engine's cache cleared before every request (a fresh prefill each time,
// which is what a host without the engine pays).
//
//   example_editor MODEL_DIR FILE [--at OFFSET] [--keys N] [--window CHARS]
//                  [--suffix CHARS] [-n TOKENS] [--threads T] [--quiet]
//
// The cursor starts at OFFSET (default: the middle of the file, at a line start), and the
// next N characters (default 32) are typed there. The prompt holds up to CHARS characters
// before the cursor (default 1500, fewer where the model's context needs it). Its window starts at a fixed place, as editors keep it,
// so that typing only appends. It holds up to --suffix characters after the cursor (default
// 300). Each request generates up to TOKENS tokens (default 16) under the line rules of an
// editor: stop at a line indented less than the cursor's.
//
// The summary's lines are the bench figures of bench/README.md ("The completion engine"):
// median and p95 keystroke-to-first-token with and without reuse, the median of the prompt
// tokens computed per keystroke, and the cache's bytes.
#include <slm/generate/completion.hpp>
#include <slm/models/any_model.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

int fail(const slm::status& s) {
  std::fprintf(stderr, "example_editor: %s\n", s.to_string().c_str());
  return 1;
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t i = std::min(v.size() - 1, static_cast<std::size_t>(q * static_cast<double>(v.size() - 1) + 0.5));
  return v[i];
}

struct run_figures {
  std::vector<double> first_token_ms;
  std::vector<double> computed;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: example_editor MODEL_DIR FILE [--at OFFSET] [--keys N] [--window CHARS] [--suffix CHARS] "
                 "[-n TOKENS] [--threads T] [--quiet]\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "example_editor: cannot read %s\n", argv[2]);
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  std::size_t at = file.size() / 2, keys = 32, window = 1500, suffix_chars = 300, n = 16, threads = 2;
  bool quiet = false;
  bool at_given = false;
  for (int i = 3; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--quiet") {
      quiet = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "example_editor: %s needs a value\n", argv[i]);
      return 2;
    }
    const std::size_t v = std::strtoul(argv[++i], nullptr, 10);
    if (flag == "--at") at = v, at_given = true;
    else if (flag == "--keys") keys = v;
    else if (flag == "--window") window = v;
    else if (flag == "--suffix") suffix_chars = v;
    else if (flag == "-n") n = v;
    else if (flag == "--threads") threads = v;
    else {
      std::fprintf(stderr, "example_editor: unknown option %s\n", argv[i - 1]);
      return 2;
    }
  }
  if (!at_given)  // a line start: the keystrokes type a line of the file
    if (const std::size_t nl = file.rfind('\n', at); nl != std::string::npos) at = nl + 1;
  at = std::min(at, file.size());
  keys = std::min(keys, file.size() - at);

  auto tok = slm::tokenizer::load_dir(dir);
  if (!tok.ok()) return fail(tok.error());
  auto model = slm::any_model::load(dir);
  if (!model.ok()) return fail(model.error());
  auto pool = slm::thread_pool::create(threads);
  if (!pool.ok()) return fail(pool.error());
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;

  std::size_t window_start = at > window ? at - window : 0;
  auto request_at = [&](std::size_t cursor) -> slm::result<slm::completion_request> {
    slm::infill_input fi;
    fi.prefix = file.substr(window_start, cursor - window_start);
    fi.suffix = file.substr(at + keys, suffix_chars);  // the text after what is typed
    auto r = slm::infill_request(*tok, fi);
    if (!r.ok()) return r;
    r->max_tokens = n;
    r->key = "file";
    return r;
  };

  // The window shrinks until the last keystroke's prompt and the tokens to generate fit
  // the model's context (512 tokens for the bundled model).
  const std::size_t context = model->new_session().max_tokens();
  for (;;) {
    auto last = request_at(at + keys);
    if (!last.ok()) return fail(last.error());
    if (last->prompt.size() + n <= context) break;
    if (window_start >= at) {
      std::fprintf(stderr, "example_editor: the suffix and typed text alone exceed the context of %zu tokens\n", context);
      return 1;
    }
    window_start += std::max<std::size_t>(1, (at - window_start) / 10);
    if (const std::size_t nl = file.find('\n', window_start); nl != std::string::npos && nl < at) window_start = nl + 1;
  }
  window = at - window_start;

  slm::completion_engine engine(*model, &*tok);
  run_figures with, without;
  std::uint64_t cache_bytes = 0;
  std::size_t checkpoints = 0;
  std::size_t prompt_tokens = 0;
  for (int pass = 0; pass < 2; ++pass) {
    const bool reuse = pass == 0;
    run_figures& fig = reuse ? with : without;
    engine.clear();
    for (std::size_t k = 0; k <= keys; ++k) {
      auto req = request_at(at + k);
      if (!req.ok()) return fail(req.error());
      if (!reuse) engine.clear();
      auto r = engine.complete(*req, cx);
      if (!r.ok()) return fail(r.error());
      prompt_tokens = r->prompt_tokens;
      if (k == 0) continue;  // the first request of a pass is a fresh prefill either way
      fig.first_token_ms.push_back(1e3 * r->first_token_seconds);
      fig.computed.push_back(static_cast<double>(r->computed_tokens));
      if (reuse) {
        const slm::completion_stats st = engine.stats();
        if (st.cache_bytes > cache_bytes) cache_bytes = st.cache_bytes, checkpoints = st.checkpoints;
      }
      if (!quiet) {
        std::string text = r->text.substr(0, 40);
        std::replace(text.begin(), text.end(), '\n', ' ');
        std::printf("%s key %3zu: %4zu prompt tokens, %4zu computed, first token %7.2f ms, %-5s \"%s\"\n",
                    reuse ? "reuse" : "fresh", k, r->prompt_tokens, r->computed_tokens, 1e3 * r->first_token_seconds,
                    std::string(slm::to_string(r->reason)).c_str(), text.c_str());
      }
    }
  }
  std::printf("keystrokes: %zu, prompt: %zu tokens (window %zu chars, suffix %zu chars), %zu threads\n", keys,
              prompt_tokens, window, suffix_chars, threads);
  std::printf("first token with reuse: median %.2f ms, p95 %.2f ms; computed tokens median %.0f, max %.0f\n",
              percentile(with.first_token_ms, 0.5), percentile(with.first_token_ms, 0.95), percentile(with.computed, 0.5),
              percentile(with.computed, 1.0));
  std::printf("first token fresh:      median %.2f ms, p95 %.2f ms; computed tokens median %.0f\n",
              percentile(without.first_token_ms, 0.5), percentile(without.first_token_ms, 0.95),
              percentile(without.computed, 0.5));
  const double speedup = percentile(with.first_token_ms, 0.5) > 0
                             ? percentile(without.first_token_ms, 0.5) / percentile(with.first_token_ms, 0.5)
                             : 0;
  std::printf("reuse speedup (median first token): %.1fx; cache %.2f MiB at most (%zu checkpoints and the idle sessions)\n",
              speedup, static_cast<double>(cache_bytes) / (1024.0 * 1024.0), checkpoints);
  return 0;
}
