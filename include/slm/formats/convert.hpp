// slm/formats/convert.hpp - converting a checkpoint directory to NVFP4, MXFP4, FP8 or BF16.
//
// The engine of `slm quantize`. Input: a Hugging Face directory with F32/BF16/F16
// safetensors (one file, sharded with an index, or several files). Output: the same
// directory layout in NVIDIA ModelOpt's format (shared/spec/nvfp4.md section 4):
//
//   P.weight U8 [N, K/2] + P.weight_scale F8_E4M3 [N, K/16] + P.weight_scale_2 F32 []   nvfp4
//   P.weight U8 [N, K/2] + P.weight_scale U8 [N, K/32]                                   mxfp4
//   P.weight F8_E4M3 [N, K] + P.weight_scale F32 []                                      fp8
//
// plus hf_quant_config.json (quant_algo, group_size, exclude_modules = every linear
// module kept in high precision), the index rewritten for the new tensor names, and
// every other file (config.json, tokenizer files, ...) copied. With format bf16 every
// floating tensor becomes BF16 and nothing is quantized.
//
// Quantized: every 2-D `*.weight` whose module is a linear layer, and the per-expert
// `*.weight{e}` of Transformer Engine's grouped experts (NAM56R's canonical format:
// `mlp.experts.linear_fc1.weight3` becomes `.weight3` + `.weight_scale3` +
// `.weight_scale_2{e}`, the index after each name as TE places it). Kept as they are:
// embeddings (word, n-gram hash tables and projections, structure embeddings),
// lm_head / output heads (`output_layer`), norms, routers and MoE gates, the DSA
// lightning indexer (its top-k choice decides what every head attends to, and a flipped
// choice is not a small error), nanochat's mHC branch scorer, modules matching an
// exclude pattern, and matrices whose K is not a multiple of the block. An include
// pattern overrides only the first two: a small model whose embeddings and head are
// most of its bytes may quantize them (embedding_include_patterns() names them; the
// loaders gather embedding rows through dequantize_row, which reads every format);
// norms, routers, the indexer, mHC scorers and an exclude match stay as they are. The report
// says, per tensor, what was done and the error it introduced (relative RMS and max
// absolute error of the dequantized weight against the original).
//
// Output: written into a fresh directory beside `out` (OUT.tmp.<pid>.<n>) and renamed into
// place only when complete, so a conversion that fails or is killed leaves `out` as it was
// (a killed one may leave its OUT.tmp.* directory), and nothing of an older conversion (a
// stale shard or model.safetensors.index.json, which the loader would prefer) survives into
// the new one. An `out` that exists and is not empty is refused unless
// convert_options::replace; then the old directory is moved aside, the new one renamed in,
// and the old one removed.
//
// Memory: each output shard's header is written first (safetensors::writer::plan), then
// tensors are converted and streamed one at a time, so the peak is about one tensor's
// input in f32 plus its output, not the model.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "slm/io/atomic_file.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/io/json.hpp"
#include "slm/core/parallel.hpp"
#include "slm/formats/quant_config.hpp"
#include "slm/formats/quantize.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/version.hpp"

namespace slm {

struct convert_options {
  weight_format format = weight_format::nvfp4;  // nvfp4, mxfp4, fp8_e4m3 or bf16
  std::vector<std::string> exclude;               // module patterns to keep (shell wildcards)
  // Module patterns (shell wildcards, matched as `exclude`) quantized although they are an
  // embedding or an output head; exclude wins over include.
  std::vector<std::string> include;
  mxfp4_scale_rule mxfp4_rule = mxfp4_scale_rule::ceil;  // nothing clips (Triton / ModelOpt)
  const cancellation* cancel = nullptr;
  // Replace an `out` that exists and is not empty (`slm quantize --force`), once the new
  // checkpoint is complete; without it such an `out` is refused.
  bool replace = false;
};

struct tensor_report {
  std::string name;
  std::string action;  // "nvfp4", "bf16", "kept BF16: embedding", ...
  double rel_rms_error = 0;  // sqrt(sum (w - q)^2 / sum w^2) over the tensor; 0 when kept
  double max_abs_error = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;

  // Kept as stored (its action says why), not converted.
  bool kept() const noexcept { return action.rfind("kept", 0) == 0; }
};

// A conversion as a whole: its tensors and how many were converted, the bytes read and
// written, the worst relative RMS error of a converted tensor.
struct convert_totals {
  std::size_t tensors = 0, converted = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  double worst_rel_rms_error = 0;

  static convert_totals of(std::span<const tensor_report> reports) noexcept {
    convert_totals t;
    for (const tensor_report& r : reports) {
      t.tensors += 1;
      t.bytes_in += r.bytes_in;
      t.bytes_out += r.bytes_out;
      if (!r.kept()) t.converted += 1, t.worst_rel_rms_error = std::max(t.worst_rel_rms_error, r.rel_rms_error);
    }
    return t;
  }
};

// The input embeddings and output heads of the supported families, for include
// (`slm quantize --quantize-embeddings`): Megatron/NAM56R `embedding.word_embeddings`,
// the n-gram hash table `embedding.cppmega_ngram_hash.unified_table` and `output_layer`;
// Hugging Face `model.embed_tokens` and `lm_head`. Not among them: nanochat's
// `transformer.wte` (an include pattern of its own can take it) and NAM56R's structure
// tables (`stacked_emb`), which load as floats only: a quantized one is a load error.
inline std::vector<std::string> embedding_include_patterns() {
  return {"*word_embeddings", "*embed_tokens", "*output_layer", "*lm_head", "*unified_table"};
}

// Called after each tensor: (report, tensors done, tensors total).
using convert_progress = std::function<void(const tensor_report&, std::size_t, std::size_t)>;

namespace detail {

// A weight's module and index: "m.weight" -> ("m", ""), "m.weight12" -> ("m", "12"); no
// module for any other name.
struct weight_name {
  std::string module, index;
  bool ok = false;
};
weight_name split_weight_name(std::string_view name);
#if SLM_DEFINE_KERNELS
SLM_INLINE weight_name split_weight_name(std::string_view name) {
  const std::size_t dot = name.rfind(".weight");
  if (dot == std::string_view::npos || dot == 0) return {};
  const std::string_view tail = name.substr(dot + 7);
  if (!std::all_of(tail.begin(), tail.end(), [](char c) { return c >= '0' && c <= '9'; }) || tail.size() > 6) return {};
  return {std::string(name.substr(0, dot)), std::string(tail), true};
}
#endif  // SLM_DEFINE_KERNELS

// Why a weight stays in high precision, or empty if it is quantized.
// `includes` holds opt.include as exclude patterns (the same matching rules).
std::string keep_reason(const std::string& name, const safetensors::tensor_info& t, const convert_options& opt,
                        const quant_config& excludes, const quant_config& includes = {});
#if SLM_DEFINE_KERNELS
SLM_INLINE std::string keep_reason(const std::string& name, const safetensors::tensor_info& t, const convert_options& opt,
                                   const quant_config& excludes, const quant_config& includes) {
  if (t.type != dtype::f32 && t.type != dtype::bf16 && t.type != dtype::f16) return "not a floating tensor";
  const weight_name wn = split_weight_name(name);
  if (t.shape.rank() != 2 || !wn.ok) return "not a linear weight";
  const std::string& module = wn.module;
  const std::string_view last = std::string_view(module).substr(module.rfind('.') == std::string::npos ? 0 : module.rfind('.') + 1);
  auto has = [&](std::string_view s) { return module.find(s) != std::string::npos; };
  const bool included = !includes.exclude.empty() && includes.is_excluded(module);
  if (!included && (has("embed") || last == "wte" || last == "wpe")) return "embedding";
  if (!included && (last == "lm_head" || last == "output" || last == "output_layer" || has("lm_head"))) return "output head";
  if (has("norm") || last.substr(0, 3) == "ln_") return "norm";
  if (last == "gate" || last == "router" || has("router")) return "router";
  if (has("indexer")) return "DSA indexer";
  if (has(".mhc.")) return "mHC branch scorer";
  if (excludes.is_excluded(module)) return "excluded";
  const std::size_t block = block_size(opt.format);
  if (static_cast<std::size_t>(t.shape[1]) % block != 0) return cat("K = ", t.shape[1], " is not a multiple of ", block);
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// Row r of a tensor as f32.
void row_to_f32(const tensor_view& v, std::size_t r, std::span<float> out);
#if SLM_DEFINE_KERNELS
SLM_INLINE void row_to_f32(const tensor_view& v, std::size_t r, std::span<float> out) {
  const std::size_t k = out.size(), esize = size_of(v.type());
  const tensor_view row(v.type(), slm::shape{static_cast<std::int64_t>(k)}, v.data() + r * k * esize);
  (void)row.to_f32(out);
}
#endif  // SLM_DEFINE_KERNELS

// sum (back_i - x_i)^2 over a row, in double; adds sum x_i^2 to ref_sq and raises max_err
// to max |back_i - x_i|. Eight independent partial sums (lane l takes every i = l mod 8),
// added in lane order, so the loop runs at throughput rather than at the latency of one
// chain of additions; the result depends on k alone, not on the thread count.
inline double row_error_sums(const float* x, const float* back, std::size_t k, double& ref_sq,
                             double& max_err) noexcept {
  constexpr std::size_t L = 8;
  double e2[L] = {}, r2[L] = {}, em[L] = {};
  std::size_t i = 0;
  for (; i + L <= k; i += L)
    for (std::size_t l = 0; l < L; ++l) {
      const double e = static_cast<double>(back[i + l]) - x[i + l];
      e2[l] += e * e;
      r2[l] += static_cast<double>(x[i + l]) * x[i + l];
      em[l] = std::max(em[l], std::fabs(e));
    }
  for (std::size_t l = 0; i < k; ++i, ++l) {
    const double e = static_cast<double>(back[i]) - x[i];
    e2[l] += e * e;
    r2[l] += static_cast<double>(x[i]) * x[i];
    em[l] = std::max(em[l], std::fabs(e));
  }
  double se = 0, sr = 0;
  for (std::size_t l = 0; l < L; ++l) {
    se += e2[l];
    sr += r2[l];
    max_err = std::max(max_err, em[l]);
  }
  ref_sq += sr;
  return se;
}

struct converted {
  std::vector<std::byte> data, scales;
  float global = 0;
  double err_sq = 0, ref_sq = 0, max_err = 0;
};

// Quantizes a [N, K] tensor row by row (rows in parallel, statistics reduced in a fixed
// chunk order so the report does not depend on the thread count).
status quantize_tensor(const tensor_view& v, const convert_options& opt, executor_ref ex, converted& out,
                       bool global_only = false);
#if SLM_DEFINE_KERNELS
SLM_INLINE status quantize_tensor(const tensor_view& v, const convert_options& opt, executor_ref ex, converted& out,
                                  bool global_only) {
  const std::size_t n = static_cast<std::size_t>(v.dim(0)), k = static_cast<std::size_t>(v.dim(1));
  const weight_format f = opt.format;
  const std::size_t scale_bytes_per_row = f == weight_format::nvfp4 ? k / 16 : f == weight_format::mxfp4 ? k / 32 : 0;

  // Pass 1: the tensor's absolute maximum (the global scale of NVFP4 and FP8).
  const std::size_t chunks = std::max<std::size_t>(1, std::min<std::size_t>(ex.concurrency(), n));
  std::vector<float> chunk_amax(chunks, 0.0f);
  SLM_TRY(parallel_for_chunks(ex, chunks, [&](std::size_t c) {
    const auto range = partition(0, n, chunks).chunk(c);
    std::vector<float> row(k);
    // max |x| on bits (for non-negative floats the bit patterns sort like the values),
    // so the loop vectorizes; infinities count (the check below refuses them), NaNs are
    // skipped here and refused by the row check of pass 2, as std::max would skip them.
    std::int32_t a = 0;  // signed: |x| bits fit, and SSE2 has a signed compare
    for (std::size_t r = range.begin; r < range.end; ++r) {
      row_to_f32(v, r, row);
      for (float x : row) {
        const auto b = static_cast<std::int32_t>(f32_bits(x) & f32_abs_mask);
        a = std::max(a, b > static_cast<std::int32_t>(f32_inf_bits) ? 0 : b);
      }
    }
    chunk_amax[c] = f32_from_bits(static_cast<std::uint32_t>(a));
  }, opt.cancel));
  float amax = 0;
  for (float a : chunk_amax) amax = std::max(amax, a);
  if (!std::isfinite(amax)) return make_error(errc::invalid_argument, "the tensor holds NaN or infinite values");
  out.global = f == weight_format::nvfp4 ? nvfp4_weight_scale_2(amax) : f == weight_format::fp8_e4m3 ? fp8_scale(amax) : 1.0f;
  if (global_only) return {};
  out.data.assign(n * row_bytes(f, k), std::byte{0});
  out.scales.assign(n * scale_bytes_per_row, std::byte{0});

  weight_matrix q;
  q.format = f;
  q.rows = n;
  q.cols = k;
  q.data = out.data.data();
  q.row_stride = row_bytes(f, k);
  q.scales = out.scales.empty() ? nullptr : out.scales.data();
  q.scale_stride = scale_bytes_per_row;
  q.global = out.global;

  // Pass 2: quantize each row, dequantize it again, and measure the error.
  std::vector<status> chunk_status(chunks);
  std::vector<double> err_sq(chunks, 0), ref_sq(chunks, 0), max_err(chunks, 0);
  SLM_TRY(parallel_for_chunks(ex, chunks, [&](std::size_t c) {
    const auto range = partition(0, n, chunks).chunk(c);
    std::vector<float> row(k), back(k);
    double e2 = 0, r2 = 0, emax = 0;  // this chunk's sums, in row order (locals: kept in registers)
    for (std::size_t r = range.begin; r < range.end && chunk_status[c].ok(); ++r) {
      row_to_f32(v, r, row);
      auto codes = std::span(reinterpret_cast<std::uint8_t*>(out.data.data()) + r * q.row_stride, q.row_stride);
      auto scales = std::span(reinterpret_cast<std::uint8_t*>(out.scales.data()) + r * scale_bytes_per_row, scale_bytes_per_row);
      switch (f) {
        case weight_format::nvfp4: chunk_status[c] = quantize_nvfp4_row(row, out.global, codes, scales); break;
        case weight_format::mxfp4: chunk_status[c] = quantize_mxfp4_row(row, opt.mxfp4_rule, codes, scales); break;
        default: chunk_status[c] = quantize_fp8_row(row, out.global, codes); break;
      }
      dequantize_row(q, r, back);
      e2 += row_error_sums(row.data(), back.data(), k, r2, emax);
    }
    err_sq[c] = e2;
    ref_sq[c] = r2;
    max_err[c] = emax;
  }, opt.cancel));
  for (std::size_t c = 0; c < chunks; ++c) {
    SLM_TRY(chunk_status[c]);
    out.err_sq += err_sq[c];
    out.ref_sq += ref_sq[c];
    out.max_err = std::max(out.max_err, max_err[c]);
  }
  return {};
}
#endif  // SLM_DEFINE_KERNELS

status write_json_file(const std::filesystem::path& path, const json::value& doc);
#if SLM_DEFINE_KERNELS
SLM_INLINE status write_json_file(const std::filesystem::path& path, const json::value& doc) {
  const std::string text = json::dump(doc);
  return write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}
#endif  // SLM_DEFINE_KERNELS

status copy_file(const std::filesystem::path& from, const std::filesystem::path& to);
#if SLM_DEFINE_KERNELS
SLM_INLINE status copy_file(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::error_code ec;
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing, ec);
  if (ec) return make_error(errc::io_error, "cannot copy ", from.string(), " to ", to.string(), ": ", ec.message());
  return {};
}
#endif  // SLM_DEFINE_KERNELS

// Removes `dir` (unless cleared) when it goes out of scope: the stage of a failed conversion.
struct remove_dir_on_exit {
  std::filesystem::path dir;
  remove_dir_on_exit() = default;
  remove_dir_on_exit(const remove_dir_on_exit&) = delete;
  remove_dir_on_exit& operator=(const remove_dir_on_exit&) = delete;
  ~remove_dir_on_exit() {
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
  }
};

}  // namespace detail

// Converts the checkpoint in `in` into `out` (created if missing; must not be `in`; see
// "Output" above for an `out` that exists).
result<std::vector<tensor_report>> convert_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                                      const convert_options& opt, executor_ref ex,
                                                      const convert_progress& progress = {});
#if SLM_DEFINE_KERNELS
SLM_INLINE result<std::vector<tensor_report>> convert_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                                                 const convert_options& opt, executor_ref ex,
                                                                 const convert_progress& progress) {
  if (opt.format != weight_format::nvfp4 && opt.format != weight_format::mxfp4 && opt.format != weight_format::fp8_e4m3 &&
      opt.format != weight_format::bf16)
    return make_error(errc::invalid_argument, "cannot convert to ", to_string(opt.format), " (nvfp4, mxfp4, fp8 or bf16)");
  // The input is mapped, not read: a conversion touches each tensor once, so memory stays
  // at about one tensor, not the whole model. Each output shard is renamed into place only
  // if its input shard is still the file that was mapped (a file rewritten in place under
  // a mapping changes the bytes mid-read; truncated, it kills the converter, never a host).
  checkpoint_options copt;
  copt.weights = load_mode::map;
  auto ck = checkpoint::open(in, copt);
  if (!ck.ok()) return std::move(ck).take_error();
  if (ck->quantization_config() || ck->hf_quant_config())
    return make_error(errc::unsupported, in.string(), " is already quantized; convert from the original weights");
  std::error_code ec;
  // `target` names the directory itself ("out/" and "out/." would put the stage inside it).
  std::filesystem::path target = std::filesystem::absolute(out, ec).lexically_normal();
  if (ec) return make_error(errc::io_error, out.string(), ": ", ec.message());
  if (!target.has_filename()) target = target.parent_path();
  const bool target_exists = std::filesystem::exists(target, ec);
  bool target_empty = true;
  if (target_exists) {
    if (!std::filesystem::is_directory(target, ec)) return make_error(errc::invalid_argument, out.string(), ": is not a directory");
    if (std::filesystem::equivalent(in, target, ec)) return make_error(errc::invalid_argument, "--out must differ from --in");
    // Replacing `out` removes it: `in` must not lie inside it.
    std::error_code eci, eco;
    const auto ci = std::filesystem::canonical(in, eci), co = std::filesystem::canonical(target, eco);
    if (!eci && !eco && std::mismatch(co.begin(), co.end(), ci.begin(), ci.end()).first == co.end())
      return make_error(errc::invalid_argument, in.string(), " lies inside --out ", out.string());
    target_empty = std::filesystem::is_empty(target, ec);
    if (ec) return make_error(errc::io_error, out.string(), ": cannot list: ", ec.message());
    if (!target_empty && !opt.replace)
      return make_error(errc::invalid_argument, out.string(),
                        " exists and is not empty: refusing to mix a new checkpoint with its files (replace it: --force)");
  } else {
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) return make_error(errc::io_error, target.parent_path().string(), ": cannot create: ", ec.message());
  }
  // The new checkpoint is written into a fresh directory beside `out`: never one that
  // exists already (create_directory is exclusive), removed on every way out but success.
  detail::remove_dir_on_exit stage;
  for (int attempt = 0; attempt < 16 && stage.dir.empty(); ++attempt) {
    const std::filesystem::path d = unique_sibling(target);
    if (std::filesystem::create_directory(d, ec)) stage.dir = d;
    else if (ec) return make_error(errc::io_error, d.string(), ": cannot create: ", ec.message());
  }
  if (stage.dir.empty()) return make_error(errc::io_error, out.string(), ": cannot create a temporary directory beside it");
  const std::filesystem::path& dest = stage.dir;

  quant_config excludes, includes;
  excludes.exclude = opt.exclude;
  includes.exclude = opt.include;
  const bool quantizing = opt.format != weight_format::bf16;
  std::vector<tensor_report> reports;
  std::vector<std::string> kept_modules;
  json::value weight_map = json::value::make_object();
  const std::size_t total = ck->size();
  std::size_t done = 0;

  for (const safetensors::file& shard : ck->shards()) {
    const std::filesystem::path shard_name = std::filesystem::path(shard.name()).filename();
    // Plan this shard's output: names, dtypes and shapes are known before any work.
    struct job {
      const safetensors::tensor_info* t;
      std::string keep;  // empty: convert
    };
    std::vector<job> jobs;
    safetensors::writer plan;
    for (const safetensors::tensor_info& t : shard.tensors()) {
      if (!ck->find(t.name)) continue;  // not in the index's weight_map
      job j{&t, {}};
      if (quantizing) {
        j.keep = detail::keep_reason(t.name, t, opt, excludes, includes);
      } else if (t.type == dtype::f32 || t.type == dtype::f16) {
        j.keep = "";  // becomes BF16
      } else {
        j.keep = "not F32/F16";
      }
      const std::int64_t n = t.shape.rank() ? t.shape[0] : 1, k = t.shape.rank() == 2 ? t.shape[1] : 0;
      if (!j.keep.empty()) {
        SLM_TRY(plan.plan(t.name, t.type, t.shape));
        if (quantizing && j.keep != "not a linear weight" && j.keep != "not a floating tensor")
          kept_modules.push_back(detail::split_weight_name(t.name).module);
      } else if (!quantizing) {
        SLM_TRY(plan.plan(t.name, dtype::bf16, t.shape));
      } else {
        const detail::weight_name wn = detail::split_weight_name(t.name);
        const std::string scale = wn.module + ".weight_scale" + wn.index, scale2 = wn.module + ".weight_scale_2" + wn.index;
        const weight_format f = opt.format;
        SLM_TRY(plan.plan(t.name, f == weight_format::fp8_e4m3 ? dtype::f8_e4m3 : dtype::u8,
                          f == weight_format::fp8_e4m3 ? slm::shape{n, k} : slm::shape{n, k / 2}));
        if (f == weight_format::nvfp4) {
          SLM_TRY(plan.plan(scale, dtype::f8_e4m3, slm::shape{n, k / 16}));
          SLM_TRY(plan.plan(scale2, dtype::f32, slm::shape{}));
        } else if (f == weight_format::mxfp4) {
          SLM_TRY(plan.plan(scale, dtype::u8, slm::shape{n, k / 32}));
        } else {
          SLM_TRY(plan.plan(scale, dtype::f32, slm::shape{}));
        }
      }
      jobs.push_back(std::move(j));
    }
    for (const auto& [key, value] : shard.header().metadata) plan.set_metadata(key, value);
    auto stream = plan.begin_stream(dest / shard_name);
    if (!stream.ok()) return std::move(stream).take_error();

    // The file wants its tensors in its own order (by dtype, then name), which scatters
    // the outputs of one source tensor: all scalars first, codes last. Each output is
    // produced when its turn comes, from the mapped source, so at most one tensor's
    // conversion is in memory; a scale tensor costs a quantization pass of its own.
    enum class part { whole, scales, global };
    std::unordered_map<std::string, std::pair<std::size_t, part>> source;  // output name -> (job, part)
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      const std::string& n = jobs[i].t->name;
      source[n] = {i, part::whole};
      if (!jobs[i].keep.empty() || !quantizing) continue;
      const detail::weight_name wn = detail::split_weight_name(n);
      source[wn.module + ".weight_scale" + wn.index] = {i, opt.format == weight_format::fp8_e4m3 ? part::global : part::scales};
      if (opt.format == weight_format::nvfp4) source[wn.module + ".weight_scale_2" + wn.index] = {i, part::global};
    }
    while (!stream->done()) {
      SLM_TRY(check_cancelled(opt.cancel));
      const std::string name(stream->next_name());
      const auto found = source.find(name);
      if (found == source.end()) return make_error(errc::invalid_argument, "internal: no source for output tensor '", name, "'");
      const job* j = &jobs[found->second.first];
      const part which = found->second.second;
      const safetensors::tensor_info& t = *j->t;
      const tensor_view v = shard.view(t);
      if (!j->keep.empty()) {  // unchanged: straight from the mapping
        SLM_TRY(stream->append(name, v.bytes()));
        tensor_report rep;
        rep.name = t.name;
        rep.action = cat("kept ", safetensors_name(t.type), ": ", j->keep);
        rep.bytes_in = rep.bytes_out = t.end - t.begin;
        weight_map.set(t.name, json::value(shard_name.string()));
        if (progress) progress(rep, ++done, total);
        reports.push_back(std::move(rep));
        continue;
      }
      if (!quantizing) {
        std::vector<float> f32(static_cast<std::size_t>(v.numel()));
        SLM_TRY(v.to_f32(f32));
        std::vector<std::byte> b16(f32.size() * 2);
        tensor_report rep;
        double err_sq = 0, ref_sq = 0;
        for (std::size_t i = 0; i < f32.size(); ++i) {
          const std::uint16_t h = f32_to_bf16(f32[i]);
          std::memcpy(b16.data() + 2 * i, &h, 2);
          const double e = static_cast<double>(bf16_to_f32(h)) - f32[i];
          err_sq += e * e;
          ref_sq += static_cast<double>(f32[i]) * f32[i];
          rep.max_abs_error = std::max(rep.max_abs_error, std::fabs(e));
        }
        SLM_TRY(stream->append(name, b16));
        rep.name = t.name;
        rep.action = "bf16";
        rep.rel_rms_error = ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : 0.0;
        rep.bytes_in = t.end - t.begin;
        rep.bytes_out = b16.size();
        weight_map.set(t.name, json::value(shard_name.string()));
        if (progress) progress(rep, ++done, total);
        reports.push_back(std::move(rep));
        continue;
      }
      detail::converted c;
      if (auto st = detail::quantize_tensor(v, opt, ex, c, which == part::global); !st.ok())
        return std::move(st).with_context(cat("tensor '", t.name, "'"));
      weight_map.set(name, json::value(shard_name.string()));
      if (which == part::global) {
        SLM_TRY(stream->append(name, std::as_bytes(std::span(&c.global, 1))));
      } else if (which == part::scales) {
        SLM_TRY(stream->append(name, c.scales));
      } else {  // the codes: the tensor's report
        SLM_TRY(stream->append(name, c.data));
        tensor_report rep;
        rep.name = t.name;
        rep.action = std::string(to_string(opt.format));
        rep.rel_rms_error = c.ref_sq > 0 ? std::sqrt(c.err_sq / c.ref_sq) : 0.0;
        rep.max_abs_error = c.max_err;
        rep.bytes_in = t.end - t.begin;
        rep.bytes_out = c.data.size() + c.scales.size() + (opt.format == weight_format::mxfp4 ? 0 : 4);
        if (progress) progress(rep, ++done, total);
        reports.push_back(std::move(rep));
      }
    }
    SLM_TRY(shard.check_unchanged());
    SLM_TRY(stream->finish());
  }

  // Every other file of the directory, then the files we write ourselves.
  for (const auto& de : std::filesystem::directory_iterator(in, ec)) {
    const auto name = de.path().filename().string();
    if (!de.is_regular_file() || de.path().extension() == ".safetensors" || name == "model.safetensors.index.json" ||
        name == "hf_quant_config.json")
      continue;
    SLM_TRY(detail::copy_file(de.path(), dest / name));
  }
  if (std::filesystem::exists(in / "model.safetensors.index.json", ec)) {
    std::uint64_t total_size = 0;
    for (const auto& r : reports) total_size += r.bytes_out;
    json::value index = json::value::make_object();
    json::value meta = json::value::make_object();
    meta.set("total_size", json::value(total_size));
    index.set("metadata", std::move(meta));
    index.set("weight_map", std::move(weight_map));
    SLM_TRY(detail::write_json_file(dest / "model.safetensors.index.json", index));
  }
  if (quantizing) {
    std::sort(kept_modules.begin(), kept_modules.end());
    kept_modules.erase(std::unique(kept_modules.begin(), kept_modules.end()), kept_modules.end());  // grouped experts
    json::value excl = json::value::make_array();
    for (const auto& m : kept_modules) excl.push_back(json::value(m));
    json::value q = json::value::make_object();
    q.set("quant_algo", json::value(std::string(opt.format == weight_format::nvfp4 ? "NVFP4"
                                               : opt.format == weight_format::mxfp4 ? "MXFP4" : "FP8")));
    q.set("kv_cache_quant_algo", json::value(nullptr));
    q.set("group_size", json::value(static_cast<std::int64_t>(opt.format == weight_format::fp8_e4m3 ? 0 : block_size(opt.format))));
    q.set("exclude_modules", std::move(excl));
    json::value producer = json::value::make_object();
    producer.set("name", json::value(std::string("slm")));
    producer.set("version", json::value(std::string(version_string)));
    json::value doc = json::value::make_object();
    doc.set("producer", std::move(producer));
    doc.set("quantization", std::move(q));
    SLM_TRY(detail::write_json_file(dest / "hf_quant_config.json", doc));
  }

  // Complete: into place. rename() takes the place of a missing or empty directory in one
  // step; a full one is moved aside first, and back if the new one cannot go in.
  if (!target_exists || target_empty) {
    std::filesystem::rename(dest, target, ec);
    if (ec && target_exists) {  // where rename cannot replace an empty directory
      std::filesystem::remove(target, ec);
      std::filesystem::rename(dest, target, ec);
    }
    if (ec) return make_error(errc::io_error, out.string(), ": cannot rename the new checkpoint into place: ", ec.message());
  } else {
    const std::filesystem::path old = unique_sibling(target);
    std::filesystem::rename(target, old, ec);
    if (ec) return make_error(errc::io_error, out.string(), ": cannot move the old checkpoint aside: ", ec.message());
    std::filesystem::rename(dest, target, ec);
    if (ec) {
      const std::string why = ec.message();
      std::filesystem::rename(old, target, ec);
      return make_error(errc::io_error, out.string(), ": cannot rename the new checkpoint into place: ", why);
    }
    std::filesystem::remove_all(old, ec);
  }
  stage.dir.clear();
  return reports;
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace slm
