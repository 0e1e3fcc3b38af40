// Tests for slm/core/numeric.hpp: decoders exhaustively, encoders against an independent
// reference.
//
// The reference knows values, not bit layouts. A format is the ascending list of its
// non-negative finite values, each computed with ldexp from the format's definition,
// plus one entry past the largest: the value the next code would have if the exponent
// range went on (480 for E4M3, 2^16 for E5M2, ...), which is where overflow starts under
// round-to-nearest-even. Rounding |x| = searching that list for the nearest entry, a tie
// going to the entry whose code is even. The header's encoders work on bit patterns
// instead, so the two agree only if both are right.
//
// Coverage: every code of every format (decode, and encode(decode(c)) == c); every
// rounding boundary (each value, each midpoint between neighbours, and the f32 numbers
// next to them, both signs); a strided sweep over all 2^32 f32 bit patterns; the
// spec's tables and examples. Setting SLM_NUMERIC_EXHAUSTIVE=1 also walks all 2^32
// patterns for every encoder (about 6 CPU-minutes in an optimized build, spread over
// all cores; skipped otherwise, as it is far too slow at -O0 or under sanitizers).
#include "slm/core/numeric.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <thread>
#include <vector>

namespace {

using slm::fp8_overflow;

std::uint32_t f32_bits(float x) { return std::bit_cast<std::uint32_t>(x); }
float f32_from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
std::string hex(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", static_cast<unsigned>(v));
  return buf;
}

// ---------------------------------------------------------------------------------
// Format definitions, in double.

struct minifloat {
  int mbits;  // stored mantissa bits
  int bias;
};
constexpr minifloat bf16_def{7, 127}, f16_def{10, 15}, e4m3_def{3, 7}, e5m2_def{2, 15}, e2m1_def{1, 1};

// Value of magnitude code (E << mbits | M): E = 0 is subnormal M * 2^(1 - bias - mbits),
// otherwise (2^mbits + M) * 2^(E - bias - mbits).
double minifloat_value(std::uint32_t mag, minifloat f) {
  const std::uint32_t e = mag >> f.mbits;
  const std::uint32_t m = mag & ((1u << f.mbits) - 1u);
  if (e == 0) return std::ldexp(static_cast<double>(m), 1 - f.bias - f.mbits);
  return std::ldexp(static_cast<double>((1u << f.mbits) + m), static_cast<int>(e) - f.bias - f.mbits);
}

// ---------------------------------------------------------------------------------
// The reference: nearest entry of a sorted value list.

struct ref_table {
  std::vector<double> value;        // ascending
  std::vector<std::uint32_t> code;  // magnitude code of each value

  void add(double v, std::uint32_t c) {
    value.push_back(v);
    code.push_back(c);
  }
  // Index of the last value <= m; -1 when m is below them all.
  std::ptrdiff_t floor_index(double m) const {
    return std::upper_bound(value.begin(), value.end(), m) - value.begin() - 1;
  }
  // The entry nearest to m >= 0, given p = floor_index(m); a tie goes to the even code.
  // Past the last entry, the last. (The differences are exact in double: m lies between
  // two neighbours, all of them f32 numbers.)
  std::uint32_t nearest(double m, std::ptrdiff_t p) const {
    if (p < 0) return code.front();
    const auto i = static_cast<std::size_t>(p);
    if (value[i] == m || i + 1 == value.size()) return code[i];
    const double below = m - value[i], above = value[i + 1] - m;
    if (below < above) return code[i];
    if (above < below) return code[i + 1];
    return (code[i] & 1u) == 0 ? code[i] : code[i + 1];
  }
  std::uint32_t nearest(double m) const { return nearest(m, floor_index(m)); }
};

// Codes 0..max_code and the overflow entry max_code + 1, valued by the definition.
ref_table make_minifloat_table(minifloat f, std::uint32_t max_code) {
  ref_table t;
  for (std::uint32_t c = 0; c <= max_code + 1; ++c) t.add(minifloat_value(c, f), c);
  return t;
}

const ref_table& bf16_ref() {
  static const ref_table t = make_minifloat_table(bf16_def, 0x7F7F);
  return t;
}
const ref_table& f16_ref() {
  static const ref_table t = make_minifloat_table(f16_def, 0x7BFF);
  return t;
}
const ref_table& e4m3_ref() {
  static const ref_table t = make_minifloat_table(e4m3_def, 0x7E);
  return t;
}
const ref_table& e5m2_ref() {
  static const ref_table t = make_minifloat_table(e5m2_def, 0x7B);
  return t;
}
const ref_table& e2m1_ref() {
  static const ref_table t = make_minifloat_table(e2m1_def, 0x7);
  return t;
}
const ref_table& e8m0_ref() {  // 2^(c - 127) for c = 0..254; no overflow entry (it clamps)
  static const ref_table t = [] {
    ref_table r;
    for (std::uint32_t c = 0; c <= 0xFE; ++c) r.add(std::ldexp(1.0, static_cast<int>(c) - 127), c);
    return r;
  }();
  return t;
}

// ---------------------------------------------------------------------------------
// Expected encodings: the format's rules for sign, NaN and overflow around the
// reference's rounded magnitude. `p` is the reference floor index of |x| (unused for NaN).

std::uint32_t sign_bit(float x) { return std::signbit(x) ? 1u : 0u; }

std::uint32_t expect_bf16(float x, std::ptrdiff_t p) {
  if (std::isnan(x)) return (f32_bits(x) >> 16) | 0x0040u;  // sign + top payload, quiet
  const std::uint32_t mag = bf16_ref().nearest(std::fabs(static_cast<double>(x)), p);
  return (sign_bit(x) << 15) | mag;  // the overflow entry's code 0x7F80 is inf
}
std::uint32_t expect_f16(float x, std::ptrdiff_t p) {
  if (std::isnan(x)) return (sign_bit(x) << 15) | 0x7E00u | ((f32_bits(x) >> 13) & 0x3FFu);
  const std::uint32_t mag = f16_ref().nearest(std::fabs(static_cast<double>(x)), p);
  return (sign_bit(x) << 15) | mag;  // 0x7C00 (overflow entry) is inf
}
std::uint32_t expect_e4m3(float x, std::ptrdiff_t p, fp8_overflow ov) {
  const bool sat = ov == fp8_overflow::saturate;
  const std::uint32_t s = sign_bit(x) << 7;
  if (std::isnan(x)) return sat ? 0x7Fu : (s | 0x7Fu);
  const std::uint32_t mag = e4m3_ref().nearest(std::fabs(static_cast<double>(x)), p);
  if (mag > 0x7E) return s | (sat ? 0x7Eu : 0x7Fu);
  return s | mag;
}
std::uint32_t expect_e5m2(float x, std::ptrdiff_t p, fp8_overflow ov) {
  const bool sat = ov == fp8_overflow::saturate;
  const std::uint32_t s = sign_bit(x) << 7;
  if (std::isnan(x)) return sat ? 0x7Fu : (s | 0x7Fu);
  const std::uint32_t mag = e5m2_ref().nearest(std::fabs(static_cast<double>(x)), p);
  if (mag > 0x7B) return s | (sat ? 0x7Bu : 0x7Cu);
  return s | mag;
}
std::uint32_t expect_e2m1(float x, std::ptrdiff_t p) {
  if (std::isnan(x)) return 0x7;
  const std::uint32_t mag = e2m1_ref().nearest(std::fabs(static_cast<double>(x)), p);
  return (sign_bit(x) << 3) | std::min(mag, 0x7u);
}
// E8M0 special cases: +-0 -> 0x00; NaN, +inf, negatives -> 0xFF.
bool e8m0_special(float x, std::uint32_t& out) {
  if (x == 0.0f) {
    out = 0x00;
    return true;
  }
  if (std::isnan(x) || x < 0.0f || std::isinf(x)) {
    out = 0xFF;
    return true;
  }
  return false;
}
std::uint32_t expect_e8m0(float x, std::ptrdiff_t p) {
  std::uint32_t out = 0;
  if (e8m0_special(x, out)) return out;
  return e8m0_ref().nearest(static_cast<double>(x), p);
}
std::uint32_t expect_e8m0_floor(float x, std::ptrdiff_t p) {
  std::uint32_t out = 0;
  if (e8m0_special(x, out)) return out;
  return p < 0 ? 0u : e8m0_ref().code[static_cast<std::size_t>(p)];
}
std::uint32_t expect_e8m0_ceil(float x, std::ptrdiff_t p) {
  std::uint32_t out = 0;
  if (e8m0_special(x, out)) return out;
  const ref_table& t = e8m0_ref();
  if (p < 0) return 0;
  const auto i = static_cast<std::size_t>(p);
  if (t.value[i] == static_cast<double>(x) || i + 1 == t.value.size()) return t.code[i];
  return t.code[i + 1];
}

// One encoder under test: the header's function and the reference's expectation.
struct encoder_case {
  const char* name;
  const ref_table& (*table)();
  std::uint32_t (*encode)(float);
  std::uint32_t (*expect)(float, std::ptrdiff_t);
};

const std::vector<encoder_case>& encoder_cases() {
  static const std::vector<encoder_case> cases = {
      {"bf16", bf16_ref, [](float x) -> std::uint32_t { return slm::f32_to_bf16(x); }, expect_bf16},
      {"f16", f16_ref, [](float x) -> std::uint32_t { return slm::f32_to_f16(x); }, expect_f16},
      {"e4m3 saturate", e4m3_ref,
       [](float x) -> std::uint32_t { return slm::f32_to_e4m3(x); },  // the default
       [](float x, std::ptrdiff_t p) { return expect_e4m3(x, p, fp8_overflow::saturate); }},
      {"e4m3 nan_on_overflow", e4m3_ref,
       [](float x) -> std::uint32_t { return slm::f32_to_e4m3(x, fp8_overflow::nan_on_overflow); },
       [](float x, std::ptrdiff_t p) { return expect_e4m3(x, p, fp8_overflow::nan_on_overflow); }},
      {"e5m2 infinity", e5m2_ref,
       [](float x) -> std::uint32_t { return slm::f32_to_e5m2(x); },  // the default
       [](float x, std::ptrdiff_t p) { return expect_e5m2(x, p, fp8_overflow::infinity); }},
      {"e5m2 saturate", e5m2_ref,
       [](float x) -> std::uint32_t { return slm::f32_to_e5m2(x, fp8_overflow::saturate); },
       [](float x, std::ptrdiff_t p) { return expect_e5m2(x, p, fp8_overflow::saturate); }},
      {"e2m1", e2m1_ref, [](float x) -> std::uint32_t { return slm::f32_to_e2m1(x); }, expect_e2m1},
      {"e8m0 nearest", e8m0_ref, [](float x) -> std::uint32_t { return slm::f32_to_e8m0(x); }, expect_e8m0},
      {"e8m0 floor", e8m0_ref, [](float x) -> std::uint32_t { return slm::f32_to_e8m0_floor(x); },
       expect_e8m0_floor},
      {"e8m0 ceil", e8m0_ref, [](float x) -> std::uint32_t { return slm::f32_to_e8m0_ceil(x); },
       expect_e8m0_ceil},
  };
  return cases;
}

// Collects mismatches and reports the first few.
struct mismatches {
  std::uint64_t count = 0;
  std::string first;
  void check(const encoder_case& c, float x, std::uint32_t got, std::uint32_t want) {
    if (got == want) return;
    if (count++ < 8)
      first += std::string(c.name) + ": x bits " + hex(f32_bits(x)) + " (" + std::to_string(x) +
               ") got " + hex(got) + " want " + hex(want) + "\n";
  }
};

void check_point(const encoder_case& c, float x, mismatches& out) {
  const std::ptrdiff_t p = std::isnan(x) ? -1 : c.table().floor_index(std::fabs(static_cast<double>(x)));
  out.check(c, x, c.encode(x), c.expect(x, p));
}

// ---------------------------------------------------------------------------------
// (a) Decoders, every code.

TEST(Numeric, Bf16DecodeEveryCode) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = slm::bf16_to_f32(static_cast<std::uint16_t>(h));
    ASSERT_EQ(f32_bits(f), h << 16) << hex(h);  // exact, NaN payloads included
    const std::uint32_t mag = h & 0x7FFF;
    if (mag < 0x7F80) {
      const double v = minifloat_value(mag, bf16_def);
      ASSERT_EQ(static_cast<double>(f), (h & 0x8000) ? -v : v) << hex(h);
    }
  }
}

TEST(Numeric, F16DecodeEveryCode) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = slm::f16_to_f32(static_cast<std::uint16_t>(h));
    const bool neg = (h & 0x8000) != 0;
    const std::uint32_t mag = h & 0x7FFF;
    ASSERT_EQ(std::signbit(f), neg) << hex(h);
    if (mag < 0x7C00) {
      const double v = minifloat_value(mag, f16_def);
      ASSERT_EQ(static_cast<double>(f), neg ? -v : v) << hex(h);
    } else if (mag == 0x7C00) {
      ASSERT_TRUE(std::isinf(f)) << hex(h);
    } else {
      // NaN: quiet, payload kept in the top mantissa bits.
      ASSERT_TRUE(std::isnan(f)) << hex(h);
      ASSERT_EQ(f32_bits(f) & 0x7FFF'FFFFu, 0x7FC0'0000u | ((h & 0x3FFu) << 13)) << hex(h);
    }
  }
  EXPECT_EQ(slm::f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(slm::f16_to_f32(0x03FF), 1023 * 0x1p-24f);
  EXPECT_EQ(slm::f16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(slm::f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(slm::f16_to_f32(0x7BFF), 65504.0f);
  EXPECT_EQ(slm::f16_to_f32(0xC000), -2.0f);
}

TEST(Numeric, E4m3DecodeEveryCode) {
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    const float f = slm::e4m3_to_f32(b);
    ASSERT_EQ(f32_bits(f), f32_bits(slm::e4m3_table[c])) << hex(c);
    ASSERT_EQ(std::signbit(f), (c & 0x80) != 0) << hex(c);
    if ((c & 0x7F) == 0x7F) {
      ASSERT_TRUE(std::isnan(f)) << hex(c);  // 0x7F and 0xFF only, never 480
    } else {
      const double v = minifloat_value(c & 0x7F, e4m3_def);
      ASSERT_EQ(static_cast<double>(f), (c & 0x80) ? -v : v) << hex(c);
    }
  }
}

TEST(Numeric, E5m2DecodeEveryCode) {
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    const float f = slm::e5m2_to_f32(b);
    ASSERT_EQ(f32_bits(f), f32_bits(slm::e5m2_table[c])) << hex(c);
    ASSERT_EQ(std::signbit(f), (c & 0x80) != 0) << hex(c);
    const std::uint32_t mag = c & 0x7F;
    if (mag < 0x7C) {
      const double v = minifloat_value(mag, e5m2_def);
      ASSERT_EQ(static_cast<double>(f), (c & 0x80) ? -v : v) << hex(c);
    } else if (mag == 0x7C) {
      ASSERT_TRUE(std::isinf(f)) << hex(c);
    } else {
      ASSERT_TRUE(std::isnan(f)) << hex(c);
    }
  }
  EXPECT_EQ(slm::e5m2_to_f32(0x7B), 57344.0f);
  EXPECT_EQ(slm::e5m2_to_f32(0x01), 0x1p-16f);
  EXPECT_EQ(slm::e5m2_to_f32(0x3C), 1.0f);
}

TEST(Numeric, E2m1DecodeEveryCode) {
  // Spec 1.1, literally.
  const float spec[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (std::uint32_t c = 0; c < 16; ++c) {
    const float f = slm::e2m1_to_f32(static_cast<std::uint8_t>(c));
    EXPECT_EQ(f32_bits(f), f32_bits(spec[c])) << c;  // 0x8 is -0.0, bit for bit
    const double v = minifloat_value(c & 7, e2m1_def);
    EXPECT_EQ(static_cast<double>(f), (c & 8) ? -v : v) << c;
    // Doubled integer table: 2 * value, and 0x8 is plain 0.
    EXPECT_EQ(static_cast<double>(slm::e2m1_to_doubled(static_cast<std::uint8_t>(c))), 2.0 * v * ((c & 8) ? -1 : 1));
    // The high nibble of the argument is ignored.
    EXPECT_EQ(f32_bits(slm::e2m1_to_f32(static_cast<std::uint8_t>(c | 0xA0))), f32_bits(f));
    EXPECT_EQ(slm::e2m1_to_doubled(static_cast<std::uint8_t>(c | 0x50)),
              slm::e2m1_to_doubled(static_cast<std::uint8_t>(c)));
  }
  const std::int8_t ggml[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
  for (int c = 0; c < 16; ++c) EXPECT_EQ(slm::e2m1_doubled_table[static_cast<std::size_t>(c)], ggml[c]);
}

TEST(Numeric, E8m0DecodeEveryCode) {
  for (std::uint32_t c = 0; c < 255; ++c) {
    const float f = slm::e8m0_to_f32(static_cast<std::uint8_t>(c));
    ASSERT_EQ(static_cast<double>(f), std::ldexp(1.0, static_cast<int>(c) - 127)) << c;
  }
  EXPECT_TRUE(std::isnan(slm::e8m0_to_f32(0xFF)));
  // 0x00 = 2^-127 is an f32 denormal; it must come out exactly, bit for bit.
  EXPECT_EQ(f32_bits(slm::e8m0_to_f32(0x00)), 0x0040'0000u);
  EXPECT_EQ(f32_bits(slm::e8m0_to_f32(0x01)), 0x0080'0000u);  // 2^-126, smallest normal
  EXPECT_EQ(slm::e8m0_to_f32(0x7F), 1.0f);
  EXPECT_EQ(slm::e8m0_to_f32(0xFE), 0x1p127f);
}

// ---------------------------------------------------------------------------------
// (b) encode(decode(c)) == c for every non-NaN code; -0 stays -0.

TEST(Numeric, RoundTripEveryCode) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto c = static_cast<std::uint16_t>(h);
    // NaN stays NaN with its sign and payload; only the quiet bit is added.
    const std::uint32_t want = (h & 0x7FFF) > 0x7F80 ? (h | 0x0040u) : h;
    ASSERT_EQ(slm::f32_to_bf16(slm::bf16_to_f32(c)), want) << hex(h);
  }
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto c = static_cast<std::uint16_t>(h);
    const std::uint32_t want = (h & 0x7FFF) > 0x7C00 ? (h | 0x0200u) : h;
    ASSERT_EQ(slm::f32_to_f16(slm::f16_to_f32(c)), want) << hex(h);
  }
  for (std::uint32_t c = 0; c < 256; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    if ((c & 0x7F) != 0x7F) {
      ASSERT_EQ(slm::f32_to_e4m3(slm::e4m3_to_f32(b)), b) << hex(c);
      ASSERT_EQ(slm::f32_to_e4m3(slm::e4m3_to_f32(b), fp8_overflow::nan_on_overflow), b) << hex(c);
    } else {
      ASSERT_EQ(slm::f32_to_e4m3(slm::e4m3_to_f32(b), fp8_overflow::nan_on_overflow), b) << hex(c);
      ASSERT_EQ(slm::f32_to_e4m3(slm::e4m3_to_f32(b)), 0x7F) << hex(c);
    }
    if ((c & 0x7F) < 0x7C) {
      ASSERT_EQ(slm::f32_to_e5m2(slm::e5m2_to_f32(b)), b) << hex(c);
      ASSERT_EQ(slm::f32_to_e5m2(slm::e5m2_to_f32(b), fp8_overflow::saturate), b) << hex(c);
    } else if ((c & 0x7F) == 0x7C) {
      ASSERT_EQ(slm::f32_to_e5m2(slm::e5m2_to_f32(b)), b) << hex(c);  // inf stays inf
      ASSERT_EQ(slm::f32_to_e5m2(slm::e5m2_to_f32(b), fp8_overflow::saturate), (c & 0x80) | 0x7B) << hex(c);
    }
    if (c < 255) {
      ASSERT_EQ(slm::f32_to_e8m0(slm::e8m0_to_f32(b)), b) << hex(c);
      ASSERT_EQ(slm::f32_to_e8m0_floor(slm::e8m0_to_f32(b)), b) << hex(c);
      ASSERT_EQ(slm::f32_to_e8m0_ceil(slm::e8m0_to_f32(b)), b) << hex(c);
    }
  }
  for (std::uint32_t c = 0; c < 16; ++c) {
    const auto b = static_cast<std::uint8_t>(c);
    ASSERT_EQ(slm::f32_to_e2m1(slm::e2m1_to_f32(b)), b) << c;  // 0x8 (-0) included
  }
}

// ---------------------------------------------------------------------------------
// (c) Rounding boundaries: each value, each midpoint between neighbours, and the f32
// numbers next to both, with both signs. First the reference is checked against the
// rule itself (midpoint -> even code, just below -> lower, just above -> upper), then
// the header against the reference.

TEST(Numeric, RoundingBoundaries) {
  for (const encoder_case& c : encoder_cases()) {
    const ref_table& t = c.table();
    mismatches bad;
    for (std::size_t i = 0; i + 1 < t.value.size(); ++i) {
      const double lo = t.value[i], hi = t.value[i + 1], mid = (lo + hi) / 2;
      const float fmid = static_cast<float>(mid);
      ASSERT_EQ(static_cast<double>(fmid), mid) << c.name << ": midpoint not an f32";
      const float below = std::nextafter(fmid, 0.0f), above = std::nextafter(fmid, INFINITY);
      const std::uint32_t even = (t.code[i] & 1u) == 0 ? t.code[i] : t.code[i + 1];
      ASSERT_EQ(t.nearest(mid), even) << c.name;
      ASSERT_EQ(t.nearest(static_cast<double>(below)), t.code[i]) << c.name;
      ASSERT_EQ(t.nearest(static_cast<double>(above)), t.code[i + 1]) << c.name;

      const float flo = static_cast<float>(lo);
      const float points[] = {fmid, below, above, flo, std::nextafter(flo, 0.0f), std::nextafter(flo, INFINITY)};
      for (float x : points) {
        check_point(c, x, bad);
        check_point(c, -x, bad);
      }
    }
    EXPECT_EQ(bad.count, 0u) << bad.first;
  }
}

// Special inputs for every encoder: zeros, infinities, NaNs with both signs and
// several payloads, the extremes of f32.
TEST(Numeric, SpecialInputs) {
  const std::uint32_t specials[] = {
      0x0000'0000, 0x8000'0000, 0x7F80'0000, 0xFF80'0000, 0x7FC0'0000, 0xFFC0'0000,
      0x7F80'0001, 0xFF80'0001, 0x7FFF'FFFF, 0xFFFF'FFFF, 0x7FA0'0000, 0x7F7F'FFFF,
      0xFF7F'FFFF, 0x0000'0001, 0x8000'0001, 0x007F'FFFF, 0x0080'0000, 0x3F80'0000};
  for (const encoder_case& c : encoder_cases()) {
    mismatches bad;
    for (std::uint32_t b : specials) check_point(c, f32_from_bits(b), bad);
    EXPECT_EQ(bad.count, 0u) << bad.first;
  }
}

// ---------------------------------------------------------------------------------
// (d) Strided sweep over all f32 bit patterns against the reference. The stride is odd,
// so the samples cover every low-bit residue; it is coarse in unoptimized builds so the
// test stays fast under sanitizers. SLM_NUMERIC_STRIDE=n overrides it.

std::uint32_t sweep_stride() {
  if (const char* s = std::getenv("SLM_NUMERIC_STRIDE")) {
    const unsigned long v = std::strtoul(s, nullptr, 10);
    if (v > 0 && v <= 0xFFFF'FFFFul) return static_cast<std::uint32_t>(v);
  }
#if defined(__OPTIMIZE__)
  return 1021;  // ~4.2M patterns
#else
  return 32749;  // ~131k patterns
#endif
}

TEST(Numeric, StridedSweep) {
  const std::uint64_t stride = sweep_stride();
  for (const encoder_case& c : encoder_cases()) {
    mismatches bad;
    for (std::uint64_t b = 0; b <= 0xFFFF'FFFFull; b += stride) check_point(c, f32_from_bits(static_cast<std::uint32_t>(b)), bad);
    EXPECT_EQ(bad.count, 0u) << bad.first;
  }
}

// Every f32 bit pattern, for every encoder, when SLM_NUMERIC_EXHAUSTIVE is set. The
// positive patterns ascend with the value, so the reference walks its table instead of
// searching it; each pattern is checked with both signs. NaNs are checked separately.
TEST(Numeric, ExhaustiveWhenRequested) {
  if (std::getenv("SLM_NUMERIC_EXHAUSTIVE") == nullptr)
    GTEST_SKIP() << "set SLM_NUMERIC_EXHAUSTIVE=1 to check all 2^32 inputs (optimized build)";
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  constexpr std::uint64_t end = 0x7F80'0001ull;  // +0 .. +inf
  for (const encoder_case& c : encoder_cases()) {
    std::vector<mismatches> bad(threads);
    std::vector<std::thread> pool;
    for (unsigned k = 0; k < threads; ++k) {
      pool.emplace_back([&c, &bad, k, threads] {
        const ref_table& t = c.table();
        const std::uint64_t lo = end * k / threads, hi = end * (k + 1) / threads;
        std::ptrdiff_t p = t.floor_index(static_cast<double>(f32_from_bits(static_cast<std::uint32_t>(lo))));
        const auto last = static_cast<std::ptrdiff_t>(t.value.size()) - 1;
        for (std::uint64_t b = lo; b < hi; ++b) {
          const float x = f32_from_bits(static_cast<std::uint32_t>(b));
          const double m = static_cast<double>(x);
          while (p < last && t.value[static_cast<std::size_t>(p + 1)] <= m) ++p;
          bad[k].check(c, x, c.encode(x), c.expect(x, p));
          bad[k].check(c, -x, c.encode(-x), c.expect(-x, p));
        }
        // NaNs: mantissa != 0 with the exponent all ones, both signs.
        const std::uint64_t nans = 0x7F'FFFFull;
        for (std::uint64_t m = 1 + nans * k / threads; m <= nans * (k + 1) / threads; ++m) {
          for (std::uint32_t s : {0x7F80'0000u, 0xFF80'0000u}) {
            const float x = f32_from_bits(s | static_cast<std::uint32_t>(m));
            bad[k].check(c, x, c.encode(x), c.expect(x, -1));
          }
        }
      });
    }
    for (std::thread& th : pool) th.join();
    std::uint64_t total = 0;
    std::string first;
    for (const mismatches& b : bad) total += b.count, first += b.first;
    EXPECT_EQ(total, 0u) << c.name << "\n" << first;
  }
}

// ---------------------------------------------------------------------------------
// (e) The spec's tables and handy codes.

TEST(Numeric, SpecE2m1Thresholds) {
  // Spec 1.2 threshold table, ties included.
  struct row { float x; std::uint8_t code; };
  const row rows[] = {
      {0.0f, 0x0},  {0.25f, 0x0}, {std::nextafter(0.25f, 1.0f), 0x1}, {0.5f, 0x1},
      {std::nextafter(0.75f, 0.0f), 0x1}, {0.75f, 0x2}, {1.0f, 0x2}, {1.25f, 0x2},
      {std::nextafter(1.25f, 2.0f), 0x3}, {1.5f, 0x3}, {std::nextafter(1.75f, 0.0f), 0x3},
      {1.75f, 0x4}, {2.5f, 0x4}, {std::nextafter(2.5f, 3.0f), 0x5}, {3.0f, 0x5},
      {std::nextafter(3.5f, 0.0f), 0x5}, {3.5f, 0x6}, {5.0f, 0x6}, {std::nextafter(5.0f, 6.0f), 0x7},
      {6.0f, 0x7}, {7.0f, 0x7}, {100.0f, 0x7}, {INFINITY, 0x7}, {3.0e38f, 0x7}};
  for (const row& r : rows) {
    EXPECT_EQ(slm::f32_to_e2m1(r.x), r.code) << r.x;
    EXPECT_EQ(slm::f32_to_e2m1(-r.x), r.code | 0x8) << -r.x;  // sign kept, -0 included
  }
  EXPECT_EQ(slm::f32_to_e2m1(-0.2f), 0x8);  // spec 1.3: small negatives keep their sign
  EXPECT_EQ(slm::f32_to_e2m1(-1e-30f), 0x8);
  EXPECT_EQ(slm::f32_to_e2m1(NAN), 0x7);    // no NaN in E2M1: +6, as CUDA documents
  EXPECT_EQ(slm::f32_to_e2m1(-NAN), 0x7);
}

// The quantizers' branchless magnitude code is f32_to_e2m1 on every non-negative,
// non-NaN float: 8192 bit patterns around each threshold and each end, a sweep of every
// 251st pattern up to +inf, and with SLM_NUMERIC_EXHAUSTIVE every pattern.
TEST(Numeric, E2m1MagnitudeCodeIsTheEncoders) {
  std::size_t checked = 0, wrong = 0;
  auto check = [&](std::uint32_t b) {
    const float t = f32_from_bits(b);
    ++checked;
    if (slm::e2m1_magnitude_code(t) != slm::f32_to_e2m1(t)) {
      if (++wrong <= 5) ADD_FAILURE() << "t = " << t << " (bits " << b << ")";
    }
  };
  constexpr std::uint32_t inf = 0x7F80'0000u;
  for (float v : {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f, INFINITY}) {
    const std::uint32_t c = f32_bits(v);
    for (std::uint32_t b = c > 4096 ? c - 4096 : 0; b <= std::min(c + 4096, inf); ++b) check(b);
  }
  const bool all = std::getenv("SLM_NUMERIC_EXHAUSTIVE") != nullptr;
  for (std::uint64_t b = 0; b <= inf; b += all ? 1 : 251) check(static_cast<std::uint32_t>(b));
  EXPECT_EQ(wrong, 0u) << "of " << checked;
}

TEST(Numeric, SpecE4m3HandyCodes) {
  // Spec 2.1.
  struct row { std::uint8_t code; float value; };
  const row rows[] = {{0x38, 1.0f},   {0x30, 0.5f}, {0x20, 0.125f}, {0x40, 2.0f},
                      {0x60, 32.0f},  {0x6B, 88.0f}, {0x70, 128.0f}, {0x7E, 448.0f},
                      {0x08, 0.015625f}, {0x01, 0.001953125f}, {0x07, 7 * 0.001953125f}};
  for (const row& r : rows) {
    EXPECT_EQ(slm::e4m3_to_f32(r.code), r.value) << hex(r.code);
    EXPECT_EQ(slm::f32_to_e4m3(r.value), r.code) << r.value;
    EXPECT_EQ(slm::e4m3_to_f32(static_cast<std::uint8_t>(r.code | 0x80)), -r.value);
  }
  EXPECT_TRUE(std::isnan(slm::e4m3_to_f32(0x7F)));
  EXPECT_TRUE(std::isnan(slm::e4m3_to_f32(0xFF)));
  EXPECT_EQ(slm::f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(slm::f32_to_e4m3(0x1p-10f), 0x00);  // half the smallest subnormal: tie -> 0
  EXPECT_EQ(slm::f32_to_e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(slm::f32_to_e4m3(3 * 0x1p-10f), 0x02);  // 1.5 subnormal ulps: tie -> even 0x02
}

// (f) Overflow: CUDA satfinite vs PyTorch's non-saturating cast (spec 2.3).
TEST(Numeric, SpecE4m3Overflow) {
  // Saturating (default).
  EXPECT_EQ(slm::f32_to_e4m3(448.0f), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(464.0f), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(464.0001f), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(480.0f), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(1e30f), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(INFINITY), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(-INFINITY), 0xFE);
  EXPECT_EQ(slm::f32_to_e4m3(-500.0f), 0xFE);
  EXPECT_EQ(slm::f32_to_e4m3(NAN), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(-NAN), 0x7F);
  // PyTorch tensor.to(torch.float8_e4m3fn).
  constexpr fp8_overflow torch = fp8_overflow::nan_on_overflow;
  EXPECT_EQ(slm::f32_to_e4m3(456.0f, torch), 0x7E);
  EXPECT_EQ(slm::f32_to_e4m3(464.0f, torch), 0x7E);  // tie between 448 (0x7E) and 480: even
  EXPECT_EQ(slm::f32_to_e4m3(464.0001f, torch), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(std::nextafter(464.0f, 1000.0f), torch), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(480.0f, torch), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(1e30f, torch), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(INFINITY, torch), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(-464.0001f, torch), 0xFF);
  EXPECT_EQ(slm::f32_to_e4m3(-INFINITY, torch), 0xFF);
  EXPECT_EQ(slm::f32_to_e4m3(NAN, torch), 0x7F);
  EXPECT_EQ(slm::f32_to_e4m3(-NAN, torch), 0xFF);
}

TEST(Numeric, E5m2Overflow) {
  EXPECT_EQ(slm::f32_to_e5m2(57344.0f), 0x7B);
  EXPECT_EQ(slm::f32_to_e5m2(std::nextafter(61440.0f, 0.0f)), 0x7B);
  EXPECT_EQ(slm::f32_to_e5m2(61440.0f), 0x7C);  // tie: 0x7B is odd, 0x7C (inf) even
  EXPECT_EQ(slm::f32_to_e5m2(-1e30f), 0xFC);
  EXPECT_EQ(slm::f32_to_e5m2(INFINITY), 0x7C);
  EXPECT_EQ(slm::f32_to_e5m2(61440.0f, fp8_overflow::saturate), 0x7B);
  EXPECT_EQ(slm::f32_to_e5m2(-INFINITY, fp8_overflow::saturate), 0xFB);
  EXPECT_EQ(slm::f32_to_e5m2(NAN), 0x7F);
  EXPECT_EQ(slm::f32_to_e5m2(-NAN), 0xFF);
  EXPECT_EQ(slm::f32_to_e5m2(-NAN, fp8_overflow::saturate), 0x7F);
  EXPECT_TRUE(std::isnan(slm::e5m2_to_f32(slm::f32_to_e5m2(-NAN))));
}

TEST(Numeric, F16AndBf16Specials) {
  EXPECT_EQ(slm::f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(slm::f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7BFF);
  EXPECT_EQ(slm::f32_to_f16(65520.0f), 0x7C00);  // tie goes to the even code, inf
  EXPECT_EQ(slm::f32_to_f16(-INFINITY), 0xFC00);
  EXPECT_EQ(slm::f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(slm::f32_to_f16(0x1p-25f), 0x0000);  // tie with 0 -> 0
  EXPECT_EQ(slm::f32_to_f16(-0x1p-25f), 0x8000);
  EXPECT_EQ(slm::f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(slm::f32_to_f16(3 * 0x1p-25f), 0x0002);  // 1.5 ulp: tie -> even
  EXPECT_EQ(slm::f32_to_f16(std::nextafter(0x1p-14f, 0.0f)), 0x0400);  // rounds up into the normals
  EXPECT_EQ(slm::f32_to_f16(1.0f + 0x1p-11f), 0x3C00);  // tie -> even
  EXPECT_EQ(slm::f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3C02);
  EXPECT_EQ(slm::f32_to_f16(f32_from_bits(0x7FC0'0000)), 0x7E00);
  EXPECT_EQ(slm::f32_to_f16(f32_from_bits(0xFF80'0001)), 0xFE00);  // sNaN: quiet, sign kept
  EXPECT_EQ(slm::f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0x3F80'8000)), 0x3F80);  // tie -> even
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0x3F81'8000)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0x7F7F'FFFF)), 0x7F80);  // FLT_MAX rounds to inf
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0x7F7F'7FFF)), 0x7F7F);
  EXPECT_EQ(slm::f32_to_bf16(-INFINITY), 0xFF80);
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0xFF80'0001)), 0xFFC0);  // sNaN: quiet, sign kept
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0x0000'8000)), 0x0000);  // denormal tie -> even 0
  EXPECT_EQ(slm::f32_to_bf16(f32_from_bits(0x0001'8000)), 0x0002);
}

TEST(Numeric, SpecE8m0) {
  // Spec 2.4: 0x00 = 2^-127 (denormal), 0xFF NaN, bias 127.
  EXPECT_EQ(slm::f32_to_e8m0(1.0f), 0x7F);
  EXPECT_EQ(slm::f32_to_e8m0(0x1p-127f), 0x00);
  EXPECT_EQ(slm::f32_to_e8m0(0x1p127f), 0xFE);
  EXPECT_EQ(slm::f32_to_e8m0(3.0e38f), 0xFE);        // clamped: 2^128 does not exist
  EXPECT_EQ(slm::f32_to_e8m0(1.5f), 0x80);           // tie between 0x7F and 0x80: even
  EXPECT_EQ(slm::f32_to_e8m0(3.0f), 0x80);           // tie between 0x80 and 0x81: even
  EXPECT_EQ(slm::f32_to_e8m0(std::nextafter(3.0f, 0.0f)), 0x80);
  EXPECT_EQ(slm::f32_to_e8m0(std::nextafter(3.0f, 4.0f)), 0x81);
  EXPECT_EQ(slm::f32_to_e8m0(1.4f), 0x7F);
  EXPECT_EQ(slm::f32_to_e8m0(1.5f * 0x1p-127f), 0x00);  // tie with 2^-126: even 0x00
  EXPECT_EQ(slm::f32_to_e8m0(0x1p-149f), 0x00);
  EXPECT_EQ(slm::f32_to_e8m0(0.0f), 0x00);
  EXPECT_EQ(slm::f32_to_e8m0(-0.0f), 0x00);
  EXPECT_EQ(slm::f32_to_e8m0(-1.0f), 0xFF);
  EXPECT_EQ(slm::f32_to_e8m0(INFINITY), 0xFF);
  EXPECT_EQ(slm::f32_to_e8m0(NAN), 0xFF);
  EXPECT_EQ(slm::f32_to_e8m0_floor(6.0f), 0x81);  // 4 = 2^2
  EXPECT_EQ(slm::f32_to_e8m0_ceil(6.0f), 0x82);   // 8 = 2^3
  EXPECT_EQ(slm::f32_to_e8m0_ceil(4.0f), 0x81);
  EXPECT_EQ(slm::f32_to_e8m0_ceil(std::nextafter(0x1p127f, INFINITY)), 0xFE);  // clamped
  EXPECT_EQ(slm::f32_to_e8m0_floor(0x1p-140f), 0x00);                        // clamped
  EXPECT_EQ(slm::f32_to_e8m0_ceil(0x1p-140f), 0x00);
  EXPECT_EQ(slm::e8m0_from_exponent(0), 0x7F);
  EXPECT_EQ(slm::e8m0_from_exponent(-127), 0x00);
  EXPECT_EQ(slm::e8m0_from_exponent(-500), 0x00);
  EXPECT_EQ(slm::e8m0_from_exponent(127), 0xFE);
  EXPECT_EQ(slm::e8m0_from_exponent(128), 0xFE);
  // OCP MX v1.0 (spec 6.1): amax 5.0 -> 2^(floor(log2 5) - 2) = 2^0.
  EXPECT_EQ(slm::f32_to_e8m0_floor(5.0f) - 2, 0x7F);
  // Triton / ModelOpt: 2^ceil(log2(amax / 6)); amax 5.0 -> 2^0, amax 7.0 -> 2^1.
  EXPECT_EQ(slm::f32_to_e8m0_ceil(5.0f / 6.0f), 0x7F);
  EXPECT_EQ(slm::f32_to_e8m0_ceil(7.0f / 6.0f), 0x80);
}

TEST(Numeric, Fp4Packing) {
  for (std::uint32_t lo = 0; lo < 16; ++lo) {
    for (std::uint32_t hi = 0; hi < 16; ++hi) {
      const std::uint8_t b = slm::fp4_pack(static_cast<std::uint8_t>(lo), static_cast<std::uint8_t>(hi));
      EXPECT_EQ(b, lo | (hi << 4));  // element 2i low nibble (spec 1.4)
      EXPECT_EQ(slm::fp4_lo(b), lo);
      EXPECT_EQ(slm::fp4_hi(b), hi);
      // Only the low nibble of each argument is used.
      EXPECT_EQ(slm::fp4_pack(static_cast<std::uint8_t>(lo | 0xF0), static_cast<std::uint8_t>(hi | 0x30)), b);
    }
  }
  // Spec 1.4: [+1.0, -6.0] packs to 0xF2.
  EXPECT_EQ(slm::fp4_pack(slm::f32_to_e2m1(1.0f), slm::f32_to_e2m1(-6.0f)), 0xF2);
}

// Everything is usable in constant expressions.
static_assert(slm::f32_to_e4m3(448.0f) == 0x7E);
static_assert(slm::f32_to_e4m3(1.0f) == 0x38);
static_assert(slm::e4m3_to_f32(0x7E) == 448.0f);
static_assert(slm::f32_to_e4m3(500.0f, fp8_overflow::nan_on_overflow) == 0x7F);
static_assert(slm::f32_to_e5m2(1.0f) == 0x3C);
static_assert(slm::e5m2_to_f32(0x7B) == 57344.0f);
static_assert(slm::f32_to_bf16(1.0f) == 0x3F80 && slm::bf16_to_f32(0x3F80) == 1.0f);
static_assert(slm::f32_to_f16(1.0f) == 0x3C00 && slm::f16_to_f32(0x3C00) == 1.0f);
static_assert(slm::f16_to_f32(0x0001) == 0x1p-24f);
static_assert(slm::f32_to_e2m1(-0.2f) == 0x8 && slm::e2m1_to_f32(0x7) == 6.0f);
static_assert(slm::e2m1_to_doubled(0xF) == -12);
static_assert(slm::e8m0_to_f32(0x00) == 0x1p-127f && slm::f32_to_e8m0(0x1p-127f) == 0x00);
// The policy names are one policy.
static_assert(fp8_overflow::nan_on_overflow == fp8_overflow::non_saturating);
static_assert(fp8_overflow::infinity == fp8_overflow::non_saturating);
static_assert(slm::fp4_pack(0x2, 0xF) == 0xF2 && slm::fp4_hi(0xF2) == 0xF && slm::fp4_lo(0xF2) == 0x2);

}  // namespace
