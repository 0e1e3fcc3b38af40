// Scoring (slm/generate/scoring.hpp) and loading any model directory (slm/models/load.hpp).
//
// The oracle for scoring is transformers' own logits: tests/data/oracle/hf/qwen2's
// logits_full (Qwen2ForCausalLM in float32 from the stored bf16 weights). The NLL of the
// sequence computed from those rows is what score_tokens must report when one window
// covers the sequence. slm reproduces the rows within about 1e-6 (test_models.cpp); the
// bound here, 1e-4 nats per token, leaves room for that and for the double sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "slm/generate/scoring.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/load.hpp"
#include "test_helpers.hpp"

namespace {

TEST(Scoring, LogSumExpAndTokenNll) {
  const float row[3] = {1.0f, 2.0f, 3.0f};
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  EXPECT_NEAR(slm::log_sum_exp(row), lse, 1e-12);
  EXPECT_NEAR(slm::token_nll(row, 0), lse - 1.0, 1e-12);
  EXPECT_NEAR(slm::token_nll(row, 2, 0.5), std::log(std::exp(0.5) + std::exp(1.0) + std::exp(1.5)) - 1.5, 1e-12);
  const float big[2] = {1000.0f, 1000.0f};  // no overflow
  EXPECT_NEAR(slm::token_nll(big, 1), std::log(2.0), 1e-12);
  const float masked[3] = {-std::numeric_limits<float>::infinity(), 0.0f, 0.0f};  // a banned row entry
  EXPECT_NEAR(slm::token_nll(masked, 1), std::log(2.0), 1e-12);
  EXPECT_EQ(slm::log_sum_exp(std::span<const float>()), -std::numeric_limits<double>::infinity());
  const float ties[4] = {0.0f, 5.0f, 5.0f, 1.0f};
  EXPECT_EQ(slm::row_argmax(ties), 1u);  // the first maximum, as torch.argmax
}

TEST(Scoring, TallyFigures) {
  slm::score_tally t;
  t.tokens = 4, t.top1 = 1, t.bytes = 10, t.nll = 4 * std::log(8.0);
  EXPECT_NEAR(t.nll_per_token(), std::log(8.0), 1e-12);
  EXPECT_NEAR(t.perplexity(), 8.0, 1e-9);
  EXPECT_NEAR(t.bits_per_byte(), 4 * 3.0 / 10, 1e-12);
  EXPECT_NEAR(t.top1_rate(), 0.25, 1e-12);
  slm::score_tally u = t;
  u.add(t);
  EXPECT_EQ(u.tokens, 8u);
  EXPECT_EQ(u.bytes, 20u);
  EXPECT_EQ(slm::score_tally{}.bits_per_byte(), 0.0);  // nothing scored: zeros, not NaN
}

// Every target 1..n-1 is scored exactly once, by a window of at most ctx tokens that gives
// it at least min(j, ctx - stride) tokens of context.
TEST(Scoring, WindowPlanScoresEachTargetOnce) {
  for (std::size_t n = 0; n <= 40; ++n)
    for (std::size_t ctx = 2; ctx <= 11; ++ctx)
      for (std::size_t stride = 1; stride <= ctx; ++stride) {
        std::vector<int> seen(n, 0);
        std::size_t windows = 0;
        auto s = slm::for_each_window(n, ctx, stride, [&](std::size_t begin, std::size_t end, std::size_t first) -> slm::status {
          ++windows;
          EXPECT_LE(end - begin, ctx);
          EXPECT_LT(begin, first);
          EXPECT_LE(first, end);
          for (std::size_t j = first; j < end; ++j) {
            ++seen[j];
            EXPECT_GE(j - begin, std::min(j, ctx - stride)) << n << " " << ctx << " " << stride << " target " << j;
          }
          return {};
        });
        ASSERT_TRUE(s.ok()) << s.message();
        for (std::size_t j = 1; j < n; ++j) ASSERT_EQ(seen[j], 1) << n << " " << ctx << " " << stride << " target " << j;
        if (n >= 2 && n <= ctx) EXPECT_EQ(windows, 1u);
      }
  auto ok = [](std::size_t, std::size_t, std::size_t) { return slm::status{}; };
  EXPECT_TRUE(slm_test::fails_with(slm::for_each_window(10, 1, 1, ok), slm::errc::invalid_argument, {"at least 2"}));
  EXPECT_TRUE(slm_test::fails_with(slm::for_each_window(10, 4, 5, ok), slm::errc::invalid_argument, {"stride 5"}));
  EXPECT_TRUE(slm_test::fails_with(slm::for_each_window(10, 4, 0, ok), slm::errc::invalid_argument, {"stride 0"}));
}

struct qwen2_oracle {
  std::vector<std::int32_t> ids;
  std::vector<float> logits;  // [T, V]
  std::size_t V = 0;
};

qwen2_oracle read_oracle() {
  qwen2_oracle o;
  auto f = slm::safetensors::file::open(slm_test::test_data("oracle/hf/qwen2/golden.safetensors"));
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (!f.ok()) return o;
  const auto* ids = f->find("input_ids");
  const auto* lf = f->find("logits_full");
  EXPECT_TRUE(ids && lf);
  if (!ids || !lf) return o;
  std::vector<float> v(static_cast<std::size_t>(ids->shape.numel()));
  EXPECT_TRUE(f->view(*ids).to_f32(v).ok());
  for (float x : v) o.ids.push_back(static_cast<std::int32_t>(x));
  o.V = static_cast<std::size_t>(lf->shape[1]);
  o.logits.resize(static_cast<std::size_t>(lf->shape.numel()));
  EXPECT_TRUE(f->view(*lf).to_f32(o.logits).ok());
  return o;
}

TEST(Scoring, OneWindowMatchesTransformersLogits) {
  const qwen2_oracle g = read_oracle();
  ASSERT_GT(g.ids.size(), 8u);
  double ref = 0;
  std::size_t ref_top1 = 0;
  for (std::size_t j = 1; j < g.ids.size(); ++j) {
    const std::span<const float> row(g.logits.data() + (j - 1) * g.V, g.V);
    ref += slm::token_nll(row, g.ids[j]);
    ref_top1 += slm::row_argmax(row) == static_cast<std::size_t>(g.ids[j]);
  }
  auto m = slm::any_model::load(slm_test::test_data("oracle/hf/qwen2"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->kind(), slm::any_model::family::decoder);
  slm::compute_context cx{slm_test::the_pools().p2};
  const std::size_t T = g.ids.size();
  slm::score_options o;
  o.ctx = T;
  auto t = slm::score_tokens(*m, g.ids, o, cx);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->tokens, T - 1);
  EXPECT_EQ(t->top1, ref_top1);
  EXPECT_NEAR(t->nll / static_cast<double>(T - 1), ref / static_cast<double>(T - 1), 1e-4);
  std::printf("qwen2 oracle: %zu targets, nll/token %.8f (transformers %.8f)\n", t->tokens, t->nll_per_token(),
              ref / static_cast<double>(T - 1));

  // The same window prefilled in chunks through one session: the same targets, the same sum
  // up to the chunked prefill's rounding.
  o.chunk_rows = 5;
  auto c = slm::score_tokens(*m, g.ids, o, cx);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->tokens, T - 1);
  EXPECT_NEAR(c->nll, t->nll, 1e-4 * static_cast<double>(T));

  // A temperature scales the logits: scale 1 gives the same figures as above.
  o.chunk_rows = 0;
  o.scale = 0.5;
  auto hot = slm::score_tokens(*m, g.ids, o, cx);
  ASSERT_TRUE(hot.ok());
  double ref_hot = 0;
  for (std::size_t j = 1; j < T; ++j) ref_hot += slm::token_nll(std::span<const float>(g.logits.data() + (j - 1) * g.V, g.V), g.ids[j], 0.5);
  EXPECT_NEAR(hot->nll / static_cast<double>(T - 1), ref_hot / static_cast<double>(T - 1), 1e-4);
}

// Windows of ctx tokens every stride tokens: each window is a fresh session, so its rows are
// those of a forward over just that window. The reference does exactly that, by hand.
TEST(Scoring, WindowsAreFreshSessions) {
  const qwen2_oracle g = read_oracle();
  auto m = slm::any_model::load(slm_test::test_data("oracle/hf/qwen2"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  slm::compute_context cx{slm_test::the_pools().p2};
  const std::size_t V = m->vocab();
  for (const auto [ctx, stride] : {std::pair<std::size_t, std::size_t>{16, 8}, {16, 16}, {10, 3}}) {
    double ref = 0;
    std::size_t ref_tokens = 0;
    auto s = slm::for_each_window(g.ids.size(), ctx, stride, [&](std::size_t begin, std::size_t end, std::size_t first) -> slm::status {
      auto session = m->new_session();
      std::vector<float> logits((end - begin) * V);
      // [end - begin] tokens -> [end - begin, V] logits, every row
      SLM_TRY(session.forward(std::span(g.ids).subspan(begin, end - begin), end - begin, logits.data(), cx));
      for (std::size_t j = first; j < end; ++j, ++ref_tokens)
        ref += slm::token_nll(std::span<const float>(logits.data() + (j - begin - 1) * V, V), g.ids[j]);
      return {};
    });
    ASSERT_TRUE(s.ok()) << s.message();
    slm::score_options o;
    o.ctx = ctx;
    o.stride = stride;
    auto t = slm::score_tokens(*m, g.ids, o, cx);
    ASSERT_TRUE(t.ok()) << t.error().message();
    EXPECT_EQ(t->tokens, ref_tokens);
    EXPECT_EQ(t->tokens, g.ids.size() - 1);
    EXPECT_NEAR(t->nll, ref, 1e-9 * std::abs(ref)) << ctx << " " << stride;
  }
  // A context past the session's limit is the session's limit; ids outside the rows are refused.
  std::vector<std::int32_t> bad = g.ids;
  bad[3] = static_cast<std::int32_t>(V);
  EXPECT_TRUE(slm_test::fails_with(slm::score_tokens(*m, bad, slm::score_options{}, cx), slm::errc::out_of_range,
                                   {"token id", "(token 3)"}));
  slm::score_options cold;
  cold.scale = 0;
  EXPECT_TRUE(slm_test::fails_with(slm::score_tokens(*m, g.ids, cold, cx), slm::errc::invalid_argument, {"scale"}));
}

TEST(Load, SamplingFromGenerationConfig) {
  auto j = [](std::string_view text) {
    auto v = slm::json::parse(text);
    EXPECT_TRUE(v.ok());
    return std::move(*v);
  };
  slm::sampler_config c = slm::sampling_from_generation_config(nullptr);
  EXPECT_EQ(c.temperature, 0.0f);  // no generation_config.json: greedy
  const auto greedy = j(R"({"temperature": 0.7, "top_k": 5, "repetition_penalty": 1.2})");
  c = slm::sampling_from_generation_config(&greedy);  // do_sample absent: greedy, penalties kept
  EXPECT_EQ(c.temperature, 0.0f);
  EXPECT_EQ(c.top_k, 0);
  EXPECT_FLOAT_EQ(c.repetition_penalty, 1.2f);
  const auto sampled = j(R"({"do_sample": true, "temperature": 0.7, "top_p": 0.9, "min_p": 0.05})");
  c = slm::sampling_from_generation_config(&sampled);
  EXPECT_FLOAT_EQ(c.temperature, 0.7f);
  EXPECT_EQ(c.top_k, 50);  // transformers' default
  EXPECT_FLOAT_EQ(c.top_p, 0.9f);
  EXPECT_FLOAT_EQ(c.min_p, 0.05f);
  const auto huge = j(R"({"do_sample": true, "top_k": 1e30})");
  EXPECT_EQ(slm::sampling_from_generation_config(&huge).top_k, 50);  // not an integer: the default
  const auto big = j(R"({"do_sample": true, "top_k": 99999999999})");
  EXPECT_EQ(slm::sampling_from_generation_config(&big).top_k, std::numeric_limits<std::int32_t>::max());
}

TEST(Load, BundledModelWithTokenizerAndDefaults) {
  const std::filesystem::path dir = std::filesystem::path(SLM_MODELS_DIR) / "nam56r-cpp-14m";
  auto m = slm::load(dir);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->model.kind(), slm::any_model::family::nam56r);
  ASSERT_TRUE(m->tok.has_value());
  EXPECT_EQ(m->model.weights().dir(), dir);
  // generation_config.json: do_sample, temperature 0.7, top_k 40, top_p 0.95; eos 3.
  EXPECT_FLOAT_EQ(m->defaults.sampling.temperature, 0.7f);
  EXPECT_EQ(m->defaults.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(m->defaults.sampling.top_p, 0.95f);
  ASSERT_FALSE(m->defaults.eos_ids.empty());
  EXPECT_TRUE(std::find(m->defaults.eos_ids.begin(), m->defaults.eos_ids.end(), 3) != m->defaults.eos_ids.end());
  if (m->tok->specials().eos >= 0)
    EXPECT_TRUE(std::find(m->defaults.eos_ids.begin(), m->defaults.eos_ids.end(), m->tok->specials().eos) !=
                m->defaults.eos_ids.end());
  EXPECT_TRUE(std::is_sorted(m->defaults.eos_ids.begin(), m->defaults.eos_ids.end()));
  EXPECT_EQ(std::set<std::int32_t>(m->defaults.eos_ids.begin(), m->defaults.eos_ids.end()).size(), m->defaults.eos_ids.size());

  slm::load_options no_tok;
  no_tok.tokenizer = false;
  auto bare = slm::load(dir, no_tok);
  ASSERT_TRUE(bare.ok()) << bare.error().message();
  EXPECT_FALSE(bare->tok.has_value());
}

TEST(Load, DirectoryWithoutTokenizerAndErrors) {
  auto m = slm::load(slm_test::test_data("oracle/hf/qwen2"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_EQ(m->model.kind(), slm::any_model::family::decoder);
  EXPECT_FALSE(m->tok.has_value());
  EXPECT_EQ(m->defaults.sampling.temperature, 0.0f);  // no do_sample: greedy
  EXPECT_EQ(m->defaults.eos_ids, std::vector<std::int32_t>{2});

  EXPECT_FALSE(slm::load(slm_test::test_data("no/such/model")).ok());
  // A broken tokenizer.json fails the load, before the weights are read.
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "slm_test_load_bad_tokenizer";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::filesystem::copy(slm_test::test_data("oracle/hf/qwen2"), dir, std::filesystem::copy_options::recursive);
  ASSERT_TRUE(slm_test::write_file(dir / "tokenizer.json", std::string_view("{\"model\": ")));
  auto bad = slm::load(dir);
  EXPECT_FALSE(bad.ok());
  if (!bad.ok()) EXPECT_NE(bad.error().message().find("tokenizer"), std::string::npos) << bad.error().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
