// Fuzz target: classifier_router::from_memory (the learned router's safetensors file) on
// hostile bytes. Errors are fine; crashes, hangs and unbounded allocation are not. What an
// accepted file promises is checked (violations trap, no abort()): its labels are valid,
// routing any text gives one finite probability per label summing to 1 and a ranking that
// is a permutation, and save -> load gives the same router back.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "slm/ensemble/router_classifier.hpp"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto r = slm::ensemble::classifier_router::from_memory(bytes);
  if (!r.ok()) {
    check(!r.error().message().empty());  // an error always says why
    return 0;
  }
  check(!r->labels().empty());
  check(r->weight().size() == r->labels().size() * r->features().buckets());
  check(r->bias().size() == r->labels().size());
  // Route the input itself (as text) and a fixed prompt.
  const std::string_view texts[] = {std::string_view(reinterpret_cast<const char*>(data), size),
                                    "cmake_minimum_required(VERSION 3.20)\n", ""};
  for (std::string_view t : texts) {
    auto d = r->route({t, "CMakeLists.txt"});
    check(d.ok());
    check(d->scores.size() == r->labels().size() && d->ranking.size() == r->labels().size());
    double sum = 0;
    for (double p : d->scores) {
      check(std::isfinite(p) && p >= 0 && p <= 1);
      sum += p;
    }
    check(std::fabs(sum - 1) < 1e-6);
    std::vector<std::size_t> sorted = d->ranking;
    std::sort(sorted.begin(), sorted.end());
    for (std::size_t i = 0; i < sorted.size(); ++i) check(sorted[i] == i);
  }
  // Round trip: what was accepted serialises and reads back to the same router.
  auto blob = r->serialize();
  check(blob.ok());
  auto again = slm::ensemble::classifier_router::from_memory(*blob);
  check(again.ok());
  check(std::equal(again->labels().begin(), again->labels().end(), r->labels().begin(), r->labels().end()));
  check(std::equal(again->weight().begin(), again->weight().end(), r->weight().begin(), r->weight().end()));
  check(std::equal(again->bias().begin(), again->bias().end(), r->bias().begin(), r->bias().end()));
  return 0;
}
