// slm/models/nam56r/model_impl.hpp - the members of basic_nam56r_model (models/nam56r/model.hpp):
// loading, the layer table, and the session's forward pass, drafting and state records.
//
// A template's members, so compiled where a composition is instantiated: header-only mode
// includes this through model.hpp; in compiled mode the library's nam56r unit instantiates
// nam56r_model (every part) and a host that composes another specialist
// (models/specialist.hpp) includes this to instantiate its own. A host of nam56r_model alone
// never parses it.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/models/nam56r/bind.hpp"
#include "slm/models/nam56r/model.hpp"

namespace slm {

template <class Mixer, class Ffn, class Extras>
SLM_INLINE result<basic_nam56r_model<Mixer, Ffn, Extras>> basic_nam56r_model<Mixer, Ffn, Extras>::load(const std::filesystem::path& dir, const checkpoint_options& opt) {
  auto ck = checkpoint::open(dir, opt);
  if (!ck.ok()) return std::move(ck).take_error();
  return from_checkpoint(std::move(*ck));
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE result<basic_nam56r_model<Mixer, Ffn, Extras>> basic_nam56r_model<Mixer, Ffn, Extras>::from_checkpoint(checkpoint&& ck_in) {
  auto cfg = nam56r_config::from_json(ck_in.config());
  if (!cfg.ok()) return std::move(cfg).take_error().with_context(ck_in.dir().string());
  basic_nam56r_model m;
  m.cfg_ = std::move(*cfg);
  m.ck_.reset(new (std::nothrow) checkpoint(std::move(ck_in)));
  if (!m.ck_) return make_error(errc::out_of_memory, "cannot allocate the checkpoint");
  SLM_TRY(m.load_weights());
  return m;
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::head_logits(const float* hidden, std::size_t rows, float* logits,
                                            compute_context& cx) const {
  if (rows > 0 && (!hidden || !logits)) return make_error(errc::invalid_argument, "head_logits: a null buffer");
  return rows > 0 ? head_.apply(hidden, rows, logits, cx) : status{};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE std::vector<typename basic_nam56r_model<Mixer, Ffn, Extras>::layer_row> basic_nam56r_model<Mixer, Ffn, Extras>::describe() const {
  std::vector<layer_row> rows;
  auto add = [&](std::size_t index, std::string kind, std::initializer_list<std::string> prefixes) -> layer_row& {
    layer_row r;
    r.index = index;
    r.kind = std::move(kind);
    std::vector<std::string> fmts;
    for (const auto& e : ck_->tensors()) {
      bool match = false;
      for (const std::string& p : prefixes) match |= e.name.substr(0, p.size()) == p;
      if (!match) continue;
      const auto& info = ck_->info(e);
      r.bytes += info.end - info.begin;
      const bool aux = e.name.find(".weight_scale") != std::string_view::npos ||
                       e.name.find(".weight_global_scale") != std::string_view::npos;
      const bool ints = info.type == dtype::i64 || info.type == dtype::i32;  // hash buffers, not weights
      if (aux || ints) continue;
      // Packed FP4, two values a byte: compressed-tensors' P.weight_packed, or ModelOpt's
      // U8 P.weight{ix} beside P.weight_scale{ix} (E4M3 scales: NVFP4, E8M0 bytes: MXFP4).
      const std::string_view n = e.name;
      const std::size_t w = n.rfind(".weight");
      const std::string scale = w == std::string_view::npos
                                    ? std::string()
                                    : cat(n.substr(0, w), ".weight_scale",
                                          n.substr(0, 14 + w) == cat(n.substr(0, w), ".weight_packed") ? n.substr(w + 14)
                                                                                                        : n.substr(w + 7));
      const auto* se = scale.empty() ? nullptr : ck_->find(scale);
      const bool packed = se && (info.type == dtype::u8 || info.type == dtype::f4);
      r.params += static_cast<std::uint64_t>(info.shape.numel()) * (packed ? 2 : 1);
      std::string f = std::string(safetensors_name(info.type));
      for (char& ch : f) ch = ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch;
      if (packed) f = ck_->info(*se).type == dtype::f8_e4m3 ? "nvfp4" : "mxfp4";
      else if (se && info.type == dtype::f8_e4m3) f = "fp8";
      if (std::find(fmts.begin(), fmts.end(), f) == fmts.end()) fmts.push_back(f);
    }
    for (const auto& f : fmts) r.formats += (r.formats.empty() ? "" : "+") + f;
    r.active_params = r.params;
    rows.push_back(std::move(r));
    return rows.back();
  };
  const std::size_t d = cfg_.hidden_size;
  add(0, "embedding", {"embedding.word_embeddings."}).active_params = d;
  if constexpr (Extras::ngram_hash)
    if (ngram_) {
      auto& r = add(0, "ngram", {nam56r::ngram_hash_prefix() + "."});
      r.active_params = static_cast<std::uint64_t>(ngram_->cfg.concat_dim()) * (1 + d);
    }
  if constexpr (Extras::structure)
    if (structure_) add(0, "structure", {nam56r::structure_prefix() + "."});
  for (std::size_t i = 0; i < cfg_.num_layers; ++i) {
    const nam56r_layer& l = cfg_.plan.layers[i];
    auto& r = add(i, std::string(to_string(l.kind)), {l.prefix + "."});
    if (l.kind == nam56r_layer_kind::moe) {
      const std::uint64_t per = 2ull * cfg_.moe_ffn_hidden_size * d;
      r.active_params = r.params - per * (cfg_.num_moe_experts - cfg_.moe_router_topk);
    }
  }
  for (std::size_t k = 0; k < cfg_.mtp_num_layers; ++k) {
    const std::string p = nam56r_mtp_prefix(k);
    add(k, cat("mtp.", k, ".mla"), {p + ".enorm.", p + ".hnorm.", p + ".eh_proj.", p + ".final_layernorm.",
                                     p + ".mtp_model_layer.layers.0."});
    add(k, cat("mtp.", k, ".mlp"), {p + ".mtp_model_layer.layers.1."});
  }
  auto& h = add(0, "head", {"output_layer.", "decoder.final_norm."});
  h.active_params = static_cast<std::uint64_t>(cfg_.vocab_size) * d + d;
  return rows;
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::norm_of(rms_norm& n, const std::string& name) const {
  auto v = load_vector(*ck_, name, cfg_.hidden_size);
  if (!v.ok()) return std::move(v).take_error();
  n.weight = std::move(*v);
  n.eps = static_cast<float>(cfg_.layernorm_epsilon);
  return {};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::load_input_norm(block_norm& norm, const std::string& prefix,
                                                                  const std::vector<std::size_t>& bare,
                                                                  std::size_t index, std::string_view bare_key) const {
  const std::string name = prefix + ".input_layernorm.weight";
  norm.identity = std::find(bare.begin(), bare.end(), index) != bare.end();
  if (norm.identity) return {};  // a stored norm stays unbound and is reported
  if (!ck_->find(name))
    return make_error(errc::not_found, ck_->dir().string(), ": no tensor named '", name,
                      "' (an attention layer stored without its input norm must be listed in config.json's \"",
                      bare_key, "\")");
  return norm_of(norm.rms, name);
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::load_attn(block_norm& norm, attention& attn, const std::string& prefix, bool dsa,
                                          const std::vector<std::size_t>& bare, std::size_t index,
                                          std::string_view bare_key) const {
  SLM_TRY(load_input_norm(norm, prefix, bare, index, bare_key));
  auto at = nam56r::load_mla<rope_interleaved>(*ck_, prefix + ".self_attention", cfg_.mla(dsa));
  if (!at.ok()) return std::move(at).take_error();
  attn = std::move(*at);
  return {};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::load_weights() {
  const checkpoint& ck = *ck_;
  const std::size_t d = cfg_.hidden_size, V = cfg_.padded_vocab_size;
  {
    auto w = load_linear_weight(ck, "embedding.word_embeddings");
    if (!w.ok()) return std::move(w).take_error();
    if (w->rows != V || w->cols != d)
      return make_error(errc::format_error, ck.dir().string(), ": module 'embedding.word_embeddings' is [", w->rows,
                        ", ", w->cols, "], the config implies [", V, ", ", d, "]");
    word_ = *w;
  }
  if constexpr (Extras::ngram_hash)
    if (cfg_.ngram_hash) {
      auto n = nam56r::load_ngram_hash(ck, nam56r::ngram_hash_prefix(), *cfg_.ngram_hash);
      if (!n.ok()) return std::move(n).take_error();
      ngram_ = std::move(*n);
    }
  if constexpr (Extras::structure)
    if (cfg_.structure_embedding) {
      auto s = nam56r::load_structure_embedding(ck, nam56r::structure_prefix(), *cfg_.structure_embedding);
      if (!s.ok()) return std::move(s).take_error();
      structure_ = std::move(*s);
    }
  // One layer of the stack per plan entry, with the one slot its kind fills.
  std::size_t dsa_rank = 0;
  stack_.layers.resize(cfg_.num_layers);
  for (std::size_t i = 0; i < cfg_.num_layers; ++i) {
    const nam56r_layer& l = cfg_.plan.layers[i];
    const std::string& p = l.prefix;
    auto& L = stack_.layers[i];
    L.has_mixer = l.kind != nam56r_layer_kind::moe;
    L.has_ffn = l.kind == nam56r_layer_kind::moe;
    // The norm of the slot the kind fills, for the library's parts and a host's alike:
    // input_layernorm for A (the identity where config.json lists the layer bare),
    // pre_mlp_layernorm for E, norm for M and R.
    auto slot_norm = [&]() -> status {
      switch (l.kind) {
        case nam56r_layer_kind::mla:
        case nam56r_layer_kind::dsa:
          return load_input_norm(L.mixer_norm, p, cfg_.attention_layers_without_input_norm, i,
                                 "attention_layers_without_input_norm");
        case nam56r_layer_kind::moe: return norm_of(L.ffn_norm.rms, p + ".pre_mlp_layernorm.weight");
        case nam56r_layer_kind::mamba3:
        case nam56r_layer_kind::m2rnn: return norm_of(L.mixer_norm.rms, p + ".norm.weight");
        case nam56r_layer_kind::mlp: break;
      }
      return make_error(errc::invalid_argument, "NAM56R: a dense MLP layer in the main stack");
    };
    // A host's own part serving this kind (nam56r::host_part, named in slm::specialist)
    // takes the layer in place of the library's; the model loads the slot's norm.
    bool hosted = false;
    auto host = [&]<class P>() -> status {
      if constexpr (nam56r::host_part<P>) {
        // A mixer serves a mixer's kind, a feed-forward the MoE's: the slot the kind fills.
        static_assert(mixer_part<P> == (P::serves != nam56r_layer_kind::moe),
                      "a host part's slot (mixer or feed-forward) must be the one its layer kind fills");
        if (hosted || P::serves != l.kind) return {};
        SLM_TRY(slot_norm());
        auto part = P::load(ck, cfg_, l);
        if (!part.ok()) return std::move(part).take_error().with_context(cat("layer ", i));
        if constexpr (mixer_part<P>) {
          L.mixer.impl.template emplace<P>(std::move(*part));
        } else {
          static_assert(Mixer::template has<no_mixer>, "a host feed-forward part needs no_mixer in the mixer slot");
          L.ffn.impl.template emplace<P>(std::move(*part));
          L.mixer.impl.template emplace<no_mixer>();
        }
        hosted = true;
      }
      return {};
    };
    SLM_TRY(nam56r::for_each_alternative<Mixer>(host));
    SLM_TRY(nam56r::for_each_alternative<Ffn>(host));
    if (hosted) {
      dsa_rank += l.kind == nam56r_layer_kind::dsa;
      continue;
    }
    // A kind whose part the stack's variants leave out: refused, naming the layer (the
    // words slm::specialist's own checks use).
    auto not_listed = [&](std::string_view what) {
      return make_error(errc::unsupported, ck.dir().string(), ": layer ", i, " is ", what,
                        ", which this specialist type does not list among its parts");
    };
    switch (l.kind) {
      case nam56r_layer_kind::mla:
      case nam56r_layer_kind::dsa: {
        const bool dsa = l.kind == nam56r_layer_kind::dsa;
        if constexpr (!Mixer::template has<nam56r::attention_part>) {
          return not_listed(dsa ? "DSA-MLA attention" : "dense MLA attention");
        } else {
          nam56r::attention_part a;
          SLM_TRY(load_attn(L.mixer_norm, a.attn, p, dsa, cfg_.attention_layers_without_input_norm, i,
                            "attention_layers_without_input_norm"));
          if (dsa && cfg_.dsa_index_cache == "causal") {
            const auto& full = cfg_.dsa_index_cache_full_ranks;
            a.publishes_index = std::find(full.begin(), full.end(), dsa_rank) != full.end();
            a.reuses_index = !a.publishes_index;
            if (a.reuses_index) a.attn.indexer.reset();  // its weights exist but never run
          }
          dsa_rank += dsa;
          L.mixer.impl.template emplace<nam56r::attention_part>(std::move(a));
        }
        break;
      }
      case nam56r_layer_kind::moe: {
        if constexpr (!Ffn::template has<basic_moe_ffn<>> || !Mixer::template has<no_mixer>) {
          return not_listed("a MoE feed-forward");
        } else {
          SLM_TRY(slot_norm());
          nam56r::moe_config mc;
          mc.hidden = d;
          mc.n_experts = cfg_.num_moe_experts;
          mc.top_k = cfg_.moe_router_topk;
          mc.expert_ffn = cfg_.moe_ffn_hidden_size;
          mc.shared_ffn = cfg_.moe_shared_expert_intermediate_size;
          mc.sigmoid = cfg_.moe_router_score_function == "sigmoid";
          mc.act = activation::gelu;
          auto f = nam56r::load_moe<router_by_config>(ck, p + ".mlp", mc);
          if (!f.ok()) return std::move(f).take_error();
          L.ffn.impl.template emplace<basic_moe_ffn<>>(std::move(*f));
          L.mixer.impl.template emplace<no_mixer>();
        }
        break;
      }
      case nam56r_layer_kind::mamba3: {
        if constexpr (!Mixer::template has<nam56r::mamba3_part>) {
          return not_listed("a Mamba-3 mixer");
        } else {
          nam56r::mamba3_part m;
          SLM_TRY(slot_norm());
          SLM_TRY(norm_of(m.pre_norm, p + ".mixer.impl.pre_norm.weight"));
          auto x = nam56r::load_mamba3(ck, p + ".mixer.impl.mixer", cfg_.mamba(i));
          if (!x.ok()) return std::move(x).take_error();
          m.mixer = std::move(*x);
          L.mixer.impl.template emplace<nam56r::mamba3_part>(std::move(m));
        }
        break;
      }
      case nam56r_layer_kind::m2rnn: {
        if constexpr (!Mixer::template has<m2rnn_mixer>) {
          return not_listed("an M2RNN mixer");
        } else {
          SLM_TRY(slot_norm());
          auto x = nam56r::load_m2rnn(ck, p + ".mixer.impl", cfg_.m2rnn());
          if (!x.ok()) return std::move(x).take_error();
          L.mixer.impl.template emplace<m2rnn_mixer>(std::move(*x));
        }
        break;
      }
      case nam56r_layer_kind::mlp:
        return make_error(errc::invalid_argument, "NAM56R: a dense MLP layer in the main stack");
    }
  }
  // A part outside the stack that the type leaves out (Extras) is refused after the
  // layers, in the words slm::specialist uses for its parts.
  auto extra_not_listed = [&](std::string_view what, std::string_view part) {
    return make_error(errc::unsupported, ck.dir().string(), ": the checkpoint has ", what,
                      ", which this specialist type does not list (", part, ")");
  };
  if (!Extras::ngram_hash && cfg_.ngram_hash) return extra_not_listed("an n-gram hash embedding", "part::ngram_hash");
  if (!Extras::structure && cfg_.structure_embedding)
    return extra_not_listed("a structure embedding", "part::structure");
  if (!Extras::mtp && cfg_.mtp_num_layers > 0)
    return extra_not_listed(cat(cfg_.mtp_num_layers, " MTP depths"), "part::mtp");
  for (std::size_t k = 0; k < (Extras::mtp ? cfg_.mtp_num_layers : 0); ++k) {
    mtp_depth t;
    const std::string p = nam56r_mtp_prefix(k);
    SLM_TRY(norm_of(t.enorm, p + ".enorm.weight"));
    SLM_TRY(norm_of(t.hnorm, p + ".hnorm.weight"));
    SLM_TRY(norm_of(t.final_norm, p + ".final_layernorm.weight"));
    auto eh = load_linear(ck, p + ".eh_proj", d, 2 * d);
    if (!eh.ok()) return std::move(eh).take_error();
    t.eh_proj = std::move(*eh);
    SLM_TRY(load_attn(t.attn_norm, t.attn, p + ".mtp_model_layer.layers.0", false,
                      cfg_.mtp_attention_layers_without_input_norm, k, "mtp_attention_layers_without_input_norm"));
    const std::string mlp = p + ".mtp_model_layer.layers.1.mlp";
    SLM_TRY(norm_of(t.mlp_norm, mlp + ".linear_fc1.layer_norm_weight"));
    auto f = load_feed_forward(ck, mlp + ".linear_fc1", mlp + ".linear_fc2", d, cfg_.ffn_hidden_size, activation::gelu);
    if (!f.ok()) return std::move(f).take_error();
    t.mlp = std::move(*f);
    mtp_.push_back(std::move(t));
  }
  SLM_TRY(norm_of(final_norm_, "decoder.final_norm.weight"));
  auto out = load_linear(ck, "output_layer", V, d);
  if (!out.ok()) return std::move(out).take_error();
  auto rows = slice_rows(out->w, 0, cfg_.vocab_size);  // padding rows: never computed
  if (!rows.ok()) return std::move(rows).take_error();
  head_.w = *rows;
  // Every tensor of the canonical layout is bound above (the converter drops rotary and
  // Transformer Engine buffers): one left over means config.json describes another model
  // (a smaller num_layers, a conv kernel of 0 beside stored conv weights).
  return ck.check_all_bound();
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                                 compute_context& cx) {
  return forward(ids, rows, logits, cx, structure_inputs{});
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::forward(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                                 compute_context& cx, const structure_inputs& side,
                                                 std::size_t hidden_rows, float* hidden) {
  SLM_TRY(check_call("forward", ids, rows, logits, m_->cfg_.vocab_size));
  const std::size_t T = ids.size();
  if (hidden_rows > T)
    return make_error(errc::invalid_argument, "forward: ", hidden_rows, " hidden rows asked of ", T, " tokens");
  if (hidden_rows > 0 && !hidden) return make_error(errc::invalid_argument, "forward: hidden is null");
  return advance(T, [&]() -> status {
    SLM_TRY(run(ids, rows, logits, cx, side, hidden_rows, hidden));
    st_.tokens.insert(st_.tokens.end(), ids.begin(), ids.end());
    return {};
  });
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::draft(std::span<const std::int32_t> next, float* logits, compute_context& cx) {
  if constexpr (!Extras::mtp) {
    return make_error(errc::unsupported, "draft: the model has no MTP layers (its type does not list part::mtp)");
  } else {
    return draft_depths(next, logits, cx);
  }
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::draft_depths(std::span<const std::int32_t> next,
                                                                               float* logits, compute_context& cx) {
  SLM_TRY(weights_);
  const nam56r_config& c = m_->cfg_;
  const std::size_t m = next.size(), D = m_->mtp_.size(), d = c.hidden_size, p = pos_;
  if (D == 0) return make_error(errc::unsupported, "draft: the model has no MTP layers");
  if (m == 0 || m > D)
    return make_error(errc::invalid_argument, "draft: ", m, " tokens given, expected 1..", D, " (one per MTP depth)");
  if (p == 0) return make_error(errc::invalid_argument, "draft: the session holds no token yet");
  if (!logits) return make_error(errc::invalid_argument, "draft: logits is null");
  SLM_TRY(check_token_ids("draft", next, c.vocab_size));
  SLM_TRY(ensure_state());
  cur_.resize(D);
  // seq = consumed tokens ++ next
  std::vector<std::int32_t> seq(st_.tokens);
  seq.insert(seq.end(), next.begin(), next.end());
  std::size_t prev_start = 0;  // depth k-1's first computed position this call
  for (std::size_t k = 0; k < m; ++k) {
    const mtp_depth& md = m_->mtp_[k];
    const std::size_t start = st_.mtp_n[k], Tk = p - start, kk = k + 1;
    floats& cur = cur_[k];
    SLM_TRY(cur.resize(Tk * d));
    SLM_TRY(u_.resize(Tk * 2 * d));
    SLM_TRY(h_.resize(Tk * d));
    SLM_TRY(y_.resize(Tk * d));
    // e: embedding of seq[t + kk] for t = start .. p - 1 (true n-gram history).
    SLM_TRY(embed(std::span<const std::int32_t>(seq.data() + start + kk, Tk), seq.data(), start + kk, h_.data(),
                  nullptr, cx));
    for (std::size_t t = 0; t < Tk; ++t) {
      md.enorm.apply_row(h_.data() + t * d, u_.data() + t * 2 * d, d);
      const float* hp = nullptr;
      const std::size_t pos = start + t;
      if (k == 0) hp = st_.hf.data() + pos * d;
      else if (pos < prev_start) hp = st_.hk[k - 1].data() + pos * d;
      else hp = cur_[k - 1].data() + (pos - prev_start) * d;
      md.hnorm.apply_row(hp, u_.data() + t * 2 * d + d, d);
    }
    SLM_TRY(md.eh_proj.apply(u_.data(), Tk, h_.data(), cx));  // [Tk, 2d] x [2d, d] -> [Tk, d]
    status s = sublayers(md, Tk, st_.mtp[k], cx);
    if (!s.ok()) {
      st_.mtp[k].truncate(start);
      return s;
    }
    for (std::size_t t = 0; t < Tk; ++t) md.final_norm.apply_row(h_.data() + t * d, cur.data() + t * d, d);
    s = m_->head_.apply(cur.data() + (Tk - 1) * d, 1, logits + k * c.vocab_size, cx);  // [1, d] x [d, V] -> [1, V]
    if (!s.ok()) {
      st_.mtp[k].truncate(start);
      return s;
    }
    // Keep only the positions whose inputs are consumed tokens.
    const std::size_t keep = verified_len(k);
    SLM_TRY(st_.hk[k].resize(std::max(st_.hk[k].size(), keep * d)));
    for (std::size_t pos = start; pos < keep; ++pos)
      std::copy(cur.data() + (pos - start) * d, cur.data() + (pos - start + 1) * d, st_.hk[k].data() + pos * d);
    st_.mtp[k].truncate(keep);
    st_.mtp_n[k] = keep;
    prev_start = start;
  }
  return {};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::make_state(state& s, const session_options& o) const {
  const basic_nam56r_model& m = *m_;
  SLM_TRY(m.stack_.init_caches(s.layers, o));
  s.mtp.resize(m.mtp_.size());
  for (std::size_t i = 0; i < m.mtp_.size(); ++i) SLM_TRY(m.mtp_[i].attn.init_cache(s.mtp[i], o));
  s.mtp_n.assign(m.mtp_.size(), 0);
  s.hk.resize(m.mtp_.size());
  return {};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE std::uint64_t basic_nam56r_model<Mixer, Ffn, Extras>::session::fingerprint(const state& s) const {
  const basic_nam56r_model& m = *m_;
  const nam56r_config& c = m.cfg_;
  state_hasher h;
  h.add(std::string_view("slm nam56r session"));
  for (std::size_t v : {c.vocab_size, c.hidden_size, c.num_layers, c.mtp_num_layers, c.kv_lora_rank,
                        c.qk_pos_emb_head_dim, c.dsa_indexer_head_dim, c.mamba_state_dim, c.mamba_head_dim,
                        c.mamba_expand, c.mamba_num_groups, c.mamba3_mimo_rank, c.m2rnn_k_head_dim,
                        c.m2rnn_v_head_dim, c.m2rnn_num_heads, c.m2rnn_conv_kernel, std::size_t{c.ngram_hash.has_value()}})
    h.add(static_cast<std::uint64_t>(v));
  h.add(static_cast<std::uint64_t>(opt_.kv));
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    h.add(static_cast<std::uint64_t>(c.plan.layers[i].kind));
    s.layers[i].fingerprint(h);  // a MoE layer's (empty) cache adds nothing
  }
  for (const auto& c2 : s.mtp) c2.fingerprint(h);
  return h.value();
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::write_records(state_writer& w, const state& s) const {
  const basic_nam56r_model& m = *m_;
  const std::size_t d = m.cfg_.hidden_size;
  auto record = [&w](const auto& cache) -> status {
    SLM_TRY(w.kind(cache.kind()));
    return cache.save(w);
  };
  for (std::size_t i = 0; i < s.layers.size(); ++i)  // a MoE layer's is "none" and empty
    if (status st = record(s.layers[i]); !st.ok()) return std::move(st).with_context(cat("session state: layer ", i));
  for (std::size_t k = 0; k < s.mtp.size(); ++k) {
    SLM_TRY(w.kind("mtp"));
    SLM_TRY(s.mtp[k].save(w));
    SLM_TRY(w.f32_rows(s.hk[k].data(), s.mtp_n[k], d));
  }
  SLM_TRY(w.kind("history"));
  SLM_TRY(w.u64(s.tokens.size()));
  SLM_TRY(w.i32(s.tokens.data(), s.tokens.size()));
  return w.f32_rows(s.hf.data(), m.mtp_.empty() ? 0 : s.tokens.size(), d);
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::read_records(state_reader& r, state& fresh, std::size_t position) const {
  const basic_nam56r_model& m = *m_;
  const std::size_t d = m.cfg_.hidden_size, V = m.cfg_.vocab_size;
  for (std::size_t i = 0; i < fresh.layers.size(); ++i) {
    const std::string where = cat("layer ", i, " (", to_string(m.cfg_.plan.layers[i].kind), ")");
    if (m.stack_.layers[i].has_mixer) SLM_TRY(read_cache_record(r, fresh.layers[i], where, position));
    else SLM_TRY(expect_record(r, "none", where));
  }
  for (std::size_t k = 0; k < fresh.mtp.size(); ++k) {
    const std::string where = cat("MTP depth ", k + 1);
    SLM_TRY(expect_record(r, "mtp", where));
    if (auto st = fresh.mtp[k].load(r); !st.ok()) return std::move(st).with_context(where);
    const std::size_t n = fresh.mtp[k].size();
    if (n > verified_len(k, position))
      return make_error(errc::format_error, where, " holds ", n, " positions, at position ", position,
                        " it can hold at most ", verified_len(k, position));
    fresh.mtp_n[k] = n;
    if (auto st = r.f32_rows(fresh.hk[k], n, d, "MTP hidden rows"); !st.ok()) return std::move(st).with_context(where);
  }
  SLM_TRY(expect_record(r, "history", "the history record"));
  std::size_t count = 0;
  SLM_TRY(r.size(count, "token count"));
  if (count != position)
    return make_error(errc::format_error, "the history holds ", count, " tokens, the header says ", position);
  SLM_TRY(r.need_items(count, sizeof(std::int32_t), "token ids"));
  fresh.tokens.resize(count);
  SLM_TRY(r.i32(fresh.tokens.data(), count, "token ids"));
  for (std::size_t t = 0; t < count; ++t)
    if (fresh.tokens[t] < 0 || static_cast<std::size_t>(fresh.tokens[t]) >= V)
      return make_error(errc::format_error, "history token ", t, " is ", fresh.tokens[t], ", outside the vocabulary [0, ",
                        V, ")");
  return r.f32_rows(fresh.hf, m.mtp_.empty() ? 0 : position, d, "final hidden rows");
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE void basic_nam56r_model<Mixer, Ffn, Extras>::session::truncate_state(state& s, std::size_t len) const noexcept {
  for (auto& c : s.layers) c.truncate(len);
  if (s.tokens.size() > len) s.tokens.resize(len);
  for (std::size_t k = 0; k < s.mtp.size(); ++k) {  // a depth keeps only positions whose inputs remain
    s.mtp_n[k] = std::min(s.mtp_n[k], verified_len(k, len));
    s.mtp[k].truncate(s.mtp_n[k]);
  }
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::embed(std::span<const std::int32_t> ids, const std::int32_t* hist_seq,
                                               std::size_t j0, float* out, const structure_inputs* side,
                                               compute_context& cx) {
  const basic_nam56r_model& m = *m_;
  const std::size_t d = m.cfg_.hidden_size, T = ids.size();
  for (std::size_t t = 0; t < T; ++t)
    dequantize_row(m.word_, static_cast<std::size_t>(ids[t]), std::span<float>(out + t * d, d));
  if constexpr (Extras::ngram_hash)
    if (m.ngram_) {
      ngram_history h;
      for (std::size_t i = 0; i < h.prev.size(); ++i) h.prev[i] = j0 > i ? hist_seq[j0 - 1 - i] : 0;
      h.n = j0;
      SLM_TRY(m.ngram_->add_to(ids, h, out, ws_, cx));
    }
  if constexpr (Extras::structure)
    if (m.structure_ && side) SLM_TRY(m.structure_->add_to(*side, T, out, ws_, cx));
  return {};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::sublayers(const mtp_depth& md, std::size_t T, attention::cache& kc,
                                                   compute_context& cx) {
  const std::size_t d = m_->cfg_.hidden_size;
  SLM_TRY(xn_.resize(T * d));
  md.attn_norm.apply(h_.data(), T, d, d, xn_.data(), d);  // the identity where declared bare
  SLM_TRY(md.attn.forward(xn_.data(), T, y_.data(), kc, ws_.proj, ws_.attn, ws_.index, cx, opt_.mla));  // [T, d] -> [T, d]
  for (std::size_t i = 0; i < T * d; ++i) h_[i] += y_[i];
  md.mlp_norm.apply(h_.data(), T, d, d, xn_.data(), d);
  SLM_TRY(md.mlp.forward(xn_.data(), T, y_.data(), ws_.ffn, cx));  // [T, d] -> [T, d]
  for (std::size_t i = 0; i < T * d; ++i) h_[i] += y_[i];
  return {};
}

template <class Mixer, class Ffn, class Extras>
SLM_INLINE status basic_nam56r_model<Mixer, Ffn, Extras>::session::run(std::span<const std::int32_t> ids, std::size_t rows, float* logits,
                                             compute_context& cx, const structure_inputs& side, std::size_t hidden_rows,
                                             float* hidden) {
  const basic_nam56r_model& m = *m_;
  const nam56r_config& c = m.cfg_;
  const std::size_t T = ids.size(), d = c.hidden_size, pos0 = pos_;
  SLM_TRY(h_.resize(T * d));
  SLM_TRY(embed(ids, st_.tokens.data(), pos0, h_.data(), &side, cx));
  SLM_TRY(m.stack_.forward(h_.data(), T, d, st_.layers, xn_, y_, ws_, cx));
  float* h = h_.data();
  float* xn = xn_.data();
  m.final_norm_.apply(h, T, d, d, xn, d);
  if (!m.mtp_.empty()) {  // the final-normed hidden of every position feeds MTP depth 1
    SLM_TRY(st_.hf.resize(std::max(st_.hf.size(), (pos0 + T) * d)));
    std::copy(xn, xn + T * d, st_.hf.data() + pos0 * d);
  }
  if (hidden_rows > 0) std::copy(xn + (T - hidden_rows) * d, xn + T * d, hidden);
  if (rows > 0) SLM_TRY(m.head_.apply(xn + (T - rows) * d, rows, logits, cx));  // [rows, d] x [d, V] -> [rows, V]
  return {};
}

}  // namespace slm
