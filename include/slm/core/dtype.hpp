// slm/core/dtype.hpp - the element types a tensor can hold, as safetensors names them.
//
// Sizes are in bits because the sub-byte types (F4, F6) pack several elements per
// byte; everything else is a whole number of bytes. The safetensors tag is the
// spelling in a file header ("BF16", "F8_E4M3", ...).
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace slm {

enum class dtype : std::uint8_t {
  f64, f32, f16, bf16,
  f8_e4m3,  // e4m3fn: finite-only, NaN = 0x7F/0xFF, max 448
  f8_e5m2,  // IEEE-like: inf and NaN
  f8_e8m0,  // exponent-only scale (MX): 2^(e-127), 0xFF = NaN
  f6_e2m3, f6_e3m2,  // MX 6-bit floats, packed
  f4,       // FP4 E2M1, two per byte, element 2i in the low nibble
  i64, i32, i16, i8,
  u64, u32, u16, u8,
  boolean,
  c64,      // complex64: two f32
};

inline constexpr dtype all_dtypes[] = {
    dtype::f64, dtype::f32, dtype::f16, dtype::bf16, dtype::f8_e4m3, dtype::f8_e5m2,
    dtype::f8_e8m0, dtype::f6_e2m3, dtype::f6_e3m2, dtype::f4, dtype::i64, dtype::i32,
    dtype::i16, dtype::i8, dtype::u64, dtype::u32, dtype::u16, dtype::u8, dtype::boolean,
    dtype::c64};

constexpr std::size_t bits_of(dtype t) noexcept {
  switch (t) {
    case dtype::f64: case dtype::i64: case dtype::u64: case dtype::c64: return 64;
    case dtype::f32: case dtype::i32: case dtype::u32: return 32;
    case dtype::f16: case dtype::bf16: case dtype::i16: case dtype::u16: return 16;
    case dtype::f8_e4m3: case dtype::f8_e5m2: case dtype::f8_e8m0:
    case dtype::i8: case dtype::u8: case dtype::boolean: return 8;
    case dtype::f6_e2m3: case dtype::f6_e3m2: return 6;
    case dtype::f4: return 4;
  }
  return 0;
}

// Bytes per element for the byte-addressable types; 0 for packed sub-byte types.
constexpr std::size_t size_of(dtype t) noexcept {
  return bits_of(t) % 8 == 0 ? bits_of(t) / 8 : 0;
}

constexpr std::string_view safetensors_name(dtype t) noexcept {
  switch (t) {
    case dtype::f64: return "F64";
    case dtype::f32: return "F32";
    case dtype::f16: return "F16";
    case dtype::bf16: return "BF16";
    case dtype::f8_e4m3: return "F8_E4M3";
    case dtype::f8_e5m2: return "F8_E5M2";
    case dtype::f8_e8m0: return "F8_E8M0";
    case dtype::f6_e2m3: return "F6_E2M3";
    case dtype::f6_e3m2: return "F6_E3M2";
    case dtype::f4: return "F4";
    case dtype::i64: return "I64";
    case dtype::i32: return "I32";
    case dtype::i16: return "I16";
    case dtype::i8: return "I8";
    case dtype::u64: return "U64";
    case dtype::u32: return "U32";
    case dtype::u16: return "U16";
    case dtype::u8: return "U8";
    case dtype::boolean: return "BOOL";
    case dtype::c64: return "C64";
  }
  return "?";
}

constexpr std::optional<dtype> dtype_from_safetensors_name(std::string_view s) noexcept {
  for (dtype t : all_dtypes)
    if (safetensors_name(t) == s) return t;
  return std::nullopt;
}

// Position in the reference implementation's (huggingface/safetensors) dtype order. Its
// writer lays tensors out by descending position, then by name, which also keeps every
// tensor aligned for its element size; slm's writer does the same, so both produce the
// same bytes for the same input (checked in tests/test_oracle.cpp; C64's position is
// the one file we have not seen written by the reference).
constexpr int safetensors_order(dtype t) noexcept {
  switch (t) {
    case dtype::boolean: return 0;
    case dtype::f4: return 1;
    case dtype::f6_e2m3: return 2;
    case dtype::f6_e3m2: return 3;
    case dtype::u8: return 4;
    case dtype::i8: return 5;
    case dtype::f8_e5m2: return 6;
    case dtype::f8_e4m3: return 7;
    case dtype::f8_e8m0: return 8;
    case dtype::i16: return 9;
    case dtype::u16: return 10;
    case dtype::f16: return 11;
    case dtype::bf16: return 12;
    case dtype::i32: return 13;
    case dtype::u32: return 14;
    case dtype::f32: return 15;
    case dtype::c64: return 16;
    case dtype::f64: return 17;
    case dtype::i64: return 18;
    case dtype::u64: return 19;
  }
  return -1;
}

constexpr bool is_floating(dtype t) noexcept {
  switch (t) {
    case dtype::f64: case dtype::f32: case dtype::f16: case dtype::bf16: case dtype::f8_e4m3:
    case dtype::f8_e5m2: case dtype::f8_e8m0: case dtype::f6_e2m3: case dtype::f6_e3m2:
    case dtype::f4: return true;
    default: return false;
  }
}

}  // namespace slm
