// slm/models/nanochat/model.hpp - the nanochat-lineage GPT (apstenku123/nanochat `nanochat/gpt.py`;
// spec nam56r.md §2.8-§2.10, §4.2): config, model and inference session.
//
// A model directory is config.json = {"model_type": "nanochat", ...GPTConfig fields...}
// and model.safetensors with nanochat's state-dict names (transformer.wte.weight,
// transformer.h.{i}.attn.* / .mlp.* / .engram.* / .mhc.*, lm_head.weight, resid_lambdas,
// x0_lambdas, mtp.proj.weight, mtp.block.*). wte / lm_head may have more rows than
// vocab_size (nanochat pads the vocabulary to a multiple of 64); logits have vocab_size
// columns.
//
// Forward (all norms parameter-free RMSNorm, eps = f32 machine epsilon, as nanochat run
// in f32; on CUDA nanochat runs bf16 and its eps is then bf16's). The blocks run on the
// layer stack (models/stack.hpp): the mixer and MLP are its two slots, and nanochat's block
// policy (models/nanochat/block.hpp) adds the lambdas before them and Engram and mHC after:
//   x = rms(wte[ids]);  x0 = x
//   per block i:  x = resid_lambdas[i] x + x0_lambdas[i] x0
//                 h = rms(x);  x_attn = x + Mixer(h);  base = x_attn + MLP(rms(x_attn))
//                 engram: eng = base + Engram(h)                       (layers/engram.hpp)
//                 mHC:    x = mix([base, x, (eng)])                    (layers/mhc.hpp)
//                 else    x = eng or base
//   logits = 15 tanh(lm_head(rms(x))[:, :vocab] / 15)
// Mixer: CausalSelfAttention (GQA; RoPE by -theta on the two halves with bf16-rounded
// cos/sin, then parameter-free QK RMSNorm; scale 1/sqrt(hd); sliding window (W, 0): a
// query sees W keys to its left plus itself), DeepSeekSparseAttention (the same plus a
// lightning indexer, layers >= dsa_start_layer) or Mamba2Layer (models/nanochat/mamba.hpp,
// layers whose mamba_pattern letter is M). MLP: relu(c_fc x)^2 -> c_proj.
//
// Two entry points:
//  * nanochat_model::forward_uncached: GPT.forward without a KV cache in eval mode, the
//    function the golden logits come from. DSA layers take nanochat's sparse training path
//    when it does (top_k = max(int(T ratio), local_window), sparse iff top_k + 32 < T <=
//    4096): indexer top-k (see indexer_topk for what its "local window" really boosts),
//    then a softmax over ALL keys with a log(1e-6) bias on the unselected and the future
//    ones (nanochat's small causal leak, reproduced). mHC pools
//    over all T tokens (non-causal, as training).
//  * nanochat_model::session: inference with a KV cache. DSA layers attend densely (as
//    nanochat does whenever a cache is present); Mamba layers keep their recurrent states;
//    Engram keeps its n-gram history across calls (nanochat's own Engine drops it: its
//    cached decode runs the branch on the current call's tokens only - a train/inference
//    mismatch of nanochat that this session does not copy); mHC pools each call over
//    every token of the session so far, the call's included (the mean over positions
//    [0, position() + T)); for a prefill from position 0 that is exactly the no-cache
//    forward of those tokens, and nanochat's cached prefill. No incremental form of
//    mHC's non-causal pooling is exact: later calls see weights pooled over the prefix,
//    earlier tokens are not recomputed, so a session's logits depend on how the tokens
//    were split into calls (rolling back and re-feeding the same calls reproduces them).
//    Recurrent state (Mamba, Engram) rolls back within session_options::rollback_tokens
//    (layers/recurrent_cache.hpp); KV rows and the mHC branch history always.
//    Session state: snapshot()/restore(), save()/saved_size()/load() with the decoder
//    session's semantics and checks (models/hf/model.hpp); a snapshot is the saved blob held in
//    memory. The blob is models/hf/model.hpp's envelope with session kind 2 (nanochat) and per
//    layer, in order: "gqa" (attention and DSA: u64 n, keys, values; the decoder's GQA
//    record) or "ncmamba" (the recurrent record with its rollback history); "engram"
//    (Engram layers: the recurrent record of the n-gram history); "mhc" (mHC layers: an
//    f32 rows block of the branch rows [position, N x C] that each call pools over).
//  * nanochat_model::mtp_logits: the MTP head (mtp.py, D = 1) on final-normed hidden
//    states h [T, C] and the next ids x_{t+1} [T]: logits predicting x_{t+2}.
//
// Threading: a loaded model is immutable and shareable; a session belongs to one thread.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/layers/attention.hpp"
#include "slm/core/buffer.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/layers/engram.hpp"
#include "slm/io/config_reader.hpp"
#include "slm/io/json.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/mhc.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/models/bind.hpp"
#include "slm/models/nanochat/bind.hpp"
#include "slm/models/nanochat/block.hpp"
#include "slm/models/nanochat/mamba.hpp"
#include "slm/models/session.hpp"
#include "slm/models/stack.hpp"
#include "slm/core/numeric.hpp"
#include "slm/formats/quant_config.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/core/status.hpp"

namespace slm {

// nanochat's rotary table: inv_freq_i = 1 / theta^(2i / hd) (f32, as torch), angle =
// position x inv_freq (f32 product), cos and sin rounded to bf16 (nanochat keeps them in
// bf16). Applied to the two halves of a head: y1 = x1 cos + x2 sin, y2 = -x1 sin + x2 cos.
struct nanochat_rope {
  std::vector<float> inv_freq;  // [hd / 2]

  static nanochat_rope make(double theta, std::size_t head_dim);
  // cos, sin [hd / 2] at one position (bf16 values widened to f32).
  void table(std::size_t pos, float* c, float* s) const noexcept;
  // Rotates n_heads heads of hd values (contiguous) with the table c, s.
  static void rotate(float* x, std::size_t n_heads, std::size_t hd, const float* c, const float* s) noexcept;
};

struct nanochat_attention_config {
  std::size_t n_embd = 0, n_head = 0, n_kv_head = 0;
  long long window_left = -1;  // (W, 0): W keys to the left plus the query; -1: unlimited
  double rope_theta = 10000.0;
  bool dsa = false;            // DeepSeekSparseAttention (adds the lightning indexer)
  double dsa_top_k_ratio = 0.5;
  std::size_t dsa_local_window = 128, dsa_indexer_heads = 16, dsa_indexer_dim = 32;

  std::size_t head_dim() const noexcept { return n_head ? n_embd / n_head : 0; }
  status validate() const;
};

// KV rows of one attention layer (positions 0 .. n): a GQA layer's cache (layers/attention.hpp),
// whose session-state members (fingerprint, copy, save, load) the session uses.
using nanochat_kv = gqa_attention::cache;

// CausalSelfAttention / DeepSeekSparseAttention (nanochat `gpt.py`, `sparse_attention.py`).
class nanochat_attention {
 public:
  nanochat_attention_config cfg;
  linear c_q, c_k, c_v, c_proj;
  linear idx_q, idx_k, idx_w;  // DSA lightning indexer: [I*Di, C], [Di, C], [I, C]
  nanochat_rope rope;

  // `<prefix>.c_q.weight` etc. (DSA: `<prefix>.indexer.{q,k,w}_proj.weight`).
  static result<nanochat_attention> load(const checkpoint& ck, std::string_view prefix, const nanochat_attention_config& c);

  status init_cache(nanochat_kv& kv, kv_dtype type, std::size_t reserve_tokens) const;

  // As a part of the layer stack (models/stack.hpp's mixer_part): the cache the session's
  // options ask for, and the forward that takes nanochat's training path where the call
  // says it is a forward without a cache (workspace::uncached_forward).
  using cache = nanochat_kv;
  template <class Options>
  status init_cache(nanochat_kv& kv, const Options& o) const {
    return init_cache(kv, o.kv, o.reserve_tokens);
  }
  status forward(const float* h, std::size_t T, float* out, nanochat_kv& kv, workspace& ws, compute_context& cx) const {
    return forward(h, T, out, kv, ws.uncached_forward, ws, cx);
  }

  // nanochat's top_k for a no-cache call of T tokens, and whether it takes the sparse path.
  std::size_t top_k(std::size_t T) const noexcept;
  bool sparse_path(std::size_t T) const noexcept { return cfg.dsa && T > top_k(T) + 32 && T <= 4096; }

  // The indexer's selection for a no-cache call: sel [T, min(top_k, T)] key indices, per
  // query the top of I(t, s) = sum_j w_tj relu(q_tj . k_s) with future keys at -1e9 and
  // the "local window" at +1e9 (ties: see torch.topk below). nanochat computes the window
  // as dist = pos[None, :] - pos[:, None], i.e. dist[t, s] = s - t (its comment says
  // t - s), so the boosted keys are s in [t, t + local_window): the query itself and
  // future keys, which the causal mask then drops. The effect (reproduced, as the golden
  // selection shows): the diagonal plus the top (top_k - min(local_window, T - t))
  // earlier keys by importance; the keys just before t are NOT forced in.
  status indexer_topk(const float* h, std::size_t T, std::int32_t* sel, workspace& ws, compute_context& cx) const;

  // h [T, C] at positions kv.n .. kv.n + T -> out [T, C]; appends T rows to kv. With
  // training_path (a no-cache call from position 0), a DSA layer takes nanochat's sparse
  // path when sparse_path(T); otherwise attention is dense (windowed).
  status forward(const float* h, std::size_t T, float* out, nanochat_kv& kv, bool training_path, workspace& ws,
                 compute_context& cx) const;

  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("c_q", c_q, true);
    fn("c_k", c_k, true);
    fn("c_v", c_v, true);
    fn("c_proj", c_proj, true);
    if (cfg.dsa) {
      fn("indexer.q_proj", idx_q, true);
      fn("indexer.k_proj", idx_k, true);
      fn("indexer.w_proj", idx_w, true);
    }
  }

 private:
  // nanochat's sparse training path: keys kept = top-k set (causal part) plus the
  // diagonal get bias 0, every other key - future ones included - log(1e-6); softmax over
  // all T keys (SDPA with an additive mask, no causal flag). The window is not applied.
  status sparse_attend(const float* h, std::size_t T, const float* q, const float* k, const float* v, float* att,
                       float scale, workspace& ws, compute_context& cx) const;
};

// MLP: relu(c_fc x)^2 -> c_proj.
struct nanochat_mlp {
  linear c_fc, c_proj;

  static result<nanochat_mlp> load(const checkpoint& ck, std::string_view prefix, std::size_t C);
  status forward(const float* x, std::size_t T, float* y, workspace& ws, compute_context& cx) const;
};

// The MTP head (mtp.py, D = 1): proj [C, 2C] on [rms(h); rms(wte[next])] (hidden first),
// one plain block (attention with a full causal window, positions 0.., then the MLP),
// rms, the shared lm_head, softcap 15.
class nanochat_mtp_head {
 public:
  linear proj;
  nanochat_attention attn;
  nanochat_mlp mlp;

  // `<prefix>.proj.weight`, `<prefix>.block.attn.*`, `<prefix>.block.mlp.*` (empty prefix:
  // the bare names). The block is always plain attention (nanochat builds it with DSA,
  // Engram and mHC off).
  static result<nanochat_mtp_head> load(const checkpoint& ck, std::string_view prefix, nanochat_attention_config c);

  // h [T, C] (the main model's final-normed hidden), next_ids [T] (x_{t+1}) ->
  // logits [T, vocab] predicting x_{t+2}; wte and lm_head have at least vocab rows.
  status forward(const float* h, std::span<const std::int32_t> next_ids, const weight_matrix& wte, const linear& lm_head,
                 std::size_t vocab, float* logits, workspace& ws, compute_context& cx) const;
};

// GPTConfig (every field nanochat's dataclass has; `model_type` must be "nanochat").
struct nanochat_config {
  std::size_t sequence_len = 0, vocab_size = 0, n_layer = 0, n_head = 0, n_kv_head = 0, n_embd = 0;
  std::string window_pattern = "L";
  bool engram_enabled = false;
  std::string engram_layers_spec;
  std::string engram_ngram_orders = "2,3,4";
  std::size_t engram_bottleneck_dim = 0;
  double engram_dropout = 0.0;
  bool mhc_enabled = false;
  std::size_t mhc_num_branches = 0, mhc_sinkhorn_iters = 5;
  double mhc_temperature = 1.0, mhc_epsilon = 1e-6, mhc_blend_alpha = 1.0;
  bool mtp_enabled = false;
  double mtp_lambda = 0.3;
  bool dsa_enabled = false;
  std::size_t dsa_start_layer = 7;
  double dsa_top_k_ratio = 0.5;
  std::size_t dsa_local_window = 128, dsa_indexer_heads = 16, dsa_indexer_dim = 32;
  bool mamba_enabled = false;
  std::string mamba_pattern;
  std::size_t mamba_d_state = 64, mamba_d_conv = 4, mamba_expand = 2, mamba_headdim = 128, mamba_ngroups = 1,
              mamba_chunk_size = 256;
  bool mamba3_qknorm = false, mamba3_bias = false, mamba3_complex_rope = false, mamba3_trapezoidal = false;
  std::size_t window_long = 0, window_short = 0;
  double rope_theta = 10000.0;
  std::string activation = "relu2";

  // Derived (from_json fills them).
  enum class mixer : std::uint8_t { attention, dsa, mamba };
  std::vector<mixer> layer_kinds;         // per layer
  std::vector<long long> window_left;     // per layer: W of (W, 0); -1 for Mamba layers
  std::vector<bool> engram_layer;         // per layer
  std::size_t padded_vocab() const noexcept { return (vocab_size + 63) / 64 * 64; }
  std::size_t head_dim() const noexcept { return n_head ? n_embd / n_head : 0; }

  static result<nanochat_config> from_json(const json::value& j);

  nanochat_attention_config attention_config(std::size_t layer) const;
  nanochat_mamba_config mamba_config() const;
  mhc_config mhc() const;

 private:
  static std::string upper(std::string s);
  status derive();
};

class nanochat_model : public movable_model<nanochat_model> {
 public:
  using mixer = nanochat_config::mixer;
  // The layer stack (models/stack.hpp): per layer, attention (plain or DSA) or Mamba, then
  // the MLP, inside nanochat's block (models/nanochat/block.hpp).
  using mixer_part = attention_variant<nanochat_attention, nanochat_mamba_layer>;
  using stack_type = layer_stack<mixer_part, nanochat_mlp, nanochat_block>;

  static result<nanochat_model> load(const std::filesystem::path& dir, const checkpoint_options& opt = {});

  static result<nanochat_model> from_checkpoint(checkpoint&& ck_in);

  const nanochat_config& config() const noexcept { return cfg_; }
  std::size_t vocab() const noexcept { return cfg_.vocab_size; }
  const checkpoint& weights() const noexcept { return *ck_; }
  bool has_mtp() const noexcept { return cfg_.mtp_enabled; }
  const stack_type& stack() const noexcept { return stack_; }

  // GPT.forward(ids) without a cache (eval): logits [T, vocab] (softcapped).
  status forward_uncached(std::span<const std::int32_t> ids, float* logits, compute_context& cx) const;

  // The MTP head: final-normed hidden h [T, C] and next ids [T] -> logits [T, vocab].
  status mtp_logits(const float* h, std::span<const std::int32_t> next_ids, float* logits, compute_context& cx) const;

  class session;
  session new_session(session_options o = {}) const;

 private:
  // Per-layer state of a sequence: the mixer's cache (KV rows or the Mamba state) and the
  // block's (Engram history, mHC rows); then the scratch of a call.
  struct sequence {
    std::vector<stack_type::cache> caches;
    std::vector<nanochat_block::state> blocks;
    floats x, x0, h, y, input, normed, eng, logit_rows, pooled;
    workspace ws;
  };

  status init_sequence(sequence& s, const session_options& o) const;
  // Back to position len (exact within the kept recurrent history: callers check).
  static void truncate(sequence& s, std::size_t len) noexcept;

  // Runs ids at positions pos0.. through every block; the logits of the last `rows`
  // tokens into logits [rows, vocab]. training_path: the no-cache forward (DSA sparse
  // path where nanochat takes it). Advances the caches; the position is the caller's.
  status run(sequence& s, std::size_t pos0, std::span<const std::int32_t> ids, std::size_t rows, float* logits,
             bool training_path, compute_context& cx) const;

  std::unique_ptr<checkpoint> ck_;
  nanochat_config cfg_;
  weight_matrix wte_;
  linear lm_head_;
  stack_type stack_;
  nanochat_mtp_head mtp_;
};

// Inference with a KV cache (see the top of this file for what each layer keeps;
// models/session.hpp: options, rollback, snapshot, save / load).
class nanochat_model::session : public model_session<nanochat_model::session, nanochat_model, nanochat_model::sequence> {
  using base = model_session<session, nanochat_model, sequence>;
  friend base;

 public:
  // nanochat precomputes RoPE for 10 x sequence_len positions and asserts beyond.
  explicit session(const nanochat_model& m, session_options o = {})
      : base(m, o, 10 * m.cfg_.sequence_len, m.ck_ ? m.ck_->check_unchanged() : status{}) {}

  // Runs ids at positions position() .. position() + T; the logits of the last `rows`
  // tokens into logits [rows, vocab]. Any error leaves the session as it was.
  status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx);

 private:
  static constexpr state_format::session_kind saved_kind = state_format::session_kind::nanochat;

  // ---- What models/session.hpp asks of a family ----
  status make_state(sequence& s, const session_options& o) const { return m_->init_sequence(s, o); }
  void truncate_state(sequence& s, std::size_t len) const noexcept { truncate(s, len); }
  // Every mixer's cache and the Engram caches (mHC rows always roll back).
  template <class Fn>
  void for_each_cache(const sequence& s, Fn&& fn) const {
    for (std::size_t i = 0; i < s.caches.size(); ++i) {
      fn(i, s.caches[i]);
      if (s.blocks[i].engram.initialized()) fn(i, s.blocks[i].engram);
    }
  }
  // The config's dimensions, per layer its mixer, window and branches, each cache's
  // layout, the KV dtype.
  std::uint64_t fingerprint(const sequence& s) const;
  std::uint64_t record_count() const noexcept;
  status write_records(state_writer& w, const sequence& s) const;
  status read_records(state_reader& r, sequence& fresh, std::size_t position) const;
};

inline nanochat_model::session nanochat_model::new_session(session_options o) const { return session(*this, o); }

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE nanochat_rope nanochat_rope::make(double theta, std::size_t head_dim) {
  nanochat_rope r;
  r.inv_freq.resize(head_dim / 2);
  for (std::size_t i = 0; i < head_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    r.inv_freq[i] = 1.0f / static_cast<float>(std::pow(theta, static_cast<double>(e)));
  }
  return r;
}

SLM_INLINE void nanochat_rope::table(std::size_t pos, float* c, float* s) const noexcept {
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    const float a = static_cast<float>(pos) * inv_freq[i];
    c[i] = bf16_to_f32(f32_to_bf16(static_cast<float>(std::cos(static_cast<double>(a)))));
    s[i] = bf16_to_f32(f32_to_bf16(static_cast<float>(std::sin(static_cast<double>(a)))));
  }
}

SLM_INLINE void nanochat_rope::rotate(float* x, std::size_t n_heads, std::size_t hd, const float* c,
                                      const float* s) noexcept {
  const std::size_t half = hd / 2;
  for (std::size_t h = 0; h < n_heads; ++h) {
    float* v = x + h * hd;
    for (std::size_t i = 0; i < half; ++i) {
      const float x1 = v[i], x2 = v[i + half];
      v[i] = x1 * c[i] + x2 * s[i];
      v[i + half] = x1 * (-s[i]) + x2 * c[i];
    }
  }
}

SLM_INLINE status nanochat_attention_config::validate() const {
  if (n_embd == 0 || n_head == 0 || n_kv_head == 0)
    return make_error(errc::invalid_argument, "nanochat attention: n_embd, n_head and n_kv_head must be positive");
  if (n_embd % n_head != 0)
    return make_error(errc::invalid_argument, "nanochat attention: n_embd ", n_embd, " is not a multiple of n_head ",
                      n_head);
  if (n_kv_head > n_head || n_head % n_kv_head != 0)
    return make_error(errc::invalid_argument, "nanochat attention: n_head ", n_head, " is not a multiple of n_kv_head ",
                      n_kv_head);
  if (head_dim() % 2 != 0)
    return make_error(errc::invalid_argument, "nanochat attention: head_dim ", head_dim(),
                      " must be even (RoPE halves)");
  if (!(rope_theta > 0) || !std::isfinite(rope_theta))
    return make_error(errc::invalid_argument, "nanochat attention: rope_theta must be positive, got ", rope_theta);
  if (dsa && (dsa_indexer_heads == 0 || dsa_indexer_dim == 0 || !(dsa_top_k_ratio >= 0) ||
              !std::isfinite(dsa_top_k_ratio)))
    return make_error(errc::invalid_argument, "nanochat DSA: indexer heads and dim must be positive and ",
                      "dsa_top_k_ratio a non-negative number");
  return {};
}

SLM_INLINE result<nanochat_attention> nanochat_attention::load(const checkpoint& ck, std::string_view prefix,
                                                               const nanochat_attention_config& c) {
  SLM_TRY(c.validate());
  nanochat_attention a;
  a.cfg = c;
  const std::size_t C = c.n_embd, hd = c.head_dim(), kvd = c.n_kv_head * hd;
  struct item { linear* dst; const char* name; std::size_t out, in; };
  const item items[] = {{&a.c_q, "c_q", c.n_head * hd, C}, {&a.c_k, "c_k", kvd, C}, {&a.c_v, "c_v", kvd, C},
                        {&a.c_proj, "c_proj", C, c.n_head * hd}};
  for (const item& it : items) SLM_TRY(load_linear_into(*it.dst, ck, join_module(prefix, it.name), it.out, it.in));
  if (c.dsa) {
    const item idx[] = {{&a.idx_q, "indexer.q_proj", c.dsa_indexer_heads * c.dsa_indexer_dim, C},
                        {&a.idx_k, "indexer.k_proj", c.dsa_indexer_dim, C},
                        {&a.idx_w, "indexer.w_proj", c.dsa_indexer_heads, C}};
    for (const item& it : idx) SLM_TRY(load_linear_into(*it.dst, ck, join_module(prefix, it.name), it.out, it.in));
  }
  a.rope = nanochat_rope::make(c.rope_theta, hd);
  return a;
}

SLM_INLINE status nanochat_attention::init_cache(nanochat_kv& kv, kv_dtype type, std::size_t reserve_tokens) const {
  kv.k.type = kv.v.type = type;
  kv.k.width = kv.v.width = cfg.n_kv_head * cfg.head_dim();
  kv.k.heads = kv.v.heads = cfg.n_kv_head;
  kv.n = 0;
  SLM_TRY(kv.k.reserve(reserve_tokens));
  return kv.v.reserve(reserve_tokens);
}

SLM_INLINE std::size_t nanochat_attention::top_k(std::size_t T) const noexcept {
  const auto r = static_cast<std::size_t>(static_cast<double>(T) * cfg.dsa_top_k_ratio);  // int() truncates
  return std::max(r, cfg.dsa_local_window);
}

SLM_INLINE status nanochat_attention::indexer_topk(const float* h, std::size_t T, std::int32_t* sel, workspace& ws,
                                                   compute_context& cx) const {
  if (!cfg.dsa) return make_error(errc::invalid_argument, "nanochat attention: indexer_topk on a layer without DSA");
  const std::size_t I = cfg.dsa_indexer_heads, Di = cfg.dsa_indexer_dim, K = std::min(top_k(T), T);
  SLM_TRY(ws.index.resize(T * (I * Di + Di + I) + T + T));
  float* q = ws.index.data();
  float* k = q + T * I * Di;
  float* w = k + T * Di;
  float* imp = w + T * I;
  std::int32_t* order = reinterpret_cast<std::int32_t*>(imp + T);  // T int32 in T floats
  SLM_TRY(idx_q.apply(h, T, q, cx));  // [T, C] x [C, I*Di] -> [T, I*Di]
  SLM_TRY(idx_k.apply(h, T, k, cx));  // [T, C] x [C, Di] -> [T, Di]
  SLM_TRY(idx_w.apply(h, T, w, cx));  // [T, C] x [C, I] -> [T, I]
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t s = 0; s < T; ++s) {
      float v = 0.0f;
      for (std::size_t j = 0; j < I; ++j) {
        const float* qj = q + (t * I + j) * Di;
        float d = 0.0f;
        for (std::size_t i = 0; i < Di; ++i) d += qj[i] * k[s * Di + i];
        v += w[t * I + j] * std::max(d, 0.0f);
      }
      if (s >= t && s - t < cfg.dsa_local_window) v = 1e9f;  // nanochat's "local window": see above
      else if (s > t) v = -1e9f;
      imp[s] = v;
    }
    // torch.topk on CPU: (value, index) pairs in index order, std::partial_sort when
    // k * 64 <= n, else std::nth_element at k - 1, comparing values only. Keys tied at
    // the boundary (exact zeros are common: relu) are split the way that algorithm
    // splits them; with the same C++ standard library (libstdc++) the set is the same.
    for (std::size_t s = 0; s < T; ++s) order[s] = static_cast<std::int32_t>(s);
    const auto greater = [&](std::int32_t a, std::int32_t b) { return imp[a] > imp[b]; };
    if (K * 64 <= T) std::partial_sort(order, order + K, order + T, greater);
    else if (K > 0) std::nth_element(order, order + (K - 1), order + T, greater);
    std::copy(order, order + K, sel + t * K);
  }
  return {};
}

SLM_INLINE status nanochat_attention::forward(const float* h, std::size_t T, float* out, nanochat_kv& kv,
                                              bool training_path, workspace& ws, compute_context& cx) const {
  const std::size_t H = cfg.n_head, Hkv = cfg.n_kv_head, hd = cfg.head_dim(), qd = H * hd, kvd = Hkv * hd;
  const std::size_t pos0 = kv.n;
  if (kv.k.width != kvd) return make_error(errc::invalid_argument, "nanochat attention: cache not initialized");
  if (kv.k.capacity() < pos0 + T) {
    SLM_TRY(kv.k.reserve(std::max(pos0 + T, 2 * kv.k.capacity())));
    SLM_TRY(kv.v.reserve(std::max(pos0 + T, 2 * kv.v.capacity())));
  }
  SLM_TRY(ws.proj.resize(T * (2 * qd + 2 * kvd) + hd));
  float* q = ws.proj.data();  // [T, H, hd]
  float* k = q + T * qd;      // [T, Hkv, hd]
  float* v = k + T * kvd;     // [T, Hkv, hd]
  float* att = v + T * kvd;   // [T, H, hd]
  float* cs = att + T * qd;   // cos [hd/2], sin [hd/2]
  SLM_TRY(c_q.apply(h, T, q, cx));  // [T, C] x [C, H*hd] -> [T, H*hd]
  SLM_TRY(c_k.apply(h, T, k, cx));  // [T, C] x [C, Hkv*hd] -> [T, Hkv*hd]
  SLM_TRY(c_v.apply(h, T, v, cx));  // [T, C] x [C, Hkv*hd] -> [T, Hkv*hd]
  for (std::size_t t = 0; t < T; ++t) {  // RoPE first, then the parameter-free QK norm
    rope.table(pos0 + t, cs, cs + hd / 2);
    nanochat_rope::rotate(q + t * qd, H, hd, cs, cs + hd / 2);
    nanochat_rope::rotate(k + t * kvd, Hkv, hd, cs, cs + hd / 2);
    detail::nanochat::rms_rows(q + t * qd, H, hd, q + t * qd);
    detail::nanochat::rms_rows(k + t * kvd, Hkv, hd, k + t * kvd);
  }
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  if (training_path && pos0 == 0 && sparse_path(T)) {
    SLM_TRY(sparse_attend(h, T, q, k, v, att, scale, ws, cx));
  } else {
    for (std::size_t t = 0; t < T; ++t) {
      kv.k.store(pos0 + t, k + t * kvd);
      kv.v.store(pos0 + t, v + t * kvd);
    }
    attention_problem p;
    p.T = T;
    p.H = H;
    p.group = H / Hkv;
    p.pos0 = pos0;
    p.window = cfg.window_left >= 0 ? static_cast<std::size_t>(cfg.window_left) + 1 : 0;
    p.scale = scale;
    p.q1 = q; p.q1_tok = qd; p.q1_head = hd; p.d1 = hd;
    p.k1 = kv_view::per_head(kv.k);
    p.v = kv_view::per_head(kv.v);
    p.dv = hd;
    p.out = att; p.out_tok = qd; p.out_head = hd;
    SLM_TRY(attend(p, ws.attn, cx));
  }
  SLM_TRY(c_proj.apply(att, T, out, cx));  // [T, H*hd] x [H*hd, C] -> [T, C]
  kv.n = pos0 + T;
  return {};
}

SLM_INLINE status nanochat_attention::sparse_attend(const float* h, std::size_t T, const float* q, const float* k,
                                                    const float* v, float* att, float scale, workspace& ws,
                                                    compute_context& cx) const {
  const std::size_t H = cfg.n_head, Hkv = cfg.n_kv_head, hd = cfg.head_dim(), qd = H * hd, kvd = Hkv * hd;
  const std::size_t K = std::min(top_k(T), T);
  // Scratch: selection [T, K] (int32 in float slots), bias [T, T], scores [T]; at most
  // 4096 x 4096 (sparse_path caps T), as nanochat's own mask.
  floats buf;
  SLM_TRY(buf.resize(T * K + T * T + T));
  auto* sel = reinterpret_cast<std::int32_t*>(buf.data());
  float* bias = buf.data() + T * K;
  float* sc = bias + T * T;
  SLM_TRY(indexer_topk(h, T, sel, ws, cx));
  const float off = std::log(1e-6f);
  std::fill(bias, bias + T * T, off);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t i = 0; i < K; ++i) {
      const auto s = static_cast<std::size_t>(sel[t * K + i]);
      if (s <= t) bias[t * T + s] = 0.0f;
    }
    bias[t * T + t] = 0.0f;
  }
  const std::size_t group = H / Hkv;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t hh = 0; hh < H; ++hh) {
      const float* qt = q + t * qd + hh * hd;
      const std::size_t g = hh / group;
      float m = -std::numeric_limits<float>::infinity();
      for (std::size_t s = 0; s < T; ++s) {
        const float* ks = k + s * kvd + g * hd;
        float d = 0.0f;
        for (std::size_t i = 0; i < hd; ++i) d += qt[i] * ks[i];
        sc[s] = d * scale + bias[t * T + s];
        m = std::max(m, sc[s]);
      }
      float l = 0.0f;
      float* o = att + t * qd + hh * hd;
      std::fill(o, o + hd, 0.0f);
      for (std::size_t s = 0; s < T; ++s) {
        const float e = std::exp(sc[s] - m);
        l += e;
        const float* vs = v + s * kvd + g * hd;
        for (std::size_t i = 0; i < hd; ++i) o[i] += e * vs[i];
      }
      for (std::size_t i = 0; i < hd; ++i) o[i] /= l;
    }
  return {};
}

SLM_INLINE result<nanochat_mlp> nanochat_mlp::load(const checkpoint& ck, std::string_view prefix, std::size_t C) {
  nanochat_mlp m;
  auto a = load_linear(ck, cat(prefix, ".c_fc"), 4 * C, C);
  if (!a.ok()) return std::move(a).take_error();
  auto b = load_linear(ck, cat(prefix, ".c_proj"), C, 4 * C);
  if (!b.ok()) return std::move(b).take_error();
  m.c_fc = std::move(*a);
  m.c_proj = std::move(*b);
  return m;
}

SLM_INLINE status nanochat_mlp::forward(const float* x, std::size_t T, float* y, workspace& ws,
                                        compute_context& cx) const {
  const std::size_t F = c_fc.out();
  SLM_TRY(ws.ffn.resize(T * F));
  float* u = ws.ffn.data();
  SLM_TRY(c_fc.apply(x, T, u, cx));  // [T, C] x [C, 4C] -> [T, 4C]
  for (std::size_t i = 0; i < T * F; ++i) {
    const float r = std::max(u[i], 0.0f);
    u[i] = r * r;
  }
  return c_proj.apply(u, T, y, cx);  // [T, 4C] x [4C, C] -> [T, C]
}

SLM_INLINE result<nanochat_mtp_head> nanochat_mtp_head::load(const checkpoint& ck, std::string_view prefix,
                                                             nanochat_attention_config c) {
  nanochat_mtp_head m;
  c.dsa = false;
  c.window_left = -1;
  auto p = load_linear(ck, join_module(prefix, "proj"), c.n_embd, 2 * c.n_embd);
  if (!p.ok()) return std::move(p).take_error();
  m.proj = std::move(*p);
  auto a = nanochat_attention::load(ck, join_module(prefix, "block.attn"), c);
  if (!a.ok()) return std::move(a).take_error();
  m.attn = std::move(*a);
  auto f = nanochat_mlp::load(ck, join_module(prefix, "block.mlp"), c.n_embd);
  if (!f.ok()) return std::move(f).take_error();
  m.mlp = std::move(*f);
  return m;
}

SLM_INLINE status nanochat_mtp_head::forward(const float* h, std::span<const std::int32_t> next_ids,
                                             const weight_matrix& wte, const linear& lm_head, std::size_t vocab,
                                             float* logits, workspace& ws, compute_context& cx) const {
  const std::size_t T = next_ids.size(), C = attn.cfg.n_embd;
  if (T == 0) return make_error(errc::invalid_argument, "mtp: no tokens");
  if (!h || !logits) return make_error(errc::invalid_argument, "mtp: null hidden states or logits");
  if (wte.cols != C || lm_head.in() != C || wte.rows < vocab || lm_head.out() < vocab)
    return make_error(errc::invalid_argument, "mtp: wte [", wte.rows, ", ", wte.cols, "] / lm_head [", lm_head.out(),
                      ", ", lm_head.in(), "] do not fit n_embd ", C, " and vocab ", vocab);
  for (std::size_t t = 0; t < T; ++t)
    if (next_ids[t] < 0 || static_cast<std::size_t>(next_ids[t]) >= vocab)
      return make_error(errc::out_of_range, "mtp: token id ", next_ids[t], " at index ", t,
                        " is outside the vocabulary [0, ", vocab, ")");
  floats comb, x, y, hn, head;
  SLM_TRY(comb.resize(T * 2 * C));
  SLM_TRY(x.resize(T * C));
  SLM_TRY(y.resize(T * C));
  SLM_TRY(hn.resize(T * C));
  SLM_TRY(head.resize(T * lm_head.out()));
  for (std::size_t t = 0; t < T; ++t) {
    float* row = comb.data() + t * 2 * C;
    detail::nanochat::rms_row(h + t * C, row, C);
    dequantize_row(wte, static_cast<std::size_t>(next_ids[t]), std::span<float>(row + C, C));
    detail::nanochat::rms_row(row + C, row + C, C);
  }
  SLM_TRY(proj.apply(comb.data(), T, x.data(), cx));  // [T, 2C] x [2C, C] -> [T, C]
  nanochat_kv kv;
  SLM_TRY(attn.init_cache(kv, kv_dtype::f32, T));
  detail::nanochat::rms_rows(x.data(), T, C, hn.data());
  SLM_TRY(attn.forward(hn.data(), T, y.data(), kv, true, ws, cx));
  for (std::size_t i = 0; i < T * C; ++i) x[i] += y[i];
  detail::nanochat::rms_rows(x.data(), T, C, hn.data());
  SLM_TRY(mlp.forward(hn.data(), T, y.data(), ws, cx));
  for (std::size_t i = 0; i < T * C; ++i) x[i] += y[i];
  detail::nanochat::rms_rows(x.data(), T, C, hn.data());
  SLM_TRY(lm_head.apply(hn.data(), T, head.data(), cx));  // [T, C] x [C, Vpad] -> [T, Vpad]
  const std::size_t Vp = lm_head.out();
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t j = 0; j < vocab; ++j)
      logits[t * vocab + j] = detail::nanochat::softcap * std::tanh(head[t * Vp + j] / detail::nanochat::softcap);
  return {};
}

SLM_INLINE result<nanochat_config> nanochat_config::from_json(const json::value& j) {
  if (!j.is_object()) return make_error(errc::format_error, "config.json: not a JSON object");
  nanochat_config c;
  const std::string_view mt = j.get_string("model_type");
  if (mt != "nanochat")
    return make_error(errc::unsupported, "config.json: \"model_type\" is \"", mt, "\", expected \"nanochat\"");
  const config_reader r{j};
  SLM_TRY(r.size("sequence_len", c.sequence_len, true));
  SLM_TRY(r.size("vocab_size", c.vocab_size, true));
  SLM_TRY(r.size("n_layer", c.n_layer, true));
  SLM_TRY(r.size("n_head", c.n_head, true));
  SLM_TRY(r.size("n_kv_head", c.n_kv_head, true));
  SLM_TRY(r.size("n_embd", c.n_embd, true));
  SLM_TRY(r.string("window_pattern", c.window_pattern));
  SLM_TRY(r.boolean("engram_enabled", c.engram_enabled));
  SLM_TRY(r.string("engram_layers", c.engram_layers_spec));
  SLM_TRY(r.string("engram_ngram_orders", c.engram_ngram_orders));
  SLM_TRY(r.size("engram_bottleneck_dim", c.engram_bottleneck_dim, false));
  SLM_TRY(r.number("engram_dropout", c.engram_dropout));
  SLM_TRY(r.boolean("mhc_enabled", c.mhc_enabled));
  SLM_TRY(r.size("mhc_num_branches", c.mhc_num_branches, false));
  SLM_TRY(r.size("mhc_sinkhorn_iters", c.mhc_sinkhorn_iters, false));
  SLM_TRY(r.number("mhc_temperature", c.mhc_temperature));
  SLM_TRY(r.number("mhc_epsilon", c.mhc_epsilon));
  SLM_TRY(r.number("mhc_blend_alpha", c.mhc_blend_alpha));
  SLM_TRY(r.boolean("mtp_enabled", c.mtp_enabled));
  SLM_TRY(r.number("mtp_lambda", c.mtp_lambda));
  SLM_TRY(r.boolean("dsa_enabled", c.dsa_enabled));
  SLM_TRY(r.size("dsa_start_layer", c.dsa_start_layer, false));
  SLM_TRY(r.number("dsa_top_k_ratio", c.dsa_top_k_ratio));
  SLM_TRY(r.size("dsa_local_window", c.dsa_local_window, false));
  SLM_TRY(r.size("dsa_indexer_heads", c.dsa_indexer_heads, false));
  SLM_TRY(r.size("dsa_indexer_dim", c.dsa_indexer_dim, false));
  SLM_TRY(r.boolean("mamba_enabled", c.mamba_enabled));
  SLM_TRY(r.string("mamba_pattern", c.mamba_pattern));
  SLM_TRY(r.size("mamba_d_state", c.mamba_d_state, false));
  SLM_TRY(r.size("mamba_d_conv", c.mamba_d_conv, false));
  SLM_TRY(r.size("mamba_expand", c.mamba_expand, false));
  SLM_TRY(r.size("mamba_headdim", c.mamba_headdim, false));
  SLM_TRY(r.size("mamba_ngroups", c.mamba_ngroups, false));
  SLM_TRY(r.size("mamba_chunk_size", c.mamba_chunk_size, false));
  SLM_TRY(r.boolean("mamba3_qknorm", c.mamba3_qknorm));
  SLM_TRY(r.boolean("mamba3_bias", c.mamba3_bias));
  SLM_TRY(r.boolean("mamba3_complex_rope", c.mamba3_complex_rope));
  SLM_TRY(r.boolean("mamba3_trapezoidal", c.mamba3_trapezoidal));
  SLM_TRY(r.size("window_long", c.window_long, false));
  SLM_TRY(r.size("window_short", c.window_short, false));
  SLM_TRY(r.number("rope_theta", c.rope_theta));
  SLM_TRY(r.string("activation", c.activation));
  SLM_TRY(c.derive());
  return c;
}

SLM_INLINE nanochat_attention_config nanochat_config::attention_config(std::size_t layer) const {
  nanochat_attention_config a;
  a.n_embd = n_embd;
  a.n_head = n_head;
  a.n_kv_head = n_kv_head;
  a.window_left = layer < window_left.size() ? window_left[layer] : -1;
  a.rope_theta = rope_theta;
  a.dsa = layer < layer_kinds.size() && layer_kinds[layer] == mixer::dsa;
  a.dsa_top_k_ratio = dsa_top_k_ratio;
  a.dsa_local_window = dsa_local_window;
  a.dsa_indexer_heads = dsa_indexer_heads;
  a.dsa_indexer_dim = dsa_indexer_dim;
  return a;
}

SLM_INLINE nanochat_mamba_config nanochat_config::mamba_config() const {
  nanochat_mamba_config m;
  m.n_embd = n_embd;
  m.d_state = mamba_d_state;
  m.d_conv = mamba_d_conv;
  m.expand = mamba_expand;
  m.headdim = mamba_headdim;
  m.ngroups = mamba_ngroups;
  m.qknorm = mamba3_qknorm;
  m.bias = mamba3_bias;
  m.complex_rope = mamba3_complex_rope;
  m.trapezoidal = mamba3_trapezoidal;
  m.rope_theta = rope_theta;
  return m;
}

SLM_INLINE mhc_config nanochat_config::mhc() const {
  mhc_config m;
  m.n_embd = n_embd;
  m.sinkhorn_iters = mhc_sinkhorn_iters;
  m.temperature = mhc_temperature;
  m.epsilon = mhc_epsilon;
  m.blend_alpha = mhc_blend_alpha;
  m.max_branches = mhc_num_branches;
  return m;
}

SLM_INLINE std::string nanochat_config::upper(std::string s) {
  for (char& ch : s) ch = (ch >= 'a' && ch <= 'z') ? static_cast<char>(ch - 'a' + 'A') : ch;
  return s;
}

SLM_INLINE status nanochat_config::derive() {
  if (sequence_len == 0 || vocab_size == 0 || n_layer == 0 || n_head == 0 || n_kv_head == 0 || n_embd == 0)
    return make_error(errc::format_error, "config.json: sequence_len, vocab_size, n_layer, n_head, n_kv_head and ",
                      "n_embd must be positive");
  if (vocab_size > (std::size_t{1} << 31))
    return make_error(errc::format_error, "config.json: vocab_size ", vocab_size, " exceeds 2^31");
  if (n_embd % n_head != 0 || (n_embd / n_head) % 2 != 0)
    return make_error(errc::format_error, "config.json: n_embd ", n_embd, " / n_head ", n_head,
                      " must be an even integer head_dim");
  if (n_kv_head > n_head || n_head % n_kv_head != 0)
    return make_error(errc::format_error, "config.json: n_head ", n_head, " is not a multiple of n_kv_head ", n_kv_head);
  if (!(rope_theta > 0)) return make_error(errc::format_error, "config.json: rope_theta must be positive");
  if (activation != "relu2")
    return make_error(errc::unsupported, "config.json: \"activation\" = \"", activation, "\" is not supported (relu2 is)");
  const std::string wp = upper(window_pattern);
  if (wp.empty()) return make_error(errc::format_error, "config.json: \"window_pattern\" is empty");
  for (char ch : wp)
    if (ch != 'S' && ch != 'L')
      return make_error(errc::format_error, "config.json: \"window_pattern\" = \"", window_pattern,
                        "\" may hold only S and L");
  std::string mp = upper(mamba_pattern);
  if (mamba_enabled && mp.empty()) mp = "AAM";  // nanochat's default when enabled
  for (char ch : mp)
    if (ch != 'A' && ch != 'M')
      return make_error(errc::format_error, "config.json: \"mamba_pattern\" = \"", mamba_pattern,
                        "\" may hold only A and M");
  const std::size_t L = window_long ? window_long : sequence_len;
  const std::size_t S = window_short ? window_short : L / 2;
  layer_kinds.assign(n_layer, mixer::attention);
  window_left.assign(n_layer, -1);
  for (std::size_t i = 0; i < n_layer; ++i) {
    if (!mp.empty() && mp[i % mp.size()] == 'M') {
      layer_kinds[i] = mixer::mamba;
      continue;
    }
    if (dsa_enabled && i >= dsa_start_layer) layer_kinds[i] = mixer::dsa;
    window_left[i] = static_cast<long long>(wp[i % wp.size()] == 'L' ? L : S);
  }
  if (layer_kinds.back() != mixer::mamba) window_left.back() = static_cast<long long>(L);  // last layer: long
  if (mtp_enabled && !mp.empty() && mp[0] == 'M')
    return make_error(errc::unsupported, "config.json: an MTP block built as a Mamba layer (mamba_pattern starts ",
                      "with M) is not supported");
  if (std::find(layer_kinds.begin(), layer_kinds.end(), mixer::mamba) != layer_kinds.end())
    if (status st = mamba_config().validate(); !st.ok()) return std::move(st).with_context("config.json");
  engram_layer.assign(n_layer, false);
  if (engram_enabled) {
    auto orders = parse_engram_orders(engram_ngram_orders);
    if (!orders.ok()) return std::move(orders).take_error().with_context("config.json: \"engram_ngram_orders\"");
    std::string_view s = engram_layers_spec;
    while (!s.empty()) {
      const std::size_t comma = s.find(',');
      std::string_view item = s.substr(0, comma);
      s = comma == std::string_view::npos ? std::string_view{} : s.substr(comma + 1);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (item.empty()) continue;
      long long v = 0;
      bool neg = false;
      std::size_t k = 0;
      if (item[0] == '-' || item[0] == '+') neg = item[0] == '-', k = 1;
      if (k == item.size()) v = -1;
      for (; k < item.size(); ++k) {
        if (item[k] < '0' || item[k] > '9' || v > (1ll << 40)) {
          v = -1;
          break;
        }
        v = v * 10 + (item[k] - '0');
      }
      if (v < 0)
        return make_error(errc::format_error, "config.json: \"engram_layers\" = \"", engram_layers_spec,
                          "\" holds a non-integer item \"", item, "\"");
      long long idx = neg ? -v : v;
      if (idx < 0) idx += static_cast<long long>(n_layer);
      if (idx < 0 || idx >= static_cast<long long>(n_layer))
        return make_error(errc::format_error, "config.json: engram layer \"", item, "\" is outside [0, ", n_layer, ")");
      engram_layer[static_cast<std::size_t>(idx)] = true;
    }
  }
  if (mhc_enabled)
    if (status st = mhc().validate(); !st.ok()) return std::move(st).with_context("config.json");
  return {};
}

SLM_INLINE result<nanochat_model> nanochat_model::load(const std::filesystem::path& dir,
                                                       const checkpoint_options& opt) {
  auto ck = checkpoint::open(dir, opt);
  if (!ck.ok()) return std::move(ck).take_error();
  return from_checkpoint(std::move(*ck));
}

SLM_INLINE result<nanochat_model> nanochat_model::from_checkpoint(checkpoint&& ck_in) {
  nanochat_model m;
  m.ck_.reset(new (std::nothrow) checkpoint(std::move(ck_in)));
  if (!m.ck_) return make_error(errc::out_of_memory, "cannot allocate the checkpoint");
  const checkpoint& ck = *m.ck_;
  const std::string where = ck.dir().string();
  auto cfg = nanochat_config::from_json(ck.config());
  if (!cfg.ok()) return std::move(cfg).take_error().with_context(where);
  m.cfg_ = std::move(*cfg);
  const nanochat_config& c = m.cfg_;
  const std::size_t C = c.n_embd;
  auto wte = load_linear_weight(ck, "transformer.wte");
  if (!wte.ok()) return std::move(wte).take_error();
  if (wte->rows < c.vocab_size || wte->cols != C)
    return make_error(errc::format_error, where, ": transformer.wte.weight is [", wte->rows, ", ", wte->cols,
                      "], the config implies [>= ", c.vocab_size, ", ", C, "]");
  m.wte_ = *wte;
  auto head_w = load_linear_weight(ck, "lm_head");
  if (!head_w.ok()) return std::move(head_w).take_error();
  if (head_w->rows < c.vocab_size || head_w->cols != C)
    return make_error(errc::format_error, where, ": lm_head.weight is [", head_w->rows, ", ", head_w->cols,
                      "], the config implies [>= ", c.vocab_size, ", ", C, "]");
  m.lm_head_.w = *head_w;
  auto rl = load_vector(ck, "resid_lambdas", c.n_layer);
  if (!rl.ok()) return std::move(rl).take_error();
  auto xl = load_vector(ck, "x0_lambdas", c.n_layer);
  if (!xl.ok()) return std::move(xl).take_error();
  m.stack_.layers.resize(c.n_layer);
  for (std::size_t i = 0; i < c.n_layer; ++i) {
    stack_type::layer& L = m.stack_.layers[i];
    nanochat_block::layer& b = L.block;
    L.mixer_norm = nanochat_norm();
    L.ffn_norm = nanochat_norm();
    b.resid_lambda = (*rl)[i];
    b.x0_lambda = (*xl)[i];
    const std::string pre = cat("transformer.h.", i);
    if (c.layer_kinds[i] == mixer::mamba) {
      auto mm = nanochat_mamba_layer::load(ck, pre + ".attn", c.mamba_config());
      if (!mm.ok()) return std::move(mm).take_error().with_context(cat("layer ", i));
      L.mixer.impl.emplace<nanochat_mamba_layer>(std::move(*mm));
    } else {
      auto a = nanochat_attention::load(ck, pre + ".attn", c.attention_config(i));
      if (!a.ok()) return std::move(a).take_error().with_context(cat("layer ", i));
      L.mixer.impl.emplace<nanochat_attention>(std::move(*a));
    }
    auto f = nanochat_mlp::load(ck, pre + ".mlp", C);
    if (!f.ok()) return std::move(f).take_error();
    L.ffn = std::move(*f);
    if (c.engram_layer[i]) {
      auto ec = engram_config::make(C, c.engram_ngram_orders, c.engram_bottleneck_dim);
      if (!ec.ok()) return std::move(ec).take_error().with_context("config.json");
      auto e = nanochat::load_engram(ck, nanochat::engram_prefix(i), *ec);
      if (!e.ok()) return std::move(e).take_error();
      b.engram = std::move(*e);
      b.has_engram = true;
    }
    if (c.mhc_enabled) {
      const std::size_t N = b.has_engram ? 3 : 2;
      if (c.mhc_num_branches > 0 && N > c.mhc_num_branches)
        return make_error(errc::format_error, where, ": layer ", i, " mixes ", N, " mHC branches, mhc_num_branches = ",
                          c.mhc_num_branches);
      auto x = nanochat::load_mhc(ck, nanochat::mhc_prefix(i), c.mhc());
      if (!x.ok()) return std::move(x).take_error();
      b.mhc = std::move(*x);
      b.has_mhc = true;
    }
  }
  if (c.mtp_enabled) {
    auto h = nanochat_mtp_head::load(ck, "mtp", c.attention_config(0));
    if (!h.ok()) return std::move(h).take_error();
    m.mtp_ = std::move(*h);
  }
  // Every tensor is bound above, except names with a '/': no module parameter has one
  // (state_dict keys are '.'-joined), so they are data stored beside the weights, as the
  // golden files keep their inputs and outputs ("in/idx", "out/logits").
  SLM_TRY(ck.check_all_bound([](std::string_view name) { return name.find('/') != std::string_view::npos; }));
  return m;
}

SLM_INLINE status nanochat_model::mtp_logits(const float* h, std::span<const std::int32_t> next_ids, float* logits,
                                             compute_context& cx) const {
  if (!cfg_.mtp_enabled) return make_error(errc::unsupported, "mtp_logits: this model has no MTP head (mtp_enabled)");
  workspace ws;
  return mtp_.forward(h, next_ids, wte_, lm_head_, cfg_.vocab_size, logits, ws, cx);
}

SLM_INLINE status nanochat_model::init_sequence(sequence& s, const session_options& o) const {
  SLM_TRY(stack_.init_caches(s.caches, o));
  s.blocks.clear();
  s.blocks.resize(stack_.layers.size());
  for (std::size_t i = 0; i < stack_.layers.size(); ++i) {
    const nanochat_block::layer& b = stack_.layers[i].block;
    if (b.has_engram) SLM_TRY(b.engram.init_cache(s.blocks[i].engram, o));
  }
  return {};
}

SLM_INLINE void nanochat_model::truncate(sequence& s, std::size_t len) noexcept {
  for (std::size_t i = 0; i < s.caches.size(); ++i) {
    s.caches[i].truncate(len);
    if (s.blocks[i].engram.initialized()) s.blocks[i].engram.truncate(len);
  }
}

SLM_INLINE status nanochat_model::run(sequence& s, std::size_t pos0, std::span<const std::int32_t> ids, std::size_t rows,
                                      float* logits, bool training_path, compute_context& cx) const {
  using detail::nanochat::rms_rows;
  const std::size_t T = ids.size(), C = cfg_.n_embd;
  SLM_TRY(s.x.resize(T * C));
  SLM_TRY(s.x0.resize(T * C));
  float *x = s.x.data(), *x0 = s.x0.data();
  for (std::size_t t = 0; t < T; ++t)
    dequantize_row(wte_, static_cast<std::size_t>(ids[t]), std::span<float>(x + t * C, C));
  rms_rows(x, T, C, x);
  std::memcpy(x0, x, T * C * sizeof(float));
  s.ws.uncached_forward = training_path;
  nanochat_block::context bc{x0, pos0, s.blocks, &s.input, &s.normed, &s.eng, &s.pooled};
  SLM_TRY(stack_.forward(x, T, C, s.caches, s.h, s.y, s.ws, cx, bc));
  if (rows == 0) return {};
  const std::size_t Vp = lm_head_.out(), V = cfg_.vocab_size;
  float* h = s.h.data();  // the stack's scratch, [T, C]
  rms_rows(x + (T - rows) * C, rows, C, h);
  SLM_TRY(s.logit_rows.resize(rows * Vp));
  SLM_TRY(lm_head_.apply(h, rows, s.logit_rows.data(), cx));  // [rows, C] x [C, Vpad] -> [rows, Vpad]
  for (std::size_t t = 0; t < rows; ++t)
    for (std::size_t j = 0; j < V; ++j)
      logits[t * V + j] =
          detail::nanochat::softcap * std::tanh(s.logit_rows[t * Vp + j] / detail::nanochat::softcap);
  return {};
}

SLM_INLINE status nanochat_model::session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                                   compute_context& cx) {
  SLM_TRY(check_call("forward", ids, rows, logits, m_->cfg_.vocab_size));
  return advance(ids.size(), [&]() -> status {
    return m_->run(st_, pos_, ids, rows, logits, false, cx);
  });
}

SLM_INLINE std::size_t nanochat_model::session::record_count() const noexcept {
  std::size_t n = 0;
  for (const auto& L : m_->stack_.layers) n += 1 + L.block.has_engram + L.block.has_mhc;
  return n;
}

SLM_INLINE std::uint64_t nanochat_model::session::fingerprint(const sequence& s) const {
  const nanochat_config& c = m_->cfg_;
  state_hasher h;
  h.add(std::string_view("slm nanochat session"));
  for (std::size_t v : {c.vocab_size, c.n_layer, c.n_embd, c.n_head, c.n_kv_head, c.head_dim()})
    h.add(static_cast<std::uint64_t>(v));
  h.add(static_cast<std::uint64_t>(opt_.kv));
  for (std::size_t i = 0; i < m_->stack_.layers.size(); ++i) {
    const nanochat_block::layer& b = m_->stack_.layers[i].block;
    h.add(static_cast<std::uint64_t>(c.layer_kinds[i]));
    h.add(static_cast<std::uint64_t>(c.window_left[i]));
    h.add(static_cast<std::uint64_t>(b.has_engram));
    h.add(static_cast<std::uint64_t>(b.has_mhc ? b.branches() : 0));
    s.caches[i].fingerprint(h);
    if (b.has_engram) s.blocks[i].engram.fingerprint(h);
  }
  return h.value();
}

// Per layer: the mixer's record, then "engram" and "mhc" where the layer has them.
SLM_INLINE status nanochat_model::session::write_records(state_writer& w, const sequence& s) const {
  const std::size_t C = m_->cfg_.n_embd;
  auto record = [&w](const auto& cache) -> status {
    SLM_TRY(w.kind(cache.kind()));
    return cache.save(w);
  };
  for (std::size_t i = 0; i < m_->stack_.layers.size(); ++i) {
    const nanochat_block::layer& b = m_->stack_.layers[i].block;
    status st = record(s.caches[i]);
    if (st.ok() && b.has_engram) st = record(s.blocks[i].engram);
    if (st.ok() && b.has_mhc) {
      st = w.kind("mhc");
      if (st.ok()) st = w.f32_rows(s.blocks[i].mhc_hist.data(), pos_, b.branches() * C);
    }
    if (!st.ok()) return std::move(st).with_context(cat("session state: layer ", i));
  }
  return {};
}

SLM_INLINE status nanochat_model::session::read_records(state_reader& r, sequence& fresh, std::size_t position) const {
  const std::size_t C = m_->cfg_.n_embd;
  for (std::size_t i = 0; i < m_->stack_.layers.size(); ++i) {
    const nanochat_block::layer& b = m_->stack_.layers[i].block;
    nanochat_block::state& B = fresh.blocks[i];
    const std::string where = cat("layer ", i);
    SLM_TRY(read_cache_record(r, fresh.caches[i], where, position));
    if (b.has_engram) SLM_TRY(read_cache_record(r, B.engram, where + " (engram)", position));
    if (b.has_mhc) {
      SLM_TRY(expect_record(r, "mhc", where + " (mHC)"));
      if (auto st = r.f32_rows(B.mhc_hist, position, b.branches() * C, "mHC branch rows"); !st.ok())
        return std::move(st).with_context(where);
    }
  }
  return {};
}

SLM_INLINE status nanochat_model::forward_uncached(std::span<const std::int32_t> ids, float* logits,
                                                   compute_context& cx) const {
  SLM_TRY(ck_->check_unchanged());  // as a session would (a changed mapped checkpoint)
  if (ids.empty()) return make_error(errc::invalid_argument, "forward_uncached: no tokens");
  if (!logits) return make_error(errc::invalid_argument, "forward_uncached: logits is null");
  SLM_TRY(check_token_ids("forward_uncached", ids, cfg_.vocab_size));
  session_options o;
  o.reserve_tokens = ids.size();
  sequence s;
  SLM_TRY(init_sequence(s, o));
  return run(s, 0, ids, ids.size(), logits, true, cx);
}
#endif  // SLM_DEFINE_NAM56R

}  // namespace slm

// Compiled mode: the generator of this model's session is compiled by the library
// (slm/generate/generator_instances.hpp).
#define SLM_NANOCHAT_HPP_INCLUDED 1
#include "slm/generate/generator_instances.hpp"
