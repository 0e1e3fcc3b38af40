// slm/layers/activation.hpp - activation functions as policy types, and the runtime tag.
//
// Each policy is a type with one static function, so a layer templated on it inlines
// the function into its loop; `activation` is the tag the config-driven path reads from
// `hidden_act` (transformers' ACT2FN names) and dispatches once per call.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <concepts>
#include <cstddef>
#include <numbers>
#include <string_view>

#include "slm/core/status.hpp"

namespace slm {

// The scalar functions every layer shares (the SSM mixers' gates and step sizes, the
// MLPs' SiLU), written once.
inline float sigmoid(float x) noexcept { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) noexcept { return x / (1.0f + std::exp(-x)); }
// torch.nn.functional.softplus with its default threshold 20: x itself above it.
inline float softplus(float x) noexcept { return x > 20.0f ? x : std::log1p(std::exp(x)); }

enum class activation { silu, gelu, gelu_tanh, relu2, relu };

struct act_silu {
  static float apply(float x) noexcept { return silu(x); }
};
struct act_gelu {  // exact: x * Phi(x)
  static float apply(float x) noexcept {
    return static_cast<float>(0.5 * x * (1.0 + std::erf(static_cast<double>(x) / std::numbers::sqrt2)));
  }
};
struct act_gelu_tanh {
  static float apply(float x) noexcept {
    const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * static_cast<double>(x) * x * x);
    return static_cast<float>(0.5 * x * (1.0 + std::tanh(u)));
  }
};
struct act_relu2 {
  static float apply(float x) noexcept { return x > 0 ? x * x : 0.0f; }
};
struct act_relu {
  static float apply(float x) noexcept { return x > 0 ? x : 0.0f; }
};

template <class A>
concept activation_policy = requires(float x) {
  { A::apply(x) } -> std::same_as<float>;
};

// transformers' ACT2FN names.
inline result<activation> parse_activation(std::string_view name, std::string_view key = "hidden_act") {
  if (name == "silu" || name == "swish") return activation::silu;
  if (name == "gelu") return activation::gelu;
  if (name == "gelu_pytorch_tanh" || name == "gelu_new" || name == "gelu_fast") return activation::gelu_tanh;
  if (name == "relu2") return activation::relu2;
  if (name == "relu") return activation::relu;
  return make_error(errc::unsupported, "config.json: \"", key, "\" = \"", name,
                    "\" is not supported (silu, gelu, gelu_pytorch_tanh, relu2, relu are)");
}

template <class Fn>
decltype(auto) visit_activation(activation a, Fn&& fn) {
  switch (a) {
    case activation::gelu: return fn(act_gelu{});
    case activation::gelu_tanh: return fn(act_gelu_tanh{});
    case activation::relu2: return fn(act_relu2{});
    case activation::relu: return fn(act_relu{});
    case activation::silu: break;
  }
  return fn(act_silu{});
}

// h[i] = act(g[i]) * u[i] (gated) or act(g[i]) (u null), n values.
inline void activate(activation a, float* g, const float* u, std::size_t n) noexcept {
  visit_activation(a, [&](auto act) {
    using A = decltype(act);
    if (u)
      for (std::size_t i = 0; i < n; ++i) g[i] = A::apply(g[i]) * u[i];
    else
      for (std::size_t i = 0; i < n; ++i) g[i] = A::apply(g[i]);
  });
}

}  // namespace slm
