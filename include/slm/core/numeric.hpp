// slm/core/numeric.hpp - scalar number formats: exact decode to f32, round-to-nearest-even encode.
//
// Formats (section numbers refer to shared/spec/nvfp4.md):
//   bf16   bfloat16: the top 16 bits of an f32 (8-bit exponent, 7-bit mantissa).
//   f16    IEEE 754 binary16: bias 15, subnormals m * 2^-24, inf, NaN, max 65504.
//   E4M3   FP8 "e4m3fn" (2.1, 2.3, 7): bias 7, subnormals m * 2^-9, no inf,
//          NaN only 0x7F/0xFF, max 448. Also the NVFP4 block scale ("UE4M3", 2.2).
//   E5M2   FP8, IEEE-like: bias 15, subnormals m * 2^-16, inf 0x7C, NaN 0x7D..0x7F,
//          max 57344. Bit for bit the top byte of an f16.
//   E2M1   FP4 (1.1 - 1.4): bias 1, subnormal 0.5, no inf/NaN, max 6, -0 is code 0x8.
//          Two codes per byte, element 2i in the low nibble.
//   E8M0   unsigned exponent-only MX scale (2.4, 6.1): 2^(e - 127), 0xFF NaN, no zero;
//          0x00 = 2^-127 is an f32 denormal.
//
// Everything is constexpr and works on bit patterns (std::bit_cast) with integer
// arithmetic only, so results do not depend on the FPU rounding mode or on
// flush-to-zero / denormals-are-zero (spec 10, pitfall 5), and no compiler extension
// (_Float16, F16C) is needed.
//
// Rounding: every encoder rounds to the nearest representable value; an exact tie goes
// to the code with an even mantissa (the last bit of the code). Overflow rules differ
// per format and are documented at each encoder. NaN inputs never produce a number,
// except for E2M1, which has no NaN (see f32_to_e2m1).
#pragma once
#include "slm/core/build_mode.hpp"

#include <array>
#include <bit>
#include <cstdint>

namespace slm {

namespace detail {

inline constexpr std::uint32_t f32_sign_mask = 0x8000'0000u;
inline constexpr std::uint32_t f32_abs_mask = 0x7FFF'FFFFu;
inline constexpr std::uint32_t f32_inf_bits = 0x7F80'0000u;   // exponent all ones, mantissa 0
inline constexpr std::uint32_t f32_quiet_nan = 0x7FC0'0000u;  // + quiet NaN, no payload

constexpr std::uint32_t f32_bits(float x) noexcept { return std::bit_cast<std::uint32_t>(x); }
constexpr float f32_from_bits(std::uint32_t b) noexcept { return std::bit_cast<float>(b); }

// v / 2^s, rounded to nearest, ties to even. 1 <= s <= 31.
constexpr std::uint32_t shift_right_rne(std::uint32_t v, unsigned s) noexcept {
  const std::uint32_t q = v >> s;
  const std::uint32_t rem = v & ((1u << s) - 1u);
  const std::uint32_t half = 1u << (s - 1u);
  return q + ((rem > half || (rem == half && (q & 1u) != 0)) ? 1u : 0u);
}

// Rounds a non-negative f32 magnitude (bits `a`, sign bit clear, not NaN) to a binary
// float format with `MantBits` stored mantissa bits whose smallest normal number is
// 2^MinExp (so its subnormals are m * 2^(MinExp - MantBits)), and returns the magnitude
// code (biased exponent << MantBits | mantissa), to nearest, ties to even.
//
// The code is not clipped to the format: a value past the largest finite one comes back
// as a larger code (+inf as a very large one) and the caller applies its overflow rule.
// This works because the codes of a binary float format are ordered like the values it
// encodes, and a mantissa that rounds up to 2^MantBits carries into the exponent field
// exactly as the value does (1.111b rounds to 10.00b).
template <unsigned MantBits, int MinExp>
constexpr std::uint32_t round_magnitude(std::uint32_t a) noexcept {
  static_assert(MantBits >= 1 && MantBits < 23, "narrower than f32");
  static_assert(MinExp > -126 && MinExp < 127, "normal range inside f32's");
  const int exp = static_cast<int>(a >> 23) - 127;  // unbiased f32 exponent
  const std::uint32_t mant = a & 0x7F'FFFFu;
  if (exp >= MinExp) {
    // Normal in the target: the target's biased exponent is exp - MinExp + 1. Put it
    // where f32's exponent field is, keep all 23 mantissa bits, and round away the
    // 23 - MantBits the target cannot hold.
    const std::uint32_t rebiased = (static_cast<std::uint32_t>(exp - MinExp + 1) << 23) | mant;
    return shift_right_rne(rebiased, 23u - MantBits);
  }
  // Subnormal (or zero) in the target: the code is |x| / 2^(MinExp - MantBits).
  // With the 24-bit significand sig (the implicit 1 made explicit; an f32 denormal has
  // none and exponent -126), |x| = sig * 2^(e - 23), so code = sig / 2^shift with
  // shift = MinExp - MantBits + 23 - e, which is at least 24 - MantBits >= 2 here.
  const bool f32_denormal = (a >> 23) == 0;
  const std::uint32_t sig = f32_denormal ? mant : (mant | 0x80'0000u);
  const int e = f32_denormal ? -126 : exp;
  const int shift = MinExp - static_cast<int>(MantBits) + 23 - e;
  // sig < 2^24 <= half of 2^shift: below half the smallest subnormal, rounds to 0.
  if (shift > 24) return 0;
  return shift_right_rne(sig, static_cast<unsigned>(shift));
}

template <class F>
constexpr std::array<float, 256> make_byte_table(F decode) noexcept {
  std::array<float, 256> t{};
  for (unsigned c = 0; c < 256; ++c) t[c] = decode(static_cast<std::uint8_t>(c));
  return t;
}

}  // namespace detail

// ---------------------------------------------------------------------------------
// bf16: an f32 with the low 16 mantissa bits removed; same exponent range.

// Exact: every bf16 value is an f32 (NaN payloads and signalling NaNs pass unchanged).
constexpr float bf16_to_f32(std::uint16_t h) noexcept {
  return detail::f32_from_bits(static_cast<std::uint32_t>(h) << 16);
}

// Round to nearest even. A carry out of the mantissa bumps the exponent; from the
// largest finite bf16 it lands exactly on inf, which is IEEE overflow under RNE
// (|x| >= 2^128 - 2^119 gives inf). inf stays inf. NaN stays NaN: sign and the top
// payload bits kept, quiet bit forced (so a NaN never truncates into an inf).
constexpr std::uint16_t f32_to_bf16(float x) noexcept {
  const std::uint32_t bits = detail::f32_bits(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t a = bits & detail::f32_abs_mask;
  if (a > detail::f32_inf_bits) return static_cast<std::uint16_t>((bits >> 16) | 0x0040u);
  return static_cast<std::uint16_t>(sign | detail::shift_right_rne(a, 16));
}

// ---------------------------------------------------------------------------------
// f16 (IEEE binary16): S EEEEE MMMMMMMMMM, bias 15.
//   E = 0: subnormal M * 2^-24;  E = 1..30: (1 + M/1024) * 2^(E-15);  E = 31: inf (M = 0), NaN.

constexpr float f16_to_f32(std::uint16_t h) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h) & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1Fu;
  const std::uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F) {
    // inf, or NaN made quiet with its payload kept (as hardware conversions do).
    const std::uint32_t nan_bits = mant != 0 ? (0x40'0000u | (mant << 13)) : 0u;
    return detail::f32_from_bits(sign | detail::f32_inf_bits | nan_bits);
  }
  if (exp == 0) {
    // M * 2^-24: exact in f32, and a normal f32 unless M = 0, so no denormal arithmetic.
    return detail::f32_from_bits(sign | detail::f32_bits(static_cast<float>(mant) * 0x1p-24f));
  }
  return detail::f32_from_bits(sign | ((exp - 15u + 127u) << 23) | (mant << 13));
}

// Round to nearest even, subnormals included. |x| >= 65520 (65504 + half an ulp; the
// tie goes to the even code, which is inf) gives inf, as IEEE overflow under RNE does.
// inf stays inf. NaN stays NaN: sign and top 10 payload bits kept, quiet bit forced
// (what x86 F16C and ARM conversions produce).
constexpr std::uint16_t f32_to_f16(float x) noexcept {
  const std::uint32_t bits = detail::f32_bits(x);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t a = bits & detail::f32_abs_mask;
  if (a > detail::f32_inf_bits) return static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
  constexpr std::uint32_t inf = 0x7C00u;
  if (a == detail::f32_inf_bits) return static_cast<std::uint16_t>(sign | inf);
  const std::uint32_t code = detail::round_magnitude<10, -14>(a);
  return static_cast<std::uint16_t>(sign | (code >= inf ? inf : code));
}

// ---------------------------------------------------------------------------------
// FP8 overflow policy.
//
// saturate        |x| that rounds past the largest finite value, and +-inf, give
//                 +-max finite (E4M3 448, E5M2 57344). NaN gives 0x7F whatever its sign.
//                 This is CUDA's __NV_SATFINITE (the __nv_fp8_e4m3(float) constructor,
//                 PTX cvt.rn.satfinite.{e4m3,e5m2}x2), which canonicalises NaN first.
// non_saturating  Overflow and +-inf give the format's own overflow value, keeping the
//                 sign: NaN 0x7F/0xFF for E4M3 (no inf), inf 0x7C/0xFC for E5M2. NaN
//                 gives 0x7F/0xFF (sign kept). This is PyTorch's tensor.to(float8_*) cast
//                 (c10 fp8e4m3fn/fp8e5m2_from_fp32_value), bit for bit, and CUDA
//                 __NV_NOSAT apart from the NaN sign.
// nan_on_overflow and infinity are the same policy under the name that reads right at
// an E4M3 and an E5M2 call site respectively.
enum class fp8_overflow : std::uint8_t {
  saturate,
  non_saturating,
  nan_on_overflow = non_saturating,
  infinity = non_saturating,
};

// ---------------------------------------------------------------------------------
// FP8 E4M3 ("e4m3fn", spec 2.1): S EEEE MMM, bias 7, finite-only.
//   E = 0: subnormal M * 2^-9;  otherwise (1 + M/8) * 2^(E-7);  E = 15, M = 7: NaN.
//   Max finite 0x7E = 1.75 * 2^8 = 448; min normal 0x08 = 2^-6; min subnormal 2^-9.

namespace detail {
constexpr float e4m3_decode(std::uint8_t c) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(c & 0x80u) << 24;
  const std::uint32_t exp = (c >> 3) & 0xFu;
  const std::uint32_t mant = c & 0x7u;
  if (exp == 15 && mant == 7) return f32_from_bits(sign | f32_quiet_nan);
  if (exp == 0) return f32_from_bits(sign | f32_bits(static_cast<float>(mant) * 0x1p-9f));
  return f32_from_bits(sign | ((exp - 7u + 127u) << 23) | (mant << 20));
}
}  // namespace detail

// All 256 E4M3 values, for kernels that decode through a lookup.
inline constexpr std::array<float, 256> e4m3_table = detail::make_byte_table(detail::e4m3_decode);

// Exact. 0x7F and 0xFF decode to NaN with that sign (never to 480; spec 10, pitfall 4).
constexpr float e4m3_to_f32(std::uint8_t c) noexcept { return e4m3_table[c]; }

// Round to nearest even on the 3-bit mantissa, subnormals included (spec 2.3);
// |x| <= 2^-10 (half the smallest subnormal; the tie goes to 0) gives +-0. Values in
// (448, 464] round to 448: 464 is the tie between 448 (0x7E, even) and the 480 that
// code 0x7F would be. What lies above 464 depends on `overflow`:
//   saturate (default): +-448, also for +-inf. NaN -> 0x7F.
//   nan_on_overflow:    NaN 0x7F/0xFF with the input's sign, also for +-inf; so
//                       464.0001 -> 0x7F, 480 -> 0x7F, 464 -> 0x7E. NaN -> 0x7F | sign.
constexpr std::uint8_t f32_to_e4m3(float x, fp8_overflow overflow = fp8_overflow::saturate) noexcept {
  const std::uint32_t bits = detail::f32_bits(x);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t a = bits & detail::f32_abs_mask;
  const bool saturate = overflow == fp8_overflow::saturate;
  constexpr std::uint32_t max_finite = 0x7E, nan = 0x7F;
  if (a > detail::f32_inf_bits) return static_cast<std::uint8_t>(saturate ? nan : (sign | nan));
  // +-inf rounds to a code past every finite one, so it takes the overflow branch.
  const std::uint32_t code = detail::round_magnitude<3, -6>(a);
  if (code > max_finite) return static_cast<std::uint8_t>(sign | (saturate ? max_finite : nan));
  return static_cast<std::uint8_t>(sign | code);
}

// ---------------------------------------------------------------------------------
// FP8 E5M2: S EEEEE MM, bias 15, IEEE-like; the top byte of the f16 with the same value.
//   E = 0: subnormal M * 2^-16;  E = 1..30: (1 + M/4) * 2^(E-15);  E = 31: inf (M = 0), NaN.
//   Max finite 0x7B = 1.75 * 2^15 = 57344.

// All 256 E5M2 values (NaNs quiet, sign kept).
inline constexpr std::array<float, 256> e5m2_table = detail::make_byte_table(
    [](std::uint8_t c) { return f16_to_f32(static_cast<std::uint16_t>(c << 8)); });

// Exact. 0x7C/0xFC are +-inf; 0x7D..0x7F and 0xFD..0xFF are NaN.
constexpr float e5m2_to_f32(std::uint8_t c) noexcept { return e5m2_table[c]; }

// Round to nearest even, subnormals included; |x| <= 2^-17 gives +-0. |x| >= 61440
// (57344 + half an ulp; the tie goes to the even code 0x7C) overflows:
//   infinity (default): +-inf (0x7C/0xFC), as IEEE and PyTorch do. NaN -> 0x7F | sign.
//   saturate:           +-57344 (0x7B/0xFB), also for +-inf, as CUDA satfinite. NaN -> 0x7F.
constexpr std::uint8_t f32_to_e5m2(float x, fp8_overflow overflow = fp8_overflow::infinity) noexcept {
  const std::uint32_t bits = detail::f32_bits(x);
  const std::uint32_t sign = (bits >> 24) & 0x80u;
  const std::uint32_t a = bits & detail::f32_abs_mask;
  const bool saturate = overflow == fp8_overflow::saturate;
  constexpr std::uint32_t max_finite = 0x7B, inf = 0x7C, nan = 0x7F;
  if (a > detail::f32_inf_bits) return static_cast<std::uint8_t>(saturate ? nan : (sign | nan));
  const std::uint32_t code = detail::round_magnitude<2, -14>(a);  // +-inf: past max_finite
  if (code > max_finite) return static_cast<std::uint8_t>(sign | (saturate ? max_finite : inf));
  return static_cast<std::uint8_t>(sign | code);
}

// ---------------------------------------------------------------------------------
// FP4 E2M1 (spec 1.1): S EE M, bias 1, no inf, no NaN.
//   E = 0: subnormal M * 0.5;  otherwise (1 + M/2) * 2^(E-1).  Max 6.
// A code is the low nibble of the byte argument; the high nibble is ignored, so
// e2m1_to_f32(fp4_hi(b)) and e2m1_to_f32(b) (the low element) both work.

// Spec 1.1: code -> value. 0x8 is -0.0 (produced by the reference quantizers, 1.3).
inline constexpr std::array<float, 16> e2m1_table = {
    0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// Twice the E2M1 value, always an integer (spec 1.1): ggml's kvalues_mxfp4. Integer
// kernels use it and fold the 1/2 into the scale. 0x8 gives 0.
inline constexpr std::array<std::int8_t, 16> e2m1_doubled_table = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

constexpr float e2m1_to_f32(std::uint8_t code) noexcept { return e2m1_table[code & 0xFu]; }
constexpr std::int8_t e2m1_to_doubled(std::uint8_t code) noexcept {
  return e2m1_doubled_table[code & 0xFu];
}

// Spec 1.2: round to nearest, ties to the even code, saturate to +-6 (inf too), keep
// the sign (a negative value that rounds to zero gives 0x8). Thresholds on |x|:
// <= 0.25 -> 0, < 0.75 -> 0.5, <= 1.25 -> 1, < 1.75 -> 1.5, <= 2.5 -> 2, < 3.5 -> 3,
// <= 5 -> 4, else 6. This is ModelOpt NVFP4, compressed-tensors and PTX
// cvt.rn.satfinite.e2m1x2.f32.
// NaN has no E2M1 code; it gives 0x7 (+6) whatever its sign, as CUDA's __nv_cvt_*_to_fp4
// documents ("NaN input values result in positive MAXNORM"), and as ModelOpt's NVFP4
// cast does (sign bit from x < 0, which is false, and NaN sorts past every threshold).
constexpr std::uint8_t f32_to_e2m1(float x) noexcept {
  const std::uint32_t bits = detail::f32_bits(x);
  const std::uint32_t sign = (bits >> 28) & 0x8u;
  const std::uint32_t a = bits & detail::f32_abs_mask;
  constexpr std::uint32_t max_finite = 0x7;
  if (a > detail::f32_inf_bits) return max_finite;
  const std::uint32_t code = detail::round_magnitude<1, 0>(a);  // 7 rounds to 8 (= 8.0)
  return static_cast<std::uint8_t>(sign | (code > max_finite ? max_finite : code));
}

// The magnitude code (0..7) that f32_to_e2m1 gives a non-negative t that is not NaN, from
// the thresholds above, without branches: a quantizer's loop over a block of such t
// vectorizes (formats/quantize.hpp). tests/test_numeric.cpp checks it against
// f32_to_e2m1 around every threshold, on a sweep of bit patterns, and on all of them
// when SLM_NUMERIC_EXHAUSTIVE is set.
constexpr std::uint8_t e2m1_magnitude_code(float t) noexcept {
  return static_cast<std::uint8_t>((t > 0.25f) + (t >= 0.75f) + (t > 1.25f) + (t >= 1.75f) + (t > 2.5f) +
                                   (t >= 3.5f) + (t > 5.0f));
}

// Two E2M1 codes per byte (spec 1.4): element 2i in the low nibble, 2i+1 in the high.
constexpr std::uint8_t fp4_pack(std::uint8_t lo, std::uint8_t hi) noexcept {
  return static_cast<std::uint8_t>((lo & 0x0Fu) | ((hi & 0x0Fu) << 4));
}
constexpr std::uint8_t fp4_lo(std::uint8_t byte) noexcept { return byte & 0x0Fu; }
constexpr std::uint8_t fp4_hi(std::uint8_t byte) noexcept { return byte >> 4; }

// ---------------------------------------------------------------------------------
// E8M0 / UE8M0 (spec 2.4): 8 exponent bits, no sign, no mantissa, bias 127.
//   value = 2^(e - 127) for e = 0..254; 0xFF = NaN. No zero: 0x00 = 2^-127.

// Exact, built from bits: 2^-127 (0x00) is an f32 denormal and 2^-126 (0x01) the
// smallest normal, so arithmetic under flush-to-zero would give 0 (spec 10, pitfall 5).
constexpr float e8m0_to_f32(std::uint8_t e) noexcept {
  if (e == 0xFF) return detail::f32_from_bits(detail::f32_quiet_nan);
  if (e == 0x00) return detail::f32_from_bits(0x0040'0000u);  // 2^-127: denormal, mantissa 1 << 22
  return detail::f32_from_bits(static_cast<std::uint32_t>(e) << 23);  // f32 exponent field = e
}

namespace detail {
enum class e8m0_rounding : std::uint8_t { nearest, floor, ceil };

// The E8M0 encoders share their special cases, so that a block scale computed from an
// amax behaves the same under every rounding rule:
//   +-0 -> 0x00: no zero exists, and 2^-127 is nearest (an all-zero block still gets a
//               usable scale instead of NaN).
//   NaN, +inf, any x < 0 -> 0xFF (NaN): not a scale; a sign cannot be kept.
//   finite x > 0: 2^k chosen by `mode`, codes clamped to 0x00..0xFE.
constexpr std::uint8_t f32_to_e8m0(float x, e8m0_rounding mode) noexcept {
  const std::uint32_t bits = f32_bits(x);
  if ((bits & f32_abs_mask) == 0) return 0x00;
  if ((bits & f32_sign_mask) != 0 || bits >= f32_inf_bits) return 0xFF;
  const std::uint32_t field = bits >> 23;  // f32 biased exponent = E8M0 code of 2^floor(log2 x)
  const std::uint32_t mant = bits & 0x7F'FFFFu;
  std::uint32_t code = 0;
  if (field == 0) {
    // f32 denormal, x = mant * 2^-149 < 2^-126: only 2^-127 (code 0, mant 1 << 22) and
    // 2^-126 (code 1) are candidates; their linear midpoint is 1.5 * 2^-127 (mant 3 << 21).
    constexpr std::uint32_t one = 1u << 22, midpoint = 3u << 21;
    switch (mode) {
      case e8m0_rounding::nearest: code = mant > midpoint ? 1 : 0; break;  // tie -> even 0x00
      case e8m0_rounding::floor: code = 0; break;                          // clamped below 2^-127
      case e8m0_rounding::ceil: code = mant > one ? 1 : 0; break;
    }
  } else {
    // 2^k <= x < 2^(k+1), k = field - 127; 2^k has code `field`. The linear midpoint of
    // 2^k and 2^(k+1) is 1.5 * 2^k, mantissa 1 << 22; its tie goes to the even code.
    constexpr std::uint32_t half = 1u << 22;
    switch (mode) {
      case e8m0_rounding::nearest:
        code = field + ((mant > half || (mant == half && (field & 1u) != 0)) ? 1u : 0u);
        break;
      case e8m0_rounding::floor: code = field; break;
      case e8m0_rounding::ceil: code = field + (mant != 0 ? 1u : 0u); break;
    }
  }
  return static_cast<std::uint8_t>(code > 0xFE ? 0xFE : code);  // 2^128 does not exist
}
}  // namespace detail

// Nearest power of two in the linear domain; a tie (x = 1.5 * 2^k exactly) goes to the
// even code. Finite x >= 1.5 * 2^127 clamps to 0xFE (2^127). Special cases: +-0 -> 0x00,
// NaN / +inf / negative -> 0xFF (see detail::f32_to_e8m0).
// Note: PyTorch's .to(float8_e8m0fnu) differs: it rounds ties up, ignores the sign, and
// gives 0xFF when rounding passes 2^127.
constexpr std::uint8_t f32_to_e8m0(float x) noexcept {
  return detail::f32_to_e8m0(x, detail::e8m0_rounding::nearest);
}

// Code of 2^floor(log2 x), the largest power of two <= x (clamped to 0x00 below
// 2^-127). The OCP MX v1.0 scale for E2M1 elements, 2^(floor(log2 amax) - 2)
// (spec 6.1), is this code minus 2, clamped at 0x00.
constexpr std::uint8_t f32_to_e8m0_floor(float x) noexcept {
  return detail::f32_to_e8m0(x, detail::e8m0_rounding::floor);
}

// Code of 2^ceil(log2 x), the smallest power of two >= x (clamped to 0xFE above 2^127).
// Triton's downcast_to_mxfp, ModelOpt MXFP4 and gemma.cpp choose 2^ceil(log2(amax / 6))
// (spec 6.1), i.e. f32_to_e8m0_ceil(amax / 6.0f).
constexpr std::uint8_t f32_to_e8m0_ceil(float x) noexcept {
  return detail::f32_to_e8m0(x, detail::e8m0_rounding::ceil);
}

// Code of 2^k, with k clamped to the representable -127..127.
constexpr std::uint8_t e8m0_from_exponent(int k) noexcept {
  return static_cast<std::uint8_t>(k < -127 ? 0 : (k > 127 ? 254 : k + 127));
}

}  // namespace slm
