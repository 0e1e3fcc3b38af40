// slm/models/hf/model.hpp - a decoder-only transformer: layers composed from policies, loaded from
// a checkpoint directory, run through sessions.
//
//   x = embed(ids)                                        [T, d]
//   for each layer:  x += mixer(Norm(x))                 GQA or MLA (+ DSA) attention, or Mamba-2
//                    x += ffn(Norm(x))                   dense MLP or MoE
//   logits = lm_head(Norm(x))                             [T, V]  (lm_head = embed when tied)
// The layers are the layer stack every family shares (models/stack.hpp); this file binds
// a Hugging Face checkpoint to it and adds the embedding and the head.
// Norm is RMSNorm, or LayerNorm with bias where the config says so (StarCoder2).
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
//
// Session state (models/session.hpp, the same for every family). A session's caches (KV rows, MLA latents, DSA indexer keys, recurrent
// states) can be
//  * rolled back: rollback(n) drops the last n tokens. KV caches are always exact;
//    recurrent layers (Mamba-2) keep the states of their last session_options::
//    rollback_tokens tokens (and the state where the last call began), so n within that
//    is exact and anything else is an error that leaves the session unchanged;
//  * snapshotted: snapshot() is the saved blob held in memory, restore() loads it into
//    any session of a model with the same structure and KV dtype;
//  * saved to bytes and loaded: save() writes the format below, load() checks every
//    field and length before it replaces anything, so a truncated, corrupted or foreign
//    blob is an error and the session stays as it was.
// Restored or loaded state continues bit for bit like the session it came from (same
// model, same call shapes), and can roll back as that session could: recurrent layers
// copy and save every state they keep (current, history, the last call's start), so
// their part of a blob is (kept states) x (state size). rollback_tokens and the MLA
// mode are the receiving session's own: one that keeps less history keeps the newest
// states. restore() and load() build the new caches beside the current ones and swap
// them in, so they need that much memory for a moment.
//
// The format (version 1, little-endian, floats as IEEE-754 bits). The envelope (header,
// checksum, the checks of load) is shared by every session kind (layers/recurrent_cache.hpp:
// write_state_blob, open_state_blob); NAM56R (models/nam56r/model.hpp) and nanochat (models/nanochat/model.hpp)
// sessions write their own records after it, documented there.
//   offset 0   8  magic "SLMSTATE"
//          8   4  u32 version (1)
//          12  1  u8 KV dtype (0 f32, 1 bf16)
//          13  1  u8 session kind (0 decoder, 1 NAM56R, 2 nanochat; a reserved zero
//                 byte before there were other kinds, so older decoder blobs still load)
//          14  2  zero
//          16  8  u64 total size in bytes, checksum included
//          24  8  u64 structure fingerprint (layers, their kinds and dimensions, KV dtype)
//          32  8  u64 number of records (a decoder: its layers)
//          40  8  u64 position (tokens consumed)
//          48     per layer: an 8-byte kind tag ("gqa", "mla", "mamba2", "none"; NUL-padded)
//                 and the cache's record:
//                   gqa     u64 n, keys, values                       (rows blocks, n rows)
//                   mla     u64 n, u64 n_index, latents, RoPE keys, indexer keys
//                   mamba2  u64 count, then per state (current first, then newest first):
//                           u64 n, and if n > 0: u64 buffers (2), per buffer u64 length +
//                           that many f32 (conv [conv_dim, d_conv], ssm [H, P, N])
//                   none    nothing
//                 rows block: u8 dtype, 7 zero bytes, u64 width, u64 rows, rows x width
//                 values (f32, or bf16 as u16); other records use f32 rows blocks for
//                 hidden-state rows and i32 arrays (u64 count + count x i32) for token ids
//          end-8  8  u64 checksum of every byte before it (state_format::checksum)
// A reader of version 1 rejects any other version. Compatibility is by structure, not by
// weights: a blob loads into any model whose fingerprint matches.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "slm/layers/attention.hpp"
#include "slm/core/buffer.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/formats/policies.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/mamba2.hpp"
#include "slm/layers/mla.hpp"
#include "slm/layers/mlp.hpp"
#include "slm/models/hf/bind.hpp"
#include "slm/models/hf/config.hpp"
#include "slm/models/session.hpp"
#include "slm/models/stack.hpp"
#include "slm/layers/moe.hpp"
#include "slm/layers/norm.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/core/status.hpp"

namespace slm {

// What a layer type must provide to be composed into a decoder: a part of the layer
// stack (models/stack.hpp: mixer_part, ffn_part) that hf::binding says how to find in a
// Hugging Face checkpoint (models/hf/bind.hpp). The per-layer variants and the empty slots
// are bound there too.
template <class A>
concept attention_layer = hf::bound_layer<A> && mixer_part<A>;
template <class F>
concept ffn_layer = hf::bound_layer<F> && ffn_part<F>;

using any_attention = attention_variant<gqa_attention, mla_attention, mamba2_mixer, no_mixer>;
using any_ffn = ffn_variant<feed_forward, moe_ffn, no_ffn>;

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm = rms_norm_weighted,
          format_constraint Format = format::any>
class decoder : public movable_model<decoder<Attention, Ffn, Norm, Format>> {
 public:
  // mixer_norm / ffn_norm are input_layernorm / post_attention_layernorm; the config
  // fills the slots it names (has_mixer, has_ffn).
  using layer = stack_layer<Attention, Ffn>;

  static result<decoder> load(const std::filesystem::path& dir, const checkpoint_options& opt = {});

  static result<decoder> from_checkpoint(checkpoint&& ck_in);

  // Every projection of every layer (not routers, embeddings or lm_head, which quantizers
  // keep precise) must be in the composition's format.
  static status check_format(const checkpoint& ck, std::size_t i, const layer& L);


  const model_config& config() const noexcept { return cfg_; }
  const checkpoint& weights() const noexcept { return *ck_; }
  std::span<const layer> layers() const noexcept { return stack_.layers; }
  std::size_t vocab() const noexcept { return cfg_.vocab; }

  class session;

  session new_session(session_options o = {}) const;

 private:
  std::unique_ptr<checkpoint> ck_;
  model_config cfg_;
  weight_matrix embed_;
  linear lm_head_;
  block_norm final_norm_;
  layer_stack<Attention, Ffn> stack_;
};

// A decoder's session: one cache per layer (models/session.hpp: options, rollback,
// snapshot, save / load), plus the scratch of a call.
template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
class decoder<Attention, Ffn, Norm, Format>::session
    : public model_session<session, decoder, std::vector<typename Attention::cache>> {
  using base = model_session<session, decoder, std::vector<typename Attention::cache>>;
  friend base;

 public:
  using cache = typename Attention::cache;

  explicit session(const decoder& m, session_options o = {})
      : base(m, o, m.cfg_.max_positions ? m.cfg_.max_positions : (std::size_t{1} << 20),
             m.ck_ ? m.ck_->check_unchanged() : status{}) {}

  // Runs ids (positions position() .. position() + T) and writes the logits of the last
  // `rows` tokens ([rows, V], rows <= T; rows == T gives every position). On any error -
  // a bad id, the context limit, out of memory, cancellation - the session is as it
  // was before the call.
  status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx) {
    SLM_TRY(this->check_call("forward", ids, rows, logits, this->m_->cfg_.vocab));
    return this->advance(ids.size(), [&] { return run(ids, rows, logits, cx); });
  }

 private:
  static constexpr state_format::session_kind saved_kind = state_format::session_kind::decoder;
  using caches = std::vector<cache>;

  status make_state(caches& out, const session_options& o) const { return this->m_->stack_.init_caches(out, o); }
  void truncate_state(caches& cs, std::size_t len) const noexcept {
    for (auto& c : cs) c.truncate(len);
  }
  template <class Fn>
  void for_each_cache(const caches& cs, Fn&& fn) const {
    for (std::size_t i = 0; i < cs.size(); ++i) fn(i, cs[i]);
  }
  // The model's layer structure and dimensions, each cache's layout, the KV dtype.
  std::uint64_t fingerprint(const caches& cs) const;
  std::uint64_t record_count() const noexcept { return this->m_->stack_.layers.size(); }
  status write_records(state_writer& w, const caches& cs) const;
  status read_records(state_reader& r, caches& fresh, std::size_t position) const;

  status run(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx);

  workspace ws_;
  floats x_, h_, y_;
};

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
auto decoder<Attention, Ffn, Norm, Format>::new_session(session_options o) const -> session {
  return session(*this, o);
}

// ---- decoder: member definitions ----

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
result<decoder<Attention, Ffn, Norm, Format>> decoder<Attention, Ffn, Norm, Format>::load(
    const std::filesystem::path& dir, const checkpoint_options& opt) {
  auto ck = checkpoint::open(dir, opt);
  if (!ck.ok()) return std::move(ck).take_error();
  return from_checkpoint(std::move(*ck));
}

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
result<decoder<Attention, Ffn, Norm, Format>> decoder<Attention, Ffn, Norm, Format>::from_checkpoint(
    checkpoint&& ck_in) {
  decoder m;
  m.ck_.reset(new (std::nothrow) checkpoint(std::move(ck_in)));
  if (!m.ck_) return make_error(errc::out_of_memory, "cannot allocate the checkpoint");
  const checkpoint& ck = *m.ck_;
  auto cfg = model_config::from_json(ck.config());
  if (!cfg.ok()) return std::move(cfg).take_error().with_context(ck.dir().string());
  m.cfg_ = std::move(*cfg);
  const model_config& c = m.cfg_;
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    if (!hf::binding<Attention>::accepts(c, i) || !hf::binding<Ffn>::accepts(c, i))
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
  if (c.layer_norm && Norm::kind != norm_weight_kind::plain)
    return make_error(errc::unsupported, ck.dir().string(), ": this ", c.model_type,
                      " checkpoint uses LayerNorm, the composition this program was built with names an RMSNorm policy");
  SLM_TRY(hf::load_block_norm(ck, c, c.final_norm_name, Norm::kind, m.final_norm_));
  m.stack_.branch_scale = c.residual_multiplier;  // Granite scales each branch; 1 elsewhere
  m.stack_.layers.resize(c.n_layers);
  for (std::size_t i = 0; i < c.n_layers; ++i) {
    layer& L = m.stack_.layers[i];
    const std::string p = c.layer_prefix(i);
    L.has_mixer = c.layers[i].attention != attention_kind::none;
    L.has_ffn = c.layers[i].ffn != ffn_kind::none;
    if (L.has_mixer)
      SLM_TRY(hf::load_block_norm(ck, c, p + (c.single_norm_blocks ? ".norm" : ".input_layernorm"), Norm::kind,
                                  L.mixer_norm));
    if (L.has_ffn)
      SLM_TRY(hf::load_block_norm(ck, c, p + (c.single_norm_blocks ? ".norm" : ".post_attention_layernorm"), Norm::kind,
                                  L.ffn_norm));
    auto a = hf::binding<Attention>::load(ck, c, i);
    if (!a.ok()) return std::move(a).take_error();
    L.mixer = std::move(*a);
    auto f = hf::binding<Ffn>::load(ck, c, i);
    if (!f.ok()) return std::move(f).take_error();
    L.ffn = std::move(*f);
    if (L.has_mixer) SLM_TRY(hf::check_biases(ck, c, c.attention_prefix(i), L.mixer));
    if (L.has_ffn) SLM_TRY(hf::check_biases(ck, c, c.ffn_prefix(i), L.ffn));
    if constexpr (!std::same_as<Format, format::any>) SLM_TRY(check_format(ck, i, L));
  }
  // Every stored tensor is bound above or is one of these, which published layouts ship
  // and the model does not need: rotary inv_freq buffers (older transformers saved them
  // with each attention layer; slm derives RoPE from config.json), activation and KV-cache
  // scales of statically quantized exports (slm multiplies f32/bf16 activations and keeps
  // its own KV precision), compressed-tensors' weight_shape (the shape is checked against
  // config.json instead), and DeepSeek-V3's multi-token-prediction layers stored after the
  // last decoder layer (num_nextn_predict_layers; this decoder does not draft with them).
  std::size_t nextn = 0;
  if (auto n = ck.config()["num_nextn_predict_layers"].as_int64(); n && *n > 0 && *n < 1024)
    nextn = static_cast<std::size_t>(*n);
  const std::string layers_dot = c.layers_prefix + ".";
  SLM_TRY(ck.check_all_bound([&](std::string_view name) {
    auto ends = [&](std::string_view suffix) {
      return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
    };
    if (ends(".rotary_emb.inv_freq") || ends(".input_scale") || ends(".input_global_scale") || ends(".k_scale") ||
        ends(".v_scale") || ends(".weight_shape"))
      return true;
    if (nextn == 0 || name.substr(0, layers_dot.size()) != layers_dot) return false;
    std::size_t layer = 0, k = layers_dot.size();
    if (k >= name.size() || name[k] < '0' || name[k] > '9') return false;
    for (; k < name.size() && name[k] >= '0' && name[k] <= '9' && layer < (std::size_t{1} << 32); ++k)
      layer = layer * 10 + static_cast<std::size_t>(name[k] - '0');
    return k < name.size() && name[k] == '.' && layer >= c.n_layers && layer - c.n_layers < nextn;
  }));
  return m;
}

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
status decoder<Attention, Ffn, Norm, Format>::check_format(const checkpoint& ck, std::size_t i, const layer& L) {
  if constexpr (std::same_as<Format, format::any>) {  // every format is the composition's
    return {};
  } else {
    status s;
    auto check = [&](std::string_view name, const linear& l, bool projection) {
      if (s.ok() && projection && l.w.format != Format::id)
        s = make_error(errc::unsupported, ck.dir().string(), ": layer ", i, " ", name, " is ", to_string(l.w.format),
                       ", the composition this program was built with expects ", to_string(Format::id));
    };
    L.mixer.for_each_linear(check);
    L.ffn.for_each_linear(check);
    return s;
  }
}

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
std::uint64_t decoder<Attention, Ffn, Norm, Format>::session::fingerprint(const caches& cs) const {
  const model_config& c = this->m_->cfg_;
  state_hasher h;
  h.add(std::string_view("slm decoder session"));
  for (std::size_t v : {c.n_layers, c.hidden, c.vocab, c.n_heads, c.n_kv_heads, c.head_dim, c.kv_lora_rank,
                        c.qk_rope_dim, c.index_head_dim, c.ssm_heads, c.ssm_head_dim, c.ssm_state, c.ssm_groups,
                        c.ssm_conv})
    h.add(static_cast<std::uint64_t>(v));
  h.add(static_cast<std::uint64_t>(this->opt_.kv));
  for (std::size_t i = 0; i < cs.size(); ++i) {
    const layer_spec& l = c.layers[i];
    h.add(static_cast<std::uint64_t>(l.attention));
    h.add(static_cast<std::uint64_t>(l.ffn));
    h.add(static_cast<std::uint64_t>(l.sparse));
    h.add(static_cast<std::uint64_t>(l.window));
    h.add(std::string_view(cs[i].kind()));
    cs[i].fingerprint(h);
  }
  return h.value();
}

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
status decoder<Attention, Ffn, Norm, Format>::session::write_records(state_writer& w, const caches& cs) const {
  for (std::size_t i = 0; i < cs.size(); ++i) {
    SLM_TRY(w.kind(cs[i].kind()));
    if (auto st = cs[i].save(w); !st.ok()) return std::move(st).with_context(cat("session state: layer ", i));
  }
  return {};
}

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
status decoder<Attention, Ffn, Norm, Format>::session::read_records(state_reader& r, caches& fresh,
                                                                    std::size_t position) const {
  for (std::size_t i = 0; i < fresh.size(); ++i) {
    const std::string_view want = fresh[i].kind();
    SLM_TRY(expect_record(r, want, cat("layer ", i)));
    if (auto st = fresh[i].load(r); !st.ok()) return std::move(st).with_context(cat("layer ", i, " (", want, ")"));
    if (this->m_->stack_.layers[i].has_mixer && fresh[i].size() != position)
      return make_error(errc::format_error, "layer ", i, " (", want, ") holds ", fresh[i].size(),
                        " positions, the header says ", position);
  }
  return {};
}

template <attention_layer Attention, ffn_layer Ffn, norm_policy Norm, format_constraint Format>
status decoder<Attention, Ffn, Norm, Format>::session::run(
    std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx) {
  const model_config& c = this->m_->cfg_;
  const std::size_t T = ids.size(), d = c.hidden;
  SLM_TRY(x_.resize(T * d));
  for (std::size_t t = 0; t < T; ++t)
    dequantize_row(this->m_->embed_, static_cast<std::size_t>(ids[t]), std::span<float>(x_.data() + t * d, d));
  if (c.embedding_multiplier != 1.0f)
    for (std::size_t k = 0; k < T * d; ++k) x_[k] *= c.embedding_multiplier;
  SLM_TRY(this->m_->stack_.forward(x_.data(), T, d, this->st_, h_, y_, ws_, cx));
  if (rows == 0) return {};
  const float* last = x_.data() + (T - rows) * d;
  this->m_->final_norm_.apply(last, rows, d, d, h_.data(), d);
  SLM_TRY(this->m_->lm_head_.apply(h_.data(), rows, logits, cx));  // [rows, d] x [d, V] -> [rows, V]
  if (c.logits_scaling != 1.0f)
    for (std::size_t k = 0; k < rows * c.vocab; ++k) logits[k] /= c.logits_scaling;
  return {};
}

// The config-driven model: any supported architecture, chosen per layer at load time.
using model = decoder<any_attention, any_ffn>;

// Compiled mode: the library's decoder unit (src/decoder.cpp) instantiates slm::model
// once; other files use that instantiation (other compositions are instantiated where
// they are used).
#if SLM_COMPILED && !SLM_UNIT_DECODER
extern template class decoder<any_attention, any_ffn>;
#endif

}  // namespace slm

// Compiled mode: the generator of this model's session is compiled by the library
// (slm/generate/generator_instances.hpp).
#define SLM_MODEL_HPP_INCLUDED 1
#include "slm/generate/generator_instances.hpp"
