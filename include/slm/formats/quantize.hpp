// slm/formats/quantize.hpp - quantizers that write the bytes the producers write.
//
// Requantizing at load time (a BF16 lm_head to NVFP4, spec 10 pitfall 11), writing test
// checkpoints, and checking a loader against a producer all need quantizers whose bytes
// are the producer's, not merely close. Each recipe below follows its producer's fp32
// arithmetic expression by expression (shared/spec/nvfp4.md 3.4, 5.3, 6.1); the NVFP4
// ModelOpt recipe reproduces ModelOpt's own golden tensors byte for byte
// (tests/test_quantize.cpp).
//
//   recipe                                  global            block scale                      element code
//   NVFP4, ModelOpt (quantize_nvfp4)        s2 = amax / 2688  e4m3(amax_b / (6 * s2))          e2m1(x / (fp32(s_b) * s2))
//   NVFP4, compressed-tensors               g = 2688 / amax   e4m3(min(g * (amax_b / 6), 448)) e2m1(x / (fp32(s_b) / g))
//   MXFP4 (three scale rules)               -                 e8m0 power of two X              e2m1(x / X)
//   FP8 E4M3 per tensor                     s = amax / 448    -                                e4m3(x / s)
//
// Rules shared by all recipes:
//  * E2M1 and E4M3 round to nearest, ties to even, and saturate (core/numeric.hpp).
//  * Inputs must be finite: every function scans its input (the tensor functions need
//    the absolute maximum anyway) and refuses NaN/inf with the element's position (a
//    producer would write NaN scales or garbage codes).
//  * The sign of a zero code. The NVFP4 producers take the sign from `x < 0`: a tiny
//    negative value gives 0x8, but -0.0 gives 0x0 (ModelOpt `(weight < 0)`,
//    compressed-tensors multiplies by sign(x), and sign(-0.0) is 0). The MXFP4 and FP8
//    encoders keep the IEEE sign bit, as Triton, PTX cvt and PyTorch casts do, so -0.0
//    gives 0x8 / 0x80 (spec 9.5 lists -0 -> 0x8).
//  * Zero: an all-zero block gets NVFP4 scale 1.0 (0x38, ModelOpt) or 0.125 (0x20,
//    compressed-tensors) and zero codes. An all-zero tensor gets weight_scale_2 = 0
//    (= amax / 2688; the producer would then divide 0 by 0 and write NaN scales), the
//    compressed-tensors divisor +inf (= 2688 / 0; its reciprocal 0 is the right
//    multiplier), FP8 scale 0, and zero codes everywhere.
//
// Layout of the outputs (spec 3.2): codes [N, K/2], element 2i in the low nibble of
// byte i; scales [N, K/block] row-major, linear. Every function writes into
// caller-provided spans (a big tensor needs nothing beyond its outputs); the `result<...
// _quantized>` overloads allocate std::vectors for convenience. A tensor function takes
// an optional executor and splits rows across it; each row's bytes depend only on the
// row and the global scale, and the absolute maximum is exact, so the output is the
// same for every thread count.
//
// For inputs that are not f32 (a BF16 checkpoint, say), convert a row at a time and use
// the row functions with a global scale computed from the tensor's absolute maximum.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/formats/weights.hpp"

namespace slm {

inline constexpr float e2m1_max_value = 6.0f;   // largest E2M1 magnitude
inline constexpr float e4m3_max_value = 448.0f;  // largest finite E4M3 magnitude

namespace detail {

inline constexpr std::size_t no_index = std::numeric_limits<std::size_t>::max();

// |x| of a non-NaN float: for non-negative floats the bit patterns sort like the values,
// so maxima are taken on bits (exact, no FP compare subtleties, vectorizes).
inline float abs_of(float x) noexcept { return f32_from_bits(f32_bits(x) & f32_abs_mask); }

struct abs_max_scan {
  std::uint32_t bits = 0;          // max |x| as an f32 bit pattern
  std::size_t first_bad = no_index;  // index of the first NaN or inf
};

inline abs_max_scan scan_abs_max(const float* x, std::size_t n, std::size_t base) noexcept {
  abs_max_scan s;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = f32_bits(x[i]) & f32_abs_mask;
    if (a >= f32_inf_bits) {
      if (s.first_bad == no_index) s.first_bad = base + i;
      continue;
    }
    if (a > s.bits) s.bits = a;
  }
  return s;
}

// max |x_i| as an f32 bit pattern (NaN patterns sort above inf's), without branches, so it
// vectorizes: on the bits as int32 (every |x| pattern fits, and SSE2 has a signed compare).
inline std::uint32_t abs_max_bits(const float* x, std::size_t n) noexcept {
  std::int32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) m = std::max(m, static_cast<std::int32_t>(f32_bits(x[i]) & f32_abs_mask));
  return static_cast<std::uint32_t>(m);
}

// Block amax of finite values (the callers' checks refuse NaN and inf first).
inline float block_abs_max(const float* x, std::size_t n) noexcept { return f32_from_bits(abs_max_bits(x, n)); }

// The E2M1 codes of a block of N finite values x_i / d (d > 0 and finite), packed two per
// byte (element 2j in the low nibble). The sign is the NVFP4 producers' rule, x_i < 0
// (-0.0 gives code 0), or with SignBit the sign bit of x_i / d, as f32_to_e2m1 takes it
// (-0.0 gives 0x8; MXFP4). The magnitude |x_i| / d is |x_i / d| exactly (IEEE division is
// sign-symmetric) and e2m1_magnitude_code is f32_to_e2m1 on it, so every code is the one
// f32_to_e2m1 gives; the loop is written so that it vectorizes.
template <std::size_t N, bool SignBit = false>
inline void e2m1_block(const float* x, float d, std::uint8_t* codes) noexcept {
  std::uint8_t c[N];
  for (std::size_t i = 0; i < N; ++i) {
    const std::uint32_t sign = SignBit ? (f32_bits(x[i]) >> 28) & 0x8u : (x[i] < 0.0f ? 0x8u : 0x0u);
    c[i] = static_cast<std::uint8_t>(e2m1_magnitude_code(abs_of(x[i]) / d) | sign);
  }
  for (std::size_t j = 0; j < N / 2; ++j) codes[j] = fp4_pack(c[2 * j], c[2 * j + 1]);
}

// Checks shared by the tensor functions: N x K matches the input, K fits the block, and
// each output holds what will be written.
status check_tensor(std::string_view what, std::size_t in_size, std::size_t rows, std::size_t cols,
                    std::size_t block);
#if SLM_DEFINE_KERNELS
SLM_INLINE status check_tensor(std::string_view what, std::size_t in_size, std::size_t rows, std::size_t cols,
                               std::size_t block) {
  if (cols != 0 && rows > std::numeric_limits<std::size_t>::max() / cols)
    return make_error(errc::out_of_range, what, ": ", rows, " x ", cols, " overflows");
  if (in_size != rows * cols)
    return make_error(errc::invalid_argument, what, ": input holds ", in_size, " floats, expected N x K = ", rows,
                      " x ", cols, " = ", rows * cols);
  if (cols % block != 0)
    return make_error(errc::invalid_argument, what, ": K = ", cols, " is not a multiple of the block size ", block);
  return {};
}
#endif  // SLM_DEFINE_KERNELS

inline status check_output(std::string_view what, std::string_view name, std::size_t have, std::size_t need) {
  if (have < need)
    return make_error(errc::invalid_argument, what, ": ", name, " output holds ", have, " bytes, needs ", need);
  return {};
}

// A single row: K fits the block, every value finite.
status check_row(std::string_view what, std::span<const float> row, std::size_t block);
#if SLM_DEFINE_KERNELS
SLM_INLINE status check_row(std::string_view what, std::span<const float> row, std::size_t block) {
  SLM_TRY(check_tensor(what, row.size(), 1, row.size(), block));
  // The common case first, without branches: every |x| below inf.
  if (abs_max_bits(row.data(), row.size()) < f32_inf_bits) return {};
  const abs_max_scan s = scan_abs_max(row.data(), row.size(), 0);
  if (s.first_bad != no_index)
    return make_error(errc::invalid_argument, what, ": element ", s.first_bad, " is ", row[s.first_bad],
                      "; quantizing needs finite inputs");
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// Rows per task: at least ~16K elements, so small tensors stay on one thread.
constexpr std::size_t row_grain(std::size_t cols) noexcept {
  return cols == 0 ? 1 : (cols >= 16384 ? 1 : 16384 / cols);
}

// max |w| over a row-major N x K tensor, or an error naming the first non-finite element.
template <class E>
result<float> tensor_abs_max(E& ex, std::span<const float> w, std::size_t rows, std::size_t cols,
                             std::string_view what) {
  const static_partition p = partition(0, rows, static_cast<std::size_t>(ex.concurrency()), row_grain(cols));
  std::vector<abs_max_scan> parts(p.count);
  SLM_TRY(parallel_for_chunks(ex, p.count, [&](std::size_t c) {
    const index_range r = p.chunk(c);
    parts[c] = scan_abs_max(w.data() + r.begin * cols, r.size() * cols, r.begin * cols);
  }));
  abs_max_scan all;
  for (const abs_max_scan& s : parts) {  // chunk order: the first bad index is the lowest
    if (s.first_bad != no_index && all.first_bad == no_index) all.first_bad = s.first_bad;
    if (s.bits > all.bits) all.bits = s.bits;
  }
  if (all.first_bad != no_index) {
    const float v = w[all.first_bad];
    return make_error(errc::invalid_argument, what, ": element [", all.first_bad / cols, ", ", all.first_bad % cols,
                      "] is ", v, "; quantizing needs finite inputs");
  }
  return f32_from_bits(all.bits);
}

template <class E, class RowFn>
status for_each_row(E& ex, std::size_t rows, std::size_t cols, RowFn&& fn) {
  return parallel_for(ex, 0, rows, row_grain(cols), [&](std::size_t lo, std::size_t hi) {
    for (std::size_t r = lo; r < hi; ++r) fn(r);
  });
}

inline status check_global(std::string_view what, std::string_view name, float g) {
  if (!(g >= 0.0f) || std::isinf(g))
    return make_error(errc::invalid_argument, what, ": ", name, " is ", g, ", expected a finite value >= 0");
  return {};
}

}  // namespace detail

template <class E>
concept quantize_executor = executor<std::remove_cvref_t<E>>;

// =================================================================================
// NVFP4, ModelOpt recipe (NVFP4QTensor.quantize, dynamic path; spec 3.4).

// Step 1: weight_scale_2 = amax / 2688, ONE fp32 division by the constant 2688 (= 6 x
// 448, exact). This is the expression that reproduces ModelOpt's weight_scale_2 bits
// (PyTorch evaluates `amax.float() / (6.0 * 448.0)` with the Python product folded
// first). amax / 6 / 448 or amax * (1 / 2688) differ in the last bit for about a quarter
// of all amax values (golden cases m0 and m2 show it).
constexpr float nvfp4_weight_scale_2(float amax) noexcept { return amax / 2688.0f; }

// Step 2: the E4M3 block scale, RNE of amax_b / (6 x weight_scale_2), in that order:
// the fp32 product 6 * s2 first, then the division (ModelOpt's `per_block_amax / (6.0 *
// weights_scaling_factor_2)`). The golden tensors cannot tell this expression from
// amax_b / 6 / s2 or amax_b * 448 / amax (all three agree on every golden block, and on
// random data they disagree on about one block in a million); we follow the source.
//  * A scale that comes out exactly 0 (an all-zero block, or an fp32 underflow) is 1.0
//    (code 0x38), as ModelOpt sets it.
//  * Underflow guard (spec 3.4): a tiny non-zero block whose scale is below the
//    smallest E4M3 subnormal 2^-9 would round to code 0x00, and ModelOpt as of the
//    spec's snapshot (5a4242f, 2025-12) then divided by zero (writing +-6 codes under a
//    zero scale). We clamp to 2^-9 (code 0x01) first, as later ModelOpt does
//    (`clamp_(min=2**-9)` in get_weights_scaling_factor): the block keeps
//    the nearest usable scale and its elements stay meaningful. Only blocks whose scale
//    is <= 2^-10 (block amax below ~2.2e-6 x tensor amax) are affected.
//  * The cast saturates at 448. With weight_scale_2 from step 1 the value cannot exceed
//    448 by more than rounding, which rounds to 448 either way; ModelOpt's PyTorch cast
//    would give NaN only for a caller-supplied global far too small.
// A zero weight_scale_2 (all-zero tensor) yields 0x38.
inline std::uint8_t nvfp4_block_scale(float block_amax, float weight_scale_2) noexcept {
  float s = block_amax / (6.0f * weight_scale_2);
  if (s == 0.0f || std::isnan(s)) s = 1.0f;
  if (s < 0x1p-9f) s = 0x1p-9f;
  return f32_to_e4m3(s);
}

namespace detail {
// One row: K/16 blocks. Preconditions: K % 16 == 0, outputs sized; g finite >= 0.
// Returns false if g == 0 while the row holds a non-zero value.
bool nvfp4_row_modelopt(const float* x, std::size_t K, float g, std::uint8_t* codes,
                        std::uint8_t* scales) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE bool nvfp4_row_modelopt(const float* x, std::size_t K, float g, std::uint8_t* codes,
                                   std::uint8_t* scales) noexcept {
  bool ok = true;
  for (std::size_t b = 0; b < K / 16; ++b) {
    const float* xb = x + 16 * b;
    const float amax_b = block_abs_max(xb, 16);
    const std::uint8_t sc = nvfp4_block_scale(amax_b, g);
    scales[b] = sc;
    // Step 3: t = x / (fp32(s_b) x s2), the product first (ModelOpt's `input /
    // (weights_scaling_factor.to(float32) * weights_scaling_factor_2)`).
    const float denom = e4m3_to_f32(sc) * g;
    const bool usable = denom > 0.0f && std::isfinite(denom);
    if (!usable && amax_b != 0.0f) ok = false;
    if (usable) e2m1_block<16>(xb, denom, codes + 8 * b);  // step 4: element 2j low nibble
    else std::fill(codes + 8 * b, codes + 8 * b + 8, std::uint8_t{0});
  }
  return ok;
}
#endif  // SLM_DEFINE_KERNELS
}  // namespace detail

// One row of K values (K % 16 == 0) with a given weight_scale_2: writes K/2 code bytes
// and K/16 scale bytes. Use this to stream a tensor that is not f32, with
// weight_scale_2 = nvfp4_weight_scale_2(max |W| over the whole tensor).
status quantize_nvfp4_row(std::span<const float> row, float weight_scale_2, std::span<std::uint8_t> codes,
                          std::span<std::uint8_t> scales);
#if SLM_DEFINE_KERNELS
SLM_INLINE status quantize_nvfp4_row(std::span<const float> row, float weight_scale_2, std::span<std::uint8_t> codes,
                                     std::span<std::uint8_t> scales) {
  constexpr std::string_view what = "quantize_nvfp4_row";
  SLM_TRY(detail::check_row(what, row, 16));
  SLM_TRY(detail::check_global(what, "weight_scale_2", weight_scale_2));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), row.size() / 2));
  SLM_TRY(detail::check_output(what, "scales", scales.size(), row.size() / 16));
  if (!detail::nvfp4_row_modelopt(row.data(), row.size(), weight_scale_2, codes.data(), scales.data()))
    return make_error(errc::invalid_argument, what, ": weight_scale_2 ", weight_scale_2,
                      " is too small for a non-zero block of this row");
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// A row-major N x K f32 tensor: codes [N, K/2], scales [N, K/16]; returns weight_scale_2.
template <class E = serial_executor>
  requires quantize_executor<E>
result<float> quantize_nvfp4(std::span<const float> w, std::size_t rows, std::size_t cols,
                             std::span<std::uint8_t> codes, std::span<std::uint8_t> scales, E&& ex = E{}) {
  constexpr std::string_view what = "quantize_nvfp4";
  SLM_TRY(detail::check_tensor(what, w.size(), rows, cols, 16));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), rows * cols / 2));
  SLM_TRY(detail::check_output(what, "scales", scales.size(), rows * cols / 16));
  auto amax = detail::tensor_abs_max(ex, w, rows, cols, what);
  if (!amax.ok()) return amax;
  const float g = nvfp4_weight_scale_2(*amax);
  if (g == 0.0f && *amax != 0.0f)
    return make_error(errc::out_of_range, what, ": tensor amax ", *amax, " is too small for an fp32 weight_scale_2");
  SLM_TRY(detail::for_each_row(ex, rows, cols, [&](std::size_t r) {
    (void)detail::nvfp4_row_modelopt(w.data() + r * cols, cols, g, codes.data() + r * cols / 2,
                                     scales.data() + r * cols / 16);
  }));
  return g;
}

// Quantized NVFP4 data with the ModelOpt multiplier, ready to wrap in a weight_matrix.
struct nvfp4_quantized {
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> codes;   // U8 [N, K/2]
  std::vector<std::uint8_t> scales;  // F8_E4M3 [N, K/16]
  float weight_scale_2 = 0.0f;       // multiplier (ModelOpt's weight_scale_2)

  weight_matrix view() const noexcept {
    weight_matrix v;
    v.format = weight_format::nvfp4;
    v.rows = rows;
    v.cols = cols;
    v.data = reinterpret_cast<const std::byte*>(codes.data());
    v.row_stride = cols / 2;
    v.scales = reinterpret_cast<const std::byte*>(scales.data());
    v.scale_stride = cols / 16;
    v.global = weight_scale_2;
    return v;
  }
};

template <class E = serial_executor>
  requires quantize_executor<E>
result<nvfp4_quantized> quantize_nvfp4(std::span<const float> w, std::size_t rows, std::size_t cols, E&& ex = E{}) {
  SLM_TRY(detail::check_tensor("quantize_nvfp4", w.size(), rows, cols, 16));
  nvfp4_quantized q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(rows * cols / 2);
  q.scales.resize(rows * cols / 16);
  auto g = quantize_nvfp4(w, rows, cols, std::span<std::uint8_t>(q.codes), std::span<std::uint8_t>(q.scales), ex);
  if (!g.ok()) return std::move(g).take_error();
  q.weight_scale_2 = *g;
  return q;
}

// =================================================================================
// NVFP4, compressed-tensors recipe (llm-compressor `generate_gparam`,
// `calculate_qparams`, `_quantize`; spec 3.4 second list). The stored global is a
// DIVISOR, weight_global_scale = 2688 / amax (spec 3.3).
//
// Precision note: compressed-tensors computes in the weight's dtype where the observer
// hands it one (for BF16 weights the amax, and so amax_b / 6, may be BF16 values). This
// implementation computes every step in fp32, which is exact for f32 inputs and for BF16
// amaxes converted exactly, but can differ from a BF16-typed division in rare cases.

// g = 2688 / amax, one fp32 division.
constexpr float nvfp4_global_scale_compressed_tensors(float amax) noexcept { return 2688.0f / amax; }

// s_b = e4m3(min(g x (amax_b / 6), 448)), the division by 6 first; a scale that rounds
// to 0 becomes 0.125 (code 0x20), compressed-tensors' own underflow guard. An all-zero
// block gives 0x20 directly (so an all-zero tensor, g = inf, never forms inf x 0).
inline std::uint8_t nvfp4_block_scale_compressed_tensors(float block_amax, float global_scale) noexcept {
  if (block_amax == 0.0f) return 0x20;
  float s = global_scale * (block_amax / 6.0f);
  if (s > e4m3_max_value) s = e4m3_max_value;
  const std::uint8_t c = f32_to_e4m3(s);
  return c == 0x00 ? std::uint8_t{0x20} : c;
}

namespace detail {
bool nvfp4_row_compressed_tensors(const float* x, std::size_t K, float g, std::uint8_t* codes,
                                  std::uint8_t* scales) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE bool nvfp4_row_compressed_tensors(const float* x, std::size_t K, float g, std::uint8_t* codes,
                                             std::uint8_t* scales) noexcept {
  bool ok = true;
  for (std::size_t b = 0; b < K / 16; ++b) {
    const float* xb = x + 16 * b;
    const float amax_b = block_abs_max(xb, 16);
    const std::uint8_t sc = nvfp4_block_scale_compressed_tensors(amax_b, g);
    scales[b] = sc;
    // t = clamp(x / (fp32(s_b) / g), -6, 6): the effective scale s_b / g first, as
    // `scale = scale / global_scale; scaled = x / scale`. The clamp is the encoder's
    // saturation.
    const float d = e4m3_to_f32(sc) / g;
    const bool usable = d > 0.0f && std::isfinite(d);
    if (!usable && amax_b != 0.0f) ok = false;
    if (usable) e2m1_block<16>(xb, d, codes + 8 * b);
    else std::fill(codes + 8 * b, codes + 8 * b + 8, std::uint8_t{0});
  }
  return ok;
}
#endif  // SLM_DEFINE_KERNELS
}  // namespace detail

// One row with a given divisor g = nvfp4_global_scale_compressed_tensors(tensor amax).
status quantize_nvfp4_row_compressed_tensors(std::span<const float> row, float global_scale,
                                             std::span<std::uint8_t> codes, std::span<std::uint8_t> scales);
#if SLM_DEFINE_KERNELS
SLM_INLINE status quantize_nvfp4_row_compressed_tensors(std::span<const float> row, float global_scale,
                                                        std::span<std::uint8_t> codes, std::span<std::uint8_t> scales) {
  constexpr std::string_view what = "quantize_nvfp4_row_compressed_tensors";
  SLM_TRY(detail::check_row(what, row, 16));
  if (!(global_scale > 0.0f))
    return make_error(errc::invalid_argument, what, ": weight_global_scale is ", global_scale, ", expected > 0");
  SLM_TRY(detail::check_output(what, "codes", codes.size(), row.size() / 2));
  SLM_TRY(detail::check_output(what, "scales", scales.size(), row.size() / 16));
  if (!detail::nvfp4_row_compressed_tensors(row.data(), row.size(), global_scale, codes.data(), scales.data()))
    return make_error(errc::invalid_argument, what, ": weight_global_scale ", global_scale,
                      " is too large for a non-zero block of this row");
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// A row-major N x K f32 tensor; returns the divisor weight_global_scale.
template <class E = serial_executor>
  requires quantize_executor<E>
result<float> quantize_nvfp4_compressed_tensors(std::span<const float> w, std::size_t rows, std::size_t cols,
                                                std::span<std::uint8_t> codes, std::span<std::uint8_t> scales,
                                                E&& ex = E{}) {
  constexpr std::string_view what = "quantize_nvfp4_compressed_tensors";
  SLM_TRY(detail::check_tensor(what, w.size(), rows, cols, 16));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), rows * cols / 2));
  SLM_TRY(detail::check_output(what, "scales", scales.size(), rows * cols / 16));
  auto amax = detail::tensor_abs_max(ex, w, rows, cols, what);
  if (!amax.ok()) return amax;
  const float g = nvfp4_global_scale_compressed_tensors(*amax);
  if (std::isinf(g) && *amax != 0.0f)
    return make_error(errc::out_of_range, what, ": tensor amax ", *amax, " is too small: 2688 / amax overflows fp32");
  SLM_TRY(detail::for_each_row(ex, rows, cols, [&](std::size_t r) {
    (void)detail::nvfp4_row_compressed_tensors(w.data() + r * cols, cols, g, codes.data() + r * cols / 2,
                                               scales.data() + r * cols / 16);
  }));
  return g;
}

struct nvfp4_compressed_tensors_quantized {
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> codes;   // weight_packed U8 [N, K/2]
  std::vector<std::uint8_t> scales;  // weight_scale F8_E4M3 [N, K/16]
  float weight_global_scale = 0.0f;  // DIVISOR: W = e2m1 x fp32(scale) / weight_global_scale

  // A view in slm's multiplier convention, global = 1 / weight_global_scale (what vLLM
  // does at load). Not always bit-identical to dividing: see test_quantize.cpp.
  weight_matrix view() const noexcept {
    weight_matrix v;
    v.format = weight_format::nvfp4;
    v.rows = rows;
    v.cols = cols;
    v.data = reinterpret_cast<const std::byte*>(codes.data());
    v.row_stride = cols / 2;
    v.scales = reinterpret_cast<const std::byte*>(scales.data());
    v.scale_stride = cols / 16;
    v.global = 1.0f / weight_global_scale;
    return v;
  }
};

template <class E = serial_executor>
  requires quantize_executor<E>
result<nvfp4_compressed_tensors_quantized> quantize_nvfp4_compressed_tensors(std::span<const float> w,
                                                                            std::size_t rows, std::size_t cols,
                                                                            E&& ex = E{}) {
  SLM_TRY(detail::check_tensor("quantize_nvfp4_compressed_tensors", w.size(), rows, cols, 16));
  nvfp4_compressed_tensors_quantized q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(rows * cols / 2);
  q.scales.resize(rows * cols / 16);
  auto g = quantize_nvfp4_compressed_tensors(w, rows, cols, std::span<std::uint8_t>(q.codes),
                                             std::span<std::uint8_t>(q.scales), ex);
  if (!g.ok()) return std::move(g).take_error();
  q.weight_global_scale = *g;
  return q;
}

// =================================================================================
// MXFP4 (spec 6.1, 5.3): blocks of 32, one E8M0 power-of-two scale X each, no global.
// Producers agree on everything but how X is chosen from the block amax:
enum class mxfp4_scale_rule : std::uint8_t {
  // OCP MX v1.0: X = 2^(floor(log2 amax) - 2), 2 being E2M1's largest exponent. The
  // block maximum can land above 6 and saturates (amax 7 -> X = 1, 7 -> 6).
  ocp_floor,
  // Triton downcast_to_mxfp (default ROUND_UP), ModelOpt MXFP4QTensor, gemma.cpp:
  // X = 2^ceil(log2(amax / 6)) with amax / 6 in fp32, so nothing clips. (ModelOpt and
  // gemma.cpp round element ties differently from RNE, spec 1.2: only their scales match.)
  ceil,
  // compressed-tensors `generate_mxfp4_scales` (spec 5.3, snapshot 52792be): amax
  // rounded to BF16, then to a power of two at E2M1 precision (a mantissa >= 0.75 rounds
  // up: add 1 << 5 to the BF16 bits, keep sign and exponent), then minus 2; code = that
  // BF16 exponent field - 2, at least 0. (Other compressed-tensors versions compute the
  // scale in calculate_qparams as clamp(ceil(log2(amax / 6)), -127, 127) + 127, which is
  // the `ceil` rule; check which one produced a checkpoint before comparing bytes.)
  compressed_tensors,
};

constexpr std::string_view to_string(mxfp4_scale_rule r) noexcept {
  switch (r) {
    case mxfp4_scale_rule::ocp_floor: return "ocp_floor";
    case mxfp4_scale_rule::ceil: return "ceil";
    case mxfp4_scale_rule::compressed_tensors: return "compressed_tensors";
  }
  return "?";
}

// The E8M0 code for a block with absolute maximum `block_amax` (finite, >= 0). An
// all-zero block gets 0x00 (2^-127) under every rule.
constexpr std::uint8_t mxfp4_block_scale(float block_amax, mxfp4_scale_rule rule) noexcept {
  switch (rule) {
    case mxfp4_scale_rule::ocp_floor: {
      const std::uint8_t e = f32_to_e8m0_floor(block_amax);  // 2^floor(log2 amax); 0 -> 0x00
      return static_cast<std::uint8_t>(e >= 2 ? e - 2 : 0);
    }
    case mxfp4_scale_rule::ceil:
      return f32_to_e8m0_ceil(block_amax / 6.0f);
    case mxfp4_scale_rule::compressed_tensors: {
      constexpr std::uint32_t half_e2m1_ulp = 1u << (7 - 1 - 1);  // BF16 mantissa 7 bits, E2M1 1 bit
      const std::uint32_t rounded = (f32_to_bf16(block_amax) + half_e2m1_ulp) & 0xFF80u;
      const std::uint32_t field = (rounded >> 7) & 0xFFu;  // BF16 exponent = E8M0 code of the power of two
      // field 0 is zero (or a BF16 denormal, masked to zero): log2 gives -inf, clamped to
      // 0. field <= 255, so the result is at most 253: never the NaN code.
      return static_cast<std::uint8_t>(field <= 2 ? 0 : field - 2);
    }
  }
  return 0x00;
}

namespace detail {
void mxfp4_row(const float* x, std::size_t K, mxfp4_scale_rule rule, std::uint8_t* codes,
               std::uint8_t* scales) noexcept;
#if SLM_DEFINE_KERNELS
SLM_INLINE void mxfp4_row(const float* x, std::size_t K, mxfp4_scale_rule rule, std::uint8_t* codes,
                          std::uint8_t* scales) noexcept {
  for (std::size_t b = 0; b < K / 32; ++b) {
    const float* xb = x + 32 * b;
    const std::uint8_t sc = mxfp4_block_scale(block_abs_max(xb, 32), rule);
    scales[b] = sc;
    // x / X is exact scaling by a power of two (X is built from bits, so 2^-127 stays a
    // denormal rather than a flushed zero); the same bits as Triton's x * (1 / X).
    const float X = e8m0_to_f32(sc);
    e2m1_block<32, true>(xb, X, codes + 16 * b);  // f32_to_e2m1(xb[i] / X), two per byte
  }
}
#endif  // SLM_DEFINE_KERNELS
}  // namespace detail

status quantize_mxfp4_row(std::span<const float> row, mxfp4_scale_rule rule, std::span<std::uint8_t> codes,
                          std::span<std::uint8_t> scales);
#if SLM_DEFINE_KERNELS
SLM_INLINE status quantize_mxfp4_row(std::span<const float> row, mxfp4_scale_rule rule, std::span<std::uint8_t> codes,
                                     std::span<std::uint8_t> scales) {
  constexpr std::string_view what = "quantize_mxfp4_row";
  SLM_TRY(detail::check_row(what, row, 32));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), row.size() / 2));
  SLM_TRY(detail::check_output(what, "scales", scales.size(), row.size() / 32));
  detail::mxfp4_row(row.data(), row.size(), rule, codes.data(), scales.data());
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// A row-major N x K f32 tensor: codes [N, K/2], scales [N, K/32] (E8M0 bytes).
template <class E = serial_executor>
  requires quantize_executor<E>
status quantize_mxfp4(std::span<const float> w, std::size_t rows, std::size_t cols, mxfp4_scale_rule rule,
                      std::span<std::uint8_t> codes, std::span<std::uint8_t> scales, E&& ex = E{}) {
  constexpr std::string_view what = "quantize_mxfp4";
  SLM_TRY(detail::check_tensor(what, w.size(), rows, cols, 32));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), rows * cols / 2));
  SLM_TRY(detail::check_output(what, "scales", scales.size(), rows * cols / 32));
  auto amax = detail::tensor_abs_max(ex, w, rows, cols, what);  // finite inputs only
  if (!amax.ok()) return std::move(amax).take_error();
  return detail::for_each_row(ex, rows, cols, [&](std::size_t r) {
    detail::mxfp4_row(w.data() + r * cols, cols, rule, codes.data() + r * cols / 2, scales.data() + r * cols / 32);
  });
}

struct mxfp4_quantized {
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> codes;   // U8 [N, K/2]
  std::vector<std::uint8_t> scales;  // E8M0 [N, K/32]

  weight_matrix view() const noexcept {
    weight_matrix v;
    v.format = weight_format::mxfp4;
    v.rows = rows;
    v.cols = cols;
    v.data = reinterpret_cast<const std::byte*>(codes.data());
    v.row_stride = cols / 2;
    v.scales = reinterpret_cast<const std::byte*>(scales.data());
    v.scale_stride = cols / 32;
    return v;
  }
};

template <class E = serial_executor>
  requires quantize_executor<E>
result<mxfp4_quantized> quantize_mxfp4(std::span<const float> w, std::size_t rows, std::size_t cols,
                                       mxfp4_scale_rule rule, E&& ex = E{}) {
  SLM_TRY(detail::check_tensor("quantize_mxfp4", w.size(), rows, cols, 32));
  mxfp4_quantized q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(rows * cols / 2);
  q.scales.resize(rows * cols / 32);
  SLM_TRY(quantize_mxfp4(w, rows, cols, rule, std::span<std::uint8_t>(q.codes), std::span<std::uint8_t>(q.scales), ex));
  return q;
}

// =================================================================================
// FP8 E4M3 with one per-tensor scale (ModelOpt / compressed-tensors FP8 weights):
// scale = amax / 448 (one fp32 division), code = e4m3(x / scale), saturating at 448.
// An all-zero tensor gets scale 0 and zero codes.

constexpr float fp8_scale(float amax) noexcept { return amax / e4m3_max_value; }

status quantize_fp8_row(std::span<const float> row, float scale, std::span<std::uint8_t> codes);
#if SLM_DEFINE_KERNELS
SLM_INLINE status quantize_fp8_row(std::span<const float> row, float scale, std::span<std::uint8_t> codes) {
  constexpr std::string_view what = "quantize_fp8_row";
  SLM_TRY(detail::check_row(what, row, 1));
  SLM_TRY(detail::check_global(what, "scale", scale));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), row.size()));
  for (std::size_t k = 0; k < row.size(); ++k) {
    if (scale == 0.0f && row[k] != 0.0f)
      return make_error(errc::invalid_argument, what, ": scale is 0 but element ", k, " is ", row[k]);
    codes[k] = scale == 0.0f ? std::uint8_t{0} : f32_to_e4m3(row[k] / scale);
  }
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// A row-major N x K f32 tensor: codes [N, K]; returns the scale (a multiplier).
template <class E = serial_executor>
  requires quantize_executor<E>
result<float> quantize_fp8(std::span<const float> w, std::size_t rows, std::size_t cols,
                           std::span<std::uint8_t> codes, E&& ex = E{}) {
  constexpr std::string_view what = "quantize_fp8";
  SLM_TRY(detail::check_tensor(what, w.size(), rows, cols, 1));
  SLM_TRY(detail::check_output(what, "codes", codes.size(), rows * cols));
  auto amax = detail::tensor_abs_max(ex, w, rows, cols, what);
  if (!amax.ok()) return amax;
  const float s = fp8_scale(*amax);
  SLM_TRY(detail::for_each_row(ex, rows, cols, [&](std::size_t r) {
    for (std::size_t k = r * cols; k < (r + 1) * cols; ++k)
      codes[k] = s == 0.0f ? std::uint8_t{0} : f32_to_e4m3(w[k] / s);
  }));
  return s;
}

struct fp8_quantized {
  std::size_t rows = 0, cols = 0;
  std::vector<std::uint8_t> codes;  // F8_E4M3 [N, K]
  float scale = 0.0f;               // multiplier (weight_scale)

  weight_matrix view() const noexcept {
    weight_matrix v;
    v.format = weight_format::fp8_e4m3;
    v.rows = rows;
    v.cols = cols;
    v.data = reinterpret_cast<const std::byte*>(codes.data());
    v.row_stride = cols;
    v.global = scale;
    return v;
  }
};

template <class E = serial_executor>
  requires quantize_executor<E>
result<fp8_quantized> quantize_fp8(std::span<const float> w, std::size_t rows, std::size_t cols, E&& ex = E{}) {
  SLM_TRY(detail::check_tensor("quantize_fp8", w.size(), rows, cols, 1));
  fp8_quantized q;
  q.rows = rows;
  q.cols = cols;
  q.codes.resize(rows * cols);
  auto s = quantize_fp8(w, rows, cols, std::span<std::uint8_t>(q.codes), ex);
  if (!s.ok()) return std::move(s).take_error();
  q.scale = *s;
  return q;
}

}  // namespace slm
