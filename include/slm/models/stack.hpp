// slm/models/stack.hpp - the layer stack every residual model family runs: layers of
// two pre-norm residual slots over parts,
//
//   for each layer:  x += scale * mixer(mixer_norm(x))      attention, Mamba, M2RNN, ...
//                    x += scale * ffn(ffn_norm(x))          dense MLP or MoE
//
// where either slot may be empty (a Mamba-style block fills exactly one) and a part is any
// type that satisfies the concepts below: the library's layers, the per-layer variants of
// them (attention_variant, ffn_variant: the config-driven path), a family's adapters
// (NAM56R's Mamba-3 with its second norm, its DSA layers that share a top-k) or a host's
// own. The stack knows neither checkpoint names nor config files: a family's binder fills
// it (models/hf/model.hpp, models/nam56r/model.hpp, models/nanochat/model.hpp), and a session
// keeps one mixer cache per layer (models/session.hpp saves them, each as its own record).
//
// Per-call context: the layers of one forward call hand each other what they share
// through the session's workspace (core/buffer.hpp: workspace::topk, DSA IndexCache's
// top-k); forward() clears it at the start of every call, so nothing leaks across calls.
//
// A block policy (the third parameter; plain_block by default) runs a family's own steps
// around a layer's two slots: nanochat mixes the embedding into its input before them and
// adds its Engram and mHC branches after them (models/nanochat/block.hpp). Its per-layer
// weights live in the stack's layer; what it reads and keeps per call comes in a context
// the caller owns.
#pragma once
#include "slm/core/build_mode.hpp"

#include <concepts>
#include <initializer_list>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "slm/core/buffer.hpp"
#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/norm.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/layers/session_options.hpp"

namespace slm {

// A mixer slot's part: init_cache(cache, session_options), forward(x [T, d], T, y [T, d],
// cache, workspace, compute_context), which appends T positions to its cache. Its cache:
// size() positions held, truncate(len) (exact when can_truncate(len); a recurrent cache
// that cannot marks itself unusable), rollback_limit() (how many latest tokens can be
// dropped exactly), and the session state members: kind() (the record's tag),
// fingerprint(), copy_from() (deep copy into a cache initialized for the same layer),
// save() and load() (the record; load only into a freshly initialized cache).
template <class A>
concept mixer_part = requires(const A& a, typename A::cache& c, const typename A::cache& cc, const session_options& o,
                              const float* x, float* y, workspace& ws, compute_context& cx, state_writer& w,
                              state_reader& r, state_hasher& h) {
  { a.init_cache(c, o) } -> std::same_as<status>;
  { a.forward(x, std::size_t{}, y, c, ws, cx) } -> std::same_as<status>;
  { cc.size() } -> std::same_as<std::size_t>;
  c.truncate(std::size_t{});
  { cc.can_truncate(std::size_t{}) } -> std::same_as<bool>;
  { cc.rollback_limit() } -> std::same_as<std::size_t>;
  { cc.kind() } -> std::convertible_to<std::string_view>;
  cc.fingerprint(h);
  { c.copy_from(cc) } -> std::same_as<status>;
  { cc.save(w) } -> std::same_as<status>;
  { c.load(r) } -> std::same_as<status>;
};
// A feed-forward slot's part: forward(x [T, d], T, y [T, d], workspace, compute_context).
template <class F>
concept ffn_part = requires(const F& f, const float* x, float* y, workspace& ws, compute_context& cx) {
  { f.forward(x, std::size_t{}, y, ws, cx) } -> std::same_as<status>;
};

// A per-layer choice among mixer parts, itself a mixer part (the config-driven path).
template <class... As>
struct attention_variant {
  template <class T>
  static constexpr bool has = (std::same_as<T, As> || ...);  // T is one of the parts
  std::variant<As...> impl;
  struct cache {
    std::variant<typename As::cache...> impl;
    std::size_t size() const noexcept { return std::visit([](const auto& c) { return c.size(); }, impl); }
    void truncate(std::size_t n) noexcept { std::visit([n](auto& c) { c.truncate(n); }, impl); }
    bool can_truncate(std::size_t n) const noexcept {
      return std::visit([n](const auto& c) { return c.can_truncate(n); }, impl);
    }
    std::size_t rollback_limit() const noexcept {
      return std::visit([](const auto& c) -> std::size_t { return c.rollback_limit(); }, impl);
    }
    std::string_view kind() const noexcept {
      return std::visit([](const auto& c) -> std::string_view { return c.kind(); }, impl);
    }
    void fingerprint(state_hasher& h) const {
      std::visit([&h](const auto& c) { c.fingerprint(h); }, impl);
    }
    status copy_from(const cache& o) {
      if (o.impl.index() != impl.index())
        return make_error(errc::invalid_argument, "a '", o.kind(), "' cache copied into a '", kind(), "' cache");
      return std::visit([&o](auto& c) -> status {
        using C = std::decay_t<decltype(c)>;
        return c.copy_from(std::get<C>(o.impl));
      }, impl);
    }
    status save(state_writer& w) const {
      return std::visit([&w](const auto& c) -> status { return c.save(w); }, impl);
    }
    status load(state_reader& r) {
      return std::visit([&r](auto& c) -> status { return c.load(r); }, impl);
    }
  };
  template <class Options>
  status init_cache(cache& kc, const Options& o) const {
    return std::visit([&](const auto& a) -> status {
      using C = typename std::decay_t<decltype(a)>::cache;
      kc.impl.template emplace<C>();
      return a.init_cache(std::get<C>(kc.impl), o);
    }, impl);
  }
  status forward(const float* x, std::size_t T, float* y, cache& kc, workspace& ws, compute_context& cx) const {
    return std::visit([&](const auto& a) -> status {
      using C = typename std::decay_t<decltype(a)>::cache;
      return a.forward(x, T, y, std::get<C>(kc.impl), ws, cx);
    }, impl);
  }
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    std::visit([&](const auto& a) { a.for_each_linear(fn); }, impl);
  }
};

template <class... Fs>
struct ffn_variant {
  template <class T>
  static constexpr bool has = (std::same_as<T, Fs> || ...);  // T is one of the parts
  std::variant<Fs...> impl;
  status forward(const float* x, std::size_t T, float* y, workspace& ws, compute_context& cx) const {
    return std::visit([&](const auto& f) { return f.forward(x, T, y, ws, cx); }, impl);
  }
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    std::visit([&](const auto& f) { f.for_each_linear(fn); }, impl);
  }
};

// The empty slots. An empty mixer slot still has a cache, which holds nothing and is
// saved as a "none" record.
struct no_mixer {
  struct cache {
    std::size_t size() const noexcept { return 0; }
    void truncate(std::size_t) noexcept {}
    bool can_truncate(std::size_t) const noexcept { return true; }
    std::size_t rollback_limit() const noexcept { return ~std::size_t{0}; }  // holds nothing per token
    std::string_view kind() const noexcept { return "none"; }
    void fingerprint(state_hasher&) const noexcept {}
    status copy_from(const cache&) noexcept { return {}; }
    status save(state_writer&) const noexcept { return {}; }
    status load(state_reader&) noexcept { return {}; }
  };
  template <class Options>
  status init_cache(cache&, const Options&) const { return {}; }
  status forward(const float*, std::size_t, float*, cache&, workspace&, compute_context&) const {
    return make_error(errc::invalid_argument, "an empty mixer slot was run");
  }
  template <class Fn>
  void for_each_linear(Fn&&) const {}
};
struct no_ffn {
  status forward(const float*, std::size_t, float*, workspace&, compute_context&) const {
    return make_error(errc::invalid_argument, "an empty feed-forward slot was run");
  }
  template <class Fn>
  void for_each_linear(Fn&&) const {}
};

// A block policy: layer (its per-layer weights), context (what one call hands it) and
// before() / after(), which run on the residual stream x [T, d] of layer i around its
// two slots.
template <class B>
concept block_policy = requires(const typename B::layer& l, typename B::context& c, float* x, workspace& ws,
                                compute_context& cx) {
  { B::before(l, std::size_t{}, x, std::size_t{}, std::size_t{}, c, ws, cx) } -> std::same_as<status>;
  { B::after(l, std::size_t{}, x, std::size_t{}, std::size_t{}, c, ws, cx) } -> std::same_as<status>;
};

// The plain block: the two slots and nothing else (every family but nanochat).
struct plain_block {
  struct layer {};
  struct context {};
  static status before(const layer&, std::size_t, float*, std::size_t, std::size_t, context&, workspace&,
                       compute_context&) noexcept {
    return {};
  }
  static status after(const layer&, std::size_t, float*, std::size_t, std::size_t, context&, workspace&,
                      compute_context&) noexcept {
    return {};
  }
};

// One layer of the stack: which slots are filled, their norms and parts, and the block
// policy's part. A slot's norm may be the identity (block_norm::identity: NAM56R attention
// layers stored without one).
template <mixer_part Mixer, ffn_part Ffn, block_policy Block = plain_block>
struct stack_layer {
  block_norm mixer_norm, ffn_norm;
  Mixer mixer;
  Ffn ffn;
  bool has_mixer = true, has_ffn = true;
  [[no_unique_address]] typename Block::layer block;
};

template <mixer_part Mixer, ffn_part Ffn, block_policy Block = plain_block>
struct layer_stack {
  using layer = stack_layer<Mixer, Ffn, Block>;
  using cache = typename Mixer::cache;
  using block_context = typename Block::context;

  std::vector<layer> layers;
  float branch_scale = 1.0f;  // each branch's multiplier (Granite's residual_multiplier; 1 elsewhere)

  // One fresh cache per layer (an empty slot's holds nothing).
  status init_caches(std::vector<cache>& out, const session_options& o) const {
    out.clear();
    out.resize(layers.size());
    for (std::size_t i = 0; i < layers.size(); ++i) SLM_TRY(layers[i].mixer.init_cache(out[i], o));
    return {};
  }

  // x [T, d], the residual stream at positions caches[i].size().., through every layer;
  // each mixer appends T positions to its cache. h, y: [T, d] scratch. On an error the
  // caches may hold part of the call: the session truncates them back.
  status forward(float* x, std::size_t T, std::size_t d, std::span<cache> caches, floats& h, floats& y, workspace& ws,
                 compute_context& cx) const
    requires std::same_as<Block, plain_block>
  {
    plain_block::context none;
    return forward(x, T, d, caches, h, y, ws, cx, none);
  }
  // The same with the block policy's context for this call.
  status forward(float* x, std::size_t T, std::size_t d, std::span<cache> caches, floats& h, floats& y, workspace& ws,
                 compute_context& cx, [[maybe_unused]] block_context& bc) const {
    if (caches.size() != layers.size())
      return make_error(errc::invalid_argument, "layer stack: ", caches.size(), " caches for ", layers.size(),
                        " layers");
    SLM_TRY(h.resize(T * d));
    SLM_TRY(y.resize(T * d));
    ws.topk_k = 0;  // the per-call context starts empty
    float* hp = h.data();
    float* yp = y.data();
    const float scale = branch_scale;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const layer& L = layers[i];
      // An error names the layer and what it holds: "layer 2 (mamba3): cancelled".
      auto in_layer = [&](status st) {
        return std::move(st).with_context(cat("layer ", i, " (", L.has_mixer ? caches[i].kind() : "feed-forward", ")"));
      };
      if (status st = check_cancelled(cx.cancel); !st.ok()) return in_layer(std::move(st));
      // A slot in use whose norm was never loaded (a stack built by hand): an error value.
      for (const block_norm* n : {L.has_mixer ? &L.mixer_norm : nullptr, L.has_ffn ? &L.ffn_norm : nullptr})
        if (n && !n->fits(d))
          return in_layer(make_error(errc::invalid_argument, n == &L.mixer_norm ? "the mixer" : "the feed-forward",
                                     " slot's norm does not fit a stream of ", d, " (",
                                     n->layer ? n->ln.weight.size() : n->rms.weight.size(), " weights)"));
      if constexpr (!std::same_as<Block, plain_block>)
        if (status st = Block::before(L.block, i, x, T, d, bc, ws, cx); !st.ok()) return in_layer(std::move(st));
      if (L.has_mixer) {
        L.mixer_norm.apply(x, T, d, d, hp, d);
        if (status st = L.mixer.forward(hp, T, yp, caches[i], ws, cx); !st.ok())  // [T, d] -> [T, d]
          return in_layer(std::move(st));
        for (std::size_t k = 0; k < T * d; ++k) x[k] += scale * yp[k];
      }
      if (L.has_ffn) {
        L.ffn_norm.apply(x, T, d, d, hp, d);
        if (status st = L.ffn.forward(hp, T, yp, ws, cx); !st.ok())  // [T, d] -> [T, d]
          return in_layer(std::move(st));
        for (std::size_t k = 0; k < T * d; ++k) x[k] += scale * yp[k];
      }
      if constexpr (!std::same_as<Block, plain_block>)
        if (status st = Block::after(L.block, i, x, T, d, bc, ws, cx); !st.ok()) return in_layer(std::move(st));
    }
    return {};
  }
};

}  // namespace slm
