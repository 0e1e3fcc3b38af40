// slm/io/checkpoint.hpp - a model directory as Hugging Face lays it out.
//
//   config.json                       required: architecture and dimensions
//   model.safetensors                 one file of weights, or
//   model.safetensors.index.json      {"weight_map": {tensor: shard file}} + the shards, or
//   *.safetensors                     several files, no index (names must not collide)
//   generation_config.json            optional: sampling defaults, eos ids
//   hf_quant_config.json              optional: NVIDIA ModelOpt quantization description
//   tokenizer.json                    optional: parsed on request (it can be large)
//
// Opening a checkpoint reads every shard into private memory (checkpoint_options::weights;
// or maps it) and validates every header, so a bad file is reported at load time with its
// name, never discovered mid-generation. Read, the weights cost RAM equal to the shards
// and nothing done to the files afterwards reaches the model; mapped, they cost nothing
// up front but the model is only as immutable as the files (io/mapped_file.hpp): update a
// model by writing a new file and renaming it over the old one, never in place. A
// checkpoint is immutable once opened and can be shared by any number of threads and
// sessions.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/core/status.hpp"
#include "slm/core/tensor.hpp"

namespace slm {

struct checkpoint_options {
  safetensors::limits limits;
  std::size_t max_json_bytes = 64u << 20;  // config files; tokenizer.json has its own limit below
  // What parsing one config file may allocate (json::parse_options::max_memory): real ones
  // take kilobytes, and a hostile one just under max_json_bytes is refused here, not by
  // the allocator. tokenizer.json keeps json's own default.
  std::size_t max_json_memory = 512u << 20;
  std::size_t max_tokenizer_bytes = 256u << 20;
  // How the shards come into memory (io/mapped_file.hpp). read: private memory, immune to the
  // files changing on disk. map: no copy and shared pages, for a host that knows its model
  // files are never truncated or rewritten in place while it runs (either kills it with
  // SIGBUS or changes the model under it); sessions refuse a changed shard.
  load_mode weights = load_mode::read;
  // Called as the shards are read (load_mode::read) with (bytes read so far, bytes of all
  // shards); only during open(), never kept.
  std::function<void(std::uint64_t done, std::uint64_t total)> progress;
};

class checkpoint {
 public:
  struct entry {
    std::string_view name;  // points into the shard's header
    std::uint32_t shard;    // index into shards()
    std::uint32_t index;    // index into shards()[shard].tensors()
  };

  static result<checkpoint> open(const std::filesystem::path& dir, const checkpoint_options& opt = {});

  const std::filesystem::path& dir() const noexcept { return dir_; }
  const json::value& config() const noexcept { return config_; }
  std::string_view model_type() const noexcept {
    const json::value& t = config_["model_type"];
    return t.is_string() ? t.as_string() : std::string_view{};
  }
  const json::value* generation_config() const noexcept { return opt_value(generation_config_); }
  // ModelOpt's hf_quant_config.json, if the directory has one.
  const json::value* hf_quant_config() const noexcept { return opt_value(hf_quant_config_); }
  // config.json's "quantization_config" (compressed-tensors, newer ModelOpt exports).
  const json::value* quantization_config() const noexcept {
    const json::value* q = config_.find("quantization_config");
    return q && q->is_object() ? q : nullptr;
  }

  bool has_tokenizer() const noexcept;
  std::filesystem::path tokenizer_path() const { return dir_ / "tokenizer.json"; }
  // Parsed on each call (nothing is cached, so a checkpoint stays immutable).
  result<json::value> load_tokenizer_json() const {
    return read_json(tokenizer_path(), opt_.max_tokenizer_bytes, json::parse_options{}.max_memory);
  }

  std::span<const safetensors::file> shards() const noexcept { return shards_; }
  std::span<const entry> tensors() const noexcept { return entries_; }  // sorted by name
  std::size_t size() const noexcept { return entries_.size(); }

  const entry* find(std::string_view name) const noexcept {
    auto it = std::lower_bound(entries_.begin(), entries_.end(), name,
                               [](const entry& e, std::string_view n) { return e.name < n; });
    return it != entries_.end() && it->name == name ? &*it : nullptr;
  }
  const safetensors::tensor_info& info(const entry& e) const noexcept { return shards_[e.shard].tensors()[e.index]; }
  // The data of a tensor. Viewing it records the tensor as bound (check_all_bound).
  tensor_view view(const entry& e) const noexcept {
    if (e.shard < shards_.size() && bound_) bound_[shard_base_[e.shard] + e.index].store(true, std::memory_order_relaxed);
    return shards_[e.shard].view(info(e));
  }
  result<tensor_view> tensor(std::string_view name) const;
  // A floating-point parameter (a norm weight, a bias, a state-space constant): refuses
  // integer, boolean and packed types, which to_f32 would otherwise convert as numbers
  // (a norm stored as I32 would run with its integer values).
  result<tensor_view> float_tensor(std::string_view name) const;

  // Every tensor must be consumed or reported: a model loader calls this once it has
  // bound all its weights, and a tensor that no part of the model viewed is an error
  // naming it. A layer count smaller than the layers stored, a feature switched off in
  // config.json whose weights are present (a conv kernel of 0): all would otherwise run
  // silently with the wrong function. `ignorable` names tensors a published layout
  // ships that the model legitimately does not use (rotary inv_freq buffers, activation
  // scales); may be empty.
  status check_all_bound(const std::function<bool(std::string_view)>& ignorable = {}) const;

  // Bytes of tensor data across all shards.
  std::uint64_t data_bytes() const noexcept;

  // How the shards came into memory (checkpoint_options::weights).
  load_mode weights_mode() const noexcept { return opt_.weights; }
  // Mapped shards: an error naming the first shard whose file changed since it was mapped
  // (mapped_file::check_unchanged). Always ok for read shards. Sessions call it when they
  // are created.
  status check_unchanged() const;

 private:
  static result<json::value> read_json(const std::filesystem::path& path, std::size_t max_bytes,
                                       std::size_t max_memory);
  static status read_optional_json(const std::filesystem::path& path, std::size_t max_bytes, std::size_t max_memory,
                                   std::optional<json::value>& out);
  static const json::value* opt_value(const std::optional<json::value>& v) noexcept { return v ? &*v : nullptr; }

  // A shard name from an index must be a plain file name in this directory: no path
  // separators, no "..", so a hostile index cannot make us map files elsewhere.
  static bool plain_file_name(std::string_view s) noexcept;

  // Opens the shards in this order, reporting progress over all of them.
  status open_shards(std::span<const std::filesystem::path> paths);

  status open_weights();

  // Every tensor of every shard, names unique across shards.
  status index_all_shards();

  // The index's weight_map names the shard of each tensor; tensors a shard holds but
  // the map does not list are ignored, as transformers ignores them.
  status open_indexed(const std::filesystem::path& index_path);

  std::filesystem::path dir_;
  checkpoint_options opt_;
  json::value config_;
  std::optional<json::value> generation_config_;
  std::optional<json::value> hf_quant_config_;
  std::vector<safetensors::file> shards_;
  std::vector<entry> entries_;
  // Which tensors a loader viewed, by shard_base_[shard] + index. Relaxed atomics: view()
  // is const and a checkpoint may be shared by threads, though only loaders read the
  // record.
  std::vector<std::size_t> shard_base_;
  std::unique_ptr<std::atomic<bool>[]> bound_;
};

#if SLM_DEFINE_IO

SLM_INLINE result<checkpoint> checkpoint::open(const std::filesystem::path& dir, const checkpoint_options& opt) {
  checkpoint c;
  c.dir_ = dir;
  c.opt_ = opt;
  std::error_code ec;
  if (!std::filesystem::exists(dir, ec)) return make_error(errc::not_found, dir.string(), ": no such directory");
  if (!std::filesystem::is_directory(dir, ec))
    return make_error(errc::invalid_argument, dir.string(), ": not a directory");

  auto config = read_json(dir / "config.json", opt.max_json_bytes, opt.max_json_memory);
  if (!config.ok()) return std::move(config).take_error();
  if (!config->is_object()) return make_error(errc::format_error, (dir / "config.json").string(), ": not a JSON object");
  c.config_ = std::move(*config);
  SLM_TRY(read_optional_json(dir / "generation_config.json", opt.max_json_bytes, opt.max_json_memory, c.generation_config_));
  SLM_TRY(read_optional_json(dir / "hf_quant_config.json", opt.max_json_bytes, opt.max_json_memory, c.hf_quant_config_));
  SLM_TRY(c.open_weights());
  std::size_t n = 0;
  for (const auto& f : c.shards_) {
    c.shard_base_.push_back(n);
    n += f.tensors().size();
  }
  c.bound_.reset(new (std::nothrow) std::atomic<bool>[n]());
  if (!c.bound_ && n > 0) return make_error(errc::out_of_memory, dir.string(), ": cannot allocate the tensor record");
  c.opt_.progress = nullptr;  // the caller's callback is not kept past open()
  return c;
}

SLM_INLINE bool checkpoint::has_tokenizer() const noexcept {
  std::error_code ec;
  return std::filesystem::is_regular_file(tokenizer_path(), ec);
}

SLM_INLINE result<tensor_view> checkpoint::tensor(std::string_view name) const {
  const entry* e = find(name);
  if (!e) return make_error(errc::not_found, dir_.string(), ": no tensor named '", name, "'");
  return view(*e);
}

SLM_INLINE result<tensor_view> checkpoint::float_tensor(std::string_view name) const {
  auto t = tensor(name);
  if (!t.ok()) return t;
  switch (t->type()) {
    case dtype::f32: case dtype::bf16: case dtype::f16: case dtype::f64: return t;
    default:
      return make_error(errc::format_error, dir_.string(), ": tensor '", name, "' holds ", safetensors_name(t->type()),
                        ", a floating-point parameter must be F32, BF16, F16 or F64");
  }
}

SLM_INLINE status checkpoint::check_all_bound(const std::function<bool(std::string_view)>& ignorable) const {
  std::size_t unused = 0;
  const entry* first = nullptr;
  for (const entry& e : entries_) {
    if (bound_ && bound_[shard_base_[e.shard] + e.index].load(std::memory_order_relaxed)) continue;
    if (ignorable && ignorable(e.name)) continue;
    if (!first) first = &e;
    ++unused;
  }
  if (!first) return {};
  return make_error(errc::format_error, dir_.string(), ": tensor '", first->name, "'",
                    unused > 1 ? cat(" (and ", unused - 1, " more)") : std::string(),
                    " is used by no part of the model config.json describes: a layer count, a feature or a "
                    "dimension in config.json disagrees with the weights");
}

SLM_INLINE std::uint64_t checkpoint::data_bytes() const noexcept {
  std::uint64_t n = 0;
  for (const auto& e : entries_) n += info(e).end - info(e).begin;
  return n;
}

SLM_INLINE status checkpoint::check_unchanged() const {
  for (const auto& f : shards_) SLM_TRY(f.check_unchanged());
  return {};
}

SLM_INLINE result<json::value> checkpoint::read_json(const std::filesystem::path& path, std::size_t max_bytes,
                                                    std::size_t max_memory) {
  auto text = read_text_file(path, max_bytes);
  if (!text.ok()) return std::move(text).take_error();
  json::parse_options o;
  o.max_bytes = max_bytes;
  o.max_memory = max_memory;
  auto v = json::parse(*text, o);
  if (!v.ok()) return std::move(v).take_error().with_context(path.string());
  return v;
}

SLM_INLINE status checkpoint::read_optional_json(const std::filesystem::path& path, std::size_t max_bytes,
                                                 std::size_t max_memory, std::optional<json::value>& out) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  auto v = read_json(path, max_bytes, max_memory);
  if (!v.ok()) return std::move(v).take_error();
  out = std::move(*v);
  return {};
}

SLM_INLINE bool checkpoint::plain_file_name(std::string_view s) noexcept {
  return !s.empty() && s != "." && s != ".." && s.find('/') == s.npos && s.find('\\') == s.npos &&
         s.find('\0') == s.npos && s.find(':') == s.npos;
}

SLM_INLINE status checkpoint::open_shards(std::span<const std::filesystem::path> paths) {
  std::uint64_t total = 0, done = 0;
  if (opt_.progress) {
    for (const auto& p : paths) {
      std::error_code ec;
      const auto n = std::filesystem::file_size(p, ec);
      if (!ec) total += n;  // a file that cannot be sized fails in open() below
    }
  }
  read_progress each;
  if (opt_.progress && opt_.weights == load_mode::read)
    each = [&](std::size_t n) { opt_.progress(done += n, std::max(total, done)); };
  shards_.reserve(paths.size());
  for (const auto& p : paths) {
    auto f = safetensors::file::open(p, opt_.limits, opt_.weights, each);
    if (!f.ok()) return std::move(f).take_error();
    shards_.push_back(std::move(*f));
  }
  return {};
}

SLM_INLINE status checkpoint::open_weights() {
  std::error_code ec;
  const auto index_path = dir_ / "model.safetensors.index.json";
  if (std::filesystem::exists(index_path, ec)) return open_indexed(index_path);
  if (std::filesystem::exists(dir_ / "model.safetensors", ec)) {
    const std::filesystem::path one[] = {dir_ / "model.safetensors"};
    SLM_TRY(open_shards(one));
    return index_all_shards();
  }
  std::vector<std::filesystem::path> files;
  for (const auto& de : std::filesystem::directory_iterator(dir_, ec))
    if (de.path().extension() == ".safetensors") files.push_back(de.path());
  if (ec) return make_error(errc::io_error, dir_.string(), ": cannot list the directory: ", ec.message());
  if (files.empty()) {
    if (std::filesystem::exists(dir_ / "pytorch_model.bin", ec))
      return make_error(errc::unsupported, dir_.string(),
                        ": only PyTorch pickle weights (pytorch_model.bin); convert them to safetensors");
    return make_error(errc::not_found, dir_.string(),
                      ": no weights (expected model.safetensors, model.safetensors.index.json or *.safetensors)");
  }
  std::sort(files.begin(), files.end());
  SLM_TRY(open_shards(files));
  return index_all_shards();
}

SLM_INLINE status checkpoint::index_all_shards() {
  for (std::uint32_t s = 0; s < shards_.size(); ++s)
    for (std::uint32_t i = 0; i < shards_[s].tensors().size(); ++i)
      entries_.push_back({shards_[s].tensors()[i].name, s, i});
  std::sort(entries_.begin(), entries_.end(), [](const entry& a, const entry& b) { return a.name < b.name; });
  for (std::size_t i = 1; i < entries_.size(); ++i)
    if (entries_[i].name == entries_[i - 1].name)
      return make_error(errc::format_error, "tensor '", entries_[i].name, "' is in both ",
                        shards_[entries_[i - 1].shard].name(), " and ", shards_[entries_[i].shard].name());
  return {};
}

SLM_INLINE status checkpoint::open_indexed(const std::filesystem::path& index_path) {
  auto index = read_json(index_path, opt_.max_json_bytes, opt_.max_json_memory);
  if (!index.ok()) return std::move(index).take_error();
  const json::value* map = index->find("weight_map");
  if (!map || !map->is_object())
    return make_error(errc::format_error, index_path.string(), ": no \"weight_map\" object");
  std::vector<std::string> shard_names;
  for (const json::member& m : map->members()) {
    if (!m.val.is_string())
      return make_error(errc::format_error, index_path.string(), ": weight_map[\"", m.key, "\"] is not a string");
    const std::string_view file = m.val.as_string();
    if (!plain_file_name(file))
      return make_error(errc::format_error, index_path.string(), ": weight_map[\"", m.key, "\"] = \"", file,
                        "\" is not a file name in the checkpoint directory");
    if (std::find(shard_names.begin(), shard_names.end(), file) == shard_names.end())
      shard_names.emplace_back(file);
  }
  std::sort(shard_names.begin(), shard_names.end());
  std::vector<std::filesystem::path> paths;
  for (const auto& name : shard_names) paths.push_back(dir_ / name);
  SLM_TRY(open_shards(paths));
  for (const json::member& m : map->members()) {
    const std::string_view file = m.val.as_string();
    const auto s = static_cast<std::uint32_t>(
        std::lower_bound(shard_names.begin(), shard_names.end(), file) - shard_names.begin());
    const safetensors::tensor_info* t = shards_[s].find(m.key);
    if (!t)
      return make_error(errc::format_error, index_path.string(), ": tensor '", m.key, "' is mapped to ", file,
                        ", which does not contain it");
    entries_.push_back({t->name, s, static_cast<std::uint32_t>(t - shards_[s].tensors().data())});
  }
  std::sort(entries_.begin(), entries_.end(), [](const entry& a, const entry& b) { return a.name < b.name; });
  return {};
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
