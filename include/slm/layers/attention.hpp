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

// Growable per-layer cache rows: n_rows rows of `width` values in f32 or bf16.
class kv_rows {
 public:
  kv_dtype type = kv_dtype::f32;
  std::size_t width = 0;

  status reserve(std::size_t rows) {
    const std::size_t values = rows * width;
    return buf_.resize(type == kv_dtype::f32 ? values : (values + 1) / 2);
  }
  std::size_t capacity() const noexcept {
    return width == 0 ? 0 : (type == kv_dtype::f32 ? buf_.size() : 2 * buf_.size()) / width;
  }
  void store(std::size_t row, const float* v) noexcept {
    if (type == kv_dtype::f32) {
      std::copy(v, v + width, buf_.data() + row * width);
    } else {
      std::uint16_t* p = bf16_data() + row * width;
      for (std::size_t i = 0; i < width; ++i) p[i] = f32_to_bf16(v[i]);
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
  floats buf_;
};

// A strided view of keys or values: element (j, g, i) at data[j * tok + g * head + i].
struct kv_view {
  const void* data = nullptr;
  kv_dtype type = kv_dtype::f32;
  std::size_t tok = 0, head = 0;

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

// Runs every (query, head) pair, in parallel over the pairs; each pair's result depends
// on nothing but its inputs, so the thread count never changes the output. `which`
// picks the dot/axpy kernels: isa::scalar is the reference, anything else uses AVX-512
// when this CPU has it (the sums then run in another order: results differ by rounding).
status attend(const attention_problem& p, floats& scratch, compute_context& cx, isa which = isa::best);

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
    kv_rows k, v;  // [positions, n_kv_heads * head_dim]
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
    p.k1 = kv_view::of(kc.k, 0, head_dim);
    p.v = kv_view::of(kc.v, 0, head_dim);
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

}  // namespace detail::attn

SLM_INLINE status kv_rows::copy_from(const kv_rows& o, std::size_t rows) {
  if (o.type != type || o.width != width)
    return make_error(errc::invalid_argument, "KV rows of width ", o.width, " (", o.type == kv_dtype::f32 ? "f32" : "bf16",
                      ") copied into rows of width ", width, " (", type == kv_dtype::f32 ? "f32" : "bf16", ")");
  if (rows > o.capacity()) return make_error(errc::out_of_range, "copy of ", rows, " KV rows from ", o.capacity());
  if (capacity() < rows) SLM_TRY(reserve(rows));
  if (rows != 0 && width != 0) std::memcpy(buf_.data(), o.buf_.data(), rows * width * element_bytes());
  return {};
}

SLM_INLINE status kv_rows::save(state_writer& w, std::size_t rows) const {
  if (rows > capacity() && width) return make_error(errc::out_of_range, "save of ", rows, " KV rows from ", capacity());
  SLM_TRY(w.u8(static_cast<std::uint8_t>(type)));
  SLM_TRY(w.bytes("\0\0\0\0\0\0\0", 7));
  SLM_TRY(w.u64(width));
  SLM_TRY(w.u64(rows));
  return type == kv_dtype::f32 ? w.f32(f32_data(), rows * width) : w.u16(bf16_data(), rows * width);
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
  return type == kv_dtype::f32 ? r.f32(buf_.data(), rows * width, what) : r.u16(bf16_data(), rows * width, what);
}

SLM_INLINE status attend(const attention_problem& p, floats& scratch, compute_context& cx, isa which) {
  const std::size_t pairs = p.T * p.H;
  if (pairs == 0) return {};
  if ((p.q2 && p.k2.type != p.k1.type) || p.v.type != p.k1.type)
    return make_error(errc::invalid_argument, "attend: keys and values must share one storage type");
  const std::size_t chunks = std::min<std::size_t>(pairs, std::max<std::size_t>(1, cx.ex.concurrency()) * 4);
  SLM_TRY(scratch.resize(chunks * p.dv));
  const static_partition part = partition(0, pairs, chunks);
  const bool bf16 = p.k1.type == kv_dtype::bf16;
  const isa chosen = resolve_isa(which);
  using detail::attn::vec_isa;
  const vec_isa vec = !isa_supported(chosen, host_cpu()) ? vec_isa::scalar
                      : chosen == isa::avx512            ? vec_isa::avx512
                      : chosen == isa::avx2              ? vec_isa::avx2
                                                         : vec_isa::scalar;
  return parallel_for_chunks(cx.ex, part.count, [&](std::size_t c) {
    float* acc = scratch.data() + c * p.dv;
    const index_range r = part.chunk(c);
    for (std::size_t i = r.begin; i < r.end; ++i) {
      const std::size_t t = i / p.H, h = i % p.H;
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
