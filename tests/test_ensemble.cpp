// The ensemble end to end (ensemble.hpp: ensemble.json -> registry + router + strategy) on
// the shipped models: models/ensemble.json (members cpp = nam56r-cpp-14m, cmake =
// nam56r-cmake-10m, shell = nam56r-shell-10m, one tokenizer; the classifier router
// models/router.safetensors), plus configs written here for the other routers, strategies
// and budgets (they reach the models through a symlink, so member paths stay relative).
//
// Exactness: every strategy is checked against the component it dispatches to, called by
// hand on the same members (member_answer, generate_mixture, majority_vote, refine,
// cascade semantics, the target's plain greedy output). Activations are f32 and every
// compute_context runs a serial executor, so the same request is the same arithmetic in
// the same order: comparisons are equality of text (and of tokens where they are exposed),
// not a tolerance - including concurrent requests against serial ones.
// Generations are short (16 tokens) so the whole file runs in seconds on two cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "slm/ensemble/ensemble.hpp"
#include "slm/ensemble/heldout.hpp"
#include "test_helpers.hpp"

namespace {

namespace fs = std::filesystem;
using namespace slm::ensemble;
using slm::errc;
using slm_test::fails_with;

const fs::path models_dir = fs::path(SLM_MODELS_DIR);
const fs::path heldout_dir = fs::path(SLM_TEST_DATA_DIR) / "ensemble" / "heldout";
const std::vector<std::string> labels = {"cpp", "cmake", "shell"};
constexpr std::size_t gen_tokens = 16;

bool models_present() {
  for (const char* d : {"nam56r-cpp-14m", "nam56r-cmake-10m", "nam56r-shell-10m"})
    if (!fs::exists(models_dir / d / "model.safetensors")) return false;
  return fs::exists(models_dir / "ensemble.json") && fs::exists(models_dir / "router.safetensors");
}
#define REQUIRE_MODELS() \
  if (!models_present()) GTEST_SKIP() << "the shipped models (models/) are not there"

// A serial executor with f32 activations: the exact, order-fixed arithmetic.
struct f32_context {
  slm::serial_executor ex;
  slm::compute_context cx{ex};
  f32_context() { cx.quantized_activations = slm::activation_precision::f32; }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct sample {
  std::string name;  // the file's real name (hash prefix stripped)
  std::string text;
  std::string label;
};

const std::vector<sample>& heldout() {
  static const std::vector<sample> all = [] {
    std::vector<sample> out;
    for (const std::string& l : labels) {
      std::vector<fs::path> files;
      for (const auto& e : fs::directory_iterator(heldout_dir / l)) files.push_back(e.path());
      std::sort(files.begin(), files.end());
      for (const auto& p : files) {
        std::string name = p.filename().string();
        if (name.size() > 13 && name[12] == '_') name = name.substr(13);
        out.push_back({name, read_file(p), l});
      }
    }
    return out;
  }();
  return all;
}

// A scratch directory with models -> the shipped models and an ensemble.json in it.
struct config_dir {
  slm_test::temp_dir dir{"ensemble"};
  config_dir() {
    std::error_code ec;
    fs::create_directory_symlink(fs::absolute(models_dir), dir / "models", ec);
    EXPECT_FALSE(ec) << ec.message();
  }
  fs::path write(const std::string& json, const std::string& name = "ensemble.json") const {
    std::ofstream(dir / name) << json;
    return dir / name;
  }
  slm::result<ensemble> load(const std::string& json) const { return ensemble::load(write(json)); }
};

constexpr const char* members_json = R"("members": [
    {"name": "cpp", "domain": "cpp", "path": "models/nam56r-cpp-14m"},
    {"name": "cmake", "domain": "cmake", "path": "models/nam56r-cmake-10m"},
    {"name": "shell", "domain": "shell", "path": "models/nam56r-shell-10m"}])";

// An ensemble.json over the three members: router and strategy objects as given.
std::string config_json(const std::string& router, const std::string& strategy = R"({"kind": "top1"})",
                        const std::string& budget = "0") {
  return std::string(R"({"format_version": 1, "memory_budget_bytes": )") + budget + ",\n  " + members_json +
         ",\n  \"router\": " + router + ",\n  \"strategy\": " + strategy + "}";
}
const std::string classifier_router_json = R"({"kind": "classifier", "file": "models/router.safetensors", "default": "cpp"})";

// Prompts with an unmistakable domain each (the classifier routes them as labeled).
const std::string cpp_prompt =
    "#include <string>\n#include <vector>\n\nnamespace util {\n\n// Splits s at every sep.\n"
    "std::vector<std::string> split(const std::string& s, char sep) {\n  std::vector<std::string> out;\n";
const std::string cmake_prompt =
    "cmake_minimum_required(VERSION 3.16)\nproject(demo LANGUAGES CXX)\n\nfind_package(Threads REQUIRED)\n"
    "add_executable(demo main.cpp)\ntarget_link_libraries(demo PRIVATE ";
const std::string shell_prompt =
    "#!/bin/sh\nset -e\n\ncase \"$1\" in\n  configure)\n    if [ -x /usr/bin/update-alternatives ]; then\n      ";
struct labeled_prompt {
  const std::string* text;
  std::string label;
};
const labeled_prompt prompts[] = {{&cpp_prompt, "cpp"}, {&cmake_prompt, "cmake"}, {&shell_prompt, "shell"}};

request make_request(const std::string& prompt, std::optional<strategy_kind> s = std::nullopt) {
  request q;
  q.prompt = prompt;
  q.max_new_tokens = gen_tokens;
  q.strategy = s;
  return q;
}

// The shipped ensemble (models/ensemble.json), loaded once for the file.
const ensemble& shipped() {
  static std::unique_ptr<ensemble> e = [] {
    auto r = ensemble::load(models_dir / "ensemble.json");
    EXPECT_TRUE(r.ok()) << r.message();
    return r.ok() ? std::make_unique<ensemble>(std::move(*r)) : nullptr;
  }();
  return *e;
}

// Member `name`'s greedy answer computed by hand (what top1 must give).
slm::result<answer> direct_answer(const ensemble& e, std::string_view name, const std::string& prompt,
                                  slm::compute_context& cx, std::size_t n = gen_tokens) {
  auto m = e.members().acquire(name);
  if (!m.ok()) return std::move(m).take_error();
  answer_options o;
  o.max_new_tokens = n;
  return member_answer((*m)->view(), prompt, o, cx);
}

// Route accuracy of an ensemble's router over `files`, best member's domain vs the label.
double route_accuracy(const ensemble& e, const std::vector<sample>& files, bool with_names, slm::compute_context& cx,
                      std::size_t text_bytes = ~std::size_t{0}) {
  std::size_t right = 0;
  for (const sample& s : files) {
    std::string text = s.text.substr(0, std::min(text_bytes, s.text.size()));
    if (text_bytes < s.text.size())  // cut at a line end
      if (const auto nl = text.rfind('\n'); nl != std::string::npos && nl > 0) text.resize(nl + 1);
    auto d = e.route({text, with_names ? std::string_view(s.name) : std::string_view{}}, cx);
    EXPECT_TRUE(d.ok()) << s.name << ": " << d.message();
    if (!d.ok()) continue;
    EXPECT_EQ(d->scores.size(), 3u);
    EXPECT_EQ(d->ranking.size(), 3u);
    const std::string& got = e.config().members[d->best()].domain;
    if (got == s.label) ++right;
    else std::printf("  misrouted %s file %s -> %s: %s\n", s.label.c_str(), s.name.c_str(), got.c_str(), d->reason.c_str());
  }
  return static_cast<double>(right) / static_cast<double>(files.size());
}

// ---- routing through ensemble::route -----------------------------------------------

TEST(Ensemble, HeldOutDataIsThere) {
  ASSERT_EQ(heldout().size(), 60u);
  for (const std::string& l : labels)
    EXPECT_EQ(std::count_if(heldout().begin(), heldout().end(), [&](const sample& s) { return s.label == l; }), 20);
}

TEST(Ensemble, ClassifierRoutesHeldOutFiles) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  const double named = route_accuracy(e, heldout(), true, c.cx), content = route_accuracy(e, heldout(), false, c.cx);
  std::printf("ensemble classifier router: %.3f with names, %.3f content only (60 files)\n", named, content);
  EXPECT_EQ(named, 1.0);    // measured: 60/60 (the classifier reads content only)
  EXPECT_EQ(content, 1.0);  // measured: 60/60
  EXPECT_EQ(e.members().stats().loads, 0u);  // the classifier needs no member loaded
}

TEST(Ensemble, RulesRoutesHeldOutFiles) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  {  // the built-in rules of the members' domains
    auto e = cd.load(config_json(R"({"kind": "rules", "default": "cpp"})"));
    ASSERT_TRUE(e.ok()) << e.message();
    const double named = route_accuracy(*e, heldout(), true, c.cx), content = route_accuracy(*e, heldout(), false, c.cx);
    std::printf("ensemble rules router (built-in): %.3f with names, %.3f content only\n", named, content);
    EXPECT_EQ(named, 1.0);    // measured: 60/60
    EXPECT_EQ(content, 1.0);  // measured: 60/60
  }
  {  // the host's rules from the config: names, extensions, shebangs and a few cues only
    auto e = cd.load(config_json(R"({"kind": "rules", "default": "cpp", "rules": [
        {"label": "cmake", "file_name": "CMakeLists.txt"}, {"label": "cmake", "extension": ".cmake"},
        {"label": "cmake", "extension": ".rst"}, {"label": "cmake", "contains": "cmake", "weight": 2},
        {"label": "shell", "shebang": "sh"}, {"label": "shell", "shebang": "bash"},
        {"label": "shell", "contains": "esac", "weight": 2}, {"label": "shell", "contains": "; then"},
        {"label": "cpp", "contains": "#include"}, {"label": "cpp", "extension": ".hpp"}]})"));
    ASSERT_TRUE(e.ok()) << e.message();
    const double named = route_accuracy(*e, heldout(), true, c.cx);
    std::printf("ensemble rules router (host rules): %.3f with names\n", named);
    EXPECT_GE(named, 0.9);  // measured: see the printout; the default (cpp) covers extension-less headers
    // Only the host's rules: a ".cpp" name is not one of them, the default decides.
    auto d = e->route({"int x;\n", "a.cpp"}, c.cx);
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d->best(), 0u);
    EXPECT_NE(d->reason.find("default"), std::string::npos) << d->reason;
    auto d2 = e->route({"int x;\n", "src/CMakeLists.txt"}, c.cx);
    ASSERT_TRUE(d2.ok());
    EXPECT_EQ(d2->best(), 1u) << d2->reason;
  }
}

TEST(Ensemble, PerplexityRoutesHeldOutFiles) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto e = cd.load(config_json(R"({"kind": "perplexity"})"));
  ASSERT_TRUE(e.ok()) << e.message();
  // Every 10th held-out file (2 per label), cut to ~1 KB at a line end: 6 x 3 prefills.
  std::vector<sample> few;
  for (std::size_t i = 0; i < heldout().size(); i += 10) few.push_back(heldout()[i]);
  ASSERT_EQ(few.size(), 6u);
  const double acc = route_accuracy(*e, few, false, c.cx, 1024);
  std::printf("ensemble perplexity router: %.3f (6 files, 1 KB each)\n", acc);
  EXPECT_EQ(acc, 1.0);  // measured: 6/6
  auto d = e->route({cmake_prompt, {}}, c.cx);
  ASSERT_TRUE(d.ok());
  EXPECT_NE(d->reason.find("bits/byte"), std::string::npos) << d->reason;
  for (double s : d->scores) EXPECT_TRUE(s < 0 && s > -8) << d->reason;  // -bits/byte
  EXPECT_EQ(e->members().stats().loads, 3u);  // perplexity scores under every member
}

TEST(Ensemble, PerplexityRoutesUnderAOneMemberBudget) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  // 10 MB holds any one member (the largest is 9.39 MB with the shared tokenizer), never two:
  // perplexity routing scores the members one after another, releasing each.
  auto e = cd.load(config_json(R"({"kind": "perplexity"})", R"({"kind": "top1"})", R"("10MB")"));
  ASSERT_TRUE(e.ok()) << e.message();
  auto d = e->route({cmake_prompt, {}}, c.cx);
  ASSERT_TRUE(d.ok()) << d.message();
  EXPECT_EQ(e->config().members[d->best()].name, "cmake") << d->reason;
  const auto st = e->members().stats();
  EXPECT_EQ(st.loads, 3u);
  EXPECT_EQ(st.evictions, 2u);
  auto r = e->run(make_request(shell_prompt), c.cx);  // route (3 more loads) then the shell member
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->members, std::vector<std::string>{"shell"});
}

TEST(Ensemble, ModelRouterScoresTheDomainsWithAMember) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  // The C++ specialist as the orchestrator: it was never taught the cue, so this measures a
  // weak router (content only, 2 files per label, 512 bytes each). The policy is for a
  // trained orchestration member; here it must run, rank every domain and route at least
  // half the C++ files right (measured here: 2 of 6 files, C++ 1 of 2).
  auto e = cd.load(config_json(R"({"kind": "model", "member": "cpp", "cue": "\n// language: "})"));
  ASSERT_TRUE(e.ok()) << e.message();
  std::vector<sample> few;
  for (std::size_t i = 0; i < heldout().size(); i += 10) few.push_back(heldout()[i]);
  std::size_t right = 0, right_cpp = 0, cpp = 0;
  for (const sample& s : few) {
    auto d = e->route({std::string_view(s.text).substr(0, 512), {}}, c.cx);
    ASSERT_TRUE(d.ok()) << d.message();
    ASSERT_EQ(d->scores.size(), 3u);
    for (double x : d->scores) EXPECT_TRUE(x < 0 && std::isfinite(x)) << d->reason;  // log-probs
    EXPECT_NE(d->reason.find("model router (cpp)"), std::string::npos) << d->reason;
    const bool ok = e->config().members[d->best()].domain == s.label;
    right += ok;
    if (s.label == "cpp") cpp++, right_cpp += ok;
  }
  std::printf("ensemble model router (cpp member, untrained cue): %zu/%zu, C++ %zu/%zu\n", right, few.size(), right_cpp, cpp);
  EXPECT_GE(right_cpp * 2, cpp);  // measured on the 60 files: C++ 19/20, CMake 0/20, shell 8/20
  EXPECT_EQ(e->members().stats().loads, 1u);  // only the orchestrator
}

// ---- strategies through ensemble::run ---------------------------------------------

TEST(Ensemble, Top1IsTheRoutedMembersAnswer) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  for (const labeled_prompt& p : prompts) {
    auto r = e.run(make_request(*p.text), c.cx);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->strategy, strategy_kind::top1);
    ASSERT_EQ(r->members, std::vector<std::string>{p.label}) << r->route.reason;
    auto a = direct_answer(e, p.label, *p.text, c.cx);
    ASSERT_TRUE(a.ok()) << a.message();
    EXPECT_EQ(r->text, a->text);
    EXPECT_EQ(r->tokens, a->tokens.size());
    EXPECT_GT(r->tokens, 0u);
    EXPECT_NE(r->detail.find("top1: " + p.label), std::string::npos) << r->detail;
    EXPECT_GE(r->seconds, r->route_seconds);
  }
}

// The mixture run() must have run: the two best members, weights from the router's scores.
TEST(Ensemble, Top2IsTheMixtureOfTheTwoBest) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  for (const labeled_prompt& p : prompts) {
    auto r = e.run(make_request(*p.text, strategy_kind::top2), c.cx);
    ASSERT_TRUE(r.ok()) << r.message();
    const route_decision& d = r->route;
    const std::string first = e.config().members[d.ranking[0]].name, second = e.config().members[d.ranking[1]].name;
    ASSERT_EQ(r->members, (std::vector<std::string>{first, second}));
    EXPECT_EQ(first, p.label);
    // Classifier scores are probabilities: the weights are the two scores over their sum.
    const double a = d.scores[d.ranking[0]], b = d.scores[d.ranking[1]];
    const std::vector<double> w = {a / (a + b), b / (a + b)};
    char expect_detail[96];
    std::snprintf(expect_detail, sizeof expect_detail, "top2: weights %s %.3f %s %.3f", first.c_str(), w[0],
                  second.c_str(), w[1]);
    EXPECT_EQ(r->detail, expect_detail);
    std::printf("  %s prompt: %s\n", p.label.c_str(), r->detail.c_str());
    auto m0 = e.members().acquire(first), m1 = e.members().acquire(second);
    ASSERT_TRUE(m0.ok() && m1.ok());
    const member_ref refs[] = {(*m0)->view(), (*m1)->view()};
    mixture_options mo;
    mo.max_new_tokens = gen_tokens;
    mo.sampling = answer_options::greedy();
    mo.stop_tokens = {(*m0)->tok->specials().eos};
    auto ids = encode_prompt(refs[0], *p.text);
    ASSERT_TRUE(ids.ok());
    auto g = generate_mixture(refs, w, *ids, mo, c.cx);
    ASSERT_TRUE(g.ok()) << g.message();
    auto text = (*m0)->tok->decode(g->tokens);
    ASSERT_TRUE(text.ok());
    EXPECT_EQ(r->text, *text);
    EXPECT_EQ(r->tokens, g->tokens.size());
  }
}

// The rules router gives the runner-up a score of 0 when none of its rules fire: top2 then
// runs the second member at weight 0, i.e. not at all, and equals top1.
TEST(Ensemble, Top2WithAZeroRunnerUpEqualsTop1) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto e = cd.load(config_json(R"({"kind": "rules", "default": "cpp"})", R"({"kind": "top2"})"));
  ASSERT_TRUE(e.ok()) << e.message();
  request q = make_request(cmake_prompt);
  q.file_name = "CMakeLists.txt";
  auto r2 = e->run(q, c.cx);
  ASSERT_TRUE(r2.ok()) << r2.message();
  ASSERT_EQ(r2->members.size(), 2u);
  EXPECT_EQ(r2->members[0], "cmake") << r2->route.reason;
  EXPECT_EQ(r2->route.scores[e->config().find(r2->members[1]).value()], 0.0) << r2->route.reason;
  EXPECT_NE(r2->detail.find("cmake 1.000 "), std::string::npos) << r2->detail;
  EXPECT_NE(r2->detail.find(" 0.000"), std::string::npos) << r2->detail;
  q.strategy = strategy_kind::top1;
  auto r1 = e->run(q, c.cx);
  ASSERT_TRUE(r1.ok()) << r1.message();
  EXPECT_EQ(r1->members, std::vector<std::string>{"cmake"});
  EXPECT_EQ(r2->text, r1->text);
  EXPECT_EQ(r2->tokens, r1->tokens);
}

TEST(Ensemble, MixWithOneWeightEqualsTop1) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto e = cd.load(config_json(classifier_router_json, R"({"kind": "mix", "weights": {"cpp": 1}})"));
  ASSERT_TRUE(e.ok()) << e.message();
  auto m = e->run(make_request(cpp_prompt), c.cx);
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->strategy, strategy_kind::mix);
  EXPECT_EQ(m->members, std::vector<std::string>{"cpp"});  // members not named weigh 0
  auto t = e->run(make_request(cpp_prompt, strategy_kind::top1), c.cx);
  ASSERT_TRUE(t.ok()) << t.message();
  EXPECT_EQ(t->members, std::vector<std::string>{"cpp"});
  EXPECT_EQ(m->text, t->text);
  EXPECT_EQ(m->tokens, t->tokens);
  // Mix without weights: every member at weight 1 (1/3 each).
  auto all = cd.load(config_json(classifier_router_json, R"({"kind": "mix"})"));
  ASSERT_TRUE(all.ok()) << all.message();
  auto r = all->run(make_request(cpp_prompt), c.cx);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->members, (std::vector<std::string>{"cpp", "cmake", "shell"}));
  EXPECT_NE(r->detail.find("mix: weights cpp 0.333 cmake 0.333 shell 0.333"), std::string::npos) << r->detail;
  // Every weight 0: an error (it indexed the first of no members before the fix).
  auto none = cd.load(config_json(classifier_router_json, R"({"kind": "mix", "weights": {"cpp": 0}})"));
  ASSERT_TRUE(none.ok()) << none.message();
  EXPECT_TRUE(fails_with(none->run(make_request(cpp_prompt), c.cx), errc::invalid_argument,
                         {"mix: strategy.weights gives every member weight 0"}));
}

// Stop strings end every strategy's text where top1's would end: the token-level ones
// (top2, mix, speculative) generate on and cut the text at the first stop.
TEST(Ensemble, StopStringsCutEveryStrategyAlike) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto top2 = cd.load(config_json(R"({"kind": "rules", "default": "cpp"})", R"({"kind": "top2"})"));
  auto spec = cd.load(config_json(classifier_router_json, R"({"kind": "speculative", "drafter": "cmake", "target": "cpp"})"));
  ASSERT_TRUE(top2.ok() && spec.ok());
  const std::string cmake_list = "project(demo CXX)\n\nset(SOURCES\n  src/main.cpp\n  src/util.cpp\n";
  const std::string cpp_main = "#include <cstdio>\n\nint main(int argc, char** argv) {\n  if (argc < 2) {\n"
                               "    std::fprintf(stderr, \"usage: %s FILE\\n\", argv[0]);\n";
  for (const auto& [e, prompt, name, member] :
       {std::tuple{&*top2, &cmake_list, "CMakeLists.txt", "cmake"}, std::tuple{&*spec, &cpp_main, "", "cpp"}}) {
    request q = make_request(*prompt);
    q.file_name = name;
    auto whole = e->run(q, c.cx);
    ASSERT_TRUE(whole.ok()) << whole.message();
    const std::size_t nl = whole->text.find('\n');
    ASSERT_NE(nl, std::string::npos) << "the test needs a newline in: " << whole->text;
    q.stop_strings = {"\n", "no such stop"};
    auto cut = e->run(q, c.cx);
    ASSERT_TRUE(cut.ok()) << cut.message();
    EXPECT_EQ(cut->text, whole->text.substr(0, nl));
    q.strategy = strategy_kind::top1;  // routed: the same member
    auto t1 = e->run(q, c.cx);
    ASSERT_TRUE(t1.ok()) << t1.message();
    EXPECT_EQ(t1->members, std::vector<std::string>{member});
    EXPECT_EQ(cut->text, t1->text) << member;
  }
}

TEST(Ensemble, CascadeExitsEarlyOnTheConfigsThreshold) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  // Threshold 0: the first member (the routed one) is always confident enough.
  auto e0 = cd.load(config_json(classifier_router_json, R"({"kind": "cascade", "threshold": 0})"));
  ASSERT_TRUE(e0.ok()) << e0.message();
  for (const labeled_prompt& p : prompts) {
    auto r = e0->run(make_request(*p.text), c.cx);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->members, std::vector<std::string>{p.label});
    EXPECT_NE(r->detail.find("exit confident after 1 of 3"), std::string::npos) << r->detail;
    // One line of the routed member's greedy answer.
    auto m = e0->members().acquire(p.label);
    ASSERT_TRUE(m.ok());
    auto a = member_answer((*m)->view(), *p.text, one_line_answer(gen_tokens), c.cx);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(r->text, a->text);
    EXPECT_EQ(r->text.find('\n'), std::string::npos);
  }
  // Threshold 1: no answer is that confident, so the cascade runs on - through every
  // member unless two agree (agreement_threshold 0.5, which the config cannot set).
  auto e1 = cd.load(config_json(classifier_router_json, R"({"kind": "cascade", "threshold": 1, "order": ["shell", "cmake", "cpp"]})"));
  ASSERT_TRUE(e1.ok()) << e1.message();
  std::size_t all_ran = 0;
  for (const labeled_prompt& p : prompts) {
    auto r = e1->run(make_request(*p.text), c.cx);
    ASSERT_TRUE(r.ok()) << r.message();
    std::printf("  cascade threshold 1, %s prompt: %s\n", p.label.c_str(), r->detail.c_str());
    EXPECT_EQ(r->detail.find("exit confident"), std::string::npos) << r->detail;
    if (r->members.size() == 3) {
      EXPECT_EQ(r->members, (std::vector<std::string>{"shell", "cmake", "cpp"}));
      EXPECT_NE(r->detail.find("exit exhausted after 3 of 3"), std::string::npos) << r->detail;
      ++all_ran;
    } else {
      EXPECT_NE(r->detail.find("exit agreement"), std::string::npos) << r->detail;
    }
  }
  EXPECT_GE(all_ran, 1u);  // measured: see the printout
  // Above 1 the cascade would never exit on confidence, but the config keeps it in [0, 1].
  EXPECT_TRUE(fails_with(cd.load(config_json(classifier_router_json, R"({"kind": "cascade", "threshold": 1.5})")),
                         errc::invalid_argument, {"strategy.threshold", "must be a number in [0, 1]", "1.5"}));
}

TEST(Ensemble, VoteRunsEveryMember) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  auto r = e.run(make_request(cmake_prompt, strategy_kind::vote), c.cx);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->members, (std::vector<std::string>{"cpp", "cmake", "shell"}));  // config order
  std::printf("  vote: %s -> \"%s\"\n", r->detail.c_str(), r->text.c_str());
  std::vector<member_ref> refs;
  std::vector<std::shared_ptr<const loaded_member>> held;
  for (const char* n : {"cpp", "cmake", "shell"}) {
    auto m = e.members().acquire(n);
    ASSERT_TRUE(m.ok());
    held.push_back(*m);
    refs.push_back((*m)->view());
  }
  vote_options vo;
  vo.answer = one_line_answer(gen_tokens);
  auto v = majority_vote(refs, cmake_prompt, vo, c.cx);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(r->text, v->winner().answer);
  EXPECT_NE(r->detail.find("vote: " + std::to_string(v->winner().votes()) + " of 3 votes"), std::string::npos) << r->detail;
}

TEST(Ensemble, RefineDraftsAndReviews) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto e = cd.load(config_json(classifier_router_json, R"({"kind": "refine", "drafter": "shell", "reviewer": "cpp"})"));
  ASSERT_TRUE(e.ok()) << e.message();
  auto r = e->run(make_request(cpp_prompt), c.cx);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->members, (std::vector<std::string>{"shell", "cpp"}));
  EXPECT_FALSE(r->text.empty());
  std::printf("  refine: %s\n", r->detail.c_str());
  auto d = e->members().acquire("shell"), v = e->members().acquire("cpp");
  ASSERT_TRUE(d.ok() && v.ok());
  refine_options ro;
  ro.generation.max_new_tokens = gen_tokens;
  auto f = refine((*d)->view(), (*v)->view(), cpp_prompt, ro, c.cx);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ(r->text, f->text);
  EXPECT_EQ(r->tokens, f->reviewed.size());
}

TEST(Ensemble, SpeculativeIsTheTargetsGreedyOutput) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto e = cd.load(config_json(classifier_router_json, R"({"kind": "speculative", "drafter": "cmake", "target": "cpp", "draft_tokens": 3})"));
  ASSERT_TRUE(e.ok()) << e.message();
  for (const labeled_prompt& p : prompts) {
    auto r = e->run(make_request(*p.text), c.cx);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->members, (std::vector<std::string>{"cmake", "cpp"}));  // whatever the route says
    auto a = direct_answer(*e, "cpp", *p.text, c.cx);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(r->text, a->text) << p.label;
    EXPECT_EQ(r->tokens, a->tokens.size());
    std::printf("  %s prompt: %s\n", p.label.c_str(), r->detail.c_str());
  }
}

// ---- memory budget ----------------------------------------------------------------

// Member bytes (weights + the one shared tokenizer, charged its memory: about 1.44 MB with
// libstdc++, tokenizer::memory_bytes): cpp 9.39 MB, cmake and shell 7.25 MB each; any two
// 13.1-15.2 MB, all three 21.0 MB.
TEST(Ensemble, BudgetForTwoEvictsAndKeepsOutputs) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto limited = cd.load(config_json(classifier_router_json, R"({"kind": "top1"})", "\"17MB\""));
  ASSERT_TRUE(limited.ok()) << limited.message();
  const ensemble& unlimited = shipped();
  for (int round = 0; round < 2; ++round)
    for (const labeled_prompt& p : prompts) {
      auto a = limited->run(make_request(*p.text), c.cx);
      ASSERT_TRUE(a.ok()) << a.message();
      EXPECT_EQ(a->members, std::vector<std::string>{p.label});
      auto b = unlimited.run(make_request(*p.text), c.cx);
      ASSERT_TRUE(b.ok()) << b.message();
      EXPECT_EQ(a->text, b->text) << p.label;
      const registry_stats s = limited->members().stats();
      EXPECT_LE(s.resident_bytes, 17000000u);
      EXPECT_LE(s.resident_lru.size(), 2u);
    }
  const registry_stats s = limited->members().stats();
  std::printf("  budget 17MB: %llu loads, %llu evictions, %llu hits\n", static_cast<unsigned long long>(s.loads),
              static_cast<unsigned long long>(s.evictions), static_cast<unsigned long long>(s.hits));
  // cpp, cmake, shell (evicts cpp), cpp (evicts cmake), cmake (evicts shell), shell (evicts cpp).
  EXPECT_EQ(s.loads, 6u);
  EXPECT_EQ(s.evictions, 4u);
}

TEST(Ensemble, BudgetBelowTheLargestMemberFailsClearly) {
  REQUIRE_MODELS();
  f32_context c;
  config_dir cd;
  auto e = cd.load(config_json(classifier_router_json, R"({"kind": "top1"})", "\"8MB\""));
  ASSERT_TRUE(e.ok()) << e.message();
  EXPECT_TRUE(fails_with(e->run(make_request(cpp_prompt), c.cx), errc::out_of_memory,
                         {"member 'cpp'", "more than the whole memory budget of 8000000 bytes"}));
  auto r = e->run(make_request(shell_prompt), c.cx);  // a smaller member still works
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->members, std::vector<std::string>{"shell"});
  auto a = direct_answer(shipped(), "shell", shell_prompt, c.cx);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(r->text, a->text);
  EXPECT_TRUE(fails_with(e->run(make_request(cpp_prompt), c.cx), errc::out_of_memory, {"member 'cpp'"}));
  EXPECT_EQ(e->members().stats().loads, 1u);
}

// ---- concurrency ------------------------------------------------------------------

struct outcome {
  std::string text;
  std::vector<std::string> members;
  bool operator==(const outcome&) const = default;
};

// Runs `qs` on `e` serially, then from `threads` threads at once (each its own serial
// executor and context), each thread the whole list; every output must equal the serial
// one. Requests that fail with out_of_memory are retried (counted in *retries).
void expect_concurrent_equals_serial(const ensemble& e, const std::vector<request>& qs, std::size_t threads,
                                     std::size_t* retries) {
  std::vector<outcome> serial;
  {
    f32_context c;
    for (const request& q : qs) {
      auto r = e.run(q, c.cx);
      ASSERT_TRUE(r.ok()) << r.message();
      serial.push_back({r->text, r->members});
    }
  }
  std::atomic<std::size_t> retried{0}, failed{0};
  std::vector<std::vector<outcome>> got(threads);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (std::size_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      f32_context c;
      for (std::size_t k = 0; k < qs.size(); ++k) {
        const request& q = qs[(k + t) % qs.size()];  // threads start at different requests
        for (;;) {
          auto r = e.run(q, c.cx);
          if (!r.ok() && r.error().code() == errc::out_of_memory) {  // both slots pinned by others
            ++retried;
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            continue;
          }
          if (!r.ok()) {
            ++failed;
            errors[t] = r.message();
            got[t].push_back({});
          } else {
            got[t].push_back({r->text, r->members});
          }
          break;
        }
      }
    });
  for (auto& th : pool) th.join();
  EXPECT_EQ(failed.load(), 0u) << errors[0] << errors[1];
  for (std::size_t t = 0; t < threads; ++t)
    for (std::size_t k = 0; k < qs.size(); ++k) EXPECT_EQ(got[t][k], serial[(k + t) % qs.size()]) << "thread " << t << " request " << k;
  *retries = retried.load();
}

TEST(Ensemble, ConcurrentRequestsEqualSerialOnes) {
  REQUIRE_MODELS();
  const ensemble& e = shipped();
  std::vector<request> qs;
  for (const labeled_prompt& p : prompts) {
    qs.push_back(make_request(*p.text, strategy_kind::top1));
    qs.push_back(make_request(*p.text, strategy_kind::cascade));
  }
  std::size_t retries = 0;
  expect_concurrent_equals_serial(e, qs, 4, &retries);
  EXPECT_EQ(retries, 0u);  // no budget: nothing to wait for
}

TEST(Ensemble, ConcurrentRequestsUnderATwoMemberBudget) {
  REQUIRE_MODELS();
  config_dir cd;
  auto e = cd.load(config_json(classifier_router_json, R"({"kind": "top1"})", "\"17MB\""));
  ASSERT_TRUE(e.ok()) << e.message();
  std::vector<request> qs;
  for (int rep = 0; rep < 2; ++rep)
    for (const labeled_prompt& p : prompts) qs.push_back(make_request(*p.text));
  std::size_t retries = 0;
  expect_concurrent_equals_serial(*e, qs, 4, &retries);
  const registry_stats s = e->members().stats();
  std::printf("  budget 17MB, 4 threads x 6 top1 requests: %llu loads, %llu evictions, %zu out_of_memory retries\n",
              static_cast<unsigned long long>(s.loads), static_cast<unsigned long long>(s.evictions), retries);
  EXPECT_GT(s.evictions, 0u);
  EXPECT_LE(s.resident_bytes, 17000000u);
}

// ---- bad input ----------------------------------------------------------------------

TEST(Ensemble, BadRequestsAreErrors) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  EXPECT_TRUE(fails_with(e.run(make_request(""), c.cx), errc::invalid_argument, {"the prompt is empty"}));
  request q = make_request(cpp_prompt);
  q.max_new_tokens = 0;
  EXPECT_TRUE(fails_with(e.run(q, c.cx), errc::invalid_argument, {"max_new_tokens is 0"}));
}

// A request may override the config's strategy; refine and speculative take their members
// from the config's strategy object, which was validated for the config's kind only. An
// override the object cannot serve is an error before any work (it was a crash: an empty
// optional dereferenced, members indexed out of bounds).
TEST(Ensemble, StrategyOverridesTheConfigCannotServeAreErrors) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();  // strategy {"kind": "top1"}: no drafter, reviewer or target
  EXPECT_TRUE(fails_with(e.run(make_request(cpp_prompt, strategy_kind::speculative), c.cx), errc::invalid_argument,
                         {"strategy \"speculative\"", "needs strategy.drafter", "kind \"top1\""}));
  EXPECT_TRUE(fails_with(e.run(make_request(cpp_prompt, strategy_kind::refine), c.cx), errc::invalid_argument,
                         {"strategy \"refine\"", "needs strategy.drafter"}));
  config_dir cd;
  // speculative's object names a drafter but no reviewer: refine cannot run from it, and
  // refine's names no target.
  auto spec = cd.load(config_json(classifier_router_json, R"({"kind": "speculative", "drafter": "cmake", "target": "cpp"})"));
  ASSERT_TRUE(spec.ok()) << spec.message();
  EXPECT_TRUE(fails_with(spec->run(make_request(cpp_prompt, strategy_kind::refine), c.cx), errc::invalid_argument,
                         {"needs strategy.reviewer", "kind \"speculative\""}));
  auto ref = cd.load(config_json(classifier_router_json, R"({"kind": "refine", "drafter": "shell", "reviewer": "cpp"})"));
  ASSERT_TRUE(ref.ok()) << ref.message();
  EXPECT_TRUE(fails_with(ref->run(make_request(cpp_prompt, strategy_kind::speculative), c.cx), errc::invalid_argument,
                         {"needs strategy.target"}));
  // Overrides the object can serve still run: refine's drafter and reviewer, top1 from anything.
  auto both = cd.load(config_json(classifier_router_json, R"({"kind": "refine", "drafter": "shell", "reviewer": "cpp"})"));
  ASSERT_TRUE(both.ok()) << both.message();
  auto top1 = both->run(make_request(cpp_prompt, strategy_kind::top1), c.cx);
  ASSERT_TRUE(top1.ok()) << top1.message();
  EXPECT_EQ(top1->strategy, strategy_kind::top1);
}

TEST(Ensemble, BadConfigsAreErrors) {
  REQUIRE_MODELS();
  config_dir cd;
  EXPECT_TRUE(fails_with(cd.load(config_json(classifier_router_json, R"({"kind": "best_of"})")), errc::invalid_argument,
                         {"strategy.kind", "unknown kind \"best_of\"", "top1", "speculative"}));
  EXPECT_TRUE(fails_with(cd.load(config_json(R"({"kind": "classifier", "file": "models/no_router.safetensors"})")),
                         errc::not_found, {"router.file", "no_router.safetensors", "does not exist"}));
  EXPECT_TRUE(fails_with(cd.load(config_json(R"({"kind": "rules", "rules": [{"label": "go", "extension": ".go"}]})")),
                         errc::invalid_argument, {"router.rules", "unknown label \"go\""}));
  // The shipped classifier routes to cmake, cpp and shell: an ensemble without shell cannot use it.
  const std::string two = R"({"format_version": 1, "members": [
      {"name": "cpp", "path": "models/nam56r-cpp-14m"}, {"name": "cmake", "path": "models/nam56r-cmake-10m"}],
      "router": {"kind": "classifier", "file": "models/router.safetensors"}})";
  EXPECT_TRUE(fails_with(cd.load(two), errc::invalid_argument, {"router.file", "routes to the domain 'shell', which no member has"}));
  // A one-member ensemble has no top2.
  const std::string one = R"({"format_version": 1, "members": [{"name": "cpp", "path": "models/nam56r-cpp-14m"}],
      "router": {"kind": "rules"}, "strategy": {"kind": "top2"}})";
  auto e1 = cd.load(one);
  ASSERT_TRUE(e1.ok()) << e1.message();
  f32_context c;
  EXPECT_TRUE(fails_with(e1->run(make_request(cpp_prompt), c.cx), errc::invalid_argument, {"top2: the ensemble has one member"}));
}

}  // namespace

namespace {

// ensemble/heldout.hpp: the DIR/<domain>/FILES layout, sorted, and taken a domain in turn.
TEST(EnsembleHeldout, LabeledFilesInRoundRobin) {
  const std::vector<labeled_file> files = labeled_files(heldout_dir);
  ASSERT_EQ(files.size(), 60u);
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
  for (const labeled_file& f : files) EXPECT_EQ(f.path.parent_path().filename().string(), f.label) << f.path;
  const std::vector<fs::path> order = round_robin(files);
  ASSERT_EQ(order.size(), 60u);
  // Sorted labels cmake, cpp, shell (20 files each): cmake 0, cpp 0, shell 0, cmake 1, ...
  for (std::size_t i = 0; i < order.size(); ++i) EXPECT_EQ(order[i], files[(i % 3) * 20 + i / 3].path) << i;
  const std::vector<labeled_file> uneven = {{"a", "a/1"}, {"a", "a/2"}, {"a", "a/3"}, {"b", "b/1"}};
  EXPECT_EQ(round_robin(uneven), (std::vector<fs::path>{"a/1", "b/1", "a/2", "a/3"}));
  EXPECT_TRUE(labeled_files(heldout_dir / "no-such-dir").empty());
}

TEST(EnsembleHeldout, RouteAccuracyTallies) {
  slm::ensemble::route_accuracy acc;
  acc.add("cpp", true);
  acc.add("cmake", false);
  acc.add("cpp", false);
  acc.add("cpp", true);
  ASSERT_EQ(acc.labels.size(), 2u);
  EXPECT_EQ(acc.labels[0].label, "cpp");  // the order first seen
  EXPECT_EQ(acc.labels[0].right, 2u);
  EXPECT_EQ(acc.labels[0].total, 3u);
  EXPECT_EQ(acc.labels[1].label, "cmake");
  EXPECT_EQ(acc.labels[1].rate(), 0.0);
  EXPECT_EQ(acc.all.label, "all");
  EXPECT_EQ(acc.all.right, 2u);
  EXPECT_EQ(acc.all.total, 4u);
  EXPECT_EQ(acc.all.rate(), 0.5);
  EXPECT_EQ(slm::ensemble::route_accuracy{}.all.rate(), 0.0);
}

// route_files: the shipped classifier routes every held-out file to its domain (60/60, as
// `slm ensemble route --data` reports); a file without a label is routed, not counted; a
// file that cannot be read is an error naming it.
TEST(EnsembleHeldout, RouteFilesTalliesByLabel) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  std::vector<labeled_file> files = labeled_files(heldout_dir);
  files.push_back({"", files.front().path});
  std::size_t routed = 0;
  auto acc = route_files(e, files, true, c.cx, [&](const labeled_file& f, const route_decision& d) {
    ++routed;
    if (!f.label.empty()) {
      EXPECT_EQ(e.config().members[d.best()].domain, f.label) << f.path << ": " << d.reason;
    }
  });
  ASSERT_TRUE(acc.ok()) << acc.message();
  EXPECT_EQ(routed, 61u);
  EXPECT_EQ(acc->all.right, 60u);
  EXPECT_EQ(acc->all.total, 60u);
  ASSERT_EQ(acc->labels.size(), 3u);
  EXPECT_EQ(acc->labels[0].label, "cmake");
  EXPECT_EQ(acc->labels[0].total, 20u);
  const std::vector<labeled_file> missing = {{"cpp", heldout_dir / "cpp" / "no-such.cpp"}};
  EXPECT_TRUE(fails_with(route_files(e, missing, false, c.cx), errc::not_found, {"no-such.cpp"}));
}

// calibrate: each member's temperature fitted on the same held-out rows a caller would
// build (the first member's checked by hand), then mixture weights over all of them (the
// shipped members share a tokenizer).
TEST(EnsembleHeldout, CalibrateFitsEachMemberThenTheWeights) {
  REQUIRE_MODELS();
  f32_context c;
  const ensemble& e = shipped();
  const std::vector<fs::path> files = round_robin(labeled_files(heldout_dir));
  constexpr std::size_t cap = 96;
  std::vector<std::string> seen;
  auto r = calibrate(e, files, cap, c.cx, [&](const member_calibration& m) { seen.push_back(m.name); });
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->members.size(), e.config().members.size());
  for (std::size_t i = 0; i < r->members.size(); ++i) {
    EXPECT_EQ(r->members[i].name, e.config().members[i].name);
    EXPECT_EQ(r->members[i].tokens, r->members[0].tokens);
    EXPECT_GT(r->members[i].fit.temperature, 0.0);
  }
  EXPECT_EQ(seen.size(), r->members.size());
  EXPECT_LE(r->members[0].tokens, cap);
  EXPECT_GT(r->members[0].tokens, cap / 2);
  ASSERT_TRUE(r->weights.has_value());
  ASSERT_EQ(r->weights->weights.size(), r->members.size());
  double sum = 0;
  for (double w : r->weights->weights) sum += w;
  EXPECT_NEAR(sum, 1.0, 1e-9);

  auto held = e.members().acquire(0);
  ASSERT_TRUE(held.ok());
  const member_ref m = (*held)->view();
  heldout_rows rows;
  rows.vocab = std::min(m.model->vocab(), m.tok->vocab_size());
  for (const fs::path& f : files) {
    if (rows.size() + 1 >= cap) break;
    auto ids = m.tok->encode(read_file(f));
    ASSERT_TRUE(ids.ok());
    const std::size_t take = std::min(ids->size(), cap - rows.size());
    if (take >= 2) ASSERT_TRUE(rows.append(*m.model, std::span<const std::int32_t>(ids->data(), take), c.cx).ok());
  }
  auto fit = fit_temperature(rows);
  ASSERT_TRUE(fit.ok());
  EXPECT_EQ(r->members[0].tokens, rows.size());
  EXPECT_EQ(r->members[0].fit.temperature, fit->temperature);
  EXPECT_EQ(r->members[0].fit.nll, fit->nll);

  EXPECT_TRUE(fails_with(calibrate(e, files, 1, c.cx), errc::invalid_argument, {"budget"}));
}

}  // namespace
