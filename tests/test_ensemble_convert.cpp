// Space converters between ensemble members (slm/ensemble/vocab_align.hpp, hidden_map.hpp).
//
// Vocabulary alignment between two tokenizers that differ: the NAM56R C++ specialist's
// (models/nam56r-cpp-14m, 8192 tokens, no space-prefixed tokens) and the GPT-2-style
// byte-level golden tokenizer (tests/data/tokenizers/golden/gpt2_bytelevel, 1500 tokens,
// "Ġword" tokens), plus llama3_split. Exact properties (pairs have equal bytes, prefixes
// are prefixes, handover round-trips byte for byte) are asserted exactly; projected sums
// to 1e-6 (float output of double sums).
//
// hidden_map: a synthetic known map is recovered to 2e-3 absolute (noise 1e-4 on targets of
// size ~1); save/load is bit exact; hostile files fail with the tensor named. The real fit
// maps the C++ specialist's hidden (d 256) to the CMake specialist's (d 192); the
// measured numbers are printed and the bounds asserted are conservative.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "slm/ensemble/hidden_map.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/ensemble/vocab_align.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/text/tokenizer.hpp"
#include "test_helpers.hpp"

namespace {

using namespace slm::ensemble;
using slm::errc;
using slm_test::fails_with;

const std::string models_dir = SLM_MODELS_DIR;
const std::string data_dir = SLM_TEST_DATA_DIR;

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

const slm::tokenizer& nam_tok() {
  static const slm::tokenizer t = *slm::tokenizer::load(models_dir + "/nam56r-cpp-14m/tokenizer.json");
  return t;
}
const slm::tokenizer& gpt2_tok() {
  static const slm::tokenizer t = *slm::tokenizer::load(data_dir + "/tokenizers/golden/gpt2_bytelevel/tokenizer.json");
  return t;
}
const slm::tokenizer& llama3_tok() {
  static const slm::tokenizer t = *slm::tokenizer::load(data_dir + "/tokenizers/golden/llama3_split/tokenizer.json");
  return t;
}

std::int32_t id_of(const slm::tokenizer& t, std::string_view s) {
  auto id = t.find(s);
  EXPECT_TRUE(id.has_value()) << s;
  return id.value_or(-1);
}

void check_invariants(const vocab_alignment& al) {
  const slm::tokenizer &a = al.a(), &b = al.b();
  std::vector<bool> seen_a(a.vocab_size()), seen_b(b.vocab_size());
  for (auto [x, y] : al.pairs()) {  // one-to-one; equal bytes unless special
    ASSERT_FALSE(seen_a[static_cast<std::size_t>(x)]);
    ASSERT_FALSE(seen_b[static_cast<std::size_t>(y)]);
    seen_a[static_cast<std::size_t>(x)] = seen_b[static_cast<std::size_t>(y)] = true;
    EXPECT_EQ(a.is_special(x), b.is_special(y));
    if (!a.is_special(x)) {
      EXPECT_EQ(a.token_bytes(x), b.token_bytes(y));
    }
    EXPECT_EQ(al.exact_inverse(y), x);
  }
  for (std::size_t i = 0; i < a.vocab_size(); ++i) {
    const auto id = static_cast<std::int32_t>(i);
    const std::int32_t t = al.target(id);
    if (t < 0 || a.is_special(id)) continue;
    const std::string_view sa = a.token_bytes(id), sb = b.token_bytes(t);
    ASSERT_FALSE(sb.empty());
    EXPECT_EQ(sa.substr(0, sb.size()), sb) << "token " << i;  // exact or a proper prefix
    EXPECT_FALSE(b.is_special(t));
  }
}

TEST(EnsembleVocabAlign, CoverageBetweenDifferentTokenizers) {
  auto ab = vocab_alignment::build(nam_tok(), gpt2_tok());
  ASSERT_TRUE(ab.ok()) << ab.error().message();
  auto ba = vocab_alignment::build(gpt2_tok(), nam_tok());
  ASSERT_TRUE(ba.ok()) << ba.error().message();
  auto al = vocab_alignment::build(nam_tok(), llama3_tok());
  ASSERT_TRUE(al.ok()) << al.error().message();
  for (const auto* x : {&*ab, &*ba, &*al}) {
    const vocab_coverage& c = x->coverage();
    std::printf("coverage %zu -> %zu tokens: %zu shared strings, %zu exact, %zu specials by content, %zu by role, "
                "%zu by prefix, %zu dropped\n",
                c.a_vocab, c.b_vocab, c.shared_strings, c.exact, c.specials_by_content, c.specials_by_role, c.prefix,
                c.dropped);
    EXPECT_EQ(c.exact + c.specials_by_content + c.specials_by_role + c.prefix + c.dropped, c.a_vocab);
    check_invariants(*x);
  }
  // Both directions share the same byte strings.
  EXPECT_EQ(ab->coverage().shared_strings, ba->coverage().shared_strings);
  // Measured: NAM56R -> GPT-2 golden (8192 -> 1500): 993 shared strings, 993 exact, 0
  // specials by content, 7 by role (BOS/EOS/PAD/UNK/FIM x3: <BOS> vs <|bos|>), 13 dropped
  // (NAM56R's other specials: <CODE_START> ...), 7179 by prefix. GPT-2 golden -> NAM56R:
  // 993 exact, 7 by role, 500 by prefix (its "Ġword" tokens), 0 dropped. NAM56R ->
  // llama3_split (8192 -> 2500): 1232 exact, 7 by role, 6940 by prefix, 13 dropped.
  EXPECT_EQ(ab->coverage().shared_strings, 993u);
  EXPECT_EQ(ab->coverage().specials_by_role, 7u);
  EXPECT_EQ(ab->coverage().specials_by_content, 0u);
  EXPECT_EQ(ab->coverage().dropped, 13u);
  EXPECT_EQ(ba->coverage().dropped, 0u);
  // Specials are paired by role, never by bytes: <|bos|> <-> <BOS>.
  EXPECT_EQ(ba->exact(id_of(gpt2_tok(), "<|bos|>")), id_of(nam_tok(), "<BOS>"));
  EXPECT_EQ(ab->exact(id_of(nam_tok(), "<CODE_START>")), std::nullopt);
}

TEST(EnsembleVocabAlign, ProjectionHandComputedAndSumsToOne) {
  auto ba = vocab_alignment::build(gpt2_tok(), nam_tok());  // GPT-2 golden -> NAM56R
  ASSERT_TRUE(ba.ok()) << ba.error().message();
  const slm::tokenizer &g = gpt2_tok(), &n = nam_tok();
  // "Ġreturn" and "Ġstd" have no NAM56R token (NAM56R splits the space off): both go to
  // the longest prefix, the space token; "namespace" and "::" are shared.
  const std::int32_t ret = id_of(g, "\xC4\xA0return"), stdd = id_of(g, "\xC4\xA0std"), ns = id_of(g, "namespace"),
                     cc = id_of(g, "::");
  const std::int32_t space = id_of(n, "\xC4\xA0"), ns_b = id_of(n, "namespace"), cc_b = id_of(n, "::");
  EXPECT_EQ(ba->target(ret), space);
  EXPECT_EQ(ba->target(stdd), space);
  std::vector<float> pa(g.vocab_size(), 0.0f), pb(n.vocab_size());
  pa[static_cast<std::size_t>(ret)] = 0.5f;
  pa[static_cast<std::size_t>(ns)] = 0.25f;
  pa[static_cast<std::size_t>(stdd)] = 0.125f;
  pa[static_cast<std::size_t>(cc)] = 0.125f;
  ASSERT_TRUE(ba->project(pa, pb).ok());
  std::vector<float> want(n.vocab_size(), 0.0f);
  want[static_cast<std::size_t>(space)] = 0.625f;
  want[static_cast<std::size_t>(ns_b)] = 0.25f;
  want[static_cast<std::size_t>(cc_b)] = 0.125f;
  EXPECT_EQ(pb, want);
  // A padded model row (no token) is dropped and the rest renormalised: same result.
  std::vector<float> padded(g.vocab_size() + 1, 0.0f);
  for (std::size_t i = 0; i < pa.size(); ++i) padded[i] = pa[i] / 2;
  padded.back() = 0.5f;
  ASSERT_TRUE(ba->project(padded, pb).ok());
  EXPECT_EQ(pb, want);
  // Random distributions, both directions: sums are 1.
  auto ab = vocab_alignment::build(nam_tok(), gpt2_tok());
  ASSERT_TRUE(ab.ok());
  std::mt19937 rng(7);
  for (const vocab_alignment* al : {&*ab, &*ba}) {
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<float> p(al->a().vocab_size()), q(al->b().vocab_size());
      std::exponential_distribution<float> e(1.0f);
      double s = 0;
      for (float& v : p) s += v = std::pow(e(rng), 4.0f);  // peaked
      for (float& v : p) v = static_cast<float>(v / s);
      ASSERT_TRUE(al->project(p, q).ok());
      double t = 0;
      for (float v : q) t += v;
      EXPECT_NEAR(t, 1.0, 1e-6);
    }
  }
  // Bad inputs.
  std::vector<float> bad(g.vocab_size(), 0.0f), small(10);
  EXPECT_TRUE(fails_with(ba->project(bad, pb), errc::invalid_argument, {"no probability mass"}));
  bad[3] = -1.0f;
  EXPECT_TRUE(fails_with(ba->project(bad, pb), errc::invalid_argument, {"probability 3"}));
  bad[3] = std::nanf("");
  EXPECT_TRUE(fails_with(ba->project(bad, pb), errc::invalid_argument, {"probability 3"}));
  EXPECT_TRUE(fails_with(ba->project(pa, small), errc::invalid_argument, {"10 entries", "8192"}));
}

TEST(EnsembleVocabAlign, HandoverRoundTripsExactlyBothWays) {
  auto ab = vocab_alignment::build(nam_tok(), gpt2_tok());
  auto ba = vocab_alignment::build(gpt2_tok(), nam_tok());
  ASSERT_TRUE(ab.ok() && ba.ok());
  ASSERT_TRUE(ab->exact_handover());
  ASSERT_TRUE(ba->exact_handover());
  const std::string file = read_file(data_dir + "/nam56r/cpp14m/MachO_arm64.h.txt");
  ASSERT_GT(file.size(), 1000u);
  static constexpr char nul_text[] = "nul\0byte and \xFF\xFE invalid UTF-8";
  const std::vector<std::string> texts = {
      file,
      "caf\xC3\xA9 \xE2\x82\xAC 10 \xF0\x9F\x98\x80 na\xC3\xAFve\n",  // 2-, 3-, 4-byte UTF-8
      "\tint x;\r\n\tif (x) {\r\n\t\treturn 1;\r\n\t}\r\n",             // tabs, CRLF
      "<BOS> <|bos|> <EOS><|endoftext|> <CODE_START>x<0x41>\xE2\x96\x81y",  // specials-looking text
      std::string(nul_text, sizeof nul_text - 1),  // every byte of the literal but its terminator
      "  leading and trailing spaces   ",
      ""};
  const slm::encode_options plain{.add_special_tokens = false, .parse_special = false};
  for (const vocab_alignment* al : {&*ab, &*ba}) {
    for (const std::string& t : texts) {
      auto ids = al->a().encode(t, plain);
      ASSERT_TRUE(ids.ok());
      auto moved = al->handover(*ids);
      ASSERT_TRUE(moved.ok()) << moved.error().message();
      auto back = al->b().decode(*moved);
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(*back, t);
      EXPECT_EQ(*back, *al->a().decode(*ids));
      for (std::int32_t id : *moved) EXPECT_FALSE(al->b().is_special(id));  // text stays text
      EXPECT_EQ(*moved, *al->b().encode(t, plain));  // B's own tokenisation of the text
    }
  }
  // A BOS already there is mapped, not added twice; specials inside are mapped by role.
  auto with_bos = nam_tok().encode("int x;");  // NAM56R's template adds <BOS>
  ASSERT_TRUE(with_bos.ok());
  ASSERT_EQ(with_bos->front(), id_of(nam_tok(), "<BOS>"));
  with_bos->push_back(id_of(nam_tok(), "<EOS>"));
  auto moved = ab->handover(*with_bos);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(moved->front(), id_of(gpt2_tok(), "<|bos|>"));
  EXPECT_EQ(std::count(moved->begin(), moved->end(), id_of(gpt2_tok(), "<|bos|>")), 1);
  EXPECT_EQ(moved->back(), id_of(gpt2_tok(), "<|eos|>"));
  EXPECT_EQ(*gpt2_tok().decode(*moved, {.skip_special_tokens = true}), "int x;");
  // An unpaired special and an out-of-range id are errors.
  const std::int32_t code_start = id_of(nam_tok(), "<CODE_START>");
  EXPECT_TRUE(fails_with(ab->handover(std::vector<std::int32_t>{code_start}), errc::unsupported,
                         {"<CODE_START>", "no counterpart"}));
  EXPECT_TRUE(fails_with(ab->handover(std::vector<std::int32_t>{99999}), errc::out_of_range, {"99999"}));
}

TEST(EnsembleVocabAlign, CommonBoundariesHandChecked) {
  const slm::tokenizer &n = nam_tok(), &g = gpt2_tok();
  // "intint": NAM56R [int][in][t] ends at 3, 5, 6; GPT-2 golden [i][nt][int] at 1, 3, 6.
  const std::vector<std::int32_t> a = {id_of(n, "int"), id_of(n, "in"), id_of(n, "t")};
  const std::vector<std::int32_t> b = {id_of(g, "i"), id_of(g, "nt"), id_of(g, "int")};
  auto cb = common_boundaries(n, a, g, b);
  ASSERT_TRUE(cb.ok()) << cb.error().message();
  ASSERT_EQ(cb->size(), 2u);
  EXPECT_EQ((*cb)[0].offset, 3u);
  EXPECT_EQ((*cb)[0].a_token, 0u);
  EXPECT_EQ((*cb)[0].b_token, 1u);
  EXPECT_EQ((*cb)[1].offset, 6u);
  EXPECT_EQ((*cb)[1].a_token, 2u);
  EXPECT_EQ((*cb)[1].b_token, 2u);
  // Real text: every boundary is one of both tokenisations', the end is one.
  const slm::encode_options plain{.add_special_tokens = false, .parse_special = false};
  const std::string text = read_file(data_dir + "/nam56r/cpp14m/MachO_arm64.h.txt");
  auto ia = n.encode(text, plain), ib = g.encode(text, plain);
  auto all = common_boundaries(n, *ia, g, *ib);
  ASSERT_TRUE(all.ok());
  std::printf("MachO_arm64.h: %zu bytes, %zu NAM56R tokens, %zu GPT-2 golden tokens, %zu common boundaries\n",
              text.size(), ia->size(), ib->size(), all->size());
  EXPECT_EQ(all->back().offset, text.size());
  for (const shared_boundary& s : *all) {
    EXPECT_EQ(n.decode(std::span(*ia).first(s.a_token + 1))->size(), s.offset);
    EXPECT_EQ(g.decode(std::span(*ib).first(s.b_token + 1))->size(), s.offset);
  }
  // Different texts are refused.
  EXPECT_TRUE(fails_with(common_boundaries(n, a, g, std::span(b).first(2)), errc::invalid_argument,
                         {"different bytes", "first difference at byte 3"}));
}

// ---- hidden_map ----

struct synthetic {
  std::size_t n, da, db;
  std::vector<float> x, y, w, b;
};
synthetic make_synthetic(std::size_t n, std::size_t da, std::size_t db, float noise, unsigned seed) {
  synthetic s{n, da, db, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  s.w.resize(db * da);
  s.b.resize(db);
  for (float& v : s.w) v = g(rng) / std::sqrt(static_cast<float>(da));
  for (float& v : s.b) v = g(rng);
  s.x.resize(n * da);
  s.y.resize(n * db);
  for (float& v : s.x) v = g(rng);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t j = 0; j < db; ++j) {
      double acc = s.b[j];
      for (std::size_t i = 0; i < da; ++i) acc += static_cast<double>(s.w[j * da + i]) * s.x[r * da + i];
      s.y[r * db + j] = static_cast<float>(acc) + noise * g(rng);
    }
  return s;
}

TEST(EnsembleHiddenMap, FitRecoversAKnownMap) {
  const synthetic s = make_synthetic(400, 24, 10, 1e-4f, 3);
  auto m = hidden_map::fit(s.x, s.y, s.n, s.da, s.db, 0.0, "a", "b");
  ASSERT_TRUE(m.ok()) << m.error().message();
  const double ew = slm_test::max_abs_diff(m->weight().data(), s.w.data(), s.w.size());
  const double eb = slm_test::max_abs_diff(m->bias().data(), s.b.data(), s.b.size());
  std::printf("synthetic fit: max |W - W*| = %.2e, max |b - b*| = %.2e\n", ew, eb);
  EXPECT_LT(ew, 2e-3);  // noise 1e-4 over 400 rows: expected error ~1e-5
  EXPECT_LT(eb, 2e-3);
  // apply() is x W^T + b.
  slm::serial_executor ex;
  slm::compute_context cx{ex};
  std::vector<float> y(s.db * 3);
  ASSERT_TRUE(m->apply(s.x.data(), 3, y.data(), cx).ok());
  EXPECT_LT(slm_test::max_abs_diff(y.data(), s.y.data(), y.size()), 2e-3);
  // A ridge shrinks the weights.
  auto r = hidden_map::fit(s.x, s.y, s.n, s.da, s.db, 1e4);
  ASSERT_TRUE(r.ok());
  double n0 = 0, n1 = 0;
  for (float v : m->weight()) n0 += v * v;
  for (float v : r->weight()) n1 += v * v;
  EXPECT_LT(n1, 0.5 * n0);
}

TEST(EnsembleHiddenMap, FitRefusesUnderdeterminedAndSingular) {
  const synthetic s = make_synthetic(24, 24, 5, 0.0f, 4);
  EXPECT_TRUE(fails_with(hidden_map::fit(s.x, s.y, 24, 24, 5, 0.0), errc::invalid_argument,
                         {"24 rows", "at least 25"}));
  synthetic d = make_synthetic(100, 6, 3, 0.0f, 5);
  for (std::size_t r = 0; r < d.n; ++r) d.x[r * 6 + 5] = 2 * d.x[r * 6 + 1];  // a dependent coordinate
  EXPECT_TRUE(fails_with(hidden_map::fit(d.x, d.y, d.n, 6, 3, 0.0), errc::invalid_argument,
                         {"not positive definite", "pivot 5"}));
  EXPECT_TRUE(hidden_map::fit(d.x, d.y, d.n, 6, 3, 1e-3).ok());  // a ridge makes it definite
  EXPECT_TRUE(fails_with(hidden_map::fit(d.x, d.y, d.n, 6, 3, -1.0), errc::invalid_argument, {"ridge"}));
  d.x[7] = INFINITY;
  EXPECT_TRUE(fails_with(hidden_map::fit(d.x, d.y, d.n, 6, 3, 1.0), errc::format_error, {"X", "inf", "[1, 1]"}));
  EXPECT_TRUE(fails_with(hidden_map::fit(d.x, d.y, d.n - 1, 6, 3, 1.0), errc::invalid_argument, {"expected [99, 6]"}));
}

TEST(EnsembleHiddenMap, SaveLoadBitExactAndHostileFiles) {
  const synthetic s = make_synthetic(60, 8, 5, 1e-3f, 6);
  auto m = hidden_map::fit(s.x, s.y, s.n, 8, 5, 0.1, "nam56r-cpp-14m", "nam56r-cmake-10m");
  ASSERT_TRUE(m.ok());
  slm_test::temp_dir dir("hidden_map");
  const auto path = dir.path() / "map.safetensors";
  ASSERT_TRUE(m->save(path).ok());
  auto back = hidden_map::load(path);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->source(), "nam56r-cpp-14m");
  EXPECT_EQ(back->target(), "nam56r-cmake-10m");
  EXPECT_EQ(back->source_dim(), 8u);
  EXPECT_EQ(back->target_dim(), 5u);
  EXPECT_EQ(0, std::memcmp(back->weight().data(), m->weight().data(), 40 * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(back->bias().data(), m->bias().data(), 5 * sizeof(float)));
  auto bytes = m->serialize();
  ASSERT_TRUE(bytes.ok());
  auto again = back->serialize();
  EXPECT_EQ(*bytes, *again);

  // Truncated.
  std::vector<std::byte> cut(bytes->begin(), bytes->end() - 4);
  EXPECT_FALSE(hidden_map::from_memory(cut).ok());
  EXPECT_EQ(hidden_map::from_memory(cut).error().code(), errc::format_error);
  // Hostile variants written by hand.
  auto file_with = [](std::vector<float> w, slm::shape ws, std::vector<float> b, slm::shape bs, std::string da,
                      std::string db) {
    slm::safetensors::writer wr;
    wr.set_metadata("format", "slm.hidden_map.v1");
    wr.set_metadata("source_dim", da);
    wr.set_metadata("target_dim", db);
    EXPECT_TRUE(wr.add("weight", slm::dtype::f32, ws, std::as_bytes(std::span(w))).ok());
    EXPECT_TRUE(wr.add("bias", slm::dtype::f32, bs, std::as_bytes(std::span(b))).ok());
    return *wr.serialize();
  };
  std::vector<float> w(40, 0.5f), b(5, 0.25f);
  EXPECT_TRUE(hidden_map::from_memory(file_with(w, {5, 8}, b, {5}, "8", "5")).ok());
  EXPECT_TRUE(fails_with(hidden_map::from_memory(file_with(w, {8, 5}, b, {5}, "8", "5")), errc::format_error,
                         {"'weight'", "[8, 5]", "expected F32 [5, 8]"}));
  EXPECT_TRUE(fails_with(hidden_map::from_memory(file_with(w, {5, 8}, b, {5}, "10", "5")), errc::format_error,
                         {"'weight'", "expected F32 [5, 10]"}));
  EXPECT_TRUE(fails_with(hidden_map::from_memory(file_with(w, {5, 8}, {1, 2, 3, 4}, {4}, "8", "5")), errc::format_error,
                         {"'bias'", "[4]", "expected F32 [5]"}));
  EXPECT_TRUE(fails_with(hidden_map::from_memory(file_with(w, {5, 8}, b, {5}, "8", "x")), errc::format_error,
                         {"target_dim"}));
  std::vector<float> wn = w;
  wn[13] = std::nanf("");
  EXPECT_TRUE(fails_with(hidden_map::from_memory(file_with(wn, {5, 8}, b, {5}, "8", "5")), errc::format_error,
                         {"weight", "nan", "[1, 5]"}));
  std::vector<float> bi = b;
  bi[2] = -INFINITY;
  EXPECT_TRUE(fails_with(hidden_map::from_memory(file_with(w, {5, 8}, bi, {5}, "8", "5")), errc::format_error,
                         {"bias", "inf"}));
  slm::safetensors::writer other;
  other.set_metadata("format", "pt");
  EXPECT_TRUE(fails_with(hidden_map::from_memory(*other.serialize()), errc::format_error, {"slm.hidden_map.v1"}));
  EXPECT_FALSE(hidden_map::load(dir.path() / "missing.safetensors").ok());
}

// Text for the real fit: held-out C++ files of tests/data/ensemble (sorted), else the
// bundled model's held-out header, up to `bytes`.
std::string fit_text(std::size_t bytes) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(data_dir + "/ensemble/heldout/cpp", ec))
    files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::string text = read_file(data_dir + "/nam56r/cpp14m/MachO_arm64.h.txt");
  for (const auto& f : files) {
    if (text.size() >= bytes) break;
    text += read_file(f.string());
  }
  return text.substr(0, std::min(bytes, text.size()));
}

TEST(EnsembleHiddenMap, RealFitBetweenTwoShippedMembers) {
  const std::string dir_a = models_dir + "/nam56r-cpp-14m", dir_b = models_dir + "/nam56r-cmake-10m";
  if (!std::filesystem::exists(dir_b + "/model.safetensors")) GTEST_SKIP() << "models/nam56r-cmake-10m not present";
  auto ma = member_model::load(dir_a);
  ASSERT_TRUE(ma.ok()) << ma.error().message();
  auto mb = member_model::load(dir_b);
  ASSERT_TRUE(mb.ok()) << mb.error().message();
  auto tb = slm::tokenizer::load(dir_b + "/tokenizer.json");
  ASSERT_TRUE(tb.ok());
  const member_ref a{&*ma, &nam_tok(), "cpp"}, b{&*mb, &*tb, "cmake"};
  auto pool = slm::thread_pool::create(2);
  ASSERT_TRUE(pool.ok());
  slm::compute_context cx{*pool};
  const std::string text = fit_text(3800);
  auto pairs = collect_pairs(a, b, text, cx);
  ASSERT_TRUE(pairs.ok()) << pairs.error().message();
  ASSERT_EQ(pairs->d_a, 256u);
  ASSERT_EQ(pairs->d_b, 192u);
  ASSERT_GT(pairs->n, 1400u);
  const std::size_t n = pairs->n, n_train = n * 3 / 4, n_test = n - n_train, da = 256, db = 192;
  const std::span<const float> x(pairs->x), y(pairs->y);
  auto map = hidden_map::fit(x.first(n_train * da), y.first(n_train * db), n_train, da, db, 1000.0, "cpp", "cmake");
  ASSERT_TRUE(map.ok()) << map.error().message();
  // Held-out residual against the mean-only baseline (the training mean of Y).
  std::vector<double> mean(db, 0.0);
  for (std::size_t r = 0; r < n_train; ++r)
    for (std::size_t j = 0; j < db; ++j) mean[j] += y[r * db + j] / static_cast<double>(n_train);
  const float* xt = x.data() + n_train * da;
  const float* yt = y.data() + n_train * db;
  std::vector<float> pred(n_test * db);
  ASSERT_TRUE(map->apply(xt, n_test, pred.data(), cx).ok());
  double res = 0, base = 0;
  for (std::size_t r = 0; r < n_test; ++r)
    for (std::size_t j = 0; j < db; ++j) {
      res += std::pow(yt[r * db + j] - pred[r * db + j], 2);
      base += std::pow(yt[r * db + j] - mean[j], 2);
    }
  // B's head on the mapped hidden against B's own argmax.
  const std::size_t V = mb->vocab();
  std::vector<float> own(n_test * V), mapped(n_test * V);
  ASSERT_TRUE(head_logits(*mb, yt, n_test, own.data(), cx).ok());
  ASSERT_TRUE(mapped_logits(*map, *mb, xt, n_test, mapped.data(), cx).ok());
  std::size_t agree = 0;
  for (std::size_t r = 0; r < n_test; ++r) {
    const float* o = own.data() + r * V;
    const float* m = mapped.data() + r * V;
    agree += std::max_element(o, o + V) - o == std::max_element(m, m + V) - m;
  }
  const double factor = base / res, frac = static_cast<double>(agree) / static_cast<double>(n_test);
  std::printf("real fit cpp-14m (d 256) -> cmake-10m (d 192): %zu pairs (%zu train, %zu held out), held-out residual "
              "%.4g vs mean-only %.4g (factor %.2f), argmax agreement %.3f\n",
              n, n_train, n_test, res, base, factor, frac);
  // Measured (3800 bytes, 1615 pairs, ridge 1000): factor 1.08, argmax agreement 0.347. Ridge 0.1-10 overfits these few rows (factor < 1: 257 parameters
  // per output dimension from ~1200 rows); the hidden spaces of two separately trained
  // models are only weakly linearly related at this scale.
  EXPECT_GT(factor, 1.0);
  EXPECT_GT(frac, 0.15);
  // A map of the wrong target dimension is refused.
  auto wrong = hidden_map::fit(y.first(n_train * db), x.first(n_train * da), n_train, db, da, 1.0);
  ASSERT_TRUE(wrong.ok());
  EXPECT_TRUE(fails_with(mapped_logits(*wrong, *mb, yt, 1, mapped.data(), cx), errc::invalid_argument,
                         {"target dimension 256", "hidden size 192"}));
}

TEST(EnsembleHiddenMap, SessionHiddenIsWhatTheHeadReads) {
  auto ma = member_model::load(models_dir + "/nam56r-cpp-14m");
  ASSERT_TRUE(ma.ok()) << ma.error().message();
  slm::serial_executor ex;
  slm::compute_context cx{ex};
  const slm::encode_options plain{.add_special_tokens = false, .parse_special = false};
  auto ids = nam_tok().encode("#include <vector>\nint main() { return 0; }\n", plain);
  ASSERT_TRUE(ids.ok());
  const std::size_t T = ids->size(), d = 256, V = ma->vocab();
  auto s1 = ma->new_session();
  std::vector<float> logits(T * V), hidden(T * d), from_hidden(T * V);
  ASSERT_TRUE(s1.forward(*ids, T, logits.data(), cx).ok());
  auto s2 = ma->new_session();
  ASSERT_TRUE(forward_hidden(s2, *ids, hidden.data(), cx).ok());
  EXPECT_EQ(s2.position(), T);
  ASSERT_TRUE(head_logits(*ma, hidden.data(), T, from_hidden.data(), cx).ok());
  EXPECT_EQ(logits, from_hidden);  // the same rows through the same head: bit for bit
  // Bad arguments.
  auto& ns = std::get<slm::nam56r_model::session>(s2.get());
  EXPECT_TRUE(fails_with(ns.forward(*ids, 0, nullptr, cx, {}, T + 1, hidden.data()), errc::invalid_argument,
                         {"hidden rows"}));
  EXPECT_TRUE(fails_with(ns.forward(*ids, 0, nullptr, cx, {}, 1, nullptr), errc::invalid_argument, {"hidden is null"}));
  EXPECT_EQ(s2.position(), T);
}

}  // namespace
