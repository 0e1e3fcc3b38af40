// slm/layers/rope.hpp - rotary position embeddings: frequency schedules and pairings.
//
// A RoPE is two independent choices:
//  * the frequency schedule (rope_params): inv_freq[i] for the rotary pairs, from
//    rope_theta and the scaling type: default, linear, llama3, yarn;
//  * the pairing, a policy type: rope_half_split rotates (x[i], x[i + r/2]) (Llama,
//    Qwen, GPT-NeoX layout; transformers' rotate_half), rope_interleaved rotates
//    (x[2i], x[2i + 1]) (GPT-J layout; DeepSeek's MLA with rope_interleave).
// Only the first rotary_dim = head_dim * partial_rotary_factor values of a head rotate.
//
// Angles follow transformers bit for bit where it matters: inv_freq is computed in
// double and stored as float (transformers computes it in float32; the two differ by at
// most an ulp), the angle is the float product position x inv_freq (as transformers'
// float32 matmul), and cos/sin of that float angle are scaled by attention_factor
// (YaRN's magnitude correction; 1 for the other types).
//
// One transformers behaviour decides bits and is reproduced on purpose: its inv_freq is
// a module buffer, so a model loaded in its checkpoint dtype (bf16 or f16, as the
// config's `dtype` / `torch_dtype` says) carries inv_freq rounded to that dtype, even
// when the activations are later computed in float32. The rounding moves angles by up to
// 2^-9 relative, which random-weight test models amplify to 1e-3 of their logits; the
// golden logits are reproduced to 1e-6 only with it. rope_params::inv_freq_dtype holds
// the choice (from the config; a host may set f32 for the unrounded schedule).
//
// Config keys (read by rope_params_from_config, models/hf/config.hpp; both styles load):
// transformers 5.x `rope_parameters` {rope_type, rope_theta, factor, ...}; transformers
// 4.x top-level `rope_theta` plus `rope_scaling` {type | rope_type, factor, ...} or null. `partial_rotary_factor` may sit at the top
// level or inside either dict. Types slm does not implement (dynamic, longrope, ...)
// are an error naming the key, never a silently different model.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "slm/core/dtype.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/status.hpp"

namespace slm {

enum class rope_type { none, standard, linear, llama3, yarn };

constexpr std::string_view to_string(rope_type t) noexcept {
  switch (t) {
    case rope_type::none: return "none";
    case rope_type::standard: return "default";
    case rope_type::linear: return "linear";
    case rope_type::llama3: return "llama3";
    case rope_type::yarn: return "yarn";
  }
  return "?";
}

struct rope_params {
  rope_type type = rope_type::standard;
  double theta = 10000.0;
  double factor = 1.0;
  double partial_rotary_factor = 1.0;
  // llama3
  double low_freq_factor = 1.0, high_freq_factor = 4.0;
  double original_max_position_embeddings = 0;
  // yarn
  double beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0;
  double attention_factor = 0;  // 0 = derive from factor (yarn)
  bool truncate = true;
  dtype inv_freq_dtype = dtype::f32;  // storage precision of inv_freq (see the file comment)

  // The multiplier DeepSeek applies to its softmax scale under YaRN: mscale(factor,
  // mscale_all_dim)^2 (transformers' yarn_apply_mscale); 1 otherwise.
  double softmax_scale_multiplier() const noexcept {
    if (type == rope_type::standard || type == rope_type::none || mscale_all_dim == 0) return 1.0;
    const double m = yarn_mscale(factor, mscale_all_dim);
    return m * m;
  }

  static double yarn_mscale(double scale, double m) noexcept {
    return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0;
  }
};

// The rotation of one model: inv_freq for rotary_dim / 2 pairs, and the cos/sin scale.
struct rope_table {
  std::vector<float> inv_freq;
  float attention_factor = 1.0f;
  std::size_t rotary_dim = 0;

  static rope_table make(const rope_params& p, std::size_t head_dim) {
    rope_table t;
    if (p.type == rope_type::none) return t;
    t.rotary_dim = static_cast<std::size_t>(static_cast<double>(head_dim) * p.partial_rotary_factor) & ~std::size_t{1};
    const std::size_t half = t.rotary_dim / 2;
    const double dim = static_cast<double>(t.rotary_dim);
    t.inv_freq.resize(half);
    std::vector<double> base(half);
    for (std::size_t i = 0; i < half; ++i) base[i] = 1.0 / std::pow(p.theta, static_cast<double>(2 * i) / dim);
    switch (p.type) {
      case rope_type::none: case rope_type::standard: break;
      case rope_type::linear:
        for (double& f : base) f /= p.factor;
        break;
      case rope_type::llama3: {
        const double old_ctx = p.original_max_position_embeddings;
        const double low_wavelen = old_ctx / p.low_freq_factor, high_wavelen = old_ctx / p.high_freq_factor;
        for (double& f : base) {
          const double wavelen = 2 * std::numbers::pi / f;
          if (wavelen > low_wavelen) {
            f /= p.factor;  // low frequencies: interpolate
          } else if (wavelen >= high_wavelen) {  // medium: blend
            const double smooth = (old_ctx / wavelen - p.low_freq_factor) / (p.high_freq_factor - p.low_freq_factor);
            f = (1 - smooth) * f / p.factor + smooth * f;
          }  // high frequencies: unchanged
        }
        break;
      }
      case rope_type::yarn: {
        double af = p.attention_factor;
        if (af == 0)
          af = (p.mscale != 0 && p.mscale_all_dim != 0)
                   ? rope_params::yarn_mscale(p.factor, p.mscale) / rope_params::yarn_mscale(p.factor, p.mscale_all_dim)
                   : rope_params::yarn_mscale(p.factor, 1);
        t.attention_factor = static_cast<float>(af);
        auto correction_dim = [&](double rotations) {
          return dim * std::log(p.original_max_position_embeddings / (rotations * 2 * std::numbers::pi)) /
                 (2 * std::log(p.theta));
        };
        double low = correction_dim(p.beta_fast), high = correction_dim(p.beta_slow);
        if (p.truncate) {
          low = std::floor(low);
          high = std::ceil(high);
        }
        low = std::max(low, 0.0);
        high = std::min(high, dim - 1);
        if (low == high) high += 0.001;
        for (std::size_t i = 0; i < half; ++i) {
          const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
          const double extrapolation = 1 - ramp;  // share of the unscaled frequency
          base[i] = base[i] / p.factor * (1 - extrapolation) + base[i] * extrapolation;
        }
        break;
      }
    }
    for (std::size_t i = 0; i < half; ++i) {
      const float f = static_cast<float>(base[i]);
      t.inv_freq[i] = p.inv_freq_dtype == dtype::bf16  ? bf16_to_f32(f32_to_bf16(f))
                      : p.inv_freq_dtype == dtype::f16 ? f16_to_f32(f32_to_f16(f))
                                                       : f;
    }
    return t;
  }

  // cos and sin of every pair's angle at one position: [rotary_dim / 2] each.
  void angles(std::size_t pos, float* cos_out, float* sin_out) const noexcept {
    const float p = static_cast<float>(pos);
    for (std::size_t i = 0; i < inv_freq.size(); ++i) {
      const double a = static_cast<double>(p * inv_freq[i]);  // float product, as transformers
      cos_out[i] = static_cast<float>(std::cos(a)) * attention_factor;
      sin_out[i] = static_cast<float>(std::sin(a)) * attention_factor;
    }
  }
};

// Pairings: rotate the first 2 * half values of one head in place.
struct rope_half_split {
  static void rotate(float* x, std::size_t half, const float* c, const float* s) noexcept {
    for (std::size_t i = 0; i < half; ++i) {
      const float a = x[i], b = x[i + half];
      x[i] = a * c[i] - b * s[i];
      x[i + half] = b * c[i] + a * s[i];
    }
  }
};
struct rope_interleaved {
  static void rotate(float* x, std::size_t half, const float* c, const float* s) noexcept {
    for (std::size_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1];
      x[2 * i] = a * c[i] - b * s[i];
      x[2 * i + 1] = b * c[i] + a * s[i];
    }
  }
};

template <class P>
concept rope_pairing = requires(float* x, const float* c) { P::rotate(x, std::size_t{}, c, c); };

// Rotates n_heads heads of one token (heads `stride` floats apart) at position pos.
template <rope_pairing Pairing>
void apply_rope(const rope_table& t, std::size_t pos, float* x, std::size_t n_heads, std::size_t stride,
                float* scratch /* rotary_dim floats */) noexcept {
  const std::size_t half = t.rotary_dim / 2;
  if (half == 0) return;
  t.angles(pos, scratch, scratch + half);
  for (std::size_t h = 0; h < n_heads; ++h) Pairing::rotate(x + h * stride, half, scratch, scratch + half);
}

// The pairing as a composition names it: a pairing type fixes it at compile time,
// rope_by_config takes it from the config (rope_interleave) at load.
struct rope_by_config {};
template <class P>
concept rope_policy = rope_pairing<P> || std::same_as<P, rope_by_config>;

// Does the config's pairing fit the composition's?
template <rope_policy P>
constexpr bool rope_fits(bool interleave) noexcept {
  if constexpr (std::same_as<P, rope_by_config>) return true;
  else return interleave == std::same_as<P, rope_interleaved>;
}

// The runtime choice, for the config-driven path.
inline void apply_rope(const rope_table& t, bool interleaved, std::size_t pos, float* x, std::size_t n_heads,
                       std::size_t stride, float* scratch) noexcept {
  if (interleaved) apply_rope<rope_interleaved>(t, pos, x, n_heads, stride, scratch);
  else apply_rope<rope_half_split>(t, pos, x, n_heads, stride, scratch);
}

// Rotates with the policy's pairing, or the runtime one for rope_by_config.
template <rope_policy P>
void apply_rope(const rope_table& t, bool interleaved, std::size_t pos, float* x, std::size_t n_heads,
                std::size_t stride, float* scratch) noexcept {
  if constexpr (std::same_as<P, rope_by_config>) apply_rope(t, interleaved, pos, x, n_heads, stride, scratch);
  else apply_rope<P>(t, pos, x, n_heads, stride, scratch);
}

}  // namespace slm
