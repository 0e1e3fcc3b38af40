// slm/core/heap_estimate.hpp - estimates of the heap bytes that standard containers hold: what
// tokenizer::memory_bytes() adds up, and so what the ensemble registry's budget charges a
// loaded tokenizer.
//
// Method. Each allocation of n bytes is charged as a 64-bit glibc malloc chunk: n plus an
// 8-byte header, rounded up to 16, and at least 32 bytes (block()). A container is charged
// its capacity, not its size. A node-based container (std::unordered_map) is charged one
// allocation per node -- the next pointer, a cached hash and the value -- plus its bucket
// array, and the heap its keys own. A string held in its small-string buffer owns no heap.
// It estimates what the allocator hands out for the objects that stay; it does not count
// the allocator's free lists and fragmentation, nor temporary memory while loading.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace slm::heap_estimate {

// The chunk that malloc(n) takes.
constexpr std::uint64_t block(std::uint64_t n) noexcept {
  if (n == 0) return 0;
  const std::uint64_t chunk = (n + 8 + 15) & ~std::uint64_t{15};
  return chunk < 32 ? 32 : chunk;
}

// The heap a string owns: none while its text is in the small-string buffer.
inline std::uint64_t of(const std::string& s) noexcept {
  const std::less<const void*> before;
  const void* text = s.data();
  const void* object = &s;
  const void* object_end = &s + 1;
  if (!before(text, object) && before(text, object_end)) return 0;
  return block(static_cast<std::uint64_t>(s.capacity()) + 1);
}

// A vector's buffer, its elements' own heap not included.
template <class T>
std::uint64_t of_buffer(const std::vector<T>& v) noexcept {
  return block(static_cast<std::uint64_t>(v.capacity()) * sizeof(T));
}

inline std::uint64_t of(const std::vector<bool>& v) noexcept { return block((static_cast<std::uint64_t>(v.capacity()) + 7) / 8); }

inline std::uint64_t of(const std::vector<std::string>& v) noexcept {
  std::uint64_t n = of_buffer(v);
  for (const std::string& s : v) n += of(s);
  return n;
}

// A hash map from strings: buckets, one node per element, and the keys' heap.
template <class Value, class Hash, class Eq, class Alloc>
std::uint64_t of(const std::unordered_map<std::string, Value, Hash, Eq, Alloc>& m) noexcept {
  using node_value = typename std::unordered_map<std::string, Value, Hash, Eq, Alloc>::value_type;
  std::uint64_t n = block(static_cast<std::uint64_t>(m.bucket_count()) * sizeof(void*));
  n += static_cast<std::uint64_t>(m.size()) * block(sizeof(void*) + sizeof(node_value) + sizeof(std::size_t));
  for (const auto& kv : m) n += of(kv.first);
  return n;
}

}  // namespace slm::heap_estimate
