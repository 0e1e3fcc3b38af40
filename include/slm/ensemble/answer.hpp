// slm/ensemble/answer.hpp - one member's answer to a prompt, with how sure it was.
//
// The building block of the sequence-level strategies (cascade.hpp, vote.hpp, refine.hpp):
// a member generates from a prompt text and every generated token keeps its log-probability
// under the member's calibrated distribution, softmax(logits / member_ref::temperature),
// computed in double from the row the token was sampled from. (That is the model's belief,
// whatever the sampler's own temperature or truncation: a greedy and a sampled answer are
// scored alike, and a member's fitted temperature makes confidences comparable across
// members.)
//
//   auto a = member_answer(m, "int main() {\n  return", one_line_answer(), cx);  // result<answer>
//   a->text; a->tokens; a->token_logprobs; a->confidence();   // exp(mean log-prob)
//
// The prompt is encoded as `slm run --prompt` does: special tokens written in the text
// count, and the tokenizer's post-processor adds what it adds (the shipped tokenizer: BOS).
// score_continuation() is the other half: log-probs of a given continuation, one forward.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/text/detokenizer.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/generate/scoring.hpp"
#include "slm/generate/generator.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/core/status.hpp"
#include "slm/text/stop_strings.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm::ensemble {

struct answer_options {
  std::size_t max_new_tokens = 64;
  std::vector<std::string> stop_strings;   // e.g. {"\n"} for a one-line answer
  std::vector<std::int32_t> stop_tokens;   // besides the tokenizer's EOS
  bool stop_at_eos = true;                 // the tokenizer's EOS ends the answer
  sampler_config sampling = greedy();      // greedy unless told otherwise
  session_options session;                 // for the member's fresh session

  static sampler_config greedy() {
    sampler_config c;
    c.temperature = 0.0f;
    return c;
  }
};

// A one-line, greedy answer: what discrete questions (vote, cascade) ask for.
answer_options one_line_answer(std::size_t max_new_tokens = 32);

// How sure a member was of a whole answer, from its token probabilities:
//   mean_token_prob: exp(mean log-prob) - the geometric mean of the token probabilities
//                    (length-neutral: a long answer is not penalised per token);
//   min_token_prob:  exp(min log-prob) - the weakest token (one guess spoils the answer).
enum class confidence_measure : std::uint8_t { mean_token_prob, min_token_prob };

constexpr std::string_view to_string(confidence_measure m) noexcept {
  return m == confidence_measure::mean_token_prob ? "mean token probability" : "min token probability";
}

struct answer {
  std::string text;                    // up to a stop string, if one ended it
  std::vector<std::int32_t> tokens;    // generated and fed, in the member's tokenisation (the
                                       // token that completed a stop string is among them)
  std::vector<double> token_logprobs;  // aligned with tokens: log p(token | prompt, tokens before)
  std::int32_t stop_token = -1;        // the stop token that ended it (not fed), or -1
  double stop_token_logprob = 0;       // its log-prob, when stop_token >= 0
  stop_reason reason = stop_reason::max_tokens;
  std::size_t prompt_tokens = 0;
  double seconds = 0;                  // wall time: session, prefill and generation

  // Over the answer's tokens and the stop token that ended it, if any: deciding that the
  // answer ends is part of the answer. 0 when nothing was scored (no tokens, no stop).
  double mean_logprob() const noexcept {
    double sum = 0;
    for (double l : token_logprobs) sum += l;
    const std::size_t n = token_logprobs.size() + (stop_token >= 0);
    if (stop_token >= 0) sum += stop_token_logprob;
    return n ? sum / static_cast<double>(n) : 0.0;
  }
  double min_logprob() const noexcept {
    double m = stop_token >= 0 ? stop_token_logprob : 0.0;
    for (double l : token_logprobs) m = std::min(m, l);
    return m;
  }
  double confidence(confidence_measure m = confidence_measure::mean_token_prob) const noexcept {
    return std::exp(m == confidence_measure::mean_token_prob ? mean_logprob() : min_logprob());
  }
};

// The mean of log-probs; 0 for none (an empty text is certain).
inline double mean_of(std::span<const double> logprobs) noexcept {
  double sum = 0;
  for (double l : logprobs) sum += l;
  return logprobs.empty() ? 0.0 : sum / static_cast<double>(logprobs.size());
}

// Answers compared as the same answer: surrounding whitespace trimmed, and with case_fold
// ASCII letters lower-cased (code answers are byte strings; no Unicode case folding).
std::string normalise_answer(std::string_view s, bool case_fold = false);

// log softmax(row / temperature) at `id`, and at the row's top choice, in double.
struct token_logprob {
  double logprob = 0;  // of the token
  double top = 0;      // of the most likely token (>= logprob)
};
token_logprob log_softmax_at(std::span<const float> row, std::int32_t id, float temperature);

namespace detail {

status check_member(const member_ref& m, std::string_view what);

// The rows a member's distribution is over: a padded head's extra rows are never tokens.
inline std::size_t scored_rows(const member_ref& m) { return std::min(m.model->vocab(), m.tok->vocab_size()); }

status check_finite(const token_logprob& l, const member_ref& m, std::size_t at);

}  // namespace detail

// The prompt's ids in the member's tokenisation, as `slm run --prompt` encodes it.
result<std::vector<std::int32_t>> encode_prompt(const member_ref& m, std::string_view prompt);

// Generates from prompt ids already in the member's tokenisation (what refine.hpp's
// rewrite needs). A hand loop around generator<member_session>: each token's row is kept
// until the token is known, for its log-prob; stop rules as generator::generate.
result<answer> member_answer_ids(const member_ref& m, std::span<const std::int32_t> prompt,
                                        const answer_options& o, compute_context& cx);

// One member's answer to a prompt text.
result<answer> member_answer(const member_ref& m, std::string_view prompt, const answer_options& o,
                                    compute_context& cx);

// Log-probs of `continuation` after `prompt` (both in the member's tokenisation) under the
// member's calibrated distribution: one forward over prompt + continuation but its last
// token, keeping the continuation's rows. Also each row's top log-prob (refine.hpp's gap rule).
struct continuation_scores {
  std::vector<double> logprobs;      // [continuation.size()]
  std::vector<double> top_logprobs;  // [continuation.size()]
};
result<continuation_scores> score_continuation(const member_ref& m, std::span<const std::int32_t> prompt,
                                                      std::span<const std::int32_t> continuation,
                                                      compute_context& cx, const session_options& so = {});

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE answer_options one_line_answer(std::size_t max_new_tokens) {
  answer_options o;
  o.max_new_tokens = max_new_tokens;
  o.stop_strings = {"\n"};
  return o;
}

SLM_INLINE std::string normalise_answer(std::string_view s, bool case_fold) {
  constexpr std::string_view space = " \t\n\r\f\v";
  const std::size_t b = s.find_first_not_of(space);
  if (b == std::string_view::npos) return {};
  std::string out(s.substr(b, s.find_last_not_of(space) + 1 - b));
  if (case_fold)
    for (char& c : out)
      if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

SLM_INLINE token_logprob log_softmax_at(std::span<const float> row, std::int32_t id, float temperature) {
  const double scale = 1.0 / static_cast<double>(temperature);
  const double lse = log_sum_exp(row, scale);  // log sum exp(x / T)
  const double top = scale * static_cast<double>(row[row_argmax(row)]);
  return {scale * static_cast<double>(row[static_cast<std::size_t>(id)]) - lse, top - lse};
}

SLM_INLINE status detail::check_member(const member_ref& m, std::string_view what) {
  if (!m.model || !m.tok)
    return make_error(errc::invalid_argument, what, " '", m.name, "' has no ", !m.model ? "model" : "tokenizer");
  if (!std::isfinite(m.temperature) || !(m.temperature > 0.0f))
    return make_error(errc::invalid_argument, what, " '", m.name, "': temperature ", m.temperature,
                      " must be a finite number > 0");
  return {};
}

SLM_INLINE status detail::check_finite(const token_logprob& l, const member_ref& m, std::size_t at) {
  if (std::isfinite(l.logprob) && std::isfinite(l.top)) return {};
  return make_error(errc::invalid_argument, "member '", m.name, "': the logits at position ", at,
                    " hold a non-number (log-prob ", l.logprob, ")");
}

SLM_INLINE result<std::vector<std::int32_t>> encode_prompt(const member_ref& m, std::string_view prompt) {
  SLM_TRY(detail::check_member(m, "member"));
  if (prompt.empty()) return make_error(errc::invalid_argument, "the prompt is empty");
  auto ids = m.tok->encode(prompt);
  if (!ids.ok()) return std::move(ids).take_error().with_context(cat("member '", m.name, "'"));
  if (ids->empty()) return make_error(errc::invalid_argument, "the prompt encodes to no tokens for member '", m.name, "'");
  return ids;
}

SLM_INLINE result<answer> member_answer_ids(const member_ref& m, std::span<const std::int32_t> prompt,
                                        const answer_options& o, compute_context& cx) {
  const auto t0 = std::chrono::steady_clock::now();
  SLM_TRY(detail::check_member(m, "member"));
  if (prompt.empty()) return make_error(errc::invalid_argument, "member '", m.name, "': the prompt has no tokens");
  if (o.max_new_tokens == 0) return make_error(errc::invalid_argument, "answer_options: max_new_tokens must be >= 1");
  std::vector<std::int32_t> stops = o.stop_tokens;
  if (o.stop_at_eos && m.tok->specials().eos >= 0) stops.push_back(m.tok->specials().eos);

  generator<member_session> gen(m.model->new_session(o.session), m.tok, m.model->vocab(), o.sampling);
  SLM_TRY(gen.validate());
  if (status s = gen.prefill(prompt, cx); !s.ok()) return std::move(s).with_context(cat("member '", m.name, "'"));

  answer a;
  a.prompt_tokens = prompt.size();
  const std::size_t rows = detail::scored_rows(m);
  detokenizer detok(*m.tok);
  stop_strings stop_text(o.stop_strings);
  std::vector<float> row;
  a.reason = stop_reason::max_tokens;
  for (std::size_t i = 0; i < o.max_new_tokens; ++i) {
    if (gen.session().position() + 1 > gen.session().max_tokens()) {
      a.reason = stop_reason::context_full;
      break;
    }
    row.assign(gen.logits().begin(), gen.logits().begin() + static_cast<std::ptrdiff_t>(rows));
    auto id = gen.step(cx, stops);  // feeds the token unless it is a stop token
    if (!id.ok()) return std::move(id).take_error().with_context(cat("member '", m.name, "': token ", i));
    const token_logprob l = log_softmax_at(row, *id, m.temperature);
    SLM_TRY(detail::check_finite(l, m, prompt.size() + i));
    if (std::find(stops.begin(), stops.end(), *id) != stops.end()) {
      a.reason = stop_reason::stop_token;
      a.stop_token = *id;
      a.stop_token_logprob = l.logprob;
      break;
    }
    a.tokens.push_back(*id);
    a.token_logprobs.push_back(l.logprob);
    auto piece = detok.push(*id);
    if (!piece.ok()) return std::move(piece).take_error();
    a.text += stop_text.push(*piece);
    if (stop_text.stopped()) {
      a.reason = stop_reason::stop_string;
      break;
    }
  }
  if (a.reason != stop_reason::stop_string) {
    a.text += stop_text.push(detok.flush());
    if (stop_text.stopped()) a.reason = stop_reason::stop_string;
    else a.text += stop_text.flush();
  }
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

SLM_INLINE result<answer> member_answer(const member_ref& m, std::string_view prompt, const answer_options& o,
                                    compute_context& cx) {
  const auto t0 = std::chrono::steady_clock::now();
  auto ids = encode_prompt(m, prompt);
  if (!ids.ok()) return std::move(ids).take_error();
  auto a = member_answer_ids(m, *ids, o, cx);
  if (a.ok()) a->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return a;
}

SLM_INLINE result<continuation_scores> score_continuation(const member_ref& m, std::span<const std::int32_t> prompt,
                                                      std::span<const std::int32_t> continuation,
                                                      compute_context& cx, const session_options& so) {
  SLM_TRY(detail::check_member(m, "member"));
  if (prompt.empty()) return make_error(errc::invalid_argument, "member '", m.name, "': the prompt has no tokens");
  continuation_scores out;
  const std::size_t n = continuation.size();
  if (n == 0) return out;
  const std::size_t V = m.model->vocab(), rows = detail::scored_rows(m);
  for (std::size_t i = 0; i < n; ++i)
    if (continuation[i] < 0 || static_cast<std::size_t>(continuation[i]) >= rows)
      return make_error(errc::out_of_range, "member '", m.name, "': continuation token ", continuation[i], " at index ",
                        i, " is outside the vocabulary [0, ", rows, ")");
  std::vector<std::int32_t> ids(prompt.begin(), prompt.end());
  ids.insert(ids.end(), continuation.begin(), continuation.end() - 1);
  member_session s = m.model->new_session(so);
  if (ids.size() > s.max_tokens())
    return make_error(errc::out_of_range, "member '", m.name, "': prompt and continuation are ", ids.size() + 1,
                      " tokens; the context holds ", s.max_tokens());
  std::vector<float> logits(n * V);
  // [P + n - 1 ids] -> the last n rows: row j is the distribution of continuation[j].
  if (status st = s.forward(ids, n, logits.data(), cx); !st.ok()) return std::move(st).with_context(cat("member '", m.name, "'"));
  out.logprobs.resize(n);
  out.top_logprobs.resize(n);
  for (std::size_t j = 0; j < n; ++j) {
    const token_logprob l = log_softmax_at(std::span<const float>(logits.data() + j * V, rows), continuation[j], m.temperature);
    SLM_TRY(detail::check_finite(l, m, prompt.size() + j));
    out.logprobs[j] = l.logprob;
    out.top_logprobs[j] = l.top;
  }
  return out;
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
