// slm/session_options.hpp - what a host chooses when it opens a session on any model:
// context limit, cache precision, MLA form, rollback depth. Every model family's
// new_session() takes it (model.hpp, nam56r.hpp, nanochat.hpp).
#pragma once
#include "slm/build_mode.hpp"

#include <cstddef>

#include "slm/attention.hpp"  // kv_dtype
#include "slm/mla.hpp"        // mla_mode

namespace slm {

struct session_options {
  std::size_t max_tokens = 0;      // context limit; 0 = the config's max_position_embeddings
  std::size_t reserve_tokens = 0;  // cache rows allocated up front (grows on demand)
  kv_dtype kv = kv_dtype::f32;
  mla_mode mla = mla_mode::automatic;
  // Recurrent layers keep the states of this many latest tokens, so that rollback(n) is
  // exact for n <= rollback_tokens (KV caches are exact for any n). Costs that many
  // copies of each recurrent layer's state; 0 keeps one level of undo (a failed call
  // leaves the session unchanged). At most recurrent_cache<>::max_rollback_tokens.
  std::size_t rollback_tokens = 0;
};

}  // namespace slm
