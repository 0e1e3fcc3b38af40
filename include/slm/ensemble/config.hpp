// slm/ensemble/config.hpp - ensemble.json: which members, which router, which strategy.
//
// Schema, "format_version": 1 (paths are relative to the directory of the json file):
//
//   {
//     "format_version": 1,                       required; only 1 exists
//     "memory_budget_bytes": 0,                  optional; bytes (integer >= 0, 0 = unlimited)
//                                                or a string "24MB" / "6MiB" / "512kB" / "1.5GB"
//                                                (SI units are powers of 1000, IEC ones of 1024)
//     "members": [                               required, at least one
//       {"name": "cpp",                          required, unique, non-empty
//        "domain": "cpp",                        optional label the routers emit (default: name)
//        "path": "nam56r-cpp-14m",               required: a directory holding config.json
//        "tokenizer": "x/tokenizer.json",        optional (default: the member directory's)
//        "temperature": 1.0,                     optional, in [1e-6, 1e6] (default 1)
//        "description": "..."}                   optional
//     ],
//     "router": {                                required
//       "kind": "rules" | "classifier" | "perplexity" | "model",
//       "default": "cpp",                        optional: the member used when nothing matches
//       "rules": [...],                          kind rules only: kept as json for the router
//       "file": "router.safetensors",            kind classifier only (required there)
//       "member": "orchestrator",                kind model only (required there)
//       "cue": "\n// language: "                kind model only: read between prompt and label
//     },
//     "strategy": {                              optional (default {"kind": "top1"})
//       "kind": "top1" | "top2" | "cascade" | "vote" | "refine" | "mix" | "speculative",
//       ... the keys of that kind (allowed_strategy_keys below), kept as json for the
//       strategy code: "threshold": 0.6, "agreement": 0.5, "order": ["cpp", "cmake"], "weights": {"cpp": 0.7},
//       "drafter": "cmake", "target": "cpp", "reviewer": "cpp", "draft_tokens": 4
//     }
//   }
//
// Strict, because a typo must not be silently ignored: an unknown key anywhere is an
// error naming the key and where it is; every name in default / member / order /
// weights / drafter / target / reviewer must be a member's name. Messages carry the json
// path: "ensemble.json: members[1].temperature: must be > 0, got -1". Codes: parse_error
// (malformed json), not_found (a path that does not exist), invalid_argument (the rest).
// Adding a key for a router or strategy kind = adding it to the tables below.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/io/json.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

struct member_spec {
  std::string name;
  std::string domain;                // a label; the routers' output
  std::filesystem::path dir;         // resolved against the json file's directory
  std::filesystem::path tokenizer;   // empty: dir / "tokenizer.json" (with dir's tokenizer_config.json)
  float temperature = 1.0f;          // calibration: logits / temperature before mixing
  std::string description;
};

enum class router_kind : std::uint8_t { rules, classifier, perplexity, model };
enum class strategy_kind : std::uint8_t { top1, top2, cascade, vote, refine, mix, speculative };

constexpr std::string_view to_string(router_kind k) noexcept {
  constexpr std::string_view names[] = {"rules", "classifier", "perplexity", "model"};
  return names[static_cast<std::size_t>(k)];
}
constexpr std::string_view to_string(strategy_kind k) noexcept {
  constexpr std::string_view names[] = {"top1", "top2", "cascade", "vote", "refine", "mix", "speculative"};
  return names[static_cast<std::size_t>(k)];
}

// The keys each kind accepts besides "kind" (json key, and whether its value names
// members: "name" a string member name, "names" an array of them, "weights" an object
// keyed by member names with numbers >= 0, "unit" a number in [0, 1], "count" an integer
// in [1, 64], "any" kept unchecked for the router/strategy code).
enum class key_check : std::uint8_t { name, names, weights, unit, count, any, path, rules, text };
struct key_rule {
  std::string_view key;
  key_check check;
  bool required = false;
};
inline std::span<const key_rule> allowed_router_keys(router_kind k) noexcept {
  static constexpr key_rule rules[] = {{"default", key_check::name}, {"rules", key_check::rules}};
  static constexpr key_rule classifier[] = {{"default", key_check::name}, {"file", key_check::path, true}};
  static constexpr key_rule perplexity[] = {{"default", key_check::name}};
  static constexpr key_rule model[] = {
      {"default", key_check::name}, {"member", key_check::name, true}, {"cue", key_check::text}};
  switch (k) {
    case router_kind::rules: return rules;
    case router_kind::classifier: return classifier;
    case router_kind::perplexity: return perplexity;
    case router_kind::model: return model;
  }
  return {};
}
inline std::span<const key_rule> allowed_strategy_keys(strategy_kind k) noexcept {
  static constexpr key_rule top2[] = {{"weights", key_check::weights}};
  static constexpr key_rule cascade[] = {
      {"threshold", key_check::unit}, {"agreement", key_check::unit}, {"order", key_check::names}};
  static constexpr key_rule vote[] = {{"order", key_check::names}};
  static constexpr key_rule refine[] = {{"drafter", key_check::name, true}, {"reviewer", key_check::name, true}};
  static constexpr key_rule mix[] = {{"weights", key_check::weights}};
  static constexpr key_rule speculative[] = {
      {"drafter", key_check::name, true}, {"target", key_check::name, true}, {"draft_tokens", key_check::count}};
  switch (k) {
    case strategy_kind::top1: return {};
    case strategy_kind::top2: return top2;
    case strategy_kind::cascade: return cascade;
    case strategy_kind::vote: return vote;
    case strategy_kind::refine: return refine;
    case strategy_kind::mix: return mix;
    case strategy_kind::speculative: return speculative;
  }
  return {};
}

struct router_spec {
  router_kind kind = router_kind::rules;
  std::string default_member;   // empty: none
  std::filesystem::path file;   // classifier: resolved path of its safetensors
  std::string member;           // model: the member that routes
  std::optional<std::string> cue;  // model: the text between prompt and label (router_model.hpp)
  json::value rules;            // rules: as written (null when absent), parsed by the router
};

struct strategy_spec {
  strategy_kind kind = strategy_kind::top1;
  json::value params = json::value::make_object();  // the object minus "kind", validated as above
};

// Parses "24MB", "6MiB", "1.5GB", "512kB", "300B", "4096" (bytes): a decimal number, an
// optional space, an optional unit (B, kB/KB, MB, GB, TB = powers of 1000; KiB, MiB,
// GiB, TiB = powers of 1024). Anything else is an error; so is a result beyond 2^62.
result<std::uint64_t> parse_byte_size(std::string_view s);

struct ensemble_config {
  int format_version = 1;
  std::uint64_t memory_budget_bytes = 0;  // 0 = unlimited
  std::vector<member_spec> members;
  router_spec router;
  strategy_spec strategy;
  std::filesystem::path base_dir;  // the json file's directory

  // Index of the member called `name`.
  std::optional<std::size_t> find(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < members.size(); ++i)
      if (members[i].name == name) return i;
    return std::nullopt;
  }

  struct options {
    // Check that member directories (with config.json), tokenizers and router files
    // exist. Off only for tools that validate a config away from its models.
    bool check_paths = true;
    std::size_t max_bytes = 1u << 20;  // the json text
  };

  static result<ensemble_config> load(const std::filesystem::path& file, const options& opt);
  static result<ensemble_config> load(const std::filesystem::path& file) { return load(file, options{}); }

  static result<ensemble_config> parse(std::string_view text, const std::filesystem::path& base_dir,
                                       const options& opt);
  static result<ensemble_config> parse(std::string_view text, const std::filesystem::path& base_dir) {
    return parse(text, base_dir, options{});
  }

  static result<ensemble_config> from_json(const json::value& doc, const std::filesystem::path& base_dir,
                                           const options& opt);
  static result<ensemble_config> from_json(const json::value& doc, const std::filesystem::path& base_dir) {
    return from_json(doc, base_dir, options{});
  }

  // Whether the strategy object gives kind `k` what it needs. A request may run another
  // strategy than the config's kind (request::strategy, `--strategy`): refine and
  // speculative then still take their members from this object, so every request's kind
  // is checked here, not only the config's own: the keys of k's table that the object
  // holds must pass k's rules, and k's required keys must be present.
  status check_strategy(strategy_kind k) const;

 private:
  static status invalid(std::string_view where, std::string_view what) {
    return make_error(errc::invalid_argument, where, ": ", what);
  }
  static status only_keys(const json::value& obj, std::string_view where, std::initializer_list<std::string_view> keys);
  static result<std::string> get_string(const json::value& obj, std::string_view where, std::string_view key,
                                        bool required);

  static result<member_spec> parse_member(const json::value& v, const std::string& where,
                                          const std::filesystem::path& base_dir, const options& opt);

  status check_name(const json::value& v, const std::string& where) const;

  // One key of a router or strategy object against its rule.
  status check_key(const json::value& v, const key_rule& rule, const std::string& where, const options& opt) const;

  // "kind" + the keys its table allows, each checked; required ones present.
  status check_policy_keys(const json::value& obj, std::string_view where, std::string_view kind,
                           std::span<const key_rule> allowed, const options& opt) const;

  template <class Kind, std::size_t N>
  static status parse_kind(const json::value& obj, std::string_view where, const std::string_view (&names)[N], Kind& out) {
    const json::value* k = obj.find("kind");
    if (!k) return invalid(cat(where, ".kind"), "missing");
    std::string list;
    for (std::size_t i = 0; i < N; ++i) {
      if (k->is_string() && k->as_string() == names[i]) {
        out = static_cast<Kind>(i);
        return {};
      }
      list += cat(i ? ", " : "", names[i]);
    }
    return invalid(cat(where, ".kind"), cat("unknown kind ", json::dump(*k), " (known: ", list, ")"));
  }

  status parse_router(const json::value& r, const options& opt);

  status parse_strategy(const json::value& s);
};

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<std::uint64_t> parse_byte_size(std::string_view s) {
  auto bad = [&](std::string_view why) {
    return make_error(errc::invalid_argument, "cannot read \"", s, "\" as a size (", why,
                      "; expected e.g. 24MB, 6MiB or a byte count)");
  };
  std::size_t i = 0;
  std::uint64_t whole = 0, frac = 0, frac_scale = 1;
  bool any_digit = false;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, any_digit = true) {
    if (whole > (std::uint64_t{1} << 62) / 10) return bad("too large");
    whole = whole * 10 + static_cast<std::uint64_t>(s[i] - '0');
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    bool frac_digit = false;
    for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i, frac_digit = true) {
      if (frac_scale >= 1000000000000ull) return bad("too many decimals");
      frac = frac * 10 + static_cast<std::uint64_t>(s[i] - '0');
      frac_scale *= 10;
    }
    if (!frac_digit) return bad("no digit after the decimal point");
  }
  if (!any_digit) return bad("no number");
  const bool spaced = i < s.size() && s[i] == ' ';  // "24 MB"; but not "24 "
  if (spaced) ++i;
  const std::string_view unit = s.substr(i);
  if (spaced && unit.empty()) return bad("a space and no unit");
  struct named_unit {
    std::string_view name;
    std::uint64_t bytes;
  };
  static constexpr named_unit units[] = {
      {"", 1},           {"B", 1},
      {"kB", 1000},      {"KB", 1000},        {"MB", 1000000},         {"GB", 1000000000},
      {"TB", 1000000000000ull},
      {"KiB", 1ull << 10}, {"MiB", 1ull << 20}, {"GiB", 1ull << 30}, {"TiB", 1ull << 40}};
  for (const named_unit& u : units) {
    if (u.name != unit) continue;
    const std::uint64_t limit = std::uint64_t{1} << 62;
    if (whole > limit / u.bytes) return bad("too large");
    // frac / frac_scale of a unit, rounded to the nearest byte (frac_scale <= 1e12,
    // u.bytes <= 2^40: the product is computed in long double to stay exact enough)
    const auto part = static_cast<std::uint64_t>(
        std::llround(static_cast<long double>(frac) * static_cast<long double>(u.bytes) / static_cast<long double>(frac_scale)));
    if (whole * u.bytes > limit - part) return bad("too large");
    if (u.bytes == 1 && frac != 0) return bad("a fraction of a byte");
    return whole * u.bytes + part;
  }
  return bad(cat("unknown unit \"", unit, "\""));
}

SLM_INLINE result<ensemble_config> ensemble_config::load(const std::filesystem::path& file, const options& opt) {
  auto text = read_text_file(file, opt.max_bytes);
  if (!text.ok()) return std::move(text).take_error();
  auto c = parse(*text, file.parent_path(), opt);
  if (!c.ok()) return std::move(c).take_error().with_context(file.string());
  return c;
}

SLM_INLINE result<ensemble_config> ensemble_config::parse(std::string_view text, const std::filesystem::path& base_dir,
                                     const options& opt) {
  json::parse_options po;
  po.max_bytes = opt.max_bytes;
  po.max_depth = 64;
  auto doc = json::parse(text, po);
  if (!doc.ok()) return std::move(doc).take_error();
  return from_json(*doc, base_dir, opt);
}

SLM_INLINE result<ensemble_config> ensemble_config::from_json(const json::value& doc, const std::filesystem::path& base_dir,
                                         const options& opt) {
  ensemble_config c;
  c.base_dir = base_dir;
  if (!doc.is_object()) return invalid("(top level)", cat("must be an object, got ", json::to_string(doc.type())));
  SLM_TRY(only_keys(doc, "(top level)", {"format_version", "memory_budget_bytes", "members", "router", "strategy"}));

  const json::value* fv = doc.find("format_version");
  if (!fv) return invalid("format_version", "missing (this reader knows format_version 1)");
  if (!fv->is_integer() || fv->as_int64() != 1)
    return make_error(errc::unsupported, "format_version: this reader knows 1, got ", json::dump(*fv));

  if (const json::value* b = doc.find("memory_budget_bytes")) {
    if (b->is_string()) {
      auto n = parse_byte_size(b->as_string());
      if (!n.ok()) return std::move(n).take_error().with_context("memory_budget_bytes");
      c.memory_budget_bytes = *n;
    } else if (b->is_integer() && b->as_uint64()) {
      c.memory_budget_bytes = *b->as_uint64();
    } else {
      return invalid("memory_budget_bytes",
                     cat("must be a byte count >= 0 or a string such as \"24MB\", got ", json::dump(*b)));
    }
  }

  const json::value* ms = doc.find("members");
  if (!ms) return invalid("members", "missing");
  if (!ms->is_array() || ms->size() == 0) return invalid("members", "must be a non-empty array");
  for (std::size_t i = 0; i < ms->size(); ++i) {
    auto m = parse_member((*ms)[i], cat("members[", i, "]"), base_dir, opt);
    if (!m.ok()) return std::move(m).take_error();
    if (c.find(m->name))
      return invalid(cat("members[", i, "].name"), cat("'", m->name, "' is already the name of members[",
                                                        *c.find(m->name), "]"));
    c.members.push_back(std::move(*m));
  }

  const json::value* r = doc.find("router");
  if (!r) return invalid("router", "missing");
  SLM_TRY(c.parse_router(*r, opt));

  if (const json::value* s = doc.find("strategy")) SLM_TRY(c.parse_strategy(*s));
  return c;
}

SLM_INLINE status ensemble_config::only_keys(const json::value& obj, std::string_view where, std::initializer_list<std::string_view> keys) {
  for (const json::member& m : obj.members()) {
    bool known = false;
    for (std::string_view k : keys) known = known || m.key == k;
    if (!known) {
      std::string list;
      for (std::string_view k : keys) list += cat(list.empty() ? "" : ", ", k);
      return invalid(where, cat("unknown key \"", m.key, "\" (known: ", list, ")"));
    }
  }
  return {};
}

SLM_INLINE result<std::string> ensemble_config::get_string(const json::value& obj, std::string_view where, std::string_view key,
                                      bool required) {
  const json::value* v = obj.find(key);
  if (!v) {
    if (required) return invalid(cat(where, ".", key), "missing");
    return std::string();
  }
  if (!v->is_string() || v->as_string().empty())
    return invalid(cat(where, ".", key), cat("must be a non-empty string, got ", json::dump(*v)));
  return std::string(v->as_string());
}

SLM_INLINE result<member_spec> ensemble_config::parse_member(const json::value& v, const std::string& where,
                                        const std::filesystem::path& base_dir, const options& opt) {
  if (!v.is_object()) return invalid(where, cat("must be an object, got ", json::to_string(v.type())));
  SLM_TRY(only_keys(v, where, {"name", "domain", "path", "tokenizer", "temperature", "description"}));
  member_spec m;
  auto name = get_string(v, where, "name", true);
  if (!name.ok()) return std::move(name).take_error();
  m.name = std::move(*name);
  auto domain = get_string(v, where, "domain", false);
  if (!domain.ok()) return std::move(domain).take_error();
  m.domain = domain->empty() ? m.name : std::move(*domain);
  auto path = get_string(v, where, "path", true);
  if (!path.ok()) return std::move(path).take_error();
  m.dir = base_dir / *path;
  auto tok = get_string(v, where, "tokenizer", false);
  if (!tok.ok()) return std::move(tok).take_error();
  if (!tok->empty()) m.tokenizer = base_dir / *tok;
  if (const json::value* t = v.find("temperature")) {
    if (!t->is_number()) return invalid(cat(where, ".temperature"), cat("must be a number, got ", json::dump(*t)));
    const double x = t->as_double();
    // Stored as a float that divides logits: below 1e-6 it rounds to zero or turns every
    // logit infinite (the fuzzer found 8e-94, which became 0 in the float).
    if (!(x > 0) || !std::isfinite(x) || x < 1e-6 || x > 1e6)
      return invalid(cat(where, ".temperature"), cat("must be > 0 (and finite, in [1e-6, 1e6]), got ", x));
    m.temperature = static_cast<float>(x);
  }
  if (const json::value* d = v.find("description")) {
    if (!d->is_string()) return invalid(cat(where, ".description"), "must be a string");
    m.description = std::string(d->as_string());
  }
  if (opt.check_paths) {
    std::error_code ec;
    if (!std::filesystem::is_directory(m.dir, ec))
      return make_error(errc::not_found, where, ".path: '", m.dir.string(), "' is not a directory");
    if (!std::filesystem::is_regular_file(m.dir / "config.json", ec))
      return make_error(errc::not_found, where, ".path: '", m.dir.string(), "' has no config.json");
    const auto tf = m.tokenizer.empty() ? m.dir / "tokenizer.json" : m.tokenizer;
    if (!std::filesystem::is_regular_file(tf, ec))
      return make_error(errc::not_found, where, ".tokenizer: '", tf.string(), "' does not exist");
  }
  return m;
}

SLM_INLINE status ensemble_config::check_name(const json::value& v, const std::string& where) const {
  if (!v.is_string()) return invalid(where, cat("must be a member's name, got ", json::dump(v)));
  if (!find(v.as_string())) return invalid(where, cat("no member is called '", v.as_string(), "'"));
  return {};
}

SLM_INLINE status ensemble_config::check_key(const json::value& v, const key_rule& rule, const std::string& where, const options& opt) const {
  switch (rule.check) {
    case key_check::name: return check_name(v, where);
    case key_check::names:
      if (!v.is_array() || v.size() == 0) return invalid(where, "must be a non-empty array of member names");
      for (std::size_t i = 0; i < v.size(); ++i) {
        SLM_TRY(check_name(v[i], cat(where, "[", i, "]")));
        for (std::size_t j = 0; j < i; ++j)
          if (v[j].as_string() == v[i].as_string())
            return invalid(cat(where, "[", i, "]"), cat("'", v[i].as_string(), "' is listed twice"));
      }
      return {};
    case key_check::weights:
      if (!v.is_object() || v.size() == 0) return invalid(where, "must be an object {member name: weight}");
      for (const json::member& m : v.members()) {
        const std::string w = cat(where, ".", m.key);
        if (!find(m.key)) return invalid(w, cat("no member is called '", m.key, "'"));
        if (!m.val.is_number() || !(m.val.as_double() >= 0) || !std::isfinite(m.val.as_double()))
          return invalid(w, cat("must be a finite number >= 0, got ", json::dump(m.val)));
      }
      return {};
    case key_check::unit:
      if (!v.is_number() || !(v.as_double() >= 0 && v.as_double() <= 1))
        return invalid(where, cat("must be a number in [0, 1], got ", json::dump(v)));
      return {};
    case key_check::count:
      if (!v.is_integer() || v.as_int64().value_or(0) < 1 || v.as_int64().value_or(0) > 64)
        return invalid(where, cat("must be an integer in [1, 64], got ", json::dump(v)));
      return {};
    case key_check::path: {
      if (!v.is_string() || v.as_string().empty()) return invalid(where, "must be a non-empty path string");
      std::error_code ec;
      if (opt.check_paths && !std::filesystem::is_regular_file(base_dir / v.as_string(), ec))
        return make_error(errc::not_found, where, ": '", (base_dir / v.as_string()).string(), "' does not exist");
      return {};
    }
    case key_check::rules:
      if (!v.is_array()) return invalid(where, cat("must be an array, got ", json::to_string(v.type())));
      return {};
    case key_check::any: return {};
    case key_check::text:
      if (!v.is_string()) return invalid(where, cat("must be a string, got ", json::to_string(v.type())));
      return {};
  }
  return {};
}

SLM_INLINE status ensemble_config::check_policy_keys(const json::value& obj, std::string_view where, std::string_view kind,
                         std::span<const key_rule> allowed, const options& opt) const {
  for (const json::member& m : obj.members()) {
    if (m.key == "kind") continue;
    const key_rule* rule = nullptr;
    for (const key_rule& r : allowed)
      if (r.key == m.key) rule = &r;
    if (!rule) {
      std::string list;
      for (const key_rule& r : allowed) list += cat(", ", r.key);
      return invalid(where, cat("unknown key \"", m.key, "\" for kind \"", kind, "\" (known: kind", list, ")"));
    }
    SLM_TRY(check_key(m.val, *rule, cat(where, ".", m.key), opt));
  }
  for (const key_rule& r : allowed)
    if (r.required && !obj.find(r.key)) return invalid(cat(where, ".", r.key), cat("missing (kind \"", kind, "\" needs it)"));
  return {};
}

SLM_INLINE status ensemble_config::parse_router(const json::value& r, const options& opt) {
  if (!r.is_object()) return invalid("router", cat("must be an object, got ", json::to_string(r.type())));
  static constexpr std::string_view names[] = {"rules", "classifier", "perplexity", "model"};
  SLM_TRY(parse_kind(r, "router", names, router.kind));
  SLM_TRY(check_policy_keys(r, "router", names[static_cast<std::size_t>(router.kind)],
                            allowed_router_keys(router.kind), opt));
  if (const json::value* d = r.find("default")) router.default_member = std::string(d->as_string());
  if (const json::value* f = r.find("file")) router.file = base_dir / f->as_string();
  if (const json::value* m = r.find("member")) router.member = std::string(m->as_string());
  if (const json::value* c = r.find("cue")) router.cue = std::string(c->as_string());
  if (const json::value* x = r.find("rules")) router.rules = *x;
  return {};
}

SLM_INLINE status ensemble_config::check_strategy(strategy_kind k) const {
  static constexpr std::string_view names[] = {"top1", "top2", "cascade", "vote", "refine", "mix", "speculative"};
  const std::string_view kind = names[static_cast<std::size_t>(k)], own = names[static_cast<std::size_t>(strategy.kind)];
  options o;
  o.check_paths = false;  // strategy keys name members, never files
  for (const key_rule& r : allowed_strategy_keys(k)) {
    const json::value* v = strategy.params.find(r.key);
    if (!v) {
      if (r.required)
        return invalid(cat("strategy \"", kind, "\""),
                       cat("needs strategy.", r.key, ", which the config's strategy (kind \"", own, "\") does not set"));
      continue;
    }
    if (status st = check_key(*v, r, cat("strategy.", r.key), o); !st.ok())
      return std::move(st).with_context(cat("strategy \"", kind, "\""));
  }
  return {};
}

SLM_INLINE status ensemble_config::parse_strategy(const json::value& s) {
  if (!s.is_object()) return invalid("strategy", cat("must be an object, got ", json::to_string(s.type())));
  static constexpr std::string_view names[] = {"top1", "top2", "cascade", "vote", "refine", "mix", "speculative"};
  SLM_TRY(parse_kind(s, "strategy", names, strategy.kind));
  SLM_TRY(check_policy_keys(s, "strategy", names[static_cast<std::size_t>(strategy.kind)],
                            allowed_strategy_keys(strategy.kind), options{}));
  strategy.params = json::value::make_object();
  for (const json::member& m : s.members())
    if (m.key != "kind") strategy.params.set(m.key, m.val);
  return {};
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
