// slm/layers/moe.hpp - Mixture-of-Experts feed-forward: router policies, routed experts,
// shared experts.
//
// Routers (router_kind, layers/moe_routing.hpp):
//   softmax_topk     p = softmax(x Wr^T); the top-k experts by p; weights p_i, divided
//                    by their sum when norm_topk_prob (Qwen3-MoE's flag; Mixtral always).
//   sigmoid_grouped  s = sigmoid(x Wr^T); selection ranks s + e_score_correction_bias
//                    (the bias steers load balance and never enters the weights):
//                    experts form n_group groups, a group scores the sum of its two best,
//                    the topk_group best groups survive, the top-k experts among them are
//                    chosen; weights s_i (divided by sum + 1e-20 when norm_topk_prob)
//                    times routed_scaling_factor (DeepSeek-V3 "noaux_tc").
// Ties rank the lower expert index first.
//
// Experts run per token group: the tokens routed to expert e are gathered into one
// [n_e, d] block and multiplied by e's weights once, so a decode step reads the weights
// of its k selected experts and no others (linear::apply counts the bytes; the tests
// check it). Shared experts (DeepSeek) see every token.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "slm/core/buffer.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/mlp.hpp"
#include "slm/layers/moe_routing.hpp"
#include "slm/core/status.hpp"

namespace slm {

struct router_choice {
  std::uint32_t expert;
  float weight;
};

// Router policies: each turns one token's router logits [E] into k choices.
struct softmax_topk_router {
  bool normalize = true;

  void route(const float* logits, std::size_t E, std::size_t k, router_choice* out, float* tmp /* E */) const noexcept;

  // The k largest of v[0..n) (ties: lower index first), in descending order.
  static void top_k(const float* v, std::size_t n, std::size_t k, router_choice* out) noexcept;
};

struct sigmoid_grouped_router {
  const float* correction_bias = nullptr;  // [E]
  std::size_t n_group = 1, topk_group = 1;
  bool normalize = true;
  float scaling = 1.0f;

  void route(const float* logits, std::size_t E, std::size_t k, router_choice* out, float* tmp /* 2E */) const noexcept;
};

// The router as a composition names it: a router type fixes it at compile time,
// router_by_config takes it from the config.
struct router_by_config {};
template <class R>
concept router_policy = std::same_as<R, router_by_config> || std::same_as<R, softmax_topk_router> ||
                        std::same_as<R, sigmoid_grouped_router>;

template <router_policy Router = router_by_config>
struct basic_moe_ffn {
  linear gate;  // router [E, d]
  floats correction_bias;
  std::vector<feed_forward> experts;
  feed_forward shared;  // up.out() == 0: none
  router_kind router = router_kind::softmax_topk;
  std::size_t top_k = 1, n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling = 1.0f;

  std::size_t n_experts() const noexcept { return experts.size(); }

  status forward(const float* x, std::size_t T, float* out, workspace& ws, compute_context& cx) const {
    return forward(x, T, out, ws.expert, ws.ffn, cx);
  }

  // [T, d] -> [T, d].
  status forward(const float* x, std::size_t T, float* out, floats& scratch, floats& ffn_scratch,
                 compute_context& cx) const {
    const std::size_t E = n_experts(), d = gate.in(), k = top_k;
    // Layout: logits [T, E] | routing tmp [2E] | choices [T, k] (as float pairs) |
    //         gathered x [T, d] | expert out [T, d] | token list [T].
    const std::size_t n = T * E + 2 * E + 2 * T * k + 2 * T * d + T;
    SLM_TRY(scratch.resize(n));
    float* logits = scratch.data();
    float* tmp = logits + T * E;
    auto* choice = reinterpret_cast<router_choice*>(tmp + 2 * E);
    float* xs = tmp + 2 * E + 2 * T * k;
    float* ys = xs + T * d;
    auto* tokens = reinterpret_cast<std::uint32_t*>(ys + T * d);
    static_assert(sizeof(router_choice) == 2 * sizeof(float) && sizeof(std::uint32_t) == sizeof(float));

    SLM_TRY(gate.apply(x, T, logits, cx));  // [T, d] x [d, E] -> [T, E]
    const sigmoid_grouped_router grouped{correction_bias.data(), n_group, topk_group, norm_topk_prob, routed_scaling};
    const softmax_topk_router softmax{norm_topk_prob};
    for (std::size_t t = 0; t < T; ++t) {
      if constexpr (std::same_as<Router, sigmoid_grouped_router>) {
        grouped.route(logits + t * E, E, k, choice + t * k, tmp);
      } else if constexpr (std::same_as<Router, softmax_topk_router>) {
        softmax.route(logits + t * E, E, k, choice + t * k, tmp);
      } else if (router == router_kind::sigmoid_grouped) {
        grouped.route(logits + t * E, E, k, choice + t * k, tmp);
      } else {
        softmax.route(logits + t * E, E, k, choice + t * k, tmp);
      }
    }
    std::fill(out, out + T * d, 0.0f);
    for (std::size_t e = 0; e < E; ++e) {
      std::size_t n_e = 0;  // gather the tokens routed to e
      for (std::size_t t = 0; t < T; ++t)
        for (std::size_t i = 0; i < k; ++i)
          if (choice[t * k + i].expert == e) {
            tokens[n_e] = static_cast<std::uint32_t>(t * k + i);
            std::copy(x + t * d, x + (t + 1) * d, xs + n_e * d);
            ++n_e;
          }
      if (n_e == 0) continue;
      SLM_TRY(experts[e].forward(xs, n_e, ys, ffn_scratch, cx));  // [n_e, d] -> [n_e, d]
      for (std::size_t j = 0; j < n_e; ++j) {
        const router_choice ch = choice[tokens[j]];
        float* o = out + (tokens[j] / k) * d;
        for (std::size_t i = 0; i < d; ++i) o[i] += ch.weight * ys[j * d + i];
      }
    }
    if (shared.up.out() != 0) {
      SLM_TRY(shared.forward(x, T, ys, ffn_scratch, cx));  // [T, d] -> [T, d]
      for (std::size_t i = 0; i < T * d; ++i) out[i] += ys[i];
    }
    return {};
  }

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("gate", gate, false);  // the router: quantizers leave it precise
    for (const feed_forward& e : experts) e.for_each_linear(fn);
    if (shared.up.out() != 0) shared.for_each_linear(fn);
  }

};

using moe_ffn = basic_moe_ffn<>;

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE void softmax_topk_router::route(const float* logits, std::size_t E, std::size_t k, router_choice* out,
                                           float* tmp /* E */) const noexcept {
  const float m = *std::max_element(logits, logits + E);
  double sum = 0;
  for (std::size_t e = 0; e < E; ++e) sum += tmp[e] = std::exp(logits[e] - m);
  for (std::size_t e = 0; e < E; ++e) tmp[e] = static_cast<float>(tmp[e] / sum);
  top_k(tmp, E, k, out);
  for (std::size_t i = 0; i < k; ++i) out[i].weight = tmp[out[i].expert];
  if (normalize) {
    float s = 0;
    for (std::size_t i = 0; i < k; ++i) s += out[i].weight;
    for (std::size_t i = 0; i < k; ++i) out[i].weight /= s;
  }
}

SLM_INLINE void softmax_topk_router::top_k(const float* v, std::size_t n, std::size_t k, router_choice* out) noexcept {
  for (std::size_t i = 0; i < k; ++i) {
    std::size_t best = n;
    for (std::size_t e = 0; e < n; ++e) {
      bool taken = false;
      for (std::size_t j = 0; j < i; ++j) taken |= out[j].expert == e;
      if (!taken && (best == n || v[e] > v[best])) best = e;
    }
    out[i] = {static_cast<std::uint32_t>(best), v[best]};
  }
}

SLM_INLINE void sigmoid_grouped_router::route(const float* logits, std::size_t E, std::size_t k, router_choice* out,
                                              float* tmp /* 2E */) const noexcept {
  float* score = tmp;       // sigmoid(logits)
  float* choice = tmp + E;  // score + bias, then -inf outside the chosen groups
  for (std::size_t e = 0; e < E; ++e) {
    score[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = score[e] + (correction_bias ? correction_bias[e] : 0.0f);
  }
  if (n_group > 1) {
    const std::size_t per = E / n_group;
    float group_score[256];  // n_group <= E / 2; checked at load to fit
    for (std::size_t g = 0; g < n_group; ++g) {
      float a = -INFINITY, b = -INFINITY;  // the two best of the group
      for (std::size_t i = g * per; i < (g + 1) * per; ++i) {
        if (choice[i] > a) { b = a; a = choice[i]; }
        else if (choice[i] > b) b = choice[i];
      }
      group_score[g] = a + b;
    }
    router_choice keep[256];
    softmax_topk_router::top_k(group_score, n_group, topk_group, keep);
    for (std::size_t g = 0; g < n_group; ++g) {
      bool kept = false;
      for (std::size_t i = 0; i < topk_group; ++i) kept |= keep[i].expert == g;
      if (!kept)
        for (std::size_t i = g * per; i < (g + 1) * per; ++i) choice[i] = -INFINITY;
    }
  }
  softmax_topk_router::top_k(choice, E, k, out);
  float s = 0;
  for (std::size_t i = 0; i < k; ++i) s += out[i].weight = score[out[i].expert];
  for (std::size_t i = 0; i < k; ++i) {
    if (normalize) out[i].weight /= s + 1e-20f;
    out[i].weight *= scaling;
  }
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
