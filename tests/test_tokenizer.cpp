// Tokenizers against HF `tokenizers` (the oracle): every id of every case of the golden
// tokenizers (tests/data/tokenizers/golden: GPT-2 byte-level, Llama-3 split + ignore_merges,
// C++ split + digits + NFC + added tokens) and of ours (tests/data/tokenizers: GPT-4o-style
// byte-level with lstrip/rstrip/normalized added tokens, the NAM56R C++ tokenizer in its
// round-trip form and in the spec's whitespace-discarding form), made by
// tools/tokenizer/train_tokenizers.py. Exact equality: tokenization is discrete.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "slm/text/detokenizer.hpp"
#include "slm/generate/generator.hpp"
#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/text/text_ops.hpp"
#include "slm/text/token_ids.hpp"
#include "slm/text/tokenizer.hpp"
#include "test_helpers.hpp"

namespace {

const std::filesystem::path data_dir = std::filesystem::path(SLM_TEST_DATA_DIR) / "tokenizers";

std::string b64decode(std::string_view in) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned buf = 0;
  int bits = 0;
  for (char c : in) {
    const int v = val(c);
    if (v < 0) continue;
    buf = (buf << 6) | static_cast<unsigned>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buf >> bits) & 0xFF));
    }
  }
  return out;
}

struct tcase {
  std::string name, text, decoded;
  std::vector<std::int32_t> ids;
  bool invalid_utf8 = false;
};

struct suite {
  slm::tokenizer tok;
  std::vector<tcase> cases;
  std::string kind;
};

suite load_suite(const std::filesystem::path& dir) {
  suite s;
  auto tok = slm::tokenizer::load(dir / "tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.error().to_string();
  if (tok.ok()) s.tok = std::move(*tok);
  auto text = slm::read_text_file(dir / "cases.json");
  EXPECT_TRUE(text.ok());
  auto doc = slm::json::parse(*text);
  EXPECT_TRUE(doc.ok());
  s.kind = std::string((*doc).get_string("kind"));
  for (const auto& c : (*doc)["cases"].items()) {
    tcase t;
    t.name = std::string(c.get_string("name"));
    t.text = b64decode(c.get_string("text_b64"));
    t.decoded = b64decode(c.get_string("decoded_b64"));
    t.invalid_utf8 = c.get_bool("invalid_utf8", false);
    for (const auto& id : c["ids"].items()) t.ids.push_back(static_cast<std::int32_t>(*id.as_int64()));
    s.cases.push_back(std::move(t));
  }
  return s;
}

std::vector<std::filesystem::path> suite_dirs() {
  std::vector<std::filesystem::path> dirs;
  for (const char* d : {"golden/gpt2_bytelevel", "golden/llama3_split", "golden/cpp_split_digits", "cpp_bytelevel",
                        "nam56r_cpp", "nam56r_ws"})
    dirs.push_back(data_dir / d);
  return dirs;
}

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes U+FFFD.
std::string lossy_utf8(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t need = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    std::size_t ok = 0;  // bytes of a valid prefix of the sequence
    if (need) {
      ok = 1;
      for (std::size_t k = 1; k < need && i + k < s.size(); ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        unsigned lo = 0x80, hi = 0xBF;
        if (k == 1) {
          if (b == 0xE0) lo = 0xA0;
          if (b == 0xED) hi = 0x9F;
          if (b == 0xF0) lo = 0x90;
          if (b == 0xF4) hi = 0x8F;
        }
        if (c < lo || c > hi) break;
        ++ok;
      }
    }
    if (need && ok == need) {
      out.append(s.substr(i, need));
      i += need;
    } else {
      out += "\xEF\xBF\xBD";
      i += std::max<std::size_t>(ok, 1);
    }
  }
  return out;
}

std::string printable(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 120)) {
    if (c >= 32 && c < 127) out.push_back(static_cast<char>(c));
    else out += slm::cat("\\x", "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]);
  }
  return out;
}

class TokenizerGolden : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(TokenizerGolden, EncodeMatchesEveryIdAndDecodeMatches) {
  const suite s = load_suite(GetParam());
  ASSERT_FALSE(s.cases.empty());
  const slm::encode_options raw{false, true};  // add_special_tokens=False, as the oracle ran
  std::size_t matched = 0;
  for (const tcase& c : s.cases) {
    auto ids = s.tok.encode(c.text, raw);
    ASSERT_TRUE(ids.ok()) << ids.error().to_string();
    EXPECT_EQ(*ids, c.ids) << GetParam().filename() << " case '" << c.name << "': " << printable(c.text);
    matched += *ids == c.ids;
    auto dec = s.tok.decode(c.ids);
    ASSERT_TRUE(dec.ok()) << dec.error().to_string();
    // HF prints U+FFFD where the bytes are not UTF-8 (its decode returns a String); slm
    // returns the bytes, which convert to HF's text exactly as Rust's from_utf8_lossy does.
    // Invalid-UTF-8 inputs have no oracle decode (their decoded_b64 is the input itself).
    if (!c.invalid_utf8) EXPECT_EQ(lossy_utf8(*dec), c.decoded) << "decode, case '" << c.name << "'";
    else if (s.tok.lossless()) EXPECT_EQ(*dec, c.text) << "decode, case '" << c.name << "'";
  }
  EXPECT_EQ(matched, s.cases.size());
}

TEST_P(TokenizerGolden, ByteLevelRoundTripsAnyBytes) {
  const suite s = load_suite(GetParam());
  if (!s.tok.lossless()) GTEST_SKIP() << "not lossless (a normalizer, whitespace-stripping added tokens, or not byte-level)";
  for (const tcase& c : s.cases) {
    auto ids = s.tok.encode(c.text, {false, true});
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*s.tok.decode(*ids), c.text) << c.name;
  }
  // Every byte value, runs of invalid bytes, truncated sequences.
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  for (const std::string& x : {all, std::string("\xF0\x9F\x98"), std::string("a\xC0\xAF b\xED\xA0\x80 c\xFF\xFE"),
                               std::string(5000, ' ') + "x", std::string(20000, 'a')}) {
    auto ids = s.tok.encode(x, {false, false});
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*s.tok.decode(*ids), x) << printable(x);
  }
}

TEST_P(TokenizerGolden, StreamingDetokenizerNeverSplitsACharacter) {
  const suite s = load_suite(GetParam());
  for (const tcase& c : s.cases) {
    slm::detokenizer d(s.tok);
    std::string streamed;
    for (std::int32_t id : c.ids) {
      auto piece = d.push(id);
      ASSERT_TRUE(piece.ok());
      // Each piece is whole characters when the full text is valid UTF-8.
      if (!c.invalid_utf8) EXPECT_EQ(slm::detokenizer::incomplete_tail(*piece), 0u) << c.name;
      streamed += *piece;
    }
    streamed += d.flush();
    EXPECT_EQ(streamed, *s.tok.decode(c.ids)) << c.name;
  }
}

TEST_P(TokenizerGolden, ConcurrentEncodesAgree) {  // a loaded tokenizer is shared by threads
  const suite s = load_suite(GetParam());
  std::vector<std::vector<std::int32_t>> a(s.cases.size()), b(s.cases.size());
  std::thread t1([&] {
    for (std::size_t i = 0; i < s.cases.size(); ++i) a[i] = *s.tok.encode(s.cases[i].text, {false, true});
  });
  std::thread t2([&] {
    for (std::size_t i = s.cases.size(); i-- > 0;) b[i] = *s.tok.encode(s.cases[i].text, {false, true});
  });
  t1.join();
  t2.join();
  EXPECT_EQ(a, b);
}

INSTANTIATE_TEST_SUITE_P(All, TokenizerGolden, ::testing::ValuesIn(suite_dirs()),
                         [](const auto& info) {
                           std::string n = info.param.filename().string();
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(Tokenizer, SpecialTokensAsPlainTextWhenNotParsed) {
  auto tok = slm::tokenizer::load(data_dir / "golden/gpt2_bytelevel/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const std::int32_t bos = tok->specials().bos;
  ASSERT_GE(bos, 0);
  auto parsed = tok->encode("<|bos|>int x;", {false, true});
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->front(), bos);
  auto plain = tok->encode("<|bos|>int x;", {false, false});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(std::count(plain->begin(), plain->end(), bos), 0);
  EXPECT_EQ(*tok->decode(*plain), "<|bos|>int x;");
  EXPECT_EQ(*tok->decode(*parsed, {true}), "int x;");  // skip_special_tokens
}

TEST(Tokenizer, FindsSpecialAndFimTokens) {
  auto tok = slm::tokenizer::load(data_dir / "nam56r_cpp/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  const auto& sp = tok->specials();  // the NAM56R contract's fixed ids (spec section 3)
  EXPECT_EQ(sp.pad, 0);
  EXPECT_EQ(sp.unk, 1);
  EXPECT_EQ(sp.bos, 2);
  EXPECT_EQ(sp.eos, 3);
  EXPECT_EQ(sp.fim_prefix, 4);
  EXPECT_EQ(sp.fim_middle, 5);
  EXPECT_EQ(sp.fim_suffix, 6);
  auto psm = slm::fim_prompt(*tok, "int f() {", "}\n");
  ASSERT_TRUE(psm.ok());
  EXPECT_EQ(psm->front(), 4);
  EXPECT_EQ(psm->back(), 5);
  EXPECT_NE(std::find(psm->begin(), psm->end(), 6), psm->end());
  auto spm = slm::fim_prompt(*tok, "int f() {", "}\n", slm::fim_order::spm);
  ASSERT_TRUE(spm.ok());
  EXPECT_EQ((*spm)[0], 4);
  EXPECT_EQ((*spm)[1], 6);
  // The user's text never becomes a FIM token.
  auto tricky = slm::fim_prompt(*tok, "<FIM_MIDDLE>", "");
  ASSERT_TRUE(tricky.ok());
  EXPECT_EQ(std::count(tricky->begin(), tricky->end(), 5), 1);
}

// fim_prompt's default order is the model's own when tokenizer_config.json states one
// ("fim_order"), PSM otherwise (issue 18: the bundled model, fine-tuned for SPM, got PSM).
TEST(Tokenizer, FimOrderDefaultsToTheModelsOwn) {
  auto order_of = [](const std::vector<std::int32_t>& ids) {  // <FIM_PREFIX> then <FIM_SUFFIX>: SPM
    return ids.size() > 1 && ids[1] == 6 ? slm::fim_order::spm : slm::fim_order::psm;
  };
  slm_test::temp_dir d("fim");
  std::filesystem::copy_file(data_dir / "nam56r_cpp/tokenizer.json", d / "tokenizer.json");
  {  // no tokenizer_config.json: PSM
    auto tok = slm::tokenizer::load_dir(d.path());
    ASSERT_TRUE(tok.ok()) << tok.error().message();
    EXPECT_FALSE(tok->fim_preference().has_value());
    auto p = slm::fim_prompt(*tok, "int f() {", "}\n");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(order_of(*p), slm::fim_order::psm);
  }
  for (const char* stated : {"spm", "psm"}) {
    ASSERT_TRUE(slm_test::write_file(d / "tokenizer_config.json", slm::cat(R"({"fim_order": ")", stated, R"("})")));
    auto tok = slm::tokenizer::load_dir(d.path());
    ASSERT_TRUE(tok.ok()) << tok.error().message();
    const slm::fim_order want = std::string_view(stated) == "spm" ? slm::fim_order::spm : slm::fim_order::psm;
    ASSERT_TRUE(tok->fim_preference().has_value());
    EXPECT_EQ(*tok->fim_preference(), want);
    auto p = slm::fim_prompt(*tok, "int f() {", "}\n");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(order_of(*p), want) << stated;
    // An explicit order still wins.
    const slm::fim_order other = want == slm::fim_order::spm ? slm::fim_order::psm : slm::fim_order::spm;
    auto q = slm::fim_prompt(*tok, "int f() {", "}\n", other);
    ASSERT_TRUE(q.ok());
    EXPECT_EQ(order_of(*q), other);
  }
  for (const char* bad : {R"({"fim_order": "pms"})", R"({"fim_order": 1})"}) {
    ASSERT_TRUE(slm_test::write_file(d / "tokenizer_config.json", bad));
    EXPECT_TRUE(slm_test::fails_with(slm::tokenizer::load_dir(d.path()), slm::errc::format_error,
                           {"tokenizer_config.json", "fim_order", "psm", "spm"}))
        << bad;
  }
  // The bundled model states the order it was fine-tuned for.
  auto bundled = slm::tokenizer::load_dir(std::filesystem::path(SLM_MODELS_DIR) / "nam56r-cpp-14m");
  ASSERT_TRUE(bundled.ok()) << bundled.error().message();
  ASSERT_TRUE(bundled->fim_preference().has_value());
  EXPECT_EQ(bundled->specials().bos, 2);  // a config naming no special tokens changes none
  EXPECT_EQ(bundled->specials().eos, 3);
  EXPECT_EQ(bundled->specials().fim_suffix, 6);
  EXPECT_EQ(*bundled->fim_preference(), slm::fim_order::spm);
  auto b = slm::fim_prompt(*bundled, "int f() {", "}\n");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(order_of(*b), slm::fim_order::spm);
}

TEST(Tokenizer, PostProcessorAddsBosOnRequest) {
  const std::string json = R"({"model": {"type": "BPE", "vocab": {"<s>": 0, "a": 1, "b": 2, "ab": 3}, "merges": ["a b"]},
    "added_tokens": [{"id": 0, "content": "<s>", "special": true}],
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}}})";
  auto tok = slm::tokenizer::parse(json);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_EQ(*tok->encode("abab", {true, true}), (std::vector<std::int32_t>{0, 3, 3}));
  EXPECT_EQ(*tok->encode("abab", {false, true}), (std::vector<std::int32_t>{3, 3}));
  EXPECT_EQ(*tok->decode(std::vector<std::int32_t>{0, 3, 1}), "<s> ab a");  // no decoder: HF joins with spaces
}

// ---- Many added tokens sharing a first byte (issue 18: Gemma 3's ~6300 `<unusedN>`) ----

namespace {

// `base` (a tokenizer.json) with `n` more added tokens `<unused0>`..`<unusedN-1>` and chat
// markers, ids from `first_id` on, non-special and not normalized (as bench_tokenizer builds it).
std::string with_many_added_tokens(const std::string& base, std::int32_t first_id, int n) {
  std::string entries;
  auto add = [&](const std::string& content) {
    if (!entries.empty()) entries += ",";
    entries += slm::cat(R"({"id":)", first_id++, R"(,"content":")", content,
                        R"(","single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":false})");
  };
  for (int i = 0; i < n; ++i) add(slm::cat("<unused", i, ">"));
  for (const char* t : {"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"}) add(t);
  std::string out = base;
  const std::size_t open = out.find('[', out.find("\"added_tokens\""));
  const std::size_t next = out.find_first_not_of(" \t\r\n", open + 1);
  out.insert(open + 1, out[next] == ']' ? entries : entries + ",");
  return out;
}

// HTML/XML-like text with many '<', overlapping prefixes of added tokens and a few whole ones.
std::string html_like(std::size_t bytes) {
  std::string t;
  for (std::size_t i = 0; t.size() < bytes; ++i)
    t += slm::cat("<div class=\"r", i, "\"><span>", i, " &lt;", i, "&gt;</span><a href=\"/p?q=", i,
                  "\">x</a><br/></div>\n<unused", i % 7000, "> <unused", i % 13, " <unused1<unused12>> <<unused3>>",
                  i % 5 == 0 ? "<start_of_turn>user<end_of_turn>" : "<start_of", "\n");
  return t;
}

// The leftmost-longest rule, naively: at each position, every added token is compared.
std::vector<std::int32_t> naive_encode(const slm::tokenizer& plain, std::span<const slm::added_token> added, std::string_view s) {
  std::vector<std::int32_t> ids;
  std::array<bool, 256> starts{};  // (only to keep the test fast: positions no token can start at)
  for (const slm::added_token& a : added) starts[static_cast<unsigned char>(a.content[0])] = true;
  std::size_t done = 0;
  for (std::size_t i = 0; i < s.size();) {
    const slm::added_token* best = nullptr;
    if (starts[static_cast<unsigned char>(s[i])])
      for (const slm::added_token& a : added)
      if (s.substr(i).starts_with(a.content) && (!best || a.content.size() > best->content.size())) best = &a;
    if (!best) {
      ++i;
      continue;
    }
    auto piece = plain.encode(s.substr(done, i - done), {false, true});
    ids.insert(ids.end(), piece->begin(), piece->end());
    ids.push_back(best->id);
    i += best->content.size();
    done = i;
  }
  auto piece = plain.encode(s.substr(done), {false, true});
  ids.insert(ids.end(), piece->begin(), piece->end());
  return ids;
}

}  // namespace

TEST(Tokenizer, ManyAddedTokensSharingAFirstByteMatchLeftmostLongest) {
  auto base_text = slm::read_text_file(data_dir / "nam56r_cpp/tokenizer.json");
  ASSERT_TRUE(base_text.ok());
  auto plain = slm::tokenizer::parse(*base_text);
  ASSERT_TRUE(plain.ok());
  const auto first = static_cast<std::int32_t>(plain->vocab_size());
  auto tok = slm::tokenizer::parse(with_many_added_tokens(*base_text, first, 6300));
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  ASSERT_EQ(tok->added_tokens().size(), plain->added_tokens().size() + 6304);
  EXPECT_EQ(tok->find("<unused123>"), first + 123);
  EXPECT_EQ(tok->find("<end_of_image>"), first + 6303);
  // Overlapping prefixes: the longest whole token at the leftmost position.
  auto ids = [&](std::string_view s) { return *tok->encode(s, {false, true}); };
  using v = std::vector<std::int32_t>;
  EXPECT_EQ(ids("<unused12>"), v{first + 12});
  EXPECT_EQ(ids("<unused123>"), v{first + 123});
  EXPECT_EQ(ids("<unused6299><unused0>"), (v{first + 6299, first}));
  const v prefix = *plain->encode("<unused1", {false, true});  // no added token: the model's ids
  EXPECT_EQ(ids("<unused1"), prefix);
  v nested = prefix;
  nested.push_back(first + 12);
  EXPECT_EQ(ids("<unused1<unused12>"), nested);
  for (std::string_view s : {"<unused1<unused12>>", "<<unused3>>", "<unused6300><unused630>", "<start_of<start_of_turn>",
                             "x<unused99", "<BOS><unused7><EOS>"})
    EXPECT_EQ(ids(s), naive_encode(*plain, tok->added_tokens(), s)) << s;
  const std::string page = html_like(8 << 10);
  EXPECT_EQ(ids(page), naive_encode(*plain, tok->added_tokens(), page));
}

// The scan's work per position is bounded by the longest token, not by how many tokens share
// its first byte (the old scan compared all 6300 at every '<'). Counted, not timed.
TEST(Tokenizer, AddedTokenScanWorkIsIndependentOfTheTokenCount) {
  slm::text::literal_set set;
  std::size_t longest = 0;
  std::vector<std::string> all;
  for (int i = 0; i < 6300; ++i) all.push_back(slm::cat("<unused", i, ">"));
  for (const char* t : {"<start_of_turn>", "<end_of_turn>", "<start_of_image>", "<end_of_image>"}) all.push_back(t);
  for (std::size_t i = 0; i < all.size(); ++i) {
    longest = std::max(longest, all[i].size());
    set.add(all[i], i);
  }
  set.add("<unused5>", 99999);  // a duplicate keeps the first index
  const std::string page = html_like(16 << 10);
  std::size_t steps = 0, matches = 0, from = 0;
  while (true) {
    auto [at, e] = set.next(page, from, &steps);
    if (!e) break;
    // The naive leftmost-longest match from `from`.
    std::size_t want_at = std::string::npos, want_len = 0;
    for (std::size_t i = from; i < page.size() && want_at == std::string::npos; ++i)
      for (const std::string& t : all)  // (every token starts with '<')
        if (page[i] == '<')
          if (std::string_view(page).substr(i).starts_with(t) && t.size() > want_len) want_at = i, want_len = t.size();
    ASSERT_EQ(at, want_at);
    ASSERT_EQ(e->text.size(), want_len);
    EXPECT_EQ(e->text, all[e->index]);
    from = at + e->text.size();
    ++matches;
  }
  EXPECT_GT(matches, 300u);
  const auto opens = static_cast<std::size_t>(std::count(page.begin(), page.end(), '<'));
  EXPECT_LE(steps, opens * longest);  // the old scan: ~6300 comparisons per '<'
  EXPECT_EQ(set.next("<unused5>", 0).second->index, 5u);
}

// tokenizer_config.json's add_bos_token / add_eos_token as transformers applies them
// (issue 18: DeepSeek-V3's config says add_bos_token: true, its post-processor adds no BOS;
// transformers gives a BOS, slm gave none). Expected ids by transformers' rule (load_dir's
// comment): when the config names either flag, or its tokenizer_class is a Llama-family one
// (add_bos_token defaults to true there), the post-processor becomes "[bos] $A [eos]" with
// each token present when its flag is true and the token is set (by the config, or by the
// Llama-family class's default); otherwise the tokenizer.json post-processor stays.
TEST(Tokenizer, AddBosTokenInTokenizerConfigFollowsTransformers) {
  const std::string added = R"("added_tokens": [{"id": 0, "content": "<s>", "special": true}, {"id": 1, "content": "</s>", "special": true}])";
  const std::string model = R"("model": {"type": "BPE", "vocab": {"<s>": 0, "</s>": 1, "a": 2, "b": 3, "ab": 4}, "merges": ["a b"]})";
  const std::string byte_level_post = R"("post_processor": {"type": "ByteLevel"})";  // DeepSeek-V3's: no BOS
  const std::string bos_template = R"("post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
       {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}})";
  const std::string deepseek_tokens =
      R"("bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": true, "rstrip": false, "single_word": false},
         "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": false, "normalized": true, "rstrip": false, "single_word": false})";
  using v = std::vector<std::int32_t>;
  struct config_case {
    const std::string* post;
    std::string config;
    v want;  // "abab" with special tokens; without them it is always {4, 4}
  };
  const std::vector<config_case> cases = {
      // DeepSeek-V3: LlamaTokenizerFast, add_bos_token true, a post-processor without BOS.
      {&byte_level_post, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": false, )" + deepseek_tokens + "}", v{0, 4, 4}},
      {&byte_level_post, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": true, )" + deepseek_tokens + "}", v{0, 4, 4, 1}},
      // A Llama-family class adds the BOS by default; the bos token may be a plain string.
      {&byte_level_post, R"({"tokenizer_class": "LlamaTokenizerFast", "bos_token": "<s>"})", v{0, 4, 4}},
      {&byte_level_post, R"({"tokenizer_class": "GemmaTokenizer", "bos_token": "<s>"})", v{0, 4, 4}},
      {&byte_level_post, R"({"tokenizer_class": "LlamaTokenizer"})", v{0, 4, 4}},  // the class's bos_token, "<s>"
      // Another class with no flag keeps tokenizer.json's post-processor...
      {&byte_level_post, R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>"})", v{4, 4}},
      {&bos_template, R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>"})", v{0, 4, 4}},
      // ...and with a flag rebuilds it (transformers 5's TokenizersBackend, every class).
      {&byte_level_post, R"({"tokenizer_class": "PreTrainedTokenizerFast", "add_bos_token": true, "bos_token": "<s>"})", v{0, 4, 4}},
      {&byte_level_post, R"({"add_eos_token": true, "eos_token": "</s>"})", v{4, 4, 1}},
      // A post-processor that already adds the BOS is replaced, not added to: one BOS...
      {&bos_template, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, )" + deepseek_tokens + "}", v{0, 4, 4}},
      // ...and add_bos_token false removes it.
      {&bos_template, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": false, )" + deepseek_tokens + "}", v{4, 4}},
      // No bos_token: no BOS (transformers 5 turns add_bos_token off).
      {&byte_level_post, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "bos_token": null})", v{4, 4}},
  };
  slm_test::temp_dir d("addbos");
  for (const config_case& c : cases) {
    ASSERT_TRUE(slm_test::write_file(d / "tokenizer.json", slm::cat("{", model, ", ", added, ", ", *c.post, "}")));
    ASSERT_TRUE(slm_test::write_file(d / "tokenizer_config.json", c.config));
    auto tok = slm::tokenizer::load_dir(d.path());
    ASSERT_TRUE(tok.ok()) << tok.error().to_string() << "\n" << c.config;
    EXPECT_EQ(*tok->encode("abab"), c.want) << c.config;
    EXPECT_EQ(*tok->encode("abab", {false, true}), (v{4, 4})) << c.config;
  }
  // A flag asking for a token the vocabulary lacks is an error (transformers would add a new token).
  ASSERT_TRUE(slm_test::write_file(d / "tokenizer.json", slm::cat("{", model, ", ", added, ", ", byte_level_post, "}")));
  ASSERT_TRUE(slm_test::write_file(d / "tokenizer_config.json", R"({"add_bos_token": true, "bos_token": "<|begin|>"})"));
  EXPECT_TRUE(slm_test::fails_with(slm::tokenizer::load_dir(d.path()), slm::errc::format_error,
                                   {"tokenizer_config.json", "add_bos_token", "<|begin|>"}));
}

TEST(Tokenizer, SentencePieceStyleMetaspaceAndByteFallback) {
  // Llama-2 / Mistral style: Metaspace pre-tokenizer, byte fallback, decoder chain.
  const std::string json = R"({"model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {"<unk>": 0, "<0xC3>": 1, "<0xA9>": 2, "\u2581": 3, "h": 4, "i": 5, "\u2581h": 6, "\u2581hi": 7},
      "merges": ["\u2581 h", "\u2581h i"]},
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
       {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}})";
  auto tok = slm::tokenizer::parse(json);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  auto ids = tok->encode("hi \xC3\xA9", {false, true});
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<std::int32_t>{7, 3, 1, 2}));
  EXPECT_EQ(*tok->decode(*ids), "hi \xC3\xA9");
  slm::detokenizer d(*tok);  // a re-decoding chain streams the same bytes
  std::string streamed;
  for (std::int32_t id : *ids) streamed += *d.push(id);
  streamed += d.flush();
  EXPECT_EQ(streamed, "hi \xC3\xA9");
}

TEST(Tokenizer, BadFilesAreClearErrors) {
  struct bad {
    const char* json;
    slm::errc code;
    const char* message;
  };
  const bad cases[] = {
      {"[1, 2]", slm::errc::parse_error, "top level is not an object"},
      {R"({"model": {"type": "Unigram", "vocab": []}})", slm::errc::unsupported, "model type \"Unigram\""},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})", slm::errc::parse_error, "not in the vocabulary"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})", slm::errc::parse_error,
       "merged token \"ab\""},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a"]}})", slm::errc::parse_error, "two tokens"},
      {R"({"model": {"type": "BPE", "vocab": {"a": -1}}})", slm::errc::out_of_range, "token id -1"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 99999999999}}})", slm::errc::out_of_range, "outside"},
      {R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})", slm::errc::parse_error, "not an integer id"},
      {R"({"model": {"type": "BPE", "vocab": {"a": 0}, "unk_token": "<unk>"}})", slm::errc::parse_error, "unk_token"},
      {R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a"}}})",
       slm::errc::parse_error, "pre_tokenizer"},
      {R"({"model": {"type": "BPE", "vocab": {}}, "pre_tokenizer": {"type": "BertPreTokenizer"}})", slm::errc::unsupported,
       "BertPreTokenizer"},
      {R"({"model": {"type": "BPE", "vocab": {}}, "added_tokens": [{"id": 3, "content": ""}]})", slm::errc::parse_error,
       "empty content"},
  };
  for (const bad& b : cases) {
    auto t = slm::tokenizer::parse(b.json);
    ASSERT_FALSE(t.ok()) << b.json;
    EXPECT_EQ(t.error().code(), b.code) << b.json << " -> " << t.error().to_string();
    EXPECT_NE(t.error().to_string().find(b.message), std::string::npos) << t.error().to_string();
  }
  auto missing = slm::tokenizer::load(data_dir / "no-such" / "tokenizer.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code(), slm::errc::not_found);
  // Ids outside the vocabulary are decode errors; gaps decode to nothing.
  auto tok = slm::tokenizer::load(data_dir / "golden/gpt2_bytelevel/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  auto out = tok->decode(std::vector<std::int32_t>{static_cast<std::int32_t>(tok->vocab_size())});
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.error().code(), slm::errc::out_of_range);
  slm::detokenizer d(*tok);
  EXPECT_FALSE(d.push(-1).ok());
}

// A FIFO named tokenizer.json (or tokenizer_config.json) is refused at once: opening a
// FIFO to read blocks until a writer comes, so the loads run on a thread with a limit.
TEST(Tokenizer, FifoIsRefusedWithoutBlocking) {
  using namespace std::chrono_literals;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    slm_test::temp_dir d(name);
    if (std::string_view(name) != "tokenizer.json")
      std::filesystem::copy_file(data_dir / "golden/gpt2_bytelevel/tokenizer.json", d / "tokenizer.json");
    ASSERT_TRUE(slm_test::make_fifo(d / name));
    slm::status st;
    EXPECT_TRUE(slm_test::returns_within(10s, {d / name}, [&] {
      auto t = slm::tokenizer::load_dir(d.path());
      st = t.ok() ? slm::status{} : t.error();
    })) << name << ": blocked on a FIFO";
    EXPECT_TRUE(slm_test::fails_with(st, slm::errc::io_error, {name, "is not a regular file (a FIFO)"}));
  }
}

// A hostile tokenizer.json must not hang or exhaust the host (issue 18): one encode() has a
// regex step budget proportional to its input, summed over all its searches, and bounded
// normalizer outputs; past them it returns an error value.
namespace {
slm::tokenizer hostile(std::string_view pre_tokenizer, std::string_view normalizer) {
  const std::string json = slm::cat(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}, "pre_tokenizer": )",
                                    pre_tokenizer, R"(, "normalizer": )", normalizer, "}");
  auto t = slm::tokenizer::parse(json);
  EXPECT_TRUE(t.ok()) << t.error().to_string();
  return t.ok() ? std::move(*t) : slm::tokenizer{};
}
}  // namespace

// `a*b|a` costs O(n) per search and finds a one-byte match each time: O(n^2) over one split
// (35 s for 200 KB with a budget per search). Now the searches share one budget.
TEST(Tokenizer, QuadraticPreTokenizerRegexRunsOutOfTheEncodeBudget) {
  const slm::tokenizer tok = hostile(R"({"type": "Split", "pattern": {"Regex": "a*b|a"}, "behavior": "Isolated"})", "null");
  EXPECT_TRUE(slm_test::fails_with(tok.encode(std::string(200000, 'a')), slm::errc::out_of_range,
                                   {"pre-tokenizer regex 'a*b|a'", "work budget", "200000 bytes"}));
  // Within the budget the same pattern still works, and a failed encode appends nothing.
  auto small = tok.encode("aab");
  ASSERT_TRUE(small.ok()) << small.error().to_string();
  EXPECT_EQ(*small, (std::vector<std::int32_t>{0, 0, 1}));
  std::vector<std::int32_t> out = {7};
  slm::encode_scratch scratch;
  EXPECT_FALSE(tok.encode(std::string(20000, 'a'), out, scratch).ok());
  EXPECT_EQ(out, std::vector<std::int32_t>{7});
}

// Every real tokenizer stays far inside the budget, on text that makes its regexes work
// hardest (runs and mixes of whitespace, apostrophes, digits, punctuation, random bytes).
TEST(Tokenizer, RealTokenizersStayWithinTheEncodeBudget) {
  std::string text;
  for (const char* unit : {" \n", "' ", "a' ", "1  ", "!\n", " \r\n", "\t\n", "   \n", "-\n", "A'S "})
    for (int i = 0; i < 2000; ++i) text += unit;
  for (int i = 0; i < 20000; ++i) text.push_back(static_cast<char>((i * 7919) % 251));
  for (const char* dir : {"golden/gpt2_bytelevel", "golden/llama3_split", "golden/cpp_split_digits", "cpp_bytelevel",
                          "nam56r_cpp", "nam56r_ws"}) {
    auto tok = slm::tokenizer::load(data_dir / dir / "tokenizer.json");
    ASSERT_TRUE(tok.ok()) << dir;
    auto ids = tok->encode(text);
    EXPECT_TRUE(ids.ok()) << dir << ": " << ids.error().to_string();
  }
}

// A Replace that turns one character into 1000, twice: 20 KB of input would become 20 GB
// (20 MB after the first step). The first step's output passes its bound (a multiple of the
// input) and the encode stops there, having allocated under a megabyte.
TEST(Tokenizer, ExpandingReplaceNormalizerIsRefused) {
  const std::string thousand(1000, 'a');
  const std::string replace = slm::cat(R"({"type": "Replace", "pattern": {"String": "a"}, "content": ")", thousand, R"("})");
  const slm::tokenizer tok =
      hostile("null", slm::cat(R"({"type": "Sequence", "normalizers": [)", replace, ", ", replace, "]}"));
  EXPECT_TRUE(slm_test::fails_with(tok.encode(std::string(20000, 'a')), slm::errc::out_of_range,
                                   {"Replace normalizer", "20000 bytes of text", "hostile"}));
  // A modest expansion is fine: 1 -> 2 -> 4 characters.
  const slm::tokenizer mild = hostile(
      "null", R"({"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"String": "b"}, "content": "ab"},
                                                      {"type": "Replace", "pattern": {"Regex": "a"}, "content": "bb"}]})");
  auto ids = mild.encode("b");
  ASSERT_TRUE(ids.ok()) << ids.error().to_string();
  EXPECT_EQ(*ids, (std::vector<std::int32_t>{1, 1, 1}));
  // Prepend of a long string is bounded the same way, and Metaspace's replacement too.
  const slm::tokenizer prepend =
      hostile("null", slm::cat(R"({"type": "Prepend", "prepend": ")", std::string(10000, 'b'), R"("})"));
  EXPECT_TRUE(slm_test::fails_with(prepend.encode("a"), slm::errc::out_of_range, {"Prepend normalizer"}));
  const slm::tokenizer metaspace =
      hostile(slm::cat(R"({"type": "Metaspace", "replacement": ")", thousand, R"(", "prepend_scheme": "never"})"), "null");
  EXPECT_TRUE(slm_test::fails_with(metaspace.encode(std::string(20000, ' ')), slm::errc::out_of_range, {"Metaspace"}));
}

// A Replace decoder is bounded too (per token), as is one with an empty Metaspace replacement
// (which used to loop forever on an empty literal).
TEST(Tokenizer, ExpandingReplaceDecoderIsRefused) {
  const std::string json = slm::cat(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []}, "decoder": {"type": "Replace", "pattern": {"String": "a"}, "content": ")",
      std::string(100000, 'b'), R"("}})");
  auto tok = slm::tokenizer::parse(json);
  ASSERT_TRUE(tok.ok()) << tok.error().to_string();
  EXPECT_TRUE(slm_test::fails_with(tok->decode(std::vector<std::int32_t>{0, 0, 0}), slm::errc::out_of_range,
                                   {"Replace decoder", "hostile"}));
  auto fine = tok->decode(std::vector<std::int32_t>{1});
  ASSERT_TRUE(fine.ok());
  EXPECT_EQ(*fine, "b");
  auto empty = slm::tokenizer::parse(
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}, "decoder": {"type": "Metaspace", "replacement": ""}})");
  ASSERT_TRUE(empty.ok());
  auto text = empty->decode(std::vector<std::int32_t>{0, 0});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "aa");
}

TEST(Tokenizer, CancelledEncodeReturnsCancelled) {
  auto tok = slm::tokenizer::load(data_dir / "golden/gpt2_bytelevel/tokenizer.json");
  ASSERT_TRUE(tok.ok());
  slm::cancellation cancel;
  slm::encode_options opt;
  opt.cancel = &cancel;
  ASSERT_TRUE(tok->encode("int main() { return 0; }", opt).ok());  // not cancelled: as before
  cancel.cancel();
  EXPECT_TRUE(slm_test::fails_with(tok->encode("int main() { return 0; }", opt), slm::errc::cancelled, {"cancelled"}));
  std::vector<std::int32_t> out = {1, 2};
  slm::encode_scratch scratch;
  EXPECT_TRUE(slm_test::fails_with(tok->encode(std::string(100000, 'x'), out, scratch, opt), slm::errc::cancelled, {}));
  EXPECT_EQ(out, (std::vector<std::int32_t>{1, 2}));  // nothing appended
  // Cancelled from another thread while a long hostile encode runs: it stops at the next check.
  const slm::tokenizer slow = hostile(R"({"type": "Split", "pattern": {"Regex": "a*b|a"}, "behavior": "Isolated"})", "null");
  slm::cancellation later;
  slm::encode_options lo;
  lo.cancel = &later;
  std::thread t([&] { later.cancel(); });
  auto r = slow.encode(std::string(200000, 'a'), lo);
  t.join();
  ASSERT_FALSE(r.ok());  // cancelled, or out of budget if the cancel came late
  EXPECT_TRUE(r.error().code() == slm::errc::cancelled || r.error().code() == slm::errc::out_of_range) << r.error().to_string();
}

TEST(Detokenizer, HoldsBackOnlySequencesThatCanComplete) {
  using slm::detokenizer;
  EXPECT_EQ(detokenizer::incomplete_tail("abc"), 0u);
  EXPECT_EQ(detokenizer::incomplete_tail("a\xE2"), 1u);
  EXPECT_EQ(detokenizer::incomplete_tail("a\xE2\x82"), 2u);
  EXPECT_EQ(detokenizer::incomplete_tail("a\xE2\x82\xAC"), 0u);
  EXPECT_EQ(detokenizer::incomplete_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(detokenizer::incomplete_tail("\xED\xA0"), 0u);  // a surrogate can never complete
  EXPECT_EQ(detokenizer::incomplete_tail("\xE0\x80"), 0u);  // overlong
  EXPECT_EQ(detokenizer::incomplete_tail("\xFF"), 0u);
  EXPECT_EQ(detokenizer::incomplete_tail("\x80\x80"), 0u);
}

// Token ids as text (slm/text/token_ids.hpp): commas, whitespace or both between items; an
// empty item, a malformed or negative one is an error naming the item and its index.
TEST(TokenIds, ParseCheckAndFormat) {
  using ids = std::vector<std::int32_t>;
  for (const char* text : {"5,17,3", "5 17 3", "5, 17 ,3", " 5\t17\n3\n", "5 \n 17,\t3"}) {
    auto r = slm::parse_token_ids(text);
    ASSERT_TRUE(r.ok()) << text << ": " << r.error().message();
    EXPECT_EQ(*r, (ids{5, 17, 3})) << text;
  }
  EXPECT_EQ(*slm::parse_token_ids("2147483647"), ids{2147483647});
  const struct {
    const char* text;
    const char* message;
  } bad[] = {
      {"", "no token ids"},
      {" \n", "no token ids"},
      {"5,x,3", "'x' (item 1) is not a token id (a non-negative integer)"},
      {"5,-3", "'-3' (item 1) is not a token id"},
      {"5,,3", "'' (item 1) is not a token id"},
      {"5, ,3", "'' (item 1) is not a token id"},
      {",5", "'' (item 0) is not a token id"},
      {"5,", "'' (item 1) is not a token id"},
      {"5 1e3", "'1e3' (item 1) is not a token id"},
      {"5;6", "'5;6' (item 0) is not a token id"},
      {"2147483648", "'2147483648' (item 0) is not a token id"},
  };
  for (const auto& c : bad) {
    auto r = slm::parse_token_ids(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_EQ(r.error().code(), slm::errc::invalid_argument);
    EXPECT_NE(r.error().message().find(c.message), std::string::npos) << c.text << ": " << r.error().message();
  }
  EXPECT_TRUE(slm::check_vocabulary(ids{0, 5, 319}, 320).ok());
  const slm::status s = slm::check_vocabulary(ids{5, 320}, 320);
  EXPECT_EQ(s.code(), slm::errc::invalid_argument);
  EXPECT_EQ(s.message(), "token id 320 (item 1) is outside the model's vocabulary [0, 320)");
  EXPECT_FALSE(slm::check_vocabulary(ids{-1}, 320).ok());
  EXPECT_EQ(slm::format_token_ids(ids{5, 17, 3}), "5,17,3");
  EXPECT_EQ(slm::format_token_ids(ids{5, 17, 3}, ' '), "5 17 3");
  EXPECT_EQ(slm::format_token_ids(ids{}), "");
  EXPECT_EQ(*slm::parse_token_ids(slm::format_token_ids(ids{0, 9, 12345}, ' ') + "\n"), (ids{0, 9, 12345}));
}

}  // namespace

// The NAM56R whitespace conventions (slm/models/nam56r/text.hpp; spec section 3). No oracle
// output exists for either: the expectations are the spec's rules applied by hand.
#include "slm/models/nam56r/text.hpp"

namespace {

slm::tokenizer word_tokenizer(std::string_view extra_added = "") {
  // Whole C++ words and operators as tokens (a WhitespaceSplit BPE whose merges made
  // every word of these tests a single token), <SPACE>=5 and <NL>=6 special.
  const char* words[] = {"int", "main", "(", ")", "{", "return", "0", ";", "}", "std", "::", "vector", "<", ">", "v",
                         "a", "=", "b", "+", "c", "x", "->", "y", "f", ",", "#", "include", "\n", "map", "string"};
  std::string vocab = R"("<PAD>": 0, "<UNK>": 1, "<BOS>": 2, "<EOS>": 3, "<SPACE>": 5, "<NL>": 6)";
  int id = 7;
  for (const char* w : words) vocab += slm::cat(", \"", w[0] == '\n' ? std::string("\\n") : std::string(w), "\": ", id++);
  return *slm::tokenizer::parse(slm::cat(R"({"model": {"type": "BPE", "unk_token": "<UNK>", "vocab": {)", vocab,
                                         R"(}, "merges": []}, "added_tokens": [{"id": 5, "content": "<SPACE>", "special": true},
      {"id": 6, "content": "<NL>", "special": true}, {"id": 2, "content": "<BOS>", "special": true})", extra_added, "]}"));
}

std::vector<std::int32_t> ids_of(const slm::tokenizer& t, std::initializer_list<const char*> toks) {
  std::vector<std::int32_t> ids;
  for (const char* s : toks) ids.push_back(*t.find(s));
  return ids;
}

TEST(Nam56rText, SentinelConventionRoundTripsCollapsedWhitespace) {
  EXPECT_EQ(slm::nam56r_text::to_sentinels("int  main()\r\n{\treturn 0;}\n\n"),
            "int<SPACE>main()<NL>{<SPACE>return<SPACE>0;}<NL>");
  auto tok = word_tokenizer();
  const auto ids = ids_of(tok, {"<BOS>", "int", "<SPACE>", "main", "(", ")", "<NL>", "{", "<SPACE>", "return", "<SPACE>", "0",
                                ";", "<NL>", "}"});
  EXPECT_EQ(*slm::nam56r_text::decode_sentinels(tok, ids), "int main()\n{ return 0;\n}");
  EXPECT_FALSE(slm::nam56r_text::decode_sentinels(tok, std::vector<std::int32_t>{999}).ok());
}

TEST(Nam56rText, CppHeuristicSpacing) {
  auto tok = word_tokenizer();
  using slm::nam56r_text::decode_cpp_heuristic;
  EXPECT_EQ(*decode_cpp_heuristic(tok, ids_of(tok, {"int", "main", "(", ")", "{", "return", "0", ";", "}"})),
            "int main() { return 0; }");
  EXPECT_EQ(*decode_cpp_heuristic(tok, ids_of(tok, {"std", "::", "vector", "<", "int", ">", "v", ";"})), "std::vector<int> v;");
  EXPECT_EQ(*decode_cpp_heuristic(tok, ids_of(tok, {"a", "=", "b", "+", "c", ";"})), "a = b + c;");
  EXPECT_EQ(*decode_cpp_heuristic(tok, ids_of(tok, {"x", "->", "y", "(", "a", ",", "b", ")", ";"})), "x->y(a, b);");
  EXPECT_EQ(*decode_cpp_heuristic(tok, ids_of(tok, {"#", "include", "<", "vector", ">", "\n", "int", "x", ";"})),
            "#include <vector>\nint x;");
  EXPECT_EQ(*decode_cpp_heuristic(tok, ids_of(tok, {"std", "::", "map", "<", "int", ",", "std", "::", "string", ">", "v"})),
            "std::map<int, std::string> v");
}

}  // namespace
