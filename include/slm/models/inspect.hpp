// slm/models/inspect.hpp - a model as a person reads it, without reading its weights: the
// lines `slm inspect` prints, for a host's log, "about this model" panel or diagnostics.
//
//   auto lines = slm::inspect_model("models/nam56r-cpp-14m");   // result<vector<string>>
//
// `path` is one of
//   a model directory   its architecture and the config's main dimensions, its files, the
//                       tokenizer and its special ids, the quantization configs, for a NAM56R
//                       checkpoint one row per layer (nam56r_model::describe), then the tensors
//                       by dtype and, with list_tensors, one line per tensor;
//   a .safetensors file its metadata and tensors, the same way;
//   a directory with a tokenizer.json and no config.json: the tokenizer's summary.
// (An ensemble's: ensemble::registry::inspect.) The weight files are mapped and only their
// headers parsed, within the call: no tensor data is touched, so a weight file replaced or
// truncated later cannot fault it. An empty string is a blank line.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/io/checkpoint_weights.hpp"
#include "slm/io/json.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm {

// See the top of the file.
result<std::vector<std::string>> inspect_model(const std::filesystem::path& path, bool list_tensors = true);

// A byte count in binary units as inspect_model writes it: "512 B", "8.50 MiB", "1.25 GiB".
std::string human_bytes(std::uint64_t n);

// ---- implementation (SLM_DEFINE_MODELS)
#if SLM_DEFINE_MODELS

namespace detail::inspect {

// printf's %-Ns and %Ns: s padded with spaces to `width` on the right (left-aligned) or on
// the left; never cut.
inline std::string left(std::string s, std::size_t width) {
  return s.size() < width ? s.append(width - s.size(), ' ') : s;
}
inline std::string right(std::string s, std::size_t width) {
  return s.size() < width ? s.insert(0, width - s.size(), ' ') : s;
}

// The tensors by dtype (weight_totals), then (list_tensors) a header and one line per tensor.
inline void tensors(std::vector<std::string>& out, const weight_totals& w, bool list_tensors,
                    std::span<const safetensors::tensor_info* const> list) {
  out.push_back(
      cat("weights   ", w.all.tensors, " tensors, ", w.all.elements, " elements, ", human_bytes(w.all.bytes)));
  for (const auto& [name, x] : w.by_dtype)
    out.push_back(cat("  ", left(std::string(name), 8), " ", right(std::to_string(x.tensors), 6), " tensors ",
                      right(std::to_string(x.elements), 14), " elements ", right(human_bytes(x.bytes), 12)));
  if (!list_tensors) return;
  out.push_back("");
  out.push_back(cat(left("tensor", 56), " ", left("dtype", 8), " ", left("shape", 22), " ", right("bytes", 12)));
  for (const safetensors::tensor_info* t : list)
    out.push_back(cat(left(t->name, 56), " ", left(std::string(safetensors_name(t->type)), 8), " ",
                      left(t->shape.to_string(), 22), " ", right(std::to_string(t->end - t->begin), 12)));
}

// The architecture and the dimensions most architectures share (the rest is in config.json).
inline void config(std::vector<std::string>& out, const json::value& c) {
  const json::value& archs = c["architectures"];
  out.push_back(cat("type      ", c["model_type"].is_string() ? c["model_type"].as_string() : "?", " (",
                    archs.size() && archs[0].is_string() ? archs[0].as_string() : "?", ")"));
  const char* keys[] = {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                        "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
                        "num_experts", "n_routed_experts", "num_experts_per_tok", "state_size", "tie_word_embeddings",
                        "num_layers", "hybrid_pattern", "num_moe_experts", "moe_router_topk", "mtp_num_layers",
                        "n_layer", "n_head", "n_kv_head", "n_embd", "sequence_len"};
  std::string line;
  for (const char* k : keys) {
    const json::value* v = c.find(k);
    if (!v || v->is_null()) continue;
    line += cat(line.empty() ? "" : " ", k, "=", v->is_string() ? std::string(v->as_string()) : json::dump(*v));
  }
  out.push_back(cat("config    ", line));
}

// One row per layer (and per embedding, head and MTP sublayer): kind, parameters, bytes
// as stored and in which formats, parameters active per token (MoE: the routed top-k,
// the shared expert and the router); then the totals, between blank lines.
inline void layer_table(std::vector<std::string>& out, const std::vector<nam56r_model::layer_row>& rows) {
  const auto row = [&](std::string index, std::string kind, std::string params, std::string bytes, std::string formats,
                       std::string active) {
    out.push_back(cat(left(std::move(index), 6), " ", left(std::move(kind), 12), " ", right(std::move(params), 14), " ",
                      right(std::move(bytes), 12), " ", left(std::move(formats), 14), " ",
                      right(std::move(active), 14)));
  };
  out.push_back("");
  row("layer", "kind", "params", "bytes", "formats", "active/token");
  std::uint64_t params = 0, bytes = 0, active = 0;
  for (const auto& r : rows) {
    const bool layer = r.kind == "mla" || r.kind == "dsa" || r.kind == "moe" || r.kind == "mamba3" || r.kind == "m2rnn";
    row(layer ? std::to_string(r.index) : "-", r.kind, std::to_string(r.params), human_bytes(r.bytes), r.formats,
        std::to_string(r.active_params));
    params += r.params;
    bytes += r.bytes;
    active += r.active_params;
  }
  row("total", "", std::to_string(params), human_bytes(bytes), "", std::to_string(active));
  out.push_back("");
}

}  // namespace detail::inspect

SLM_INLINE std::string human_bytes(std::uint64_t n) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[32];
  if (u) std::snprintf(buf, sizeof buf, "%.2f %s", v, unit[u]);
  else std::snprintf(buf, sizeof buf, "%.0f %s", v, unit[u]);
  return buf;
}

SLM_INLINE result<std::vector<std::string>> inspect_model(const std::filesystem::path& path, bool list_tensors) {
  namespace in = detail::inspect;
  std::vector<std::string> out;
  std::vector<const safetensors::tensor_info*> list;
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {  // one .safetensors file: its header only
    auto f = safetensors::file::open(path, {}, load_mode::map);
    if (!f.ok()) return std::move(f).take_error();
    out.push_back(cat("file      ", path.string()));
    for (const auto& [k, v] : f->header().metadata) out.push_back(cat("metadata  ", k, " = ", v));
    if (list_tensors)
      for (const auto& t : f->tensors()) list.push_back(&t);
    in::tensors(out, weight_totals::of(f->tensors()), list_tensors, list);
    return out;
  }
  if (!std::filesystem::exists(path / "config.json", ec) && std::filesystem::exists(path / "tokenizer.json", ec)) {
    auto tok = tokenizer::load_dir(path);  // a tokenizer-only directory
    if (!tok.ok()) return std::move(tok).take_error();
    out.push_back(cat("tokenizer ", (path / "tokenizer.json").string()));
    out.push_back(cat("          ", tok->summary()));
    return out;
  }
  checkpoint_options metadata;
  metadata.weights = load_mode::map;  // config files and tensor headers; no weight is read
  auto ck = checkpoint::open(path, metadata);
  if (!ck.ok()) return std::move(ck).take_error();
  out.push_back(cat("model     ", path.string()));
  in::config(out, ck->config());
  out.push_back(cat("files     ", ck->shards().size(), " safetensors file", ck->shards().size() == 1 ? "" : "s",
                    ck->generation_config() ? ", generation_config.json" : "",
                    ck->hf_quant_config() ? ", hf_quant_config.json" : "",
                    ck->has_tokenizer() ? ", tokenizer.json" : ""));
  if (ck->has_tokenizer()) {
    auto tok = tokenizer::load_dir(path);
    if (!tok.ok()) return std::move(tok).take_error();
    const auto& sp = tok->specials();
    out.push_back(cat("tokenizer ", tok->summary(), "; bos ", sp.bos, " eos ", sp.eos, " pad ", sp.pad, " unk ", sp.unk,
                      ", fim ", sp.fim_prefix, "/", sp.fim_suffix, "/", sp.fim_middle));
  }
  if (const auto* q = ck->quantization_config()) out.push_back(cat("quant     ", json::dump(*q)));
  if (const auto* q = ck->hf_quant_config()) out.push_back(cat("quant     ", json::dump(*q)));
  const json::value& type = ck->config()["model_type"];
  if (type.is_string() && type.as_string() == "nam56r") {  // the specialist's layer table
    auto m = nam56r_model::load(path, metadata);            // shapes, not weights: mapped
    if (!m.ok()) return std::move(m).take_error();
    in::layer_table(out, m->describe());
  }
  if (list_tensors)
    for (const auto& e : ck->tensors()) list.push_back(&ck->info(e));
  in::tensors(out, weight_totals::of(*ck), list_tensors, list);
  return out;
}

#endif  // SLM_DEFINE_MODELS

}  // namespace slm
