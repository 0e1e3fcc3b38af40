// The bundled C++ specialist (models/nam56r-cpp-14m, NVFP4) against its oracle: the
// PyTorch NAM56R of tools/train run in float32 on the same weights (dequantized NVFP4),
// over held-out text tokenized by HF `tokenizers`
// (tests/data/nam56r/cpp14m/reference.safetensors, made by tools/train/reference_logits.py).
//
// Tolerances: the reference and slm compute the same function on the same weights in
// float32 with different summation orders; measured 1.2e-6 x max|logit| (the issue asks
// for 1e-3 x max|logit|, which is also the bound here), log-sum-exp within 1e-3 absolute.
// Prefill vs token-by-token decode: 1e-4 x max|logit| (same arithmetic, different blocking).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "slm/io/checkpoint.hpp"
#include "slm/generate/generator.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/text/tokenizer.hpp"
#include "test_helpers.hpp"

namespace {

const std::string model_dir = std::string(SLM_MODELS_DIR) + "/nam56r-cpp-14m";
const std::string data_dir = std::string(SLM_TEST_DATA_DIR) + "/nam56r/cpp14m";

template <typename T>
std::vector<T> read(const slm::safetensors::file& f, const char* name) {
  const auto* t = f.find(name);
  EXPECT_NE(t, nullptr) << name;
  if (!t) return {};
  std::vector<T> out(t->shape.numel());
  EXPECT_EQ(t->end - t->begin, out.size() * sizeof(T)) << name;
  if (t->end - t->begin != out.size() * sizeof(T)) return {};
  std::memcpy(out.data(), f.bytes().data() + f.header().data_offset + t->begin, out.size() * sizeof(T));
  return out;
}

struct reference {
  std::vector<std::int32_t> ids, columns, argmax;
  std::vector<float> logits, lse, max_abs;  // logits [T, columns]
};

reference load_reference() {
  auto f = slm::safetensors::file::open(data_dir + "/reference.safetensors");
  EXPECT_TRUE(f.ok()) << (f.ok() ? "" : f.error().message());
  reference r;
  if (!f.ok()) return r;
  r.ids = read<std::int32_t>(*f, "ids");
  r.columns = read<std::int32_t>(*f, "columns");
  r.argmax = read<std::int32_t>(*f, "argmax");
  r.logits = read<float>(*f, "logits");
  r.lse = read<float>(*f, "logsumexp");
  r.max_abs = read<float>(*f, "max_abs");
  return r;
}

const slm::nam56r_model& model() {
  static slm::nam56r_model m = [] {
    auto r = slm::nam56r_model::load(model_dir);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return std::move(*r);
  }();
  return m;
}

// Logits of every position, fed in chunks; activations of the NVFP4 products in f32 (the
// oracle's precision; `slm run` / `slm logits` default) or bf16 (the library default, W4A16).
std::vector<float> all_logits(const std::vector<std::int32_t>& ids, std::size_t chunk,
                              slm::activation_precision act = slm::activation_precision::f32) {
  auto s = model().new_session();
  slm::compute_context cx{slm_test::the_pools().p2};
  cx.quantized_activations = act;
  const std::size_t V = model().vocab();
  std::vector<float> out(ids.size() * V);
  for (std::size_t at = 0; at < ids.size(); at += chunk) {
    const std::size_t n = std::min(chunk, ids.size() - at);
    auto st = s.forward(std::span(ids.data() + at, n), n, out.data() + at * V, cx);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  return out;
}

TEST(BundledModel, LogitsMatchPyTorchOnHeldOutText) {
  const reference r = load_reference();
  ASSERT_EQ(r.ids.size(), 200u);
  const std::size_t T = r.ids.size(), C = r.columns.size(), V = model().vocab();
  ASSERT_EQ(V, 8192u);
  const std::vector<float> got = all_logits(r.ids, T);
  double worst = 0, nll_ref = 0, nll_got = 0;
  for (std::size_t t = 0; t < T; ++t) {
    const float* row = got.data() + t * V;
    double m = row[0];
    std::int32_t arg = 0;
    for (std::size_t v = 1; v < V; ++v)
      if (row[v] > m) m = row[v], arg = static_cast<std::int32_t>(v);
    double sum = 0;
    for (std::size_t v = 0; v < V; ++v) sum += std::exp(row[v] - m);
    const double lse = m + std::log(sum);
    for (std::size_t c = 0; c < C; ++c)
      worst = std::max(worst, static_cast<double>(std::abs(row[r.columns[c]] - r.logits[t * C + c]) / r.max_abs[t]));
    EXPECT_NEAR(lse, r.lse[t], 1e-3) << "row " << t;
    EXPECT_EQ(arg, r.argmax[t]) << "row " << t;
    if (t + 1 < T) {
      const auto col = std::lower_bound(r.columns.begin(), r.columns.end(), r.ids[t + 1]);
      ASSERT_TRUE(col != r.columns.end() && *col == r.ids[t + 1]);  // every target is stored
      nll_ref += r.lse[t] - r.logits[t * C + static_cast<std::size_t>(col - r.columns.begin())];
      nll_got += lse - row[r.ids[t + 1]];
    }
  }
  EXPECT_LT(worst, 1e-3);
  std::printf("[ measured ] max |slm - pytorch| / max|logit| = %.3g over %zu rows x %zu columns\n", worst, T, C);
  // The held-out loss is the trained model's, not a random one's (ln 8192 = 9 nats/token):
  // the reference's 0.53 nats/token, reproduced.
  EXPECT_NEAR(nll_got / static_cast<double>(T - 1), nll_ref / static_cast<double>(T - 1), 1e-3);
  EXPECT_LT(nll_ref / static_cast<double>(T - 1), 1.0);
}

TEST(BundledModel, TokenizerMatchesHuggingFace) {
  // The reference ids are HF `tokenizers`' encoding of the file (BOS first), cut to 200.
  const reference r = load_reference();
  std::ifstream in(data_dir + "/MachO_arm64.h.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.size(), 2296u);
  auto tok = slm::tokenizer::load_dir(model_dir);
  ASSERT_TRUE(tok.ok()) << tok.error().message();
  auto ids = tok->encode(text);
  ASSERT_TRUE(ids.ok()) << ids.error().message();
  ASSERT_GE(ids->size(), r.ids.size());
  EXPECT_EQ(std::vector<std::int32_t>(ids->begin(), ids->begin() + static_cast<std::ptrdiff_t>(r.ids.size())), r.ids);
  EXPECT_EQ(tok->specials().bos, 2);
  EXPECT_EQ(tok->specials().eos, 3);
  EXPECT_EQ(tok->specials().fim_prefix, 4);
  auto back = tok->decode(std::span(ids->data() + 1, ids->size() - 1));  // lossless byte-level
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, text);
}

TEST(BundledModel, PrefillEqualsTokenByTokenDecode) {
  const reference r = load_reference();
  const std::vector<std::int32_t> ids(r.ids.begin(), r.ids.begin() + 96);
  const std::vector<float> full = all_logits(ids, ids.size());
  for (std::size_t chunk : {std::size_t{1}, std::size_t{7}}) {
    const std::vector<float> steps = all_logits(ids, chunk);
    double worst = 0, scale = 0;
    for (std::size_t i = 0; i < full.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(full[i] - steps[i])));
      scale = std::max(scale, static_cast<double>(std::abs(full[i])));
    }
    EXPECT_LT(worst, 1e-4 * scale) << "chunk " << chunk;
  }
}

TEST(BundledModel, Bf16ActivationsStayClose) {
  // The library's default for NVFP4 products rounds activations to bf16 (W4A16): not the
  // oracle's arithmetic, so a looser bound over the measured 5.1e-3 x max|logit| and every argmax
  // kept on this text (bound 1e-2).
  const reference r = load_reference();
  const std::size_t T = r.ids.size(), V = model().vocab();
  const std::vector<float> f32 = all_logits(r.ids, T), bf16 = all_logits(r.ids, T, slm::activation_precision::bf16);
  double worst = 0;
  std::size_t same_argmax = 0;
  for (std::size_t t = 0; t < T; ++t) {
    const float* a = f32.data() + t * V;
    const float* b = bf16.data() + t * V;
    for (std::size_t v = 0; v < V; ++v) worst = std::max(worst, static_cast<double>(std::abs(a[v] - b[v]) / r.max_abs[t]));
    same_argmax += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
  }
  std::printf("[ measured ] bf16 activations: max |diff| / max|logit| = %.3g, argmax kept %zu/%zu\n", worst, same_argmax, T);
  EXPECT_LT(worst, 1e-2);
  EXPECT_GE(same_argmax, T - T / 50);
}

}  // namespace
