// slm/models/nanochat/bind.hpp - where the nanochat GPT keeps the parts it shares with other
// families: the Engram branch (`transformer.h.{i}.engram`) and the mHC mixer
// (`transformer.h.{i}.mhc`), both without biases. models/nanochat/model.hpp reads the
// config and loads its own attention, MLP, Mamba and MTP layers beside these.
//
// A prefix may be empty (the module's bare names, as the component oracles store them).
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include "slm/core/status.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/layers/engram.hpp"
#include "slm/layers/mhc.hpp"
#include "slm/models/bind.hpp"

namespace slm::nanochat {

// `transformer.h.{layer}.engram` and `transformer.h.{layer}.mhc` (layer 0-based).
inline std::string engram_prefix(std::size_t layer) { return cat("transformer.h.", layer, ".engram"); }
inline std::string mhc_prefix(std::size_t layer) { return cat("transformer.h.", layer, ".mhc"); }

// in_proj [b, C], order_mix.{j} [b, b] for each order, out_proj [C, b]; a checkpoint with
// more order_mix modules than c has orders is refused (the config does not describe it).
result<engram_branch> load_engram(const checkpoint& ck, std::string_view prefix, const engram_config& c);

// score_proj [h, C], score_out [1, h].
result<mhc_mixer> load_mhc(const checkpoint& ck, std::string_view prefix, const mhc_config& c);

// ---- Implementation (compiled once by the nam56r unit in compiled mode) ----

#if SLM_DEFINE_NAM56R

SLM_INLINE result<engram_branch> load_engram(const checkpoint& ck, std::string_view prefix, const engram_config& c) {
  SLM_TRY(c.validate());
  engram_branch e;
  e.cfg = c;
  const std::size_t C = c.n_embd, b = c.bottleneck();
  auto ip = load_linear(ck, join_module(prefix, "in_proj"), b, C);  // [T, C] x [C, b] -> [T, b]
  if (!ip.ok()) return std::move(ip).take_error();
  e.in_proj = std::move(*ip);
  e.order_mix.reserve(c.orders.size());
  for (std::size_t j = 0; j < c.orders.size(); ++j) {
    auto m = load_linear(ck, join_module(prefix, cat("order_mix.", j)), b, b);  // [T, b] x [b, b] -> [T, b]
    if (!m.ok()) return std::move(m).take_error();
    e.order_mix.push_back(std::move(*m));
  }
  const std::string extra = join_module(prefix, cat("order_mix.", c.orders.size(), ".weight"));
  if (ck.find(extra))
    return make_error(errc::format_error, ck.dir().string(), ": tensor '", extra, "' exists but the config has ",
                      c.orders.size(), " ngram orders");
  auto op = load_linear(ck, join_module(prefix, "out_proj"), C, b);  // [T, b] x [b, C] -> [T, C]
  if (!op.ok()) return std::move(op).take_error();
  e.out_proj = std::move(*op);
  return e;
}

SLM_INLINE result<mhc_mixer> load_mhc(const checkpoint& ck, std::string_view prefix, const mhc_config& c) {
  SLM_TRY(c.validate());
  mhc_mixer m;
  m.cfg = c;
  auto p = load_linear(ck, join_module(prefix, "score_proj"), c.hidden(), c.n_embd);  // [N, C] x [C, h] -> [N, h]
  if (!p.ok()) return std::move(p).take_error();
  m.score_proj = std::move(*p);
  auto o = load_linear(ck, join_module(prefix, "score_out"), 1, c.hidden());  // [N, h] x [h, 1] -> [N, 1]
  if (!o.ok()) return std::move(o).take_error();
  m.score_out = std::move(*o);
  return m;
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm::nanochat
