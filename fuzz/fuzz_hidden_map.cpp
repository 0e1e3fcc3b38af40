// Fuzz target: hidden_map::from_memory (a learned linear map between two members' hidden
// spaces, safetensors) on hostile bytes. Errors are fine; crashes, hangs and unbounded
// allocation are not. Checked (traps): an accepted map has consistent sizes and finite
// values, apply() on a small batch works, and save -> load gives the same map back.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "slm/ensemble/hidden_map.hpp"
#include "slm/core/parallel.hpp"

namespace {
void check(bool ok) {
  if (!ok) __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using slm::ensemble::hidden_map;
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto m = hidden_map::from_memory(bytes, "fuzz");
  if (!m.ok()) {
    check(!m.error().message().empty());
    return 0;
  }
  const std::size_t da = m->source_dim(), db = m->target_dim();
  check(da > 0 && db > 0);
  check(m->weight().size() == da * db && m->bias().size() == db);
  for (float v : m->weight()) check(std::isfinite(v));
  for (float v : m->bias()) check(std::isfinite(v));
  if (da * db <= (1u << 16)) {  // the data bounds it already; keep each run fast
    slm::serial_executor ex;
    slm::compute_context cx{ex};
    std::vector<float> x(2 * da, 0.5f), y(2 * db, 0.0f);
    check(m->apply(x.data(), 2, y.data(), cx).ok());
  }
  auto blob = m->serialize();
  check(blob.ok());
  auto again = hidden_map::from_memory(*blob, "again");
  check(again.ok());
  check(again->source_dim() == da && again->target_dim() == db);
  check(again->source() == m->source() && again->target() == m->target());
  check(std::equal(again->weight().begin(), again->weight().end(), m->weight().begin(), m->weight().end()));
  check(std::equal(again->bias().begin(), again->bias().end(), m->bias().begin(), m->bias().end()));
  return 0;
}
