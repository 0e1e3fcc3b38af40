// slm/layers/mlp.hpp - the feed-forward block (gated or plain) of a decoder layer and of each expert.
//
//   gated (SwiGLU family):  y = down( act(gate(x)) * up(x) )      Llama, Qwen, DeepSeek, experts
//   plain:                  y = down( act(up(x)) )                 Nemotron-H (relu^2), StarCoder2 (c_fc, c_proj)
//
// The activation is a runtime tag (layers/activation.hpp), dispatched once per call.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <concepts>
#include <numbers>
#include <cstddef>
#include <string_view>

#include "slm/layers/activation.hpp"
#include "slm/core/buffer.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/status.hpp"

namespace slm {

struct feed_forward {
  linear gate, up, down;  // gate.w.rows == 0 for the plain (ungated) form
  activation act = activation::silu;

  bool gated() const noexcept { return gate.out() != 0; }
  std::size_t hidden() const noexcept { return up.out(); }

  status forward(const float* x, std::size_t T, float* out, workspace& ws, compute_context& cx) const {
    return forward(x, T, out, ws.ffn, cx);
  }

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    if (gated()) fn("gate_proj", gate, true);
    fn("up_proj", up, true);
    fn("down_proj", down, true);
  }

  // [T, d] -> [T, d]. scratch grows to 2 * T * hidden floats.
  status forward(const float* x, std::size_t T, float* out, floats& scratch, compute_context& cx) const;
};

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE status feed_forward::forward(const float* x, std::size_t T, float* out, floats& scratch,
                                        compute_context& cx) const {
  const std::size_t H = hidden(), d = up.in();
  SLM_TRY(scratch.resize(2 * T * H));
  float* g = scratch.data();
  float* u = g + T * H;
  if (gated()) {
    SLM_TRY(gate.apply(x, T, g, cx));  // [T, d] x [d, H] -> [T, H]
    SLM_TRY(up.apply(x, T, u, cx));    // [T, d] x [d, H] -> [T, H]
    activate(act, g, u, T * H);
  } else {
    SLM_TRY(up.apply(x, T, g, cx));    // [T, d] x [d, H] -> [T, H]
    activate(act, g, nullptr, T * H);
  }
  (void)d;
  return down.apply(g, T, out, cx);    // [T, H] x [H, d] -> [T, d]
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
