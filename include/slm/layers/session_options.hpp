// slm/layers/session_options.hpp - what a host chooses when it opens a session on any model:
// context limit, cache precision, MLA form, rollback depth. Every model family's
// new_session() takes it (models/hf/model.hpp, models/nam56r/model.hpp, models/nanochat/model.hpp).
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <memory>
#include <new>

#include "slm/layers/attention.hpp"  // kv_dtype
#include "slm/layers/mla.hpp"        // mla_mode

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

// A model that its sessions follow when it moves. A session keeps a pointer to its model;
// a model returned by value, kept in a vector or moved into a host's member would leave
// that pointer at the moved-from object. So the model's address lives in a small heap
// cell that moves with the model (a move re-points it), and a session reaches its model
// through the cell (model_ref). A model must still outlive its sessions, and assigning
// over a model ends its old sessions as destroying it does.
template <class M>
class movable_model {
 public:
  movable_model(const movable_model&) = delete;
  movable_model& operator=(const movable_model&) = delete;

 protected:
  movable_model() noexcept : home_(new (std::nothrow) const movable_model*(this)) {}
  movable_model(movable_model&& o) noexcept : home_(std::move(o.home_)) { repoint(); }
  movable_model& operator=(movable_model&& o) noexcept {
    home_ = std::move(o.home_);
    repoint();
    return *this;
  }
  ~movable_model() = default;

 private:
  template <class>
  friend class model_ref;
  // The cell holds this base's address: constructors run before M's members exist, so
  // the cast to M waits until a session uses it (model_ref::get), when M is complete.
  void repoint() noexcept {
    if (home_) *home_ = this;
  }
  std::unique_ptr<const movable_model*> home_;  // null when moved from, or if 8 bytes could not be had
};

// What a session holds: its model, wherever that model has moved since.
template <class M>
class model_ref {
 public:
  explicit model_ref(const M& m) noexcept
      : home_(static_cast<const movable_model<M>&>(m).home_.get()), direct_(&m) {}
  const M* get() const noexcept { return home_ ? static_cast<const M*>(*home_) : direct_; }
  const M* operator->() const noexcept { return get(); }
  const M& operator*() const noexcept { return *get(); }

 private:
  const movable_model<M>* const* home_;
  const M* direct_;  // without a cell (its allocation failed): the model as it was
};

}  // namespace slm
