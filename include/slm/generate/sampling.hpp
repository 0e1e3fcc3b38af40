// slm/generate/sampling.hpp - picking the next token from one row of logits.
//
// sampler::sample() turns a row of logits (one per row of the LM head) and the tokens so
// far (prompt + generated) into a token id. The steps, in this order, which is the order
// of transformers' LogitsProcessor list (processors first, then the warpers temperature,
// top-k, top-p, min-p):
//   1. padding rows   rows at or past vocab_size (padding of the head) are never candidates
//   2. logit bias     logit[id] += bias (-infinity bans the token; repeated ids add up)
//   3. repetition     on each distinct token of the penalty window: logit > 0 ? logit / r
//                     : logit * r (CTRL, Keskar et al. 2019; transformers' rule)
//   4. frequency /    logit -= frequency_penalty * count + presence_penalty * (count > 0),
//      presence      count = occurrences in the penalty window (OpenAI's rule)
//      -- temperature 0 stops here: argmax, the lowest id on ties --
//   5. temperature    logit / T
//   6. top-k          the k largest logits (ties at the boundary: lower id kept)
//   7. softmax        over what is left
//   8. top-p          the smallest set, in order of decreasing probability (ties: lower id
//                     first), whose cumulative probability is >= top_p; at least one token
//   9. min-p          keep p >= min_p * p_max
//  10. renormalize and draw: u = rng.uniform() * total, the first kept token (in increasing
//                     id order) whose cumulative weight exceeds u. The order does not depend
//                     on the standard library's sort, so a seed gives the same tokens on
//                     every platform (up to std::exp's last bit, which differs between math
//                     libraries: a draw changes only when u lands within ~1e-7 of a boundary).
// (transformers has no frequency / presence penalties; they sit with the repetition penalty,
// as in llama.cpp, before any warper.)
// The penalty window is the last penalty_last_n tokens of the history (-1: all of it, 0: no
// penalties). Logits of -infinity are banned tokens; NaN or +infinity in a vocabulary row
// is an error naming the row (never a silent pick); padding rows are not read.
//
// Cost on a 150k vocabulary: one pass to copy and check the row, one to collect
// candidates, nth_element for top-k, top-p by bucketing the weights (only the few
// candidates next to the cut are sorted), one exp per candidate, one pass in id order to
// collect the kept tokens. Scratch lives in the sampler: after the first call nothing is
// allocated (the penalty window aside, when it is the whole, growing history).
//
// rng is xoshiro256** (Blackman and Vigna) seeded through splitmix64: the same seed gives
// the same stream on every platform; state() / set_state() let a saved session continue it.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "slm/core/hash.hpp"
#include "slm/core/status.hpp"

namespace slm {

// xoshiro256** 1.0. Also a UniformRandomBitGenerator (operator(), min(), max()).
class rng {
 public:
  using result_type = std::uint64_t;

  explicit rng(std::uint64_t seed = 0x5eed) noexcept { reseed(seed); }

  // The four state words from splitmix64(seed), as the xoshiro authors recommend.
  void reseed(std::uint64_t seed) noexcept {
    for (auto& w : s_) w = splitmix64(seed);
  }

  std::uint64_t next() noexcept {
    const std::uint64_t out = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return out;
  }

  // [0, 1): the top 53 bits, so every value is a multiple of 2^-53.
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  std::array<std::uint64_t, 4> state() const noexcept { return s_; }
  // An all-zero state (a fixed point of xoshiro, never returned by state()) is replaced
  // by the state of rng(0).
  void set_state(const std::array<std::uint64_t, 4>& s) noexcept {
    if ((s[0] | s[1] | s[2] | s[3]) == 0) reseed(0);
    else s_ = s;
  }

  result_type operator()() noexcept { return next(); }
  static constexpr result_type min() noexcept { return 0; }
  static constexpr result_type max() noexcept { return ~result_type{0}; }

 private:
  static constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  std::array<std::uint64_t, 4> s_{};
};

struct sampler_config {
  float temperature = 1.0f;            // 0 = greedy (argmax, lowest id on ties)
  std::int32_t top_k = 0;              // 0 = off
  float top_p = 1.0f;                  // 1 = off
  float min_p = 0.0f;                  // 0 = off (keep tokens with p >= min_p * p_max)
  float repetition_penalty = 1.0f;     // 1 = off (positive logits / r, negative * r, on tokens in the window)
  float frequency_penalty = 0.0f;      // logit -= frequency_penalty * count
  float presence_penalty = 0.0f;       // logit -= presence_penalty * (count > 0)
  std::int32_t penalty_last_n = 64;    // window over the history for the three penalties; 0 = off, -1 = all
  std::vector<std::pair<std::int32_t, float>> logit_bias;  // added to the logit; -infinity bans a token
  std::uint64_t seed = 0x5eed;
  std::size_t vocab_size = 0;          // rows at or past it are never sampled; 0 = all rows
};

// Checks a configuration against a logit row of `logit_rows` entries.
status validate(const sampler_config& c, std::size_t logit_rows);

// The settings by the names llama.cpp's command line (and slm's) gives them, for a host
// that takes them as text: a command line, a settings field. temp (temperature), top-k,
// top-p, min-p, repeat-penalty (repetition_penalty), frequency-penalty, presence-penalty,
// repeat-last-n (penalty_last_n), seed, and logit-bias "ID=BIAS" (BIAS may be -inf; each
// one is appended to logit_bias).
inline constexpr std::string_view sampling_option_names[] = {
    "temp", "top-k", "top-p", "min-p", "repeat-penalty", "frequency-penalty", "presence-penalty",
    "repeat-last-n", "seed", "logit-bias"};

// Sets the setting `name` (one of sampling_option_names; another is not_found) from
// `value`, read whole as std::from_chars reads it: integers as integers (top-k >= 0,
// repeat-last-n >= -1; a float cast to int is undefined past its range: 1e10, nan), the
// seed as an unsigned 64-bit integer. The error names the setting: "top-k needs an integer
// from 0 to 2147483647, got '1e10'". The settings' ranges are validate()'s to check.
status set_sampling_option(sampler_config& c, std::string_view name, std::string_view value);

#if SLM_DEFINE_TEXT

SLM_INLINE status validate(const sampler_config& c, std::size_t logit_rows) {
  const auto bad = [](auto... parts) { return make_error(errc::invalid_argument, "sampler_config: ", parts...); };
  if (logit_rows == 0) return bad("the logit row is empty");
  if (c.vocab_size > logit_rows)
    return bad("vocab_size ", c.vocab_size, " is larger than the logit row (", logit_rows, " rows)");
  const std::size_t vocab = c.vocab_size ? c.vocab_size : logit_rows;
  if (!std::isfinite(c.temperature) || c.temperature < 0.0f)
    return bad("temperature ", c.temperature, " must be a finite number >= 0 (0 = greedy)");
  if (c.top_k < 0) return bad("top_k ", c.top_k, " must be >= 0 (0 = off)");
  if (!(c.top_p > 0.0f && c.top_p <= 1.0f)) return bad("top_p ", c.top_p, " must be in (0, 1] (1 = off)");
  if (!(c.min_p >= 0.0f && c.min_p <= 1.0f)) return bad("min_p ", c.min_p, " must be in [0, 1] (0 = off)");
  if (!std::isfinite(c.repetition_penalty) || c.repetition_penalty <= 0.0f)
    return bad("repetition_penalty ", c.repetition_penalty, " must be a finite number > 0 (1 = off)");
  if (!std::isfinite(c.frequency_penalty)) return bad("frequency_penalty ", c.frequency_penalty, " must be finite");
  if (!std::isfinite(c.presence_penalty)) return bad("presence_penalty ", c.presence_penalty, " must be finite");
  if (c.penalty_last_n < -1)
    return bad("penalty_last_n ", c.penalty_last_n, " must be >= -1 (-1 = whole history, 0 = off)");
  for (std::size_t i = 0; i < c.logit_bias.size(); ++i) {
    const auto [id, b] = c.logit_bias[i];
    if (id < 0 || static_cast<std::size_t>(id) >= vocab)
      return bad("logit_bias[", i, "]: token id ", id, " is outside the vocabulary [0, ", vocab, ")");
    if (std::isnan(b) || b == std::numeric_limits<float>::infinity())
      return bad("logit_bias[", i, "] (token ", id, "): bias ", b, " must be finite or -infinity (a ban)");
  }
  return {};
}

SLM_INLINE status set_sampling_option(sampler_config& c, std::string_view name, std::string_view value) {
  const char *begin = value.data(), *end = value.data() + value.size();
  const auto whole = [](const char* b, const char* e, auto& v) {
    const auto r = std::from_chars(b, e, v);
    return r.ec == std::errc() && r.ptr == e;
  };
  float* real = name == "temp"                ? &c.temperature
                : name == "top-p"             ? &c.top_p
                : name == "min-p"             ? &c.min_p
                : name == "repeat-penalty"    ? &c.repetition_penalty
                : name == "frequency-penalty" ? &c.frequency_penalty
                : name == "presence-penalty"  ? &c.presence_penalty
                                              : nullptr;
  if (real) {
    float v = 0;
    if (!whole(begin, end, v)) return make_error(errc::invalid_argument, name, " needs a number, got '", value, "'");
    *real = v;
  } else if (name == "top-k" || name == "repeat-last-n") {
    const std::int32_t lo = name == "top-k" ? 0 : -1;
    std::int32_t v = 0;
    if (!whole(begin, end, v) || v < lo)
      return make_error(errc::invalid_argument, name, " needs an integer from ", lo, " to ",
                        std::numeric_limits<std::int32_t>::max(), ", got '", value, "'");
    (name == "top-k" ? c.top_k : c.penalty_last_n) = v;
  } else if (name == "seed") {
    std::uint64_t v = 0;
    if (!whole(begin, end, v))
      return make_error(errc::invalid_argument, "seed needs a non-negative integer, got '", value, "'");
    c.seed = v;
  } else if (name == "logit-bias") {
    const std::size_t eq = value.find('=');
    std::int32_t id = -1;
    float bias = 0;
    const bool ok = eq != std::string_view::npos && whole(begin, begin + eq, id) && id >= 0 &&
                    (value.substr(eq + 1) == "-inf" ? (bias = -std::numeric_limits<float>::infinity(), true)
                                                    : whole(begin + eq + 1, end, bias));
    if (!ok) return make_error(errc::invalid_argument, "logit-bias needs ID=BIAS (e.g. 42=-inf), got '", value, "'");
    c.logit_bias.emplace_back(id, bias);
  } else {
    return make_error(errc::not_found, "'", name, "' is not a sampling setting");
  }
  return {};
}

#endif  // SLM_DEFINE_TEXT

// One per session; not shared between threads (it owns its rng and scratch).
class sampler {
 public:
  explicit sampler(sampler_config c) : config_(std::move(c)), rng_(config_.seed) {}

  const sampler_config& config() const noexcept { return config_; }
  rng& generator() noexcept { return rng_; }
  const rng& generator() const noexcept { return rng_; }

  // The next token after `history` (prompt + generated). `logits` is not modified.
  result<std::int32_t> sample(std::span<const float> logits, std::span<const std::int32_t> history);

  // The distribution sample() draws from: probs[i] for every row of `logits` (0 for rows
  // excluded by any step; one-hot at the argmax when temperature is 0). Draws nothing.
  status distribution(std::span<const float> logits, std::span<const std::int32_t> history, std::vector<float>& probs);

 private:
  struct candidate {
    float logit;
    std::int32_t id;
  };
  // Larger logit first, lower id first among equals: a strict total order, so top-k and
  // top-p keep the same tokens whatever the sort algorithm. (A function object, so that
  // the standard algorithms inline it.)
  struct rank_order {
    bool operator()(const candidate& a, const candidate& b) const noexcept {
      return (a.logit > b.logit) | ((a.logit == b.logit) & (a.id < b.id));
    }
  };
  static constexpr rank_order before{};

  // Steps 1-4: logits_ = the vocabulary rows after bias and penalties.
  status process(std::span<const float> logits, std::span<const std::int32_t> history);

  result<std::int32_t> greedy() const;

  status check_max(float max_logit, std::size_t id) const;

  // exp((logit - max) / T): the unnormalized probability, 1 for the largest logit.
  float weight(float logit) const noexcept { return std::exp((logit - max_logit_) / config_.temperature); }

  // Top-p: the last candidate of the nucleus in rank order (the smallest set whose weight
  // is >= top_p of the total). Nothing is sorted but a small remainder: the key
  // (max - logit) / T is -log(weight) and orders like the rank, so the keys in play are
  // cut into 256 equal-width buckets and the weights summed per bucket; only the bucket
  // where the running sum reaches the target stays in play, and is cut again, until few
  // enough candidates are left to sort (ties and near-ties end up there). Keys are capped
  // at 128, past which expf underflows to weight 0 anyway.
  candidate nucleus_last();

  // Steps 5-10 but the draw: kept_ (increasing id), weight_ (aligned) and total_.
  // Top-k and top-p each keep a prefix of the candidates in `before` order, so together
  // they keep every candidate up to a last one (`last`); min-p keeps weights >= min_p
  // (p / p_max is the weight, the largest being exactly 1). The final pass walks the
  // vocabulary in id order and applies both cuts: no sort of the kept set.
  status keep_candidates();

  sampler_config config_;
  rng rng_;
  std::size_t validated_rows_ = 0;     // the row count validate() last accepted
  std::vector<float> logits_;          // the vocabulary rows after steps 1-4
  std::vector<std::int32_t> window_;   // the penalty window, sorted
  std::vector<candidate> kept_;        // surviving candidates
  std::vector<double> weight_;         // their unnormalized probabilities
  std::vector<candidate> play_;        // top-p: the candidates around the cut
  std::vector<double> bucket_weight_;  // top-p: weight per key bucket
  std::vector<float> weight_by_id_;    // exp((logit - max) / T) of the top-k survivors, by id
  double total_ = 0.0;
  float max_logit_ = 0.0f;
};

#if SLM_DEFINE_TEXT

SLM_INLINE result<std::int32_t> sampler::sample(std::span<const float> logits, std::span<const std::int32_t> history) {
  SLM_TRY(process(logits, history));
  if (config_.temperature == 0.0f) return greedy();
  SLM_TRY(keep_candidates());
  const double u = rng_.uniform() * total_;
  double cum = 0.0;
  for (std::size_t j = 0; j < kept_.size(); ++j)
    if ((cum += weight_[j]) > u) return kept_[j].id;
  // u * total rounded up to total: the last token with any weight.
  for (std::size_t j = kept_.size(); j-- > 0;)
    if (weight_[j] > 0.0) return kept_[j].id;
  return kept_.front().id;  // unreachable: the largest logit has weight 1
}

SLM_INLINE status sampler::distribution(std::span<const float> logits, std::span<const std::int32_t> history, std::vector<float>& probs) {
  SLM_TRY(process(logits, history));
  probs.assign(logits.size(), 0.0f);
  if (config_.temperature == 0.0f) {
    auto id = greedy();
    if (!id.ok()) return std::move(id).take_error();
    probs[static_cast<std::size_t>(*id)] = 1.0f;
    return {};
  }
  SLM_TRY(keep_candidates());
  for (std::size_t j = 0; j < kept_.size(); ++j)
    probs[static_cast<std::size_t>(kept_[j].id)] = static_cast<float>(weight_[j] / total_);
  return {};
}

SLM_INLINE status sampler::process(std::span<const float> logits, std::span<const std::int32_t> history) {
  if (logits.size() != validated_rows_) {
    SLM_TRY(validate(config_, logits.size()));
    validated_rows_ = logits.size();
  }
  const std::size_t n = config_.vocab_size ? config_.vocab_size : logits.size();
  logits_.resize(n);
  bool bad = false;  // a NaN or +inf anywhere; located below, off the fast path
  for (std::size_t i = 0; i < n; ++i) {
    const float v = logits[i];
    bad |= !(v < std::numeric_limits<float>::infinity());
    logits_[i] = v;
  }
  if (bad)
    for (std::size_t i = 0; i < n; ++i)
      if (!(logits[i] < std::numeric_limits<float>::infinity()))
        return make_error(errc::invalid_argument, "sampler: logits[", i, "] is ",
                          std::isnan(logits[i]) ? "NaN" : "+infinity", " (row ", i, " of ", logits.size(),
                          "); the model produced a non-number");
  for (const auto& [id, b] : config_.logit_bias) logits_[static_cast<std::size_t>(id)] += b;

  const bool penalize = config_.repetition_penalty != 1.0f || config_.frequency_penalty != 0.0f ||
                        config_.presence_penalty != 0.0f;
  if (!penalize || config_.penalty_last_n == 0 || history.empty()) return {};
  const std::size_t w = config_.penalty_last_n < 0
                            ? history.size()
                            : std::min(history.size(), static_cast<std::size_t>(config_.penalty_last_n));
  const std::size_t first = history.size() - w;
  window_.assign(history.begin() + static_cast<std::ptrdiff_t>(first), history.end());
  for (std::size_t i = 0; i < w; ++i)
    if (window_[i] < 0 || static_cast<std::size_t>(window_[i]) >= n)
      return make_error(errc::invalid_argument, "sampler: history token ", first + i, " (id ", window_[i],
                        ") is outside the vocabulary [0, ", n, ")");
  std::sort(window_.begin(), window_.end());
  const float r = config_.repetition_penalty;
  for (std::size_t i = 0; i < w;) {
    std::size_t j = i;
    while (j < w && window_[j] == window_[i]) ++j;
    float& l = logits_[static_cast<std::size_t>(window_[i])];
    if (r != 1.0f) l = l > 0.0f ? l / r : l * r;
    l -= config_.frequency_penalty * static_cast<float>(j - i) + config_.presence_penalty;
    i = j;
  }
  return {};
}

SLM_INLINE result<std::int32_t> sampler::greedy() const {
  std::size_t best = 0;
  for (std::size_t i = 1; i < logits_.size(); ++i)
    if (logits_[i] > logits_[best]) best = i;
  SLM_TRY(check_max(logits_[best], best));
  return static_cast<std::int32_t>(best);
}

SLM_INLINE status sampler::check_max(float max_logit, std::size_t id) const {
  if (max_logit == -std::numeric_limits<float>::infinity())
    return make_error(errc::invalid_argument, "sampler: all ", logits_.size(),
                      " candidate tokens are banned (every logit is -infinity after bias and penalties)");
  if (!(max_logit < std::numeric_limits<float>::infinity()))
    return make_error(errc::invalid_argument, "sampler: the logit of token ", id,
                      " overflowed to +infinity after bias and penalties");
  return {};
}

SLM_INLINE sampler::candidate sampler::nucleus_last() {
  constexpr std::size_t buckets = 256, few = 64;
  const float t = config_.temperature;
  const auto key = [&](const candidate& c) { return std::min((max_logit_ - c.logit) / t, 128.0f); };
  const auto w = [&](const candidate& c) { return weight_by_id_[static_cast<std::size_t>(c.id)]; };
  double total = 0.0;
  for (const candidate& c : kept_) total += w(c);
  const double target = static_cast<double>(config_.top_p) * total;
  double ahead = 0.0;  // the weight of the candidates ranked before those in play
  play_.assign(kept_.begin(), kept_.end());
  while (play_.size() > few) {
    float lo = std::numeric_limits<float>::infinity(), hi = 0.0f;
    for (const candidate& c : play_) {
      lo = std::min(lo, key(c));
      hi = std::max(hi, key(c));
    }
    const float scale = static_cast<float>(buckets) / (hi - lo);
    if (!(hi > lo) || !(scale < std::numeric_limits<float>::infinity())) break;  // (near-)ties: sort them
    const auto bucket = [&](const candidate& c) {
      return static_cast<std::size_t>(std::min(static_cast<float>(buckets - 1), (key(c) - lo) * scale));
    };
    bucket_weight_.assign(buckets, 0.0);
    for (const candidate& c : play_) bucket_weight_[bucket(c)] += w(c);
    std::size_t cross = 0;
    while (cross < buckets && ahead + bucket_weight_[cross] < target) ahead += bucket_weight_[cross++];
    if (cross == buckets) return *std::max_element(play_.begin(), play_.end(), before);  // rounding: all of it
    std::erase_if(play_, [&](const candidate& c) { return bucket(c) != cross; });
  }
  std::sort(play_.begin(), play_.end(), before);
  for (const candidate& c : play_)
    if ((ahead += w(c)) >= target) return c;
  return play_.back();  // rounding kept the sum below the target: all of it
}

SLM_INLINE status sampler::keep_candidates() {
  constexpr float banned = -std::numeric_limits<float>::infinity();
  kept_.clear();
  const std::size_t n = logits_.size();
  for (std::size_t i = 0; i < n; ++i)
    if (logits_[i] > banned) kept_.push_back({logits_[i], static_cast<std::int32_t>(i)});
  if (kept_.empty()) return check_max(banned, 0);

  bool cut = false;  // whether `last` is set
  candidate last{};
  const auto k = static_cast<std::size_t>(config_.top_k);
  if (k > 0 && k < kept_.size()) {
    std::nth_element(kept_.begin(), kept_.begin() + static_cast<std::ptrdiff_t>(k - 1), kept_.end(), before);
    kept_.resize(k);
    last = kept_.back();
    cut = true;
  }
  const candidate top = *std::min_element(kept_.begin(), kept_.end(), before);
  SLM_TRY(check_max(top.logit, static_cast<std::size_t>(top.id)));
  max_logit_ = top.logit;
  weight_by_id_.resize(n);  // set for the candidates still in; only those are read below
  for (const candidate& c : kept_) weight_by_id_[static_cast<std::size_t>(c.id)] = weight(c.logit);
  if (config_.top_p < 1.0f && kept_.size() > 1) {
    last = nucleus_last();
    cut = true;
  }

  // Written without branches on the data (a kept token is stored, then counted): about
  // half the tokens pass a top-p cut, in no pattern a branch predictor could learn.
  kept_.resize(n);
  weight_.resize(n);
  double total = 0.0;  // a local: a member would be reloaded after every store
  std::size_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const candidate c{logits_[i], static_cast<std::int32_t>(i)};
    const float w = weight_by_id_[i];  // meaningful only where `keep` holds
    const bool keep = (c.logit > banned) & (!cut | !before(last, c)) & (w >= config_.min_p);
    kept_[m] = c;
    weight_[m] = w;
    m += keep;
    total += static_cast<double>(keep ? w : 0.0f);
  }
  total_ = total;
  kept_.resize(m);
  weight_.resize(m);
  return {};
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm
