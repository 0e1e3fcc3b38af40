// Sequence-level ensemble strategies (ensemble/answer.hpp, cascade.hpp, vote.hpp,
// refine.hpp) on the shipped specialists: nam56r-cpp-14m, nam56r-cmake-10m and
// nam56r-shell-10m, which share one tokenizer. Activations in f32 and one thread, so an
// answer computed twice is the same computation and compares exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/cascade.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/ensemble/refine.hpp"
#include "slm/ensemble/vote.hpp"
#include "slm/core/parallel.hpp"
#include "test_helpers.hpp"

namespace se = slm::ensemble;
using slm_test::fails_with;

namespace {

const std::string models_dir = SLM_MODELS_DIR;

// A one-line question with a discrete answer (the value main returns).
constexpr std::string_view question = "#include <cstdio>\n\nint main() {\n  std::printf(\"hello\\n\");\n  return ";
// A C++ function for the shell specialist to draft and the C++ specialist to review.
constexpr std::string_view cpp_prompt =
    "#include <vector>\n\n// Returns the sum of the elements of v.\ntemplate <typename T>\nT sum(const std::vector<T>& v) {\n";

class EnsembleStrategies : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto load = [](const char* name, std::optional<se::member_model>& into) {
      auto m = se::member_model::load(models_dir + "/" + name);
      ASSERT_TRUE(m.ok()) << m.error().message();
      into.emplace(std::move(*m));
    };
    load("nam56r-cpp-14m", cpp_model);
    load("nam56r-cmake-10m", cmake_model);
    load("nam56r-shell-10m", shell_model);
    for (auto* t : {&tok, &tok_copy}) {
      auto r = slm::tokenizer::load_dir(models_dir + "/nam56r-cpp-14m");
      ASSERT_TRUE(r.ok()) << r.error().message();
      t->emplace(std::move(*r));
    }
  }
  static void TearDownTestSuite() {
    cpp_model.reset();
    cmake_model.reset();
    shell_model.reset();
    tok.reset();
    tok_copy.reset();
  }
  void SetUp() override {
    ASSERT_TRUE(cpp_model && cmake_model && shell_model && tok && tok_copy);
    cx.quantized_activations = slm::activation_precision::f32;
  }

  static se::member_ref cpp() { return {&*cpp_model, &*tok, "cpp", 1.0f}; }
  static se::member_ref cmake() { return {&*cmake_model, &*tok, "cmake", 1.0f}; }
  static se::member_ref shell() { return {&*shell_model, &*tok, "shell", 1.0f}; }

  se::answer solo(const se::member_ref& m, std::string_view prompt, const se::answer_options& o) {
    auto a = se::member_answer(m, prompt, o, cx);
    EXPECT_TRUE(a.ok()) << a.error().message();
    return a.ok() ? std::move(*a) : se::answer{};
  }

  static inline std::optional<se::member_model> cpp_model, cmake_model, shell_model;
  static inline std::optional<slm::tokenizer> tok, tok_copy;
  slm::serial_executor ex;
  slm::compute_context cx{ex};
};

// ---- member_answer ----

TEST_F(EnsembleStrategies, AnswerLogProbsMatchAScoringForward) {
  // The per-token log-probs kept while generating equal those of one forward over
  // prompt + answer (prefill vs token-by-token decode: float rounding only, 1e-3 nats).
  se::answer_options o = se::one_line_answer();
  const se::answer a = solo(cpp(), question, o);
  ASSERT_FALSE(a.tokens.empty());
  EXPECT_EQ(a.reason, slm::stop_reason::stop_string);
  EXPECT_EQ(a.text.find('\n'), std::string::npos);
  EXPECT_EQ(a.tokens.size(), a.token_logprobs.size());
  auto p = se::encode_prompt(cpp(), question);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->front(), tok->specials().bos);  // the post-processor's BOS, as slm run
  EXPECT_EQ(a.prompt_tokens, p->size());
  auto s = se::score_continuation(cpp(), *p, a.tokens, cx);
  ASSERT_TRUE(s.ok()) << s.error().message();
  for (std::size_t i = 0; i < a.tokens.size(); ++i) {
    EXPECT_NEAR(s->logprobs[i], a.token_logprobs[i], 1e-3) << i;
    EXPECT_NEAR(s->top_logprobs[i], s->logprobs[i], 1e-3) << i;  // greedy: the top choice
    EXPECT_LE(a.token_logprobs[i], 0.0);
  }
  // The two confidences: geometric mean >= the weakest token.
  EXPECT_NEAR(a.confidence(), std::exp(a.mean_logprob()), 1e-15);
  EXPECT_LE(a.confidence(se::confidence_measure::min_token_prob), a.confidence());
  EXPECT_GT(a.confidence(se::confidence_measure::min_token_prob), 0.0);
  std::printf("cpp answers %zu tokens '%s': confidence %.4f (min token %.4f), %.4f s\n", a.tokens.size(),
              a.text.c_str(), a.confidence(), a.confidence(se::confidence_measure::min_token_prob), a.seconds);
}

// ---- cascade ----

TEST_F(EnsembleStrategies, CascadeThresholdZeroRunsOneMember) {
  const std::vector<se::member_ref> members{cpp(), cmake(), shell()};
  se::cascade_options o;
  o.confidence_threshold = 0;
  auto r = se::cascade(members, question, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->steps.size(), 1u);
  EXPECT_EQ(r->exit, se::cascade_exit::confident);
  EXPECT_EQ(r->winner, 0u);
  EXPECT_EQ(r->winning().name, "cpp");
  EXPECT_EQ(r->text(), solo(cpp(), question, o.answer).text);
  std::printf("cascade (threshold 0): cpp only, %.4f s\n", r->steps[0].reply.seconds);
}

TEST_F(EnsembleStrategies, CascadeThresholdAboveOneRunsAllAndPicksTheMostConfident) {
  const std::vector<se::member_ref> members{cpp(), cmake(), shell()};
  se::cascade_options o;
  o.confidence_threshold = 1.5;  // unreachable
  o.agreement_threshold = 1.5;   // and no agreement exit either
  auto r = se::cascade(members, question, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->steps.size(), 3u);
  EXPECT_EQ(r->exit, se::cascade_exit::exhausted);
  // Each step equals the member's answer computed on its own; the winner is the argmax.
  std::size_t best = 0;
  std::vector<double> conf;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const se::answer a = solo(members[i], question, o.answer);
    EXPECT_EQ(r->steps[i].member, i);
    EXPECT_EQ(r->steps[i].reply.tokens, a.tokens) << members[i].name;
    EXPECT_EQ(r->steps[i].reply.text, a.text) << members[i].name;
    EXPECT_EQ(r->steps[i].confidence, a.confidence()) << members[i].name;  // the same computation
    conf.push_back(a.confidence());
    if (conf[i] > conf[best]) best = i;
    std::printf("cascade step %zu %-5.*s '%s' confidence %.4f, %.4f s\n", i, static_cast<int>(members[i].name.size()),
                members[i].name.data(), a.text.c_str(), conf[i], r->steps[i].reply.seconds);
  }
  EXPECT_EQ(r->winner, best);
  EXPECT_EQ(r->text(), r->steps[best].reply.text);
  // A threshold between the confidences stops at the first member that reaches it.
  const double mid = conf[best];
  o.confidence_threshold = mid;
  auto r2 = se::cascade(members, question, o, cx);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->steps.size(), best + 1);
  EXPECT_EQ(r2->exit, se::cascade_exit::confident);
  EXPECT_EQ(r2->winner, best);
}

TEST_F(EnsembleStrategies, CascadeExitsWhenTwoMembersAgree) {
  // The same member listed twice agrees with itself: the cascade stops after two.
  const std::vector<se::member_ref> members{shell(), shell(), cpp()};
  se::cascade_options o;
  o.confidence_threshold = 1.5;
  o.agreement_threshold = 0;
  auto r = se::cascade(members, question, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->steps.size(), 2u);
  EXPECT_EQ(r->exit, se::cascade_exit::agreement);
  EXPECT_EQ(r->agreed_with, 0u);
  EXPECT_EQ(r->winner, 0u);  // equal confidences: the earlier one
  EXPECT_EQ(r->steps[0].reply.text, r->steps[1].reply.text);
  // Both must clear the agreement threshold: just above their confidence, all three run.
  o.agreement_threshold = std::nextafter(r->steps[0].confidence, 2.0);
  auto r2 = se::cascade(members, question, o, cx);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(r2->steps.size(), 3u);
  EXPECT_EQ(r2->exit, se::cascade_exit::exhausted);
  // The min-token measure is what the steps then record.
  o.measure = se::confidence_measure::min_token_prob;
  o.agreement_threshold = 0;
  auto r3 = se::cascade(members, question, o, cx);
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->steps[0].confidence, r3->steps[0].reply.confidence(se::confidence_measure::min_token_prob));
  EXPECT_LE(r3->steps[0].confidence, r->steps[0].confidence);
}

// ---- vote ----

TEST_F(EnsembleStrategies, VoteTwoOfThreeWins) {
  const std::vector<se::member_ref> members{shell(), cpp(), cpp()};
  auto r = se::majority_vote(members, question, {}, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->answers.size(), 3u);
  EXPECT_EQ(r->winner().answer, se::normalise_answer(r->answers[1].text));
  EXPECT_GE(r->winner().votes(), 2u);
  EXPECT_NE(std::find(r->winner().members.begin(), r->winner().members.end(), 2u), r->winner().members.end());
  std::size_t total = 0;
  for (const auto& e : r->tally) total += e.votes();
  EXPECT_EQ(total, 3u);
  for (std::size_t i = 0; i < 3; ++i)
    std::printf("vote %zu %-5.*s '%s' confidence %.4f, %.4f s\n", i, static_cast<int>(members[i].name.size()),
                members[i].name.data(), r->answers[i].text.c_str(), r->confidences[i], r->answers[i].seconds);
}

TEST(EnsembleVoteTally, TieBreaksByHand) {
  using strings = std::vector<std::string>;
  using doubles = std::vector<double>;
  // Majority first, whatever the confidences.
  auto t = se::tally_votes(strings{"a", "a", "b"}, doubles{0.1, 0.1, 0.9});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->front().answer, "a");
  EXPECT_EQ(t->front().votes(), 2u);
  // Equal votes: the larger summed confidence (b: 0.5 + 0.4 > a: 0.1 + 0.2); " b " is "b".
  t = se::tally_votes(strings{"a", "b", " b \n", "a"}, doubles{0.1, 0.5, 0.4, 0.2});
  ASSERT_TRUE(t.ok());
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].answer, "b");
  EXPECT_EQ((*t)[0].members, (std::vector<std::size_t>{1, 2}));
  EXPECT_DOUBLE_EQ((*t)[0].summed_confidence, 0.9);
  EXPECT_EQ((*t)[1].answer, "a");
  // Equal votes and confidence: member order.
  t = se::tally_votes(strings{"y", "x"}, doubles{0.5, 0.5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->front().answer, "y");
  t = se::tally_votes(strings{"x", "y"}, doubles{0.5, 0.5});
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->front().answer, "x");
  // Case folding merges votes; without it, the confidence decides.
  t = se::tally_votes(strings{"Foo", "bar", "foo"}, doubles{0.2, 0.9, 0.3}, true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->front().answer, "foo");
  EXPECT_EQ(t->front().votes(), 2u);
  t = se::tally_votes(strings{"Foo", "bar", "foo"}, doubles{0.2, 0.9, 0.3}, false);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->front().answer, "bar");
  EXPECT_EQ(t->size(), 3u);
}

// ---- refinement ----

TEST_F(EnsembleStrategies, RefineThresholdZeroKeepsTheDraft) {
  se::refine_options o;
  o.generation.max_new_tokens = 24;
  o.min_token_prob = 0;
  auto r = se::refine(shell(), cpp(), cpp_prompt, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_FALSE(r->rewritten);
  ASSERT_FALSE(r->draft.tokens.empty());
  EXPECT_EQ(r->reviewed, r->draft.tokens);  // one tokenizer: the draft's own ids
  EXPECT_EQ(r->accepted_tokens, r->draft.tokens.size());
  EXPECT_EQ(r->text, r->draft.text);
  EXPECT_EQ(r->final_mean_logprob_reviewer, r->draft_mean_logprob_reviewer);
  EXPECT_EQ(r->final_mean_logprob_drafter, r->draft_mean_logprob_drafter);
  // A member reviewing its own greedy draft with a zero gap: every token is its top choice.
  se::refine_options self = o;
  self.max_logprob_gap = 1e-3;  // prefill vs decode rounding
  auto s = se::refine(cpp(), cpp(), cpp_prompt, self, cx);
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_FALSE(s->rewritten);
  EXPECT_EQ(s->accepted_tokens, s->draft.tokens.size());
}

TEST_F(EnsembleStrategies, RefineThresholdOneRewritesFromTheFirstToken) {
  se::refine_options o;
  o.generation.max_new_tokens = 24;
  o.min_token_prob = 1;
  auto r = se::refine(shell(), cpp(), cpp_prompt, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r->rewritten);
  EXPECT_EQ(r->accepted_tokens, 0u);
  EXPECT_EQ(r->accepted_text, "");
  const se::answer own = solo(cpp(), cpp_prompt, o.generation);
  EXPECT_EQ(r->rewrite.tokens, own.tokens);
  EXPECT_EQ(r->text, own.text);
  EXPECT_NEAR(r->final_mean_logprob_reviewer, se::mean_of(own.token_logprobs), 1e-12);
}

TEST_F(EnsembleStrategies, RefineShellDraftImprovesUnderTheCppReviewer) {
  se::refine_options o;
  o.generation.max_new_tokens = 24;
  o.min_token_prob = 0.05;
  auto r = se::refine(shell(), cpp(), cpp_prompt, o, cx);
  ASSERT_TRUE(r.ok()) << r.error().message();
  std::printf("refine shell->cpp: draft %zu tokens (%.4f s), accepted %zu, rewrite %zu tokens (%.4f s), review %.4f s, "
              "total %.4f s\n", r->draft.tokens.size(), r->draft.seconds, r->accepted_tokens, r->rewrite.tokens.size(),
              r->rewrite.seconds, r->review_seconds, r->seconds);
  std::printf("  mean log-prob under cpp:   draft %.4f -> final %.4f\n", r->draft_mean_logprob_reviewer,
              r->final_mean_logprob_reviewer);
  std::printf("  mean log-prob under shell: draft %.4f -> final %.4f\n", r->draft_mean_logprob_drafter,
              r->final_mean_logprob_drafter);
  std::printf("  draft: '%s'\n  final: '%s'\n", r->draft.text.c_str(), r->text.c_str());
  EXPECT_TRUE(r->rewritten);  // the shell model's C++ has a token the C++ model rejects
  EXPECT_LT(r->accepted_tokens, r->reviewed.size());
  if (r->accepted_tokens < r->reviewed.size()) {
    EXPECT_LT(r->reviewer_logprobs[r->accepted_tokens], std::log(0.05));
  }
  for (std::size_t i = 0; i < r->accepted_tokens; ++i) EXPECT_GE(r->reviewer_logprobs[i], std::log(0.05));
  EXPECT_EQ(r->text.substr(0, r->accepted_text.size()), r->accepted_text);
  EXPECT_GE(r->final_mean_logprob_reviewer, r->draft_mean_logprob_reviewer);

  // Two tokenizer objects: the handover goes through text (decode, re-encode); the
  // reviewed ids spell the draft's text exactly.
  const se::member_ref cpp_other{&*cpp_model, &*tok_copy, "cpp'", 1.0f};
  auto t = se::refine(shell(), cpp_other, cpp_prompt, o, cx);
  ASSERT_TRUE(t.ok()) << t.error().message();
  auto spelled = tok_copy->decode(t->reviewed);
  ASSERT_TRUE(spelled.ok());
  EXPECT_EQ(*spelled, t->draft.text);
  EXPECT_GE(t->final_mean_logprob_reviewer, t->draft_mean_logprob_reviewer);
  std::printf("  via text: %zu reviewed tokens, accepted %zu, cpp %.4f -> %.4f\n", t->reviewed.size(),
              t->accepted_tokens, t->draft_mean_logprob_reviewer, t->final_mean_logprob_reviewer);
}

// ---- bad input ----

TEST_F(EnsembleStrategies, BadInputIsAClearError) {
  using slm::errc;
  const std::vector<se::member_ref> none;
  const std::vector<se::member_ref> members{cpp(), shell()};
  EXPECT_TRUE(fails_with(se::cascade(none, question, {}, cx), errc::invalid_argument, {"cascade: no members"}));
  EXPECT_TRUE(fails_with(se::majority_vote(none, question, {}, cx), errc::invalid_argument, {"no members"}));
  se::cascade_options nan;
  nan.confidence_threshold = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(fails_with(se::cascade(members, question, nan, cx), errc::invalid_argument, {"confidence_threshold", "nan"}));
  nan = {};
  nan.agreement_threshold = -0.5;
  EXPECT_TRUE(fails_with(se::cascade(members, question, nan, cx), errc::invalid_argument, {"agreement_threshold", "-0.5"}));
  EXPECT_TRUE(fails_with(se::cascade(members, "", {}, cx), errc::invalid_argument, {"prompt is empty"}));
  EXPECT_TRUE(fails_with(se::majority_vote(members, "", {}, cx), errc::invalid_argument, {"prompt is empty"}));
  EXPECT_TRUE(fails_with(se::member_answer(cpp(), "", {}, cx), errc::invalid_argument, {"prompt is empty"}));
  EXPECT_TRUE(fails_with(se::refine(shell(), cpp(), "", {}, cx), errc::invalid_argument, {"prompt is empty"}));

  const std::vector<se::member_ref> hollow{cpp(), {nullptr, &*tok, "ghost", 1.0f}};
  EXPECT_TRUE(fails_with(se::cascade(hollow, question, {}, cx), errc::invalid_argument, {"'ghost'", "no model"}));
  se::member_ref cold = cpp();
  cold.temperature = 0;
  EXPECT_TRUE(fails_with(se::member_answer(cold, question, {}, cx), errc::invalid_argument, {"temperature 0"}));
  se::answer_options zero;
  zero.max_new_tokens = 0;
  EXPECT_TRUE(fails_with(se::member_answer(cpp(), question, zero, cx), errc::invalid_argument, {"max_new_tokens"}));
  se::answer_options hot;
  hot.sampling.top_p = 2;
  EXPECT_TRUE(fails_with(se::member_answer(cpp(), question, hot, cx), errc::invalid_argument, {"top_p"}));

  se::refine_options ro;
  ro.min_token_prob = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(fails_with(se::refine(shell(), cpp(), question, ro, cx), errc::invalid_argument, {"min_token_prob"}));
  ro = {};
  ro.max_logprob_gap = -1;
  EXPECT_TRUE(fails_with(se::refine(shell(), cpp(), question, ro, cx), errc::invalid_argument, {"max_logprob_gap"}));
  EXPECT_TRUE(fails_with(se::refine(shell(), {&*cpp_model, nullptr, "blind", 1.0f}, question, {}, cx),
                         errc::invalid_argument, {"reviewer", "'blind'", "no tokenizer"}));

  const std::vector<std::string> two{"a", "b"};
  const std::vector<double> one{0.5};
  EXPECT_TRUE(fails_with(se::tally_votes(two, one), errc::invalid_argument, {"2 answers but 1 confidences"}));
  const std::vector<double> bad{0.5, std::numeric_limits<double>::quiet_NaN()};
  EXPECT_TRUE(fails_with(se::tally_votes(two, bad), errc::invalid_argument, {"answer 1 is NaN"}));
}

}  // namespace
