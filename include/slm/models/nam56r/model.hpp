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

}  // namespace nam56r

class nam56r_model : public movable_model<nam56r_model> {
 public:
  using attention = basic_mla_attention<rope_interleaved>;

  static result<nam56r_model> load(const std::filesystem::path& dir, const checkpoint_options& opt = {});
  // Loads an opened checkpoint (it moves into the model).
  static result<nam56r_model> from_checkpoint(checkpoint&& ck);

  const nam56r_config& config() const noexcept { return cfg_; }
  std::size_t vocab() const noexcept { return cfg_.vocab_size; }
  const checkpoint& weights() const noexcept { return *ck_; }
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
  status load_attn(block_norm& norm, attention& attn, const std::string& prefix, bool dsa,
                   const std::vector<std::size_t>& bare, std::size_t index, std::string_view bare_key) const;

  status load_weights();

  nam56r_config cfg_;
  std::unique_ptr<checkpoint> ck_;
  weight_matrix word_;
  std::optional<ngram_hash_embedding> ngram_;
  std::optional<structure_embedding> structure_;
  layer_stack<nam56r::mixer, nam56r::ffn> stack_;  // one layer per plan entry, one slot filled
  std::vector<mtp_depth> mtp_;
  rms_norm final_norm_;
  linear head_;  // output_layer rows [0, vocab_size)
};

// Everything a session holds besides scratch; save() / load() carry all of it.
struct nam56r_model::session_state {
  std::vector<nam56r::mixer::cache> layers;  // one per main layer: MLA / DSA (latents, RoPE keys, indexer
                                            // keys), Mamba-3 / M2RNN (with their rollback history), none (MoE)
  std::vector<attention::cache> mtp;        // each MTP depth's own MLA cache
  std::vector<std::size_t> mtp_n;           // positions held by each MTP depth's cache (all verified)
  std::vector<floats> hk;                   // h^(k) of those positions, [mtp_n[k], d] per depth
  floats hf;                                // final-normed hidden of every position, [pos, d] (MTP models)
  std::vector<std::int32_t> tokens;         // every consumed id: the n-gram history, the MTP inputs
};

// A NAM56R session (models/session.hpp: options, rollback, snapshot, save / load), plus
// the token history the n-gram embedding and the MTP heads read, and MTP drafting.
class nam56r_model::session : public model_session<nam56r_model::session, nam56r_model, nam56r_model::session_state> {
  using base = model_session<session, nam56r_model, session_state>;
  friend base;

 public:
  explicit session(const nam56r_model& m, session_options o = {})
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

inline nam56r_model::session nam56r_model::new_session(session_options o) const { return session(*this, o); }

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

SLM_INLINE result<nam56r_model> nam56r_model::load(const std::filesystem::path& dir, const checkpoint_options& opt) {
  auto ck = checkpoint::open(dir, opt);
  if (!ck.ok()) return std::move(ck).take_error();
  return from_checkpoint(std::move(*ck));
}

SLM_INLINE result<nam56r_model> nam56r_model::from_checkpoint(checkpoint&& ck_in) {
  auto cfg = nam56r_config::from_json(ck_in.config());
  if (!cfg.ok()) return std::move(cfg).take_error().with_context(ck_in.dir().string());
  nam56r_model m;
  m.cfg_ = std::move(*cfg);
  m.ck_.reset(new (std::nothrow) checkpoint(std::move(ck_in)));
  if (!m.ck_) return make_error(errc::out_of_memory, "cannot allocate the checkpoint");
  SLM_TRY(m.load_weights());
  return m;
}

SLM_INLINE status nam56r_model::head_logits(const float* hidden, std::size_t rows, float* logits,
                                            compute_context& cx) const {
  if (rows > 0 && (!hidden || !logits)) return make_error(errc::invalid_argument, "head_logits: a null buffer");
  return rows > 0 ? head_.apply(hidden, rows, logits, cx) : status{};
}

SLM_INLINE std::vector<nam56r_model::layer_row> nam56r_model::describe() const {
  std::vector<layer_row> rows;
  auto add = [&](std::size_t index, std::string kind, std::initializer_list<std::string> prefixes) -> layer_row& {
    layer_row r;
    r.index = index;
    r.kind = std::move(kind);
    std::vector<std::string> fmts;
    for (const auto& e : ck_->tensors()) {
      bool match = false;
      for (const std::string& p : prefixes) match |= e.name.substr(0, p.size()) == p;
      if (!match) continue;
      const auto& info = ck_->info(e);
      r.bytes += info.end - info.begin;
      const bool aux = e.name.find(".weight_scale") != std::string_view::npos ||
                       e.name.find(".weight_global_scale") != std::string_view::npos;
      const bool ints = info.type == dtype::i64 || info.type == dtype::i32;  // hash buffers, not weights
      if (aux || ints) continue;
      // Packed FP4, two values a byte: compressed-tensors' P.weight_packed, or ModelOpt's
      // U8 P.weight{ix} beside P.weight_scale{ix} (E4M3 scales: NVFP4, E8M0 bytes: MXFP4).
      const std::string_view n = e.name;
      const std::size_t w = n.rfind(".weight");
      const std::string scale = w == std::string_view::npos
                                    ? std::string()
                                    : cat(n.substr(0, w), ".weight_scale",
                                          n.substr(0, 14 + w) == cat(n.substr(0, w), ".weight_packed") ? n.substr(w + 14)
                                                                                                        : n.substr(w + 7));
      const auto* se = scale.empty() ? nullptr : ck_->find(scale);
      const bool packed = se && (info.type == dtype::u8 || info.type == dtype::f4);
      r.params += static_cast<std::uint64_t>(info.shape.numel()) * (packed ? 2 : 1);
      std::string f = std::string(safetensors_name(info.type));
      for (char& ch : f) ch = ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
      if (packed) f = ck_->info(*se).type == dtype::f8_e4m3 ? "nvfp4" : "mxfp4";
      else if (se && info.type == dtype::f8_e4m3) f = "fp8";
      if (std::find(fmts.begin(), fmts.end(), f) == fmts.end()) fmts.push_back(f);
    }
    for (const auto& f : fmts) r.formats += (r.formats.empty() ? "" : "+") + f;
    r.active_params = r.params;
    rows.push_back(std::move(r));
    return rows.back();
  };
  const std::size_t d = cfg_.hidden_size;
  add(0, "embedding", {"embedding.word_embeddings."}).active_params = d;
  if (ngram_) {
    auto& r = add(0, "ngram", {nam56r::ngram_hash_prefix() + "."});
    r.active_params = static_cast<std::uint64_t>(ngram_->cfg.concat_dim()) * (1 + d);
  }
  if (structure_) add(0, "structure", {nam56r::structure_prefix() + "."});
  for (std::size_t i = 0; i < cfg_.num_layers; ++i) {
    const nam56r_layer& l = cfg_.plan.layers[i];
    auto& r = add(i, std::string(to_string(l.kind)), {l.prefix + "."});
    if (l.kind == nam56r_layer_kind::moe) {
      const std::uint64_t per = 2ull * cfg_.moe_ffn_hidden_size * d;
      r.active_params = r.params - per * (cfg_.num_moe_experts - cfg_.moe_router_topk);
    }
  }
  for (std::size_t k = 0; k < cfg_.mtp_num_layers; ++k) {
    const std::string p = nam56r_mtp_prefix(k);
    add(k, cat("mtp.", k, ".mla"), {p + ".enorm.", p + ".hnorm.", p + ".eh_proj.", p + ".final_layernorm.",
                                     p + ".mtp_model_layer.layers.0."});
    add(k, cat("mtp.", k, ".mlp"), {p + ".mtp_model_layer.layers.1."});
  }
  auto& h = add(0, "head", {"output_layer.", "decoder.final_norm."});
  h.active_params = static_cast<std::uint64_t>(cfg_.vocab_size) * d + d;
  return rows;
}

SLM_INLINE status nam56r_model::norm_of(rms_norm& n, const std::string& name) const {
  auto v = load_vector(*ck_, name, cfg_.hidden_size);
  if (!v.ok()) return std::move(v).take_error();
  n.weight = std::move(*v);
  n.eps = static_cast<float>(cfg_.layernorm_epsilon);
  return {};
}

SLM_INLINE status nam56r_model::load_attn(block_norm& norm, attention& attn, const std::string& prefix, bool dsa,
                                          const std::vector<std::size_t>& bare, std::size_t index,
                                          std::string_view bare_key) const {
  const std::string name = prefix + ".input_layernorm.weight";
  norm.identity = std::find(bare.begin(), bare.end(), index) != bare.end();
  if (!norm.identity) {  // else a stored norm stays unbound and is reported
    if (!ck_->find(name))
      return make_error(errc::not_found, ck_->dir().string(), ": no tensor named '", name,
                        "' (an attention layer stored without its input norm must be listed in config.json's \"",
                        bare_key, "\")");
    SLM_TRY(norm_of(norm.rms, name));
  }
  auto at = nam56r::load_mla<rope_interleaved>(*ck_, prefix + ".self_attention", cfg_.mla(dsa));
  if (!at.ok()) return std::move(at).take_error();
  attn = std::move(*at);
  return {};
}

SLM_INLINE status nam56r_model::load_weights() {
  const checkpoint& ck = *ck_;
  const std::size_t d = cfg_.hidden_size, V = cfg_.padded_vocab_size;
  {
    auto w = load_linear_weight(ck, "embedding.word_embeddings");
    if (!w.ok()) return std::move(w).take_error();
    if (w->rows != V || w->cols != d)
      return make_error(errc::format_error, ck.dir().string(), ": module 'embedding.word_embeddings' is [", w->rows,
                        ", ", w->cols, "], the config implies [", V, ", ", d, "]");
    word_ = *w;
  }
  if (cfg_.ngram_hash) {
    auto n = nam56r::load_ngram_hash(ck, nam56r::ngram_hash_prefix(), *cfg_.ngram_hash);
    if (!n.ok()) return std::move(n).take_error();
    ngram_ = std::move(*n);
  }
  if (cfg_.structure_embedding) {
    auto s = nam56r::load_structure_embedding(ck, nam56r::structure_prefix(), *cfg_.structure_embedding);
    if (!s.ok()) return std::move(s).take_error();
    structure_ = std::move(*s);
  }
  // One layer of the stack per plan entry, with the one slot its kind fills.
  std::size_t dsa_rank = 0;
  stack_.layers.resize(cfg_.num_layers);
  for (std::size_t i = 0; i < cfg_.num_layers; ++i) {
    const nam56r_layer& l = cfg_.plan.layers[i];
    const std::string& p = l.prefix;
    auto& L = stack_.layers[i];
    L.has_mixer = l.kind != nam56r_layer_kind::moe;
    L.has_ffn = l.kind == nam56r_layer_kind::moe;
    switch (l.kind) {
      case nam56r_layer_kind::mla:
      case nam56r_layer_kind::dsa: {
        nam56r::attention_part a;
        const bool dsa = l.kind == nam56r_layer_kind::dsa;
        SLM_TRY(load_attn(L.mixer_norm, a.attn, p, dsa, cfg_.attention_layers_without_input_norm, i,
                          "attention_layers_without_input_norm"));
        if (dsa && cfg_.dsa_index_cache == "causal") {
          const auto& full = cfg_.dsa_index_cache_full_ranks;
          a.publishes_index = std::find(full.begin(), full.end(), dsa_rank) != full.end();
          a.reuses_index = !a.publishes_index;
          if (a.reuses_index) a.attn.indexer.reset();  // its weights exist but never run
        }
        dsa_rank += dsa;
        L.mixer.impl.emplace<nam56r::attention_part>(std::move(a));
        break;
      }
      case nam56r_layer_kind::moe: {
        SLM_TRY(norm_of(L.ffn_norm.rms, p + ".pre_mlp_layernorm.weight"));
        nam56r::moe_config mc;
        mc.hidden = d;
        mc.n_experts = cfg_.num_moe_experts;
        mc.top_k = cfg_.moe_router_topk;
        mc.expert_ffn = cfg_.moe_ffn_hidden_size;
        mc.shared_ffn = cfg_.moe_shared_expert_intermediate_size;
        mc.sigmoid = cfg_.moe_router_score_function == "sigmoid";
        mc.act = activation::gelu;
        auto f = nam56r::load_moe<router_by_config>(ck, p + ".mlp", mc);
        if (!f.ok()) return std::move(f).take_error();
        L.ffn.impl.emplace<basic_moe_ffn<>>(std::move(*f));
        L.mixer.impl.emplace<no_mixer>();
        break;
      }
      case nam56r_layer_kind::mamba3: {
        nam56r::mamba3_part m;
        SLM_TRY(norm_of(L.mixer_norm.rms, p + ".norm.weight"));
        SLM_TRY(norm_of(m.pre_norm, p + ".mixer.impl.pre_norm.weight"));
        auto x = nam56r::load_mamba3(ck, p + ".mixer.impl.mixer", cfg_.mamba(i));
        if (!x.ok()) return std::move(x).take_error();
        m.mixer = std::move(*x);
        L.mixer.impl.emplace<nam56r::mamba3_part>(std::move(m));
        break;
      }
      case nam56r_layer_kind::m2rnn: {
        SLM_TRY(norm_of(L.mixer_norm.rms, p + ".norm.weight"));
        auto x = nam56r::load_m2rnn(ck, p + ".mixer.impl", cfg_.m2rnn());
        if (!x.ok()) return std::move(x).take_error();
        L.mixer.impl.emplace<m2rnn_mixer>(std::move(*x));
        break;
      }
      case nam56r_layer_kind::mlp:
        return make_error(errc::invalid_argument, "NAM56R: a dense MLP layer in the main stack");
    }
  }
  for (std::size_t k = 0; k < cfg_.mtp_num_layers; ++k) {
    mtp_depth t;
    const std::string p = nam56r_mtp_prefix(k);
    SLM_TRY(norm_of(t.enorm, p + ".enorm.weight"));
    SLM_TRY(norm_of(t.hnorm, p + ".hnorm.weight"));
    SLM_TRY(norm_of(t.final_norm, p + ".final_layernorm.weight"));
    auto eh = load_linear(ck, p + ".eh_proj", d, 2 * d);
    if (!eh.ok()) return std::move(eh).take_error();
    t.eh_proj = std::move(*eh);
    SLM_TRY(load_attn(t.attn_norm, t.attn, p + ".mtp_model_layer.layers.0", false,
                      cfg_.mtp_attention_layers_without_input_norm, k, "mtp_attention_layers_without_input_norm"));
    const std::string mlp = p + ".mtp_model_layer.layers.1.mlp";
    SLM_TRY(norm_of(t.mlp_norm, mlp + ".linear_fc1.layer_norm_weight"));
    auto f = load_feed_forward(ck, mlp + ".linear_fc1", mlp + ".linear_fc2", d, cfg_.ffn_hidden_size, activation::gelu);
    if (!f.ok()) return std::move(f).take_error();
    t.mlp = std::move(*f);
    mtp_.push_back(std::move(t));
  }
  SLM_TRY(norm_of(final_norm_, "decoder.final_norm.weight"));
  auto out = load_linear(ck, "output_layer", V, d);
  if (!out.ok()) return std::move(out).take_error();
  auto rows = slice_rows(out->w, 0, cfg_.vocab_size);  // padding rows: never computed
  if (!rows.ok()) return std::move(rows).take_error();
  head_.w = *rows;
  // Every tensor of the canonical layout is bound above (the converter drops rotary and
  // Transformer Engine buffers): one left over means config.json describes another model
  // (a smaller num_layers, a conv kernel of 0 beside stored conv weights).
  return ck.check_all_bound();
}

SLM_INLINE status nam56r_model::session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                                 compute_context& cx) {
  return forward(ids, rows, logits, cx, structure_inputs{});
}

SLM_INLINE status nam56r_model::session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                                 compute_context& cx, const structure_inputs& side,
                                                 std::size_t hidden_rows, float* hidden) {
  SLM_TRY(check_call("forward", ids, rows, logits, m_->cfg_.vocab_size));
  const std::size_t T = ids.size();
  if (hidden_rows > T)
    return make_error(errc::invalid_argument, "forward: ", hidden_rows, " hidden rows asked of ", T, " tokens");
  if (hidden_rows > 0 && !hidden) return make_error(errc::invalid_argument, "forward: hidden is null");
  return advance(T, [&]() -> status {
    SLM_TRY(run(ids, rows, logits, cx, side, hidden_rows, hidden));
    st_.tokens.insert(st_.tokens.end(), ids.begin(), ids.end());
    return {};
  });
}

SLM_INLINE status nam56r_model::session::draft(std::span<const std::int32_t> next, float* logits, compute_context& cx) {
  SLM_TRY(weights_);
  const nam56r_config& c = m_->cfg_;
  const std::size_t m = next.size(), D = m_->mtp_.size(), d = c.hidden_size, p = pos_;
  if (D == 0) return make_error(errc::unsupported, "draft: the model has no MTP layers");
  if (m == 0 || m > D)
    return make_error(errc::invalid_argument, "draft: ", m, " tokens given, expected 1..", D, " (one per MTP depth)");
  if (p == 0) return make_error(errc::invalid_argument, "draft: the session holds no token yet");
  if (!logits) return make_error(errc::invalid_argument, "draft: logits is null");
  SLM_TRY(check_token_ids("draft", next, c.vocab_size));
  SLM_TRY(ensure_state());
  cur_.resize(D);
  // seq = consumed tokens ++ next
  std::vector<std::int32_t> seq(st_.tokens);
  seq.insert(seq.end(), next.begin(), next.end());
  std::size_t prev_start = 0;  // depth k-1's first computed position this call
  for (std::size_t k = 0; k < m; ++k) {
    const mtp_depth& md = m_->mtp_[k];
    const std::size_t start = st_.mtp_n[k], Tk = p - start, kk = k + 1;
    floats& cur = cur_[k];
    SLM_TRY(cur.resize(Tk * d));
    SLM_TRY(u_.resize(Tk * 2 * d));
    SLM_TRY(h_.resize(Tk * d));
    SLM_TRY(y_.resize(Tk * d));
    // e: embedding of seq[t + kk] for t = start .. p - 1 (true n-gram history).
    SLM_TRY(embed(std::span<const std::int32_t>(seq.data() + start + kk, Tk), seq.data(), start + kk, h_.data(),
                  nullptr, cx));
    for (std::size_t t = 0; t < Tk; ++t) {
      md.enorm.apply_row(h_.data() + t * d, u_.data() + t * 2 * d, d);
      const float* hp = nullptr;
      const std::size_t pos = start + t;
      if (k == 0) hp = st_.hf.data() + pos * d;
      else if (pos < prev_start) hp = st_.hk[k - 1].data() + pos * d;
      else hp = cur_[k - 1].data() + (pos - prev_start) * d;
      md.hnorm.apply_row(hp, u_.data() + t * 2 * d + d, d);
    }
    SLM_TRY(md.eh_proj.apply(u_.data(), Tk, h_.data(), cx));  // [Tk, 2d] x [2d, d] -> [Tk, d]
    status s = sublayers(md, Tk, st_.mtp[k], cx);
    if (!s.ok()) {
      st_.mtp[k].truncate(start);
      return s;
    }
    for (std::size_t t = 0; t < Tk; ++t) md.final_norm.apply_row(h_.data() + t * d, cur.data() + t * d, d);
    s = m_->head_.apply(cur.data() + (Tk - 1) * d, 1, logits + k * c.vocab_size, cx);  // [1, d] x [d, V] -> [1, V]
    if (!s.ok()) {
      st_.mtp[k].truncate(start);
      return s;
    }
    // Keep only the positions whose inputs are consumed tokens.
    const std::size_t keep = verified_len(k);
    SLM_TRY(st_.hk[k].resize(std::max(st_.hk[k].size(), keep * d)));
    for (std::size_t pos = start; pos < keep; ++pos)
      std::copy(cur.data() + (pos - start) * d, cur.data() + (pos - start + 1) * d, st_.hk[k].data() + pos * d);
    st_.mtp[k].truncate(keep);
    st_.mtp_n[k] = keep;
    prev_start = start;
  }
  return {};
}

SLM_INLINE status nam56r_model::session::make_state(state& s, const session_options& o) const {
  const nam56r_model& m = *m_;
  SLM_TRY(m.stack_.init_caches(s.layers, o));
  s.mtp.resize(m.mtp_.size());
  for (std::size_t i = 0; i < m.mtp_.size(); ++i) SLM_TRY(m.mtp_[i].attn.init_cache(s.mtp[i], o));
  s.mtp_n.assign(m.mtp_.size(), 0);
  s.hk.resize(m.mtp_.size());
  return {};
}

SLM_INLINE std::uint64_t nam56r_model::session::fingerprint(const state& s) const {
  const nam56r_model& m = *m_;
  const nam56r_config& c = m.cfg_;
  state_hasher h;
  h.add(std::string_view("slm nam56r session"));
  for (std::size_t v : {c.vocab_size, c.hidden_size, c.num_layers, c.mtp_num_layers, c.kv_lora_rank,
                        c.qk_pos_emb_head_dim, c.dsa_indexer_head_dim, c.mamba_state_dim, c.mamba_head_dim,
                        c.mamba_expand, c.mamba_num_groups, c.mamba3_mimo_rank, c.m2rnn_k_head_dim,
                        c.m2rnn_v_head_dim, c.m2rnn_num_heads, c.m2rnn_conv_kernel, std::size_t{c.ngram_hash.has_value()}})
    h.add(static_cast<std::uint64_t>(v));
  h.add(static_cast<std::uint64_t>(opt_.kv));
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    h.add(static_cast<std::uint64_t>(c.plan.layers[i].kind));
    s.layers[i].fingerprint(h);  // a MoE layer's (empty) cache adds nothing
  }
  for (const auto& c2 : s.mtp) c2.fingerprint(h);
  return h.value();
}

SLM_INLINE status nam56r_model::session::write_records(state_writer& w, const state& s) const {
  const nam56r_model& m = *m_;
  const std::size_t d = m.cfg_.hidden_size;
  auto record = [&w](const auto& cache) -> status {
    SLM_TRY(w.kind(cache.kind()));
    return cache.save(w);
  };
  for (std::size_t i = 0; i < s.layers.size(); ++i)  // a MoE layer's is "none" and empty
    if (status st = record(s.layers[i]); !st.ok()) return std::move(st).with_context(cat("session state: layer ", i));
  for (std::size_t k = 0; k < s.mtp.size(); ++k) {
    SLM_TRY(w.kind("mtp"));
    SLM_TRY(s.mtp[k].save(w));
    SLM_TRY(w.f32_rows(s.hk[k].data(), s.mtp_n[k], d));
  }
  SLM_TRY(w.kind("history"));
  SLM_TRY(w.u64(s.tokens.size()));
  SLM_TRY(w.i32(s.tokens.data(), s.tokens.size()));
  return w.f32_rows(s.hf.data(), m.mtp_.empty() ? 0 : s.tokens.size(), d);
}

SLM_INLINE status nam56r_model::session::read_records(state_reader& r, state& fresh, std::size_t position) const {
  const nam56r_model& m = *m_;
  const std::size_t d = m.cfg_.hidden_size, V = m.cfg_.vocab_size;
  auto cache_record = [&](auto& cache, const std::string& where) -> status {
    SLM_TRY(expect_record(r, cache.kind(), where));
    if (auto st = cache.load(r); !st.ok()) return std::move(st).with_context(where);
    if (cache.size() != position)
      return make_error(errc::format_error, where, " holds ", cache.size(), " positions, the header says ", position);
    return {};
  };
  for (std::size_t i = 0; i < fresh.layers.size(); ++i) {
    const std::string where = cat("layer ", i, " (", to_string(m.cfg_.plan.layers[i].kind), ")");
    if (m.stack_.layers[i].has_mixer) SLM_TRY(cache_record(fresh.layers[i], where));
    else SLM_TRY(expect_record(r, "none", where));
  }
  for (std::size_t k = 0; k < fresh.mtp.size(); ++k) {
    const std::string where = cat("MTP depth ", k + 1);
    SLM_TRY(expect_record(r, "mtp", where));
    if (auto st = fresh.mtp[k].load(r); !st.ok()) return std::move(st).with_context(where);
    const std::size_t n = fresh.mtp[k].size();
    if (n > verified_len(k, position))
      return make_error(errc::format_error, where, " holds ", n, " positions, at position ", position,
                        " it can hold at most ", verified_len(k, position));
    fresh.mtp_n[k] = n;
    if (auto st = r.f32_rows(fresh.hk[k], n, d, "MTP hidden rows"); !st.ok()) return std::move(st).with_context(where);
  }
  SLM_TRY(expect_record(r, "history", "the history record"));
  std::size_t count = 0;
  SLM_TRY(r.size(count, "token count"));
  if (count != position)
    return make_error(errc::format_error, "the history holds ", count, " tokens, the header says ", position);
  SLM_TRY(r.need_items(count, sizeof(std::int32_t), "token ids"));
  fresh.tokens.resize(count);
  SLM_TRY(r.i32(fresh.tokens.data(), count, "token ids"));
  for (std::size_t t = 0; t < count; ++t)
    if (fresh.tokens[t] < 0 || static_cast<std::size_t>(fresh.tokens[t]) >= V)
      return make_error(errc::format_error, "history token ", t, " is ", fresh.tokens[t], ", outside the vocabulary [0, ",
                        V, ")");
  return r.f32_rows(fresh.hf, m.mtp_.empty() ? 0 : position, d, "final hidden rows");
}

SLM_INLINE void nam56r_model::session::truncate_state(state& s, std::size_t len) const noexcept {
  for (auto& c : s.layers) c.truncate(len);
  if (s.tokens.size() > len) s.tokens.resize(len);
  for (std::size_t k = 0; k < s.mtp.size(); ++k) {  // a depth keeps only positions whose inputs remain
    s.mtp_n[k] = std::min(s.mtp_n[k], verified_len(k, len));
    s.mtp[k].truncate(s.mtp_n[k]);
  }
}

SLM_INLINE status nam56r_model::session::embed(std::span<const std::int32_t> ids, const std::int32_t* hist_seq,
                                               std::size_t j0, float* out, const structure_inputs* side,
                                               compute_context& cx) {
  const nam56r_model& m = *m_;
  const std::size_t d = m.cfg_.hidden_size, T = ids.size();
  for (std::size_t t = 0; t < T; ++t)
    dequantize_row(m.word_, static_cast<std::size_t>(ids[t]), std::span<float>(out + t * d, d));
  if (m.ngram_) {
    ngram_history h;
    for (std::size_t i = 0; i < h.prev.size(); ++i) h.prev[i] = j0 > i ? hist_seq[j0 - 1 - i] : 0;
    h.n = j0;
    SLM_TRY(m.ngram_->add_to(ids, h, out, ws_, cx));
  }
  if (m.structure_ && side) SLM_TRY(m.structure_->add_to(*side, T, out, ws_, cx));
  return {};
}

SLM_INLINE status nam56r_model::session::sublayers(const mtp_depth& md, std::size_t T, attention::cache& kc,
                                                   compute_context& cx) {
  const std::size_t d = m_->cfg_.hidden_size;
  SLM_TRY(xn_.resize(T * d));
  md.attn_norm.apply(h_.data(), T, d, d, xn_.data(), d);  // the identity where declared bare
  SLM_TRY(md.attn.forward(xn_.data(), T, y_.data(), kc, ws_.proj, ws_.attn, ws_.index, cx, opt_.mla));  // [T, d] -> [T, d]
  for (std::size_t i = 0; i < T * d; ++i) h_[i] += y_[i];
  md.mlp_norm.apply(h_.data(), T, d, d, xn_.data(), d);
  SLM_TRY(md.mlp.forward(xn_.data(), T, y_.data(), ws_.ffn, cx));  // [T, d] -> [T, d]
  for (std::size_t i = 0; i < T * d; ++i) h_[i] += y_[i];
  return {};
}

SLM_INLINE status nam56r_model::session::run(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                             compute_context& cx, const structure_inputs& side, std::size_t hidden_rows,
                                             float* hidden) {
  const nam56r_model& m = *m_;
  const nam56r_config& c = m.cfg_;
  const std::size_t T = ids.size(), d = c.hidden_size, pos0 = pos_;
  SLM_TRY(h_.resize(T * d));
  SLM_TRY(embed(ids, st_.tokens.data(), pos0, h_.data(), &side, cx));
  SLM_TRY(m.stack_.forward(h_.data(), T, d, st_.layers, xn_, y_, ws_, cx));
  float* h = h_.data();
  float* xn = xn_.data();
  m.final_norm_.apply(h, T, d, d, xn, d);
  if (!m.mtp_.empty()) {  // the final-normed hidden of every position feeds MTP depth 1
    SLM_TRY(st_.hf.resize(std::max(st_.hf.size(), (pos0 + T) * d)));
    std::copy(xn, xn + T * d, st_.hf.data() + pos0 * d);
  }
  if (hidden_rows > 0) std::copy(xn + (T - hidden_rows) * d, xn + T * d, hidden);
  if (rows > 0) SLM_TRY(m.head_.apply(xn + (T - rows) * d, rows, logits, cx));  // [rows, d] x [d, V] -> [rows, V]
  return {};
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm

// Compiled mode: the generator of this model's session is compiled by the library
// (slm/generate/generator_instances.hpp).
#define SLM_NAM56R_HPP_INCLUDED 1
#include "slm/generate/generator_instances.hpp"
