// Scoring (slm/generate/scoring.hpp), the documents it reads (slm/io/documents.hpp), the
// logits of a sequence (slm/models/sequence_logits.hpp) and loading any model directory
// (slm/models/load.hpp).
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
#include "slm/generate/throughput.hpp"
#include "slm/io/documents.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/load.hpp"
#include "slm/models/sequence_logits.hpp"
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
  // The one-line form `slm perplexity` prints (README pins its format).
  EXPECT_EQ(slm::to_string(t),
            "tokens 4  bytes 10  nll 2.079442 nats/token  ppl 8.0000  bits/byte 1.200000  top1 25.00%");
  EXPECT_EQ(slm::to_string(slm::score_tally{}),
            "tokens 0  bytes 0  nll 0.000000 nats/token  ppl 1.0000  bits/byte 0.000000  top1 0.00%");
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
// sequence_logits: full mode is one forward over the sequence (its rows are transformers'
// logits_full, within the 1e-4 of the scoring test above per row maximum); incremental
// mode's first P rows are the forward over the first P ids, and the rest the KV-cached
// steps, which agree with the full rows to rounding. Bad prefills and a sequence past the
// context are errors.
TEST(SequenceLogits, FullAndIncrementalRows) {
  const qwen2_oracle g = read_oracle();
  auto m = slm::any_model::load(slm_test::test_data("oracle/hf/qwen2"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  slm::compute_context cx{slm_test::the_pools().p2};
  const std::size_t T = g.ids.size(), V = m->vocab();
  ASSERT_EQ(V, g.V);
  auto full = slm::sequence_logits(*m, g.ids, {}, cx);
  ASSERT_TRUE(full.ok()) << full.error().message();
  ASSERT_EQ(full->size(), T * V);
  std::vector<float> by_hand(T * V);
  auto session = m->new_session();
  ASSERT_TRUE(session.forward(g.ids, T, by_hand.data(), cx).ok());  // [T] ids -> [T, V]
  EXPECT_TRUE(std::equal(by_hand.begin(), by_hand.end(), full->data()));
  float worst = 0, scale = 0;
  for (std::size_t i = 0; i < T * V; ++i) {
    worst = std::max(worst, std::fabs(full->data()[i] - g.logits[i]));
    scale = std::max(scale, std::fabs(g.logits[i]));
  }
  EXPECT_LE(worst, 1e-4f * scale);

  const std::size_t P = 3;
  slm::sequence_logits_options o;
  o.mode = slm::logits_mode::incremental;
  o.prefill = P;
  auto inc = slm::sequence_logits(*m, g.ids, o, cx);
  ASSERT_TRUE(inc.ok()) << inc.error().message();
  std::vector<float> first(P * V);
  auto s2 = m->new_session();
  ASSERT_TRUE(s2.forward(std::span(g.ids).first(P), P, first.data(), cx).ok());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), inc->data()));
  float step_worst = 0;
  for (std::size_t i = P * V; i < T * V; ++i) step_worst = std::max(step_worst, std::fabs(inc->data()[i] - full->data()[i]));
  EXPECT_LE(step_worst, 1e-4f * scale);

  o.prefill = 0;
  EXPECT_TRUE(slm_test::fails_with(slm::sequence_logits(*m, g.ids, o, cx), slm::errc::invalid_argument, {"prefill 0"}));
  o.prefill = T + 1;
  EXPECT_TRUE(slm_test::fails_with(slm::sequence_logits(*m, g.ids, o, cx), slm::errc::invalid_argument, {"prefill"}));
  slm::sequence_logits_options short_ctx;
  short_ctx.session.max_tokens = T - 1;
  EXPECT_TRUE(slm_test::fails_with(slm::sequence_logits(*m, g.ids, short_ctx, cx), slm::errc::out_of_range,
                                   {"exceed the context of"}));
}

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

// read_documents: files in the order given, a directory as its regular files (recursively)
// sorted by path; an empty document, an empty directory or a missing file is an error.
TEST(Documents, FilesAndDirectoriesInOrder) {
  slm_test::temp_dir tmp("docs");
  std::filesystem::create_directories(tmp / "dir" / "sub");
  ASSERT_TRUE(slm_test::write_file(tmp / "one.txt", std::string_view("first")));
  ASSERT_TRUE(slm_test::write_file(tmp / "dir" / "b.txt", std::string_view("bee")));
  ASSERT_TRUE(slm_test::write_file(tmp / "dir" / "a.txt", std::string_view("ay")));
  ASSERT_TRUE(slm_test::write_file(tmp / "dir" / "sub" / "c.txt", std::string_view("sea")));
  const std::vector<std::filesystem::path> paths = {tmp / "one.txt", tmp / "dir"};
  auto docs = slm::read_documents(paths);
  ASSERT_TRUE(docs.ok()) << docs.error().message();
  ASSERT_EQ(docs->size(), 4u);
  const std::vector<std::pair<std::filesystem::path, std::string>> want = {
      {tmp / "one.txt", "first"}, {tmp / "dir" / "a.txt", "ay"}, {tmp / "dir" / "b.txt", "bee"}, {tmp / "dir" / "sub" / "c.txt", "sea"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ((*docs)[i].name, want[i].first.string()) << i;
    EXPECT_EQ((*docs)[i].text, want[i].second) << i;
  }
  ASSERT_TRUE(slm_test::write_file(tmp / "empty.txt", std::string_view("")));
  const std::vector<std::filesystem::path> empty = {tmp / "empty.txt"};
  EXPECT_TRUE(slm_test::fails_with(slm::read_documents(empty), slm::errc::invalid_argument, {"empty.txt", "empty document"}));
  std::filesystem::create_directories(tmp / "none");
  const std::vector<std::filesystem::path> none = {tmp / "none"};
  EXPECT_TRUE(slm_test::fails_with(slm::read_documents(none), slm::errc::invalid_argument, {"no files in the directory"}));
  const std::vector<std::filesystem::path> missing = {tmp / "missing.txt"};
  EXPECT_FALSE(slm::read_documents(missing).ok());
}

// score_text is score_tokens over the tokenizer's encoding with BOS prepended (if the
// tokenizer has one), over the tokenizer's rows, and bytes the text's; score_documents
// adds them up, stops at a document boundary once max_tokens are scored, and names a
// failing document; to_json carries the figures.
TEST(Scoring, TextsAndDocumentsAsThePerplexityCommand) {
  auto m = slm::load(std::filesystem::path(SLM_MODELS_DIR) / "nam56r-cpp-14m");
  ASSERT_TRUE(m.ok()) << m.error().message();
  ASSERT_TRUE(m->tok.has_value());
  const slm::tokenizer& t = *m->tok;
  slm::compute_context cx{slm_test::the_pools().p2};
  cx.quantized_activations = slm::activation_precision::f32;
  const std::vector<slm::document> docs = {{"a.cpp", "int main() {\n  return 0;\n}\n"},
                                           {"b.cpp", "#include <vector>\nstd::vector<int> v;\n"},
                                           {"c.cpp", "// a comment\n"}};
  slm::score_options o;
  o.ctx = 8;
  o.stride = 4;
  std::vector<slm::score_tally> by_hand;
  for (const auto& d : docs) {
    slm::encode_options eo;
    eo.parse_special = false;
    auto ids = t.encode(d.text, eo);
    ASSERT_TRUE(ids.ok());
    if (t.specials().bos >= 0 && (ids->empty() || ids->front() != t.specials().bos)) ids->insert(ids->begin(), t.specials().bos);
    slm::score_options ov = o;
    ov.vocab = t.vocab_size();
    auto r = slm::score_tokens(m->model, *ids, ov, cx);
    ASSERT_TRUE(r.ok()) << r.error().message();
    r->bytes = d.text.size();
    EXPECT_EQ(r->tokens, ids->size() - 1);
    auto got = slm::score_text(m->model, t, d.text, o, cx);
    ASSERT_TRUE(got.ok()) << got.error().message();
    EXPECT_EQ(got->tokens, r->tokens);
    EXPECT_EQ(got->top1, r->top1);
    EXPECT_EQ(got->bytes, d.text.size());
    EXPECT_NEAR(got->nll, r->nll, 1e-9 * r->nll);
    by_hand.push_back(*r);
  }
  std::vector<std::string> seen;
  auto all = slm::score_documents(m->model, t, docs, o, std::numeric_limits<std::size_t>::max(), cx,
                                  [&](const slm::document_score& d) { seen.push_back(d.name); });
  ASSERT_TRUE(all.ok()) << all.error().message();
  EXPECT_EQ(seen, (std::vector<std::string>{"a.cpp", "b.cpp", "c.cpp"}));
  ASSERT_EQ(all->documents.size(), 3u);
  slm::score_tally sum;
  for (const auto& s : by_hand) sum.add(s);
  EXPECT_EQ(all->total.tokens, sum.tokens);
  EXPECT_EQ(all->total.bytes, sum.bytes);
  EXPECT_NEAR(all->total.nll, sum.nll, 1e-12 * sum.nll);
  // A budget the first document reaches: the rest are skipped whole.
  auto first = slm::score_documents(m->model, t, docs, o, by_hand[0].tokens, cx);
  ASSERT_TRUE(first.ok());
  ASSERT_EQ(first->documents.size(), 1u);
  EXPECT_EQ(first->total.tokens, by_hand[0].tokens);
  EXPECT_EQ(first->total.bytes, docs[0].text.size());
  auto two = slm::score_documents(m->model, t, docs, o, by_hand[0].tokens + 1, cx);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->documents.size(), 2u);
  // Errors name the document.
  slm::score_options bad = o;
  bad.scale = -1;
  EXPECT_TRUE(slm_test::fails_with(slm::score_documents(m->model, t, docs, bad, 100, cx), slm::errc::invalid_argument,
                                   {"a.cpp", "scale"}));

  const slm::json::value j = slm::to_json(all->documents[1].score, "b.cpp");
  EXPECT_EQ(j["name"].as_string(), "b.cpp");
  EXPECT_EQ(j["tokens"].as_uint64().value_or(0), by_hand[1].tokens);
  EXPECT_EQ(j["bytes"].as_uint64().value_or(0), docs[1].text.size());
  EXPECT_EQ(j["nll_sum"].as_double(), all->documents[1].score.nll);
  EXPECT_EQ(j["bits_per_byte"].as_double(), all->documents[1].score.bits_per_byte());
  EXPECT_EQ(j["top1_correct"].as_uint64().value_or(99999), by_hand[1].top1);
  EXPECT_EQ(j["ppl"].as_double(), all->documents[1].score.perplexity());
  EXPECT_EQ(slm::to_json(all->total).find("name"), nullptr);  // no name: no key
}

// measure_throughput: the prompt's forward and one forward per greedy step, counted and
// timed, over the session interface any_model gives.
TEST(Throughput, CountsAndTimesPrefillAndDecode) {
  auto m = slm::any_model::load(slm_test::test_data("oracle/hf/qwen2"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  slm::compute_context cx{slm_test::the_pools().p2};
  auto r = slm::measure_throughput(*m, 12, 5, {}, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->prompt_tokens, 12u);
  EXPECT_EQ(r->generated, 5u);
  EXPECT_GT(r->prefill_seconds, 0.0);
  EXPECT_GT(r->decode_seconds, 0.0);
  EXPECT_DOUBLE_EQ(r->decode_tokens_per_s(), 5.0 / r->decode_seconds);
  EXPECT_DOUBLE_EQ(r->prefill_tokens_per_s(), 12.0 / r->prefill_seconds);
  EXPECT_EQ(slm::throughput{}.decode_tokens_per_s(), 0.0);
  EXPECT_TRUE(slm_test::fails_with(slm::measure_throughput(*m, 0, 5, {}, cx), slm::errc::invalid_argument, {"0 tokens"}));
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
