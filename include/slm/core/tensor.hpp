// slm/core/tensor.hpp - tensor views over borrowed memory, and aligned owned buffers.
//
// A tensor_view never owns its bytes: it points into a memory-mapped checkpoint, a
// caller's span or an aligned_buffer, and the owner must outlive it. Loading a model
// therefore copies nothing; layers read weights straight from the mapping.
//
// Strides are in elements (like PyTorch), so a view can describe a transposed or
// sliced tensor. Sub-byte types (F4, F6) are only addressable as whole contiguous
// tensors: their strides describe packed bits, not elements, so slicing them is refused.
//
// Checkpoint data is not guaranteed to be aligned for its element type (a safetensors
// data section starts at 8 + header length, and offsets are arbitrary), so typed access
// (`as<T>()`) checks alignment and fails cleanly; `to_f32` works on any alignment.
#pragma once
#include "slm/core/build_mode.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "slm/core/dtype.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/status.hpp"

namespace slm {

// A tensor shape: up to max_rank dimensions, each >= 0.
class shape {
 public:
  static constexpr std::size_t max_rank = 8;

  constexpr shape() noexcept = default;
  constexpr shape(std::initializer_list<std::int64_t> dims) noexcept {
    for (std::int64_t d : dims)
      if (rank_ < max_rank) dims_[rank_++] = d;
  }

  // Validating constructor: rank <= max_rank, every dimension >= 0, and the element
  // count fits in 63 bits (so byte counts computed from it cannot wrap).
  static result<shape> from(std::span<const std::int64_t> dims);

  constexpr std::size_t rank() const noexcept { return rank_; }
  constexpr std::int64_t operator[](std::size_t i) const noexcept { return dims_[i]; }
  constexpr std::int64_t& operator[](std::size_t i) noexcept { return dims_[i]; }
  constexpr std::span<const std::int64_t> dims() const noexcept { return {dims_.data(), rank_}; }

  constexpr std::int64_t numel() const noexcept {
    std::int64_t n = 1;
    for (std::size_t i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }

  friend constexpr bool operator==(const shape& a, const shape& b) noexcept {
    if (a.rank_ != b.rank_) return false;
    for (std::size_t i = 0; i < a.rank_; ++i)
      if (a.dims_[i] != b.dims_[i]) return false;
    return true;
  }

  std::string to_string() const;

 private:
  std::array<std::int64_t, max_rank> dims_{};
  std::size_t rank_ = 0;
};

// Bytes that numel elements of t occupy, or an error when a sub-byte type does not
// fill whole bytes (safetensors requires that) or the count overflows.
result<std::uint64_t> byte_size(dtype t, std::int64_t numel);

template <class T>
constexpr bool dtype_matches(dtype t) noexcept {
  if constexpr (std::is_same_v<T, float>) return t == dtype::f32;
  else if constexpr (std::is_same_v<T, double>) return t == dtype::f64;
  else if constexpr (std::is_same_v<T, std::int64_t>) return t == dtype::i64;
  else if constexpr (std::is_same_v<T, std::int32_t>) return t == dtype::i32;
  else if constexpr (std::is_same_v<T, std::int16_t>) return t == dtype::i16;
  else if constexpr (std::is_same_v<T, std::int8_t>) return t == dtype::i8;
  else if constexpr (std::is_same_v<T, std::uint64_t>) return t == dtype::u64;
  else if constexpr (std::is_same_v<T, std::uint32_t>) return t == dtype::u32;
  else if constexpr (std::is_same_v<T, std::uint16_t>)  // raw 16-bit codes
    return t == dtype::u16 || t == dtype::f16 || t == dtype::bf16;
  else if constexpr (std::is_same_v<T, std::uint8_t>)  // raw bytes: codes, packed FP4, bool
    return size_of(t) == 1 || bits_of(t) < 8;
  else return false;
}

// A read-only view of a tensor in memory someone else owns.
class tensor_view {
 public:
  tensor_view() noexcept = default;

  // A contiguous (row-major) view. `data` must hold byte_size(type, shape.numel()) bytes.
  tensor_view(dtype type, const shape& s, const void* data) noexcept
      : type_(type), shape_(s), data_(static_cast<const std::byte*>(data)) {
    std::int64_t stride = 1;
    for (std::size_t i = s.rank(); i-- > 0;) {
      strides_[i] = stride;
      stride *= s[i];
    }
  }

  dtype type() const noexcept { return type_; }
  const slm::shape& shape() const noexcept { return shape_; }
  std::size_t rank() const noexcept { return shape_.rank(); }
  std::int64_t dim(std::size_t i) const noexcept { return shape_[i]; }
  std::int64_t stride(std::size_t i) const noexcept { return strides_[i]; }
  std::int64_t numel() const noexcept { return shape_.numel(); }
  const std::byte* data() const noexcept { return data_; }
  bool empty() const noexcept { return numel() == 0; }

  // Bytes covered by a contiguous view (for packed types: the packed size).
  std::uint64_t nbytes() const noexcept {
    auto b = byte_size(type_, numel());
    return b.ok() ? *b : 0;
  }
  std::span<const std::byte> bytes() const noexcept {
    return {data_, is_contiguous() ? static_cast<std::size_t>(nbytes()) : 0};
  }

  bool is_contiguous() const noexcept {
    std::int64_t expect = 1;
    for (std::size_t i = shape_.rank(); i-- > 0;) {
      if (shape_[i] != 1 && strides_[i] != expect) return false;
      expect *= shape_[i];
    }
    return true;
  }

  // Typed access to a contiguous view whose dtype stores T (see dtype_matches) and
  // whose data is aligned for T.
  template <class T>
  result<std::span<const T>> as() const {
    if (!dtype_matches<T>(type_))
      return make_error(errc::invalid_argument, "tensor holds ", safetensors_name(type_),
                        ", which cannot be viewed as the requested C++ type");
    if (!is_contiguous()) return make_error(errc::invalid_argument, "tensor is not contiguous");
    if (reinterpret_cast<std::uintptr_t>(data_) % alignof(T) != 0)
      return make_error(errc::invalid_argument, "tensor data at address offset ",
                        reinterpret_cast<std::uintptr_t>(data_) % alignof(T),
                        " is not aligned for its element type; use to_f32() or copy it");
    return std::span<const T>(reinterpret_cast<const T*>(data_), static_cast<std::size_t>(nbytes() / sizeof(T)));
  }

  // Narrow dimension `d` to [begin, end). Not for packed sub-byte types.
  result<tensor_view> slice(std::size_t d, std::int64_t begin, std::int64_t end) const;

  // Swap two dimensions (no data movement).
  result<tensor_view> transpose(std::size_t a, std::size_t b) const;

  // Same bytes, another shape with the same element count (contiguous views only).
  result<tensor_view> reshape(const slm::shape& s) const;

  // Decode every element, in row-major logical order, to float. Works on any stride and
  // alignment (elements are read with memcpy). Integer types convert by value (large
  // 64-bit integers round). Fails for F6 and C64, which have no real-valued decoding here.
  status to_f32(std::span<float> out) const;

  // Contiguous decode with the dtype switch hoisted out of the loop. Loads go through
  // memcpy (any alignment); the compiler turns these loops into vector code.
  void decode_contiguous(std::span<float> out) const noexcept;

  // One element, by value, as float; p must point at an element of type t.
  static float decode_f32(dtype t, const std::byte* p) noexcept;

 private:
  dtype type_ = dtype::f32;
  slm::shape shape_;
  std::array<std::int64_t, shape::max_rank> strides_{};
  const std::byte* data_ = nullptr;
};

// An owned, aligned, uninitialized byte buffer. Allocation failure is an error value,
// not an abort, so a host can survive asking for a model that does not fit.
class aligned_buffer {
 public:
  static constexpr std::size_t default_alignment = 64;  // a cache line; enough for AVX-512

  aligned_buffer() noexcept = default;
  aligned_buffer(aligned_buffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)), align_(o.align_) {}
  aligned_buffer& operator=(aligned_buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      size_ = std::exchange(o.size_, 0);
      align_ = o.align_;
    }
    return *this;
  }
  aligned_buffer(const aligned_buffer&) = delete;
  aligned_buffer& operator=(const aligned_buffer&) = delete;
  ~aligned_buffer() { release(); }

  static result<aligned_buffer> allocate(std::size_t bytes, std::size_t alignment = default_alignment);

  std::byte* data() noexcept { return data_; }
  const std::byte* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  std::span<std::byte> bytes() noexcept { return {data_, size_}; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  template <class T>
  std::span<T> as() noexcept {
    return {reinterpret_cast<T*>(data_), size_ / sizeof(T)};
  }

 private:
  void release() noexcept {
    if (data_) ::operator delete(data_, std::align_val_t(align_), std::nothrow);
    data_ = nullptr;
    size_ = 0;
  }
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  std::size_t align_ = default_alignment;
};

#if SLM_DEFINE_IO

SLM_INLINE result<shape> shape::from(std::span<const std::int64_t> dims) {
  if (dims.size() > max_rank)
    return make_error(errc::unsupported, "rank ", dims.size(), " exceeds the maximum of ", max_rank);
  shape s;
  std::uint64_t n = 1;
  for (std::int64_t d : dims) {
    if (d < 0) return make_error(errc::format_error, "negative dimension ", d);
    if (d != 0 && n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / static_cast<std::uint64_t>(d))
      return make_error(errc::out_of_range, "element count of shape overflows 63 bits");
    n *= static_cast<std::uint64_t>(d);
    s.dims_[s.rank_++] = d;
  }
  return s;
}

SLM_INLINE std::string shape::to_string() const {
  std::string s = "[";
  for (std::size_t i = 0; i < rank_; ++i) s += cat(i ? ", " : "", dims_[i]);
  return s + "]";
}

SLM_INLINE result<std::uint64_t> byte_size(dtype t, std::int64_t numel) {
  if (numel < 0) return make_error(errc::invalid_argument, "negative element count");
  const std::uint64_t bits = bits_of(t);
  const std::uint64_t n = static_cast<std::uint64_t>(numel);
  if (n > std::numeric_limits<std::uint64_t>::max() / bits)
    return make_error(errc::out_of_range, "byte size of ", numel, " x ", safetensors_name(t), " overflows");
  if ((n * bits) % 8 != 0)
    return make_error(errc::format_error, numel, " elements of ", safetensors_name(t),
                      " do not fill a whole number of bytes");
  return n * bits / 8;
}

SLM_INLINE result<tensor_view> tensor_view::slice(std::size_t d, std::int64_t begin, std::int64_t end) const {
  if (d >= rank()) return make_error(errc::invalid_argument, "slice of dimension ", d, " of a rank-", rank(), " tensor");
  if (size_of(type_) == 0) return make_error(errc::unsupported, "slicing a packed ", safetensors_name(type_), " tensor");
  if (begin < 0 || end < begin || end > shape_[d])
    return make_error(errc::out_of_range, "slice [", begin, ", ", end, ") of dimension ", d, " with size ", shape_[d]);
  tensor_view v = *this;
  v.shape_[d] = end - begin;
  v.data_ += begin * strides_[d] * static_cast<std::int64_t>(size_of(type_));
  return v;
}

SLM_INLINE result<tensor_view> tensor_view::transpose(std::size_t a, std::size_t b) const {
  if (a >= rank() || b >= rank()) return make_error(errc::invalid_argument, "transpose of dimensions ", a, ", ", b, " of a rank-", rank(), " tensor");
  if (size_of(type_) == 0) return make_error(errc::unsupported, "transposing a packed ", safetensors_name(type_), " tensor");
  tensor_view v = *this;
  std::swap(v.shape_[a], v.shape_[b]);
  std::swap(v.strides_[a], v.strides_[b]);
  return v;
}

SLM_INLINE result<tensor_view> tensor_view::reshape(const slm::shape& s) const {
  if (s.numel() != numel())
    return make_error(errc::invalid_argument, "cannot reshape ", shape_.to_string(), " to ", s.to_string());
  if (!is_contiguous()) return make_error(errc::invalid_argument, "reshape of a non-contiguous view");
  return tensor_view(type_, s, data_);
}

SLM_INLINE status tensor_view::to_f32(std::span<float> out) const {
  const std::int64_t n = numel();
  if (out.size() != static_cast<std::size_t>(n))
    return make_error(errc::invalid_argument, "to_f32: output holds ", out.size(), " floats, tensor has ", n);
  if (type_ == dtype::f6_e2m3 || type_ == dtype::f6_e3m2 || type_ == dtype::c64)
    return make_error(errc::unsupported, "to_f32 of ", safetensors_name(type_));
  if (type_ == dtype::f4) {  // packed: always contiguous, element 2i in the low nibble
    for (std::int64_t i = 0; i < n; ++i) {
      const auto byte = static_cast<std::uint8_t>(data_[i / 2]);
      out[static_cast<std::size_t>(i)] = e2m1_to_f32(i % 2 == 0 ? (byte & 0x0F) : (byte >> 4));
    }
    return {};
  }
  if (is_contiguous()) {  // the common case: one type dispatch, then a straight loop
    decode_contiguous(out);
    return {};
  }
  std::array<std::int64_t, shape::max_rank> index{};
  const std::size_t r = rank();
  const auto esize = static_cast<std::int64_t>(size_of(type_));
  for (std::int64_t i = 0; i < n; ++i) {
    std::int64_t off = 0;
    for (std::size_t k = 0; k < r; ++k) off += index[k] * strides_[k];
    out[static_cast<std::size_t>(i)] = decode_f32(type_, data_ + off * esize);
    for (std::size_t k = r; k-- > 0;) {  // odometer increment
      if (++index[k] < shape_[k]) break;
      index[k] = 0;
    }
  }
  return {};
}

SLM_INLINE void tensor_view::decode_contiguous(std::span<float> out) const noexcept {
  const std::size_t n = out.size();
  auto each = [&]<class T>(T*, auto convert) {
    for (std::size_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, data_ + i * sizeof(T), sizeof(T));
      out[i] = convert(v);
    }
  };
  auto cast = [](auto v) { return static_cast<float>(v); };
  switch (type_) {
    case dtype::f32: if (n) std::memcpy(out.data(), data_, n * sizeof(float)); return;
    case dtype::bf16: return each(static_cast<std::uint16_t*>(nullptr), [](std::uint16_t v) { return bf16_to_f32(v); });
    case dtype::f16: return each(static_cast<std::uint16_t*>(nullptr), [](std::uint16_t v) { return f16_to_f32(v); });
    case dtype::f8_e4m3: return each(static_cast<std::uint8_t*>(nullptr), [](std::uint8_t v) { return e4m3_to_f32(v); });
    case dtype::f8_e5m2: return each(static_cast<std::uint8_t*>(nullptr), [](std::uint8_t v) { return e5m2_to_f32(v); });
    case dtype::f8_e8m0: return each(static_cast<std::uint8_t*>(nullptr), [](std::uint8_t v) { return e8m0_to_f32(v); });
    case dtype::f64: return each(static_cast<double*>(nullptr), cast);
    case dtype::i64: return each(static_cast<std::int64_t*>(nullptr), cast);
    case dtype::i32: return each(static_cast<std::int32_t*>(nullptr), cast);
    case dtype::i16: return each(static_cast<std::int16_t*>(nullptr), cast);
    case dtype::i8: return each(static_cast<std::int8_t*>(nullptr), cast);
    case dtype::u64: return each(static_cast<std::uint64_t*>(nullptr), cast);
    case dtype::u32: return each(static_cast<std::uint32_t*>(nullptr), cast);
    case dtype::u16: return each(static_cast<std::uint16_t*>(nullptr), cast);
    case dtype::u8: return each(static_cast<std::uint8_t*>(nullptr), cast);
    case dtype::boolean:
      return each(static_cast<std::uint8_t*>(nullptr), [](std::uint8_t v) { return v != 0 ? 1.0f : 0.0f; });
    default: return;  // packed and complex types are handled (or refused) by to_f32
  }
}

SLM_INLINE float tensor_view::decode_f32(dtype t, const std::byte* p) noexcept {
  auto load = [p]<class T>(T*) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t) {
    case dtype::f64: return static_cast<float>(load(static_cast<double*>(nullptr)));
    case dtype::f32: return load(static_cast<float*>(nullptr));
    case dtype::f16: return f16_to_f32(load(static_cast<std::uint16_t*>(nullptr)));
    case dtype::bf16: return bf16_to_f32(load(static_cast<std::uint16_t*>(nullptr)));
    case dtype::f8_e4m3: return e4m3_to_f32(static_cast<std::uint8_t>(*p));
    case dtype::f8_e5m2: return e5m2_to_f32(static_cast<std::uint8_t>(*p));
    case dtype::f8_e8m0: return e8m0_to_f32(static_cast<std::uint8_t>(*p));
    case dtype::i64: return static_cast<float>(load(static_cast<std::int64_t*>(nullptr)));
    case dtype::i32: return static_cast<float>(load(static_cast<std::int32_t*>(nullptr)));
    case dtype::i16: return static_cast<float>(load(static_cast<std::int16_t*>(nullptr)));
    case dtype::i8: return static_cast<float>(static_cast<std::int8_t>(*p));
    case dtype::u64: return static_cast<float>(load(static_cast<std::uint64_t*>(nullptr)));
    case dtype::u32: return static_cast<float>(load(static_cast<std::uint32_t*>(nullptr)));
    case dtype::u16: return static_cast<float>(load(static_cast<std::uint16_t*>(nullptr)));
    case dtype::u8: return static_cast<float>(static_cast<std::uint8_t>(*p));
    case dtype::boolean: return *p != std::byte{0} ? 1.0f : 0.0f;
    default: return 0.0f;  // packed types never reach here (see to_f32)
  }
}

SLM_INLINE result<aligned_buffer> aligned_buffer::allocate(std::size_t bytes, std::size_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0 || alignment < alignof(std::max_align_t))
    return make_error(errc::invalid_argument, "alignment ", alignment, " is not a power of two >= ", alignof(std::max_align_t));
  aligned_buffer b;
  b.align_ = alignment;
  if (bytes == 0) return b;
  void* p = ::operator new(bytes, std::align_val_t(alignment), std::nothrow);
  if (!p) return make_error(errc::out_of_memory, "cannot allocate ", bytes, " bytes");
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = bytes;
  return b;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
