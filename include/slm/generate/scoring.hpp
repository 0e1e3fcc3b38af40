// slm/generate/scoring.hpp - how well a model predicts text: log-softmax, NLL, perplexity
// windows, bits per byte. The one copy of this math that the CLI's `slm perplexity`, the
// ensemble's perplexity router and mixtures, and hosts use.
//
//   log_sum_exp(row, s)        log sum_v exp(s * row[v]), in double (s = 1 / temperature)
//   token_nll(row, id, s)      log_sum_exp(row, s) - s * row[id]: nats to predict `id`
//   score_tokens(m, ids, o, cx) every token after the first predicted once, through fresh
//                              sessions over windows of o.ctx tokens (below), summed into a
//                              score_tally: tokens, NLL, top-1 hits
//   score_tally                nll_per_token, perplexity = exp(nll_per_token), bits_per_byte
//                              = NLL / ln 2 / UTF-8 bytes (comparable across tokenizers)
//
// Windows, as llama.cpp's llama-perplexity and HF's perplexity guide score a text longer
// than the context: windows of ctx tokens start every `stride` tokens, each a fresh session,
// and each counts only the targets no earlier window counted, so a target has at least
// ctx - stride tokens of context where the text has them (stride == ctx: windows overlap by
// the one token the next target needs). A window runs as one batched forward, or in chunks
// of chunk_rows rows through its session when the [rows, vocab] logits must stay small.
//
// Sums are in double: a window of thousands of targets over a vocabulary of 150k rows adds
// terms of very different sizes, and double makes the result independent of the order the
// rows come in (one forward or chunks), up to the logits themselves.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "slm/core/buffer.hpp"
#include "slm/core/status.hpp"
#include "slm/layers/session_options.hpp"

namespace slm {

// log sum_v exp(scale * row[v]) in double. An empty row gives -infinity.
inline double log_sum_exp(std::span<const float> row, double scale = 1.0) noexcept {
  double mx = -std::numeric_limits<double>::infinity();
  for (float v : row) mx = std::max(mx, scale * static_cast<double>(v));
  if (mx == -std::numeric_limits<double>::infinity()) return mx;
  double sum = 0;
  for (float v : row) sum += std::exp(scale * static_cast<double>(v) - mx);
  return mx + std::log(sum);
}

// Nats to predict `target` from one logit row at temperature 1 / scale: -log softmax.
// The caller checks target against the row.
inline double token_nll(std::span<const float> row, std::int32_t target, double scale = 1.0) noexcept {
  return log_sum_exp(row, scale) - scale * static_cast<double>(row[static_cast<std::size_t>(target)]);
}

// The first maximum of a row, as torch.argmax.
inline std::size_t row_argmax(std::span<const float> row) noexcept {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

struct score_tally {
  std::size_t tokens = 0;  // targets scored
  std::size_t top1 = 0;    // targets that were the row's first argmax
  std::uint64_t bytes = 0; // UTF-8 bytes of the text the targets cover (the caller's to set)
  double nll = 0;          // nats, summed over the targets

  void add(const score_tally& o) noexcept { tokens += o.tokens, top1 += o.top1, bytes += o.bytes, nll += o.nll; }
  double nll_per_token() const noexcept { return tokens ? nll / static_cast<double>(tokens) : 0.0; }
  double perplexity() const noexcept { return std::exp(nll_per_token()); }
  double bits_per_byte() const noexcept { return bytes ? nll / std::log(2.0) / static_cast<double>(bytes) : 0.0; }
  double top1_rate() const noexcept { return tokens ? static_cast<double>(top1) / static_cast<double>(tokens) : 0.0; }
};

struct score_options {
  std::size_t ctx = 0;         // tokens per window; 0 or past the session's limit: the session's max_tokens
  std::size_t stride = 0;      // a window starts every `stride` tokens; 0 = ctx / 2 (at least 1)
  std::size_t chunk_rows = 0;  // rows per forward inside a window; 0 = the window in one forward
  std::size_t vocab = 0;       // score over rows [0, vocab) only (a tokenizer smaller than the model's
                               // padded head); 0 = the whole row
  double scale = 1.0;          // 1 / temperature
  session_options session;     // how each window's session is opened
};

// The window plan of score_tokens: calls fn(begin, end, first) for each window [begin, end)
// of n tokens that scores targets [first, end) (row j - begin - 1 of the window predicts
// token j). Returns fn's first error.
template <class Fn>
status for_each_window(std::size_t n, std::size_t ctx, std::size_t stride, Fn&& fn) {
  if (ctx < 2) return make_error(errc::invalid_argument, "scoring: a window of ", ctx, " tokens (at least 2)");
  if (stride == 0 || stride > ctx)
    return make_error(errc::invalid_argument, "scoring: stride ", stride, " is not in [1, ctx = ", ctx, "]");
  for (std::size_t begin = 0, scored_to = 1; scored_to < n;) {
    const std::size_t end = std::min(begin + ctx, n), first = std::max(scored_to, begin + 1);
    SLM_TRY(fn(begin, end, first));
    scored_to = end;
    if (end == n) break;
    begin = std::min(begin + stride, end - 1);  // stride == ctx: one token of overlap
  }
  return {};
}

// Scores every token of ids after the first (see the top of the file). Model: anything with
// vocab() and new_session(session_options) whose session has max_tokens() and
// forward(ids, rows, logits, cx). Ids are checked against the model's rows first.
template <class Model>
result<score_tally> score_tokens(const Model& m, std::span<const std::int32_t> ids, const score_options& o,
                                 compute_context& cx) {
  const std::size_t rows_per_token = m.vocab();
  const std::size_t V = o.vocab ? std::min(o.vocab, rows_per_token) : rows_per_token;
  if (!(o.scale > 0.0) || !std::isfinite(o.scale))
    return make_error(errc::invalid_argument, "scoring: scale ", o.scale, " is not a finite positive number");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= rows_per_token)
      return make_error(errc::out_of_range, "scoring: token id ", ids[i], " (token ", i,
                        ") is outside the model's vocabulary [0, ", rows_per_token, ")");
  const std::size_t limit = m.new_session(o.session).max_tokens();
  const std::size_t ctx = o.ctx && o.ctx <= limit ? o.ctx : limit;
  const std::size_t stride = o.stride ? o.stride : std::max<std::size_t>(1, ctx / 2);
  score_tally t;
  floats logits;
  const status done = for_each_window(ids.size(), ctx, stride, [&](std::size_t begin, std::size_t end, std::size_t first) -> status {
    auto session = m.new_session(o.session);  // every window starts fresh
    const std::size_t n = end - begin;
    // Feeds window tokens [lo, hi) asking for its last `rows` rows, which predict window
    // tokens hi - rows + 1 .. hi (those before `first` or at `end` and past are not scored).
    auto run = [&](std::size_t lo, std::size_t hi, std::size_t rows) -> status {
      SLM_TRY(logits.resize(rows * rows_per_token));
      // [hi - lo] tokens -> [rows, rows_per_token] logits
      SLM_TRY(session.forward(ids.subspan(begin + lo, hi - lo), rows, logits.data(), cx));
      for (std::size_t r = 0; r < rows; ++r) {
        const std::size_t j = begin + hi - rows + r + 1;  // the target row r predicts
        if (j < first || j >= end) continue;
        const std::span<const float> row(logits.data() + r * rows_per_token, V);
        t.nll += token_nll(row, ids[j], o.scale);
        t.top1 += row_argmax(row) == static_cast<std::size_t>(ids[j]);
        t.tokens += 1;
      }
      return {};
    };
    // One forward: the rows from the one predicting `first` to the last (which predicts
    // past the window and is not scored).
    if (o.chunk_rows == 0) return run(0, n, end - first + 1);
    for (std::size_t lo = 0; lo < n; lo += o.chunk_rows) {
      const std::size_t hi = std::min(lo + o.chunk_rows, n);
      SLM_TRY(run(lo, hi, hi - lo));
    }
    return {};
  });
  if (!done.ok()) return done;
  return t;
}

}  // namespace slm
