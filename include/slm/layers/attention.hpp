// slm/layers/attention.hpp - causal softmax attention over a KV cache, and the GQA layer.
//
// attend() is the one attention kernel of slm. Every query row runs an online softmax
// over its visible keys (running max m, running sum l, rescaled accumulator), so a
// prompt of T tokens never materializes a T x T score matrix: memory is O(T x d), and a
// long prefill costs no more memory than its K/V. Keys may be split in two parts whose
// dot products add (MLA: no-RoPE part + RoPE part, or latent + RoPE in the absorbed
// form), live in f32 or bf16 cache storage, be shared by a group of query heads (GQA,
// MQA: head stride per group), be limited to a sliding window, or be a per-query list
// chosen by DSA's indexer.
//
//   score(t, h, j) = scale * (q1[t,h] . k1[j,g] + q2[t,h] . k2[j,g]),  g = h / group
//   out[t, h]      = sum_j softmax_j(score) v[j, g]
//   visible(t, j)  = j <= pos0 + t  and  (window == 0 or pos0 + t - j < window)
//
// gqa_attention is Llama/Qwen/Mistral attention: q/k/v projections (biases when the
// checkpoint has them), optional per-head RMSNorm on q and k (Qwen3), RoPE, attend, o.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>

#include "slm/core/buffer.hpp"
#include "slm/core/cpu.hpp"
#include "slm/layers/linear.hpp"
#include "slm/layers/norm.hpp"
#include "slm/core/numeric.hpp"
#include "slm/core/parallel.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/layers/rope.hpp"
#include "slm/core/status.hpp"
#include "slm/kernels/attention_ops.hpp"


namespace slm {

enum class kv_dtype : std::uint8_t { f32, bf16 };

// Growable per-layer cache rows: n_rows rows of `width` values in f32 or bf16. With
// heads > 1 (set with width, before the first reserve) the values are stored head-major,
// [heads][capacity][width / heads]: one head's positions are contiguous, as attention
// reads them. Row-major, a head's consecutive keys lie a whole row apart (4 KiB for 8
// heads of 128 in f32): each on another page, and all in one L1 set. The saved form is
// row-major either way.
class kv_rows {
 public:
  kv_dtype type = kv_dtype::f32;
  std::size_t width = 0;
  std::size_t heads = 1;

  status reserve(std::size_t rows) {
    if (heads <= 1) return buf_.resize(words(rows * width));
    if (rows <= cap_) return {};
    floats grown;  // each head's rows move to their place in the larger blocks
    SLM_TRY(grown.resize(words(rows * width)));
    const std::size_t hb = width / heads * element_bytes();
    auto* to = reinterpret_cast<std::byte*>(grown.data());
    const auto* from = reinterpret_cast<const std::byte*>(buf_.data());
    if (cap_)
      for (std::size_t g = 0; g < heads; ++g) std::memcpy(to + g * rows * hb, from + g * cap_ * hb, cap_ * hb);
    buf_ = std::move(grown);
    cap_ = rows;
    return {};
  }
  std::size_t capacity() const noexcept {
    if (heads > 1) return cap_;
    return width == 0 ? 0 : (type == kv_dtype::f32 ? buf_.size() : 2 * buf_.size()) / width;
  }
  // Where head g of row j starts, in elements.
  std::size_t at(std::size_t j, std::size_t g) const noexcept {
    const std::size_t hd = width / heads;
    return heads > 1 ? (g * cap_ + j) * hd : j * width + g * hd;
  }
  void store(std::size_t row, const float* v) noexcept {
    const std::size_t hd = width / heads;
    for (std::size_t g = 0; g < heads; ++g) {
      const float* src = v + g * hd;
      if (type == kv_dtype::f32) {
        std::copy(src, src + hd, buf_.data() + at(row, g));
      } else {
        std::uint16_t* p = bf16_data() + at(row, g);
        for (std::size_t i = 0; i < hd; ++i) p[i] = f32_to_bf16(src[i]);
      }
    }
  }
  const float* f32_data() const noexcept { return buf_.data(); }
  const std::uint16_t* bf16_data() const noexcept { return reinterpret_cast<const std::uint16_t*>(buf_.data()); }
  std::uint16_t* bf16_data() noexcept { return reinterpret_cast<std::uint16_t*>(buf_.data()); }
  std::uint64_t bytes() const noexcept { return buf_.size() * sizeof(float); }
  std::size_t element_bytes() const noexcept { return type == kv_dtype::f32 ? sizeof(float) : sizeof(std::uint16_t); }

  // Session state (models/hf/model.hpp): the first `rows` rows of another kv_rows of the same type
  // and width.
  status copy_from(const kv_rows& o, std::size_t rows);
  // A rows block: u8 dtype, 7 zero bytes, u64 width, u64 rows, rows x width values
  // (f32 or bf16 bits, little-endian).
  status save(state_writer& w, std::size_t rows) const;
  // Reads a rows block of exactly `rows` rows of this type and width.
  status load(state_reader& r, std::size_t rows, std::string_view what);

 private:
  std::size_t words(std::size_t values) const noexcept { return type == kv_dtype::f32 ? values : (values + 1) / 2; }
  floats buf_;
  std::size_t cap_ = 0;  // rows per head block (heads > 1)
};

// A strided view of keys or values: element (j, g, i) at data[j * tok + g * head + i].
struct kv_view {
  const void* data = nullptr;
  kv_dtype type = kv_dtype::f32;
  std::size_t tok = 0, head = 0;

  // Rows of one head (r.heads == 1): offset elements into each row, heads head_stride apart.
  static kv_view of(const kv_rows& r, std::size_t offset, std::size_t head_stride) noexcept {
    kv_view v;
    v.type = r.type;
    v.tok = r.width;
    v.head = head_stride;
    v.data = r.type == kv_dtype::f32 ? static_cast<const void*>(r.f32_data() + offset)
                                     : static_cast<const void*>(r.bf16_data() + offset);
    return v;
  }
  static kv_view of(const float* p, std::size_t tok, std::size_t head) noexcept { return {p, kv_dtype::f32, tok, head}; }
  // Every head of r, in either layout (GQA caches): element (j, g, i) is r's head g of row
  // j (heads == 1: the whole row is head 0).
  static kv_view per_head(const kv_rows& r) noexcept {
    kv_view v = of(r, 0, 0);
    const std::size_t hd = r.width / r.heads;
    v.tok = r.heads > 1 ? hd : r.width;
    v.head = r.heads > 1 ? r.capacity() * hd : hd;
    return v;
  }
};

struct attention_problem {
  std::size_t T = 0, H = 0, group = 1;  // query tokens, query heads, query heads per kv head
  std::size_t pos0 = 0;                 // position of query 0; keys [0, pos0 + T) exist
  std::size_t window = 0;               // 0 = full causal
  float scale = 1.0f;
  const float* q1 = nullptr; std::size_t q1_tok = 0, q1_head = 0, d1 = 0;
  const float* q2 = nullptr; std::size_t q2_tok = 0, q2_head = 0, d2 = 0;  // optional second part
  kv_view k1, k2, v;
  std::size_t dv = 0;
  float* out = nullptr; std::size_t out_tok = 0, out_head = 0;
  // DSA: per query, n_selected key indices (rows sel_stride apart); -1 entries are unused.
  const std::int32_t* selected = nullptr; std::size_t sel_stride = 0, n_selected = 0;
};

// Runs every (query, head) pair, in parallel; each pair's result depends on nothing but
// its inputs, so neither the thread count nor the other queries of the call change it (a
// prompt and the decode steps that replay it agree bit for bit). `which` picks the kernels:
// isa::scalar is the reference (one key at a time, std::exp); on AVX2 and AVX-512, head
// sizes that are multiples of 64 (AVX-512) or 32 (AVX2) floats run the blocked kernels
// (kernels/attention_ops.hpp: 16 keys at a time, a vector exp, tiles of rows sharing each
// block of keys), other sizes and DSA's key lists the per-key SIMD kernels. Both differ from
// the reference by rounding only (tests/test_attention_kernels.cpp bounds it).
status attend(const attention_problem& p, floats& scratch, compute_context& cx, isa which = isa::best);

namespace detail::attn {
// y[i] = exp(x[i]) as the blocked attention kernels of `which` compute it (isa::avx2 or
// isa::avx512, on a CPU that has it; n a multiple of 16): what the tests check the stated
// bound of the vector exp with. Other isas leave y as it is.
void vector_exp(const float* x, float* y, std::size_t n, isa which) noexcept;
}  // namespace detail::attn

// Llama / Qwen / Mistral attention; Rope fixes the pairing at compile time (rope_half_split
// for these models) or takes it from the config (rope_by_config).
template <rope_policy Rope = rope_by_config>
struct basic_gqa_attention {
  linear q, k, v, o;
  rms_norm q_norm, k_norm;  // empty weights = no QK-norm
  rope_table rope;
  bool interleave = false;
  std::size_t n_heads = 0, n_kv_heads = 0, head_dim = 0, window = 0;
  float scale = 1.0f;

  struct cache {
    kv_rows k, v;  // [positions, n_kv_heads * head_dim], stored head-major (kv_rows::heads)
    std::size_t n = 0;
    std::size_t size() const noexcept { return n; }
    void truncate(std::size_t len) noexcept { n = std::min(n, len); }
    // Session state (models/hf/model.hpp): any truncation is exact.
    bool can_truncate(std::size_t) const noexcept { return true; }
    std::size_t rollback_limit() const noexcept { return n; }
    std::string_view kind() const noexcept { return "gqa"; }
    void fingerprint(state_hasher& h) const {
      h.add(static_cast<std::uint64_t>(k.type));
      h.add(k.width);
      h.add(v.width);
    }
    // Into a cache initialized for the same layer and KV dtype: the rows in use only.
    status copy_from(const cache& src) {
      SLM_TRY(k.copy_from(src.k, src.n));
      SLM_TRY(v.copy_from(src.v, src.n));
      n = src.n;
      return {};
    }
    // u64 n, keys (rows block), values (rows block).
    status save(state_writer& w) const {
      SLM_TRY(w.u64(n));
      SLM_TRY(k.save(w, n));
      return v.save(w, n);
    }
    status load(state_reader& r) {
      std::size_t rows = 0;
      SLM_TRY(r.size(rows, "cached positions"));
      SLM_TRY(k.load(r, rows, "keys"));
      SLM_TRY(v.load(r, rows, "values"));
      n = rows;
      return {};
    }
  };

  template <class Options>
  status init_cache(cache& kc, const Options& opt) const {
    return init_cache(kc, opt.kv, opt.reserve_tokens);
  }
  status init_cache(cache& kc, kv_dtype type, std::size_t reserve_tokens) const {
    kc.k.type = kc.v.type = type;
    kc.k.width = kc.v.width = n_kv_heads * head_dim;
    kc.k.heads = kc.v.heads = n_kv_heads;
    kc.n = 0;
    SLM_TRY(kc.k.reserve(reserve_tokens));
    return kc.v.reserve(reserve_tokens);
  }

  // x [T, d] at positions kc.n.. -> out [T, d]; appends T positions to the cache.
  status forward(const float* x, std::size_t T, float* out, cache& kc, workspace& ws, compute_context& cx) const {
    floats& scratch = ws.proj;
    floats& attn_scratch = ws.attn;
    const std::size_t qd = n_heads * head_dim, kvd = n_kv_heads * head_dim, pos0 = kc.n;
    if (kc.k.capacity() < pos0 + T) {
      SLM_TRY(kc.k.reserve(std::max(pos0 + T, 2 * kc.k.capacity())));
      SLM_TRY(kc.v.reserve(std::max(pos0 + T, 2 * kc.v.capacity())));
    }
    SLM_TRY(scratch.resize(T * (qd + 2 * kvd + qd) + rope.rotary_dim));
    float* qs = scratch.data();          // [T, H, hd]
    float* ks = qs + T * qd;             // [T, Hkv, hd]
    float* vs = ks + T * kvd;            // [T, Hkv, hd]
    float* att = vs + T * kvd;           // [T, H, hd]
    float* rope_tmp = att + T * qd;
    SLM_TRY(q.apply(x, T, qs, cx));      // [T, d] x [d, H*hd] -> [T, H*hd]
    SLM_TRY(k.apply(x, T, ks, cx));      // [T, d] x [d, Hkv*hd] -> [T, Hkv*hd]
    SLM_TRY(v.apply(x, T, vs, cx));      // [T, d] x [d, Hkv*hd] -> [T, Hkv*hd]
    for (std::size_t t = 0; t < T; ++t) {
      float* qt = qs + t * qd;
      float* kt = ks + t * kvd;
      if (!q_norm.weight.empty()) {
        q_norm.apply(qt, n_heads, head_dim, head_dim, qt, head_dim);
        k_norm.apply(kt, n_kv_heads, head_dim, head_dim, kt, head_dim);
      }
      apply_rope<Rope>(rope, interleave, pos0 + t, qt, n_heads, head_dim, rope_tmp);
      apply_rope<Rope>(rope, interleave, pos0 + t, kt, n_kv_heads, head_dim, rope_tmp);
      kc.k.store(pos0 + t, kt);
      kc.v.store(pos0 + t, vs + t * kvd);
    }
    kc.n = pos0 + T;
    attention_problem p;
    p.T = T;
    p.H = n_heads;
    p.group = n_heads / n_kv_heads;
    p.pos0 = pos0;
    p.window = window;
    p.scale = scale;
    p.q1 = qs; p.q1_tok = qd; p.q1_head = head_dim; p.d1 = head_dim;
    p.k1 = kv_view::per_head(kc.k);
    p.v = kv_view::per_head(kc.v);
    p.dv = head_dim;
    p.out = att; p.out_tok = qd; p.out_head = head_dim;
    SLM_TRY(attend(p, attn_scratch, cx));
    return o.apply(att, T, out, cx);     // [T, H*hd] x [H*hd, d] -> [T, d]
  }

  // fn(name, linear, projection): every weight this layer multiplies by.
  template <class Fn>
  void for_each_linear(Fn&& fn) const {
    fn("q_proj", q, true);
    fn("k_proj", k, true);
    fn("v_proj", v, true);
    fn("o_proj", o, true);
  }
};

using gqa_attention = basic_gqa_attention<>;

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

namespace detail::attn {

template <class E, vec_isa Simd>
void one_query(const attention_problem& p, std::size_t t, std::size_t h, float* acc) noexcept {
  const std::size_t g = h / p.group, pos = p.pos0 + t;
  const float* q1 = p.q1 + t * p.q1_tok + h * p.q1_head;
  const float* q2 = p.q2 ? p.q2 + t * p.q2_tok + h * p.q2_head : nullptr;
  const E* k1 = static_cast<const E*>(p.k1.data) + g * p.k1.head;
  const E* k2 = p.q2 ? static_cast<const E*>(p.k2.data) + g * p.k2.head : nullptr;
  const E* v = static_cast<const E*>(p.v.data) + g * p.v.head;
  float m = -std::numeric_limits<float>::infinity(), l = 0;
  std::fill(acc, acc + p.dv, 0.0f);
  auto visit = [&](std::size_t j) {
    float s = dot_k<E, Simd>(q1, k1 + j * p.k1.tok, p.d1);
    if (q2) s += dot_k<E, Simd>(q2, k2 + j * p.k2.tok, p.d2);
    s *= p.scale;
    const E* vj = v + j * p.v.tok;
    if (s > m) {  // new maximum: rescale what has been accumulated
      const float c = std::exp(m - s);
      l *= c;
      for (std::size_t i = 0; i < p.dv; ++i) acc[i] *= c;
      m = s;
    }
    const float e = std::exp(s - m);
    l += e;
    axpy_k<E, Simd>(acc, e, vj, p.dv);
  };
  const std::size_t first = p.window && pos + 1 > p.window ? pos + 1 - p.window : 0;
  if (p.selected) {
    const std::int32_t* sel = p.selected + t * p.sel_stride;
    for (std::size_t i = 0; i < p.n_selected; ++i)
      if (sel[i] >= 0 && static_cast<std::size_t>(sel[i]) <= pos && static_cast<std::size_t>(sel[i]) >= first)
        visit(static_cast<std::size_t>(sel[i]));
  } else {
    for (std::size_t j = first; j <= pos; ++j) visit(j);
  }
  float* o = p.out + t * p.out_tok + h * p.out_head;
  const float inv = l > 0 ? 1.0f / l : 0.0f;
  for (std::size_t i = 0; i < p.dv; ++i) o[i] = acc[i] * inv;
}

// Rows of one tile for the blocked kernels (kernels/attention_ops.hpp): nh heads of one KV
// group (h0 ..) for nt tokens (t0 ..), rows token-major. The tile walks key blocks of 16,
// aligned to key index 0, and each row takes the blocks that meet its own visible keys
// [first, pos] in order: the same blocks, so the same bits, as the row alone in a call.
// Taking a block for all rows in turn reads its keys and values into L1 once for the
// tile: one row alone would stream its whole context from L2 or memory (0.5 FLOP a byte).
// work: rows x (dv + 2) floats; zeros: max(d1, d2) zero elements.
inline constexpr std::size_t tile_rows = 16;

template <class E, vec_isa Simd>
void blocked_tile(const attention_problem& p, std::size_t h0, std::size_t nh, std::size_t t0, std::size_t nt,
                  float* work, const void* zeros) noexcept {
  const std::size_t rows = nh * nt, g = h0 / p.group;
  block_args x;
  x.k1 = static_cast<const E*>(p.k1.data) + g * p.k1.head;
  x.tok1 = p.k1.tok;
  x.d1 = p.d1;
  if (p.q2) {
    x.k2 = static_cast<const E*>(p.k2.data) + g * p.k2.head;
    x.tok2 = p.k2.tok;
    x.d2 = p.d2;
  }
  x.v = static_cast<const E*>(p.v.data) + g * p.v.head;
  x.vtok = p.v.tok;
  x.dv = p.dv;
  x.zeros = zeros;
  x.scale = p.scale;
  auto* st = reinterpret_cast<row_state*>(work + rows * p.dv);
  std::fill(work, work + rows * p.dv, 0.0f);
  const std::size_t last = p.pos0 + t0 + nt - 1;  // the tile's last key
  auto first_of = [&](std::size_t pos) { return p.window && pos + 1 > p.window ? pos + 1 - p.window : 0; };
  for (std::size_t r = 0; r < rows; ++r) st[r] = {-std::numeric_limits<float>::infinity(), 0.0f};
  for (std::size_t j0 = first_of(p.pos0 + t0) / 16 * 16; j0 <= last; j0 += 16) {
    bool fetched = false;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t t = t0 + r / nh, h = h0 + r % nh, pos = p.pos0 + t;
      const std::size_t a = std::max(j0, first_of(pos)), b = std::min(j0 + 16, pos + 1);
      if (a >= b) continue;  // the block is outside this row's keys
      if (!fetched) prefetch_k<E, Simd>(x, j0, a, b);
      fetched = true;
      const float* q1 = p.q1 + t * p.q1_tok + h * p.q1_head;
      const float* q2 = p.q2 ? p.q2 + t * p.q2_tok + h * p.q2_head : nullptr;
      block_k<E, Simd>(x, q1, q2, j0, a, b, work + r * p.dv, st[r]);
    }
  }
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t t = t0 + r / nh, h = h0 + r % nh;
    float* o = p.out + t * p.out_tok + h * p.out_head;
    const float inv = st[r].l > 0 ? 1.0f / st[r].l : 0.0f;
    const float* acc = work + r * p.dv;
    for (std::size_t i = 0; i < p.dv; ++i) o[i] = acc[i] * inv;
  }
}

SLM_INLINE void vector_exp(const float* x, float* y, std::size_t n, isa which) noexcept {
#ifdef SLM_X86
  if (which == isa::avx512 && isa_supported(which, host_cpu())) exp_n_512(x, y, n);
  if (which == isa::avx2 && isa_supported(which, host_cpu())) exp_n_256(x, y, n);
#else
  (void)x, (void)y, (void)n, (void)which;
#endif
}

// Whether the blocked kernels of `v` take problem p: contiguous keys (no DSA list) and
// head sizes that are multiples of 4 vector widths.
inline bool blocked_fits(const attention_problem& p, vec_isa v) noexcept {
  const std::size_t w4 = 4 * (v == vec_isa::avx512 ? block_width<vec_isa::avx512>
                              : v == vec_isa::avx2 ? block_width<vec_isa::avx2>
                                                   : 0);
  return w4 && !p.selected && p.d1 % w4 == 0 && (!p.q2 || p.d2 % w4 == 0) && p.dv % w4 == 0;
}

}  // namespace detail::attn

SLM_INLINE status kv_rows::copy_from(const kv_rows& o, std::size_t rows) {
  if (o.type != type || o.width != width || o.heads != heads)
    return make_error(errc::invalid_argument, "KV rows of width ", o.width, " (", o.type == kv_dtype::f32 ? "f32" : "bf16",
                      ") copied into rows of width ", width, " (", type == kv_dtype::f32 ? "f32" : "bf16", ")");
  if (rows > o.capacity()) return make_error(errc::out_of_range, "copy of ", rows, " KV rows from ", o.capacity());
  if (capacity() < rows) SLM_TRY(reserve(rows));
  if (rows == 0 || width == 0) return {};
  if (heads <= 1) {
    std::memcpy(buf_.data(), o.buf_.data(), rows * width * element_bytes());
    return {};
  }
  const std::size_t hb = width / heads * element_bytes();
  for (std::size_t g = 0; g < heads; ++g)
    std::memcpy(reinterpret_cast<std::byte*>(buf_.data()) + at(0, g) * element_bytes(),
                reinterpret_cast<const std::byte*>(o.buf_.data()) + o.at(0, g) * element_bytes(), rows * hb);
  return {};
}

SLM_INLINE status kv_rows::save(state_writer& w, std::size_t rows) const {
  if (rows > capacity() && width) return make_error(errc::out_of_range, "save of ", rows, " KV rows from ", capacity());
  SLM_TRY(w.u8(static_cast<std::uint8_t>(type)));
  SLM_TRY(w.bytes("\0\0\0\0\0\0\0", 7));
  SLM_TRY(w.u64(width));
  SLM_TRY(w.u64(rows));
  if (heads <= 1) return type == kv_dtype::f32 ? w.f32(f32_data(), rows * width) : w.u16(bf16_data(), rows * width);
  const std::size_t hd = width / heads;  // head-major storage, saved row-major
  for (std::size_t j = 0; j < rows; ++j)
    for (std::size_t g = 0; g < heads; ++g)
      SLM_TRY(type == kv_dtype::f32 ? w.f32(f32_data() + at(j, g), hd) : w.u16(bf16_data() + at(j, g), hd));
  return {};
}

SLM_INLINE status kv_rows::load(state_reader& r, std::size_t rows, std::string_view what) {
  std::uint8_t t = 0;
  SLM_TRY(r.u8(t, what));
  if (t != static_cast<std::uint8_t>(type))
    return make_error(errc::format_error, "", what, " are ",
                      t == 0 ? "f32" : (t == 1 ? "bf16" : "of an unknown type"), ", this cache stores ",
                      type == kv_dtype::f32 ? "f32" : "bf16");
  SLM_TRY(r.zeros(7, what));
  std::size_t wd = 0, n = 0;
  SLM_TRY(r.size(wd, what));
  SLM_TRY(r.size(n, what));
  if (wd != width)
    return make_error(errc::format_error, "", what, " are ", wd, " wide, this cache's are ", width);
  if (n != rows)
    return make_error(errc::format_error, "", what, " hold ", n, " rows, expected ", rows);
  if (width) SLM_TRY(r.need_items(rows, width * element_bytes(), what));
  if (capacity() < rows) SLM_TRY(reserve(rows));
  if (heads <= 1)
    return type == kv_dtype::f32 ? r.f32(buf_.data(), rows * width, what) : r.u16(bf16_data(), rows * width, what);
  const std::size_t hd = width / heads;
  for (std::size_t j = 0; j < rows; ++j)
    for (std::size_t g = 0; g < heads; ++g)
      SLM_TRY(type == kv_dtype::f32 ? r.f32(buf_.data() + at(j, g), hd, what) : r.u16(bf16_data() + at(j, g), hd, what));
  return {};
}

SLM_INLINE status attend(const attention_problem& p, floats& scratch, compute_context& cx, isa which) {
  const std::size_t pairs = p.T * p.H;
  if (pairs == 0) return {};
  if ((p.q2 && p.k2.type != p.k1.type) || p.v.type != p.k1.type)
    return make_error(errc::invalid_argument, "attend: keys and values must share one storage type");
  const std::size_t chunks = std::min<std::size_t>(pairs, std::max<std::size_t>(1, cx.ex.concurrency()) * 4);
  const bool bf16 = p.k1.type == kv_dtype::bf16;
  const isa chosen = resolve_isa(which);
  using detail::attn::vec_isa;
  const vec_isa vec = !isa_supported(chosen, host_cpu()) ? vec_isa::scalar
                      : chosen == isa::avx512            ? vec_isa::avx512
                      : chosen == isa::avx2              ? vec_isa::avx2
                                                         : vec_isa::scalar;
  const std::size_t zeros = detail::attn::blocked_fits(p, vec) ? std::max(p.d1, p.q2 ? p.d2 : 0) : 0;
  if (zeros) {
    // Tiles: a KV group's heads for up to tile_rows rows of queries, or one head each when
    // that leaves threads idle (decode: one token, few groups). Group-major, so a chunk's
    // tiles share their keys and values in L2. f32 zeros are bf16 zeros too.
    using detail::attn::tile_rows;
    const std::size_t threads = std::max<std::size_t>(1, cx.ex.concurrency());
    std::size_t nh = p.group <= tile_rows ? p.group : 1, nt = tile_rows / nh;
    if (p.H / nh * ((p.T + nt - 1) / nt) < threads) nh = 1, nt = tile_rows;
    const std::size_t token_tiles = (p.T + nt - 1) / nt, tiles = p.H / nh * token_tiles;
    const std::size_t per_chunk = tile_rows * (p.dv + 2);
    const std::size_t n_chunks = std::min(tiles, threads * 4);
    SLM_TRY(scratch.resize(n_chunks * per_chunk + zeros));
    std::fill(scratch.data() + n_chunks * per_chunk, scratch.data() + n_chunks * per_chunk + zeros, 0.0f);
    const float* zero_row = scratch.data() + n_chunks * per_chunk;
    const static_partition tpart = partition(0, tiles, n_chunks);
    return parallel_for_chunks(cx.ex, tpart.count, [&](std::size_t c) {
      float* work = scratch.data() + c * per_chunk;
      const index_range r = tpart.chunk(c);
      for (std::size_t u = r.begin; u < r.end; ++u) {
        const std::size_t h0 = u / token_tiles * nh, t0 = u % token_tiles * nt, n = std::min(nt, p.T - t0);
        using detail::attn::blocked_tile;
        switch ((bf16 ? 2 : 0) + (vec == vec_isa::avx512 ? 1 : 0)) {
          case 0: blocked_tile<float, vec_isa::avx2>(p, h0, nh, t0, n, work, zero_row); break;
          case 1: blocked_tile<float, vec_isa::avx512>(p, h0, nh, t0, n, work, zero_row); break;
          case 2: blocked_tile<std::uint16_t, vec_isa::avx2>(p, h0, nh, t0, n, work, zero_row); break;
          default: blocked_tile<std::uint16_t, vec_isa::avx512>(p, h0, nh, t0, n, work, zero_row); break;
        }
      }
    }, cx.cancel);
  }
  SLM_TRY(scratch.resize(chunks * p.dv));
  const static_partition part = partition(0, pairs, chunks);
  return parallel_for_chunks(cx.ex, part.count, [&](std::size_t c) {
    float* acc = scratch.data() + c * p.dv;
    const index_range r = part.chunk(c);
    for (std::size_t i = r.begin; i < r.end; ++i) {
      // Head-major: a chunk's pairs are few heads over many tokens, so a head's keys and
      // values stay in L2 across its queries (token-major, every query read all heads').
      const std::size_t h = i / p.T, t = i % p.T;
      using detail::attn::one_query;
      switch ((bf16 ? 3 : 0) + static_cast<int>(vec)) {
        case 0: one_query<float, vec_isa::scalar>(p, t, h, acc); break;
        case 1: one_query<float, vec_isa::avx2>(p, t, h, acc); break;
        case 2: one_query<float, vec_isa::avx512>(p, t, h, acc); break;
        case 3: one_query<std::uint16_t, vec_isa::scalar>(p, t, h, acc); break;
        case 4: one_query<std::uint16_t, vec_isa::avx2>(p, t, h, acc); break;
        default: one_query<std::uint16_t, vec_isa::avx512>(p, t, h, acc); break;
      }
    }
  }, cx.cancel);
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
