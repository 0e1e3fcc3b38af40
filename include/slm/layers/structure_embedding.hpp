// slm/layers/structure_embedding.hpp - the optional structure embedding of NAM56R's input (cppmega
// `CppMegaStructureEmbedding`, cppmega/features/structure/embedding.py @ d57d1c1; spec
// nam56r.md §2.1): an additive term Struct(side)_t of h0_t = E[x_t] + NGram(x)_t + Struct_t
// computed from optional per-token side inputs (not from the tokens).
//
// Components, in this fixed order, each with its vocabulary V_c:
//   structure (num_categories, 9), dep_level (max_dep_level, 16), ast_depth (max_ast_depth),
//   sibling_index (max_sibling_index), ast_node_type (num_node_types).
// The active set is a subset (NAM56R production: `core` = structure + dep_level); C active
// components, offsets off_c = sum of V of the active components before c, B = bottleneck.
// Defaults are the Megatron launcher's (max_ast_depth 20, max_sibling_index 10,
// num_node_types 64, bottleneck 64), not the module's own (64, 64, 256, 64).
//
// Parameters (Megatron names under `embedding.cppmega_structure.`):
//   stacked_emb.weight [sum_c V_c, B]   up_proj.weight [d, B]   component_scales [C]
//
// Per token t, with present_c = 1 when component c's input was given, else 0:
//   w_t      = sum_c (scale_c present_c) stacked_emb[off_c + clamp(id_{c,t}, 0, V_c - 1)]  [B]
//              (summed in component order, f32)
//   Struct_t = W_up w_t                                          [B] x [B, d] -> [d]
// A missing component contributes nothing (cppmega looks up row 0 and zeroes its scale:
// the same, as the loader requires finite weights). When every active component is
// missing cppmega returns a scalar 0: nothing is added (forward reports false).
// Production checkpoints keep stacked_emb / up_proj at their zero initialisation (the
// Megatron data carries no structure ids): is_zero() tells, and add_to() then skips the
// module. Everything is f32, as torch's f32 forward, up to the summation order of the
// B-term products.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/buffer.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/status.hpp"

namespace slm {

enum class structure_component : std::uint8_t { structure, dep_level, ast_depth, sibling_index, ast_node_type };
inline constexpr std::size_t structure_component_count = 5;

struct structure_embedding_config {
  static constexpr std::uint8_t core = 0b00011;  // structure + dep_level
  static constexpr std::uint8_t all = 0b11111;

  std::size_t d_model = 0;
  std::size_t num_categories = 9;
  std::size_t max_dep_level = 16;
  std::size_t max_ast_depth = 20;
  std::size_t max_sibling_index = 10;
  std::size_t num_node_types = 64;
  std::size_t bottleneck = 64;
  std::uint8_t active = core;  // bit c: component c is active

  bool is_active(std::size_t c) const noexcept { return c < structure_component_count && ((active >> c) & 1u); }
  std::size_t vocab_of(std::size_t c) const noexcept {
    const std::size_t v[structure_component_count] = {num_categories, max_dep_level, max_ast_depth, max_sibling_index,
                                                      num_node_types};
    return c < structure_component_count ? v[c] : 0;
  }
  std::size_t num_active() const noexcept {
    std::size_t n = 0;
    for (std::size_t c = 0; c < structure_component_count; ++c) n += is_active(c) ? 1 : 0;
    return n;
  }
  // Row offset of active component c in stacked_emb.
  std::size_t offset_of(std::size_t c) const noexcept {
    std::size_t o = 0;
    for (std::size_t i = 0; i < c; ++i)
      if (is_active(i)) o += vocab_of(i);
    return o;
  }
  std::size_t total_vocab() const noexcept { return offset_of(structure_component_count); }

  status validate() const;
};

// One call's side inputs: ids[c] holds T ids of component c (any value: clamped), or is
// empty when the input is missing (cppmega's None). Inputs of inactive components are
// ignored, as cppmega ignores them.
struct structure_inputs {
  std::array<std::span<const std::int32_t>, structure_component_count> ids{};

  structure_inputs& set(structure_component c, std::span<const std::int32_t> v) noexcept {
    ids[static_cast<std::size_t>(c)] = v;
    return *this;
  }
};

class structure_embedding {
 public:
  structure_embedding_config cfg;
  floats table;   // stacked_emb.weight [sum V_c, B]
  floats scales;  // component_scales [C], in active order
  linear up_proj;  // [d, B]
  bool zero = false;  // stacked_emb or up_proj all zero: the term is identically 0

  bool is_zero() const noexcept { return zero; }

  // y [T, d] = Struct of T tokens' side inputs. Returns false, with y untouched, when every
  // active component is missing (cppmega's scalar 0: nothing to add). Scratch: ws.proj.
  result<bool> forward(const structure_inputs& in, std::size_t T, float* y, workspace& ws, compute_context& cx) const;

  // x [T, d] += Struct (the decoder's use); nothing when the module is zero or every
  // input is missing. Scratch: ws.proj and ws.attn.
  status add_to(const structure_inputs& in, std::size_t T, float* x, workspace& ws, compute_context& cx) const;

  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("up_proj", up_proj, true);
  }
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status structure_embedding_config::validate() const {
  if (d_model == 0 || bottleneck == 0)
    return make_error(errc::invalid_argument, "structure_embedding: d_model and bottleneck must be positive");
  if (active == 0 || (active & ~all) != 0)
    return make_error(errc::invalid_argument, "structure_embedding: active component mask ", unsigned{active},
                      " is empty or names unknown components");
  for (std::size_t c = 0; c < structure_component_count; ++c)
    if (is_active(c) && vocab_of(c) == 0)
      return make_error(errc::invalid_argument, "structure_embedding: active component ", c, " has vocabulary 0");
  return {};
}

SLM_INLINE result<bool> structure_embedding::forward(const structure_inputs& in, std::size_t T, float* y, workspace& ws,
                                                     compute_context& cx) const {
  std::size_t given = 0;
  for (std::size_t c = 0; c < structure_component_count; ++c) {
    if (!cfg.is_active(c) || in.ids[c].empty()) continue;
    if (in.ids[c].size() != T)
      return make_error(errc::invalid_argument, "structure_embedding: component ", c, " has ", in.ids[c].size(),
                        " ids for ", T, " tokens");
    ++given;
  }
  if (given == 0 || T == 0) return false;
  if (!y) return make_error(errc::invalid_argument, "structure_embedding: null output");
  const std::size_t B = cfg.bottleneck;
  SLM_TRY(ws.proj.assign_zero(T * B));
  float* w = ws.proj.data();
  std::size_t a = 0;  // index among active components
  for (std::size_t c = 0; c < structure_component_count; ++c) {
    if (!cfg.is_active(c)) continue;
    const std::size_t k = a++;
    if (in.ids[c].empty()) continue;  // missing: scale zeroed
    const float s = scales[k];
    const std::size_t off = cfg.offset_of(c);
    const auto hi = static_cast<std::int64_t>(cfg.vocab_of(c) - 1);
    for (std::size_t t = 0; t < T; ++t) {
      const auto id = static_cast<std::size_t>(std::clamp<std::int64_t>(in.ids[c][t], 0, hi));
      const float* row = table.data() + (off + id) * B;
      for (std::size_t b = 0; b < B; ++b) w[t * B + b] += s * row[b];
    }
  }
  // [T, B] x [B, d] -> [T, d]
  status st = up_proj.apply(w, T, y, cx);
  if (!st.ok()) return std::move(st).with_context("structure_embedding up_proj");
  return true;
}

SLM_INLINE status structure_embedding::add_to(const structure_inputs& in, std::size_t T, float* x, workspace& ws,
                                              compute_context& cx) const {
  if (zero || T == 0) return {};
  const std::size_t d = cfg.d_model;
  SLM_TRY(ws.attn.resize(T * d));
  auto r = forward(in, T, ws.attn.data(), ws, cx);
  if (!r.ok()) return std::move(r).take_error();
  if (!*r) return {};
  if (!x) return make_error(errc::invalid_argument, "structure_embedding: null output");
  for (std::size_t k = 0; k < T * d; ++k) x[k] += ws.attn[k];
  return {};
}


#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
