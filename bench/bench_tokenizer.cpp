// Tokenizer throughput on source code: for each tokenizer in tests/data/tokenizers, the
// pre-tokenizer regex alone (slm::regex::search, one match per call, resuming at the
// previous match end, as the tokenizer calls it) and the whole encode (slm::tokenizer::
// encode with one reused slm::encode_scratch), single-threaded, in MB/s of input text.
// The read-bandwidth probe of the same run is printed for context (a tokenizer is far
// from memory-bound: the ratio says how far).
//
//   build/bin/bench_tokenizer [--repeats N] [--file PATH | --many-added]
//   Then a tokenizer with many added tokens sharing a first byte (the bundled model's plus
//   6300 `<unusedN>`, as Gemma 3 has): its load time and encode MB/s on ~1 MB of HTML/XML
//   (--many-added: that case alone).
//   default text: the concatenation of /usr/include/c++/*/bits/*.h (skipped with a message
//   when absent); env: SLM_PROBE_MIB (default 1024)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/core/parallel.hpp"
#include "slm/kernels/probes.hpp"
#include "slm/text/regex.hpp"
#include "slm/text/tokenizer.hpp"

namespace {

// The C++ standard library's headers: a few MB of real code.
std::string default_text() {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& dir : fs::directory_iterator("/usr/include/c++", ec)) {
    const fs::path bits = dir.path() / "bits";
    if (!fs::is_directory(bits, ec)) continue;
    for (const auto& f : fs::directory_iterator(bits, ec))
      if (f.path().extension() == ".h") files.push_back(f.path());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files)
    if (auto t = slm::read_text_file(f)) text += *t;
  return text;
}

// The regex of the first regex pre-tokenizer (Split with a Regex, or ByteLevel with
// use_regex: the GPT-2 pattern), or "".
std::string pre_tokenizer_pattern(const slm::json::value& p) {
  const std::string_view type = p.get_string("type");
  if (type == "Sequence") {
    for (const auto& q : p["pretokenizers"].items())
      if (auto s = pre_tokenizer_pattern(q); !s.empty()) return s;
    return {};
  }
  if (type == "Split") return std::string(p["pattern"].get_string("Regex"));
  if (type == "ByteLevel" && p.get_bool("use_regex", true))
    return R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
  return {};
}

// Every match over the text as the tokenizer finds them; returns the number of matches.
std::size_t count_matches(const slm::regex& re, std::string_view s) {
  std::size_t n = 0, from = 0, last_match_end = std::string_view::npos;
  while (from <= s.size()) {
    std::size_t b = 0, e = 0;
    if (!re.search(s, from, b, e)) break;
    if (b == e && e == last_match_end) {  // HF skips an empty match right after a match
      if (from >= s.size()) break;
      std::size_t len = 1;
      slm::unicode::decode(s, from, len);
      from += len;
      continue;
    }
    from = last_match_end = e;
    ++n;
    if (b == e && e >= s.size()) break;
  }
  return n;
}

// Best of `repeats` runs of f(), in seconds.
template <class F>
double best_seconds(int repeats, F&& f) {
  double best = 1e300;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, slm::seconds_since(t0));
  }
  return best;
}

// ---- Many added tokens sharing a first byte (Gemma 3's ~6300 `<unusedN>`) ----

// `base` (a tokenizer.json) with `n` more added tokens `<unused0>`..`<unusedN-1>` and a few
// chat markers, ids from `first_id` on, non-special and not normalized (matched on the raw
// text, as Gemma's are).
std::string with_many_added_tokens(const std::string& base, std::int32_t first_id, int n) {
  std::string entries;
  auto add = [&](const std::string& content) {
    if (!entries.empty()) entries += ",";
    entries += "{\"id\":" + std::to_string(first_id++) + ",\"content\":\"" + content +
               "\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":false,\"special\":false}";
  };
  for (int i = 0; i < n; ++i) add("<unused" + std::to_string(i) + ">");
  for (const char* t : {"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"}) add(t);
  std::string out = base;
  const std::size_t key = out.find("\"added_tokens\"");
  const std::size_t open = key == std::string::npos ? key : out.find('[', key);
  if (open == std::string::npos) return {};
  const std::size_t next = out.find_first_not_of(" \t\r\n", open + 1);
  out.insert(open + 1, next != std::string::npos && out[next] == ']' ? entries : entries + ",");
  return out;
}

// About `bytes` of HTML/XML-like text: many '<', an occasional added token.
std::string html_text(std::size_t bytes) {
  std::string t;
  for (std::size_t i = 0; t.size() < bytes; ++i) {
    const std::string k = std::to_string(i);
    t += "<div class=\"row r" + k + "\" id=\"n" + k + "\"><span title='x'>item " + k + " &lt;" + k +
         "&gt;</span> <a href=\"/p/" + k + "?q=1&amp;s=2\">link</a><br/></div>\n";
    if (i % 7 == 0) t += "<?xml version=\"1.0\"?><root><node attr=\"" + k + "\"/><!-- c --></root>\n";
    if (i % 11 == 0) t += "<start_of_turn>user <unused" + std::to_string(i % 6300) + "> <unused1 <unused12> x<end_of_turn>\n";
  }
  return t;
}

// Load time and encode throughput of the bundled model's tokenizer with 6300 extra added
// tokens, on ~1 MB of HTML/XML; the plain tokenizer on the same text for reference.
int many_added_tokens_case(int repeats) {
  const std::string path = std::string(SLM_BENCH_DATA_DIR) + "/tokenizers/nam56r_cpp/tokenizer.json";
  auto base_text = slm::read_text_file(path, std::size_t{512} << 20);
  if (!base_text) return 1;
  auto base = slm::tokenizer::parse(*base_text);
  if (!base) return 1;
  const std::string json = with_many_added_tokens(*base_text, static_cast<std::int32_t>(base->vocab_size()), 6300);
  const std::string text = html_text(std::size_t{1} << 20);
  const double mb = static_cast<double>(text.size()) / 1e6;
  std::optional<slm::tokenizer> many;
  const double load_s = best_seconds(repeats, [&] {
    auto t = slm::tokenizer::parse(json);
    if (!t) std::fprintf(stderr, "error: %s\n", t.error().to_string().c_str());
    else many = std::move(*t);
  });
  if (!many) return 1;
  const double plain_load_s = best_seconds(repeats, [&] { (void)slm::tokenizer::parse(*base_text); });
  std::printf("\nmany added tokens: nam56r_cpp + %zu added tokens (6300 <unusedN>), %.2f MB of HTML/XML\n",
              many->added_tokens().size(), mb);
  std::printf("%-18s %12s %12s %12s\n", "tokenizer", "load ms", "tokens", "encode MB/s");
  for (const slm::tokenizer* t : {&*base, &*many}) {
    slm::encode_scratch scratch;
    std::vector<std::int32_t> ids;
    const double encode_s = best_seconds(repeats, [&] {
      ids.clear();
      if (auto s = t->encode(text, ids, scratch); !s.ok()) std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    });
    std::printf("%-18s %12.1f %12zu %12.1f\n", t == &*base ? "plain" : "+6300 added",
                (t == &*base ? plain_load_s : load_s) * 1e3, ids.size(), mb / encode_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string file;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--file" && i + 1 < argc) file = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--many-added") return many_added_tokens_case(repeats);
    else {
      std::fprintf(stderr, "usage: %s [--repeats N] [--file PATH | --many-added]\n", argv[0]);
      return 2;
    }
  }
  std::string text;
  if (!file.empty()) {
    auto t = slm::read_text_file(file, std::size_t{1} << 30);
    if (!t) {
      std::fprintf(stderr, "error: %s\n", t.error().to_string().c_str());
      return 1;
    }
    text = std::move(*t);
  } else {
    text = default_text();
    if (text.empty()) {
      std::printf("bench_tokenizer: skipped: no /usr/include/c++/*/bits/*.h on this machine (use --file PATH)\n");
      return 0;
    }
    file = "/usr/include/c++/*/bits/*.h";
  }
  const double mb = static_cast<double>(text.size()) / 1e6;

  slm::serial_executor one;
  const char* mib = std::getenv("SLM_PROBE_MIB");
  const double read_bw = slm::probe_read_bandwidth(one, (mib && *mib ? std::strtoull(mib, nullptr, 10) : 1024) << 20);
  std::printf("text: %s, %.2f MB; 1 thread; best of %d runs\n", file.c_str(), mb, repeats);
  std::printf("probe: read bandwidth, 1 thread: %.1f GB/s\n\n", read_bw / 1e9);
  std::printf("%-18s %10s %12s %12s %12s %12s\n", "tokenizer", "pieces", "regex MB/s", "tokens", "encode MB/s",
              "encode/bw");

  const std::string dir = std::string(SLM_BENCH_DATA_DIR) + "/tokenizers/";
  const char* names[] = {"golden/gpt2_bytelevel", "golden/llama3_split", "golden/cpp_split_digits",
                         "cpp_bytelevel", "nam56r_cpp", "nam56r_ws"};
  for (const char* name : names) {
    const std::string path = dir + name + "/tokenizer.json";
    auto tok = slm::tokenizer::load(path);
    auto json_text = slm::read_text_file(path, std::size_t{512} << 20);
    if (!tok || !json_text) {
      std::fprintf(stderr, "error: %s: %s\n", path.c_str(),
                   (!tok ? tok.error() : json_text.error()).to_string().c_str());
      return 1;
    }
    auto doc = slm::json::parse(*json_text);
    if (!doc) return 1;
    const std::string pattern = pre_tokenizer_pattern((*doc)["pre_tokenizer"]);
    std::size_t pieces = 0;
    double regex_s = 0;
    if (!pattern.empty()) {
      auto re = slm::regex::compile(pattern);
      if (!re) {
        std::fprintf(stderr, "error: %s\n", re.error().to_string().c_str());
        return 1;
      }
      regex_s = best_seconds(repeats, [&] { pieces = count_matches(*re, text); });
    }
    slm::encode_scratch scratch;
    std::vector<std::int32_t> ids;
    const double encode_s = best_seconds(repeats, [&] {
      ids.clear();
      if (auto s = tok->encode(text, ids, scratch); !s.ok()) std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    });
    const double enc = mb / encode_s;
    if (pattern.empty())
      std::printf("%-18s %10s %12s %12zu %12.1f %12.5f\n", name + (name[0] == 'g' ? 7 : 0), "-", "-", ids.size(), enc,
                  enc * 1e6 / read_bw);
    else
      std::printf("%-18s %10zu %12.1f %12zu %12.1f %12.5f\n", name + (name[0] == 'g' ? 7 : 0), pieces, mb / regex_s,
                  ids.size(), enc, enc * 1e6 / read_bw);
  }
  return many_added_tokens_case(repeats);
}
