// matmul with bf16 activations (kernels/avx512_bf16.hpp): nvfp4 / mxfp4 / bf16 weights times
// activations rounded to bf16 once per call.
//
// Error bounds. Let xb_k = bf16(x_k) (detail::a16::to_bf16: RNE, f32 subnormals to zero),
// w_k the exact dequantized weight (decode_scalar), S_b = sum_k |xb_k w_k|,
// S = sum_k |x_k w_k|.
//  * Against the definition (y_b = sum_k xb_k w_k, exact): every product of an E2M1
//    element, an E2M1 x E4M3/E8M0 scale pair or a bf16 weight with a bf16 activation is
//    exact in f32; the kernels then round each term at most K + 10 times (the dot
//    products' adds, the block factor or the global multiplier, the lane reduction; the
//    GEMM's e x s x g differs from fl(e fl(s g)) by two roundings), so
//      |y - y_b| <= gamma_{K+10} S_b + D,
//    D = 2^-126 (K + sum_k |w_k| + sum_k |xb_k|): vdpbf16ps flushes subnormal inputs and
//    results to zero (an mxfp4 weight with scale 2^-127 is subnormal), at most 2^-126
//    each.
//  * Against the exact product with f32 activations: |xb_k - x_k| <= 2^-8 |x_k| (unit
//    roundoff of an 8-bit significand; a flushed subnormal is covered by D), so
//      |y - y_exact| <= 2^-8 S + gamma_{K+10} (1 + 2^-8) S + D.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
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
namespace ab = slm::detail::a16;

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

// Random codes / bf16 values, varied scales, padded odd strides, misaligned.
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
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::byte* base = o.data.data() + misalign;
  for (std::size_t r = 0; r < N; ++r) {
    std::byte* row = base + r * w.row_stride;
    for (std::size_t k = 0; k < slm::row_bytes(f, K); ++k) row[k] = std::byte{static_cast<std::uint8_t>(byte(rng))};
    if (f == weight_format::bf16)
      for (std::size_t k = 0; k < K; ++k) {
        const std::uint16_t v = slm::f32_to_bf16(uni(rng));
        std::memcpy(row + 2 * k, &v, 2);
      }
  }
  w.data = base;
  if (f == weight_format::nvfp4 || f == weight_format::mxfp4) {
    const std::size_t per_row = K / slm::block_size(f);
    const std::size_t sm = misalign == 0 ? 0 : 4 - misalign;
    w.scale_stride = per_row + 1;
    o.scales.assign(sm + N * w.scale_stride + 8, std::byte{0});
    // nvfp4: wide = subnormal .. ~60, else ModelOpt-like 0x30..0x50; mxfp4 2^-9 .. 2^7.
    std::uniform_int_distribution<int> e4(wide_scales ? 0x00 : 0x30, wide_scales ? 0x56 : 0x50), e8(118, 134);
    for (std::size_t r = 0; r < N; ++r)
      for (std::size_t b = 0; b < per_row; ++b)
        o.scales[sm + r * w.scale_stride + b] =
            std::byte{static_cast<std::uint8_t>(f == weight_format::nvfp4 ? e4(rng) : e8(rng))};
    if (f == weight_format::mxfp4 && wide_scales && N * per_row > 0) o.scales[sm] = std::byte{0};  // 2^-127
    w.scales = o.scales.data() + sm;
    w.global = f == weight_format::nvfp4 ? 0.0123f : 1.0f;
  } else {
    w.global = 1.0f;
  }
  return o;
}

// Per (token, row): y_exact, S, y_b, S_b, D (see the file comment).
struct bounds {
  std::vector<double> y, s, yb, sb, d;
};

// The activations' bf16 roundings and sum_k |xb_k| depend on the token only, sum_k |w_k|
// on the row only: each is computed once (the same sums in the same order as per pair;
// under qemu the per-pair version was a third of this file's time).
bounds compute_bounds(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx) {
  const std::size_t N = w.rows, K = w.cols;
  bounds b;
  for (auto* v : {&b.y, &b.s, &b.yb, &b.sb, &b.d}) v->assign(n_tok * N, 0.0);
  std::vector<double> xd(n_tok * K), xbd(n_tok * K), ax(n_tok, 0.0);
  for (std::size_t t = 0; t < n_tok; ++t) {
    for (std::size_t k = 0; k < K; ++k) {
      xd[t * K + k] = x[t * ldx + k];
      xbd[t * K + k] = slm::bf16_to_f32(ab::to_bf16(x[t * ldx + k]));
      ax[t] += std::fabs(xbd[t * K + k]);
    }
  }
  std::vector<float> row(K);
  for (std::size_t n = 0; n < N; ++n) {
    slm::detail::mm::decode_scalar(w, n, 0, K, row.data());
    double aw = 0;
    for (std::size_t k = 0; k < K; ++k) aw += std::fabs(static_cast<double>(row[k]));
    for (std::size_t t = 0; t < n_tok; ++t) {
      const double* xv = xd.data() + t * K;
      const double* xbv = xbd.data() + t * K;
      double y = 0, s = 0, yb = 0, sb = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double wv = row[k];
        y += xv[k] * wv;
        s += std::fabs(xv[k] * wv);
        yb += xbv[k] * wv;
        sb += std::fabs(xbv[k] * wv);
      }
      const std::size_t i = t * N + n;
      b.y[i] = y, b.s[i] = s, b.yb[i] = yb, b.sb[i] = sb;
      b.d[i] = 0x1p-126 * (static_cast<double>(K) + aw + ax[t]);
    }
  }
  return b;
}

slm::status run(int threads, const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, float* y,
                std::size_t ldy, isa which) {
  slm::serial_executor serial;
  if (threads == 1) return slm::matmul(w, x, n_tok, ldx, y, ldy, serial, which, activation_precision::bf16);
  if (threads == 2) return slm::matmul_bf16_activations(w, x, n_tok, ldx, y, ldy, slm_test::the_pools().p2, which);
  return slm::matmul_bf16_activations(w, x, n_tok, ldx, y, ldy, slm_test::the_pools().p3, which);
}

void sweep(weight_format f, std::vector<std::size_t> Ks) {
  std::mt19937 rng(77u + static_cast<unsigned>(f));
  std::size_t cases = 0, accelerated = 0, tiles = 0;
  for (std::size_t N : {1u, 3u, 16u, 17u, 64u, 70u, 131u}) {
    for (std::size_t K : Ks) {
      // 33 and 40 tokens: the GEMM, on AMX tiles where present (K % 32 == 0): two token
      // blocks and a partial one (33), one whole pair and a partial block (40).
      for (std::size_t n_tok : {1u, 2u, 3u, 7u, 33u, 40u}) {
        if (N == 131 && n_tok >= 33 && K > 300) continue;  // keep the sweep quick
        const std::size_t mis = (N + K + n_tok) % 4;
        owned_weight o = make_weight(f, N, K, mis, rng);
        const std::size_t ldx = K + 3, ldy = N + 2;
        std::vector<float> xbuf(1 + n_tok * ldx);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& v : xbuf) v = nd(rng);
        const float* x = xbuf.data() + 1;  // misaligned by one float
        const bounds b = compute_bounds(o.w, x, n_tok, ldx);
        const double g = gamma_n(K + 10), u8 = 0x1p-8;
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
                ASSERT_LE(std::fabs(got - b.yb[i]), g * b.sb[i] + b.d[i] + 1e-35) << "vs definition, t=" << t << " n=" << n;
                ASSERT_LE(std::fabs(got - b.y[i]), u8 * b.s[i] + g * (1 + u8) * b.s[i] + b.d[i] + 1e-35)
                    << "vs f32 activations, t=" << t << " n=" << n;
              }
              for (std::size_t n = N; n < ldy && t * ldy + n < n_tok * ldy; ++n)
                ASSERT_EQ(y[t * ldy + n], -7.0f) << "wrote past N";
            }
            if (threads == 1) {
              first = ybuf;
            } else {
              ASSERT_EQ(std::memcmp(first.data(), ybuf.data(), ybuf.size() * sizeof(float)), 0)
                  << "result depends on the thread count";
            }
            ++cases;
            if (slm::bf16_activations_accelerated(which)) ++accelerated;
            if (slm::amx_bf16_accelerated(which) && n_tok > slm::detail::mm::gemv_max_tokens && K % 32 == 0) ++tiles;
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0u);
  if (slm::bf16_activations_accelerated()) {
    EXPECT_GT(accelerated, 0u);
  }
  if (slm::amx_bf16_accelerated()) {
    EXPECT_GT(tiles, 0u);
  }
}

// The AMX GEMM's own geometry (kernels/amx.hpp): three 256-row panels, the last partial and
// not a whole row block (520 = 2 x 256 + 8), two column panels, the second partial (1088 =
// 1024 + 64), and 65 tokens (two 2 x 2 steps, then a lone block of one token); every thread
// count gives the same bits, and every value is within the bound of the definition.
TEST(MatmulBf16Activations, TilePanels) {
  if (!slm::amx_bf16_accelerated()) GTEST_SKIP() << "no AMX-BF16";
  for (weight_format f : {weight_format::nvfp4, weight_format::bf16}) {
    std::mt19937 rng(5u + static_cast<unsigned>(f));
    const std::size_t N = 520, K = 1088, n_tok = 65, ldx = K + 5, ldy = N + 3;
    owned_weight o = make_weight(f, N, K, 1, rng, false);
    std::vector<float> xbuf(n_tok * ldx);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : xbuf) v = nd(rng);
    const bounds b = compute_bounds(o.w, xbuf.data(), n_tok, ldx);
    const double g = gamma_n(K + 10);
    std::vector<float> first;
    for (int threads : {1, 2, 3}) {
      SCOPED_TRACE(slm::cat(slm::to_string(f), " threads=", threads));
      std::vector<float> y(n_tok * ldy, -7.0f);
      ASSERT_TRUE(run(threads, o.w, xbuf.data(), n_tok, ldx, y.data(), ldy, isa::avx512).ok());
      for (std::size_t t = 0; t < n_tok; ++t) {
        for (std::size_t n = 0; n < N; ++n) {
          const std::size_t i = t * N + n;
          ASSERT_LE(std::fabs(y[t * ldy + n] - b.yb[i]), g * b.sb[i] + b.d[i] + 1e-35) << "t=" << t << " n=" << n;
        }
        for (std::size_t n = N; n < ldy; ++n) ASSERT_EQ(y[t * ldy + n], -7.0f) << "wrote past N";
      }
      if (first.empty()) first = y;
      else ASSERT_EQ(first, y) << "result depends on the thread count";
    }
  }
}

TEST(MatmulBf16Activations, Reports) {
  std::printf("bf16 activations accelerated (AVX-512 BF16): %d\n", static_cast<int>(slm::bf16_activations_accelerated()));
}

// K not a multiple of 128 (the GEMV chunk) or 256 (the GEMM panel), N = 1, odd N, 1..33
// tokens (GEMV, the 6-token tiles and their remainders), bf16 with odd K.
// K = 1056 and 2080: more than one 1024-column AMX panel, the last one partial.
TEST(MatmulBf16Activations, Nvfp4) { sweep(weight_format::nvfp4, {16, 48, 80, 128, 272, 784, 1040, 1056}); }
TEST(MatmulBf16Activations, Mxfp4) { sweep(weight_format::mxfp4, {32, 96, 256, 288, 1056, 2080}); }
TEST(MatmulBf16Activations, Bf16) { sweep(weight_format::bf16, {1, 7, 37, 64, 80, 256, 513, 1040, 1056}); }

// The vectorized rounding is the scalar definition bit for bit: ties, subnormals (to
// zero), the smallest normal, overflow to inf, inf, NaN.
TEST(MatmulBf16Activations, RoundingAgrees) {
  if (!slm::bf16_activations_accelerated()) GTEST_SKIP() << "no AVX-512 BF16";
#ifdef SLM_X86
  std::vector<std::uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807FFFFFu, 0x00800000u, 0x3F808000u,
                                     0x3F818000u, 0x3F808001u, 0x3F7FFFFFu, 0x7F7FFFFFu, 0x7F7F7FFFu, 0xFF7F8000u,
                                     0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0x00FF8000u};
  std::mt19937 rng(11);
  for (int i = 0; i < 4000; ++i) bits.push_back(static_cast<std::uint32_t>(rng()));
  std::vector<float> x(bits.size());
  std::memcpy(x.data(), bits.data(), bits.size() * 4);
  std::vector<std::uint16_t> v(x.size());
  ab::round_row_512(x.data(), x.size(), v.data());
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(v[i], ab::to_bf16(x[i])) << std::hex << bits[i];
  // Subnormals are flushed; everything else is f32_to_bf16.
  EXPECT_EQ(ab::to_bf16(std::numeric_limits<float>::denorm_min()), 0u);
  EXPECT_EQ(ab::to_bf16(-1e-40f), 0x8000u);
  EXPECT_EQ(ab::to_bf16(1.00390625f), slm::f32_to_bf16(1.00390625f));
#endif
}

// A realistic decode GEMV and prefill GEMM: the error figures in kernels/avx512_bf16.hpp's
// comment (printed), and the bound asserted.
TEST(MatmulBf16Activations, ErrorOnRealisticGemv) {
  std::mt19937 rng(2024);
  for (weight_format f : {weight_format::nvfp4, weight_format::mxfp4, weight_format::bf16}) {
    for (std::size_t n_tok : {1u, 8u}) {
      const std::size_t N = 512, K = 4096;
      owned_weight o = make_weight(f, N, K, 0, rng, false);
      std::vector<float> x(n_tok * K);
      std::normal_distribution<float> nd(0.0f, 1.0f);
      for (float& v : x) v = nd(rng);
      for (std::size_t k = 0; k < x.size(); k += 97) x[k] *= 8.0f;  // a few outliers, as in real activations
      const bounds b = compute_bounds(o.w, x.data(), n_tok, K);
      std::vector<float> yb(n_tok * N), y32(n_tok * N);
      ASSERT_TRUE(slm::matmul_bf16_activations(o.w, x.data(), n_tok, K, yb.data(), N, slm_test::the_pools().p2).ok());
      ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, K, y32.data(), N, slm_test::the_pools().p2).ok());
      double max_rel_s = 0, ss_rel_s = 0, ss_err = 0, ss_y = 0, max_ratio = 0, max_rel_s32 = 0;
      const double g = gamma_n(K + 10), u8 = 0x1p-8;
      for (std::size_t i = 0; i < n_tok * N; ++i) {
        const double e = std::fabs(yb[i] - b.y[i]);
        const double bound = u8 * b.s[i] + g * (1 + u8) * b.s[i] + b.d[i];
        EXPECT_LE(e, bound) << i;
        max_rel_s = std::max(max_rel_s, e / b.s[i]);
        ss_rel_s += (e / b.s[i]) * (e / b.s[i]);
        ss_err += e * e;
        ss_y += b.y[i] * b.y[i];
        max_ratio = std::max(max_ratio, e / bound);
        max_rel_s32 = std::max(max_rel_s32, std::fabs(y32[i] - b.y[i]) / b.s[i]);
      }
      std::printf(
          "%s %zux%zu n_tok=%zu bf16-activation error: |err|/sum|xw| max %.3g rms %.3g; rms(err)/rms(y) %.3g; "
          "max err/bound %.3f; (f32 activations: max |err|/sum|xw| %.3g)\n",
          std::string(slm::to_string(f)).c_str(), N, K, n_tok, max_rel_s,
          std::sqrt(ss_rel_s / static_cast<double>(n_tok * N)), std::sqrt(ss_err / ss_y), max_ratio, max_rel_s32);
      EXPECT_LT(std::sqrt(ss_err / ss_y), 0.01);  // loose sanity; the bound above is the real assertion
    }
  }
}

TEST(MatmulBf16Activations, SelectionAndFallback) {
  std::mt19937 rng(3);
  slm::serial_executor ex;
  // Formats without bf16 kernels run matmul() exactly; f32 activations are matmul().
  for (weight_format f : {weight_format::nvfp4, weight_format::bf16}) {
    owned_weight o = make_weight(f, 40, 512, 1, rng);
    std::vector<float> x(3 * 512);
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(rng);
    for (std::size_t n_tok : {1u, 3u}) {
      std::vector<float> a(n_tok * 40), b(n_tok * 40), c(n_tok * 40), d(n_tok * 40);
      ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 512, a.data(), 40, ex).ok());
      ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 512, b.data(), 40, ex, isa::best, activation_precision::f32).ok());
      ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 512, c.data(), 40, ex, isa::best, activation_precision::bf16).ok());
      ASSERT_TRUE(slm::matmul_bf16_activations(o.w, x.data(), n_tok, 512, d.data(), 40, ex).ok());
      EXPECT_EQ(a, b);
      EXPECT_NE(a, c);  // bf16 activations do change the result
      EXPECT_EQ(c, d);
      // Without the vdpbf16ps kernels: exactly matmul() on the rounded activations.
      for (isa which : available_isas()) {
        if (slm::bf16_activations_accelerated(which)) continue;
        std::vector<float> xr(x.size()), e(n_tok * 40), e2(n_tok * 40);
        for (std::size_t i = 0; i < x.size(); ++i) xr[i] = slm::bf16_to_f32(ab::to_bf16(x[i]));
        ASSERT_TRUE(slm::matmul_bf16_activations(o.w, x.data(), n_tok, 512, e.data(), 40, ex, which).ok());
        ASSERT_TRUE(slm::matmul(o.w, xr.data(), n_tok, 512, e2.data(), 40, ex, which).ok());
        EXPECT_EQ(e, e2) << slm::to_string(which);
      }
    }
  }
  std::vector<float> wf(4 * 64, 0.25f), x(64, 0.3f), y(4), y2(4);
  weight_matrix f32w;
  f32w.format = weight_format::f32;
  f32w.rows = 4;
  f32w.cols = 64;
  f32w.data = reinterpret_cast<const std::byte*>(wf.data());
  f32w.row_stride = 256;
  ASSERT_TRUE(slm::matmul_bf16_activations(f32w, x.data(), 1, 64, y.data(), 4, ex).ok());
  ASSERT_TRUE(slm::matmul(f32w, x.data(), 1, 64, y2.data(), 4, ex).ok());
  EXPECT_EQ(y, y2);
  // Validation and degenerate shapes behave as matmul().
  using slm::errc;
  owned_weight o = make_weight(weight_format::nvfp4, 40, 512, 1, rng);
  y.assign(40, 0.0f);
  EXPECT_TRUE(slm_test::fails_with(slm::matmul_bf16_activations(o.w, nullptr, 1, 512, y.data(), 40, ex),
                                   errc::invalid_argument, {"x is null"}));
  weight_matrix bad = o.w;
  bad.cols = 40;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul_bf16_activations(bad, x.data(), 1, 512, y.data(), 40, ex),
                                   errc::invalid_argument, {"multiple of 16"}));
  EXPECT_TRUE(slm::matmul_bf16_activations(o.w, nullptr, 0, 0, nullptr, 0, ex).ok());
  bad = o.w;
  bad.cols = 0;
  bad.rows = 2;
  y.assign(4, 5.0f);
  EXPECT_TRUE(slm::matmul_bf16_activations(bad, nullptr, 1, 0, y.data(), 2, ex).ok());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(y[2], 5.0f);
  if (!slm::isa_supported(isa::avx512, slm::host_cpu())) {
    EXPECT_TRUE(slm_test::fails_with(slm::matmul_bf16_activations(o.w, x.data(), 1, 512, y.data(), 40, ex, isa::avx512),
                                     errc::unsupported, {"avx512"}));
  }
}

TEST(MatmulBf16Activations, NegativeZeroNanScaleAndNonFiniteActivations) {
  slm::serial_executor ex;
  for (std::size_t n_tok : {1u, 4u, 20u}) {  // 20: the GEMM, on AMX tiles where present
    // Codes 0x88 (-0, -0) in row 0; row 1 has a NaN block scale (0x7F).
    std::vector<std::byte> data(2 * 128, std::byte{0x88}), scales(2 * 16, std::byte{0x38});
    for (std::size_t i = 128; i < 256; ++i) data[i] = std::byte{0x21};
    scales[16 + 5] = std::byte{0x7F};
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
      ASSERT_TRUE(slm::matmul_bf16_activations(w, x.data(), n_tok, 256, y.data(), 2, ex, which).ok());
      EXPECT_EQ(y[0], 0.0f) << slm::to_string(which);
      EXPECT_TRUE(std::isnan(y[1])) << slm::to_string(which);
      if (n_tok > 1) {
        EXPECT_TRUE(std::isnan(y[2])) << slm::to_string(which);  // inf x (-0) = NaN
      }
    }
  }
}

}  // namespace
