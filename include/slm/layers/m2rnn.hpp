// slm/layers/m2rnn.hpp - the M2RNN mixer of NAM56R's R layers (cppmega `CppMegaM2RNNMixer`,
// cppmega/megatron/m2rnn_spec.py; spec nam56r.md §2.6): a recurrent layer whose state per
// head is a K x V matrix updated through a tanh, so unlike Mamba the scan has no
// associative (parallel-in-time) form: every form of it is token by token per head.
//
// Sizes: d = d_model, K = k_head_dim (64), V = v_head_dim (16), H heads (default
// max(1, d / (K + V)): 51 for d = 4096), Hq query and Hk key heads (1 each: one q and one k
// shared by every head; head h reads q head h / (H / Hq), k head h / (H / Hk)),
// conv_dim = Hq K + Hk K + H V (944), d_in = conv_dim + H + H V (1811), Kc = conv_kernel (4).
//
// Parameters (Megatron names under `decoder.layers.{L}.mixer.impl.`, L = layer number - 1,
// models/nam56r/bind.hpp; the layer's input RMSNorm `decoder.layers.{L}.norm.weight` and the
// residual add belong to the decoder, as for mamba2_mixer):
//   input_projection.weight   [d_in, d]          rows: c [conv_dim] | f~ [H] | g [H V]
//   conv1d.weight [conv_dim, 1, Kc]   conv1d.bias [conv_dim]      (none when Kc = 0)
//   A_log [H]   dt_bias [H]   state_weight [H, V, V]   D [H, V] (use_residual)
//   g_norm.weight [H V]       output_projection.weight [d, H V]
// c splits into q [Hq K] | k [Hk K] | v [H V] (head h: channels h V .. h V + V of v).
//
// Per token t (u_t [d] -> out_t [d]):
//   [c, f~, g] = W_in u_t                                  [d] x [d, d_in] -> [d_in]
//   c'[ch]     = silu(b[ch] + sum_{i<Kc} w[ch, i] c_{t-Kc+1+i}[ch])   causal depthwise conv;
//                inputs before the segment come from the state (zeros for a fresh
//                sequence); with Kc = 0 neither the conv nor the silu is applied
//   q, k, v    = split(c')
//   f_h        = exp(-exp(A_log_h) softplus(f~_h + dt_bias_h))  in (0, 1)   (threshold 20)
//   M_h        = f_h M_h + (1 - f_h) tanh(M_h W_h + k v_h^T)
//                  M_h W_h: [K, V] x [V, V] -> [K, V];  k v_h^T: [K] x [V] -> [K, V]
//   y_h        = M_h^T q + D_h * v_h                    [V, K] x [K] -> [V]  (q not scaled)
//   o          = rmsnorm_{g_norm}(y * silu(g))          over all H V values jointly, eps
//   out_t      = W_out o                                [H V] x [H V, d] -> [d]
//
// The scan alone (m2rnn_scan, m2rnn_scan_reference) is the middle part without D, on
// given q, k, v, f and W: exactly cppmega's `_torch_m2rnn_forward` / `_chunked_m2rnn_forward`
// (out_t = q_t^T M_t, final M), which the golden data checks. Row i of M_h W_h depends only
// on row i of M_h, so a head is updated in place row by row. Everything here is f32 with
// the exact tanh (the reference's choice); cppmega's training kernel used the GPU's
// tanh.approx (~2^-11 relative) and, in bf16 runs, rounded f to bf16 (2^-8), so a
// training-time forward differs from this one at about those levels.
//
// State per sequence (m2rnn_state): conv [conv_dim, Kc - 1] = the last Kc - 1 pre-conv,
// pre-silu inputs c, oldest first (zeros until that many tokens), and M [H, K, V] (f32).
//
// Three entry points over the same parameters and state, all continuing from any state:
//  * forward(): the chunked prefill. The sequence is cut into chunks of L tokens; per chunk
//    the input projection ([L, d] x [d, d_in]), the conv and the gates run for L tokens,
//    then every head advances L steps (heads in parallel), then the gate, norm and output
//    projection ([L, H V] x [H V, d]). Scratch grows with L, not with T. The chunk size
//    changes the result only through the products' blocking (float rounding).
//  * step(): one token, O(1) in the sequence length (a chunk of one).
//  * forward_reference(): the whole segment's projections, then the recurrence head by
//    head and token by token in a plain transcription of the formulas (the reference).
// Heads run in parallel on the caller's executor; each head is computed the same way
// whatever the partition, so results do not depend on the thread count.
// Errors: bad arguments, a state of another layer, and a failure of the first chunk's
// input projection (or a cancellation before the call) leave the state untouched. A later
// failure (out of memory in a product's scratch, or a cancellation checked between
// chunks) leaves the state advanced through the chunks done (n counts them); the
// decoder cache below restores the state of before the call.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/buffer.hpp"
#include "slm/layers/activation.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/norm.hpp"
#include "slm/core/parallel.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/core/status.hpp"

namespace slm {

// ---------------------------------------------------------------------------------
// The scan alone.

struct m2rnn_scan_dims {
  std::size_t heads = 0;    // H
  std::size_t k_dim = 0;    // K
  std::size_t v_dim = 0;    // V
  std::size_t q_heads = 1;  // Hq, divides H
  std::size_t k_heads = 1;  // Hk, divides H

  status validate() const;
};

// One sequence's scan inputs and output, token-major with row strides (in floats):
//   q of token t, q head g:  q[t * ldq + g * K .. + K]      (Hq K values per row)
//   k likewise with ldk, Hk heads
//   v of token t, head h:    v[t * ldv + h * V .. + V]      (H V values per row)
//   forget gate in (0, 1):   f[t * ldf + h]                 (H values per row)
//   output q^T M of head h:  y[t * ldy + h * V .. + V]      (H V values per row)
struct m2rnn_scan_io {
  const float* q = nullptr;
  std::size_t ldq = 0;
  const float* k = nullptr;
  std::size_t ldk = 0;
  const float* v = nullptr;
  std::size_t ldv = 0;
  const float* f = nullptr;
  std::size_t ldf = 0;
  float* y = nullptr;
  std::size_t ldy = 0;
};

namespace detail::m2rnn {

// cppmega `_softplus_decay_gate` with a = exp(A_log): exp(-a softplus(pre)).
inline float decay(float pre, float a) noexcept { return std::exp(-(a * softplus(pre))); }

status check_io(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t T,
                       const float* M);

// Head h, tokens [t0, t0 + n), in place on Mh [K, V]; a is V floats of scratch. Row i:
//   a = M[i, :] W                    [V] x [V, V] -> [V]
//   M[i, :] = f M[i, :] + (1 - f) tanh(a + k_i v)
//   y += q_i M[i, :]                 (y = M^T q, accumulated over i in order)
void head_steps(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t h,
                       std::size_t t0, std::size_t n, float* Mh, float* a) noexcept;

// Tokens [t0, t0 + n) for every head, heads split statically over `tasks` tasks; scratch
// holds tasks * V floats.
status scan_block(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t t0,
                         std::size_t n, float* M, std::size_t tasks, float* scratch, executor_ref ex);

inline std::size_t scan_tasks(const m2rnn_scan_dims& d, executor_ref ex) noexcept {
  return std::max<std::size_t>(1, std::min(static_cast<std::size_t>(ex.concurrency()), d.heads));
}

}  // namespace detail::m2rnn

// The forget gate of cppmega `_softplus_decay_gate`: exp(-exp(A_log) softplus(f_raw + dt_bias)).
inline float m2rnn_forget_gate(float f_raw, float A_log, float dt_bias) noexcept {
  return detail::m2rnn::decay(f_raw + dt_bias, std::exp(A_log));
}

// T tokens of the scan, continuing from M [H, K, V] (zeros: a fresh sequence), W [H, V, V]
// (M_h W_h: W right-multiplies). Every head advances `chunk` tokens between two
// synchronisations (chunk 0: all T at once); the chunk never changes the result, and
// neither does the executor's thread count. T = 1 is the decode step. Scratch: ws.attn.
status m2rnn_scan(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t T, float* M,
                         std::size_t chunk, workspace& ws, executor_ref ex);

// The same recurrence as a plain transcription of cppmega's `_torch_m2rnn_forward`, head by
// head, token by token, on one thread: hn = tanh(M W + k v^T) in full, then
// M = f M + (1 - f) hn, then y = M^T q. Scratch: ws.attn (K V floats).
status m2rnn_scan_reference(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t T,
                                   float* M, workspace& ws);

// ---------------------------------------------------------------------------------
// The mixer.

struct m2rnn_config {
  std::size_t d_model = 0;
  std::size_t k_head_dim = 64;
  std::size_t v_head_dim = 16;
  std::size_t num_heads = 0;    // 0: max(1, d_model / (k_head_dim + v_head_dim)), as cppmega
  std::size_t num_q_heads = 1;  // m2rnn_num_q_heads
  std::size_t num_k_heads = 1;  // m2rnn_num_k_heads
  std::size_t conv_kernel = 4;  // 0: no conv1d and no silu on q, k, v
  bool use_residual = true;     // the D skip term (m2rnn_use_residual)
  float eps = 1e-5f;            // g_norm (layernorm_epsilon)
  std::size_t chunk_size = 256;

  std::size_t heads() const noexcept {
    if (num_heads) return num_heads;
    const std::size_t kv = k_head_dim + v_head_dim;
    return kv ? std::max<std::size_t>(1, d_model / kv) : 0;
  }
  std::size_t q_dim() const noexcept { return num_q_heads * k_head_dim; }
  std::size_t k_dim() const noexcept { return num_k_heads * k_head_dim; }
  std::size_t hv() const noexcept { return heads() * v_head_dim; }  // v, g, y widths
  std::size_t conv_dim() const noexcept { return q_dim() + k_dim() + hv(); }
  std::size_t in_proj_dim() const noexcept { return conv_dim() + heads() + hv(); }
  std::size_t conv_tail() const noexcept { return conv_kernel > 1 ? conv_kernel - 1 : 0; }
  m2rnn_scan_dims scan_dims() const noexcept { return {heads(), k_head_dim, v_head_dim, num_q_heads, num_k_heads}; }

  status validate() const;
};

// One sequence's recurrent state. n counts the tokens it has consumed; n == 0 means a
// fresh sequence (the buffers are then read as zeros whatever they hold).
struct m2rnn_state {
  floats conv;  // [conv_dim, Kc - 1], oldest input first
  floats M;     // [H, K, V]
  std::size_t n = 0;

  void reset() noexcept {
    std::fill(conv.data(), conv.data() + conv.size(), 0.0f);
    std::fill(M.data(), M.data() + M.size(), 0.0f);
    n = 0;
  }
  // Snapshot / restore: a deep copy of another state.
  status copy_from(const m2rnn_state& o);
  // Session state serialization (layers/recurrent_cache.hpp): the kind tag and the buffers.
  static constexpr std::string_view kind = "m2rnn";
  template <class Self, class Fn>
  static void for_each_buffer(Self& s, Fn&& fn) {
    fn(s.conv);
    fn(s.M);
  }
};

class m2rnn_mixer {
 public:
  m2rnn_config cfg;
  linear in_proj;    // input_projection [d_in, d]
  linear out_proj;   // output_projection [d, H V]
  floats conv_w;     // [conv_dim, Kc]
  floats conv_b;     // [conv_dim]
  floats A;          // [H], exp(A_log) (> 0)
  floats dt_bias;    // [H]
  floats W;          // [H, V, V] state_weight
  floats D;          // [H, V], empty without use_residual
  rms_norm g_norm;   // [H V], eps

  // Sizes the state's buffers and zeroes them (a fresh sequence).
  status init_state(m2rnn_state& s) const;

  // Chunked prefill of T tokens x [T, d_model] -> y [T, d_model], continuing from st.
  status forward(const float* x, std::size_t T, float* y, m2rnn_state& st, workspace& ws, compute_context& cx) const {
    return run(x, T, y, st, st, cfg.chunk_size, ws, cx);
  }
  // The same with another chunk size (tests; tuning).
  status forward_chunked(const float* x, std::size_t T, float* y, m2rnn_state& st, std::size_t chunk, workspace& ws,
                         compute_context& cx) const {
    if (chunk == 0) return make_error(errc::invalid_argument, "m2rnn: chunk size 0");
    return run(x, T, y, st, st, chunk, ws, cx);
  }
  // One decode step: x [d_model] -> y [d_model].
  status step(const float* x, float* y, m2rnn_state& st, workspace& ws, compute_context& cx) const {
    return run(x, 1, y, st, st, 1, ws, cx);
  }
  // The plain reference over T tokens (see the file comment).
  status forward_reference(const float* x, std::size_t T, float* y, m2rnn_state& st, workspace& ws,
                           compute_context& cx) const;

  // The decoder's per-layer cache: two states, one level of undo (as mamba2_mixer's).
  // The decoder's per-layer cache: the current state, the undo of the last call and the
  // last session_options::rollback_tokens states (layers/recurrent_cache.hpp).
  using cache = recurrent_cache<m2rnn_state>;
  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return c.init(rollback_tokens_of(o), [this](m2rnn_state& s) { return init_state(s); });
  }
  // x [T, d_model] -> out [T, d_model] (chunked; one token is the step). With a rollback
  // history, the last recorded tokens run one at a time (same result: the scan is
  // token by token whatever the chunk).
  status forward(const float* x, std::size_t T, float* out, cache& c, workspace& ws, compute_context& cx) const;

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("input_projection", in_proj, true);
    fn("output_projection", out_proj, true);
  }

 private:
  status check_state(const m2rnn_state& s) const;

  // The scan's view of one block's activations: xs [n, conv_dim] (post-conv q | k | v),
  // fg [n, H] (forget gates), yb [n, H V] (the outputs).
  m2rnn_scan_io scan_io(const float* xs, const float* fg, float* yb) const noexcept {
    const std::size_t cd = cfg.conv_dim();
    return {xs, cd, xs + cfg.q_dim(), cd, xs + cfg.q_dim() + cfg.k_dim(), cd, fg, cfg.heads(), yb, cfg.hv()};
  }

  // Forget gates of n tokens from their projections zx [n, d_in] -> fg [n, H].
  void gates(const float* zx, std::size_t n, float* fg) const noexcept;

  // In place on yb [n, H V]: y + D v, times silu(g), then g_norm; xs, zx as in run().
  void epilogue(const float* zx, const float* xs, std::size_t n, float* yb) const noexcept;

  // From state `in` to state `out` (may be the same object), chunks of L tokens.
  status run(const float* x, std::size_t T, float* y, const m2rnn_state& in, m2rnn_state& out, std::size_t L,
             workspace& ws, compute_context& cx) const;
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status m2rnn_mixer::forward_reference(const float* x, std::size_t T, float* y, m2rnn_state& st,
                                                 workspace& ws, compute_context& cx) const {
  using namespace detail::m2rnn;
  if (T == 0) return {};
  if (!x || !y) return make_error(errc::invalid_argument, "m2rnn: null input or output");
  SLM_TRY(check_state(st));
  if (cx.cancel && cx.cancel->cancelled()) return status(errc::cancelled, "cancelled");
  const std::size_t H = cfg.heads(), Kc = cfg.conv_kernel, Kt = cfg.conv_tail();
  const std::size_t cd = cfg.conv_dim(), dip = cfg.in_proj_dim(), hv = cfg.hv();
  SLM_TRY(ws.proj.resize(T * (dip + cd + H + hv)));
  float* zx = ws.proj.data();  // [T, d_in]
  float* xs = zx + T * dip;    // [T, conv_dim]
  float* fg = xs + T * cd;     // [T, H]
  float* yb = fg + T * H;      // [T, H V]
  SLM_TRY(in_proj.apply(x, T, zx, cx));  // [T, d] x [d, d_in] -> [T, d_in]
  if (st.n == 0) st.reset();
  // c'_t = silu(b + sum_i w[i] c_{t - Kt + i}), c_s for s < 0 from the tail (tail[Kt + s]).
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t ch = 0; ch < cd; ++ch) {
      if (Kc == 0) {
        xs[t * cd + ch] = zx[t * dip + ch];
        continue;
      }
      float acc = conv_b[ch];
      for (std::size_t i = 0; i < Kc; ++i) {
        const std::ptrdiff_t s = static_cast<std::ptrdiff_t>(t + i) - static_cast<std::ptrdiff_t>(Kt);
        const float c = s >= 0 ? zx[static_cast<std::size_t>(s) * dip + ch]
                               : st.conv[ch * Kt + static_cast<std::size_t>(static_cast<std::ptrdiff_t>(Kt) + s)];
        acc += conv_w[ch * Kc + i] * c;
      }
      xs[t * cd + ch] = silu(acc);
    }
  // New tail: the last Kt inputs of [tail, c_0 .. c_{T-1}].
  for (std::size_t ch = 0; ch < cd; ++ch)
    for (std::size_t i = 0; i < Kt; ++i) {
      float* tail = st.conv.data() + ch * Kt;
      tail[i] = T + i < Kt ? tail[T + i] : zx[(T + i - Kt) * dip + ch];
    }
  gates(zx, T, fg);
  SLM_TRY(m2rnn_scan_reference(cfg.scan_dims(), W.data(), scan_io(xs, fg, yb), T, st.M.data(), ws));
  st.n += T;
  epilogue(zx, xs, T, yb);
  return out_proj.apply(yb, T, y, cx);  // [T, H V] x [H V, d] -> [T, d]
}

SLM_INLINE status m2rnn_scan_dims::validate() const {
  if (heads == 0 || k_dim == 0 || v_dim == 0 || q_heads == 0 || k_heads == 0)
    return make_error(errc::invalid_argument, "m2rnn: heads, k_dim, v_dim, q_heads and k_heads must be positive");
  if (heads % q_heads != 0 || heads % k_heads != 0)
    return make_error(errc::invalid_argument, "m2rnn: ", q_heads, " q heads and ", k_heads,
                      " k heads must both divide the ", heads, " heads");
  return {};
}

SLM_INLINE status detail::m2rnn::check_io(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io,
                                          std::size_t T, const float* M) {
  SLM_TRY(d.validate());
  if (T == 0) return {};
  if (!W || !M || !io.q || !io.k || !io.v || !io.f || !io.y)
    return make_error(errc::invalid_argument, "m2rnn: null q, k, v, f, W, state or output");
  const std::size_t HV = d.heads * d.v_dim;
  if (io.ldq < d.q_heads * d.k_dim || io.ldk < d.k_heads * d.k_dim || io.ldv < HV || io.ldf < d.heads ||
      io.ldy < HV)
    return make_error(errc::invalid_argument, "m2rnn: row strides q ", io.ldq, ", k ", io.ldk, ", v ", io.ldv, ", f ",
                      io.ldf, ", y ", io.ldy, " are shorter than the rows [", d.q_heads * d.k_dim, "], [",
                      d.k_heads * d.k_dim, "], [", HV, "], [", d.heads, "], [", HV, "]");
  return {};
}

SLM_INLINE void detail::m2rnn::head_steps(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io,
                                          std::size_t h, std::size_t t0, std::size_t n, float* Mh, float* a) noexcept {
  const std::size_t K = d.k_dim, V = d.v_dim;
  const float* Wh = W + h * V * V;
  const std::size_t qo = (h / (d.heads / d.q_heads)) * K, ko = (h / (d.heads / d.k_heads)) * K;
  for (std::size_t t = t0; t < t0 + n; ++t) {
    const float* q = io.q + t * io.ldq + qo;
    const float* k = io.k + t * io.ldk + ko;
    const float* v = io.v + t * io.ldv + h * V;
    const float f = io.f[t * io.ldf + h], g = 1.0f - f;
    float* y = io.y + t * io.ldy + h * V;
    for (std::size_t j = 0; j < V; ++j) y[j] = 0.0f;
    for (std::size_t i = 0; i < K; ++i) {
      float* row = Mh + i * V;
      for (std::size_t j = 0; j < V; ++j) a[j] = 0.0f;
      for (std::size_t l = 0; l < V; ++l) {
        const float m = row[l];
        const float* Wl = Wh + l * V;
        for (std::size_t j = 0; j < V; ++j) a[j] += m * Wl[j];
      }
      const float ki = k[i], qi = q[i];
      for (std::size_t j = 0; j < V; ++j) {
        row[j] = f * row[j] + g * std::tanh(a[j] + ki * v[j]);
        y[j] += qi * row[j];
      }
    }
  }
}

SLM_INLINE status detail::m2rnn::scan_block(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io,
                                            std::size_t t0, std::size_t n, float* M, std::size_t tasks, float* scratch,
                                            executor_ref ex) {
  const static_partition part = partition(0, d.heads, tasks);
  const std::size_t KV = d.k_dim * d.v_dim;
  return parallel_for_chunks(ex, part.count, [&](std::size_t c) {
    const index_range r = part.chunk(c);
    for (std::size_t h = r.begin; h < r.end; ++h) head_steps(d, W, io, h, t0, n, M + h * KV, scratch + c * d.v_dim);
  });
}

SLM_INLINE status m2rnn_scan(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t T, float* M,
                             std::size_t chunk, workspace& ws, executor_ref ex) {
  using namespace detail::m2rnn;
  SLM_TRY(check_io(d, W, io, T, M));
  if (T == 0) return {};
  const std::size_t tasks = scan_tasks(d, ex), L = chunk == 0 ? T : std::min(chunk, T);
  SLM_TRY(ws.attn.resize(tasks * d.v_dim));
  for (std::size_t t0 = 0; t0 < T; t0 += L) SLM_TRY(scan_block(d, W, io, t0, std::min(L, T - t0), M, tasks, ws.attn.data(), ex));
  return {};
}

SLM_INLINE status m2rnn_scan_reference(const m2rnn_scan_dims& d, const float* W, const m2rnn_scan_io& io, std::size_t T,
                                       float* M, workspace& ws) {
  SLM_TRY(detail::m2rnn::check_io(d, W, io, T, M));
  if (T == 0) return {};
  const std::size_t H = d.heads, K = d.k_dim, V = d.v_dim;
  SLM_TRY(ws.attn.resize(K * V));
  float* hn = ws.attn.data();
  for (std::size_t h = 0; h < H; ++h) {
    float* Mh = M + h * K * V;
    const float* Wh = W + h * V * V;
    const std::size_t qh = h / (H / d.q_heads), kh = h / (H / d.k_heads);
    for (std::size_t t = 0; t < T; ++t) {
      const float* q = io.q + t * io.ldq + qh * K;
      const float* k = io.k + t * io.ldk + kh * K;
      const float* v = io.v + t * io.ldv + h * V;
      const float f = io.f[t * io.ldf + h];
      float* y = io.y + t * io.ldy + h * V;
      for (std::size_t i = 0; i < K; ++i)  // [K, V] x [V, V] -> [K, V], plus k v^T
        for (std::size_t j = 0; j < V; ++j) {
          float s = 0.0f;
          for (std::size_t l = 0; l < V; ++l) s += Mh[i * V + l] * Wh[l * V + j];
          hn[i * V + j] = std::tanh(s + k[i] * v[j]);
        }
      for (std::size_t i = 0; i < K * V; ++i) Mh[i] = f * Mh[i] + (1.0f - f) * hn[i];
      for (std::size_t j = 0; j < V; ++j) {  // [V, K] x [K] -> [V]
        float s = 0.0f;
        for (std::size_t i = 0; i < K; ++i) s += q[i] * Mh[i * V + j];
        y[j] = s;
      }
    }
  }
  return {};
}

SLM_INLINE status m2rnn_config::validate() const {
  if (d_model == 0 || k_head_dim == 0 || v_head_dim == 0 || chunk_size == 0)
    return make_error(errc::invalid_argument, "m2rnn: d_model, k_head_dim, v_head_dim and chunk_size must be positive");
  SLM_TRY(scan_dims().validate());
  if (!(eps > 0.0f) || !std::isfinite(eps)) return make_error(errc::invalid_argument, "m2rnn: eps must be positive");
  return {};
}

SLM_INLINE status m2rnn_state::copy_from(const m2rnn_state& o) {
  SLM_TRY(conv.resize(o.conv.size()));
  SLM_TRY(M.resize(o.M.size()));
  if (o.conv.size()) std::memcpy(conv.data(), o.conv.data(), o.conv.size() * sizeof(float));
  if (o.M.size()) std::memcpy(M.data(), o.M.data(), o.M.size() * sizeof(float));
  n = o.n;
  return {};
}

SLM_INLINE status m2rnn_mixer::init_state(m2rnn_state& s) const {
  s.reset();  // zeroes what it holds; resize zeroes what it adds (one pass either way)
  SLM_TRY(s.conv.resize(cfg.conv_dim() * cfg.conv_tail()));
  SLM_TRY(s.M.resize(cfg.heads() * cfg.k_head_dim * cfg.v_head_dim));
  return {};
}

SLM_INLINE status m2rnn_mixer::forward(const float* x, std::size_t T, float* out, cache& c, workspace& ws,
                                       compute_context& cx) const {
  const std::size_t d = cfg.d_model;
  status s = c.forward(T, [&](const m2rnn_state& in, m2rnn_state& next, std::size_t first, std::size_t count) {
    return run(x + first * d, count, out + first * d, in, next, count == 1 ? 1 : cfg.chunk_size, ws, cx);
  });
  if (!s.ok()) return std::move(s).with_context("m2rnn");
  return s;
}

SLM_INLINE status m2rnn_mixer::check_state(const m2rnn_state& s) const {
  if (s.conv.size() != cfg.conv_dim() * cfg.conv_tail() ||
      s.M.size() != cfg.heads() * cfg.k_head_dim * cfg.v_head_dim)
    return make_error(errc::invalid_argument, "m2rnn: the state is not sized for this layer (init_state)");
  return {};
}

SLM_INLINE void m2rnn_mixer::gates(const float* zx, std::size_t n, float* fg) const noexcept {
  const std::size_t H = cfg.heads(), dip = cfg.in_proj_dim(), cd = cfg.conv_dim();
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t h = 0; h < H; ++h) fg[t * H + h] = detail::m2rnn::decay(zx[t * dip + cd + h] + dt_bias[h], A[h]);
}

SLM_INLINE void m2rnn_mixer::epilogue(const float* zx, const float* xs, std::size_t n, float* yb) const noexcept {
  const std::size_t hv = cfg.hv(), cd = cfg.conv_dim(), dip = cfg.in_proj_dim(), H = cfg.heads();
  const std::size_t vo = cfg.q_dim() + cfg.k_dim();
  for (std::size_t t = 0; t < n; ++t) {
    float* yt = yb + t * hv;
    const float* v = xs + t * cd + vo;
    const float* g = zx + t * dip + cd + H;
    if (!D.empty())
      for (std::size_t i = 0; i < hv; ++i) yt[i] += v[i] * D[i];
    for (std::size_t i = 0; i < hv; ++i) yt[i] *= silu(g[i]);
    g_norm.apply_row(yt, yt, hv);
  }
}

SLM_INLINE status m2rnn_mixer::run(const float* x, std::size_t T, float* y, const m2rnn_state& in, m2rnn_state& out,
                                   std::size_t L, workspace& ws, compute_context& cx) const {
  using namespace detail::m2rnn;
  if (T == 0) return {};
  if (!x || !y) return make_error(errc::invalid_argument, "m2rnn: null input or output");
  SLM_TRY(check_state(in));
  if (cx.cancel && cx.cancel->cancelled()) return status(errc::cancelled, "cancelled");
  const std::size_t d = cfg.d_model, H = cfg.heads(), Kc = cfg.conv_kernel, Kt = cfg.conv_tail();
  const std::size_t cd = cfg.conv_dim(), dip = cfg.in_proj_dim(), hv = cfg.hv();
  const std::size_t conv_n = cd * Kt, m_n = H * cfg.k_head_dim * cfg.v_head_dim;
  const m2rnn_scan_dims sd = cfg.scan_dims();
  L = L == 0 ? T : std::min(L, T);
  const std::size_t tasks = scan_tasks(sd, cx.ex);
  const std::size_t n0 = in.n;
  const bool fresh = n0 == 0;

  // Fallible work first: the state is written only after the first in_proj has succeeded.
  SLM_TRY(out.conv.resize(conv_n));
  SLM_TRY(out.M.resize(m_n));
  SLM_TRY(ws.proj.resize(L * (dip + cd + H + hv)));
  SLM_TRY(ws.attn.resize(tasks * cfg.v_head_dim));
  float* zx = ws.proj.data();  // [L, d_in]: c | f~ | g
  float* xs = zx + L * dip;    // [L, conv_dim]: silu(conv(c)) = q | k | v
  float* fg = xs + L * cd;     // [L, H]
  float* yb = fg + L * H;      // [L, H V]
  const m2rnn_scan_io io = scan_io(xs, fg, yb);

  for (std::size_t c0 = 0; c0 < T; c0 += L) {
    const std::size_t n = std::min(L, T - c0);
    if (c0 && cx.cancel && cx.cancel->cancelled()) return status(errc::cancelled, "cancelled between chunks");
    SLM_TRY(in_proj.apply(x + c0 * d, n, zx, cx));  // [n, d] x [d, d_in] -> [n, d_in]
    if (c0 == 0) {
      if (fresh) {
        std::fill(out.conv.data(), out.conv.data() + conv_n, 0.0f);
        std::fill(out.M.data(), out.M.data() + m_n, 0.0f);
      } else if (&in != &out) {
        if (conv_n) std::memcpy(out.conv.data(), in.conv.data(), conv_n * sizeof(float));
        std::memcpy(out.M.data(), in.M.data(), m_n * sizeof(float));
      }
    }
    // Causal depthwise conv over [tail (Kt), c_0 .. c_{n-1}]; then the new tail, the last
    // Kt of that sequence (ascending i reads tail[n + i] before anything at or past it
    // is written).
    for (std::size_t ch = 0; ch < cd; ++ch) {
      float* tail = out.conv.data() + ch * Kt;
      if (Kc == 0) {
        for (std::size_t t = 0; t < n; ++t) xs[t * cd + ch] = zx[t * dip + ch];
        continue;
      }
      const float* w = conv_w.data() + ch * Kc;
      for (std::size_t t = 0; t < n; ++t) {
        float acc = conv_b[ch];
        for (std::size_t i = 0; i < Kc; ++i) {
          const std::size_t j = t + i;  // index into the extended sequence
          acc += w[i] * (j < Kt ? tail[j] : zx[(j - Kt) * dip + ch]);
        }
        xs[t * cd + ch] = silu(acc);
      }
      for (std::size_t i = 0; i < Kt; ++i) tail[i] = n + i < Kt ? tail[n + i] : zx[(n + i - Kt) * dip + ch];
    }
    gates(zx, n, fg);
    // Every head advances n steps: per token [K, V] x [V, V] -> [K, V] and [V, K] x [K] -> [V].
    SLM_TRY(scan_block(sd, W.data(), io, 0, n, out.M.data(), tasks, ws.attn.data(), cx.ex));
    out.n = n0 + c0 + n;
    epilogue(zx, xs, n, yb);
    SLM_TRY(out_proj.apply(yb, n, y + c0 * d, cx));  // [n, H V] x [H V, d] -> [n, d]
  }
  return {};
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
