// slm/io/config_reader.hpp - one strict reader of the fields of a model's config.json, for
// every family's config parser (models/hf/config.hpp, models/nam56r/model.hpp,
// models/nanochat/model.hpp).
//
// An absent key, or one set to null, keeps the caller's default unless the field is
// required. A present value of the wrong type or out of range is refused, never read as
// something else: 128.5 is not a size, "128" is not a number, 1e30 is not a size either.
// Every refusal is errc::format_error with a message that names the file (`source`) and
// the key, so a user knows what to fix:
//   config.json: "hidden_size" is missing
//   NAM56R config.json: "activation" is "relu", expected one of "gelu"
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/io/json.hpp"

namespace slm {

struct config_reader {
  static constexpr std::uint64_t max_size = std::uint64_t{1} << 40;

  const json::value& cfg;
  std::string_view source = "config.json";  // names the file in every error

  // A non-negative integer (an integral double such as 4096.0 counts) no larger than max.
  status size(std::string_view key, std::size_t& out, bool required = false, std::uint64_t max = max_size) const;
  // A required size that is not 0.
  status positive(std::string_view key, std::size_t& out) const;
  // A finite number.
  status number(std::string_view key, double& out, bool required = false) const;
  status number(std::string_view key, float& out, bool required = false) const;
  status boolean(std::string_view key, bool& out) const;
  status string(std::string_view key, std::string& out, bool required = false) const;
  // A string among `allowed`.
  status choice(std::string_view key, std::string& out, std::initializer_list<std::string_view> allowed) const;
  // A list of sizes, each no larger than max.
  status sizes(std::string_view key, std::vector<std::size_t>& out, bool required, std::uint64_t max) const;
  // A list of exactly n strings (one per layer); the views point into cfg.
  status strings(std::string_view key, std::size_t n, std::vector<std::string_view>& out) const;

  // The value of key, or nullptr when it is absent or null (an error when required).
  result<const json::value*> find(std::string_view key, bool required) const;
  // An error naming the source and the key: `<source>: "<key>" <says>`.
  status refuse(std::string_view key, std::string_view says) const;
};

// ---- Implementation (compiled once by the io unit in compiled mode) ----

#if SLM_DEFINE_IO

SLM_INLINE status config_reader::refuse(std::string_view key, std::string_view says) const {
  return make_error(errc::format_error, source, ": \"", key, "\" ", says);
}

SLM_INLINE result<const json::value*> config_reader::find(std::string_view key, bool required) const {
  const json::value* v = cfg.find(key);
  if (v && !v->is_null()) return v;
  if (required) return refuse(key, "is missing");
  return static_cast<const json::value*>(nullptr);
}

SLM_INLINE status config_reader::size(std::string_view key, std::size_t& out, bool required,
                                      std::uint64_t max) const {
  auto v = find(key, required);
  if (!v.ok()) return std::move(v).take_error();
  if (!*v) return {};
  const auto n = (*v)->as_uint64();
  if (!n || *n > max) return refuse(key, cat("is not an integer in [0, ", max, "]"));
  out = static_cast<std::size_t>(*n);
  return {};
}

SLM_INLINE status config_reader::positive(std::string_view key, std::size_t& out) const {
  SLM_TRY(size(key, out, true));
  if (out == 0) return refuse(key, "is 0");
  return {};
}

SLM_INLINE status config_reader::number(std::string_view key, double& out, bool required) const {
  auto v = find(key, required);
  if (!v.ok()) return std::move(v).take_error();
  if (!*v) return {};
  if (!(*v)->is_number() || !std::isfinite((*v)->as_double())) return refuse(key, "is not a finite number");
  out = (*v)->as_double();
  return {};
}

SLM_INLINE status config_reader::number(std::string_view key, float& out, bool required) const {
  double d = out;
  SLM_TRY(number(key, d, required));
  out = static_cast<float>(d);
  return {};
}

SLM_INLINE status config_reader::boolean(std::string_view key, bool& out) const {
  auto v = find(key, false);
  if (!v.ok()) return std::move(v).take_error();
  if (!*v) return {};
  if (!(*v)->is_bool()) return refuse(key, "is not true or false");
  out = (*v)->as_bool();
  return {};
}

SLM_INLINE status config_reader::string(std::string_view key, std::string& out, bool required) const {
  auto v = find(key, required);
  if (!v.ok()) return std::move(v).take_error();
  if (!*v) return {};
  if (!(*v)->is_string()) return refuse(key, "is not a string");
  out = std::string((*v)->as_string());
  return {};
}

SLM_INLINE status config_reader::choice(std::string_view key, std::string& out,
                                        std::initializer_list<std::string_view> allowed) const {
  std::string s = out;
  SLM_TRY(string(key, s));
  for (std::string_view a : allowed)
    if (s == a) {
      out = std::move(s);
      return {};
    }
  std::string list;
  for (std::string_view a : allowed) list += cat(list.empty() ? "" : ", ", "\"", a, "\"");
  return refuse(key, cat("is \"", s, "\", expected one of ", list));
}

SLM_INLINE status config_reader::sizes(std::string_view key, std::vector<std::size_t>& out, bool required,
                                       std::uint64_t max) const {
  auto v = find(key, required);
  if (!v.ok()) return std::move(v).take_error();
  if (!*v) return {};
  if (!(*v)->is_array()) return refuse(key, "is not a list");
  out.clear();
  for (const json::value& e : (*v)->items()) {
    const auto u = e.as_uint64();
    if (!u || *u > max) return refuse(key, cat("holds a value that is not an integer in [0, ", max, "]"));
    out.push_back(static_cast<std::size_t>(*u));
  }
  return {};
}

SLM_INLINE status config_reader::strings(std::string_view key, std::size_t n, std::vector<std::string_view>& out) const {
  auto v = find(key, false);
  if (!v.ok()) return std::move(v).take_error();
  if (!*v) return {};
  if (!(*v)->is_array() || (*v)->size() != n) return refuse(key, cat("is not a list of ", n, " strings (one per layer)"));
  for (const json::value& s : (*v)->items()) {
    if (!s.is_string()) return refuse(key, "holds a non-string");
    out.push_back(s.as_string());
  }
  return {};
}

#endif  // SLM_DEFINE_IO

}  // namespace slm
