// slm/models/nanochat/mamba.hpp - nanochat's Mamba2Layer (`nanochat/mamba2.py`; spec nam56r.md
// §2.8) with its optional "Mamba-3" upgrades: B/C QK-norm, B/C bias, complex RoPE on B/C
// and trapezoidal discretization. This is NOT the Author Mamba-3 of NAM56R (layers/mamba3.hpp)
// nor transformers' Mamba-2 (layers/mamba2.hpp): the gate norm has no weight, B/C get their own
// normalisation and rotation, and the trapezoidal rule mixes in the previous token.
//
// Sizes: C = n_embd, E = expand * C (d_inner), P = headdim, H = E / P heads, G = ngroups,
// N = d_state, K = d_conv, conv_dim = E + 2 G N, heads_per_group = H / G.
//
// Parameters (nanochat names under `transformer.h.{i}.attn.`):
//   in_proj.weight [E + conv_dim + H (+ H if trapezoidal), C]   rows: z | xBC | dt | lambda
//   conv1d.weight [conv_dim, 1, K], conv1d.bias [conv_dim]      depthwise causal conv
//   A_log [H], dt_bias [H], D [H]; B_bias, C_bias [G, N] (mamba3_bias)
//   out_proj.weight [C, E]
//
// Per token t (on the block's normed input x_t):
//   z | u | dt_raw | lam_raw = W_in x_t
//   xBC_t   = SiLU(bias + sum_k w[:, k] u_{t-K+1+k})            (u before the start = 0)
//   x | B | C = xBC_t;  B, C per group: rms (parameter-free, eps = f32 epsilon) if qknorm,
//               + B_bias / C_bias if bias
//   dt      = softplus(dt_raw + dt_bias) [H];  A = -exp(A_log);  dA = exp(dt A)
//   rope:   phi_g += mean of dt over the group's heads; angle_i = phi_g inv_freq_i,
//           inv_freq_i = theta^(-2i/N); (b1, b2) -> (b1 cos - b2 sin, b1 sin + b2 cos) on
//           the two halves of B and C
//   h_t     = dA h_{t-1} + dt B_t x_t^T                          (Euler)
//           = dA h_{t-1} + lam dt B_t x_t^T + (1 - lam) dt dA B_{t-1} x_{t-1}^T
//                                                                (trapezoidal, lam = sigmoid(lam_raw),
//                                                                 B_{t-1} the rotated previous B)
//   y_t     = C_t . h_t + D x_t   per head
//   out_t   = W_out (rms(y_t) * SiLU(z_t))                       rms over E, parameter-free
// The oracle's chunked scan computes the same recurrence (it is exact algebra); here the
// recurrence runs token by token, so a prefill equals the same tokens stepped one at a
// time up to the products' summation order.
//
// State (nanochat_mamba_state, per sequence): conv [conv_dim, K] the last K raw inputs u,
// oldest first (the oracle's conv_state layout); ssm [H, N, P] (the oracle's ssm_state
// layout); prev_B [G, N], prev_x [H, P] (trapezoidal), angle [G] (complex RoPE).
// Unlike the oracle, a multi-token call that continues a sequence (a second prefill) uses
// the conv state, the previous B/x and the accumulated angle: nanochat's own layer
// restarts those for every multi-token call under a cache (only L = 1 decode continues),
// which only matters for chunked prefill, which nanochat's Engine never does.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/buffer.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/layers/linear.hpp"
#include "slm/models/bind.hpp"
#include "slm/layers/mamba3.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/core/status.hpp"

namespace slm {

struct nanochat_mamba_config {
  std::size_t n_embd = 0, d_state = 64, d_conv = 4, expand = 2, headdim = 128, ngroups = 1;
  bool qknorm = false, bias = false, complex_rope = false, trapezoidal = false;
  double rope_theta = 10000.0;

  std::size_t d_inner() const noexcept { return expand * n_embd; }
  std::size_t nheads() const noexcept { return headdim ? d_inner() / headdim : 0; }
  std::size_t conv_dim() const noexcept { return d_inner() + 2 * ngroups * d_state; }
  std::size_t in_proj_rows() const noexcept { return d_inner() + conv_dim() + nheads() * (trapezoidal ? 2 : 1); }

  status validate() const;
};

struct nanochat_mamba_state {
  floats conv;    // [conv_dim, K] last K raw inputs, oldest first
  floats ssm;     // [H, N, P]
  floats prev_B;  // [G, N] (trapezoidal; else empty)
  floats prev_x;  // [H, P] (trapezoidal; else empty)
  floats angle;   // [G] (complex RoPE; else empty)
  std::size_t n = 0;

  void reset() noexcept {
    for (floats* f : {&conv, &ssm, &prev_B, &prev_x, &angle}) std::fill(f->data(), f->data() + f->size(), 0.0f);
    n = 0;
  }
  status copy_from(const nanochat_mamba_state& o);
  static constexpr std::string_view kind = "ncmamba";
  template <class Self, class Fn>
  static void for_each_buffer(Self& s, Fn&& fn) {
    fn(s.conv);
    fn(s.ssm);
    fn(s.prev_B);
    fn(s.prev_x);
    fn(s.angle);
  }
};

class nanochat_mamba_layer {
 public:
  nanochat_mamba_config cfg;
  linear in_proj, out_proj;
  floats conv_w, conv_b;           // [conv_dim, K], [conv_dim]
  floats A, dt_bias, D;            // [H] each; A = -exp(A_log)
  floats B_bias, C_bias;           // [G, N] or empty
  floats inv_freq;                 // [N / 2] or empty

  // Tensors `<prefix>.in_proj.weight` etc. with shapes checked against cfg.
  static result<nanochat_mamba_layer> load(const checkpoint& ck, std::string_view prefix, const nanochat_mamba_config& c);

  status init_state(nanochat_mamba_state& s) const;

  // x [T, C] -> y [T, C], continuing from st (advanced by T tokens; untouched on error).
  status forward(const float* x, std::size_t T, float* y, nanochat_mamba_state& st, workspace& ws,
                 compute_context& cx) const {
    return run(x, T, y, st, st, ws, cx);
  }

  using cache = recurrent_cache<nanochat_mamba_state>;
  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return c.init(rollback_tokens_of(o), [this](nanochat_mamba_state& s) { return init_state(s); });
  }
  status forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws, compute_context& cx) const;

 private:
  static float rms_scale(const float* v, std::size_t n) noexcept;

  // Tokens of x from state `in` into `out` (may be the same object; written only at the end).
  status run(const float* x, std::size_t T, float* y, const nanochat_mamba_state& in, nanochat_mamba_state& out,
             workspace& ws, compute_context& cx) const;
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status nanochat_mamba_config::validate() const {
  if (n_embd == 0 || d_state == 0 || d_conv == 0 || expand == 0 || headdim == 0 || ngroups == 0)
    return make_error(errc::invalid_argument, "nanochat mamba: n_embd, mamba_d_state, mamba_d_conv, mamba_expand, ",
                      "mamba_headdim and mamba_ngroups must be positive");
  if (d_inner() % headdim != 0)
    return make_error(errc::invalid_argument, "nanochat mamba: d_inner ", d_inner(), " is not a multiple of mamba_headdim ",
                      headdim);
  if (nheads() % ngroups != 0)
    return make_error(errc::invalid_argument, "nanochat mamba: ", nheads(), " heads are not a multiple of mamba_ngroups ",
                      ngroups);
  if (complex_rope && d_state % 2 != 0)
    return make_error(errc::invalid_argument, "nanochat mamba: complex RoPE needs an even mamba_d_state, got ", d_state);
  if (complex_rope && !(rope_theta > 0 && std::isfinite(rope_theta)))
    return make_error(errc::invalid_argument, "nanochat mamba: rope_theta must be positive, got ", rope_theta);
  return {};
}

SLM_INLINE status nanochat_mamba_state::copy_from(const nanochat_mamba_state& o) {
  const floats* src[] = {&o.conv, &o.ssm, &o.prev_B, &o.prev_x, &o.angle};
  floats* dst[] = {&conv, &ssm, &prev_B, &prev_x, &angle};
  for (std::size_t i = 0; i < 5; ++i) {
    SLM_TRY(dst[i]->resize(src[i]->size()));
    if (src[i]->size()) std::memcpy(dst[i]->data(), src[i]->data(), src[i]->size() * sizeof(float));
  }
  n = o.n;
  return {};
}

SLM_INLINE result<nanochat_mamba_layer> nanochat_mamba_layer::load(const checkpoint& ck, std::string_view prefix,
                                                                   const nanochat_mamba_config& c) {
  SLM_TRY(c.validate());
  nanochat_mamba_layer m;
  m.cfg = c;
  const std::size_t H = c.nheads(), G = c.ngroups, N = c.d_state, cd = c.conv_dim();
  auto ip = load_linear(ck, join_module(prefix, "in_proj"), c.in_proj_rows(), c.n_embd);
  if (!ip.ok()) return std::move(ip).take_error();
  m.in_proj = std::move(*ip);
  auto op = load_linear(ck, join_module(prefix, "out_proj"), c.n_embd, c.d_inner());
  if (!op.ok()) return std::move(op).take_error();
  m.out_proj = std::move(*op);
  auto take = [&](floats& dst, const std::string& name, std::initializer_list<std::size_t> dims) -> status {
    auto v = load_shaped(ck, name, dims);
    if (!v.ok()) return std::move(v).take_error();
    dst = std::move(*v);
    return {};
  };
  SLM_TRY(take(m.conv_w, join_module(prefix, "conv1d.weight"), {cd, 1, c.d_conv}));
  SLM_TRY(take(m.conv_b, join_module(prefix, "conv1d.bias"), {cd}));
  SLM_TRY(take(m.A, join_module(prefix, "A_log"), {H}));
  for (std::size_t h = 0; h < H; ++h) m.A[h] = -std::exp(m.A[h]);
  SLM_TRY(take(m.dt_bias, join_module(prefix, "dt_bias"), {H}));
  SLM_TRY(take(m.D, join_module(prefix, "D"), {H}));
  if (c.bias) {
    SLM_TRY(take(m.B_bias, join_module(prefix, "B_bias"), {G, N}));
    SLM_TRY(take(m.C_bias, join_module(prefix, "C_bias"), {G, N}));
  }
  if (c.complex_rope) {
    SLM_TRY(m.inv_freq.resize(N / 2));
    for (std::size_t i = 0; i < N / 2; ++i)  // torch: 1 / theta^(arange(0, N, 2) / N) in f32
      m.inv_freq[i] = 1.0f / static_cast<float>(std::pow(c.rope_theta, static_cast<double>(static_cast<float>(2 * i) /
                                                                                             static_cast<float>(N))));
  }
  return m;
}

SLM_INLINE status nanochat_mamba_layer::init_state(nanochat_mamba_state& s) const {
  s.reset();  // zeroes what it holds; resize zeroes what it adds (one pass either way)
  const std::size_t H = cfg.nheads(), G = cfg.ngroups, N = cfg.d_state, P = cfg.headdim;
  SLM_TRY(s.conv.resize(cfg.conv_dim() * cfg.d_conv));
  SLM_TRY(s.ssm.resize(H * N * P));
  SLM_TRY(s.prev_B.resize(cfg.trapezoidal ? G * N : 0));
  SLM_TRY(s.prev_x.resize(cfg.trapezoidal ? H * P : 0));
  SLM_TRY(s.angle.resize(cfg.complex_rope ? G : 0));
  return {};
}

SLM_INLINE status nanochat_mamba_layer::forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws,
                                                compute_context& cx) const {
  const std::size_t C = cfg.n_embd;
  status s = c.forward(T, [&](const nanochat_mamba_state& in, nanochat_mamba_state& out, std::size_t first,
                              std::size_t count) { return run(x + first * C, count, y + first * C, in, out, ws, cx); });
  if (!s.ok()) return std::move(s).with_context("nanochat mamba");
  return s;
}

SLM_INLINE float nanochat_mamba_layer::rms_scale(const float* v, std::size_t n) noexcept {
  double ss = 0;
  for (std::size_t i = 0; i < n; ++i) ss += static_cast<double>(v[i]) * v[i];
  return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) +
                                            static_cast<double>(std::numeric_limits<float>::epsilon())));
}

SLM_INLINE status nanochat_mamba_layer::run(const float* x, std::size_t T, float* y, const nanochat_mamba_state& in,
                                            nanochat_mamba_state& out, workspace& ws, compute_context& cx) const {
  const std::size_t C = cfg.n_embd, E = cfg.d_inner(), H = cfg.nheads(), G = cfg.ngroups, N = cfg.d_state,
                    P = cfg.headdim, K = cfg.d_conv, cd = cfg.conv_dim(), R = cfg.in_proj_rows(), hpg = H / G;
  if (in.conv.size() != cd * K || in.ssm.size() != H * N * P)
    return make_error(errc::invalid_argument, "nanochat mamba: the state does not match the layer (init_state)");
  if (T == 0) return &in == &out ? status{} : out.copy_from(in);
  // Scratch: proj [T, R], u_ext [(K - 1 + T), cd], gated [T, E], and a working state.
  const std::size_t st_n = H * N * P + G * N + H * P + G + 2 * G * N + cd + H * P + 2 * H;
  SLM_TRY(ws.proj.resize(T * R + (K - 1 + T) * cd + T * E + st_n));
  float* proj = ws.proj.data();
  float* u = proj + T * R;
  float* gated = u + (K - 1 + T) * cd;
  float* ssm = gated + T * E;
  float* pB = ssm + H * N * P;
  float* px = pB + G * N;
  float* ang = px + H * P;
  float* Bt = ang + G;
  float* Ct = Bt + G * N;
  float* xbc = Ct + G * N;
  float* yt = xbc + cd;  // [H, P]
  float* dt = yt + H * P;
  float* dA = dt + H;
  SLM_TRY(in_proj.apply(x, T, C, proj, R, cx));  // [T, C] x [C, R] -> [T, R]
  // u_ext: the K - 1 previous raw inputs (channel-major in the state), then this call's.
  for (std::size_t k = 0; k + 1 < K; ++k)
    for (std::size_t c = 0; c < cd; ++c) u[k * cd + c] = in.conv[c * K + k + 1];
  for (std::size_t t = 0; t < T; ++t) std::memcpy(u + (K - 1 + t) * cd, proj + t * R + E, cd * sizeof(float));
  std::memcpy(ssm, in.ssm.data(), H * N * P * sizeof(float));
  if (cfg.trapezoidal) {
    std::memcpy(pB, in.prev_B.data(), G * N * sizeof(float));
    std::memcpy(px, in.prev_x.data(), H * P * sizeof(float));
  }
  if (cfg.complex_rope) std::memcpy(ang, in.angle.data(), G * sizeof(float));
  for (std::size_t t = 0; t < T; ++t) {
    const float* pr = proj + t * R;
    for (std::size_t c = 0; c < cd; ++c) {  // depthwise causal conv + SiLU
      float s = conv_b[c];
      for (std::size_t k = 0; k < K; ++k) s += conv_w[c * K + k] * u[(t + k) * cd + c];
      xbc[c] = silu(s);
    }
    const float* xs = xbc;  // [H, P]
    std::memcpy(Bt, xbc + E, G * N * sizeof(float));
    std::memcpy(Ct, xbc + E + G * N, G * N * sizeof(float));
    for (std::size_t g = 0; g < G; ++g) {
      float* b = Bt + g * N;
      float* c = Ct + g * N;
      if (cfg.qknorm) {
        const float sb = rms_scale(b, N), sc = rms_scale(c, N);
        for (std::size_t i = 0; i < N; ++i) b[i] *= sb, c[i] *= sc;
      }
      if (cfg.bias)
        for (std::size_t i = 0; i < N; ++i) b[i] += B_bias[g * N + i], c[i] += C_bias[g * N + i];
    }
    for (std::size_t h = 0; h < H; ++h) {
      dt[h] = softplus(pr[E + cd + h] + dt_bias[h]);
      dA[h] = std::exp(dt[h] * A[h]);
    }
    if (cfg.complex_rope) {
      const std::size_t half = N / 2;
      for (std::size_t g = 0; g < G; ++g) {
        float m = 0.0f;
        for (std::size_t j = 0; j < hpg; ++j) m += dt[g * hpg + j];
        ang[g] += m / static_cast<float>(hpg);
        for (float* v : {Bt + g * N, Ct + g * N})
          for (std::size_t i = 0; i < half; ++i) {
            const float a = ang[g] * inv_freq[i], co = std::cos(a), si = std::sin(a);
            const float v1 = v[i], v2 = v[i + half];
            v[i] = v1 * co - v2 * si;
            v[i + half] = v1 * si + v2 * co;
          }
      }
    }
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / hpg;
      const float* b = Bt + g * N;
      const float* c = Ct + g * N;
      const float* xh = xs + h * P;
      float* S = ssm + h * N * P;  // [N, P]
      float cur = dt[h], prv = 0.0f;
      if (cfg.trapezoidal) {
        const float lam = sigmoid(pr[E + cd + H + h]);
        cur = lam * dt[h];
        prv = (1.0f - lam) * dt[h] * dA[h];
      }
      const float* pb = pB + g * N;
      const float* pxh = px + h * P;
      for (std::size_t n = 0; n < N; ++n) {
        float* Sn = S + n * P;
        const float bc = cur * b[n], bp = prv * (cfg.trapezoidal ? pb[n] : 0.0f);
        for (std::size_t p = 0; p < P; ++p) {
          float v = Sn[p] * dA[h];
          if (cfg.trapezoidal) v += bp * pxh[p];
          Sn[p] = v + bc * xh[p];
        }
      }
      float* yh = yt + h * P;
      for (std::size_t p = 0; p < P; ++p) yh[p] = 0.0f;
      for (std::size_t n = 0; n < N; ++n) {
        const float* Sn = S + n * P;
        for (std::size_t p = 0; p < P; ++p) yh[p] += c[n] * Sn[p];
      }
      for (std::size_t p = 0; p < P; ++p) yh[p] += D[h] * xh[p];
    }
    if (cfg.trapezoidal) {
      std::memcpy(pB, Bt, G * N * sizeof(float));
      std::memcpy(px, xs, H * P * sizeof(float));
    }
    const float s = rms_scale(yt, E);
    float* gt = gated + t * E;
    for (std::size_t e = 0; e < E; ++e) gt[e] = (yt[e] * s) * silu(pr[e]);
  }
  SLM_TRY(out_proj.apply(gated, T, E, y, C, cx));  // [T, E] x [E, C] -> [T, C]
  // Success: commit the new state.
  if (&in != &out) SLM_TRY(init_state(out));
  for (std::size_t c = 0; c < cd; ++c)
    for (std::size_t k = 0; k < K; ++k) out.conv[c * K + k] = u[(T - 1 + k) * cd + c];  // rows T-1 .. T+K-2
  std::memcpy(out.ssm.data(), ssm, H * N * P * sizeof(float));
  if (cfg.trapezoidal) {
    std::memcpy(out.prev_B.data(), pB, G * N * sizeof(float));
    std::memcpy(out.prev_x.data(), px, H * P * sizeof(float));
  }
  if (cfg.complex_rope) std::memcpy(out.angle.data(), ang, G * sizeof(float));
  out.n = in.n + T;
  return {};
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
