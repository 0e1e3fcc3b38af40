// slm/ensemble/heldout.hpp - an ensemble measured and calibrated on held-out files: the
// data layout DIR/<domain>/FILES, the router's accuracy on it, and the fit of the members'
// temperatures and the mixture weights (`slm ensemble route --data`, `slm ensemble
// calibrate`).
//
//   labeled_files(dir)           (domain, path) of every regular file in DIR/<domain>/,
//                                sorted; round_robin() orders them a file per domain in turn
//   route_accuracy               right / total per domain (in the order first seen) and in all
//   route_files(e, files, ...)   the router over labeled files: each routed as a request for
//                                it would be, its best member's domain against its label
//   calibrate(e, files, n, cx)   per member, in config order: the held-out rows of the same
//                                token budget (files in order, each file's ids, until n
//                                tokens), the temperature minimising their NLL
//                                (fit_temperature); then the mixture weights by EM
//                                (fit_mixture_weights) over the calibrated members, when the
//                                members tokenise the files alike (the same number of rows)
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/ensemble/ensemble.hpp"
#include "slm/ensemble/mixing.hpp"
#include "slm/io/mapped_file.hpp"

namespace slm::ensemble {

struct labeled_file {
  std::string label;  // the name of the file's directory under the root
  std::filesystem::path path;
  friend bool operator<(const labeled_file& a, const labeled_file& b) {
    return a.label != b.label ? a.label < b.label : a.path < b.path;
  }
};

// Every regular file of root/<label>/ (one level), sorted by label, then path. A root that
// cannot be listed gives none.
std::vector<labeled_file> labeled_files(const std::filesystem::path& root);
// The paths of sorted labeled files, one per label in turn (label order) until all are
// taken: a token budget over them then samples every domain alike.
std::vector<std::filesystem::path> round_robin(std::span<const labeled_file> files);

struct route_accuracy {
  struct tally {
    std::string label;
    std::size_t right = 0, total = 0;
    double rate() const noexcept { return total ? static_cast<double>(right) / static_cast<double>(total) : 0.0; }
  };
  std::vector<tally> labels;  // in the order first seen
  tally all{"all"};

  void add(std::string_view label, bool right);
};

// Routes each file (read whole, at most 64 MiB) by its content and, unless content_only,
// its name, as a request for that file would be routed, and tallies the best member's
// domain against the file's label (a file without a label is routed but not counted).
// on_file, if set, sees each decision. An error names the file.
result<route_accuracy> route_files(const ensemble& e, std::span<const labeled_file> files, bool content_only,
                                   compute_context& cx,
                                   const std::function<void(const labeled_file&, const route_decision&)>& on_file = {});

struct member_calibration {
  std::string name;
  std::size_t tokens = 0;  // held-out rows scored
  temperature_fit fit;
};
struct calibration {
  std::vector<member_calibration> members;  // config order; stops at the first whose rows differ
  std::optional<weight_fit> weights;        // nullopt when the members tokenise the files differently
};

// See the top of the file. max_tokens >= 2. on_member, if set, sees each member's fit as
// it is done (a member is acquired from the registry in turn, so under a budget one
// member at a time is loaded).
result<calibration> calibrate(const ensemble& e, std::span<const std::filesystem::path> files, std::size_t max_tokens,
                              compute_context& cx,
                              const std::function<void(const member_calibration&)>& on_member = {});

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE std::vector<labeled_file> labeled_files(const std::filesystem::path& root) {
  std::vector<labeled_file> out;
  std::error_code ec;
  for (const auto& d : std::filesystem::directory_iterator(root, ec)) {
    if (!d.is_directory(ec)) continue;
    for (const auto& f : std::filesystem::directory_iterator(d.path(), ec))
      if (f.is_regular_file(ec)) out.push_back(labeled_file{d.path().filename().string(), f.path()});
  }
  std::sort(out.begin(), out.end());
  return out;
}

SLM_INLINE std::vector<std::filesystem::path> round_robin(std::span<const labeled_file> files) {
  std::vector<std::vector<std::filesystem::path>> by_label;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (i == 0 || files[i].label != files[i - 1].label) by_label.emplace_back();
    by_label.back().push_back(files[i].path);
  }
  std::vector<std::filesystem::path> out;
  for (std::size_t k = 0, added = 1; added; ++k) {
    added = 0;
    for (const auto& l : by_label)
      if (k < l.size()) out.push_back(l[k]), ++added;
  }
  return out;
}

SLM_INLINE void route_accuracy::add(std::string_view label, bool right) {
  auto it = std::find_if(labels.begin(), labels.end(), [&](const tally& t) { return t.label == label; });
  if (it == labels.end()) it = labels.insert(labels.end(), tally{std::string(label)});
  for (tally* t : {&*it, &all}) t->right += right, t->total += 1;
}

SLM_INLINE result<route_accuracy> route_files(
    const ensemble& e, std::span<const labeled_file> files, bool content_only, compute_context& cx,
    const std::function<void(const labeled_file&, const route_decision&)>& on_file) {
  route_accuracy acc;
  for (const labeled_file& f : files) {
    auto text = read_text_file(f.path, std::size_t{64} << 20);
    if (!text.ok()) return std::move(text).take_error();
    const std::string name = content_only ? std::string() : f.path.filename().string();
    auto d = e.route(route_request{*text, name}, cx);
    if (!d.ok()) return std::move(d).take_error().with_context(f.path.string());
    if (on_file) on_file(f, *d);
    if (!f.label.empty()) acc.add(f.label, e.config().members[d->best()].domain == f.label);
  }
  return acc;
}

SLM_INLINE result<calibration> calibrate(const ensemble& e, std::span<const std::filesystem::path> files,
                                         std::size_t max_tokens, compute_context& cx,
                                         const std::function<void(const member_calibration&)>& on_member) {
  if (max_tokens < 2) return make_error(errc::invalid_argument, "calibrate: a budget of ", max_tokens, " tokens (at least 2)");
  const auto& members = e.config().members;
  calibration c;
  std::vector<double> log_probs;  // [tokens, members] at each member's fitted temperature
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto held = e.members().acquire(i);
    if (!held.ok()) return std::move(held).take_error();
    const member_ref m = (*held)->view();
    heldout_rows rows;
    rows.vocab = std::min(m.model->vocab(), m.tok->vocab_size());
    // The same token budget per member: files in order, each file's ids, until the cap
    // (members sharing a tokenizer then score exactly the same tokens).
    for (const auto& f : files) {
      if (rows.size() + 1 >= max_tokens) break;
      auto text = read_text_file(f, std::size_t{64} << 20);
      if (!text.ok()) return std::move(text).take_error();
      auto ids = m.tok->encode(*text);
      if (!ids.ok()) return std::move(ids).take_error();
      const std::size_t take = std::min(ids->size(), max_tokens - rows.size());
      if (take < 2) continue;
      SLM_TRY(rows.append(*m.model, std::span<const std::int32_t>(ids->data(), take), cx));
    }
    auto fit = fit_temperature(rows);
    if (!fit.ok()) return std::move(fit).take_error();
    c.members.push_back(member_calibration{members[i].name, rows.size(), *fit});
    if (on_member) on_member(c.members.back());
    if (i == 0) log_probs.assign(rows.size() * members.size(), 0.0);
    if (rows.size() != c.members.front().tokens) return c;  // no mixture weights
    rows.target_log_probs(fit->temperature, i, members.size(), log_probs);
  }
  auto w = fit_mixture_weights(log_probs, members.size());
  if (!w.ok()) return std::move(w).take_error();
  c.weights = std::move(*w);
  return c;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
