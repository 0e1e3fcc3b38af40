// slm/generate/generator.hpp - text generation over any session: prefill, sample, stream, stop.
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
//                 sampler's random state, the pending logits) as one checksummed file
//                 (generator_file below): continuing a loaded generator gives the same
//                 tokens as never stopping, and a load that fails changes nothing.
// Errors are values and lose nothing: a prompt that does not fit the context is refused
// before any compute; a cancelled or failed forward leaves the session as it was
// (sessions guarantee this) and generate() reports how far it got.
// Stop tokens end generation without being fed or printed; a stop string ends it with
// the text before the string (slm/text/stop_strings.hpp holds back possible prefixes).
//
// Threads: a generator belongs to one thread (its session does); cancellation may come
// from any thread through compute_context::cancel.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <array>
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

#include "slm/text/detokenizer.hpp"
#include "slm/layers/linear.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/io/session_file.hpp"
#include "slm/core/status.hpp"
#include "slm/text/stop_strings.hpp"
#include "slm/text/tokenizer.hpp"

namespace slm {

// save() returns the session's state blob and load(blob) replaces the state with it (on
// an error, changing nothing). The blob starts with the header every session kind shares
// (layers/recurrent_cache.hpp, layout in models/hf/model.hpp), and load() takes its position from there:
// generator::load checks that position against the saved history before loading.
template <class S>
concept generation_session = requires(S& s, const S& cs, std::span<const std::int32_t> ids, float* logits,
                                      compute_context& cx, std::span<const std::byte> blob) {
  { s.forward(ids, std::size_t{}, logits, cx) } -> std::same_as<status>;
  { cs.position() } -> std::convertible_to<std::size_t>;
  { cs.max_tokens() } -> std::convertible_to<std::size_t>;
  { cs.save() } -> std::same_as<result<std::vector<std::byte>>>;
  { s.load(blob) } -> std::same_as<status>;
};

// line_rule and time_budget are the completion engine's (generate/completion.hpp): its
// line / indentation rules and its prediction time budget.
enum class stop_reason : std::uint8_t {
  max_tokens, stop_token, stop_string, callback, context_full, cancelled, line_rule, time_budget
};

constexpr std::string_view to_string(stop_reason r) noexcept {
  switch (r) {
    case stop_reason::max_tokens: return "max tokens";
    case stop_reason::stop_token: return "stop token";
    case stop_reason::stop_string: return "stop string";
    case stop_reason::callback: return "stopped by the callback";
    case stop_reason::context_full: return "context full";
    case stop_reason::cancelled: return "cancelled";
    case stop_reason::line_rule: return "line rule";
    case stop_reason::time_budget: return "time budget";
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

// ---- The generator's state file (generator::save / load) ----
// Version 2; little-endian, floats as IEEE-754 bits, one checksum over the whole file:
//   offset 0   8  magic "SLMGENST"
//          8   4  u32 version (2)
//          12  4  zero
//          16  8  u64 total size in bytes, checksum included
//          24  8  u64 rows: the width of the logit rows (the model's vocab())
//          32  8  u64 n: the history's length (tokens fed; the session's position; >= 1)
//          40  8  u64 b: the session state's size in bytes
//          48 32  the sampler's random state: 4 x u64 (xoshiro256**; not all zero)
//          80     n x i32 the history (token ids in [0, rows))
//                 rows x f32 the pending logits (the next-token row)
//                 b bytes: the session's own state blob (models/hf/model.hpp's format, which has its
//                 own checksum; its header's position must be n)
//          end-8  8  u64 checksum of every byte before it (state_format::checksum)
// Version 1 was a safetensors file (metadata "format": "slm.generator.v1") in which only
// the session blob was checksummed: altered logits, history or random state went
// unnoticed. It is refused (unsupported) with a request to save the state again.
namespace generator_file {

inline constexpr char magic[8] = {'S', 'L', 'M', 'G', 'E', 'N', 'S', 'T'};
inline constexpr std::uint32_t version = 2;
inline constexpr std::size_t header_bytes = 80;

// What a file holds (to write: borrowed spans).
struct view {
  std::span<const std::byte> session;
  std::span<const std::int32_t> history;
  std::span<const float> logits;
  std::array<std::uint64_t, 4> rng{};
};
// What a file holds, read and checked; `session` points into the bytes parsed.
struct parts {
  std::span<const std::byte> session;
  std::vector<std::int32_t> history;
  std::vector<float> logits;
  std::array<std::uint64_t, 4> rng{};
};

// Writes a file through a temporary file and a rename (save_state_file, io/session_file.hpp):
// a reader never sees a partial file, and a failed write leaves any previous one.
status write(const std::filesystem::path& path, const view& v);

// Checks a whole file for a generator of `rows`-wide logit rows, in this order: magic,
// version (unsupported for any but 2), reserved bytes, total size, checksum (format_error),
// rows (invalid_argument: another model's file), the lengths, the random state, the
// history's ids and the session blob's position against the history (format_error). The
// session blob itself is left to the session's load().
result<parts> parse(std::span<const std::byte> bytes, std::size_t rows);

}  // namespace generator_file

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

  // ---- Reuse (the completion engine keeps generators and cuts them back) ----
  // Drops the last n tokens of history() from the session: exact, or refused as the
  // session's rollback is (a recurrent layer keeps session_options::rollback_tokens
  // states). logits() is then empty (ready() false) until the next prefill, which must
  // feed at least one token.
  status rollback(std::size_t n);
  // Replaces the state with a session blob (save()'s bytes) whose tokens are `history`:
  // the blob's position must be history.size(). On an error nothing changes. logits() is
  // then empty until the next prefill.
  status restore(std::span<const std::byte> blob, std::span<const std::int32_t> history);
  // Forgets everything: position 0, no history, no logits.
  void reset() noexcept;

  // ---- State files ----
  // One file (generator_file above: the session's state blob, the history, the pending
  // logits and the sampler's random state under one checksum). load() checks the whole
  // file, then lets the session load its blob (the last step that can fail; the session
  // is unchanged when it does), then commits the rest: on any error the generator is
  // exactly as before.
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
  status rollback_session(std::size_t n) {
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
        if (status r = rollback_session(fed); !r.ok())
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
  encode_options o = eo;
  if (!o.cancel) o.cancel = cx.cancel;  // the forward's cancellation also stops a long encode
  auto ids = tok_->encode(text, o);
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
status generator<Session>::rollback(std::size_t n) {
  if (n > history_.size())
    return make_error(errc::out_of_range, "rollback: ", n, " tokens asked, the history holds ", history_.size());
  if (n == 0) return {};
  SLM_TRY(rollback_session(n));
  history_.resize(history_.size() - n);
  logits_.clear();
  return {};
}

template <generation_session Session>
status generator<Session>::restore(std::span<const std::byte> blob, std::span<const std::int32_t> history) {
  const auto at = state_format::blob_position(blob);
  if (!at) return make_error(errc::format_error, "restore: not a session state");
  if (*at != history.size())
    return make_error(errc::invalid_argument, "restore: the state is at position ", *at, ", the history holds ",
                      history.size(), " tokens");
  std::vector<std::int32_t> h(history.begin(), history.end());  // before the load: nothing fails after it
  SLM_TRY(session_.load(blob));
  history_ = std::move(h);
  logits_.clear();
  return {};
}

template <generation_session Session>
void generator<Session>::reset() noexcept {
  if constexpr (requires { session_.reset(); }) session_.reset();
  history_.clear();
  logits_.clear();
}

template <generation_session Session>
status generator<Session>::save(const std::filesystem::path& path) const {
  if (!ready()) return make_error(errc::invalid_argument, "save: nothing prefilled yet");
  auto blob = session_.save();
  if (!blob.ok()) return std::move(blob).error();
  return generator_file::write(path, {*blob, history_, logits_, sampler_.generator().state()});
}

template <generation_session Session>
status generator<Session>::load(const std::filesystem::path& path) {
  auto f = mapped_file::open(path);
  if (!f.ok()) return std::move(f).take_error();
  auto p = generator_file::parse(f->bytes(), rows_);
  if (!p.ok()) return std::move(p).take_error().with_context(path.string());
  // parse() checked everything but the blob's records, including that the blob's position
  // is the history's length (the position the session takes from it). The session's load
  // is the last step that can fail, and it changes nothing when it does; the rest is moves.
  if (status st = session_.load(p->session); !st.ok()) return std::move(st).with_context(path.string());
  history_ = std::move(p->history);
  logits_ = std::move(p->logits);
  sampler_.generator().set_state(p->rng);
  return {};
}

// Fill-in-the-middle prompt in PSM order (prefix, suffix, then the model writes the
// middle): <fim_prefix> prefix <fim_suffix> suffix <fim_middle>, with the tokenizer's own
// FIM tokens; SPM order puts the suffix first. Without an order, the model's own
// (tok.fim_preference(): tokenizer_config.json's "fim_order"), else PSM. An error when the
// tokenizer has no FIM tokens.
result<std::vector<std::int32_t>> fim_prompt(const tokenizer& tok, std::string_view prefix, std::string_view suffix,
                                             std::optional<fim_order> order = std::nullopt, bool bos = false);

#if SLM_DEFINE_TEXT

namespace detail {

// A generator file as save_state_file (io/session_file.hpp) wants it: its size, and its
// bytes streamed through write(std::span<const std::byte>) -> status.
struct generator_file_image {
  const generator_file::view& v;

  std::uint64_t total() const noexcept {
    return generator_file::header_bytes + 4 * static_cast<std::uint64_t>(v.history.size()) +
           4 * static_cast<std::uint64_t>(v.logits.size()) + v.session.size() + state_format::checksum_bytes;
  }
  result<std::uint64_t> saved_size() const { return total(); }
  template <class Write>
  status save(Write&& write) const {
    using W = std::remove_reference_t<Write>;
    state_writer w([](void* ctx, std::span<const std::byte> b) -> status { return (*static_cast<W*>(ctx))(b); },
                   const_cast<void*>(static_cast<const void*>(std::addressof(write))), true);
    SLM_TRY(w.bytes(generator_file::magic, sizeof generator_file::magic));
    SLM_TRY(w.u32(generator_file::version));
    SLM_TRY(w.u32(0));
    SLM_TRY(w.u64(total()));
    SLM_TRY(w.u64(v.logits.size()));
    SLM_TRY(w.u64(v.history.size()));
    SLM_TRY(w.u64(v.session.size()));
    for (std::uint64_t word : v.rng) SLM_TRY(w.u64(word));
    SLM_TRY(w.i32(v.history.data(), v.history.size()));
    SLM_TRY(w.f32(v.logits.data(), v.logits.size()));
    SLM_TRY(w.bytes(v.session.data(), v.session.size()));
    if (w.written() + state_format::checksum_bytes != total())
      return make_error(errc::invalid_argument, "generator state: ", w.written(), " bytes written, ",
                        total() - state_format::checksum_bytes, " expected (internal error)");
    return w.u64(w.checksum());
  }
  // saveable_session asks for it; a file image is only written.
  status load(std::span<const std::byte>) { return make_error(errc::unsupported, "generator state: the image is write-only"); }
};

// A version-1 file: safetensors (a u64 header length, then the JSON header) whose
// metadata names the old format.
inline bool is_generator_file_v1(std::span<const std::byte> b) {
  if (b.size() < 9 || b[8] != std::byte{'{'}) return false;
  const std::string_view head(reinterpret_cast<const char*>(b.data() + 8), std::min<std::size_t>(b.size() - 8, 1 << 16));
  return head.find("\"slm.generator.v1\"") != std::string_view::npos;
}

}  // namespace detail

SLM_INLINE status generator_file::write(const std::filesystem::path& path, const view& v) {
  if (v.history.empty() || v.logits.empty())
    return make_error(errc::invalid_argument, "generator state: no history or no logits to save");
  return save_state_file(detail::generator_file_image{v}, path);
}

namespace detail {

SLM_INLINE result<generator_file::parts> parse_generator_file(std::span<const std::byte> bytes, std::size_t rows) {
  namespace sf = state_format;
  using namespace generator_file;
  auto bad = [](const auto&... what) { return make_error(errc::format_error, what...); };
  if (bytes.size() >= sizeof magic && std::memcmp(bytes.data(), magic, sizeof magic) != 0) {
    if (is_generator_file_v1(bytes))
      return make_error(errc::unsupported, "a file of the first format (slm.generator.v1, safetensors), "
                                           "which this build no longer reads (only its session part was checksummed): "
                                           "save the state again with this build");
    if (std::memcmp(bytes.data(), sf::magic, sizeof sf::magic) == 0)
      return bad("a session's state (\"SLMSTATE\", io/session_file.hpp), not a generator's (\"SLMGENST\")");
    return bad("not a slm generator state file (no \"SLMGENST\" magic at byte 0)");
  }
  constexpr std::size_t least = header_bytes + sf::checksum_bytes;
  if (bytes.size() < 12) return bad("truncated: ", bytes.size(), " bytes, the header and checksum alone take ", least);
  state_reader r(bytes.first(bytes.size() >= least ? bytes.size() - sf::checksum_bytes : bytes.size()));
  SLM_TRY(r.skip(sizeof magic, "magic"));
  std::uint32_t ver = 0;
  SLM_TRY(r.u32(ver, "version"));
  if (ver != version)
    return make_error(errc::unsupported, "format version ", ver, "; this build reads version ", version);
  if (bytes.size() < least) return bad("truncated: ", bytes.size(), " bytes, the header and checksum alone take ", least);
  SLM_TRY(r.zeros(4, "reserved header bytes"));
  std::uint64_t total = 0, width = 0;
  SLM_TRY(r.u64(total, "total size"));
  if (total != bytes.size())
    return bad("truncated or padded: the header says ", total, " bytes, the file has ", bytes.size());
  const std::uint64_t sum = sf::detail::load_u64le(bytes.data() + bytes.size() - sf::checksum_bytes);
  const std::uint64_t computed = sf::checksum_of(bytes.first(bytes.size() - sf::checksum_bytes));
  if (sum != computed) return bad("corrupted: the checksum is ", sum, ", the data's is ", computed);
  SLM_TRY(r.u64(width, "rows"));
  if (width != rows)
    return make_error(errc::invalid_argument, "logit rows of ", width, " values; this model's are ", rows);
  std::size_t n = 0, session_bytes = 0;
  SLM_TRY(r.size(n, "history length"));
  SLM_TRY(r.size(session_bytes, "session state size"));
  if (n == 0) return bad("an empty history (a saved generator has fed at least one token)");
  parts p;
  for (auto& word : p.rng) SLM_TRY(r.u64(word, "random state"));
  if ((p.rng[0] | p.rng[1] | p.rng[2] | p.rng[3]) == 0)
    return bad("the sampler's random state is all zero (a state xoshiro never reaches)");
  SLM_TRY(r.need_items(n, 4, "history"));
  p.history.resize(n);
  SLM_TRY(r.i32(p.history.data(), n, "history"));
  SLM_TRY(r.need_items(rows, 4, "logits"));
  p.logits.resize(rows);
  SLM_TRY(r.f32(p.logits.data(), rows, "logits"));
  SLM_TRY(r.need(session_bytes, "session state"));
  p.session = bytes.subspan(r.offset(), session_bytes);
  SLM_TRY(r.skip(session_bytes, "session state"));
  if (r.remaining() != 0) return bad(r.remaining(), " bytes after the session state");
  for (std::size_t i = 0; i < n; ++i)
    if (p.history[i] < 0 || static_cast<std::size_t>(p.history[i]) >= rows)
      return bad("history holds token id ", p.history[i], " at index ", i, ", outside [0, ", rows, ")");
  const auto position = sf::blob_position(p.session);
  if (!position) return bad("the session part is not a slm session state (no \"SLMSTATE\" header)");
  if (*position != n) return bad("the session holds ", *position, " tokens but the history ", n);
  return p;
}

}  // namespace detail

SLM_INLINE result<generator_file::parts> generator_file::parse(std::span<const std::byte> bytes, std::size_t rows) {
  auto p = detail::parse_generator_file(bytes, rows);
  if (!p.ok()) return std::move(p).take_error().with_context("generator state");
  return p;
}

SLM_INLINE result<std::vector<std::int32_t>> fim_prompt(const tokenizer& tok, std::string_view prefix, std::string_view suffix,
                                                        std::optional<fim_order> requested, bool bos) {
  const fim_order order = requested ? *requested : tok.fim_preference().value_or(fim_order::psm);
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
#include "slm/generate/generator_instances.hpp"
