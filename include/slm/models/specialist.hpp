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
// feed-forward (moe), and the extras (ngram_hash, structure, mtp).
//
// The parts are the model's type: the specialist holds basic_nam56r_model<Mixer, Ffn,
// Extras> (models/nam56r/model.hpp) whose layer stack is a variant of exactly the named
// mixer and feed-forward parts (mla or dsa: nam56r::attention_part; mamba3:
// nam56r::mamba3_part; m2rnn: m2rnn_mixer; moe: basic_moe_ffn<>) and whose extras are the
// named ones (ngram_hash, structure, mtp: nam56r::extras), so a part that is not named is
// not compiled into the host. load() builds the model from config.json, refusing a layer or
// an extra whose part is not named, then refuses, naming the mismatch, a checkpoint that
// follows another pattern, has a layer of the other MLA kind (dense against DSA: one part
// serves both), or stores a projection in another format. So a host that names its specialist gets exactly that
// model or an error value, never a silently different one. Naming every part gives
// nam56r_model itself, the config-driven path (the same type, compiled once by the library
// in compiled mode).
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
#include "slm/models/nam56r/model_impl.hpp"
#include "slm/models/stack.hpp"
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

// One of the tags above, or a host's own part for a kind of layer (nam56r::host_part,
// models/nam56r/model.hpp), which takes every layer of its kind in place of the library's.
template <class T>
concept specialist_part = std::same_as<T, part::mla> || std::same_as<T, part::dsa> || std::same_as<T, part::moe> ||
                          std::same_as<T, part::mamba3> || std::same_as<T, part::m2rnn> ||
                          std::same_as<T, part::ngram_hash> || std::same_as<T, part::structure> ||
                          std::same_as<T, part::mtp> || nam56r::host_part<T>;

namespace detail::specialist_parts {
// The layer-stack variants of a list of parts: each named part's alternative, in a fixed
// order, and the empty slot (a MoE layer has no mixer, a mixer layer no feed-forward).
template <class... Ts>
struct type_list {};
template <bool B, class T>
using part_if = std::conditional_t<B, type_list<T>, type_list<>>;
template <template <class...> class V, class... Lists>
struct join;
template <template <class...> class V, class... Ts>
struct join<V, type_list<Ts...>> {
  using type = V<Ts...>;
};
template <template <class...> class V, class... As, class... Bs, class... Rest>
struct join<V, type_list<As...>, type_list<Bs...>, Rest...> : join<V, type_list<As..., Bs...>, Rest...> {};

template <class P>
inline constexpr bool host_mixer = slm::nam56r::host_part<P> && mixer_part<P>;
template <class P>
inline constexpr bool host_ffn = slm::nam56r::host_part<P> && !mixer_part<P>;

// A host's parts come first: the model gives a layer to the first part that serves its kind.
template <class... Parts>
struct specialist_stack {
  template <class P>
  static constexpr bool named = (std::same_as<P, Parts> || ...);
  using mixer = typename join<attention_variant, part_if<host_mixer<Parts>, Parts>...,
                              part_if<named<part::mla> || named<part::dsa>, slm::nam56r::attention_part>,
                              part_if<named<part::mamba3>, slm::nam56r::mamba3_part>, part_if<named<part::m2rnn>, m2rnn_mixer>,
                              type_list<no_mixer>>::type;
  using ffn = typename join<ffn_variant, part_if<host_ffn<Parts>, Parts>..., part_if<named<part::moe>, basic_moe_ffn<>>,
                           type_list<no_ffn>>::type;
};
}  // namespace detail::specialist_parts

template <class P>
concept pattern_constraint = requires {
  { P::value } -> std::convertible_to<std::string_view>;
};

template <format_constraint Format, pattern_constraint Pattern, specialist_part... Parts>
class specialist {
 public:
  template <class P>
  static constexpr bool has = (std::same_as<P, Parts> || ...);
  // Whether a host's part takes the layers of kind k.
  static constexpr bool hosted(nam56r_layer_kind k) noexcept { return (serves<Parts>(k) || ...); }
  // The model the parts make: its stack holds exactly the named parts.
  using model_type = basic_nam56r_model<typename detail::specialist_parts::specialist_stack<Parts...>::mixer,
                                        typename detail::specialist_parts::specialist_stack<Parts...>::ffn,
                                        nam56r::extras<has<part::ngram_hash>, has<part::structure>, has<part::mtp>>>;
  using session = typename model_type::session;

  static result<specialist> load(const std::filesystem::path& dir, const checkpoint_options& opt = {}) {
    auto m = model_type::load(dir, opt);
    if (!m.ok()) return std::move(m).take_error();
    specialist s;
    s.m_ = std::move(*m);
    SLM_TRY(s.check(dir.string()));
    return s;
  }

  const model_type& model() const noexcept { return m_; }
  const nam56r_config& config() const noexcept { return m_.config(); }
  std::size_t vocab() const noexcept { return m_.vocab(); }
  session new_session(session_options o = {}) const { return m_.new_session(o); }

 private:
  template <class P>
  static constexpr bool serves(nam56r_layer_kind k) noexcept {
    if constexpr (nam56r::host_part<P>) return P::serves == k;
    else return false;
  }

  status check(const std::string& where) const {
    const nam56r_config& c = m_.config();
    if (!Pattern::value.empty() && c.hybrid_pattern != Pattern::value)
      return make_error(errc::unsupported, where, ": the checkpoint's pattern is \"", c.hybrid_pattern,
                        "\", this specialist type is built for \"", Pattern::value, "\"");
    auto refuse = [&](std::size_t i, std::string_view what) {
      return make_error(errc::unsupported, where, ": layer ", i, " is ", what,
                        ", which this specialist type does not list among its parts");
    };
    // A MoE, Mamba-3 or M2RNN layer without its part was refused while the stack was built
    // (the model's variants hold exactly the named parts). MLA and DSA-MLA share one part
    // (nam56r::attention_part), so naming one of them is checked here.
    for (const nam56r_layer& l : c.plan.layers) {
      if (l.mtp_depth || hosted(l.kind)) continue;  // MTP sublayers: part::mtp
      const std::size_t i = l.number - 1;
      if (l.kind == nam56r_layer_kind::mla && !has<part::mla>) return refuse(i, "dense MLA attention");
      if (l.kind == nam56r_layer_kind::dsa && !has<part::dsa>) return refuse(i, "DSA-MLA attention");
    }
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

  model_type m_;
};

}  // namespace slm
