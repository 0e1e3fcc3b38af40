// slm/models/nam56r/pattern.hpp - the NAM56R layer pattern (Megatron lineage; spec nam56r.md
// §1.1, §1.2, §4.1): a pattern string, a depth and two lists in, a per-layer plan out
// (kind, layer number, A-rank, Megatron key prefix). A pure function of its inputs; it
// loads nothing.
//
// Grammar (cppmega `parse_nem_pattern`; letters in either case, no blanks):
//   pattern := segment ( '|' segment )*
//   segment := symbol*
//   symbol  := 'A'   attention: DSA if its A-rank is in dsa_a_ranks, else dense MLA
//            | 'E'   MoE (router + routed experts + shared expert)
//            | 'M'   Mamba-3 (AuthorMamba3Mixer)
//            | 'R'   M2RNN (CppMegaM2RNNMixer)
// 'D' and 'G' (Gated DeltaNet) are recognised and refused as unsupported: not in NAM56R.
//
// Expansion to `depth` layers, numbered n = 1..depth (Megatron index L = n - 1):
//   * no '|': the pattern is tiled, symbol[i] = P[i mod len(P)] (also when depth is not a
//     multiple of len(P), or shorter than it: NAM56R's 52 = 4 x 12 + 4, so AEMEAEMEAEMR
//     ends ...AEMRAEME; the 13-layer quarter profile is AEMEAEMEAEMRA);
//   * with '|' (pipeline stages, no compute): the segments are concatenated and must hold
//     exactly `depth` symbols; never tiled. Empty segments add nothing.
//   * A-rank = the 0-based index of an A layer among the A layers.
//   * M2RNN is chosen inside Megatron's M layer by layer number: a layer whose symbol is M
//     or R is M2RNN if its number is in r_layers, Mamba-3 otherwise (by default r_layers
//     is the pattern's R positions, so the symbols decide). Listing an A or E layer is an
//     error.
//   * Every layer is one pre-norm residual sublayer: an A layer has no MLP, an E layer no
//     attention. Key prefix `decoder.layers.{L}` (§4.1).
//   * Then per MTP depth k = 0..mtp_depths-1 two sublayers: dense MLA (`*`, never DSA) at
//     `mtp.layers.{k}.mtp_model_layer.layers.0` and a dense MLP (`-`) at
//     `...layers.1`; the depth's own enorm/hnorm/eh_proj/final_layernorm live under
//     nam56r_mtp_prefix(k) = `mtp.layers.{k}`.
// The Megatron hybrid string maps A -> '*', E -> 'E', M and R -> 'M', keeps '|', and
// appends "/*-" per MTP depth: NAM56R gives
//   *EME*EME*EMM*EME*EME*EMM*EME*EME*EMM*EME*EME*EMM*EME/*-/*-
// (Megatron PR #3553 writes DSA layers as 'D'; the spec's and cppmega's string keep '*'.)
//
// The defaults of nam56r_pattern_config are the production H200 NAM56R: AEMEAEMEAEMR x 52,
// DSA A-ranks 1,2,3,5,6,7,9,10,11 (CPPMEGA_DSA_A_LAYER_RANKS), R layers = the R positions
// 12,24,36,48 (CPPMEGA_R_LAYER_INDICES), 2 MTP depths.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "slm/core/status.hpp"

namespace slm {

enum class nam56r_layer_kind : std::uint8_t { mla, dsa, moe, mamba3, m2rnn, mlp };

constexpr std::string_view to_string(nam56r_layer_kind k) noexcept {
  switch (k) {
    case nam56r_layer_kind::mla: return "mla";
    case nam56r_layer_kind::dsa: return "dsa";
    case nam56r_layer_kind::moe: return "moe";
    case nam56r_layer_kind::mamba3: return "mamba3";
    case nam56r_layer_kind::m2rnn: return "m2rnn";
    case nam56r_layer_kind::mlp: return "mlp";
  }
  return "unknown";
}

inline constexpr std::size_t nam56r_no_rank = static_cast<std::size_t>(-1);
inline constexpr std::size_t nam56r_max_depth = 4096;     // guards hostile configurations
inline constexpr std::size_t nam56r_max_mtp_depths = 16;

struct nam56r_pattern_config {
  std::string pattern = "AEMEAEMEAEMR";
  std::size_t depth = 52;
  std::vector<std::size_t> dsa_a_ranks = {1, 2, 3, 5, 6, 7, 9, 10, 11};  // 0-based A-ranks, any order
  std::optional<std::vector<std::size_t>> r_layers;  // 1-based layer numbers; none: the R positions
  std::size_t mtp_depths = 2;
};

struct nam56r_layer {
  std::size_t number = 0;  // 1-based: main stack 1..depth; MTP 1 (attention) or 2 (MLP)
  char symbol = 0;         // main stack: 'A' 'E' 'M' 'R' as written; MTP: '*' or '-'
  nam56r_layer_kind kind = nam56r_layer_kind::mla;
  std::size_t a_rank = nam56r_no_rank;    // A layers of the main stack; nam56r_no_rank otherwise
  std::optional<std::size_t> mtp_depth;  // 0-based MTP depth; none for the main stack
  std::string prefix;                    // Megatron key prefix, no trailing '.'
};

struct nam56r_plan {
  std::size_t depth = 0;
  std::size_t mtp_depths = 0;
  std::string symbols;           // the expanded pattern, upper case, `depth` symbols, no '|'
  std::string megatron_pattern;  // Megatron hybrid string with the MTP suffix
  std::vector<nam56r_layer> layers;  // the depth main layers, then 2 per MTP depth
};

inline std::string nam56r_layer_prefix(std::size_t layer_index) { return cat("decoder.layers.", layer_index); }
inline std::string nam56r_mtp_prefix(std::size_t mtp_depth) { return cat("mtp.layers.", mtp_depth); }

namespace detail::nam56r {

constexpr char upper(char c) noexcept { return c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c; }

std::string char_name(char c);

}  // namespace detail::nam56r

// The pattern alone: `depth` upper-case symbols from A E M R, tiled or concatenated.
result<std::string> expand_nam56r_symbols(std::string_view pattern, std::size_t depth);

// The whole plan: the main stack per §1.1/§1.2, then the MTP sublayers.
result<nam56r_plan> plan_nam56r_layers(const nam56r_pattern_config& c);

// ---- Implementation (compiled once by src/nam56r.cpp in compiled mode; slm/core/build_mode.hpp) ----
#if SLM_DEFINE_NAM56R

SLM_INLINE std::string detail::nam56r::char_name(char c) {
  if (c >= 0x20 && c < 0x7f) return cat("'", c, "'");
  const auto u = static_cast<unsigned char>(c);
  const char* hex = "0123456789abcdef";
  return cat("0x", hex[u >> 4], hex[u & 15u]);
}

SLM_INLINE result<std::string> expand_nam56r_symbols(std::string_view pattern, std::size_t depth) {
  using detail::nam56r::char_name;
  using detail::nam56r::upper;
  if (depth == 0) return make_error(errc::invalid_argument, "NAM56R depth is 0");
  if (depth > nam56r_max_depth)
    return make_error(errc::out_of_range, "NAM56R depth ", depth, " is beyond the limit of ", nam56r_max_depth, " layers");
  if (pattern.empty()) return make_error(errc::invalid_argument, "NAM56R pattern is empty");
  std::string sym;
  std::size_t segments = 1;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    const char c = upper(pattern[i]);
    if (c == 'A' || c == 'E' || c == 'M' || c == 'R') {
      sym.push_back(c);
      continue;
    }
    if (c == '|') {
      ++segments;
      continue;
    }
    const std::string where = cat("NAM56R pattern \"", pattern, "\": symbol ", char_name(c), " at position ", i);
    if (c == 'D' || c == 'G')
      return make_error(errc::unsupported, where, " is Gated DeltaNet, which is not part of NAM56R and not implemented");
    std::string hint;
    if (c == '/') hint = " (MTP is not written in the pattern: set mtp_depths)";
    if (c == '*' || c == '-') hint = " (that is a Megatron hybrid symbol; write the cppmega pattern: A, E, M, R)";
    return make_error(errc::parse_error, where, " is not one of A, E, M, R (attention, MoE, Mamba-3, M2RNN) or '|'",
                      hint);
  }
  if (sym.empty()) return make_error(errc::invalid_argument, "NAM56R pattern \"", pattern, "\" has no layer symbols");
  if (segments > 1) {
    if (sym.size() != depth)
      return make_error(errc::invalid_argument, "NAM56R pattern \"", pattern, "\": its ", segments, " segments hold ",
                        sym.size(), " layers, not depth ", depth, " (a '|'-segmented pattern is not tiled)");
    return sym;
  }
  std::string tiled(depth, ' ');
  for (std::size_t i = 0; i < depth; ++i) tiled[i] = sym[i % sym.size()];
  return tiled;
}

SLM_INLINE result<nam56r_plan> plan_nam56r_layers(const nam56r_pattern_config& c) {
  auto expanded = expand_nam56r_symbols(c.pattern, c.depth);
  if (!expanded.ok()) return std::move(expanded).take_error();
  if (c.mtp_depths > nam56r_max_mtp_depths)
    return make_error(errc::out_of_range, "NAM56R mtp_depths ", c.mtp_depths, " is beyond the limit of ",
                      nam56r_max_mtp_depths);
  nam56r_plan p;
  p.depth = c.depth;
  p.mtp_depths = c.mtp_depths;
  p.symbols = std::move(*expanded);

  // DSA ranks against the number of A layers.
  std::size_t n_a = 0;
  for (char s : p.symbols) n_a += s == 'A' ? 1u : 0u;
  std::vector<bool> is_dsa(n_a, false);
  for (std::size_t r : c.dsa_a_ranks) {
    if (n_a == 0) return make_error(errc::out_of_range, "NAM56R dsa_a_ranks: rank ", r, " given but the pattern has no A layers");
    if (r >= n_a)
      return make_error(errc::out_of_range, "NAM56R dsa_a_ranks: rank ", r, " is out of range: the pattern has ", n_a,
                        " A layers (ranks 0..", n_a - 1, ")");
    if (is_dsa[r]) return make_error(errc::invalid_argument, "NAM56R dsa_a_ranks: rank ", r, " is listed twice");
    is_dsa[r] = true;
  }

  // M2RNN layers by number; only M or R layers may be listed.
  std::vector<bool> is_m2rnn(c.depth, false);
  if (!c.r_layers) {
    for (std::size_t i = 0; i < c.depth; ++i) is_m2rnn[i] = p.symbols[i] == 'R';
  } else {
    for (std::size_t n : *c.r_layers) {
      if (n == 0 || n > c.depth)
        return make_error(errc::out_of_range, "NAM56R r_layers: layer ", n, " is out of range 1..", c.depth);
      const char s = p.symbols[n - 1];
      if (s != 'M' && s != 'R')
        return make_error(errc::invalid_argument, "NAM56R r_layers: layer ", n, " is '", s,
                          "', not an M or R layer (M2RNN replaces the mixer of a Megatron M layer)");
      if (is_m2rnn[n - 1]) return make_error(errc::invalid_argument, "NAM56R r_layers: layer ", n, " is listed twice");
      is_m2rnn[n - 1] = true;
    }
  }

  p.layers.reserve(c.depth + 2 * c.mtp_depths);
  std::size_t a_rank = 0;
  for (std::size_t i = 0; i < c.depth; ++i) {
    nam56r_layer l;
    l.number = i + 1;
    l.symbol = p.symbols[i];
    l.prefix = nam56r_layer_prefix(i);
    switch (l.symbol) {
      case 'A':
        l.a_rank = a_rank++;
        l.kind = is_dsa[l.a_rank] ? nam56r_layer_kind::dsa : nam56r_layer_kind::mla;
        break;
      case 'E': l.kind = nam56r_layer_kind::moe; break;
      default: l.kind = is_m2rnn[i] ? nam56r_layer_kind::m2rnn : nam56r_layer_kind::mamba3; break;
    }
    p.layers.push_back(std::move(l));
  }

  // The Megatron string: from the pattern as written when segmented (keeps '|').
  const bool segmented = c.pattern.find('|') != std::string::npos;
  for (char ch : segmented ? std::string_view(c.pattern) : std::string_view(p.symbols)) {
    const char s = detail::nam56r::upper(ch);
    p.megatron_pattern.push_back(s == 'A' ? '*' : s == 'R' ? 'M' : s);
  }
  for (std::size_t k = 0; k < c.mtp_depths; ++k) {
    p.megatron_pattern += "/*-";
    const std::string inner = cat(nam56r_mtp_prefix(k), ".mtp_model_layer.layers.");
    nam56r_layer att;
    att.number = 1;
    att.symbol = '*';
    att.kind = nam56r_layer_kind::mla;
    att.mtp_depth = k;
    att.prefix = cat(inner, 0);
    nam56r_layer mlp = att;
    mlp.number = 2;
    mlp.symbol = '-';
    mlp.kind = nam56r_layer_kind::mlp;
    mlp.prefix = cat(inner, 1);
    p.layers.push_back(std::move(att));
    p.layers.push_back(std::move(mlp));
  }
  return p;
}

#endif  // SLM_DEFINE_NAM56R

}  // namespace slm
