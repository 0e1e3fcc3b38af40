// slm/ensemble/ensemble.hpp - an ensemble.json made runnable: registry + router + strategy.
//
//   auto e = slm::ensemble::ensemble::load("models/ensemble.json");       // result<>
//   slm::ensemble::request q{.prompt = "cmake_minimum_required(VERSION 3.20)\n"};
//   auto r = e->run(q, cx);      // r->text, r->members (who ran), r->route (why)
//
// One request flows straight through:
//   1. route    the router (config "router") scores the domains (rules, classifier, model:
//               an orchestration member) or the members (perplexity, one member mapped at
//               a time); a member's score is its domain's score; the members are ranked by
//               it (ties: config order);
//   2. acquire  the strategy's members are taken from the registry (lazily mapped, LRU
//               eviction under the memory budget; held while the request runs, so a member
//               in use is never unloaded);
//   3. strategy top1 (the best member generates), top2 (the two best, token-mixed with
//               weights from the router's scores), mix (all members, fixed weights,
//               calibrated temperatures), cascade / vote (one-line answers; order: the
//               config's "order", else the router's ranking), refine (drafter + reviewer),
//               speculative (drafter drafts, target verifies: the target's output).
// Members whose tokenizers differ can serve top1, cascade, vote and refine (text in, text
// out); the token-level strategies (top2, mix, speculative) need a shared tokenizer and
// say so when they do not have one.
//
// Threads: run() and route() may be called from several threads at once (each with its own
// compute_context or a shared thread pool): the router is immutable, the registry
// synchronises itself, every request has its own sessions. Outputs do not depend on what
// else runs (tested: concurrent requests equal serial ones).
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/cascade.hpp"
#include "slm/ensemble/config.hpp"
#include "slm/ensemble/cross_speculative.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/ensemble/mixing.hpp"
#include "slm/ensemble/refine.hpp"
#include "slm/ensemble/registry.hpp"
#include "slm/ensemble/router.hpp"
#include "slm/ensemble/router_classifier.hpp"
#include "slm/ensemble/router_model.hpp"
#include "slm/ensemble/router_rules.hpp"
#include "slm/ensemble/vote.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/core/status.hpp"

namespace slm::ensemble {

struct request {
  std::string_view prompt;
  std::string_view file_name = {};    // optional: helps the rules router (extension, CMakeLists.txt)
  std::size_t max_new_tokens = 128;   // cascade and vote answer one line of at most this many
  sampler_config sampling = answer_options::greedy();
  std::vector<std::string> stop_strings;
  std::optional<strategy_kind> strategy;  // overrides the config's
};

struct response {
  std::string text;                  // the answer (the continuation of the prompt)
  strategy_kind strategy = strategy_kind::top1;
  route_decision route;              // scores per member (member order), ranking, reason
  std::vector<std::string> members;  // the members that ran, in order
  std::string detail;                // one line from the strategy: exit, tally, acceptance...
  std::size_t tokens = 0;            // tokens generated (the final answer's)
  double route_seconds = 0, seconds = 0;  // routing; everything
};

class ensemble {
 public:
  static result<ensemble> load(const std::filesystem::path& json_file, const checkpoint_options& opt = {});

  static result<ensemble> create(ensemble_config cfg, const checkpoint_options& opt = {});

  const ensemble_config& config() const noexcept { return cfg_; }
  registry& members() const noexcept { return *reg_; }  // synchronises itself

  // Member scores (member order) from the configured router; ranking best first.
  result<route_decision> route(const route_request& q, compute_context& cx) const;

  // Domain scores -> member scores (a member scores its domain's score), ranked.
  route_decision member_scores(route_decision d, std::span<const std::string> labels) const;

  result<response> run(const request& q, compute_context& cx) const;

 private:
  struct perplexity_tag {};
  struct model_tag {  // the orchestrator is acquired per request (the registry may evict it)
    std::size_t orchestrator = 0;
    model_router_options opt;
  };
  using held_member = std::shared_ptr<const loaded_member>;

  ensemble() = default;

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  std::span<const std::string> router_labels() const;

  result<std::vector<held_member>> acquire(std::span<const std::size_t> which) const;

  // The strategies' view of the held members (and their names, for response::members).
  static std::vector<member_ref> views(const std::vector<held_member>& held, std::vector<std::string>* names);

  // Validated: by the config for its own kind, by run() (check_strategy) for a request's.
  std::size_t member_index(std::string_view name) const { return *cfg_.find(name); }

  // Members named by a strategy key ("order"), else the router's ranking.
  std::vector<std::size_t> ordered(const route_decision& d, std::string_view key) const;

  answer_options answer_opts(const request& q) const;

  static std::string fixed3(double v);  // 3 decimals: what a one-line detail needs

  static std::string decode(const loaded_member& m, std::span<const std::int32_t> ids);

  // The token-level strategies generate without watching the text: cut it where
  // member_answer (top1) would have stopped - at the stop string that completes first in
  // the byte stream (the longest of those ending there), which is dropped (text/stop_strings.hpp).
  static std::string cut_at_stop(std::string text, std::span<const std::string> stops);

  status dispatch(const request& q, response& r, compute_context& cx) const;

  ensemble_config cfg_;
  std::unique_ptr<registry> reg_;
  std::vector<std::string> domains_;
  std::variant<perplexity_tag, model_tag, rules_router, classifier_router> router_;
};

// ---- implementation (SLM_DEFINE_ENSEMBLE)
#if SLM_DEFINE_ENSEMBLE

SLM_INLINE result<ensemble> ensemble::load(const std::filesystem::path& json_file, const checkpoint_options& opt) {
  auto cfg = ensemble_config::load(json_file);
  if (!cfg.ok()) return std::move(cfg).take_error();
  return create(std::move(*cfg), opt);
}

SLM_INLINE result<ensemble> ensemble::create(ensemble_config cfg, const checkpoint_options& opt) {
  auto reg = registry::from_config(cfg, opt);
  if (!reg.ok()) return std::move(reg).take_error();
  ensemble e;
  e.reg_ = std::make_unique<registry>(std::move(*reg));
  for (const member_spec& m : cfg.members)
    if (std::find(e.domains_.begin(), e.domains_.end(), m.domain) == e.domains_.end()) e.domains_.push_back(m.domain);
  const router_spec& rs = cfg.router;
  switch (rs.kind) {
    case router_kind::rules: {
      std::vector<route_rule> rules;
      if (rs.rules.is_array()) {
        auto parsed = parse_rules(json::dump(rs.rules), e.domains_);
        if (!parsed.ok()) return std::move(parsed).take_error().with_context("router.rules");
        rules = std::move(*parsed);
      } else {
        for (route_rule& r : default_rules())  // the built-in rules of the domains present
          if (std::find(e.domains_.begin(), e.domains_.end(), r.label) != e.domains_.end()) rules.push_back(std::move(r));
      }
      rules_options ro;
      if (!rs.default_member.empty()) ro.default_label = cfg.members[*cfg.find(rs.default_member)].domain;
      auto r = rules_router::create(e.domains_, std::move(rules), ro);
      if (!r.ok()) return std::move(r).take_error().with_context("router");
      e.router_.emplace<rules_router>(std::move(*r));
      break;
    }
    case router_kind::classifier: {
      auto r = classifier_router::load(rs.file);
      if (!r.ok()) return std::move(r).take_error().with_context("router.file");
      for (const std::string& l : r->labels())
        if (std::find(e.domains_.begin(), e.domains_.end(), l) == e.domains_.end())
          return make_error(errc::invalid_argument, "router.file: ", rs.file.string(), " routes to the domain '", l,
                            "', which no member has");
      e.router_.emplace<classifier_router>(std::move(*r));
      break;
    }
    case router_kind::perplexity: e.router_.emplace<perplexity_tag>(); break;
    case router_kind::model: {
      model_tag t;
      t.orchestrator = *cfg.find(rs.member);
      if (rs.cue) t.opt.cue = *rs.cue;
      e.router_.emplace<model_tag>(std::move(t));
      break;
    }
  }
  e.cfg_ = std::move(cfg);
  return e;
}

SLM_INLINE result<route_decision> ensemble::route(const route_request& q, compute_context& cx) const {
  if (const auto* mt = std::get_if<model_tag>(&router_)) {  // the orchestrator scores the domains
    auto held = reg_->acquire(mt->orchestrator);
    if (!held.ok()) return std::move(held).take_error().with_context("router member");
    auto r = model_router::create(domains_, (*held)->view(), cx.ex, mt->opt);
    if (!r.ok()) return std::move(r).take_error();
    auto d = r->route(q, cx);
    if (!d.ok()) return d;
    return member_scores(std::move(*d), domains_);
  }
  if (std::holds_alternative<perplexity_tag>(router_)) {
    // One member at a time, each released before the next is acquired: perplexity
    // routing works under a budget that holds one member only.
    route_decision d;
    d.reason = "perplexity, bits/byte:";
    for (std::size_t i = 0; i < cfg_.members.size(); ++i) {
      auto held = reg_->acquire(i);
      if (!held.ok()) return std::move(held).take_error().with_context(cat("member '", cfg_.members[i].name, "'"));
      const member_ref ref = (*held)->view();
      auto r = perplexity_router::create({cfg_.members[i].name}, std::span<const member_ref>(&ref, 1), cx.ex);
      if (!r.ok()) return std::move(r).take_error();
      auto one = r->route(q, cx);
      if (!one.ok()) return one;
      d.scores.push_back(one->scores[0]);
      d.reason += cat(" ", cfg_.members[i].name, " ", fixed3(-one->scores[0]));
    }
    d.ranking = rank_by_score(d.scores);
    return d;
  }
  auto d = std::visit(
      [&](const auto& r) -> result<route_decision> {
        using R = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<R, perplexity_tag> || std::is_same_v<R, model_tag>) {
          return make_error(errc::invalid_argument, "unreachable");
        } else {
          return r.route(q);
        }
      },
      router_);
  if (!d.ok()) return d;
  return member_scores(std::move(*d), router_labels());
}

SLM_INLINE route_decision ensemble::member_scores(route_decision d, std::span<const std::string> labels) const {
  const std::size_t n = cfg_.members.size();
  route_decision m;
  m.reason = std::move(d.reason);
  m.scores.assign(n, -std::numeric_limits<double>::infinity());
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t l = 0; l < labels.size(); ++l)
      if (labels[l] == cfg_.members[i].domain) m.scores[i] = d.scores[l];
  m.ranking = rank_by_score(m.scores);
  return m;
}

SLM_INLINE result<response> ensemble::run(const request& q, compute_context& cx) const {
  const auto t0 = std::chrono::steady_clock::now();
  if (q.prompt.empty()) return make_error(errc::invalid_argument, "ensemble: the prompt is empty");
  if (q.max_new_tokens == 0) return make_error(errc::invalid_argument, "ensemble: max_new_tokens is 0");
  response r;
  r.strategy = q.strategy.value_or(cfg_.strategy.kind);
  // Before any work: dispatch() takes the members of refine and speculative from the
  // config's strategy object, which was validated for the config's own kind only.
  if (q.strategy) {
    if (status st = cfg_.check_strategy(r.strategy); !st.ok()) return std::move(st).with_context("ensemble");
  }
  auto d = route(route_request{q.prompt, q.file_name}, cx);
  if (!d.ok()) return std::move(d).take_error().with_context("routing");
  r.route = std::move(*d);
  r.route_seconds = seconds_since(t0);
  SLM_TRY(dispatch(q, r, cx));
  r.seconds = seconds_since(t0);
  return r;
}

SLM_INLINE std::span<const std::string> ensemble::router_labels() const {
  if (const auto* r = std::get_if<rules_router>(&router_)) return r->labels();
  if (const auto* c = std::get_if<classifier_router>(&router_)) return c->labels();
  return {};
}

SLM_INLINE result<std::vector<ensemble::held_member>> ensemble::acquire(std::span<const std::size_t> which) const {
  std::vector<held_member> held;
  for (std::size_t i : which) {
    auto m = reg_->acquire(i);
    if (!m.ok()) return std::move(m).take_error().with_context(cat("member '", cfg_.members[i].name, "'"));
    held.push_back(std::move(*m));
  }
  return held;
}

SLM_INLINE std::vector<member_ref> ensemble::views(const std::vector<held_member>& held, std::vector<std::string>* names) {
  std::vector<member_ref> refs;
  for (const auto& m : held) {
    refs.push_back(m->view());
    if (names) names->push_back(m->spec.name);
  }
  return refs;
}

SLM_INLINE std::vector<std::size_t> ensemble::ordered(const route_decision& d, std::string_view key) const {
  const json::value& v = cfg_.strategy.params[key];
  if (!v.is_array()) return d.ranking;
  std::vector<std::size_t> out;
  for (const json::value& x : v.items()) out.push_back(member_index(x.as_string()));
  return out;
}

SLM_INLINE answer_options ensemble::answer_opts(const request& q) const {
  answer_options o;
  o.max_new_tokens = q.max_new_tokens;
  o.stop_strings = q.stop_strings;
  o.sampling = q.sampling;
  return o;
}

SLM_INLINE std::string ensemble::fixed3(double v) {
  char buf[48];
  const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::fixed, 3);
  return r.ec == std::errc{} ? std::string(buf, r.ptr) : std::string("?");
}

SLM_INLINE std::string ensemble::decode(const loaded_member& m, std::span<const std::int32_t> ids) {
  auto t = m.tok->decode(ids);
  return t.ok() ? std::move(*t) : std::string();
}

SLM_INLINE std::string ensemble::cut_at_stop(std::string text, std::span<const std::string> stops) {
  std::size_t cut = std::string::npos, end = std::string::npos;
  for (const std::string& s : stops) {
    const std::size_t at = s.empty() ? std::string::npos : text.find(s);
    if (at == std::string::npos) continue;
    if (end == std::string::npos || at + s.size() < end || (at + s.size() == end && at < cut)) cut = at, end = at + s.size();
  }
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

SLM_INLINE status ensemble::dispatch(const request& q, response& r, compute_context& cx) const {
  const route_decision& d = r.route;
  const json::value& p = cfg_.strategy.params;
  switch (r.strategy) {
    case strategy_kind::top1: {
      auto held = acquire(std::span<const std::size_t>(d.ranking.data(), 1));
      if (!held.ok()) return std::move(held).take_error();
      auto a = member_answer((*held)[0]->view(), q.prompt, answer_opts(q), cx);
      if (!a.ok()) return std::move(a).take_error();
      r.members = {(*held)[0]->spec.name};
      r.text = std::move(a->text);
      r.tokens = a->tokens.size();
      r.detail = cat("top1: ", r.members[0], ", mean log-prob ", fixed3(a->mean_logprob()));
      return {};
    }
    case strategy_kind::top2:
    case strategy_kind::mix: {
      std::vector<std::size_t> which;
      std::vector<double> weights;
      if (r.strategy == strategy_kind::top2) {
        if (d.ranking.size() < 2) return make_error(errc::invalid_argument, "top2: the ensemble has one member");
        which = {d.ranking[0], d.ranking[1]};
        double a = d.scores[which[0]], b = d.scores[which[1]];
        // Perplexity scores (-bits/byte) and model-router scores (log-probs) are
        // log-likelihood-like: softmax; rule and classifier scores are >= 0: normalise.
        // A member with score 0 gets weight 0.
        if (std::holds_alternative<perplexity_tag>(router_) || std::holds_alternative<model_tag>(router_)) {
          const double mx = std::max(a, b);
          a = std::exp(a - mx);
          b = std::exp(b - mx);
        }
        if (!(a + b > 0)) a = 1, b = 0;
        weights = {a / (a + b), b / (a + b)};
      } else {
        for (std::size_t i = 0; i < cfg_.members.size(); ++i) {
          const json::value& w = p["weights"][cfg_.members[i].name];
          const double wi = w.is_number() ? w.as_double() : (p["weights"].is_object() ? 0.0 : 1.0);
          if (wi > 0) {
            which.push_back(i);
            weights.push_back(wi);
          }
        }
      }
      if (which.empty())  // "weights" may give every member 0: nothing to mix
        return make_error(errc::invalid_argument, "mix: strategy.weights gives every member weight 0");
      auto held = acquire(which);
      if (!held.ok()) return std::move(held).take_error();
      const std::vector<member_ref> refs = views(*held, &r.members);
      mixture_options mo;
      mo.max_new_tokens = q.max_new_tokens;
      mo.sampling = q.sampling;
      if (const std::int32_t eos = (*held)[0]->tok->specials().eos; eos >= 0) mo.stop_tokens.push_back(eos);
      auto ids = encode_prompt(refs[0], q.prompt);
      if (!ids.ok()) return std::move(ids).take_error();
      auto g = generate_mixture(refs, weights, *ids, mo, cx);
      if (!g.ok()) return std::move(g).take_error();
      r.text = cut_at_stop(decode(*(*held)[0], g->tokens), q.stop_strings);
      r.tokens = g->tokens.size();
      double total = 0;
      for (double w : weights) total += w;
      r.detail = cat(to_string(r.strategy), ": weights");
      for (std::size_t k = 0; k < refs.size(); ++k) r.detail += cat(" ", refs[k].name, " ", fixed3(weights[k] / total));
      return {};
    }
    case strategy_kind::cascade: {
      const std::vector<std::size_t> order = ordered(d, "order");
      auto held = acquire(order);
      if (!held.ok()) return std::move(held).take_error();
      const std::vector<member_ref> refs = views(*held, nullptr);
      cascade_options co;
      if (p["threshold"].is_number()) co.confidence_threshold = p["threshold"].as_double();
      if (p["agreement"].is_number()) co.agreement_threshold = p["agreement"].as_double();
      co.answer = one_line_answer(q.max_new_tokens);
      co.answer.sampling = q.sampling;
      auto c = cascade(refs, q.prompt, co, cx);
      if (!c.ok()) return std::move(c).take_error();
      for (const cascade_step& s : c->steps) r.members.emplace_back(s.name);
      r.text = std::string(c->text());
      r.tokens = c->winning().reply.tokens.size();
      r.detail = cat("cascade: exit ", to_string(c->exit), " after ", c->steps.size(), " of ", order.size(),
                     " members; winner ", c->winning().name, " (confidence ", fixed3(c->winning().confidence), ")");
      return {};
    }
    case strategy_kind::vote: {
      std::vector<std::size_t> order = ordered(d, "order");
      if (!p["order"].is_array()) std::sort(order.begin(), order.end());  // all members, config order
      auto held = acquire(order);
      if (!held.ok()) return std::move(held).take_error();
      const std::vector<member_ref> refs = views(*held, &r.members);
      vote_options vo;
      vo.answer = one_line_answer(q.max_new_tokens);
      vo.answer.sampling = q.sampling;
      auto v = majority_vote(refs, q.prompt, vo, cx);
      if (!v.ok()) return std::move(v).take_error();
      r.text = v->winner().answer;
      r.tokens = v->answers[v->winner().members.front()].tokens.size();
      r.detail = cat("vote: ", v->winner().votes(), " of ", refs.size(), " votes");
      return {};
    }
    case strategy_kind::refine: {
      const std::size_t which[] = {member_index(p["drafter"].as_string()), member_index(p["reviewer"].as_string())};
      auto held = acquire(which);
      if (!held.ok()) return std::move(held).take_error();
      refine_options ro;
      ro.generation = answer_opts(q);
      auto f = refine((*held)[0]->view(), (*held)[1]->view(), q.prompt, ro, cx);
      if (!f.ok()) return std::move(f).take_error();
      r.members = {(*held)[0]->spec.name, (*held)[1]->spec.name};
      r.text = std::move(f->text);
      r.tokens = f->reviewed.size();
      r.detail = cat("refine: ", f->accepted_tokens, " of ", f->reviewed.size(), " draft tokens kept",
                     f->rewritten ? ", rest rewritten" : "", "; reviewer mean log-prob ", fixed3(f->draft_mean_logprob_reviewer),
                     " -> ", fixed3(f->final_mean_logprob_reviewer));
      return {};
    }
    case strategy_kind::speculative: {
      const std::size_t which[] = {member_index(p["drafter"].as_string()), member_index(p["target"].as_string())};
      auto held = acquire(which);
      if (!held.ok()) return std::move(held).take_error();
      cross_speculative_options so;
      so.max_new_tokens = q.max_new_tokens;
      so.sampling = q.sampling;
      if (p["draft_tokens"].is_number()) so.draft_tokens = static_cast<std::size_t>(p["draft_tokens"].as_double());
      if (const std::int32_t eos = (*held)[1]->tok->specials().eos; eos >= 0) so.stop_tokens.push_back(eos);
      const member_ref target = (*held)[1]->view();
      auto ids = encode_prompt(target, q.prompt);
      if (!ids.ok()) return std::move(ids).take_error();
      auto s = generate_cross_speculative((*held)[0]->view(), target, *ids, so, cx);
      if (!s.ok()) return std::move(s).take_error();
      r.members = {(*held)[0]->spec.name, (*held)[1]->spec.name};
      r.text = cut_at_stop(decode(*(*held)[1], s->tokens), q.stop_strings);
      r.tokens = s->tokens.size();
      r.detail = cat("speculative: ", so.draft_tokens, " drafts per round, acceptance ", s->stats.acceptance_rate());
      return {};
    }
  }
  return make_error(errc::invalid_argument, "unknown strategy");
}

#endif  // SLM_DEFINE_ENSEMBLE

}  // namespace slm::ensemble
