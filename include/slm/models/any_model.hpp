// slm/models/any_model.hpp - any supported checkpoint behind one type: the model family
// its config.json names, opened once.
//
// model_type "nam56r" is the NAM56R specialist (models/nam56r/model.hpp), "nanochat" the
// nanochat lineage (models/nanochat/model.hpp), and every other model_type the
// config-driven decoder (models/hf/model.hpp), which refuses the ones it does not know.
// any_model holds whichever it is and any_session the matching session. Both are closed
// variants, not virtual bases: the set of families is the library's, and std::visit keeps
// each call a direct one. A host that knows its family at compile time uses that type.
//
//   auto m = slm::any_model::load("models/nam56r-cpp-14m");   // result<any_model>
//   auto s = m->new_session();                                 // any_session
//   s.forward(ids, 1, logits.data(), cx);                      // [1, vocab()]
//
// any_session satisfies generation_session (generate/generator.hpp): generator<any_session>
// runs any family. A loaded any_model is immutable and may be shared by threads; a session
// belongs to one thread.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <variant>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/models/hf/model.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/models/nanochat/model.hpp"

namespace slm {

class any_session {
 public:
  using variant = std::variant<nam56r_model::session, model::session, nanochat_model::session>;
  explicit any_session(variant s) : s_(std::move(s)) {}

  // [rows, vocab] logits of the last `rows` of ids; on error the session is unchanged.
  status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx);
  std::size_t position() const noexcept;
  std::size_t max_tokens() const noexcept;
  void reset() noexcept;
  bool can_rollback(std::size_t n) const noexcept;
  // The largest n that rollback(k) takes for every k <= n (position() for KV-only models).
  std::size_t rollback_limit() const noexcept;
  status rollback(std::size_t n);
  result<std::vector<std::byte>> save() const;
  // The bytes save() would write: the state's size, without making the copy.
  result<std::uint64_t> saved_size() const;
  status load(std::span<const std::byte> blob);
  variant& get() noexcept { return s_; }
  const variant& get() const noexcept { return s_; }

 private:
  variant s_;
};

class any_model {
 public:
  using variant = std::variant<nam56r_model, model, nanochat_model>;
  enum class family : std::uint8_t { nam56r, decoder, nanochat };

  // The family a config.json names (its model_type).
  static family family_of(const json::value& config);
  // Opens the checkpoint in dir and loads it as its family.
  static result<any_model> load(const std::filesystem::path& dir, const checkpoint_options& opt = {});
  // Loads an opened checkpoint as its family (the checkpoint moves into the model).
  static result<any_model> from_checkpoint(checkpoint&& ck);

  family kind() const noexcept { return static_cast<family>(m_->index()); }
  std::size_t vocab() const noexcept;
  any_session new_session(session_options o = {}) const;
  const variant& get() const noexcept { return *m_; }
  // The checkpoint the model reads its weights from.
  const checkpoint& weights() const noexcept;

  // Bytes of the checkpoint's *.safetensors files: what loading reads (or maps), the
  // ensemble registry's unit of account (the weights dominate a loaded model; sessions are
  // counted apart).
  static result<std::uint64_t> weight_file_bytes(const std::filesystem::path& dir);

 private:
  explicit any_model(std::unique_ptr<variant> m) : m_(std::move(m)) {}
  // The model lives behind a pointer: an any_model moves as one pointer.
  template <class M>
  static result<any_model> wrap(result<M> m) {
    if (!m.ok()) return std::move(m).take_error();
    std::unique_ptr<variant> v(new (std::nothrow) variant(std::in_place_type<M>, std::move(*m)));
    if (!v) return make_error(errc::out_of_memory, "cannot allocate the model");
    return any_model(std::move(v));
  }
  std::unique_ptr<variant> m_;  // never null
};

// ---- implementation (SLM_DEFINE_MODELS)
#if SLM_DEFINE_MODELS

SLM_INLINE status any_session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx) {
  return std::visit([&](auto& s) { return s.forward(ids, rows, logits, cx); }, s_);
}

SLM_INLINE std::size_t any_session::position() const noexcept {
  return std::visit([](const auto& s) { return s.position(); }, s_);
}

SLM_INLINE std::size_t any_session::max_tokens() const noexcept {
  return std::visit([](const auto& s) { return s.max_tokens(); }, s_);
}

SLM_INLINE void any_session::reset() noexcept {
  std::visit([](auto& s) { s.reset(); }, s_);
}

SLM_INLINE bool any_session::can_rollback(std::size_t n) const noexcept {
  return std::visit([&](const auto& s) { return s.can_rollback(n); }, s_);
}

SLM_INLINE std::size_t any_session::rollback_limit() const noexcept {
  return std::visit([](const auto& s) { return s.rollback_limit(); }, s_);
}

SLM_INLINE result<std::uint64_t> any_session::saved_size() const {
  return std::visit([](const auto& s) { return s.saved_size(); }, s_);
}

SLM_INLINE status any_session::rollback(std::size_t n) {
  return std::visit([&](auto& s) { return s.rollback(n); }, s_);
}

SLM_INLINE result<std::vector<std::byte>> any_session::save() const {
  return std::visit([](const auto& s) { return s.save(); }, s_);
}

SLM_INLINE status any_session::load(std::span<const std::byte> blob) {
  return std::visit([&](auto& s) { return s.load(blob); }, s_);
}

SLM_INLINE any_model::family any_model::family_of(const json::value& config) {
  const json::value& t = config["model_type"];
  const std::string_view type = t.is_string() ? t.as_string() : std::string_view();
  if (type == "nam56r") return family::nam56r;
  if (type == "nanochat") return family::nanochat;
  return family::decoder;
}

SLM_INLINE result<any_model> any_model::load(const std::filesystem::path& dir, const checkpoint_options& opt) {
  auto ck = checkpoint::open(dir, opt);
  if (!ck.ok()) return std::move(ck).take_error();
  return from_checkpoint(std::move(*ck));
}

SLM_INLINE result<any_model> any_model::from_checkpoint(checkpoint&& ck) {
  switch (family_of(ck.config())) {
    case family::nam56r: return wrap(nam56r_model::from_checkpoint(std::move(ck)));
    case family::nanochat: return wrap(nanochat_model::from_checkpoint(std::move(ck)));
    case family::decoder: break;
  }
  return wrap(model::from_checkpoint(std::move(ck)));
}

SLM_INLINE std::size_t any_model::vocab() const noexcept {
  return std::visit([](const auto& m) { return m.vocab(); }, *m_);
}

SLM_INLINE any_session any_model::new_session(session_options o) const {
  return std::visit([&](const auto& m) { return any_session(any_session::variant(m.new_session(o))); }, *m_);
}

SLM_INLINE const checkpoint& any_model::weights() const noexcept {
  return std::visit([](const auto& m) -> const checkpoint& { return m.weights(); }, *m_);
}

SLM_INLINE result<std::uint64_t> any_model::weight_file_bytes(const std::filesystem::path& dir) {
  std::error_code ec;
  std::uint64_t total = 0;
  std::filesystem::directory_iterator it(dir, ec);
  if (ec) return make_error(errc::io_error, dir.string(), ": ", ec.message());
  for (const auto& e : it) {
    if (e.path().extension() != ".safetensors") continue;
    const auto n = std::filesystem::file_size(e.path(), ec);  // follows symlinks
    if (ec) return make_error(errc::io_error, e.path().string(), ": ", ec.message());
    total += n;
  }
  if (total == 0) return make_error(errc::not_found, dir.string(), ": no *.safetensors file");
  return total;
}

#endif  // SLM_DEFINE_MODELS

}  // namespace slm
