// slm/core/hash.hpp - the integer mixers the library shares: splitmix64 (Vigna), the
// seeding generator of the sampler's xoshiro256** and the counter-based source of
// synthetic weights, and FNV-1a 64 over bytes, the key of a synthetic tensor's values.
// Both are fixed published functions, so their values are the same on every platform and
// in every build.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <string_view>

namespace slm {

// Advances `x` by the golden-ratio increment and returns the next output.
constexpr std::uint64_t splitmix64(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t fnv1a64(std::string_view bytes) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull;
  for (const char ch : bytes) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001B3ull;
  return h;
}

}  // namespace slm
