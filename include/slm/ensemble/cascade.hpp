// slm/ensemble/cascade.hpp - a cascade of members with a confidence threshold and early exit.
//
// Members answer one after another in the order given (cheapest or most likely first), and
// the cascade stops as soon as it has an answer it can trust:
//   * confident: the member that just answered has confidence >= confidence_threshold;
//   * agreement: it gives the same answer (normalise_answer: trimmed, optionally case-folded)
//     as an earlier member and both confidences are >= agreement_threshold - the first
//     ones agree with high confidence, so the rest are skipped;
//   * exhausted: every member answered; the most confident answer wins.
// Confidence is answer::confidence(measure): exp(mean token log-prob) by default (the
// geometric-mean token probability), or exp(min token log-prob). Thresholds are in [0, 1]
// to be reachable; 0 exits after the first member, anything above 1 never exits on that rule.
// Ties go to the earlier member.
//
//   auto r = cascade(members, "int main() {\n  return", {}, cx);   // result<cascade_result>
//   r->text(); r->exit; r->steps[r->winner].name;
#pragma once
#include "slm/core/build_mode.hpp"

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

struct cascade_options {
  double confidence_threshold = 0.8;  // one answer at least this confident ends the cascade
  double agreement_threshold = 0.5;   // two equal answers at least this confident end it
  confidence_measure measure = confidence_measure::mean_token_prob;
  bool case_fold = false;             // answers that differ in ASCII case agree
  answer_options answer = one_line_answer();
};

enum class cascade_exit : std::uint8_t { confident, agreement, exhausted };

constexpr std::string_view to_string(cascade_exit e) noexcept {
  switch (e) {
    case cascade_exit::confident: return "confident";
    case cascade_exit::agreement: return "agreement";
    case cascade_exit::exhausted: return "exhausted";
  }
  return "?";
}

struct cascade_step {
  std::size_t member = 0;    // index into the members given
  std::string_view name;     // the member's name
  answer reply;
  double confidence = 0;     // reply.confidence(measure)
};

struct cascade_result {
  std::vector<cascade_step> steps;  // the members that ran, in order
  cascade_exit exit = cascade_exit::exhausted;
  std::size_t winner = 0;           // index into steps
  std::size_t agreed_with = 0;      // exit == agreement: the earlier step it agreed with

  const cascade_step& winning() const { return steps[winner]; }
  std::string_view text() const { return steps[winner].reply.text; }
};

status validate(const cascade_options& o);

result<cascade_result> cascade(std::span<const member_ref> members, std::string_view prompt,
                                      const cascade_options& o, compute_context& cx);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE status validate(const cascade_options& o) {
  const auto check = [](double t, std::string_view what) -> status {
    if (std::isnan(t) || t < 0)
      return make_error(errc::invalid_argument, "cascade_options: ", what, " ", t,
                        " must be a number >= 0 (0: always; above 1: never)");
    return {};
  };
  SLM_TRY(check(o.confidence_threshold, "confidence_threshold"));
  return check(o.agreement_threshold, "agreement_threshold");
}

SLM_INLINE result<cascade_result> cascade(std::span<const member_ref> members, std::string_view prompt,
                                      const cascade_options& o, compute_context& cx) {
  if (members.empty()) return make_error(errc::invalid_argument, "cascade: no members");
  SLM_TRY(validate(o));
  if (prompt.empty()) return make_error(errc::invalid_argument, "cascade: the prompt is empty");
  for (const member_ref& m : members) SLM_TRY(detail::check_member(m, "cascade: member"));

  cascade_result r;
  std::vector<std::string> normalised;
  for (std::size_t i = 0; i < members.size(); ++i) {
    auto a = member_answer(members[i], prompt, o.answer, cx);
    if (!a.ok()) return std::move(a).take_error().with_context("cascade");
    const double c = a->confidence(o.measure);
    normalised.push_back(normalise_answer(a->text, o.case_fold));
    r.steps.push_back({i, members[i].name, std::move(*a), c});
    const std::size_t now = r.steps.size() - 1;
    if (c >= o.confidence_threshold) {
      r.exit = cascade_exit::confident;
      r.winner = now;
      return r;
    }
    if (c >= o.agreement_threshold)
      for (std::size_t j = 0; j < now; ++j)
        if (r.steps[j].confidence >= o.agreement_threshold && normalised[j] == normalised[now]) {
          r.exit = cascade_exit::agreement;
          r.agreed_with = j;
          r.winner = c > r.steps[j].confidence ? now : j;
          return r;
        }
  }
  r.exit = cascade_exit::exhausted;
  for (std::size_t j = 1; j < r.steps.size(); ++j)
    if (r.steps[j].confidence > r.steps[r.winner].confidence) r.winner = j;
  return r;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
