// Composition: a host's own layer type plugs into decoder<> (models/hf/model.hpp) through
// the binding concept (models/hf/bind.hpp), not through a closed list of library types.
// The oracle is the library's own config-driven model on the same checkpoint
// (tests/data/oracle/hf/qwen2, itself checked against transformers in test_models.cpp):
// a host layer that computes what the library's does must give the same logits bit for
// bit, since the same kernels run in the same order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <string>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "slm/models/stack.hpp"
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

// The layer stack itself (models/stack.hpp), with parts a host defines: a mixer that scales
// its input (its cache counts positions) and a feed-forward that fails. The expected rows
// come from the stack's contract, x += scale * part(norm(x)) per filled slot, computed
// here with the library's RMSNorm (the norm is tested elsewhere; the stack is tested here).
struct gain_mixer {
  float gain = 1.0f;
  struct cache {
    std::size_t n = 0;
    std::size_t size() const noexcept { return n; }
    void truncate(std::size_t len) noexcept { n = std::min(n, len); }
    bool can_truncate(std::size_t) const noexcept { return true; }
    std::size_t rollback_limit() const noexcept { return n; }
    std::string_view kind() const noexcept { return "gain"; }
    void fingerprint(slm::state_hasher&) const noexcept {}
    slm::status copy_from(const cache& o) noexcept {
      n = o.n;
      return {};
    }
    slm::status save(slm::state_writer& w) const { return w.u64(n); }
    slm::status load(slm::state_reader& r) { return r.size(n, "positions"); }
  };
  slm::status init_cache(cache& c, const slm::session_options&) const {
    c.n = 0;
    return {};
  }
  slm::status forward(const float* x, std::size_t T, float* y, cache& c, slm::workspace& ws,
                      slm::compute_context&) const {
    // The per-call context starts empty: nothing a layer left in an earlier call is seen.
    if (ws.topk_k != 0) return slm::make_error(slm::errc::invalid_argument, "the call context leaked");
    for (std::size_t k = 0; k < T * 4; ++k) y[k] = gain * x[k];  // d = 4
    c.n += T;
    return {};
  }
};
struct failing_ffn {
  slm::status forward(const float*, std::size_t, float*, slm::workspace&, slm::compute_context&) const {
    return slm::make_error(slm::errc::invalid_argument, "this feed-forward always fails");
  }
};
static_assert(slm::mixer_part<gain_mixer>);
static_assert(slm::ffn_part<failing_ffn>);
static_assert(!slm::mixer_part<failing_ffn>);  // no cache: not a mixer
static_assert(slm::mixer_part<slm::attention_variant<gain_mixer, slm::no_mixer>>);

TEST(Compose, HostPartsRunInTheLayerStack) {
  constexpr std::size_t d = 4, T = 3;
  using stack = slm::layer_stack<slm::attention_variant<gain_mixer, slm::no_mixer>,
                                 slm::ffn_variant<failing_ffn, slm::no_ffn>>;
  stack s;
  s.branch_scale = 0.5f;
  s.layers.resize(3);
  // Layer 0: gain 2 on the unnormed stream (identity norm). Layer 1: both slots empty.
  // Layer 2: gain 3 after an RMSNorm of unit weights.
  s.layers[0].mixer.impl.emplace<gain_mixer>(gain_mixer{2.0f});
  s.layers[0].mixer_norm.identity = true;
  s.layers[0].has_ffn = false;
  s.layers[1].mixer.impl.emplace<slm::no_mixer>();
  s.layers[1].has_mixer = s.layers[1].has_ffn = false;
  s.layers[2].mixer.impl.emplace<gain_mixer>(gain_mixer{3.0f});
  ASSERT_TRUE(s.layers[2].mixer_norm.rms.weight.resize(d).ok());
  for (std::size_t i = 0; i < d; ++i) s.layers[2].mixer_norm.rms.weight[i] = 1.0f;
  s.layers[2].mixer_norm.rms.eps = 1e-6f;
  s.layers[2].has_ffn = false;

  std::vector<stack::cache> caches;
  ASSERT_TRUE(s.init_caches(caches, slm::session_options{}).ok());
  ASSERT_EQ(caches.size(), 3u);
  std::vector<float> x(T * d), want(T * d), h(T * d);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = 0.25f * static_cast<float>(k) - 1.0f;
  for (std::size_t k = 0; k < x.size(); ++k) want[k] = x[k] + 0.5f * 2.0f * x[k];  // layer 0
  s.layers[2].mixer_norm.rms.apply(want.data(), T, d, d, h.data(), d);
  for (std::size_t k = 0; k < x.size(); ++k) want[k] += 0.5f * 3.0f * h[k];  // layer 2
  slm::floats hs, ys;
  slm::workspace ws;
  ws.topk_k = 5;  // left over from an earlier call
  slm::compute_context cx{slm_test::the_pools().p2};
  ASSERT_TRUE(s.forward(x.data(), T, d, caches, hs, ys, ws, cx).ok());
  EXPECT_EQ(slm_test::max_abs_diff(x.data(), want.data(), x.size()), 0.0);
  EXPECT_EQ(caches[0].size(), T);
  EXPECT_EQ(caches[1].size(), 0u);  // an empty slot's cache holds nothing
  EXPECT_EQ(caches[2].size(), T);
  EXPECT_EQ(caches[1].kind(), "none");

  // Errors name the layer and what it holds.
  slm::cancellation cancel;
  cancel.cancel();
  slm::compute_context cc{slm_test::the_pools().p2};
  cc.cancel = &cancel;
  EXPECT_TRUE(slm_test::fails_with(s.forward(x.data(), T, d, caches, hs, ys, ws, cc), slm::errc::cancelled,
                                   {"layer 0 (gain)", "cancelled"}));
  s.layers[1].ffn.impl.emplace<failing_ffn>();
  s.layers[1].ffn_norm.identity = true;
  s.layers[1].has_ffn = true;
  EXPECT_TRUE(slm_test::fails_with(s.forward(x.data(), T, d, caches, hs, ys, ws, cx), slm::errc::invalid_argument,
                                   {"layer 1 (feed-forward)", "always fails"}));
  // A slot in use whose norm was never loaded is refused before anything reads it.
  s.layers[1].ffn_norm = slm::block_norm{};
  EXPECT_TRUE(slm_test::fails_with(s.forward(x.data(), T, d, caches, hs, ys, ws, cx), slm::errc::invalid_argument,
                                   {"layer 1 (feed-forward)", "the feed-forward slot's norm does not fit a stream of 4"}));
  s.layers[2].mixer_norm.rms.weight = slm::floats{};
  s.layers[1].has_ffn = false;
  EXPECT_TRUE(slm_test::fails_with(s.forward(x.data(), T, d, caches, hs, ys, ws, cx), slm::errc::invalid_argument,
                                   {"layer 2 (gain)", "the mixer slot's norm does not fit a stream of 4 (0 weights)"}));
  caches.pop_back();
  EXPECT_TRUE(slm_test::fails_with(s.forward(x.data(), T, d, caches, hs, ys, ws, cx), slm::errc::invalid_argument,
                                   {"2 caches for 3 layers"}));
}

// A block policy a host defines (models/stack.hpp): before() adds a per-layer offset and the
// call's bias, after() doubles the stream and counts the layers it saw. The expected rows
// follow the contract: before, the two slots, after, per layer, in layer order.
struct offset_block {
  struct layer {
    float offset = 0.0f;
  };
  struct context {
    float bias = 0.0f;
    std::vector<std::size_t> seen;  // the layers after() ran on, in order
    bool fail_after = false;
  };
  static slm::status before(const layer& L, std::size_t, float* x, std::size_t T, std::size_t d, context& c,
                            slm::workspace&, slm::compute_context&) {
    for (std::size_t k = 0; k < T * d; ++k) x[k] += L.offset + c.bias;
    return {};
  }
  static slm::status after(const layer&, std::size_t i, float* x, std::size_t T, std::size_t d, context& c,
                           slm::workspace&, slm::compute_context&) {
    if (c.fail_after) return slm::make_error(slm::errc::invalid_argument, "the block refused");
    for (std::size_t k = 0; k < T * d; ++k) x[k] *= 2.0f;
    c.seen.push_back(i);
    return {};
  }
};
static_assert(slm::block_policy<offset_block>);
static_assert(slm::block_policy<slm::plain_block>);
static_assert(!slm::block_policy<gain_mixer>);
// The plain block costs a layer nothing: its layer part takes no storage.
struct layer_without_block {
  slm::block_norm mixer_norm, ffn_norm;
  gain_mixer mixer;
  failing_ffn ffn;
  bool has_mixer = true, has_ffn = true;
};
static_assert(sizeof(slm::stack_layer<gain_mixer, failing_ffn>) == sizeof(layer_without_block));

TEST(Compose, BlockPolicyRunsAroundTheSlots) {
  constexpr std::size_t d = 4, T = 2;
  using stack = slm::layer_stack<gain_mixer, failing_ffn, offset_block>;
  stack s;
  s.layers.resize(2);
  for (std::size_t i = 0; i < 2; ++i) {
    s.layers[i].mixer.gain = 3.0f;
    s.layers[i].mixer_norm.identity = true;
    s.layers[i].has_ffn = false;
    s.layers[i].block.offset = static_cast<float>(i + 1);
  }
  std::vector<stack::cache> caches;
  ASSERT_TRUE(s.init_caches(caches, slm::session_options{}).ok());
  std::vector<float> x(T * d), want(T * d);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = want[k] = 0.5f * static_cast<float>(k);
  for (std::size_t i = 0; i < 2; ++i)
    for (float& v : want) {
      v += static_cast<float>(i + 1) + 0.25f;  // before
      v += 3.0f * v;                             // the mixer slot (identity norm)
      v *= 2.0f;                                 // after
    }
  offset_block::context bc;
  bc.bias = 0.25f;
  slm::floats hs, ys;
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  ASSERT_TRUE(s.forward(x.data(), T, d, caches, hs, ys, ws, cx, bc).ok());
  EXPECT_EQ(slm_test::max_abs_diff(x.data(), want.data(), x.size()), 0.0);
  EXPECT_EQ(bc.seen, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(caches[1].size(), T);
  // An error of the block names the layer, as a part's does.
  bc.fail_after = true;
  EXPECT_TRUE(slm_test::fails_with(s.forward(x.data(), T, d, caches, hs, ys, ws, cx, bc),
                                   slm::errc::invalid_argument, {"layer 0 (gain)", "the block refused"}));
}

}  // namespace
