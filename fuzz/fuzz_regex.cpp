// Fuzz target: the regex compiler and matcher, and NFC, over hostile bytes. Input =
// pattern + '\0' + text. Whatever compiles must search the text to its end without
// crashing, every match must lie inside the text, and NFC must keep invalid bytes.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "slm/text/regex.hpp"
#include "slm/text/unicode.hpp"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view pattern = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? std::string_view{} : input.substr(nul + 1);

  const std::string once = slm::unicode::nfc(text);
  check(slm::unicode::nfc(once) == once);  // NFC is idempotent, invalid bytes included
  (void)slm::unicode::nfkc(text);

  auto re = slm::regex::compile(pattern);
  if (!re.ok()) {
    check(!re.message().empty());
    return 0;
  }
  std::size_t pos = 0, b = 0, e = 0, rounds = 0;
  while (pos <= text.size() && re->search(text, pos, b, e) && ++rounds < 100000) {
    check(b >= pos && b <= e && e <= text.size());
    if (e == b) {
      if (e >= text.size()) break;
      std::size_t len = 0;
      slm::unicode::decode(text, e, len);
      pos = e + len;
    } else {
      pos = e;
    }
  }
  return 0;
}
