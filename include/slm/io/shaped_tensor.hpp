// slm/io/shaped_tensor.hpp - the shaped-tensor loader every binder uses: a checkpoint
// tensor of exactly the shape the config implies, as f32 (norm weights, biases, SSM
// parameters, embedding tables) or as integers (hash tables of n-gram embeddings).
//
// A tensor of another shape is an error naming it, its shape and the expected one; a
// value that is not finite is an error naming its index (a NaN in a norm weight would
// otherwise poison every logit silently). Floats come from any float dtype the
// checkpoint stores (f32, bf16, f16, FP8), converted exactly.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#include "slm/core/buffer.hpp"
#include "slm/core/status.hpp"
#include "slm/io/checkpoint.hpp"

namespace slm {

// Tensor `name` of exactly `dims`, as f32 into `out` (resized to the element count).
status load_shaped(const checkpoint& ck, std::string_view name, std::initializer_list<std::size_t> dims, floats& out);
// The same, returned.
result<floats> load_shaped(const checkpoint& ck, std::string_view name, std::initializer_list<std::size_t> dims);
// A 1-D parameter (norm weight, bias, router correction bias) of exactly n values.
result<floats> load_vector(const checkpoint& ck, std::string_view name, std::size_t n);
// Tensor `name` of exactly `dims`, stored as I64 or I32 and contiguous, into out[0, prod(dims)).
status load_shaped_ints(const checkpoint& ck, std::string_view name, std::initializer_list<std::size_t> dims,
                        std::int64_t* out);

#if SLM_DEFINE_IO

namespace detail {
// The shape check: the element count, or an error naming the tensor and both shapes.
SLM_INLINE result<std::size_t> check_shape(const checkpoint& ck, std::string_view name, const tensor_view& t,
                                           std::initializer_list<std::size_t> dims) {
  bool same = t.rank() == dims.size();
  std::size_t n = 1, i = 0;
  std::string want = "[";
  for (std::size_t d : dims) {
    if (same && static_cast<std::size_t>(t.dim(i)) != d) same = false;
    want += cat(i ? ", " : "", d);
    n *= d;
    ++i;
  }
  want += "]";
  if (!same)
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", name, "' has shape ", t.shape().to_string(),
                      ", expected ", want);
  return n;
}
}  // namespace detail

SLM_INLINE status load_shaped(const checkpoint& ck, std::string_view name, std::initializer_list<std::size_t> dims,
                              floats& out) {
  auto t = ck.float_tensor(name);
  if (!t.ok()) return std::move(t).take_error();
  auto n = detail::check_shape(ck, name, *t, dims);
  if (!n.ok()) return std::move(n).take_error();
  SLM_TRY(out.resize(*n));
  if (auto s = t->to_f32(out.span()); !s.ok()) return std::move(s).with_context(cat(ck.dir().string(), ": tensor '", name, "'"));
  for (std::size_t j = 0; j < *n; ++j)
    if (!std::isfinite(out[j]))
      return make_error(errc::format_error, ck.dir().string(), ": tensor '", name, "' holds ", out[j], " at ", j);
  return {};
}

SLM_INLINE result<floats> load_shaped(const checkpoint& ck, std::string_view name, std::initializer_list<std::size_t> dims) {
  floats v;
  SLM_TRY(load_shaped(ck, name, dims, v));
  return v;
}

SLM_INLINE result<floats> load_vector(const checkpoint& ck, std::string_view name, std::size_t n) {
  return load_shaped(ck, name, {n});
}

SLM_INLINE status load_shaped_ints(const checkpoint& ck, std::string_view name, std::initializer_list<std::size_t> dims,
                                   std::int64_t* out) {
  auto t = ck.tensor(name);
  if (!t.ok()) return std::move(t).take_error();
  auto n = detail::check_shape(ck, name, *t, dims);
  if (!n.ok()) return std::move(n).take_error();
  if (t->type() != dtype::i64 && t->type() != dtype::i32)
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", name, "' holds ", safetensors_name(t->type()),
                      ", expected I64 (or I32)");
  if (!t->is_contiguous())
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", name, "' is not contiguous");
  const std::byte* p = t->data();
  for (std::size_t k = 0; k < *n; ++k) {
    if (t->type() == dtype::i64) {
      std::memcpy(&out[k], p + 8 * k, 8);
    } else {
      std::int32_t v;
      std::memcpy(&v, p + 4 * k, 4);
      out[k] = v;
    }
  }
  return {};
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
