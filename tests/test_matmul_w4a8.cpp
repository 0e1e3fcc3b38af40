// matmul W4A8 (kernels/avx512_vnni.hpp, kernels/avx2_int8.hpp): int8 activations for nvfp4 /
// mxfp4 weights.
//
// Error bound versus the exact product with f32 activations. Let w_k = fl(e_k f_s) be the
// dequantized weight (what the W4A16 reference uses, f_s the block factor), d_b the
// activation block scale fl(amax_b / 127), q_k = RNE(fl(x_k / d_b)).
//  * Quantization: |x_k / d - fl(x_k / d)| <= u |x_k / d| <= 127 u (1 + u), and RNE adds
//    at most 1/2, so |x_k - d q_k| <= d/2 (1 + 256 u) <= d/2 (1 + 2^-16) (no clamping can
//    trigger: |fl(x / d)| <= 127 (1 + 2u) < 127.5).
//  * The W4A8 value computed exactly, Y* = sum_s f_s (d_s / 2) D_s = sum_k d q_k e_k f_s,
//    differs from y_exact = sum_k x_k w_k by at most
//      sum_k |d q_k - x_k| |e_k f_s| + sum_k |x_k| |e_k f_s - w_k|
//      <= (1 + u) Q + u (1 + u) S_abs,   Q = sum_b (d_b / 2)(1 + 2^-16) sum_{k in b} |w_k|,
//    S_abs = sum_k |x_k w_k|.
//  * f32 evaluation: c_s = fl(f_s h_s) is one rounding, each term then passes through at
//    most S + 6 roundings (fma chain per lane, 4-level lane sum, tail), so the computed y
//    is within gamma_{S+7} sum_s |f_s h_s D_s| <= gamma (1 + u)(S_abs + Q) of Y*.
// Asserted: |y - y_exact| <= (1 + 2g) Q + 2 (g + u) S_abs (+1e-35), g = gamma_{S+24}.
// Between the AVX-512 or AVX2 GEMV and the scalar W4A8 reference (same integers, same c_s;
// only the order of the per-segment sums differs): |y - y_ref| <= 2 g T, T = sum_s |c_s D_s|.
// The AVX-512 (VNNI or AMX-INT8 tiles) and AVX2 GEMMs perform the reference's operations in
// its order: bit-identical.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "slm/core/cpu.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "test_helpers.hpp"

namespace {

using slm::activation_precision;
using slm::isa;
using slm::weight_format;
using slm::weight_matrix;
namespace wq = slm::detail::w4a8;

std::vector<isa> available_isas() {
  std::vector<isa> out;
  for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::neon})
    if (slm::isa_supported(i, slm::host_cpu())) out.push_back(i);
  return out;
}

double gamma_n(std::size_t n) {
  const double u = std::ldexp(1.0, -24);
  const double m = static_cast<double>(n);
  return m * u / (1.0 - m * u);
}

struct owned_weight {
  std::vector<std::byte> data, scales;
  weight_matrix w;
};

// Random codes (every byte is valid), varied scales, padded strides, misaligned.
owned_weight make_weight(weight_format f, std::size_t N, std::size_t K, std::size_t misalign, std::mt19937& rng,
                         bool wide_scales = true) {
  owned_weight o;
  weight_matrix& w = o.w;
  w.format = f;
  w.rows = N;
  w.cols = K;
  w.row_stride = slm::row_bytes(f, K) + 3 + misalign;
  o.data.assign(misalign + N * w.row_stride + 64, std::byte{0});
  std::uniform_int_distribution<int> byte(0, 255);
  for (std::size_t i = misalign; i < o.data.size(); ++i) o.data[i] = std::byte{static_cast<std::uint8_t>(byte(rng))};
  w.data = o.data.data() + misalign;
  const std::size_t per_row = K / slm::block_size(f);
  const std::size_t sm = misalign == 0 ? 0 : 4 - misalign;
  w.scale_stride = per_row + 1;
  o.scales.assign(sm + N * w.scale_stride + 8, std::byte{0});
  // nvfp4: wide = subnormal .. ~60, else ModelOpt-like 0x30..0x50 (0.5 .. 16); mxfp4 2^-9 .. 2^7.
  std::uniform_int_distribution<int> e4(wide_scales ? 0x00 : 0x30, wide_scales ? 0x56 : 0x50), e8(118, 134);
  for (std::size_t r = 0; r < N; ++r)
    for (std::size_t b = 0; b < per_row; ++b)
      o.scales[sm + r * w.scale_stride + b] =
          std::byte{static_cast<std::uint8_t>(f == weight_format::nvfp4 ? e4(rng) : e8(rng))};
  w.scales = o.scales.data() + sm;
  w.global = f == weight_format::nvfp4 ? 0.0123f : 1.0f;
  return o;
}

// Per (token, row): exact y, S_abs, Q (activation rounding term), T = sum_s |c_s D_s|.
struct bounds {
  std::vector<double> y, s_abs, q, t;
};

bounds compute_bounds(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx) {
  const std::size_t N = w.rows, K = w.cols, S = K / 16, qb = wq::act_block(w.format);
  bounds b;
  b.y.assign(n_tok * N, 0);
  b.s_abs.assign(n_tok * N, 0);
  b.q.assign(n_tok * N, 0);
  b.t.assign(n_tok * N, 0);
  std::vector<float> row(K), d(K / qb);
  std::vector<std::int8_t> q(K);
  std::vector<float> h(S);
  std::vector<std::int32_t> nc(S);
  for (std::size_t t = 0; t < n_tok; ++t) {
    const float* xt = x + t * ldx;
    wq::quantize_scalar(xt, K, qb, wq::qrow{q.data(), h.data(), nc.data()});
    for (std::size_t bl = 0; bl < K / qb; ++bl) {
      float amax = 0;
      for (std::size_t k = bl * qb; k < (bl + 1) * qb; ++k) amax = std::max(amax, std::fabs(xt[k]));
      d[bl] = amax / 127.0f;
    }
    for (std::size_t n = 0; n < N; ++n) {
      slm::detail::mm::decode_scalar(w, n, 0, K, row.data());
      double a = 0, sa = 0, qq = 0, tt = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(xt[k]) * row[k];
        a += p;
        sa += std::fabs(p);
        qq += 0.5 * d[k / qb] * (1.0 + 0x1p-16) * std::fabs(static_cast<double>(row[k]));
      }
      const std::byte* codes = w.data + n * w.row_stride;
      for (std::size_t s = 0; s < S; ++s) {
        long dot = 0;
        for (std::size_t k = 16 * s; k < 16 * s + 16; ++k) {
          const std::uint8_t byte = static_cast<std::uint8_t>(codes[k / 2]);
          dot += q[k] * wq::e2m1x2[(k & 1) ? slm::fp4_hi(byte) : slm::fp4_lo(byte)];
        }
        const float c = slm::detail::mm::block_factor(w, n, 16 * s) * h[s];
        tt += std::fabs(static_cast<double>(c) * static_cast<double>(dot));
      }
      b.y[t * N + n] = a;
      b.s_abs[t * N + n] = sa;
      b.q[t * N + n] = qq;
      b.t[t * N + n] = tt;
    }
  }
  return b;
}


slm::status run(int threads, const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                std::size_t ldy, isa which) {
  slm::serial_executor serial;
  if (threads == 1) return slm::matmul(w, x, n_tok, ldx, y, ldy, serial, which, activation_precision::int8);
  if (threads == 2) return slm::matmul_w4a8(w, x, n_tok, ldx, y, ldy, slm_test::the_pools().p2, which);
  return slm::matmul_w4a8(w, x, n_tok, ldx, y, ldy, slm_test::the_pools().p3, which);
}

void sweep(weight_format f, std::vector<std::size_t> Ks) {
  std::mt19937 rng(99u + static_cast<unsigned>(f));
  std::size_t cases = 0, exact_gemm = 0;
  for (std::size_t N : {1u, 3u, 16u, 17u, 64u, 70u}) {
    for (std::size_t K : Ks) {
      for (std::size_t n_tok : {1u, 2u, 3u, 7u, 33u}) {
        const std::size_t mis = (N + K + n_tok) % 4;
        owned_weight o = make_weight(f, N, K, mis, rng);
        const std::size_t ldx = K + 3, ldy = N + 2;
        std::vector<float> xbuf(1 + n_tok * ldx);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& v : xbuf) v = nd(rng);
        const float* x = xbuf.data() + 1;
        const bounds b = compute_bounds(o.w, x, n_tok, ldx);
        const double g = gamma_n(K / 16 + 24), u = 0x1p-24;
        std::vector<float> yref;
        for (isa which : available_isas()) {
          std::vector<float> first;
          for (int threads : {1, 2, 3}) {
            SCOPED_TRACE(slm::cat(slm::to_string(f), " N=", N, " K=", K, " n_tok=", n_tok, " misalign=", mis,
                                  " isa=", slm::to_string(which), " threads=", threads));
            std::vector<float> ybuf(n_tok * ldy + 1, -7.0f);
            float* y = ybuf.data() + 1;
            const slm::status st = run(threads, o.w, x, n_tok, ldx, y, ldy, which);
            ASSERT_TRUE(st.ok()) << st.message();
            EXPECT_EQ(ybuf[0], -7.0f);
            for (std::size_t t = 0; t < n_tok; ++t) {
              for (std::size_t n = 0; n < N; ++n) {
                const std::size_t i = t * N + n;
                const double got = y[t * ldy + n];
                ASSERT_LE(std::fabs(got - b.y[i]), (1 + 2 * g) * b.q[i] + 2 * (g + u) * b.s_abs[i] + 1e-35)
                    << "t=" << t << " n=" << n;
                if (!yref.empty()) {
                  ASSERT_LE(std::fabs(got - yref[t * ldy + n]), 2 * g * b.t[i] + 1e-35) << "t=" << t << " n=" << n;
                }
              }
              for (std::size_t n = N; n < ldy && t * ldy + n < n_tok * ldy; ++n)
                ASSERT_EQ(y[t * ldy + n], -7.0f) << "wrote past N";
            }
            if (threads == 1) {
              first = ybuf;
              if (which == isa::scalar) yref = std::vector<float>(ybuf.begin() + 1, ybuf.end());
              // The VNNI, AMX-INT8 and AVX2 GEMMs (more tokens than the fused GEMV takes) do
              // the reference's operations in its order.
              if (n_tok > slm::detail::mm::gemv_max_tokens && slm::w4a8_accelerated(which) && !yref.empty()) {
                ASSERT_EQ(std::memcmp(yref.data(), y, yref.size() * sizeof(float)), 0) << "GEMM != reference";
                ++exact_gemm;
              }
            } else {
              ASSERT_EQ(std::memcmp(first.data(), ybuf.data(), ybuf.size() * sizeof(float)), 0)
                  << "result depends on the thread count";
            }
            ++cases;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0u);
  if (slm::w4a8_accelerated()) {
    EXPECT_GT(exact_gemm, 0u);
  }
}

TEST(MatmulW4A8, Reports) {
  std::printf("w4a8 accelerated: %d (AVX-512 VNNI: %d, AMX-INT8 GEMM: %d)\n", static_cast<int>(slm::w4a8_accelerated()),
              static_cast<int>(slm::w4a8_vnni()), static_cast<int>(slm::amx_int8_accelerated()));
}

// The AMX-INT8 GEMM's own geometry (kernels/amx_int8.hpp), beyond the sweep's one panel:
// several 128-row panels with a partial last one, K past one 1024-column panel (a partial
// 64-column step, an odd number of segments in the last panel for nvfp4), token blocks of
// 16 with a partial last one; bit-identical to the scalar reference at 1 and 2 threads.
TEST(MatmulW4A8, AmxTilesGeometry) {
  if (!slm::amx_int8_accelerated()) GTEST_SKIP() << "no AMX-INT8";
  std::mt19937 rng(2026u);
  struct shape {
    weight_format f;
    std::size_t N, K, n_tok;
  };
  for (const shape& c : {shape{weight_format::nvfp4, 300, 1040, 40}, shape{weight_format::nvfp4, 130, 2128, 17},
                         shape{weight_format::mxfp4, 257, 1120, 65}, shape{weight_format::mxfp4, 33, 96, 33}}) {
    SCOPED_TRACE(slm::cat(slm::to_string(c.f), " N=", c.N, " K=", c.K, " n_tok=", c.n_tok));
    owned_weight o = make_weight(c.f, c.N, c.K, c.N % 4, rng, false);
    const std::size_t ldx = c.K + 1, ldy = c.N + 5;
    std::vector<float> xbuf(c.n_tok * ldx);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : xbuf) v = nd(rng);
    std::vector<float> ref(c.n_tok * ldy, -7.0f), tiles(ref), tiles2(ref);
    ASSERT_TRUE(run(1, o.w, xbuf.data(), c.n_tok, ldx, ref.data(), ldy, isa::scalar).ok());
    ASSERT_TRUE(run(1, o.w, xbuf.data(), c.n_tok, ldx, tiles.data(), ldy, isa::avx512).ok());
    ASSERT_TRUE(run(2, o.w, xbuf.data(), c.n_tok, ldx, tiles2.data(), ldy, isa::avx512).ok());
    EXPECT_EQ(std::memcmp(ref.data(), tiles.data(), ref.size() * sizeof(float)), 0) << "tiles != reference";
    EXPECT_EQ(std::memcmp(tiles.data(), tiles2.data(), ref.size() * sizeof(float)), 0) << "depends on threads";
  }
}

TEST(MatmulW4A8, Nvfp4) { sweep(weight_format::nvfp4, {16, 48, 80, 256, 272, 784, 1040}); }
TEST(MatmulW4A8, Mxfp4) { sweep(weight_format::mxfp4, {32, 96, 256, 288, 1056}); }

// The scalar, AVX2 and AVX-512 quantizers agree bit for bit (including zero, tiny and
// non-finite blocks); the AVX2 one's GEMM layout (q ^ 0x80) only flips the sign bit.
TEST(MatmulW4A8, QuantizersAgree) {
  if (!slm::w4a8_accelerated()) GTEST_SKIP() << "no SIMD W4A8 kernels on this CPU";
#ifdef SLM_X86
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  const std::size_t K = 64 * 32;
  std::vector<float> x(K);
  for (float& v : x) v = nd(rng);
  for (std::size_t k = 0; k < 32; ++k) x[k] = 0.0f;                  // zero block
  for (std::size_t k = 32; k < 64; ++k) x[k] = 1e-44f;               // d underflows
  x[70] = INFINITY;                                                   // non-finite block
  x[100] = NAN;
  for (std::size_t k = 128; k < 160; ++k) x[k] = (k % 2 ? 1.0f : -1.0f) * 0.5f * static_cast<float>(k - 127);
  for (std::size_t qb : {16u, 32u}) {
    std::vector<std::int8_t> q1(K), q2(K);
    std::vector<float> h1(K / 16), h2(K / 16);
    std::vector<std::int32_t> n1(K / 16), n2(K / 16);
    wq::quantize_scalar(x.data(), K, qb, {q1.data(), h1.data(), n1.data()});
    for (std::uint8_t flip : {0x00, 0x80}) {
      SCOPED_TRACE(slm::cat("qb=", qb, " flip=", static_cast<int>(flip)));
      std::fill(q2.begin(), q2.end(), std::int8_t{0});
      std::fill(n2.begin(), n2.end(), 0);
      wq::quantize_256(x.data(), K, qb, {q2.data(), h2.data(), n2.data()}, flip);
      for (std::int8_t& v : q2) v = static_cast<std::int8_t>(static_cast<std::uint8_t>(v) ^ flip);
      EXPECT_EQ(q1, q2);
      EXPECT_EQ(n1, n2);
      EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.size() * 4), 0);
    }
    if (slm::w4a8_vnni()) {
      wq::quantize_512(x.data(), K, qb, {q2.data(), h2.data(), n2.data()});
      EXPECT_EQ(q1, q2);
      EXPECT_EQ(n1, n2);
      EXPECT_EQ(std::memcmp(h1.data(), h2.data(), h1.size() * 4), 0);
    }
    for (std::int8_t v : q1) EXPECT_GE(v, -127);
  }
#endif
}

// A realistic decode GEMV: error statistics printed (the figures in the header comment)
// and the bound asserted.
TEST(MatmulW4A8, ErrorOnRealisticGemv) {
  std::mt19937 rng(2024);
  for (weight_format f : {weight_format::nvfp4, weight_format::mxfp4}) {
    const std::size_t N = 512, K = 4096;
    owned_weight o = make_weight(f, N, K, 0, rng, false);
    std::vector<float> x(K);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    for (std::size_t k = 0; k < K; k += 97) x[k] *= 8.0f;  // a few outliers, as in real activations
    const bounds b = compute_bounds(o.w, x.data(), 1, K);
    std::vector<float> y8(N), y32(N);
    ASSERT_TRUE(slm::matmul_w4a8(o.w, x.data(), 1, K, y8.data(), N, slm_test::the_pools().p2).ok());
    ASSERT_TRUE(slm::matmul(o.w, x.data(), 1, K, y32.data(), N, slm_test::the_pools().p2).ok());
    double max_rel_s = 0, ss_rel_s = 0, ss_err = 0, ss_y = 0, max_ratio = 0, max_rel_s32 = 0;
    const double g = gamma_n(K / 16 + 24), u = 0x1p-24;
    for (std::size_t n = 0; n < N; ++n) {
      const double e = std::fabs(y8[n] - b.y[n]);
      const double bound = (1 + 2 * g) * b.q[n] + 2 * (g + u) * b.s_abs[n];
      EXPECT_LE(e, bound) << n;
      max_rel_s = std::max(max_rel_s, e / b.s_abs[n]);
      ss_rel_s += (e / b.s_abs[n]) * (e / b.s_abs[n]);
      ss_err += e * e;
      ss_y += b.y[n] * b.y[n];
      max_ratio = std::max(max_ratio, e / bound);
      max_rel_s32 = std::max(max_rel_s32, std::fabs(y32[n] - b.y[n]) / b.s_abs[n]);
    }
    std::printf(
        "%s %zux%zu W4A8 error: |err|/sum|xw| max %.3g rms %.3g; rms(err)/rms(y) %.3g; "
        "max err/bound %.3f; (W4A16 f32: max |err|/sum|xw| %.3g)\n",
        std::string(slm::to_string(f)).c_str(), N, K, max_rel_s, std::sqrt(ss_rel_s / static_cast<double>(N)),
        std::sqrt(ss_err / ss_y), max_ratio, max_rel_s32);
    // Loose sanity on the typical error (the bound above is the real assertion).
    EXPECT_LT(std::sqrt(ss_err / ss_y), 0.05);
  }
}

TEST(MatmulW4A8, SelectionAndValidation) {
  std::mt19937 rng(3);
  slm::serial_executor ex;
  // Non-fp4 formats and activation_precision::f32 are exactly matmul().
  owned_weight o = make_weight(weight_format::nvfp4, 40, 512, 1, rng);
  std::vector<float> x(3 * 512);
  std::normal_distribution<float> nd;
  for (float& v : x) v = nd(rng);
  for (std::size_t n_tok : {1u, 3u}) {
    std::vector<float> a(n_tok * 40), b(n_tok * 40), c(n_tok * 40);
    ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 512, a.data(), 40, ex).ok());
    ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 512, b.data(), 40, ex, isa::best, activation_precision::f32).ok());
    ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 512, c.data(), 40, ex, isa::best, activation_precision::int8).ok());
    EXPECT_EQ(a, b);
    EXPECT_NE(a, c);  // int8 activations do change the result
  }
  std::vector<float> wf(4 * 64, 0.25f), y(4), y2(4);
  weight_matrix f32w;
  f32w.format = weight_format::f32;
  f32w.rows = 4;
  f32w.cols = 64;
  f32w.data = reinterpret_cast<const std::byte*>(wf.data());
  f32w.row_stride = 256;
  ASSERT_TRUE(slm::matmul_w4a8(f32w, x.data(), 1, 64, y.data(), 4, ex).ok());
  ASSERT_TRUE(slm::matmul(f32w, x.data(), 1, 64, y2.data(), 4, ex).ok());
  EXPECT_EQ(y, y2);
  using slm::errc;
  y.resize(40);
  EXPECT_TRUE(slm_test::fails_with(slm::matmul_w4a8(o.w, nullptr, 1, 512, y.data(), 40, ex), errc::invalid_argument,
                                   {"x is null"}));
  weight_matrix bad = o.w;
  bad.cols = 40;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul_w4a8(bad, x.data(), 1, 512, y.data(), 40, ex), errc::invalid_argument,
                                   {"multiple of 16"}));
  EXPECT_TRUE(slm::matmul_w4a8(o.w, nullptr, 0, 0, nullptr, 0, ex).ok());
  bad = o.w;
  bad.cols = 0;
  bad.rows = 2;
  y.assign(4, 5.0f);
  EXPECT_TRUE(slm::matmul_w4a8(bad, nullptr, 1, 0, y.data(), 2, ex).ok());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 5.0f);
  if (!slm::isa_supported(isa::avx512, slm::host_cpu())) {
    EXPECT_TRUE(slm_test::fails_with(slm::matmul_w4a8(o.w, x.data(), 1, 512, y.data(), 40, ex, isa::avx512),
                                     errc::unsupported, {"avx512"}));
  }
}

TEST(MatmulW4A8, NanScaleAndNonFiniteActivations) {
  slm::serial_executor ex;
  for (std::size_t n_tok : {1u, 4u, 20u}) {  // 20: the GEMM
    std::vector<std::byte> data(2 * 128, std::byte{0x21}), scales(2 * 16, std::byte{0x38});
    scales[16 + 5] = std::byte{0x7F};  // row 1: NaN block scale
    weight_matrix w;
    w.format = weight_format::nvfp4;
    w.rows = 2;
    w.cols = 256;
    w.data = data.data();
    w.row_stride = 128;
    w.scales = scales.data();
    w.scale_stride = 16;
    std::vector<float> x(n_tok * 256, 1.0f), y(n_tok * 2);
    if (n_tok > 1) x[256 + 3] = INFINITY;  // token 1: a non-finite activation
    for (isa which : available_isas()) {
      ASSERT_TRUE(slm::matmul_w4a8(w, x.data(), n_tok, 256, y.data(), 2, ex, which).ok());
      // Codes 0x21: elements 0.5 and 1.0 -> doubled 1, 2; x = 1 -> q = 127, d = 1/127.
      EXPECT_FLOAT_EQ(y[0], 1.0f * 128 * 1.5f) << slm::to_string(which);
      EXPECT_TRUE(std::isnan(y[1])) << slm::to_string(which);
      if (n_tok > 1) {
        EXPECT_TRUE(std::isnan(y[2])) << slm::to_string(which);
        EXPECT_FLOAT_EQ(y[4], 1.0f * 128 * 1.5f) << slm::to_string(which);
      }
    }
  }
}

}  // namespace
