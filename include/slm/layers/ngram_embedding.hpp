// slm/layers/ngram_embedding.hpp - the n-gram hash input embedding of NAM56R (cppmega
// `CppMegaNgramHashEmbedding`, cppmega/features/engram/ngram_hash.py @ d57d1c1; spec
// nam56r.md §2.1): an additive term NGram(x)_t of the input embedding
// h0_t = E[x_t] + NGram(x)_t + Struct(side)_t.
//
// Sizes: orders O = (o_0, .., o_{n-1}) (NAM56R: (2, 3)), H heads per order (8),
// J = n H hash tables, table j of order n_j = o_{j / H} (order-major: the 8 order-2 tables
// first), max order M = max O, E = embed_dim (16), d = d_model.
// Table sizes P_j: the first J of the 16 primes 499801 .. 500041 within 50 % of the
// requested table_size (NAM56R: all 16 of them for 500000), else table_size + j.
// off_j = sum_{i<j} P_i (`table_offsets`).
//
// Parameters (Megatron names under `embedding.cppmega_ngram_hash.`, models/nam56r/bind.hpp):
//   unified_table.weight [sum P_j, E]  (7998862 x 16: kept as a view of the checkpoint,
//                                       never copied; rows dequantized on use)
//   out_proj.weight      [d, J E]
//   hash_mults [J, M] int64 (odd, in [1, 2^31)), hash_bias [J] int64 (in [0, 2^31)):
//     random at construction in training, so they are read, never regenerated;
//   table_offsets [J], table_sizes_t [J], order_for_table [J], order_mask [M, J] (int64):
//     derived from the config; checked against it when the checkpoint has them.
//
// Per position t of a sequence x (u_p = x_{t-p} if t - p >= 0, else 0: zero padding at the
// start of the sequence, so a token id 0 and "before the start" hash alike):
//   h_j(t)   = ( XOR_{p < n_j} (m_{j,p} * u_p) ) XOR b_j            (int64, see below)
//   idx_j(t) = off_j + (h_j(t) mod P_j)                              (floor mod: in [0, P_j))
//   e_t      = concat_j unified_table[idx_j(t)]                      [J E], table-major
//   NGram_t  = W_out e_t                                 [J E] x [J E, d] -> [d]
// Integer semantics are torch's int64 ones, reproduced exactly: the product wraps modulo
// 2^64 (two's complement; it cannot for ids < 2^32, as |m| < 2^31), XOR is on the
// two's-complement bits, and `%` is torch.remainder (sign of the divisor), so indices are
// in range for any int64 id, negative ones included. Positions p >= n_j contribute
// nothing (torch multiplies them by order_mask = 0, which is the same).
// The float part is f32: rows gathered as stored (f32 exactly; bf16/f16 widened exactly),
// then one product with f32 sums (linear::apply), as torch's f32 forward; they differ
// only in the summation order of J E = 256 terms.
//
// Decode state (ngram_history): the last M - 1 token ids (zeros before the start) and the
// count of tokens consumed: a small trivially copyable struct, so a snapshot is a copy
// and a rollback an assignment; it also meets recurrent_cache's recurrent_state. A
// forward of T tokens from a history equals T one-token forwards (the indices bit for
// bit). Errors: bad arguments leave the history untouched; the history advances only when
// the whole call succeeds.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/buffer.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/layers/linear.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"

namespace slm {

struct ngram_hash_config {
  static constexpr std::size_t max_orders = 8;  // entries of `orders`
  static constexpr std::size_t max_order = 8;   // largest n-gram order
  static constexpr std::size_t max_tables = 64;  // J

  std::size_t d_model = 0;
  std::array<std::size_t, max_orders> orders{2, 3};
  std::size_t num_orders = 2;
  std::size_t num_heads = 8;
  std::size_t table_size = 500000;
  std::size_t embed_dim = 16;

  std::size_t num_tables() const noexcept { return num_orders * num_heads; }
  std::size_t largest_order() const noexcept {
    std::size_t m = 0;
    for (std::size_t i = 0; i < num_orders; ++i) m = std::max(m, orders[i]);
    return m;
  }
  std::size_t order_of_table(std::size_t j) const noexcept { return orders[j / num_heads]; }
  std::size_t concat_dim() const noexcept { return num_tables() * embed_dim; }  // J E

  // cppmega `_pick_primes`: the primes within 50 % of table_size if there are J of them,
  // else table_size + j.
  std::int64_t table_size_of(std::size_t j) const noexcept {
    static constexpr std::int64_t primes[16] = {499801, 499819, 499853, 499879, 499883, 499897, 499903, 499927,
                                                499943, 499957, 499969, 499973, 499979, 500009, 500029, 500041};
    const auto ts = static_cast<std::int64_t>(table_size);
    std::array<std::int64_t, 16> near{};
    std::size_t count = 0;
    for (std::int64_t p : primes)
      if (2 * (p > ts ? p - ts : ts - p) < ts) near[count++] = p;  // |p - ts| / ts < 0.5
    return count >= num_tables() ? near[j] : ts + static_cast<std::int64_t>(j);
  }
  std::int64_t table_offset_of(std::size_t j) const noexcept {
    std::int64_t o = 0;
    for (std::size_t i = 0; i < j; ++i) o += table_size_of(i);
    return o;
  }
  std::size_t total_rows() const noexcept { return static_cast<std::size_t>(table_offset_of(num_tables())); }

  status validate() const;

};

// The per-sequence decode state: prev[p] = x_{t-1-p} for the next position t (0 before the
// start of the sequence), n = tokens consumed. Trivially copyable: snapshot = copy.
struct ngram_history {
  std::array<std::int64_t, ngram_hash_config::max_order - 1> prev{};
  std::size_t n = 0;

  void reset() noexcept {
    prev.fill(0);
    n = 0;
  }
  status copy_from(const ngram_history& o) noexcept {
    *this = o;
    return {};
  }
  friend bool operator==(const ngram_history&, const ngram_history&) = default;
};

namespace detail::ngram {

// torch int64 semantics: a * b modulo 2^64, and torch.remainder (floor mod, m > 0).
constexpr std::int64_t wrap_mul(std::int64_t a, std::int64_t b) noexcept {
  return static_cast<std::int64_t>(static_cast<std::uint64_t>(a) * static_cast<std::uint64_t>(b));
}
constexpr std::int64_t floor_mod(std::int64_t a, std::int64_t m) noexcept {
  const std::int64_t r = a % m;
  return r < 0 ? r + m : r;
}

}  // namespace detail::ngram

class ngram_hash_embedding {
 public:
  using config = ngram_hash_config;
  static constexpr std::size_t M_max = config::max_order;

  ngram_hash_config cfg;
  weight_matrix table;  // unified_table.weight [sum P_j, E], a view of the checkpoint
  linear out_proj;      // [d, J E]
  std::array<std::array<std::int64_t, M_max>, config::max_tables> mults{};  // hash_mults [J, M]
  std::array<std::int64_t, config::max_tables> bias{};                     // hash_bias [J]
  std::array<std::int64_t, config::max_tables> sizes{};                    // P_j
  std::array<std::int64_t, config::max_tables> offsets{};                  // off_j

  // The hashing part alone (no table, no out_proj): cfg, P_j, off_j and the random
  // integers hash_mults [J, M] (row-major) and hash_bias [J]; empty spans leave them 0.
  status init_hash(const ngram_hash_config& c, std::span<const std::int64_t> hash_mults,
                   std::span<const std::int64_t> hash_bias);

  // Table j's hash of the window u[0, M) (u[p] = x_{t-p}, 0 before the start): the row of
  // unified_table, off_j + g_j, exactly as cppmega `_hash_all`.
  std::int64_t index(std::size_t j, const std::int64_t* u) const noexcept;

  // Indices of T tokens continuing from hist: idx[t * J + j] = off_j + g_j(t); advances
  // hist by the T tokens.
  status indices(std::span<const std::int32_t> ids, ngram_history& hist, std::int64_t* idx) const;

  // y [T, d] = NGram of the T tokens continuing from hist (advanced on success).
  // Scratch: ws.proj ([T, J E] gathered rows).
  status forward(std::span<const std::int32_t> ids, ngram_history& hist, float* y, workspace& ws,
                 compute_context& cx) const;

  // x [T, d] += NGram (the decoder's use). Scratch: ws.proj and ws.attn.
  status add_to(std::span<const std::int32_t> ids, ngram_history& hist, float* x, workspace& ws,
                compute_context& cx) const;

  // e [T, J E]: the concatenated table rows (the out_proj input), for tests and probes.
  status gather_rows(std::span<const std::int32_t> ids, ngram_history& hist, float* e, workspace& ws) const;

  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("out_proj", out_proj, true);
  }

 private:
  void push(ngram_history& h, std::int64_t tok) const noexcept {
    for (std::size_t p = h.prev.size(); p-- > 1;) h.prev[p] = h.prev[p - 1];
    h.prev[0] = tok;
    ++h.n;
  }

  // ws.proj [T, J E] = the rows of the T tokens continuing from h (advanced).
  status gather(std::span<const std::int32_t> ids, ngram_history& h, workspace& ws) const;
};

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE status ngram_hash_config::validate() const {
  if (d_model == 0 || num_heads == 0 || embed_dim == 0 || table_size == 0 || num_orders == 0)
    return make_error(errc::invalid_argument, "ngram_hash: d_model, num_heads, embed_dim, table_size and the number "
                      "of orders must be positive");
  if (num_orders > max_orders) return make_error(errc::invalid_argument, "ngram_hash: more than ", max_orders, " orders");
  for (std::size_t i = 0; i < num_orders; ++i)
    if (orders[i] == 0 || orders[i] > max_order)
      return make_error(errc::invalid_argument, "ngram_hash: order ", orders[i], " is outside [1, ", max_order, "]");
  if (num_heads > max_tables || num_tables() > max_tables)
    return make_error(errc::invalid_argument, "ngram_hash: ", num_orders, " orders x ", num_heads, " heads exceed ",
                      max_tables, " tables");
  if (table_size > (std::size_t{1} << 40))
    return make_error(errc::invalid_argument, "ngram_hash: table size ", table_size, " is too large");
  return {};
}


SLM_INLINE status ngram_hash_embedding::init_hash(const ngram_hash_config& c, std::span<const std::int64_t> hash_mults,
                                                  std::span<const std::int64_t> hash_bias) {
  SLM_TRY(c.validate());
  const std::size_t J = c.num_tables(), M = c.largest_order();
  if ((!hash_mults.empty() && hash_mults.size() != J * M) || (!hash_bias.empty() && hash_bias.size() != J))
    return make_error(errc::invalid_argument, "ngram_hash: hash_mults of ", hash_mults.size(), " and hash_bias of ",
                      hash_bias.size(), " values, expected ", J * M, " and ", J);
  cfg = c;
  mults = {};
  bias = {};
  sizes = {};
  offsets = {};
  for (std::size_t j = 0; j < J; ++j) {
    sizes[j] = c.table_size_of(j);
    offsets[j] = c.table_offset_of(j);
    if (!hash_bias.empty()) bias[j] = hash_bias[j];
    if (!hash_mults.empty())
      for (std::size_t p = 0; p < M; ++p) mults[j][p] = hash_mults[j * M + p];
  }
  return {};
}

SLM_INLINE std::int64_t ngram_hash_embedding::index(std::size_t j, const std::int64_t* u) const noexcept {
  using namespace detail::ngram;
  const std::size_t n = cfg.order_of_table(j);
  std::int64_t h = 0;
  for (std::size_t p = 0; p < n; ++p) h ^= wrap_mul(mults[j][p], u[p]);
  h ^= bias[j];
  return offsets[j] + floor_mod(h, sizes[j]);
}

SLM_INLINE status ngram_hash_embedding::indices(std::span<const std::int32_t> ids, ngram_history& hist,
                                                std::int64_t* idx) const {
  if (!ids.empty() && !idx) return make_error(errc::invalid_argument, "ngram_hash: null index output");
  const std::size_t J = cfg.num_tables(), M = cfg.largest_order();
  ngram_history h = hist;
  std::array<std::int64_t, M_max> u{};
  for (std::size_t t = 0; t < ids.size(); ++t) {
    u[0] = ids[t];
    for (std::size_t p = 1; p < M; ++p) u[p] = h.prev[p - 1];
    for (std::size_t j = 0; j < J; ++j) idx[t * J + j] = index(j, u.data());
    push(h, ids[t]);
  }
  hist = h;
  return {};
}

SLM_INLINE status ngram_hash_embedding::forward(std::span<const std::int32_t> ids, ngram_history& hist, float* y,
                                                workspace& ws, compute_context& cx) const {
  const std::size_t T = ids.size();
  if (T == 0) return {};
  if (!y) return make_error(errc::invalid_argument, "ngram_hash: null output");
  ngram_history h = hist;
  SLM_TRY(gather(ids, h, ws));
  // [T, J E] x [J E, d] -> [T, d]
  status s = out_proj.apply(ws.proj.data(), T, y, cx);
  if (!s.ok()) return std::move(s).with_context("ngram_hash out_proj");
  hist = h;
  return {};
}

SLM_INLINE status ngram_hash_embedding::add_to(std::span<const std::int32_t> ids, ngram_history& hist, float* x,
                                               workspace& ws, compute_context& cx) const {
  const std::size_t T = ids.size(), d = cfg.d_model;
  if (T == 0) return {};
  if (!x) return make_error(errc::invalid_argument, "ngram_hash: null output");
  SLM_TRY(ws.attn.resize(T * d));
  ngram_history h = hist;
  SLM_TRY(forward(ids, h, ws.attn.data(), ws, cx));
  for (std::size_t k = 0; k < T * d; ++k) x[k] += ws.attn[k];
  hist = h;
  return {};
}

SLM_INLINE status ngram_hash_embedding::gather_rows(std::span<const std::int32_t> ids, ngram_history& hist, float* e,
                                                    workspace& ws) const {
  if (ids.empty()) return {};
  if (!e) return make_error(errc::invalid_argument, "ngram_hash: null output");
  ngram_history h = hist;
  SLM_TRY(gather(ids, h, ws));
  std::memcpy(e, ws.proj.data(), ids.size() * cfg.concat_dim() * sizeof(float));
  hist = h;
  return {};
}

SLM_INLINE status ngram_hash_embedding::gather(std::span<const std::int32_t> ids, ngram_history& h,
                                               workspace& ws) const {
  const std::size_t T = ids.size(), J = cfg.num_tables(), E = cfg.embed_dim, JE = cfg.concat_dim();
  SLM_TRY(ws.proj.resize(T * JE));
  std::array<std::int64_t, config::max_tables> idx{};
  for (std::size_t t = 0; t < T; ++t) {
    SLM_TRY(indices(ids.subspan(t, 1), h, idx.data()));
    for (std::size_t j = 0; j < J; ++j)  // idx[j] in [off_j, off_j + P_j): a row of the table
      dequantize_row(table, static_cast<std::size_t>(idx[j]), std::span<float>(ws.proj.data() + t * JE + j * E, E));
  }
  return {};
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
