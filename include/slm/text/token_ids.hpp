// slm/text/token_ids.hpp - token ids written as text: "5,17,3" or "5 17 3".
//
//   auto ids = slm::parse_token_ids("5,17,3");             // result<vector<int32_t>>: {5, 17, 3}
//   SLM_TRY(slm::check_vocabulary(*ids, m.vocab()));        // every id in [0, vocab)
//   std::string s = slm::format_token_ids(*ids, ' ');       // "5 17 3"
//
// The form a host takes ids in from a person or a script (a command line, a settings
// field) and prints them back: decimal integers in [0, 2^31) separated by commas, by
// whitespace or by both ("5, 17, 3"; a line as format_token_ids or `slm tokenize` prints
// it, newline included, reads back). Leading and trailing whitespace is ignored; an empty
// item (two commas in a row, or a comma at either end) is an error, not skipped. Errors
// name the item and its index: "'x' (item 1) is not a token id (a non-negative integer)";
// a caller adds where the text came from (status::with_context).
#pragma once
#include "slm/core/build_mode.hpp"

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "slm/core/status.hpp"

namespace slm {

// The ids of `text` (see above); at least one.
inline result<std::vector<std::int32_t>> parse_token_ids(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
  std::vector<std::int32_t> ids;
  std::size_t b = 0;
  while (b < text.size() && space(text[b])) ++b;
  if (b == text.size()) return make_error(errc::invalid_argument, "no token ids (a list such as 5,17,3 or 5 17 3)");
  for (;;) {
    std::size_t e = b;
    while (e < text.size() && text[e] != ',' && !space(text[e])) ++e;
    const std::string_view item = text.substr(b, e - b);
    std::int32_t id = 0;
    const auto r = std::from_chars(item.data(), item.data() + item.size(), id);
    if (item.empty() || r.ec != std::errc() || r.ptr != item.data() + item.size() || id < 0)
      return make_error(errc::invalid_argument, "'", item, "' (item ", ids.size(),
                        ") is not a token id (a non-negative integer)");
    ids.push_back(id);
    while (e < text.size() && space(text[e])) ++e;  // one separator: whitespace, a comma, or both
    if (e < text.size() && text[e] == ',') {
      ++e;
      while (e < text.size() && space(text[e])) ++e;
    } else if (e == text.size()) {
      break;
    }
    b = e;
  }
  return ids;
}

// The index of the first id outside [0, vocab), or ids.size() when there is none (the one
// range check of token ids: check_token_ids and check_vocabulary below).
inline std::size_t first_id_outside(std::span<const std::int32_t> ids, std::size_t vocab) noexcept {
  std::size_t i = 0;
  while (i < ids.size() && ids[i] >= 0 && static_cast<std::size_t>(ids[i]) < vocab) ++i;
  return i;
}

// Every id of a call in [0, vocab), for a forward or a completion (errc::out_of_range);
// `what` names the call in the message.
inline status check_token_ids(const char* what, std::span<const std::int32_t> ids, std::size_t vocab) {
  if (const std::size_t t = first_id_outside(ids, vocab); t < ids.size())
    return make_error(errc::out_of_range, what, ": token id ", ids[t], " at index ", t,
                      " is outside the vocabulary [0, ", vocab, ")");
  return {};
}

// Every id in [0, vocab): an id past it is the caller's mistake, caught before any work.
inline status check_vocabulary(std::span<const std::int32_t> ids, std::size_t vocab) {
  if (const std::size_t i = first_id_outside(ids, vocab); i < ids.size())
    return make_error(errc::invalid_argument, "token id ", ids[i], " (item ", i,
                      ") is outside the model's vocabulary [0, ", vocab, ")");
  return {};
}

// The ids as parse_token_ids reads them, `separator` between them ("5,17,3").
inline std::string format_token_ids(std::span<const std::int32_t> ids, char separator = ',') {
  std::string out;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i) out.push_back(separator);
    out += std::to_string(ids[i]);
  }
  return out;
}

}  // namespace slm
