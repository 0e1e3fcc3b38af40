// slm/models/specialist.hpp - a NAM56R-family specialist named as a type.
//
//   using cpp_specialist = slm::specialist<slm::format::nvfp4, slm::pattern<"AEMEAEMEAEMR">,
//                                          slm::part::mla, slm::part::dsa, slm::part::moe,
//                                          slm::part::mamba3, slm::part::m2rnn, slm::part::ngram_hash,
//                                          slm::part::mtp>;
//   auto m = cpp_specialist::load("models/cpp");   // result<cpp_specialist>
//
// The type states what the host was built for: the weight format of every projection
// (format::any: whatever the checkpoint holds), the layer pattern (pattern<""> : any), and
// the parts the stack may use - the sequence mixers (mla, dsa, mamba3, m2rnn), the
// feed-forward (moe), and the extras (ngram_hash, structure, mtp). load() reads the
// checkpoint through the config-driven loader (models/nam56r/model.hpp builds the layers from
// config.json) and then refuses, naming the layer and the mismatch, a checkpoint that
// needs a part the type does not list, follows another pattern, or stores a projection in
// another format. So a host that names its specialist gets exactly that model or an
// error value, never a silently different one; the config-driven path (nam56r_model)
// builds the same compositions from config.json alone.
//
// The decoder family (Llama/Qwen GQA, DeepSeek MLA + MoE, Mamba-2 and Nemotron-H hybrids)
// composes the same way through slm::decoder<Attention, Ffn, Norm, Format> (models/hf/model.hpp);
// examples/specialists.cpp shows one of each.
#pragma once
#include "slm/core/build_mode.hpp"

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "slm/formats/policies.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/core/status.hpp"

namespace slm {

// A string usable as a template argument: pattern<"AEMEAEMEAEMR">.
template <std::size_t N>
struct fixed_string {
  char text[N]{};
  constexpr fixed_string(const char (&s)[N]) noexcept { std::copy_n(s, N, text); }
  constexpr std::string_view view() const noexcept { return {text, N - 1}; }
};

template <fixed_string P>
struct pattern {
  static constexpr std::string_view value = P.view();  // empty: any pattern
};

namespace part {
struct mla {};         // dense MLA attention
struct dsa {};         // DSA-MLA (lightning indexer, top-k keys)
struct moe {};         // routed experts + shared expert
struct mamba3 {};      // Mamba-3 (MIMO or SISO)
struct m2rnn {};       // M2RNN
struct ngram_hash {};  // the n-gram hash input embedding
struct structure {};   // the structure embedding (side inputs)
struct mtp {};         // multi-token-prediction depths (speculative drafting)
}  // namespace part

template <class T>
concept specialist_part = std::same_as<T, part::mla> || std::same_as<T, part::dsa> || std::same_as<T, part::moe> ||
                          std::same_as<T, part::mamba3> || std::same_as<T, part::m2rnn> ||
                          std::same_as<T, part::ngram_hash> || std::same_as<T, part::structure> ||
                          std::same_as<T, part::mtp>;

template <class P>
concept pattern_constraint = requires {
  { P::value } -> std::convertible_to<std::string_view>;
};

template <format_constraint Format, pattern_constraint Pattern, specialist_part... Parts>
class specialist {
 public:
  template <class P>
  static constexpr bool has = (std::same_as<P, Parts> || ...);

  static result<specialist> load(const std::filesystem::path& dir, const checkpoint_options& opt = {}) {
    auto m = nam56r_model::load(dir, opt);
    if (!m.ok()) return std::move(m).take_error();
    specialist s;
    s.m_ = std::move(*m);
    SLM_TRY(s.check(dir.string()));
    return s;
  }

  const nam56r_model& model() const noexcept { return m_; }
  const nam56r_config& config() const noexcept { return m_.config(); }
  std::size_t vocab() const noexcept { return m_.vocab(); }
  nam56r_model::session new_session(session_options o = {}) const { return m_.new_session(o); }

 private:
  status check(const std::string& where) const {
    const nam56r_config& c = m_.config();
    if (!Pattern::value.empty() && c.hybrid_pattern != Pattern::value)
      return make_error(errc::unsupported, where, ": the checkpoint's pattern is \"", c.hybrid_pattern,
                        "\", this specialist type is built for \"", Pattern::value, "\"");
    auto refuse = [&](std::size_t i, std::string_view what) {
      return make_error(errc::unsupported, where, ": layer ", i, " is ", what,
                        ", which this specialist type does not list among its parts");
    };
    for (const nam56r_layer& l : c.plan.layers) {
      if (l.mtp_depth) continue;  // MTP sublayers: part::mtp
      const std::size_t i = l.number - 1;
      switch (l.kind) {
        case nam56r_layer_kind::mla: if (!has<part::mla>) return refuse(i, "dense MLA attention"); break;
        case nam56r_layer_kind::dsa: if (!has<part::dsa>) return refuse(i, "DSA-MLA attention"); break;
        case nam56r_layer_kind::moe: if (!has<part::moe>) return refuse(i, "a MoE feed-forward"); break;
        case nam56r_layer_kind::mamba3: if (!has<part::mamba3>) return refuse(i, "a Mamba-3 mixer"); break;
        case nam56r_layer_kind::m2rnn: if (!has<part::m2rnn>) return refuse(i, "an M2RNN mixer"); break;
        case nam56r_layer_kind::mlp: break;  // MTP's own dense MLP: part of part::mtp
      }
    }
    if (c.ngram_hash && !has<part::ngram_hash>)
      return make_error(errc::unsupported, where, ": the checkpoint has an n-gram hash embedding, which this "
                        "specialist type does not list (part::ngram_hash)");
    if (c.structure_embedding && !has<part::structure>)
      return make_error(errc::unsupported, where, ": the checkpoint has a structure embedding, which this specialist "
                        "type does not list (part::structure)");
    if (c.mtp_num_layers > 0 && !has<part::mtp>)
      return make_error(errc::unsupported, where, ": the checkpoint has ", c.mtp_num_layers,
                        " MTP depths, which this specialist type does not list (part::mtp)");
    if constexpr (!std::same_as<Format, format::any>) {
      // Every projection row of the layer table (mixers, experts, MTP) holds the format;
      // norms, biases and the keep-list (embeddings, head, router, indexer) stay precise.
      const std::string want(to_string(Format::id));
      for (const auto& r : m_.describe()) {
        const bool projections = r.kind != "embedding" && r.kind != "ngram" && r.kind != "structure" && r.kind != "head";
        if (!projections) continue;
        bool found = false;
        for (std::size_t b = 0; b <= r.formats.size();) {
          const std::size_t e = std::min(r.formats.find('+', b), r.formats.size());
          found = found || r.formats.substr(b, e - b) == want;
          b = e + 1;
        }
        if (!found)
          return make_error(errc::unsupported, where, ": ", r.kind, " ", r.index, " stores its weights as ", r.formats,
                            ", this specialist type expects ", want);
      }
    }
    return {};
  }

  nam56r_model m_;
};

}  // namespace slm
