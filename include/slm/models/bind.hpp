// slm/models/bind.hpp - what every model family's binder uses to build layers from named
// checkpoint tensors: a linear layer, a plain feed-forward block and a lightning indexer's
// weights, each with its shapes checked against the sizes the config implies.
//
// The layers (layers/) know their sizes, weights and math, never a checkpoint. A family's
// binder (models/hf/bind.hpp, models/nam56r/bind.hpp, models/nanochat/bind.hpp) knows its
// tensor names and config keys and fills the layers through these helpers. An error names
// the checkpoint directory and the tensor.
#pragma once
#include "slm/core/build_mode.hpp"

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/status.hpp"
#include "slm/formats/quant_config.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/io/shaped_tensor.hpp"
#include "slm/layers/activation.hpp"
#include "slm/layers/dsa.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/mlp.hpp"

namespace slm {

// The weight of linear module `module` (any on-disk layout formats/quant_config.hpp knows), with
// its shape checked against [out, in]; its bias is loaded when the checkpoint has one.
result<linear> load_linear(const checkpoint& ck, std::string_view module, std::size_t out, std::size_t in);

// The plain feed-forward block from two named modules: up [hidden, d] and down [d, hidden]
// (Megatron's linear_fc1 / linear_fc2, StarCoder2's c_fc / c_proj, up_proj / down_proj).
result<feed_forward> load_feed_forward(const checkpoint& ck, std::string_view up_module, std::string_view down_module,
                                       std::size_t d, std::size_t hidden, activation act);

// A lightning indexer's three projections, named `prefix` + names = {q, k, weights}, and its
// key LayerNorm `prefix`.k_norm.{weight, bias}; ix.n_heads and ix.head_dim must be set.
// q [n_heads head_dim, q_in], k [head_dim, hidden], weights [n_heads, hidden].
status load_indexer_weights(const checkpoint& ck, const std::string& prefix, const std::array<const char*, 3>& names,
                            std::size_t q_in, std::size_t hidden, lightning_indexer& ix);

// A module's full name: `prefix`.name, or the bare name when prefix is empty.
inline std::string join_module(std::string_view prefix, std::string_view name) {
  return prefix.empty() ? std::string(name) : cat(prefix, ".", name);
}

// load_linear into a layer's member (a binder fills a layer's projections one by one).
inline status load_linear_into(linear& dst, const checkpoint& ck, std::string_view module, std::size_t out,
                               std::size_t in) {
  auto l = load_linear(ck, module, out, in);
  if (!l.ok()) return std::move(l).take_error();
  dst = std::move(*l);
  return {};
}

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE result<linear> load_linear(const checkpoint& ck, std::string_view module, std::size_t out, std::size_t in) {
  auto w = load_linear_weight(ck, module);
  if (!w.ok()) return std::move(w).take_error();
  if (w->rows != out || w->cols != in)
    return make_error(errc::format_error, ck.dir().string(), ": module '", module, "' is [", w->rows, ", ", w->cols,
                      "], the config implies [", out, ", ", in, "]");
  linear l;
  l.w = *w;
  const std::string bias_name = cat(module, ".bias");
  if (ck.find(bias_name)) {
    auto b = load_vector(ck, bias_name, out);
    if (!b.ok()) return std::move(b).take_error();
    l.bias = std::move(*b);
  }
  return l;
}

SLM_INLINE result<feed_forward> load_feed_forward(const checkpoint& ck, std::string_view up_module,
                                                  std::string_view down_module, std::size_t d, std::size_t hidden,
                                                  activation act) {
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

SLM_INLINE status load_indexer_weights(const checkpoint& ck, const std::string& prefix,
                                       const std::array<const char*, 3>& names, std::size_t q_in, std::size_t hidden,
                                       lightning_indexer& ix) {
  auto q = load_linear(ck, prefix + names[0], ix.n_heads * ix.head_dim, q_in);
  if (!q.ok()) return std::move(q).take_error();
  auto k = load_linear(ck, prefix + names[1], ix.head_dim, hidden);
  if (!k.ok()) return std::move(k).take_error();
  auto w = load_linear(ck, prefix + names[2], ix.n_heads, hidden);
  if (!w.ok()) return std::move(w).take_error();
  auto nw = load_vector(ck, prefix + ".k_norm.weight", ix.head_dim);
  if (!nw.ok()) return std::move(nw).take_error();
  auto nb = load_vector(ck, prefix + ".k_norm.bias", ix.head_dim);
  if (!nb.ok()) return std::move(nb).take_error();
  ix.wq_b = std::move(*q);
  ix.wk = std::move(*k);
  ix.weights_proj = std::move(*w);
  ix.k_norm.weight = std::move(*nw);
  ix.k_norm.bias = std::move(*nb);
  return {};
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
