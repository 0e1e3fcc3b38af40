// slm/text/detokenizer.hpp - streaming detokenization: token ids in, whole UTF-8 characters out.
//
// A token can end in the middle of a character (byte-level BPE splits emoji and CJK
// across tokens), so text cannot be printed token by token as it is. A detokenizer keeps
// the bytes that may still become a character and hands out the rest:
//   * push(id) returns the bytes that are final: never a prefix of a UTF-8 sequence that
//     the next token could complete. A sequence that can no longer become valid (a stray
//     continuation byte, an invalid lead) is released as it is: the stream's bytes are
//     exactly decode(ids), nothing is replaced or dropped;
//   * flush() returns what is held at the end of the stream.
// So the concatenation of every push() and the final flush() equals tokenizer::decode of
// all the ids. Token-by-token decoders (ByteLevel) cost O(1) per token; other decoder
// chains (Metaspace, ByteFallback, Strip: the first token or a run of byte tokens decode
// differently from their parts) re-decode the ids so far and hand out the new suffix.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm {

class detokenizer {
 public:
  explicit detokenizer(const tokenizer& t, decode_options opt = {}) : tok_(&t), opt_(opt) {}

  result<std::string> push(std::int32_t id);

  std::string flush();

  void reset() {
    ids_.clear();
    held_.clear();
    emitted_ = 0;
  }

  // The number of trailing bytes of s that form the start of a UTF-8 sequence that more
  // bytes could still complete (0 to 3).
  static std::size_t incomplete_tail(std::string_view s) noexcept;

 private:
  const tokenizer* tok_;
  decode_options opt_;
  std::vector<std::int32_t> ids_;  // re-decoding chains only
  std::string held_;
  std::size_t emitted_ = 0;
};

#if SLM_DEFINE_TEXT

SLM_INLINE result<std::string> detokenizer::push(std::int32_t id) {
  if (id < 0 || static_cast<std::size_t>(id) >= tok_->vocab_size())
    return make_error(errc::out_of_range, "detokenize: token id ", id, " is outside the vocabulary [0, ", tok_->vocab_size(), ")");
  if (tok_->decodes_token_by_token()) {
    if (!(opt_.skip_special_tokens && tok_->is_special(id))) held_ += tok_->token_bytes(id);
  } else {
    ids_.push_back(id);
    auto text = tok_->decode(ids_, opt_);
    if (!text.ok()) return std::move(text).error();
    // The decoder may rewrite the start (it never does for the supported chains once a
    // second token exists); new text is what lies past the bytes already handed out.
    if (text->size() > emitted_) held_ = text->substr(emitted_);
    else held_.clear();
  }
  const std::size_t keep = incomplete_tail(held_);
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  emitted_ += out.size();
  return out;
}

SLM_INLINE std::string detokenizer::flush() {
  std::string out = std::move(held_);
  held_.clear();
  emitted_ += out.size();
  return out;
}

SLM_INLINE std::size_t detokenizer::incomplete_tail(std::string_view s) noexcept {
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto lead = static_cast<unsigned char>(s[n - back]);
    if ((lead & 0xC0) == 0x80) continue;  // a continuation byte: look further back
    const std::size_t need = lead >= 0xC2 && lead <= 0xDF ? 2 : lead >= 0xE0 && lead <= 0xEF ? 3 : lead >= 0xF0 && lead <= 0xF4 ? 4 : 0;
    if (need <= back) return 0;  // complete, or not a lead byte at all
    // The second byte's range depends on the lead (no overlongs, surrogates, > U+10FFFF).
    if (back >= 2) {
      const auto second = static_cast<unsigned char>(s[n - back + 1]);
      const unsigned lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
      const unsigned hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
      if (second < lo || second > hi) return 0;
    }
    return back;
  }
  return 0;
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
