// slm/formats/quant_config.hpp - how a checkpoint is quantized, and its linear weights as views.
//
// Three producers write quantized checkpoints we load without conversion
// (shared/spec/nvfp4.md sections 4-6):
//
//   ModelOpt (hf_quant_config.json, or config.json quantization_config with
//   quant_method "modelopt"):
//     P.weight U8 [N, K/2] + P.weight_scale F8_E4M3 [N, K/16] + P.weight_scale_2 F32 []  NVFP4
//     P.weight U8 [N, K/2] + P.weight_scale U8 [N, K/32]                                 MXFP4
//     P.weight F8_E4M3 [N, K] + P.weight_scale F32 []                                     FP8 per tensor
//   compressed-tensors (quant_method "compressed-tensors"):
//     P.weight_packed U8 [N, K/2] + P.weight_scale F8_E4M3 [N, K/16]
//       + P.weight_global_scale F32 [1]   NVFP4; the global scale is a DIVISOR (2688/amax)
//     P.weight_packed U8 [N, K/2] + P.weight_scale U8 [N, K/32]                           MXFP4
//     P.weight F8_E4M3 [N, K] + P.weight_scale F32 [N, 1] or []                           FP8 per channel / tensor
//   DeepSeek FP8: P.weight F8_E4M3 [N, K] + P.weight_scale_inv F32 [ceil(N/128), ceil(K/128)]
//   gpt-oss MXFP4 experts: P_blocks U8 [E, N, K/32, 16] + P_scales U8 [E, N, K/32]
//
// The layout is recognised from the tensors themselves (which siblings exist, their
// dtypes and shapes), as vLLM does; the config supplies the exclude list and the
// algorithm for diagnostics. Every view is converted to slm's one convention, a
// multiplier (formats/weights.hpp): compressed-tensors' divisor g becomes 1/g here, once.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/io/checkpoint.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/io/json.hpp"
#include "slm/core/status.hpp"
#include "slm/formats/weights.hpp"

namespace slm {

// Shell-style wildcard match (fnmatch without flags): '*' any run, '?' one character,
// '[abc]' / '[a-z]' / '[!abc]' a set. Iterative with one backtrack point: linear-ish
// and no recursion, so hostile patterns cannot blow the stack.
bool glob_match(std::string_view pattern, std::string_view text) noexcept;

enum class quant_method : std::uint8_t { none, modelopt, compressed_tensors, mxfp4 };

constexpr std::string_view to_string(quant_method m) noexcept {
  switch (m) {
    case quant_method::none: return "none";
    case quant_method::modelopt: return "modelopt";
    case quant_method::compressed_tensors: return "compressed-tensors";
    case quant_method::mxfp4: return "mxfp4";
  }
  return "?";
}

struct quant_config {
  quant_method method = quant_method::none;
  std::string algo;  // ModelOpt quant_algo ("NVFP4", "FP8", "MIXED_PRECISION", ...) or CT format
  int group_size = 0;
  std::vector<std::string> exclude;  // module-name patterns left unquantized
  // MIXED_PRECISION: module path -> its own algorithm; modules absent are unquantized.
  std::vector<std::pair<std::string, std::string>> layers;

  // The checkpoint's description: config.json quantization_config first, then
  // hf_quant_config.json (older ModelOpt exports), else none.
  static result<quant_config> from_checkpoint(const checkpoint& ck);

  static result<quant_config> from_hf_quant_config(const json::value& doc);

  static result<quant_config> from_quantization_config(const json::value& q);

  // Is the module (a weight name with or without ".weight") left unquantized? ModelOpt's
  // and gpt-oss' lists are shell wildcards; "a.b*" covers a.b and everything under it.
  // Older ModelOpt exports relied on substring matching, which vLLM keeps for
  // compatibility; so do we. compressed-tensors' "re:" patterns are regular
  // expressions we do not evaluate (the tensors themselves still decide, see
  // load_linear_weight), so they never match here.
  bool is_excluded(std::string_view module) const noexcept;

 private:
  static status read_strings(const json::value& q, const char* key, std::vector<std::string>& out);
  static status read_common(const json::value& q, const char* algo_key, const char* exclude_key, quant_config& c);
};

namespace detail {

// The one scalar a global scale tensor holds ([] or [1]), which must be finite and >= 0.
result<float> read_global_scale(const checkpoint& ck, const std::string& name);

// A view builder's complaint about a file's tensors is a format error of that file.
result<weight_matrix> from_file(result<weight_matrix> w, const checkpoint& ck, std::string_view module);

}  // namespace detail

// The weight of the linear module `module` (e.g. "model.layers.3.mlp.down_proj"), in
// whatever layout the checkpoint stores it, as a view (built and validated by the
// make_* functions of formats/dequantize.hpp). Errors name the module, the tensor and the
// expected vs found dtype and shape. `index` selects one matrix of Transformer Engine's
// grouped experts, whose tensors carry it after the parameter name: module
// "mlp.experts.linear_fc1", index "3" reads `.weight3` (and `.weight_scale3`,
// `.weight_scale_23` when quantized, as slm quantize writes them).
result<weight_matrix> load_linear_weight(const checkpoint& ck, std::string_view module,
                                         std::string_view index = {});

// One expert of a gpt-oss style stacked MXFP4 tensor: P_blocks U8 [E, N, K/32, 16],
// P_scales U8 [E, N, K/32] (biased E8M0), e.g. P = "model.layers.0.mlp.experts.down_proj".
// For gate_up_proj the rows interleave gate (even) and up (odd) (spec 6.2).
result<weight_matrix> load_mxfp4_expert(const checkpoint& ck, std::string_view stacked, std::size_t expert);

#if SLM_DEFINE_IO

SLM_INLINE bool glob_match(std::string_view pattern, std::string_view text) noexcept {
  std::size_t p = 0, t = 0, star_p = std::string_view::npos, star_t = 0;
  auto match_set = [&](std::size_t& pi, char c) -> int {  // 1 match, 0 no match, -1 malformed
    std::size_t i = pi + 1;
    bool negate = false;
    if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) negate = true, ++i;
    bool found = false;
    const std::size_t first = i;
    for (; i < pattern.size() && (pattern[i] != ']' || i == first); ++i) {
      if (i + 2 < pattern.size() && pattern[i + 1] == '-' && pattern[i + 2] != ']') {
        if (pattern[i] <= c && c <= pattern[i + 2]) found = true;
        i += 2;
      } else if (pattern[i] == c) {
        found = true;
      }
    }
    if (i >= pattern.size()) return -1;
    pi = i + 1;
    return found != negate ? 1 : 0;
  };
  while (t < text.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star_p = p++;
      star_t = t;
      continue;
    }
    if (p < pattern.size()) {
      if (pattern[p] == '[') {
        std::size_t np = p;
        const int m = match_set(np, text[t]);
        if (m == 1) {
          p = np, ++t;
          continue;
        }
        if (m == -1 && text[t] == '[') {  // an unclosed '[' is a literal
          ++p, ++t;
          continue;
        }
      } else if (pattern[p] == '?' || pattern[p] == text[t]) {
        ++p, ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p + 1;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

SLM_INLINE result<quant_config> quant_config::from_checkpoint(const checkpoint& ck) {
  if (const json::value* q = ck.quantization_config()) return from_quantization_config(*q);
  if (const json::value* h = ck.hf_quant_config()) return from_hf_quant_config(*h);
  return quant_config{};
}

SLM_INLINE result<quant_config> quant_config::from_hf_quant_config(const json::value& doc) {
  const json::value& q = doc["quantization"];
  if (!q.is_object()) return make_error(errc::format_error, "hf_quant_config.json: no \"quantization\" object");
  quant_config c;
  c.method = quant_method::modelopt;
  SLM_TRY(read_common(q, "quant_algo", "exclude_modules", c));
  if (const json::value* layers = q.find("quantized_layers"); layers && layers->is_object()) {
    for (const json::member& m : layers->members()) {
      const json::value& a = m.val["quant_algo"];
      if (!a.is_string())
        return make_error(errc::format_error, "hf_quant_config.json: quantized_layers[\"", m.key, "\"] has no quant_algo");
      c.layers.emplace_back(m.key, std::string(a.as_string()));
    }
  }
  return c;
}

SLM_INLINE result<quant_config> quant_config::from_quantization_config(const json::value& q) {
  const json::value& method = q["quant_method"];
  if (!method.is_string()) return make_error(errc::format_error, "quantization_config: no \"quant_method\" string");
  quant_config c;
  const std::string_view m = method.as_string();
  if (m == "modelopt") {
    c.method = quant_method::modelopt;
    SLM_TRY(read_common(q, "quant_algo", "ignore", c));
  } else if (m == "compressed-tensors") {
    c.method = quant_method::compressed_tensors;
    SLM_TRY(read_common(q, "format", "ignore", c));
    if (c.algo.empty()) {  // the format may be given per group only
      for (const json::member& g : q["config_groups"].members())
        if (g.val["format"].is_string()) c.algo = std::string(g.val["format"].as_string());
    }
  } else if (m == "mxfp4") {  // gpt-oss
    c.method = quant_method::mxfp4;
    c.algo = "MXFP4";
    c.group_size = 32;
    SLM_TRY(read_strings(q, "modules_to_not_convert", c.exclude));
  } else {
    return make_error(errc::unsupported, "quantization_config: quant_method \"", m,
                      "\" is not supported (modelopt, compressed-tensors and mxfp4 are)");
  }
  return c;
}

SLM_INLINE bool quant_config::is_excluded(std::string_view module) const noexcept {
  if (module.size() > 7 && module.substr(module.size() - 7) == ".weight") module.remove_suffix(7);
  for (const std::string& pat : exclude) {
    if (pat.rfind("re:", 0) == 0) continue;
    if (pat == module || glob_match(pat, module)) return true;
    if (pat.find_first_of("*?[") == std::string::npos && module.find(pat) != std::string_view::npos) return true;
  }
  if (!layers.empty()) {  // MIXED_PRECISION: only the listed modules are quantized
    for (const auto& [path, a] : layers)
      if (module == path || module.rfind(path + ".", 0) == 0) return false;
    return true;
  }
  return false;
}

SLM_INLINE status quant_config::read_strings(const json::value& q, const char* key, std::vector<std::string>& out) {
  const json::value* list = q.find(key);
  if (!list || list->is_null()) return {};
  if (!list->is_array()) return make_error(errc::format_error, "quantization config: \"", key, "\" is not a list");
  for (const json::value& s : list->items()) {
    if (!s.is_string()) return make_error(errc::format_error, "quantization config: \"", key, "\" holds a non-string");
    out.emplace_back(s.as_string());
  }
  return {};
}

SLM_INLINE status quant_config::read_common(const json::value& q, const char* algo_key, const char* exclude_key, quant_config& c) {
  if (q[algo_key].is_string()) c.algo = std::string(q[algo_key].as_string());
  if (auto g = q["group_size"].as_int64()) c.group_size = static_cast<int>(*g);
  return read_strings(q, exclude_key, c.exclude);
}

namespace detail {

SLM_INLINE result<float> read_global_scale(const checkpoint& ck, const std::string& name) {
  auto t = ck.tensor(name);
  if (!t.ok()) return std::move(t).take_error();
  if (t->type() != dtype::f32 || t->numel() != 1)
    return make_error(errc::format_error, "tensor '", name, "': expected one F32 value, found ",
                      safetensors_name(t->type()), " ", t->shape().to_string());
  float v = 0;
  SLM_TRY(t->to_f32(std::span(&v, 1)));
  if (!std::isfinite(v) || v < 0)
    return make_error(errc::format_error, "tensor '", name, "': global scale ", v, " is not a finite non-negative number");
  return v;
}

SLM_INLINE result<weight_matrix> from_file(result<weight_matrix> w, const checkpoint& ck, std::string_view module) {
  if (w.ok()) return w;
  const errc code = w.code() == errc::invalid_argument ? errc::format_error : w.code();
  return status(code, cat(ck.dir().string(), ": module '", module, "': ", w.message()));
}

}  // namespace detail

SLM_INLINE result<weight_matrix> load_linear_weight(const checkpoint& ck, std::string_view module,
                                                    std::string_view index) {
  const std::string p(module), ix(index);
  const std::string weight = p + ".weight" + ix, packed = p + ".weight_packed" + ix, scale = p + ".weight_scale" + ix;
  auto fail = [&](errc code, const auto&... parts) {
    return result<weight_matrix>(status(code, cat(ck.dir().string(), ": module '", p, "': ", parts...)));
  };
  auto global_or_fail = [&](const std::string& name, float& out) -> status {
    auto g = detail::read_global_scale(ck, name);
    if (!g.ok()) return std::move(g).take_error().with_context(cat(ck.dir().string(), ": module '", p, "'"));
    out = *g;
    return {};
  };

  if (ck.find(packed)) {  // compressed-tensors packed FP4
    auto scales = ck.tensor(scale);
    if (!scales.ok()) return fail(errc::format_error, "tensor '", packed, "' has no '", scale, "' beside it");
    if (scales->type() != dtype::f8_e4m3) return detail::from_file(make_mxfp4(*ck.tensor(packed), *scales), ck, p);
    float divisor = 0;
    SLM_TRY(global_or_fail(p + ".weight_global_scale" + ix, divisor));
    if (divisor == 0.0f) return fail(errc::format_error, "tensor '", p, ".weight_global_scale", ix, "' is zero (a divisor)");
    // compressed-tensors divides by its global scale; slm multiplies (spec 3.3).
    return detail::from_file(make_nvfp4(*ck.tensor(packed), *scales, 1.0f / divisor), ck, p);
  }

  auto wt = ck.tensor(weight);
  if (!wt.ok()) return fail(errc::not_found, "no tensor '", weight, "' or '", packed, "'");
  switch (wt->type()) {
    case dtype::f32: case dtype::bf16: case dtype::f16:
      // Dense, whatever the exclude list says (spec 4.6): a high-precision tensor with no
      // scale siblings is unquantized.
      return detail::from_file(make_dense(*wt), ck, p);
    case dtype::u8: case dtype::f4: {  // ModelOpt packed FP4
      auto scales = ck.tensor(scale);
      if (!scales.ok()) return fail(errc::format_error, "tensor '", weight, "' is U8 but has no '", scale, "' beside it");
      if (scales->type() != dtype::f8_e4m3) return detail::from_file(make_mxfp4(*wt, *scales), ck, p);
      float global = 0;
      SLM_TRY(global_or_fail(p + ".weight_scale_2" + ix, global));
      return detail::from_file(make_nvfp4(*wt, *scales, global), ck, p);
    }
    case dtype::f8_e4m3: {
      const std::string inv = p + ".weight_scale_inv" + ix;
      if (ck.find(inv))  // DeepSeek: f32 multipliers per 128 x 128 block
        return detail::from_file(make_fp8(*wt, *ck.tensor(inv), 128, 128), ck, p);
      auto s = ck.tensor(scale);
      if (!s.ok()) return fail(errc::format_error, "tensor '", weight, "' is F8_E4M3 but has no '", scale, "' or '", inv, "' beside it");
      if (s->numel() == 1) {  // per tensor
        float global = 0;
        SLM_TRY(global_or_fail(scale, global));
        return detail::from_file(make_fp8(*wt, global), ck, p);
      }
      // per output channel: F32 [N, 1] = blocks of 1 row x K columns
      return detail::from_file(make_fp8(*wt, *s, 1, static_cast<std::size_t>(wt->rank() == 2 ? wt->dim(1) : 1)), ck, p);
    }
    default:
      return fail(errc::unsupported, "tensor '", weight, "': ", safetensors_name(wt->type()), " weights are not supported");
  }
}

SLM_INLINE result<weight_matrix> load_mxfp4_expert(const checkpoint& ck, std::string_view stacked, std::size_t expert) {
  const std::string p(stacked), blocks_name = p + "_blocks", scales_name = p + "_scales";
  auto blocks = ck.tensor(blocks_name);
  if (!blocks.ok()) return std::move(blocks).take_error();
  auto scales = ck.tensor(scales_name);
  if (!scales.ok()) return std::move(scales).take_error();
  if (blocks->rank() != 4 || scales->rank() != 3)
    return make_error(errc::format_error, "'", blocks_name, "' / '", scales_name, "': expected [E, N, K/32, 16] and [E, N, K/32], found ",
                      blocks->shape().to_string(), " and ", scales->shape().to_string());
  if (expert >= static_cast<std::size_t>(blocks->dim(0)) || blocks->dim(0) != scales->dim(0))
    return make_error(errc::out_of_range, "expert ", expert, " of '", blocks_name, "', which holds ", blocks->dim(0));
  const auto e = static_cast<std::int64_t>(expert);
  auto b = blocks->slice(0, e, e + 1);
  auto s = scales->slice(0, e, e + 1);
  if (!b.ok() || !s.ok()) return make_error(errc::format_error, "'", blocks_name, "': cannot take expert ", expert);
  auto b2 = b->reshape(slm::shape{blocks->dim(1), blocks->dim(2), blocks->dim(3)});
  auto s2 = s->reshape(slm::shape{scales->dim(1), scales->dim(2)});
  if (!b2.ok() || !s2.ok()) return make_error(errc::format_error, "'", blocks_name, "': expert ", expert, " is not contiguous");
  return detail::from_file(make_mxfp4(*b2, *s2), ck, p);
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
