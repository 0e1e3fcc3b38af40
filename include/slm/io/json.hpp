// slm/io/json.hpp - a strict RFC 8259 JSON reader and a deterministic writer.
//
// Reads config.json, tokenizer.json, hf_quant_config.json and safetensors headers into a
// tree of `value`s that owns its strings; writes safetensors headers back out.
//
// Strict: no comments, trailing commas, leading zeros, NaN/Infinity, single quotes or raw
// control characters in strings; only the RFC's escapes; surrogate pairs must pair up;
// whitespace is space, tab, LF and CR only; exactly one top-level value. UTF-8 is
// validated everywhere (overlongs, encoded surrogates, code points above U+10FFFF,
// truncated sequences and stray continuation bytes are errors). One leniency: a UTF-8
// byte order mark at the very start is skipped, since some tokenizer.json files carry
// one; line and column numbers start after it.
//
// Limits: parse_options bounds the input size (max_bytes) and the nesting depth
// (max_depth). The parser keeps its open containers on an explicit stack and never
// recurses; copying, destroying and dumping a value recurse once per nesting level,
// which parse bounds by max_depth (so keep max_depth in the thousands at most).
// Numbers are doubles plus, for integer literals in [-2^63, 2^64), the exact integer,
// because safetensors offsets need all 64 bits. A magnitude beyond double range (1e999)
// is an out_of_range error; one below it (1e-400) reads as zero.
//
// Memory: a value is 40 bytes however small its text, so "[0,0,0,...]" would take 20x
// its size as a tree, and more while its elements wait on the scratch stacks. The parser
// counts the bytes it allocates (element buffers, scratch stacks as they grow, string
// buffers, key indexes, each with a malloc header) and refuses with out_of_range before
// an allocation would take the count past memory_per_input_byte * input size + 1 MiB
// or past max_memory; parse_stats reports the peak it counted. Real model files need
// well under the factor (tokenizer.json files and safetensors headers count 6-7 bytes
// per byte); a long array of one-digit numbers (40 bytes per 2) is refused. Should an
// allocation fail anyway, parse returns out_of_memory: in builds with exceptions it
// catches std::bad_alloc, so nothing escapes either way.
//
// Errors: parse_error, or out_of_range for the limits and number overflow, with the
// message "line L, column C: what (expected X, found Y)" (out_of_memory has no position). Lines end at LF; columns count
// bytes from 1. Escape and UTF-8 errors point at the start of the escape or sequence.
//
// Objects keep their members in document order. Duplicate keys (equal once unescaped)
// are an error unless allow_duplicate_keys is set, and then find() returns the first.
// Objects of more than 8 members carry a hash index, so find() stays O(1) on safetensors
// headers with tens of thousands of tensors; they are checked for duplicates when they
// close, so a syntax error later inside one is reported before a duplicate key in it.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"

namespace slm::json {

enum class kind : std::uint8_t { null, boolean, number, string, array, object };

constexpr std::string_view to_string(kind k) noexcept {
  switch (k) {
    case kind::null: return "null";
    case kind::boolean: return "boolean";
    case kind::number: return "number";
    case kind::string: return "string";
    case kind::array: return "array";
    case kind::object: return "object";
  }
  return "unknown";
}

struct member;
namespace detail {
class parser;
}

class value {
 public:
  value() noexcept {}
  value(std::nullptr_t) noexcept {}  // NOLINT: implicit by design, like the others
  value(bool b) noexcept : kind_(kind::boolean) { u_.b = b; }  // NOLINT
  template <class T>
    requires std::is_floating_point_v<T>
  value(T d) noexcept : kind_(kind::number) {  // NOLINT
    u_.n = {static_cast<double>(d), 0};
  }
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  value(T i) noexcept : kind_(kind::number), flags_(exact_bit) {  // NOLINT
    std::uint64_t mag = static_cast<std::uint64_t>(i);
    if constexpr (std::is_signed_v<T>) {
      if (i < 0) {
        mag = 0 - mag;  // modular: exact for INT64_MIN too
        flags_ |= negative_bit;
      }
    }
    u_.n = {(flags_ & negative_bit) ? -static_cast<double>(mag) : static_cast<double>(mag), mag};
  }
  value(std::string s) noexcept : kind_(kind::string) { std::construct_at(&u_.s, std::move(s)); }  // NOLINT
  value(std::string_view s) : value(std::string(s)) {}                      // NOLINT
  value(const char* s) : value(std::string(s ? s : "")) {}                 // NOLINT

  static value make_array() noexcept {
    value v;
    v.kind_ = kind::array;
    std::construct_at(&v.u_.a);
    return v;
  }
  static value make_object() noexcept;

  value(const value& other);
  value(value&& other) noexcept { move_from(other); }
  value& operator=(const value& other) {
    value copy(other);  // first, in case `other` lives inside *this
    destroy();
    move_from(copy);
    return *this;
  }
  value& operator=(value&& other) noexcept {
    if (this == &other) return *this;
    if (kind_ != kind::array && kind_ != kind::object) {  // cheap, and the parser's common case
      destroy();
      move_from(other);
    } else {
      value taken(std::move(other));  // first, in case `other` lives inside *this
      destroy();
      move_from(taken);
    }
    return *this;
  }
  ~value() { destroy(); }

  kind type() const noexcept { return kind_; }
  bool is_null() const noexcept { return kind_ == kind::null; }
  bool is_bool() const noexcept { return kind_ == kind::boolean; }
  bool is_number() const noexcept { return kind_ == kind::number; }
  bool is_string() const noexcept { return kind_ == kind::string; }
  bool is_array() const noexcept { return kind_ == kind::array; }
  bool is_object() const noexcept { return kind_ == kind::object; }
  // A number held as an exact integer: an integer literal (no fraction or exponent) in
  // [-2^63, 2^64), or one built from a C++ integer.
  bool is_integer() const noexcept { return kind_ == kind::number && (flags_ & exact_bit); }

  // Preconditions: the matching is_*(); otherwise false, 0.0 and "" (never undefined).
  bool as_bool() const noexcept { return kind_ == kind::boolean && u_.b; }
  double as_double() const noexcept { return kind_ == kind::number ? u_.n.d : 0.0; }
  std::string_view as_string() const noexcept {
    return kind_ == kind::string ? std::string_view(u_.s) : std::string_view();
  }

  // Exact integer literals convert when in range; other numbers (1.0, 1e3) only when
  // their double is integral with magnitude below 2^53, where doubles are exact.
  std::optional<std::int64_t> as_int64() const noexcept;
  std::optional<std::uint64_t> as_uint64() const noexcept;

  std::span<const value> items() const noexcept {
    return kind_ == kind::array ? std::span<const value>(u_.a) : std::span<const value>();
  }
  std::span<const member> members() const noexcept;
  std::size_t size() const noexcept;

  const value* find(std::string_view key) const noexcept;
  const value& operator[](std::string_view key) const noexcept {
    const value* v = find(key);
    return v ? *v : null_value();
  }
  const value& operator[](std::size_t i) const noexcept {
    return kind_ == kind::array && i < u_.a.size() ? u_.a[i] : null_value();
  }

  // Config getters: the fallback when the key is absent or holds another kind (or, for
  // the integer getters, a non-integral or out-of-range number). The string view points
  // into this value, or at `fallback`.
  std::string_view get_string(std::string_view key, std::string_view fallback = {}) const noexcept {
    const value* v = find(key);
    return v && v->is_string() ? v->as_string() : fallback;
  }
  double get_double(std::string_view key, double fallback) const noexcept {
    const value* v = find(key);
    return v && v->is_number() ? v->as_double() : fallback;
  }
  std::int64_t get_int64(std::string_view key, std::int64_t fallback) const noexcept {
    const value* v = find(key);
    return v ? v->as_int64().value_or(fallback) : fallback;
  }
  std::uint64_t get_uint64(std::string_view key, std::uint64_t fallback) const noexcept {
    const value* v = find(key);
    return v ? v->as_uint64().value_or(fallback) : fallback;
  }
  bool get_bool(std::string_view key, bool fallback) const noexcept {
    const value* v = find(key);
    return v && v->is_bool() ? v->as_bool() : fallback;
  }

  // Building. A null value first becomes an empty array (push_back) or object (set); any
  // other kind is replaced, so misuse loses data but stays memory-safe. Both return the
  // stored element, so nested containers can be filled in place.
  value& push_back(value v);
  // Replaces the value of an existing key (keeping its position), else appends.
  value& set(std::string key, value v);

  static const value& null_value() noexcept;

 private:
  friend class detail::parser;
  static constexpr std::uint8_t exact_bit = 1;     // u_.n.mag holds the exact magnitude
  static constexpr std::uint8_t negative_bit = 2;  // the exact integer is -mag
  static constexpr std::size_t linear_lookup_max = 8;  // objects this small have no index

  struct number_data {
    double d;
    std::uint64_t mag;
  };
  // Open addressing with linear probing, power-of-two sized, at most 3/4 full; null while
  // the object is small enough to scan. A slot is 0 (empty) or the key's 32-bit hash above
  // the member's index + 1. The hash spares most key comparisons (each a cache miss on
  // big objects) and lets the table grow without touching the keys; a key's home slot is
  // its hash scaled to the table, so slots follow hash order. 32 bits of index are
  // plenty: 2^32 members would take hundreds of GB.
  using index_ptr = std::unique_ptr<std::vector<std::uint64_t>>;
  struct object_data {
    std::vector<member> members;
    index_ptr index;
  };
  union storage {
    storage() noexcept : b(false) {}
    ~storage() {}
    bool b;
    number_data n;
    std::string s;
    std::vector<value> a;
    object_data o;
  };

  static bool is_safe_integral(double d) noexcept {
    return std::fabs(d) < 9007199254740992.0 && std::trunc(d) == d;
  }
  void move_from(value& other) noexcept;  // leaves `other` null
  void destroy() noexcept;
  std::size_t find_index(std::string_view key) const noexcept;
  void index_last_member();  // members.back() is new: index it (or start the index)
  static std::uint32_t key_hash(std::string_view key) noexcept {
    const auto h = static_cast<std::uint64_t>(std::hash<std::string_view>{}(key));
    return static_cast<std::uint32_t>(h ^ (h >> 32));
  }
  static std::size_t probe(std::span<const member> members, const std::vector<std::uint64_t>& slots,
                           std::string_view key, std::uint32_t hash) noexcept;
  // Indexes all members; returns the position of the first one whose key repeats an
  // earlier one (left out of the index, so find() returns the first), or SIZE_MAX.
  static std::size_t build_index(std::span<const member> members, index_ptr& index);
  static void grow_index(std::vector<std::uint64_t>& slots);

  kind kind_ = kind::null;
  std::uint8_t flags_ = 0;
  storage u_;
};

struct member {
  std::string key;
  value val;
};

struct parse_options {
  std::size_t max_depth = 256;         // nested arrays + objects
  std::size_t max_bytes = 256u << 20;  // input size
  // The memory budget (see "Memory" above): at most memory_per_input_byte bytes per
  // input byte, plus 1 MiB, and never more than max_memory.
  std::size_t memory_per_input_byte = 32;
  std::size_t max_memory = std::size_t{4} << 30;
  bool allow_duplicate_keys = false;   // RFC allows them; in model files one is a bug
};

// What a parse counted against its memory budget.
struct parse_stats {
  std::size_t budget_bytes = 0;  // the limit that applied to this input
  std::size_t peak_bytes = 0;    // the most the parser held at once (tree + scratch)
};

// ---- value: the parts that need `member` complete ----

inline value value::make_object() noexcept {
  value v;
  v.kind_ = kind::object;
  std::construct_at(&v.u_.o);
  return v;
}

inline std::span<const member> value::members() const noexcept {
  return kind_ == kind::object ? std::span<const member>(u_.o.members) : std::span<const member>();
}

inline std::size_t value::size() const noexcept {
  if (kind_ == kind::array) return u_.a.size();
  if (kind_ == kind::object) return u_.o.members.size();
  return 0;
}

#if SLM_DEFINE_IO
SLM_INLINE std::optional<std::int64_t> value::as_int64() const noexcept {
  if (kind_ != kind::number) return std::nullopt;
  if (flags_ & exact_bit) {
    if (flags_ & negative_bit) return static_cast<std::int64_t>(0 - u_.n.mag);  // mag <= 2^63
    if (u_.n.mag <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(u_.n.mag);
    return std::nullopt;
  }
  if (!is_safe_integral(u_.n.d)) return std::nullopt;
  return static_cast<std::int64_t>(u_.n.d);
}

SLM_INLINE std::optional<std::uint64_t> value::as_uint64() const noexcept {
  if (kind_ != kind::number) return std::nullopt;
  if (flags_ & exact_bit) {
    if ((flags_ & negative_bit) && u_.n.mag != 0) return std::nullopt;
    return u_.n.mag;
  }
  if (!is_safe_integral(u_.n.d) || u_.n.d < 0) return std::nullopt;
  return static_cast<std::uint64_t>(u_.n.d);
}

SLM_INLINE const value& value::null_value() noexcept {
  static const value null;
  return null;
}

SLM_INLINE value::value(const value& other) : kind_(other.kind_), flags_(other.flags_) {
  switch (kind_) {
    case kind::null: break;
    case kind::boolean: u_.b = other.u_.b; break;
    case kind::number: u_.n = other.u_.n; break;
    case kind::string: std::construct_at(&u_.s, other.u_.s); break;
    case kind::array: std::construct_at(&u_.a, other.u_.a); break;
    case kind::object:
      std::construct_at(&u_.o);
      u_.o.members = other.u_.o.members;
      if (other.u_.o.index) u_.o.index = std::make_unique<std::vector<std::uint64_t>>(*other.u_.o.index);
      break;
  }
}

SLM_INLINE void value::move_from(value& other) noexcept {
  kind_ = other.kind_;
  flags_ = other.flags_;
  switch (kind_) {
    case kind::null: break;
    case kind::boolean: u_.b = other.u_.b; break;
    case kind::number: u_.n = other.u_.n; break;
    case kind::string: std::construct_at(&u_.s, std::move(other.u_.s)); break;
    case kind::array: std::construct_at(&u_.a, std::move(other.u_.a)); break;
    case kind::object: std::construct_at(&u_.o, std::move(other.u_.o)); break;
  }
  other.destroy();
}

SLM_INLINE void value::destroy() noexcept {
  switch (kind_) {
    case kind::string: std::destroy_at(&u_.s); break;
    case kind::array: std::destroy_at(&u_.a); break;
    case kind::object: std::destroy_at(&u_.o); break;
    default: break;
  }
  kind_ = kind::null;
  flags_ = 0;
}

// The slot holding `key`, or the empty slot where it would go.
SLM_INLINE std::size_t value::probe(std::span<const member> members, const std::vector<std::uint64_t>& slots,
                                    std::string_view key, std::uint32_t hash) noexcept {
  const std::size_t mask = slots.size() - 1;
  for (std::size_t i = static_cast<std::size_t>((std::uint64_t{hash} * slots.size()) >> 32);; i = (i + 1) & mask) {
    const std::uint64_t entry = slots[i];
    if (entry == 0) return i;
    const auto member_index = static_cast<std::uint32_t>(entry) - 1;
    if (static_cast<std::uint32_t>(entry >> 32) == hash && members[member_index].key == key) return i;
  }
}

SLM_INLINE std::size_t value::build_index(std::span<const member> members, index_ptr& index) {
  const std::size_t n = members.size();
  std::vector<std::uint64_t> entries(n);
  for (std::size_t m = 0; m < n; ++m) entries[m] = std::uint64_t{key_hash(members[m].key)} << 32 | (m + 1);
  index = std::make_unique<std::vector<std::uint64_t>>(std::bit_ceil(n * 2), 0);
  // A big table (MBs for a 150k-token vocabulary) filled in key order takes a cache miss
  // per key. Filled region by region instead (entries grouped by home slot, stably, so
  // the first of equal keys still comes first), each region stays in cache while it fills.
  const std::size_t regions = std::min<std::size_t>(index->size() / 1024, 4096);
  if (regions > 1) {
    std::vector<std::size_t> start(regions + 1, 0);
    const auto region_of = [&](std::uint64_t entry) { return static_cast<std::size_t>(((entry >> 32) * regions) >> 32); };
    for (const std::uint64_t e : entries) ++start[region_of(e) + 1];
    for (std::size_t r = 0; r < regions; ++r) start[r + 1] += start[r];
    std::vector<std::uint64_t> grouped(n);
    for (const std::uint64_t e : entries) grouped[start[region_of(e)]++] = e;
    entries.swap(grouped);
  }
  std::size_t first_duplicate = SIZE_MAX;
  for (const std::uint64_t e : entries) {
    const std::size_t m = static_cast<std::uint32_t>(e) - 1;
    std::uint64_t& slot = (*index)[probe(members, *index, members[m].key, static_cast<std::uint32_t>(e >> 32))];
    if (slot == 0) {
      slot = e;
    } else {
      first_duplicate = std::min(first_duplicate, m);
    }
  }
  return first_duplicate;
}

SLM_INLINE void value::grow_index(std::vector<std::uint64_t>& slots) {
  std::vector<std::uint64_t> grown(slots.size() * 2, 0);
  const std::size_t mask = grown.size() - 1;
  for (const std::uint64_t entry : slots) {
    if (entry == 0) continue;
    std::size_t i = static_cast<std::size_t>(((entry >> 32) * grown.size()) >> 32);
    while (grown[i] != 0) i = (i + 1) & mask;  // keys are distinct: no comparisons
    grown[i] = entry;
  }
  slots.swap(grown);
}

SLM_INLINE void value::index_last_member() {
  object_data& o = u_.o;
  if (!o.index) {
    if (o.members.size() > linear_lookup_max) build_index(o.members, o.index);
    return;
  }
  if (o.members.size() * 4 > o.index->size() * 3) grow_index(*o.index);
  const std::string& key = o.members.back().key;
  const std::uint32_t hash = key_hash(key);
  (*o.index)[probe(o.members, *o.index, key, hash)] = std::uint64_t{hash} << 32 | o.members.size();
}

SLM_INLINE std::size_t value::find_index(std::string_view key) const noexcept {
  if (kind_ != kind::object) return SIZE_MAX;
  const object_data& o = u_.o;
  if (!o.index) {
    for (std::size_t m = 0; m < o.members.size(); ++m) {
      if (o.members[m].key == key) return m;
    }
    return SIZE_MAX;
  }
  const std::uint64_t entry = (*o.index)[probe(o.members, *o.index, key, key_hash(key))];
  return entry == 0 ? SIZE_MAX : static_cast<std::uint32_t>(entry) - 1;
}

SLM_INLINE const value* value::find(std::string_view key) const noexcept {
  const std::size_t m = find_index(key);
  return m == SIZE_MAX ? nullptr : &u_.o.members[m].val;
}

SLM_INLINE value& value::push_back(value v) {
  if (kind_ != kind::array) *this = make_array();
  u_.a.push_back(std::move(v));
  return u_.a.back();
}

SLM_INLINE value& value::set(std::string key, value v) {
  if (kind_ != kind::object) *this = make_object();
  const std::size_t existing = find_index(key);
  if (existing != SIZE_MAX) return u_.o.members[existing].val = std::move(v);
  u_.o.members.push_back(member{std::move(key), std::move(v)});
  index_last_member();
  return u_.o.members.back().val;
}
#endif  // SLM_DEFINE_IO

// ---- parsing ----

namespace detail {

enum class utf8_error : std::uint8_t {
  none, stray_continuation, bad_lead, overlong, surrogate, too_large, truncated
};

struct utf8_check {
  std::size_t length;  // of the valid sequence; on error, the bytes worth showing
  utf8_error error;
};

// Checks the multi-byte sequence at p (*p >= 0x80), per RFC 3629's table of
// well-formed byte sequences.
utf8_check check_utf8(const unsigned char* p, const unsigned char* end) noexcept;

void append_utf8(std::string& out, std::uint32_t cp);

void append_hex(std::string& out, unsigned v, int digits);

// Bytes a string can hold as they are: printable ASCII except '"' and '\'. Everything
// else takes the slow path (end, escape, control character or UTF-8 to validate).
inline constexpr std::array<bool, 256> plain_string_byte = [] {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c) t[static_cast<std::size_t>(c)] = c != '"' && c != '\\';
  return t;
}();

inline bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

// The reader behind parse(). Only the unit that defines parse() needs its definition.
#if SLM_DEFINE_IO
class parser {
 public:
  parser(std::string_view text, const parse_options& opt) noexcept
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), opt_(opt) {
    if (text.size() >= 3 && text.substr(0, 3) == "\xEF\xBB\xBF") begin_ = p_ = p_ + 3;
    const std::size_t per_byte = opt.memory_per_input_byte;
    const std::size_t scaled =
        per_byte != 0 && text.size() > (SIZE_MAX - budget_slack) / per_byte ? SIZE_MAX - budget_slack
                                                                            : text.size() * per_byte;
    budget_ = std::min(scaled + budget_slack, opt.max_memory);
  }

  parse_stats stats() const noexcept { return {budget_, peak_}; }

  result<value> run() {
    value v;
    for (;;) {
      skip_whitespace();
      const step s = begin_value(v);
      if (s == step::failed) return std::move(error_);
      if (s == step::opened) continue;  // parse the container's first element next
      // `v` is complete: add it to the innermost open container, and close every
      // container that ends right after it.
      for (;;) {
        if (open_.empty()) {
          skip_whitespace();
          if (p_ != end_) {
            fail(p_, "trailing characters after the top-level value", "end of input", describe(p_));
            return std::move(error_);
          }
          return result<value>(std::move(v));
        }
        const bool in_array = open_.back().is_array;
        if (in_array) {
          if (!make_room(items_)) return std::move(error_);
          items_.push_back(std::move(v));
        } else {
          members_.back().val = std::move(v);
        }
        skip_whitespace();
        const char close = in_array ? ']' : '}';
        if (p_ != end_ && *p_ == ',') {
          const char* comma = p_++;
          skip_whitespace();
          if (p_ != end_ && *p_ == close) {
            fail(comma, in_array ? "trailing comma in array" : "trailing comma in object",
                 in_array ? "a value after ','" : "a key after ','", describe(p_));
            return std::move(error_);
          }
          if (!in_array && !begin_member(false)) return std::move(error_);
          break;
        }
        if (p_ != end_ && *p_ == close) {
          ++p_;
          if (!close_container(v)) return std::move(error_);
          continue;
        }
        fail(p_, in_array ? "unfinished array" : "unfinished object",
             in_array ? "',' or ']'" : "',' or '}'", describe(p_));
        return std::move(error_);
      }
    }
  }

 private:
  enum class step : std::uint8_t { failed, complete, opened };

  void skip_whitespace() noexcept {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  // Records the error and returns false, so callers can `return fail(...)`. Finding the
  // line costs a scan from the start, paid only on failure.
  bool fail(const char* at, std::string_view what, std::string_view expected, std::string_view found,
            errc code = errc::parse_error) {
    std::size_t line = 1;
    const char* line_start = begin_;
    for (const char* q = begin_; q < at; ++q) {
      if (*q == '\n') ++line, line_start = q + 1;
    }
    error_ = make_error(code, "line ", line, ", column ", static_cast<std::size_t>(at - line_start) + 1, ": ",
                        what, " (expected ", expected, ", found ", found, ")");
    return false;
  }

  std::string describe(const char* at) const {
    if (at >= end_) return "end of input";
    const auto c = static_cast<unsigned char>(*at);
    if (c >= 0x20 && c < 0x7F) return cat("'", static_cast<char>(c), "'");
    return describe_bytes(at, 1);
  }

  static std::string describe_bytes(const char* at, std::size_t n) {
    std::string out = n == 1 ? "byte" : "bytes";
    for (std::size_t i = 0; i < n; ++i) {
      out += " 0x";
      append_hex(out, static_cast<unsigned char>(at[i]), 2);
    }
    return out;
  }

  // Parses the scalar at p_, or opens the container there (already parsing up to its
  // first value, or closing it at once when empty).
  step begin_value(value& v) {
    if (p_ == end_) {
      fail(p_, "missing value", "a JSON value", "end of input");
      return step::failed;
    }
    switch (*p_) {
      case '[':
      case '{': {
        if (open_.size() >= opt_.max_depth) {
          fail(p_, "nesting too deep", cat("at most ", opt_.max_depth, " nested arrays and objects"),
               cat("'", *p_, "' opening level ", open_.size() + 1), errc::out_of_range);
          return step::failed;
        }
        const bool is_array = *p_++ == '[';
        open_.push_back(frame{is_array, is_array ? items_.size() : members_.size()});
        skip_whitespace();
        if (p_ != end_ && *p_ == (is_array ? ']' : '}')) {
          ++p_;
          return close_container(v) ? step::complete : step::failed;
        }
        if (!is_array && !begin_member(true)) return step::failed;
        return step::opened;
      }
      case '"': {
        std::string s;
        if (!parse_string(s) || !charge_string(s)) return step::failed;
        v = value(std::move(s));
        return step::complete;
      }
      case 't': v = true; return parse_literal("true") ? step::complete : step::failed;
      case 'f': v = false; return parse_literal("false") ? step::complete : step::failed;
      case 'n': v = nullptr; return parse_literal("null") ? step::complete : step::failed;
      default:
        if (*p_ == '-' || is_digit(*p_)) return parse_number(v) ? step::complete : step::failed;
        fail(p_, "invalid value", "a JSON value", describe(p_));
        return step::failed;
    }
  }

  // Moves the innermost open container's elements, gathered on the scratch stacks, into
  // a value of exactly their size (one allocation, no growth) and pops it. Objects too
  // big to have been checked for duplicate keys member by member get checked here.
  bool close_container(value& v) {
    const frame f = open_.back();
    open_.pop_back();
    if (f.is_array) {
      if (!charge_buffer<value>(items_.size() - f.start)) return false;
      v = value::make_array();
      const auto first = items_.begin() + static_cast<std::ptrdiff_t>(f.start);
      v.u_.a.assign(std::make_move_iterator(first), std::make_move_iterator(items_.end()));
      items_.erase(first, items_.end());
      drop_if_empty(items_);
      return true;
    }
    const std::size_t n = members_.size() - f.start;
    if (!charge_buffer<member>(n)) return false;
    if (n > value::linear_lookup_max) {
      // The table and its holder stay; build_index's two entry lists and region starts
      // (at most 4097 of them) live while it runs.
      const std::size_t table = std::bit_ceil(n * 2) * sizeof(std::uint64_t) + sizeof(std::vector<std::uint64_t>);
      const std::size_t transient = 2 * n * sizeof(std::uint64_t) + 4097 * sizeof(std::size_t);
      if (!charge(table + 2 * malloc_overhead) || !charge(transient + 3 * malloc_overhead)) return false;
      release(transient + 3 * malloc_overhead);
    }
    v = value::make_object();
    const auto first = members_.begin() + static_cast<std::ptrdiff_t>(f.start);
    v.u_.o.members.assign(std::make_move_iterator(first), std::make_move_iterator(members_.end()));
    members_.erase(first, members_.end());
    if (v.u_.o.members.size() > value::linear_lookup_max) {
      const std::size_t duplicate = value::build_index(v.u_.o.members, v.u_.o.index);
      if (duplicate != SIZE_MAX && !opt_.allow_duplicate_keys) {
        return fail(key_at_[f.start + duplicate], "duplicate key", "unique keys in an object",
                    cat(quoted_excerpt(v.u_.o.members[duplicate].key), " again"));
      }
    }
    key_at_.resize(f.start);
    drop_if_empty(members_);
    drop_if_empty(key_at_);
    return true;
  }

  // At a key in the innermost open object: parses `"key" :` and adds the member.
  bool begin_member(bool first) {
    if (p_ == end_ || *p_ != '"') {
      return fail(p_, "invalid object key", first ? "a string key or '}'" : "a string key",
                  describe(p_));
    }
    const char* key_at = p_;
    std::string key;
    if (!parse_string(key) || !charge_string(key)) return false;
    // Small objects are checked for duplicates here, big ones when they close (where
    // a cache-friendly index build does it); either way the error points at the key.
    const std::size_t start = open_.back().start;
    if (!opt_.allow_duplicate_keys && members_.size() - start < value::linear_lookup_max) {
      for (std::size_t m = start; m < members_.size(); ++m) {
        if (members_[m].key == key) {
          return fail(key_at, "duplicate key", "unique keys in an object", cat(quoted_excerpt(key), " again"));
        }
      }
    }
    if (!make_room(members_) || !make_room(key_at_)) return false;
    members_.push_back(member{std::move(key), value()});
    key_at_.push_back(key_at);
    skip_whitespace();
    if (p_ == end_ || *p_ != ':') return fail(p_, "invalid object member", "':' after the key", describe(p_));
    ++p_;
    return true;
  }

  // Counts `bytes` about to be allocated, or refuses (out_of_range, at the value being
  // read) when they would take the parse past its budget.
  bool charge(std::size_t bytes) {
    if (bytes > budget_ - held_) {
      return fail(p_, "document needs too much memory",
                  cat("at most ", budget_, " bytes for the parse (parse_options: ", opt_.memory_per_input_byte,
                      " per input byte + 1 MiB, at most max_memory ", opt_.max_memory, ")"),
                  cat(held_, " bytes held and ", bytes, " more wanted"), errc::out_of_range);
    }
    held_ += bytes;
    peak_ = std::max(peak_, held_);
    return true;
  }
  void release(std::size_t bytes) noexcept { held_ -= bytes; }

  template <class T>
  bool charge_buffer(std::size_t n) {
    return n == 0 || charge(n * sizeof(T) + malloc_overhead);
  }

  // A string's heap buffer, if it outgrew the one inside the std::string. It was
  // counted once complete: while it grew it held at most about twice its escaped text,
  // itself part of the input.
  bool charge_string(const std::string& s) {
    const auto* const inside = reinterpret_cast<const char*>(&s);
    if (s.data() >= inside && s.data() < inside + sizeof s) return true;
    return charge(s.capacity() + 1 + malloc_overhead);
  }

  // Room for one more element on a scratch stack, growing it by doubling under the
  // budget (the old and new buffers both live while the elements move).
  template <class T>
  bool make_room(std::vector<T>& stack) {
    const std::size_t capacity = stack.capacity();
    if (stack.size() < capacity) return true;
    const std::size_t grown = std::max<std::size_t>(64, capacity * 2);
    if (!charge_buffer<T>(grown)) return false;
    stack.reserve(grown);
    if (capacity != 0) release(capacity * sizeof(T) + malloc_overhead);
    return true;
  }

  // An emptied scratch stack that grew big gives its buffer back, so a tokenizer.json's
  // vocabulary stack is not still held while its merges fill the other one.
  template <class T>
  void drop_if_empty(std::vector<T>& stack) noexcept {
    if (!stack.empty() || stack.capacity() * sizeof(T) < (std::size_t{64} << 10)) return;
    release(stack.capacity() * sizeof(T) + malloc_overhead);
    std::vector<T>().swap(stack);
  }

  // A key for a message: JSON-escaped, cut to 64 bytes at a character boundary.
  static std::string quoted_excerpt(std::string_view s);

  bool parse_literal(std::string_view word) {
    for (std::size_t i = 0; i < word.size(); ++i) {
      if (p_ + i == end_ || p_[i] != word[i]) {
        return fail(p_ + i, "invalid literal", cat("'", word, "'"), describe(p_ + i));
      }
    }
    p_ += word.size();
    return true;
  }

  bool parse_string(std::string& out) {
    const char* const open_quote = p_++;
    const char* run = p_;  // bytes not yet copied to `out`
    for (;;) {
      while (p_ != end_ && plain_string_byte[static_cast<unsigned char>(*p_)]) ++p_;
      if (p_ == end_) return fail(open_quote, "unterminated string", "a closing '\"'", "end of input");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out.append(run, p_);
        ++p_;
        return true;
      }
      if (c == '\\') {
        out.append(run, p_);
        if (!parse_escape(out)) return false;
        run = p_;
      } else if (c < 0x20) {
        return fail(p_, "unescaped control character in string", "an escape such as \\n or \\u001F",
                    describe(p_));
      } else {
        const auto* u = reinterpret_cast<const unsigned char*>(p_);
        const utf8_check r = check_utf8(u, reinterpret_cast<const unsigned char*>(end_));
        if (r.error != utf8_error::none) return fail_utf8(r);
        p_ += r.length;
      }
    }
  }

  bool fail_utf8(utf8_check r) {
    struct problem {
      std::string_view what, expected;
    };
    static constexpr problem problems[] = {
        {"", ""},
        {"invalid UTF-8: stray continuation byte", "a lead byte"},
        {"invalid UTF-8: byte never used in UTF-8", "a lead byte"},
        {"invalid UTF-8: overlong encoding", "the shortest encoding"},
        {"invalid UTF-8: encoded surrogate", "a Unicode scalar value"},
        {"invalid UTF-8: code point above U+10FFFF", "at most U+10FFFF"},
        {"invalid UTF-8: truncated sequence", "a continuation byte"},
    };
    const problem& pr = problems[static_cast<std::size_t>(r.error)];
    // A truncated sequence is best shown by the byte that cut it short.
    return fail(p_, pr.what, pr.expected,
                r.error == utf8_error::truncated ? describe(p_ + r.length) : describe_bytes(p_, r.length));
  }

  // At a backslash inside a string.
  bool parse_escape(std::string& out) {
    const char* const backslash = p_++;
    if (p_ == end_) return fail(backslash, "unterminated string", "a closing '\"'", "end of input");
    switch (*p_++) {
      case '"': out.push_back('"'); return true;
      case '\\': out.push_back('\\'); return true;
      case '/': out.push_back('/'); return true;
      case 'b': out.push_back('\b'); return true;
      case 'f': out.push_back('\f'); return true;
      case 'n': out.push_back('\n'); return true;
      case 'r': out.push_back('\r'); return true;
      case 't': out.push_back('\t'); return true;
      case 'u': break;
      default:
        return fail(backslash, "invalid escape", "one of \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u",
                    describe(p_ - 1));
    }
    std::uint32_t unit = 0;
    if (!parse_hex4(backslash, unit)) return false;
    if (unit >= 0xDC00 && unit <= 0xDFFF) {
      return fail(backslash, "unpaired surrogate", "a high surrogate \\uD800-\\uDBFF before it",
                  cat("a lone \\u", hex4(unit)));
    }
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const char* const second = p_;
      const auto unpaired = [&](const std::string& found) {
        const std::string expected = cat("a low surrogate \\uDC00-\\uDFFF after \\u", hex4(unit));
        return fail(backslash, "unpaired surrogate", expected, found);
      };
      if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return unpaired(describe(p_));
      p_ += 2;
      std::uint32_t low = 0;
      if (!parse_hex4(second, low)) return false;
      if (low < 0xDC00 || low > 0xDFFF) return unpaired(cat("\\u", hex4(low)));
      unit = 0x10000 + ((unit - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(out, unit);
    return true;
  }

  static std::string hex4(std::uint32_t unit) {
    std::string s;
    append_hex(s, unit, 4);
    return s;
  }

  // After "\u": four hex digits.
  bool parse_hex4(const char* backslash, std::uint32_t& unit) {
    for (int i = 0; i < 4; ++i, ++p_) {
      const char c = p_ == end_ ? '\0' : *p_;
      const char lower = static_cast<char>(c | 0x20);
      const int digit = is_digit(c) ? c - '0' : (lower >= 'a' && lower <= 'f') ? lower - 'a' + 10 : -1;
      if (digit < 0) return fail(backslash, "invalid \\u escape", "4 hex digits", describe(p_));
      unit = unit << 4 | static_cast<std::uint32_t>(digit);
    }
    return true;
  }

  bool parse_number(value& v) {
    const char* const start = p_;
    const bool negative = *p_ == '-';
    if (negative) ++p_;
    const char* const digits = p_;
    if (p_ == end_ || !is_digit(*p_)) return fail(p_, "invalid number", "a digit", describe(p_));
    if (*p_ == '0') {
      ++p_;
      if (p_ != end_ && is_digit(*p_)) {
        return fail(p_ - 1, "invalid number: leading zero", "'.', 'e' or the end of the number",
                    describe(p_));
      }
    } else {
      while (p_ != end_ && is_digit(*p_)) ++p_;
    }
    const char* const digits_end = p_;
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      if (p_ == end_ || !is_digit(*p_)) return fail(p_, "invalid number", "a digit after '.'", describe(p_));
      while (p_ != end_ && is_digit(*p_)) ++p_;
      integer = false;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (p_ == end_ || !is_digit(*p_)) {
        return fail(p_, "invalid number", "a digit in the exponent", describe(p_));
      }
      while (p_ != end_ && is_digit(*p_)) ++p_;
      integer = false;
    }
    if (integer) {
      std::uint64_t mag = 0;
      const auto r = std::from_chars(digits, digits_end, mag);
      if (r.ec == std::errc() && (!negative || mag <= (std::uint64_t{1} << 63))) {
        v = value();
        v.kind_ = kind::number;
        v.flags_ = value::exact_bit | (negative ? value::negative_bit : 0);
        v.u_.n = {negative ? -static_cast<double>(mag) : static_cast<double>(mag), mag};
        return true;
      }
    }
    // The grammar is checked, so from_chars can only fail on range: overflow is an error,
    // underflow (1e-400) reads as a signed zero.
    double d = 0;
    if (std::from_chars(start, p_, d).ec != std::errc()) {
      if (decimal_exponent(digits, p_) > 0) {
        const std::string_view text(start, static_cast<std::size_t>(std::min<std::ptrdiff_t>(p_ - start, 40)));
        const std::string found = cat("'", text, p_ - start > 40 ? "...'" : "'");
        return fail(start, "number out of range: overflows a double", "a magnitude of at most 1.7976931348623157e308",
                    found, errc::out_of_range);
      }
      d = negative ? -0.0 : 0.0;
    }
    v = value(d);
    return true;
  }

  // Roughly log10 of a nonzero literal's magnitude: enough to tell overflow (about +309)
  // from underflow (about -324) once from_chars reports a range error.
  static long long decimal_exponent(const char* digits, const char* end) noexcept {
    const char* q = digits;
    long long e = 0;
    if (*q != '0') {
      while (q != end && is_digit(*q)) ++q, ++e;
    } else if (++q != end && *q == '.') {
      while (++q != end && *q == '0') --e;
    }
    while (q != end && *q != 'e' && *q != 'E') ++q;
    if (q == end) return e;
    const bool negative = *++q == '-';
    if (*q == '+' || *q == '-') ++q;
    long long exponent = 0;
    for (; q != end; ++q) {
      if (exponent < 1'000'000'000) exponent = exponent * 10 + (*q - '0');
    }
    return negative ? e - exponent : e + exponent;
  }

  const char* begin_;  // after any BOM: line 1, column 1
  const char* p_;
  const char* end_;
  const parse_options& opt_;
  status error_;
  // Open containers, outermost first. Their elements wait on scratch stacks (reused, so
  // they stop growing early) until the container closes and takes them all at once.
  struct frame {
    bool is_array;
    std::size_t start;  // of its elements in items_ or members_
  };
  std::vector<frame> open_;
  std::vector<value> items_;
  std::vector<member> members_;
  std::vector<const char*> key_at_;  // where each key in members_ starts, for messages
  // The memory budget: bytes the parse holds now and at most, counted before each
  // allocation that grows with the input (the open_ stack is bounded by max_depth).
  static constexpr std::size_t budget_slack = std::size_t{1} << 20;
  static constexpr std::size_t malloc_overhead = 16;  // a heap block's header and rounding
  std::size_t budget_ = 0;
  std::size_t held_ = 0;
  std::size_t peak_ = 0;
};
#endif  // SLM_DEFINE_IO

}  // namespace detail

// Parses one JSON document. The result owns all its data; `text` may go away after.
result<value> parse(std::string_view text, const parse_options& opt = {});
// The same, also reporting the memory the parse counted, on success and on parse and
// budget errors too (zeros when the input is over max_bytes or an allocation failed).
result<value> parse(std::string_view text, const parse_options& opt, parse_stats& stats);

// ---- writing ----

// Appends `s` as a JSON string literal, escaped as serde_json and Python's json do:
// quote, backslash and \b \f \n \r \t by name, other control characters as \u00XX,
// everything else (UTF-8 included) as is. Bytes that are not valid UTF-8 (possible only
// in strings built by hand) become U+FFFD, so the output is always valid JSON.
void append_quoted(std::string& out, std::string_view s);

// Compact, deterministic: members in their order, integers exactly, other numbers in
// the shortest form that reads back to the same double; non-finite doubles (only
// possible in values built by hand) are written as null, as JSON has no spelling for them.
void dump_to(std::string& out, const value& v);

std::string dump(const value& v);

// ---- implementation (compiled once in the io unit in compiled mode) ----

#if SLM_DEFINE_IO

namespace detail {

SLM_INLINE utf8_check check_utf8(const unsigned char* p, const unsigned char* end) noexcept {
  const unsigned lead = p[0];
  std::size_t length = 0;
  unsigned lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  utf8_error second_byte_error = utf8_error::none;
  if (lead < 0xC0) return {1, utf8_error::stray_continuation};
  if (lead < 0xC2) return {end - p > 1 ? 2u : 1u, utf8_error::overlong};
  if (lead < 0xE0) {
    length = 2;
  } else if (lead < 0xF0) {
    length = 3;
    if (lead == 0xE0) lo = 0xA0, second_byte_error = utf8_error::overlong;
    if (lead == 0xED) hi = 0x9F, second_byte_error = utf8_error::surrogate;
  } else if (lead < 0xF5) {
    length = 4;
    if (lead == 0xF0) lo = 0x90, second_byte_error = utf8_error::overlong;
    if (lead == 0xF4) hi = 0x8F, second_byte_error = utf8_error::too_large;
  } else {
    return {1, lead < 0xF8 ? utf8_error::too_large : utf8_error::bad_lead};
  }
  for (std::size_t i = 1; i < length; ++i) {
    if (p + i == end || (p[i] & 0xC0) != 0x80) return {i, utf8_error::truncated};
    if (i == 1 && (p[1] < lo || p[1] > hi)) return {2, second_byte_error};
  }
  return {length, utf8_error::none};
}

SLM_INLINE void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

SLM_INLINE void append_hex(std::string& out, unsigned v, int digits) {
  for (int shift = 4 * (digits - 1); shift >= 0; shift -= 4) {
    out.push_back("0123456789ABCDEF"[(v >> shift) & 0xF]);
  }
}

}  // namespace detail

SLM_INLINE result<value> parse(std::string_view text, const parse_options& opt, parse_stats& stats) {
  stats = parse_stats{};
  if (text.size() > opt.max_bytes) {
    return make_error(errc::out_of_range, "input too large (expected at most ", opt.max_bytes,
                      " bytes per parse_options::max_bytes, found ", text.size(), " bytes)");
  }
#if defined(__cpp_exceptions)
  // The budget keeps the parse's own allocations bounded; this catches the rest (a
  // machine already short of memory), as builds without exceptions cannot.
  try {
#endif
    detail::parser p(text, opt);
    result<value> v = p.run();
    stats = p.stats();
    return v;
#if defined(__cpp_exceptions)
  } catch (const std::bad_alloc&) {
    return make_error(errc::out_of_memory, "cannot allocate memory for the parsed JSON (input of ", text.size(),
                      " bytes)");
  }
#endif
}

SLM_INLINE result<value> parse(std::string_view text, const parse_options& opt) {
  parse_stats unused;
  return parse(text, opt, unused);
}

SLM_INLINE void append_quoted(std::string& out, std::string_view s) {
  out.push_back('"');
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* end = p + s.size();
  while (p != end) {
    const unsigned char c = *p;
    if (detail::plain_string_byte[c]) {
      const auto* run = p;
      while (p != end && detail::plain_string_byte[*p]) ++p;
      out.append(reinterpret_cast<const char*>(run), static_cast<std::size_t>(p - run));
      continue;
    }
    ++p;
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c < 0x20) {
      out += "\\u00";
      out.push_back("0123456789abcdef"[c >> 4]);  // lowercase, as serde_json writes it
      out.push_back("0123456789abcdef"[c & 0xF]);
      continue;
    }
    const detail::utf8_check r = detail::check_utf8(p - 1, end);
    if (r.error != detail::utf8_error::none) {
      out += "\xEF\xBF\xBD";
      continue;
    }
    out.append(reinterpret_cast<const char*>(p - 1), r.length);
    p += r.length - 1;
  }
  out.push_back('"');
}

SLM_INLINE void dump_to(std::string& out, const value& v) {
  switch (v.type()) {
    case kind::null: out += "null"; return;
    case kind::boolean: out += v.as_bool() ? "true" : "false"; return;
    case kind::number: {
      char buf[32];
      std::to_chars_result r{buf, std::errc()};
      if (v.is_integer()) {
        if (const auto u = v.as_uint64()) {
          if (std::signbit(v.as_double())) *r.ptr++ = '-';  // "-0" stays "-0", like the double -0.0
          r = std::to_chars(r.ptr, buf + sizeof buf, *u);
        } else {
          r = std::to_chars(buf, buf + sizeof buf, *v.as_int64());
        }
      } else if (std::isfinite(v.as_double())) {
        r = std::to_chars(buf, buf + sizeof buf, v.as_double());
      } else {
        out += "null";
        return;
      }
      out.append(buf, r.ptr);
      return;
    }
    case kind::string: append_quoted(out, v.as_string()); return;
    case kind::array: {
      out.push_back('[');
      bool first = true;
      for (const value& item : v.items()) {
        if (!first) out.push_back(',');
        first = false;
        dump_to(out, item);
      }
      out.push_back(']');
      return;
    }
    case kind::object: {
      out.push_back('{');
      bool first = true;
      for (const member& m : v.members()) {
        if (!first) out.push_back(',');
        first = false;
        append_quoted(out, m.key);
        out.push_back(':');
        dump_to(out, m.val);
      }
      out.push_back('}');
      return;
    }
  }
}

SLM_INLINE std::string dump(const value& v) {
  std::string out;
  dump_to(out, v);
  return out;
}

SLM_INLINE std::string detail::parser::quoted_excerpt(std::string_view s) {
  constexpr std::size_t max_bytes = 64;
  if (s.size() <= max_bytes) {
    std::string out;
    append_quoted(out, s);
    return out;
  }
  std::size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // keep characters whole
  std::string out;
  append_quoted(out, s.substr(0, cut));
  out.insert(out.size() - 1, "...");
  return out;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm::json
