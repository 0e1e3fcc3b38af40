// slm/io/safetensors.hpp - reading and writing the safetensors format.
//
// Layout of a file: an 8-byte little-endian header length N, N bytes of a UTF-8 JSON
// object, then the data section. Each header entry maps a tensor name to
//   {"dtype": "BF16", "shape": [4096, 4096], "data_offsets": [begin, end]}
// with offsets relative to the data section; an optional "__metadata__" entry maps
// strings to strings.
//
// Every file is treated as hostile until validated. We follow the reference
// implementation's rules (huggingface/safetensors): header at most 100 MB and inside the
// file, header starts with '{', known dtypes, shape x dtype = end - begin, and the
// tensors, sorted by offset, tile the data section exactly: no overlap, no gap, nothing
// after the last tensor. Anything else is an errc::format_error naming the file, the
// tensor, the offsets and what was expected. Nothing is copied: tensor views point into
// the mapped file (or the caller's span).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/io/atomic_file.hpp"
#include "slm/core/dtype.hpp"
#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"

namespace slm::safetensors {

struct limits {
  std::uint64_t max_header_bytes = 100'000'000;  // the reference implementation's limit
  std::size_t max_tensors = 1'000'000;
  std::size_t max_json_depth = 16;  // a valid header nests 3 deep
};

struct tensor_info {
  std::string name;
  dtype type = dtype::f32;
  slm::shape shape;
  std::uint64_t begin = 0;  // byte offsets into the data section, [begin, end)
  std::uint64_t end = 0;
};

struct header {
  std::vector<tensor_info> tensors;  // sorted by name
  std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__", in file order
  std::uint64_t data_offset = 0;  // where the data section starts in the file (8 + N)
  std::uint64_t data_size = 0;

  const tensor_info* find(std::string_view name) const noexcept {
    auto it = std::lower_bound(tensors.begin(), tensors.end(), name,
                               [](const tensor_info& t, std::string_view n) { return t.name < n; });
    return it != tensors.end() && it->name == name ? &*it : nullptr;
  }
  const std::string* metadata_value(std::string_view key) const noexcept {
    for (const auto& [k, v] : metadata)
      if (k == key) return &v;
    return nullptr;
  }
};

namespace detail {

inline std::uint64_t read_le64(const std::byte* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

status parse_entry(const std::string& name, const json::value& entry, tensor_info& out);

}  // namespace detail

// Parse and validate the header of a safetensors file held in `file` (the whole file:
// the data section's size is checked against it). The fuzz target's entry point.
result<header> parse_header(std::span<const std::byte> file, const limits& lim = {});

// A validated safetensors file: its header, and its bytes (read into memory it owns, a
// mapping it owns, or a span the caller keeps alive). Immutable; share it across threads
// freely.
class file {
 public:
  // Read into private memory by default; load_mode::map maps it instead (io/mapped_file.hpp
  // has what that risks).
  static result<file> open(const std::filesystem::path& path, const limits& lim = {}, load_mode how = load_mode::read,
                           const read_progress& progress = {});

  // Borrow bytes the caller owns (an embedded model, a host's own mapping).
  static result<file> from_memory(std::span<const std::byte> bytes, std::string name = "<memory>", const limits& lim = {});

  const std::string& name() const noexcept { return name_; }
  const safetensors::header& header() const noexcept { return header_; }
  std::span<const tensor_info> tensors() const noexcept { return header_.tensors; }
  const tensor_info* find(std::string_view name) const noexcept { return header_.find(name); }
  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  // How open() brought the bytes in (read for from_memory).
  load_mode mode() const noexcept { return mapping_.mode(); }
  // A mapped file still the one mapped (mapped_file::check_unchanged); ok otherwise.
  status check_unchanged() const { return mapping_.check_unchanged(); }

  tensor_view view(const tensor_info& t) const noexcept {
    return tensor_view(t.type, t.shape, bytes_.data() + header_.data_offset + t.begin);
  }
  result<tensor_view> tensor(std::string_view name) const;

 private:
  std::string name_;
  mapped_file mapping_;
  std::span<const std::byte> bytes_;
  safetensors::header header_;
};

// Builds a safetensors file. Tensors are borrowed until write()/serialize() returns.
// Output is deterministic and byte-identical to the reference writer's: tensors ordered
// by dtype (safetensors_order, descending: largest elements first) then name, compact
// JSON with metadata first, the header padded with spaces to a multiple of 8 bytes, so
// every tensor starts aligned for its element type when the file is mapped.
class writer {
 public:
  status add(std::string name, dtype type, const slm::shape& s, std::span<const std::byte> data);
  status add(std::string name, const tensor_view& v);
  // A tensor whose bytes are not in memory yet: the header can be written first and the
  // data streamed afterwards (stream()), so converting a model needs one tensor in
  // memory at a time, not the whole file.
  status plan(std::string name, dtype type, const slm::shape& s);

  void set_metadata(std::string key, std::string value);

  // The whole file in memory (small files, tests, fuzz seeds).
  result<std::vector<std::byte>> serialize() const;

  // Streams to `path` through a unique temporary file and a rename (io/atomic_file.hpp), so a
  // reader never sees a half-written file and a failed write leaves any previous file in place.
  status write(const std::filesystem::path& path) const;

  class stream;
  // Writes the header of a file whose tensors were all plan()ned, then takes their bytes
  // in file order (stream::next_name()). The file appears under `path` only when
  // stream::finish() succeeds; until then it is a unique temporary beside it (atomic_file).
  result<stream> begin_stream(const std::filesystem::path& path) const;

 private:
  status no_deferred() const;

  struct entry {
    std::string name;
    dtype type;
    slm::shape shape;
    std::span<const std::byte> data;
    std::uint64_t size = 0;  // bytes
    bool deferred = false;   // planned: its bytes come later, through a stream
  };

  std::vector<const entry*> ordered() const;

  std::string header_text(const std::vector<const entry*>& order) const;

  static std::array<std::byte, 8> length_prefix(const std::string& head);
  std::vector<entry> entries_;
  std::vector<std::pair<std::string, std::string>> metadata_;
};

class writer::stream {
 public:
  stream(stream&& o) noexcept
      : file_(std::move(o.file_)), path_(std::move(o.path_)),
        names_(std::move(o.names_)), sizes_(std::move(o.sizes_)), next_(o.next_) {}
  stream& operator=(stream&&) = delete;
  stream(const stream&) = delete;
  ~stream() { abandon(); }

  bool done() const noexcept { return next_ == names_.size(); }
  // The tensor append() expects next (empty when all are written).
  std::string_view next_name() const noexcept { return done() ? std::string_view{} : std::string_view(names_[next_]); }

  status append(std::string_view name, std::span<const std::byte> data);

  status finish();

 private:
  friend class writer;
  stream() = default;
  void abandon() noexcept;
  atomic_file file_;
  std::filesystem::path path_;
  std::vector<std::string> names_;
  std::vector<std::uint64_t> sizes_;
  std::size_t next_ = 0;
};

#if SLM_DEFINE_IO

namespace detail {

SLM_INLINE status parse_entry(const std::string& name, const json::value& entry, tensor_info& out) {
  auto bad = [&](const auto&... what) { return make_error(errc::format_error, "tensor '", name, "': ", what...); };
  if (!entry.is_object()) return bad("entry is a JSON ", json::to_string(entry.type()), ", expected an object");
  const json::value* dt = entry.find("dtype");
  const json::value* sh = entry.find("shape");
  const json::value* off = entry.find("data_offsets");
  if (!dt) return bad("missing \"dtype\"");
  if (!sh) return bad("missing \"shape\"");
  if (!off) return bad("missing \"data_offsets\"");
  if (!dt->is_string()) return bad("\"dtype\" is a JSON ", json::to_string(dt->type()), ", expected a string");
  auto type = dtype_from_safetensors_name(dt->as_string());
  if (!type) return make_error(errc::unsupported, "tensor '", name, "': unknown dtype \"", dt->as_string(), "\"");
  if (!sh->is_array()) return bad("\"shape\" is a JSON ", json::to_string(sh->type()), ", expected an array");
  if (sh->size() > slm::shape::max_rank)
    return make_error(errc::unsupported, "tensor '", name, "': rank ", sh->size(), " exceeds the maximum of ", slm::shape::max_rank);
  std::int64_t dims[slm::shape::max_rank];
  for (std::size_t i = 0; i < sh->size(); ++i) {
    auto d = (*sh)[i].as_int64();
    if (!d || *d < 0) return bad("shape[", i, "] is not a non-negative integer");
    dims[i] = *d;
  }
  auto s = slm::shape::from(std::span<const std::int64_t>(dims, sh->size()));
  if (!s.ok()) return std::move(s).take_error().with_context(cat("tensor '", name, "'"));
  if (!off->is_array() || off->size() != 2) return bad("\"data_offsets\" must be an array of two integers");
  auto b = (*off)[0].as_uint64();
  auto e = (*off)[1].as_uint64();
  if (!b || !e) return bad("\"data_offsets\" must hold two non-negative integers");
  if (*e < *b) return bad("data_offsets [", *b, ", ", *e, ") end before they begin");
  auto nbytes = byte_size(*type, s->numel());
  if (!nbytes.ok()) return std::move(nbytes).take_error().with_context(cat("tensor '", name, "'"));
  if (*e - *b != *nbytes)
    return bad("shape ", s->to_string(), " of ", safetensors_name(*type), " needs ", *nbytes,
               " bytes but data_offsets [", *b, ", ", *e, ") hold ", *e - *b);
  out.name = name;
  out.type = *type;
  out.shape = *s;
  out.begin = *b;
  out.end = *e;
  return {};
}

}  // namespace detail

SLM_INLINE result<header> parse_header(std::span<const std::byte> file, const limits& lim) {
  if (file.size() < 8)
    return make_error(errc::format_error, "file is ", file.size(), " bytes, too short for the 8-byte header length");
  const std::uint64_t n = detail::read_le64(file.data());
  if (n > lim.max_header_bytes)
    return make_error(errc::format_error, "header length ", n, " exceeds the limit of ", lim.max_header_bytes, " bytes");
  if (n > file.size() - 8)
    return make_error(errc::format_error, "header length ", n, " runs past the end of the file (",
                      file.size() - 8, " bytes follow the length)");
  if (n < 2 || static_cast<char>(file[8]) != '{')
    return make_error(errc::format_error, "header does not start with '{' (not a safetensors file?)");
  const std::string_view text(reinterpret_cast<const char*>(file.data() + 8), static_cast<std::size_t>(n));
  json::parse_options jopt;
  jopt.max_depth = lim.max_json_depth;
  jopt.max_bytes = static_cast<std::size_t>(lim.max_header_bytes);
  auto doc = json::parse(text, jopt);
  if (!doc.ok()) return std::move(doc).take_error().with_context("header JSON");
  if (!doc->is_object()) return make_error(errc::format_error, "header is not a JSON object");

  header h;
  h.data_offset = 8 + n;
  h.data_size = file.size() - 8 - n;
  if (doc->size() > lim.max_tensors + 1)
    return make_error(errc::out_of_range, "header lists ", doc->size(), " entries, more than the limit of ", lim.max_tensors);
  h.tensors.reserve(doc->size());
  for (const json::member& m : doc->members()) {
    if (m.key == "__metadata__") {
      if (!m.val.is_object()) return make_error(errc::format_error, "\"__metadata__\" is not an object");
      for (const json::member& kv : m.val.members()) {
        if (!kv.val.is_string())
          return make_error(errc::format_error, "\"__metadata__\" value for \"", kv.key, "\" is not a string");
        h.metadata.emplace_back(kv.key, std::string(kv.val.as_string()));
      }
      continue;
    }
    tensor_info t;
    SLM_TRY(detail::parse_entry(m.key, m.val, t));
    h.tensors.push_back(std::move(t));
  }

  // The tensors, in offset order, must tile [0, data_size) exactly.
  std::vector<const tensor_info*> by_offset;
  by_offset.reserve(h.tensors.size());
  for (const auto& t : h.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const tensor_info* a, const tensor_info* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  std::uint64_t pos = 0;
  const tensor_info* prev = nullptr;
  for (const tensor_info* t : by_offset) {
    if (t->begin < pos)
      return make_error(errc::format_error, "tensor '", t->name, "' at [", t->begin, ", ", t->end,
                        ") overlaps tensor '", prev->name, "' at [", prev->begin, ", ", prev->end, ")");
    if (t->begin > pos)
      return make_error(errc::format_error, "tensor '", t->name, "' starts at ", t->begin, ", leaving a gap after ",
                        prev ? cat("tensor '", prev->name, "' which ends at ", pos) : std::string("the header (offset 0)"));
    if (t->end > h.data_size)
      return make_error(errc::format_error, "tensor '", t->name, "' data [", t->begin, ", ", t->end,
                        ") ends past the data section (", h.data_size, " bytes)");
    pos = t->end;
    prev = t;
  }
  if (pos != h.data_size)
    return make_error(errc::format_error, "data section holds ", h.data_size, " bytes but the tensors cover ", pos,
                      " (trailing bytes or a truncated header)");

  std::sort(h.tensors.begin(), h.tensors.end(), [](const tensor_info& a, const tensor_info& b) { return a.name < b.name; });
  return h;
}

SLM_INLINE result<file> file::open(const std::filesystem::path& path, const limits& lim, load_mode how,
                                   const read_progress& progress) {
  auto m = mapped_file::open(path, how, progress);
  if (!m.ok()) return std::move(m).take_error();
  auto h = parse_header(m->bytes(), lim);
  if (!h.ok()) return std::move(h).take_error().with_context(path.string());
  file f;
  f.bytes_ = m->bytes();
  f.mapping_ = std::move(*m);
  f.header_ = std::move(*h);
  f.name_ = path.string();
  return f;
}

SLM_INLINE result<file> file::from_memory(std::span<const std::byte> bytes, std::string name, const limits& lim) {
  auto h = parse_header(bytes, lim);
  if (!h.ok()) return std::move(h).take_error().with_context(name);
  file f;
  f.bytes_ = bytes;
  f.header_ = std::move(*h);
  f.name_ = std::move(name);
  return f;
}

SLM_INLINE result<tensor_view> file::tensor(std::string_view name) const {
  const tensor_info* t = find(name);
  if (!t) return make_error(errc::not_found, name_, ": no tensor named '", name, "'");
  return view(*t);
}

SLM_INLINE status writer::add(std::string name, dtype type, const slm::shape& s, std::span<const std::byte> data) {
  if (name.empty()) return make_error(errc::invalid_argument, "empty tensor name");
  if (name == "__metadata__") return make_error(errc::invalid_argument, "\"__metadata__\" is reserved");
  for (const auto& e : entries_)
    if (e.name == name) return make_error(errc::invalid_argument, "tensor '", name, "' added twice");
  auto nbytes = byte_size(type, s.numel());
  if (!nbytes.ok()) return std::move(nbytes).take_error().with_context(cat("tensor '", name, "'"));
  if (*nbytes != data.size())
    return make_error(errc::invalid_argument, "tensor '", name, "': shape ", s.to_string(), " of ",
                      safetensors_name(type), " needs ", *nbytes, " bytes, got ", data.size());
  entries_.push_back({std::move(name), type, s, data, data.size(), false});
  return {};
}

SLM_INLINE status writer::add(std::string name, const tensor_view& v) {
  if (!v.is_contiguous()) return make_error(errc::invalid_argument, "tensor '", name, "' is not contiguous");
  return add(std::move(name), v.type(), v.shape(), v.bytes());
}

SLM_INLINE status writer::plan(std::string name, dtype type, const slm::shape& s) {
  auto nbytes = byte_size(type, s.numel());
  if (!nbytes.ok()) return std::move(nbytes).take_error().with_context(cat("tensor '", name, "'"));
  if (name.empty()) return make_error(errc::invalid_argument, "empty tensor name");
  if (name == "__metadata__") return make_error(errc::invalid_argument, "\"__metadata__\" is reserved");
  for (const auto& e : entries_)
    if (e.name == name) return make_error(errc::invalid_argument, "tensor '", name, "' added twice");
  entries_.push_back({std::move(name), type, s, {}, *nbytes, true});
  return {};
}

SLM_INLINE void writer::set_metadata(std::string key, std::string value) {
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(std::move(key), std::move(value));
}

SLM_INLINE result<std::vector<std::byte>> writer::serialize() const {
  SLM_TRY(no_deferred());
  const auto order = ordered();
  const std::string head = header_text(order);
  std::uint64_t total = 8 + head.size();
  for (const entry* e : order) total += e->data.size();
  std::vector<std::byte> out(static_cast<std::size_t>(total));
  std::memcpy(out.data(), length_prefix(head).data(), 8);
  std::memcpy(out.data() + 8, head.data(), head.size());
  std::size_t pos = 8 + head.size();
  for (const entry* e : order) {
    if (!e->data.empty()) std::memcpy(out.data() + pos, e->data.data(), e->data.size());
    pos += e->data.size();
  }
  return out;
}

SLM_INLINE status writer::write(const std::filesystem::path& path) const {
  SLM_TRY(no_deferred());
  const auto order = ordered();
  const std::string head = header_text(order);
  auto f = atomic_file::create(path);
  if (!f.ok()) return std::move(f).take_error();
  SLM_TRY(f->write(length_prefix(head)));
  SLM_TRY(f->write(head));
  for (const entry* e : order) SLM_TRY(f->write(e->data));
  return f->commit();
}

SLM_INLINE status writer::no_deferred() const {
  for (const auto& e : entries_)
    if (e.deferred) return make_error(errc::invalid_argument, "tensor '", e.name, "' was planned: use begin_stream()");
  return {};
}

SLM_INLINE std::vector<const writer::entry*> writer::ordered() const {
  std::vector<const entry*> order;
  for (const auto& e : entries_) order.push_back(&e);
  std::sort(order.begin(), order.end(), [](const entry* a, const entry* b) {
    if (a->type != b->type) return safetensors_order(a->type) > safetensors_order(b->type);
    return a->name < b->name;
  });
  return order;
}

SLM_INLINE std::string writer::header_text(const std::vector<const entry*>& order) const {
  json::value doc = json::value::make_object();
  if (!metadata_.empty()) {
    json::value meta = json::value::make_object();
    for (const auto& [k, v] : metadata_) meta.set(k, json::value(v));
    doc.set("__metadata__", std::move(meta));
  }
  std::uint64_t offset = 0;
  for (const entry* e : order) {
    json::value dims = json::value::make_array();
    for (std::int64_t d : e->shape.dims()) dims.push_back(json::value(d));
    json::value offsets = json::value::make_array();
    offsets.push_back(json::value(offset));
    offsets.push_back(json::value(offset + e->size));
    json::value t = json::value::make_object();
    t.set("dtype", json::value(std::string(safetensors_name(e->type))));
    t.set("shape", std::move(dims));
    t.set("data_offsets", std::move(offsets));
    doc.set(e->name, std::move(t));
    offset += e->size;
  }
  std::string text = json::dump(doc);
  while (text.size() % 8 != 0) text.push_back(' ');
  return text;
}

SLM_INLINE std::array<std::byte, 8> writer::length_prefix(const std::string& head) {
  std::array<std::byte, 8> le{};
  const std::uint64_t n = head.size();
  for (int i = 0; i < 8; ++i) le[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
  return le;
}

SLM_INLINE status writer::stream::append(std::string_view name, std::span<const std::byte> data) {
  if (!file_.is_open()) return make_error(errc::invalid_argument, path_.string(), ": stream is closed");
  if (done()) return make_error(errc::invalid_argument, path_.string(), ": tensor '", name, "' appended after the last one");
  if (name != names_[next_])
    return make_error(errc::invalid_argument, path_.string(), ": expected tensor '", names_[next_], "' next, got '", name, "'");
  if (data.size() != sizes_[next_])
    return make_error(errc::invalid_argument, path_.string(), ": tensor '", name, "' needs ", sizes_[next_], " bytes, got ", data.size());
  SLM_TRY(file_.write(data));  // on failure the temporary is gone
  ++next_;
  return {};
}

SLM_INLINE status writer::stream::finish() {
  if (!file_.is_open()) return make_error(errc::invalid_argument, path_.string(), ": stream is closed");
  if (!done()) return make_error(errc::invalid_argument, path_.string(), ": tensor '", names_[next_], "' was never appended");
  return file_.commit();
}

SLM_INLINE void writer::stream::abandon() noexcept { file_.abandon(); }

SLM_INLINE result<writer::stream> writer::begin_stream(const std::filesystem::path& path) const {
  for (const auto& e : entries_)
    if (!e.deferred) return make_error(errc::invalid_argument, "tensor '", e.name, "' has data: plan() every tensor of a stream");
  const auto order = ordered();
  const std::string head = header_text(order);
  stream s;
  s.path_ = path;
  for (const entry* e : order) {
    s.names_.push_back(e->name);
    s.sizes_.push_back(e->size);
  }
  auto f = atomic_file::create(path);
  if (!f.ok()) return std::move(f).take_error();
  s.file_ = std::move(*f);
  SLM_TRY(s.file_.write(length_prefix(head)));
  SLM_TRY(s.file_.write(head));
  return s;
}

#endif  // SLM_DEFINE_IO

}  // namespace slm::safetensors
