// slm/layers/engram.hpp - Engram, the causal n-gram branch of the nanochat lineage (nanochat
// `nanochat/engram.py` EngramBranch; spec nam56r.md §2.9). Not part of the Megatron NAM56R
// (which has the unrelated n-gram *hash input embedding*, §2.1); nanochat enables it per
// block through `engram_layers`.
//
// Sizes: C = n_embd, b = bottleneck (bottleneck_dim, or max(1, C / 4) when 0), orders
// n_1 .. n_k = the parsed ngram_orders ("2,3,4" by default; parsed as nanochat does: comma
// separated integers, blanks skipped, non-positive values and repeats dropped keeping the
// first occurrence, (2, 3, 4) when nothing is left), K = max order.
//
// Parameters (nanochat names under `transformer.h.{i}.engram.`, models/nanochat/bind.hpp; no
// biases, all nn.Linear(bias=False)):
//   in_proj.weight       [b, C]
//   order_mix.{j}.weight [b, b]   j = 0 .. k-1, order_mix.j belongs to order n_{j+1}
//   out_proj.weight      [C, b]   (zero at training init)
//
// Per token t, on the block's normed input x_t [C] (nanochat calls it on norm(x)):
//   z_t      = W_in x_t                                  [C] x [C, b] -> [b]
//   local_n  = (1/n) sum_{j=0}^{n-1} z_{t-j}             z before the sequence start is
//              zero and the divisor is always n (F.pad + avg_pool1d, count_include_pad)
//   y_t      = (1/k) sum_j W_mix_j local_{n_j}           [b] x [b, b] -> [b] per order
//   out_t    = W_out y_t                                 [b] x [b, C] -> [C]
// The block adds out_t to its output (`base + out`); dropout is off at inference.
//
// State per sequence (engram_state): the last K - 1 vectors z (oldest first, zeros until
// that many tokens have been seen) - K - 1 = 3 vectors of b floats by default. It makes a
// prefill of T tokens equal T single-token steps, and any split of a sequence into calls
// equal the whole (up to the products' blocking: a [T, C] GEMM may sum in another order
// than T GEMVs, ~1 ulp). nanochat's own Engine does not keep this state (its KV-cache decode
// runs the branch on the current token only, i.e. with zero history): that is a
// train/inference mismatch of nanochat; this file follows the training forward.
//
// Numerics: f32 throughout, as the oracle. The products run through linear::apply (any
// weight format; an f32 checkpoint multiplies exactly in f32); the window sums add the
// oldest vector first and then divide by n, the order sum adds in order and divides by k,
// as torch does. Against the golden data the only differences are the summation order
// inside the three products (sums of 8-32 terms), i.e. a few f32 ulps.
//
// Errors: bad configuration, shapes or a state of another configuration are
// errc::invalid_argument; a failure leaves the state untouched (it is advanced only after
// every product has succeeded).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/core/buffer.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/core/status.hpp"

namespace slm {

// Orders above this are refused (the state holds K - 1 vectors; nanochat uses 2..4).
inline constexpr std::size_t engram_max_order = 4096;

// nanochat `_parse_ngram_orders` on a string: "3,1,5,3" -> (3, 1, 5); "" or only
// non-positive values -> (2, 3, 4). A part that is not an integer is an error (Python
// raises ValueError); an order above engram_max_order is errc::out_of_range.
result<std::vector<std::size_t>> parse_engram_orders(std::string_view s);

struct engram_config {
  std::size_t n_embd = 0;                   // C
  std::vector<std::size_t> orders{2, 3, 4};  // parsed: positive, distinct
  std::size_t bottleneck_dim = 0;           // 0: max(1, C / 4)

  // From nanochat's EngramBranch arguments.
  static result<engram_config> make(std::size_t n_embd, std::string_view ngram_orders = "2,3,4",
                                    std::size_t bottleneck_dim = 0);

  std::size_t bottleneck() const noexcept { return bottleneck_dim ? bottleneck_dim : std::max<std::size_t>(1, n_embd / 4); }
  std::size_t max_order() const noexcept {
    std::size_t m = 0;
    for (std::size_t o : orders) m = std::max(m, o);
    return m;
  }
  std::size_t history() const noexcept { return max_order() - 1; }  // K - 1 vectors of state

  status validate() const;
};

// One sequence's n-gram history: hist [K - 1, b], the last K - 1 vectors z = W_in x, oldest
// first (zeros before the start); n counts the tokens seen. Copy it (copy_from) to
// snapshot, copy it back to roll back; recurrent_cache<engram_state> keeps a rollback
// history of it like the recurrent layers' states.
struct engram_state {
  floats hist;
  std::size_t n = 0;

  void reset() noexcept {
    std::fill(hist.data(), hist.data() + hist.size(), 0.0f);
    n = 0;
  }
  status copy_from(const engram_state& o);
  static constexpr std::string_view kind = "engram";
  template <class Self, class Fn>
  static void for_each_buffer(Self& s, Fn&& fn) {
    fn(s.hist);
  }
};

class engram_branch {
 public:
  engram_config cfg;
  linear in_proj;                // [b, C]
  std::vector<linear> order_mix;  // k x [b, b]
  linear out_proj;               // [C, b]

  // Sizes the state and zeroes it (a fresh sequence).
  status init_state(engram_state& s) const;

  // x [T, C] -> y [T, C], continuing from st (advanced by T tokens). y must not overlap x.
  status forward(const float* x, std::size_t T, float* y, engram_state& st, workspace& ws,
                 compute_context& cx) const {
    return run(x, T, y, st, st, ws, cx);
  }
  // One decode step: x [C] -> y [C].
  status step(const float* x, float* y, engram_state& st, workspace& ws, compute_context& cx) const {
    return run(x, 1, y, st, st, ws, cx);
  }

  // The decoder's per-layer cache with rollback history (layers/recurrent_cache.hpp).
  using cache = recurrent_cache<engram_state>;
  template <class Options>
  status init_cache(cache& c, const Options& o) const {
    return c.init(rollback_tokens_of(o), [this](engram_state& s) { return init_state(s); });
  }
  status forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws, compute_context& cx) const;

  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("in_proj", in_proj, true);
    for (std::size_t j = 0; j < order_mix.size(); ++j) fn(cat("order_mix.", j), order_mix[j], true);
    fn("out_proj", out_proj, true);
  }

 private:
  status check(const float* x, std::size_t T, const float* y, const engram_state& in) const;

  // Tokens of x from state `in` into state `out` (may be the same object).
  status run(const float* x, std::size_t T, float* y, const engram_state& in, engram_state& out, workspace& ws,
             compute_context& cx) const;
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE result<std::vector<std::size_t>> parse_engram_orders(std::string_view s) {
  std::vector<std::size_t> out;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    std::size_t end = s.find(',', pos);
    if (end == std::string_view::npos) end = s.size();
    std::string_view part = s.substr(pos, end - pos);
    while (!part.empty() && (part.front() == ' ' || part.front() == '\t')) part.remove_prefix(1);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\t')) part.remove_suffix(1);
    pos = end + 1;
    if (part.empty()) continue;
    std::string_view digits = part;
    if (digits.front() == '+') digits.remove_prefix(1);
    long long v = 0;
    const auto r = std::from_chars(digits.data(), digits.data() + digits.size(), v);
    if (digits.empty() || r.ec != std::errc{} || r.ptr != digits.data() + digits.size())
      return make_error(errc::invalid_argument, "engram: ngram_orders '", s, "': '", part, "' is not an integer");
    if (v <= 0) continue;
    if (static_cast<unsigned long long>(v) > engram_max_order)
      return make_error(errc::out_of_range, "engram: ngram order ", v, " is above the limit ", engram_max_order);
    const std::size_t o = static_cast<std::size_t>(v);
    if (std::find(out.begin(), out.end(), o) == out.end()) out.push_back(o);
  }
  if (out.empty()) out = {2, 3, 4};
  return out;
}

SLM_INLINE result<engram_config> engram_config::make(std::size_t n_embd, std::string_view ngram_orders,
                                                     std::size_t bottleneck_dim) {
  engram_config c;
  c.n_embd = n_embd;
  c.bottleneck_dim = bottleneck_dim;
  auto o = parse_engram_orders(ngram_orders);
  if (!o.ok()) return std::move(o).take_error();
  c.orders = std::move(*o);
  SLM_TRY(c.validate());
  return c;
}

SLM_INLINE status engram_config::validate() const {
  if (n_embd == 0) return make_error(errc::invalid_argument, "engram: n_embd must be positive");
  if (orders.empty()) return make_error(errc::invalid_argument, "engram: no ngram orders");
  for (std::size_t i = 0; i < orders.size(); ++i) {
    if (orders[i] == 0 || orders[i] > engram_max_order)
      return make_error(errc::invalid_argument, "engram: ngram order ", orders[i], " is outside [1, ",
                        engram_max_order, "]");
    for (std::size_t j = 0; j < i; ++j)
      if (orders[j] == orders[i])
        return make_error(errc::invalid_argument, "engram: ngram order ", orders[i], " appears twice");
  }
  return {};
}

SLM_INLINE status engram_state::copy_from(const engram_state& o) {
  SLM_TRY(hist.resize(o.hist.size()));
  if (o.hist.size()) std::memcpy(hist.data(), o.hist.data(), o.hist.size() * sizeof(float));
  n = o.n;
  return {};
}

SLM_INLINE status engram_branch::init_state(engram_state& s) const {
  s.reset();  // zeroes what it holds; resize zeroes what it adds (one pass either way)
  SLM_TRY(s.hist.resize(cfg.history() * cfg.bottleneck()));
  return {};
}

SLM_INLINE status engram_branch::forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws,
                                         compute_context& cx) const {
  const std::size_t C = cfg.n_embd;
  status s = c.forward(T, [&](const engram_state& in, engram_state& next, std::size_t first, std::size_t count) {
    return run(x + first * C, count, y + first * C, in, next, ws, cx);
  });
  if (!s.ok()) return std::move(s).with_context("engram");
  return s;
}

SLM_INLINE status engram_branch::check(const float* x, std::size_t T, const float* y, const engram_state& in) const {
  const std::size_t C = cfg.n_embd, b = cfg.bottleneck();
  if (order_mix.size() != cfg.orders.size() || in_proj.out() != b || in_proj.in() != C || out_proj.out() != C ||
      out_proj.in() != b)
    return make_error(errc::invalid_argument, "engram: the branch's weights do not match its config");
  if (in.hist.size() != cfg.history() * b)
    return make_error(errc::invalid_argument, "engram: the state holds ", in.hist.size(), " floats, the config needs ",
                      cfg.history(), " x ", b, " (init_state)");
  if (T != 0 && (!x || !y)) return make_error(errc::invalid_argument, "engram: null input or output");
  return {};
}

SLM_INLINE status engram_branch::run(const float* x, std::size_t T, float* y, const engram_state& in, engram_state& out,
                                     workspace& ws, compute_context& cx) const {
  SLM_TRY(check(x, T, y, in));
  const std::size_t C = cfg.n_embd, b = cfg.bottleneck(), H = cfg.history();
  if (T == 0) {
    if (&in != &out) SLM_TRY(out.copy_from(in));
    return {};
  }
  // Scratch: ext [H + T, b] = history then z; loc, part, acc [T, b].
  const std::size_t ext_n = (H + T) * b;
  SLM_TRY(ws.proj.resize(ext_n + 3 * T * b));
  float* ext = ws.proj.data();
  float* loc = ext + ext_n;
  float* part = loc + T * b;
  float* acc = part + T * b;
  if (H) std::memcpy(ext, in.hist.data(), H * b * sizeof(float));
  float* z = ext + H * b;  // z_t is row H + t of ext
  SLM_TRY(in_proj.apply(x, T, C, z, b, cx));  // [T, C] x [C, b] -> [T, b]
  std::fill(acc, acc + T * b, 0.0f);
  for (std::size_t j = 0; j < cfg.orders.size(); ++j) {
    const std::size_t n = cfg.orders[j];
    const float fn = static_cast<float>(n);
    for (std::size_t t = 0; t < T; ++t) {
      float* l = loc + t * b;
      const float* first = ext + (H + t + 1 - n) * b;  // z_{t-n+1}: row H + t + 1 - n >= 0 as n - 1 <= H
      std::memcpy(l, first, b * sizeof(float));
      for (std::size_t i = 1; i < n; ++i) {
        const float* r = first + i * b;
        for (std::size_t c = 0; c < b; ++c) l[c] += r[c];
      }
      for (std::size_t c = 0; c < b; ++c) l[c] /= fn;
    }
    SLM_TRY(order_mix[j].apply(loc, T, b, part, b, cx));  // [T, b] x [b, b] -> [T, b]
    for (std::size_t i = 0; i < T * b; ++i) acc[i] += part[i];
  }
  const float fk = static_cast<float>(cfg.orders.size());
  for (std::size_t i = 0; i < T * b; ++i) acc[i] /= fk;
  SLM_TRY(out_proj.apply(acc, T, b, y, C, cx));  // [T, b] x [b, C] -> [T, C]
  // Success: the new history is the last H rows of ext.
  if (&in != &out) SLM_TRY(out.hist.resize(H * b));
  if (H) std::memmove(out.hist.data(), ext + T * b, H * b * sizeof(float));
  out.n = in.n + T;
  return {};
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
