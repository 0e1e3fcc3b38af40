// slm/models/nam56r/model.hpp - the NAM56R specialist model, Megatron lineage (spec nam56r.md §1-§2.7),
// loaded from the canonical checkpoint format (notes: nam56r_schema.md): config.json with
// Megatron argument names + model.safetensors with Megatron tensor names.
//
//   h0 = E[x] + NGram(x) (+ Struct(side), absent side inputs = 0)
//   per layer L (plan_nam56r_layers), one pre-norm residual sublayer h += F(h):
//     A  MLA or DSA-MLA(RMSNorm_input_layernorm(h))   (no norm on layers config.json lists as bare)
//     E  MoE(RMSNorm_pre_mlp_layernorm(h))
//     M  Mamba3(RMSNorm_pre_norm(RMSNorm_norm(h)))    (two norms, two weights)
//     R  M2RNN(RMSNorm_norm(h))
//   logits = output_layer[0, vocab_size) . RMSNorm_final_norm(h)   (padding rows never computed)
// MTP depth k = 1..D (spec §2.7): from h^(k-1)_t (h^(0) = the final-normed hidden) and the
// embedding (word + n-gram over the true history) of token t + k:
//   u = eh_proj [enorm(e); hnorm(h^(k-1))]      (embedding half first)  [2d] -> [d]
//   u += MLA(RMSNorm_in(u))                     (inner layer 0, dense, its own KV cache)
//   u += fc2 GELU(fc1 RMSNorm_fc1(u))           (inner layer 1)
//   h^(k) = final_layernorm(u); logits^(k) = output_layer h^(k)   (predicts token t + k + 1)
// All norms RMSNorm with weight, eps = layernorm_epsilon. DSA IndexCache: "off" (every DSA
// layer runs its indexer) or "causal" (ranks in dsa_index_cache_full_ranks run theirs,
// the others reuse the nearest preceding full layer's causal top-k of the same call).
//
// Speculative decoding with the MTP heads (session::draft). Positions: the session has
// consumed x_0 .. x_{p-1} (p = position() >= 1); the caller picked x_p from the last logits.
//   draft({x_p, d_1, .., d_{m-1}}, logits [m, vocab]) writes row i = MTP depth i + 1 at
//   position p - 1: the prediction of token p + i + 1 given x_0..x_p and the drafts d_1..d_i.
//   A draft never changes what forward() computes; it only advances each depth's own MLA
//   cache over positions whose inputs are all consumed tokens (depth k keeps p - k
//   positions: position t needs token t + k). Rows computed from x_p or drafts are dropped
//   again (an exact KV truncation), so a draft is repeatable: call draft({x_p}), sample d_1,
//   draft({x_p, d_1}), sample d_2, ... (each call recomputes one position per depth).
//   Verify: forward({x_p, d_1, .., d_m}, m + 1 rows) -> main logits at p .. p + m; accept
//   j drafts by the usual rule, then rollback(m - j) (needs session_options::rollback_tokens
//   >= m for the recurrent layers) and continue with the bonus token from row j.
// Sessions: forward errors (bad id, context full, out of memory) leave the session
// unchanged; rollback(n) is exact for KV caches, the token/n-gram history (all ids are
// kept) and recurrent layers within session_options::rollback_tokens.
// Session state: snapshot()/restore(), save()/saved_size()/load() with the decoder
// session's semantics and checks (models/hf/model.hpp: "Session state" and the format); a snapshot
// is the saved blob held in memory. The blob is models/hf/model.hpp's envelope with session kind 1
// (NAM56R) and, after the header, num_layers + mtp_num_layers + 1 records:
//   per main layer, in plan order: "mla" (MLA and DSA-MLA: latents, RoPE keys, indexer
//     keys; a DSA layer that borrows its top-k under IndexCache "causal" has no indexer
//     keys, and the top-k itself lives only within a call), "mamba3" / "m2rnn" (the
//     recurrent record: current state and rollback history), "none" (MoE);
//   per MTP depth k = 1..D: "mtp": the depth's own "mla" record (n = positions it holds,
//     at most position - k), then an f32 rows block of its h^(k) rows [n, d];
//   "history": u64 count (= position) + count x i32 token ids (the n-gram hash history,
//     the MTP inputs), then an f32 rows block of the final-normed hidden of every
//     position [position, d] (what MTP depth 1 reads; 0 rows without MTP).
// The fingerprint covers the config's state dimensions, the layer plan, each cache's
// layout and the KV dtype: a blob of another NAM56R config, or of another session kind,
// is refused by name.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "slm/layers/activation.hpp"
#include "slm/core/buffer.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/layers/dsa.hpp"
#include "slm/io/config_reader.hpp"
#include "slm/io/json.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/m2rnn.hpp"
#include "slm/layers/mamba3.hpp"
#include "slm/layers/mla.hpp"
#include "slm/layers/mlp.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/layers/moe.hpp"
#include "slm/models/nam56r/bind.hpp"
#include "slm/models/nam56r/pattern.hpp"
#include "slm/models/session.hpp"
#include "slm/models/stack.hpp"
#include "slm/layers/ngram_embedding.hpp"
#include "slm/layers/norm.hpp"
#include "slm/core/status.hpp"
#include "slm/layers/structure_embedding.hpp"

namespace slm {

// config.json of the canonical format; every dimension explicit (nam56r_schema.md).
struct nam56r_config {
  std::size_t vocab_size = 0, padded_vocab_size = 0, hidden_size = 0, num_layers = 0;
  std::string hybrid_pattern;
  std::vector<std::size_t> dsa_a_layer_ranks;
  std::optional<std::vector<std::size_t>> r_layer_numbers;
  // Main-stack attention layers (0-based, as in decoder.layers.N) stored without an input
  // norm: fused down-projection runs build DSA layers with none (spec §2.3), and the
  // converter's --missing-mla-norm none leaves MLA layers without one. Declared, never
  // inferred from a missing tensor: a norm weight lost from any other layer is an error.
  std::vector<std::size_t> attention_layers_without_input_norm;
  // The same for MTP depths (0-based k of mtp.layers.k): their attention layer stored
  // without its input norm (the converter's --missing-mla-norm none).
  std::vector<std::size_t> mtp_attention_layers_without_input_norm;
  std::size_t mtp_num_layers = 0;
  double layernorm_epsilon = 1e-5;
  std::size_t max_position_embeddings = 0, ffn_hidden_size = 0;
  std::string activation = "gelu";
  std::size_t num_attention_heads = 0, q_lora_rank = 0, kv_lora_rank = 0, qk_head_dim = 0, qk_pos_emb_head_dim = 0,
              v_head_dim = 0;
  double rotary_base = 10000.0;
  std::size_t dsa_indexer_n_heads = 0, dsa_indexer_head_dim = 0, dsa_indexer_topk = 0;
  bool dsa_indexer_relu = true;           // optional key "dsa_indexer_scoring_relu"
  std::string dsa_index_cache = "off";    // "off" | "causal"
  std::vector<std::size_t> dsa_index_cache_full_ranks;
  std::size_t num_moe_experts = 0, moe_router_topk = 0, moe_ffn_hidden_size = 0,
              moe_shared_expert_intermediate_size = 0;
  std::string moe_router_score_function = "softmax";  // "softmax" | "sigmoid"
  std::size_t mamba_state_dim = 0, mamba_head_dim = 0, mamba_expand = 0, mamba_num_groups = 0, mamba3_mimo_rank = 0;
  double mamba3_rope_fraction = 0.5, mamba3_a_floor = 1e-4;
  std::string mamba3_a_activation = "softplus";  // "softplus" | "heavy_tail"
  std::size_t m2rnn_k_head_dim = 0, m2rnn_v_head_dim = 0, m2rnn_num_heads = 0, m2rnn_conv_kernel = 0;
  std::optional<ngram_hash_config> ngram_hash;
  std::optional<structure_embedding_config> structure_embedding;
  nam56r_plan plan;  // derived: the per-layer plan

  static result<nam56r_config> from_json(const json::value& j);

  mamba3_config mamba(std::size_t) const;
  m2rnn_config m2rnn() const;
  nam56r::mla_config mla(bool dsa) const;
};

namespace nam56r {

// The parts of NAM56R's layer stack (models/stack.hpp) that differ from the library's layers.

// A and its DSA form: Megatron MLA with interleaved RoPE. Under DSA IndexCache "causal" a
// full layer runs its indexer and lends its top-k to the later layers of the same call
// (through workspace::topk, the call's context); a shared layer borrows it and runs none.
struct attention_part {
  using attention = basic_mla_attention<rope_interleaved>;
  using cache = attention::cache;
  attention attn;
  bool publishes_index = false;  // a full DSA layer: lends its top-k
  bool reuses_index = false;     // a shared DSA layer: borrows it (attn.indexer is empty)

  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return attn.init_cache(c, o);
  }
  status forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws, compute_context& cx) const;
};

// M: Megatron's Mamba-3 block normalizes its input a second time (mixer.impl.pre_norm)
// before the mixer.
struct mamba3_part {
  using cache = mamba3_mixer::cache;
  rms_norm pre_norm;
  mamba3_mixer mixer;

  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return mixer.init_cache(c, o);
  }
  status forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws, compute_context& cx) const;
};

using mixer = attention_variant<attention_part, mamba3_part, m2rnn_mixer, no_mixer>;  // A, M, R; none for E
using ffn = ffn_variant<basic_moe_ffn<>, no_ffn>;                                     // E; none for A, M, R

// A host's own part for one kind of NAM56R layer, named among the parts of slm::specialist
// (models/specialist.hpp): a mixer_part or an ffn_part (models/stack.hpp) that says which kind
// it serves and loads itself from the checkpoint, from the tensors under the layer's
// Megatron prefix (l.prefix). The model loads the slot's norm as for its own parts
// (input_layernorm for A, pre_mlp_layernorm for E, norm for M and R). It takes every layer
// of its kind, in place of the library's part.
template <class P>
concept host_part = (mixer_part<P> || ffn_part<P>) &&
                    requires(const checkpoint& ck, const nam56r_config& c, const nam56r_layer& l) {
                      { P::serves } -> std::convertible_to<nam56r_layer_kind>;
                      { P::load(ck, c, l) } -> std::same_as<result<P>>;
                    };

// fn.template operator()<P>() for each alternative P of a stack variant (attention_variant,
// ffn_variant), in order, until one returns an error.
template <class V, class Fn>
status for_each_alternative(Fn&& fn) {
  using variant = decltype(V::impl);
  return [&]<std::size_t... I>(std::index_sequence<I...>) {
    status s;
    ((s.ok() ? void(s = fn.template operator()<std::variant_alternative_t<I, variant>>()) : void()), ...);
    return s;
  }(std::make_index_sequence<std::variant_size_v<variant>>{});
}

// The parts of a NAM56R model beside its layer stack: the n-gram hash input embedding,
// the structure embedding and the MTP depths. One left out is not compiled (its code sits
// behind `if constexpr`), and a checkpoint that has it is refused at load.
template <bool NgramHash, bool Structure, bool Mtp>
struct extras {
  static constexpr bool ngram_hash = NgramHash, structure = Structure, mtp = Mtp;
};
using all_extras = extras<true, true, true>;

}  // namespace nam56r

// The NAM56R model over a layer stack of the given parts (models/stack.hpp): Mixer is an
// attention_variant of NAM56R's mixer parts (nam56r::attention_part for MLA and DSA,
// nam56r::mamba3_part, m2rnn_mixer) and no_mixer, Ffn an ffn_variant of basic_moe_ffn<> and
// no_ffn, Extras a nam56r::extras of the parts outside the stack. A part left out is not
// compiled, and a checkpoint that needs it is refused at load, naming the layer or the
// part. nam56r_model (below) holds them all: the config-driven path. slm::specialist
// (models/specialist.hpp) picks them from a list.
template <class Mixer = nam56r::mixer, class Ffn = nam56r::ffn, class Extras = nam56r::all_extras>
class basic_nam56r_model : public movable_model<basic_nam56r_model<Mixer, Ffn, Extras>> {
 public:
  using attention = basic_mla_attention<rope_interleaved>;
  using mixer_type = Mixer;
  using ffn_type = Ffn;
  using extras_type = Extras;

  static result<basic_nam56r_model> load(const std::filesystem::path& dir, const checkpoint_options& opt = {});
  // Loads an opened checkpoint (it moves into the model).
  static result<basic_nam56r_model> from_checkpoint(checkpoint&& ck);

  const nam56r_config& config() const noexcept { return cfg_; }
  std::size_t vocab() const noexcept { return cfg_.vocab_size; }
  const checkpoint& weights() const noexcept { return *ck_; }
  // The main layers as loaded: one per plan entry, the slot its kind fills holding its part.
  const layer_stack<Mixer, Ffn>& stack() const noexcept { return stack_; }
  // The output layer on final-normed hidden rows (session::forward's `hidden`, or another
  // model's mapped into this one's space): [rows, hidden_size] x [hidden_size, vocab()] -> [rows, vocab()].
  status head_logits(const float* hidden, std::size_t rows, float* logits, compute_context& cx) const;

  struct layer_row {
    std::size_t index = 0;
    std::string kind;  // mla|dsa|moe|mamba3|m2rnn|mtp.k.mla|mtp.k.mlp|embedding|structure|ngram|head
    std::uint64_t params = 0, bytes = 0, active_params = 0;
    std::string formats;  // the stored formats, '+'-joined, e.g. "bf16", "nvfp4+bf16"
  };
  // For `slm inspect`: one row per embedding part, layer, MTP sublayer and the head, from
  // the tensors as stored. Active parameters per token: a MoE layer counts the router,
  // the top-k experts and the shared expert; the word embedding one row; the n-gram one
  // row per table plus out_proj; the head its vocab_size rows and the final norm.
  std::vector<layer_row> describe() const;

  class session;
  session new_session(session_options o = {}) const;

 private:
  struct session_state;
  friend class session;
  struct mtp_depth {
    rms_norm enorm, hnorm, final_norm, mlp_norm;
    linear eh_proj;  // [d, 2d]
    block_norm attn_norm;
    attention attn;
    feed_forward mlp;
  };

  status norm_of(rms_norm& n, const std::string& name) const;
  // An attention layer under prefix and its input norm; the identity only where
  // config.json's list `bare_key` (bare) names `index`: a missing norm is never taken for
  // "no norm".
  // The input norm of an attention layer (the identity where `bare` lists `index`).
  status load_input_norm(block_norm& norm, const std::string& prefix, const std::vector<std::size_t>& bare,
                         std::size_t index, std::string_view bare_key) const;
  status load_attn(block_norm& norm, attention& attn, const std::string& prefix, bool dsa,
                   const std::vector<std::size_t>& bare, std::size_t index, std::string_view bare_key) const;

  status load_weights();

  nam56r_config cfg_;
  std::unique_ptr<checkpoint> ck_;
  weight_matrix word_;
  std::optional<ngram_hash_embedding> ngram_;
  std::optional<structure_embedding> structure_;
  layer_stack<Mixer, Ffn> stack_;  // one layer per plan entry, one slot filled
  std::vector<mtp_depth> mtp_;
  rms_norm final_norm_;
  linear head_;  // output_layer rows [0, vocab_size)
};

// Everything a session holds besides scratch; save() / load() carry all of it.
template <class Mixer, class Ffn, class Extras>
struct basic_nam56r_model<Mixer, Ffn, Extras>::session_state {
  std::vector<typename Mixer::cache> layers;  // one per main layer: MLA / DSA (latents, RoPE keys, indexer
                                            // keys), Mamba-3 / M2RNN (with their rollback history), none (MoE)
  std::vector<typename attention::cache> mtp;  // each MTP depth's own MLA cache
  std::vector<std::size_t> mtp_n;           // positions held by each MTP depth's cache (all verified)
  std::vector<floats> hk;                   // h^(k) of those positions, [mtp_n[k], d] per depth
  floats hf;                                // final-normed hidden of every position, [pos, d] (MTP models)
  std::vector<std::int32_t> tokens;         // every consumed id: the n-gram history, the MTP inputs
};

// A NAM56R session (models/session.hpp: options, rollback, snapshot, save / load), plus
// the token history the n-gram embedding and the MTP heads read, and MTP drafting.
template <class Mixer, class Ffn, class Extras>
class basic_nam56r_model<Mixer, Ffn, Extras>::session
    : public model_session<typename basic_nam56r_model<Mixer, Ffn, Extras>::session, basic_nam56r_model<Mixer, Ffn, Extras>,
                           typename basic_nam56r_model<Mixer, Ffn, Extras>::session_state> {
  using base = model_session<session, basic_nam56r_model, session_state>;
  friend base;
  using base::advance;
  using base::check_call;
  using base::ensure_state;
  using base::m_;
  using base::opt_;
  using base::pos_;
  using base::st_;
  using base::weights_;

 public:
  explicit session(const basic_nam56r_model& m, session_options o = {})
      : base(m, o, m.cfg_.max_position_embeddings, m.ck_ ? m.ck_->check_unchanged() : status{}) {}

  // Runs ids at positions position() .. position() + T and writes the logits of the last
  // `rows` tokens ([rows, vocab()]). side: optional structure ids (absent = 0). On any
  // error the session is as it was before the call. hidden_rows / hidden: optionally also
  // the final-normed hidden of the last hidden_rows tokens (what the head reads), [hidden_rows,
  // hidden_size], for maps between models' hidden spaces (ensemble/hidden_map.hpp); rows
  // may be 0 then, and no logits are computed.
  status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx);
  status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx,
                 const structure_inputs& side, std::size_t hidden_rows = 0, float* hidden = nullptr);

  // MTP drafting (see the top of this file): next = {x_p, d_1, .., d_{m-1}}, 1 <= m <=
  // mtp depths, position() >= 1; logits [m, vocab()]: row i = depth i + 1 at position p - 1.
  status draft(std::span<const std::int32_t> next, float* logits, compute_context& cx);

 private:
  status draft_depths(std::span<const std::int32_t> next, float* logits, compute_context& cx);  // draft, with MTP
  using state = session_state;
  static constexpr state_format::session_kind saved_kind = state_format::session_kind::nam56r;

  // Depth k (0-based) position t reads token t + k + 1: consumed when t + k + 1 <= p - 1.
  static std::size_t verified_len(std::size_t k, std::size_t p) noexcept { return p > k + 1 ? p - k - 1 : 0; }
  std::size_t verified_len(std::size_t k) const noexcept { return verified_len(k, pos_); }

  // ---- What models/session.hpp asks of a family ----
  status make_state(state& s, const session_options& o) const;
  // Every cache, the token history and each MTP depth back to position len.
  void truncate_state(state& s, std::size_t len) const noexcept;
  template <class Fn>
  void for_each_cache(const state& s, Fn&& fn) const {
    for (std::size_t i = 0; i < s.layers.size(); ++i) fn(i, s.layers[i]);
  }
  // The config's state dimensions, the layer plan, each cache's layout, the KV dtype.
  std::uint64_t fingerprint(const state& s) const;
  std::uint64_t record_count() const noexcept { return m_->stack_.layers.size() + m_->mtp_.size() + 1; }
  // The records after the shared header (see the top of this file).
  status write_records(state_writer& w, const state& s) const;
  status read_records(state_reader& r, state& fresh, std::size_t position) const;

  // out [T, d] = word rows + NGram (history: hist_seq[0, j0)) + Struct(side).
  status embed(std::span<const std::int32_t> ids, const std::int32_t* hist_seq, std::size_t j0, float* out,
               const structure_inputs* side, compute_context& cx);

  // h_ [T, d] += MLA(norm(h_)), then += MLP(norm(h_)) of one MTP depth.
  status sublayers(const mtp_depth& md, std::size_t T, attention::cache& kc, compute_context& cx);

  status run(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx,
             const structure_inputs& side, std::size_t hidden_rows, float* hidden);

  std::vector<floats> cur_;  // h^(k) of the positions of the current draft call
  floats h_, xn_, y_, u_;
  workspace ws_;
};

template <class Mixer, class Ffn, class Extras>
inline typename basic_nam56r_model<Mixer, Ffn, Extras>::session basic_nam56r_model<Mixer, Ffn, Extras>::new_session(
    session_options o) const {
  return session(*this, o);
}

// Every part: the config-driven NAM56R model (config.json alone decides the layers).
using nam56r_model = basic_nam56r_model<>;

// Compiled mode: the library's nam56r unit instantiates nam56r_model once; other files use
// that instantiation. Other compositions (slm::specialist) are instantiated where they are
// used, from models/nam56r/model_impl.hpp.
#if SLM_COMPILED && !SLM_UNIT_NAM56R
extern template class basic_nam56r_model<nam56r::mixer, nam56r::ffn>;  // and its session
#endif

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status nam56r::attention_part::forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws,
                                                  compute_context& cx) const {
  std::int32_t* lend = nullptr;
  const std::int32_t* borrow = nullptr;
  if (publishes_index) {
    SLM_TRY(ws.topk.resize(T * attn.indexer->top_k));
    ws.topk_k = attn.indexer->top_k;
    lend = reinterpret_cast<std::int32_t*>(ws.topk.data());
  }
  if (reuses_index) {
    if (ws.topk_k == 0)
      return make_error(errc::invalid_argument, "DSA IndexCache: no earlier layer of this call lent its top-k");
    borrow = reinterpret_cast<const std::int32_t*>(ws.topk.data());
  }
  // [T, d] -> [T, d]
  return attn.forward(x, T, y, c, ws.proj, ws.attn, ws.index, cx, c.mode, borrow, borrow ? ws.topk_k : 0, lend);
}

SLM_INLINE status nam56r::mamba3_part::forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws,
                                               compute_context& cx) const {
  const std::size_t d = pre_norm.dim();
  SLM_TRY(ws.norm.resize(T * d));
  pre_norm.apply(x, T, d, d, ws.norm.data(), d);
  return mixer.forward(ws.norm.data(), T, y, c, ws, cx);  // [T, d] -> [T, d]
}

SLM_INLINE result<nam56r_config> nam56r_config::from_json(const json::value& j) {
  nam56r_config c;
  if (!j.is_object()) return make_error(errc::format_error, "NAM56R config.json: not a JSON object");
  if (const json::value* t = j.find("model_type"); t && !(t->is_string() && t->as_string() == "nam56r"))
    return make_error(errc::invalid_argument, "NAM56R config.json: model_type is not \"nam56r\"");
  const config_reader r{j, "NAM56R config.json"};
  constexpr std::uint64_t max_list = nam56r_max_depth * 4;  // layer numbers and ranks
  SLM_TRY(r.positive("vocab_size", c.vocab_size));
  SLM_TRY(r.positive("padded_vocab_size", c.padded_vocab_size));
  if (c.padded_vocab_size < c.vocab_size)
    return make_error(errc::invalid_argument, "NAM56R config.json: padded_vocab_size ", c.padded_vocab_size,
                      " is smaller than vocab_size ", c.vocab_size);
  SLM_TRY(r.positive("hidden_size", c.hidden_size));
  SLM_TRY(r.positive("num_layers", c.num_layers));
  SLM_TRY(r.string("hybrid_pattern", c.hybrid_pattern, true));
  SLM_TRY(r.sizes("dsa_a_layer_ranks", c.dsa_a_layer_ranks, true, max_list));
  if (const json::value* v = j.find("r_layer_numbers"); v && !v->is_null()) {
    std::vector<std::size_t> numbers;
    SLM_TRY(r.sizes("r_layer_numbers", numbers, true, max_list));
    c.r_layer_numbers = std::move(numbers);
  }
  SLM_TRY(r.sizes("attention_layers_without_input_norm", c.attention_layers_without_input_norm, false, max_list));
  SLM_TRY(r.sizes("mtp_attention_layers_without_input_norm", c.mtp_attention_layers_without_input_norm, false, max_list));
  SLM_TRY(r.size("mtp_num_layers", c.mtp_num_layers, true));
  SLM_TRY(r.number("layernorm_epsilon", c.layernorm_epsilon, true));
  if (!(c.layernorm_epsilon > 0))
    return make_error(errc::invalid_argument, "NAM56R config.json: layernorm_epsilon must be positive");
  SLM_TRY(r.positive("max_position_embeddings", c.max_position_embeddings));
  SLM_TRY(r.size("ffn_hidden_size", c.ffn_hidden_size, true));
  SLM_TRY(r.choice("activation", c.activation, {"gelu"}));
  SLM_TRY(r.positive("num_attention_heads", c.num_attention_heads));
  SLM_TRY(r.positive("q_lora_rank", c.q_lora_rank));
  SLM_TRY(r.positive("kv_lora_rank", c.kv_lora_rank));
  SLM_TRY(r.positive("qk_head_dim", c.qk_head_dim));
  SLM_TRY(r.positive("qk_pos_emb_head_dim", c.qk_pos_emb_head_dim));
  if (c.qk_pos_emb_head_dim % 2)
    return make_error(errc::invalid_argument, "NAM56R config.json: qk_pos_emb_head_dim ", c.qk_pos_emb_head_dim, " is odd");
  SLM_TRY(r.positive("v_head_dim", c.v_head_dim));
  SLM_TRY(r.number("rotary_base", c.rotary_base, true));
  if (!(c.rotary_base > 1)) return make_error(errc::invalid_argument, "NAM56R config.json: rotary_base must exceed 1");
  SLM_TRY(r.size("dsa_indexer_n_heads", c.dsa_indexer_n_heads, true));
  SLM_TRY(r.size("dsa_indexer_head_dim", c.dsa_indexer_head_dim, true));
  SLM_TRY(r.size("dsa_indexer_topk", c.dsa_indexer_topk, true));
  SLM_TRY(r.boolean("dsa_indexer_scoring_relu", c.dsa_indexer_relu));
  SLM_TRY(r.choice("dsa_index_cache", c.dsa_index_cache, {"off", "causal"}));
  SLM_TRY(r.sizes("dsa_index_cache_full_ranks", c.dsa_index_cache_full_ranks, c.dsa_index_cache == "causal", max_list));
  SLM_TRY(r.size("num_moe_experts", c.num_moe_experts, true));
  SLM_TRY(r.size("moe_router_topk", c.moe_router_topk, true));
  SLM_TRY(r.size("moe_ffn_hidden_size", c.moe_ffn_hidden_size, true));
  SLM_TRY(r.size("moe_shared_expert_intermediate_size", c.moe_shared_expert_intermediate_size, true));
  SLM_TRY(r.choice("moe_router_score_function", c.moe_router_score_function, {"softmax", "sigmoid"}));
  SLM_TRY(r.size("mamba_state_dim", c.mamba_state_dim, true));
  SLM_TRY(r.size("mamba_head_dim", c.mamba_head_dim, true));
  SLM_TRY(r.size("mamba_expand", c.mamba_expand, true));
  SLM_TRY(r.size("mamba_num_groups", c.mamba_num_groups, true));
  SLM_TRY(r.size("mamba3_mimo_rank", c.mamba3_mimo_rank, true));
  SLM_TRY(r.number("mamba3_rope_fraction", c.mamba3_rope_fraction, true));
  SLM_TRY(r.number("mamba3_a_floor", c.mamba3_a_floor, true));
  SLM_TRY(r.choice("mamba3_a_activation", c.mamba3_a_activation, {"softplus", "heavy_tail"}));
  SLM_TRY(r.size("m2rnn_k_head_dim", c.m2rnn_k_head_dim, true));
  SLM_TRY(r.size("m2rnn_v_head_dim", c.m2rnn_v_head_dim, true));
  SLM_TRY(r.size("m2rnn_num_heads", c.m2rnn_num_heads, true));
  SLM_TRY(r.size("m2rnn_conv_kernel", c.m2rnn_conv_kernel, true));
  if (const json::value* v = j.find("ngram_hash"); v && !v->is_null()) {
    if (!v->is_object()) return make_error(errc::invalid_argument, "NAM56R config.json: \"ngram_hash\" is not an object");
    ngram_hash_config n;
    n.d_model = c.hidden_size;
    const json::value& orders = (*v)["orders"];
    if (!orders.is_array() || orders.items().empty() || orders.items().size() > ngram_hash_config::max_orders)
      return make_error(errc::invalid_argument, "NAM56R config.json: \"ngram_hash.orders\" is not a list of 1..",
                        ngram_hash_config::max_orders, " orders");
    n.num_orders = orders.items().size();
    for (std::size_t i = 0; i < n.num_orders; ++i) {
      auto o = orders.items()[i].as_uint64();
      if (!o) return make_error(errc::invalid_argument, "NAM56R config.json: \"ngram_hash.orders\" holds a non-integer");
      n.orders[i] = static_cast<std::size_t>(*o);
    }
    const config_reader nr{*v, "NAM56R config.json, ngram_hash"};
    SLM_TRY(nr.size("num_heads", n.num_heads, true));
    SLM_TRY(nr.size("table_size", n.table_size, true));
    SLM_TRY(nr.size("embed_dim", n.embed_dim, true));
    if (auto s = n.validate(); !s.ok()) return std::move(s).with_context("NAM56R config.json");
    c.ngram_hash = n;
  }
  if (const json::value* v = j.find("structure_embedding"); v && !v->is_null()) {
    if (!v->is_object())
      return make_error(errc::invalid_argument, "NAM56R config.json: \"structure_embedding\" is not an object");
    structure_embedding_config s;
    s.d_model = c.hidden_size;
    const std::string_view comp = v->get_string("components", "core");
    if (comp == "core") s.active = structure_embedding_config::core;
    else if (comp == "all") s.active = structure_embedding_config::all;
    else
      return make_error(errc::invalid_argument, "NAM56R config.json: \"structure_embedding.components\" is \"", comp,
                        "\", expected \"core\" or \"all\"");
    s.bottleneck = static_cast<std::size_t>(v->get_uint64("bottleneck", 64));
    if (auto st = s.validate(); !st.ok()) return std::move(st).with_context("NAM56R config.json");
    c.structure_embedding = s;
  }
  // The plan: pattern, ranks, R layers, MTP depths.
  nam56r_pattern_config pc;
  pc.pattern = c.hybrid_pattern;
  pc.depth = c.num_layers;
  pc.dsa_a_ranks = c.dsa_a_layer_ranks;
  pc.r_layers = c.r_layer_numbers;
  pc.mtp_depths = c.mtp_num_layers;
  auto plan = plan_nam56r_layers(pc);
  if (!plan.ok()) return std::move(plan).take_error().with_context("NAM56R config.json");
  c.plan = std::move(*plan);
  for (std::size_t i : c.attention_layers_without_input_norm)
    if (i >= c.num_layers || (c.plan.layers[i].kind != nam56r_layer_kind::mla &&
                              c.plan.layers[i].kind != nam56r_layer_kind::dsa))
      return make_error(errc::invalid_argument, "NAM56R config.json: \"attention_layers_without_input_norm\" names layer ",
                        i, ", which is not an attention layer of the main stack");
  for (std::size_t k : c.mtp_attention_layers_without_input_norm)
    if (k >= c.mtp_num_layers)
      return make_error(errc::invalid_argument, "NAM56R config.json: \"mtp_attention_layers_without_input_norm\" names "
                        "MTP depth ", k, " of mtp_num_layers ", c.mtp_num_layers);
  // Sizes each present kind needs.
  std::size_t n_dsa = 0, n_moe = 0, n_mamba = 0, n_m2rnn = 0;
  for (const nam56r_layer& l : c.plan.layers) {
    n_dsa += l.kind == nam56r_layer_kind::dsa;
    n_moe += l.kind == nam56r_layer_kind::moe;
    n_mamba += l.kind == nam56r_layer_kind::mamba3;
    n_m2rnn += l.kind == nam56r_layer_kind::m2rnn;
  }
  auto need = [](bool cond, const char* what) -> status {
    if (!cond) return make_error(errc::invalid_argument, "NAM56R config.json: ", what);
    return {};
  };
  if (n_dsa) {
    SLM_TRY(need(c.dsa_indexer_n_heads > 0 && c.dsa_indexer_head_dim > 0 && c.dsa_indexer_topk > 0,
                 "DSA layers need dsa_indexer_n_heads, dsa_indexer_head_dim and dsa_indexer_topk > 0"));
    SLM_TRY(need(c.dsa_indexer_head_dim % 2 == 0, "dsa_indexer_head_dim must be even (RoPE pairs)"));
  }
  if (c.dsa_index_cache == "causal") {
    for (std::size_t rank : c.dsa_index_cache_full_ranks)
      if (rank >= n_dsa)
        return make_error(errc::out_of_range, "NAM56R config.json: dsa_index_cache_full_ranks holds ", rank,
                          ", but there are ", n_dsa, " DSA layers (ranks 0..", n_dsa ? n_dsa - 1 : 0, ")");
    if (n_dsa && std::find(c.dsa_index_cache_full_ranks.begin(), c.dsa_index_cache_full_ranks.end(), 0u) ==
                     c.dsa_index_cache_full_ranks.end())
      return make_error(errc::invalid_argument, "NAM56R config.json: with dsa_index_cache \"causal\" DSA rank 0 must "
                        "be full (dsa_index_cache_full_ranks): no earlier layer could lend it its top-k");
  }
  if (n_moe) {
    SLM_TRY(need(c.num_moe_experts > 0 && c.moe_router_topk > 0 && c.moe_router_topk <= c.num_moe_experts,
                 "moe_router_topk must be in 1..num_moe_experts"));
    SLM_TRY(need(c.moe_ffn_hidden_size > 0, "moe_ffn_hidden_size is 0"));
  }
  if (c.mtp_num_layers) SLM_TRY(need(c.ffn_hidden_size > 0, "MTP layers need ffn_hidden_size > 0"));
  if (n_mamba) {
    auto m = c.mamba(0);
    if (auto s = m.validate(); !s.ok()) return std::move(s).with_context("NAM56R config.json (mamba)");
  }
  if (n_m2rnn) {
    auto m = c.m2rnn();
    if (auto s = m.validate(); !s.ok()) return std::move(s).with_context("NAM56R config.json (m2rnn)");
  }
  return c;
}

SLM_INLINE mamba3_config nam56r_config::mamba(std::size_t) const {
  mamba3_config m;
  m.d_model = hidden_size;
  m.d_state = mamba_state_dim;
  m.expand = mamba_expand;
  m.headdim = mamba_head_dim;
  m.ngroups = mamba_num_groups;
  m.is_mimo = true;  // AuthorMamba3Mixer: MIMO (spec §2.5)
  m.mimo_rank = mamba3_mimo_rank;
  m.rope_fraction = static_cast<float>(mamba3_rope_fraction);
  m.A_floor = static_cast<float>(mamba3_a_floor);
  m.a_activation = mamba3_a_activation == "softplus" ? mamba3_a_activation::softplus : mamba3_a_activation::heavy_tail;
  m.eps = static_cast<float>(layernorm_epsilon);
  return m;
}

SLM_INLINE m2rnn_config nam56r_config::m2rnn() const {
  m2rnn_config m;
  m.d_model = hidden_size;
  m.k_head_dim = m2rnn_k_head_dim;
  m.v_head_dim = m2rnn_v_head_dim;
  m.num_heads = m2rnn_num_heads;
  m.conv_kernel = m2rnn_conv_kernel;
  m.eps = static_cast<float>(layernorm_epsilon);
  return m;
}

SLM_INLINE nam56r::mla_config nam56r_config::mla(bool dsa) const {
  nam56r::mla_config m;
  m.hidden = hidden_size;
  m.n_heads = num_attention_heads;
  m.q_lora = q_lora_rank;
  m.kv_lora = kv_lora_rank;
  m.nope = qk_head_dim;
  m.rope = qk_pos_emb_head_dim;
  m.v = v_head_dim;
  m.rotary_base = rotary_base;
  if (dsa) m.indexer = nam56r::indexer_config{hidden_size, q_lora_rank, dsa_indexer_n_heads, dsa_indexer_head_dim,
                                              dsa_indexer_topk, rotary_base, dsa_indexer_relu};
  return m;
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm

// The members of basic_nam56r_model, a template: compiled where they are instantiated
// (header-only mode, the library's nam56r unit, a host that composes a specialist).
#if SLM_DEFINE_NAM56R
#include "slm/models/nam56r/model_impl.hpp"
#endif

// Compiled mode: the generator of this model's session is compiled by the library
// (slm/generate/generator_instances.hpp).
#define SLM_NAM56R_HPP_INCLUDED 1
#include "slm/generate/generator_instances.hpp"
