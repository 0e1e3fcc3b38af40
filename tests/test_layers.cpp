// Layer-level oracles for issue 4 (attention and MoE architectures):
//  * RoPE schedules against transformers' modeling_rope_utils.py formulas, recomputed
//    here in double; the two pairings against a direct complex rotation;
//  * attend() against a brute-force double softmax (GQA, two-part keys, sliding window
//    with transformers' masking_utils semantics, DSA key lists, bf16 storage, threads);
//  * both MoE routers against a plain re-implementation of transformers' routing;
//  * a MoE decode step reads exactly the weights it must (attention, dense layers,
//    router, k experts, shared experts, lm_head) and fewer than the whole model;
//  * session guarantees: bad input and cancellation leave the session unchanged, reset()
//    reproduces a fresh session, and the thread count never changes a bit.
// Suite names start with "layers" so that `ctest -R "model|layers"` selects them.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <complex>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

namespace {

using slm::errc;
using slm_test::fails_with;

// ---------------------------------------------------------------------------------
// RoPE schedules: transformers' formulas (modeling_rope_utils.py, 5.17), in double.

struct rope_oracle {
  std::vector<double> inv_freq;
  double attention_factor = 1;
};

// _compute_default_rope_parameters: 1 / base^(arange(0, dim, 2) / dim), dim = int(head_dim * prf).
std::vector<double> default_inv_freq(double base, std::size_t head_dim, double prf) {
  const auto dim = static_cast<std::size_t>(static_cast<double>(head_dim) * prf);
  std::vector<double> f;
  for (std::size_t i = 0; i < dim; i += 2) f.push_back(1.0 / std::pow(base, static_cast<double>(i) / static_cast<double>(dim)));
  return f;
}

rope_oracle oracle_linear(double base, std::size_t hd, double prf, double factor) {
  rope_oracle o{default_inv_freq(base, hd, prf)};
  for (double& f : o.inv_freq) f /= factor;  // inv_freq /= factor
  return o;
}

// _compute_llama3_parameters, torch.where for torch.where.
rope_oracle oracle_llama3(double base, std::size_t hd, double factor, double low_ff, double high_ff, double old_ctx) {
  rope_oracle o{default_inv_freq(base, hd, 1.0)};
  const double low_wl = old_ctx / low_ff, high_wl = old_ctx / high_ff;
  for (double& f : o.inv_freq) {
    const double wl = 2 * std::numbers::pi / f;
    const double llama = wl > low_wl ? f / factor : f;
    const double smooth = (old_ctx / wl - low_ff) / (high_ff - low_ff);
    const double smoothed = (1 - smooth) * llama / factor + smooth * llama;
    const bool medium = !(wl < high_wl) && !(wl > low_wl);
    f = medium ? smoothed : llama;
  }
  return o;
}

// _compute_yarn_parameters.
rope_oracle oracle_yarn(double base, std::size_t hd, double prf, double factor, double orig, double mscale,
                        double mscale_all_dim, bool truncate, double beta_fast = 32, double beta_slow = 1) {
  const double dim = static_cast<double>(static_cast<std::size_t>(static_cast<double>(hd) * prf));
  auto get_mscale = [](double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * std::log(scale) + 1.0; };
  rope_oracle o;
  o.attention_factor = (mscale != 0 && mscale_all_dim != 0) ? get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)
                                                            : get_mscale(factor, 1);
  auto corr_dim = [&](double rot) { return dim * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(base)); };
  double low = corr_dim(beta_fast), high = corr_dim(beta_slow);
  if (truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;
  for (std::size_t i = 0; 2 * i < static_cast<std::size_t>(dim); ++i) {
    const double pos_freq = std::pow(base, 2.0 * static_cast<double>(i) / dim);
    const double extrap = 1 / pos_freq, interp = 1 / (factor * pos_freq);
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrap_factor = 1 - ramp;
    o.inv_freq.push_back(interp * (1 - extrap_factor) + extrap * extrap_factor);
  }
  return o;
}

// slm stores inv_freq as float (transformers computes it in float32): within an ulp or so.
void expect_table_matches(const slm::rope_table& t, const rope_oracle& o, std::size_t rotary_dim, const char* what) {
  ASSERT_EQ(t.rotary_dim, rotary_dim) << what;
  ASSERT_EQ(t.inv_freq.size(), o.inv_freq.size()) << what;
  for (std::size_t i = 0; i < o.inv_freq.size(); ++i)
    EXPECT_NEAR(t.inv_freq[i], o.inv_freq[i], 3e-7 * o.inv_freq[i]) << what << " pair " << i;
  EXPECT_NEAR(t.attention_factor, o.attention_factor, 1e-6) << what;
}

TEST(layersRopeSchedule, DefaultMatchesTransformers) {
  slm::rope_params p;
  p.theta = 10000;
  expect_table_matches(slm::rope_table::make(p, 64), {default_inv_freq(10000, 64, 1.0)}, 64, "default theta 1e4");
  p.theta = 1e6;
  expect_table_matches(slm::rope_table::make(p, 128), {default_inv_freq(1e6, 128, 1.0)}, 128, "default theta 1e6");
}

TEST(layersRopeSchedule, PartialRotaryFactorRotatesHalfTheHead) {
  slm::rope_params p;
  p.theta = 10000;
  p.partial_rotary_factor = 0.5;
  // The exponent's denominator is the rotary dim (32), not the head dim (64).
  expect_table_matches(slm::rope_table::make(p, 64), {default_inv_freq(10000, 64, 0.5)}, 32, "partial 0.5");
  p.type = slm::rope_type::linear;
  p.factor = 4;
  expect_table_matches(slm::rope_table::make(p, 64), oracle_linear(10000, 64, 0.5, 4), 32, "linear partial 0.5");
}

TEST(layersRopeSchedule, LinearMatchesTransformers) {
  slm::rope_params p;
  p.type = slm::rope_type::linear;
  p.theta = 10000;
  p.factor = 2.5;
  expect_table_matches(slm::rope_table::make(p, 64), oracle_linear(10000, 64, 1.0, 2.5), 64, "linear");
}

TEST(layersRopeSchedule, Llama3MatchesTransformers) {
  // Llama 3.1's values, and the golden's small context (64) that puts pairs in all three bands.
  for (double old_ctx : {8192.0, 64.0}) {
    slm::rope_params p;
    p.type = slm::rope_type::llama3;
    p.theta = 500000;
    p.factor = 8;
    p.low_freq_factor = 1;
    p.high_freq_factor = 4;
    p.original_max_position_embeddings = old_ctx;
    const auto o = oracle_llama3(500000, 128, 8, 1, 4, old_ctx);
    expect_table_matches(slm::rope_table::make(p, 128), o, 128, "llama3");
    // The three bands are all exercised (else the blend formula goes untested).
    const auto base = default_inv_freq(500000, 128, 1.0);
    int unchanged = 0, divided = 0, blended = 0;
    for (std::size_t i = 0; i < base.size(); ++i) {
      if (o.inv_freq[i] == base[i]) ++unchanged;
      else if (std::fabs(o.inv_freq[i] - base[i] / 8) < 1e-18) ++divided;
      else ++blended;
    }
    EXPECT_GT(unchanged, 0);
    EXPECT_GT(divided, 0);
    if (old_ctx == 8192.0) { EXPECT_GT(blended, 0); }
  }
}

TEST(layersRopeSchedule, YarnMatchesTransformers) {
  struct yarn_case {
    double factor, orig, mscale, mscale_all_dim;
    bool truncate;
    std::size_t hd;
    double prf;
  };
  for (const yarn_case c : {yarn_case{4, 64, 0, 0, true, 64, 1.0}, yarn_case{4, 64, 0, 0, false, 64, 1.0},
                            yarn_case{40, 4096, 1, 1, true, 64, 1.0},        // DeepSeek-V3: af = 1
                            yarn_case{40, 4096, 0.707, 1, true, 64, 1.0},    // af != 1
                            yarn_case{16, 2048, 1, 0, false, 128, 1.0},      // only mscale: af from factor
                            yarn_case{8, 1024, 0, 0, true, 128, 0.5}}) {     // partial rotary
    slm::rope_params p;
    p.type = slm::rope_type::yarn;
    p.theta = 10000;
    p.factor = c.factor;
    p.original_max_position_embeddings = c.orig;
    p.mscale = c.mscale;
    p.mscale_all_dim = c.mscale_all_dim;
    p.truncate = c.truncate;
    p.partial_rotary_factor = c.prf;
    const auto o = oracle_yarn(10000, c.hd, c.prf, c.factor, c.orig, c.mscale, c.mscale_all_dim, c.truncate);
    const std::string what = "yarn factor " + std::to_string(c.factor) + (c.truncate ? " truncate" : " no-truncate");
    expect_table_matches(slm::rope_table::make(p, c.hd), o, static_cast<std::size_t>(static_cast<double>(c.hd) * c.prf),
                         what.c_str());
    // DeepSeek's softmax scale: mscale(factor, mscale_all_dim)^2 when mscale_all_dim is set.
    const double m = c.mscale_all_dim ? 0.1 * c.mscale_all_dim * std::log(c.factor) + 1 : 1;
    EXPECT_NEAR(p.softmax_scale_multiplier(), m * m, 1e-12);
  }
  // truncate changes the ramp: the test above would not notice it being ignored otherwise.
  const auto a = oracle_yarn(10000, 64, 1, 4, 64, 0, 0, true), b = oracle_yarn(10000, 64, 1, 4, 64, 0, 0, false);
  EXPECT_NE(a.inv_freq, b.inv_freq);
}

TEST(layersRopeSchedule, YarnParsedFromEitherConfigStyle) {
  for (const char* text :
       {R"({"max_position_embeddings": 8192, "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000, "factor": 40,
            "original_max_position_embeddings": 4096, "mscale": 0.707, "mscale_all_dim": 1, "truncate": false}})",
        R"({"max_position_embeddings": 8192, "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 40,
            "original_max_position_embeddings": 4096, "mscale": 0.707, "mscale_all_dim": 1, "truncate": false}})"}) {
    auto cfg = slm::json::parse(text);
    ASSERT_TRUE(cfg.ok());
    auto p = slm::rope_params_from_config(*cfg);
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ(p->type, slm::rope_type::yarn);
    EXPECT_FALSE(p->truncate);
    expect_table_matches(slm::rope_table::make(*p, 64), oracle_yarn(10000, 64, 1, 40, 4096, 0.707, 1, false), 64, text);
  }
}

// Round to nearest even, written out here (not slm's converter).
float round_bf16(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

TEST(layersRopeSchedule, Bf16InvFreqIsRoundedAsTransformersBufferIs) {
  // transformers keeps inv_freq as a module buffer, so a bf16 checkpoint carries it in bf16.
  slm::rope_params p;
  p.type = slm::rope_type::llama3;
  p.theta = 500000;
  p.factor = 8;
  p.original_max_position_embeddings = 64;
  p.inv_freq_dtype = slm::dtype::bf16;
  const auto o = oracle_llama3(500000, 32, 8, 1, 4, 64);
  const auto t = slm::rope_table::make(p, 32);
  ASSERT_EQ(t.inv_freq.size(), o.inv_freq.size());
  int differs_from_f32 = 0;
  for (std::size_t i = 0; i < o.inv_freq.size(); ++i) {
    const float f = static_cast<float>(o.inv_freq[i]);
    EXPECT_EQ(t.inv_freq[i], round_bf16(f)) << i;
    differs_from_f32 += t.inv_freq[i] != f;
  }
  EXPECT_GT(differs_from_f32, 0);
  // The config's dtype chooses it, in either spelling.
  for (const char* text : {R"({"dtype": "bfloat16"})", R"({"torch_dtype": "bfloat16"})", R"({"dtype": "float32"})"}) {
    auto cfg = slm::json::parse(text);
    auto q = slm::rope_params_from_config(*cfg);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(q->inv_freq_dtype, std::string_view(text).find("bfloat16") != std::string_view::npos ? slm::dtype::bf16
                                                                                                   : slm::dtype::f32)
        << text;
  }
}

// ---------------------------------------------------------------------------------
// Pairings against a complex rotation.

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Pair i (half-split: x[i], x[i + r/2]; interleaved: x[2i], x[2i+1]) as a + ib, times
// af * e^{i theta}, theta the float32 product pos * inv_freq (transformers' float32 matmul).
std::vector<double> rotate_oracle(const std::vector<float>& x, std::size_t n_heads, std::size_t hd,
                                  const slm::rope_table& t, std::size_t pos, bool interleaved) {
  std::vector<double> y(x.begin(), x.end());
  const std::size_t half = t.rotary_dim / 2;
  for (std::size_t h = 0; h < n_heads; ++h)
    for (std::size_t i = 0; i < half; ++i) {
      const std::size_t a = h * hd + (interleaved ? 2 * i : i), b = h * hd + (interleaved ? 2 * i + 1 : i + half);
      const float theta = static_cast<float>(pos) * t.inv_freq[i];
      const std::complex<double> z =
          std::complex<double>(x[a], x[b]) * std::polar(static_cast<double>(t.attention_factor), static_cast<double>(theta));
      y[a] = z.real();
      y[b] = z.imag();
    }
  return y;
}

TEST(layersRopePairing, HalfSplitAndInterleavedMatchComplexRotation) {
  const std::size_t hd = 64, H = 3;
  slm::rope_params p;
  p.type = slm::rope_type::yarn;  // attention_factor != 1 checks the cos/sin scaling too
  p.factor = 4;
  p.original_max_position_embeddings = 64;
  p.partial_rotary_factor = 0.5;  // and the unrotated tail
  const auto t = slm::rope_table::make(p, hd);
  ASSERT_NE(t.attention_factor, 1.0f);
  for (std::size_t pos : {0u, 1u, 7u, 1000u}) {
    for (bool inter : {false, true}) {
      auto x = random_floats(H * hd, 11 + static_cast<std::uint32_t>(pos));
      const auto want = rotate_oracle(x, H, hd, t, pos, inter);
      std::vector<float> scratch(t.rotary_dim);
      slm::apply_rope(t, inter, pos, x.data(), H, hd, scratch.data());
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (i % hd >= t.rotary_dim) EXPECT_EQ(static_cast<double>(x[i]), want[i]) << "the tail must not rotate";
        else EXPECT_NEAR(x[i], want[i], 2e-6) << (inter ? "interleaved" : "half-split") << " pos " << pos << " i " << i;
      }
    }
  }
  // The pairings differ (the test would not notice a swap otherwise).
  auto a = random_floats(hd, 5), b = a;
  std::vector<float> scratch(t.rotary_dim);
  slm::apply_rope<slm::rope_half_split>(t, 7, a.data(), 1, hd, scratch.data());
  slm::apply_rope<slm::rope_interleaved>(t, 7, b.data(), 1, hd, scratch.data());
  EXPECT_NE(a, b);
}

// ---------------------------------------------------------------------------------
// attend() against brute force.

struct attn_case {
  std::size_t T = 4, pos0 = 5, H = 4, Hkv = 2, d1 = 16, d2 = 0, dv = 16, window = 0;
  bool bf16 = false, selected = false, k2_shared = false;
};

float bf16_round_trip(float x) { return slm::bf16_to_f32(slm::f32_to_bf16(x)); }

void check_attend(const attn_case& c, std::uint32_t seed) {
  const std::size_t N = c.pos0 + c.T, group = c.H / c.Hkv, Hk2 = c.k2_shared ? 1 : c.Hkv;
  auto q1 = random_floats(c.T * c.H * c.d1, seed, -2, 2);
  auto q2 = random_floats(c.T * c.H * std::max<std::size_t>(c.d2, 1), seed + 1, -2, 2);
  auto k1 = random_floats(N * c.Hkv * c.d1, seed + 2);
  auto k2 = random_floats(N * Hk2 * std::max<std::size_t>(c.d2, 1), seed + 3);
  auto v = random_floats(N * c.Hkv * c.dv, seed + 4);
  if (c.bf16)  // the oracle sees what the cache holds
    for (auto* a : {&k1, &k2, &v})
      for (float& x : *a) x = bf16_round_trip(x);
  std::vector<std::uint16_t> k1h(k1.size()), k2h(k2.size()), vh(v.size());
  for (std::size_t i = 0; i < k1.size(); ++i) k1h[i] = slm::f32_to_bf16(k1[i]);
  for (std::size_t i = 0; i < k2.size(); ++i) k2h[i] = slm::f32_to_bf16(k2[i]);
  for (std::size_t i = 0; i < v.size(); ++i) vh[i] = slm::f32_to_bf16(v[i]);
  const float scale = 0.3f;

  // DSA lists: 6 slots per query; -1 holes, a future key (must be ignored), and keys in
  // a scrambled order.
  const std::size_t S = 6;
  std::vector<std::int32_t> sel(c.T * S, -1);
  std::mt19937 g(seed + 5);
  for (std::size_t t = 0; t < c.T; ++t) {
    const std::size_t pos = c.pos0 + t;
    std::vector<std::int32_t> keys(pos + 1);
    for (std::size_t j = 0; j <= pos; ++j) keys[j] = static_cast<std::int32_t>(j);
    std::shuffle(keys.begin(), keys.end(), g);
    for (std::size_t i = 0; i < std::min<std::size_t>(4, keys.size()); ++i) sel[t * S + i] = keys[i];
    if (pos + 1 < N) sel[t * S + 5] = static_cast<std::int32_t>(pos + 1);  // the future
  }

  // Brute force: every visible key's score, softmax in double.
  std::vector<double> want(c.T * c.H * c.dv);
  for (std::size_t t = 0; t < c.T; ++t)
    for (std::size_t h = 0; h < c.H; ++h) {
      const std::size_t pos = c.pos0 + t, kh = h / group;
      std::vector<std::size_t> vis;
      for (std::size_t j = 0; j < N; ++j) {
        bool ok = j <= pos;                                              // causal
        if (c.window) ok = ok && static_cast<long>(pos) - static_cast<long>(j) < static_cast<long>(c.window);  // kv > q - w
        if (c.selected) ok = ok && std::count(sel.begin() + t * S, sel.begin() + (t + 1) * S, static_cast<std::int32_t>(j));
        if (ok) vis.push_back(j);
      }
      std::vector<double> s;
      for (std::size_t j : vis) {
        double dot = 0;
        for (std::size_t i = 0; i < c.d1; ++i)
          dot += static_cast<double>(q1[(t * c.H + h) * c.d1 + i]) * k1[(j * c.Hkv + kh) * c.d1 + i];
        for (std::size_t i = 0; i < c.d2; ++i)
          dot += static_cast<double>(q2[(t * c.H + h) * c.d2 + i]) * k2[(j * Hk2 + (c.k2_shared ? 0 : kh)) * c.d2 + i];
        s.push_back(scale * dot);
      }
      const double m = s.empty() ? 0 : *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - m);
      for (std::size_t k = 0; k < vis.size(); ++k)
        for (std::size_t i = 0; i < c.dv; ++i)
          want[(t * c.H + h) * c.dv + i] += s[k] / sum * v[(vis[k] * c.Hkv + kh) * c.dv + i];
    }

  std::vector<std::vector<float>> outs;
  slm::serial_executor serial;
  for (slm::executor_ref ex : {slm::executor_ref(serial), slm::executor_ref(slm_test::the_pools().p2),
                               slm::executor_ref(slm_test::the_pools().p3)}) {
    slm::attention_problem p;
    p.T = c.T;
    p.H = c.H;
    p.group = group;
    p.pos0 = c.pos0;
    p.window = c.window;
    p.scale = scale;
    p.q1 = q1.data(); p.q1_tok = c.H * c.d1; p.q1_head = c.d1; p.d1 = c.d1;
    const slm::kv_dtype kt = c.bf16 ? slm::kv_dtype::bf16 : slm::kv_dtype::f32;
    auto view = [&](const std::vector<float>& f, const std::vector<std::uint16_t>& h, std::size_t tok, std::size_t head) {
      slm::kv_view kv;
      kv.data = c.bf16 ? static_cast<const void*>(h.data()) : static_cast<const void*>(f.data());
      kv.type = kt;
      kv.tok = tok;
      kv.head = head;
      return kv;
    };
    p.k1 = view(k1, k1h, c.Hkv * c.d1, c.d1);
    if (c.d2) {
      p.q2 = q2.data(); p.q2_tok = c.H * c.d2; p.q2_head = c.d2; p.d2 = c.d2;
      p.k2 = view(k2, k2h, Hk2 * c.d2, c.k2_shared ? 0 : c.d2);
    }
    p.v = view(v, vh, c.Hkv * c.dv, c.dv);
    p.dv = c.dv;
    std::vector<float> out(c.T * c.H * c.dv, -7.0f);
    p.out = out.data(); p.out_tok = c.H * c.dv; p.out_head = c.dv;
    if (c.selected) {
      p.selected = sel.data();
      p.sel_stride = p.n_selected = S;
    }
    slm::floats scratch;
    slm::compute_context cx{ex};
    ASSERT_TRUE(slm::attend(p, scratch, cx).ok());
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 2e-5) << "output " << i;
    outs.push_back(out);
  }
  // 1, 2 and 3 threads: the same bits.
  EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * 4));
  EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[2].data(), outs[0].size() * 4));
}

TEST(layersAttend, FullCausalMatchesBruteForce) { check_attend({.T = 6, .pos0 = 0, .H = 4, .Hkv = 4}, 1); }
TEST(layersAttend, GqaGroupsMatchBruteForce) {
  check_attend({.T = 5, .pos0 = 3, .H = 8, .Hkv = 2}, 2);
  check_attend({.T = 3, .pos0 = 9, .H = 6, .Hkv = 1}, 3);  // MQA
}
TEST(layersAttend, TwoPartKeysMatchBruteForce) {
  check_attend({.T = 4, .pos0 = 4, .H = 4, .Hkv = 4, .d1 = 16, .d2 = 8, .dv = 12, .k2_shared = true}, 4);  // MLA
  check_attend({.T = 4, .pos0 = 2, .H = 4, .Hkv = 2, .d1 = 8, .d2 = 8, .dv = 8}, 5);
}
TEST(layersAttend, SlidingWindowMatchesTransformersMask) {
  // masking_utils.sliding_window_overlay: kv_idx > q_idx - sliding_window.
  for (std::size_t w : {1u, 2u, 3u, 7u, 100u}) check_attend({.T = 6, .pos0 = 4, .H = 4, .Hkv = 2, .window = w}, 6);
  check_attend({.T = 1, .pos0 = 20, .H = 2, .Hkv = 1, .window = 4}, 7);  // decode past the window
}
TEST(layersAttend, SelectedKeyListsSkipHolesAndFutureKeys) {
  check_attend({.T = 5, .pos0 = 7, .H = 4, .Hkv = 4, .d1 = 16, .d2 = 8, .dv = 16, .selected = true, .k2_shared = true}, 8);
}
TEST(layersAttend, Bf16StorageMatchesBruteForceOnRoundedValues) {
  check_attend({.T = 5, .pos0 = 3, .H = 8, .Hkv = 2, .bf16 = true}, 9);
  check_attend({.T = 4, .pos0 = 4, .H = 4, .Hkv = 4, .d2 = 8, .window = 3, .bf16 = true, .k2_shared = true}, 10);
}

// ---------------------------------------------------------------------------------
// layersRouters against transformers' routing.

struct choice {
  std::uint32_t expert;
  double weight;
};

// Qwen3-MoE / Mixtral: softmax(logits) in float, topk, renormalize when asked.
std::vector<choice> softmax_oracle(const std::vector<float>& logits, std::size_t k, bool norm) {
  std::vector<double> p(logits.size());
  double s = 0;
  for (std::size_t e = 0; e < p.size(); ++e) s += p[e] = std::exp(static_cast<double>(logits[e]));
  for (double& x : p) x /= s;
  std::vector<std::uint32_t> idx(p.size());
  for (std::uint32_t e = 0; e < idx.size(); ++e) idx[e] = e;
  std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return p[a] > p[b]; });
  std::vector<choice> out;
  double sk = 0;
  for (std::size_t i = 0; i < k; ++i) sk += p[idx[i]];
  for (std::size_t i = 0; i < k; ++i) out.push_back({idx[i], norm ? p[idx[i]] / sk : p[idx[i]]});
  return out;
}

// DeepseekV3TopkRouter.forward, line by line.
std::vector<choice> deepseek_oracle(const std::vector<float>& logits, const std::vector<float>& bias, std::size_t k,
                                    std::size_t n_group, std::size_t topk_group, bool norm, double scaling) {
  const std::size_t E = logits.size(), per = E / n_group;
  std::vector<double> scores(E), for_choice(E);
  for (std::size_t e = 0; e < E; ++e) {
    scores[e] = 1 / (1 + std::exp(-static_cast<double>(logits[e])));  // sigmoid
    for_choice[e] = scores[e] + bias[e];
  }
  std::vector<double> group_scores(n_group);  // topk(2).sum per group
  for (std::size_t g = 0; g < n_group; ++g) {
    std::vector<double> v(for_choice.begin() + static_cast<long>(g * per), for_choice.begin() + static_cast<long>((g + 1) * per));
    std::sort(v.rbegin(), v.rend());
    group_scores[g] = v[0] + v[1];
  }
  std::vector<std::size_t> gi(n_group);
  for (std::size_t g = 0; g < n_group; ++g) gi[g] = g;
  std::stable_sort(gi.begin(), gi.end(), [&](auto a, auto b) { return group_scores[a] > group_scores[b]; });
  std::vector<bool> keep(n_group, false);
  for (std::size_t i = 0; i < topk_group; ++i) keep[gi[i]] = true;
  for (std::size_t e = 0; e < E; ++e)
    if (!keep[e / per]) for_choice[e] = -INFINITY;  // masked_fill(~mask, -inf)
  std::vector<std::uint32_t> idx(E);
  for (std::uint32_t e = 0; e < E; ++e) idx[e] = e;
  std::stable_sort(idx.begin(), idx.end(), [&](auto a, auto b) { return for_choice[a] > for_choice[b]; });
  std::vector<choice> out;
  double den = 0;
  for (std::size_t i = 0; i < k; ++i) den += scores[idx[i]];
  den += 1e-20;
  for (std::size_t i = 0; i < k; ++i) out.push_back({idx[i], (norm ? scores[idx[i]] / den : scores[idx[i]]) * scaling});
  return out;
}

// torch.topk(sorted=False) gives the set, not an order: compare as sets of (expert, weight).
void expect_same_choices(std::vector<slm::router_choice> got, std::vector<choice> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size());
  std::sort(got.begin(), got.end(), [](auto a, auto b) { return a.expert < b.expert; });
  std::sort(want.begin(), want.end(), [](auto a, auto b) { return a.expert < b.expert; });
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].expert, want[i].expert) << what;
    EXPECT_NEAR(got[i].weight, want[i].weight, 2e-6 * std::max(1.0, std::fabs(want[i].weight))) << what;
  }
}

TEST(layersRouters, SoftmaxTopkMatchesTransformers) {
  for (bool norm : {true, false}) {
    for (std::uint32_t seed = 0; seed < 50; ++seed) {
      const std::size_t E = 16, k = 1 + seed % 4;
      const auto logits = random_floats(E, 100 + seed, -4, 4);
      std::vector<slm::router_choice> got(k);
      std::vector<float> tmp(E);
      slm::softmax_topk_router{norm}.route(logits.data(), E, k, got.data(), tmp.data());
      expect_same_choices(got, softmax_oracle(logits, k, norm), "softmax seed " + std::to_string(seed));
    }
  }
}

TEST(layersRouters, SigmoidGroupedMatchesDeepseekV3TopkRouter) {
  struct rc {
    std::size_t E, k, n_group, topk_group;
    bool norm;
    float scaling;
  };
  int group_limit_mattered = 0;
  for (const rc c : {rc{16, 4, 4, 2, true, 2.5f}, rc{16, 4, 4, 2, false, 1.0f}, rc{64, 8, 8, 4, true, 2.5f},
                     rc{32, 6, 1, 1, true, 1.5f}, rc{8, 2, 4, 2, true, 2.5f}}) {
    for (std::uint32_t seed = 0; seed < 40; ++seed) {
      const auto logits = random_floats(c.E, 200 + seed, -3, 3);
      const auto bias = random_floats(c.E, 300 + seed, -0.3f, 0.3f);  // steers selection, never the weights
      slm::sigmoid_grouped_router r{bias.data(), c.n_group, c.topk_group, c.norm, c.scaling};
      std::vector<slm::router_choice> got(c.k);
      std::vector<float> tmp(2 * c.E);
      r.route(logits.data(), c.E, c.k, got.data(), tmp.data());
      const auto want = deepseek_oracle(logits, bias, c.k, c.n_group, c.topk_group, c.norm, c.scaling);
      expect_same_choices(got, want, "grouped E " + std::to_string(c.E) + " seed " + std::to_string(seed));
      // Did the group limit exclude an expert the ungrouped top-k would have taken?
      const auto flat = deepseek_oracle(logits, bias, c.k, 1, 1, c.norm, c.scaling);
      std::set<std::uint32_t> a, b;
      for (auto x : want) a.insert(x.expert);
      for (auto x : flat) b.insert(x.expert);
      group_limit_mattered += a != b;
    }
  }
  EXPECT_GT(group_limit_mattered, 10) << "the random cases never exercised the group limit";
}

// ---------------------------------------------------------------------------------
// Whole-model properties on the goldens.

std::filesystem::path golden_dir(const std::string& arch) { return slm_test::test_data("golden/hf/" + arch); }

std::vector<std::int32_t> golden_ids(const std::string& arch) {
  auto f = slm::safetensors::file::open(golden_dir(arch) / "golden.safetensors");
  std::vector<std::int32_t> ids;
  if (!f.ok()) return ids;
  const auto* t = f->find("input_ids");
  std::vector<float> v(static_cast<std::size_t>(t->shape.numel()));
  EXPECT_TRUE(f->view(*t).to_f32(v).ok());
  for (float x : v) ids.push_back(static_cast<std::int32_t>(x));
  return ids;
}

template <class L>
std::uint64_t linear_bytes(const L& layer) {
  std::uint64_t b = 0;
  layer.for_each_linear([&](std::string_view, const slm::linear& l, bool) { b += slm::weight_bytes(l.w); });
  return b;
}

class layersMoeDecode : public ::testing::TestWithParam<const char*> {};

TEST_P(layersMoeDecode, ReadsOnlyTheSelectedExperts) {
  auto m = slm::model::load(golden_dir(GetParam()));
  ASSERT_TRUE(m.ok()) << m.error().message();
  const auto& c = m->config();
  auto head = slm::load_linear_weight(m->weights(), c.tie_embeddings ? "model.embed_tokens" : "lm_head");
  ASSERT_TRUE(head.ok());
  std::uint64_t must = slm::weight_bytes(*head), total = must;
  std::size_t moe_layers = 0;
  for (const auto& L : m->layers()) {
    const std::uint64_t attn = linear_bytes(L.mixer);
    must += attn;
    total += attn;
    if (const auto* moe = std::get_if<slm::moe_ffn>(&L.ffn.impl)) {
      ++moe_layers;
      const std::uint64_t expert = linear_bytes(moe->experts[0]);
      for (const auto& e : moe->experts) ASSERT_EQ(linear_bytes(e), expert);  // so which k does not matter
      const std::uint64_t shared = moe->shared.up.out() ? linear_bytes(moe->shared) : 0;
      must += slm::weight_bytes(moe->gate.w) + c.experts_per_token * expert + shared;
      total += linear_bytes(*moe);
    } else {
      must += linear_bytes(L.ffn);
      total += linear_bytes(L.ffn);
    }
  }
  ASSERT_GT(moe_layers, 0u);
  const auto ids = golden_ids(GetParam());
  auto s = m->new_session();
  std::vector<float> logits(m->vocab());
  slm::compute_context cx{slm_test::the_pools().p2};
  ASSERT_TRUE(s.forward(std::span(ids.data(), 8), 1, logits.data(), cx).ok());
  for (std::size_t step = 8; step < 12; ++step) {  // several decode steps: several routings
    slm::compute_context one{slm_test::the_pools().p2};
    ASSERT_TRUE(s.forward(std::span(ids.data() + step, 1), 1, logits.data(), one).ok());
    EXPECT_EQ(one.weight_bytes, must) << "step " << step;
    EXPECT_LT(one.weight_bytes, total);
  }
  std::printf("[ figures  ] %s decode step reads %llu of %llu weight bytes\n", GetParam(),
              static_cast<unsigned long long>(must), static_cast<unsigned long long>(total));
}

INSTANTIATE_TEST_SUITE_P(Golden, layersMoeDecode, ::testing::Values("qwen3_moe", "deepseek_v3"));

// ---------------------------------------------------------------------------------
// Session guarantees.

class layersSessions : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    auto m = slm::model::load(golden_dir(GetParam()));
    ASSERT_TRUE(m.ok()) << m.error().message();
    model_ = std::make_unique<slm::model>(std::move(*m));
    ids_ = golden_ids(GetParam());
    ASSERT_GE(ids_.size(), 12u);
    V_ = model_->vocab();
  }
  // A: the first 6 tokens; B: the next 5, every row.
  std::span<const std::int32_t> A() const { return std::span(ids_.data(), 6); }
  std::span<const std::int32_t> B() const { return std::span(ids_.data() + 6, 5); }
  std::vector<float> fresh_logits_of_B(slm::executor_ref ex, slm::session_options o = {}) const {
    auto s = model_->new_session(o);
    slm::compute_context cx{ex};
    std::vector<float> a(V_), b(5 * V_);
    EXPECT_TRUE(s.forward(A(), 1, a.data(), cx).ok());
    EXPECT_TRUE(s.forward(B(), 5, b.data(), cx).ok());
    return b;
  }
  std::unique_ptr<slm::model> model_;
  std::vector<std::int32_t> ids_;
  std::size_t V_ = 0;
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST_P(layersSessions, BadInputIsAnErrorAndChangesNothing) {
  const auto want = fresh_logits_of_B(slm_test::the_pools().p2);
  slm::session_options o;
  o.max_tokens = 11;  // exactly A + B
  auto s = model_->new_session(o);
  slm::compute_context cx{slm_test::the_pools().p2};
  std::vector<float> a(V_), b(5 * V_), junk(8 * V_, 1.0f);
  ASSERT_TRUE(s.forward(A(), 1, a.data(), cx).ok());
  const auto V = static_cast<std::int32_t>(V_);
  const std::vector<std::int32_t> bad_hi = {ids_[6], V, ids_[7]}, bad_lo = {-1}, long_prompt(6, 1), two = {1, 2};
  EXPECT_TRUE(fails_with(s.forward(bad_hi, 1, junk.data(), cx), errc::out_of_range, {"token id " + std::to_string(V), "index 1"}));
  EXPECT_TRUE(fails_with(s.forward(bad_lo, 1, junk.data(), cx), errc::out_of_range, {"token id -1"}));
  EXPECT_TRUE(fails_with(s.forward(std::span<const std::int32_t>(), 0, junk.data(), cx), errc::invalid_argument, {"no tokens"}));
  EXPECT_TRUE(fails_with(s.forward(two, 3, junk.data(), cx), errc::invalid_argument, {"3 logit rows", "2 tokens"}));
  EXPECT_TRUE(fails_with(s.forward(two, 1, nullptr, cx), errc::invalid_argument, {"null"}));
  EXPECT_TRUE(fails_with(s.forward(long_prompt, 1, junk.data(), cx), errc::out_of_range, {"context full", "limit of 11"}));
  EXPECT_EQ(s.position(), 6u);
  ASSERT_TRUE(s.forward(B(), 5, b.data(), cx).ok());
  EXPECT_TRUE(same_bits(b, want));
  // Now full: one more token is refused, and the session still holds its 11 positions.
  EXPECT_TRUE(fails_with(s.forward(std::span(ids_.data(), 1), 1, junk.data(), cx), errc::out_of_range, {"context full"}));
  EXPECT_EQ(s.position(), 11u);
}

using slm_test::cancelling_executor;

TEST_P(layersSessions, CancelledForwardLeavesNoTrace) {
  const auto want = fresh_logits_of_B(slm_test::the_pools().p2);
  int cancelled = 0;
  for (std::size_t fire_at : {1u, 2u, 3u, 5u, 8u, 13u, 21u, 34u}) {
    auto s = model_->new_session();
    slm::cancellation token;
    std::vector<float> a(V_), b(5 * V_);
    slm::compute_context cx{slm_test::the_pools().p2};
    ASSERT_TRUE(s.forward(A(), 1, a.data(), cx).ok());
    cancelling_executor ex{&token, fire_at};
    slm::compute_context ccx{slm::executor_ref(ex)};
    ccx.cancel = &token;
    // B, cancelled part way (a prefix of B, so the cache rows it wrote are overwritten
    // differently by the real call if the rollback failed).
    const std::vector<std::int32_t> other = {ids_[9], ids_[8], ids_[7]};
    const slm::status st = s.forward(other, 1, b.data(), ccx);
    if (st.ok()) continue;  // the cancel came after the last check: nothing to test
    ++cancelled;
    EXPECT_EQ(st.code(), errc::cancelled) << st.message();
    EXPECT_EQ(s.position(), 6u);
    ASSERT_TRUE(s.forward(B(), 5, b.data(), cx).ok());
    EXPECT_TRUE(same_bits(b, want)) << "cancelled at run() call " << fire_at;
  }
  EXPECT_GE(cancelled, 3);
}

TEST_P(layersSessions, ResetReproducesAFreshSession) {
  const auto want = fresh_logits_of_B(slm_test::the_pools().p2);
  auto s = model_->new_session();
  slm::compute_context cx{slm_test::the_pools().p2};
  std::vector<float> a(V_), b(5 * V_);
  ASSERT_TRUE(s.forward(std::span(ids_.data() + 3, 9), 1, a.data(), cx).ok());
  s.reset();
  EXPECT_EQ(s.position(), 0u);
  ASSERT_TRUE(s.forward(A(), 1, a.data(), cx).ok());
  ASSERT_TRUE(s.forward(B(), 5, b.data(), cx).ok());
  EXPECT_TRUE(same_bits(b, want));
}

TEST_P(layersSessions, ThreadCountNeverChangesABit) {
  slm::serial_executor serial;
  const auto one = fresh_logits_of_B(serial);
  EXPECT_TRUE(same_bits(fresh_logits_of_B(slm_test::the_pools().p2), one)) << "2 threads";
  EXPECT_TRUE(same_bits(fresh_logits_of_B(slm_test::the_pools().p3), one)) << "3 threads";
  slm::session_options bf;
  bf.kv = slm::kv_dtype::bf16;
  EXPECT_TRUE(same_bits(fresh_logits_of_B(slm_test::the_pools().p3, bf), fresh_logits_of_B(serial, bf))) << "bf16 KV";
}

INSTANTIATE_TEST_SUITE_P(Golden, layersSessions,
                         ::testing::Values("llama", "llama3_rope", "qwen3", "qwen3_moe", "deepseek_v3", "deepseek_v32"));

}  // namespace

// A floats buffer that grows one row at a time (a session's per-position history) keeps
// its values, zeroes what is new, and reallocates O(log n) times, not once per row: each
// reallocation copies the whole buffer, so exact-size growth made n decode steps O(n^2).
TEST(Floats, GrowingOneRowAtATimeReallocatesRarely) {
  slm::floats f;
  constexpr std::size_t row = 1024, rows = 4000;
  std::size_t moves = 0;
  const float* last = nullptr;
  for (std::size_t r = 1; r <= rows; ++r) {
    ASSERT_TRUE(f.resize(r * row).ok());
    if (f.data() != last) ++moves, last = f.data();
    ASSERT_EQ(f[(r - 1) * row + 5], 0.0f);  // new values are zero
    f[(r - 1) * row + 5] = static_cast<float>(r);
  }
  EXPECT_LE(moves, 25u);  // 1.5x steps from 1 row to 4000
  for (std::size_t r = 1; r <= rows; ++r) ASSERT_EQ(f[(r - 1) * row + 5], static_cast<float>(r));
  slm::floats g;  // a jump is allocated as asked: a scratch buffer sized once stays exact
  ASSERT_TRUE(g.resize(10).ok());
  ASSERT_TRUE(g.resize(1000).ok());
  const float* p = g.data();
  ASSERT_TRUE(g.resize(1001).ok());
  EXPECT_NE(g.data(), p);  // 1000 was the exact capacity
  ASSERT_TRUE(g.resize(1400).ok());  // within the 1.5x growth of 1001: no new allocation
  EXPECT_EQ(g.size(), 1400u);
}
