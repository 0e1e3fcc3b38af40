// slm/models/session.hpp - the one session every model family runs (decoder, NAM56R,
// nanochat): its options and context limit, the argument checks of a call, the
// all-or-nothing advance of a call, rollback, snapshot / restore and save / load.
//
// A family's session derives from model_session<Session, Model, State> and supplies only
// what its layers make different (as private members; model_session is its friend):
//   State                                     every cache and history the session keeps,
//                                             default-constructible and movable
//   status make_state(State&, const session_options&) const;   a fresh state
//   void truncate_state(State&, std::size_t len) const noexcept;
//                                             back to position len (exact where the caches
//                                             say can_truncate(len); callers check)
//   template <class Fn> void for_each_cache(const State&, Fn&& fn) const;
//                                             fn(layer, cache) for each cache whose rollback
//                                             is limited (recurrent layers; a KV cache may
//                                             be named too): can_truncate(len),
//                                             rollback_limit(), kind()
//   static constexpr state_format::session_kind saved_kind;   the blob's session kind
//   std::uint64_t fingerprint(const State&) const;   structure + each cache's layout + KV dtype
//   std::uint64_t record_count() const;
//   status write_records(state_writer&, const State&) const;
//   status read_records(state_reader&, State& fresh, std::size_t position) const;
// Semantics (the same for every family; the blob format is layers/recurrent_cache.hpp's):
//  * a call that fails (bad id, context full, out of memory, cancelled) leaves the session
//    as it was: advance() truncates the state back to where the call began;
//  * rollback(n) is exact or refused: KV caches drop any n, a recurrent layer within
//    session_options::rollback_tokens (or exactly its last call);
//  * snapshot() is the saved blob held in memory, restore() loads it; load() checks every
//    field and length before it replaces anything, so on any error the session is
//    unchanged.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/text/token_ids.hpp"

namespace slm {

// One cache's record in a saved session: its kind tag, its contents, and as many positions
// as the header says (`where` names the layer in the messages).
template <class Cache>
status read_cache_record(state_reader& r, Cache& cache, const std::string& where, std::size_t position) {
  SLM_TRY(expect_record(r, cache.kind(), where));
  if (auto st = cache.load(r); !st.ok()) return std::move(st).with_context(where);
  if (cache.size() != position)
    return make_error(errc::format_error, where, " holds ", cache.size(), " positions, the header says ", position);
  return {};
}

template <class Session, class Model, class State>
class model_session {
 public:
  // Why this session cannot run (a changed mapped checkpoint, see weights_), or ok.
  const status& usable() const noexcept { return weights_; }
  std::size_t position() const noexcept { return pos_; }
  std::size_t max_tokens() const noexcept { return opt_.max_tokens; }
  const session_options& options() const noexcept { return opt_; }
  // Forget everything: the next call starts at position 0.
  void reset() noexcept {
    if (ready_) self().truncate_state(st_, 0);
    pos_ = 0;
  }

  // Whether rollback(n) would succeed: n <= position() and every layer can drop n tokens
  // exactly (KV caches always; recurrent layers within their kept history).
  bool can_rollback(std::size_t n) const noexcept {
    if (n == 0) return true;
    if (n > pos_) return false;
    bool ok = true;
    if (ready_) self().for_each_cache(st_, [&](std::size_t, const auto& c) { ok = ok && c.can_truncate(pos_ - n); });
    return ok;
  }
  // The largest n such that rollback(k) succeeds for every k <= n: position() for KV
  // models, min(position(), rollback_tokens) once a recurrent session has run that far.
  // (rollback of exactly the last call's tokens also succeeds: can_rollback says so.)
  std::size_t rollback_limit() const noexcept {
    std::size_t lim = pos_;
    if (ready_) self().for_each_cache(st_, [&](std::size_t, const auto& c) { lim = std::min(lim, c.rollback_limit()); });
    return lim;
  }
  // Drops the last n tokens: the next call continues from position() - n exactly as if
  // they had never been fed. An error (n > position(), or a recurrent layer that did not
  // keep the state n tokens back) leaves the session unchanged.
  status rollback(std::size_t n) {
    if (n == 0) return {};
    if (n > pos_) return make_error(errc::out_of_range, "rollback: ", n, " tokens asked, the session holds ", pos_);
    const std::size_t len = pos_ - n;
    status refused;
    self().for_each_cache(st_, [&](std::size_t layer, const auto& c) {
      if (refused.ok() && !c.can_truncate(len))
        refused = make_error(errc::unsupported, "rollback: layer ", layer, " (", c.kind(), ") cannot drop ", n,
                             " tokens: a recurrent layer keeps the states of its last ", c.rollback_limit(),
                             " tokens (session_options::rollback_tokens = ", opt_.rollback_tokens,
                             ", and the start of the last call); the session is unchanged");
    });
    SLM_TRY(refused);
    self().truncate_state(st_, len);
    pos_ = len;
    return {};
  }

  // A deep copy: the session's saved blob, held in memory (restore() loads it).
  result<state_snapshot> snapshot() const {
    auto b = save();
    if (!b.ok()) return std::move(b).take_error();
    return state_snapshot(std::move(*b));
  }
  // Back to a snapshot of this or another session of a model with the same structure and
  // KV dtype. On any error the session is unchanged.
  status restore(const state_snapshot& snap) {
    if (auto s = load_state(snap.bytes()); !s.ok()) return std::move(s).with_context("restore");
    return {};
  }
  // Serializes the session state (layers/recurrent_cache.hpp's blob) through
  // write(std::span<const std::byte>) -> status, called in order; its error stops the
  // save and is returned.
  template <class Write>
    requires std::is_invocable_r_v<status, Write&, std::span<const std::byte>>
  status save(Write&& write) const {
    return with_state([&](const State& st) {
      return write_state_blob(write, header_of(st), [&](state_writer& w) { return self().write_records(w, st); });
    });
  }
  // The same into a byte vector (for very large states prefer the writer).
  result<std::vector<std::byte>> save() const {
    return with_state([&](const State& st) {
      return state_blob(header_of(st), [&](state_writer& w) { return self().write_records(w, st); });
    });
  }
  // The number of bytes save() writes.
  result<std::uint64_t> saved_size() const {
    return with_state([&](const State& st) {
      return state_blob_size(header_of(st), [&](state_writer& w) { return self().write_records(w, st); });
    });
  }
  // Replaces the session state with a saved one, from a session of a model with the same
  // structure and KV dtype. Every field and length is checked before anything is
  // replaced: on any error (format_error for a truncated, corrupted or hostile blob,
  // invalid_argument for another model's or KV dtype's, unsupported for another
  // version) the session is unchanged.
  status load(std::span<const std::byte> bytes) {
    if (auto s = load_state(bytes); !s.ok()) return std::move(s).with_context("session state");
    return {};
  }

 protected:
  // max_tokens: the context limit when the options leave it 0; weights: the checkpoint's
  // check_unchanged() (ok for a model built in memory).
  model_session(const Model& m, session_options o, std::size_t max_tokens, status weights)
      : m_(m), opt_(o), weights_(std::move(weights)) {
    if (opt_.max_tokens == 0) opt_.max_tokens = max_tokens;
  }

  // The checks every call shares: the weights unchanged, 1..max tokens, rows <= T with
  // somewhere to write them, every id in [0, vocab), and room in the context. `what`
  // names the call in the messages.
  status check_call(const char* what, std::span<const std::int32_t> ids, std::size_t rows, const float* out,
                    std::size_t vocab) const {
    SLM_TRY(weights_);
    const std::size_t T = ids.size();
    if (T == 0) return make_error(errc::invalid_argument, what, ": no tokens");
    if (rows > T) return make_error(errc::invalid_argument, what, ": ", rows, " logit rows asked of ", T, " tokens");
    if (rows > 0 && !out) return make_error(errc::invalid_argument, what, ": logits is null");
    SLM_TRY(check_token_ids(what, ids, vocab));
    if (pos_ + T > opt_.max_tokens)
      return make_error(errc::out_of_range, "context full: ", pos_, " + ", T, " tokens exceed the limit of ",
                        opt_.max_tokens);
    return {};
  }

  // The state, made on first use (a session costs nothing until it runs).
  status ensure_state() {
    if (ready_) return {};
    State fresh;
    SLM_TRY(self().make_state(fresh, opt_));
    st_ = std::move(fresh);
    ready_ = true;
    return {};
  }

  // One call's all-or-nothing advance by T tokens: run() extends the caches from
  // position(); on its error they go back to where the call began and position() stays.
  template <class Run>
  status advance(std::size_t T, Run&& run) {
    SLM_TRY(ensure_state());
    const std::size_t pos0 = pos_;
    if (status s = run(); !s.ok()) {
      self().truncate_state(st_, pos0);
      return s;
    }
    pos_ = pos0 + T;
    return {};
  }

  model_ref<Model> m_;  // follows the model when it moves
  session_options opt_;
  // A mapped checkpoint whose files changed since they were mapped (replaced, or worse,
  // rewritten in place: the weights are no longer the ones loaded, and a truncated file
  // faults) is refused here, once per session: every call returns the error.
  status weights_;
  State st_;
  std::size_t pos_ = 0;
  bool ready_ = false;

 private:
  const Session& self() const noexcept { return static_cast<const Session&>(*this); }

  // The blob's header for state st at the current position.
  state_format::header header_of(const State& st) const {
    state_format::header h;
    h.session = Session::saved_kind;
    h.kv = static_cast<std::uint8_t>(opt_.kv);
    h.fingerprint = self().fingerprint(st);
    h.records = self().record_count();
    h.position = pos_;
    return h;
  }
  // fn(state): the session's state, or a fresh one for a session that has not run yet.
  template <class Fn>
  auto with_state(Fn&& fn) const -> decltype(fn(std::declval<const State&>())) {
    if (ready_) return fn(st_);
    session_options o = opt_;
    o.reserve_tokens = 0;
    State scratch;
    if (status s = self().make_state(scratch, o); !s.ok()) return s;
    return fn(scratch);
  }
  status load_state(std::span<const std::byte> bytes) {
    SLM_TRY(check_state_envelope(bytes));  // before allocating what it would fill
    State fresh;
    SLM_TRY(self().make_state(fresh, opt_));
    std::size_t position = 0;
    state_reader r({});
    SLM_TRY(open_state_blob(bytes, header_of(fresh), opt_.max_tokens, position, r));
    SLM_TRY(self().read_records(r, fresh, position));
    if (r.remaining() != 0) return make_error(errc::format_error, r.remaining(), " bytes after the last record");
    st_ = std::move(fresh);
    pos_ = position;
    ready_ = true;
    return {};
  }
};

}  // namespace slm
