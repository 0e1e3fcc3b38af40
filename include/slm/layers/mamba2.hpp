// slm/layers/mamba2.hpp - the Mamba-2 mixer (state-spaces/mamba `mamba_ssm/modules/mamba2.py`),
// a state-space layer with a per-sequence state instead of a KV cache.
//
// Sizes: d_model, d_inner = expand * d_model (or given), headdim P, H = d_inner / P heads,
// d_state N, ngroups G (H % G == 0), d_conv K, conv_dim = d_inner + 2 G N,
// d_in_proj = 2 d_inner + 2 G N + H. Head h reads B/C of group g(h) = h / (H / G).
//
// Parameters (state_dict names under a prefix such as `backbone.layers.N.mixer`
// (mamba_ssm, HF Mamba2, Nemotron-H) or `model.layers.N.mamba` (GraniteMoeHybrid)):
//   in_proj.weight  [d_in_proj, d_model]  (+ .bias)   rows: z [d_inner] | xBC [conv_dim] | dt [H]
//   conv1d.weight   [conv_dim, 1, K]      conv1d.bias [conv_dim] (optional)
//   dt_bias [H]     A_log [H]   D [H] or [d_inner]    norm.weight [d_inner] (rmsnorm only)
//   out_proj.weight [d_model, d_inner]    (+ .bias)
// xBC splits into x [d_inner] (head h: channels h P .. h P + P) | B [G N] | C [G N] (g N + n).
//
// Per token t (u_t [d_model] -> out_t [d_model]):
//   [z, xBC, dt_raw] = in_proj(u_t)
//   c_t[ch] = silu(bias[ch] + sum_{i<K} w[ch, i] xBC_{t-K+1+i}[ch])    causal depthwise conv;
//             inputs before the segment come from conv_state (zeros for a fresh sequence)
//   x, B, C = split(c_t)
//   dt_h    = clamp(softplus(dt_raw_h + dt_bias_h), dt_min, dt_max)   (softplus threshold 20)
//   A_h     = -exp(A_log_h)
//   S_h     = exp(dt_h A_h) S_h + dt_h x_h (x) B_g           S_h [P, N], g = g(h)
//   y_h     = S_h C_g + D_h x_h                               y [d_inner]
//   o       = rmsnorm_groups(y * silu(z)) * norm.weight       norm_before_gate = false
//             rmsnorm_groups(y) * norm.weight * silu(z)       norm_before_gate = true
//             y * silu(z)                                     rmsnorm = false
//             (RMS over consecutive groups of norm_group_size channels, eps; mamba_ssm uses
//             d_inner / G, HF's MambaRMSNormGated the whole width)
//   out_t   = out_proj(o)
//
// State per sequence (mamba2_state): conv [conv_dim, K] = the last K pre-conv, pre-SiLU xBC
// inputs, oldest first (left-padded with zeros after fewer than K tokens), and ssm [H, P, N].
//
// Three entry points over the same parameters and state, all continuing from any state:
//  * forward(): chunked prefill (SSD). Per head, chunks of L tokens, c_j = sum_{i<=j} dt_i A:
//      y_i   = exp(c_i) S_in C_i + sum_{j<=i} exp(c_i - c_j) (C_i . B_j) dt_j x_j + D x_i
//      S_out = exp(c_{L-1}) S_in + sum_j exp(c_{L-1} - c_j) dt_j x_j (x) B_j
//    The chunk size changes the result only by float rounding.
//  * step(): one token, O(1) in the sequence length (the recurrence above).
//  * forward_reference(): the recurrence token by token (the plain reference path).
// Heads run in parallel on the caller's executor; each head is computed the same way
// whatever the partition, so results do not depend on the thread count. Scratch comes from
// the workspace: ws.proj holds T x (d_in_proj + conv_dim + H + d_inner) floats, ws.attn
// L x L + L per task for the chunked path. Memory grows only through slm::floats.
// On an error from in_proj (or a cancellation before the call starts) the state is
// untouched; the SSM update itself cannot fail or be cancelled halfway; an error from
// out_proj leaves the state advanced (the decoder cache below can undo it).
//
// For the decoder, `cache` is a recurrent_cache<mamba2_state> (layers/recurrent_cache.hpp): the
// current state, the state where the last call began (a failed call, or a later layer's
// failure, is undone by truncate(previous size)) and, with session_options::rollback_tokens
// = R > 0, the states after each of the last R tokens, so that truncate() can drop up to
// R tokens exactly (speculative decoding). Rewinding further is not possible for a
// recurrent state and makes the next forward fail.
//
// How a call of T tokens records its history (R > 0): one pass over the call, in which
// in_proj, the conv and out_proj run over all T tokens as usual, and the SSM runs the
// chunked scan over the first T - m + 1 tokens (m = min(T, R + 1) states to record; the
// recurrence when that is a single token) and then the recurrence token by token over
// the last m - 1, copying the state after each. So a call of T <= R tokens is the
// recurrence throughout (what step() computes, token by token), and a longer prefill is
// chunked except for its last R tokens. Chunked and recurrent scans agree to float
// rounding (about 1e-6 relative, tests/test_mamba2.cpp and test_session_state.cpp), and
// with R = 0 (the default) a call is exactly what it was before: one chunked pass (the
// recurrence for a single token). Re-feeding tokens after a rollback reproduces the
// original logits bit for bit when the calls have the same shapes.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/buffer.hpp"
#include "slm/layers/activation.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/parallel.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/core/status.hpp"

namespace slm {

struct mamba2_config {
  std::size_t d_model = 0;
  std::size_t d_state = 128;
  std::size_t d_conv = 4;
  std::size_t expand = 2;
  std::size_t headdim = 64;
  std::size_t ngroups = 1;
  std::size_t chunk_size = 256;
  std::size_t d_inner = 0;          // 0: expand * d_model
  std::size_t norm_group_size = 0;  // 0: d_inner / ngroups (mamba_ssm's RMSNormGated)
  bool rmsnorm = true;
  bool norm_before_gate = false;
  float eps = 1e-5f;
  float dt_min = 0.0f;  // dt_limit; (0, inf) = none
  float dt_max = std::numeric_limits<float>::infinity();

  std::size_t inner() const noexcept { return d_inner ? d_inner : expand * d_model; }
  std::size_t heads() const noexcept { return headdim ? inner() / headdim : 0; }
  std::size_t conv_dim() const noexcept { return inner() + 2 * ngroups * d_state; }
  std::size_t in_proj_dim() const noexcept { return 2 * inner() + 2 * ngroups * d_state + heads(); }
  std::size_t group_size() const noexcept { return norm_group_size ? norm_group_size : (ngroups ? inner() / ngroups : 0); }

  status validate() const;
};

// One sequence's recurrent state. n counts the tokens it has consumed; n == 0 means a
// fresh sequence (the buffers are then read as zeros whatever they hold).
struct mamba2_state {
  floats conv;  // [conv_dim, d_conv], oldest input first
  floats ssm;   // [H, P, N]
  std::size_t n = 0;

  void reset() noexcept {
    std::fill(conv.data(), conv.data() + conv.size(), 0.0f);
    std::fill(ssm.data(), ssm.data() + ssm.size(), 0.0f);
    n = 0;
  }
  // Snapshot / restore: a deep copy of another state.
  status copy_from(const mamba2_state& o) {
    SLM_TRY(conv.resize(o.conv.size()));
    SLM_TRY(ssm.resize(o.ssm.size()));
    if (o.conv.size()) std::memcpy(conv.data(), o.conv.data(), o.conv.size() * sizeof(float));
    if (o.ssm.size()) std::memcpy(ssm.data(), o.ssm.data(), o.ssm.size() * sizeof(float));
    n = o.n;
    return {};
  }
  // Session state serialization (layers/recurrent_cache.hpp): the kind tag and the buffers.
  static constexpr std::string_view kind = "mamba2";
  template <class Self, class Fn>
  static void for_each_buffer(Self& s, Fn&& fn) {
    fn(s.conv);
    fn(s.ssm);
  }
};

namespace detail::mamba2 {


}  // namespace detail::mamba2

class mamba2_mixer {
 public:
  mamba2_config cfg;
  linear in_proj, out_proj;
  floats conv_w;   // [conv_dim, K]
  floats conv_b;   // [conv_dim] (zeros without a bias)
  floats dt_bias;  // [H]
  floats A;        // [H], -exp(A_log)
  floats D;        // [H], or [d_inner] when d_per_channel
  bool d_per_channel = false;
  floats norm_w;   // [d_inner] when cfg.rmsnorm


  // Sizes the state's buffers and zeroes them (a fresh sequence).
  status init_state(mamba2_state& s) const;

  // Chunked prefill of T tokens x [T, d_model] -> y [T, d_model], continuing from st.
  status forward(const float* x, std::size_t T, float* y, mamba2_state& st, workspace& ws,
                 compute_context& cx) const {
    mamba2_state* const out[1] = {&st};
    return run(x, T, y, st, out, cfg.chunk_size, ws, cx);
  }
  // The same with another chunk size (tests; tuning).
  status forward_chunked(const float* x, std::size_t T, float* y, mamba2_state& st, std::size_t chunk,
                         workspace& ws, compute_context& cx) const {
    if (chunk == 0) return make_error(errc::invalid_argument, "mamba2: chunk size 0");
    mamba2_state* const out[1] = {&st};
    return run(x, T, y, st, out, chunk, ws, cx);
  }
  // One decode step: x [d_model] -> y [d_model].
  status step(const float* x, float* y, mamba2_state& st, workspace& ws, compute_context& cx) const {
    mamba2_state* const out[1] = {&st};
    return run(x, 1, y, st, out, 0, ws, cx);
  }
  // The token-by-token recurrence over T tokens.
  status forward_reference(const float* x, std::size_t T, float* y, mamba2_state& st, workspace& ws,
                           compute_context& cx) const {
    mamba2_state* const out[1] = {&st};
    return run(x, T, y, st, out, 0, ws, cx);
  }

  // The decoder's per-layer cache: the current state and its rollback history.
  using cache = recurrent_cache<mamba2_state>;
  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return c.init(rollback_tokens_of(o), [this](mamba2_state& s) { return init_state(s); });
  }
  // x [T, d_model] -> out [T, d_model], recording the states the cache keeps (one pass:
  // chunked up to the first recorded state, the recurrence after it; see the top).
  status forward(const float* x, std::size_t T, float* out, cache& c, workspace& ws, compute_context& cx) const;

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("in_proj", in_proj, true);
    fn("out_proj", out_proj, true);
  }

 private:
  // From state `in` over T tokens, recording m = outs.size() states: outs[i] is the state
  // after the first T - m + 1 + i tokens (outs[m - 1] the final one). Those first
  // T - m + 1 tokens run the chunked scan (chunk == 0: the recurrence), the rest the
  // recurrence. outs[0] may be `in` itself; the others must be distinct states.
  status run(const float* x, std::size_t T, float* y, const mamba2_state& in, std::span<mamba2_state* const> outs,
             std::size_t chunk, workspace& ws, compute_context& cx) const;

  // One head's inputs: token t's x at x + t * ld (P values), B and C likewise (N values),
  // dt at dt + t * ldt, output y at y + t * ldy.
  struct head_view {
    const float *x, *B, *C, *dt;
    float* y;
    std::size_t ld, ldt, ldy;
    head_view at(std::size_t t) const noexcept {
      return {x + t * ld, B + t * ld, C + t * ld, dt + t * ldt, y + t * ldy, ld, ldt, ldy};
    }
  };

  float d_of(std::size_t h, std::size_t p) const noexcept { return d_per_channel ? D[h * cfg.headdim + p] : D[h]; }

  void ssm_sequential(const head_view& v, std::size_t h, std::size_t T, float* S) const noexcept;

  // SSD: chunks of L tokens; scratch holds L * L + L floats.
  void ssm_chunked(const head_view& v, std::size_t h, std::size_t T, std::size_t L, float* S,
                   float* scratch) const noexcept;
};

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE status mamba2_config::validate() const {
  if (d_model == 0 || d_state == 0 || d_conv == 0 || headdim == 0 || ngroups == 0 || chunk_size == 0 || inner() == 0)
    return make_error(errc::invalid_argument, "mamba2: d_model, d_state, d_conv, headdim, ngroups, chunk_size and ",
                      "d_inner must be positive");
  if (inner() % headdim != 0)
    return make_error(errc::invalid_argument, "mamba2: d_inner ", inner(), " is not a multiple of headdim ", headdim);
  if (heads() % ngroups != 0)
    return make_error(errc::invalid_argument, "mamba2: ", heads(), " heads do not split into ", ngroups, " groups");
  if (group_size() == 0 || inner() % group_size() != 0)
    return make_error(errc::invalid_argument, "mamba2: norm group size ", group_size(), " does not divide d_inner ",
                      inner());
  if (!(eps > 0.0f) || !(dt_min <= dt_max))
    return make_error(errc::invalid_argument, "mamba2: eps must be positive and dt_min <= dt_max");
  return {};
}

SLM_INLINE status mamba2_mixer::init_state(mamba2_state& s) const {
  s.reset();  // zeroes what it holds; resize zeroes what it adds (one pass either way)
  SLM_TRY(s.conv.resize(cfg.conv_dim() * cfg.d_conv));
  SLM_TRY(s.ssm.resize(cfg.heads() * cfg.headdim * cfg.d_state));
  return {};
}

SLM_INLINE status mamba2_mixer::forward(const float* x, std::size_t T, float* out, cache& c, workspace& ws,
                                        compute_context& cx) const {
  if (T == 0) return {};
  if (auto s = c.begin(T); !s.ok()) return std::move(s).with_context("mamba2");
  const std::span<mamba2_state* const> rec = c.records();
  const std::size_t head = T - rec.size() + 1;
  SLM_TRY(run(x, T, out, c.state(), rec, head == 1 ? 0 : cfg.chunk_size, ws, cx));
  c.commit();
  return {};
}

SLM_INLINE status mamba2_mixer::run(const float* x, std::size_t T, float* y, const mamba2_state& in,
                                    std::span<mamba2_state* const> outs, std::size_t chunk, workspace& ws,
                                    compute_context& cx) const {
  using namespace detail::mamba2;
  if (T == 0) return {};
  if (!x || !y) return make_error(errc::invalid_argument, "mamba2: null input or output");
  const std::size_t m = outs.size();
  if (m == 0 || m > T) return make_error(errc::invalid_argument, "mamba2: ", m, " states to record over ", T, " tokens");
  for (std::size_t i = 0; i < m; ++i) {
    if (!outs[i] || (i > 0 && outs[i] == &in))
      return make_error(errc::invalid_argument, "mamba2: recorded state ", i, " is null or the input state");
    for (std::size_t j = 0; j < i; ++j)
      if (outs[j] == outs[i]) return make_error(errc::invalid_argument, "mamba2: recorded states ", j, " and ", i, " alias");
  }
  const std::size_t head = T - m + 1;  // tokens before the first recorded state
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, G = cfg.ngroups, K = cfg.d_conv;
  const std::size_t Di = cfg.inner(), cd = cfg.conv_dim(), dip = cfg.in_proj_dim();
  const std::size_t conv_n = cd * K, ssm_n = H * P * N;
  if (in.conv.size() != conv_n || in.ssm.size() != ssm_n)
    return make_error(errc::invalid_argument, "mamba2: the state is not sized for this layer (init_state)");
  if (cx.cancel && cx.cancel->cancelled()) return status(errc::cancelled, "cancelled before the layer ran");
  const std::size_t L = chunk == 0 ? 0 : std::min(chunk, head);
  std::size_t tasks = static_cast<std::size_t>(cx.ex.concurrency());
  tasks = std::max<std::size_t>(1, std::min(tasks, H));

  // Fallible work first: the state is written only after in_proj has succeeded.
  for (mamba2_state* o : outs) {
    SLM_TRY(o->conv.resize(conv_n));
    SLM_TRY(o->ssm.resize(ssm_n));
  }
  SLM_TRY(ws.proj.resize(T * (dip + cd + H + Di)));
  if (L) SLM_TRY(ws.attn.resize(tasks * (L * L + L)));
  float* zx = ws.proj.data();   // [T, dip]: z | xBC | dt
  float* xs = zx + T * dip;     // [T, cd]: silu(conv(xBC))
  float* dts = xs + T * cd;     // [T, H]
  float* yb = dts + T * H;      // [T, Di]
  SLM_TRY(in_proj.apply(x, T, zx, cx));

  // Causal depthwise conv over [conv state inputs 1..K-1, xBC_0 .. xBC_{T-1}].
  const bool fresh = in.n == 0;
  const std::size_t n0 = in.n;
  for (std::size_t ch = 0; ch < cd; ++ch) {
    const float* w = conv_w.data() + ch * K;
    const float* old = in.conv.data() + ch * K;
    for (std::size_t t = 0; t < T; ++t) {
      float acc = conv_b[ch];
      for (std::size_t i = 0; i < K; ++i) {
        const std::size_t j = t + i;  // index into the extended sequence
        float v;
        if (j + 1 < K) v = fresh ? 0.0f : old[j + 1];
        else v = zx[(j + 1 - K) * dip + Di + ch];
        acc += w[i] * v;
      }
      xs[t * cd + ch] = silu(acc);
    }
  }
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t h = 0; h < H; ++h) {
      const float d = std::clamp(softplus(zx[t * dip + Di + cd + h] + dt_bias[h]), cfg.dt_min, cfg.dt_max);
      dts[t * H + h] = d;
    }

  // New conv states: after Ti tokens, the last K of [old state (K), xBC_0 .. xBC_{Ti-1}].
  // outs[0] (which may be `in`) is written last; ascending k reads old[Ti + k] before
  // anything at or past it is written, so in == outs[0] is safe.
  for (std::size_t i = m; i-- > 0;) {
    const std::size_t Ti = head + i;
    for (std::size_t ch = 0; ch < cd; ++ch) {
      const float* old = in.conv.data() + ch * K;
      float* nw = outs[i]->conv.data() + ch * K;
      for (std::size_t k = 0; k < K; ++k)
        nw[k] = Ti + k < K ? (fresh ? 0.0f : old[Ti + k]) : zx[(Ti + k - K) * dip + Di + ch];
    }
  }
  mamba2_state& out = *outs[0];
  if (fresh) std::fill(out.ssm.data(), out.ssm.data() + ssm_n, 0.0f);
  else if (&in != &out) std::memcpy(out.ssm.data(), in.ssm.data(), ssm_n * sizeof(float));
  for (std::size_t i = 0; i < m; ++i) outs[i]->n = n0 + head + i;

  // The SSM, head by head (in place on out.ssm); no cancellation inside, so the state
  // is never left half-updated.
  const std::size_t hpg = H / G;
  const static_partition part = partition(0, H, tasks);
  SLM_TRY(parallel_for_chunks(cx.ex, part.count, [&](std::size_t c) {
    const index_range r = part.chunk(c);
    float* scratch = L ? ws.attn.data() + c * (L * L + L) : nullptr;
    for (std::size_t h = r.begin; h < r.end; ++h) {
      const std::size_t g = h / hpg;
      const head_view hv{xs + h * P, xs + Di + g * N, xs + Di + G * N + g * N, dts + h, yb + h * P, cd, H, Di};
      float* S = out.ssm.data() + h * P * N;
      if (L) ssm_chunked(hv, h, head, L, S, scratch);
      else ssm_sequential(hv, h, head, S);
      for (std::size_t i = 1; i < m; ++i) {  // the recorded states, one token each
        float* Si = outs[i]->ssm.data() + h * P * N;
        std::memcpy(Si, S, P * N * sizeof(float));
        ssm_sequential(hv.at(head + i - 1), h, 1, Si);
        S = Si;
      }
    }
  }));

  // Gate and norm, in place on yb.
  const std::size_t gs = cfg.group_size();
  for (std::size_t t = 0; t < T; ++t) {
    float* yt = yb + t * Di;
    const float* z = zx + t * dip;
    if (!cfg.rmsnorm) {
      for (std::size_t i = 0; i < Di; ++i) yt[i] *= silu(z[i]);
      continue;
    }
    for (std::size_t g0 = 0; g0 < Di; g0 += gs) {
      if (!cfg.norm_before_gate)
        for (std::size_t i = g0; i < g0 + gs; ++i) yt[i] *= silu(z[i]);
      double ss = 0;
      for (std::size_t i = g0; i < g0 + gs; ++i) ss += static_cast<double>(yt[i]) * yt[i];
      const float inv =
          static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(gs) + static_cast<double>(cfg.eps)));
      for (std::size_t i = g0; i < g0 + gs; ++i) {
        yt[i] = yt[i] * inv * norm_w[i];
        if (cfg.norm_before_gate) yt[i] *= silu(z[i]);
      }
    }
  }
  return out_proj.apply(yb, T, y, cx);
}

SLM_INLINE void mamba2_mixer::ssm_sequential(const head_view& v, std::size_t h, std::size_t T,
                                             float* S) const noexcept {
  const std::size_t P = cfg.headdim, N = cfg.d_state;
  const float a = A[h];
  for (std::size_t t = 0; t < T; ++t) {
    const float* xt = v.x + t * v.ld;
    const float* Bt = v.B + t * v.ld;
    const float* Ct = v.C + t * v.ld;
    const float dt = v.dt[t * v.ldt], dA = std::exp(dt * a);
    float* yt = v.y + t * v.ldy;
    for (std::size_t p = 0; p < P; ++p) {
      float* Sp = S + p * N;
      const float dx = dt * xt[p];
      float acc = 0;
      for (std::size_t n = 0; n < N; ++n) {
        Sp[n] = dA * Sp[n] + dx * Bt[n];
        acc += Sp[n] * Ct[n];
      }
      yt[p] = acc + d_of(h, p) * xt[p];
    }
  }
}

SLM_INLINE void mamba2_mixer::ssm_chunked(const head_view& v, std::size_t h, std::size_t T, std::size_t L, float* S,
                                          float* scratch) const noexcept {
  const std::size_t P = cfg.headdim, N = cfg.d_state;
  const float a = A[h];
  float* M = scratch;          // [L, L], lower triangle
  float* cum = scratch + L * L;  // [L]
  for (std::size_t c0 = 0; c0 < T; c0 += L) {
    const std::size_t Lc = std::min(L, T - c0);
    const float* x = v.x + c0 * v.ld;
    const float* B = v.B + c0 * v.ld;
    const float* C = v.C + c0 * v.ld;
    const float* dt = v.dt + c0 * v.ldt;
    float* y = v.y + c0 * v.ldy;
    float acc = 0;
    for (std::size_t j = 0; j < Lc; ++j) cum[j] = acc += dt[j * v.ldt] * a;
    // Intra-chunk coefficients M[i, j] = (C_i . B_j) exp(c_i - c_j) dt_j, j <= i.
    for (std::size_t i = 0; i < Lc; ++i) {
      const float* Ci = C + i * v.ld;
      for (std::size_t j = 0; j <= i; ++j) {
        const float* Bj = B + j * v.ld;
        float s = 0;
        for (std::size_t n = 0; n < N; ++n) s += Ci[n] * Bj[n];
        M[i * L + j] = s * std::exp(cum[i] - cum[j]) * dt[j * v.ldt];
      }
    }
    // y_i = exp(c_i) S_in C_i + sum_j M[i, j] x_j + D x_i.
    for (std::size_t i = 0; i < Lc; ++i) {
      const float* Ci = C + i * v.ld;
      const float* xi = x + i * v.ld;
      float* yi = y + i * v.ldy;
      const float e = std::exp(cum[i]);
      for (std::size_t p = 0; p < P; ++p) {
        const float* Sp = S + p * N;
        float s = 0;
        for (std::size_t n = 0; n < N; ++n) s += Sp[n] * Ci[n];
        yi[p] = e * s + d_of(h, p) * xi[p];
      }
      for (std::size_t j = 0; j <= i; ++j) {
        const float m = M[i * L + j];
        const float* xj = x + j * v.ld;
        for (std::size_t p = 0; p < P; ++p) yi[p] += m * xj[p];
      }
    }
    // S_out = exp(c_last) S_in + sum_j exp(c_last - c_j) dt_j x_j (x) B_j.
    const float last = cum[Lc - 1], el = std::exp(last);
    for (std::size_t i = 0; i < P * N; ++i) S[i] *= el;
    for (std::size_t j = 0; j < Lc; ++j) {
      const float w = std::exp(last - cum[j]) * dt[j * v.ldt];
      const float* xj = x + j * v.ld;
      const float* Bj = B + j * v.ld;
      for (std::size_t p = 0; p < P; ++p) {
        const float wx = w * xj[p];
        float* Sp = S + p * N;
        for (std::size_t n = 0; n < N; ++n) Sp[n] += wx * Bj[n];
      }
    }
  }
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
