// Engram (slm/layers/engram.hpp) and mHC (slm/layers/mhc.hpp), the nanochat-lineage branch modules.
//
// Golden data made by nanochat's own code (tests/data/golden/nam56r/nanochat_engram__*,
// nanochat_mhc__*; the JSON beside each names the oracle commit and config). The golden
// safetensors hold the parameters under nanochat's state-dict names, so each is loaded
// through slm::checkpoint as a checkpoint directory.
//  * Engram: default orders (2,3,4, b = C/4) and custom orders "3,1,5,3" (b = 12): whole
//    prefill, T single-token steps and a split prefill against out/y, and against each
//    other; the cache's rollback; order parsing; config, shape and state errors.
//  * mHC: two branches (alpha 1) and three branches (alpha 0.6, tau 0.7, 3 iterations):
//    output, raw matrix and transport against the golden; Sinkhorn alone on the golden
//    raw matrix; one branch, aliasing, the non-finite fallback; config and shape errors.
// Tolerance: 1e-4 of the largest reference value. We are f32 like the oracle and differ
// only in summation order inside products of 8-40 terms, the pooled means and libm
// last bits (measured errors are printed, ~1e-7); 1e-4 leaves a wide margin for other
// compilers, ISAs and libms while a wrong order, divisor, index or sign moves results by
// >1e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "slm/layers/engram.hpp"
#include "slm/layers/mhc.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/nanochat/bind.hpp"
#include "test_helpers.hpp"

namespace {

using slm_test::fails_with;
using slm_test::max_abs_diff;
using slm_test::rel_err;

constexpr double kTol = 1e-4;

// A golden file opened both as a safetensors file and as a checkpoint directory.
struct golden {
  std::optional<slm::safetensors::file> file;
  std::unique_ptr<slm_test::temp_dir> dir;
  std::optional<slm::checkpoint> ck;

  std::vector<float> tensor(const std::string& n) const {
    std::vector<float> v;
    const auto* t = file->find(n);
    EXPECT_NE(t, nullptr) << n;
    if (!t) return v;
    v.resize(static_cast<std::size_t>(t->shape.numel()));
    EXPECT_TRUE(file->view(*t).to_f32(v).ok());
    return v;
  }
  std::vector<std::int64_t> shape(const std::string& n) const {
    const auto* t = file->find(n);
    if (!t) return {};
    return {t->shape.dims().begin(), t->shape.dims().end()};
  }
};

golden load_golden(const std::string& name) {
  golden g;
  const auto path = slm_test::test_data("golden/nam56r/" + name + ".safetensors");
  auto f = slm::safetensors::file::open(path);
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (!f.ok()) return g;
  g.file.emplace(std::move(*f));
  g.dir = std::make_unique<slm_test::temp_dir>(name);
  std::error_code ec;
  std::filesystem::copy_file(path, *g.dir / "model.safetensors", ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(slm_test::write_file(*g.dir / "config.json", "{}"));
  auto ck = slm::checkpoint::open(g.dir->path());
  EXPECT_TRUE(ck.ok()) << ck.error().message();
  if (ck.ok()) g.ck.emplace(std::move(*ck));
  return g;
}

// A checkpoint directory holding the given f32 tensors.
struct written_ck {
  std::unique_ptr<slm_test::temp_dir> dir;
  std::optional<slm::checkpoint> ck;
};
written_ck write_ck(const std::string& tag,
                    const std::vector<std::pair<std::string, std::pair<std::vector<float>, slm::shape>>>& ts) {
  written_ck w;
  w.dir = std::make_unique<slm_test::temp_dir>(tag);
  slm::safetensors::writer wr;
  for (const auto& [n, vs] : ts)
    EXPECT_TRUE(wr.add(n, slm::dtype::f32, vs.second, std::as_bytes(std::span(vs.first))).ok()) << n;
  EXPECT_TRUE(wr.write(*w.dir / "model.safetensors").ok());
  EXPECT_TRUE(slm_test::write_file(*w.dir / "config.json", "{}"));
  auto ck = slm::checkpoint::open(w.dir->path());
  EXPECT_TRUE(ck.ok()) << ck.error().message();
  if (ck.ok()) w.ck.emplace(std::move(*ck));
  return w;
}

// ---------------------------------------------------------------------------------
// Engram

struct engram_case {
  const char* name;
  std::size_t C;
  const char* orders;
  std::size_t bottleneck_dim;
};

void check_engram_golden(const engram_case& ec) {
  golden g = load_golden(ec.name);
  ASSERT_TRUE(g.ck);
  auto cfg = slm::engram_config::make(ec.C, ec.orders, ec.bottleneck_dim);
  ASSERT_TRUE(cfg.ok()) << cfg.error().message();
  auto br = slm::nanochat::load_engram(*g.ck, "", *cfg);
  ASSERT_TRUE(br.ok()) << br.error().message();
  const auto xs = g.shape("in/x");
  ASSERT_EQ(xs.size(), 3u);
  const std::size_t B = static_cast<std::size_t>(xs[0]), T = static_cast<std::size_t>(xs[1]), C = ec.C;
  ASSERT_EQ(static_cast<std::size_t>(xs[2]), C);
  const auto x = g.tensor("in/x"), yref = g.tensor("out/y");
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  double worst = 0, worst_pv = 0;
  for (std::size_t b = 0; b < B; ++b) {
    const float* xb = x.data() + b * T * C;
    const float* rb = yref.data() + b * T * C;
    // Whole prefill.
    slm::engram_state st;
    ASSERT_TRUE(br->init_state(st).ok());
    std::vector<float> y(T * C, -1.0f);
    ASSERT_TRUE(br->forward(xb, T, y.data(), st, ws, cx).ok());
    EXPECT_EQ(st.n, T);
    const double e = rel_err(y.data(), rb, T * C);
    worst = std::max(worst, e);
    EXPECT_LE(e, kTol) << ec.name << " batch " << b;
    // T single-token steps.
    slm::engram_state s1;
    ASSERT_TRUE(br->init_state(s1).ok());
    std::vector<float> ys(T * C, -1.0f);
    for (std::size_t t = 0; t < T; ++t) ASSERT_TRUE(br->step(xb + t * C, ys.data() + t * C, s1, ws, cx).ok());
    EXPECT_LE(rel_err(ys.data(), rb, T * C), kTol);
    const double pv = rel_err(ys.data(), y.data(), T * C);
    worst_pv = std::max(worst_pv, pv);
    EXPECT_LE(pv, 1e-6) << "prefill vs steps";
    // The state (z = W_in x) agrees up to the product's blocking: a [T, C] GEMM and T
    // GEMVs may sum in different orders (measured: ~1 ulp).
    EXPECT_LE(rel_err(s1.hist.data(), st.hist.data(), st.hist.size()), 1e-6);
    // A split prefill (2 tokens, then 5, then the rest).
    slm::engram_state s2;
    ASSERT_TRUE(br->init_state(s2).ok());
    std::vector<float> yp(T * C, -1.0f);
    ASSERT_TRUE(br->forward(xb, 2, yp.data(), s2, ws, cx).ok());
    ASSERT_TRUE(br->forward(xb + 2 * C, 5, yp.data() + 2 * C, s2, ws, cx).ok());
    ASSERT_TRUE(br->forward(xb + 7 * C, T - 7, yp.data() + 7 * C, s2, ws, cx).ok());
    EXPECT_LE(rel_err(yp.data(), y.data(), T * C), 1e-6) << "split prefill";
    EXPECT_EQ(s2.n, T);
  }
  std::printf("[ figures  ] %s vs nanochat: rel err %.3g; prefill vs steps %.3g\n", ec.name, worst, worst_pv);
}

TEST(engram, GoldenDefault) { check_engram_golden({"nanochat_engram__default", 32, "2,3,4", 0}); }
TEST(engram, GoldenCustomOrders) { check_engram_golden({"nanochat_engram__custom_orders", 24, "3,1,5,3", 12}); }

TEST(engram, ParseOrders) {
  using V = std::vector<std::size_t>;
  auto p = [](const char* s) { return slm::parse_engram_orders(s); };
  EXPECT_EQ(*p("3,1,5,3"), (V{3, 1, 5}));
  EXPECT_EQ(*p("2,3,4"), (V{2, 3, 4}));
  EXPECT_EQ(*p(""), (V{2, 3, 4}));
  EXPECT_EQ(*p("0,-1"), (V{2, 3, 4}));
  EXPECT_EQ(*p(" 2 , ,+4,"), (V{2, 4}));
  EXPECT_TRUE(fails_with(p("2,x"), slm::errc::invalid_argument, {"'x' is not an integer"}));
  EXPECT_TRUE(fails_with(p("2.5"), slm::errc::invalid_argument, {"not an integer"}));
  EXPECT_TRUE(fails_with(p("99999"), slm::errc::out_of_range, {"99999"}));
  auto c = slm::engram_config::make(32);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->bottleneck(), 8u);
  EXPECT_EQ(c->history(), 3u);
  EXPECT_EQ(slm::engram_config::make(3)->bottleneck(), 1u);
  EXPECT_EQ(slm::nanochat::engram_prefix(4), "transformer.h.4.engram");
}

TEST(engram, ConfigAndShapeErrors) {
  EXPECT_TRUE(fails_with(slm::engram_config::make(0), slm::errc::invalid_argument, {"n_embd"}));
  slm::engram_config bad;
  bad.n_embd = 8;
  bad.orders = {2, 2};
  EXPECT_TRUE(fails_with(bad.validate(), slm::errc::invalid_argument, {"appears twice"}));
  bad.orders = {};
  EXPECT_TRUE(fails_with(bad.validate(), slm::errc::invalid_argument, {"no ngram orders"}));
  bad.orders = {0};
  EXPECT_TRUE(fails_with(bad.validate(), slm::errc::invalid_argument, {"order 0"}));

  golden g = load_golden("nanochat_engram__default");
  ASSERT_TRUE(g.ck);
  // Wrong bottleneck: in_proj is [8, 32].
  EXPECT_TRUE(fails_with(slm::nanochat::load_engram(*g.ck, "", *slm::engram_config::make(32, "2,3,4", 16)),
                         slm::errc::format_error, {"in_proj", "[8, 32]", "[16, 32]"}));
  // Wrong width.
  EXPECT_TRUE(fails_with(slm::nanochat::load_engram(*g.ck, "", *slm::engram_config::make(40, "2,3,4", 8)),
                         slm::errc::format_error, {"in_proj"}));
  // Fewer orders than the checkpoint has order_mix modules; more orders than it has.
  EXPECT_TRUE(fails_with(slm::nanochat::load_engram(*g.ck, "", *slm::engram_config::make(32, "2,3")),
                         slm::errc::format_error, {"order_mix.2.weight", "2 ngram orders"}));
  EXPECT_TRUE(fails_with(slm::nanochat::load_engram(*g.ck, "", *slm::engram_config::make(32, "2,3,4,5")),
                         slm::errc::not_found, {"order_mix.3"}));
  // A prefix the checkpoint lacks.
  EXPECT_TRUE(fails_with(slm::nanochat::load_engram(*g.ck, slm::nanochat::engram_prefix(0),
                                                   *slm::engram_config::make(32)),
                         slm::errc::not_found, {"transformer.h.0.engram.in_proj"}));

  auto br = slm::nanochat::load_engram(*g.ck, "", *slm::engram_config::make(32));
  ASSERT_TRUE(br.ok());
  slm::workspace ws;
  slm::serial_executor serial;
  slm::compute_context cx{serial};
  std::vector<float> x(32, 0.5f), y(32);
  slm::engram_state st;  // not initialised
  EXPECT_TRUE(fails_with(br->step(x.data(), y.data(), st, ws, cx), slm::errc::invalid_argument, {"init_state"}));
  ASSERT_TRUE(br->init_state(st).ok());
  EXPECT_TRUE(fails_with(br->step(nullptr, y.data(), st, ws, cx), slm::errc::invalid_argument, {"null"}));
  EXPECT_EQ(st.n, 0u);  // untouched by the failures
  // A state of another config (orders up to 5: 4 vectors of history).
  slm::engram_branch other = std::move(*slm::nanochat::load_engram(*g.ck, "", *slm::engram_config::make(32)));
  other.cfg.orders = {2, 3, 5};
  slm::engram_state big;
  ASSERT_TRUE(other.init_state(big).ok());
  EXPECT_TRUE(fails_with(br->step(x.data(), y.data(), big, ws, cx), slm::errc::invalid_argument, {"state holds"}));
}

// Under nanochat's full state-dict names, with the decoder cache: snapshot / rollback.
TEST(engram, PrefixedNamesCacheAndSnapshot) {
  golden g = load_golden("nanochat_engram__custom_orders");
  ASSERT_TRUE(g.file);
  const std::string pre = slm::nanochat::engram_prefix(5);
  std::vector<std::pair<std::string, std::pair<std::vector<float>, slm::shape>>> ts;
  for (const char* n : {"in_proj.weight", "order_mix.0.weight", "order_mix.1.weight", "order_mix.2.weight",
                        "out_proj.weight"}) {
    const auto s = g.shape(n);
    ts.push_back({pre + "." + n, {g.tensor(n), slm::shape{s[0], s[1]}}});
  }
  written_ck w = write_ck("engram_prefixed", ts);
  ASSERT_TRUE(w.ck);
  auto br = slm::nanochat::load_engram(*w.ck, pre, *slm::engram_config::make(24, "3,1,5,3", 12));
  ASSERT_TRUE(br.ok()) << br.error().message();
  const std::size_t T = 9, C = 24;
  const auto x = g.tensor("in/x"), yref = g.tensor("out/y");
  slm::workspace ws;
  slm::serial_executor serial;
  slm::compute_context cx{serial};
  struct options {
    std::size_t rollback_tokens = 3;
  };
  slm::engram_branch::cache c;
  ASSERT_TRUE(br->init_cache(c, options{}).ok());
  std::vector<float> y(T * C), y2(T * C);
  ASSERT_TRUE(br->forward(x.data(), 6, y.data(), c, ws, cx).ok());
  ASSERT_TRUE(br->forward(x.data() + 6 * C, 3, y.data() + 6 * C, c, ws, cx).ok());
  EXPECT_LE(rel_err(y.data(), yref.data(), T * C), kTol);
  // Roll back two tokens and redo them (a call of 2 tokens instead of 3: equal up to the
  // products' blocking).
  ASSERT_TRUE(c.can_truncate(7));
  c.truncate(7);
  EXPECT_EQ(c.state().n, 7u);
  ASSERT_TRUE(br->forward(x.data() + 7 * C, 2, y2.data(), c, ws, cx).ok());
  EXPECT_LE(rel_err(y2.data(), y.data() + 7 * C, 2 * C), 1e-6);
  // Snapshot with copy_from, advance, restore, redo the same call: the same bits.
  slm::engram_state st, snap;
  ASSERT_TRUE(br->init_state(st).ok());
  ASSERT_TRUE(br->forward(x.data(), 4, y2.data(), st, ws, cx).ok());
  ASSERT_TRUE(snap.copy_from(st).ok());
  std::vector<float> ya(5 * C), yb(5 * C, -1.0f);
  ASSERT_TRUE(br->forward(x.data() + 4 * C, 5, ya.data(), st, ws, cx).ok());
  EXPECT_EQ(st.n, 9u);
  EXPECT_LE(rel_err(ya.data(), yref.data() + 4 * C, 5 * C), kTol);
  ASSERT_TRUE(st.copy_from(snap).ok());
  EXPECT_EQ(st.n, 4u);
  ASSERT_TRUE(br->forward(x.data() + 4 * C, 5, yb.data(), st, ws, cx).ok());
  EXPECT_EQ(ya, yb);
}

// ---------------------------------------------------------------------------------
// mHC

struct mhc_case {
  const char* name;
  slm::mhc_config cfg;
  std::size_t N;
};

void check_mhc_golden(const mhc_case& mc) {
  golden g = load_golden(mc.name);
  ASSERT_TRUE(g.ck);
  auto m = slm::nanochat::load_mhc(*g.ck, "", mc.cfg);
  ASSERT_TRUE(m.ok()) << m.error().message();
  const auto s0 = g.shape("in/branch.0");
  ASSERT_EQ(s0.size(), 3u);
  const std::size_t B = static_cast<std::size_t>(s0[0]), T = static_cast<std::size_t>(s0[1]), C = mc.cfg.n_embd,
                    N = mc.N;
  std::vector<std::vector<float>> br;
  for (std::size_t n = 0; n < N; ++n) br.push_back(g.tensor("in/branch." + std::to_string(n)));
  const auto yref = g.tensor("out/y"), rawref = g.tensor("mid/raw_matrix"), tref = g.tensor("mid/transport");
  ASSERT_EQ(rawref.size(), B * N * N);
  slm::workspace ws;
  slm::serial_executor serial;
  slm::compute_context cx{serial};
  double worst_y = 0, worst_raw = 0, worst_t = 0, worst_sk = 0;
  for (std::size_t b = 0; b < B; ++b) {
    std::vector<const float*> ptrs;
    for (std::size_t n = 0; n < N; ++n) ptrs.push_back(br[n].data() + b * T * C);
    std::vector<float> y(T * C, -1.0f), raw(N * N), tr(N * N);
    bool fell = true;
    ASSERT_TRUE(m->forward(ptrs, T, y.data(), ws, cx, {raw.data(), tr.data(), &fell}).ok());
    EXPECT_FALSE(fell);
    const double ey = rel_err(y.data(), yref.data() + b * T * C, T * C);
    const double er = rel_err(raw.data(), rawref.data() + b * N * N, N * N);
    const double et = rel_err(tr.data(), tref.data() + b * N * N, N * N);
    EXPECT_LE(ey, kTol) << mc.name << " batch " << b;
    EXPECT_LE(er, kTol);
    EXPECT_LE(et, kTol);
    // Sinkhorn alone on the golden raw matrix.
    std::vector<float> sk(N * N);
    slm::mhc_sinkhorn(rawref.data() + b * N * N, N, mc.cfg.sinkhorn_iters, static_cast<float>(mc.cfg.epsilon),
                      sk.data());
    const double es = rel_err(sk.data(), tref.data() + b * N * N, N * N);
    EXPECT_LE(es, 1e-5);
    worst_y = std::max(worst_y, ey);
    worst_raw = std::max(worst_raw, er);
    worst_t = std::max(worst_t, et);
    worst_sk = std::max(worst_sk, es);
    // In place: the output over branch 0.
    std::vector<float> b0(ptrs[0], ptrs[0] + T * C);
    std::vector<const float*> ptrs2 = ptrs;
    ptrs2[0] = b0.data();
    ASSERT_TRUE(m->forward(ptrs2, T, b0.data(), ws, cx).ok());
    EXPECT_EQ(b0, y);
    // Weights sum to 1 (up to eps).
    std::vector<float> w(N);
    ASSERT_TRUE(m->weights(ptrs, T, w.data(), ws, cx).ok());
    float sw = 0;
    for (float v : w) sw += v;
    EXPECT_NEAR(sw, 1.0f, 1e-5f);
  }
  std::printf("[ figures  ] %s vs nanochat: y %.3g, raw %.3g, transport %.3g, sinkhorn alone %.3g\n", mc.name,
              worst_y, worst_raw, worst_t, worst_sk);
}

TEST(mhc, GoldenTwoBranches) {
  slm::mhc_config c;
  c.n_embd = 32;
  check_mhc_golden({"nanochat_mhc__two_branches", c, 2});
}
TEST(mhc, GoldenThreeBranchesAlpha) {
  slm::mhc_config c;
  c.n_embd = 40;
  c.sinkhorn_iters = 3;
  c.temperature = 0.7;
  c.blend_alpha = 0.6;
  check_mhc_golden({"nanochat_mhc__three_branches_alpha", c, 3});
}

TEST(mhc, EdgeCasesAndErrors) {
  slm::mhc_config c;
  c.n_embd = 40;
  EXPECT_EQ(c.hidden(), 10u);
  c.n_embd = 4;
  EXPECT_EQ(c.hidden(), 8u);
  c.n_embd = 4096;
  EXPECT_EQ(c.hidden(), 256u);
  c.n_embd = 0;
  EXPECT_TRUE(fails_with(c.validate(), slm::errc::invalid_argument, {"n_embd"}));
  c.n_embd = 32;
  c.temperature = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(fails_with(c.validate(), slm::errc::invalid_argument, {"finite"}));
  c.temperature = 0;
  c.epsilon = 0;
  EXPECT_TRUE(fails_with(c.validate(), slm::errc::invalid_argument, {"must be positive"}));
  c.temperature = 1;
  c.epsilon = 1e-6;
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(slm::nanochat::mhc_prefix(2), "transformer.h.2.mhc");

  golden g = load_golden("nanochat_mhc__two_branches");
  ASSERT_TRUE(g.ck);
  slm::mhc_config wrong = c;
  wrong.n_embd = 64;  // hidden 16, score_proj is [8, 32]
  EXPECT_TRUE(fails_with(slm::nanochat::load_mhc(*g.ck, "", wrong), slm::errc::format_error,
                         {"score_proj", "[8, 32]", "[16, 64]"}));
  EXPECT_TRUE(fails_with(slm::nanochat::load_mhc(*g.ck, slm::nanochat::mhc_prefix(1), c), slm::errc::not_found,
                         {"transformer.h.1.mhc.score_proj"}));
  auto m = slm::nanochat::load_mhc(*g.ck, "", c);
  ASSERT_TRUE(m.ok());
  const std::size_t T = 13, C = 32;
  const auto b0 = g.tensor("in/branch.0"), b1 = g.tensor("in/branch.1");
  slm::workspace ws;
  slm::serial_executor serial;
  slm::compute_context cx{serial};
  std::vector<float> y(T * C);
  // One branch: returned unchanged.
  const float* one[] = {b0.data()};
  ASSERT_TRUE(m->forward(one, T, y.data(), ws, cx).ok());
  EXPECT_EQ(0, std::memcmp(y.data(), b0.data(), T * C * sizeof(float)));
  // No branch, no token, null pointers, too many branches.
  EXPECT_TRUE(fails_with(m->forward(std::span<const float* const>{}, T, y.data(), ws, cx),
                         slm::errc::invalid_argument, {"no branches"}));
  const float* two[] = {b0.data(), b1.data()};
  EXPECT_TRUE(fails_with(m->forward(two, 0, y.data(), ws, cx), slm::errc::invalid_argument, {"no tokens"}));
  const float* with_null[] = {b0.data(), nullptr};
  EXPECT_TRUE(fails_with(m->forward(with_null, T, y.data(), ws, cx), slm::errc::invalid_argument, {"null branch"}));
  EXPECT_TRUE(fails_with(m->forward(two, T, nullptr, ws, cx), slm::errc::invalid_argument, {"null output"}));
  slm::mhc_mixer lim = std::move(*slm::nanochat::load_mhc(*g.ck, "", c));
  lim.cfg.max_branches = 1;
  EXPECT_TRUE(fails_with(lim.forward(two, T, y.data(), ws, cx), slm::errc::invalid_argument,
                         {"too many branches", "max_branches=1"}));
  std::vector<const float*> many(65, b0.data());
  EXPECT_TRUE(fails_with(m->forward(many, T, y.data(), ws, cx), slm::errc::out_of_range, {"65 branches"}));
  // A NaN in a branch makes the transport non-finite: uniform weights, as nanochat.
  std::vector<float> bad = b1;
  bad[5] = std::numeric_limits<float>::quiet_NaN();
  const float* nan_two[] = {b0.data(), bad.data()};
  float w[2] = {0, 0};
  bool fell = false;
  ASSERT_TRUE(m->weights(nan_two, T, w, ws, cx, {nullptr, nullptr, &fell}).ok());
  EXPECT_TRUE(fell);
  EXPECT_EQ(w[0], 0.5f);
  EXPECT_EQ(w[1], 0.5f);
}

}  // namespace
