// slm/models/sequence_logits.hpp - the logits of a whole token sequence, [T, V], in the
// layout of the golden files transformers makes (logits_full, logits_incremental, both
// [T, V], whatever shared/golden/README.md says of the latter's shape): what `slm logits`
// writes and what a host compares a model with its reference by.
//
// Row t is always the next-token distribution after ids 0..t (inclusive); the modes
// differ only in how it is computed:
//   full         one forward over all T ids; on a nanochat model its no-cache forward
//                (nanochat_model::forward_uncached, GPT.forward in eval mode: the function
//                its goldens and training loss come from), which the cached session
//                differs from where DSA takes its sparse path or mHC pools;
//   incremental  one forward over the first `prefill` ids (rows 0..P-1), then the rest
//                one at a time through the session's KV cache (rows P..T-1).
// The context bounds T before anything is sized by it (in every mode); the [T, V] rows
// are allocated as a value, never an exception.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>

#include "slm/core/buffer.hpp"
#include "slm/core/status.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/models/any_model.hpp"

namespace slm {

enum class logits_mode : std::uint8_t { full, incremental };

struct sequence_logits_options {
  logits_mode mode = logits_mode::full;
  std::size_t prefill = 1;  // incremental: ids in the first forward, 1 <= prefill <= T
  session_options session;  // the session's options (max_tokens: a context limit)
};

// [T, V] logits of ids (see the top of the file). Model: a model family (vocab(),
// new_session(o), optionally forward_uncached) or any_model.
template <class Model>
result<floats> sequence_logits(const Model& m, std::span<const std::int32_t> ids, const sequence_logits_options& o,
                               compute_context& cx) {
  const std::size_t T = ids.size(), V = m.vocab();
  if (T == 0) return make_error(errc::invalid_argument, "logits: no ids");
  if (o.mode == logits_mode::incremental && (o.prefill == 0 || o.prefill > T))
    return make_error(errc::invalid_argument, "logits: prefill ", o.prefill, " is not in [1, ", T, "]");
  auto session = m.new_session(o.session);
  if (T > session.max_tokens())
    return make_error(errc::out_of_range, T, " ids exceed the context of ", session.max_tokens(), " tokens");
  floats logits;  // [T, V]
  SLM_TRY(logits.resize(T * V));
  if (o.mode == logits_mode::full) {
    if constexpr (requires { m.forward_uncached(ids, logits.data(), cx); }) {
      SLM_TRY(m.forward_uncached(ids, logits.data(), cx));  // [T] ids -> [T, V]
    } else {
      SLM_TRY(session.forward(ids, T, logits.data(), cx));  // [T] ids -> [T, V]
    }
    return logits;
  }
  const std::size_t P = o.prefill;
  SLM_TRY(session.forward(ids.first(P), P, logits.data(), cx));  // [P] ids -> rows 0..P-1
  for (std::size_t t = P; t < T; ++t)
    SLM_TRY(session.forward(ids.subspan(t, 1), 1, logits.data() + t * V, cx));  // one id -> row t
  return logits;
}

// any_model: as its family (a nanochat model's full mode is its no-cache forward).
result<floats> sequence_logits(const any_model& m, std::span<const std::int32_t> ids, const sequence_logits_options& o,
                               compute_context& cx);

// ---- implementation (SLM_DEFINE_MODELS)
#if SLM_DEFINE_MODELS

SLM_INLINE result<floats> sequence_logits(const any_model& m, std::span<const std::int32_t> ids,
                                          const sequence_logits_options& o, compute_context& cx) {
  return std::visit([&](const auto& family) { return sequence_logits(family, ids, o, cx); }, m.get());
}

#endif  // SLM_DEFINE_MODELS

}  // namespace slm
