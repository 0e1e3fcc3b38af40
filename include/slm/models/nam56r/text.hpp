// slm/models/nam56r/text.hpp - the two whitespace conventions of the NAM56R C++ tokenizer.
//
// The spec's NAM56R tokenizer (spec nam56r.md section 3) pre-tokenizes BERT-style: a
// C++ split, then WhitespaceSplit, so whitespace never reaches the model and HF's decode
// (no decoder) joins tokens with single spaces. Two conventions put the layout back, and
// a checkpoint follows one of them (which one must be checked per tokenizer.json):
//   (a) nanochat's CppTokenizer.decode: concatenate the tokens, inserting a space between
//       two tokens by C++ rules: none around `::` `->` `.` `.*` `->*`, none before `)` `]`
//       `;` `,` `(` and after `(` `[`, none inside a template argument list `<...>`
//       opened right after a word; spaces around binary operators, before `{`, between
//       two words; newline tokens kept as they are. decode_cpp_heuristic() below;
//   (b) the cppmega M0.1 contract: the *encoder* first turns every run of [ \t]+ into
//       <SPACE> and every run of [\r\n]+ into <NL> (both special tokens), and the decoder
//       concatenates tokens and maps the sentinels back (one space, one newline).
//       to_sentinels() before tokenizer::encode(), decode_sentinels() after.
// Neither convention is lossless (runs collapse), which is why the round-trip form of
// the NAM56R tokenizer (tests/data/tokenizers/nam56r_cpp: byte-level, whitespace kept)
// is the one slm's tools train. The rules of (a) are written from the spec's
// description; no reference output of CppTokenizer.decode was available to check them.
// BPE pieces of one word are two "words" to these rules and get a space between them,
// unless the tokenizer marks continuations (continuing_subword_prefix, e.g. "##"), which
// decode_cpp_heuristic() honours: a marked piece joins the previous one.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "slm/core/status.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::nam56r_text {

// (b) [ \t]+ -> "<SPACE>", [\r\n]+ -> "<NL>", everything else unchanged.
std::string to_sentinels(std::string_view text);

// (b) Concatenates the tokens' texts, <SPACE> -> " ", <NL> -> "\n"; other special
// tokens are left out when skip_special.
result<std::string> decode_sentinels(const tokenizer& tok, std::span<const std::int32_t> ids, bool skip_special = true);

// (a) nanochat-style spacing of the tokens' texts (see the top of the file). Special
// tokens are left out when skip_special.
result<std::string> decode_cpp_heuristic(const tokenizer& tok, std::span<const std::int32_t> ids,
                                         bool skip_special = true);

#if SLM_DEFINE_TEXT

SLM_INLINE std::string to_sentinels(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const char c = text[i];
    if (c == ' ' || c == '\t') {
      while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
      out += "<SPACE>";
    } else if (c == '\r' || c == '\n') {
      while (i < text.size() && (text[i] == '\r' || text[i] == '\n')) ++i;
      out += "<NL>";
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

SLM_INLINE result<std::string> decode_sentinels(const tokenizer& tok, std::span<const std::int32_t> ids, bool skip_special) {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size())
      return make_error(errc::out_of_range, "decode: token id ", id, " at index ", i, " is outside the vocabulary [0, ",
                        tok.vocab_size(), ")");
    const std::string_view t = tok.token(id);
    if (t == "<SPACE>") out.push_back(' ');
    else if (t == "<NL>") out.push_back('\n');
    else if (!(skip_special && tok.is_special(id))) out += t;
  }
  return out;
}

namespace detail {
inline bool is_word(std::string_view t) {
  if (t.empty()) return false;
  const auto c = static_cast<unsigned char>(t.back()), f = static_cast<unsigned char>(t.front());
  auto wordy = [](unsigned char x) { return x == '_' || x >= 0x80 || (x >= '0' && x <= '9') || ((x | 32) >= 'a' && (x | 32) <= 'z'); };
  return wordy(c) && wordy(f);
}
inline bool is_newline(std::string_view t) { return !t.empty() && (t.front() == '\n' || t.back() == '\n'); }
inline bool is_binary_operator(std::string_view t) {
  static constexpr std::string_view ops[] = {"=",  "==", "!=", "<=", ">=", "<=>", "+",  "-",   "*",   "/",  "%",
                                             "&&", "||", "<<", ">>", "+=", "-=",  "*=", "/=",  "%=",  "&=", "|=",
                                             "^=", "<<=", ">>=", "|", "^", "&", "?", ":", "<", ">"};
  for (std::string_view o : ops)
    if (t == o) return true;
  return false;
}
}  // namespace detail

SLM_INLINE result<std::string> decode_cpp_heuristic(const tokenizer& tok, std::span<const std::int32_t> ids,
                                                    bool skip_special) {
  using namespace detail;
  std::string out;
  std::string_view prev;
  int template_depth = 0;  // inside <...> opened right after a word
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::int32_t id = ids[i];
    if (id < 0 || static_cast<std::size_t>(id) >= tok.vocab_size())
      return make_error(errc::out_of_range, "decode: token id ", id, " at index ", i, " is outside the vocabulary [0, ",
                        tok.vocab_size(), ")");
    if (skip_special && tok.is_special(id)) continue;
    const std::string_view t = tok.token(id);
    if (t.empty()) continue;
    bool space = false;
    const std::string_view prefix = tok.continuing_subword_prefix();
    const bool continues = !prefix.empty() && t.substr(0, prefix.size()) == prefix;
    const std::string_view text = continues ? t.substr(prefix.size()) : t;
    if (!prev.empty() && !continues && !is_newline(prev) && !is_newline(t)) {
      const bool tight = prev == "::" || t == "::" || prev == "->" || t == "->" || prev == "." || t == "." ||
                         prev == ".*" || t == ".*" || prev == "->*" || t == "->*" || t == ")" || t == "]" || t == ";" ||
                         t == "," || t == "(" || t == "[" || prev == "(" || prev == "[" || prev == "~" || prev == "!" ||
                         prev == "#";
      const bool opens_template = t == "<" && is_word(prev) && prev != "include";
      const bool in_template = template_depth > 0 && (prev == "<" || t == ">" || t == ">>");
      if (prev == "," || prev == ";") space = true;
      else if (tight || opens_template || in_template) space = false;
      else space = t == "{" || (is_word(prev) && is_word(t)) || is_binary_operator(prev) || is_binary_operator(t) ||
                   prev == ")" || prev == "]" || prev == "{" || t == "}";
    }
    if (t == "<" && (is_word(prev) || template_depth > 0)) ++template_depth;  // also #include <...>
    else if (t == ">" && template_depth > 0) --template_depth;
    else if (t == ">>" && template_depth > 0) template_depth = template_depth >= 2 ? template_depth - 2 : 0;
    if (space) out.push_back(' ');
    out += text;
    prev = t;
  }
  return out;
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm::nam56r_text
