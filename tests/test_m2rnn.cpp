// The M2RNN mixer (slm/layers/m2rnn.hpp).
//
// The scan against cppmega's own code (tests/data/golden/nam56r/cppmega_m2rnn_scan__scan:
// `_softplus_decay_gate`, `_torch_m2rnn_forward` from a zero state and from in/h0, B = 2,
// S = 37, H = 3, K = V = 16, one q and one k head; see the JSON beside it):
//  * the forget gate against in/xf;
//  * outputs and final states of the chunked scan, the reference scan and the one-token
//    decode step, from zero and from h0, all within kTol of the largest reference value
//    (the measured errors are printed);
//  * chunk sizes 1, 3, 8, 16, 64 equal the reference; thread counts 1, 2, 3 identical.
// The whole mixer on random weights under the Megatron key names, against a naive
// double-precision transcription of cppmega's CppMegaM2RNNMixer: chunked prefill at chunk
// sizes 1, 3, 16, 64, the reference path and step-by-step decode, from a fresh state and
// continuing from a prefix, options (no conv, no D, two q/k heads); the decoder cache's
// one-level undo, snapshot / restore, thread-count independence, and clear errors for bad
// configurations, shapes and states.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "slm/layers/m2rnn.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/nam56r/bind.hpp"
#include "test_helpers.hpp"

namespace {

using slm::m2rnn_mixer;
using slm::m2rnn_state;

using slm_test::rel_err;
using slm_test::max_abs_diff;

// ---------------------------------------------------------------------------------
// The scan against the golden data.

// The golden is f32 on the CPU through torch; we differ only in summation order inside the
// 16-term products and in tanh / exp / log1p last bits, compounded over 37 contracting
// steps (f < 1, |tanh| < 1). Measured: <= 5e-7 relative (1.4e-6 absolute on outputs up to
// 7.1, 4.2e-7 on states below 1); 1e-5 leaves a 20x margin for other compilers and libms
// while still catching any real error (a wrong sign, order or index moves results by >1e-2).
constexpr double kTol = 1e-5;

struct scan_golden {
  std::optional<slm::safetensors::file> file;
  std::size_t B = 2, S = 37, H = 3, K = 16, V = 16;

  std::vector<float> tensor(const std::string& n) const {
    std::vector<float> v;
    const auto* t = file->find(n);
    EXPECT_NE(t, nullptr) << n;
    if (!t) return v;
    v.resize(static_cast<std::size_t>(t->shape.numel()));
    EXPECT_TRUE(file->view(*t).to_f32(v).ok());
    return v;
  }
  slm::m2rnn_scan_dims dims() const { return {H, K, V, 1, 1}; }
  // Batch b of the golden's [B, S, ...] inputs; y [S, H, V].
  slm::m2rnn_scan_io io(const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
                        const std::vector<float>& f, std::vector<float>& y, std::size_t b) const {
    return {q.data() + b * S * K, K, k.data() + b * S * K, K, v.data() + b * S * H * V, H * V,
            f.data() + b * S * H,  H, y.data(),              H * V};
  }
};

scan_golden load_scan_golden() {
  scan_golden g;
  auto f = slm::safetensors::file::open(slm_test::test_data("golden/nam56r/cppmega_m2rnn_scan__scan.safetensors"));
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (f.ok()) g.file.emplace(std::move(*f));
  return g;
}

TEST(m2rnn, GoldenForgetGate) {
  scan_golden g = load_scan_golden();
  ASSERT_TRUE(g.file);
  const auto raw = g.tensor("in/f_raw"), A_log = g.tensor("in/A_log"), dtb = g.tensor("in/dt_bias"),
             xf = g.tensor("in/xf");
  ASSERT_EQ(raw.size(), g.B * g.S * g.H);
  std::vector<float> got(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) got[i] = slm::m2rnn_forget_gate(raw[i], A_log[i % g.H], dtb[i % g.H]);
  const double e = max_abs_diff(got.data(), xf.data(), xf.size());
  std::printf("[ figures  ] forget gate vs cppmega: max abs err %.3g\n", e);
  EXPECT_LE(e, 1e-6);  // values in (0.35, 0.98): a few ulp of exp/log1p
}

// Outputs and final states of every path, from zero and from in/h0.
TEST(m2rnn, GoldenScanOutputsAndStates) {
  scan_golden g = load_scan_golden();
  ASSERT_TRUE(g.file);
  const std::size_t S = g.S, HV = g.H * g.V, MKV = g.H * g.K * g.V;
  const auto q = g.tensor("in/q"), k = g.tensor("in/k"), v = g.tensor("in/v"), W = g.tensor("in/W"),
             xf = g.tensor("in/xf"), h0 = g.tensor("in/h0");
  ASSERT_EQ(W.size(), g.H * g.V * g.V);
  ASSERT_EQ(h0.size(), g.B * MKV);
  slm::workspace ws;
  double worst_y = 0, worst_m = 0;
  for (int init = 0; init < 2; ++init) {
    const auto yref = g.tensor(init ? "out/seq_out_h0" : "out/seq_out");
    const auto mref = g.tensor(init ? "out/seq_h_h0" : "out/seq_h");
    ASSERT_EQ(yref.size(), g.B * S * HV);
    ASSERT_EQ(mref.size(), g.B * MKV);
    for (std::size_t b = 0; b < g.B; ++b) {
      // 0: chunked as the golden (chunk 8, 3 threads), 1: whole sequence at once, 2: the
      // reference, 3: one-token decode steps.
      for (int path = 0; path < 4; ++path) {
        std::vector<float> M(MKV, 0.0f), y(S * HV, -1.0f);
        if (init) std::copy(h0.begin() + static_cast<std::ptrdiff_t>(b * MKV),
                            h0.begin() + static_cast<std::ptrdiff_t>((b + 1) * MKV), M.begin());
        const slm::m2rnn_scan_io io = g.io(q, k, v, xf, y, b);
        if (path == 0) {
          ASSERT_TRUE(slm::m2rnn_scan(g.dims(), W.data(), io, S, M.data(), 8, ws, slm_test::the_pools().p3).ok());
        } else if (path == 1) {
          ASSERT_TRUE(slm::m2rnn_scan(g.dims(), W.data(), io, S, M.data(), 0, ws, slm_test::the_pools().p2).ok());
        } else if (path == 2) {
          ASSERT_TRUE(slm::m2rnn_scan_reference(g.dims(), W.data(), io, S, M.data(), ws).ok());
        } else {
          for (std::size_t t = 0; t < S; ++t) {
            slm::m2rnn_scan_io one = io;
            one.q += t * io.ldq;
            one.k += t * io.ldk;
            one.v += t * io.ldv;
            one.f += t * io.ldf;
            one.y += t * io.ldy;
            ASSERT_TRUE(slm::m2rnn_scan(g.dims(), W.data(), one, 1, M.data(), 1, ws, slm_test::the_pools().p2).ok());
          }
        }
        const double ey = rel_err(y.data(), yref.data() + b * S * HV, S * HV);
        const double em = rel_err(M.data(), mref.data() + b * MKV, MKV);
        EXPECT_LE(ey, kTol) << "init " << init << " b" << b << " path " << path;
        EXPECT_LE(em, kTol) << "init " << init << " b" << b << " path " << path;
        worst_y = std::max(worst_y, ey);
        worst_m = std::max(worst_m, em);
        if (path == 0)
          std::printf("[ figures  ] scan %s b%zu: out max abs err %.3g (max |ref| %.3g), state max abs err %.3g\n",
                      init ? "from h0" : "from zero", b, max_abs_diff(y.data(), yref.data() + b * S * HV, S * HV),
                      static_cast<double>(std::fabs(*std::max_element(
                          yref.begin(), yref.end(), [](float a, float c) { return std::fabs(a) < std::fabs(c); }))),
                      max_abs_diff(M.data(), mref.data() + b * MKV, MKV));
      }
    }
  }
  std::printf("[ figures  ] scan vs cppmega, all paths: worst out rel err %.3g, worst state rel err %.3g\n", worst_y,
              worst_m);
}

// Chunked (1, 3, 8, 16, 64 and whole) against the reference over every prefix length,
// thread counts 1, 2, 3: the same operations per head in the same order, so equal bit for bit.
TEST(m2rnn, ScanChunksAndThreadsMatchReference) {
  scan_golden g = load_scan_golden();
  ASSERT_TRUE(g.file);
  const std::size_t S = g.S, HV = g.H * g.V, MKV = g.H * g.K * g.V;
  const auto q = g.tensor("in/q"), k = g.tensor("in/k"), v = g.tensor("in/v"), W = g.tensor("in/W"),
             xf = g.tensor("in/xf"), h0 = g.tensor("in/h0");
  slm::workspace ws;
  slm::serial_executor serial;
  double worst = 0;
  for (std::size_t n : {1u, 2u, 7u, 8u, 9u, 16u, 17u, 37u}) {
    std::vector<float> Mr(h0.begin(), h0.begin() + static_cast<std::ptrdiff_t>(MKV)), yr(S * HV);
    ASSERT_TRUE(slm::m2rnn_scan_reference(g.dims(), W.data(), g.io(q, k, v, xf, yr, 1), n, Mr.data(), ws).ok());
    for (std::size_t chunk : {0u, 1u, 3u, 8u, 16u, 64u})
      for (slm::executor_ref ex : {slm::executor_ref(serial), slm::executor_ref(slm_test::the_pools().p2),
                                   slm::executor_ref(slm_test::the_pools().p3)}) {
        std::vector<float> M(h0.begin(), h0.begin() + static_cast<std::ptrdiff_t>(MKV)), y(S * HV);
        ASSERT_TRUE(slm::m2rnn_scan(g.dims(), W.data(), g.io(q, k, v, xf, y, 1), n, M.data(), chunk, ws, ex).ok());
        const double e = std::max(rel_err(y.data(), yr.data(), n * HV), rel_err(M.data(), Mr.data(), MKV));
        EXPECT_LE(e, 1e-6) << "n " << n << " chunk " << chunk;
        worst = std::max(worst, e);
      }
  }
  std::printf("[ figures  ] chunked scan vs reference scan: worst rel err %.3g\n", worst);
}

TEST(m2rnn, ScanArgumentErrors) {
  slm::workspace ws;
  slm::serial_executor ex;
  std::vector<float> buf(4096, 0.1f), M(2 * 4 * 2), W(2 * 2 * 2), y(64);
  const slm::m2rnn_scan_dims d{2, 4, 2, 1, 1};
  const slm::m2rnn_scan_io io{buf.data(), 4, buf.data(), 4, buf.data(), 4, buf.data(), 2, y.data(), 4};
  EXPECT_TRUE(slm::m2rnn_scan(d, W.data(), io, 3, M.data(), 2, ws, ex).ok());
  EXPECT_TRUE(slm_test::fails_with(slm::m2rnn_scan({3, 4, 2, 2, 1}, W.data(), io, 3, M.data(), 2, ws, ex),
                                   slm::errc::invalid_argument, {"2 q heads", "3 heads"}));
  EXPECT_TRUE(slm_test::fails_with(slm::m2rnn_scan({2, 0, 2, 1, 1}, W.data(), io, 3, M.data(), 2, ws, ex),
                                   slm::errc::invalid_argument, {"positive"}));
  slm::m2rnn_scan_io bad = io;
  bad.ldv = 3;
  EXPECT_TRUE(slm_test::fails_with(slm::m2rnn_scan(d, W.data(), bad, 3, M.data(), 2, ws, ex),
                                   slm::errc::invalid_argument, {"row strides", "v 3"}));
  EXPECT_TRUE(slm_test::fails_with(slm::m2rnn_scan_reference(d, W.data(), bad, 3, M.data(), ws),
                                   slm::errc::invalid_argument, {"row strides"}));
  bad = io;
  bad.f = nullptr;
  EXPECT_TRUE(slm_test::fails_with(slm::m2rnn_scan(d, W.data(), bad, 3, M.data(), 2, ws, ex),
                                   slm::errc::invalid_argument, {"null"}));
  EXPECT_TRUE(slm_test::fails_with(slm::m2rnn_scan(d, nullptr, io, 3, M.data(), 2, ws, ex),
                                   slm::errc::invalid_argument, {"null"}));
  EXPECT_TRUE(slm::m2rnn_scan(d, nullptr, bad, 0, nullptr, 2, ws, ex).ok());  // nothing to do
}

// ---------------------------------------------------------------------------------
// The whole mixer on random weights.

struct rng {
  std::uint64_t s;
  float uniform(float lo, float hi) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    return static_cast<float>(lo + (hi - lo) * u);
  }
};

struct params {
  std::vector<float> in_proj, conv_w, conv_b, A_log, dt_bias, W, D, g_norm, out_proj;
};

params random_params(const slm::m2rnn_config& c, std::uint64_t seed) {
  rng r{seed};
  params p;
  const std::size_t d = c.d_model, H = c.heads(), V = c.v_head_dim, cd = c.conv_dim(), Kc = c.conv_kernel;
  auto fill = [&](std::vector<float>& v, std::size_t n, float lo, float hi) {
    v.resize(n);
    for (auto& x : v) x = r.uniform(lo, hi);
  };
  const float si = 1.7f / std::sqrt(static_cast<float>(d)), so = 1.7f / std::sqrt(static_cast<float>(H * V));
  fill(p.in_proj, c.in_proj_dim() * d, -si, si);
  fill(p.conv_w, cd * Kc, -0.6f, 0.6f);
  fill(p.conv_b, cd, -0.2f, 0.2f);
  p.A_log.resize(H);
  for (auto& x : p.A_log) x = std::log(r.uniform(0.3f, 4.0f));
  fill(p.dt_bias, H, -2.0f, 0.5f);
  fill(p.W, H * V * V, -0.15f, 0.15f);
  for (std::size_t h = 0; h < H; ++h)
    for (std::size_t j = 0; j < V; ++j) p.W[(h * V + j) * V + j] += 1.0f;  // cppmega inits W to identity
  fill(p.D, H * V, 0.5f, 1.5f);
  fill(p.g_norm, H * V, 0.7f, 1.3f);
  fill(p.out_proj, d * H * V, -so, so);
  return p;
}

// cppmega's CppMegaM2RNNMixer._forward_unpacked transcribed in double, one sequence u [T, d],
// from a fresh state.
std::vector<double> naive_m2rnn(const slm::m2rnn_config& c, const params& p, const std::vector<float>& u,
                                std::size_t T) {
  const std::size_t d = c.d_model, H = c.heads(), K = c.k_head_dim, V = c.v_head_dim, cd = c.conv_dim(),
                    dip = c.in_proj_dim(), Kc = c.conv_kernel, Hq = c.num_q_heads, Hk = c.num_k_heads;
  auto silu = [](double x) { return x / (1 + std::exp(-x)); };
  std::vector<double> proj(T * dip, 0.0), conv(T * cd), M(H * K * V, 0.0), out(T * d, 0.0);
  for (std::size_t t = 0; t < T; ++t)  // input_projection
    for (std::size_t o = 0; o < dip; ++o)
      for (std::size_t i = 0; i < d; ++i) proj[t * dip + o] += double(p.in_proj[o * d + i]) * u[t * d + i];
  for (std::size_t t = 0; t < T; ++t)  // conv1d(padding Kc - 1)[..., :T], then silu
    for (std::size_t ch = 0; ch < cd; ++ch) {
      if (Kc == 0) {
        conv[t * cd + ch] = proj[t * dip + ch];
        continue;
      }
      double a = p.conv_b[ch];
      for (std::size_t j = 0; j < Kc; ++j)
        if (t + j + 1 >= Kc) a += double(p.conv_w[ch * Kc + j]) * proj[(t + j + 1 - Kc) * dip + ch];
      conv[t * cd + ch] = silu(a);
    }
  for (std::size_t t = 0; t < T; ++t) {
    std::vector<double> y(H * V);
    for (std::size_t h = 0; h < H; ++h) {
      double sp = proj[t * dip + cd + h] + p.dt_bias[h];
      sp = sp > 20 ? sp : std::log1p(std::exp(sp));
      const double f = std::exp(-std::exp(double(p.A_log[h])) * sp);
      const double* q = &conv[t * cd + (h / (H / Hq)) * K];
      const double* k = &conv[t * cd + Hq * K + (h / (H / Hk)) * K];
      const double* v = &conv[t * cd + (Hq + Hk) * K + h * V];
      double* Mh = &M[h * K * V];
      std::vector<double> hn(K * V);
      for (std::size_t i = 0; i < K; ++i)
        for (std::size_t j = 0; j < V; ++j) {
          double s = k[i] * v[j];
          for (std::size_t l = 0; l < V; ++l) s += Mh[i * V + l] * p.W[(h * V + l) * V + j];
          hn[i * V + j] = std::tanh(s);
        }
      for (std::size_t i = 0; i < K * V; ++i) Mh[i] = f * Mh[i] + (1 - f) * hn[i];
      for (std::size_t j = 0; j < V; ++j) {
        double s = 0;
        for (std::size_t i = 0; i < K; ++i) s += q[i] * Mh[i * V + j];
        y[h * V + j] = s + (c.use_residual ? double(p.D[h * V + j]) * v[j] : 0.0);
      }
    }
    double ss = 0;
    for (std::size_t i = 0; i < H * V; ++i) {
      y[i] *= silu(proj[t * dip + cd + H + i]);
      ss += y[i] * y[i];
    }
    const double r = 1 / std::sqrt(ss / double(H * V) + c.eps);
    for (std::size_t i = 0; i < H * V; ++i) y[i] *= r * p.g_norm[i];
    for (std::size_t o = 0; o < d; ++o)
      for (std::size_t i = 0; i < H * V; ++i) out[t * d + o] += double(p.out_proj[o * H * V + i]) * y[i];
  }
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref, std::size_t n) {
  double e = 0, m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    e = std::max(e, std::fabs(double(got[i]) - ref[i]));
    m = std::max(m, std::fabs(ref[i]));
  }
  return m > 0 ? e / m : e;
}

// A checkpoint directory holding one M2RNN layer under `prefix`, as Megatron names it.
struct layer_fixture {
  slm::m2rnn_config cfg;
  params p;
  std::string prefix;
  std::unique_ptr<slm_test::temp_dir> dir;
  std::optional<slm::checkpoint> ck;
  std::optional<m2rnn_mixer> layer;
  std::vector<float> u;  // [T, d]
  std::size_t T = 0;
};

layer_fixture make_layer(const slm::m2rnn_config& c, const std::string& tag, std::size_t T = 45,
                         std::uint64_t seed = 7) {
  layer_fixture f;
  f.cfg = c;
  f.p = random_params(c, seed);
  f.prefix = slm::nam56r::m2rnn_prefix(11);
  f.T = T;
  rng r{seed * 31 + 1};
  f.u.resize(T * c.d_model);
  for (auto& x : f.u) x = r.uniform(-1.5f, 1.5f);
  f.dir = std::make_unique<slm_test::temp_dir>(tag);
  slm::safetensors::writer w;
  const auto i64 = [](std::size_t v) { return static_cast<std::int64_t>(v); };
  auto add = [&](const char* n, const std::vector<float>& v, slm::shape s) {
    ASSERT_TRUE(w.add(f.prefix + "." + n, slm::dtype::f32, s, std::as_bytes(std::span(v))).ok()) << n;
  };
  const std::size_t H = c.heads(), V = c.v_head_dim;
  add("input_projection.weight", f.p.in_proj, slm::shape{i64(c.in_proj_dim()), i64(c.d_model)});
  if (c.conv_kernel) {
    add("conv1d.weight", f.p.conv_w, slm::shape{i64(c.conv_dim()), 1, i64(c.conv_kernel)});
    add("conv1d.bias", f.p.conv_b, slm::shape{i64(c.conv_dim())});
  }
  add("A_log", f.p.A_log, slm::shape{i64(H)});
  add("dt_bias", f.p.dt_bias, slm::shape{i64(H)});
  add("state_weight", f.p.W, slm::shape{i64(H), i64(V), i64(V)});
  if (c.use_residual) add("D", f.p.D, slm::shape{i64(H), i64(V)});
  add("g_norm.weight", f.p.g_norm, slm::shape{i64(H * V)});
  add("output_projection.weight", f.p.out_proj, slm::shape{i64(c.d_model), i64(H * V)});
  EXPECT_TRUE(w.write(*f.dir / "model.safetensors").ok());
  EXPECT_TRUE(slm_test::write_file(*f.dir / "config.json", "{}"));
  auto ck = slm::checkpoint::open(f.dir->path());
  EXPECT_TRUE(ck.ok()) << ck.error().message();
  if (!ck.ok()) return f;
  f.ck.emplace(std::move(*ck));
  auto l = slm::nam56r::load_m2rnn(*f.ck, f.prefix, c);
  EXPECT_TRUE(l.ok()) << l.error().message();
  if (l.ok()) f.layer.emplace(std::move(*l));
  return f;
}

// d = 48, K = 8, V = 4: H = 48 / 12 = 4 heads by cppmega's default rule; conv_dim 32, d_in 52.
slm::m2rnn_config small_config() {
  slm::m2rnn_config c;
  c.d_model = 48;
  c.k_head_dim = 8;
  c.v_head_dim = 4;
  c.chunk_size = 16;
  return c;
}

constexpr double kLayerTol = 1e-5;  // f32 against double over 45 tokens; measured ~1e-6

struct variant {
  const char* name;
  void (*set)(slm::m2rnn_config&);
};
void PrintTo(const variant& v, std::ostream* os) { *os << v.name; }
const variant kVariants[] = {
    {"defaults", [](slm::m2rnn_config&) {}},
    {"no_conv", [](slm::m2rnn_config& c) { c.conv_kernel = 0; }},
    {"conv2_no_residual", [](slm::m2rnn_config& c) { c.conv_kernel = 2; c.use_residual = false; }},
    {"two_qk_heads", [](slm::m2rnn_config& c) { c.num_q_heads = 2; c.num_k_heads = 4; }},
};

class M2rnnLayer : public ::testing::TestWithParam<variant> {};

// Every path against the naive transcription, from a fresh state.
TEST_P(M2rnnLayer, AllPathsMatchNaiveTranscription) {
  slm::m2rnn_config c = small_config();
  GetParam().set(c);
  ASSERT_EQ(c.heads(), 4u);
  layer_fixture f = make_layer(c, GetParam().name);
  ASSERT_TRUE(f.layer);
  const std::size_t d = c.d_model, T = f.T;
  const auto ref = naive_m2rnn(c, f.p, f.u, T);
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  double worst = 0;
  for (int path = 0; path < 6; ++path) {  // chunk 1, 3, 16, 64, reference, steps
    m2rnn_state st;
    ASSERT_TRUE(f.layer->init_state(st).ok());
    std::vector<float> y(T * d, -7.0f);
    const std::size_t chunks[] = {1, 3, 16, 64};
    if (path < 4) {
      ASSERT_TRUE(f.layer->forward_chunked(f.u.data(), T, y.data(), st, chunks[path], ws, cx).ok());
    } else if (path == 4) {
      ASSERT_TRUE(f.layer->forward_reference(f.u.data(), T, y.data(), st, ws, cx).ok());
    } else {
      for (std::size_t t = 0; t < T; ++t) ASSERT_TRUE(f.layer->step(f.u.data() + t * d, y.data() + t * d, st, ws, cx).ok());
    }
    EXPECT_EQ(st.n, T);
    const double e = rel_err(y, ref, T * d);
    EXPECT_LE(e, kLayerTol) << GetParam().name << " path " << path;
    worst = std::max(worst, e);
  }
  // A different prefix does not hold the layer.
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*f.ck, slm::nam56r::m2rnn_prefix(12), c), slm::errc::not_found,
                                   {"decoder.layers.12.mixer.impl.input_projection"}));
  std::printf("[ figures  ] layer %s: worst rel err vs naive double %.3g\n", GetParam().name, worst);
}

// Prefill + decode + a second segment (each path continuing from the state the one
// before left) equals the one-shot forward; the paths agree with each other.
TEST_P(M2rnnLayer, ContinuingFromAStateMatchesOneShot) {
  slm::m2rnn_config c = small_config();
  GetParam().set(c);
  layer_fixture f = make_layer(c, GetParam().name);
  ASSERT_TRUE(f.layer);
  const std::size_t d = c.d_model, T = f.T;
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p3};
  m2rnn_state whole;
  ASSERT_TRUE(f.layer->init_state(whole).ok());
  std::vector<float> yw(T * d);
  ASSERT_TRUE(f.layer->forward_reference(f.u.data(), T, yw.data(), whole, ws, cx).ok());
  double worst = 0;
  for (std::size_t chunk : {1u, 3u, 16u, 64u})
    for (std::size_t P : {1u, 2u, 3u, 5u, 17u}) {
      const std::size_t Dn = 4, S2 = T - P - Dn;
      m2rnn_state st;
      ASSERT_TRUE(f.layer->init_state(st).ok());
      std::vector<float> y(T * d);
      ASSERT_TRUE(f.layer->forward_chunked(f.u.data(), P, y.data(), st, chunk, ws, cx).ok());
      for (std::size_t k = 0; k < Dn; ++k)
        ASSERT_TRUE(f.layer->step(f.u.data() + (P + k) * d, y.data() + (P + k) * d, st, ws, cx).ok());
      ASSERT_TRUE(f.layer->forward_chunked(f.u.data() + (P + Dn) * d, S2, y.data() + (P + Dn) * d, st, chunk, ws, cx).ok());
      EXPECT_EQ(st.n, T);
      const double ey = rel_err(y.data(), yw.data(), T * d);
      const double em = rel_err(st.M.data(), whole.M.data(), st.M.size());
      EXPECT_LE(ey, 1e-5) << "chunk " << chunk << " prefix " << P;
      EXPECT_LE(em, 1e-5) << "chunk " << chunk << " prefix " << P;
      // The conv tail holds input projections, computed here over other row counts (the
      // product's kernels differ for one or two rows), so equal up to rounding.
      EXPECT_LE(rel_err(st.conv.data(), whole.conv.data(), st.conv.size()), 1e-6);
      worst = std::max({worst, ey, em});
    }
  // The reference path continues from a state too.
  m2rnn_state st;
  ASSERT_TRUE(f.layer->init_state(st).ok());
  std::vector<float> y(T * d);
  ASSERT_TRUE(f.layer->forward_reference(f.u.data(), 6, y.data(), st, ws, cx).ok());
  ASSERT_TRUE(f.layer->forward_reference(f.u.data() + 6 * d, T - 6, y.data() + 6 * d, st, ws, cx).ok());
  EXPECT_LE(rel_err(y.data(), yw.data(), T * d), 1e-6);
  std::printf("[ figures  ] layer %s: prefill/decode/segment vs one shot, worst rel err %.3g\n", GetParam().name,
              worst);
}

TEST_P(M2rnnLayer, ThreadCountIndependent) {
  slm::m2rnn_config c = small_config();
  GetParam().set(c);
  layer_fixture f = make_layer(c, GetParam().name);
  ASSERT_TRUE(f.layer);
  const std::size_t d = c.d_model, T = f.T;
  slm::serial_executor serial;
  std::vector<float> first, first_state;
  for (slm::executor_ref ex : {slm::executor_ref(serial), slm::executor_ref(slm_test::the_pools().p2),
                               slm::executor_ref(slm_test::the_pools().p3)}) {
    slm::workspace ws;
    slm::compute_context cx{ex};
    m2rnn_state st;
    ASSERT_TRUE(f.layer->init_state(st).ok());
    std::vector<float> y(T * d);
    ASSERT_TRUE(f.layer->forward(f.u.data(), T - 3, y.data(), st, ws, cx).ok());
    for (std::size_t t = T - 3; t < T; ++t) ASSERT_TRUE(f.layer->step(f.u.data() + t * d, y.data() + t * d, st, ws, cx).ok());
    std::vector<float> s(st.M.data(), st.M.data() + st.M.size());
    if (first.empty()) {
      first = y;
      first_state = s;
    } else {
      EXPECT_EQ(y, first);
      EXPECT_EQ(s, first_state);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(m2rnn, M2rnnLayer, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<variant>& i) { return std::string(i.param.name); });

TEST(m2rnn, SnapshotRestoreAndReset) {
  layer_fixture f = make_layer(small_config(), "snap");
  ASSERT_TRUE(f.layer);
  const std::size_t d = f.cfg.d_model, P = 11, n = 6;
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  m2rnn_state st, snap;
  ASSERT_TRUE(f.layer->init_state(st).ok());
  std::vector<float> y(P * d), y1(n * d), y2(n * d);
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, y.data(), st, ws, cx).ok());
  ASSERT_TRUE(snap.copy_from(st).ok());
  for (std::size_t k = 0; k < n; ++k)
    ASSERT_TRUE(f.layer->step(f.u.data() + (P + k) * d, y1.data() + k * d, st, ws, cx).ok());
  ASSERT_TRUE(st.copy_from(snap).ok());
  EXPECT_EQ(st.n, P);
  for (std::size_t k = 0; k < n; ++k)
    ASSERT_TRUE(f.layer->step(f.u.data() + (P + k) * d, y2.data() + k * d, st, ws, cx).ok());
  EXPECT_EQ(y1, y2);
  // reset() is a fresh sequence again; so is n = 0 whatever the buffers hold.
  st.reset();
  std::vector<float> y3(P * d), y4(P * d);
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, y3.data(), st, ws, cx).ok());
  EXPECT_EQ(y3, y);
  st.n = 0;
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, y4.data(), st, ws, cx).ok());
  EXPECT_EQ(y4, y);
}

// The decoder's cache: forward flips between two states; truncate(previous size) undoes
// the last call, truncate(0) starts over, any other rewind makes the next call fail.
TEST(m2rnn, CacheUndo) {
  layer_fixture f = make_layer(small_config(), "cache");
  ASSERT_TRUE(f.layer);
  const std::size_t d = f.cfg.d_model, P = 9;
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  struct no_options {};
  m2rnn_mixer::cache c;
  ASSERT_TRUE(f.layer->init_cache(c, no_options{}).ok());
  std::vector<float> y(P * d), ya(4 * d), yb(4 * d), y1(d), y2(d);
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, y.data(), c, ws, cx).ok());
  ASSERT_TRUE(f.layer->forward(f.u.data() + P * d, 4, ya.data(), c, ws, cx).ok());
  EXPECT_EQ(c.size(), P + 4);
  c.truncate(P);
  EXPECT_EQ(c.size(), P);
  ASSERT_TRUE(f.layer->forward(f.u.data() + P * d, 4, yb.data(), c, ws, cx).ok());
  EXPECT_EQ(ya, yb);
  ASSERT_TRUE(f.layer->forward(f.u.data() + (P + 4) * d, 1, y1.data(), c, ws, cx).ok());  // one token: the step
  // Same as the plain state API.
  m2rnn_state st;
  ASSERT_TRUE(f.layer->init_state(st).ok());
  std::vector<float> yc(P * d), yd(4 * d);
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, yc.data(), st, ws, cx).ok());
  ASSERT_TRUE(f.layer->forward(f.u.data() + P * d, 4, yd.data(), st, ws, cx).ok());
  ASSERT_TRUE(f.layer->step(f.u.data() + (P + 4) * d, y2.data(), st, ws, cx).ok());
  EXPECT_EQ(yd, ya);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(max_abs_diff(c.state().M.data(), st.M.data(), st.M.size()), 0.0);
  c.truncate(3);
  EXPECT_TRUE(slm_test::fails_with(f.layer->forward(f.u.data(), 1, y1.data(), c, ws, cx), slm::errc::unsupported,
                                   {"truncated"}));
  c.truncate(0);
  EXPECT_EQ(c.size(), 0u);
  std::vector<float> ye(P * d);
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, ye.data(), c, ws, cx).ok());
  EXPECT_EQ(ye, y);
}

// With a rollback history (session_options::rollback_tokens = 4) the cache rewinds to
// any of the last four positions and continues bit for bit as if never advanced; the
// state round-trips through save/load.
TEST(m2rnn, CacheRollbackAndSaveLoad) {
  layer_fixture f = make_layer(small_config(), "rollback");
  ASSERT_TRUE(f.layer);
  const std::size_t d = f.cfg.d_model, P = 9;
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  struct options { std::size_t rollback_tokens = 4; };
  m2rnn_mixer::cache c, fresh;
  ASSERT_TRUE(f.layer->init_cache(c, options{}).ok());
  ASSERT_TRUE(f.layer->init_cache(fresh, options{}).ok());
  std::vector<float> y(P * d), ya(4 * d), yb(2 * d), yc(2 * d);
  ASSERT_TRUE(f.layer->forward(f.u.data(), P, y.data(), c, ws, cx).ok());
  ASSERT_TRUE(f.layer->forward(f.u.data() + P * d, 4, ya.data(), c, ws, cx).ok());
  EXPECT_TRUE(c.can_truncate(P + 1));
  c.truncate(P + 1);
  EXPECT_EQ(c.size(), P + 1);
  ASSERT_TRUE(f.layer->forward(f.u.data() + (P + 1) * d, 2, yb.data(), c, ws, cx).ok());
  EXPECT_EQ(0, std::memcmp(yb.data(), ya.data() + d, 2 * d * sizeof(float)));
  // Save, load into a fresh cache, continue both: the same bits.
  std::vector<std::byte> blob;
  slm::state_writer w(
      [](void* ctx, std::span<const std::byte> b) -> slm::status {
        auto* v = static_cast<std::vector<std::byte>*>(ctx);
        v->insert(v->end(), b.begin(), b.end());
        return {};
      },
      &blob, true);
  ASSERT_TRUE(c.save(w).ok());
  slm::state_reader r(blob);
  ASSERT_TRUE(fresh.load(r).ok());
  EXPECT_EQ(fresh.size(), c.size());
  ASSERT_TRUE(f.layer->forward(f.u.data(), 2, yb.data(), c, ws, cx).ok());
  ASSERT_TRUE(f.layer->forward(f.u.data(), 2, yc.data(), fresh, ws, cx).ok());
  EXPECT_EQ(yb, yc);
}

TEST(m2rnn, ConfigAndLoadErrors) {
  // Configuration.
  slm::m2rnn_config c = small_config();
  EXPECT_TRUE(c.validate().ok());
  EXPECT_EQ(c.in_proj_dim(), 52u);
  slm::m2rnn_config nam;  // the NAM56R production dims
  nam.d_model = 4096;
  EXPECT_EQ(nam.heads(), 51u);
  EXPECT_EQ(nam.conv_dim(), 944u);
  EXPECT_EQ(nam.in_proj_dim(), 1811u);
  EXPECT_EQ(slm::nam56r::m2rnn_prefix(11), "decoder.layers.11.mixer.impl");
  c.num_q_heads = 3;
  EXPECT_TRUE(slm_test::fails_with(c.validate(), slm::errc::invalid_argument, {"3 q heads", "4 heads"}));
  c = small_config();
  c.chunk_size = 0;
  EXPECT_TRUE(slm_test::fails_with(c.validate(), slm::errc::invalid_argument, {"chunk_size"}));
  c = small_config();
  c.eps = 0.0f;
  EXPECT_TRUE(slm_test::fails_with(c.validate(), slm::errc::invalid_argument, {"eps"}));

  // Loading: a configuration the tensors do not fit names the tensor and both shapes.
  layer_fixture f = make_layer(small_config(), "load");
  ASSERT_TRUE(f.layer);
  c = small_config();
  c.conv_kernel = 3;
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*f.ck, f.prefix, c), slm::errc::format_error,
                                   {"decoder.layers.11.mixer.impl.conv1d.weight", "[32, 1, 4]", "[32, 1, 3]"}));
  c = small_config();
  c.num_heads = 2;  // in_proj rows differ
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*f.ck, f.prefix, c), slm::errc::format_error,
                                   {"input_projection", "[52, 48]"}));
  c = small_config();
  c.d_model = 47;  // 3 heads by the default rule
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*f.ck, f.prefix, c), slm::errc::format_error,
                                   {"input_projection"}));
  c = small_config();
  c.num_q_heads = 2;  // q rows move, so input_projection no longer fits
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*f.ck, f.prefix, c), slm::errc::format_error,
                                   {"input_projection"}));
  // A layer without D (use_residual = false) is refused when the config wants one.
  slm::m2rnn_config nod = small_config();
  nod.use_residual = false;
  layer_fixture g = make_layer(nod, "load_nod");
  ASSERT_TRUE(g.layer);
  EXPECT_TRUE(g.layer->D.empty());
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*g.ck, g.prefix, small_config()), slm::errc::not_found,
                                   {"decoder.layers.11.mixer.impl.D"}));
  c = small_config();
  c.d_model = 0;
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_m2rnn(*f.ck, f.prefix, c), slm::errc::invalid_argument,
                                   {"d_model"}));
}

TEST(m2rnn, BadCallsAreRefused) {
  layer_fixture a = make_layer(small_config(), "bad_a");
  slm::m2rnn_config cb = small_config();
  cb.conv_kernel = 2;
  layer_fixture b = make_layer(cb, "bad_b");
  ASSERT_TRUE(a.layer && b.layer);
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  const std::size_t d = a.cfg.d_model;
  std::vector<float> x(4 * d, 0.5f), y(4 * d);
  m2rnn_state st, unsized;
  ASSERT_TRUE(a.layer->init_state(st).ok());
  // A state of another layer (a different conv tail) or one never sized.
  EXPECT_TRUE(slm_test::fails_with(b.layer->step(x.data(), y.data(), st, ws, cx), slm::errc::invalid_argument,
                                   {"init_state"}));
  EXPECT_TRUE(slm_test::fails_with(a.layer->forward(x.data(), 2, y.data(), unsized, ws, cx),
                                   slm::errc::invalid_argument, {"init_state"}));
  EXPECT_TRUE(slm_test::fails_with(a.layer->forward_reference(x.data(), 2, y.data(), unsized, ws, cx),
                                   slm::errc::invalid_argument, {"init_state"}));
  EXPECT_TRUE(slm_test::fails_with(a.layer->forward_chunked(x.data(), 2, y.data(), st, 0, ws, cx),
                                   slm::errc::invalid_argument, {"chunk size 0"}));
  EXPECT_TRUE(slm_test::fails_with(a.layer->forward(nullptr, 2, y.data(), st, ws, cx), slm::errc::invalid_argument,
                                   {"null"}));
  EXPECT_EQ(st.n, 0u);  // nothing above touched the state
  EXPECT_TRUE(a.layer->forward(nullptr, 0, nullptr, st, ws, cx).ok());  // zero tokens: nothing to do
  // A cancelled call leaves the state untouched.
  slm::cancellation cancel;
  cancel.cancel();
  slm::compute_context cc{slm_test::the_pools().p2};
  cc.cancel = &cancel;
  ASSERT_TRUE(a.layer->forward(x.data(), 3, y.data(), st, ws, cx).ok());
  m2rnn_state before;
  ASSERT_TRUE(before.copy_from(st).ok());
  EXPECT_TRUE(slm_test::fails_with(a.layer->forward(x.data(), 3, y.data(), st, ws, cc), slm::errc::cancelled, {}));
  EXPECT_EQ(st.n, before.n);
  EXPECT_EQ(max_abs_diff(st.M.data(), before.M.data(), st.M.size()), 0.0);
}

}  // namespace
