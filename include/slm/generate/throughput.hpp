// slm/generate/throughput.hpp - a model's prefill and decode speed on this machine, as
// `slm bench --model` measures it: one fresh session, a synthetic prompt of
// prompt_tokens ids ((i * 7919 + 13) mod vocab: spread over the vocabulary, the same on
// every run) fed as one forward asking for its last row, then gen_tokens greedy steps
// (row_argmax, no sampler), each one forward of one id. The session's context is raised
// to hold them all. Wall-clock time of the forwards only: the model is loaded and its
// weights read before. The work of each phase comes from the compute context's counters:
// the FLOPs of its weight products and the weight bytes they streamed (layers/linear.hpp);
// the memory a session holds, from the size of its saved state.
// summarize() turns repeated runs into a median and a spread.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/generate/scoring.hpp"
#include "slm/layers/session_options.hpp"

namespace slm {

struct throughput {
  std::size_t prompt_tokens = 0, generated = 0;
  double prefill_seconds = 0, decode_seconds = 0;
  std::uint64_t prefill_flops = 0, decode_flops = 0;  // weight products' FLOPs (compute_context::product_flops)
  std::uint64_t prefill_weight_bytes = 0, decode_weight_bytes = 0;  // weight bytes streamed
  // The session's saved state after the last step (KV and indexer caches, recurrent
  // states, history: what a session holds for prompt_tokens + generated tokens); 0 where
  // the session cannot save.
  std::uint64_t session_bytes = 0;

  double prefill_tokens_per_s() const noexcept {
    return prefill_seconds > 0 ? static_cast<double>(prompt_tokens) / prefill_seconds : 0.0;
  }
  double decode_tokens_per_s() const noexcept {
    return decode_seconds > 0 ? static_cast<double>(generated) / decode_seconds : 0.0;
  }
  double decode_bytes_per_token() const noexcept {
    return generated ? static_cast<double>(decode_weight_bytes) / static_cast<double>(generated) : 0.0;
  }
};

// Repeated measurements of one figure: their median, and their spread, (max - min) / median.
struct summary {
  double median = 0, spread = 0;
  std::size_t runs = 0;
};
inline summary summarize(std::vector<double> v) {
  summary s;
  s.runs = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.spread = s.median > 0 ? (v.back() - v.front()) / s.median : 0.0;
  return s;
}

// See the top of the file. Model: vocab() and new_session(session_options) whose session
// has forward(ids, rows, logits, cx). prompt_tokens >= 1.
template <class Model>
result<throughput> measure_throughput(const Model& m, std::size_t prompt_tokens, std::size_t gen_tokens,
                                      session_options so, compute_context& cx) {
  if (prompt_tokens == 0) return make_error(errc::invalid_argument, "throughput: a prompt of 0 tokens");
  const std::size_t V = m.vocab();
  std::vector<std::int32_t> ids(prompt_tokens);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<std::int32_t>((i * 7919 + 13) % V);
  so.max_tokens = std::max(so.max_tokens, prompt_tokens + gen_tokens + 1);
  auto session = m.new_session(so);
  std::vector<float> logits(V);  // [1, V]
  throughput r;
  const std::uint64_t flops0 = cx.product_flops, bytes0 = cx.weight_bytes;
  const auto t0 = std::chrono::steady_clock::now();
  SLM_TRY(session.forward(ids, 1, logits.data(), cx));  // [prompt_tokens] ids -> [1, V]
  const auto t1 = std::chrono::steady_clock::now();
  const std::uint64_t flops1 = cx.product_flops, bytes1 = cx.weight_bytes;
  for (std::size_t i = 0; i < gen_tokens; ++i) {
    const auto next = static_cast<std::int32_t>(row_argmax(std::span<const float>(logits.data(), V)));
    SLM_TRY(session.forward(std::span(&next, 1), 1, logits.data(), cx));  // one id -> [1, V]
  }
  const auto t2 = std::chrono::steady_clock::now();
  r.prompt_tokens = prompt_tokens;
  r.generated = gen_tokens;
  r.prefill_seconds = std::chrono::duration<double>(t1 - t0).count();
  r.decode_seconds = std::chrono::duration<double>(t2 - t1).count();
  r.prefill_flops = flops1 - flops0;
  r.prefill_weight_bytes = bytes1 - bytes0;
  r.decode_flops = cx.product_flops - flops1;
  r.decode_weight_bytes = cx.weight_bytes - bytes1;
  if constexpr (requires { session.save(); }) {
    auto state = session.save();
    if (state.ok()) r.session_bytes = state->size();
  }
  return r;
}

}  // namespace slm
