// Composition: a host's own layer type plugs into decoder<> (models/hf/model.hpp) through
// the binding concept (models/hf/bind.hpp), not through a closed list of library types.
// The oracle is the library's own config-driven model on the same checkpoint
// (tests/data/oracle/hf/qwen2, itself checked against transformers in test_models.cpp):
// a host layer that computes what the library's does must give the same logits bit for
// bit, since the same kernels run in the same order.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "test_helpers.hpp"

namespace {

// A host's feed-forward layer: the library's dense MLP, counting how often it is bound
// and run (a host might log, cache or instrument here).
struct counting_ffn {
  slm::feed_forward inner;
  std::size_t* forwards = nullptr;

  static bool accepts(const slm::model_config& c, std::size_t layer) noexcept {
    return c.layers[layer].ffn == slm::ffn_kind::dense;
  }
  static slm::result<counting_ffn> load(const slm::checkpoint& ck, const slm::model_config& c, std::size_t layer) {
    auto f = slm::hf::binding<slm::feed_forward>::load(ck, c, layer);
    if (!f.ok()) return std::move(f).take_error();
    counting_ffn out;
    out.inner = std::move(*f);
    return out;
  }
  slm::status forward(const float* x, std::size_t T, float* y, slm::workspace& ws, slm::compute_context& cx) const {
    if (forwards) ++*forwards;
    return inner.forward(x, T, y, ws, cx);  // [T, d] -> [T, d]
  }
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    inner.for_each_linear(fn);
  }
};

static_assert(slm::hf::bound_layer<counting_ffn>);
static_assert(slm::ffn_layer<counting_ffn>);
static_assert(slm::hf::bound_layer<slm::feed_forward>);                               // the library's, by its binding
static_assert(slm::attention_layer<slm::basic_gqa_attention<slm::rope_half_split>>);
static_assert(!slm::hf::bound_layer<int>);                                           // nothing says where an int is
static_assert(!slm::ffn_layer<slm::no_mixer>);                                        // a mixer is not a feed-forward

// One composition for every test here: each instantiation of decoder<> is compiled code.
using host_model = slm::decoder<slm::basic_gqa_attention<>, counting_ffn>;

TEST(Compose, HostLayerRunsInTheDecoder) {
  const std::filesystem::path dir = slm_test::test_data("oracle/hf/qwen2");
  auto host = host_model::load(dir);
  ASSERT_TRUE(host.ok()) << host.error().message();
  auto lib = slm::model::load(dir);
  ASSERT_TRUE(lib.ok()) << lib.error().message();

  const std::vector<std::int32_t> ids = {5, 17, 3, 99, 42, 7, 128, 64};
  const std::size_t V = lib->vocab(), T = ids.size();
  ASSERT_EQ(host->vocab(), V);
  std::vector<float> a(T * V), b(T * V);
  slm::compute_context cx{slm_test::the_pools().p2};
  auto hs = host->new_session();
  auto ls = lib->new_session();
  // [T] ids -> [T, V] logits, both ways
  ASSERT_TRUE(hs.forward(ids, T, a.data(), cx).ok());
  ASSERT_TRUE(ls.forward(ids, T, b.data(), cx).ok());
  EXPECT_EQ(slm_test::max_abs_diff(a.data(), b.data(), a.size()), 0.0);
}

TEST(Compose, HostLayerRunsOncePerLayerAndToken) {
  const std::filesystem::path dir = slm_test::test_data("oracle/hf/qwen2");
  auto m = host_model::load(dir);
  ASSERT_TRUE(m.ok()) << m.error().message();
  // The count lives in the test, the layer only points at it: a loaded model stays immutable.
  std::size_t forwards = 0;
  for (std::size_t i = 0; i < m->config().n_layers; ++i) const_cast<counting_ffn&>(m->layers()[i].ffn).forwards = &forwards;
  auto s = m->new_session();
  std::vector<float> logits(m->vocab());
  slm::compute_context cx{slm_test::the_pools().p2};
  const std::vector<std::int32_t> prompt = {1, 2, 3};
  ASSERT_TRUE(s.forward(prompt, 1, logits.data(), cx).ok());
  EXPECT_EQ(forwards, m->config().n_layers);  // one batched call per layer
  ASSERT_TRUE(s.forward(std::vector<std::int32_t>{4}, 1, logits.data(), cx).ok());
  EXPECT_EQ(forwards, 2 * m->config().n_layers);
}

// The host's layer accepts dense layers only: Mixtral's MoE layers are refused by name.
TEST(Compose, HostLayerThatDoesNotFitNamesTheLayer) {
  auto m = host_model::load(slm_test::test_data("oracle/hf/mixtral"));
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.error().message().find("layer 0"), std::string::npos) << m.error().message();
  EXPECT_NE(m.error().message().find("MoE"), std::string::npos) << m.error().message();
}

}  // namespace
