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
//   score_text(m, tok, text, o, cx)  a text as `slm perplexity` scores a document: encoded
//                              with the tokenizer (its post-processor's tokens; BOS prepended
//                              when it has one and the encoding lacks it; special tokens
//                              written in the text are plain text), every token after the
//                              first scored over the tokenizer's vocabulary, bytes = the
//                              text's UTF-8 bytes
//   score_documents(...)       score_text over documents (io/documents.hpp) into a total and
//                              one tally per document, stopping at a document boundary once
//                              max_tokens targets are scored
//   to_json(tally, name)       the figures as JSON, the keys `slm perplexity --json` writes
//   to_string(tally)           the figures on one line, as `slm perplexity` prints them
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
#include <cstdio>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/core/buffer.hpp"
#include "slm/core/status.hpp"
#include "slm/io/documents.hpp"
#include "slm/io/json.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/text/tokenizer.hpp"

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

// A text scored as a document (see the top of the file). o.vocab 0 is the tokenizer's
// vocabulary (score_tokens bounds it by the model's rows). A text of one token scores no
// target: a tally of zero tokens, with its bytes.
template <class Model>
result<score_tally> score_text(const Model& m, const tokenizer& t, std::string_view text, score_options o,
                               compute_context& cx) {
  encode_options eo;
  eo.add_special_tokens = true;
  eo.parse_special = false;  // the text is data
  auto enc = t.encode(text, eo);
  if (!enc.ok()) return std::move(enc).take_error();
  std::vector<std::int32_t>& ids = *enc;
  const std::int32_t bos = t.specials().bos;
  if (bos >= 0 && (ids.empty() || ids.front() != bos)) ids.insert(ids.begin(), bos);
  if (o.vocab == 0) o.vocab = t.vocab_size();
  score_tally s;
  if (ids.size() >= 2) {
    auto r = score_tokens(m, ids, o, cx);
    if (!r.ok()) return std::move(r).take_error();
    s = *r;
  }
  s.bytes = text.size();
  return s;
}

struct document_score {
  std::string name;
  score_tally score;
};
struct document_scores {
  score_tally total;
  std::vector<document_score> documents;  // those scored, in order
};

// score_text over docs in order, each tally added to the total. Once the total holds
// max_tokens targets the remaining documents are skipped (neither their tokens nor their
// bytes count). on_document, if set, sees each document's score as it is done. An error
// names the document.
template <class Model>
result<document_scores> score_documents(const Model& m, const tokenizer& t, std::span<const document> docs,
                                        const score_options& o, std::size_t max_tokens, compute_context& cx,
                                        const std::function<void(const document_score&)>& on_document = {}) {
  document_scores r;
  for (const document& d : docs) {
    if (r.total.tokens >= max_tokens) break;  // whole documents only
    auto s = score_text(m, t, d.text, o, cx);
    if (!s.ok()) return std::move(s).take_error().with_context(d.name);
    r.total.add(*s);
    r.documents.push_back(document_score{d.name, *s});
    if (on_document) on_document(r.documents.back());
  }
  return r;
}

// {"name" (when not empty), "tokens", "bytes", "nll_sum", "nll_per_token", "ppl",
//  "bits_per_byte", "top1_correct", "top1"}.
json::value to_json(const score_tally& t, std::string_view name = {});

// "tokens N  bytes B  nll X nats/token  ppl P  bits/byte Y  top1 Z%" (README: `slm perplexity`):
// NLL to 6 decimals, perplexity to 4, bits per byte to 6, the top-1 rate in percent to 2.
std::string to_string(const score_tally& t);

// ---- implementation (SLM_DEFINE_TEXT)
#if SLM_DEFINE_TEXT

SLM_INLINE json::value to_json(const score_tally& t, std::string_view name) {
  json::value v = json::value::make_object();
  if (!name.empty()) v.set("name", json::value(std::string(name)));
  v.set("tokens", json::value(t.tokens));
  v.set("bytes", json::value(t.bytes));
  v.set("nll_sum", json::value(t.nll));
  v.set("nll_per_token", json::value(t.nll_per_token()));
  v.set("ppl", json::value(t.perplexity()));
  v.set("bits_per_byte", json::value(t.bits_per_byte()));
  v.set("top1_correct", json::value(t.top1));
  v.set("top1", json::value(t.top1_rate()));
  return v;
}

SLM_INLINE std::string to_string(const score_tally& t) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "tokens %zu  bytes %llu  nll %.6f nats/token  ppl %.4f  bits/byte %.6f  top1 %.2f%%",
                t.tokens, static_cast<unsigned long long>(t.bytes), t.nll_per_token(), t.perplexity(),
                t.bits_per_byte(), 100.0 * t.top1_rate());
  return buf;
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
