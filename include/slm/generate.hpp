// slm/generate.hpp - text generation over any session: prefill, sample, stream, stop.
//
// A generator owns one model session (decoder, NAM56R or nanochat: anything with
// forward / position / max_tokens / save / load), a sampler and the text state around
// them. Its invariant: every token in history() has been fed to the session and
// logits() is the next-token row after the last of them. So
//   prefill(ids)  feeds a prompt (in chunks) and keeps the last row;
//   step()        samples the next token from that row, feeds it and returns it;
//   generate()    loops step() with the stop rules, streaming whole UTF-8 characters to
//                 a callback (which may stop generation by returning false);
//   save()/load() write and read all of it (the session's caches, the history, the
//                 sampler's random state, the pending logits) as one safetensors file:
//                 continuing a loaded generator gives the same tokens as never stopping.
// Errors are values and lose nothing: a prompt that does not fit the context is refused
// before any compute; a cancelled or failed forward leaves the session as it was
// (sessions guarantee this) and generate() reports how far it got.
// Stop tokens end generation without being fed or printed; a stop string ends it with
// the text before the string (slm/stop_strings.hpp holds back possible prefixes).
//
// Threads: a generator belongs to one thread (its session does); cancellation may come
// from any thread through compute_context::cancel.
#pragma once
#include "slm/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/detokenizer.hpp"
#include "slm/linear.hpp"
#include "slm/safetensors.hpp"
#include "slm/sampling.hpp"
#include "slm/status.hpp"
#include "slm/stop_strings.hpp"
#include "slm/tokenizer.hpp"

namespace slm {

template <class S>
concept generation_session = requires(S& s, const S& cs, std::span<const std::int32_t> ids, float* logits,
                                      compute_context& cx, std::span<const std::byte> blob) {
  { s.forward(ids, std::size_t{}, logits, cx) } -> std::same_as<status>;
  { cs.position() } -> std::convertible_to<std::size_t>;
  { cs.max_tokens() } -> std::convertible_to<std::size_t>;
  { cs.save() } -> std::same_as<result<std::vector<std::byte>>>;
  { s.load(blob) } -> std::same_as<status>;
};

enum class stop_reason : std::uint8_t { max_tokens, stop_token, stop_string, callback, context_full, cancelled };

constexpr std::string_view to_string(stop_reason r) noexcept {
  switch (r) {
    case stop_reason::max_tokens: return "max tokens";
    case stop_reason::stop_token: return "stop token";
    case stop_reason::stop_string: return "stop string";
    case stop_reason::callback: return "stopped by the callback";
    case stop_reason::context_full: return "context full";
    case stop_reason::cancelled: return "cancelled";
  }
  return "?";
}

struct generation_options {
  std::size_t max_new_tokens = 128;
  std::vector<std::int32_t> stop_tokens;  // e.g. the tokenizer's EOS and the model's eos_token_id(s)
  std::vector<std::string> stop_strings;
  decode_options decode;                  // skip_special_tokens for the streamed text
};

struct generation_result {
  std::vector<std::int32_t> tokens;  // generated and fed (a stop token is not among them)
  std::string text;                  // their text, up to a stop string
  stop_reason reason = stop_reason::max_tokens;
  std::int32_t stop_token = -1;      // the stop token sampled, when reason == stop_token
  double seconds = 0;                // wall time of the loop (sampling + forwards)
};

template <generation_session Session>
class generator {
 public:
  // rows: the width of the session's logit rows (the model's vocab()); sampling.vocab_size
  // 0 means the tokenizer's vocabulary (rows past it - a padded head - are never sampled).
  // Without a tokenizer (tok null) the generator works on ids alone: no text, no stop
  // strings, prefill_text() unavailable.
  generator(Session session, const tokenizer* tok, std::size_t rows, sampler_config sampling);

  // Checks the sampler settings against the logit rows (call once before use).
  status validate() const { return slm::validate(sampler_.config(), rows_); }

  Session& session() noexcept { return session_; }
  const Session& session() const noexcept { return session_; }
  sampler& sampling() noexcept { return sampler_; }
  std::span<const std::int32_t> history() const noexcept { return history_; }
  std::span<const float> logits() const noexcept { return logits_; }
  bool ready() const noexcept { return !logits_.empty(); }

  // Feeds ids (chunk tokens per forward, so scratch stays bounded and cancellation is
  // checked between chunks). On an error the generator is as it was before the call.
  status prefill(std::span<const std::int32_t> ids, compute_context& cx, std::size_t chunk = 256);

  // Encodes text (encode_options: BOS and special-token parsing) and prefills it.
  status prefill_text(std::string_view text, compute_context& cx, const encode_options& eo = {});

  // Samples the next token from logits() and feeds it; returns it. A stop token in
  // `stops` is returned without being fed (the generator is unchanged but for the
  // sampler's random state).
  result<std::int32_t> step(compute_context& cx, std::span<const std::int32_t> stops = {});

  // Generates up to max_new_tokens; on_text(std::string_view) receives the text as it
  // becomes final and returns false to stop. Errors other than cancellation are returned
  // as errors; the tokens generated before them stay fed.
  template <class OnText>
  result<generation_result> generate(const generation_options& o, compute_context& cx, OnText&& on_text) {
    // The loop is compiled once per session type (in compiled mode, once in the library);
    // the callback reaches it through a pointer and a trampoline.
    using F = std::remove_reference_t<OnText>;
    if constexpr (std::is_function_v<F>) {  // a plain function: through a lambda that calls it
      return generate(o, cx, [&on_text](std::string_view piece) -> bool { return on_text(piece); });
    } else {
      return generate_to(o, cx, text_sink{const_cast<void*>(static_cast<const void*>(std::addressof(on_text))),
                                          [](void* f, std::string_view piece) -> bool { return (*static_cast<F*>(f))(piece); }});
    }
  }
  result<generation_result> generate(const generation_options& o, compute_context& cx) {
    return generate_to(o, cx, text_sink{nullptr, [](void*, std::string_view) { return true; }});
  }

  // ---- State files ----
  // One safetensors file: "session" U8 (the session's own state blob, checked by its
  // load), "history" I32 [n], "logits" F32 [rows], "rng" U64 [4]; metadata names the
  // format. load() checks every part against this generator before replacing anything.
  status save(const std::filesystem::path& path) const;
  status load(const std::filesystem::path& path);

 private:
  struct text_sink {
    void* object;
    bool (*call)(void*, std::string_view);
  };
  result<generation_result> generate_to(const generation_options& o, compute_context& cx, text_sink on_text);

  static sampler_config with_vocab(sampler_config c, std::size_t vocab) {
    if (c.vocab_size == 0) c.vocab_size = vocab;
    return c;
  }
  static status check_cancel(const compute_context& cx) {
    if (cx.cancel && cx.cancel->cancelled()) return make_error(errc::cancelled, "cancelled");
    return {};
  }
  status rollback(std::size_t n) {
    if constexpr (requires { session_.rollback(n); }) return session_.rollback(n);
    else return make_error(errc::unsupported, "the session cannot roll back");
  }

  Session session_;
  const tokenizer* tok_;
  std::size_t rows_;
  sampler sampler_;
  std::vector<std::int32_t> history_;
  std::vector<float> logits_;
};

// The generator's members, out of the class: in compiled mode the library instantiates
// the generators of its own sessions (slm::model, nam56r_model, nanochat_model) and a host
// file compiles none of this (the `extern template` lines at the end of this header and of
// the model headers).
template <generation_session Session>
generator<Session>::generator(Session session, const tokenizer* tok, std::size_t rows, sampler_config sampling)
    : session_(std::move(session)), tok_(tok), rows_(rows),
      sampler_(with_vocab(std::move(sampling), tok ? std::min(rows, tok->vocab_size()) : rows)) {}

template <generation_session Session>
status generator<Session>::prefill(std::span<const std::int32_t> ids, compute_context& cx, std::size_t chunk) {
  if (ids.empty()) return make_error(errc::invalid_argument, "prefill: no tokens");
  for (std::size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || static_cast<std::size_t>(ids[i]) >= rows_)
      return make_error(errc::out_of_range, "prefill: token id ", ids[i], " at index ", i,
                        " is outside the model's vocabulary [0, ", rows_, ")");
  const std::size_t pos = session_.position(), limit = session_.max_tokens();
  if (pos + ids.size() > limit)
    return make_error(errc::out_of_range, "the prompt has ", ids.size(), " tokens; with ", pos,
                      " already in the session that exceeds the context of ", limit, " tokens");
  if (chunk == 0) chunk = ids.size();
  // Everything is fed before anything is committed: a failure part-way rolls the session
  // back by the tokens this call fed (sessions restore themselves on a failed forward).
  std::vector<float> row(rows_);
  std::size_t fed = 0;
  while (fed < ids.size()) {
    const std::size_t n = std::min(chunk, ids.size() - fed);
    const bool last = fed + n == ids.size();
    status s = check_cancel(cx);
    if (s.ok()) s = session_.forward(ids.subspan(fed, n), last ? 1 : 0, last ? row.data() : nullptr, cx);
    if (!s.ok()) {
      if (fed > 0) {
        if (status r = rollback(fed); !r.ok())
          return std::move(s).with_context(cat("prefill (and the session could not drop the ", fed,
                                               " tokens fed before the error: ", r.message(), ")"));
      }
      return s;
    }
    fed += n;
  }
  history_.insert(history_.end(), ids.begin(), ids.end());
  logits_ = std::move(row);
  return {};
}

template <generation_session Session>
status generator<Session>::prefill_text(std::string_view text, compute_context& cx, const encode_options& eo) {
  if (!tok_) return make_error(errc::invalid_argument, "prefill_text: the generator has no tokenizer");
  auto ids = tok_->encode(text, eo);
  if (!ids.ok()) return std::move(ids).error();
  return prefill(*ids, cx);
}

template <generation_session Session>
result<std::int32_t> generator<Session>::step(compute_context& cx, std::span<const std::int32_t> stops) {
  if (!ready()) return make_error(errc::invalid_argument, "step: nothing prefilled yet");
  auto id = sampler_.sample(logits_, history_);
  if (!id.ok()) return id;
  if (std::find(stops.begin(), stops.end(), *id) != stops.end()) return id;
  if (session_.position() + 1 > session_.max_tokens())
    return make_error(errc::out_of_range, "context full: the session holds ", session_.position(), " tokens, the limit");
  SLM_TRY(check_cancel(cx));
  SLM_TRY(session_.forward(std::span(&*id, 1), 1, logits_.data(), cx));
  history_.push_back(*id);
  return id;
}

template <generation_session Session>
result<generation_result> generator<Session>::generate_to(const generation_options& o, compute_context& cx, text_sink on_text) {
  if (!ready()) return make_error(errc::invalid_argument, "generate: prefill a prompt first");
  const auto t0 = std::chrono::steady_clock::now();
  if (!tok_ && !o.stop_strings.empty())
    return make_error(errc::invalid_argument, "generate: stop strings need a tokenizer");
  generation_result r;
  std::optional<detokenizer> detok;
  if (tok_) detok.emplace(*tok_, o.decode);
  stop_strings stops(o.stop_strings);
  bool keep_going = true;
  auto emit = [&](std::string piece) {
    if (piece.empty()) return;
    r.text += piece;
    if (!on_text.call(on_text.object, std::string_view(piece))) keep_going = false;
  };
  r.reason = stop_reason::max_tokens;
  for (std::size_t i = 0; i < o.max_new_tokens; ++i) {
    if (cx.cancel && cx.cancel->cancelled()) {
      r.reason = stop_reason::cancelled;
      break;
    }
    if (session_.position() + 1 > session_.max_tokens()) {
      r.reason = stop_reason::context_full;
      break;
    }
    auto id = step(cx, o.stop_tokens);
    if (!id.ok()) {
      if (id.error().code() == errc::cancelled) {
        r.reason = stop_reason::cancelled;
        break;
      }
      return std::move(id).take_error().with_context(cat("generate: token ", i));
    }
    if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), *id) != o.stop_tokens.end()) {
      r.reason = stop_reason::stop_token;
      r.stop_token = *id;
      break;
    }
    r.tokens.push_back(*id);
    if (detok) {
      auto piece = detok->push(*id);
      if (!piece.ok()) return std::move(piece).error();
      emit(stops.push(*piece));
    }
    if (stops.stopped()) {
      r.reason = stop_reason::stop_string;
      break;
    }
    if (!keep_going) {
      r.reason = stop_reason::callback;
      break;
    }
  }
  if (detok && r.reason != stop_reason::stop_string) {
    emit(stops.push(detok->flush()));
    if (!stops.stopped()) emit(stops.flush());
    else r.reason = stop_reason::stop_string;
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

template <generation_session Session>
status generator<Session>::save(const std::filesystem::path& path) const {
  if (!ready()) return make_error(errc::invalid_argument, "save: nothing prefilled yet");
  auto blob = session_.save();
  if (!blob.ok()) return std::move(blob).error();
  const auto rng_state = sampler_.generator().state();
  safetensors::writer w;
  w.set_metadata("format", "slm.generator.v1");
  SLM_TRY(w.add("session", dtype::u8, shape{static_cast<std::int64_t>(blob->size())}, *blob));
  SLM_TRY(w.add("history", dtype::i32, shape{static_cast<std::int64_t>(history_.size())}, std::as_bytes(std::span(history_))));
  SLM_TRY(w.add("logits", dtype::f32, shape{static_cast<std::int64_t>(logits_.size())}, std::as_bytes(std::span(logits_))));
  SLM_TRY(w.add("rng", dtype::u64, shape{static_cast<std::int64_t>(rng_state.size())}, std::as_bytes(std::span(rng_state))));
  return w.write(path);
}

template <generation_session Session>
status generator<Session>::load(const std::filesystem::path& path) {
  auto f = safetensors::file::open(path);
  if (!f.ok()) return std::move(f).error();
  auto part = [&](std::string_view name, dtype t) -> result<tensor_view> {
    auto v = f->tensor(name);
    if (!v.ok()) return std::move(v).take_error().with_context(path.string());
    if (v->type() != t || v->shape().rank() != 1)
      return make_error(errc::format_error, path.string(), ": tensor '", name, "' is not a ", safetensors_name(t), " vector");
    return v;
  };
  auto blob = part("session", dtype::u8);
  if (!blob.ok()) return std::move(blob).error();
  auto hist = part("history", dtype::i32);
  if (!hist.ok()) return std::move(hist).error();
  auto lg = part("logits", dtype::f32);
  if (!lg.ok()) return std::move(lg).error();
  auto rs = part("rng", dtype::u64);
  if (!rs.ok()) return std::move(rs).error();
  if (static_cast<std::size_t>(lg->shape()[0]) != rows_)
    return make_error(errc::invalid_argument, path.string(), ": logits of ", lg->shape()[0], " rows; this model has ", rows_);
  if (rs->shape()[0] != 4) return make_error(errc::format_error, path.string(), ": rng state is not 4 words");
  std::vector<std::int32_t> history(static_cast<std::size_t>(hist->shape()[0]));
  std::memcpy(history.data(), hist->bytes().data(), history.size() * 4);
  for (std::int32_t id : history)
    if (id < 0 || static_cast<std::size_t>(id) >= rows_)
      return make_error(errc::format_error, path.string(), ": history holds token id ", id, " outside [0, ", rows_, ")");
  std::vector<float> logits(rows_);
  std::memcpy(logits.data(), lg->bytes().data(), rows_ * 4);
  std::array<std::uint64_t, 4> rng_state{};
  std::memcpy(rng_state.data(), rs->bytes().data(), 32);
  // The session checks its blob (magic, checksum, structure) and is unchanged on error.
  if (status st_ = session_.load(blob->bytes()); !st_.ok()) return std::move(st_).with_context(path.string());
  if (session_.position() != history.size())
    return make_error(errc::format_error, path.string(), ": the session holds ", session_.position(),
                      " tokens but the history ", history.size());
  history_ = std::move(history);
  logits_ = std::move(logits);
  sampler_.generator().set_state(rng_state);
  return {};
}

// Fill-in-the-middle prompt in PSM order (prefix, suffix, then the model writes the
// middle): <fim_prefix> prefix <fim_suffix> suffix <fim_middle>, with the tokenizer's own
// FIM tokens; SPM order puts the suffix first. An error when the tokenizer has no FIM tokens.
enum class fim_order : std::uint8_t { psm, spm };
result<std::vector<std::int32_t>> fim_prompt(const tokenizer& tok, std::string_view prefix, std::string_view suffix,
                                             fim_order order = fim_order::psm, bool bos = false);

#if SLM_DEFINE_TEXT

SLM_INLINE result<std::vector<std::int32_t>> fim_prompt(const tokenizer& tok, std::string_view prefix, std::string_view suffix,
                                                        fim_order order, bool bos) {
  const special_token_ids& sp = tok.specials();
  if (sp.fim_prefix < 0 || sp.fim_middle < 0 || sp.fim_suffix < 0)
    return make_error(errc::unsupported, "fill-in-the-middle: the tokenizer has no FIM prefix/suffix/middle tokens");
  const encode_options plain{false, false};  // the user's code is text, never special tokens
  auto pre = tok.encode(prefix, plain);
  if (!pre.ok()) return pre;
  auto suf = tok.encode(suffix, plain);
  if (!suf.ok()) return suf;
  std::vector<std::int32_t> ids;
  if (bos && sp.bos >= 0) ids.push_back(sp.bos);
  ids.push_back(sp.fim_prefix);
  if (order == fim_order::psm) {
    ids.insert(ids.end(), pre->begin(), pre->end());
    ids.push_back(sp.fim_suffix);
    ids.insert(ids.end(), suf->begin(), suf->end());
    ids.push_back(sp.fim_middle);
  } else {  // SPM: <fim_prefix> <fim_suffix> suffix <fim_middle> prefix
    ids.push_back(sp.fim_suffix);
    ids.insert(ids.end(), suf->begin(), suf->end());
    ids.push_back(sp.fim_middle);
    ids.insert(ids.end(), pre->begin(), pre->end());
  }
  return ids;
}

#endif  // SLM_DEFINE_TEXT

}  // namespace slm

// Compiled mode: generators of the library's own sessions are instantiated by the unit of
// their model. Whichever of this header and the model's header comes second declares it.
#define SLM_GENERATE_HPP_INCLUDED 1
#include "slm/generator_instances.hpp"
