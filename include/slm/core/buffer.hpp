// slm/core/buffer.hpp - an owning, 64-byte aligned float array whose growth reports failure.
//
// Activations, KV caches and logits can be large (a 32k-token prompt's logits over a
// 150k vocabulary are 19 GB), so the model code never grows memory through std::vector,
// which aborts on failure under -fno-exceptions. A floats buffer grows by resize(), which
// returns out_of_memory as a value and keeps the old contents when it fails.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <utility>

#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"

namespace slm {

class floats {
 public:
  floats() noexcept = default;

  // At least n floats; existing values are kept, new ones are zero. Never shrinks the
  // allocation (a session reuses its buffers from call to call). A buffer that grows a
  // little at a time (a per-position history, one row per decode step) grows its
  // allocation by half at least, so n steps copy O(n) floats in all, not O(n^2); a jump
  // past that is allocated exactly, and where the larger allocation fails, the exact one
  // is tried.
  status resize(std::size_t n) {
    if (n <= capacity_) {
      if (n > size_) std::fill(data() + size_, data() + n, 0.0f);
      size_ = n;
      return {};
    }
    constexpr std::size_t most = std::numeric_limits<std::size_t>::max() / sizeof(float);
    if (n > most) return make_error(errc::out_of_memory, "cannot hold ", n, " floats");
    const std::size_t grown = capacity_ + capacity_ / 2;
    std::size_t cap = size_ > 0 && n < grown && grown <= most ? grown : n;
    auto b = aligned_buffer::allocate(cap * sizeof(float));
    if (!b.ok() && cap > n) b = aligned_buffer::allocate((cap = n) * sizeof(float));
    if (!b.ok()) return std::move(b).take_error();
    float* p = reinterpret_cast<float*>(b->data());
    if (size_) std::memcpy(p, data(), size_ * sizeof(float));
    std::fill(p + size_, p + n, 0.0f);
    buf_ = std::move(*b);
    size_ = n;
    capacity_ = cap;
    return {};
  }
  // Sized and filled with zeros.
  status assign_zero(std::size_t n) {
    if (n > capacity_) {
      size_ = 0;  // a new allocation: nothing to keep, and resize zeroes it once
      return resize(n);
    }
    std::fill(data(), data() + n, 0.0f);
    size_ = n;
    return {};
  }

  float* data() noexcept { return reinterpret_cast<float*>(buf_.data()); }
  const float* data() const noexcept { return reinterpret_cast<const float*>(buf_.data()); }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  float& operator[](std::size_t i) noexcept { return data()[i]; }
  float operator[](std::size_t i) const noexcept { return data()[i]; }
  std::span<float> span() noexcept { return {data(), size_}; }
  std::span<const float> span() const noexcept { return {data(), size_}; }

 private:
  aligned_buffer buf_;
  std::size_t size_ = 0, capacity_ = 0;
};

// The scratch buffers one session reuses across layers and calls, and the per-call
// context: what the layers of one forward call hand each other (cleared at the start of
// every call by the layer stack, models/stack.hpp).
struct workspace {
  floats proj, attn, index, ffn, expert;
  floats norm;  // a part's own second input norm (NAM56R's Mamba-3 pre_norm)
  // DSA IndexCache: the top-k key positions [T, topk_k] (int32 bits) of the last layer
  // of this call that ran its indexer, which later layers of the call reuse; topk_k = 0
  // while none has.
  floats topk;
  std::size_t topk_k = 0;
  // Whether this call is a forward without a cache from position 0 (nanochat's
  // GPT.forward, whose DSA layers take nanochat's sparse training path); the caller sets
  // it for each call.
  bool uncached_forward = false;
};

}  // namespace slm
