// slm/ensemble/router_rules.hpp - the rules router: file names, shebangs, content cues.
//
// Four kinds of rule, each naming a label and a pattern:
//   file_name  the request's base name equals the pattern            ("CMakeLists.txt")
//   extension  the base name ends with the pattern, ASCII case folded (".cmake", ".hpp")
//   shebang    the first line is "#!" and names this interpreter     ("sh", "bash"): matches
//              #!/bin/sh, #! /bin/sh -e, #!/usr/bin/env bash, #!/usr/bin/env -S bash -e
//   contains   the first max_scan_bytes of the text contain the pattern (case-sensitive)
// File names, extensions and shebangs are strong evidence: they name the language. A label's
// score is  strong_bonus x (its strong rules' weights) + (its content cues' weights), each
// rule counted once, where strong_bonus = 1 + the sum of every content weight, so any strong
// rule outranks any amount of content evidence; content cues decide when no strong rule
// fires (no-extension headers, pasted snippets), and break ties between strong rules.
// When nothing fires, the default label (rules_options) wins and the reason says so.
//
// Host rules as JSON: an array of objects, each with "label", exactly one of "file_name",
// "extension", "shebang" or "contains" (a non-empty string), and an optional "weight" (a
// positive number, default 1):
//   [{"label": "cmake", "extension": ".cmake"}, {"label": "cpp", "contains": "#include", "weight": 2}]
// Any other key, an unknown label or a wrong type is an invalid_argument naming the rule.
#pragma once
#include "slm/core/build_mode.hpp"

// router.hpp's shared types only, not the perplexity router (and so not the models).
#ifndef SLM_ENSEMBLE_ROUTER_TYPES_ONLY
#define SLM_ENSEMBLE_ROUTER_TYPES_ONLY
#include "slm/ensemble/router.hpp"
#undef SLM_ENSEMBLE_ROUTER_TYPES_ONLY
#else
#include "slm/ensemble/router.hpp"
#endif
#include "slm/io/json.hpp"

namespace slm::ensemble {

enum class rule_kind : std::uint8_t { file_name, extension, shebang, contains };

constexpr std::string_view to_string(rule_kind k) noexcept {
  switch (k) {
    case rule_kind::file_name: return "file_name";
    case rule_kind::extension: return "extension";
    case rule_kind::shebang: return "shebang";
    case rule_kind::contains: return "contains";
  }
  return "unknown";
}

struct route_rule {
  std::string label;
  rule_kind kind = rule_kind::contains;
  std::string pattern;
  double weight = 1.0;
  bool strong() const noexcept { return kind != rule_kind::contains; }
};

struct rules_options {
  std::string default_label;          // when no rule fires; empty: the first label
  std::size_t max_scan_bytes = 8192;  // content cues look at this prefix of the text
};

// The built-in rules for the labels cpp, cmake and shell. Content weights: 3 for cues
// that all but name the language, 2 for strong idioms, 1 for common ones, 0.5 for
// hints that other languages share.
std::vector<route_rule> default_rules();

namespace detail {

inline std::string_view base_name(std::string_view path) noexcept {
  const auto slash = path.find_last_of("/\\");
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool ends_with_folded(std::string_view s, std::string_view suffix) noexcept;

// The interpreter a "#!" first line names: the program's base name, or for env the first
// argument that is not an option ("#!/usr/bin/env -S bash -e" -> "bash"). Empty if none.
std::string_view shebang_interpreter(std::string_view text) noexcept;

}  // namespace detail

class rules_router {
 public:
  // Only the rules whose label is one of `labels` may be given (an error names the rule).
  static result<rules_router> create(std::vector<std::string> labels, std::vector<route_rule> rules, rules_options opt = {});

  // The built-in rules of the labels present (a label they do not know gets none), then
  // the host's rules.
  static result<rules_router> with_defaults(std::vector<std::string> labels, std::vector<route_rule> extra = {}, rules_options opt = {});

  std::span<const std::string> labels() const noexcept { return labels_; }
  std::span<const route_rule> rules() const noexcept { return rules_; }

  result<route_decision> route(const route_request& q) const;

 private:
  rules_router() = default;
  static std::string quoted(std::string_view s);  // one line: newlines shown as \n
  std::vector<std::string> labels_;
  std::vector<route_rule> rules_;
  std::vector<std::size_t> label_of_;  // rules_[i]'s label index
  double strong_bonus_ = 1.0;          // 1 + the sum of the content weights
  std::size_t default_index_ = 0;
  rules_options opt_;
};

static_assert(router<rules_router>);

// A JSON array of rules (the schema in the header comment), checked against `labels`.
result<std::vector<route_rule>> parse_rules(std::string_view json_text, std::span<const std::string> labels);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE std::vector<route_rule> default_rules() {
  std::vector<route_rule> r;
  auto add = [&](const char* label, rule_kind k, const char* pattern, double w) { r.push_back({label, k, pattern, w}); };
  using enum rule_kind;
  for (const char* e : {".cpp", ".cc", ".cxx", ".c++", ".h", ".hpp", ".hh", ".hxx", ".h++", ".ipp", ".tcc", ".inl"})
    add("cpp", extension, e, 1);
  add("cmake", file_name, "CMakeLists.txt", 1);
  add("cmake", extension, ".cmake", 1);
  add("cmake", extension, ".cmake.in", 1);
  for (const char* e : {".sh", ".bash", ".zsh", ".ksh", ".dash", ".postinst", ".preinst", ".postrm", ".prerm", ".config"})
    add("shell", extension, e, 1);
  for (const char* n : {"postinst", "preinst", "postrm", "prerm", ".bashrc", ".profile", ".bash_profile"})
    add("shell", file_name, n, 1);
  for (const char* s : {"sh", "bash", "dash", "ksh", "zsh", "ash", "mksh"}) add("shell", shebang, s, 1);

  for (const char* c : {"#include <", "#include \"", "#pragma once", "std::", "template <", "template<", "namespace "})
    add("cpp", contains, c, 2);
  for (const char* c : {"public:", "private:", "nullptr", "constexpr", "typename ", "#ifndef ", "#endif"}) add("cpp", contains, c, 1);
  for (const char* c : {"::", "};", "/*", "//", "#define "}) add("cpp", contains, c, 0.5);

  for (const char* c : {"cmake_minimum_required(", "CMAKE_", "add_executable(", "add_library(", "target_link_libraries(",
                        "set_target_properties(", ".. variable::", ".. command::", ".. module::", ".. prop_tgt:",
                        ".. cmake-module::"})
    add("cmake", contains, c, 3);
  for (const char* c : {"project(", "find_package(", "endif()", "endforeach()", "endfunction()", "endmacro()", "ENDIF(",
                        "${", "_FOUND", "cmake_policy(", "include_guard(", ":variable:`", ":command:`", ":prop_tgt:`", ":manual:`",
                        ":module:`", ".. versionadded::", ".. versionchanged::"})
    add("cmake", contains, c, 2);
  for (const char* c : {"set(", "SET(", "if(", "IF(", "message(", "list(", "string(", "unset(", "``"}) add("cmake", contains, c, 1);

  for (const char* c : {"esac", "#DEBHELPER#", "set -e", "; then", "; do\n", "\nfi\n", "\n  fi\n", "\n    fi\n"})
    add("shell", contains, c, 3);
  for (const char* c : {"then\n", "$(", "elif ", "done\n", "exit 0", "exit 1", "[ -", " ]; ", "$1", "$@"}) add("shell", contains, c, 2);
  for (const char* c : {"echo ", "export ", "local ", " || ", " && ", "\"$", "2>&1", ">/dev/null"}) add("shell", contains, c, 1);
  return r;
}

SLM_INLINE bool detail::ends_with_folded(std::string_view s, std::string_view suffix) noexcept {
  if (suffix.size() > s.size()) return false;
  const std::string_view tail = s.substr(s.size() - suffix.size());
  for (std::size_t i = 0; i < tail.size(); ++i) {
    auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
    if (lower(tail[i]) != lower(suffix[i])) return false;
  }
  return true;
}

SLM_INLINE std::string_view detail::shebang_interpreter(std::string_view text) noexcept {
  if (text.substr(0, 2) != "#!") return {};
  std::string_view line = text.substr(2, text.find('\n') == std::string_view::npos ? text.size() - 2 : text.find('\n') - 2);
  auto next_word = [&]() {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string_view::npos) return std::string_view{};
    line.remove_prefix(b);
    const auto e = std::min(line.find_first_of(" \t\r"), line.size());
    const std::string_view w = line.substr(0, e);
    line.remove_prefix(e);
    return w;
  };
  std::string_view prog = base_name(next_word());
  if (prog == "env")
    for (prog = next_word(); !prog.empty() && prog.front() == '-'; prog = next_word()) {}
  return prog;
}

SLM_INLINE result<rules_router> rules_router::create(std::vector<std::string> labels, std::vector<route_rule> rules, rules_options opt) {
  SLM_TRY(check_labels(labels));
  rules_router r;
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const route_rule& ru = rules[i];
    const auto li = std::find(labels.begin(), labels.end(), ru.label);
    if (li == labels.end()) return make_error(errc::invalid_argument, "rule ", i, ": unknown label \"", ru.label, "\"");
    if (ru.pattern.empty()) return make_error(errc::invalid_argument, "rule ", i, ": empty ", to_string(ru.kind), " pattern");
    if (!(ru.weight > 0) || !std::isfinite(ru.weight))
      return make_error(errc::invalid_argument, "rule ", i, ": weight ", ru.weight, " is not a positive number");
    r.label_of_.push_back(static_cast<std::size_t>(li - labels.begin()));
    if (!ru.strong()) r.strong_bonus_ += ru.weight;
  }
  if (opt.default_label.empty()) opt.default_label = labels.front();
  const auto di = std::find(labels.begin(), labels.end(), opt.default_label);
  if (di == labels.end()) return make_error(errc::invalid_argument, "rules_router: default label \"", opt.default_label, "\" is not a label");
  r.default_index_ = static_cast<std::size_t>(di - labels.begin());
  r.labels_ = std::move(labels);
  r.rules_ = std::move(rules);
  r.opt_ = std::move(opt);
  return r;
}

SLM_INLINE result<rules_router> rules_router::with_defaults(std::vector<std::string> labels, std::vector<route_rule> extra, rules_options opt) {
  std::vector<route_rule> rules;
  for (auto& ru : default_rules())
    if (std::find(labels.begin(), labels.end(), ru.label) != labels.end()) rules.push_back(std::move(ru));
  for (auto& ru : extra) rules.push_back(std::move(ru));
  return create(std::move(labels), std::move(rules), std::move(opt));
}

SLM_INLINE result<route_decision> rules_router::route(const route_request& q) const {
  const std::string_view name = detail::base_name(q.file_name);
  const std::string_view interp = detail::shebang_interpreter(q.text);
  const std::string_view scan = q.text.substr(0, std::min(q.text.size(), opt_.max_scan_bytes));
  route_decision d;
  d.scores.assign(labels_.size(), 0.0);
  std::vector<double> content(labels_.size(), 0.0);
  std::vector<std::vector<std::string_view>> fired(labels_.size());  // the cues behind each score
  const route_rule* strongest = nullptr;
  for (std::size_t i = 0; i < rules_.size(); ++i) {
    const route_rule& ru = rules_[i];
    bool hit = false;
    switch (ru.kind) {
      case rule_kind::file_name: hit = !name.empty() && name == ru.pattern; break;
      case rule_kind::extension: hit = name.size() > ru.pattern.size() && detail::ends_with_folded(name, ru.pattern); break;
      case rule_kind::shebang: hit = !interp.empty() && interp == ru.pattern; break;
      case rule_kind::contains: hit = scan.find(ru.pattern) != std::string_view::npos; break;
    }
    if (!hit) continue;
    const std::size_t li = label_of_[i];
    if (ru.strong()) {
      d.scores[li] += strong_bonus_ * ru.weight;
      if (!strongest || ru.weight > strongest->weight) strongest = &ru;
    } else {
      content[li] += ru.weight;
      fired[li].push_back(ru.pattern);
    }
  }
  for (std::size_t l = 0; l < labels_.size(); ++l) d.scores[l] += content[l];
  const bool any = std::any_of(d.scores.begin(), d.scores.end(), [](double s) { return s > 0; });
  if (!any) d.scores[default_index_] = 1.0;  // nothing fired
  d.ranking = rank_by_score(d.scores);
  const std::size_t best = d.ranking.front();
  if (!any) {
    d.reason = cat("rules: no rule fired, default label ", labels_[best]);
  } else if (strongest) {
    d.reason = cat("rules: ", to_string(strongest->kind), " \"", strongest->pattern, "\" -> ", labels_[best]);
  } else {
    d.reason = cat("rules: content cues ->", " ", labels_[best]);
    for (std::size_t l = 0; l < labels_.size(); ++l) {
      d.reason += cat(l == 0 ? " (" : ", ", labels_[l], " ", content[l]);
      for (std::size_t k = 0; k < fired[l].size() && k < 3; ++k) d.reason += cat(k == 0 ? ": " : " ", quoted(fired[l][k]));
    }
    d.reason += ")";
  }
  return d;
}

SLM_INLINE std::string rules_router::quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out + "'";
}

SLM_INLINE result<std::vector<route_rule>> parse_rules(std::string_view json_text, std::span<const std::string> labels) {
  auto doc = json::parse(json_text);
  if (!doc.ok()) return std::move(doc).take_error().with_context("rules JSON");
  if (!doc->is_array()) return make_error(errc::invalid_argument, "rules JSON: expected an array of rules, got a ", json::to_string(doc->type()));
  std::vector<route_rule> out;
  for (std::size_t i = 0; i < doc->size(); ++i) {
    const json::value& v = (*doc)[i];
    auto bad = [&](const auto&... what) { return make_error(errc::invalid_argument, "rules JSON: rule ", i, ": ", what...); };
    if (!v.is_object()) return bad("expected an object, got a ", json::to_string(v.type()));
    route_rule r;
    bool have_label = false, have_kind = false;
    for (const json::member& m : v.members()) {
      if (m.key == "label") {
        if (!m.val.is_string()) return bad("\"label\" must be a string");
        r.label = std::string(m.val.as_string());
        if (std::find(labels.begin(), labels.end(), r.label) == labels.end()) return bad("unknown label \"", r.label, "\"");
        have_label = true;
      } else if (m.key == "weight") {
        if (!m.val.is_number() || !(m.val.as_double() > 0)) return bad("\"weight\" must be a positive number");
        r.weight = m.val.as_double();
      } else if (m.key == "file_name" || m.key == "extension" || m.key == "shebang" || m.key == "contains") {
        if (have_kind) return bad("more than one of \"file_name\", \"extension\", \"shebang\", \"contains\"");
        if (!m.val.is_string() || m.val.as_string().empty()) return bad("\"", m.key, "\" must be a non-empty string");
        r.kind = m.key == "file_name"   ? rule_kind::file_name
                 : m.key == "extension" ? rule_kind::extension
                 : m.key == "shebang"   ? rule_kind::shebang
                                        : rule_kind::contains;
        r.pattern = std::string(m.val.as_string());
        have_kind = true;
      } else {
        return bad("unknown key \"", m.key, "\" (expected label, file_name, extension, shebang, contains, weight)");
      }
    }
    if (!have_label) return bad("missing \"label\"");
    if (!have_kind) return bad("missing one of \"file_name\", \"extension\", \"shebang\", \"contains\"");
    out.push_back(std::move(r));
  }
  return out;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
