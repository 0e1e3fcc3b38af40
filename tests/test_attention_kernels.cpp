// attend()'s AVX-512 and AVX2 kernels against its scalar reference (isa::scalar): head sizes
// around the 8-, 16- and 32-lane boundaries, misaligned rows, f32 and bf16 storage, two-part
// keys, GQA groups. The per-key kernels differ from it only in summation order, so the bound
// is a few ulps of the magnitudes involved; the blocked kernels (head sizes that are
// multiples of 4 vector widths) also use a polynomial exp, within 2 ulp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "slm/layers/attention.hpp"
#include "slm/core/numeric.hpp"
#include "test_helpers.hpp"


namespace {

TEST(AttentionKernels, SimdMatchesScalarReferenceAcrossSizesAndAlignments) {
  std::vector<slm::isa> simd;
  for (slm::isa i : {slm::isa::avx2, slm::isa::avx512})
    if (slm::isa_supported(i, slm::host_cpu())) simd.push_back(i);
  if (simd.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  for (slm::kv_dtype type : {slm::kv_dtype::f32, slm::kv_dtype::bf16})
    for (std::size_t d : {1u, 7u, 8u, 9u, 15u, 16u, 17u, 23u, 24u, 31u, 32u, 33u, 64u, 70u, 128u})
      for (std::size_t misalign : {0u, 1u, 3u}) {
        const std::size_t T = 9, H = 4, Hkv = 2, pos0 = 5, n = pos0 + T, d2 = 3;
        std::vector<float> q(misalign + T * H * d + 1), q2(T * H * d2);
        for (auto& x : q) x = nd(rng);
        for (auto& x : q2) x = nd(rng);
        slm::kv_rows k, k2, v;
        k.type = k2.type = v.type = type;
        k.width = v.width = Hkv * d;
        k2.width = d2;
        ASSERT_TRUE(k.reserve(n).ok() && v.reserve(n).ok() && k2.reserve(n).ok());
        std::vector<float> row(std::max(Hkv * d, d2));  // k2 rows are d2 wide, wider than Hkv * d for d = 1
        for (std::size_t j = 0; j < n; ++j) {
          for (auto& x : row) x = nd(rng);
          k.store(j, row.data());
          for (auto& x : row) x = nd(rng);
          v.store(j, row.data());
          for (std::size_t i = 0; i < d2; ++i) row[i] = nd(rng);
          k2.store(j, row.data());
        }
        slm::attention_problem p;
        p.T = T; p.H = H; p.group = H / Hkv; p.pos0 = pos0; p.scale = 0.3f;
        p.q1 = q.data() + misalign; p.q1_tok = H * d; p.q1_head = d; p.d1 = d;
        p.q2 = q2.data(); p.q2_tok = H * d2; p.q2_head = d2; p.d2 = d2;
        p.k1 = slm::kv_view::of(k, 0, d);
        p.k2 = slm::kv_view::of(k2, 0, 0);
        p.v = slm::kv_view::of(v, 0, d);
        p.dv = d;
        std::vector<float> ref(misalign + T * H * d), fast(misalign + T * H * d);
        p.out_tok = H * d; p.out_head = d;
        slm::floats scratch;
        slm::compute_context cx{slm_test::the_pools().p2};
        p.out = ref.data() + misalign;
        ASSERT_TRUE(slm::attend(p, scratch, cx, slm::isa::scalar).ok());
        for (slm::isa which : simd) {
          p.out = fast.data() + misalign;
          ASSERT_TRUE(slm::attend(p, scratch, cx, which).ok());
          for (std::size_t i = misalign; i < ref.size(); ++i)
            ASSERT_NEAR(fast[i], ref[i], 2e-5f * (1.0f + std::fabs(ref[i])))
                << slm::to_string(which) << " d " << d << " misalign " << misalign << " bf16 "
                << (type == slm::kv_dtype::bf16) << " at " << i;
        }
      }
}

std::vector<slm::isa> simd_isas() {
  std::vector<slm::isa> simd;
  for (slm::isa i : {slm::isa::avx2, slm::isa::avx512})
    if (slm::isa_supported(i, slm::host_cpu())) simd.push_back(i);
  return simd;
}

// The vector exp of the blocked kernels against std::exp over every float in [-86, 0] of
// a fine grid: the bound the file comment states (2 ulp), and NaN kept.
TEST(AttentionKernels, VectorExpIsWithinTwoUlp) {
  const std::vector<slm::isa> simd = simd_isas();
  if (simd.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  double worst = 0;
  for (slm::isa which : simd) {
    for (float x0 = -86.0f; x0 <= 0.0f; x0 += 0.0137f) {
      float in[16], out[16] = {};
      for (int i = 0; i < 16; ++i) in[i] = std::min(0.0f, x0 + static_cast<float>(i) * 1e-3f);
      slm::detail::attn::vector_exp(in, out, 16, which);
      for (int i = 0; i < 16; ++i) {
        const double e = std::exp(static_cast<double>(in[i]));
        const double ulp = std::nextafter(static_cast<float>(e), 1.0f) - static_cast<float>(e);
        worst = std::max(worst, std::fabs(out[i] - e) / ulp);
      }
    }
    float in[16], out[16] = {};
    for (float& x : in) x = std::numeric_limits<float>::quiet_NaN();
    slm::detail::attn::vector_exp(in, out, 16, which);
    EXPECT_TRUE(std::isnan(out[0])) << slm::to_string(which);
  }
  std::printf("vector exp: worst error %.2f ulp\n", worst);
  EXPECT_LE(worst, 2.0);
}

// The problem of the blocked-kernel tests: T queries at pos0.., H heads over Hkv groups,
// keys of d1 (+ d2) values, values of dv, random N(0, 1) data (scores of a few units).
struct blocked_case {
  std::size_t T, pos0, H, Hkv, d1, d2, dv, window;
  slm::kv_dtype type;
  std::size_t off = 0;  // floats before the first query and output row: misaligned rows
  std::vector<float> q, q2;
  slm::kv_rows k, k2, v;

  void fill(std::mt19937& rng) {
    std::normal_distribution<float> nd;
    const std::size_t n = pos0 + T;
    q.resize(off + T * H * d1);
    q2.resize(off + T * H * d2);
    for (auto& x : q) x = nd(rng);
    for (auto& x : q2) x = nd(rng);
    k.type = k2.type = v.type = type;
    k.width = Hkv * d1;
    k2.width = d2;  // shared by every group (MLA's RoPE part)
    v.width = Hkv * dv;
    k.heads = v.heads = Hkv;  // head-major, as the GQA layer stores them
    ASSERT_TRUE(k.reserve(n).ok() && v.reserve(n).ok() && k2.reserve(n).ok());
    std::vector<float> row(std::max({Hkv * d1, Hkv * dv, d2}));
    for (std::size_t j = 0; j < n; ++j) {
      for (auto& x : row) x = nd(rng);
      k.store(j, row.data());
      for (auto& x : row) x = nd(rng);
      v.store(j, row.data());
      if (d2) {
        for (auto& x : row) x = nd(rng);
        k2.store(j, row.data());
      }
    }
  }
  // Queries [t0, t0 + nt) of the case, into out (its rows H * dv apart).
  slm::attention_problem problem(std::size_t t0, std::size_t nt, float* out) const {
    slm::attention_problem p;
    p.T = nt; p.H = H; p.group = H / Hkv; p.pos0 = pos0 + t0; p.scale = 0.125f; p.window = window;
    p.q1 = q.data() + off + t0 * H * d1; p.q1_tok = H * d1; p.q1_head = d1; p.d1 = d1;
    if (d2) {
      p.q2 = q2.data() + off + t0 * H * d2; p.q2_tok = H * d2; p.q2_head = d2; p.d2 = d2;
      p.k2 = slm::kv_view::of(k2, 0, 0);
    }
    p.k1 = slm::kv_view::per_head(k);
    p.v = slm::kv_view::per_head(v);
    p.dv = dv;
    p.out = out + off + t0 * H * dv; p.out_tok = H * dv; p.out_head = dv;
    return p;
  }
};


// The blocked kernels against the reference: head sizes of published models (64, 128, 192,
// MLA's 512 + 64 and 128 + 64 two-part keys), GQA groups, f32 and bf16 caches, contexts
// that start and end inside a block of 16, sliding windows. Then the property decode relies
// on: one call over T queries gives the same bits as T calls of one query each.
TEST(AttentionKernels, BlockedKernelsMatchReferenceAndPrefillEqualsDecode) {
  const std::vector<slm::isa> simd = simd_isas();
  if (simd.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  std::mt19937 rng(5);
  struct shape { std::size_t T, pos0, H, Hkv, d1, d2, dv, window; };
  const shape shapes[] = {
      {7, 0, 4, 2, 64, 0, 64, 0},      {5, 37, 8, 2, 128, 0, 128, 0},  {18, 13, 3, 1, 192, 0, 64, 0},
      {4, 50, 2, 2, 128, 64, 128, 0},  {3, 20, 2, 1, 512, 64, 512, 0}, {9, 40, 4, 4, 64, 0, 128, 21},
      {33, 0, 2, 1, 128, 0, 128, 16},  {2, 300, 4, 1, 64, 64, 64, 0},  {1, 0, 2, 1, 64, 0, 64, 0}};
  for (slm::kv_dtype type : {slm::kv_dtype::f32, slm::kv_dtype::bf16})
    for (const shape& sh : shapes)
      for (std::size_t off : {0u, 3u}) {
      blocked_case c{sh.T, sh.pos0, sh.H, sh.Hkv, sh.d1, sh.d2, sh.dv, sh.window, type, off, {}, {}, {}, {}, {}};
      c.fill(rng);
      const std::size_t n_out = off + c.T * c.H * c.dv;
      std::vector<float> ref(n_out), all(n_out), steps(n_out);
      slm::floats scratch;
      slm::compute_context cx{slm_test::the_pools().p2};
      ASSERT_TRUE(slm::attend(c.problem(0, c.T, ref.data()), scratch, cx, slm::isa::scalar).ok());
      for (slm::isa which : simd) {
        SCOPED_TRACE(testing::Message() << slm::to_string(which) << " T " << c.T << " pos0 " << c.pos0 << " d1 "
                                        << c.d1 << " d2 " << c.d2 << " dv " << c.dv << " window " << c.window
                                        << " bf16 " << (type == slm::kv_dtype::bf16) << " off " << off);
        ASSERT_TRUE(slm::attend(c.problem(0, c.T, all.data()), scratch, cx, which).ok());
        for (std::size_t i = off; i < n_out; ++i) ASSERT_NEAR(all[i], ref[i], 2e-5f * (1.0f + std::fabs(ref[i]))) << i;
        for (std::size_t t = 0; t < c.T; ++t)
          ASSERT_TRUE(slm::attend(c.problem(t, 1, steps.data()), scratch, cx, which).ok());
        for (std::size_t i = off; i < n_out; ++i) ASSERT_EQ(all[i], steps[i]) << "prefill and decode differ at " << i;
      }
    }
}

// A NaN in one value row reaches exactly the rows that see it, on every kernel; an
// infinite key makes those rows NaN or finite as the reference does.
TEST(AttentionKernels, BlockedKernelsPropagateNaN) {
  const std::vector<slm::isa> simd = simd_isas();
  if (simd.empty()) GTEST_SKIP() << "no AVX2 or AVX-512 on this CPU";
  std::mt19937 rng(9);
  for (slm::kv_dtype type : {slm::kv_dtype::f32, slm::kv_dtype::bf16}) {
    blocked_case c{24, 8, 2, 1, 64, 0, 64, 10, type, 0, {}, {}, {}, {}, {}};
    c.fill(rng);
    std::vector<float> row(64, 1.0f);
    row[3] = std::numeric_limits<float>::quiet_NaN();
    c.v.store(20, row.data());  // seen by positions 20 .. 29 (window 10)
    const std::size_t n_out = c.T * c.H * c.dv;
    std::vector<float> ref(n_out), fast(n_out);
    slm::floats scratch;
    slm::compute_context cx{slm_test::the_pools().p2};
    ASSERT_TRUE(slm::attend(c.problem(0, c.T, ref.data()), scratch, cx, slm::isa::scalar).ok());
    for (slm::isa which : simd) {
      ASSERT_TRUE(slm::attend(c.problem(0, c.T, fast.data()), scratch, cx, which).ok());
      for (std::size_t t = 0; t < c.T; ++t) {
        const std::size_t pos = c.pos0 + t;
        const bool sees = pos >= 20 && pos < 30;
        for (std::size_t i = 0; i < c.H * c.dv; ++i) {
          const float r = ref[t * c.H * c.dv + i], f = fast[t * c.H * c.dv + i];
          ASSERT_EQ(std::isnan(r), sees && i % c.dv == 3) << "reference, position " << pos << " element " << i;
          ASSERT_EQ(std::isnan(f), std::isnan(r)) << slm::to_string(which) << " position " << pos << " element " << i;
        }
      }
    }
  }
}

// Head-major rows (kv_rows::heads > 1) hold what row-major rows hold: through growth (the
// blocks move), copy_from, and save / load, whose bytes are the row-major form's.
TEST(AttentionKernels, HeadMajorRowsKeepRowsThroughGrowthCopyAndState) {
  for (slm::kv_dtype type : {slm::kv_dtype::f32, slm::kv_dtype::bf16}) {
    slm::kv_rows flat, heads, copy, loaded;
    for (slm::kv_rows* r : {&flat, &heads, &copy, &loaded}) {
      r->type = type;
      r->width = 3 * 8;
    }
    heads.heads = copy.heads = loaded.heads = 3;
    ASSERT_TRUE(flat.reserve(2).ok() && heads.reserve(2).ok());
    std::vector<float> row(24);
    for (std::size_t j = 0; j < 9; ++j) {
      if (heads.capacity() <= j) {
        ASSERT_TRUE(heads.reserve(2 * heads.capacity() + 1).ok());  // moves the blocks
      }
      ASSERT_TRUE(flat.reserve(j + 1).ok());
      for (std::size_t i = 0; i < row.size(); ++i) row[i] = static_cast<float>(j * 100 + i) * 0.25f;
      flat.store(j, row.data());
      heads.store(j, row.data());
    }
    EXPECT_GE(heads.capacity(), 9u);
    const slm::kv_view hv = slm::kv_view::per_head(heads), fv = slm::kv_view::of(flat, 0, 8);  // 3 heads of 8 a row
    for (std::size_t j = 0; j < 9; ++j)
      for (std::size_t g = 0; g < 3; ++g)
        for (std::size_t i = 0; i < 8; ++i) {
          const std::size_t a = j * hv.tok + g * hv.head + i, b = j * fv.tok + g * fv.head + i;
          const float x = type == slm::kv_dtype::f32 ? static_cast<const float*>(hv.data)[a]
                                                     : slm::bf16_to_f32(static_cast<const std::uint16_t*>(hv.data)[a]);
          const float y = type == slm::kv_dtype::f32 ? static_cast<const float*>(fv.data)[b]
                                                     : slm::bf16_to_f32(static_cast<const std::uint16_t*>(fv.data)[b]);
          ASSERT_EQ(x, y) << j << " " << g << " " << i;
        }
    auto saved = [](const slm::kv_rows& r, std::size_t rows) {
      std::vector<std::byte> out;
      slm::state_writer w([](void* ctx, std::span<const std::byte> b) -> slm::status {
        auto* o = static_cast<std::vector<std::byte>*>(ctx);
        o->insert(o->end(), b.begin(), b.end());
        return {};
      }, &out, false);
      EXPECT_TRUE(r.save(w, rows).ok());
      return out;
    };
    const std::vector<std::byte> want = saved(flat, 9);
    EXPECT_EQ(saved(heads, 9), want);
    ASSERT_TRUE(copy.copy_from(heads, 9).ok());
    EXPECT_EQ(saved(copy, 9), want);
    slm::state_reader rd(want);
    ASSERT_TRUE(loaded.load(rd, 9, "keys").ok());
    EXPECT_EQ(saved(loaded, 9), want);
    EXPECT_FALSE(copy.copy_from(flat, 9).ok());  // another layout is refused, not misread
  }
}

}  // namespace
