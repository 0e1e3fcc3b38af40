// Token-level ensemble strategies (slm/ensemble/mixing.hpp, cross_speculative.hpp):
// mixing against hand-computed mixtures, temperature and weight fitting on synthetic data
// whose true values are known, generation from a mixture and speculative decoding across
// the shipped members (models/nam56r-cpp-14m, -cmake-10m, -shell-10m share one tokenizer).
//
// Tolerances: mixing is computed in double, so a 3-token case matches the formula written
// out here (in long double) to 1e-12. Real-member checks are identities (same tokens):
// they run with f32 quantized activations, where a several-row forward and one-row
// forwards round alike (the bf16 activation path does not - a known issue).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "slm/ensemble/cross_speculative.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/ensemble/mixing.hpp"
#include "slm/core/parallel.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/text/tokenizer.hpp"
#include "test_helpers.hpp"

namespace {

using namespace slm::ensemble;
using slm::errc;
using slm_test::fails_with;

using rows_t = std::vector<std::span<const float>>;

// ---- Mixing on a small case ----

TEST(EnsembleMixing, EqualsHandComputedMixture) {
  // Two members over a 3-token vocabulary; member 1 has a padded head (a 4th row, not read).
  const std::vector<float> z0 = {1.0f, 2.0f, 0.5f}, z1 = {0.0f, -1.0f, 3.0f, 99.0f};
  const double t0 = 0.7, t1 = 1.5;
  const std::vector<double> w = {3.0, 1.0};  // normalised to 0.75, 0.25
  auto m = token_mixture::create(w, std::vector<double>{t0, t1}, 3);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_DOUBLE_EQ(m->weights()[0], 0.75);
  std::vector<double> log_p(3);
  ASSERT_TRUE(m->mix(rows_t{z0, z1}, log_p).ok());
  // p(v) = 0.75 e^{z0_v/t0} / sum_u e^{z0_u/t0} + 0.25 e^{z1_v/t1} / sum_u e^{z1_u/t1}
  long double s0 = 0, s1 = 0;
  for (int v = 0; v < 3; ++v) {
    s0 += std::exp(static_cast<long double>(z0[v]) / t0);
    s1 += std::exp(static_cast<long double>(z1[v]) / t1);
  }
  double total = 0;
  for (int v = 0; v < 3; ++v) {
    const long double p = 0.75L * std::exp(static_cast<long double>(z0[v]) / t0) / s0 +
                          0.25L * std::exp(static_cast<long double>(z1[v]) / t1) / s1;
    EXPECT_NEAR(log_p[v], static_cast<double>(std::log(p)), 1e-12) << v;
    EXPECT_NEAR(std::exp(log_p[v]), static_cast<double>(p), 1e-12) << v;
    total += std::exp(log_p[v]);
  }
  EXPECT_NEAR(total, 1.0, 1e-12);

  // The sampler's row: log p shifted so its maximum is 0; temperature 1 samples p itself.
  std::vector<float> row(3);
  ASSERT_TRUE(m->logits(rows_t{z0, z1}, log_p, row).ok());
  const double mx = std::max({log_p[0], log_p[1], log_p[2]});
  for (int v = 0; v < 3; ++v) EXPECT_FLOAT_EQ(row[v], static_cast<float>(log_p[v] - mx));
  slm::sampler smp(slm::sampler_config{});
  std::vector<float> probs;
  ASSERT_TRUE(smp.distribution(row, {}, probs).ok());
  for (int v = 0; v < 3; ++v) EXPECT_NEAR(probs[v], std::exp(log_p[v]), 1e-6) << v;  // float probabilities
}

TEST(EnsembleMixing, OneMemberAtWeightOneIsItsSoftmax) {
  const std::vector<float> z0 = {0.3f, -2.0f, 4.0f, 1.0f}, z1 = {5.0f, 5.0f, -5.0f, 0.0f};
  auto m = token_mixture::create(std::vector<double>{0.0, 1.0}, std::vector<double>{1.0, 2.0}, 4);
  ASSERT_TRUE(m.ok());
  std::vector<double> log_p(4);
  ASSERT_TRUE(m->mix(rows_t{z0, z1}, log_p).ok());
  double s = 0;
  for (float z : z1) s += std::exp(z / 2.0);
  for (int v = 0; v < 4; ++v) EXPECT_NEAR(log_p[v], z1[v] / 2.0 - std::log(s), 1e-14) << v;
  // A member of weight 0 is not read: an empty row is fine.
  ASSERT_TRUE(m->mix(rows_t{std::span<const float>{}, z1}, log_p).ok());
}

TEST(EnsembleMixing, BadInputIsAnError) {
  const std::vector<double> t2 = {1.0, 1.0};
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{}, std::vector<double>{}, 3), errc::invalid_argument,
                         {"no members"}));
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{0.0, 0.0}, t2, 3), errc::invalid_argument,
                         {"sum to 0"}));
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{1.0, -0.5}, t2, 3), errc::invalid_argument,
                         {"weight 1", "-0.5", ">= 0"}));
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{1.0, std::nan("")}, t2, 3), errc::invalid_argument,
                         {"weight 1", "finite"}));
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{1.0, 1.0}, std::vector<double>{1.0, 0.0}, 3),
                         errc::invalid_argument, {"member 1", "temperature 0"}));
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{1.0, 1.0}, std::vector<double>{-1.0, 1.0}, 3),
                         errc::invalid_argument, {"member 0", "temperature -1"}));
  EXPECT_TRUE(fails_with(token_mixture::create(std::vector<double>{1.0}, t2, 3), errc::invalid_argument,
                         {"1 weights but 2 temperatures"}));
  auto m = token_mixture::create(std::vector<double>{1.0, 1.0}, t2, 3);
  ASSERT_TRUE(m.ok());
  const std::vector<float> ok3 = {1, 2, 3}, short2 = {1, 2}, nan3 = {1, std::nanf(""), 3};
  std::vector<double> log_p(3);
  EXPECT_TRUE(fails_with(m->mix(rows_t{ok3, short2}, log_p), errc::invalid_argument,
                         {"member 1", "row of 2 entries", "vocabulary of 3"}));
  EXPECT_TRUE(fails_with(m->mix(rows_t{ok3}, log_p), errc::invalid_argument, {"1 logit rows for 2 members"}));
  EXPECT_TRUE(fails_with(m->mix(rows_t{nan3, ok3}, log_p), errc::invalid_argument, {"member 0 logit 1 is NaN"}));
  std::vector<double> small(2);
  EXPECT_TRUE(fails_with(m->mix(rows_t{ok3, ok3}, small), errc::invalid_argument, {"output has 2"}));
}

// ---- Routing weights ----

TEST(EnsembleMixing, RoutingWeights) {
  const std::vector<std::size_t> ranked = {2, 0, 1};
  const std::vector<double> logit_scores = {1.0, 0.0, -3.0};
  auto top1 = routing_weights(3, ranked, logit_scores, routing::top1);
  ASSERT_TRUE(top1.ok());
  EXPECT_EQ(*top1, (std::vector<double>{0.0, 0.0, 1.0}));
  auto top2 = routing_weights(3, ranked, logit_scores, routing::top2);
  ASSERT_TRUE(top2.ok());
  const double e = std::exp(1.0);
  EXPECT_NEAR((*top2)[2], e / (e + 1.0), 1e-15);
  EXPECT_NEAR((*top2)[0], 1.0 / (e + 1.0), 1e-15);
  EXPECT_EQ((*top2)[1], 0.0);
  auto prob2 = routing_weights(3, ranked, std::vector<double>{0.6, 0.2, 0.2}, routing::top2, router_scores::probabilities);
  ASSERT_TRUE(prob2.ok());
  EXPECT_NEAR((*prob2)[2], 0.75, 1e-15);
  EXPECT_NEAR((*prob2)[0], 0.25, 1e-15);
  EXPECT_TRUE(fails_with(routing_weights(3, std::vector<std::size_t>{2}, std::vector<double>{1.0}, routing::top2),
                         errc::invalid_argument, {"top-2 needs 2"}));
  EXPECT_TRUE(fails_with(routing_weights(2, ranked, logit_scores, routing::top1), errc::out_of_range,
                         {"names member 2 of 2"}));
}

// ---- Calibration ----

// Rows of iid N(0, 3^2) logits over `vocab` tokens, targets drawn from softmax(z / t_true).
slm::ensemble::heldout_rows synthetic_rows(std::size_t n, std::size_t vocab, double t_true, std::uint64_t seed) {
  slm::rng g(seed);
  heldout_rows h;
  h.vocab = vocab;
  h.logits.resize(n * vocab);
  std::vector<double> p(vocab);
  for (std::size_t r = 0; r < n; ++r) {
    double s = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      // Box-Muller
      const double u1 = 1.0 - g.uniform(), u2 = g.uniform();
      const double z = 3.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
      h.logits[r * vocab + v] = static_cast<float>(z);
      s += (p[v] = std::exp(static_cast<double>(h.logits[r * vocab + v]) / t_true));
    }
    double u = g.uniform() * s, c = 0;
    std::size_t y = vocab - 1;
    for (std::size_t v = 0; v < vocab; ++v)
      if ((c += p[v]) > u) {
        y = v;
        break;
      }
    h.targets.push_back(static_cast<std::int32_t>(y));
  }
  return h;
}

TEST(EnsembleMixing, TemperatureFitRecoversTheTrueTemperature) {
  // The fit is the maximum-likelihood estimate of beta = 1/T in a one-parameter
  // exponential family, so it is consistent with standard deviation 1 / sqrt(n I), I the
  // per-token Fisher information = mean Var_p[z] at the true beta; T's is T^2 times that.
  // Computed below: n = 20000 gives sd(T) ~ 0.02, so |T - 2| < 0.1 is a 5-sigma bound
  // (and the rng is seeded: the outcome is fixed).
  const std::size_t n = 20000, vocab = 32;
  const heldout_rows h = synthetic_rows(n, vocab, 2.0, 42);
  auto f = fit_temperature(h);
  ASSERT_TRUE(f.ok()) << f.error().message();
  double info = 0;
  for (std::size_t r = 0; r < n; ++r) {
    double s0 = 0, s1 = 0, s2 = 0;
    for (std::size_t v = 0; v < vocab; ++v) {
      const double z = h.logits[r * vocab + v], e = std::exp(z / 2.0);
      s0 += e;
      s1 += e * z;
      s2 += e * z * z;
    }
    info += s2 / s0 - (s1 / s0) * (s1 / s0);
  }
  info /= static_cast<double>(n);
  const double sd_t = 4.0 / std::sqrt(static_cast<double>(n) * info);
  std::printf("fitted T %.4f (true 2, sd %.4f), %zu Newton iterations, NLL %.4f (T=1: %.4f)\n", f->temperature, sd_t,
              f->iterations, f->nll, f->nll_at_1);
  EXPECT_LT(sd_t, 0.03);
  EXPECT_NEAR(f->temperature, 2.0, 0.1);
  EXPECT_FALSE(f->at_bound);
  // A minimum: neighbours are no better.
  EXPECT_LE(f->nll, h.mean_nll(f->temperature * 1.01) + 1e-12);
  EXPECT_LE(f->nll, h.mean_nll(f->temperature / 1.01) + 1e-12);
  EXPECT_LT(f->nll, f->nll_at_1);

  // Targets that are always the largest logit: the NLL falls as T falls, to the bound.
  heldout_rows sharp = synthetic_rows(200, 8, 1.0, 7);
  for (std::size_t r = 0; r < sharp.size(); ++r) {
    const float* z = sharp.logits.data() + r * 8;
    sharp.targets[r] = static_cast<std::int32_t>(std::max_element(z, z + 8) - z);
  }
  auto fs = fit_temperature(sharp);
  ASSERT_TRUE(fs.ok());
  EXPECT_TRUE(fs->at_bound);
  EXPECT_EQ(fs->temperature, 0.05);

  heldout_rows empty;
  empty.vocab = 8;
  EXPECT_TRUE(fails_with(fit_temperature(empty), errc::invalid_argument, {"no held-out tokens"}));
  heldout_rows bad = synthetic_rows(4, 8, 1.0, 1);
  bad.targets[2] = 8;
  EXPECT_TRUE(fails_with(fit_temperature(bad), errc::out_of_range, {"target 2", "id 8"}));
}

TEST(EnsembleMixing, EmRecoversMixtureWeights) {
  // Tokens drawn from a known mixture of 3 random members (iid N(0, 3^2) logits over 16
  // tokens per position): EM on the members' probabilities of the drawn tokens is the
  // maximum-likelihood estimate of the weights, whose sd here is below
  // sqrt(w (1 - w) / n) / (efficiency ~0.5) ~ 0.005 for n = 20000; the bound 0.02 is 4 sd.
  const std::size_t n = 20000, vocab = 16, M = 3;
  const std::vector<double> truth = {0.6, 0.3, 0.1};
  slm::rng g(123);
  std::vector<double> log_probs(n * M), lp(M * vocab);
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t i = 0; i < M; ++i) {
      double mx = -1e300, s = 0;
      for (std::size_t v = 0; v < vocab; ++v) {
        const double u1 = 1.0 - g.uniform(), u2 = g.uniform();
        lp[i * vocab + v] = 3.0 * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * 3.141592653589793 * u2);
        mx = std::max(mx, lp[i * vocab + v]);
      }
      for (std::size_t v = 0; v < vocab; ++v) s += std::exp(lp[i * vocab + v] - mx);
      for (std::size_t v = 0; v < vocab; ++v) lp[i * vocab + v] -= mx + std::log(s);
    }
    double u = g.uniform();
    std::size_t member = M - 1;
    for (std::size_t i = 0; i < M; ++i)
      if ((u -= truth[i]) < 0) {
        member = i;
        break;
      }
    double w = g.uniform(), c = 0;
    std::size_t y = vocab - 1;
    for (std::size_t v = 0; v < vocab; ++v)
      if ((c += std::exp(lp[member * vocab + v])) > w) {
        y = v;
        break;
      }
    for (std::size_t i = 0; i < M; ++i) log_probs[t * M + i] = lp[i * vocab + y];
  }
  auto f = fit_mixture_weights(log_probs, M);
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::printf("EM weights %.4f %.4f %.4f (true 0.6 0.3 0.1) after %zu iterations\n", f->weights[0], f->weights[1],
              f->weights[2], f->iterations);
  for (std::size_t i = 0; i < M; ++i) EXPECT_NEAR(f->weights[i], truth[i], 0.02) << i;
  // EM's fixed point is the maximum: moving weight between members lowers the likelihood.
  const auto ll = [&](const std::vector<double>& w) {
    double s = 0;
    for (std::size_t t = 0; t < n; ++t) {
      double p = 0;
      for (std::size_t i = 0; i < M; ++i) p += w[i] * std::exp(log_probs[t * M + i]);
      s += std::log(p);
    }
    return s / static_cast<double>(n);
  };
  const double best = ll(f->weights);
  EXPECT_NEAR(best, f->mean_log_likelihood, 1e-8);
  for (std::size_t a = 0; a < M; ++a)
    for (std::size_t b = 0; b < M; ++b)
      if (a != b) {
        std::vector<double> w = f->weights;
        w[a] += 0.01;
        w[b] -= 0.01;
        EXPECT_LT(ll(w), best) << a << "->" << b;
      }
  EXPECT_TRUE(fails_with(fit_mixture_weights(std::vector<double>{-1.0, -2.0, -3.0}, 2), errc::invalid_argument,
                         {"3 log-probabilities", "2 members"}));
  EXPECT_TRUE(fails_with(fit_mixture_weights(std::vector<double>{-1.0, 0.5}, 2), errc::invalid_argument,
                         {"log-probability 1 is 0.5"}));
  EXPECT_TRUE(fails_with(fit_mixture_weights(std::vector<double>{}, 0), errc::invalid_argument, {"no members"}));
}

// ---- The shipped members ----

const std::string models = SLM_MODELS_DIR;

struct shipped {
  slm::tokenizer tok;
  member_model cpp, cmake, shell;
};

const shipped* members() {
  static const shipped* s = []() -> const shipped* {
    auto tok = slm::tokenizer::load_dir(models + "/nam56r-cpp-14m");
    auto cpp = member_model::load(models + "/nam56r-cpp-14m");
    auto cmake = member_model::load(models + "/nam56r-cmake-10m");
    auto shell = member_model::load(models + "/nam56r-shell-10m");
    if (!tok.ok() || !cpp.ok() || !cmake.ok() || !shell.ok()) {
      ADD_FAILURE() << "loading the shipped members: "
                    << (!tok.ok() ? tok.error().message()
                        : !cpp.ok() ? cpp.error().message()
                        : !cmake.ok() ? cmake.error().message()
                                      : shell.error().message());
      return nullptr;
    }
    return new shipped{std::move(*tok), std::move(*cpp), std::move(*cmake), std::move(*shell)};
  }();
  return s;
}

member_ref ref(const shipped& s, const member_model& m, std::string_view name, float t = 1.0f) {
  return member_ref{&m, &s.tok, name, t};
}

std::vector<std::int32_t> encode(const shipped& s, std::string_view text) {
  auto ids = s.tok.encode(text, slm::encode_options{false, false});
  EXPECT_TRUE(ids.ok());
  return ids.ok() ? *ids : std::vector<std::int32_t>{};
}

const char* cpp_prompt =
    "#include <vector>\n#include <string>\n\nnamespace util {\n\n// Splits s at every occurrence of sep.\n"
    "std::vector<std::string> split(const std::string& s, char sep) {\n";

// Plain greedy decoding with one-row forwards: the reference every identity is held to.
std::vector<std::int32_t> greedy(const member_model& m, std::span<const std::int32_t> prompt, std::size_t n,
                                 std::size_t vocab, slm::compute_context& cx, double* seconds = nullptr) {
  const auto t0 = std::chrono::steady_clock::now();
  auto s = m.new_session();
  std::vector<float> row(m.vocab());
  std::vector<std::int32_t> out;
  EXPECT_TRUE(s.forward(prompt, 1, row.data(), cx).ok());
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<std::int32_t>(std::max_element(row.begin(), row.begin() + vocab) - row.begin());
    out.push_back(id);
    if (i + 1 < n) {
      EXPECT_TRUE(s.forward(std::span(&id, 1), 1, row.data(), cx).ok());
    }
  }
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

slm::compute_context f32_context(slm::serial_executor& ex) {
  slm::compute_context cx{ex};
  cx.quantized_activations = slm::activation_precision::f32;
  return cx;
}

TEST(EnsembleMixingMembers, OneMemberAtWeightOneIsItsGreedyOutput) {
  const shipped* s = members();
  ASSERT_NE(s, nullptr);
  slm::serial_executor ex;
  slm::compute_context cx = f32_context(ex);
  const auto prompt = encode(*s, cpp_prompt);
  const std::size_t vocab = s->tok.vocab_size();
  const auto ref_tokens = greedy(s->cpp, prompt, 24, vocab, cx);
  const std::vector<member_ref> all = {ref(*s, s->cmake, "cmake"), ref(*s, s->cpp, "cpp"), ref(*s, s->shell, "shell")};
  mixture_options o;
  o.max_new_tokens = 24;
  o.sampling.temperature = 0.0f;
  auto r = generate_mixture(all, std::vector<double>{0.0, 1.0, 0.0}, prompt, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->tokens, ref_tokens);
  ASSERT_EQ(r->log_probs.size(), r->tokens.size());
  for (double lp : r->log_probs) EXPECT_TRUE(lp <= 0.0 && lp > -50.0) << lp;

  // Top-1 routing is the same run.
  auto routed = generate_routed(all, std::vector<std::size_t>{1, 0, 2}, std::vector<double>{2.0, 1.0, 0.0},
                                routing::top1, router_scores::logits, prompt, o, cx);
  ASSERT_TRUE(routed.ok());
  EXPECT_EQ(routed->tokens, ref_tokens);
}

TEST(EnsembleMixingMembers, TwoMemberMixtureFollowsTheMixedRows) {
  const shipped* s = members();
  ASSERT_NE(s, nullptr);
  slm::serial_executor ex;
  slm::compute_context cx = f32_context(ex);
  const auto prompt = encode(*s, "cmake_minimum_required(VERSION 3.16)\nproject(demo CXX)\n\nadd_executable(");
  const std::size_t vocab = s->tok.vocab_size();
  const std::vector<member_ref> two = {ref(*s, s->cpp, "cpp", 1.3f), ref(*s, s->cmake, "cmake", 0.9f)};
  mixture_options o;
  o.max_new_tokens = 6;
  o.sampling.seed = 11;
  auto r = generate_mixture(two, std::vector<double>{0.4, 0.6}, prompt, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->tokens.size(), 6u);
  // Replays the run by hand: each member's rows, the mixture written out, the same draws.
  auto a = s->cpp.new_session(), b = s->cmake.new_session();
  std::vector<float> ra(s->cpp.vocab()), rb(s->cmake.vocab());
  ASSERT_TRUE(a.forward(prompt, 1, ra.data(), cx).ok());
  ASSERT_TRUE(b.forward(prompt, 1, rb.data(), cx).ok());
  for (std::size_t i = 0; i < r->tokens.size(); ++i) {
    const std::int32_t y = r->tokens[i];
    double sa = 0, sb = 0;
    const double ta = static_cast<double>(1.3f), tb = static_cast<double>(0.9f);  // member_ref holds float
    for (std::size_t v = 0; v < vocab; ++v) {
      sa += std::exp(static_cast<double>(ra[v]) / ta - ra[static_cast<std::size_t>(y)] / ta);
      sb += std::exp(static_cast<double>(rb[v]) / tb - rb[static_cast<std::size_t>(y)] / tb);
    }
    const double p = 0.4 / sa + 0.6 / sb;  // 0.4 softmax_a(y) + 0.6 softmax_b(y)
    EXPECT_NEAR(r->log_probs[i], std::log(p), 1e-9) << i;
    ASSERT_TRUE(a.forward(std::span(&y, 1), 1, ra.data(), cx).ok());
    ASSERT_TRUE(b.forward(std::span(&y, 1), 1, rb.data(), cx).ok());
  }
  // The same seed, the same tokens.
  auto again = generate_mixture(two, std::vector<double>{0.4, 0.6}, prompt, o, cx);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, r->tokens);
}

TEST(EnsembleMixingMembers, BadInputIsAnError) {
  const shipped* s = members();
  ASSERT_NE(s, nullptr);
  slm::serial_executor ex;
  slm::compute_context cx{ex};
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  mixture_options o;
  o.max_new_tokens = 2;
  EXPECT_TRUE(fails_with(generate_mixture({}, {}, prompt, o, cx), errc::invalid_argument, {"no members"}));
  const std::vector<member_ref> two = {ref(*s, s->cpp, "cpp"), ref(*s, s->cmake, "cmake")};
  EXPECT_TRUE(fails_with(generate_mixture(two, std::vector<double>{0.0, 0.0}, prompt, o, cx), errc::invalid_argument,
                         {"sum to 0"}));
  EXPECT_TRUE(fails_with(generate_mixture(two, std::vector<double>{1.0}, prompt, o, cx), errc::invalid_argument,
                         {"1 weights for 2 members"}));
  // A shared vocabulary wider than a member's logit rows.
  mixture_options wide = o;
  wide.vocab = s->cpp.vocab() + 1;
  EXPECT_TRUE(fails_with(generate_mixture(two, std::vector<double>{1.0, 1.0}, prompt, wide, cx), errc::invalid_argument,
                         {"member 0 (cpp)", "fewer than the shared vocabulary"}));
  // Members with different tokenizers.
  auto other = slm::tokenizer::load_dir(models + "/nam56r-cmake-10m");
  ASSERT_TRUE(other.ok());
  const std::vector<member_ref> foreign = {ref(*s, s->cpp, "cpp"), member_ref{&s->cmake, &*other, "cmake", 1.0f}};
  EXPECT_TRUE(fails_with(generate_mixture(foreign, std::vector<double>{1.0, 1.0}, prompt, o, cx),
                         errc::invalid_argument, {"member 1 (cmake)", "does not share the tokenizer"}));
  const std::vector<member_ref> cold = {ref(*s, s->cpp, "cpp", 0.0f)};
  EXPECT_TRUE(fails_with(generate_mixture(cold, std::vector<double>{1.0}, prompt, o, cx), errc::invalid_argument,
                         {"member 0", "temperature 0"}));
  const std::vector<std::int32_t> bad_prompt = {1, 9000};
  EXPECT_TRUE(fails_with(generate_mixture(two, std::vector<double>{1.0, 1.0}, bad_prompt, o, cx), errc::out_of_range,
                         {"9000 at index 1"}));
  cross_speculative_options co;
  EXPECT_TRUE(fails_with(generate_cross_speculative(two[1], foreign[1], prompt, co, cx), errc::invalid_argument,
                         {"does not share the tokenizer"}));
}

TEST(EnsembleMixingMembers, CalibrationOnAMember) {
  const shipped* s = members();
  ASSERT_NE(s, nullptr);
  slm::serial_executor ex;
  slm::compute_context cx{ex};
  const auto ids = encode(*s, std::string(cpp_prompt) +
                                  "  std::vector<std::string> parts;\n  std::string current;\n"
                                  "  for (char c : s) {\n    if (c == sep) {\n      parts.push_back(current);\n"
                                  "      current.clear();\n    } else {\n      current += c;\n    }\n  }\n"
                                  "  parts.push_back(current);\n  return parts;\n}\n\n}  // namespace util\n");
  heldout_rows h;
  h.vocab = s->tok.vocab_size();
  ASSERT_TRUE(h.append(s->cpp, ids, cx, 64).ok());  // windows of 64 tokens: several sessions
  EXPECT_EQ(h.size(), ids.size() - 1);
  auto f = fit_temperature(h);
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::printf("cpp-14m on %zu tokens: T %.3f, NLL %.4f (T=1: %.4f)\n", h.size(), f->temperature, f->nll, f->nll_at_1);
  EXPECT_FALSE(f->at_bound);
  EXPECT_LE(f->nll, f->nll_at_1);
  EXPECT_LE(f->nll, h.mean_nll(f->temperature * 1.02));
  EXPECT_LE(f->nll, h.mean_nll(f->temperature / 1.02));
  // Weights of cpp vs shell on C++ text: EM puts most of the weight on the C++ member.
  heldout_rows hs;
  hs.vocab = h.vocab;
  ASSERT_TRUE(hs.append(s->shell, ids, cx, 64).ok());
  std::vector<double> lp;
  h.target_log_probs(1.0, 0, 2, lp);
  hs.target_log_probs(1.0, 1, 2, lp);
  auto w = fit_mixture_weights(lp, 2);
  ASSERT_TRUE(w.ok());
  std::printf("EM weights on C++ text: cpp %.3f shell %.3f\n", w->weights[0], w->weights[1]);
  EXPECT_GT(w->weights[0], 0.5);
  std::vector<std::int32_t> bad = {1, 8192};
  EXPECT_TRUE(fails_with(h.append(s->cpp, bad, cx), errc::out_of_range, {"8192 at index 1"}));
}

// ---- Speculative decoding across members ----

TEST(EnsembleMixingMembers, CrossSpeculativeGreedyIsTheTargetsGreedy) {
  const shipped* s = members();
  ASSERT_NE(s, nullptr);
  slm::serial_executor ex;
  slm::compute_context cx = f32_context(ex);
  const auto prompt = encode(*s, cpp_prompt);
  const std::size_t vocab = s->tok.vocab_size(), n = 48;
  double plain_s = 0;
  const auto want = greedy(s->cpp, prompt, n, vocab, cx, &plain_s);
  const member_ref target = ref(*s, s->cpp, "cpp");
  cross_speculative_options o;
  o.max_new_tokens = n;
  o.draft_tokens = 4;

  auto cross = generate_cross_speculative(ref(*s, s->cmake, "cmake"), target, prompt, o, cx);
  ASSERT_TRUE(cross.ok()) << cross.error().message();
  EXPECT_EQ(cross->tokens, want);
  EXPECT_GT(cross->rejections, 0u);  // a cross-domain drafter is wrong at times: rollbacks happen
  EXPECT_GT(cross->target_rolled_back, 0u);
  EXPECT_GT(cross->drafter_rolled_back, 0u);
  EXPECT_GT(cross->stats.accepted, 0u);

  // The drafter's context is right after every rollback: its greedy choices, read from one
  // pass over prompt + the target's tokens, predict the acceptance of every round exactly
  // (a draft d_1 is the drafter's choice after the emitted tokens; d_2 only counts when
  // d_1 was kept, and then follows emitted tokens too).
  {
    auto ds = s->cmake.new_session();
    std::vector<std::int32_t> ids = prompt;
    ids.insert(ids.end(), want.begin(), want.end() - 1);
    std::vector<float> rows((n - 1) * s->cmake.vocab());
    ASSERT_TRUE(ds.forward(ids, n - 1, rows.data(), cx).ok());
    std::vector<std::int32_t> pred(n - 1);  // pred[i]: the drafter's choice after want[i]
    for (std::size_t i = 0; i + 1 < n; ++i) {
      const float* r = rows.data() + i * s->cmake.vocab();
      pred[i] = static_cast<std::int32_t>(std::max_element(r, r + vocab) - r);
    }
    std::size_t emitted = 1, drafted = 0, accepted = 0, rejecting = 0;
    while (emitted < n) {
      const std::size_t m = std::min(o.draft_tokens, n - emitted - 1);
      std::size_t j = 0;
      while (j < m && pred[emitted - 1 + j] == want[emitted + j]) ++j;
      drafted += m;
      accepted += j;
      rejecting += j < m;
      emitted += j + 1;
    }
    EXPECT_EQ(cross->stats.drafted, drafted);
    EXPECT_EQ(cross->stats.accepted, accepted);
    EXPECT_EQ(cross->rejections, rejecting);
  }

  auto self = generate_cross_speculative(target, target, prompt, o, cx);
  ASSERT_TRUE(self.ok()) << self.error().message();
  EXPECT_EQ(self->tokens, want);
  EXPECT_EQ(self->stats.accepted, self->stats.drafted);  // the target drafting for itself
  EXPECT_EQ(self->rejections, 0u);

  auto shell = generate_cross_speculative(ref(*s, s->shell, "shell"), target, prompt, o, cx);
  ASSERT_TRUE(shell.ok());
  EXPECT_EQ(shell->tokens, want);

  std::printf("greedy %zu tokens, draft 4: target alone %.3f s\n", n, plain_s);
  for (const auto& [name, r] : {std::pair{"cmake-10m", &*cross}, std::pair{"shell-10m", &*shell},
                                std::pair{"cpp-14m (self)", &*self}})
    std::printf("  drafter %-15s acceptance %.2f, %.2f tokens per target forward, %zu rejecting rounds, %.3f s\n", name,
                r->stats.acceptance_rate(), r->stats.tokens_per_forward(), r->rejections, r->seconds);

  // Stop tokens end it without being emitted, wherever they fall in a round.
  cross_speculative_options stop = o;
  stop.stop_tokens = {want[10]};
  auto stopped = generate_cross_speculative(ref(*s, s->cmake, "cmake"), target, prompt, stop, cx);
  ASSERT_TRUE(stopped.ok());
  const auto first = static_cast<std::size_t>(std::find(want.begin(), want.end(), want[10]) - want.begin());
  EXPECT_EQ(stopped->tokens, std::vector<std::int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(first)));
  EXPECT_EQ(stopped->reason, slm::stop_reason::stop_token);
}

TEST(EnsembleMixingMembers, CrossSpeculativeSampled) {
  const shipped* s = members();
  ASSERT_NE(s, nullptr);
  slm::serial_executor ex;
  slm::compute_context cx = f32_context(ex);
  const auto prompt = encode(*s, cpp_prompt);
  cross_speculative_options o;
  o.max_new_tokens = 24;
  o.sampling.temperature = 0.8f;
  o.sampling.seed = 5;
  auto a = generate_cross_speculative(ref(*s, s->cmake, "cmake"), ref(*s, s->cpp, "cpp"), prompt, o, cx);
  ASSERT_TRUE(a.ok()) << a.error().message();
  EXPECT_EQ(a->tokens.size(), 24u);
  EXPECT_GT(a->stats.drafted, 0u);
  auto b = generate_cross_speculative(ref(*s, s->cmake, "cmake"), ref(*s, s->cpp, "cpp"), prompt, o, cx);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->tokens, b->tokens);  // a seed fixes the run
  std::printf("sampled (T 0.8): acceptance %.2f\n", a->stats.acceptance_rate());
}

}  // namespace
