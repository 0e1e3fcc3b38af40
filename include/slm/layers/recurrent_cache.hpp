// slm/layers/recurrent_cache.hpp - session state building blocks: the byte stream every layer
// cache serializes into, and the rollback history of recurrent layers.
//
// Byte stream (state_format, state_writer, state_reader, state_hasher). A session's
// save() writes one versioned little-endian blob (the layout is in models/hf/model.hpp); each layer
// cache writes its part through a state_writer and reads it back through a state_reader.
// The reader checks every length against the bytes that remain before it reads or
// allocates anything, so a truncated or hostile blob yields a format_error naming the
// field and the byte offset, never a read past the end or an allocation larger than the
// blob. Floats are written as their IEEE-754 bits, so a round trip is exact (NaN payloads
// included). state_hasher is the structure fingerprint (FNV-1a 64 over little-endian
// words); state_format::checksum the blob's trailing checksum (four interleaved
// multiply-rotate lanes, a few GB/s; it detects corruption, it is not a MAC). Besides
// f32 / bf16 values the stream holds i32 arrays (token ids) and f32 rows blocks.
//
// Blob envelope (write_state_blob, open_state_blob, state_snapshot). Every session kind
// (decoder, NAM56R, nanochat) writes the same header, records and trailing checksum, and
// checks a blob the same way before it replaces anything: one implementation here, each
// session supplies its header fields (session kind, KV dtype, fingerprint, record count)
// and its records.
//
// Recurrent history (recurrent_cache<State>). A recurrent layer (Mamba-2, Mamba-3,
// M2RNN) keeps a fixed-size state instead of a KV cache; rolling it back means keeping
// old states. recurrent_cache keeps, besides the current state (position p):
//  * the states at positions p - R .. p - 1 (R = session_options::rollback_tokens), and
//  * the state at the position where the last forward call began (its undo: a failed
//    call, or a later layer's failure, is undone by truncate(start)),
// in R + 2 slots that are reused as a ring (each slot's buffers are allocated the first
// time it is used). truncate(len) is exact when a kept state is at len (or len == 0, a
// fresh sequence); any other len marks the cache broken: the next forward fails with
// errc::unsupported naming the position, until truncate(0) or a copy/load. It never
// continues from a wrong state. With R = 0 this is the old two-state flip: one level of
// undo, nothing more.
//
// A forward of T tokens from position p0 records min(T, R + 1) states: those at
// positions p0 + T - min(T, R + 1) + 1 .. p0 + T, the last one being the new current
// state. The layer computes them in one of two ways:
//  * begin(T); fill records()[i] (the state after the first T - records + 1 + i tokens of
//    the call, n set accordingly) from state(); commit(). mamba2_mixer does this in one
//    pass (chunked scan up to the first record, then the recurrence token by token).
//  * forward(T, advance) with advance(const State& in, State& out, first, count) that
//    runs tokens [first, first + count) of the call from `in` into `out`: the helper
//    calls it once for the tokens before the first record and once per further record.
// Other slots are not touched until commit(), except those begin() hands out: if the
// layer fails, the cache is still at p0 and every kept state is still there except
// possibly the oldest ones whose slots were handed out (rollback history may shorten;
// the state itself never changes).
//
// Adopting it in a recurrent layer with a state type S (reset(), copy_from(), n):
//   using cache = recurrent_cache<S>;
//   template <class Options> status init_cache(cache& c, const Options& o) const {
//     return c.init(rollback_tokens_of(o), [this](S& s) { return init_state(s); });
//   }
//   status forward(const float* x, std::size_t T, float* y, cache& c, workspace& ws, compute_context& cx) const {
//     return c.forward(T, [&](const S& in, S& out, std::size_t first, std::size_t count) {
//       return run(x + first * d, count, y + first * d, in, out, count == 1 ? 0 : chunk, ws, cx);
//     });
//   }
// and, for save()/load(), two members in S (serializable_state):
//   static constexpr std::string_view kind = "mamba3";          // at most 8 characters
//   template <class Self, class Fn> static void for_each_buffer(Self& s, Fn&& fn) { fn(s.ssm); fn(s.k); ... }
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/core/buffer.hpp"
#include "slm/core/status.hpp"

namespace slm {

namespace state_format {

inline constexpr char magic[8] = {'S', 'L', 'M', 'S', 'T', 'A', 'T', 'E'};
inline constexpr std::uint32_t version = 1;
inline constexpr std::size_t header_bytes = 48;   // magic .. position (see models/hf/model.hpp)
inline constexpr std::size_t checksum_bytes = 8;  // trailing
inline constexpr std::size_t kind_bytes = 8;      // a layer record's kind tag, NUL-padded

namespace detail {
inline std::uint64_t load_u64le(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, p, 8);
  } else {
    for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint64_t>(p[i]);
  }
  return v;
}
inline void store_le(std::byte* p, std::uint64_t v, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::byte>((v >> (8 * i)) & 0xFFu);
}
inline std::uint64_t rotl(std::uint64_t x, int r) noexcept { return (x << r) | (x >> (64 - r)); }
}  // namespace detail

// The trailing checksum: 64-bit words (little-endian) dealt round-robin to four
// multiply-rotate lanes, a tail of fewer than 32 bytes, the length, an avalanche.
class checksum {
 public:
  void update(const std::byte* p, std::size_t n) noexcept;
  std::uint64_t value() const noexcept;

 private:
  void block(const std::byte* p) noexcept;
  std::uint64_t lane_[4] = {0x243F6A8885A308D3ull, 0x13198A2E03707344ull, 0xA4093822299F31D0ull,
                            0x082EFA98EC4E6C89ull};
  std::byte buf_[32] = {};
  std::size_t fill_ = 0;
  std::uint64_t length_ = 0;
};

inline std::uint64_t checksum_of(std::span<const std::byte> bytes) noexcept {
  checksum c;
  c.update(bytes.data(), bytes.size());
  return c.value();
}

}  // namespace state_format

// The structure fingerprint: FNV-1a 64 over what is added (integers as 8 little-endian
// bytes, strings with their length first).
class state_hasher {
 public:
  void add(std::uint64_t v) noexcept {
    for (int i = 0; i < 8; ++i) byte(static_cast<std::uint8_t>((v >> (8 * i)) & 0xFFu));
  }
  void add(std::string_view s) noexcept {
    add(static_cast<std::uint64_t>(s.size()));
    for (char c : s) byte(static_cast<std::uint8_t>(c));
  }
  std::uint64_t value() const noexcept { return h_; }

 private:
  void byte(std::uint8_t b) noexcept { h_ = (h_ ^ b) * 0x100000001B3ull; }
  std::uint64_t h_ = 0xCBF29CE484222325ull;
};

// Writes the byte stream to a sink (status(void* ctx, span of bytes)), or only counts
// it (sink == nullptr), keeping the running checksum when asked to.
class state_writer {
 public:
  using sink_fn = status (*)(void* ctx, std::span<const std::byte> bytes);

  state_writer(sink_fn sink, void* ctx, bool checksummed) noexcept : sink_(sink), ctx_(ctx), sum_on_(checksummed) {}

  status bytes(const void* p, std::size_t n) {
    if (n == 0) return {};
    const auto* b = static_cast<const std::byte*>(p);
    if (sum_on_) sum_.update(b, n);
    written_ += n;
    return sink_ ? sink_(ctx_, std::span<const std::byte>(b, n)) : status{};
  }
  status u8(std::uint8_t v) { return le(v, 1); }
  status u32(std::uint32_t v) { return le(v, 4); }
  status u64(std::uint64_t v) { return le(v, 8); }
  // A kind tag: exactly state_format::kind_bytes bytes, NUL-padded.
  status kind(std::string_view k);
  // n floats as their little-endian IEEE-754 bits.
  status f32(const float* p, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      return bytes(p, n * sizeof(float));
    } else {
      return converted<4>(n, [p](std::size_t i) { return static_cast<std::uint64_t>(std::bit_cast<std::uint32_t>(p[i])); });
    }
  }
  // n 16-bit values (bf16 bits), little-endian.
  status u16(const std::uint16_t* p, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      return bytes(p, n * sizeof(std::uint16_t));
    } else {
      return converted<2>(n, [p](std::size_t i) { return static_cast<std::uint64_t>(p[i]); });
    }
  }
  // n 32-bit signed integers (token ids), little-endian two's complement.
  status i32(const std::int32_t* p, std::size_t n) {
    if constexpr (std::endian::native == std::endian::little) {
      return bytes(p, n * sizeof(std::int32_t));
    } else {
      return converted<4>(n, [p](std::size_t i) { return static_cast<std::uint64_t>(static_cast<std::uint32_t>(p[i])); });
    }
  }
  // An f32 rows block (the layout of an f32 KV rows block, layers/attention.hpp): u8 0, 7 zero
  // bytes, u64 width, u64 rows, rows x width f32.
  status f32_rows(const float* p, std::size_t rows, std::size_t width);
  std::uint64_t written() const noexcept { return written_; }
  std::uint64_t checksum() const noexcept { return sum_.value(); }

 private:
  status le(std::uint64_t v, std::size_t n) {
    std::byte b[8];
    state_format::detail::store_le(b, v, n);
    return bytes(b, n);
  }
  template <std::size_t W, class Get>
  status converted(std::size_t n, Get get) {
    std::byte buf[1024];
    for (std::size_t i = 0; i < n;) {
      const std::size_t m = std::min(n - i, sizeof buf / W);
      for (std::size_t j = 0; j < m; ++j) state_format::detail::store_le(buf + j * W, get(i + j), W);
      SLM_TRY(bytes(buf, m * W));
      i += m;
    }
    return {};
  }

  sink_fn sink_;
  void* ctx_;
  bool sum_on_;
  state_format::checksum sum_;
  std::uint64_t written_ = 0;
};

// Reads the byte stream; every read names what it reads, and an error says where.
class state_reader {
 public:
  explicit state_reader(std::span<const std::byte> data) noexcept : data_(data) {}

  std::size_t offset() const noexcept { return pos_; }
  std::size_t remaining() const noexcept { return data_.size() - pos_; }

  // Fails unless n more bytes are there.
  status need(std::size_t n, std::string_view what) const;
  // Fails unless `count` items of `item_bytes` each fit in what remains (checked before
  // anything is allocated for them; item_bytes == 0 always fits).
  status need_items(std::uint64_t count, std::size_t item_bytes, std::string_view what) const;
  status bytes(void* dst, std::size_t n, std::string_view what) {
    SLM_TRY(need(n, what));
    if (n) std::memcpy(dst, data_.data() + pos_, n);
    pos_ += n;
    return {};
  }
  status skip(std::size_t n, std::string_view what) {
    SLM_TRY(need(n, what));
    pos_ += n;
    return {};
  }
  status u8(std::uint8_t& v, std::string_view what) {
    std::uint64_t x = 0;
    SLM_TRY(le(x, 1, what));
    v = static_cast<std::uint8_t>(x);
    return {};
  }
  status u32(std::uint32_t& v, std::string_view what) {
    std::uint64_t x = 0;
    SLM_TRY(le(x, 4, what));
    v = static_cast<std::uint32_t>(x);
    return {};
  }
  status u64(std::uint64_t& v, std::string_view what) { return le(v, 8, what); }
  // A u64 that must be a size this platform can hold.
  status size(std::size_t& v, std::string_view what);
  // A kind tag (NUL-padded, at most kind_bytes characters, no byte after the first NUL).
  status kind(std::string_view& out, std::string_view what);
  // Reserved bytes must be zero (a later version may give them a meaning).
  status zeros(std::size_t n, std::string_view what);
  status f32(float* dst, std::size_t n, std::string_view what);
  status i32(std::int32_t* dst, std::size_t n, std::string_view what);
  // An f32 rows block (state_writer::f32_rows) of exactly `rows` rows of `width` values,
  // into dst (resized to rows x width).
  status f32_rows(floats& dst, std::size_t rows, std::size_t width, std::string_view what);
  status u16(std::uint16_t* dst, std::size_t n, std::string_view what);

 private:
  status le(std::uint64_t& v, std::size_t n, std::string_view what) {
    SLM_TRY(need(n, what));
    v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | static_cast<std::uint64_t>(data_[pos_ + i]);
    pos_ += n;
    return {};
  }

  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};

// ---- The blob envelope shared by every session kind (layout in models/hf/model.hpp) ----

namespace state_format {

// Header byte 13: which kind of session wrote the blob. It was a reserved zero byte when
// only decoder sessions could save, so their blobs read as `decoder` and still load; a
// reader that predates the other kinds refuses their blobs (a non-zero reserved byte).
enum class session_kind : std::uint8_t { decoder = 0, nam56r = 1, nanochat = 2 };
inline constexpr std::uint8_t last_session_kind = 2;
inline const char* to_string(session_kind k) noexcept {
  switch (k) {
    case session_kind::decoder: return "decoder";
    case session_kind::nam56r: return "NAM56R";
    case session_kind::nanochat: return "nanochat";
  }
  return "?";
}

// The header fields a session writes, and expects of a blob it loads.
struct header {
  session_kind session = session_kind::decoder;
  std::uint8_t kv = 0;              // KV dtype: 0 f32, 1 bf16
  std::uint64_t fingerprint = 0;    // structure fingerprint (state_hasher)
  std::uint64_t records = 0;        // records that follow the header
  std::uint64_t position = 0;       // tokens consumed (ignored when loading)
};

inline const char* kv_name(std::uint8_t kv) noexcept { return kv == 0 ? "f32" : "bf16"; }

// The position (tokens consumed) a blob's header records: what its session holds after a
// load() of it. nullopt when the bytes do not start with a blob header; nothing else is
// checked (load() does that), so a caller can check the position against its own state
// before it lets a session load anything (generator::load, generate/generator.hpp).
inline std::optional<std::uint64_t> blob_position(std::span<const std::byte> bytes) noexcept {
  if (bytes.size() < header_bytes || std::memcmp(bytes.data(), magic, sizeof magic) != 0) return std::nullopt;
  return detail::load_u64le(bytes.data() + 40);
}

status write_header(state_writer& w, const header& h, std::uint64_t total);

}  // namespace state_format

// A whole blob through write(std::span<const std::byte>) -> status, called in order: the
// header (its total size from a first, counting pass), records(state_writer&) -> status,
// the checksum. records must write the same bytes on both passes.
template <class Write, class Records>
status write_state_blob(Write&& write, const state_format::header& h, Records&& records) {
  state_writer counter(nullptr, nullptr, false);
  SLM_TRY(state_format::write_header(counter, h, 0));
  SLM_TRY(records(counter));
  const std::uint64_t total = counter.written() + state_format::checksum_bytes;
  using W = std::remove_reference_t<Write>;
  state_writer w([](void* ctx, std::span<const std::byte> b) -> status { return (*static_cast<W*>(ctx))(b); },
                 const_cast<void*>(static_cast<const void*>(std::addressof(write))), true);
  SLM_TRY(state_format::write_header(w, h, total));
  SLM_TRY(records(w));
  if (w.written() + state_format::checksum_bytes != total)
    return make_error(errc::invalid_argument, "session state: ", w.written(), " bytes written, ",
                      counter.written(), " counted (internal error)");
  return w.u64(w.checksum());
}
// The size write_state_blob writes.
template <class Records>
result<std::uint64_t> state_blob_size(const state_format::header& h, Records&& records) {
  state_writer counter(nullptr, nullptr, false);
  SLM_TRY(state_format::write_header(counter, h, 0));
  SLM_TRY(records(counter));
  return counter.written() + state_format::checksum_bytes;
}
// The same into a byte vector.
template <class Records>
result<std::vector<std::byte>> state_blob(const state_format::header& h, Records&& records) {
  auto n = state_blob_size(h, records);
  if (!n.ok()) return std::move(n).take_error();
  std::vector<std::byte> out;
  if (*n > out.max_size()) return make_error(errc::out_of_memory, "session state of ", *n, " bytes");
  out.reserve(static_cast<std::size_t>(*n));
  SLM_TRY(write_state_blob([&out](std::span<const std::byte> b) -> status {
    out.insert(out.end(), b.begin(), b.end());
    return {};
  }, h, records));
  return out;
}

// Checks a blob's envelope against what the receiving session expects (`expect`; its
// position is ignored), in this order: size, magic, version, the session kind and KV
// dtype bytes, reserved bytes, total size (format_error; unsupported for a version other
// than 1); the session kind, KV dtype, record count and fingerprint (invalid_argument:
// another model's blob); the checksum (format_error); the position against max_position
// (out_of_range). On success `position` is the header's and `records` reads the records
// (the checksum excluded).
// The checks that need no model: size, magic, version and the header's total size. A
// session's load runs them before it allocates the state it fills, so a truncated or
// foreign blob is refused without that work (open_state_blob repeats them).
status check_state_envelope(std::span<const std::byte> bytes);
status open_state_blob(std::span<const std::byte> bytes, const state_format::header& expect,
                       std::size_t max_position, std::size_t& position, state_reader& records);

// A record's kind tag, checked against the one expected (a clear message for a mismatch).
status expect_record(state_reader& r, std::string_view want, std::string_view what);

// A session's state held in memory as its saved blob: what snapshot() of every session
// returns (models/session.hpp). restore() is a load of these bytes, with every check of load().
class state_snapshot {
 public:
  state_snapshot() = default;
  explicit state_snapshot(std::vector<std::byte> blob) noexcept : blob_(std::move(blob)) {}
  std::size_t position() const noexcept { return field(40); }
  std::uint64_t fingerprint() const noexcept { return field(24); }
  std::span<const std::byte> bytes() const noexcept { return blob_; }

 private:
  std::uint64_t field(std::size_t at) const noexcept {
    return blob_.size() >= state_format::header_bytes ? state_format::detail::load_u64le(blob_.data() + at) : 0;
  }
  std::vector<std::byte> blob_;
};

// session_options::rollback_tokens, or 0 for option types without it (layer tests).
template <class Options>
constexpr std::size_t rollback_tokens_of(const Options& o) noexcept {
  if constexpr (requires { o.rollback_tokens; }) return static_cast<std::size_t>(o.rollback_tokens);
  else return 0;
}

// What recurrent_cache needs of a state: default-constructible, a deep copy that sizes
// the buffers, reset() to a fresh sequence, and n = tokens consumed (n == 0: fresh).
template <class S>
concept recurrent_state = std::default_initializable<S> && requires(S& s, const S& c) {
  { s.copy_from(c) } -> std::same_as<status>;
  s.reset();
  { c.n } -> std::convertible_to<std::size_t>;
};

namespace detail {
struct any_buffer_fn {
  void operator()(floats&) const noexcept {}
  void operator()(const floats&) const noexcept {}
};
}  // namespace detail

// And for save()/load(): a kind tag and the state's buffers, in a fixed order.
template <class S>
concept serializable_state = recurrent_state<S> && requires(S& s, const S& c) {
  { S::kind } -> std::convertible_to<std::string_view>;
  S::for_each_buffer(s, detail::any_buffer_fn{});
  S::for_each_buffer(c, detail::any_buffer_fn{});
};

template <recurrent_state State>
class recurrent_cache {
 public:
  using state_type = State;
  static constexpr std::size_t max_rollback_tokens = std::size_t{1} << 16;

  // A fresh sequence keeping `rollback_tokens` states of history; init_state(State&)
  // sizes and zeroes a state (the layer's init_state).
  template <class Init>
  status init(std::size_t rollback_tokens, Init&& init_state) {
    SLM_TRY(allocate(rollback_tokens));
    SLM_TRY(init_state(slots_[0].st));  // sized and zeroed
    slots_[0].kept = slots_[0].sized = true;
    return {};
  }

  bool initialized() const noexcept { return slots_ != nullptr; }
  std::size_t rollback_tokens() const noexcept { return R_; }
  // Tokens consumed (the position truncated to, while broken).
  std::size_t size() const noexcept { return broken_ ? broken_len_ : (slots_ ? pos(cur_) : 0); }
  bool broken() const noexcept { return broken_; }
  const State& state() const noexcept { return slots_[cur_].st; }

  // Whether truncate(len) is exact: no-op, a fresh start, or a kept state.
  bool can_truncate(std::size_t len) const noexcept {
    if (!slots_) return true;  // nothing held
    if (broken_) return len == 0;
    return len >= size() || len == 0 || find(len) != npos;
  }
  // How many of the latest tokens can be dropped, every count up to it exactly.
  std::size_t rollback_limit() const noexcept {
    if (!slots_ || broken_) return 0;
    const std::size_t n = size();
    // Positions are distinct, so [n - k, n) is all restorable iff k of them are
    // (position 0 always is); that holds for every k up to the answer: binary search.
    auto full = [&](std::size_t k) {
      std::size_t have = k == n ? 1 : 0;
      for (std::size_t j = 0; j < cap_; ++j)
        if (slots_[j].kept && j != cur_ && pos(j) > 0 && pos(j) < n && pos(j) >= n - k) ++have;
      return have == k;
    };
    std::size_t lo = 0, hi = std::min(n, cap_);
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo + 1) / 2;
      if (full(mid)) lo = mid;
      else hi = mid - 1;
    }
    return lo;
  }
  void truncate(std::size_t len) noexcept {
    pending_n_ = 0;
    if (!slots_) return;
    if (broken_) {
      if (len == 0) fresh_start();
      else broken_len_ = std::min(broken_len_, len);
      return;
    }
    if (len >= size()) return;
    if (len == 0) {
      fresh_start();
      return;
    }
    const std::size_t i = find(len);
    if (i == npos) {  // a recurrent state cannot be rewound to a position it did not keep
      broken_ = true;
      broken_len_ = len;
      return;
    }
    cur_ = i;
    for (std::size_t j = 0; j < cap_; ++j)
      if (slots_[j].kept && pos(j) > len) slots_[j].kept = false;
  }

  // Starts a forward of T tokens: hands out records().size() = min(T, R + 1) slots
  // (sized like the current state). The current state and the kept history are not
  // touched; nothing changes until commit().
  status begin(std::size_t T) {
    pending_n_ = 0;
    if (!slots_) return make_error(errc::invalid_argument, "recurrent cache used before init_cache");
    if (broken_)
      return make_error(errc::unsupported, "the recurrent state was truncated to position ", broken_len_,
                        ", which its kept history does not hold (session_options::rollback_tokens = ", R_,
                        "); reset the session or restore a snapshot");
    if (T == 0) return make_error(errc::invalid_argument, "recurrent cache: a forward of 0 tokens");
    const std::size_t c = std::min(T, R_ + 1), p0 = size();
    const std::size_t window = p0 + T >= R_ ? p0 + T - R_ : 0;  // kept after the call: n >= window
    std::size_t found = 0;
    // Slots holding nothing first, then kept ones falling out of the window, oldest
    // first, then (never needed while the invariants hold) the other kept ones.
    for (std::size_t j = 0; j < cap_ && found < c; ++j)
      if (!slots_[j].kept && j != cur_) pending_[found++] = j;
    for (int pass = 0; pass < 2 && found < c; ++pass) {
      std::size_t m = found;
      for (std::size_t j = 0; j < cap_; ++j)
        if (j != cur_ && slots_[j].kept && (pass == 0) == (pos(j) < window)) pending_[m++] = j;
      std::sort(pending_.get() + found, pending_.get() + m, [this](std::size_t a, std::size_t b) { return pos(a) < pos(b); });
      found = std::min(m, c);
    }
    if (found < c) return make_error(errc::invalid_argument, "recurrent cache: no free slot (internal error)");
    for (std::size_t i = 0; i < c; ++i) slots_[pending_[i]].kept = false;
    for (std::size_t i = 0; i < c; ++i) {
      slot& s = slots_[pending_[i]];
      if (!s.sized) {
        SLM_TRY(s.st.copy_from(slots_[cur_].st));
        s.sized = true;
      }
      records_[i] = &s.st;
    }
    pending_n_ = c;
    pending_T_ = T;
    return {};
  }
  // The states begin() handed out: records()[i] is the state after the first
  // T - records().size() + 1 + i tokens of the call; the last one becomes current.
  std::span<State* const> records() const noexcept { return {records_.get(), pending_n_}; }
  // The records are filled: they become the current state and the newest history.
  void commit() noexcept {
    if (pending_n_ == 0) return;
    const std::size_t p = size() + pending_T_;
    const std::size_t window = p >= R_ ? p - R_ : 0;
    const std::size_t old = cur_;
    for (std::size_t j = 0; j < cap_; ++j)
      if (slots_[j].kept && j != old && pos(j) < window) slots_[j].kept = false;
    for (std::size_t i = 0; i < pending_n_; ++i) slots_[pending_[i]].kept = true;
    cur_ = pending_[pending_n_ - 1];
    pending_n_ = 0;
  }
  // begin, advance(in, out, first, count) over the call's segments, commit.
  template <class Advance>
  status forward(std::size_t T, Advance&& advance) {
    SLM_TRY(begin(T));
    const std::span<State* const> rec = records();
    const std::size_t c = rec.size(), head = T - c + 1;
    status s = advance(static_cast<const State&>(slots_[cur_].st), *rec[0], std::size_t{0}, head);
    for (std::size_t i = 1; s.ok() && i < c; ++i)
      s = advance(static_cast<const State&>(*rec[i - 1]), *rec[i], head + i - 1, std::size_t{1});
    if (!s.ok()) {
      pending_n_ = 0;
      return s;
    }
    commit();
    return {};
  }

  // A deep copy of o's current state and history. This cache keeps its own capacity
  // (initialized or not: then o's); when it holds fewer slots, the newest states are
  // kept. On error this cache holds a fresh sequence or part of o's history: use it only
  // after a successful copy (the session copies into caches it then discards).
  status copy_from(const recurrent_cache& o) {
    if (!o.slots_) return make_error(errc::invalid_argument, "copy of an uninitialized recurrent cache");
    if (!slots_) SLM_TRY(allocate(o.R_));
    for (std::size_t j = 0; j < cap_; ++j) slots_[j].kept = false;
    pending_n_ = 0;
    std::unique_ptr<std::size_t[]> order(new (std::nothrow) std::size_t[o.cap_]);
    if (!order) return make_error(errc::out_of_memory, "cannot allocate ", o.cap_, " slot indices");
    std::size_t order_n = 0;
    o.newest_first(order.get(), order_n);
    const std::size_t take = std::min(order_n, cap_);
    for (std::size_t k = 0; k < take; ++k) {
      SLM_TRY(slots_[k].st.copy_from(o.slots_[order[k]].st));
      slots_[k].kept = slots_[k].sized = true;
    }
    cur_ = 0;
    broken_ = o.broken_;
    broken_len_ = o.broken_len_;
    return {};
  }

  // Serialization (models/hf/model.hpp's format): u64 count; per state, newest (the current) first:
  // u64 n, and when n > 0: u64 buffers, per buffer u64 length + that many f32.
  std::string_view kind() const noexcept
    requires serializable_state<State>
  {
    return State::kind;
  }
  void fingerprint(state_hasher& h) const
    requires serializable_state<State>
  {
    h.add(kind());
    if (!slots_) return;
    std::uint64_t nb = 0;
    State::for_each_buffer(slots_[cur_].st, [&](const floats&) { ++nb; });
    h.add(nb);
    State::for_each_buffer(slots_[cur_].st, [&](const floats& f) { h.add(static_cast<std::uint64_t>(f.size())); });
  }
  status save(state_writer& w) const
    requires serializable_state<State>
  {
    if (!slots_) return make_error(errc::invalid_argument, "save of an uninitialized recurrent cache");
    if (broken_)
      return make_error(errc::unsupported, "the recurrent state was truncated to position ", broken_len_,
                        ", which its history does not hold: nothing to save");
    std::unique_ptr<std::size_t[]> order(new (std::nothrow) std::size_t[cap_]);
    if (!order) return make_error(errc::out_of_memory, "cannot allocate ", cap_, " slot indices");
    std::size_t order_n = 0;
    newest_first(order.get(), order_n);
    std::size_t count = 1;  // the current state, then the others but a fresh one (truncate(0) needs none)
    for (std::size_t k = 1; k < order_n; ++k)
      if (pos(order[k]) > 0) order[count++] = order[k];
    SLM_TRY(w.u64(count));
    for (std::size_t k = 0; k < count; ++k) SLM_TRY(save_state(w, slots_[order[k]].st));
    return {};
  }
  // Into an initialized cache (its current state gives the buffer sizes); states beyond
  // this cache's capacity are checked and skipped, the newest kept. On error this cache
  // is left partly written: load into a cache that is discarded on failure.
  status load(state_reader& r)
    requires serializable_state<State>
  {
    if (!slots_) return make_error(errc::invalid_argument, "load into an uninitialized recurrent cache");
    constexpr std::size_t max_buffers = 64;
    std::size_t sizes[max_buffers] = {};
    std::size_t nb = 0;
    State::for_each_buffer(slots_[cur_].st, [&](const floats& f) {
      if (nb < max_buffers) sizes[nb] = f.size();
      ++nb;
    });
    if (nb > max_buffers) return make_error(errc::unsupported, "recurrent state: more than ", max_buffers, " buffers");
    // Slot order: the current slot first (it is sized), then the others.
    const std::size_t first = cur_;
    auto slot_of = [&](std::size_t k) { return k == 0 ? first : (k <= first ? k - 1 : k); };
    pending_n_ = 0;
    broken_ = false;
    broken_len_ = 0;
    for (std::size_t j = 0; j < cap_; ++j) slots_[j].kept = false;
    std::size_t count = 0;
    SLM_TRY(r.size(count, "recurrent state count"));
    if (count == 0) return make_error(errc::format_error, "a recurrent cache with no state");
    SLM_TRY(r.need_items(count, 8, "recurrent states"));
    std::size_t prev = 0;
    for (std::size_t k = 0; k < count; ++k) {
      std::size_t n = 0;
      SLM_TRY(r.size(n, "recurrent state position"));
      if (k > 0 && (n == 0 || n >= prev))
        return make_error(errc::format_error, "recurrent state ", k, " is at position ", n,
                          ", expected one in [1, ", prev, ") (states are stored newest first)");
      prev = n;
      slot* dst = k < cap_ ? &slots_[slot_of(k)] : nullptr;
      if (n == 0) {  // a fresh current state (k == 0: a later one fails the order check)
        slots_[first].st.reset();
        slots_[first].kept = true;
        continue;
      }
      std::size_t buffers = 0;
      SLM_TRY(r.size(buffers, "recurrent state buffer count"));
      if (buffers != nb)
        return make_error(errc::format_error, "the recurrent state at position ", n, " has ", buffers,
                          " buffers, this layer's state has ", nb);
      status s;
      std::size_t b = 0;
      auto read_one = [&](floats* f) {
        if (!s.ok()) return;
        std::size_t len = 0;
        s = r.size(len, "recurrent state buffer length");
        if (s.ok() && len != sizes[b])
          s = make_error(errc::format_error, "buffer ", b, " of the recurrent state at position ", n,
                         " holds ", len, " values, this layer's holds ", sizes[b]);
        if (s.ok()) s = r.need_items(len, sizeof(float), "recurrent state buffer");
        if (s.ok() && f) s = f->resize(len);
        if (s.ok()) s = f ? r.f32(f->data(), len, "recurrent state buffer") : r.skip(len * sizeof(float), "recurrent state buffer");
        ++b;
      };
      if (dst) State::for_each_buffer(dst->st, [&](floats& f) { read_one(&f); });
      else
        for (std::size_t i = 0; i < nb; ++i) read_one(nullptr);
      SLM_TRY(s);
      if (dst) {
        dst->st.n = n;
        dst->kept = dst->sized = true;
      }
    }
    return {};
  }

 private:
  struct slot {
    State st;
    bool kept = false;   // part of the history (or the current state)
    bool sized = false;  // buffers allocated
  };
  static constexpr std::size_t npos = ~std::size_t{0};

  std::size_t pos(std::size_t j) const noexcept { return static_cast<std::size_t>(slots_[j].st.n); }
  std::size_t find(std::size_t len) const noexcept {
    for (std::size_t j = 0; j < cap_; ++j)
      if (slots_[j].kept && pos(j) == len) return j;
    return npos;
  }
  void fresh_start() noexcept {
    slots_[cur_].st.reset();
    for (std::size_t j = 0; j < cap_; ++j) slots_[j].kept = j == cur_;
    broken_ = false;
    broken_len_ = 0;
    pending_n_ = 0;
  }
  // Indices of the kept states, current first, then by position descending.
  void newest_first(std::size_t* out, std::size_t& n) const noexcept {
    n = 0;
    out[n++] = cur_;
    const std::size_t first_other = n;
    for (std::size_t j = 0; j < cap_; ++j)
      if (slots_[j].kept && j != cur_) out[n++] = j;
    std::sort(out + first_other, out + n, [this](std::size_t a, std::size_t b) { return pos(a) > pos(b); });
  }
  status allocate(std::size_t rollback_tokens) {
    if (rollback_tokens > max_rollback_tokens)
      return make_error(errc::out_of_range, "rollback_tokens ", rollback_tokens, " exceeds the limit of ",
                        max_rollback_tokens);
    const std::size_t cap = rollback_tokens + 2;
    std::unique_ptr<slot[]> s(new (std::nothrow) slot[cap]);
    std::unique_ptr<std::size_t[]> p(new (std::nothrow) std::size_t[cap]);
    std::unique_ptr<State*[]> r(new (std::nothrow) State*[cap]);
    if (!s || !p || !r) return make_error(errc::out_of_memory, "cannot allocate ", cap, " recurrent state slots");
    slots_ = std::move(s);
    pending_ = std::move(p);
    records_ = std::move(r);
    R_ = rollback_tokens;
    cap_ = cap;
    cur_ = 0;
    pending_n_ = pending_T_ = 0;
    broken_ = false;
    broken_len_ = 0;
    return {};
  }
  status save_state(state_writer& w, const State& st) const
    requires serializable_state<State>
  {
    const std::size_t n = static_cast<std::size_t>(st.n);
    SLM_TRY(w.u64(n));
    if (n == 0) return {};  // a fresh state is reset() on load
    std::uint64_t nb = 0;
    State::for_each_buffer(st, [&](const floats&) { ++nb; });
    SLM_TRY(w.u64(nb));
    status s;
    State::for_each_buffer(st, [&](const floats& f) {
      if (s.ok()) s = w.u64(f.size());
      if (s.ok()) s = w.f32(f.data(), f.size());
    });
    return s;
  }

  std::unique_ptr<slot[]> slots_;
  std::unique_ptr<std::size_t[]> pending_;  // slot indices handed out by begin() (scratch elsewhere)
  std::unique_ptr<State*[]> records_;
  std::size_t R_ = 0, cap_ = 0, cur_ = 0, pending_n_ = 0, pending_T_ = 0;
  bool broken_ = false;
  std::size_t broken_len_ = 0;
};

// ---- Implementation (compiled once by the decoder unit in compiled mode) ----

#if SLM_DEFINE_DECODER

SLM_INLINE void state_format::checksum::update(const std::byte* p, std::size_t n) noexcept {
  length_ += n;
  if (fill_) {
    const std::size_t take = std::min(n, sizeof buf_ - fill_);
    std::memcpy(buf_ + fill_, p, take);
    fill_ += take;
    p += take;
    n -= take;
    if (fill_ < sizeof buf_) return;
    block(buf_);
    fill_ = 0;
  }
  for (; n >= sizeof buf_; p += sizeof buf_, n -= sizeof buf_) block(p);
  if (n) std::memcpy(buf_, p, n);
  fill_ = n;
}

SLM_INLINE std::uint64_t state_format::checksum::value() const noexcept {
  std::uint64_t h = detail::rotl(lane_[0], 1) + detail::rotl(lane_[1], 7) + detail::rotl(lane_[2], 12) +
                    detail::rotl(lane_[3], 18);
  for (std::size_t i = 0; i < fill_; ++i) h = (h ^ static_cast<std::uint64_t>(buf_[i])) * 0x100000001B3ull;
  h ^= length_;
  h ^= h >> 33;  // splitmix64's finalizer
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  h *= 0xC4CEB9FE1A85EC53ull;
  h ^= h >> 33;
  return h;
}

SLM_INLINE void state_format::checksum::block(const std::byte* p) noexcept {
  for (int i = 0; i < 4; ++i) {
    const std::uint64_t w = detail::load_u64le(p + 8 * i);
    lane_[i] = detail::rotl(lane_[i] + w * 0xC2B2AE3D27D4EB4Full, 31) * 0x9E3779B97F4A7C15ull;
  }
}

SLM_INLINE status state_writer::kind(std::string_view k) {
  if (k.empty() || k.size() > state_format::kind_bytes)
    return make_error(errc::invalid_argument, "kind tag '", k, "' must have 1 to ",
                      state_format::kind_bytes, " characters");
  char tag[state_format::kind_bytes] = {};
  std::memcpy(tag, k.data(), k.size());
  return bytes(tag, sizeof tag);
}

SLM_INLINE status state_writer::f32_rows(const float* p, std::size_t rows, std::size_t width) {
  SLM_TRY(u8(0));
  SLM_TRY(bytes("\0\0\0\0\0\0\0", 7));
  SLM_TRY(u64(width));
  SLM_TRY(u64(rows));
  return f32(p, rows * width);
}

SLM_INLINE status state_reader::need(std::size_t n, std::string_view what) const {
  if (n <= remaining()) return {};
  return make_error(errc::format_error, "truncated: ", what, " at byte ", pos_, " needs ", n,
                    " bytes, ", remaining(), " remain");
}

SLM_INLINE status state_reader::need_items(std::uint64_t count, std::size_t item_bytes, std::string_view what) const {
  if (item_bytes == 0 || count <= remaining() / item_bytes) return {};
  return make_error(errc::format_error, "truncated or corrupt: ", what, " at byte ", pos_, " claims ",
                    count, " x ", item_bytes, " bytes, ", remaining(), " remain");
}

SLM_INLINE status state_reader::size(std::size_t& v, std::string_view what) {
  std::uint64_t x = 0;
  SLM_TRY(u64(x, what));
  if (x > std::numeric_limits<std::size_t>::max())
    return make_error(errc::format_error, "", what, " ", x, " at byte ", pos_ - 8, " is too large");
  v = static_cast<std::size_t>(x);
  return {};
}

SLM_INLINE status state_reader::kind(std::string_view& out, std::string_view what) {
  SLM_TRY(need(state_format::kind_bytes, what));
  const char* p = reinterpret_cast<const char*>(data_.data() + pos_);
  std::size_t len = 0;
  while (len < state_format::kind_bytes && p[len] != '\0') ++len;
  for (std::size_t i = len; i < state_format::kind_bytes; ++i)
    if (p[i] != '\0')
      return make_error(errc::format_error, "", what, " at byte ", pos_, " is not a kind tag");
  pos_ += state_format::kind_bytes;
  out = std::string_view(p, len);
  return {};
}

SLM_INLINE status state_reader::zeros(std::size_t n, std::string_view what) {
  SLM_TRY(need(n, what));
  for (std::size_t i = 0; i < n; ++i)
    if (data_[pos_ + i] != std::byte{0})
      return make_error(errc::format_error, "", what, " at byte ", pos_ + i, " is not zero");
  pos_ += n;
  return {};
}

SLM_INLINE status state_reader::f32(float* dst, std::size_t n, std::string_view what) {
  SLM_TRY(need_items(n, sizeof(float), what));
  if constexpr (std::endian::native == std::endian::little) {
    return bytes(dst, n * sizeof(float), what);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t x = 0;
      SLM_TRY(le(x, 4, what));
      dst[i] = std::bit_cast<float>(static_cast<std::uint32_t>(x));
    }
    return {};
  }
}

SLM_INLINE status state_reader::i32(std::int32_t* dst, std::size_t n, std::string_view what) {
  SLM_TRY(need_items(n, sizeof(std::int32_t), what));
  for (std::size_t i = 0; i < n; ++i) {
    std::uint64_t x = 0;
    SLM_TRY(le(x, 4, what));
    dst[i] = static_cast<std::int32_t>(static_cast<std::uint32_t>(x));
  }
  return {};
}

SLM_INLINE status state_reader::f32_rows(floats& dst, std::size_t rows, std::size_t width, std::string_view what) {
  std::uint8_t type = 0;
  SLM_TRY(u8(type, what));
  if (type != 0)
    return make_error(errc::format_error, "", what, " at byte ", pos_ - 1, " are not f32 (type ",
                      static_cast<unsigned>(type), ")");
  SLM_TRY(zeros(7, what));
  std::size_t wd = 0, n = 0;
  SLM_TRY(size(wd, what));
  SLM_TRY(size(n, what));
  if (wd != width) return make_error(errc::format_error, "", what, " are ", wd, " wide, expected ", width);
  if (n != rows) return make_error(errc::format_error, "", what, " hold ", n, " rows, expected ", rows);
  if (width) SLM_TRY(need_items(rows, width * sizeof(float), what));
  SLM_TRY(dst.resize(rows * width));
  return f32(dst.data(), rows * width, what);
}

SLM_INLINE status state_reader::u16(std::uint16_t* dst, std::size_t n, std::string_view what) {
  SLM_TRY(need_items(n, sizeof(std::uint16_t), what));
  if constexpr (std::endian::native == std::endian::little) {
    return bytes(dst, n * sizeof(std::uint16_t), what);
  } else {
    for (std::size_t i = 0; i < n; ++i) {
      std::uint64_t x = 0;
      SLM_TRY(le(x, 2, what));
      dst[i] = static_cast<std::uint16_t>(x);
    }
    return {};
  }
}

SLM_INLINE status state_format::write_header(state_writer& w, const header& h, std::uint64_t total) {
  SLM_TRY(w.bytes(magic, sizeof magic));
  SLM_TRY(w.u32(version));
  SLM_TRY(w.u8(h.kv));
  SLM_TRY(w.u8(static_cast<std::uint8_t>(h.session)));
  SLM_TRY(w.bytes("\0\0", 2));
  SLM_TRY(w.u64(total));
  SLM_TRY(w.u64(h.fingerprint));
  SLM_TRY(w.u64(h.records));
  return w.u64(h.position);
}

SLM_INLINE status check_state_envelope(std::span<const std::byte> bytes) {
  namespace sf = state_format;
  constexpr std::size_t least = sf::header_bytes + sf::checksum_bytes;
  if (bytes.size() < least)
    return make_error(errc::format_error, "truncated: ", bytes.size(), " bytes, the header and checksum alone take ",
                      least);
  if (std::memcmp(bytes.data(), sf::magic, sizeof sf::magic) != 0)
    return make_error(errc::format_error, "not a slm session state (no \"SLMSTATE\" magic at byte 0)");
  const std::uint64_t version = sf::detail::load_u64le(bytes.data() + 8) & 0xFFFFFFFFu;  // bytes 8..11
  if (version != sf::version)
    return make_error(errc::unsupported, "format version ", version, "; this build reads version ", sf::version);
  const std::uint64_t total = sf::detail::load_u64le(bytes.data() + 16);
  if (total != bytes.size())
    return make_error(errc::format_error, "truncated or padded: the header says ", total, " bytes, ", bytes.size(),
                      " were given");
  return {};
}

SLM_INLINE status open_state_blob(std::span<const std::byte> bytes, const state_format::header& expect,
                                  std::size_t max_position, std::size_t& position, state_reader& records) {
  namespace sf = state_format;
  SLM_TRY(check_state_envelope(bytes));
  state_reader r(bytes.first(bytes.size() - sf::checksum_bytes));
  SLM_TRY(r.skip(sizeof sf::magic, "magic"));
  std::uint32_t version = 0;
  SLM_TRY(r.u32(version, "version"));
  std::uint8_t kv = 0, kind = 0;
  SLM_TRY(r.u8(kv, "KV dtype"));
  if (kv > 1)
    return make_error(errc::format_error, "KV dtype ", static_cast<unsigned>(kv), " at byte 12 is neither 0 (f32) nor 1 (bf16)");
  SLM_TRY(r.u8(kind, "session kind"));
  if (kind > sf::last_session_kind)
    return make_error(errc::format_error, "session kind ", static_cast<unsigned>(kind), " at byte 13 is none of 0..",
                      static_cast<unsigned>(sf::last_session_kind), " (decoder, NAM56R, nanochat)");
  SLM_TRY(r.zeros(2, "reserved header bytes"));
  std::uint64_t total = 0, fp = 0, count = 0;
  SLM_TRY(r.u64(total, "total size"));
  SLM_TRY(r.u64(fp, "fingerprint"));
  SLM_TRY(r.u64(count, "record count"));
  SLM_TRY(r.size(position, "position"));
  if (kind != static_cast<std::uint8_t>(expect.session))
    return make_error(errc::invalid_argument, "saved by a ", sf::to_string(static_cast<sf::session_kind>(kind)),
                      " session, this is a ", sf::to_string(expect.session), " session");
  if (kv != expect.kv)
    return make_error(errc::invalid_argument, "saved with ", sf::kv_name(kv), " KV caches, this session stores ",
                      sf::kv_name(expect.kv), " (session_options::kv)");
  if (count != expect.records)
    return make_error(errc::invalid_argument, "saved from a model of another structure (", count,
                      " layers, as state records; this model has ", expect.records, ")");
  if (fp != expect.fingerprint)
    return make_error(errc::invalid_argument, "saved from a model of another structure (fingerprint ", fp,
                      ", this model's ", expect.fingerprint, ")");
  const std::uint64_t sum = sf::detail::load_u64le(bytes.data() + bytes.size() - sf::checksum_bytes);
  const std::uint64_t computed = sf::checksum_of(bytes.first(bytes.size() - sf::checksum_bytes));
  if (sum != computed) return make_error(errc::format_error, "corrupted: the checksum is ", sum, ", the data's is ", computed);
  if (position > max_position)
    return make_error(errc::out_of_range, "it holds ", position, " positions, this session's limit is ", max_position);
  records = r;
  return {};
}

SLM_INLINE status expect_record(state_reader& r, std::string_view want, std::string_view what) {
  std::string_view k;
  SLM_TRY(r.kind(k, "record kind"));
  if (k == want) return {};
  const bool printable = std::all_of(k.begin(), k.end(), [](char ch) { return ch >= 0x20 && ch < 0x7F; });
  return make_error(errc::format_error, "", what, " holds a '", printable ? k : std::string_view("?"), "' record, this model's ",
                    what, " is '", want, "'");
}

#endif  // SLM_DEFINE_DECODER

}  // namespace slm
