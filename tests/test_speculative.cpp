// Self-speculative decoding with MTP heads (slm/generate/speculative.hpp): greedy output with
// speculation is identical to greedy output without it, on the NAM56R tiny model and on
// a toy session whose drafts are right or wrong on a known schedule (so acceptance,
// partial acceptance and rejection are all exercised); and the speculative-sampling rule
// reproduces the target distribution.
#include "slm/generate/speculative.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <random>
#include <vector>

#include "slm/models/any_model.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/text/tokenizer.hpp"
#include "test_helpers.hpp"

namespace {

// A toy model over V tokens: the main model's next token after t is (3 t + 1) mod V; the
// MTP heads draft that too, except at positions where `wrong` says the draft is off by
// one. It checks the protocol: drafts only at position >= 1, rows as documented,
// rollback only of what was fed.
struct toy_session {
  std::size_t V = 11;
  std::vector<std::int32_t> fed;  // tokens consumed
  std::vector<bool> wrong;        // by the position the draft predicts
  std::size_t rollbacks = 0;

  std::int32_t next_of(std::int32_t t) const { return static_cast<std::int32_t>((3 * t + 1) % static_cast<std::int32_t>(V)); }
  void one_hot(float* row, std::int32_t t) const {
    for (std::size_t v = 0; v < V; ++v) row[v] = v == static_cast<std::size_t>(t) ? 1.0f : 0.0f;
  }
  slm::status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, slm::compute_context&) {
    for (std::int32_t t : ids) fed.push_back(t);
    for (std::size_t r = 0; r < rows; ++r) one_hot(logits + r * V, next_of(ids[ids.size() - rows + r]));
    return {};
  }
  // next = {x_p, d_1, ..}: row i predicts token p + i + 1 (x_p is token p = fed.size()).
  slm::status draft(std::span<const std::int32_t> next, float* logits, slm::compute_context&) {
    if (fed.empty()) return slm::make_error(slm::errc::invalid_argument, "draft before any token");
    for (std::size_t i = 0; i < next.size(); ++i) {
      const std::size_t target = fed.size() + i + 1;
      const std::int32_t guess = next_of(next[i]);
      const bool off = target < wrong.size() && wrong[target];
      one_hot(logits + i * V, off ? static_cast<std::int32_t>((guess + 1) % static_cast<std::int32_t>(V)) : guess);
    }
    return {};
  }
  slm::status rollback(std::size_t n) {
    if (n > fed.size()) return slm::make_error(slm::errc::out_of_range, "rollback past the start");
    fed.resize(fed.size() - n);
    ++rollbacks;
    return {};
  }
};
static_assert(slm::mtp_session<toy_session>);

std::vector<std::int32_t> plain_greedy(toy_session s, std::span<const std::int32_t> prompt, std::size_t n) {
  std::vector<std::int32_t> out;
  slm::speculative_stats st;
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  EXPECT_TRUE(slm::generate_greedy_mtp(s, prompt, n, 0, s.V, out, st, cx).ok());
  EXPECT_EQ(st.main_forwards, n);  // the prompt's, then one per token but the last
  return out;
}

}  // namespace

TEST(Speculative, ToySessionMatchesPlainGreedyOnEveryDraftSchedule) {
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  const std::vector<std::int32_t> prompt = {4, 7, 2};
  std::mt19937 rng(5);
  for (std::size_t k : {1u, 2u, 3u}) {
    for (int trial = 0; trial < 20; ++trial) {
      toy_session s;
      s.wrong.resize(64);
      for (std::size_t i = 0; i < s.wrong.size(); ++i) s.wrong[i] = (rng() % 3) == 0;
      if (trial == 0) std::fill(s.wrong.begin(), s.wrong.end(), false);  // every draft right
      if (trial == 1) std::fill(s.wrong.begin(), s.wrong.end(), true);   // every draft wrong
      const std::size_t n = 5 + static_cast<std::size_t>(trial);
      const auto ref = plain_greedy(s, prompt, n);
      std::vector<std::int32_t> out;
      slm::speculative_stats st;
      ASSERT_TRUE(slm::generate_greedy_mtp(s, prompt, n, k, s.V, out, st, cx).ok());
      EXPECT_EQ(out, ref) << "k = " << k << ", trial " << trial;
      EXPECT_EQ(st.generated, n);
      // The session holds the prompt and every emitted token but the last.
      EXPECT_EQ(s.fed.size(), prompt.size() + n - 1);
      if (trial == 0) {  // all accepted: k + 1 tokens per verify
        EXPECT_EQ(st.accepted, st.drafted);
        EXPECT_EQ(s.rollbacks, 0u);
        EXPECT_LE(st.main_forwards, 2 + (n + k) / (k + 1));
      }
      if (trial == 1) {
        EXPECT_EQ(st.accepted, 0u);
      }
    }
  }
}

// Greedy speculation follows plain generation's logit processing: with a banned token, a
// favoured one, a repetition penalty and frequency / presence penalties over a short
// window, generate_greedy_mtp with the sampler emits exactly what a plain loop (forward,
// sampler::sample over prompt + emitted, feed) emits, on every draft schedule. (It used
// to take the raw argmax: every one of these configurations changes the plain tokens.)
TEST(Speculative, GreedyMtpAppliesBiasAndPenaltiesAsPlainGreedy) {
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  const std::vector<std::int32_t> prompt = {4, 7, 2};
  auto plain = [&](toy_session s, const slm::sampler_config& c, std::size_t n) {
    slm::sampler smp(c);
    std::vector<std::int32_t> history = prompt, out;
    std::vector<float> row(s.V);
    EXPECT_TRUE(s.forward(prompt, 1, row.data(), cx).ok());
    for (std::size_t i = 0; i < n; ++i) {
      auto id = smp.sample(row, history);
      EXPECT_TRUE(id.ok()) << id.error().message();
      if (!id.ok()) break;
      out.push_back(*id);
      history.push_back(*id);
      if (i + 1 < n) {
        EXPECT_TRUE(s.forward(std::span(&*id, 1), 1, row.data(), cx).ok());
      }
    }
    return out;
  };
  std::vector<slm::sampler_config> configs(4);
  for (auto& c : configs) c.temperature = 0.0f;
  configs[0].logit_bias = {{toy_session{}.next_of(2), -std::numeric_limits<float>::infinity()}};  // bans the first pick
  configs[1].logit_bias = {{5, 0.5f}, {9, 2.0f}};  // 9 wins wherever it is not the one-hot 1
  configs[2].repetition_penalty = 3.0f;            // a repeated one-hot 1 falls below 0.5 ...
  configs[2].logit_bias = {{0, 0.5f}};             // ... the bias on token 0
  configs[3].frequency_penalty = 1.5f;
  configs[3].presence_penalty = 0.25f;
  configs[3].penalty_last_n = 4;
  std::mt19937 rng(7);
  const std::size_t n = 20;
  for (std::size_t ci = 0; ci < configs.size(); ++ci) {
    slm::sampler_config unprocessed;
    unprocessed.temperature = 0.0f;
    EXPECT_NE(plain(toy_session{}, configs[ci], n), plain(toy_session{}, unprocessed, n)) << "config " << ci;
    for (std::size_t k : {1u, 2u, 3u}) {
      for (int trial = 0; trial < 6; ++trial) {
        toy_session s;
        s.wrong.resize(64);
        for (std::size_t i = 0; i < s.wrong.size(); ++i) s.wrong[i] = trial == 0 ? false : (rng() % 3) == 0;
        const auto ref = plain(s, configs[ci], n);
        slm::sampler smp(configs[ci]);
        std::vector<std::int32_t> out;
        slm::speculative_stats st;
        const slm::status r = slm::generate_greedy_mtp(s, prompt, n, k, s.V, smp, out, st, cx);
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_EQ(out, ref) << "config " << ci << ", k = " << k << ", trial " << trial;
        EXPECT_EQ(s.fed.size(), prompt.size() + n - 1);
      }
    }
  }
  // A sampler that is not greedy is refused (generate_sampled_mtp is its function).
  slm::sampler hot(slm::sampler_config{});
  toy_session s;
  std::vector<std::int32_t> out;
  slm::speculative_stats st;
  EXPECT_TRUE(slm_test::fails_with(slm::generate_greedy_mtp(s, prompt, 4, 1, s.V, hot, out, st, cx),
                                   slm::errc::invalid_argument, {"temperature"}));
}

// A stop token ends speculative generation where it ends plain generation: the toy's
// greedy chain after the prompt is 7, 0, 1, 4, 2, 7, ...; with stop token 4 both the
// greedy and the sampled form (top-k 1, so deterministic) emit 7, 0, 1, 4 and nothing
// after it is fed, whichever draft the stop arrives in (and whether the drafts are right).
TEST(Speculative, StopTokenEndsGenerationUnfed) {
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  const std::vector<std::int32_t> prompt = {4, 7, 2}, stops = {4}, expect = {7, 0, 1, 4};
  for (std::size_t k : {0u, 1u, 2u, 3u}) {
    for (int trial = 0; trial < 4; ++trial) {
      for (bool sampled : {false, true}) {
        toy_session s;
        s.wrong.assign(64, false);
        for (std::size_t i = 0; i < s.wrong.size(); ++i) s.wrong[i] = trial == 1 || (trial > 1 && (i + static_cast<std::size_t>(trial)) % 3 == 0);
        std::vector<std::int32_t> out;
        slm::speculative_stats st;
        slm::sampler_config c;
        c.temperature = sampled ? 1.0f : 0.0f;
        c.top_k = 1;
        slm::sampler smp(c);
        const slm::status r = sampled ? slm::generate_sampled_mtp(s, prompt, 20, k, s.V, smp, out, st, cx, stops)
                                      : slm::generate_greedy_mtp(s, prompt, 20, k, s.V, smp, out, st, cx, stops);
        ASSERT_TRUE(r.ok()) << r.message();
        EXPECT_EQ(out, expect) << "k = " << k << ", trial " << trial << (sampled ? ", sampled" : ", greedy");
        EXPECT_EQ(s.fed.size(), prompt.size() + expect.size() - 1) << "k = " << k << ", trial " << trial;
        EXPECT_EQ(st.generated, expect.size());
      }
    }
  }
}

// Non-finite logits are an error, as in plain generation (sampler: "logits[i] is NaN"),
// named by the token being generated - never a silent pick: a NaN in the main model's row
// for the 6th token (with and without drafts), +infinity in the prompt's row, and a NaN
// in a draft head's row. (The raw argmax used to pick some token and report success.)
TEST(Speculative, GreedyMtpNonFiniteLogitsAreErrors) {
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  const std::vector<std::int32_t> prompt = {4, 7, 2};
  struct poisoned : toy_session {
    std::size_t bad_main = 1000, bad_draft = 1000;  // by the position the row predicts
    float value = std::numeric_limits<float>::quiet_NaN();
    slm::status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, slm::compute_context& c) {
      SLM_TRY(toy_session::forward(ids, rows, logits, c));
      for (std::size_t r = 0; r < rows; ++r)  // row r predicts position fed.size() - rows + r + 1
        if (fed.size() - rows + r + 1 == bad_main) logits[r * V + 3] = value;
      return {};
    }
    slm::status draft(std::span<const std::int32_t> next, float* logits, slm::compute_context& c) {
      SLM_TRY(toy_session::draft(next, logits, c));
      for (std::size_t i = 0; i < next.size(); ++i)
        if (fed.size() + i + 1 == bad_draft) logits[i * V + 3] = value;
      return {};
    }
  };
  for (std::size_t k : {0u, 1u, 2u}) {
    poisoned s;
    s.bad_main = prompt.size() + 5;  // the 6th generated token (index 5)
    std::vector<std::int32_t> out;
    slm::speculative_stats st;
    const slm::status r = slm::generate_greedy_mtp(s, prompt, 12, k, s.V, out, st, cx);
    EXPECT_TRUE(slm_test::fails_with(r, slm::errc::invalid_argument, {"generate: token 5", "logits[3] is NaN"})) << "k = " << k;
    EXPECT_LE(out.size(), 5u);
  }
  {
    poisoned s;
    s.bad_main = prompt.size();  // the prompt's row
    s.value = std::numeric_limits<float>::infinity();
    std::vector<std::int32_t> out;
    slm::speculative_stats st;
    EXPECT_TRUE(slm_test::fails_with(slm::generate_greedy_mtp(s, prompt, 4, 1, s.V, out, st, cx),
                                     slm::errc::invalid_argument, {"generate: token 0", "+infinity"}));
    EXPECT_TRUE(out.empty());
  }
  {
    poisoned s;
    s.bad_draft = prompt.size() + 2;  // the draft of the 3rd generated token
    std::vector<std::int32_t> out;
    slm::speculative_stats st;
    EXPECT_TRUE(slm_test::fails_with(slm::generate_greedy_mtp(s, prompt, 8, 2, s.V, out, st, cx),
                                     slm::errc::invalid_argument, {"MTP draft of token 2", "NaN"}));
  }
}

// The NAM56R tiny model (random weights, 2 MTP depths): speculation with 1 and 2 drafts
// emits exactly plain greedy's tokens for several prompts; every rejected draft is rolled
// back through the Mamba-3, M2RNN, KV and n-gram states.
TEST(Speculative, Nam56rGreedyIdenticalWithAndWithoutMtp) {
  auto m = slm::nam56r_model::load(slm_test::test_data("nam56r/tiny"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto pool = slm::thread_pool::create(2);
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;
  const std::size_t V = m->vocab(), n = 24;
  const std::vector<std::vector<std::int32_t>> prompts = {{1, 2, 3, 4, 5}, {17}, {9, 9, 9, 40, 41, 42, 43, 7}};
  std::size_t drafted = 0, accepted = 0;
  for (const auto& prompt : prompts) {
    slm::session_options o;
    o.rollback_tokens = 2;
    std::vector<std::int32_t> ref;
    {
      auto s = m->new_session(o);
      slm::speculative_stats st;
      ASSERT_TRUE(slm::generate_greedy_mtp(s, prompt, n, 0, V, ref, st, cx).ok());
    }
    for (std::size_t k : {1u, 2u}) {
      auto s = m->new_session(o);
      std::vector<std::int32_t> out;
      slm::speculative_stats st;
      auto r = slm::generate_greedy_mtp(s, prompt, n, k, V, out, st, cx);
      ASSERT_TRUE(r.ok()) << r.message();
      EXPECT_EQ(out, ref) << "k = " << k;
      EXPECT_EQ(s.position(), prompt.size() + n - 1);
      drafted += st.drafted;
      accepted += st.accepted;
    }
  }
  EXPECT_GT(drafted, 0u);
  std::printf("[ figures  ] tiny NAM56R (random weights): %zu of %zu drafts accepted\n", accepted, drafted);
}

// Without enough kept recurrent history the rollback of rejected drafts is refused, and
// the error says why.
TEST(Speculative, Nam56rNeedsRollbackHistory) {
  auto m = slm::nam56r_model::load(slm_test::test_data("nam56r/tiny"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  auto s = m->new_session();  // rollback_tokens 0
  std::vector<std::int32_t> out;
  slm::speculative_stats st;
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  const slm::status r = slm::generate_greedy_mtp(s, prompt, 16, 2, m->vocab(), out, st, cx);
  if (st.accepted == st.drafted) GTEST_SKIP() << "every draft accepted: no rollback happened";
  EXPECT_TRUE(slm_test::fails_with(r, slm::errc::unsupported, {"rollback_tokens"}));
}

// Drafts drawn from q, accepted or replaced by the rule, are distributed as p (chi-square
// over 6 tokens, 200k draws: the 99.9 % quantile of chi2(5) is 20.5).
TEST(Speculative, SamplingRuleReproducesTheTarget) {
  const std::vector<float> p = {0.05f, 0.30f, 0.10f, 0.25f, 0.0f, 0.30f};
  const std::vector<float> q = {0.20f, 0.10f, 0.10f, 0.40f, 0.15f, 0.05f};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  auto uniform = [&] { return u01(rng); };
  std::discrete_distribution<int> from_q(q.begin(), q.end());
  const int N = 200000;
  std::vector<double> count(p.size(), 0.0);
  int kept = 0;
  for (int i = 0; i < N; ++i) {
    bool accepted = false;
    const std::int32_t t = slm::speculative_accept(p, q, from_q(rng), uniform, accepted);
    ASSERT_GE(t, 0);
    ASSERT_LT(static_cast<std::size_t>(t), p.size());
    count[static_cast<std::size_t>(t)] += 1;
    kept += accepted;
  }
  double chi2 = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0.0f) {
      EXPECT_EQ(count[i], 0.0) << "token " << i << " has p = 0";
      continue;
    }
    const double e = N * static_cast<double>(p[i]);
    chi2 += (count[i] - e) * (count[i] - e) / e;
  }
  EXPECT_LT(chi2, 20.5);
  // Acceptance probability = sum_x min(p, q) = 0.05 + 0.1 + 0.1 + 0.25 + 0 + 0.05 = 0.55.
  EXPECT_NEAR(static_cast<double>(kept) / N, 0.55, 0.01);
}

// Sampled MTP speculation emits tokens distributed exactly as plain sampling: a toy model
// whose main and draft distributions differ and depend on the previous token; the joint
// distribution of the first three generated tokens (6^3 cells, 60k runs, k = 2 drafts)
// against the product of the main model's conditionals by chi-square, and the same test
// must reject the draft model's joint distribution.
namespace {
struct soft_toy {
  static constexpr std::size_t V = 6;
  std::vector<std::int32_t> fed;
  static void main_row(std::int32_t prev, float* row) {
    for (std::size_t v = 0; v < V; ++v) row[v] = static_cast<float>(((static_cast<std::size_t>(prev) * 5 + v * 3) % 7)) * 0.45f;
  }
  static void draft_row(std::int32_t prev, float* row) {
    for (std::size_t v = 0; v < V; ++v) row[v] = static_cast<float>(((static_cast<std::size_t>(prev) * 2 + v * 5) % 6)) * 0.35f;
  }
  slm::status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, slm::compute_context&) {
    for (std::int32_t t : ids) fed.push_back(t);
    for (std::size_t r = 0; r < rows; ++r) main_row(ids[ids.size() - rows + r], logits + r * V);
    return {};
  }
  slm::status draft(std::span<const std::int32_t> next, float* logits, slm::compute_context&) {
    for (std::size_t i = 0; i < next.size(); ++i) draft_row(next[i], logits + i * V);
    return {};
  }
  slm::status rollback(std::size_t n) {
    fed.resize(fed.size() - n);
    return {};
  }
};
std::vector<double> softmax_of(const float* row, std::size_t n) {
  std::vector<double> p(n);
  double mx = *std::max_element(row, row + n), sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += p[i] = std::exp(static_cast<double>(row[i]) - mx);
  for (double& x : p) x /= sum;
  return p;
}
// The joint distribution of three tokens sampled in turn from row_of's conditionals after
// `prev`, as cells [a, b, c] of V^3.
std::vector<double> joint3(void (*row_of)(std::int32_t, float*), std::int32_t prev) {
  constexpr std::size_t V = soft_toy::V;
  std::vector<double> e(V * V * V);
  float row[V];
  row_of(prev, row);
  const auto p0 = softmax_of(row, V);
  for (std::size_t a = 0; a < V; ++a) {
    row_of(static_cast<std::int32_t>(a), row);
    const auto p1 = softmax_of(row, V);
    for (std::size_t b = 0; b < V; ++b) {
      row_of(static_cast<std::int32_t>(b), row);
      const auto p2 = softmax_of(row, V);
      for (std::size_t c = 0; c < V; ++c) e[(a * V + b) * V + c] = p0[a] * p1[b] * p2[c];
    }
  }
  return e;
}
// Pearson's statistic of observed counts against expected probabilities over `runs` draws.
double chi2_of(const std::vector<double>& count, const std::vector<double>& e, int runs) {
  double x = 0;
  for (std::size_t i = 0; i < e.size(); ++i) {
    const double ex = e[i] * runs;
    x += (count[i] - ex) * (count[i] - ex) / ex;
  }
  return x;
}
}  // namespace

TEST(Speculative, SampledMtpDrawsExactlyFromTheMainModel) {
  constexpr std::size_t V = soft_toy::V;
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  slm::sampler_config sc;
  sc.penalty_last_n = 0;
  slm::sampler smp(sc);
  ASSERT_TRUE(slm::validate(sc, V).ok());
  const int runs = 60000;
  std::vector<double> count(V * V * V, 0.0);
  slm::speculative_stats st;
  for (int r = 0; r < runs; ++r) {
    soft_toy s;
    std::vector<std::int32_t> out;
    slm::speculative_stats one;  // counts this call's tokens
    ASSERT_TRUE(slm::generate_sampled_mtp(s, std::vector<std::int32_t>{2}, 3, 2, V, smp, out, one, cx).ok());
    st.drafted += one.drafted, st.accepted += one.accepted;
    ASSERT_EQ(out.size(), 3u);
    count[(static_cast<std::size_t>(out[0]) * V + static_cast<std::size_t>(out[1])) * V + static_cast<std::size_t>(out[2])] += 1;
  }
  // 215 degrees of freedom: mean 215, sd ~20.7; 330 is beyond the 99.999 % quantile.
  const double right = chi2_of(count, joint3(soft_toy::main_row, 2), runs);
  const double wrong = chi2_of(count, joint3(soft_toy::draft_row, 2), runs);
  EXPECT_LT(right, 330.0);
  EXPECT_GT(wrong, 1000.0);
  EXPECT_GT(st.drafted, 0u);
  EXPECT_GT(st.accepted, 0u);
  EXPECT_LT(st.accepted, st.drafted);
  std::printf("[ figures  ] chi2 %.1f (main) vs %.1f (draft), %zu of %zu drafts accepted\n", right, wrong, st.accepted,
              st.drafted);
}

namespace {

// generate_mtp is generation as generator::generate gives it, drafted: on the bundled
// NAM56R specialist (one MTP depth, its tokenizer) greedy generate_mtp gives plain greedy's
// tokens and text, cut by a stop string taken from that text and by a stop token taken
// from those tokens exactly where plain generation cuts them.
TEST(Speculative, GenerateMtpCutsAsTheGenerator) {
  const std::filesystem::path dir = std::filesystem::path(SLM_MODELS_DIR) / "nam56r-cpp-14m";
  auto m = slm::nam56r_model::load(dir);
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto tok = slm::tokenizer::load_dir(dir);
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;
  const std::size_t V = m->vocab();
  auto prompt = tok->encode("int main() {");
  ASSERT_TRUE(prompt.ok());
  slm::sampler_config sc;
  sc.temperature = 0.0f;
  sc.vocab_size = std::min(V, tok->vocab_size());
  auto plain = [&](const slm::generation_options& go) {
    slm::generator<slm::nam56r_model::session> gen(m->new_session(), &*tok, V, sc);
    EXPECT_TRUE(gen.prefill(*prompt, cx).ok());
    auto r = gen.generate(go, cx);
    EXPECT_TRUE(r.ok()) << r.error().message();
    return r.ok() ? *r : slm::generation_result{};
  };
  auto drafted = [&](const slm::generation_options& go, const slm::tokenizer* t) {
    slm::session_options o;
    o.rollback_tokens = 1;
    auto s = m->new_session(o);
    slm::sampler smp(sc);
    return slm::generate_mtp(s, *prompt, 1, V, smp, go, t, cx);
  };
  slm::generation_options go;
  go.max_new_tokens = 24;
  const slm::generation_result ref = plain(go);
  ASSERT_EQ(ref.tokens.size(), 24u);
  auto r = drafted(go, &*tok);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->tokens, ref.tokens);
  EXPECT_EQ(r->text, ref.text);
  EXPECT_GT(r->stats.drafted, 0u);

  slm::generation_options cut = go;
  cut.stop_strings = {ref.text.substr(ref.text.size() / 2, 2)};
  const slm::generation_result ref_cut = plain(cut);
  ASSERT_LT(ref_cut.text.size(), ref.text.size());
  r = drafted(cut, &*tok);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->text, ref_cut.text);
  EXPECT_EQ(r->tokens, ref_cut.tokens);

  slm::generation_options eos = go;
  eos.stop_tokens = {ref.tokens[5]};
  const slm::generation_result ref_eos = plain(eos);
  r = drafted(eos, &*tok);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->tokens, ref_eos.tokens);
  EXPECT_EQ(r->text, ref_eos.text);
  EXPECT_LE(r->tokens.size(), 5u);

  // No tokenizer: tokens only; stop strings then need one.
  r = drafted(go, nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->tokens, ref.tokens);
  EXPECT_TRUE(r->text.empty());
  EXPECT_TRUE(slm_test::fails_with(drafted(cut, nullptr), slm::errc::invalid_argument, {"stop strings need a tokenizer"}));
}

// apply_stop_rules without a tokenizer: up to the first stop token, no text.
TEST(Speculative, ApplyStopRulesCutsAtTheFirstStopToken) {
  slm::generation_options go;
  go.stop_tokens = {2, 9};
  const std::vector<std::int32_t> ids = {5, 6, 7, 9, 8, 2};
  auto r = slm::apply_stop_rules(ids, go, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, (std::vector<std::int32_t>{5, 6, 7}));
  EXPECT_TRUE(r->text.empty());
  go.stop_tokens.clear();
  r = slm::apply_stop_rules(ids, go, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, ids);
}

// ---- drafts from the context (prompt lookup) ----

TEST(PromptLookup, ProposesWhatFollowedTheLatestMatch) {
  const slm::prompt_lookup lookup;  // n-grams of 3, 2, 1
  auto propose = [&](std::vector<std::int32_t> context, std::size_t m) {
    std::vector<std::int32_t> out{99};  // appended to, not replaced
    const std::size_t k = lookup.propose(context, m, out);
    EXPECT_EQ(k + 1, out.size());
    return std::vector<std::int32_t>(out.begin() + 1, out.end());
  };
  using ids = std::vector<std::int32_t>;
  EXPECT_EQ(propose({1, 2, 3, 4, 9, 1, 2, 3}, 3), (ids{4, 9, 1}));          // the 3-gram 1 2 3
  EXPECT_EQ(propose({1, 2, 3, 7, 5, 2, 3, 8, 2, 3}, 2), (ids{8, 2}));       // the latest 2-3, not the first
  EXPECT_EQ(propose({5, 6, 7, 8, 6}, 3), (ids{7, 8, 6}));                   // only the 1-gram 6 occurs
  EXPECT_EQ(propose({4, 1, 2, 4, 1, 3, 1}, 4), (ids{3, 1}));                // 1-gram: the latest 1, two left
  EXPECT_EQ(propose({1, 1, 1}, 4), (ids{1}));                               // a run continues
  EXPECT_EQ(propose({1, 2, 3}, 2), ids{});                                  // nothing repeats
  EXPECT_EQ(propose({1, 2, 1}, 0), ids{});
  EXPECT_EQ(propose({}, 4), ids{});
  EXPECT_EQ(propose({7}, 4), ids{});
  slm::prompt_lookup only3;
  only3.min_ngram = 3;
  std::vector<std::int32_t> out;
  EXPECT_EQ(only3.propose(std::vector<std::int32_t>{5, 6, 7, 8, 6}, 3, out), 0u);  // no 3-gram repeats
}

// Greedy decoding with lookup drafts emits plain greedy's tokens on the toy model, whose
// greedy chain is a cycle: a prompt holding the cycle makes most drafts right, one holding
// other successions makes them wrong, and the session ends holding exactly what plain
// greedy decoding fed.
TEST(PromptLookup, GreedyMatchesPlainGreedy) {
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  slm::sampler_config sc;
  sc.temperature = 0.0f;
  slm::sampler smp(sc);
  const std::vector<std::int32_t> cycle = {1, 4, 2, 7, 0, 1, 4, 2};            // (3 t + 1) mod 11 from 1
  const std::vector<std::int32_t> misleading = {1, 5, 6, 4, 3, 2, 9, 7, 8, 1};  // other successors
  for (const auto* prompt : {&cycle, &misleading}) {
    for (std::size_t k : {1u, 2u, 4u, 8u}) {
      for (std::size_t n : {1u, 2u, 7u, 20u}) {
        toy_session s;
        const auto ref = plain_greedy(s, *prompt, n);
        std::vector<std::int32_t> out;
        slm::speculative_stats st;
        ASSERT_TRUE(slm::generate_greedy_lookup(s, *prompt, n, k, slm::prompt_lookup{}, s.V, smp, out, st, cx).ok());
        EXPECT_EQ(out, ref) << "k = " << k << ", n = " << n;
        EXPECT_EQ(s.fed.size(), prompt->size() + n - 1);
        if (prompt == &cycle && n == 20 && k >= 2) EXPECT_GT(st.tokens_per_forward(), 2.0) << k;
        if (prompt == &misleading && n >= 7) EXPECT_LT(st.accepted, st.drafted);
      }
    }
  }
  slm::sampler hot(slm::sampler_config{});
  toy_session s;
  std::vector<std::int32_t> out;
  slm::speculative_stats st;
  EXPECT_TRUE(slm_test::fails_with(
      slm::generate_greedy_lookup(s, cycle, 4, 2, slm::prompt_lookup{}, s.V, hot, out, st, cx),
      slm::errc::invalid_argument, {"temperature"}));
}

// Sampled decoding with lookup drafts draws each token exactly from the main model: the
// joint distribution of three tokens against the main model's by chi-square, as for MTP
// drafts; the prompt holds every token, so a 1-gram always matches and every round drafts.
TEST(PromptLookup, SampledDrawsExactlyFromTheMainModel) {
  constexpr std::size_t V = soft_toy::V;
  auto pool = slm::thread_pool::create(1);
  slm::compute_context cx{*pool};
  slm::sampler_config sc;
  sc.penalty_last_n = 0;
  slm::sampler smp(sc);
  const std::vector<std::int32_t> prompt = {0, 1, 2, 3, 4, 5, 3, 1, 4, 2};
  const int runs = 60000;
  std::vector<double> count(V * V * V, 0.0);
  slm::speculative_stats st;
  for (int r = 0; r < runs; ++r) {
    soft_toy s;
    std::vector<std::int32_t> out;
    slm::speculative_stats one;
    ASSERT_TRUE(slm::generate_sampled_lookup(s, prompt, 3, 2, slm::prompt_lookup{}, V, smp, out, one, cx).ok());
    ASSERT_EQ(out.size(), 3u);
    ASSERT_EQ(s.fed.size(), prompt.size() + 2);
    st.drafted += one.drafted, st.accepted += one.accepted;
    count[(static_cast<std::size_t>(out[0]) * V + static_cast<std::size_t>(out[1])) * V + static_cast<std::size_t>(out[2])] += 1;
  }
  const double right = chi2_of(count, joint3(soft_toy::main_row, prompt.back()), runs);
  EXPECT_LT(right, 330.0);  // 215 degrees of freedom, as above
  EXPECT_GT(chi2_of(count, joint3(soft_toy::draft_row, prompt.back()), runs), 1000.0);
  EXPECT_GT(st.accepted, 0u);
  EXPECT_LT(st.accepted, st.drafted);
  std::printf("[ figures  ] chi2 %.1f, %zu of %zu lookup drafts accepted\n", right, st.accepted, st.drafted);
}

// On real models: greedy lookup decoding gives plain greedy's ids on a prompt that repeats
// itself, for attention (the bundled NAM56R specialist: MLA, Mamba-3, M2RNN, whose
// recurrent states roll back) and for an HF Mamba-2 model, through any_session.
TEST(PromptLookup, RealModelsGiveGreedyIds) {
  const std::filesystem::path dirs[] = {std::filesystem::path(SLM_MODELS_DIR) / "nam56r-cpp-14m",
                                        slm_test::test_data("golden/hf/mamba2"), slm_test::test_data("golden/hf/qwen3")};
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.string());
    auto m = slm::any_model::load(dir);
    ASSERT_TRUE(m.ok()) << m.error().message();
    const std::size_t V = m->vocab();
    auto pool = slm::thread_pool::create(2);
    slm::compute_context cx{*pool};
    cx.quantized_activations = slm::activation_precision::f32;
    std::vector<std::int32_t> prompt;
    for (int r = 0; r < 3; ++r)
      for (std::int32_t t : {11, 57, 23, 90, 5, 31, 64, 8}) prompt.push_back(t % static_cast<std::int32_t>(V));
    slm::sampler_config sc;
    sc.temperature = 0.0f;
    slm::sampler smp(sc);
    slm::generation_options go;
    go.max_new_tokens = 24;
    slm::speculation plain;
    plain.source = slm::draft_source::lookup;
    plain.draft_tokens = 0;
    auto s0 = m->new_session();
    auto ref = slm::generate_speculative(s0, prompt, plain, V, smp, go, nullptr, cx);
    ASSERT_TRUE(ref.ok()) << ref.error().message();
    ASSERT_EQ(ref->tokens.size(), 24u);
    slm::speculation spec = plain;
    spec.draft_tokens = 6;
    slm::session_options o;
    o.rollback_tokens = spec.draft_tokens;
    auto s1 = m->new_session(o);
    auto r = slm::generate_speculative(s1, prompt, spec, V, smp, go, nullptr, cx);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->tokens, ref->tokens);
    EXPECT_GT(r->stats.drafted, 0u);
    std::printf("[ figures  ] %s: %zu of %zu lookup drafts accepted, %.2f tokens per forward\n",
                dir.filename().string().c_str(), r->stats.accepted, r->stats.drafted, r->stats.tokens_per_forward());
  }
  // MTP drafts through generate_speculative need MTP heads.
  auto hf = slm::model::load(slm_test::test_data("golden/hf/qwen3"));
  ASSERT_TRUE(hf.ok());
  auto s = hf->new_session();
  slm::sampler_config sc;
  sc.temperature = 0.0f;
  slm::sampler smp(sc);
  slm::serial_executor one;
  slm::compute_context cx{one};
  EXPECT_TRUE(slm_test::fails_with(slm::generate_speculative(s, std::vector<std::int32_t>{1, 2}, slm::speculation{},
                                                             hf->vocab(), smp, slm::generation_options{}, nullptr, cx),
                                   slm::errc::unsupported, {"MTP"}));
}

}  // namespace
