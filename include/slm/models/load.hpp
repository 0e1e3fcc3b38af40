// slm/models/load.hpp - from a Hugging Face model directory to everything a host needs to
// run it, in one call: slm::load.
//
//   auto m = slm::load("models/nam56r-cpp-14m");           // result<loaded_model>
//   slm::generator gen(m->model.new_session(), m->tok ? &*m->tok : nullptr, m->model.vocab(),
//                      m->defaults.sampling);
//   slm::generation_options go;
//   go.stop_tokens = m->defaults.eos_ids;
//
// It opens the checkpoint once (config.json, generation_config.json, the shards), loads
// the family its model_type names (any_model), reads tokenizer.json (+ tokenizer_config.json)
// when the directory has one, and the defaults transformers' generate() would use:
//   sampling  generation_config.json as transformers reads it: greedy unless do_sample is
//             true; then temperature (1), top_k (50, transformers' default), top_p (1),
//             min_p (0); repetition_penalty (1) in either case.
//   eos_ids   every eos_token_id of config.json and generation_config.json (an integer or a
//             list) and the tokenizer's EOS, sorted, without repeats.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/models/any_model.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm {

struct generation_defaults {
  sampler_config sampling;            // see the top of the file
  std::vector<std::int32_t> eos_ids;  // the ids that end generation
};

// The sampler generation_config.json asks for (null or absent: greedy).
sampler_config sampling_from_generation_config(const json::value* generation_config);
// The defaults of a checkpoint and its tokenizer (null: none).
generation_defaults read_generation_defaults(const checkpoint& ck, const tokenizer* tok);
// The tokenizer of a model directory: tokenizer.json (+ tokenizer_config.json), or nullopt
// when the directory has no tokenizer.json.
result<std::optional<tokenizer>> load_tokenizer_if_present(const std::filesystem::path& dir);

struct load_options {
  checkpoint_options checkpoint;  // how the weights are read: read or mapped, progress, limits
  bool tokenizer = true;          // read the directory's tokenizer.json, if it has one
};

struct loaded_model {
  any_model model;
  std::optional<slm::tokenizer> tok;  // nullopt: none in the directory (or not asked for)
  generation_defaults defaults;
};

result<loaded_model> load(const std::filesystem::path& dir, const load_options& opt = {});

// ---- implementation (SLM_DEFINE_MODELS)
#if SLM_DEFINE_MODELS

SLM_INLINE sampler_config sampling_from_generation_config(const json::value* gen) {
  sampler_config c;
  c.temperature = 0.0f;  // greedy
  if (!gen) return c;
  if (gen->get_bool("do_sample", false)) {
    c.temperature = static_cast<float>(gen->get_double("temperature", 1.0));
    c.top_k = static_cast<std::int32_t>(std::clamp<std::int64_t>(gen->get_int64("top_k", 50), 0, INT32_MAX));
    c.top_p = static_cast<float>(gen->get_double("top_p", 1.0));
    c.min_p = static_cast<float>(gen->get_double("min_p", 0.0));
  }
  c.repetition_penalty = static_cast<float>(gen->get_double("repetition_penalty", 1.0));
  return c;
}

SLM_INLINE generation_defaults read_generation_defaults(const checkpoint& ck, const tokenizer* tok) {
  generation_defaults d;
  d.sampling = sampling_from_generation_config(ck.generation_config());
  std::vector<std::int32_t>& ids = d.eos_ids;
  auto add = [&](const json::value& v) {
    if (auto n = v.as_int64(); n && *n >= 0 && *n <= INT32_MAX) ids.push_back(static_cast<std::int32_t>(*n));
    for (const auto& x : v.items())
      if (auto n = x.as_int64(); n && *n >= 0 && *n <= INT32_MAX) ids.push_back(static_cast<std::int32_t>(*n));
  };
  add(ck.config()["eos_token_id"]);
  if (const auto* g = ck.generation_config()) add((*g)["eos_token_id"]);
  if (tok && tok->specials().eos >= 0) ids.push_back(tok->specials().eos);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return d;
}

SLM_INLINE result<std::optional<tokenizer>> load_tokenizer_if_present(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir / "tokenizer.json", ec)) return std::optional<tokenizer>();
  auto t = tokenizer::load_dir(dir);
  if (!t.ok()) return std::move(t).take_error();
  return std::optional<tokenizer>(std::move(*t));
}

SLM_INLINE result<loaded_model> load(const std::filesystem::path& dir, const load_options& opt) {
  std::optional<tokenizer> tok;
  if (opt.tokenizer) {  // first: a broken tokenizer fails before the weights are read
    auto t = load_tokenizer_if_present(dir);
    if (!t.ok()) return std::move(t).take_error();
    tok = std::move(*t);
  }
  auto ck = checkpoint::open(dir, opt.checkpoint);
  if (!ck.ok()) return std::move(ck).take_error();
  generation_defaults defaults = read_generation_defaults(*ck, tok ? &*tok : nullptr);
  auto m = any_model::from_checkpoint(std::move(*ck));
  if (!m.ok()) return std::move(m).take_error();
  return loaded_model{std::move(*m), std::move(tok), std::move(defaults)};
}

#endif  // SLM_DEFINE_MODELS

}  // namespace slm
