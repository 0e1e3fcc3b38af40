// slm/core/status.hpp - errors as values.
//
// Every fallible call in slm returns `status` or `result<T>`. Nothing in the public
// API throws, aborts or exits, so the library builds and behaves the same with
// -fno-exceptions -fno-rtti. An error carries a code (for programs) and a message
// with context (for people): file, tensor name, byte offset, expected vs found.
// Context is added outermost-first as the error travels up:
//   "model.safetensors: tensor 'lm_head.weight': data [96, 400) ends past the data section (size 64)"
#pragma once
#include "slm/core/build_mode.hpp"

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace slm {

enum class errc : std::uint8_t {
  ok = 0,
  invalid_argument,  // the caller passed something unusable
  io_error,          // open/read/mmap failed
  parse_error,       // malformed text (JSON)
  format_error,      // malformed or hostile binary data (safetensors)
  unsupported,       // well-formed, but not something slm implements
  not_found,         // a named thing (file, tensor, key) does not exist
  out_of_range,      // a size, index or count beyond a limit
  out_of_memory,     // an allocation failed
  cancelled,         // a cancellation token was triggered
};

constexpr std::string_view to_string(errc c) noexcept {
  switch (c) {
    case errc::ok: return "ok";
    case errc::invalid_argument: return "invalid argument";
    case errc::io_error: return "I/O error";
    case errc::parse_error: return "parse error";
    case errc::format_error: return "format error";
    case errc::unsupported: return "unsupported";
    case errc::not_found: return "not found";
    case errc::out_of_range: return "out of range";
    case errc::out_of_memory: return "out of memory";
    case errc::cancelled: return "cancelled";
  }
  return "unknown error";
}

namespace detail {
// Appends the text form of one value to `out`; integers through to_chars (no locale,
// no exceptions), floats with enough digits to round-trip.
inline void append(std::string& out, std::string_view s) { out.append(s); }
inline void append(std::string& out, const char* s) { out.append(s ? s : "(null)"); }
inline void append(std::string& out, const std::string& s) { out.append(s); }
inline void append(std::string& out, char c) { out.push_back(c); }
inline void append(std::string& out, bool b) { out.append(b ? "true" : "false"); }
template <class T>
  requires(std::is_arithmetic_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>)
void append(std::string& out, T v) {
  char buf[64];
  std::to_chars_result r;
  if constexpr (std::is_floating_point_v<T>) {
    r = std::to_chars(buf, buf + sizeof buf, v);
  } else {
    r = std::to_chars(buf, buf + sizeof buf, v);
  }
  out.append(buf, r.ptr);
}
}  // namespace detail

// cat("tensor '", name, "' at offset ", off) -> one string. Used to build messages.
template <class... Args>
std::string cat(const Args&... args) {
  std::string out;
  (detail::append(out, args), ...);
  return out;
}

// The outcome of an operation that returns nothing. An ok status holds no allocation.
class [[nodiscard]] status {
 public:
  status() noexcept = default;
  status(errc code, std::string message) : code_(code), message_(std::move(message)) {}

  bool ok() const noexcept { return code_ == errc::ok; }
  explicit operator bool() const noexcept { return ok(); }
  errc code() const noexcept { return code_; }
  const std::string& message() const noexcept { return message_; }

  // "what went wrong" with the code's name when the message is empty.
  std::string to_string() const {
    if (ok()) return "ok";
    return message_.empty() ? std::string(slm::to_string(code_)) : message_;
  }

  // Prefix the message with where it happened: "file.safetensors: " + message. An empty
  // message becomes the code's name first, so the result never ends in a bare "where: ".
  status& with_context(std::string_view where) & {
    if (!ok()) message_ = cat(where, ": ", message_.empty() ? slm::to_string(code_) : std::string_view(message_));
    return *this;
  }
  status&& with_context(std::string_view where) && { return std::move(with_context(where)); }

 private:
  errc code_ = errc::ok;
  std::string message_;
};

inline status ok_status() noexcept { return {}; }

template <class... Args>
status make_error(errc code, const Args&... parts) {
  return status(code, cat(parts...));
}

// A value or the error that prevented it. Accessing the value of an error result is a
// precondition violation (checked by assertion in debug builds); test ok() first.
template <class T>
class [[nodiscard]] result {
  static_assert(!std::is_reference_v<T>, "result<T&> is not supported; use a pointer");
  static_assert(!std::is_same_v<std::remove_cv_t<T>, status>, "use status directly");

 public:
  using value_type = T;

  result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  result(status error) : status_(std::move(error)) {  // NOLINT
    if (status_.ok()) status_ = status(errc::invalid_argument, "result built from an ok status without a value");
  }
  result(errc code, std::string message) : status_(code, std::move(message)) {}

  bool ok() const noexcept { return value_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }
  const status& error() const noexcept { return status_; }
  errc code() const noexcept { return status_.code(); }
  const std::string& message() const noexcept { return status_.message(); }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

  template <class U>
  T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }

  // Take the error out (for propagation into a result of another type).
  status take_error() && { return std::move(status_); }

  result& with_context(std::string_view where) & {
    status_.with_context(where);
    return *this;
  }
  result&& with_context(std::string_view where) && { return std::move(with_context(where)); }

 private:
  std::optional<T> value_;
  status status_;
};

}  // namespace slm

// Propagate an error: SLM_TRY(expr) returns the status of `expr` from the enclosing
// function if it failed. Works for status and result<T> returns alike.
// An lvalue is checked in place; a temporary is held by value, so that
// `SLM_TRY(make().with_context("x"))` (an xvalue into a dying temporary) stays valid.
// (Through overloads, not decltype((expr)): clang 14 crashes reading a decltype of an
// expression with a lambda back from a precompiled header.)
#define SLM_TRY(expr)                                                                 \
  do {                                                                                \
    auto slm_try_held_ = ::slm::detail::try_hold(expr);                               \
    if (!slm_try_held_.get().ok()) return ::slm::detail::as_status(slm_try_held_.get()); \
  } while (0)

namespace slm::detail {
// SLM_TRY's operand: a reference to an lvalue, the value of a temporary (moved out of it
// before the temporary dies). get() gives the lvalue as an lvalue (copied into the error
// returned), the held value as an rvalue (moved).
template <class T>
struct try_held {
  T value;
  T&& get() noexcept { return static_cast<T&&>(value); }
};
template <class T>
struct try_held<T&> {
  T* ptr;
  T& get() noexcept { return *ptr; }
};
template <class T>
try_held<T&> try_hold(T& v) noexcept { return {&v}; }
template <class T>
  requires(!std::is_lvalue_reference_v<T>)
try_held<std::remove_cvref_t<T>> try_hold(T&& v) { return {static_cast<T&&>(v)}; }
inline status as_status(const status& s) { return s; }
inline status as_status(status&& s) { return std::move(s); }
template <class T>
status as_status(const result<T>& r) { return r.error(); }
template <class T>
status as_status(result<T>&& r) { return std::move(r).take_error(); }
}  // namespace slm::detail
