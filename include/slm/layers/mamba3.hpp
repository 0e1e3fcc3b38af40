// slm/layers/mamba3.hpp - the Mamba-3 mixer, SISO and MIMO (state-spaces/mamba
// `mamba_ssm/modules/mamba3.py`): a state-space layer with a data-dependent, trapezoidal
// update, RMS-normed and biased B/C, and a data-dependent rotary embedding on B/C.
//
// Sizes: d_model, d_inner = expand * d_model (or given), headdim P, H = d_inner / P heads,
// d_state N, ngroups G (H % G == 0), MIMO rank R (1 for SISO), S rotary angles per token
// (S = (floor(N * rope_fraction) rounded down to even) / 2), d_in_proj = 2 d_inner + 2 R G N
// + 3 H + S. Head h reads B/C of group g(h) = h / (H / G).
//
// Parameters (state_dict names under a prefix such as `backbone.layers.N.mixer`):
//   in_proj.weight [d_in_proj, d_model]  rows: z [d_inner] | x [d_inner] | B [R G N] | C [R G N]
//                                              | dd_dt [H] | dd_A [H] | trap [H] | angles [S]
//   dt_bias [H]   D [H]   B_bias, C_bias [H, R, N]   B_norm.weight, C_norm.weight [N]
//   mimo_x, mimo_z, mimo_o [H, R, P] (MIMO only)     norm.weight [d_inner] (outproj_norm only)
//   out_proj.weight [d_model, d_inner]
// z and x: head h is channels h P .. h P + P. B and C are rank-major: (r G + g) N + n.
//
// Per token t and head h (u_t [d_model] -> out_t [d_model]; everything in f32):
//   [z, x, B, C, dd_dt, dd_A, trap, ang] = in_proj(u_t)
//   dt    = softplus(dd_dt_h + dt_bias_h)                        (torch threshold 20, no clamp)
//   A     = min(-f(dd_A_h), -A_floor)   f(a) = 1 + a (a >= 0), 1 / (1 - a) (a < 0)  "heavy tail"
//                                       f = softplus for checkpoints before upstream c69aaab
//   alpha = exp(A dt)    lambda = sigmoid(trap_h)    gamma = lambda dt    delta = (1 - lambda) dt
//   theta_h[s] += pi tanh(ang[s]) dt                                 cumulative, per head, s < S
//   k_r = rot_theta(rms(B[r, g]) * B_norm.weight + B_bias[h, r])     [N], rank r < R
//   q_r = rot_theta(rms(C[r, g]) * C_norm.weight + C_bias[h, r])     [N]
//         rot_theta turns pairs (2s, 2s+1) (SISO) or (s, s + N/2) (MIMO), s < S, by theta[s]:
//         (a, b) -> (a cos - b sin, a sin + b cos); other components pass through
//   v_r   = x_h * mimo_x[h, r]   (SISO: v_0 = x_h)                   [P]
//   S_h   = alpha S_h + delta alpha sum_r v'_r (x) k'_r + gamma sum_r v_r (x) k_r    S_h [P, N]
//           (v', k' = the previous token's v and rotated k, kept in the state; 0 when fresh)
//   y_r   = S_h q_r + D_h v_r                                        [P]
//   o_h   = sum_r norm_r(y_r) * silu(z_h * mimo_z[h, r]) * mimo_o[h, r]   (SISO: no mimo_z/o)
//           norm_r(y) = y * rsqrt(mean_p y^2 + eps) * norm.weight[h P ..]   (outproj_norm; per
//           head and per rank, norm before gate), or y itself
//   out_t = out_proj(o)
//
// State per sequence (mamba3_state): angle [H, S] (theta, kept in [0, 2 pi)), ssm [H, N, P]
// (S_h transposed, as the official MIMO kernel keeps it; mamba_ssm's ssm_state is (H, P, N)),
// k [R, H, N] (the last token's rotated, biased key), v [H, P] (the last token's raw x), and
// the token count. The last token's delta term is not in ssm: the next token adds it.
//
// Three entry points over the same parameters and state, all continuing from any state:
//  * forward(): chunked prefill. Per head, chunks of L tokens; with c_j = sum_{i<=j} A_i dt_i
//    (within the chunk), w_j = gamma_j + delta_{j+1} (w_{L-1} = gamma_{L-1}) and
//    S~ = S_in + delta_0 sum_r v'_r (x) k'_r (the pending term of the token before the chunk):
//      y_{i,r} = exp(c_i) S~ q_{i,r} + sum_{j<=i} m_ij sum_r' (q_{i,r} . k_{j,r'}) v_{j,r'} + D v_{i,r}
//      m_ij    = exp(c_i - c_j) w_j (j < i), gamma_i (j = i)
//      S_out   = exp(c_{L-1}) S~ + sum_j exp(c_{L-1} - c_j) w_j sum_r v_{j,r} (x) k_{j,r}
//    The chunk size changes the result only by float rounding.
//  * step(): one token, O(1) in the sequence length (the recurrence above).
//  * forward_reference(): the recurrence token by token (the plain reference path).
// Heads run in parallel on the caller's executor; each head is computed the same way
// whatever the partition, so results do not depend on the thread count. Scratch comes from
// the workspace: ws.proj holds T x (d_in_proj + 4 H + d_inner) floats, ws.attn
// scratch_floats(L) per task. Memory grows only through slm::floats.
// On an error from in_proj (or a cancellation before the call starts) the state is
// untouched; the SSM update itself cannot fail or be cancelled halfway; an error from
// out_proj leaves the state advanced (the decoder cache below can undo it).
//
// For the decoder, `cache` is a recurrent_cache<mamba3_state> (layers/recurrent_cache.hpp), as
// mamba2_mixer's: the current state, the undo of the last call, and with
// session_options::rollback_tokens = R > 0 the states after each of the last R tokens;
// mamba3_state has the kind / for_each_buffer members session save / load use. The
// config-driven HF decoder has no Mamba-3 binding (models/hf/bind.hpp): no Hugging Face
// model_type has Mamba-3 layers; NAM56R's model (models/nam56r/) runs them.
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
#include "slm/core/parallel.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/core/status.hpp"

namespace slm {

// How dd_A becomes A: the current upstream activation, or softplus (checkpoints trained
// before upstream commit c69aaab, 2026-06-02; nothing in a config says which).
enum class mamba3_a_activation : std::uint8_t { heavy_tail, softplus };

struct mamba3_config {
  std::size_t d_model = 0;
  std::size_t d_state = 128;
  std::size_t expand = 2;
  std::size_t headdim = 64;
  std::size_t ngroups = 1;
  std::size_t d_inner = 0;     // 0: expand * d_model
  bool is_mimo = false;
  std::size_t mimo_rank = 4;   // used only when is_mimo
  float rope_fraction = 0.5f;  // 0.5 or 1.0
  bool outproj_norm = false;   // is_outproj_norm: head-wise RMSNorm before the z gate (MIMO:
                               // per rank too; fuse_pregate_headwise_norm is the same math)
  float A_floor = 1e-4f;
  mamba3_a_activation a_activation = mamba3_a_activation::heavy_tail;
  std::size_t chunk_size = 0;  // 0: 64 / R (upstream's recommendation: 64 SISO, 64 / R MIMO)
  float eps = 1e-5f;           // B_norm, C_norm and norm

  std::size_t inner() const noexcept { return d_inner ? d_inner : expand * d_model; }
  std::size_t heads() const noexcept { return headdim ? inner() / headdim : 0; }
  std::size_t rank() const noexcept { return is_mimo ? mimo_rank : 1; }
  std::size_t angles() const noexcept {  // S
    std::size_t split = static_cast<std::size_t>(static_cast<float>(d_state) * rope_fraction);
    if (split % 2) --split;
    return split / 2;
  }
  std::size_t in_proj_dim() const noexcept {
    return 2 * inner() + 2 * rank() * ngroups * d_state + 3 * heads() + angles();
  }
  std::size_t chunk() const noexcept {
    return chunk_size ? chunk_size : std::max<std::size_t>(1, 64 / std::max<std::size_t>(1, rank()));
  }

  status validate() const;
};

// One sequence's recurrent state. n counts the tokens it has consumed; n == 0 means a
// fresh sequence (the buffers are then read as zeros whatever they hold).
struct mamba3_state {
  floats angle;  // [H, S] cumulative rotary angle theta, in [0, 2 pi)
  floats ssm;    // [H, N, P]: S_h^T (mamba_ssm's ssm_state (H, P, N) transposed per head)
  floats k;      // [R, H, N] last token's key: normed, biased, rotated
  floats v;      // [H, P] last token's raw x (not multiplied by mimo_x)
  std::size_t n = 0;

  void reset() noexcept {
    for (floats* f : {&angle, &ssm, &k, &v}) std::fill(f->data(), f->data() + f->size(), 0.0f);
    n = 0;
  }
  // Snapshot / restore: a deep copy of another state.
  status copy_from(const mamba3_state& o);
  std::size_t bytes() const noexcept { return (angle.size() + ssm.size() + k.size() + v.size()) * sizeof(float); }

  // For session save / load: a kind tag and the buffers in a fixed order (the members
  // recurrent_cache's serializable_state asks for).
  static constexpr std::string_view kind = "mamba3";
  template <class Self, class Fn>
  static void for_each_buffer(Self& s, Fn&& fn) {
    fn(s.angle);
    fn(s.ssm);
    fn(s.k);
    fn(s.v);
  }
};

namespace detail::mamba3 {

inline constexpr float pi = 3.14159265358979323846f;
inline constexpr float two_pi = 6.28318530717958647692f;

inline float heavy_tail(float x) noexcept { return x >= 0.0f ? 1.0f + x : 1.0f / (1.0f - x); }
inline float wrap_angle(float a) noexcept {
  if (a >= two_pi || a < 0.0f) a -= two_pi * std::floor(a / two_pi);
  return a >= two_pi ? 0.0f : a;
}

inline void axpy(float* y, float a, const float* x, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// C [M, Nc] += A [M, K] x B [K, Nc]; B and C row-major (leading dimensions ldb, ldc), A
// element (i, k) at A[i * ai + k * ak] (ai = lda, ak = 1: row-major; ai = 1, ak = lda: A
// stored transposed). Blocks of up to 4 rows x 16 columns are accumulated in registers (an
// axpy per k would store and reload the same output row K times in a row). GCC and Clang
// get the block as vector-extension registers (left to themselves they vectorize it across
// rows, with shuffles). The summation order is fixed by the shapes alone.
#if defined(__GNUC__) || defined(__clang__)
typedef float vec16 __attribute__((vector_size(64)));
template <std::size_t MR>
inline void gemm_block(float* C, std::size_t ldc, const float* A, std::size_t ai, std::size_t ak, const float* B,
                       std::size_t ldb, std::size_t K) noexcept {
  vec16 c[MR], b;
  for (std::size_t r = 0; r < MR; ++r) std::memcpy(&c[r], C + r * ldc, sizeof(vec16));
  for (std::size_t k = 0; k < K; ++k) {
    std::memcpy(&b, B + k * ldb, sizeof(vec16));
    const float* a = A + k * ak;
    for (std::size_t r = 0; r < MR; ++r) c[r] += a[r * ai] * b;
  }
  for (std::size_t r = 0; r < MR; ++r) std::memcpy(C + r * ldc, &c[r], sizeof(vec16));
}
#else
template <std::size_t MR>
inline void gemm_block(float* C, std::size_t ldc, const float* A, std::size_t ai, std::size_t ak, const float* B,
                       std::size_t ldb, std::size_t K) noexcept {
  float acc[MR][16];
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t l = 0; l < 16; ++l) acc[r][l] = C[r * ldc + l];
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t r = 0; r < MR; ++r)
      for (std::size_t l = 0; l < 16; ++l) acc[r][l] += A[r * ai + k * ak] * B[k * ldb + l];
  for (std::size_t r = 0; r < MR; ++r)
    for (std::size_t l = 0; l < 16; ++l) C[r * ldc + l] = acc[r][l];
}
#endif
template <std::size_t MR>  // MR rows of C
inline void gemm_rows(float* C, std::size_t ldc, const float* A, std::size_t ai, std::size_t ak, const float* B,
                      std::size_t ldb, std::size_t K, std::size_t Nc) noexcept {
  std::size_t j = 0;
  for (; j + 16 <= Nc; j += 16) gemm_block<MR>(C + j, ldc, A, ai, ak, B + j, ldb, K);
  if (j < Nc)
    for (std::size_t r = 0; r < MR; ++r)
      for (std::size_t k = 0; k < K; ++k) axpy(C + r * ldc + j, A[r * ai + k * ak], B + k * ldb + j, Nc - j);
}
void gemm_acc(float* C, std::size_t ldc, const float* A, std::size_t ai, std::size_t ak, const float* B,
                     std::size_t ldb, std::size_t M, std::size_t K, std::size_t Nc) noexcept;


}  // namespace detail::mamba3

class mamba3_mixer {
 public:
  mamba3_config cfg;
  linear in_proj, out_proj;
  floats dt_bias;                 // [H]
  floats D;                       // [H]
  floats B_bias, C_bias;          // [H, R, N]
  floats B_norm_w, C_norm_w;      // [N]
  floats mimo_x, mimo_z, mimo_o;  // [H, R, P] (MIMO)
  floats norm_w;                  // [d_inner] (outproj_norm)


  // Sizes the state's buffers and zeroes them (a fresh sequence).
  status init_state(mamba3_state& s) const;

  // Chunked prefill of T tokens x [T, d_model] -> y [T, d_model], continuing from st.
  status forward(const float* x, std::size_t T, float* y, mamba3_state& st, workspace& ws, compute_context& cx) const {
    return run(x, T, y, st, st, cfg.chunk(), ws, cx);
  }
  // The same with another chunk size (tests; tuning).
  status forward_chunked(const float* x, std::size_t T, float* y, mamba3_state& st, std::size_t chunk, workspace& ws,
                         compute_context& cx) const {
    if (chunk == 0) return make_error(errc::invalid_argument, "mamba3: chunk size 0");
    return run(x, T, y, st, st, chunk, ws, cx);
  }
  // One decode step: x [d_model] -> y [d_model].
  status step(const float* x, float* y, mamba3_state& st, workspace& ws, compute_context& cx) const {
    return run(x, 1, y, st, st, 0, ws, cx);
  }
  // The token-by-token recurrence over T tokens.
  status forward_reference(const float* x, std::size_t T, float* y, mamba3_state& st, workspace& ws,
                           compute_context& cx) const {
    return run(x, T, y, st, st, 0, ws, cx);
  }

  // The decoder's per-layer cache: the current state, the undo of the last call and the
  // last session_options::rollback_tokens states (layers/recurrent_cache.hpp).
  using cache = recurrent_cache<mamba3_state>;
  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return c.init(rollback_tokens_of(o), [this](mamba3_state& s) { return init_state(s); });
  }
  // x [T, d_model] -> out [T, d_model] (chunked; one token takes the step path). With a
  // rollback history, the last recorded tokens run one at a time.
  status forward(const float* x, std::size_t T, float* out, cache& c, workspace& ws, compute_context& cx) const;

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("in_proj", in_proj, true);
    fn("out_proj", out_proj, true);
  }

  // Floats of per-task scratch (ws.attn) for chunks of L tokens (0: the recurrence).
  std::size_t scratch_floats(std::size_t L) const noexcept;

 private:
  // Column offsets inside one row of the in_proj output.
  struct layout {
    std::size_t z, x, B, C, dt, dA, trap, ang, dip;
  };
  layout cols() const noexcept;

  // What the per-head passes read and write for tokens [0, T).
  struct pass {
    const float* zx;   // [T, dip] in_proj output; B, C normed in place, angles -> pi tanh(angles)
    const float* dt;   // [T, H]
    const float* adt;  // [T, H] A dt
    const float* gam;  // [T, H] lambda dt
    const float* del;  // [T, H] (1 - lambda) dt
    float* o;          // [T, d_inner] out_proj input
    mamba3_state* st;  // updated in place, head by head
  };

  // From state `in` to state `out` (may be the same object). chunk == 0: the recurrence.
  status run(const float* x, std::size_t T, float* y, const mamba3_state& in, mamba3_state& out, std::size_t chunk,
             workspace& ws, compute_context& cx) const;

  // Token t of head h: advances the angle th [S] and writes the rotated query q [R, N] and
  // key k [R, N] and the values v [R, P] (x * mimo_x). cs, sn: S floats each.
  void prepare_token(const pass& ps, std::size_t h, std::size_t t, float* th, float* q, float* k, float* v, float* cs,
                     float* sn) const noexcept;

  // o[t, h P ..] from the per-rank outputs y [R, P] (D skip included).
  void finish_token(const pass& ps, std::size_t h, std::size_t t, const float* y) const noexcept;

  // The previous token's values v' [R, P] = state x * mimo_x, and its keys k' [R, N].
  void load_prev(const mamba3_state& st, std::size_t h, float* vp, float* kp) const noexcept;
  // Carries token t's raw x and its keys k [R, N] into the state.
  void store_last(const pass& ps, std::size_t h, std::size_t t, const float* k) const noexcept;

  // The recurrence, token by token, over tokens [t0, t1).
  void ssm_sequential(const pass& ps, std::size_t h, std::size_t t0, std::size_t t1, float* scratch) const noexcept;

  // One chunk of Lc <= L tokens from c0 (see the header comment), continuing from the state;
  // scratch holds scratch_floats(L) floats.
  void ssm_chunk(const pass& ps, std::size_t h, std::size_t c0, std::size_t Lc, std::size_t L,
                 float* scratch) const noexcept;
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status mamba3_config::validate() const {
  if (d_model == 0 || d_state == 0 || headdim == 0 || ngroups == 0 || inner() == 0)
    return make_error(errc::invalid_argument, "mamba3: d_model, d_state, headdim, ngroups and d_inner must be positive");
  if (is_mimo && mimo_rank == 0) return make_error(errc::invalid_argument, "mamba3: mimo_rank must be positive");
  if (inner() % headdim != 0)
    return make_error(errc::invalid_argument, "mamba3: d_inner ", inner(), " is not a multiple of headdim ", headdim);
  if (heads() % ngroups != 0)
    return make_error(errc::invalid_argument, "mamba3: ", heads(), " heads do not split into ", ngroups, " groups");
  if (rope_fraction != 0.5f && rope_fraction != 1.0f)
    return make_error(errc::invalid_argument, "mamba3: rope_fraction ", rope_fraction, " is not 0.5 or 1.0");
  if (d_state % 2 != 0 || angles() == 0)
    return make_error(errc::invalid_argument, "mamba3: d_state ", d_state, " must be even and give a rotary angle");
  if (!(eps > 0.0f) || !(A_floor >= 0.0f) || !std::isfinite(A_floor))
    return make_error(errc::invalid_argument, "mamba3: eps must be positive and A_floor finite and >= 0");
  return {};
}

SLM_INLINE status mamba3_state::copy_from(const mamba3_state& o) {
  const floats* src[] = {&o.angle, &o.ssm, &o.k, &o.v};
  floats* dst[] = {&angle, &ssm, &k, &v};
  for (std::size_t i = 0; i < 4; ++i) SLM_TRY(dst[i]->resize(src[i]->size()));
  for (std::size_t i = 0; i < 4; ++i)
    if (src[i]->size()) std::memcpy(dst[i]->data(), src[i]->data(), src[i]->size() * sizeof(float));
  n = o.n;
  return {};
}

SLM_INLINE void detail::mamba3::gemm_acc(float* C, std::size_t ldc, const float* A, std::size_t ai, std::size_t ak,
                                         const float* B, std::size_t ldb, std::size_t M, std::size_t K,
                                         std::size_t Nc) noexcept {
  std::size_t i = 0;
  for (; i + 4 <= M; i += 4) gemm_rows<4>(C + i * ldc, ldc, A + i * ai, ai, ak, B, ldb, K, Nc);
  switch (M - i) {
    case 3: gemm_rows<3>(C + i * ldc, ldc, A + i * ai, ai, ak, B, ldb, K, Nc); break;
    case 2: gemm_rows<2>(C + i * ldc, ldc, A + i * ai, ai, ak, B, ldb, K, Nc); break;
    case 1: gemm_rows<1>(C + i * ldc, ldc, A + i * ai, ai, ak, B, ldb, K, Nc); break;
    default: break;
  }
}


SLM_INLINE status mamba3_mixer::init_state(mamba3_state& s) const {
  s.reset();  // zeroes what it holds; resize zeroes what it adds (one pass either way)
  const std::size_t H = cfg.heads();
  SLM_TRY(s.angle.resize(H * cfg.angles()));
  SLM_TRY(s.ssm.resize(H * cfg.headdim * cfg.d_state));
  SLM_TRY(s.k.resize(cfg.rank() * H * cfg.d_state));
  SLM_TRY(s.v.resize(H * cfg.headdim));
  return {};
}

SLM_INLINE status mamba3_mixer::forward(const float* x, std::size_t T, float* out, cache& c, workspace& ws,
                                        compute_context& cx) const {
  if (T == 0) return {};
  const std::size_t d = cfg.d_model;
  status s = c.forward(T, [&](const mamba3_state& in, mamba3_state& next, std::size_t first, std::size_t count) {
    return run(x + first * d, count, out + first * d, in, next, count == 1 ? 0 : cfg.chunk(), ws, cx);
  });
  if (!s.ok()) return std::move(s).with_context("mamba3");
  return s;
}

SLM_INLINE std::size_t mamba3_mixer::scratch_floats(std::size_t L) const noexcept {
  const std::size_t P = cfg.headdim, N = cfg.d_state, R = cfg.rank(), S = cfg.angles(), LR = L * R;
  const std::size_t seq = 3 * R * N + 5 * R * P + 2 * S;
  const std::size_t LRp = (LR + 15) / 16 * 16;
  const std::size_t chk = 2 * LR * N + N * LRp + 2 * LR * P + LR * LRp + 3 * L + R * P + 2 * S;
  return L ? std::max(seq, chk) : seq;
}

SLM_INLINE mamba3_mixer::layout mamba3_mixer::cols() const noexcept {
  const std::size_t Di = cfg.inner(), H = cfg.heads(), RGN = cfg.rank() * cfg.ngroups * cfg.d_state;
  layout l{};
  l.z = 0;
  l.x = Di;
  l.B = 2 * Di;
  l.C = l.B + RGN;
  l.dt = l.C + RGN;
  l.dA = l.dt + H;
  l.trap = l.dA + H;
  l.ang = l.trap + H;
  l.dip = l.ang + cfg.angles();
  return l;
}

SLM_INLINE status mamba3_mixer::run(const float* x, std::size_t T, float* y, const mamba3_state& in, mamba3_state& out,
                                    std::size_t chunk, workspace& ws, compute_context& cx) const {
  using namespace detail::mamba3;
  if (T == 0) return {};
  if (!x || !y) return make_error(errc::invalid_argument, "mamba3: null input or output");
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, G = cfg.ngroups, R = cfg.rank();
  const std::size_t S = cfg.angles(), Di = cfg.inner();
  const layout lc = cols();
  const std::size_t dip = lc.dip;
  const std::size_t sizes[] = {H * S, H * P * N, R * H * N, H * P};
  if (in.angle.size() != sizes[0] || in.ssm.size() != sizes[1] || in.k.size() != sizes[2] || in.v.size() != sizes[3])
    return make_error(errc::invalid_argument, "mamba3: the state is not sized for this layer (init_state)");
  if (cx.cancel && cx.cancel->cancelled()) return status(errc::cancelled, "cancelled before the layer ran");
  const std::size_t L = chunk == 0 ? 0 : std::min(chunk, T);
  std::size_t tasks = static_cast<std::size_t>(cx.ex.concurrency());
  tasks = std::max<std::size_t>(1, std::min(tasks, H));
  const std::size_t per_task = scratch_floats(L);

  // Fallible work first: the state is written only after in_proj has succeeded.
  floats* obufs[] = {&out.angle, &out.ssm, &out.k, &out.v};
  for (std::size_t i = 0; i < 4; ++i) SLM_TRY(obufs[i]->resize(sizes[i]));
  SLM_TRY(ws.proj.resize(T * (dip + 4 * H + Di)));
  SLM_TRY(ws.attn.resize(tasks * per_task));
  float* zx = ws.proj.data();     // [T, dip]
  float* sc = zx + T * dip;       // 4 x [T, H]: dt, A dt, gamma, delta
  float* o = sc + 4 * T * H;      // [T, Di]
  SLM_TRY(in_proj.apply(x, T, zx, cx));  // [T, d_model] x [d_model, d_in_proj] -> [T, d_in_proj]

  // Per-token scalars, B/C RMSNorm (over N, per rank and group) and the angle rates.
  for (std::size_t t = 0; t < T; ++t) {
    float* row = zx + t * dip;
    for (std::size_t h = 0; h < H; ++h) {
      const float dt = softplus(row[lc.dt + h] + dt_bias[h]);
      const float dA = row[lc.dA + h];
      const float f = cfg.a_activation == mamba3_a_activation::heavy_tail ? heavy_tail(dA) : softplus(dA);
      const float A = std::min(-f, -cfg.A_floor);
      const float lam = sigmoid(row[lc.trap + h]);
      sc[t * H + h] = dt;
      sc[(T + t) * H + h] = A * dt;
      sc[(2 * T + t) * H + h] = lam * dt;
      sc[(3 * T + t) * H + h] = (1.0f - lam) * dt;
    }
    for (std::size_t s = 0; s < S; ++s) row[lc.ang + s] = pi * std::tanh(row[lc.ang + s]);
    for (std::size_t i = 0; i < 2 * R * G; ++i) {  // B then C, (r G + g) N + n
      float* b = row + lc.B + i * N;
      const float* w = i < R * G ? B_norm_w.data() : C_norm_w.data();
      double ss = 0;
      for (std::size_t n = 0; n < N; ++n) ss += static_cast<double>(b[n]) * b[n];
      const float inv =
          static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(N) + static_cast<double>(cfg.eps)));
      for (std::size_t n = 0; n < N; ++n) b[n] = b[n] * inv * w[n];
    }
  }

  // The state moves to `out`; a fresh one is zeros.
  const bool fresh = in.n == 0;
  const floats* ibufs[] = {&in.angle, &in.ssm, &in.k, &in.v};
  for (std::size_t i = 0; i < 4; ++i) {
    if (fresh) std::fill(obufs[i]->data(), obufs[i]->data() + sizes[i], 0.0f);
    else if (&in != &out) std::memcpy(obufs[i]->data(), ibufs[i]->data(), sizes[i] * sizeof(float));
  }
  out.n = in.n + T;

  // The SSM and the output stage, head by head (in place on out); no cancellation inside,
  // so the state is never left half-updated.
  const pass ps{zx, sc, sc + T * H, sc + 2 * T * H, sc + 3 * T * H, o, &out};
  const static_partition part = partition(0, H, tasks);
  // Token blocks outermost, so a block's rows of zx stay in cache while the task's heads
  // read them; each head carries its recurrence in `out` from block to block.
  const std::size_t block = L ? L : std::min<std::size_t>(T, 64);
  SLM_TRY(parallel_for_chunks(cx.ex, part.count, [&](std::size_t c) {
    const index_range r = part.chunk(c);
    float* scratch = ws.attn.data() + c * per_task;
    for (std::size_t t0 = 0; t0 < T; t0 += block) {
      const std::size_t t1 = std::min(T, t0 + block);
      for (std::size_t h = r.begin; h < r.end; ++h) {
        if (L) ssm_chunk(ps, h, t0, t1 - t0, L, scratch);
        else ssm_sequential(ps, h, t0, t1, scratch);
      }
    }
  }));
  return out_proj.apply(o, T, y, cx);  // [T, d_inner] x [d_inner, d_model] -> [T, d_model]
}

SLM_INLINE void mamba3_mixer::prepare_token(const pass& ps, std::size_t h, std::size_t t, float* th, float* q, float* k,
                                            float* v, float* cs, float* sn) const noexcept {
  using namespace detail::mamba3;
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, G = cfg.ngroups, R = cfg.rank();
  const std::size_t S = cfg.angles(), g = h / (H / G);
  const layout lc = cols();
  const float* row = ps.zx + t * lc.dip;
  const float dt = ps.dt[t * H + h];
  for (std::size_t s = 0; s < S; ++s) {
    th[s] = wrap_angle(th[s] + row[lc.ang + s] * dt);
    cs[s] = std::cos(th[s]);
    sn[s] = std::sin(th[s]);
  }
  // SISO pairs (2s, 2s + 1); MIMO pairs (s, s + N / 2).
  const std::size_t stride = cfg.is_mimo ? 1 : 2, second = cfg.is_mimo ? N / 2 : 1;
  auto rotate = [&](float* u) {
    for (std::size_t s = 0; s < S; ++s) {
      float& a = u[s * stride];
      float& b = u[s * stride + second];
      const float a0 = a, b0 = b;
      a = a0 * cs[s] - b0 * sn[s];
      b = a0 * sn[s] + b0 * cs[s];
    }
  };
  const float* x = row + lc.x + h * P;
  for (std::size_t r = 0; r < R; ++r) {
    const float* Bn = row + lc.B + (r * G + g) * N;
    const float* Cn = row + lc.C + (r * G + g) * N;
    const float* bb = B_bias.data() + (h * R + r) * N;
    const float* cb = C_bias.data() + (h * R + r) * N;
    float* kr = k + r * N;
    float* qr = q + r * N;
    for (std::size_t n = 0; n < N; ++n) {
      kr[n] = Bn[n] + bb[n];
      qr[n] = Cn[n] + cb[n];
    }
    rotate(kr);
    rotate(qr);
    float* vr = v + r * P;
    if (cfg.is_mimo) {
      const float* mx = mimo_x.data() + (h * R + r) * P;
      for (std::size_t p = 0; p < P; ++p) vr[p] = x[p] * mx[p];
    } else {
      std::memcpy(vr, x, P * sizeof(float));
    }
  }
}

SLM_INLINE void mamba3_mixer::finish_token(const pass& ps, std::size_t h, std::size_t t,
                                           const float* y) const noexcept {
  using namespace detail::mamba3;
  const std::size_t P = cfg.headdim, R = cfg.rank(), Di = cfg.inner();
  const float* z = ps.zx + t * cols().dip + h * P;
  float* o = ps.o + t * Di + h * P;
  std::fill(o, o + P, 0.0f);
  for (std::size_t r = 0; r < R; ++r) {
    const float* yr = y + r * P;
    float inv = 1.0f;
    if (cfg.outproj_norm) {
      double ss = 0;
      for (std::size_t p = 0; p < P; ++p) ss += static_cast<double>(yr[p]) * yr[p];
      inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(P) + static_cast<double>(cfg.eps)));
    }
    const float* mz = cfg.is_mimo ? mimo_z.data() + (h * R + r) * P : nullptr;
    const float* mo = cfg.is_mimo ? mimo_o.data() + (h * R + r) * P : nullptr;
    for (std::size_t p = 0; p < P; ++p) {
      float val = yr[p];
      if (cfg.outproj_norm) val = val * inv * norm_w[h * P + p];
      val *= silu(mz ? z[p] * mz[p] : z[p]);
      o[p] += mo ? val * mo[p] : val;
    }
  }
}

SLM_INLINE void mamba3_mixer::load_prev(const mamba3_state& st, std::size_t h, float* vp, float* kp) const noexcept {
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, R = cfg.rank();
  const float* xv = st.v.data() + h * P;
  for (std::size_t r = 0; r < R; ++r) {
    if (cfg.is_mimo)
      for (std::size_t p = 0; p < P; ++p) vp[r * P + p] = xv[p] * mimo_x[(h * R + r) * P + p];
    else
      std::memcpy(vp + r * P, xv, P * sizeof(float));
    if (kp) std::memcpy(kp + r * N, st.k.data() + (r * H + h) * N, N * sizeof(float));
  }
}

SLM_INLINE void mamba3_mixer::store_last(const pass& ps, std::size_t h, std::size_t t, const float* k) const noexcept {
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, R = cfg.rank();
  std::memcpy(ps.st->v.data() + h * P, ps.zx + t * cols().dip + cols().x + h * P, P * sizeof(float));
  for (std::size_t r = 0; r < R; ++r) std::memcpy(ps.st->k.data() + (r * H + h) * N, k + r * N, N * sizeof(float));
}

SLM_INLINE void mamba3_mixer::ssm_sequential(const pass& ps, std::size_t h, std::size_t t0, std::size_t t1,
                                             float* scratch) const noexcept {
  using namespace detail::mamba3;
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, R = cfg.rank(), S = cfg.angles();
  float* q = scratch;         // [R, N]
  float* kk = q + R * N;      // [2 R, N]: the previous token's keys k', then this token's k
  float* vv = kk + 2 * R * N;  // [2 R, P]: v', then v
  float* cf = vv + 2 * R * P;  // [2 R, P]: beta v', then gamma v
  float* y = cf + 2 * R * P;   // [R, P]
  float* cs = y + R * P;
  float* sn = cs + S;
  float* St = ps.st->ssm.data() + h * N * P;  // S_h^T [N, P]
  float* th = ps.st->angle.data() + h * S;
  load_prev(*ps.st, h, vv, kk);
  for (std::size_t t = t0; t < t1; ++t) {
    prepare_token(ps, h, t, th, q, kk + R * N, vv + R * P, cs, sn);
    const float alpha = std::exp(ps.adt[t * H + h]);
    const float beta = ps.del[t * H + h] * alpha, gamma = ps.gam[t * H + h];
    for (std::size_t i = 0; i < R * P; ++i) {
      cf[i] = beta * vv[i];
      cf[R * P + i] = gamma * vv[R * P + i];
    }
    // S^T = alpha S^T + [K'; K]^T [beta V'; gamma V]: [N, P] + [N, 2R] x [2R, P] -> [N, P].
    for (std::size_t i = 0; i < N * P; ++i) St[i] *= alpha;
    gemm_acc(St, P, kk, 1, N, cf, P, N, 2 * R, P);
    // y_r = S q_r + D v_r, all ranks: Y = D V + Q S^T: [R, N] x [N, P] -> [R, P].
    for (std::size_t i = 0; i < R * P; ++i) y[i] = D[h] * vv[R * P + i];
    gemm_acc(y, P, q, N, 1, St, P, R, N, P);
    finish_token(ps, h, t, y);
    std::memcpy(kk, kk + R * N, R * N * sizeof(float));  // this token becomes the previous one
    std::memcpy(vv, vv + R * P, R * P * sizeof(float));
  }
  store_last(ps, h, t1 - 1, kk);
}

SLM_INLINE void mamba3_mixer::ssm_chunk(const pass& ps, std::size_t h, std::size_t c0, std::size_t Lc, std::size_t L,
                                        float* scratch) const noexcept {
  using namespace detail::mamba3;
  const std::size_t H = cfg.heads(), P = cfg.headdim, N = cfg.d_state, R = cfg.rank(), S = cfg.angles();
  const std::size_t LR = L * R, LRp = (LR + 15) / 16 * 16;  // score rows padded to whole 16-column blocks
  float* Q = scratch;         // [L R, N]   row j R + r: q_{j,r}
  float* K = Q + LR * N;      // [L R, N]
  float* Kt = K + LR * N;     // [N, LRp]   K transposed
  float* V = Kt + N * LRp;    // [L R, P]
  float* Y = V + LR * P;      // [L R, P]
  float* M = Y + LR * P;      // [L R, LRp] scores times decay, causal blocks only
  float* cum = M + LR * LRp;  // [L] c_j
  float* w = cum + L;         // [L] w_j
  float* ec = w + L;          // [L] exp(c_j), then exp(c_last - c_j) w_j
  float* vp = ec + L;         // [R, P] previous token's values
  float* cs = vp + R * P;
  float* sn = cs + S;
  float* St = ps.st->ssm.data() + h * N * P;  // S_h^T [N, P]
  float* th = ps.st->angle.data() + h * S;
  const std::size_t n = Lc * R;
  for (std::size_t j = 0; j < Lc; ++j)
    prepare_token(ps, h, c0 + j, th, Q + j * R * N, K + j * R * N, V + j * R * P, cs, sn);
  // S~^T = S^T + K'^T (delta_0 V') ([N, R] x [R, P] -> [N, P]): the pending trapezoid term
  // of the token before the chunk (zeros for a fresh sequence).
  const float d0 = ps.del[c0 * H + h];
  load_prev(*ps.st, h, vp, nullptr);
  for (std::size_t i = 0; i < R * P; ++i) vp[i] *= d0;
  gemm_acc(St, P, ps.st->k.data() + h * N, 1, H * N, vp, P, N, R, P);
  float acc = 0.0f;
  for (std::size_t j = 0; j < Lc; ++j) {
    cum[j] = acc += ps.adt[(c0 + j) * H + h];
    w[j] = ps.gam[(c0 + j) * H + h] + (j + 1 < Lc ? ps.del[(c0 + j + 1) * H + h] : 0.0f);
    ec[j] = std::exp(cum[j]);
  }
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t m = 0; m < N; ++m) Kt[m * LRp + a] = K[a * N + m];
  for (std::size_t m = 0; m < N; ++m) std::fill(Kt + m * LRp + n, Kt + (m + 1) * LRp, 0.0f);
  // Row groups of 4: each needs the columns of its tokens and before, (last token + 1) R.
  for (std::size_t a0 = 0; a0 < n; a0 += 4) {
    const std::size_t rows = std::min<std::size_t>(4, n - a0), ncol = ((a0 + rows - 1) / R + 1) * R;
    // Scores: [rows, N] x [N, ncol] -> [rows, ncol] (computed over whole 16-column blocks);
    // then m_ij: exp(c_i - c_j) w_j below the diagonal block, gamma_i on it, 0 above.
    const std::size_t ncolp = std::min(LRp, (ncol + 15) / 16 * 16);
    for (std::size_t a = a0; a < a0 + rows; ++a) std::fill(M + a * LRp, M + a * LRp + ncolp, 0.0f);
    gemm_acc(M + a0 * LRp, LRp, Q + a0 * N, N, 1, Kt, LRp, rows, N, ncolp);
    for (std::size_t a = a0; a < a0 + rows; ++a) {
      const std::size_t i = a / R;
      float* Ma = M + a * LRp;
      for (std::size_t j = 0; j < i; ++j) {
        const float f = std::exp(cum[i] - cum[j]) * w[j];
        for (std::size_t b = j * R; b < (j + 1) * R; ++b) Ma[b] *= f;
      }
      const float gi = ps.gam[(c0 + i) * H + h];
      for (std::size_t b = i * R; b < (i + 1) * R; ++b) Ma[b] *= gi;
      std::fill(Ma + (i + 1) * R, Ma + ncolp, 0.0f);
    }
    // Y = D V + M V: [rows, ncol] x [ncol, P] -> [rows, P].
    for (std::size_t a = a0; a < a0 + rows; ++a)
      for (std::size_t p = 0; p < P; ++p) Y[a * P + p] = D[h] * V[a * P + p];
    gemm_acc(Y + a0 * P, P, M + a0 * LRp, LRp, 1, V, P, rows, ncol, P);
  }
  // Y += diag(exp(c)) Q S~^T: [n, N] x [N, P] -> [n, P] (Q is not needed unscaled any more).
  for (std::size_t a = 0; a < n; ++a)
    for (std::size_t m = 0; m < N; ++m) Q[a * N + m] *= ec[a / R];
  gemm_acc(Y, P, Q, N, 1, St, P, n, N, P);
  for (std::size_t j = 0; j < Lc; ++j) finish_token(ps, h, c0 + j, Y + j * R * P);
  // S^T = exp(c_last) S~^T + K^T (diag(exp(c_last - c_j) w_j) V): [N, n] x [n, P] -> [N, P].
  const float last = cum[Lc - 1], el = std::exp(last);
  for (std::size_t j = 0; j < Lc; ++j) ec[j] = std::exp(last - cum[j]) * w[j];
  for (std::size_t a = 0; a < n; ++a)  // V is not needed unscaled any more
    for (std::size_t p = 0; p < P; ++p) V[a * P + p] *= ec[a / R];
  for (std::size_t i = 0; i < N * P; ++i) St[i] *= el;
  gemm_acc(St, P, K, 1, N, V, P, N, n, P);  // A = K read transposed
  store_last(ps, h, c0 + Lc - 1, K + (Lc - 1) * R * N);
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
