// slm/layers/norm.hpp - normalization policies: RMSNorm (with weight w, 1 + w, or none) and
// LayerNorm, applied row by row to [T, d] activations.
//
//   rms_norm:       y = x / sqrt(mean(x^2) + eps) * w            (Llama, Qwen, DeepSeek)
//   rms_norm(1+w):  y = x / sqrt(mean(x^2) + eps) * (1 + w)      (Gemma, Qwen3-Next)
//   layer_norm:     y = (x - mean) / sqrt(var + eps) * w + b     (DeepSeek-V3.2's indexer, StarCoder2)
//
// Statistics are accumulated in double: d is at most a few thousand, and a double sum
// makes the result independent of the summation order, so any later SIMD version can
// be tested against this one exactly up to the final rounding.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>

#include "slm/core/buffer.hpp"

namespace slm {

enum class norm_weight_kind { plain, one_plus, none };

// Norm policies: how a stored RMSNorm weight w scales (a composition names one; the
// config-driven model uses the plain form, which every supported model_type has).
struct rms_norm_weighted {
  static constexpr norm_weight_kind kind = norm_weight_kind::plain;
};
struct rms_norm_unit_offset {  // Gemma-style checkpoints store w and scale by 1 + w
  static constexpr norm_weight_kind kind = norm_weight_kind::one_plus;
};
template <class N>
concept norm_policy = requires {
  { N::kind } -> std::convertible_to<norm_weight_kind>;
};

// 1 / sqrt(mean(x^2) + eps) of one row of d values, the sum in double (see above): the
// statistic of every RMSNorm here (nanochat's weightless one too, models/nanochat/block.hpp).
inline float rms_inverse(const float* x, std::size_t d, float eps) noexcept {
  double ss = 0;
  for (std::size_t i = 0; i < d; ++i) ss += static_cast<double>(x[i]) * x[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + static_cast<double>(eps)));
}

struct rms_norm {
  floats weight;  // [d], empty for norm_weight_kind::none
  float eps = 1e-6f;
  norm_weight_kind kind = norm_weight_kind::plain;

  std::size_t dim() const noexcept { return weight.size(); }

  // One row of d values; in and out may alias.
  void apply_row(const float* in, float* out, std::size_t d) const noexcept {
    const float inv = rms_inverse(in, d, eps);
    switch (kind) {
      case norm_weight_kind::plain:
        for (std::size_t i = 0; i < d; ++i) out[i] = weight[i] * (in[i] * inv);
        break;
      case norm_weight_kind::one_plus:
        for (std::size_t i = 0; i < d; ++i) out[i] = (1.0f + weight[i]) * (in[i] * inv);
        break;
      case norm_weight_kind::none:
        for (std::size_t i = 0; i < d; ++i) out[i] = in[i] * inv;
        break;
    }
  }
  // [T, d] with rows ld apart -> [T, d] rows ldo apart.
  void apply(const float* in, std::size_t T, std::size_t d, std::size_t ld, float* out, std::size_t ldo) const noexcept {
    for (std::size_t t = 0; t < T; ++t) apply_row(in + t * ld, out + t * ldo, d);
  }
};

struct layer_norm {
  floats weight, bias;  // [d] each
  float eps = 1e-5f;

  void apply_row(const float* in, float* out, std::size_t d) const noexcept {
    double s = 0;
    for (std::size_t i = 0; i < d; ++i) s += in[i];
    const double mean = s / static_cast<double>(d);
    double v = 0;
    for (std::size_t i = 0; i < d; ++i) v += (in[i] - mean) * (in[i] - mean);
    const double inv = 1.0 / std::sqrt(v / static_cast<double>(d) + static_cast<double>(eps));
    for (std::size_t i = 0; i < d; ++i)
      out[i] = static_cast<float>((in[i] - mean) * inv) * weight[i] + bias[i];
  }
};

// A block's norm, chosen by the checkpoint: RMSNorm, or LayerNorm with weight and bias
// where `layer` is set (StarCoder2), or none where `identity` is set (a NAM56R attention
// layer stored without an input norm: its sublayer reads the residual stream as it is).
struct block_norm {
  rms_norm rms;
  layer_norm ln;
  bool layer = false;
  bool identity = false;

  // Whether apply() can run on rows of d values: the identity, or a weight (and, for a
  // LayerNorm, a bias) for every column. A default block_norm fits no d > 0: a norm left
  // unloaded is refused where it would be read, not read out of bounds.
  bool fits(std::size_t d) const noexcept {
    if (identity) return true;
    if (layer) return ln.weight.size() == d && ln.bias.size() == d;
    return rms.kind == norm_weight_kind::none || rms.weight.size() == d;
  }

  // [T, d] with rows ld apart -> [T, d] rows ldo apart.
  void apply(const float* in, std::size_t T, std::size_t d, std::size_t ld, float* out, std::size_t ldo) const noexcept {
    if (identity) {
      for (std::size_t t = 0; t < T; ++t) std::copy(in + t * ld, in + t * ld + d, out + t * ldo);
      return;
    }
    if (!layer) return rms.apply(in, T, d, ld, out, ldo);
    for (std::size_t t = 0; t < T; ++t) ln.apply_row(in + t * ld, out + t * ldo, d);
  }
};

}  // namespace slm
