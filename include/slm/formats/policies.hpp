// slm/formats/policies.hpp - weight formats as policy types.
//
// A layer that multiplies by a weight is written once, templated on its format:
//
//   template <slm::weight_format_policy Format>
//   struct linear { slm::weight_matrix w; ... Format::matmul(w, x, ...) ... };
//
// and a host names the composition (linear<slm::format::nvfp4>). The config-driven
// loader, which learns the format only from the checkpoint, gets the same
// instantiations through visit_format(id, fn), which calls fn with the policy object
// for a runtime weight_format. A policy states the block geometry, the bytes per row,
// the exact row dequantization (formats/dequantize.hpp) and the fused kernels (kernels/matmul.hpp).
#pragma once
#include "slm/core/build_mode.hpp"

#include <concepts>
#include <cstddef>
#include <span>
#include <utility>

#include "slm/formats/dequantize.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/formats/weights.hpp"

namespace slm {

template <class F>
concept weight_format_policy =
    requires(const weight_matrix& w, std::size_t n, std::span<float> row, const float* x, float* y, executor_ref ex) {
      { F::id } -> std::convertible_to<weight_format>;
      { F::block } -> std::convertible_to<std::size_t>;
      { F::row_bytes(n) } -> std::same_as<std::size_t>;
      { F::dequantize_row(w, n, row) } -> std::same_as<void>;
      { F::matmul(w, x, n, n, y, n, ex) } -> std::same_as<status>;
    };

namespace format {

template <weight_format Id>
struct policy {
  static constexpr weight_format id = Id;
  static constexpr std::size_t block = block_size(Id);  // elements per scale block along K
  static constexpr std::size_t row_bytes(std::size_t k) noexcept { return slm::row_bytes(Id, k); }

  // Exact (reference) dequantization of one row: K floats.
  static void dequantize_row(const weight_matrix& w, std::size_t row, std::span<float> out) noexcept {
    slm::dequantize_row(w, row, out);
  }

  // The activation precision a model layer runs this format at by default (bf16 for
  // NVFP4/MXFP4, f32 for the others: default_activations, kernels/table.hpp).
  static constexpr activation_precision activations = default_activations(Id);

  // Y[t, n] = sum_k X[t, k] W[n, k] with the row of the kernel table for this format at
  // `act` (by default what the model layers run, so both paths give the same numbers);
  // a weight of another format is a caller error.
  static status matmul(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                       std::size_t ldy, executor_ref ex, activation_precision act = activations) {
    if (w.format != Id)
      return make_error(errc::invalid_argument, "a ", to_string(w.format), " weight passed to the ", to_string(Id),
                        " policy");
    return slm::matmul(w, x, n_tok, ldx, y, ldy, ex, isa::best, act);
  }
};

// Any format, chosen per tensor at load (the config-driven path).
struct any {};

using f32 = policy<weight_format::f32>;
using bf16 = policy<weight_format::bf16>;
using f16 = policy<weight_format::f16>;
using fp8 = policy<weight_format::fp8_e4m3>;
using nvfp4 = policy<weight_format::nvfp4>;
using mxfp4 = policy<weight_format::mxfp4>;

}  // namespace format

// What a composition may name as its weight format: one policy, or format::any.
template <class F>
concept format_constraint = weight_format_policy<F> || std::same_as<F, format::any>;

// Calls fn(Policy{}) for the policy of a runtime format; every branch instantiates the
// same generic code, so the result type must not depend on the policy.
template <class Fn>
decltype(auto) visit_format(weight_format id, Fn&& fn) {
  switch (id) {
    case weight_format::bf16: return std::forward<Fn>(fn)(format::bf16{});
    case weight_format::f16: return std::forward<Fn>(fn)(format::f16{});
    case weight_format::fp8_e4m3: return std::forward<Fn>(fn)(format::fp8{});
    case weight_format::nvfp4: return std::forward<Fn>(fn)(format::nvfp4{});
    case weight_format::mxfp4: return std::forward<Fn>(fn)(format::mxfp4{});
    case weight_format::f32: break;
  }
  return std::forward<Fn>(fn)(format::f32{});
}

static_assert(weight_format_policy<format::f32> && weight_format_policy<format::bf16> &&
              weight_format_policy<format::f16> && weight_format_policy<format::fp8> &&
              weight_format_policy<format::nvfp4> && weight_format_policy<format::mxfp4>);

}  // namespace slm
