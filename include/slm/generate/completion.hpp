// slm/generate/completion.hpp - an editor's completion engine over one loaded model
// (slm::any_model, or one family's type: completion_engine<Model>): prefix
// reuse, recurrent-state checkpoints, line and indentation stop rules, time budgets,
// streaming and cancellation, requests from many threads.
//
// An editor asks for a completion on every keystroke, and each prompt is nearly the last
// one. The engine keeps a few generators ("slots"), each with the tokens its session holds.
// It serves a request from the slot whose tokens share the longest prefix with the prompt:
//  * KV caches cut back to any position (session rollback), so a decoder recomputes only
//    the tokens after the common prefix;
//  * a recurrent layer (Mamba-2, Mamba-3, M2RNN) keeps only its last states, so for such
//    a model the engine saves the session state every `checkpoint_interval` prompt tokens
//    and `boundary_margin` tokens before each segment end the request names (the end of
//    the FIM prefix, where the next keystroke edits; infill_request fills them in). It then
//    restores the nearest checkpoint at or before the common prefix. A request that takes
//    boundary checkpoints drops the last request's, which served the old cursor;
//  * the last prompt token is always computed again: its logits row starts the completion.
// A checkpoint is the whole session state (generator::restore). For a hybrid model that
// includes the KV caches up to its position, and the memory budget counts it. When the
// bytes of checkpoints and idle sessions pass cache_budget_bytes, the least recently used
// checkpoint goes first, then the least recently used idle session. stats() reports the
// cache's size.
//
// Outputs: restoring or rolling back is exact, so a reused request continues from the
// very state the session computed. A prompt fed from a reused prefix is fed in other calls
// than a fresh session's one call, and call shapes round differently (about 1e-5 of the
// logits with f32 activations on the golden models; with bf16 or int8 activations within
// the bound kernels/avx512_bf16.hpp states). With f32 activations that leaves greedy ids
// identical to a fresh session's (tests/test_completion.cpp checks every family), except
// under DeepSeek sparse attention: its top-k key selection is discontinuous, so a rounding
// difference can swap near-tied keys. On the golden deepseek_v32 (top-16 of 43 keys) a
// 30 + 13 split moved logits by 0.06 against one call, and by 1e-5 with the top-k raised
// to cover every key. The same holds for any change of chunking, with or without the engine.
//
// Threads: complete() may be called from many threads at once. Each call takes a free
// slot for itself, or a session of its own when all are busy, and gives it back at the
// end. The model and tokenizer are shared read-only. A request with a `key` (its
// document) cancels the key's older request that is still running, since a newer keystroke
// supersedes it. Cancellation reaches inside the running forward: the host's
// compute_context::cancel for a request without a key, a newer request's for one with a
// key (the host's flag is then polled between prefill chunks and generated tokens). The tokens fed before a cancellation stay in the slot for
// the next request.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/core/parallel.hpp"
#include "slm/core/status.hpp"
#include "slm/generate/generator.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/layers/session_options.hpp"
#include "slm/text/token_ids.hpp"
#include "slm/text/tokenizer.hpp"
#include "slm/text/unicode.hpp"

namespace slm {

struct completion_options {
  session_options session;                    // of every session the engine makes
  std::size_t slots = 2;                      // generators kept between requests (>= 1)
  std::size_t checkpoint_interval = 256;      // prompt tokens between checkpoints of a recurrent model; 0: none
  std::size_t boundary_margin = 4;            // a checkpoint this many tokens before each segment end
  std::uint64_t cache_budget_bytes = std::uint64_t{256} << 20;  // checkpoints + idle sessions
  std::size_t prefill_chunk = 256;            // tokens per forward while prefilling
};

struct completion_request {
  std::vector<std::int32_t> prompt;           // at least one token
  std::vector<std::size_t> boundaries;        // segment ends, as positions in prompt (sorted or not)
  std::size_t max_tokens = 64;
  sampler_config sampling = greedy();         // vocab_size 0: the model's (and tokenizer's) rows
  std::vector<std::int32_t> stop_tokens;      // end without being printed (EOS, the FIM tokens)
  std::vector<std::string> stop_strings;      // end with the text before the string
  bool single_line = false;                   // end at the first line end
  // Ends before a generated line (not the first) whose indentation, in spaces and tabs,
  // is less than this: the code after the cursor's block. nullopt: no such rule.
  std::optional<std::size_t> min_indent;
  double prompt_seconds = 0;                  // prefill budget; past it the request ends (time_budget), 0: none
  double predict_seconds = 0;                 // past it, generation ends at the next line end, 0: none
  std::string key;                            // the document: a newer request with it cancels this one

  static sampler_config greedy() {
    sampler_config c;
    c.temperature = 0;
    return c;
  }
};

struct completion_result {
  std::string text;                           // what was streamed: the completion
  std::vector<std::int32_t> tokens;           // generated and fed (a stop token is not among them)
  stop_reason reason = stop_reason::max_tokens;
  std::size_t prompt_tokens = 0;
  std::size_t reused_tokens = 0;              // prompt tokens the session already held
  std::size_t computed_tokens = 0;            // prompt tokens fed in this request
  bool from_checkpoint = false;               // the reuse started from a saved checkpoint
  double prompt_seconds = 0;                  // reuse + prefill
  double first_token_seconds = 0;             // from the call to the first text (the end, if none)
  double total_seconds = 0;
};

struct completion_stats {
  std::size_t slots = 0;                      // generators kept
  std::size_t checkpoints = 0;
  std::uint64_t checkpoint_bytes = 0;
  std::uint64_t session_bytes = 0;            // the idle slots' session states
  std::uint64_t cache_bytes = 0;              // checkpoint_bytes + session_bytes
  std::uint64_t requests = 0;
  std::uint64_t reused_tokens = 0;            // over all requests
  std::uint64_t computed_tokens = 0;
};

// A chunk of other context for an infill prompt: another file of the project.
struct context_chunk {
  std::string name;                           // its path, shown to the model where the format has one
  std::string text;
};

struct infill_input {
  std::string prefix;                         // the text before the cursor
  std::string suffix;                         // the text after it
  std::vector<context_chunk> extra;           // other files, before the FIM prompt
  std::optional<fim_order> order;             // nullopt: the tokenizer's preference, else PSM
  bool bos = false;
};

// The prompt of an infill request: the extra chunks, then fim_prompt's FIM prompt
// (generate/generator.hpp). Each chunk is "<|file_sep|>name\ntext" where the tokenizer has
// that token (Qwen2.5-Coder's repository format; <FILE_SEP> in NAM56R's vocabulary), else
// "name\ntext\n" as plain text. It
// also names the segment ends (after the extra chunks and after the prefix: where the next
// keystroke edits), sets the stop tokens (EOS, end of text and the FIM tokens) and
// min_indent (the cursor line's indentation). Text that is not valid UTF-8 is refused
// (invalid_argument, with the byte offset).
result<completion_request> infill_request(const tokenizer& tok, const infill_input& in);

// The indentation (spaces and tabs) of the last line of text: the cursor's line.
std::size_t line_indent(std::string_view text) noexcept;

// What the engine needs of a model's session: a generator's session (generate/generator.hpp)
// that rolls back, reports how far, and sizes its saved state. Every family's session has
// these (models/session.hpp), and so does slm::any_session.
template <class S>
concept reusable_session = generation_session<S> && requires(S& s, const S& cs, std::size_t n) {
  { cs.can_rollback(n) } -> std::convertible_to<bool>;
  { cs.rollback_limit() } -> std::convertible_to<std::size_t>;
  { s.rollback(n) } -> std::same_as<status>;
  { cs.saved_size() } -> std::same_as<result<std::uint64_t>>;
  s.reset();
};

// Model: anything with vocab() and new_session(session_options) whose session is a
// reusable_session: slm::any_model (any family, chosen at load), or one family's type.
template <class Model>
class completion_engine {
 public:
  using session_type = decltype(std::declval<const Model&>().new_session(session_options{}));
  static_assert(reusable_session<session_type>, "completion_engine: the model's session cannot be reused");

  // The model and tokenizer must outlive the engine. tok may be null (ids only: no text,
  // stop strings or line rules).
  completion_engine(const Model& m, const tokenizer* tok, completion_options o = {});
  completion_engine(const completion_engine&) = delete;
  completion_engine& operator=(const completion_engine&) = delete;

  // Completes the request. on_text(std::string_view) receives the completion's text as it
  // becomes final and returns false to stop (reason callback). Errors: a prompt that does
  // not fit the context or holds an id outside the vocabulary (before any compute), bad
  // sampler settings, cancellation (errc::cancelled), or a failed forward; the engine keeps
  // serving after each.
  template <class OnText>
  result<completion_result> complete(const completion_request& r, compute_context& cx, OnText&& on_text) {
    using F = std::remove_reference_t<OnText>;
    return run(r, cx, text_sink{const_cast<void*>(static_cast<const void*>(std::addressof(on_text))),
                                [](void* f, std::string_view piece) -> bool { return (*static_cast<F*>(f))(piece); }});
  }
  result<completion_result> complete(const completion_request& r, compute_context& cx) {
    return run(r, cx, text_sink{nullptr, [](void*, std::string_view) { return true; }});
  }

  completion_stats stats() const;
  // Drops every idle slot and checkpoint (busy slots finish their requests first).
  void clear();
  const completion_options& options() const noexcept { return opt_; }

 private:
  struct text_sink {
    void* object;
    bool (*call)(void*, std::string_view);
  };
  struct saved_state {
    std::size_t position = 0;
    std::vector<std::byte> blob;
    std::uint64_t used = 0;
    bool boundary = false;  // before a segment end (else at a multiple of checkpoint_interval)
  };
  struct slot {
    explicit slot(generator<session_type> g) : gen(std::move(g)) {}
    generator<session_type> gen;
    std::vector<saved_state> checkpoints;     // of prefixes of gen.history(), by position
    std::uint64_t used = 0;
    std::uint64_t session_bytes = 0;
    bool busy = false;
    bool kv_only = false;                     // learned: every position rolls back, no checkpoint needed
  };
  struct running {
    std::string key;
    cancellation* flag;
  };

  result<completion_result> run(const completion_request& r, compute_context& cx, text_sink on_text);
  generator<session_type> new_generator() const;
  // Under mu_: the free slot sharing the longest prefix with prompt (a new one while under
  // opt_.slots); null when every slot is busy.
  slot* take_slot(std::span<const std::int32_t> prompt);
  void give_back(slot* s, std::uint64_t session_bytes);  // under mu_
  void evict();                                          // under mu_
  completion_result account(completion_result out);      // a finished request into stats()

  const Model* m_;
  const tokenizer* tok_;
  completion_options opt_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<slot>> slots_;
  std::vector<running> running_;
  std::uint64_t clock_ = 0;
  std::uint64_t requests_ = 0, reused_ = 0, computed_ = 0;
};

// Small helpers, inline in both modes (the tests use line_rules directly).
namespace detail {

// The length of the common prefix of a and b.
inline std::size_t common_prefix(std::span<const std::int32_t> a, std::span<const std::int32_t> b) noexcept {
  return static_cast<std::size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

// The byte offset of the first invalid UTF-8 sequence in s, or s.size().
inline std::size_t first_invalid_utf8(std::string_view s) noexcept {
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 0;
    if (unicode::is_invalid_byte(unicode::decode(s, i, len)) || len == 0) return i;
    i += len;
  }
  return s.size();
}

// The completion's text through the line rules, before it reaches the host: text after a
// line end is held until that line's indentation is known; a line indented less than
// min_indent ends the completion before its line end.
class line_rules {
 public:
  line_rules(std::optional<std::size_t> min_indent) : min_indent_(min_indent) {}
  // The text now final; stopped() once the rule ends the completion.
  std::string push(std::string_view piece) {
    std::string out;
    for (char c : piece) {
      if (stopped_) break;
      if (!held_.empty() || (c == '\n' && min_indent_)) {
        held_ += c;
        if (c == '\n') {
          if (held_.size() > 1) {  // a blank line: it is final, keep holding from this one
            out.append(held_.data(), held_.size() - 1);
            held_.erase(0, held_.size() - 1);
          }
          continue;
        }
        if (c == ' ' || c == '\t') continue;
        if (held_.size() - 1 < *min_indent_) {
          stopped_ = true;
          held_.clear();
          break;
        }
        out += held_;
        held_.clear();
      } else {
        out += c;
      }
    }
    return out;
  }
  // The end of generation: held text (a final line end and indentation) is final.
  std::string flush() {
    std::string out;
    if (!stopped_) out.swap(held_);
    return out;
  }
  bool stopped() const noexcept { return stopped_; }

 private:
  std::optional<std::size_t> min_indent_;
  std::string held_;  // "\n" then the indentation seen so far
  bool stopped_ = false;
};

}  // namespace detail

// ---- implementation: the prompt helpers (SLM_DEFINE_TEXT) ...
#if SLM_DEFINE_TEXT


SLM_INLINE std::size_t line_indent(std::string_view text) noexcept {
  const std::size_t nl = text.rfind('\n');
  const std::size_t start = nl == std::string_view::npos ? 0 : nl + 1;
  std::size_t i = start;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  return i - start;
}

SLM_INLINE result<completion_request> infill_request(const tokenizer& tok, const infill_input& in) {
  auto check = [](std::string_view what, std::string_view s) -> status {
    if (const std::size_t at = detail::first_invalid_utf8(s); at < s.size())
      return make_error(errc::invalid_argument, "infill: the ", what, " is not valid UTF-8 (byte ", at, ")");
    return {};
  };
  SLM_TRY(check("prefix", in.prefix));
  SLM_TRY(check("suffix", in.suffix));
  for (const context_chunk& c : in.extra) {
    SLM_TRY(check("name of an extra chunk", c.name));
    SLM_TRY(check(cat("extra chunk '", c.name, "'"), c.text));
  }
  completion_request r;
  const encode_options plain{false, false};  // the user's code is text, never special tokens
  std::optional<std::int32_t> file_sep = tok.find("<|file_sep|>");
  if (!file_sep) file_sep = tok.find("<FILE_SEP>");
  if (in.bos && tok.specials().bos >= 0) r.prompt.push_back(tok.specials().bos);
  for (const context_chunk& c : in.extra) {
    if (file_sep) r.prompt.push_back(*file_sep);
    auto ids = tok.encode(file_sep ? cat(c.name, "\n", c.text) : cat(c.name, "\n", c.text, "\n"), plain);
    if (!ids.ok()) return std::move(ids).take_error();
    r.prompt.insert(r.prompt.end(), ids->begin(), ids->end());
  }
  if (!in.extra.empty()) r.boundaries.push_back(r.prompt.size());
  auto fim = fim_prompt(tok, in.prefix, in.suffix, in.order, false);
  if (!fim.ok()) return std::move(fim).take_error();
  const std::size_t fim_start = r.prompt.size();
  r.prompt.insert(r.prompt.end(), fim->begin(), fim->end());
  // The prefix ends where the next keystroke edits: at the end of the prompt in SPM
  // order, before the suffix in PSM order (the suffix token's position).
  const special_token_ids& sp = tok.specials();
  const fim_order order = in.order ? *in.order : tok.fim_preference().value_or(fim_order::psm);
  if (order == fim_order::psm) {
    for (std::size_t i = fim_start; i < r.prompt.size(); ++i)
      if (r.prompt[i] == sp.fim_suffix) {
        r.boundaries.push_back(i);
        break;
      }
  } else {
    r.boundaries.push_back(r.prompt.size());
  }
  for (std::int32_t id : {sp.eos, sp.fim_prefix, sp.fim_suffix, sp.fim_middle})
    if (id >= 0 && std::find(r.stop_tokens.begin(), r.stop_tokens.end(), id) == r.stop_tokens.end())
      r.stop_tokens.push_back(id);
  for (std::string_view name : {"<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<FILE_SEP>", "<REPO_NAME>"})
    if (auto id = tok.find(name); id && std::find(r.stop_tokens.begin(), r.stop_tokens.end(), *id) == r.stop_tokens.end())
      r.stop_tokens.push_back(*id);
  r.min_indent = line_indent(in.prefix);
  return r;
}

#endif  // SLM_DEFINE_TEXT

// ... and the engine, a template (compiled where it is used).
template <class Model>
completion_engine<Model>::completion_engine(const Model& m, const tokenizer* tok, completion_options o)
    : m_(&m), tok_(tok), opt_(std::move(o)) {
  if (opt_.slots == 0) opt_.slots = 1;
  if (opt_.prefill_chunk == 0) opt_.prefill_chunk = 256;
}

template <class Model>
generator<typename completion_engine<Model>::session_type> completion_engine<Model>::new_generator() const {
  return generator<session_type>(m_->new_session(opt_.session), tok_, m_->vocab(), completion_request::greedy());
}

template <class Model>
typename completion_engine<Model>::slot* completion_engine<Model>::take_slot(std::span<const std::int32_t> prompt) {
  slot* best = nullptr;
  std::size_t best_len = 0;
  for (auto& s : slots_) {
    if (s->busy) continue;
    const std::size_t len = detail::common_prefix(s->gen.history(), prompt);
    if (!best || len > best_len || (len == best_len && s->used > best->used)) {
      best = s.get();
      best_len = len;
    }
  }
  if ((!best || best_len == 0) && slots_.size() < opt_.slots) {
    std::unique_ptr<slot> s(new (std::nothrow) slot(new_generator()));
    if (s) {
      best = s.get();
      slots_.push_back(std::move(s));
    }
  }
  if (best) best->busy = true;
  return best;
}

template <class Model>
void completion_engine<Model>::give_back(slot* s, std::uint64_t session_bytes) {
  s->busy = false;
  s->used = ++clock_;
  s->session_bytes = session_bytes;
  evict();
}

template <class Model>
void completion_engine<Model>::evict() {
  for (;;) {
    std::uint64_t total = 0;
    for (const auto& s : slots_) {
      for (const saved_state& c : s->checkpoints) total += c.blob.size();
      if (!s->busy) total += s->session_bytes;
    }
    if (total <= opt_.cache_budget_bytes) return;
    // The least recently used checkpoint of any slot (a busy slot's are left alone: its
    // request may be restoring one), else the least recently used idle session.
    slot* owner = nullptr;
    std::size_t at = 0;
    for (auto& s : slots_) {
      if (s->busy) continue;
      for (std::size_t i = 0; i < s->checkpoints.size(); ++i)
        if (!owner || s->checkpoints[i].used < owner->checkpoints[at].used) {
          owner = s.get();
          at = i;
        }
    }
    if (owner) {
      owner->checkpoints.erase(owner->checkpoints.begin() + static_cast<std::ptrdiff_t>(at));
      continue;
    }
    slot* lru = nullptr;
    for (auto& s : slots_)
      if (!s->busy && s->session_bytes > 0 && (!lru || s->used < lru->used)) lru = s.get();
    if (!lru) return;  // only busy slots left: they count again when given back
    lru->gen.reset();
    lru->session_bytes = 0;
  }
}

template <class Model>
completion_stats completion_engine<Model>::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  completion_stats st;
  st.slots = slots_.size();
  for (const auto& s : slots_) {
    st.checkpoints += s->checkpoints.size();
    for (const saved_state& c : s->checkpoints) st.checkpoint_bytes += c.blob.size();
    if (!s->busy) st.session_bytes += s->session_bytes;
  }
  st.cache_bytes = st.checkpoint_bytes + st.session_bytes;
  st.requests = requests_;
  st.reused_tokens = reused_;
  st.computed_tokens = computed_;
  return st;
}

template <class Model>
void completion_engine<Model>::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(slots_, [](const std::unique_ptr<slot>& s) { return !s->busy; });
}

template <class Model>
result<completion_result> completion_engine<Model>::run(const completion_request& r, compute_context& host_cx,
                                                             text_sink on_text) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto since = [&](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  const std::span<const std::int32_t> prompt = r.prompt;
  if (prompt.empty()) return make_error(errc::invalid_argument, "complete: an empty prompt");
  const std::size_t rows = m_->vocab();
  SLM_TRY(check_token_ids("complete", prompt, rows));
  if (!tok_ && (!r.stop_strings.empty() || r.single_line || r.min_indent))
    return make_error(errc::invalid_argument, "complete: stop strings and line rules need a tokenizer");
  sampler_config sc = r.sampling;
  if (sc.vocab_size == 0) sc.vocab_size = tok_ ? std::min(rows, tok_->vocab_size()) : rows;
  SLM_TRY(validate(sc, rows));

  // This request's cancellation: the host's flag, polled, or a newer request of its key.
  // Without a key nothing else cancels it, so the forwards watch the host's flag itself.
  cancellation own;
  compute_context cx = host_cx;
  if (!r.key.empty() || !host_cx.cancel) cx.cancel = &own;
  auto cancelled = [&] {
    if (host_cx.cancel && host_cx.cancel->cancelled()) own.cancel();
    return own.cancelled();
  };

  slot* s = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = take_slot(prompt);
    if (!r.key.empty()) {
      for (running& q : running_)
        if (q.key == r.key) q.flag->cancel();
      running_.push_back({r.key, &own});
    }
  }
  // Every slot busy: a session of this request's own, not kept.
  std::unique_ptr<slot> spare;
  if (!s) {
    spare.reset(new (std::nothrow) slot(new_generator()));
    if (!spare) return make_error(errc::out_of_memory, "complete: cannot allocate a session");
    s = spare.get();
  }
  // Give the slot back on every path (the checkpoints it gained stay).
  struct release {
    completion_engine* e;  // the injected class name: completion_engine<Model>
    slot* s;
    bool kept;
    cancellation* flag;
    ~release() {
      std::uint64_t bytes = 0;
      if (kept)
        if (auto b = s->gen.session().saved_size(); b.ok()) bytes = *b;
      std::lock_guard<std::mutex> lock(e->mu_);
      std::erase_if(e->running_, [&](const running& q) { return q.flag == flag; });
      if (kept) e->give_back(s, bytes);
    }
  } guard{this, s, !spare, &own};

  completion_result out;
  out.prompt_tokens = prompt.size();
  generator<session_type>& gen = s->gen;
  if (const std::size_t limit = gen.session().max_tokens(); prompt.size() + 1 > limit)
    return make_error(errc::out_of_range, "complete: the prompt has ", prompt.size(),
                      " tokens; with one to generate that exceeds the context of ", limit, " tokens");

  // 1. Reuse: the session back to the common prefix, the last prompt token excluded.
  const std::size_t common = std::min(detail::common_prefix(gen.history(), prompt), prompt.size() - 1);
  if (gen.history().size() > common) {
    const std::size_t drop = gen.history().size() - common;
    if (!gen.session().can_rollback(drop) || !gen.rollback(drop).ok()) {
      saved_state* best = nullptr;
      for (saved_state& c : s->checkpoints)
        if (c.position <= common && (!best || c.position > best->position)) best = &c;
      if (best && gen.restore(best->blob, prompt.first(best->position)).ok()) {
        out.from_checkpoint = true;
        std::lock_guard<std::mutex> lock(mu_);
        best->used = ++clock_;
      } else {
        gen.reset();
      }
    }
  }
  const std::size_t held = gen.history().size();
  {
    std::lock_guard<std::mutex> lock(mu_);  // stats() reads every slot's checkpoints
    std::erase_if(s->checkpoints, [&](const saved_state& c) { return c.position > held; });
  }
  out.reused_tokens = held;

  // 2. Prefill the rest, cut where checkpoints go (a recurrent model only: a KV-only
  //    session rolls back to any position, rollback_limit() == position()).
  std::vector<std::size_t> marks;  // checkpoint positions after `held`, ascending
  std::vector<std::size_t> boundary_marks;
  for (std::size_t b : r.boundaries)
    if (b <= prompt.size() && b > opt_.boundary_margin && b - opt_.boundary_margin > held)
      boundary_marks.push_back(b - opt_.boundary_margin);
  marks = boundary_marks;
  if (opt_.checkpoint_interval > 0)
    for (std::size_t p = opt_.checkpoint_interval; p < prompt.size(); p += opt_.checkpoint_interval) marks.push_back(p);
  std::sort(marks.begin(), marks.end());
  marks.erase(std::unique(marks.begin(), marks.end()), marks.end());
  std::erase_if(marks, [&](std::size_t p) { return p <= held || p >= prompt.size(); });

  if (s->kv_only) marks.clear();
  // The last request's boundary checkpoints were for its cursor; this one takes its own.
  // (Those at multiples of the interval stay: an edit anywhere may use them.)
  if (!marks.empty() && !boundary_marks.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(s->checkpoints, [](const saved_state& c) { return c.boundary; });
  }

  std::size_t pos = held, next_mark = 0;
  while (pos < prompt.size()) {
    if (cancelled()) return make_error(errc::cancelled, "complete: cancelled after ", pos - held, " of ",
                                       prompt.size() - held, " prompt tokens");
    if (r.prompt_seconds > 0 && since(t0) > r.prompt_seconds) {
      out.reason = stop_reason::time_budget;
      out.computed_tokens = pos - held;
      out.prompt_seconds = out.total_seconds = since(t0);
      return account(std::move(out));
    }
    while (next_mark < marks.size() && marks[next_mark] <= pos) ++next_mark;
    std::size_t end = std::min(prompt.size(), pos + opt_.prefill_chunk);
    if (next_mark < marks.size()) end = std::min(end, marks[next_mark]);
    if (status st = gen.prefill(prompt.subspan(pos, end - pos), cx, end - pos); !st.ok()) {
      if (st.code() == errc::cancelled || cancelled())
        return make_error(errc::cancelled, "complete: cancelled after ", pos - held, " of ", prompt.size() - held,
                          " prompt tokens");
      return std::move(st).with_context("complete");
    }
    pos = end;
    // Past the rollback history of a recurrent layer, a session that still rolls back
    // every position holds KV caches only: no checkpoints, no cuts.
    const session_type& ses = gen.session();
    if (ses.position() > opt_.session.rollback_tokens + 1 && ses.rollback_limit() == ses.position()) {
      s->kv_only = true;
      marks.clear();
    }
    if (next_mark < marks.size() && marks[next_mark] == pos && ses.rollback_limit() < ses.position()) {
      auto blob = gen.session().save();
      if (blob.ok()) {
        std::lock_guard<std::mutex> lock(mu_);
        const bool at_boundary = std::find(boundary_marks.begin(), boundary_marks.end(), pos) != boundary_marks.end();
        s->checkpoints.push_back({pos, std::move(*blob), ++clock_, at_boundary});
      }
    }
  }
  out.computed_tokens = prompt.size() - held;
  out.prompt_seconds = since(t0);

  // 3. Generate: the generator's loop, its text through the line rules and the budget.
  gen.sampling() = sampler(sc);
  generation_options go;
  go.max_new_tokens = r.max_tokens;
  go.stop_tokens = r.stop_tokens;
  go.stop_strings = r.stop_strings;
  if (r.single_line) go.stop_strings.push_back("\n");
  detail::line_rules lines(r.min_indent);
  bool host_stopped = false, over_budget = false, first = true;
  const auto t_gen = clock::now();
  auto deliver = [&](std::string_view text) {
    if (text.empty()) return true;
    out.text.append(text);
    if (!on_text.call(on_text.object, text)) host_stopped = true;
    return !host_stopped;
  };
  auto sink = [&](std::string_view piece) -> bool {
    if (first) {
      out.first_token_seconds = since(t0);
      first = false;
    }
    // Once stopped, the generator may still flush its held text: none of it goes out.
    if (host_stopped || over_budget || lines.stopped() || cancelled()) return false;
    if (!deliver(lines.push(piece))) return false;
    if (lines.stopped()) return false;
    if (r.predict_seconds > 0 && since(t_gen) > r.predict_seconds && out.text.find('\n') != std::string::npos) {
      over_budget = true;
      return false;
    }
    return true;
  };
  auto g = gen.generate(go, cx, sink);
  if (!g.ok()) {
    if (g.error().code() == errc::cancelled || cancelled())
      return make_error(errc::cancelled, "complete: cancelled after ", out.text.size(), " bytes of text");
    return std::move(g).take_error().with_context("complete");
  }
  out.tokens = std::move(g->tokens);
  out.reason = g->reason;
  if (g->reason == stop_reason::cancelled || cancelled())
    return make_error(errc::cancelled, "complete: cancelled after ", out.tokens.size(), " tokens");
  if (lines.stopped()) out.reason = stop_reason::line_rule;
  else if (over_budget) out.reason = stop_reason::time_budget;
  else if (!host_stopped) deliver(lines.flush());
  if (first) out.first_token_seconds = since(t0);
  out.total_seconds = since(t0);
  return account(std::move(out));
}

template <class Model>
completion_result completion_engine<Model>::account(completion_result out) {
  std::lock_guard<std::mutex> lock(mu_);
  ++requests_;
  reused_ += out.reused_tokens;
  computed_ += out.computed_tokens;
  return out;
}


}  // namespace slm
