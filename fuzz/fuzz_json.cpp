// Fuzz target: the JSON reader over hostile bytes, and the writer over whatever it accepts.
// Whatever parses must dump to JSON that parses again and dumps identically, and every
// object's lookup index must agree with its member list. Violations trap (no abort()).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "slm/io/json.hpp"

namespace {

using slm::json::value;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// find() returns each member's own value, or with duplicates allowed the first one with
// its key. Recursion is bounded by the parse depth limit below.
void check_tree(const value& v, bool duplicates_allowed) {
  if (v.is_number() && v.is_integer()) {
    if (const auto u = v.as_uint64()) {
      check(static_cast<double>(*u) == v.as_double());
    } else {
      check(v.as_int64().has_value() && static_cast<double>(*v.as_int64()) == v.as_double());
    }
  }
  for (const value& item : v.items()) check_tree(item, duplicates_allowed);
  const auto members = v.members();
  for (std::size_t i = 0; i < members.size(); ++i) {
    const value* found = v.find(members[i].key);
    check(found != nullptr);
    if (!duplicates_allowed) check(found == &members[i].val);
    if (duplicates_allowed) {
      std::size_t first = 0;
      while (members[first].key != members[i].key) ++first;
      check(found == &members[first].val);
    }
    check_tree(members[i].val, duplicates_allowed);
  }
  check(v.size() == v.items().size() + members.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  slm::json::parse_options opt;
  opt.max_depth = 64;
  opt.max_bytes = 1 << 20;

  auto strict = slm::json::parse(text, opt);
  opt.allow_duplicate_keys = true;
  auto lenient = slm::json::parse(text, opt);
  // Allowing duplicates only ever accepts more, and otherwise changes nothing.
  if (strict.ok()) check(lenient.ok() && slm::json::dump(*strict) == slm::json::dump(*lenient));
  // Every error but the size limit's says where it happened.
  if (!strict.ok() && size <= (1u << 20)) check(strict.message().rfind("line ", 0) == 0);
  if (!lenient.ok()) return 0;

  check_tree(*lenient, true);
  if (strict.ok()) check_tree(*strict, false);

  const std::string once = slm::json::dump(*lenient);
  opt.max_bytes = once.size() + 1;
  auto again = slm::json::parse(once, opt);
  check(again.ok());
  check(slm::json::dump(*again) == once);

  const value copy = *again;  // copies keep working indexes
  check_tree(copy, true);
  return 0;
}
