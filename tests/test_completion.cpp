// The completion engine (generate/completion.hpp). The oracle is a fresh session: a
// generator over a new session, fed the whole prompt in one call, then greedy decoding.
// Checked:
//  (a) on the golden models of every cache kind (GQA, MLA, MLA + DSA, MoE, Mamba-2 and the
//      hybrids) and on NAM56R (Mamba-3, M2RNN, MLA + DSA), with f32 activations: a typing
//      session (append, edit in the middle, the same prompt again, a shorter one) gives
//      the fresh session's greedy ids on every request, and reuses what it may;
//  (b) an edit in the middle of a recurrent model's prompt restarts from the nearest
//      checkpoint at or before it, and recomputes only the tokens after it;
//  (c) typing at the end of an infill prompt on the bundled model recomputes at most the
//      typed tokens + the boundary margin + the two FIM tokens after the prefix;
//  (d) the line rules (single line, indentation), stop strings and time budgets;
//  (e) a cache budget keeps the checkpoints and idle sessions under it, with the same ids;
//  (f) bad requests (empty, ids outside the vocabulary, past the context, invalid UTF-8,
//      cancelled) get clear errors, and the engine keeps serving;
//  (g) four threads at once on one engine get the fresh ids, and a newer request of the
//      same key cancels the older one.
#include <gtest/gtest.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "slm/generate/completion.hpp"
#include "slm/models/any_model.hpp"
#include "test_helpers.hpp"

namespace {

using ids_t = std::vector<std::int32_t>;

slm::compute_context f32_context() {
  slm::compute_context cx{slm_test::the_pools().p2};
  cx.quantized_activations = slm::activation_precision::f32;
  return cx;
}

// The oracle: a fresh session fed the prompt in one call, then greedy.
ids_t fresh_greedy(const slm::any_model& m, const ids_t& prompt, std::size_t n, const slm::session_options& so = {}) {
  slm::compute_context cx = f32_context();
  slm::generator<slm::any_session> g(m.new_session(so), nullptr, m.vocab(), slm::completion_request::greedy());
  EXPECT_TRUE(g.prefill(prompt, cx, prompt.size()).ok());
  slm::generation_options go;
  go.max_new_tokens = n;
  auto r = g.generate(go, cx);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? r->tokens : ids_t{};
}

// Deterministic pseudo-random ids in [lo, hi).
ids_t some_ids(std::size_t n, std::uint32_t seed, std::int32_t lo, std::int32_t hi) {
  ids_t v(n);
  std::uint32_t x = seed * 2654435761u + 12345u;
  for (auto& id : v) {
    x = x * 1664525u + 1013904223u;
    id = lo + static_cast<std::int32_t>((x >> 8) % static_cast<std::uint32_t>(hi - lo));
  }
  return v;
}

slm::completion_request request(ids_t prompt, std::size_t n, std::vector<std::size_t> boundaries = {}) {
  slm::completion_request r;
  r.prompt = std::move(prompt);
  r.max_tokens = n;
  r.boundaries = std::move(boundaries);
  return r;
}

struct family_case {
  std::string dir;  // under tests/data
  bool recurrent;
  // DeepSeek sparse attention picks top-k keys: other call shapes may swap near-tied keys
  // (generate/completion.hpp, "Outputs"), so a typing session's ids are compared with a
  // fresh session's only where the calls are the same (a request with nothing reused).
  bool top_k_keys = false;
};
void PrintTo(const family_case& c, std::ostream* os) { *os << c.dir; }

class CompletionReuse : public ::testing::TestWithParam<family_case> {};

TEST_P(CompletionReuse, TypingSessionGivesTheFreshIdsAndReuses) {
  auto m = slm::any_model::load(slm_test::test_data(GetParam().dir));
  ASSERT_TRUE(m.ok()) << m.error().message();
  const auto V = static_cast<std::int32_t>(std::min<std::size_t>(m->vocab(), 256));
  slm::completion_options o;
  o.checkpoint_interval = 8;
  o.boundary_margin = 2;
  o.prefill_chunk = 5;  // several forwards per prompt, cut at the checkpoints
  slm::completion_engine engine(*m, nullptr, o);
  slm::compute_context cx = f32_context();
  constexpr std::size_t n = 6;

  const ids_t base = some_ids(40, 1, 1, V);
  ids_t appended = base;
  for (std::int32_t t : some_ids(3, 2, 1, V)) appended.push_back(t);
  ids_t edited = appended;
  edited[21] = (edited[21] + 7) % V;  // an edit in the middle
  const ids_t shorter(edited.begin(), edited.begin() + 30);
  const std::vector<ids_t> prompts = {base, appended, edited, edited, shorter, appended};

  std::size_t reused_total = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    auto r = engine.complete(request(prompts[i], n, {prompts[i].size() - 1}), cx);
    ASSERT_TRUE(r.ok()) << "request " << i << ": " << r.error().message();
    if (!GetParam().top_k_keys || r->reused_tokens == 0) {
      EXPECT_EQ(r->tokens, fresh_greedy(*m, prompts[i], n)) << "request " << i;
    }
    EXPECT_EQ(r->reused_tokens + r->computed_tokens, prompts[i].size()) << "request " << i;
    EXPECT_GE(r->computed_tokens, 1u) << "the last prompt token is always computed";
    reused_total += r->reused_tokens;
  }
  EXPECT_GT(reused_total, 0u);  // the exact counts are the next test's
  const auto st = engine.stats();
  EXPECT_EQ(st.requests, prompts.size());
  if (GetParam().recurrent) {
    EXPECT_GT(st.checkpoints, 0u) << "a recurrent model keeps checkpoints";
  } else {
    EXPECT_EQ(st.checkpoints, 0u) << "a KV-only model rolls back: no checkpoint needed";
  }
}

TEST_P(CompletionReuse, AppendingReusesThePromptAndAnEditRestartsBeforeIt) {
  auto m = slm::any_model::load(slm_test::test_data(GetParam().dir));
  ASSERT_TRUE(m.ok()) << m.error().message();
  const auto V = static_cast<std::int32_t>(std::min<std::size_t>(m->vocab(), 256));
  slm::completion_options o;
  o.checkpoint_interval = 16;
  o.slots = 1;
  slm::completion_engine engine(*m, nullptr, o);
  slm::compute_context cx = f32_context();
  const ids_t base = some_ids(48, 3, 1, V);
  auto r0 = engine.complete(request(base, 4, {base.size()}), cx);
  ASSERT_TRUE(r0.ok()) << r0.error().message();
  EXPECT_EQ(r0->reused_tokens, 0u);
  EXPECT_EQ(r0->computed_tokens, base.size());

  // Appending: the common prefix is the 48 prompt tokens (the generated ones differ).
  ids_t appended = base;
  appended.push_back(5);
  appended.push_back(9);
  auto r1 = engine.complete(request(appended, 4), cx);
  ASSERT_TRUE(r1.ok()) << r1.error().message();
  EXPECT_EQ(r1->tokens, fresh_greedy(*m, appended, 4));
  if (!GetParam().recurrent) {
    EXPECT_EQ(r1->reused_tokens, base.size());  // rollback of the 4 generated tokens
  } else {
    // The recurrent state at 48 is gone (4 generated tokens past it); the boundary's
    // checkpoint at 48 - 4 = 44 is the nearest.
    EXPECT_TRUE(r1->from_checkpoint);
    EXPECT_EQ(r1->reused_tokens, base.size() - o.boundary_margin);
  }

  // An edit at 37: a KV model keeps 37 tokens, a recurrent one restarts from the
  // checkpoint at 32 (every 16 tokens).
  ids_t edited = appended;
  edited[37] = (edited[37] + 1) % V;
  auto r2 = engine.complete(request(edited, 4), cx);
  ASSERT_TRUE(r2.ok()) << r2.error().message();
  EXPECT_EQ(r2->tokens, fresh_greedy(*m, edited, 4));
  EXPECT_EQ(r2->reused_tokens, GetParam().recurrent ? 32u : 37u);
  EXPECT_EQ(r2->computed_tokens, edited.size() - r2->reused_tokens);
}

INSTANTIATE_TEST_SUITE_P(Families, CompletionReuse,
                         ::testing::Values(family_case{"golden/hf/llama", false}, family_case{"golden/hf/qwen3_moe", false},
                                           family_case{"golden/hf/deepseek_v3", false},
                                           family_case{"golden/hf/deepseek_v32", false, true},
                                           family_case{"golden/hf/mamba2", true}, family_case{"golden/hf/nemotron_h", true},
                                           family_case{"golden/hf/granitemoehybrid", true},
                                           family_case{"nam56r/tiny", true}),
                         [](const ::testing::TestParamInfo<family_case>& i) {
                           std::string n = i.param.dir.substr(i.param.dir.rfind('/') + 1);
                           return n;
                         });

// ---- Text: the bundled model and its tokenizer ----

class CompletionText : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = std::string(SLM_MODELS_DIR) + "/nam56r-cpp-14m";
    auto t = slm::tokenizer::load_dir(dir);
    ASSERT_TRUE(t.ok()) << t.error().message();
    tok_ = new slm::tokenizer(std::move(*t));
    auto m = slm::any_model::load(dir);
    ASSERT_TRUE(m.ok()) << m.error().message();
    model_ = new slm::any_model(std::move(*m));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
    model_ = nullptr;
    tok_ = nullptr;
  }
  static slm::tokenizer* tok_;
  static slm::any_model* model_;
};
slm::tokenizer* CompletionText::tok_ = nullptr;
slm::any_model* CompletionText::model_ = nullptr;

TEST_F(CompletionText, InfillRequestIsTheFimPromptAfterTheExtraChunks) {
  slm::infill_input in;
  in.prefix = "int add(int a, int b) {\n  ";
  in.suffix = "\n}\n";
  auto r = slm::infill_request(*tok_, in);
  ASSERT_TRUE(r.ok()) << r.error().message();
  auto fim = slm::fim_prompt(*tok_, in.prefix, in.suffix);
  ASSERT_TRUE(fim.ok());
  EXPECT_EQ(r->prompt, *fim);
  // The prefix's end: the end of the prompt in SPM order (the bundled model's), the FIM
  // suffix token in PSM order.
  ASSERT_EQ(tok_->fim_preference(), slm::fim_order::spm);
  ASSERT_EQ(r->boundaries.size(), 1u);
  EXPECT_EQ(r->boundaries[0], r->prompt.size());
  in.order = slm::fim_order::psm;
  auto psm = slm::infill_request(*tok_, in);
  ASSERT_TRUE(psm.ok());
  ASSERT_EQ(psm->boundaries.size(), 1u);
  ASSERT_LT(psm->boundaries[0], psm->prompt.size());
  EXPECT_EQ(psm->prompt[psm->boundaries[0]], tok_->specials().fim_suffix);
  in.order.reset();
  EXPECT_EQ(r->min_indent, 2u);
  for (std::int32_t id : {tok_->specials().eos, tok_->specials().fim_middle})
    EXPECT_NE(std::find(r->stop_tokens.begin(), r->stop_tokens.end(), id), r->stop_tokens.end());

  in.extra = {{"util.hpp", "int twice(int x);\n"}};
  auto e = slm::infill_request(*tok_, in);
  ASSERT_TRUE(e.ok()) << e.error().message();
  const auto sep = tok_->find("<FILE_SEP>");
  ASSERT_TRUE(sep.has_value());
  EXPECT_EQ(e->prompt.front(), *sep);
  ASSERT_EQ(e->boundaries.size(), 2u);
  EXPECT_EQ(ids_t(e->prompt.begin() + static_cast<std::ptrdiff_t>(e->boundaries[0]), e->prompt.end()), *fim);

  in.suffix = "ok \xC3\x28 bad";
  EXPECT_TRUE(slm_test::fails_with(slm::infill_request(*tok_, in), slm::errc::invalid_argument,
                                   {"suffix", "UTF-8", "byte 3"}));
  EXPECT_EQ(slm::line_indent("a\n\t  x"), 3u);
  EXPECT_EQ(slm::line_indent("none"), 0u);
}

TEST_F(CompletionText, TypingAtTheEndRecomputesOnlyTheTypedTokensAndFreshIdsHold) {
  slm::completion_engine engine(*model_, tok_);
  slm::compute_context cx = f32_context();
  const std::string file =
      "#include <vector>\n\n// Returns the sum of the elements of v.\ntemplate <typename T>\nT sum(const std::vector<T>& v) {\n"
      "  T total{};\n  for (const T& x : v) total += x;\n  return total;\n}\n\n// Returns the largest element.\n";
  std::string typed;
  const std::string keys = "int max_of(";
  std::vector<std::size_t> recomputed;
  for (std::size_t k = 0; k <= keys.size(); ++k) {
    slm::infill_input in;
    in.prefix = file + keys.substr(0, k);
    auto req = slm::infill_request(*tok_, in);
    ASSERT_TRUE(req.ok()) << req.error().message();
    req->max_tokens = 8;
    auto r = engine.complete(*req, cx);
    ASSERT_TRUE(r.ok()) << r.error().message();
    // The fresh session's ids, with the same stop tokens.
    slm::generator<slm::any_session> g(model_->new_session(), tok_, model_->vocab(), slm::completion_request::greedy());
    ASSERT_TRUE(g.prefill(req->prompt, cx, req->prompt.size()).ok());
    slm::generation_options go;
    go.max_new_tokens = 8;
    go.stop_tokens = req->stop_tokens;
    auto f = g.generate(go, cx);
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(r->tokens, f->tokens) << "keystroke " << k;
    if (k > 0) recomputed.push_back(r->computed_tokens);
  }
  // One character a keystroke, at the end of the prompt (SPM order): at most a token or
  // two of changed prefix and the margin (4) before it.
  for (std::size_t i = 0; i < recomputed.size(); ++i) EXPECT_LE(recomputed[i], 2u + 4u) << "keystroke " << i + 1;
  EXPECT_GT(engine.stats().checkpoints, 0u);
}

TEST_F(CompletionText, LineRulesStopStringsAndBudgets) {
  slm::completion_engine engine(*model_, tok_);
  slm::compute_context cx = f32_context();
  slm::infill_input in;
  in.prefix = "int main() {\n  int x = 1;\n  ";
  auto req = slm::infill_request(*tok_, in);
  ASSERT_TRUE(req.ok());
  req->max_tokens = 40;
  req->min_indent.reset();
  auto plain = engine.complete(*req, cx);
  ASSERT_TRUE(plain.ok()) << plain.error().message();

  req->single_line = true;
  std::string streamed;
  auto one = engine.complete(*req, cx, [&](std::string_view t) {
    streamed.append(t);
    return true;
  });
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_EQ(one->text, streamed);
  EXPECT_EQ(one->text.find('\n'), std::string::npos);
  EXPECT_EQ(plain->text.substr(0, one->text.size()), one->text);

  // The prompt budget: past it before any chunk, nothing is computed, and the next
  // request goes on normally.
  req->single_line = false;
  req->prompt_seconds = 1e-12;
  engine.clear();
  auto late = engine.complete(*req, cx);
  ASSERT_TRUE(late.ok()) << late.error().message();
  EXPECT_EQ(late->reason, slm::stop_reason::time_budget);
  EXPECT_TRUE(late->text.empty());
  req->prompt_seconds = 0;
  auto again = engine.complete(*req, cx);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tokens, plain->tokens);

  // The host stops the stream: no more text after it returns false.
  std::size_t calls = 0;
  auto stopped = engine.complete(*req, cx, [&](std::string_view) { return ++calls < 2; });
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ(stopped->reason, slm::stop_reason::callback);
  EXPECT_EQ(calls, 2u);
}

TEST(CompletionLineRules, IndentationEndsTheBlockAndBlankLinesPass) {
  auto run = [](std::vector<std::string_view> pieces, std::size_t indent) {
    slm::detail::line_rules l(indent);
    std::string out;
    for (auto p : pieces) {
      out += l.push(p);
      if (l.stopped()) return out + "|";
    }
    return out + l.flush();
  };
  EXPECT_EQ(run({"a + b;\n  c", ";\n}"}, 2), "a + b;\n  c;|");
  EXPECT_EQ(run({"x\n", "\n", "    y\n", "  z"}, 4), "x\n\n    y|");
  EXPECT_EQ(run({"x\n", " ", " "}, 4), "x\n  ");  // the end of generation: the held text is final
  EXPECT_EQ(run({"\tq\n\tr"}, 1), "\tq\n\tr");
  slm::detail::line_rules none(std::nullopt);
  EXPECT_EQ(none.push("a\nb\n"), "a\nb\n");
}

TEST(Completion, CacheBudgetKeepsTheBytesUnderItWithTheSameIds) {
  auto m = slm::any_model::load(slm_test::test_data("golden/hf/nemotron_h"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  slm::compute_context cx = f32_context();
  slm::completion_options big;
  big.checkpoint_interval = 4;
  slm::completion_engine unbounded(*m, nullptr, big);
  ASSERT_TRUE(unbounded.complete(request(some_ids(60, 4, 1, 256), 2), cx).ok());
  const auto full = unbounded.stats();
  ASSERT_GT(full.checkpoints, 4u);
  ASSERT_GT(full.checkpoint_bytes, 0u);

  slm::completion_options small = big;
  small.cache_budget_bytes = full.cache_bytes / 3;
  slm::completion_engine bounded(*m, nullptr, small);
  for (std::uint32_t i = 0; i < 4; ++i) {
    ids_t p = some_ids(60, 4, 1, 256);
    p[50 - 10 * i] = static_cast<std::int32_t>(i + 1);
    auto r = bounded.complete(request(p, 3), cx);
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->tokens, fresh_greedy(*m, p, 3)) << i;
    const auto st = bounded.stats();
    EXPECT_LE(st.cache_bytes, small.cache_budget_bytes) << i;
    EXPECT_EQ(st.cache_bytes, st.checkpoint_bytes + st.session_bytes);
  }
}

TEST(Completion, BadRequestsGetClearErrorsAndTheEngineKeepsServing) {
  auto m = slm::any_model::load(slm_test::test_data("golden/hf/mamba2"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  slm::session_options so;
  so.max_tokens = 32;
  slm::completion_options o;
  o.session = so;
  slm::completion_engine engine(*m, nullptr, o);
  slm::compute_context cx = f32_context();
  EXPECT_TRUE(slm_test::fails_with(engine.complete(request({}, 2), cx), slm::errc::invalid_argument, {"empty"}));
  EXPECT_TRUE(slm_test::fails_with(engine.complete(request({1, 2, 100000}, 2), cx), slm::errc::out_of_range,
                                   {"100000", "vocabulary"}));
  EXPECT_TRUE(slm_test::fails_with(engine.complete(request(some_ids(32, 5, 1, 256), 2), cx),
                                   slm::errc::out_of_range, {"context of 32"}));
  slm::completion_request strings = request({1, 2, 3}, 2);
  strings.stop_strings = {"x"};
  EXPECT_TRUE(slm_test::fails_with(engine.complete(strings, cx), slm::errc::invalid_argument, {"tokenizer"}));
  slm::completion_request hot = request({1, 2, 3}, 2);
  hot.sampling.temperature = -1;
  EXPECT_FALSE(engine.complete(hot, cx).ok());

  slm::cancellation cancel;
  cancel.cancel();
  slm::compute_context cancelled = f32_context();
  cancelled.cancel = &cancel;
  const ids_t p = some_ids(20, 6, 1, 256);
  EXPECT_TRUE(slm_test::fails_with(engine.complete(request(p, 2), cancelled), slm::errc::cancelled, {"cancelled"}));
  auto ok = engine.complete(request(p, 3), cx);
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_EQ(ok->tokens, fresh_greedy(*m, p, 3, so));
}

TEST(Completion, FourThreadsAtOnceGetTheFreshIds) {
  auto m = slm::any_model::load(slm_test::test_data("golden/hf/nemotron_h"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  slm::completion_options o;
  o.checkpoint_interval = 8;
  slm::completion_engine engine(*m, nullptr, o);  // two slots: the other threads get sessions of their own
  std::vector<ids_t> prompts, want;
  for (std::uint32_t i = 0; i < 4; ++i) {
    prompts.push_back(some_ids(30, 10 + i, 1, 256));
    want.push_back(fresh_greedy(*m, prompts.back(), 4));
  }
  std::vector<ids_t> got(4);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      slm::serial_executor serial;
      slm::compute_context cx{serial};
      cx.quantized_activations = slm::activation_precision::f32;
      for (int rep = 0; rep < 3; ++rep) {
        ids_t p = prompts[(t + static_cast<std::size_t>(rep)) % 4];
        auto r = engine.complete(request(p, 4), cx);
        if (!r.ok() || r->tokens != want[(t + static_cast<std::size_t>(rep)) % 4]) ++failures;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_LE(engine.stats().slots, o.slots);
}

TEST(Completion, ANewerRequestOfTheSameKeyCancelsTheOlder) {
  auto m = slm::any_model::load(slm_test::test_data("golden/hf/llama"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto tok = slm::tokenizer::parse(slm_test::byte_tokenizer_json());
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  slm::completion_engine engine(*m, &*tok);
  std::atomic<bool> a_started{false}, b_started{false};
  slm::result<slm::completion_result> a = slm::make_error(slm::errc::invalid_argument, "not run");
  std::thread older([&] {
    slm::compute_context cx = f32_context();
    slm::completion_request r = request(some_ids(20, 7, 1, 256), 60);
    r.key = "main.cpp";
    // The first text waits for the newer request, which cancels this one when it starts.
    a = engine.complete(r, cx, [&](std::string_view) {
      a_started = true;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!b_started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
      return true;
    });
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!a_started && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_TRUE(a_started.load());
  slm::serial_executor serial;
  slm::compute_context cx{serial};
  cx.quantized_activations = slm::activation_precision::f32;
  slm::completion_request r = request(some_ids(21, 7, 1, 256), 4);
  r.key = "main.cpp";
  auto b = engine.complete(r, cx, [&](std::string_view) {
    b_started = true;
    return true;
  });
  b_started = true;
  older.join();
  ASSERT_TRUE(b.ok()) << b.error().message();
  EXPECT_EQ(b->tokens, fresh_greedy(*m, r.prompt, 4));
  EXPECT_TRUE(slm_test::fails_with(a, slm::errc::cancelled, {"cancelled"}));
}

}  // namespace
