// slm/ensemble/vote.hpp - majority vote over members' discrete answers.
//
// Every member answers (by default one line, greedily); answers are compared after
// normalise_answer (trimmed, optionally ASCII case-folded) and the answer given by the most
// members wins. Ties are broken by the summed confidence of the answer's voters, then by
// member order (the answer whose first voter comes first). An empty answer is an answer
// like any other. The tally is ranked: tally[0] is the winner.
//
//   auto r = majority_vote(members, "int main() {\n  return", {}, cx);   // result<vote_result>
//   r->winner().answer; r->winner().votes();
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

struct vote_options {
  bool case_fold = false;  // answers that differ in ASCII case are the same vote
  confidence_measure measure = confidence_measure::mean_token_prob;  // for the tie-break
  answer_options answer = one_line_answer();
};

struct vote_entry {
  std::string answer;                // normalised
  std::vector<std::size_t> members;  // who gave it, in member order
  double summed_confidence = 0;
  std::size_t votes() const noexcept { return members.size(); }
};

// Ranks normalised answers: votes, then summed confidence, then the first voter's index.
// answers[i] and confidences[i] are member i's.
result<std::vector<vote_entry>> tally_votes(std::span<const std::string> answers,
                                                   std::span<const double> confidences, bool case_fold = false);

struct vote_result {
  std::vector<answer> answers;      // member i's answer
  std::vector<double> confidences;  // member i's confidence (vote_options::measure)
  std::vector<vote_entry> tally;    // ranked; tally[0] won
  const vote_entry& winner() const { return tally.front(); }
};

result<vote_result> majority_vote(std::span<const member_ref> members, std::string_view prompt,
                                         const vote_options& o, compute_context& cx);

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<std::vector<vote_entry>> tally_votes(std::span<const std::string> answers,
                                                   std::span<const double> confidences, bool case_fold) {
  if (answers.empty()) return make_error(errc::invalid_argument, "tally_votes: no answers");
  if (answers.size() != confidences.size())
    return make_error(errc::invalid_argument, "tally_votes: ", answers.size(), " answers but ", confidences.size(),
                      " confidences");
  std::vector<vote_entry> tally;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (std::isnan(confidences[i]))
      return make_error(errc::invalid_argument, "tally_votes: the confidence of answer ", i, " is NaN");
    std::string a = normalise_answer(answers[i], case_fold);
    auto it = std::find_if(tally.begin(), tally.end(), [&](const vote_entry& e) { return e.answer == a; });
    if (it == tally.end()) it = tally.insert(tally.end(), vote_entry{std::move(a), {}, 0.0});
    it->members.push_back(i);
    it->summed_confidence += confidences[i];
  }
  // Entries are in order of their first voter already; a stable sort keeps it as the last key.
  std::stable_sort(tally.begin(), tally.end(), [](const vote_entry& a, const vote_entry& b) {
    if (a.votes() != b.votes()) return a.votes() > b.votes();
    return a.summed_confidence > b.summed_confidence;
  });
  return tally;
}

SLM_INLINE result<vote_result> majority_vote(std::span<const member_ref> members, std::string_view prompt,
                                         const vote_options& o, compute_context& cx) {
  if (members.empty()) return make_error(errc::invalid_argument, "majority_vote: no members");
  if (prompt.empty()) return make_error(errc::invalid_argument, "majority_vote: the prompt is empty");
  for (const member_ref& m : members) SLM_TRY(detail::check_member(m, "majority_vote: member"));
  vote_result r;
  std::vector<std::string> texts;
  for (const member_ref& m : members) {
    auto a = member_answer(m, prompt, o.answer, cx);
    if (!a.ok()) return std::move(a).take_error().with_context("majority_vote");
    r.confidences.push_back(a->confidence(o.measure));
    texts.push_back(a->text);
    r.answers.push_back(std::move(*a));
  }
  auto t = tally_votes(texts, r.confidences, o.case_fold);
  if (!t.ok()) return std::move(t).take_error();
  r.tally = std::move(*t);
  return r;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
