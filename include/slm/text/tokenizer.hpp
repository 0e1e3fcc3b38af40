// slm/text/tokenizer.hpp - HF `tokenizers` BPE tokenizers from tokenizer.json, std only.
//
// The pipeline is HF's, step for step, so the ids are HF's ids:
//   text -> added tokens written verbatim (special ones and normalized=false ones) split out
//        -> the rest normalized (NFC, NFD, NFKC, Lowercase, Strip, Replace, Prepend, Sequence)
//        -> added tokens with normalized=true split out of the normalized text
//        -> pre-tokenizers (Split with a regex or a string and any behaviour, ByteLevel,
//           Digits, Whitespace, WhitespaceSplit, Metaspace, Sequence) cut it into pieces
//        -> the BPE model turns each piece into ids (merges by rank, unk / byte fallback,
//           ignore_merges, continuing-subword prefix, end-of-word suffix)
//        -> the post-processor adds BOS/EOS (TemplateProcessing, Bert/Roberta) on request.
// decode() runs HF's decoder chain (ByteLevel, Metaspace, Replace, ByteFallback, Fuse,
// Strip, BPEDecoder, Sequence; none = tokens joined by spaces) but returns the exact bytes:
// where HF would print U+FFFD for a byte sequence that is not UTF-8, slm returns the bytes,
// so decode(encode(x)) == x holds for any byte string x under a byte-level tokenizer.
//
// Byte-level tokenizers (a ByteLevel pre-tokenizer last in the chain) run the model on raw
// bytes: the 256 single-byte symbols and every vocabulary entry are kept as the bytes they
// stand for, so no piece is ever re-encoded into GPT-2's printable alphabet. Input that is
// not valid UTF-8 is accepted: each invalid byte is a unit of its own, of general category
// Co (private use) for the pre-tokenizer regexes (slm/text/unicode.hpp); under a byte-level
// model it becomes its byte's token, so nothing is lost.
//
// Where slm differs from HF on purpose: exact bytes instead of U+FFFD (above); a token that
// rstrip extends over text where the next added token starts does not produce overlapping
// pieces (HF's does: a pathological case). BPE dropout is ignored (inference).
//
// A loaded tokenizer is immutable and may be shared by threads; encode() keeps its
// scratch on the caller's stack (or in an `encode_scratch` the caller reuses).
//
// Work is bounded by the input, whatever tokenizer.json says: one encode() has a regex step
// budget proportional to the bytes its regexes scan (summed over all its searches, so a
// pattern like `a*b|a`, quadratic over the searches of one split, runs out of it), and each
// normalizer's (and Metaspace's) output is at most a fixed multiple of its input; past
// either limit encode() returns errc::out_of_range instead of hanging or allocating without
// bound. encode_options::cancel stops it early (errc::cancelled).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "slm/text/bpe.hpp"
#include "slm/core/heap_estimate.hpp"
#include "slm/core/parallel.hpp"  // cancellation
#include "slm/text/regex.hpp"
#if SLM_DEFINE_TEXT
#include "slm/io/json.hpp"         // the parser and the file reader: the definitions below use them
#include "slm/io/mapped_file.hpp"
#else
namespace slm::json {
class value;  // what the declarations name (compiled mode: tokenizer.json is parsed in the library)
}  // namespace slm::json
#endif
#include "slm/core/status.hpp"
#include "slm/text/text_ops.hpp"
#include "slm/text/unicode.hpp"

namespace slm {

struct encode_options {
  bool add_special_tokens = true;  // the post-processor's tokens (e.g. Llama-3's BOS), as HF's encode()
  bool parse_special = true;       // special tokens written in the text become their ids (HF's default);
                                   // false treats them as plain text (untrusted input)
  // Checked between pieces of work: once cancelled, encode() returns errc::cancelled.
  const cancellation* cancel = nullptr;
};

struct decode_options {
  bool skip_special_tokens = false;
};

// Reusable buffers for encode() (one per thread), and a cache of the ids of short pieces
// seen so far: code repeats its identifiers and operators, so most pieces of a large text
// skip the merge loop (the cache lives as long as the scratch; it is keyed by the piece's
// bytes, so it must not be shared between tokenizers: encode() clears it when the
// tokenizer changes).
struct encode_scratch {
  bpe_scratch bpe;
  std::vector<std::int32_t> symbols;
  std::string text;

  struct piece_cache {
    static constexpr std::size_t max_piece = 24, slots = std::size_t{1} << 15;
    // A piece of up to 24 bytes, zero-padded into three words: hashed and compared
    // without a loop over bytes or a call to memcmp.
    struct key {
      std::uint64_t w[3] = {0, 0, 0};
      std::uint8_t len = 0;
    };
    struct slot {
      std::uint64_t w[3] = {0, 0, 0};
      std::uint32_t ids_at = 0;
      std::uint8_t len = 0, ids_len = 0;  // len 0: an empty slot
    };
    std::vector<slot> table;
    std::vector<std::int32_t> ids;
    std::size_t used = 0;
    std::uint64_t owner = 0;  // the tokenizer's fingerprint (a hash of its tokenizer.json)

    static std::uint64_t fnv1a(std::string_view s) noexcept {
      std::uint64_t h = 0xcbf29ce484222325ull;
      for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
      return h ^ (h >> 29);
    }
    static key make_key(std::string_view piece) noexcept {  // piece.size() <= max_piece
      key k;
      std::memcpy(k.w, piece.data(), piece.size());
      k.len = static_cast<std::uint8_t>(piece.size());
      return k;
    }
    static std::size_t home(const key& k) noexcept {
      std::uint64_t h = (k.w[0] ^ (std::uint64_t{k.len} << 56)) * 0x9E3779B97F4A7C15ull;
      h = (h ^ (h >> 29) ^ k.w[1]) * 0xBF58476D1CE4E5B9ull;
      h = (h ^ (h >> 31) ^ k.w[2]) * 0x94D049BB133111EBull;
      return static_cast<std::size_t>(h >> 40) & (slots - 1);
    }
    void reset(std::uint64_t who);
    // The cached ids of the piece, or an empty span (not cached).
    std::span<const std::int32_t> find(const key& k) const noexcept;
    void insert(const key& k, std::span<const std::int32_t> out);
  } cache;
};

#if SLM_DEFINE_TEXT

SLM_INLINE void encode_scratch::piece_cache::reset(std::uint64_t who) {
  table.assign(slots, slot{});
  ids.clear();
  used = 0;
  owner = who;
}

SLM_INLINE std::span<const std::int32_t> encode_scratch::piece_cache::find(const key& k) const noexcept {
  for (std::size_t i = home(k);; i = (i + 1) & (slots - 1)) {
    const slot& e = table[i];
    if (e.len == 0) return {};
    if (e.len == k.len && e.w[0] == k.w[0] && e.w[1] == k.w[1] && e.w[2] == k.w[2])
      return {ids.data() + e.ids_at, e.ids_len};
  }
}

SLM_INLINE void encode_scratch::piece_cache::insert(const key& k, std::span<const std::int32_t> out) {
  if (out.empty() || out.size() > 255) return;
  if (used * 2 >= slots) reset(owner);  // full enough: start over (keeps probes short)
  std::size_t i = home(k);
  while (table[i].len != 0) i = (i + 1) & (slots - 1);
  table[i] = {{k.w[0], k.w[1], k.w[2]}, static_cast<std::uint32_t>(ids.size()), k.len,
              static_cast<std::uint8_t>(out.size())};
  ids.insert(ids.end(), out.begin(), out.end());
  ++used;
}

#endif  // SLM_DEFINE_TEXT

// The ids of the tokens that generation and fill-in-the-middle need, found by their
// usual spellings (or set from tokenizer_config.json by load_dir); -1 where absent.
struct special_token_ids {
  std::int32_t bos = -1, eos = -1, pad = -1, unk = -1;
  std::int32_t fim_prefix = -1, fim_middle = -1, fim_suffix = -1;
};

// The order of a fill-in-the-middle prompt (fim_prompt in slm/generate/generator.hpp): PSM puts
// the prefix first, SPM the suffix (then the prefix right before the middle).
enum class fim_order : std::uint8_t { psm, spm };

struct added_token {
  std::int32_t id = -1;
  std::string content;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

class tokenizer {
 public:
  // Limits against hostile files.
  static constexpr std::size_t max_vocab = std::size_t{1} << 24;
  static constexpr std::size_t max_token_bytes = 4096;
  // One encode()'s regex steps: a base, plus this many for each byte a regex scans (every
  // real tokenizer in tests/data needs far fewer: see test Tokenizer.RealTokenizersStayWithinBudget).
  static constexpr std::size_t regex_steps_base = std::size_t{1} << 22;
  static constexpr std::size_t regex_steps_per_byte = 1024;
  // A normalizer's output (and Metaspace's) is at most max_growth times the text it came
  // from plus growth_slack bytes (NFKC, the largest real expansion, is 18 code points per one).
  static constexpr std::size_t max_growth = 32, growth_slack = 4096;

  static result<tokenizer> load(const std::filesystem::path& file);

  // A model directory: tokenizer.json, and tokenizer_config.json when present (its
  // bos_token / eos_token / pad_token / unk_token name the special tokens; fim_order,
  // "psm" or "spm", the model's FIM order: fim_preference()).
  static result<tokenizer> load_dir(const std::filesystem::path& dir);

  static result<tokenizer> parse(std::string_view json_text);

  // ---- Encoding ----

  result<std::vector<std::int32_t>> encode(std::string_view text, const encode_options& opt = {}) const;

  // Appends the ids of `text` to `out`.
  status encode(std::string_view text, std::vector<std::int32_t>& out, encode_scratch& s,
                const encode_options& opt = {}) const;

  // ---- Decoding ----

  // The exact bytes of the ids (see the top of the file). An id outside [0, vocab_size())
  // is an error; an id inside the range that names no token (a gap) decodes to nothing, as
  // in HF.
  result<std::string> decode(std::span<const std::int32_t> ids, const decode_options& opt = {}) const;

  // Whether each token's text is independent of its neighbours (ByteLevel decoding): then
  // a stream of ids decodes token by token (detokenizer).
  bool decodes_token_by_token() const noexcept { return bytes_decoder_; }
  // The bytes of one token under a token-by-token decoder.
  std::string_view token_bytes(std::int32_t id) const noexcept {
    return bytes_decoder_ && id >= 0 && static_cast<std::size_t>(id) < token_bytes_.size()
               ? std::string_view(token_bytes_[static_cast<std::size_t>(id)])
               : std::string_view();
  }

  // ---- Vocabulary ----

  std::size_t vocab_size() const noexcept { return tokens_.size(); }
  // The token's text as written in tokenizer.json ("Ġthe" under byte-level); empty for a gap.
  std::string_view token(std::int32_t id) const noexcept {
    return id >= 0 && static_cast<std::size_t>(id) < tokens_.size() ? std::string_view(tokens_[static_cast<std::size_t>(id)])
                                                                      : std::string_view();
  }
  std::optional<std::int32_t> find(std::string_view content) const;
  bool is_special(std::int32_t id) const noexcept {
    return id >= 0 && static_cast<std::size_t>(id) < special_.size() && special_[static_cast<std::size_t>(id)];
  }
  std::span<const added_token> added_tokens() const noexcept { return added_; }
  const special_token_ids& specials() const noexcept { return specials_; }
  special_token_ids& specials() noexcept { return specials_; }
  // The FIM order the model was trained for, when its files state one: "fim_order"
  // ("psm" or "spm") in tokenizer_config.json (load_dir). fim_prompt's default.
  std::optional<fim_order> fim_preference() const noexcept { return fim_preference_; }
  void set_fim_preference(std::optional<fim_order> o) noexcept { fim_preference_ = o; }
  std::size_t merge_count() const noexcept { return merges_.size(); }
  bool byte_level() const noexcept { return byte_mode_; }
  std::string_view continuing_subword_prefix() const noexcept { return prefix_; }
  // Whether decode(encode(x)) == x for every byte string x: byte-level, no normalizer, no
  // added token that swallows whitespace (lstrip / rstrip).
  bool lossless() const noexcept;

  // One line for `slm inspect`: "BPE, 2003 tokens (1737 merges), byte-level, normalizer NFC,
  // pre-tokenizer Split+Digits+ByteLevel, decoder ByteLevel, 10 added tokens (7 special)".
  std::string summary() const;

  // The heap bytes the loaded tokenizer holds, and its own object: vocabulary strings and
  // maps, merges, added tokens, pipeline steps and their regex programs. An estimate by
  // slm/core/heap_estimate.hpp's method (capacities, malloc chunk sizes, one node per hash map
  // element), for a memory budget: the bundled models' 540 KB tokenizer.json holds 1.44 MB
  // (EnsembleRegistry.TokenizerChargedByItsMemory compares the figure with the heap that
  // loading it keeps, by mallinfo2: within 1% here). Parsing needs more for a while (the
  // process's peak rises by about 3.9 MB loading the bundled one), which is not counted.
  std::uint64_t memory_bytes() const noexcept;

 private:
  // ---- Pipeline steps, as parsed from the JSON ----
  struct normalize_step {
    enum kind_t : std::uint8_t { nfc, nfd, nfkc, lowercase, strip, replace, prepend } kind;
    std::string a, b;                // replace: pattern (string form) / content; prepend: a
    std::shared_ptr<const regex> re;  // replace with a regex
    bool left = false, right = false;
  };
  struct pre_step {
    enum kind_t : std::uint8_t { split, digits, bytes, whitespace_split, metaspace } kind;
    std::shared_ptr<const regex> re;  // split (regex) / byte_level with use_regex
    std::string literal;              // split with a string pattern; metaspace: replacement
    text::split_behavior behavior = text::split_behavior::isolated;
    bool invert = false, individual_digits = false, add_prefix_space = false;
    enum prepend_t : std::uint8_t { never, first, always } prepend = always;
    bool split_on_replacement = true;
  };
  struct decode_step {
    enum kind_t : std::uint8_t { bytes, metaspace, replace, byte_fallback, fuse, strip, bpe_suffix } kind;
    std::string a, b;  // replace: pattern / content; metaspace: replacement; strip: content; bpe_suffix
    std::shared_ptr<const regex> re;
    std::size_t start = 0, stop = 0;
    bool metaspace_strip_first = true;
  };
  struct template_item {
    bool sequence = false;
    std::vector<std::int32_t> ids;
  };

  // ---- Loading ----

  status build(const json::value& doc);

  static result<std::shared_ptr<const regex>> compile_pattern(const json::value& pattern, std::string* literal);

  static result<text::split_behavior> parse_behavior(std::string_view b);

  status parse_pre_tokenizer(const json::value& v);

  status parse_normalizer(const json::value& v);

  status parse_decoder(const json::value& v);

  status set_token(std::int32_t id, std::string_view content);

  status parse_vocab(const json::value& bpe_model);

  status parse_added(const json::value& list);

  status parse_post(const json::value& v);

  void guess_specials();

  // tokenizer_config.json's add_bos_token / add_eos_token, as transformers applies them (load_dir).
  status apply_add_bos_eos(const json::value& cfg);

  // Calls fn(id, piece) for the pieces of s in order: fn(id >= 0, token text) for an added
  // token, fn(-1, text) between them (HF's AddedVocabulary::find_matches).
  template <class Fn>
  void for_each_added(std::string_view s, const text::literal_set& m, const encode_options& opt, Fn&& fn) const;

  // One encode()'s budget and first error (pieces after an error are skipped).
  struct encode_run {
    std::size_t steps = regex_steps_base;  // regex steps left (regex::search's shared budget)
    const cancellation* cancel = nullptr;
    status err;
    // Whether to stop: an error already, or cancelled now (which becomes the error).
    bool stop() {
      if (err.ok() && cancel && cancel->cancelled()) err = status(errc::cancelled, "tokenizer: encode cancelled");
      if (err.ok()) return false;
      steps = 0;  // a search under way stops at once
      return true;
    }
    // Grants the steps for a regex pass over n bytes.
    void grant(std::size_t n) noexcept {
      const std::size_t add = n > SIZE_MAX / regex_steps_per_byte ? SIZE_MAX : n * regex_steps_per_byte;
      steps = add > SIZE_MAX - steps ? SIZE_MAX : steps + add;
    }
    // The error for a regex that ran out of steps (steps == 0), else ok.
    status regex_out_of_steps(std::string_view what, const regex& re, std::size_t bytes) const;
  };

  // ---- Normalizers ----
  // The normalized text of `in` into out; an error when an output passes its bound or a
  // Replace regex runs out of steps.
  status normalize_into(std::string_view in, std::string& out, encode_run& run) const;
  std::string normalize(std::string_view in) const;  // (load time: build() checked it succeeds)
  // ---- Pre-tokenizers ----

  // Runs pre-tokenizer `step` on one piece and hands each resulting piece to the next
  // step, the last one to sink (the model). `first` says the piece starts the text
  // (Metaspace's prepend_scheme "first").
  template <class Sink>
  void pre_tokenize(std::size_t step, std::string_view piece, bool first, encode_run& run, Sink&& sink) const;

  // ---- The model ----
  void model_encode(std::string_view piece, std::vector<std::int32_t>& out, encode_scratch& s) const;

  void model_encode_uncached(std::string_view piece, std::vector<std::int32_t>& out, encode_scratch& s) const;

  void add_template(bool before, std::vector<std::int32_t>& out) const;

  // ---- Decoders (HF's decode_chain, on the list of token texts) ----
  // A Replace's output is bounded as a normalizer's, and its regex draws on run's steps.
  status run_decoder(const decode_step& d, std::vector<std::string>& toks, encode_run& run) const;

  // Transparent hashing so lookups take string_view pieces without a copy.
  struct text_hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };
  using text_map = std::unordered_map<std::string, std::int32_t, text_hash, std::equal_to<>>;

  std::vector<std::string> tokens_;  // id -> text as in tokenizer.json
  std::vector<bool> has_token_, special_;
  std::vector<std::string> token_bytes_;  // id -> bytes, for a ByteLevel decoder
  text_map vocab_;                        // model vocabulary, text -> id
  text_map vocab_bytes_;                  // byte-level: bytes -> id (for ignore_merges)
  std::array<std::int32_t, 256> byte_ids_{};
  bpe_merges merges_;
  std::string unk_token_, prefix_, suffix_;
  std::int32_t unk_id_ = -1;
  bool byte_mode_ = false, byte_fallback_ = false, fuse_unk_ = false, ignore_merges_ = false, bytes_decoder_ = false;
  std::vector<normalize_step> normalizers_;
  std::vector<pre_step> pre_;
  std::vector<decode_step> decoders_;
  std::vector<template_item> template_;
  std::vector<added_token> added_;
  text_map added_ids_;  // added token content -> id (find)
  text::literal_set raw_added_, normalized_added_;
  special_token_ids specials_;
  std::optional<fim_order> fim_preference_;
  std::uint64_t fingerprint_ = 1;
  std::string normalizer_names_, pre_names_, decoder_names_;
};

#if SLM_DEFINE_TEXT

// Member templates that only encode() calls (instantiated where encode() is defined).
template <class Fn>
void tokenizer::for_each_added(std::string_view s, const text::literal_set& m, const encode_options& opt, Fn&& fn) const {
  if (m.empty()) {
    fn(-1, s);
    return;
  }
  std::size_t done = 0, from = 0;
  while (from < s.size()) {
    auto [at, e] = m.next(s, from);
    if (!e) break;
    const added_token& tok = added_[e->index];
    std::size_t start = at, stop = at + e->text.size();
    from = stop;
    if (tok.special && !opt.parse_special) continue;
    if (tok.single_word) {
      std::size_t len = 1;
      bool word_before = false, word_after = false;
      if (start > 0) {
        std::size_t k = start - 1;
        while (k > 0 && (static_cast<unsigned char>(s[k]) & 0xC0) == 0x80) --k;
        word_before = text::is_word_char(unicode::decode(s, k, len));
      }
      if (stop < s.size()) word_after = text::is_word_char(unicode::decode(s, stop, len));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      std::size_t k = start;
      while (k > done) {
        std::size_t j = k - 1, len = 1;
        while (j > done && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
        if (!unicode::is_white_space(unicode::decode(s, j, len))) break;
        k = j;
      }
      start = k;
    }
    if (tok.rstrip) {
      while (stop < s.size()) {
        std::size_t len = 1;
        if (!unicode::is_white_space(unicode::decode(s, stop, len))) break;
        stop += len;
      }
      from = stop;
    }
    if (done < start) fn(-1, s.substr(done, start - done));
    fn(tok.id, s.substr(start, stop - start));
    done = stop;
  }
  if (done < s.size() || s.empty()) fn(-1, s.substr(done));
}

template <class Sink>
void tokenizer::pre_tokenize(std::size_t step, std::string_view piece, bool first, encode_run& run, Sink&& sink) const {
  if (run.stop()) return;
  if (step == pre_.size()) return sink(piece);
  const pre_step& p = pre_[step];
  auto next = [&](std::string_view sub) { pre_tokenize(step + 1, sub, first && sub.data() == piece.data(), run, sink); };
  // A regex split: its searches draw on the run's steps, granted for the bytes it scans.
  auto regex_split = [&](std::string_view sv, text::split_behavior behavior, bool invert, auto&& out) {
    run.grant(sv.size());
    text::split_pieces(sv, behavior, invert, [&](auto&& f) { text::regex_matches(*p.re, sv, f, &run.steps); }, out);
    if (run.err.ok()) run.err = run.regex_out_of_steps("pre-tokenizer", *p.re, sv.size());
  };
  switch (p.kind) {
    case pre_step::split:
      if (p.re)
        regex_split(piece, p.behavior, p.invert, next);
      else
        text::split_pieces(piece, p.behavior, p.invert, [&](auto&& f) { text::literal_matches(p.literal, piece, f); }, next);
      return;
    case pre_step::digits: {
      auto numeric = [](char32_t c) {
        if (c < 0x80) return c >= U'0' && c <= U'9';
        const auto k = unicode::general_category(c);
        return k == unicode::category::Nd || k == unicode::category::Nl || k == unicode::category::No;
      };
      text::split_pieces(piece, p.individual_digits ? text::split_behavior::isolated : text::split_behavior::contiguous, false,
                   [&](auto&& f) { text::char_matches(piece, numeric, f); }, next);
      return;
    }
    case pre_step::whitespace_split:
      text::split_pieces(piece, text::split_behavior::removed, false,
                   [&](auto&& f) { text::char_matches(piece, [](char32_t c) { return unicode::is_white_space(c); }, f); }, next);
      return;
    case pre_step::bytes: {
      std::string prefixed;
      std::string_view s = piece;
      if (p.add_prefix_space && (s.empty() || s[0] != ' ')) {
        prefixed = cat(" ", s);
        s = prefixed;
      }
      if (p.re)
        regex_split(s, text::split_behavior::isolated, false, [&](std::string_view sub) { pre_tokenize(step + 1, sub, false, run, sink); });
      else
        pre_tokenize(step + 1, s, false, run, sink);
      return;
    }
    case pre_step::metaspace: {
      std::string s;
      const std::size_t bound = max_growth * piece.size() + growth_slack;
      if (!text::replace_all_within(s, piece, " ", nullptr, p.literal, bound, nullptr) ||
          (s.compare(0, p.literal.size(), p.literal) != 0 && s.size() + p.literal.size() > bound)) {
        run.err = make_error(errc::out_of_range, "tokenizer: the Metaspace pre-tokenizer's output would pass ", bound,
                             " bytes for ", piece.size(), " bytes of text (its replacement is ", p.literal.size(),
                             " bytes); refused as hostile");
        return;
      }
      if ((p.prepend == pre_step::always || (p.prepend == pre_step::first && first)) &&
          s.compare(0, p.literal.size(), p.literal) != 0)
        s.insert(0, p.literal);
      // (an empty replacement would match forever: nothing to split on)
      if (!p.split_on_replacement || p.literal.empty()) return pre_tokenize(step + 1, s, false, run, sink);
      const std::string_view sv = s;
      text::split_pieces(sv, text::split_behavior::merged_with_next, false, [&](auto&& f) { text::literal_matches(p.literal, sv, f); },
                   [&](std::string_view sub) { pre_tokenize(step + 1, sub, false, run, sink); });
      return;
    }
  }
}

SLM_INLINE result<tokenizer> tokenizer::load(const std::filesystem::path& file) {
  auto text = read_text_file(file, std::size_t{512} << 20);
  if (!text.ok()) return std::move(text).error();
  auto t = parse(*text);
  if (!t.ok()) return std::move(t).take_error().with_context(file.string());
  return t;
}

SLM_INLINE result<tokenizer> tokenizer::load_dir(const std::filesystem::path& dir) {
  auto t = load(dir / "tokenizer.json");
  if (!t.ok()) return t;
  std::error_code ec;
  if (std::filesystem::exists(dir / "tokenizer_config.json", ec)) {
    auto text = read_text_file(dir / "tokenizer_config.json", std::size_t{64} << 20);
    if (!text.ok()) return std::move(text).error();
    auto cfg = json::parse(*text);
    if (!cfg.ok()) return std::move(cfg).take_error().with_context((dir / "tokenizer_config.json").string());
    auto pick = [&](std::string_view key, std::int32_t& slot) {
      const json::value& v = (*cfg)[key];
      std::string_view name = v.is_string() ? v.as_string() : v.get_string("content");
      if (auto id = t->find(name)) slot = *id;
    };
    pick("bos_token", t->specials_.bos);
    pick("eos_token", t->specials_.eos);
    pick("pad_token", t->specials_.pad);
    pick("unk_token", t->specials_.unk);
    if (status st = t->apply_add_bos_eos(*cfg); !st.ok())
      return std::move(st).with_context((dir / "tokenizer_config.json").string());
    if (const json::value& fo = (*cfg)["fim_order"]; !fo.is_null()) {
      const std::string_view o = fo.is_string() ? fo.as_string() : std::string_view();
      if (o == "psm") {
        t->fim_preference_ = fim_order::psm;
      } else if (o == "spm") {
        t->fim_preference_ = fim_order::spm;
      } else {
        return make_error(errc::format_error, (dir / "tokenizer_config.json").string(),
                          ": \"fim_order\" must be \"psm\" or \"spm\"");
      }
    }
  }
  return t;
}

SLM_INLINE result<tokenizer> tokenizer::parse(std::string_view json_text) {
  auto doc = json::parse(json_text);
  if (!doc.ok()) return std::move(doc).take_error().with_context("tokenizer.json");
  tokenizer t;
  SLM_TRY(t.build(*doc));
  t.fingerprint_ = encode_scratch::piece_cache::fnv1a(json_text) | 1;  // never 0 (an unused cache)
  return t;
}

SLM_INLINE result<std::vector<std::int32_t>> tokenizer::encode(std::string_view text, const encode_options& opt) const {
  std::vector<std::int32_t> ids;
  encode_scratch s;
  SLM_TRY(encode(text, ids, s, opt));
  return ids;
}

SLM_INLINE status tokenizer::encode(std::string_view text, std::vector<std::int32_t>& out, encode_scratch& s,
              const encode_options& opt) const {
  encode_run run;
  run.cancel = opt.cancel;
  if (run.stop()) return std::move(run.err);
  if (s.cache.owner != fingerprint_) s.cache.reset(fingerprint_);
  const std::size_t out_size = out.size();
  if (opt.add_special_tokens) add_template(true, out);
  // 1. Added tokens matched on the raw text (special ones, normalized=false ones).
  for_each_added(text, raw_added_, opt, [&](std::int32_t id, std::string_view piece) {
    if (run.stop()) return;
    if (id >= 0) return out.push_back(id);
    // 2. The rest normalized, then 3. normalized added tokens split out of it.
    std::string normalized;
    std::string_view view = piece;
    if (!normalizers_.empty()) {
      if (status st = normalize_into(piece, normalized, run); !st.ok()) {
        run.err = std::move(st);
        return;
      }
      view = normalized;
    }
    for_each_added(view, normalized_added_, opt, [&](std::int32_t id2, std::string_view rest) {
      if (run.stop()) return;
      if (id2 >= 0) return out.push_back(id2);
      // 4. Pre-tokenizers, then the model on each piece.
      pre_tokenize(0, rest, rest.data() == text.data(), run, [&](std::string_view p) {
        if (!run.stop()) model_encode(p, out, s);
      });
    });
  });
  if (run.stop()) {
    out.resize(out_size);  // nothing half-encoded is appended
    return std::move(run.err);
  }
  if (opt.add_special_tokens) add_template(false, out);
  return {};
}

SLM_INLINE result<std::string> tokenizer::decode(std::span<const std::int32_t> ids, const decode_options& opt) const {
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= vocab_size())
      return make_error(errc::out_of_range, "decode: token id ", ids[i], " at index ", i,
                        " is outside the vocabulary [0, ", vocab_size(), ")");
  std::string out;
  if (bytes_decoder_) {  // ByteLevel alone: every token is its bytes
    for (std::int32_t id : ids)
      if (!(opt.skip_special_tokens && is_special(id))) out += token_bytes_[static_cast<std::size_t>(id)];
    return out;
  }
  std::vector<std::string> toks;
  toks.reserve(ids.size());
  for (std::int32_t id : ids)
    if (!(opt.skip_special_tokens && is_special(id)) && has_token_[static_cast<std::size_t>(id)])
      toks.push_back(tokens_[static_cast<std::size_t>(id)]);
  if (decoders_.empty()) {
    for (std::size_t i = 0; i < toks.size(); ++i) {
      if (i) out.push_back(' ');
      out += toks[i];
    }
    return out;
  }
  encode_run run;
  for (const decode_step& d : decoders_) SLM_TRY(run_decoder(d, toks, run));
  for (const std::string& t : toks) out += t;
  return out;
}

SLM_INLINE std::optional<std::int32_t> tokenizer::find(std::string_view content) const {
  if (auto a = added_ids_.find(content); a != added_ids_.end()) return a->second;
  auto it = vocab_.find(content);
  if (it != vocab_.end()) return it->second;
  return std::nullopt;
}

SLM_INLINE bool tokenizer::lossless() const noexcept {
  if (!byte_mode_ || !normalizers_.empty() || !bytes_decoder_) return false;
  for (const added_token& a : added_)
    if (a.lstrip || a.rstrip) return false;
  return true;
}

SLM_INLINE std::uint64_t tokenizer::memory_bytes() const noexcept {
  using heap_estimate::of;
  using heap_estimate::of_buffer;
  auto shared_regex = [](const std::shared_ptr<const regex>& re) -> std::uint64_t {
    return re ? heap_estimate::block(sizeof(regex) + 2 * sizeof(long)) + re->memory_bytes() : 0;
  };
  std::uint64_t n = sizeof(tokenizer);
  n += of(tokens_) + of(has_token_) + of(special_) + of(token_bytes_) + of(vocab_) + of(vocab_bytes_);
  n += merges_.memory_bytes();
  n += of(unk_token_) + of(prefix_) + of(suffix_);
  n += of_buffer(normalizers_);
  for (const normalize_step& st : normalizers_) n += of(st.a) + of(st.b) + shared_regex(st.re);
  n += of_buffer(pre_);
  for (const pre_step& st : pre_) n += of(st.literal) + shared_regex(st.re);
  n += of_buffer(decoders_);
  for (const decode_step& st : decoders_) n += of(st.a) + of(st.b) + shared_regex(st.re);
  n += of_buffer(template_);
  for (const template_item& t : template_) n += of_buffer(t.ids);
  n += of_buffer(added_);
  for (const added_token& a : added_) n += of(a.content);
  n += raw_added_.memory_bytes() + normalized_added_.memory_bytes() + of(added_ids_);
  n += of(normalizer_names_) + of(pre_names_) + of(decoder_names_);
  return n;
}

SLM_INLINE std::string tokenizer::summary() const {
  std::size_t n_special = 0;
  for (const added_token& a : added_) n_special += a.special;
  std::string s = cat("BPE, ", vocab_size(), " tokens (", merges_.size(), " merges)", byte_mode_ ? ", byte-level" : "");
  if (!unk_token_.empty()) s += cat(", unk ", unk_token_);
  if (byte_fallback_) s += ", byte fallback";
  if (!normalizer_names_.empty()) s += cat(", normalizer ", normalizer_names_);
  if (!pre_names_.empty()) s += cat(", pre-tokenizer ", pre_names_);
  s += cat(", decoder ", decoder_names_.empty() ? std::string("none") : decoder_names_);
  s += cat(", ", added_.size(), " added tokens (", n_special, " special)");
  return s;
}

SLM_INLINE status tokenizer::build(const json::value& doc) {
  if (!doc.is_object()) return make_error(errc::parse_error, "tokenizer.json: the top level is not an object");
  const json::value& bpe_model = doc["model"];
  if (!bpe_model.is_object()) return make_error(errc::parse_error, "tokenizer.json: no \"model\" object");
  const std::string_view type = bpe_model.get_string("type", "BPE");
  if (type != "BPE")
    return make_error(errc::unsupported, "tokenizer.json: model type \"", type,
                      "\" is not supported (slm implements BPE: GPT-2 / Llama-3 / Qwen / DeepSeek style)");
  if (status st_ = parse_pre_tokenizer(doc["pre_tokenizer"]); !st_.ok()) return std::move(st_).with_context("pre_tokenizer");
  if (status st_ = parse_vocab(bpe_model); !st_.ok()) return std::move(st_).with_context("model");
  if (status st_ = parse_added(doc["added_tokens"]); !st_.ok()) return std::move(st_).with_context("added_tokens");
  if (status st_ = parse_normalizer(doc["normalizer"]); !st_.ok()) return std::move(st_).with_context("normalizer");
  for (const added_token& a : added_) {
    if (!a.normalized || normalizers_.empty()) continue;
    encode_run run;
    std::string normalized;
    if (status st_ = normalize_into(a.content, normalized, run); !st_.ok())
      return std::move(st_).with_context(cat("added token ", a.id));
    tokens_[static_cast<std::size_t>(a.id)] = std::move(normalized);
  }
  if (status st_ = parse_decoder(doc["decoder"]); !st_.ok()) return std::move(st_).with_context("decoder");
  if (status st_ = parse_post(doc["post_processor"]); !st_.ok()) return std::move(st_).with_context("post_processor");
  // Token bytes for the byte-level decoder (added tokens through the same map, as HF's
  // ByteLevel decoder does; a character outside the alphabet keeps its UTF-8 bytes).
  if (bytes_decoder_) {
    token_bytes_.resize(tokens_.size());
    for (std::size_t i = 0; i < tokens_.size(); ++i) {
      auto b = text::bytes_of(tokens_[i]);
      token_bytes_[i] = b ? std::move(*b) : tokens_[i];
    }
  }
  guess_specials();
  return {};
}

SLM_INLINE result<std::shared_ptr<const regex>> tokenizer::compile_pattern(const json::value& pattern, std::string* literal) {
  if (const json::value* r = pattern.find("Regex"); r && r->is_string()) {
    auto re = regex::compile(r->as_string());
    if (!re.ok()) return std::move(re).take_error().with_context("pattern");
    return std::make_shared<const regex>(std::move(*re));
  }
  if (const json::value* s = pattern.find("String"); s && s->is_string()) {
    *literal = std::string(s->as_string());
    if (literal->empty()) return make_error(errc::invalid_argument, "an empty String pattern");
    return std::shared_ptr<const regex>();
  }
  return make_error(errc::parse_error, "pattern: expected {\"Regex\": ...} or {\"String\": ...}");
}

SLM_INLINE result<text::split_behavior> tokenizer::parse_behavior(std::string_view b) {
  if (b == "Isolated") return text::split_behavior::isolated;
  if (b == "Removed") return text::split_behavior::removed;
  if (b == "MergedWithPrevious") return text::split_behavior::merged_with_previous;
  if (b == "MergedWithNext") return text::split_behavior::merged_with_next;
  if (b == "Contiguous") return text::split_behavior::contiguous;
  return make_error(errc::unsupported, "split behavior \"", b, "\"");
}

SLM_INLINE status tokenizer::parse_pre_tokenizer(const json::value& v) {
  if (v.is_null()) return {};
  if (!v.is_object()) return make_error(errc::parse_error, "expected an object or null");
  const std::string_view type = v.get_string("type");
  if (type == "Sequence") {
    const json::value& list = v["pretokenizers"];
    if (!list.is_array()) return make_error(errc::parse_error, "Sequence without \"pretokenizers\"");
    for (const json::value& p : list.items()) SLM_TRY(parse_pre_tokenizer(p));
    return {};
  }
  if (!pre_.empty() && pre_.back().kind == pre_step::bytes)
    return make_error(errc::unsupported, "a pre-tokenizer (", type, ") after ByteLevel");
  pre_step s{};
  if (type == "Split") {
    s.kind = pre_step::split;
    auto re = compile_pattern(v["pattern"], &s.literal);
    if (!re.ok()) return std::move(re).take_error().with_context("Split");
    s.re = std::move(*re);
    auto b = parse_behavior(v.get_string("behavior", "Isolated"));
    if (!b.ok()) return std::move(b).take_error().with_context("Split");
    s.behavior = *b;
    s.invert = v.get_bool("invert", false);
  } else if (type == "ByteLevel") {
    s.kind = pre_step::bytes;
    s.add_prefix_space = v.get_bool("add_prefix_space", false);
    if (v.get_bool("use_regex", true)) {
      auto re = regex::compile(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
      if (!re.ok()) return std::move(re).take_error().with_context("ByteLevel");
      s.re = std::make_shared<const regex>(std::move(*re));
    }
    byte_mode_ = true;
  } else if (type == "Digits") {
    s.kind = pre_step::digits;
    s.individual_digits = v.get_bool("individual_digits", false);
  } else if (type == "WhitespaceSplit") {
    s.kind = pre_step::whitespace_split;
  } else if (type == "Whitespace") {  // \w+|[^\w\s]+, the matches kept
    s.kind = pre_step::split;
    auto re = regex::compile(R"(\w+|[^\w\s]+)");
    if (!re.ok()) return std::move(re).take_error().with_context("Whitespace");
    s.re = std::make_shared<const regex>(std::move(*re));
    s.behavior = text::split_behavior::removed;
    s.invert = true;
  } else if (type == "Metaspace") {
    s.kind = pre_step::metaspace;
    s.literal = std::string(v.get_string("replacement", "\xE2\x96\x81"));
    const std::string_view scheme = v.get_string("prepend_scheme", v.get_bool("add_prefix_space", true) ? "always" : "never");
    s.prepend = scheme == "never" ? pre_step::never : scheme == "first" ? pre_step::first : pre_step::always;
    s.split_on_replacement = v.get_bool("split", true);
  } else {
    return make_error(errc::unsupported, "pre-tokenizer type \"", type, "\"");
  }
  pre_names_ += cat(pre_names_.empty() ? "" : "+", type);
  pre_.push_back(std::move(s));
  return {};
}

SLM_INLINE status tokenizer::parse_normalizer(const json::value& v) {
  if (v.is_null()) return {};
  if (!v.is_object()) return make_error(errc::parse_error, "expected an object or null");
  const std::string_view type = v.get_string("type");
  if (type == "Sequence") {
    const json::value& list = v["normalizers"];
    if (!list.is_array()) return make_error(errc::parse_error, "Sequence without \"normalizers\"");
    for (const json::value& n : list.items()) SLM_TRY(parse_normalizer(n));
    return {};
  }
  normalize_step s{};
  if (type == "NFC") s.kind = normalize_step::nfc;
  else if (type == "NFD") s.kind = normalize_step::nfd;
  else if (type == "NFKC") s.kind = normalize_step::nfkc;
  else if (type == "Lowercase") s.kind = normalize_step::lowercase;
  else if (type == "Strip") {
    s.kind = normalize_step::strip;
    s.left = v.get_bool("strip_left", true);
    s.right = v.get_bool("strip_right", true);
  } else if (type == "Replace") {
    s.kind = normalize_step::replace;
    auto re = compile_pattern(v["pattern"], &s.a);
    if (!re.ok()) return std::move(re).take_error().with_context("Replace");
    s.re = std::move(*re);
    s.b = std::string(v.get_string("content"));
  } else if (type == "Prepend") {
    s.kind = normalize_step::prepend;
    s.a = std::string(v.get_string("prepend"));
  } else {
    return make_error(errc::unsupported, "normalizer type \"", type, "\"");
  }
  normalizer_names_ += cat(normalizer_names_.empty() ? "" : "+", type);
  normalizers_.push_back(std::move(s));
  return {};
}

SLM_INLINE status tokenizer::parse_decoder(const json::value& v) {
  if (v.is_null()) return {};
  if (!v.is_object()) return make_error(errc::parse_error, "expected an object or null");
  const std::string_view type = v.get_string("type");
  if (type == "Sequence") {
    const json::value& list = v["decoders"];
    if (!list.is_array()) return make_error(errc::parse_error, "Sequence without \"decoders\"");
    for (const json::value& d : list.items()) SLM_TRY(parse_decoder(d));
    bytes_decoder_ = decoders_.size() == 1 && decoders_[0].kind == decode_step::bytes;
    return {};
  }
  decode_step s{};
  if (type == "ByteLevel") s.kind = decode_step::bytes;
  else if (type == "Metaspace") {
    s.kind = decode_step::metaspace;
    s.a = std::string(v.get_string("replacement", "\xE2\x96\x81"));
    const std::string_view scheme = v.get_string("prepend_scheme", v.get_bool("add_prefix_space", true) ? "always" : "never");
    s.metaspace_strip_first = scheme != "never";
  } else if (type == "Replace") {
    s.kind = decode_step::replace;
    auto re = compile_pattern(v["pattern"], &s.a);
    if (!re.ok()) return std::move(re).take_error().with_context("Replace");
    s.re = std::move(*re);
    s.b = std::string(v.get_string("content"));
  } else if (type == "ByteFallback") s.kind = decode_step::byte_fallback;
  else if (type == "Fuse") s.kind = decode_step::fuse;
  else if (type == "Strip") {
    s.kind = decode_step::strip;
    s.a = std::string(v.get_string("content", " "));
    s.start = static_cast<std::size_t>(std::max<std::int64_t>(0, v.get_int64("start", 0)));
    s.stop = static_cast<std::size_t>(std::max<std::int64_t>(0, v.get_int64("stop", 0)));
  } else if (type == "BPEDecoder") {
    s.kind = decode_step::bpe_suffix;
    s.a = std::string(v.get_string("suffix", "</w>"));
  } else {
    return make_error(errc::unsupported, "decoder type \"", type, "\"");
  }
  decoder_names_ += cat(decoder_names_.empty() ? "" : "+", type);
  decoders_.push_back(std::move(s));
  bytes_decoder_ = decoders_.size() == 1 && decoders_[0].kind == decode_step::bytes;
  return {};
}

SLM_INLINE status tokenizer::set_token(std::int32_t id, std::string_view content) {
  if (id < 0 || static_cast<std::size_t>(id) >= max_vocab)
    return make_error(errc::out_of_range, "token id ", id, " (\"", content.substr(0, 64), "\") outside [0, ", max_vocab, ")");
  if (content.size() > max_token_bytes)
    return make_error(errc::out_of_range, "token ", id, " is ", content.size(), " bytes long (at most ", max_token_bytes, ")");
  const auto i = static_cast<std::size_t>(id);
  if (i >= tokens_.size()) {
    tokens_.resize(i + 1);
    has_token_.resize(i + 1, false);
    special_.resize(i + 1, false);
  }
  tokens_[i] = std::string(content);
  has_token_[i] = true;
  return {};
}

SLM_INLINE status tokenizer::parse_vocab(const json::value& bpe_model) {
  const json::value& vocab = bpe_model["vocab"];
  if (!vocab.is_object()) return make_error(errc::parse_error, "no \"vocab\" object");
  if (vocab.size() > max_vocab) return make_error(errc::out_of_range, vocab.size(), " vocabulary entries (at most ", max_vocab, ")");
  vocab_.reserve(vocab.size());
  for (const json::member& m : vocab.members()) {
    const auto id = m.val.as_int64();
    if (!id || !m.val.is_number()) return make_error(errc::parse_error, "vocab entry \"", m.key, "\" is not an integer id");
    SLM_TRY(set_token(static_cast<std::int32_t>(*id), m.key));
    if (!vocab_.emplace(m.key, static_cast<std::int32_t>(*id)).second)
      return make_error(errc::parse_error, "vocab entry \"", m.key, "\" appears twice");
  }
  unk_token_ = std::string(bpe_model.get_string("unk_token"));
  if (!unk_token_.empty()) {
    auto it = vocab_.find(unk_token_);
    if (it == vocab_.end()) return make_error(errc::parse_error, "unk_token \"", unk_token_, "\" is not in the vocabulary");
    unk_id_ = it->second;
  }
  byte_fallback_ = bpe_model.get_bool("byte_fallback", false);
  fuse_unk_ = bpe_model.get_bool("fuse_unk", false);
  ignore_merges_ = bpe_model.get_bool("ignore_merges", false);
  prefix_ = std::string(bpe_model.get_string("continuing_subword_prefix"));
  suffix_ = std::string(bpe_model.get_string("end_of_word_suffix"));
  if (byte_mode_ && (!prefix_.empty() || !suffix_.empty() || byte_fallback_))
    return make_error(errc::unsupported, "a byte-level BPE with a continuing-subword prefix, end-of-word suffix or byte fallback");

  // Merges: "a b" strings or ["a", "b"] pairs, rank = position.
  const json::value& merges = bpe_model["merges"];
  if (!merges.is_null() && !merges.is_array()) return make_error(errc::parse_error, "\"merges\" is not an array");
  merges_.reserve(merges.size());
  std::uint32_t rank = 0;
  for (const json::value& m : merges.items()) {
    std::string_view a, b;
    if (m.is_string()) {
      const std::string_view s = m.as_string();
      const auto sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos)
        return make_error(errc::parse_error, "merge ", rank, " \"", s.substr(0, 64), "\" is not two tokens separated by one space");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].as_string(), b = m[1].as_string();
    } else {
      return make_error(errc::parse_error, "merge ", rank, " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto ia = vocab_.find(std::string(a)), ib = vocab_.find(std::string(b));
    if (ia == vocab_.end() || ib == vocab_.end())
      return make_error(errc::parse_error, "merge ", rank, " (\"", a.substr(0, 64), "\", \"", b.substr(0, 64),
                        "\"): a part is not in the vocabulary");
    std::string merged(a);
    merged += b.substr(std::min(b.size(), b.substr(0, prefix_.size()) == prefix_ ? prefix_.size() : std::size_t{0}));
    auto im = vocab_.find(merged);
    if (im == vocab_.end())
      return make_error(errc::parse_error, "merge ", rank, ": the merged token \"", std::string_view(merged).substr(0, 64),
                        "\" is not in the vocabulary");
    merges_.add(ia->second, ib->second, im->second, rank);
    ++rank;
  }

  if (byte_mode_) {
    // Initial symbols: the token of each single byte; the vocabulary by bytes.
    const auto chars = text::byte_to_char();
    byte_ids_.fill(-1);
    for (unsigned b = 0; b < 256; ++b) {
      std::string s;
      unicode::append_utf8(s, chars[b]);
      if (auto it = vocab_.find(s); it != vocab_.end()) byte_ids_[b] = it->second;
    }
    if (ignore_merges_) {
      vocab_bytes_.reserve(vocab_.size());
      for (const auto& [entry, id] : vocab_)
        if (auto bytes = text::bytes_of(entry)) vocab_bytes_.emplace(std::move(*bytes), id);
    }
  }
  return {};
}

SLM_INLINE status tokenizer::parse_added(const json::value& list) {
  if (list.is_null()) return {};
  if (!list.is_array()) return make_error(errc::parse_error, "expected an array");
  for (const json::value& v : list.items()) {
    added_token a;
    const auto id = v["id"].as_int64();
    if (!id || !v["content"].is_string()) return make_error(errc::parse_error, "an entry without an integer id and a content string");
    a.id = static_cast<std::int32_t>(*id);
    a.content = std::string(v["content"].as_string());
    if (a.content.empty()) return make_error(errc::parse_error, "token ", a.id, " has empty content");
    a.special = v.get_bool("special", false);
    a.single_word = v.get_bool("single_word", false);
    a.lstrip = v.get_bool("lstrip", false);
    a.rstrip = v.get_bool("rstrip", false);
    a.normalized = v.get_bool("normalized", !a.special);
    // A normalized token's text is its normalized form (HF stores it so: decode shows it).
    SLM_TRY(set_token(a.id, a.content));
    if (a.special) special_[static_cast<std::size_t>(a.id)] = true;
    added_ids_.emplace(a.content, a.id);  // (the first of duplicates, as find() had it)
    added_.push_back(std::move(a));
  }
  return {};
}

SLM_INLINE status tokenizer::parse_post(const json::value& v) {
  if (v.is_null()) return {};
  if (!v.is_object()) return make_error(errc::parse_error, "expected an object or null");
  const std::string_view type = v.get_string("type");
  auto id_of = [&](const json::value& pair) -> result<std::int32_t> {  // ["<s>", 1]
    if (!pair.is_array() || pair.size() != 2 || !pair[1].as_int64())
      return make_error(errc::parse_error, type, ": a special token is not [\"token\", id]");
    return static_cast<std::int32_t>(*pair[1].as_int64());
  };
  if (type == "Sequence") {
    const json::value& list = v["processors"];
    if (!list.is_array()) return make_error(errc::parse_error, "Sequence without \"processors\"");
    for (const json::value& p : list.items()) SLM_TRY(parse_post(p));
    return {};
  }
  if (type == "ByteLevel") return {};  // offsets only
  if (type == "TemplateProcessing") {
    const json::value& single = v["single"];
    if (!single.is_array()) return make_error(errc::parse_error, "TemplateProcessing without \"single\"");
    const json::value& table = v["special_tokens"];
    std::vector<template_item> items;
    for (const json::value& piece : single.items()) {
      if (piece.find("Sequence")) {
        items.push_back({true, {}});
        continue;
      }
      const json::value* sp = piece.find("SpecialToken");
      if (!sp) return make_error(errc::parse_error, "TemplateProcessing: an item is neither Sequence nor SpecialToken");
      const std::string_view name = sp->get_string("id");
      const json::value* entry = table.find(name);
      if (!entry) return make_error(errc::parse_error, "TemplateProcessing: special token \"", name, "\" is not in special_tokens");
      template_item it;
      for (const json::value& id : (*entry)["ids"].items()) {
        auto n = id.as_int64();
        if (!n || *n < 0 || static_cast<std::size_t>(*n) >= max_vocab)
          return make_error(errc::parse_error, "TemplateProcessing: a bad id for \"", name, "\"");
        it.ids.push_back(static_cast<std::int32_t>(*n));
      }
      items.push_back(std::move(it));
    }
    template_ = std::move(items);
    return {};
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto cls = id_of(v["cls"]);
    if (!cls.ok()) return std::move(cls).error();
    auto sep = id_of(v["sep"]);
    if (!sep.ok()) return std::move(sep).error();
    template_ = {{false, {*cls}}, {true, {}}, {false, {*sep}}};
    return {};
  }
  return make_error(errc::unsupported, "post-processor type \"", type, "\"");
}

// transformers rebuilds the post-processor from tokenizer_config.json (update_post_processor):
//  * transformers 5 (TokenizersBackend, the base of every fast tokenizer): when the config
//    names add_bos_token or add_eos_token, the post-processor becomes TemplateProcessing
//    "[bos_token] $A [eos_token]", each token present when its flag is true (a flag not named
//    is false) and the token is set (a null bos_token / eos_token turns its flag off); the
//    tokenizer.json post-processor is replaced, so a BOS it added is neither doubled nor kept
//    when add_bos_token is false. A config naming neither flag keeps tokenizer.json's.
//  * The Llama-family classes pass add_bos_token = true, add_eos_token = false by default, so
//    they always rebuild it: LlamaTokenizer(Fast), CodeLlamaTokenizer(Fast), GemmaTokenizer(Fast),
//    CohereTokenizer(Fast) (in transformers 4 these classes alone honoured the flags, always;
//    PreTrainedTokenizerFast, GPT2TokenizerFast, Qwen2TokenizerFast and the rest ignored them).
//    Their bos_token / eos_token default to the class's ("<s>" / "</s>" for Llama) where the
//    config does not name them.
// DeepSeek-V3 (LlamaTokenizerFast, add_bos_token true, a ByteLevel post-processor) so gets its
// BOS. bos_token / eos_token are a string or an AddedToken object {"content": ...}. A token the
// vocabulary lacks is an error: transformers would add it as a new token, a model's files never
// need that.
SLM_INLINE status tokenizer::apply_add_bos_eos(const json::value& cfg) {
  struct family {
    std::string_view cls, bos, eos;  // the class and its default bos_token / eos_token
  };
  static constexpr family llama_family[] = {{"LlamaTokenizer", "<s>", "</s>"},
                                            {"CodeLlamaTokenizer", "<s>", "</s>"},
                                            {"GemmaTokenizer", "<bos>", "<eos>"},
                                            {"CohereTokenizer", "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>"}};
  const json::value& klass = cfg["tokenizer_class"];
  const std::string_view cls = klass.is_string() ? klass.as_string() : std::string_view();
  const family* fam = nullptr;
  for (const family& f : llama_family)
    if (cls == f.cls || cls == cat(f.cls, "Fast")) fam = &f;
  const json::value& add_bos = cfg["add_bos_token"];
  const json::value& add_eos = cfg["add_eos_token"];
  if (!fam && add_bos.is_null() && add_eos.is_null()) return {};
  std::vector<template_item> items;
  auto token_item = [&](std::string_view flag, std::string_view key) -> status {
    // The config's token (a string or {"content": ...}; null: none), else the class's default.
    const json::value* v = cfg.find(key);
    const std::string_view name = !v ? (fam ? (key == "bos_token" ? fam->bos : fam->eos) : std::string_view())
                                  : v->is_string() ? v->as_string()
                                                   : v->get_string("content");
    if (name.empty()) return {};  // no such token: the flag is off
    auto id = find(name);
    if (!id)
      return make_error(errc::format_error, "\"", flag, "\" asks for ", key, " \"", name.substr(0, 64),
                        "\", which is not in tokenizer.json");
    items.push_back({false, {*id}});
    return {};
  };
  if (add_bos.is_bool() ? add_bos.as_bool() : fam != nullptr) SLM_TRY(token_item("add_bos_token", "bos_token"));
  items.push_back({true, {}});
  if (add_eos.is_bool() && add_eos.as_bool()) SLM_TRY(token_item("add_eos_token", "eos_token"));
  template_ = std::move(items);
  return {};
}

SLM_INLINE void tokenizer::guess_specials() {
  auto first_of = [&](std::initializer_list<std::string_view> names) -> std::int32_t {
    for (std::string_view n : names)
      if (auto id = find(n)) return *id;
    return -1;
  };
  specials_.bos = first_of({"<|bos|>", "<BOS>", "<s>", "<|begin_of_text|>", "<|startoftext|>",
                            "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[BOS]"});
  specials_.eos = first_of({"<|eos|>", "<EOS>", "</s>", "<|end_of_text|>", "<|endoftext|>",
                            "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>", "[EOS]"});
  specials_.pad = first_of({"<|pad|>", "<PAD>", "<pad>", "[PAD]", "<|fim_pad|>"});
  specials_.unk = unk_id_ >= 0 ? unk_id_ : first_of({"<|unk|>", "<UNK>", "<unk>", "[UNK]"});
  specials_.fim_prefix = first_of({"<|fim_prefix|>", "<FIM_PREFIX>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>"});
  specials_.fim_suffix = first_of({"<|fim_suffix|>", "<FIM_SUFFIX>", "<fim_suffix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "hole\xEF\xBD\x9C>"});
  specials_.fim_middle = first_of({"<|fim_middle|>", "<FIM_MIDDLE>", "<fim_middle>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>"});
  // Added-token tables for matching: raw (special or normalized=false) and normalized.
  for (std::size_t i = 0; i < added_.size(); ++i) {
    const added_token& a = added_[i];
    if (a.normalized && !normalizers_.empty()) {
      normalized_added_.add(normalize(a.content), i);
    } else if (a.normalized) {
      normalized_added_.add(a.content, i);
    } else {
      raw_added_.add(a.content, i);
    }
  }
}

SLM_INLINE status tokenizer::encode_run::regex_out_of_steps(std::string_view what, const regex& re, std::size_t bytes) const {
  if (steps != 0) return {};
  return make_error(errc::out_of_range, "tokenizer: the ", what, " regex '", std::string_view(re.pattern()).substr(0, 80),
                    "' ran out of its work budget (", regex_steps_per_byte, " steps per byte scanned) on ", bytes,
                    " bytes of text: it backtracks too much (a hostile or broken tokenizer.json)");
}

SLM_INLINE std::string tokenizer::normalize(std::string_view in) const {
  encode_run run;
  std::string s;
  return normalize_into(in, s, run).ok() ? s : std::string();
}

SLM_INLINE status tokenizer::normalize_into(std::string_view in, std::string& out, encode_run& run) const {
  // Every step's output is bounded by the original input, so a chain cannot compound.
  const std::size_t bound = max_growth * in.size() + growth_slack;
  auto too_large = [&](std::string_view what, std::size_t size) {
    return make_error(errc::out_of_range, "tokenizer: the ", what, " normalizer's output would be ", size,
                      " bytes or more for ", in.size(), " bytes of text (at most ", max_growth, " times the text + ",
                      growth_slack, "); refused as hostile");
  };
  out.assign(in);
  std::string next;
  for (const normalize_step& n : normalizers_) {
    if (run.stop()) return std::move(run.err);
    switch (n.kind) {
      case normalize_step::nfc: out = unicode::nfc(out); break;
      case normalize_step::nfd: out = unicode::nfd(out); break;
      case normalize_step::nfkc: out = unicode::nfkc(out); break;
      case normalize_step::lowercase: out = text::lowercase(out); break;
      case normalize_step::strip: out = text::strip_white(out, n.left, n.right); break;
      case normalize_step::replace:
        if (n.re) run.grant(out.size());
        if (!text::replace_all_within(next, out, n.a, n.re.get(), n.b, bound, &run.steps)) {
          if (n.re && run.steps == 0) {
            if (status st = run.regex_out_of_steps("Replace normalizer", *n.re, out.size()); !run.stop()) return st;
            return std::move(run.err);
          }
          return too_large("Replace", next.size());
        }
        out.swap(next);
        break;
      case normalize_step::prepend:
        if (!out.empty() && out.size() + n.a.size() > bound) return too_large("Prepend", out.size() + n.a.size());
        if (!out.empty()) out.insert(0, n.a);
        break;
    }
    if (out.size() > bound) return too_large("normalizer chain", out.size());
  }
  return {};
}

SLM_INLINE void tokenizer::model_encode(std::string_view piece, std::vector<std::int32_t>& out, encode_scratch& s) const {
  if (piece.empty()) return;
  using cache_t = encode_scratch::piece_cache;
  const bool cacheable = piece.size() <= cache_t::max_piece;
  cache_t::key k;
  if (cacheable) {
    k = cache_t::make_key(piece);
    if (auto hit = s.cache.find(k); !hit.empty()) {
      if (hit.size() == 1) out.push_back(hit[0]);
      else out.insert(out.end(), hit.begin(), hit.end());
      return;
    }
  }
  const std::size_t first = out.size();
  model_encode_uncached(piece, out, s);
  if (cacheable) s.cache.insert(k, std::span(out).subspan(first));
}

SLM_INLINE void tokenizer::model_encode_uncached(std::string_view piece, std::vector<std::int32_t>& out, encode_scratch& s) const {
  auto& sym = s.symbols;
  sym.clear();
  if (byte_mode_) {
    if (ignore_merges_) {
      auto it = vocab_bytes_.find(piece);
      if (it != vocab_bytes_.end()) return out.push_back(it->second);
    }
    for (char c : piece) {
      const std::int32_t id = byte_ids_[static_cast<unsigned char>(c)];
      if (id >= 0) sym.push_back(id);
      else if (unk_id_ >= 0 && !(fuse_unk_ && !sym.empty() && sym.back() == unk_id_)) sym.push_back(unk_id_);
    }
  } else {
    if (ignore_merges_) {
      auto it = vocab_.find(piece);
      if (it != vocab_.end()) return out.push_back(it->second);
    }
    std::string& key = s.text;
    bool pending_unk = false;
    for (std::size_t i = 0; i < piece.size();) {
      std::size_t len = 1;
      unicode::decode(piece, i, len);
      key.clear();
      if (i > 0) key += prefix_;
      key.append(piece.substr(i, len));
      if (i + len == piece.size()) key += suffix_;
      auto it = vocab_.find(key);
      if (it != vocab_.end()) {
        if (pending_unk) sym.push_back(unk_id_), pending_unk = false;
        sym.push_back(it->second);
      } else {
        bool done = false;
        if (byte_fallback_) {
          std::size_t n0 = sym.size();
          done = true;
          for (std::size_t k = 0; k < len && done; ++k) {
            static constexpr char hex[] = "0123456789ABCDEF";
            const auto b = static_cast<unsigned char>(piece[i + k]);
            const char name[7] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>', 0};
            auto bt = vocab_.find(std::string(name, 6));
            if (bt == vocab_.end()) done = false;
            else sym.push_back(bt->second);
          }
          if (!done) sym.resize(n0);  // (a pending unk stays pending across byte tokens, as in HF)
        }
        if (!done && unk_id_ >= 0) {
          if (pending_unk && !fuse_unk_) sym.push_back(unk_id_);
          pending_unk = true;
        }
      }
      i += len;
    }
    if (pending_unk) sym.push_back(unk_id_);
  }
  merges_.merge(sym, s.bpe);
  out.insert(out.end(), sym.begin(), sym.end());
}

SLM_INLINE void tokenizer::add_template(bool before, std::vector<std::int32_t>& out) const {
  bool seen_sequence = false;
  for (const template_item& t : template_) {
    if (t.sequence) {
      seen_sequence = true;
      continue;
    }
    if (seen_sequence != before) out.insert(out.end(), t.ids.begin(), t.ids.end());
  }
}

SLM_INLINE status tokenizer::run_decoder(const decode_step& d, std::vector<std::string>& toks, encode_run& run) const {
  switch (d.kind) {
    case decode_step::bytes:
      for (std::string& t : toks)
        if (auto b = text::bytes_of(t)) t = std::move(*b);
      return {};
    case decode_step::metaspace:
      for (std::size_t i = 0; i < toks.size(); ++i)
        toks[i] = text::replace_all(toks[i], d.a, nullptr, i == 0 && d.metaspace_strip_first ? std::string() : std::string(" "));
      return {};
    case decode_step::replace: {
      std::string next;
      for (std::string& t : toks) {
        if (d.re) run.grant(t.size());
        if (!text::replace_all_within(next, t, d.a, d.re.get(), d.b, max_growth * t.size() + growth_slack, &run.steps)) {
          if (d.re && run.steps == 0) return run.regex_out_of_steps("Replace decoder", *d.re, t.size());
          return make_error(errc::out_of_range, "tokenizer: the Replace decoder's output for a token of ", t.size(),
                            " bytes would pass ", max_growth, " times its size + ", growth_slack, "; refused as hostile");
        }
        t.swap(next);
      }
      return {};
    }
    case decode_step::byte_fallback: {
      std::vector<std::string> out;
      std::string bytes;
      for (std::string& t : toks) {
        auto hexval = [](char c) -> int {
          return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        };
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hexval(t[3]) >= 0 && hexval(t[4]) >= 0) {
          bytes.push_back(static_cast<char>(hexval(t[3]) * 16 + hexval(t[4])));
          continue;
        }
        if (!bytes.empty()) out.push_back(std::exchange(bytes, {}));
        out.push_back(std::move(t));
      }
      if (!bytes.empty()) out.push_back(std::move(bytes));
      toks = std::move(out);
      return {};
    }
    case decode_step::fuse: {
      std::string all;
      for (const std::string& t : toks) all += t;
      toks.assign(1, std::move(all));
      return {};
    }
    case decode_step::strip:
      for (std::string& t : toks) {
        std::size_t b = 0, e = t.size();
        for (std::size_t k = 0; k < d.start && e - b >= d.a.size() && t.compare(b, d.a.size(), d.a) == 0; ++k) b += d.a.size();
        for (std::size_t k = 0; k < d.stop && e - b >= d.a.size() && t.compare(e - d.a.size(), d.a.size(), d.a) == 0; ++k)
          e -= d.a.size();
        t = t.substr(b, e - b);
      }
      return {};
    case decode_step::bpe_suffix:
      for (std::size_t i = 0; i < toks.size(); ++i)
        toks[i] = text::replace_all(toks[i], d.a, nullptr, i + 1 == toks.size() ? std::string() : std::string(" "));
      return {};
  }
  return {};
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
