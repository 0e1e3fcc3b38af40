// Fuzz target: parse_rules (a host's routing rules as JSON) over hostile text with the
// labels cpp, cmake and shell, then a rules_router built from what it accepts routing
// hostile requests. Errors are fine; crashes and hangs are not. Checked (traps): accepted
// rules have a known label, a non-empty pattern and a positive finite weight, the router
// accepts them, and every decision scores each label >= 0 with a permutation as ranking.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "slm/ensemble/router_rules.hpp"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace slm::ensemble;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string labels[] = {"cpp", "cmake", "shell"};
  auto rules = parse_rules(text, labels);
  if (!rules.ok()) {
    check(!rules.error().message().empty());
    return 0;
  }
  for (const route_rule& r : *rules) {
    check(std::find(std::begin(labels), std::end(labels), r.label) != std::end(labels));
    check(!r.pattern.empty());
    check(r.weight > 0 && std::isfinite(r.weight));
  }
  for (bool with_defaults : {false, true}) {
    auto router = with_defaults ? rules_router::with_defaults({"cpp", "cmake", "shell"}, *rules, {.default_label = "shell"})
                                : rules_router::create({"cpp", "cmake", "shell"}, *rules);
    check(router.ok());
    // The input as the prompt and as the file name; a shebang prompt; a named file.
    const route_request requests[] = {{text, text}, {text, "x/CMakeLists.txt"}, {"#!/bin/sh\nset -e\n", "a.sh"},
                                      {"", ""}};
    for (const route_request& q : requests) {
      auto d = router->route(q);
      check(d.ok());
      check(d->scores.size() == 3 && d->ranking.size() == 3 && !d->reason.empty());
      for (double s : d->scores) check(s >= 0 && !std::isnan(s));
      std::vector<std::size_t> sorted = d->ranking;
      std::sort(sorted.begin(), sorted.end());
      check(sorted[0] == 0 && sorted[1] == 1 && sorted[2] == 2);
      check(d->scores[d->ranking[0]] > 0);  // something (or the default) won
    }
  }
  return 0;
}
