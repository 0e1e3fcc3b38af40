// Fuzz target: tokenizer.json parsing and encode/decode round trips over hostile bytes.
// The first input byte picks the mode:
//   'J' + JSON: parse it as a tokenizer.json; whatever loads must encode texts (the input
//               itself among them) into ids inside its vocabulary, decode them, and stream
//               them through a detokenizer to exactly the same bytes;
//   'I' + text: token ids written as text (text/token_ids.hpp): whatever parses formats
//               back to a list that parses to the same ids, with either separator;
//   anything else: the rest is a text for the bundled test tokenizers (HF's goldens and
//               ours): ids inside the vocabulary, the detokenizer stream equal to decode(),
//               and decode(encode(x)) == x wherever the tokenizer is lossless.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "slm/text/detokenizer.hpp"
#include "slm/text/token_ids.hpp"
#include "slm/text/tokenizer.hpp"

#ifndef SLM_TEST_DATA_DIR
#error "SLM_TEST_DATA_DIR must name tests/data (fuzz/CMakeLists.txt defines it)"
#endif

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}

void exercise(const slm::tokenizer& tok, std::string_view text, bool expect_round_trip) {
  for (const slm::encode_options opt : {slm::encode_options{true, true}, slm::encode_options{false, false}}) {
    auto ids = tok.encode(text, opt);
    if (!ids.ok()) return;
    for (std::int32_t id : *ids) check(id >= 0 && static_cast<std::size_t>(id) < tok.vocab_size());
    auto text_back = tok.decode(*ids);
    check(text_back.ok());
    if (expect_round_trip && !opt.add_special_tokens) check(*text_back == text);
    slm::detokenizer d(tok);
    std::string streamed;
    for (std::int32_t id : *ids) {
      auto piece = d.push(id);
      check(piece.ok());
      streamed += *piece;
    }
    streamed += d.flush();
    check(streamed == *text_back);
  }
}

const std::vector<slm::tokenizer>& bundled() {
  static const std::vector<slm::tokenizer> all = [] {
    std::vector<slm::tokenizer> v;
    const std::filesystem::path dir = std::filesystem::path(SLM_TEST_DATA_DIR) / "tokenizers";
    for (const char* name : {"golden/gpt2_bytelevel", "golden/llama3_split", "golden/cpp_split_digits", "cpp_bytelevel",
                             "nam56r_cpp", "nam56r_ws"}) {
      auto t = slm::tokenizer::load(dir / name / "tokenizer.json");
      check(t.ok());
      v.push_back(std::move(*t));
    }
    return v;
  }();
  return all;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] == 'J') {
    auto tok = slm::tokenizer::parse(input);
    if (!tok.ok()) {
      check(!tok.error().message().empty());
      return 0;
    }
    exercise(*tok, "int main() { return 0; }\n\t\xF0\x9F\x9A\x80 x\xFF", false);
    exercise(*tok, input.substr(0, 4096), false);
    return 0;
  }
  if (data[0] == 'I') {
    auto ids = slm::parse_token_ids(input);
    if (!ids.ok()) {
      check(!ids.error().message().empty());
      return 0;
    }
    check(!ids->empty());
    for (char sep : {',', ' '}) {
      auto back = slm::parse_token_ids(slm::format_token_ids(*ids, sep));
      check(back.ok() && *back == *ids);
    }
    for (std::int32_t id : *ids) check(id >= 0);
    check(slm::check_vocabulary(*ids, 1u << 31).ok());
    return 0;
  }
  for (const slm::tokenizer& t : bundled()) exercise(t, input, t.lossless());
  return 0;
}
