// Generation (slm/generate/generator.hpp) over real sessions: the golden Llama and Nemotron-H
// models (transformers' random tiny checkpoints) and the tiny NAM56R, with a byte-level
// tokenizer built here over their 320-row heads (rows past it are padding and must never
// be sampled). Checks: greedy = a hand-written argmax loop; same seed, same text; a
// saved and reloaded generator continues exactly as one that never stopped; stop
// tokens, stop strings, callbacks, cancellation from another thread, prompts past the
// context and a full context; streamed text = decoded tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "slm/generate/generator.hpp"
#include "slm/models/hf/model.hpp"
#include "slm/models/nam56r/model.hpp"
#include "test_helpers.hpp"

namespace {

slm::tokenizer make_tokenizer() {
  auto t = slm::tokenizer::parse(slm_test::byte_tokenizer_json());
  EXPECT_TRUE(t.ok()) << t.error().to_string();
  return std::move(*t);
}

struct fixture {
  slm::model model;
  slm::tokenizer tok = make_tokenizer();
  slm::thread_pool pool = std::move(*slm::thread_pool::create(2));
  explicit fixture(const char* name) : model(std::move(*slm::model::load(slm_test::test_data(name)))) {}
  slm::compute_context cx() {
    slm::compute_context c{pool};
    c.quantized_activations = slm::activation_precision::f32;
    return c;
  }
  slm::generator<slm::model::session> gen(slm::sampler_config sc, std::size_t ctx = 0) {
    slm::session_options o;
    if (ctx) o.max_tokens = ctx;
    slm::generator<slm::model::session> g(model.new_session(o), &tok, model.vocab(), sc);
    EXPECT_TRUE(g.validate().ok());
    return g;
  }
};

const std::vector<std::int32_t> prompt = {116, 104, 105, 115, 32, 105, 115};  // "this is"

slm::sampler_config sampled(std::uint64_t seed) {
  slm::sampler_config c;
  c.temperature = 1.3f;  // flat enough that the draws vary on random weights
  c.top_k = 50;
  c.seed = seed;
  return c;
}

TEST(Generate, GreedyEqualsAnArgmaxLoop) {
  fixture f("golden/hf/llama");
  auto cx = f.cx();
  auto g = f.gen({.temperature = 0.0f});
  ASSERT_TRUE(g.prefill(prompt, cx).ok());
  slm::generation_options o;
  o.max_new_tokens = 12;
  auto r = g.generate(o, cx);
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->reason, slm::stop_reason::max_tokens);
  // By hand: argmax over the tokenizer's rows [0, 300) only.
  auto s = f.model.new_session();
  std::vector<float> logits(f.model.vocab());
  ASSERT_TRUE(s.forward(prompt, 1, logits.data(), cx).ok());
  std::vector<std::int32_t> ref;
  for (int i = 0; i < 12; ++i) {
    const auto next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.begin() + 300) - logits.begin());
    ref.push_back(next);
    ASSERT_TRUE(s.forward(std::span(&next, 1), 1, logits.data(), cx).ok());
  }
  EXPECT_EQ(r->tokens, ref);
  EXPECT_EQ(r->text, *f.tok.decode(ref));
  EXPECT_EQ(g.history().size(), prompt.size() + 12);
  EXPECT_EQ(g.session().position(), prompt.size() + 12);
}

TEST(Generate, SeededSamplingRepeatsAndNeverPicksPaddingRows) {
  fixture f("golden/hf/llama");
  auto cx = f.cx();
  std::vector<std::vector<std::int32_t>> runs;
  for (std::uint64_t seed : {7u, 7u, 8u}) {
    auto g = f.gen(sampled(seed));
    ASSERT_TRUE(g.prefill(prompt, cx).ok());
    slm::generation_options o;
    o.max_new_tokens = 40;
    auto r = g.generate(o, cx);
    ASSERT_TRUE(r.ok());
    for (std::int32_t id : r->tokens) EXPECT_LT(id, 300) << "a padding row was sampled";
    runs.push_back(r->tokens);
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_NE(runs[0], runs[2]);
}

// Save after 10 tokens, load into a fresh generator (another session object), continue:
// the same tokens as one uninterrupted run of 25, for a KV model and a hybrid one.
TEST(Generate, SavedStateContinuesExactly) {
  for (const char* name : {"golden/hf/llama", "golden/hf/nemotron_h"}) {
    fixture f(name);
    auto cx = f.cx();
    slm::generation_options o;
    o.max_new_tokens = 25;
    auto straight = f.gen(sampled(11));
    ASSERT_TRUE(straight.prefill(prompt, cx).ok());
    auto all = straight.generate(o, cx);
    ASSERT_TRUE(all.ok());

    slm_test::temp_dir dir("generate");
    const auto file = dir.path() / "state.safetensors";
    o.max_new_tokens = 10;
    {
      auto first = f.gen(sampled(11));
      ASSERT_TRUE(first.prefill(prompt, cx).ok());
      auto a = first.generate(o, cx);
      ASSERT_TRUE(a.ok());
      ASSERT_TRUE(first.save(file).ok());
    }
    auto resumed = f.gen(sampled(999));  // the seed is overwritten by the saved stream
    ASSERT_TRUE(resumed.load(file).ok());
    EXPECT_EQ(resumed.history().size(), prompt.size() + 10);
    o.max_new_tokens = 15;
    auto b = resumed.generate(o, cx);
    ASSERT_TRUE(b.ok());
    std::vector<std::int32_t> joined(resumed.history().begin() + static_cast<std::ptrdiff_t>(prompt.size()),
                                     resumed.history().end());
    EXPECT_EQ(joined, all->tokens) << name;
  }
}

TEST(Generate, BadStateFilesLeaveTheGeneratorUnchanged) {
  fixture f("golden/hf/llama");
  fixture other("golden/hf/qwen3");
  auto cx = f.cx();
  slm_test::temp_dir dir("generate");
  auto g = f.gen(sampled(3));
  ASSERT_TRUE(g.prefill(prompt, cx).ok());
  ASSERT_TRUE(g.save(dir.path() / "llama.safetensors").ok());
  auto o = other.gen(sampled(3));
  ASSERT_TRUE(o.prefill(std::vector<std::int32_t>{1, 2, 3}, cx).ok());
  ASSERT_TRUE(o.save(dir.path() / "qwen.safetensors").ok());
  auto target = f.gen(sampled(3));
  ASSERT_TRUE(target.prefill(std::vector<std::int32_t>{5, 6}, cx).ok());
  auto st = target.load(dir.path() / "qwen.safetensors");  // another model's session
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(target.history().size(), 2u);
  EXPECT_EQ(target.session().position(), 2u);
  // A truncated file.
  auto bytes = slm::read_text_file(dir.path() / "llama.safetensors");
  ASSERT_TRUE(bytes.ok());
  for (std::size_t cut : {std::size_t{7}, bytes->size() / 2, bytes->size() - 1}) {
    const auto p = dir.path() / "cut.safetensors";
    std::FILE* fp = std::fopen(p.c_str(), "wb");
    std::fwrite(bytes->data(), 1, cut, fp);
    std::fclose(fp);
    EXPECT_FALSE(target.load(p).ok()) << cut;
    EXPECT_EQ(target.history().size(), 2u);
  }
  EXPECT_FALSE(target.load(dir.path() / "missing.safetensors").ok());
  EXPECT_TRUE(target.load(dir.path() / "llama.safetensors").ok());
  EXPECT_EQ(target.history().size(), prompt.size());
}

// ---- State files: the whole file is checked, and a load that fails changes nothing ----

std::vector<std::byte> file_bytes(const std::filesystem::path& p) {
  auto t = slm::read_text_file(p);
  EXPECT_TRUE(t.ok()) << p;
  return t.ok() ? slm_test::bytes_of(*t) : std::vector<std::byte>{};
}
std::uint64_t get_u64(const std::vector<std::byte>& b, std::size_t at) {
  std::uint64_t v = 0;
  for (std::size_t i = 8; i-- > 0;) v = (v << 8) | static_cast<std::uint64_t>(b.at(at + i));
  return v;
}
void put_u64(std::vector<std::byte>& b, std::size_t at, std::uint64_t v) {
  for (std::size_t i = 0; i < 8; ++i) b.at(at + i) = static_cast<std::byte>((v >> (8 * i)) & 0xFF);
}
// A new trailing checksum, as a forger would write: the checks behind it must hold alone.
void reseal(std::vector<std::byte>& b) {
  put_u64(b, b.size() - 8, slm::state_format::checksum_of(std::span(b.data(), b.size() - 8)));
}

// Everything a generator carries from one token to the next.
template <class G>
::testing::AssertionResult same_state(G& a, G& b) {
  if (!std::ranges::equal(a.history(), b.history())) return ::testing::AssertionFailure() << "histories differ";
  if (a.logits().size() != b.logits().size() ||
      std::memcmp(a.logits().data(), b.logits().data(), a.logits().size() * sizeof(float)) != 0)
    return ::testing::AssertionFailure() << "logits differ";
  if (a.session().position() != b.session().position())
    return ::testing::AssertionFailure() << "positions " << a.session().position() << " and " << b.session().position();
  if (a.sampling().generator().state() != b.sampling().generator().state())
    return ::testing::AssertionFailure() << "random states differ";
  return ::testing::AssertionSuccess();
}

// One worker: these tests run a few dozen single-token forwards, which a pool of two
// slows down on a busy machine.
struct one_thread {
  slm::thread_pool pool = std::move(*slm::thread_pool::create(1));
  slm::compute_context cx() {
    slm::compute_context c{pool};
    c.quantized_activations = slm::activation_precision::f32;
    return c;
  }
};

// After all the refused loads: the same next tokens as the twin that never tried one.
template <class G>
void expect_same_continuation(G& a, G& b, slm::compute_context& cx) {
  slm::generation_options o;
  o.max_new_tokens = 6;
  auto ra = a.generate(o, cx);
  auto rb = b.generate(o, cx);
  ASSERT_TRUE(ra.ok() && rb.ok());
  EXPECT_EQ(ra->tokens, rb->tokens);
  EXPECT_TRUE(same_state(a, b));
}

// Issue 18: only the session blob inside a state file was checksummed; altered pending
// logits changed the continued text, and altered history, a zeroed random state and an
// unknown format were all accepted. Each region of the file, flipped or forged, is
// refused, and the generator stays as it was.
TEST(Generate, StateFilesAreCheckedWhole) {
  fixture f("golden/hf/llama");
  one_thread t;
  auto cx = t.cx();
  slm_test::temp_dir dir("generate");
  const auto saved = dir.path() / "saved.state";
  {
    auto g = f.gen(sampled(5));
    ASSERT_TRUE(g.prefill(prompt, cx).ok());
    ASSERT_TRUE(g.save(saved).ok());
  }
  const auto good = file_bytes(saved);
  const std::size_t n = prompt.size(), rows = f.model.vocab();
  ASSERT_GT(good.size(), 88u);
  ASSERT_EQ(std::memcmp(good.data(), "SLMGENST", 8), 0);
  ASSERT_EQ(get_u64(good, 16), good.size());
  ASSERT_EQ(get_u64(good, 24), rows);
  ASSERT_EQ(get_u64(good, 32), n);
  const std::size_t history_at = 80, logits_at = history_at + 4 * n, session_at = logits_at + 4 * rows;
  ASSERT_EQ(session_at + get_u64(good, 40) + 8, good.size());

  const std::vector<std::int32_t> mine = {5, 6, 7};
  auto target = f.gen(sampled(9));
  auto twin = f.gen(sampled(9));
  ASSERT_TRUE(target.prefill(mine, cx).ok());
  ASSERT_TRUE(twin.prefill(mine, cx).ok());
  const auto refused = [&](const std::vector<std::byte>& bytes, slm::errc code, std::initializer_list<std::string_view> says) {
    const auto p = dir.path() / "bad.state";
    EXPECT_TRUE(slm_test::write_file(p, bytes));
    return slm_test::fails_with(target.load(p), code, says);
  };

  struct flip {
    const char* region;
    std::size_t at;
    slm::errc code;
    const char* says;
  };
  const slm::errc fe = slm::errc::format_error;
  for (const flip& c : {flip{"magic", 0, fe, "SLMGENST"}, flip{"version", 8, slm::errc::unsupported, "format version 3"},
                        flip{"reserved", 12, fe, "reserved"}, flip{"total size", 16, fe, "truncated or padded"},
                        flip{"rows", 24, fe, "corrupted"}, flip{"history length", 32, fe, "corrupted"},
                        flip{"session size", 40, fe, "corrupted"}, flip{"random state", 48 + 8 * 3 + 5, fe, "corrupted"},
                        flip{"history", history_at + 4, fe, "corrupted"}, flip{"logits", logits_at + 4 * 17 + 1, fe, "corrupted"},
                        flip{"session", session_at + (good.size() - 8 - session_at) / 2, fe, "corrupted"},
                        flip{"checksum", good.size() - 3, fe, "corrupted"}}) {
    auto b = good;
    b[c.at] ^= std::byte{1};  // the version: 2 becomes 3
    EXPECT_TRUE(refused(b, c.code, {"generator state", c.says})) << c.region;
    EXPECT_TRUE(same_state(target, twin)) << c.region;
  }

  // Forged with a valid checksum: every field is still checked on its own.
  {
    auto b = good;
    for (std::size_t w = 0; w < 4; ++w) put_u64(b, 48 + 8 * w, 0);
    reseal(b);
    EXPECT_TRUE(refused(b, fe, {"random state is all zero"}));
  }
  {
    auto b = good;
    b[8] = std::byte{7};  // a later format
    reseal(b);
    EXPECT_TRUE(refused(b, slm::errc::unsupported, {"format version 7", "reads version 2"}));
  }
  {
    auto b = good;
    put_u64(b, history_at, rows);  // the first id becomes `rows` (outside the vocabulary), the second 0
    reseal(b);
    EXPECT_TRUE(refused(b, fe, {"history holds token id", "outside"}));
  }
  {
    auto b = good;
    put_u64(b, 24, rows + 1);  // another model's logit rows
    reseal(b);
    EXPECT_TRUE(refused(b, slm::errc::invalid_argument, {"logit rows of"}));
  }
  {
    auto b = good;
    b.insert(b.end() - 8, 4, std::byte{0});  // bytes no field accounts for
    put_u64(b, 16, b.size());
    reseal(b);
    EXPECT_TRUE(refused(b, fe, {"4 bytes after the session state"}));
  }
  {  // the first format (safetensors, only the session checksummed) is refused by name
    slm::safetensors::writer w;
    w.set_metadata("format", "slm.generator.v1");
    const std::vector<std::byte> blob(64);
    ASSERT_TRUE(w.add("session", slm::dtype::u8, slm::shape{64}, blob).ok());
    auto v1 = w.serialize();
    ASSERT_TRUE(v1.ok());
    EXPECT_TRUE(refused(*v1, slm::errc::unsupported, {"slm.generator.v1", "save the state again"}));
  }
  {  // a session's own state file (io/session_file.hpp) is not a generator's
    const auto p = dir.path() / "session.state";
    ASSERT_TRUE(slm::save_state_file(twin.session(), p).ok());
    EXPECT_TRUE(slm_test::fails_with(target.load(p), fe, {"a session's state"}));
  }
  EXPECT_TRUE(same_state(target, twin));
  expect_same_continuation(target, twin, cx);
  ASSERT_TRUE(target.load(saved).ok());  // the untouched file still loads
  EXPECT_EQ(target.history().size(), n);
}

// Issue 18: load() replaced the session before its last check (the session's position
// against the history), so a file failing only that check left a half-loaded generator
// that generate() carried on with. Now every check precedes the session's load, which
// itself changes nothing when it fails.
TEST(Generate, FailedLoadChangesNothing) {
  fixture f("golden/hf/llama");
  one_thread t;
  auto cx = t.cx();
  slm_test::temp_dir dir("generate");
  auto source = f.gen(sampled(5));
  ASSERT_TRUE(source.prefill(prompt, cx).ok());
  const std::vector<std::int32_t> history(source.history().begin(), source.history().end());
  const std::vector<float> logits(source.logits().begin(), source.logits().end());
  const auto rng = source.sampling().generator().state();
  ASSERT_TRUE(source.step(cx).ok());  // the session now holds one token more than `history`
  auto longer = source.session().save();
  ASSERT_TRUE(longer.ok());

  const std::vector<std::int32_t> mine = {5, 6, 7};
  auto target = f.gen(sampled(9));
  auto twin = f.gen(sampled(9));
  ASSERT_TRUE(target.prefill(mine, cx).ok());
  ASSERT_TRUE(twin.prefill(mine, cx).ok());

  const auto file = dir.path() / "mismatch.state";
  ASSERT_TRUE(slm::generator_file::write(file, {*longer, history, logits, rng}).ok());
  EXPECT_TRUE(slm_test::fails_with(target.load(file), slm::errc::format_error,
                                   {"the session holds 8 tokens but the history 7"}));
  EXPECT_TRUE(same_state(target, twin));

  // Every check of the file passes; the session's own load refuses its blob (a byte of
  // its records altered, so its inner checksum fails): still nothing changes.
  auto damaged = *longer;
  damaged[damaged.size() / 2] ^= std::byte{1};
  const std::vector<std::int32_t> eight(source.history().begin(), source.history().end());
  ASSERT_TRUE(slm::generator_file::write(file, {damaged, eight, source.logits(), rng}).ok());
  EXPECT_TRUE(slm_test::fails_with(target.load(file), slm::errc::format_error, {"session state", "corrupted"}));
  EXPECT_TRUE(same_state(target, twin));
  expect_same_continuation(target, twin, cx);

  // And the same parts, consistent, load.
  ASSERT_TRUE(slm::generator_file::write(file, {*longer, eight, source.logits(), rng}).ok());
  ASSERT_TRUE(target.load(file).ok());
  EXPECT_EQ(target.history().size(), 8u);
  EXPECT_EQ(target.session().position(), 8u);
}

TEST(Generate, StopTokensStopStringsAndCallbacks) {
  fixture f("golden/hf/llama");
  auto cx = f.cx();
  slm::generation_options o;
  o.max_new_tokens = 30;
  auto ref_gen = f.gen(sampled(5));
  ASSERT_TRUE(ref_gen.prefill(prompt, cx).ok());
  auto ref = ref_gen.generate(o, cx);
  ASSERT_TRUE(ref.ok());
  ASSERT_EQ(ref->tokens.size(), 30u);

  {  // the 6th token as a stop token: five tokens, the stop token neither fed nor printed
    auto g = f.gen(sampled(5));
    ASSERT_TRUE(g.prefill(prompt, cx).ok());
    const std::int32_t stop = ref->tokens[5];
    const auto first = std::find(ref->tokens.begin(), ref->tokens.end(), stop) - ref->tokens.begin();
    o.stop_tokens = {stop};
    auto r = g.generate(o, cx);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->reason, slm::stop_reason::stop_token);
    EXPECT_EQ(r->stop_token, stop);
    EXPECT_EQ(r->tokens.size(), static_cast<std::size_t>(first));
    EXPECT_EQ(g.session().position(), prompt.size() + static_cast<std::size_t>(first));
    o.stop_tokens.clear();
  }
  {  // a stop string from the middle of the reference text
    const std::string text = ref->text;
    ASSERT_GE(text.size(), 12u);
    const std::string stop = text.substr(8, 3);
    auto g = f.gen(sampled(5));
    ASSERT_TRUE(g.prefill(prompt, cx).ok());
    o.stop_strings = {stop};
    std::string streamed;
    auto r = g.generate(o, cx, [&](std::string_view piece) {
      streamed += piece;
      return true;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->reason, slm::stop_reason::stop_string);
    EXPECT_EQ(r->text, text.substr(0, text.find(stop)));
    EXPECT_EQ(streamed, r->text);
    o.stop_strings.clear();
  }
  {  // the callback stops after the third piece
    auto g = f.gen(sampled(5));
    ASSERT_TRUE(g.prefill(prompt, cx).ok());
    int pieces = 0;
    std::string streamed;
    auto r = g.generate(o, cx, [&](std::string_view piece) {
      streamed += piece;
      return ++pieces < 3;
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->reason, slm::stop_reason::callback);
    EXPECT_EQ(streamed, r->text);
    EXPECT_EQ(r->text, ref->text.substr(0, r->text.size()));
    EXPECT_LT(r->tokens.size(), 30u);
  }
}

namespace {
int function_pieces = 0;
bool count_pieces(std::string_view piece) {  // a plain function as the text callback
  function_pieces += piece.empty() ? 0 : 1;
  return true;
}
}  // namespace

// The text callback may be any callable: a plain function, a const functor, a mutable
// lambda; each sees the same pieces (the generator reaches it through one trampoline).
TEST(Generate, AnyCallableReceivesTheText) {
  fixture f("golden/hf/llama");
  auto cx = f.cx();
  slm::generation_options o;
  o.max_new_tokens = 12;
  auto ref_gen = f.gen(sampled(7));
  ASSERT_TRUE(ref_gen.prefill(prompt, cx).ok());
  std::string by_lambda;
  auto ref = ref_gen.generate(o, cx, [&](std::string_view piece) mutable {
    by_lambda += piece;
    return true;
  });
  ASSERT_TRUE(ref.ok());
  EXPECT_EQ(by_lambda, ref->text);

  auto g1 = f.gen(sampled(7));
  ASSERT_TRUE(g1.prefill(prompt, cx).ok());
  function_pieces = 0;
  auto r1 = g1.generate(o, cx, count_pieces);
  ASSERT_TRUE(r1.ok());
  EXPECT_EQ(r1->text, ref->text);
  EXPECT_GT(function_pieces, 0);

  struct appender {
    std::string* out;
    bool operator()(std::string_view piece) const {
      *out += piece;
      return true;
    }
  };
  std::string by_functor;
  const appender a{&by_functor};
  auto g2 = f.gen(sampled(7));
  ASSERT_TRUE(g2.prefill(prompt, cx).ok());
  auto r2 = g2.generate(o, cx, a);
  ASSERT_TRUE(r2.ok());
  EXPECT_EQ(by_functor, ref->text);
  EXPECT_EQ(r2->tokens, ref->tokens);
}

TEST(Generate, CancelledFromAnotherThread) {
  fixture f("golden/hf/llama");
  slm::cancellation cancel;
  auto cx = f.cx();
  cx.cancel = &cancel;
  auto g = f.gen(sampled(9), 1 << 20);
  ASSERT_TRUE(g.prefill(prompt, cx).ok());
  slm::generation_options o;
  o.max_new_tokens = 1000000;  // would run for minutes
  std::atomic<int> pieces{0};
  std::thread canceller([&] {
    while (pieces.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    cancel.cancel();
  });
  auto r = g.generate(o, cx, [&](std::string_view) {
    pieces.fetch_add(1);
    return true;
  });
  canceller.join();
  ASSERT_TRUE(r.ok()) << r.error().to_string();
  EXPECT_EQ(r->reason, slm::stop_reason::cancelled);
  EXPECT_LT(r->tokens.size(), 100000u);
  // Consistent: every generated token was fed, nothing half-done.
  EXPECT_EQ(g.session().position(), prompt.size() + r->tokens.size());
  EXPECT_EQ(g.history().size(), g.session().position());
}

TEST(Generate, PromptPastTheContextIsRefusedAndAFullContextStops) {
  fixture f("golden/hf/llama");
  auto cx = f.cx();
  auto g = f.gen(sampled(1), 10);
  std::vector<std::int32_t> longp(11, 65);
  auto st = g.prefill(longp, cx);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), slm::errc::out_of_range);
  EXPECT_NE(st.message().find("exceeds the context of 10 tokens"), std::string::npos) << st.message();
  EXPECT_FALSE(g.ready());
  EXPECT_EQ(g.session().position(), 0u);
  EXPECT_FALSE(g.prefill(std::vector<std::int32_t>{1, 400}, cx).ok());  // an id past the head's rows
  ASSERT_TRUE(g.prefill(prompt, cx).ok());     // 7 tokens
  slm::generation_options o;
  o.max_new_tokens = 100;
  auto r = g.generate(o, cx);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->reason, slm::stop_reason::context_full);
  EXPECT_EQ(g.session().position(), 10u);
  EXPECT_EQ(r->tokens.size(), 3u);
}

TEST(Generate, Nam56rSessionsGenerateAndResume) {
  auto m = slm::nam56r_model::load(slm_test::test_data("nam56r/tiny"));
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto tok = make_tokenizer();
  auto pool = slm::thread_pool::create(2);
  slm::compute_context cx{*pool};
  cx.quantized_activations = slm::activation_precision::f32;
  using session_t = decltype(m->new_session());
  auto make = [&] {
    slm::generator<session_t> g(m->new_session(), &tok, m->vocab(), sampled(21));
    EXPECT_TRUE(g.validate().ok());
    return g;
  };
  const std::vector<std::int32_t> p = {10, 20, 30, 40};
  slm::generation_options o;
  o.max_new_tokens = 16;
  auto straight = make();
  ASSERT_TRUE(straight.prefill(p, cx).ok());
  auto all = straight.generate(o, cx);
  ASSERT_TRUE(all.ok());
  for (std::int32_t id : all->tokens) EXPECT_LT(id, 100);  // vocab_size 100 of 128 padded rows
  slm_test::temp_dir dir("generate");
  o.max_new_tokens = 6;
  {
    auto first = make();
    ASSERT_TRUE(first.prefill(p, cx).ok());
    ASSERT_TRUE(first.generate(o, cx).ok());
    ASSERT_TRUE(first.save(dir.path() / "nam56r.safetensors").ok());
  }
  auto resumed = make();
  ASSERT_TRUE(resumed.load(dir.path() / "nam56r.safetensors").ok());
  o.max_new_tokens = 10;
  ASSERT_TRUE(resumed.generate(o, cx).ok());
  std::vector<std::int32_t> joined(resumed.history().begin() + 4, resumed.history().end());
  EXPECT_EQ(joined, all->tokens);
}

}  // namespace
