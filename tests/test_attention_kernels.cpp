// attend()'s AVX-512 and AVX2 kernels against its scalar reference (isa::scalar): head sizes
// around the 8-, 16- and 32-lane boundaries, misaligned rows, f32 and bf16 storage, two-part
// keys, GQA groups. The two differ only in summation order, so the bound is a few ulps
// of the magnitudes involved.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
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

}  // namespace
