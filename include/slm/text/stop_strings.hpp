// slm/text/stop_strings.hpp - stopping generation at a stop string in streamed text.
//
// Text arrives a piece at a time (each decoded token). push() returns what is safe to
// show now: everything except the longest tail that could still grow into a stop string,
// which is held back. When a stop string completes, stopped() turns true and push()
// returns the text up to the start of the stop string; the stop string itself and
// anything after it are dropped, and later pushes return nothing. flush() at the end of
// generation (no stop) returns what was held back.
//
// Invariant: the concatenation of everything returned, followed by matched(), is a prefix
// of the concatenated input (the whole input when nothing stopped and flush() was called).
//
// Which stop wins: the one that completes first in the byte stream (the smallest end
// offset), and among those ending at the same byte the longest. That is the stop a
// byte-by-byte feed sees first, so the result does not depend on how the text is split
// into pieces. With stops "ab" and "abc", "xaab" stops at "ab" and emits "xa".
//
// Matching is on bytes, which is exact for UTF-8: a valid UTF-8 stop string matches only
// at character boundaries of valid UTF-8 text, and the held-back tail starts with the
// stop's first byte, so text is never split inside a character the input did not split.
// Empty stop strings are ignored.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace slm {

class stop_strings {
 public:
  explicit stop_strings(std::vector<std::string> stops);

  std::string push(std::string_view text);

  // End of generation without a stop: the held-back text (nothing once stopped).
  std::string flush();

  bool stopped() const noexcept { return stopped_; }

  // The stop string that ended the text; empty while not stopped.
  std::string_view matched() const noexcept {
    return stopped_ ? std::string_view(stops_[matched_]) : std::string_view();
  }

  // Ready for the next generation with the same stops.
  void reset() noexcept {
    held_.clear();
    stopped_ = false;
    matched_ = 0;
  }

 private:
  // The length of the longest suffix of held_ that is a proper prefix of some stop.
  std::size_t held_tail() const noexcept;

  std::vector<std::string> stops_;
  std::size_t longest_ = 0;
  std::string held_;  // text not yet returned: a possible start of a stop string
  bool stopped_ = false;
  std::size_t matched_ = 0;
};

#if SLM_DEFINE_TEXT

SLM_INLINE stop_strings::stop_strings(std::vector<std::string> stops) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
  for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

SLM_INLINE std::string stop_strings::push(std::string_view text) {
  if (stopped_) return {};
  held_.append(text);
  // The earliest-ending occurrence over all stops; ties go to the longer stop.
  std::size_t best_end = std::string::npos, best_start = 0, best_stop = 0;
  for (std::size_t s = 0; s < stops_.size(); ++s) {
    const std::size_t at = held_.find(stops_[s]);
    if (at == std::string::npos) continue;
    const std::size_t end = at + stops_[s].size();
    if (end < best_end || (end == best_end && at < best_start)) {
      best_end = end;
      best_start = at;
      best_stop = s;
    }
  }
  if (best_end != std::string::npos) {
    stopped_ = true;
    matched_ = best_stop;
    std::string out = held_.substr(0, best_start);
    held_.clear();
    return out;
  }
  const std::size_t keep = held_tail();
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

SLM_INLINE std::string stop_strings::flush() {
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

SLM_INLINE std::size_t stop_strings::held_tail() const noexcept {
  const std::string_view h(held_);
  for (std::size_t len = std::min(h.size(), longest_ == 0 ? 0 : longest_ - 1); len > 0; --len) {
    const std::string_view tail = h.substr(h.size() - len);
    for (const auto& s : stops_)
      if (s.size() > len && std::string_view(s).starts_with(tail)) return len;
  }
  return 0;
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
