// matmul: every format x every instruction set this CPU has x thread counts, against an
// exact (double) evaluation of the same dequantized weights; thread-count independence
// bit for bit; the NVFP4 golden GEMV vectors; argument validation.
//
// Tolerance. Every kernel computes y = sum_k x_k * w_k where w_k = element * factor is
// the dequantized weight (or, fused, f_b * sum_{k in b} x_k * element_k). In any
// evaluation order each term x_k * w_k passes through at most m = K + 10 roundings
// (two products, then a summation tree of depth <= K plus a few extra adds for lane
// reduction and tails), so by the standard bound (Higham, Accuracy and Stability of
// Numerical Algorithms, 3.1 / 4.2) the computed value differs from the exact one by at
// most gamma_m * S with gamma_m = m u / (1 - m u), u = 2^-24, S = sum_k |x_k * w_k|.
// That is the assertion below against the double-precision value; it holds for the
// reference and every SIMD kernel alike, whatever their summation order. A tiny
// absolute term covers products that underflow (E8M0 scale 2^-127).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "slm/core/cpu.hpp"
#include "slm/kernels/kernel_bench.hpp"
#include "slm/kernels/matmul.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

namespace {

using slm::isa;
using slm::weight_format;
using slm::weight_matrix;

std::vector<isa> available_isas() {
  std::vector<isa> out;
  for (isa i : {isa::scalar, isa::avx2, isa::avx512, isa::neon})
    if (slm::isa_supported(i, slm::host_cpu())) out.push_back(i);
  return out;
}

double gamma_bound(std::size_t K) {
  const double u = std::ldexp(1.0, -24);
  const double m = static_cast<double>(K + 10);
  return m * u / (1.0 - m * u);
}

// A weight matrix with its own storage, placed at a byte offset (misalignment) and with
// padded strides.
struct owned_weight {
  std::vector<std::byte> data, scales;
  weight_matrix w;
};

owned_weight make_weight(weight_format f, std::size_t N, std::size_t K, std::size_t misalign, std::mt19937& rng) {
  owned_weight o;
  weight_matrix& w = o.w;
  w.format = f;
  w.rows = N;
  w.cols = K;
  w.row_stride = slm::row_bytes(f, K) + 3 + misalign;  // padded, odd
  o.data.assign(misalign + N * w.row_stride + 64, std::byte{0});
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::uniform_int_distribution<int> byte(0, 255);
  std::byte* base = o.data.data() + misalign;
  for (std::size_t r = 0; r < N; ++r) {
    std::byte* row = base + r * w.row_stride;
    for (std::size_t k = 0; k < slm::row_bytes(f, K); ++k) {
      std::uint8_t b = static_cast<std::uint8_t>(byte(rng));
      row[k] = std::byte{b};
    }
    for (std::size_t k = 0; k < K; ++k) {
      switch (f) {
        case weight_format::f32: {
          const float v = uni(rng);
          std::memcpy(row + 4 * k, &v, 4);
          break;
        }
        case weight_format::bf16: {
          const std::uint16_t v = slm::f32_to_bf16(uni(rng));
          std::memcpy(row + 2 * k, &v, 2);
          break;
        }
        case weight_format::f16: {
          const std::uint16_t v = slm::f32_to_f16(uni(rng));
          std::memcpy(row + 2 * k, &v, 2);
          break;
        }
        case weight_format::fp8_e4m3: {
          std::uint8_t c = static_cast<std::uint8_t>(row[k]);
          if ((c & 0x7F) == 0x7F) c = static_cast<std::uint8_t>(c ^ 0x40);  // no NaN weights
          row[k] = std::byte{c};
          break;
        }
        default: break;  // fp4: random bytes are valid codes (both zeros included)
      }
    }
  }
  w.data = base;
  w.global = 1.0f;
  const std::size_t sm = misalign == 0 ? 0 : 4 - misalign;  // scales misaligned differently
  if (f == weight_format::nvfp4 || f == weight_format::mxfp4) {
    const std::size_t per_row = K / slm::block_size(f);
    w.scale_stride = per_row + 1;
    o.scales.assign(sm + N * w.scale_stride + 8, std::byte{0});
    std::uniform_int_distribution<int> e4(0x00, 0x56), e8(118, 134);  // subnormal..~60; 2^-9..2^7
    for (std::size_t r = 0; r < N; ++r)
      for (std::size_t b = 0; b < per_row; ++b)
        o.scales[sm + r * w.scale_stride + b] =
            std::byte{static_cast<std::uint8_t>(f == weight_format::nvfp4 ? e4(rng) : e8(rng))};
    if (f == weight_format::mxfp4 && N * per_row > 0) o.scales[sm] = std::byte{0};  // 2^-127
    w.scales = o.scales.data() + sm;
    w.global = f == weight_format::nvfp4 ? 0.0123f : 1.0f;
  }
  if (f == weight_format::fp8_e4m3) {
    w.global = 0.75f;
    if (K % 3 != 1) {  // block-scaled variant for most shapes; per-tensor for the rest
      w.scale_block_rows = 5;
      w.scale_block_cols = 32;
      const std::size_t sr = (N + 4) / 5, sc = (K + 31) / 32;
      w.scale_stride = 4 * sc + 2;
      o.scales.assign(sm + sr * w.scale_stride + 8, std::byte{0});
      std::uniform_real_distribution<float> s(0.01f, 2.0f);
      for (std::size_t i = 0; i < sr; ++i)
        for (std::size_t j = 0; j < sc; ++j) {
          const float v = s(rng);
          std::memcpy(o.scales.data() + sm + i * w.scale_stride + 4 * j, &v, 4);
        }
      w.scales = o.scales.data() + sm;
    }
  }
  return o;
}

// Exact y and S = sum |x w| in double, from the reference dequantization.
void exact(const weight_matrix& w, const float* x, std::size_t n_tok, std::size_t ldx, std::vector<double>& y,
           std::vector<double>& s) {
  const std::size_t N = w.rows, K = w.cols;
  y.assign(n_tok * N, 0.0);
  s.assign(n_tok * N, 0.0);
  std::vector<float> row(K);
  for (std::size_t n = 0; n < N; ++n) {
    slm::detail::mm::decode_scalar(w, n, 0, K, row.data());
    for (std::size_t t = 0; t < n_tok; ++t) {
      double a = 0, b = 0;
      for (std::size_t k = 0; k < K; ++k) {
        const double p = static_cast<double>(x[t * ldx + k]) * static_cast<double>(row[k]);
        a += p;
        b += std::fabs(p);
      }
      y[t * N + n] = a;
      s[t * N + n] = b;
    }
  }
}


void sweep(weight_format f, std::vector<std::size_t> Ks) {
  std::mt19937 rng(1234u + static_cast<unsigned>(f));
  slm::serial_executor serial;
  const auto isas = available_isas();
  std::size_t cases = 0;
  for (std::size_t N : {1u, 3u, 16u, 17u, 64u}) {
    for (std::size_t K : Ks) {
      for (std::size_t n_tok : {1u, 2u, 7u, 33u}) {
        const std::size_t mis = (N + K + n_tok) % 4;  // 0..3 bytes
        owned_weight o = make_weight(f, N, K, mis, rng);
        const std::size_t ldx = K + 3, ldy = N + 2;
        std::vector<float> xbuf(1 + n_tok * ldx);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& v : xbuf) v = nd(rng);
        const float* x = xbuf.data() + 1;  // misaligned by one float
        std::vector<double> ye, se;
        exact(o.w, x, n_tok, ldx, ye, se);
        const double g = gamma_bound(K);
        for (isa which : isas) {
          std::vector<float> first;
          for (int threads : {1, 2, 3}) {
            SCOPED_TRACE(slm::cat(slm::to_string(f), " N=", N, " K=", K, " n_tok=", n_tok, " misalign=", mis,
                                  " isa=", slm::to_string(which), " threads=", threads));
            std::vector<float> ybuf(n_tok * ldy + 1, -7.0f);
            float* y = ybuf.data() + 1;
            slm::status st;
            if (threads == 1) st = slm::matmul(o.w, x, n_tok, ldx, y, ldy, serial, which);
            else if (threads == 2) st = slm::matmul(o.w, x, n_tok, ldx, y, ldy, slm_test::the_pools().p2, which);
            else st = slm::matmul(o.w, x, n_tok, ldx, y, ldy, slm_test::the_pools().p3, which);
            ASSERT_TRUE(st.ok()) << st.message();
            EXPECT_EQ(ybuf[0], -7.0f);
            for (std::size_t t = 0; t < n_tok; ++t) {
              for (std::size_t n = 0; n < N; ++n) {
                const double got = y[t * ldy + n], want = ye[t * N + n];
                ASSERT_LE(std::fabs(got - want), g * se[t * N + n] + 1e-35) << "t=" << t << " n=" << n;
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
          }
        }
      }
    }
  }
  EXPECT_GT(cases, 0u);
}

TEST(Matmul, ReportsIsas) {
  std::string s;
  for (isa i : available_isas()) s += slm::cat(slm::to_string(i), " ");
  std::printf("isas: %s(default %s)\n", s.c_str(), std::string(slm::to_string(slm::default_isa())).c_str());
  EXPECT_TRUE(slm::isa_supported(isa::scalar, slm::host_cpu()));
#if defined(__aarch64__)
  // NEON is mandatory in AArch64; the x86 families are not there.
  EXPECT_TRUE(slm::isa_supported(isa::neon, slm::host_cpu()));
  EXPECT_FALSE(slm::isa_supported(isa::avx2, slm::host_cpu()));
  EXPECT_EQ(slm::best_isa(slm::host_cpu()), isa::neon);
#else
  EXPECT_FALSE(slm::isa_supported(isa::neon, slm::host_cpu()));
#endif
  EXPECT_EQ(slm::isa_from_string("neon"), isa::neon);
  EXPECT_EQ(slm::to_string(isa::neon), "neon");
  // SLM_ISA (read once) caps the default at a family this CPU has.
  if (const char* env = std::getenv("SLM_ISA")) {
    const isa want = slm::isa_from_string(env);
    if (want != isa::best && slm::isa_supported(want, slm::host_cpu()) &&
        static_cast<int>(want) <= static_cast<int>(slm::best_isa(slm::host_cpu()))) {
      EXPECT_EQ(slm::default_isa(), want) << env;
    }
  }
}

// The kernel table (kernels/table.hpp): every (format, activation precision, isa) of this
// CPU has a row with a GEMM, the row named in the table's comment; a GEMV exists for one or
// two tokens exactly where the isa has a fused kernel for the format.
TEST(KernelTable, EveryKeyHasTheDocumentedRow) {
  using slm::activation_precision;
  namespace mm = slm::detail::mm;
  const weight_format formats[] = {weight_format::f32, weight_format::bf16, weight_format::f16,
                                   weight_format::fp8_e4m3, weight_format::nvfp4, weight_format::mxfp4};
  std::size_t rows = 0;
  for (isa which : available_isas()) {
    for (weight_format f : formats) {
      const bool fp4 = f == weight_format::nvfp4 || f == weight_format::mxfp4;
      const mm::kernel_row f32 = mm::find_kernels(f, activation_precision::f32, which);
      const std::string_view isa_row = which == isa::scalar ? "reference" : slm::to_string(which);
      EXPECT_EQ(f32.name, isa_row) << slm::to_string(f);
      EXPECT_FALSE(f32.round_bf16);
      ASSERT_NE(f32.gemm, nullptr);
      // Fused GEMV: every format but fp8 on x86, every format on NEON, none for the reference.
      const bool fused = which == isa::neon || ((which == isa::avx2 || which == isa::avx512) && f != weight_format::fp8_e4m3);
      EXPECT_EQ(f32.gemv[1] != nullptr, fused) << slm::to_string(f) << " " << slm::to_string(which);
      for (std::size_t r = 1; r <= mm::gemv_rows && fused; ++r) EXPECT_NE(f32.gemv[r], nullptr);

      const mm::kernel_row i8 = mm::find_kernels(f, activation_precision::int8, which);
      ASSERT_NE(i8.gemm, nullptr);
      if (!fp4) EXPECT_EQ(i8.name, f32.name);
      else EXPECT_EQ(i8.name, slm::amx_int8_accelerated(which) ? "amx_int8"
                              : slm::w4a8_vnni(which)            ? "avx512_vnni"
                              : slm::w4a8_accelerated(which)     ? "avx2_int8"
                                                                 : "w4a8_reference");
      if (fp4) EXPECT_NE(i8.gemm_prepare, nullptr);  // the quantization

      const mm::kernel_row b16 = mm::find_kernels(f, activation_precision::bf16, which);
      ASSERT_NE(b16.gemm, nullptr);
      const bool has_bf16 = fp4 || f == weight_format::bf16;
      if (has_bf16 && slm::bf16_activations_accelerated(which)) {
        // The vdpbf16ps row, its GEMM on AMX tiles where this CPU and process allow them.
        EXPECT_EQ(b16.name, slm::amx_bf16_accelerated(which) ? "amx_bf16" : "avx512_bf16");
        EXPECT_NE(b16.gemm_prepare, nullptr);
        EXPECT_NE(b16.gemv[1], nullptr);
      } else {
        EXPECT_EQ(b16.name, f32.name);
        EXPECT_EQ(b16.round_bf16, has_bf16) << slm::to_string(f);  // the definition on f32 kernels
      }
      rows += 3;
    }
  }
  EXPECT_GE(rows, 18u);
  // The one default: packed 4-bit weights at the chosen precision, every other format exact.
  static_assert(slm::default_activations(weight_format::nvfp4) == activation_precision::bf16);
  static_assert(slm::default_activations(weight_format::mxfp4, activation_precision::int8) ==
                activation_precision::int8);
  static_assert(slm::default_activations(weight_format::bf16, activation_precision::int8) == activation_precision::f32);
  // bf16 weights at the dense choice: bf16 when asked, f32 otherwise (int8 has no kernels there).
  static_assert(slm::default_activations(weight_format::bf16, activation_precision::f32, activation_precision::bf16) ==
                activation_precision::bf16);
  static_assert(slm::default_activations(weight_format::bf16, activation_precision::bf16, activation_precision::int8) ==
                activation_precision::f32);
  static_assert(slm::default_activations(weight_format::f16, activation_precision::bf16, activation_precision::bf16) ==
                activation_precision::f32);
  static_assert(slm::default_activations(weight_format::nvfp4, activation_precision::f32, activation_precision::bf16) ==
                activation_precision::f32);
}

TEST(Matmul, F32) { sweep(weight_format::f32, {1, 16, 37, 48, 80, 256, 1040}); }
TEST(Matmul, Bf16) { sweep(weight_format::bf16, {1, 16, 37, 48, 80, 256, 1040}); }
TEST(Matmul, F16) { sweep(weight_format::f16, {5, 16, 48, 80, 256, 1040}); }
TEST(Matmul, Fp8) { sweep(weight_format::fp8_e4m3, {7, 16, 48, 80, 256, 1040}); }
TEST(Matmul, Nvfp4) { sweep(weight_format::nvfp4, {16, 48, 80, 256, 1040}); }
TEST(Matmul, Mxfp4) { sweep(weight_format::mxfp4, {32, 96, 256, 1056}); }

// A larger GEMM, so each thread owns several panels and token tiles and K spans several
// column blocks; results bit-identical for 1, 2 and 3 threads.
TEST(Matmul, ThreadCountIndependenceLarge) {
  std::mt19937 rng(7);
  slm::serial_executor serial;
  for (weight_format f : {weight_format::nvfp4, weight_format::bf16}) {
    owned_weight o = make_weight(f, 200, 608, 1, rng);
    for (std::size_t n_tok : {1u, 40u}) {
      std::vector<float> x(n_tok * 608);
      std::normal_distribution<float> nd;
      for (float& v : x) v = nd(rng);
      for (isa which : available_isas()) {
        std::vector<float> y1(n_tok * 200), y2(n_tok * 200), y3(n_tok * 200);
        ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 608, y1.data(), 200, serial, which).ok());
        ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 608, y2.data(), 200, slm_test::the_pools().p2, which).ok());
        ASSERT_TRUE(slm::matmul(o.w, x.data(), n_tok, 608, y3.data(), 200, slm_test::the_pools().p3, which).ok());
        EXPECT_EQ(std::memcmp(y1.data(), y2.data(), y1.size() * 4), 0) << slm::to_string(which);
        EXPECT_EQ(std::memcmp(y1.data(), y3.data(), y1.size() * 4), 0) << slm::to_string(which);
      }
    }
  }
}

// Runs tasks inline but claims `n` threads, so the GEMVs cut their rows for n threads
// (balanced_chunks: 4 chunks per thread) without needing n real threads.
struct claims_threads {
  std::size_t n = 1;
  std::size_t concurrency() const noexcept { return n; }
  void run(std::size_t n_tasks, slm::task_ref fn) const noexcept {
    for (std::size_t i = 0; i < n_tasks; ++i) fn(i);
  }
};

// Issue 18: decode's GEMVs are cut into several chunks per thread so a slow or
// descheduled worker holds back little; every row is still computed whole by one task,
// so all three activation precisions stay bit-identical for 1..8 threads (4..32
// chunks; 520 rows = 17 row units, so the chunks are uneven) and on a real 4-thread pool.
TEST(Matmul, GemvBitIdenticalForAnyChunkCount) {
  std::mt19937 rng(11);
  slm::serial_executor serial;
  auto pool4 = slm::thread_pool::create(4);
  ASSERT_TRUE(pool4.ok());
  constexpr std::size_t N = 520, K = 256;
  for (weight_format f : {weight_format::nvfp4, weight_format::bf16, weight_format::f32}) {
    owned_weight o = make_weight(f, N, K, 0, rng);
    for (std::size_t n_tok : {1u, 2u}) {
      std::vector<float> x(n_tok * K);
      std::normal_distribution<float> nd;
      for (float& v : x) v = nd(rng);
      for (auto prec : {slm::activation_precision::f32, slm::activation_precision::bf16,
                        slm::activation_precision::int8}) {
        std::vector<float> want(n_tok * N), got(n_tok * N);
        const slm::status st0 = slm::matmul(o.w, x.data(), n_tok, K, want.data(), N, serial, isa::best, prec);
        if (!st0.ok()) continue;  // this precision is not offered for this format here
        for (std::size_t threads = 2; threads <= 9; ++threads) {
          std::fill(got.begin(), got.end(), -1.0f);
          claims_threads inline_n{threads};
          const slm::status st = threads == 9
                                     ? slm::matmul(o.w, x.data(), n_tok, K, got.data(), N, *pool4, isa::best, prec)
                                     : slm::matmul(o.w, x.data(), n_tok, K, got.data(), N, inline_n, isa::best, prec);
          ASSERT_TRUE(st.ok()) << st.message();
          EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(float)), 0)
              << slm::to_string(f) << " n_tok " << n_tok << " precision " << static_cast<int>(prec)
              << (threads == 9 ? std::string(" 4-thread pool") : " claiming " + std::to_string(threads) + " threads");
        }
      }
    }
  }
}

// kernels/matmul.hpp: a row of one token is computed exactly as a call with several
// tokens computes it (a speculative verification over k + 1 positions reproduces k + 1
// decode steps). One token runs a kernel's per-task entry (the AVX-512 VNNI one reads
// four streams of rows), several run its row blocks; tails of 1-3 rows, a trailing
// segment (K = 1040) and uneven chunks (claiming 3 threads) included.
TEST(Matmul, GemvOneTokenEqualsSeveral) {
  std::mt19937 rng(12);
  claims_threads three{3};
  for (weight_format f : {weight_format::nvfp4, weight_format::mxfp4, weight_format::bf16}) {
    for (std::size_t N : {5u, 39u, 130u, 520u}) {
      for (std::size_t K : {256u, 1056u}) {
        owned_weight o = make_weight(f, N, K, 0, rng);
        constexpr std::size_t T = 3;
        std::vector<float> x(T * K);
        std::normal_distribution<float> nd;
        for (float& v : x) v = nd(rng);
        for (auto prec : {slm::activation_precision::f32, slm::activation_precision::bf16,
                          slm::activation_precision::int8}) {
          for (isa which : available_isas()) {
            std::vector<float> all(T * N), one(N);
            if (!slm::matmul(o.w, x.data(), T, K, all.data(), N, three, which, prec).ok()) continue;  // not offered
            for (std::size_t t = 0; t < T; ++t) {
              ASSERT_TRUE(slm::matmul(o.w, x.data() + t * K, 1, K, one.data(), N, three, which, prec).ok());
              EXPECT_EQ(std::memcmp(one.data(), all.data() + t * N, N * sizeof(float)), 0)
                  << slm::to_string(f) << " N=" << N << " K=" << K << " precision " << static_cast<int>(prec)
                  << " isa " << slm::to_string(which) << " token " << t;
            }
          }
        }
      }
    }
  }
}

// ModelOpt NVFP4 vectors: y = dequantized @ x computed in float64 by the oracle. Our GEMV
// must be within gamma_{K+10} * sum_k |x_k w_k| of it (the tolerance argument above;
// the oracle's dequantized weights are ours bit for bit, see test_golden).
TEST(Matmul, Nvfp4GoldenGemv) {
  namespace st = slm::safetensors;
  auto f = st::file::open(slm_test::test_data("golden/nvfp4/nvfp4_shared.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message();
  slm::serial_executor serial;
  for (const char* c : {"m0", "m1", "m2", "ties"}) {
    const std::string name = c;
    auto wt = f->tensor(name + ".weight");
    auto sc = f->tensor(name + ".weight_scale");
    auto deq = f->tensor(name + ".dequantized");
    auto xt = f->tensor(name + ".x");
    auto yt = f->tensor(name + ".y");
    ASSERT_TRUE(wt.ok() && sc.ok() && deq.ok() && xt.ok() && yt.ok()) << name;
    const std::size_t N = static_cast<std::size_t>(deq->dim(0)), K = static_cast<std::size_t>(deq->dim(1));
    float g = 0;
    ASSERT_TRUE(f->tensor(name + ".weight_scale_2")->to_f32(std::span(&g, 1)).ok());
    std::vector<float> x(K), want(N), dq(N * K);
    ASSERT_TRUE(xt->to_f32(x).ok());
    ASSERT_TRUE(yt->to_f32(want).ok());
    ASSERT_TRUE(deq->to_f32(dq).ok());
    weight_matrix w;
    w.format = weight_format::nvfp4;
    w.rows = N;
    w.cols = K;
    w.data = wt->data();
    w.row_stride = K / 2;
    w.scales = sc->data();
    w.scale_stride = K / 16;
    w.global = g;
    for (isa which : available_isas()) {
      for (int threads : {1, 2}) {
        std::vector<float> y(N);
        const slm::status s = threads == 1 ? slm::matmul(w, x.data(), 1, K, y.data(), N, serial, which)
                                           : slm::matmul(w, x.data(), 1, K, y.data(), N, slm_test::the_pools().p2, which);
        ASSERT_TRUE(s.ok()) << s.message();
        for (std::size_t n = 0; n < N; ++n) {
          double S = 0;
          bool nan = false;
          for (std::size_t k = 0; k < K; ++k) {
            nan |= std::isnan(dq[n * K + k]);
            S += std::fabs(static_cast<double>(x[k]) * dq[n * K + k]);
          }
          if (nan || std::isnan(want[n])) {
            EXPECT_TRUE(std::isnan(y[n]) || !std::isnan(want[n])) << name << " row " << n;
            continue;
          }
          // The float64 y was stored as f32: allow its own rounding too.
          const double tol = gamma_bound(K) * S + std::fabs(static_cast<double>(want[n])) * 0x1p-24 + 1e-35;
          EXPECT_LE(std::fabs(static_cast<double>(y[n]) - want[n]), tol)
              << name << " row " << n << " isa " << slm::to_string(which);
        }
      }
    }
  }
}

TEST(Matmul, ValidatesArguments) {
  slm::serial_executor ex;
  std::vector<std::byte> data(64 * 8), scales(64);
  std::vector<float> x(64), y(8);
  weight_matrix w;
  w.format = weight_format::nvfp4;
  w.rows = 4;
  w.cols = 64;
  w.data = data.data();
  w.row_stride = 32;
  w.scales = scales.data();
  w.scale_stride = 4;
  using slm::errc;
  EXPECT_TRUE(slm::matmul(w, x.data(), 1, 64, y.data(), 4, ex).ok());
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(w, nullptr, 1, 64, y.data(), 4, ex), errc::invalid_argument, {"x is null"}));
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(w, x.data(), 1, 64, nullptr, 4, ex), errc::invalid_argument, {"y is null"}));
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(w, x.data(), 2, 63, y.data(), 4, ex), errc::invalid_argument, {"ldx 63", "K 64"}));
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(w, x.data(), 2, 64, y.data(), 3, ex), errc::invalid_argument, {"ldy 3"}));
  weight_matrix bad = w;
  bad.cols = 40;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(bad, x.data(), 1, 64, y.data(), 4, ex), errc::invalid_argument, {"multiple of 16"}));
  bad = w;
  bad.scales = nullptr;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(bad, x.data(), 1, 64, y.data(), 4, ex), errc::invalid_argument, {"scales"}));
  bad = w;
  bad.row_stride = 31;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(bad, x.data(), 1, 64, y.data(), 4, ex), errc::invalid_argument, {"row_stride 31"}));
  bad = w;
  bad.data = nullptr;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(bad, x.data(), 1, 64, y.data(), 4, ex), errc::invalid_argument, {"no data"}));
  bad = w;
  bad.format = weight_format::mxfp4;
  bad.cols = 48;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(bad, x.data(), 1, 64, y.data(), 4, ex), errc::invalid_argument, {"multiple of 32"}));
  bad = w;
  bad.format = weight_format::fp8_e4m3;
  bad.row_stride = 64;
  bad.scale_block_cols = 128;
  bad.scale_block_rows = 0;
  EXPECT_TRUE(slm_test::fails_with(slm::matmul(bad, x.data(), 1, 64, y.data(), 4, ex), errc::invalid_argument, {"scale_block_rows"}));
  // Nothing to do: fine, even with null pointers.
  EXPECT_TRUE(slm::matmul(w, nullptr, 0, 0, nullptr, 0, ex).ok());
  // K = 0: y is zeroed.
  bad = w;
  bad.cols = 0;
  y.assign(8, 5.0f);
  EXPECT_TRUE(slm::matmul(bad, nullptr, 1, 0, y.data(), 4, ex).ok());
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(y[4], 5.0f);
  if (!slm::isa_supported(isa::avx512, slm::host_cpu())) {
    EXPECT_TRUE(slm_test::fails_with(slm::matmul(w, x.data(), 1, 64, y.data(), 4, ex, isa::avx512), errc::unsupported, {"avx512"}));
  }
  if (!slm::isa_supported(isa::neon, slm::host_cpu())) {
    EXPECT_TRUE(slm_test::fails_with(slm::matmul(w, x.data(), 1, 64, y.data(), 4, ex, isa::neon), errc::unsupported, {"neon"}));
  }
}

TEST(Matmul, NegativeZeroAndNanScale) {
  // Code 0x8 (-0) decodes to zero; a NaN block scale (0x7F) makes the row NaN on every path.
  slm::serial_executor ex;
  std::vector<std::byte> data(2 * 16, std::byte{0x88}), scales(4, std::byte{0x38});
  scales[2] = std::byte{0x7F};
  weight_matrix w;
  w.format = weight_format::nvfp4;
  w.rows = 2;
  w.cols = 32;
  w.data = data.data();
  w.row_stride = 16;
  w.scales = scales.data();
  w.scale_stride = 2;
  std::vector<float> x(32, 1.0f), y(2);
  for (isa which : available_isas()) {
    ASSERT_TRUE(slm::matmul(w, x.data(), 1, 32, y.data(), 2, ex, which).ok());
    EXPECT_EQ(y[0], 0.0f) << slm::to_string(which);
    EXPECT_TRUE(std::isnan(y[1])) << slm::to_string(which);
  }
}

// E4M3 NaN codes (0x7F, 0xFF) make their row NaN on every path, inside the vector part
// of a row and in its tail; the largest finite code (0x7E = 448) stays finite.
TEST(Matmul, Fp8NanCodes) {
  slm::serial_executor ex;
  constexpr std::size_t N = 3, K = 40;  // 32 columns in vectors, 8 in the tail
  std::vector<std::byte> data(N * K, std::byte{0x38});  // 1.0
  data[0 * K + 5] = std::byte{0x7F};
  data[1 * K + 35] = std::byte{0xFF};
  data[2 * K + 7] = std::byte{0x7E};
  weight_matrix w;
  w.format = weight_format::fp8_e4m3;
  w.rows = N;
  w.cols = K;
  w.data = data.data();
  w.row_stride = K;
  w.global = 0.5f;
  std::vector<float> x(3 * K, 1.0f), y(3 * N);
  for (isa which : available_isas()) {
    for (std::size_t n_tok : {1u, 3u}) {
      ASSERT_TRUE(slm::matmul(w, x.data(), n_tok, K, y.data(), N, ex, which).ok());
      for (std::size_t t = 0; t < n_tok; ++t) {
        EXPECT_TRUE(std::isnan(y[t * N + 0])) << slm::to_string(which) << " n_tok=" << n_tok;
        EXPECT_TRUE(std::isnan(y[t * N + 1])) << slm::to_string(which) << " n_tok=" << n_tok;
        EXPECT_EQ(y[t * N + 2], 0.5f * (39.0f + 448.0f)) << slm::to_string(which) << " n_tok=" << n_tok;
      }
    }
  }
}

}  // namespace

// kernel_bench_cases (slm/kernels/kernel_bench.hpp): every variant on every shape at every
// token count, in print order; --quick's one shape and two counts; --only's labels.
TEST(KernelBench, CasesInPrintOrder) {
  const std::vector<slm::kernel_case> all = slm::kernel_bench_cases();
  ASSERT_EQ(all.size(), 9u * 4 * 4);
  EXPECT_EQ(all.front().label, "nvfp4");
  EXPECT_EQ(all.front().format, weight_format::nvfp4);
  EXPECT_EQ(all.front().act, slm::activation_precision::f32);
  EXPECT_EQ(all.front().n, 4096u);
  EXPECT_EQ(all.front().k, 4096u);
  EXPECT_EQ(all.front().n_tok, 1u);
  EXPECT_EQ(all[1].n_tok, 16u);
  EXPECT_EQ(all[4].k, 14336u);  // the second shape after the four token counts
  EXPECT_EQ(all.back().label, "bf16_bf16act");
  EXPECT_EQ(all.back().act, slm::activation_precision::bf16);
  EXPECT_EQ(all.back().n, 2048u);
  EXPECT_EQ(all.back().n_tok, 512u);
  const auto w4a8 = std::find_if(all.begin(), all.end(), [](const slm::kernel_case& c) { return c.label == "mxfp4_w4a8"; });
  ASSERT_NE(w4a8, all.end());
  EXPECT_EQ(w4a8->format, weight_format::mxfp4);
  EXPECT_EQ(w4a8->act, slm::activation_precision::int8);

  const std::vector<slm::kernel_case> quick = slm::kernel_bench_cases(true);
  ASSERT_EQ(quick.size(), 9u * 2);
  for (const auto& c : quick) {
    EXPECT_EQ(c.n, 2048u);
    EXPECT_EQ(c.k, 8192u);
    EXPECT_LE(c.n_tok, 16u);
  }
  const std::vector<slm::kernel_case> only = slm::kernel_bench_cases(true, "f32,nvfp4_bf16act");
  ASSERT_EQ(only.size(), 4u);
  EXPECT_EQ(only[0].label, "f32");  // print order, not the order asked
  EXPECT_EQ(only[2].label, "nvfp4_bf16act");
  EXPECT_TRUE(slm::kernel_bench_cases(false, "nvfp").empty());  // whole labels only
}

// The read-bandwidth probe on buffers that are not a whole number of its four-stream
// blocks, on one thread and several: every pass stays inside the buffer (ASan checks the
// reads) and gives a finite positive rate.
TEST(Probes, ReadBandwidthOnOddSizes) {
  auto pool = slm::thread_pool::create(3);
  ASSERT_TRUE(pool.ok());
  slm::serial_executor one;
  for (std::size_t bytes : {std::size_t{8}, std::size_t{256}, std::size_t{8 * 1000 + 24}, std::size_t{(1 << 20) + 8}}) {
    SCOPED_TRACE(bytes);
    for (const double bw : {slm::probe_read_bandwidth(one, bytes, 1), slm::probe_read_bandwidth(*pool, bytes, 1)}) {
      EXPECT_GT(bw, 0.0);
      EXPECT_TRUE(std::isfinite(bw));
    }
  }
}

// The AMX tile probes run where their kernels would (amx_usable and the CPU feature), give
// a finite positive rate there and 0 elsewhere; AMX is never usable without the CPU feature.
TEST(Probes, TileProbeFollowsAmxUsable) {
  slm::serial_executor one;
  const double r = slm::probe_tile_bf16(one, 4000), r8 = slm::probe_tile_int8(one, 4000);
  for (const auto& [rate, has] : {std::pair{r, slm::host_cpu().amx_bf16}, std::pair{r8, slm::host_cpu().amx_int8}}) {
    if (slm::amx_usable() && has) {
      EXPECT_GT(rate, 0.0);
      EXPECT_TRUE(std::isfinite(rate));
    } else {
      EXPECT_EQ(rate, 0.0);
    }
  }
  if (!slm::host_cpu().amx_bf16 && !slm::host_cpu().amx_int8) EXPECT_FALSE(slm::amx_usable());
  EXPECT_EQ(slm::amx_int8_accelerated(), slm::w4a8_vnni() && slm::host_cpu().amx_int8 && slm::amx_usable());
  slm::probe_result p;
  p.bf16_flops_per_s = 0;
  p.amx_bf16_flops_per_s = 7;
  p.int8_ops_per_s = 3;
  p.amx_int8_ops_per_s = 5;
  EXPECT_EQ(p.bf16_gemm_peak(true), 7.0);
  EXPECT_EQ(p.bf16_gemm_peak(false), 0.0);
  EXPECT_EQ(p.int8_gemm_peak(true), 5.0);
  EXPECT_EQ(p.int8_gemm_peak(false), 3.0);
}

// The int8 dot probe runs where W4A8 has SIMD kernels (VNNI or AVX2) and is 0 elsewhere.
TEST(Probes, Int8ProbeFollowsTheKernels) {
  slm::serial_executor one;
  const double r = slm::probe_dot_int8(one, 64000);
  if (slm::w4a8_accelerated()) {
    EXPECT_GT(r, 0.0);
    EXPECT_TRUE(std::isfinite(r));
  } else {
    EXPECT_EQ(r, 0.0);
  }
}
