// slm/ensemble/member.hpp - one ensemble member: any supported checkpoint behind one type.
//
// An ensemble mixes model families (a NAM56R specialist, a config-driven decoder such as a
// Llama/Qwen generalist, a nanochat-lineage model), so a member holds whichever of them its
// config.json names ("model_type": "nam56r" | "nanochat" | anything the decoder reads), and
// its sessions hold the matching session. Both are closed variants, not virtual bases: the
// set of families is the library's, and std::visit keeps the call a direct one.
//
//   auto m = slm::ensemble::member_model::load("models/nam56r-cpp-14m");   // result<>
//   auto s = m->new_session();                                             // member_session
//   s.forward(ids, 1, logits.data(), cx);                                  // [1, vocab()]
//
// member_session satisfies generation_session (generate/generator.hpp): generator<member_session> runs
// any member. A loaded member_model is immutable and may be shared by threads; a session
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

#include "slm/io/checkpoint.hpp"
#include "slm/models/hf/model.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/models/nanochat/model.hpp"
#include "slm/core/status.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::ensemble {

class member_session {
 public:
  using variant = std::variant<nam56r_model::session, model::session, nanochat_model::session>;
  explicit member_session(variant s) : s_(std::move(s)) {}

  // [rows, vocab] logits of the last `rows` of ids; on error the session is unchanged.
  status forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx);
  std::size_t position() const noexcept;
  std::size_t max_tokens() const noexcept;
  void reset() noexcept;
  bool can_rollback(std::size_t n) const noexcept;
  status rollback(std::size_t n);
  result<std::vector<std::byte>> save() const;
  status load(std::span<const std::byte> blob);
  variant& get() noexcept { return s_; }
  const variant& get() const noexcept { return s_; }

 private:
  variant s_;
};

class member_model {
 public:
  using variant = std::variant<nam56r_model, model, nanochat_model>;
  enum class family : std::uint8_t { nam56r, decoder, nanochat };

  // Loads the checkpoint in dir as the family its config.json's model_type names.
  static result<member_model> load(const std::filesystem::path& dir, const checkpoint_options& opt = {});

  family kind() const noexcept { return static_cast<family>(m_->index()); }
  std::size_t vocab() const noexcept;
  member_session new_session(session_options o = {}) const;
  const variant& get() const noexcept { return *m_; }

  // Bytes of the checkpoint's *.safetensors files: what loading reads (or maps), the
  // registry's unit of account (the weights dominate a loaded member; sessions are counted
  // apart).
  static result<std::uint64_t> weight_file_bytes(const std::filesystem::path& dir);

 private:
  explicit member_model(std::unique_ptr<variant> m) : m_(std::move(m)) {}
  // The model lives behind a pointer: a member_model moves as one pointer (and sessions
  // point into the model, which never moves after loading).
  template <class M>
  static result<member_model> wrap(const std::filesystem::path& dir, const checkpoint_options& opt) {
    auto m = M::load(dir, opt);
    if (!m.ok()) return std::move(m).take_error();
    std::unique_ptr<variant> v(new (std::nothrow) variant(std::in_place_type<M>, std::move(*m)));
    if (!v) return make_error(errc::out_of_memory, "cannot allocate the member model");
    return member_model(std::move(v));
  }
  std::unique_ptr<variant> m_;  // never null
};

// What strategies and routers see of a member: the model, its tokenizer (members that share
// one tokenizer point at the same object), its name and the temperature fitted for it
// (calibration: logits are divided by it before softmax when distributions are mixed).
// Non-owning: the registry (registry.hpp) or the host keeps the pointees alive.
struct member_ref {
  const member_model* model = nullptr;
  const tokenizer* tok = nullptr;
  std::string_view name;
  float temperature = 1.0f;
};

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE status member_session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits, compute_context& cx) {
  return std::visit([&](auto& s) { return s.forward(ids, rows, logits, cx); }, s_);
}

SLM_INLINE std::size_t member_session::position() const noexcept {
  return std::visit([](const auto& s) { return s.position(); }, s_);
}

SLM_INLINE std::size_t member_session::max_tokens() const noexcept {
  return std::visit([](const auto& s) { return s.max_tokens(); }, s_);
}

SLM_INLINE void member_session::reset() noexcept {
  std::visit([](auto& s) { s.reset(); }, s_);
}

SLM_INLINE bool member_session::can_rollback(std::size_t n) const noexcept {
  return std::visit([&](const auto& s) { return s.can_rollback(n); }, s_);
}

SLM_INLINE status member_session::rollback(std::size_t n) {
  return std::visit([&](auto& s) { return s.rollback(n); }, s_);
}

SLM_INLINE result<std::vector<std::byte>> member_session::save() const {
  return std::visit([](const auto& s) { return s.save(); }, s_);
}

SLM_INLINE status member_session::load(std::span<const std::byte> blob) {
  return std::visit([&](auto& s) { return s.load(blob); }, s_);
}

SLM_INLINE result<member_model> member_model::load(const std::filesystem::path& dir, const checkpoint_options& opt) {
  std::string type;
  {
    auto ck = checkpoint::open(dir, opt);
    if (!ck.ok()) return std::move(ck).take_error();
    const json::value& t = ck->config()["model_type"];
    if (t.is_string()) type = std::string(t.as_string());
  }
  if (type == "nam56r") return wrap<nam56r_model>(dir, opt);
  if (type == "nanochat") return wrap<nanochat_model>(dir, opt);
  return wrap<model>(dir, opt);
}

SLM_INLINE std::size_t member_model::vocab() const noexcept {
  return std::visit([](const auto& m) { return m.vocab(); }, *m_);
}

SLM_INLINE member_session member_model::new_session(session_options o) const {
  return std::visit([&](const auto& m) { return member_session(member_session::variant(m.new_session(o))); }, *m_);
}

SLM_INLINE result<std::uint64_t> member_model::weight_file_bytes(const std::filesystem::path& dir) {
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

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
