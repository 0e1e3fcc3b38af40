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
#include "slm/io/checkpoint.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/status.hpp"

namespace slm {

struct feed_forward {
  linear gate, up, down;  // gate.w.rows == 0 for the plain (ungated) form
  activation act = activation::silu;

  bool gated() const noexcept { return gate.out() != 0; }
  std::size_t hidden() const noexcept { return up.out(); }

  // The plain form from two named modules (Megatron: `linear_fc1` [hidden, d] and
  // `linear_fc2` [d, hidden] under a prefix; GELU for NAM56R's MTP MLP and shared expert).
  static result<feed_forward> load_plain(const checkpoint& ck, const std::string& up_module,
                                         const std::string& down_module, std::size_t d, std::size_t hidden,
                                         activation act);
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

SLM_INLINE result<feed_forward> feed_forward::load_plain(const checkpoint& ck, const std::string& up_module,
                                                         const std::string& down_module, std::size_t d,
                                                         std::size_t hidden, activation act) {
  feed_forward f;
  f.act = act;
  auto lu = load_linear(ck, up_module, hidden, d);
  if (!lu.ok()) return std::move(lu).take_error();
  f.up = std::move(*lu);
  auto ld = load_linear(ck, down_module, d, hidden);
  if (!ld.ok()) return std::move(ld).take_error();
  f.down = std::move(*ld);
  return f;
}

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
