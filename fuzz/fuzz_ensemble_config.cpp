// Fuzz target: ensemble_config over hostile ensemble.json text, with a base directory that
// holds no models (so accepted member paths fail their existence check: errors are fine,
// crashes, hangs and unbounded allocation are not), and again without the path checks so
// the router/strategy validation behind them is reached. Also parse_byte_size on the raw
// bytes. What a config it accepts promises is checked; violations trap (no abort()).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slm/ensemble/config.hpp"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using slm::ensemble::ensemble_config;
  if (size <= 64) {
    auto n = slm::ensemble::parse_byte_size(text);
    check(n.ok() ? *n <= (std::uint64_t{1} << 62) : !n.error().message().empty());
  }
  for (bool paths : {true, false}) {
    ensemble_config::options opt;
    opt.check_paths = paths;
    auto c = ensemble_config::parse(text, "/nonexistent/slm-fuzz-base", opt);
    if (!c.ok()) {
      check(!c.error().message().empty());  // an error always says why
      continue;
    }
    check(!paths);  // no member directory exists under the base
    check(!c->members.empty());
    for (std::size_t i = 0; i < c->members.size(); ++i) {
      const auto& m = c->members[i];
      check(!m.name.empty() && !m.domain.empty());
      check(m.temperature > 0 && std::isfinite(m.temperature));
      check(c->find(m.name) == i);  // names are unique
    }
    if (!c->router.default_member.empty()) check(c->find(c->router.default_member).has_value());
    if (!c->router.member.empty()) check(c->find(c->router.member).has_value());
    for (const auto& kv : c->strategy.params.members()) {
      if (kv.key == "drafter" || kv.key == "target" || kv.key == "reviewer")
        check(c->find(kv.val.as_string()).has_value());
      if (kv.key == "order")
        for (const auto& n : kv.val.items()) check(c->find(n.as_string()).has_value());
    }
  }
  return 0;
}
