// slm/model.hpp - a decoder-only transformer: layers composed from policies, loaded from
// a checkpoint directory, run through sessions.
//
//   x = embed(ids)                                        [T, d]
//   for each layer:  x += mixer(RMSNorm(x))              GQA or MLA (+ DSA) attention, or Mamba-2
//                    x += ffn(RMSNorm(x))                dense MLP or MoE
//   logits = lm_head(RMSNorm(x))                          [T, V]  (lm_head = embed when tied)
// Either slot of a layer may be empty (Mamba-style blocks fill exactly one: Nemotron-H's
// pattern "M*M-ME" is mixer, mixer, mixer, ffn, mixer, ffn); an empty slot costs nothing.
//
// decoder<Attention, Ffn, Norm, Format> is the composition: the attention kind (with its
// RoPE pairing), the feed-forward kind (with its router), the norm policy and the weight
// format are types. A host that knows its model names them, e.g.
//   decoder<basic_gqa_attention<rope_half_split>, feed_forward, rms_norm_weighted, format::nvfp4>
// for an NVFP4 Llama, and load() refuses a checkpoint whose config or tensors need
// anything else, naming the layer and the mismatch. The config-driven path is
// decoder<any_attention, any_ffn> (= slm::model), whose layer types pick per layer and
// whose weights may be in any format, per tensor.
//
// Threading: a loaded decoder is immutable and may be shared by any number of threads;
// a session (KV caches + scratch) belongs to one thread at a time; the executor comes
// in with each call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "slm/attention.hpp"
#include "slm/buffer.hpp"
#include "slm/checkpoint.hpp"
#include "slm/dequantize.hpp"
#include "slm/formats.hpp"
#include "slm/linear.hpp"
#include "slm/mamba2.hpp"
#include "slm/mla.hpp"
#include "slm/mlp.hpp"
#include "slm/model_config.hpp"
#include "slm/moe.hpp"
#include "slm/norm.hpp"
#include "slm/status.hpp"

namespace slm {

struct session_options {
  std::size_t max_tokens = 0;      // context limit; 0 = the config's max_position_embeddings
  std::size_t reserve_tokens = 0;  // cache rows allocated up front (grows on demand)
  kv_dtype kv = kv_dtype::f32;
  mla_mode mla = mla_mode::automatic;
};

// What a layer type must provide to be composed into a decoder.
template <class A>
concept attention_layer = requires(const A& a, typename A::cache& c, const checkpoint& ck, const model_config& cfg,
                                   const session_options& o, const float* x, float* y, workspace& ws,
                                   compute_context& cx) {
  { A::accepts(cfg, std::size_t{}) } -> std::same_as<bool>;
  { A::load(ck, cfg, std::size_t{}) } -> std::same_as<result<A>>;
  { a.init_cache(c, o) } -> std::same_as<status>;
  { a.forward(x, std::size_t{}, y, c, ws, cx) } -> std::same_as<status>;
  { c.size() } -> std::same_as<std::size_t>;
  c.truncate(std::size_t{});
};
template <class F>
concept ffn_layer = requires(const F& f, const checkpoint& ck, const model_config& cfg, const float* x, float* y,
                             workspace& ws, compute_context& cx) {
  { F::accepts(cfg, std::size_t{}) } -> std::same_as<bool>;
  { F::load(ck, cfg, std::size_t{}) } -> std::same_as<result<F>>;
  { f.forward(x, std::size_t{}, y, ws, cx) } -> std::same_as<status>;
};

// A per-layer choice among layer types, itself a layer type (the config-driven path).
template <class... As>
struct attention_variant {
  std::variant<As...> impl;
  struct cache {
    std::variant<typename As::cache...> impl;
    std::size_t size() const noexcept { return std::visit([](const auto& c) { return c.size(); }, impl); }
    void truncate(std::size_t n) noexcept { std::visit([n](auto& c) { c.truncate(n); }, impl); }
  };
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return (As::accepts(c, layer) || ...); }
  static result<attention_variant> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    result<attention_variant> out = make_error(errc::unsupported, "layer ", layer, ": no attention type fits the config");
    (void)((As::accepts(c, layer) ? (out = wrap(As::load(ck, c, layer)), true) : false) || ...);
    return out;
  }
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

 private:
  template <class A>
  static result<attention_variant> wrap(result<A> r) {
    if (!r.ok()) return std::move(r).take_error();
    attention_variant v;
    v.impl.template emplace<A>(std::move(*r));
    return v;
  }
};

template <class... Fs>
struct ffn_variant {
  std::variant<Fs...> impl;
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return (Fs::accepts(c, layer) || ...); }
  static result<ffn_variant> load(const checkpoint& ck, const model_config& c, std::size_t layer) {
    result<ffn_variant> out = make_error(errc::unsupported, "layer ", layer, ": no feed-forward type fits the config");
    (void)((Fs::accepts(c, layer) ? (out = wrap(Fs::load(ck, c, layer)), true) : false) || ...);
    return out;
  }
  status forward(const float* x, std::size_t T, float* y, workspace& ws, compute_context& cx) const {
    return std::visit([&](const auto& f) { return f.forward(x, T, y, ws, cx); }, impl);
  }
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    std::visit([&](const auto& f) { f.for_each_linear(fn); }, impl);
  }

 private:
  template <class F>
  static result<ffn_variant> wrap(result<F> r) {
    if (!r.ok()) return std::move(r).take_error();
    ffn_variant v;
    v.impl.template emplace<F>(std::move(*r));
    return v;
  }
};

// The empty slots.
struct no_mixer {
  struct cache {
    std::size_t size() const noexcept { return 0; }
    void truncate(std::size_t) noexcept {}
  };
  static bool accepts(const model_config& c, std::size_t layer) noexcept {
    return c.layers[layer].attention == attention_kind::none;
  }
  static result<no_mixer> load(const checkpoint&, const model_config&, std::size_t) { return no_mixer{}; }
  template <class Options>
  status init_cache(cache&, const Options&) const { return {}; }
  status forward(const float*, std::size_t, float*, cache&, workspace&, compute_context&) const {
    return make_error(errc::invalid_argument, "an empty mixer slot was run");
  }
  template <class Fn>
  void for_each_linear(Fn&&) const {}
};
struct no_ffn {
  static bool accepts(const model_config& c, std::size_t layer) noexcept { return c.layers[layer].ffn == ffn_kind::none; }
  static result<no_ffn> load(const checkpoint&, const model_config&, std::size_t) { return no_ffn{}; }
  status forward(const float*, std::size_t, float*, workspace&, compute_context&) const {
    return make_error(errc::invalid_argument, "an empty feed-forward slot was run");
  }
  template <class Fn>
  void for_each_linear(Fn&&) const {}
};

using any_attention = attention_variant<gqa_attention, mla_attention, mamba2_mixer, no_mixer>;
using any_ffn = ffn_variant<feed_forward, moe_ffn, no_ffn>;

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm = rms_norm_weighted,
          format_constraint Format = format::any>
class decoder {
 public:
  struct layer {
    rms_norm input_norm, post_attention_norm;
    Attention attention;
    Ffn ffn;
    bool has_mixer = true, has_ffn = true;  // which slots the config fills
  };

  static result<decoder> load(const std::filesystem::path& dir, const checkpoint_options& opt = {}) {
    auto ck = checkpoint::open(dir, opt);
    if (!ck.ok()) return std::move(ck).take_error();
    return from_checkpoint(std::move(*ck));
  }

  static result<decoder> from_checkpoint(checkpoint&& ck_in) {
    decoder m;
    m.ck_.reset(new (std::nothrow) checkpoint(std::move(ck_in)));
    if (!m.ck_) return make_error(errc::out_of_memory, "cannot allocate the checkpoint");
    const checkpoint& ck = *m.ck_;
    auto cfg = model_config::from_json(ck.config());
    if (!cfg.ok()) return std::move(cfg).take_error().with_context(ck.dir().string());
    m.cfg_ = std::move(*cfg);
    const model_config& c = m.cfg_;
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      if (!Attention::accepts(c, i) || !Ffn::accepts(c, i))
        return make_error(errc::unsupported, ck.dir().string(), ": layer ", i, " of this ", c.model_type,
                          " checkpoint needs ", c.describe_layer(i),
                          ", which the composition this program was built with does not provide");
    }
    auto emb = load_linear_weight(ck, c.embed_name);
    if (!emb.ok()) return std::move(emb).take_error();
    if (emb->rows != c.vocab || emb->cols != c.hidden)
      return make_error(errc::format_error, ck.dir().string(), ": ", c.embed_name, " is [", emb->rows, ", ", emb->cols,
                        "], the config implies [", c.vocab, ", ", c.hidden, "]");
    m.embed_ = *emb;
    if (c.tie_embeddings && !ck.find("lm_head.weight") && !ck.find("lm_head.weight_packed")) {
      m.lm_head_.w = m.embed_;
    } else {
      auto h = load_linear(ck, "lm_head", c.vocab, c.hidden);
      if (!h.ok()) return std::move(h).take_error();
      m.lm_head_ = std::move(*h);
    }
    auto fn = load_vector(ck, c.final_norm_name + ".weight", c.hidden);
    if (!fn.ok()) return std::move(fn).take_error();
    m.final_norm_.weight = std::move(*fn);
    m.final_norm_.eps = c.norm_eps;
    m.final_norm_.kind = Norm::kind;
    m.layers_.resize(c.n_layers);
    for (std::size_t i = 0; i < c.n_layers; ++i) {
      layer& L = m.layers_[i];
      const std::string p = c.layer_prefix(i);
      L.has_mixer = c.layers[i].attention != attention_kind::none;
      L.has_ffn = c.layers[i].ffn != ffn_kind::none;
      if (L.has_mixer) {
        auto in = load_vector(ck, p + (c.single_norm_blocks ? ".norm.weight" : ".input_layernorm.weight"), c.hidden);
        if (!in.ok()) return std::move(in).take_error();
        L.input_norm.weight = std::move(*in);
      }
      if (L.has_ffn) {
        auto post = load_vector(ck, p + (c.single_norm_blocks ? ".norm.weight" : ".post_attention_layernorm.weight"), c.hidden);
        if (!post.ok()) return std::move(post).take_error();
        L.post_attention_norm.weight = std::move(*post);
      }
      L.input_norm.eps = L.post_attention_norm.eps = c.norm_eps;
      L.input_norm.kind = L.post_attention_norm.kind = Norm::kind;
      auto a = Attention::load(ck, c, i);
      if (!a.ok()) return std::move(a).take_error();
      L.attention = std::move(*a);
      auto f = Ffn::load(ck, c, i);
      if (!f.ok()) return std::move(f).take_error();
      L.ffn = std::move(*f);
      if constexpr (!std::same_as<Format, format::any>) SLM_TRY(check_format(ck, i, L));
    }
    return m;
  }

  // Every projection of every layer (not routers, embeddings or lm_head, which quantizers
  // keep precise) must be in the composition's format.
  static status check_format(const checkpoint& ck, std::size_t i, const layer& L) {
    status s;
    auto check = [&](std::string_view name, const linear& l, bool projection) {
      if (s.ok() && projection && l.w.format != Format::id)
        s = make_error(errc::unsupported, ck.dir().string(), ": layer ", i, " ", name, " is ", to_string(l.w.format),
                       ", the composition this program was built with expects ", to_string(Format::id));
    };
    L.attention.for_each_linear(check);
    L.ffn.for_each_linear(check);
    return s;
  }

  const model_config& config() const noexcept { return cfg_; }
  const checkpoint& weights() const noexcept { return *ck_; }
  std::span<const layer> layers() const noexcept { return layers_; }
  std::size_t vocab() const noexcept { return cfg_.vocab; }

  class session {
   public:
    explicit session(const decoder& m, session_options o = {}) : m_(&m), opt_(o) {
      if (opt_.max_tokens == 0) opt_.max_tokens = m.cfg_.max_positions ? m.cfg_.max_positions : (std::size_t{1} << 20);
    }

    std::size_t position() const noexcept { return pos_; }
    std::size_t max_tokens() const noexcept { return opt_.max_tokens; }
    const session_options& options() const noexcept { return opt_; }
    // Forget everything: the next forward starts at position 0.
    void reset() noexcept {
      for (auto& c : caches_) c.truncate(0);
      pos_ = 0;
    }

    // Runs ids (positions position() .. position() + T) and writes the logits of the last
    // `rows` tokens ([rows, V], rows <= T; rows == T gives every position). On any error -
    // a bad id, the context limit, out of memory, cancellation - the session is as it
    // was before the call.
    status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx) {
      const model_config& c = m_->cfg_;
      const std::size_t T = ids.size(), d = c.hidden;
      if (T == 0) return make_error(errc::invalid_argument, "forward: no tokens");
      if (rows > T) return make_error(errc::invalid_argument, "forward: ", rows, " logit rows asked of ", T, " tokens");
      if (rows > 0 && !logits) return make_error(errc::invalid_argument, "forward: logits is null");
      for (std::size_t t = 0; t < T; ++t)
        if (ids[t] < 0 || static_cast<std::size_t>(ids[t]) >= c.vocab)
          return make_error(errc::out_of_range, "token id ", ids[t], " at index ", t, " is outside the vocabulary [0, ",
                            c.vocab, ")");
      if (pos_ + T > opt_.max_tokens)
        return make_error(errc::out_of_range, "context full: ", pos_, " + ", T, " tokens exceed the limit of ",
                          opt_.max_tokens);
      SLM_TRY(ensure_caches());
      const std::size_t pos0 = pos_;
      status s = run(ids, rows, logits, cx);
      if (!s.ok()) {  // roll every cache back to where the call began
        for (auto& kc : caches_) kc.truncate(pos0);
        return s;
      }
      pos_ = pos0 + T;
      (void)d;
      return s;
    }

   private:
    status ensure_caches() {
      if (!caches_.empty()) return {};
      caches_.resize(m_->layers_.size());
      for (std::size_t i = 0; i < caches_.size(); ++i) {
        status s = m_->layers_[i].attention.init_cache(caches_[i], opt_);
        if (!s.ok()) {
          caches_.clear();
          return s;
        }
      }
      return {};
    }

    status run(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx) {
      const model_config& c = m_->cfg_;
      const std::size_t T = ids.size(), d = c.hidden;
      SLM_TRY(x_.resize(T * d));
      SLM_TRY(h_.resize(T * d));
      SLM_TRY(y_.resize(T * d));
      for (std::size_t t = 0; t < T; ++t)
        dequantize_row(m_->embed_, static_cast<std::size_t>(ids[t]), std::span<float>(x_.data() + t * d, d));
      if (c.embedding_multiplier != 1.0f)
        for (std::size_t k = 0; k < T * d; ++k) x_[k] *= c.embedding_multiplier;
      const float branch = c.residual_multiplier;  // Granite scales each branch; 1 elsewhere
      for (std::size_t i = 0; i < m_->layers_.size(); ++i) {
        SLM_TRY(check_cancelled(cx.cancel));
        const layer& L = m_->layers_[i];
        if (L.has_mixer) {
          L.input_norm.apply(x_.data(), T, d, d, h_.data(), d);
          SLM_TRY(L.attention.forward(h_.data(), T, y_.data(), caches_[i], ws_, cx));
          for (std::size_t k = 0; k < T * d; ++k) x_[k] += branch * y_[k];
        }
        if (L.has_ffn) {
          L.post_attention_norm.apply(x_.data(), T, d, d, h_.data(), d);
          SLM_TRY(L.ffn.forward(h_.data(), T, y_.data(), ws_, cx));
          for (std::size_t k = 0; k < T * d; ++k) x_[k] += branch * y_[k];
        }
      }
      if (rows == 0) return {};
      const float* last = x_.data() + (T - rows) * d;
      m_->final_norm_.apply(last, rows, d, d, h_.data(), d);
      SLM_TRY(m_->lm_head_.apply(h_.data(), rows, logits, cx));  // [rows, d] x [d, V] -> [rows, V]
      if (c.logits_scaling != 1.0f)
        for (std::size_t k = 0; k < rows * c.vocab; ++k) logits[k] /= c.logits_scaling;
      return {};
    }

    const decoder* m_;
    session_options opt_;
    std::vector<typename Attention::cache> caches_;
    workspace ws_;
    floats x_, h_, y_;
    std::size_t pos_ = 0;
  };

  session new_session(session_options o = {}) const { return session(*this, o); }

 private:
  std::unique_ptr<checkpoint> ck_;
  model_config cfg_;
  weight_matrix embed_;
  linear lm_head_;
  rms_norm final_norm_;
  std::vector<layer> layers_;
};

// The config-driven model: any supported architecture, chosen per layer at load time.
using model = decoder<any_attention, any_ffn>;

}  // namespace slm
