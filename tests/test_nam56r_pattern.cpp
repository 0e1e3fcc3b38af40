// The NAM56R pattern language (slm/models/nam56r/pattern.hpp; spec nam56r.md §1.1, §1.2, §4.1).
//
//  * The production expansion (AEMEAEMEAEMR tiled to 52, DSA A-ranks 1,2,3,5,6,7,9,10,11,
//    R layers 12,24,36,48, 2 MTP depths) equals the spec's §1.2 table layer by layer:
//    kind, source symbol, A-rank, Megatron key prefix; the Megatron hybrid string and the
//    per-kind layer lists of the table; the MTP sublayers and their §4.1 prefixes.
//  * Tiling: depth not a multiple of the pattern length (the GB10 quarter profile's 13
//    layers `AEMEAEMEAEMRA`), depth shorter than the pattern, lower case.
//  * `|`-segmented patterns: concatenated, '|' kept in the Megatron string, total = depth.
//  * The DSA rank list and the R layer list as configuration (the R list decides, by
//    layer number, which M/R layers are M2RNN, as cppmega does); MTP depth 0 and 1.
//  * Every error: empty pattern, no symbols, depth 0 or too large, bad symbols (position,
//    '/' and D/G with their own messages), segments not summing to depth, ranks and layers
//    out of range, duplicated, or naming a layer of the wrong kind, too many MTP depths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "slm/models/nam56r/pattern.hpp"
#include "slm/core/status.hpp"
#include "test_helpers.hpp"

namespace {

using slm::errc;
using k = slm::nam56r_layer_kind;
using slm_test::fails_with;
constexpr std::size_t no = slm::nam56r_no_rank;

struct row {
  std::size_t number;  // 1-based layer number
  char symbol;
  k kind;
  std::size_t a_rank;
};

// Spec §1.2, written out layer by layer from its table.
const row kNam56r[52] = {
    { 1, 'A', k::mla,  0}, { 2, 'E', k::moe, no}, { 3, 'M', k::mamba3, no}, { 4, 'E', k::moe, no},
    { 5, 'A', k::dsa,  1}, { 6, 'E', k::moe, no}, { 7, 'M', k::mamba3, no}, { 8, 'E', k::moe, no},
    { 9, 'A', k::dsa,  2}, {10, 'E', k::moe, no}, {11, 'M', k::mamba3, no}, {12, 'R', k::m2rnn, no},
    {13, 'A', k::dsa,  3}, {14, 'E', k::moe, no}, {15, 'M', k::mamba3, no}, {16, 'E', k::moe, no},
    {17, 'A', k::mla,  4}, {18, 'E', k::moe, no}, {19, 'M', k::mamba3, no}, {20, 'E', k::moe, no},
    {21, 'A', k::dsa,  5}, {22, 'E', k::moe, no}, {23, 'M', k::mamba3, no}, {24, 'R', k::m2rnn, no},
    {25, 'A', k::dsa,  6}, {26, 'E', k::moe, no}, {27, 'M', k::mamba3, no}, {28, 'E', k::moe, no},
    {29, 'A', k::dsa,  7}, {30, 'E', k::moe, no}, {31, 'M', k::mamba3, no}, {32, 'E', k::moe, no},
    {33, 'A', k::mla,  8}, {34, 'E', k::moe, no}, {35, 'M', k::mamba3, no}, {36, 'R', k::m2rnn, no},
    {37, 'A', k::dsa,  9}, {38, 'E', k::moe, no}, {39, 'M', k::mamba3, no}, {40, 'E', k::moe, no},
    {41, 'A', k::dsa, 10}, {42, 'E', k::moe, no}, {43, 'M', k::mamba3, no}, {44, 'E', k::moe, no},
    {45, 'A', k::dsa, 11}, {46, 'E', k::moe, no}, {47, 'M', k::mamba3, no}, {48, 'R', k::m2rnn, no},
    {49, 'A', k::mla, 12}, {50, 'E', k::moe, no}, {51, 'M', k::mamba3, no}, {52, 'E', k::moe, no},
};

// The table's per-kind lists, verbatim.
const std::vector<std::size_t> kA = {1, 5, 9, 13, 17, 21, 25, 29, 33, 37, 41, 45, 49};
const std::vector<std::size_t> kDsa = {5, 9, 13, 21, 25, 29, 37, 41, 45};
const std::vector<std::size_t> kMla = {1, 17, 33, 49};
const std::vector<std::size_t> kE = {2, 4, 6, 8, 10, 14, 16, 18, 20, 22, 26, 28, 30, 32, 34, 38, 40, 42, 44, 46, 50, 52};
const std::vector<std::size_t> kM = {3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47, 51};
const std::vector<std::size_t> kR = {12, 24, 36, 48};

constexpr const char* kMegatron52 = "*EME*EME*EMM*EME*EME*EMM*EME*EME*EMM*EME*EME*EMM*EME";

std::vector<std::size_t> numbers_of(const slm::nam56r_plan& p, k kind) {
  std::vector<std::size_t> out;
  for (const auto& l : p.layers)
    if (!l.mtp_depth && l.kind == kind) out.push_back(l.number);
  return out;
}

std::string kinds_of(const slm::nam56r_plan& p) {  // one letter a layer: l d e m r
  std::string s;
  for (const auto& l : p.layers)
    if (!l.mtp_depth) s.push_back("ldemrp"[static_cast<int>(l.kind)]);
  return s;
}

slm::nam56r_pattern_config cfg(std::string pattern, std::size_t depth) {
  slm::nam56r_pattern_config c;
  c.pattern = std::move(pattern);
  c.depth = depth;
  c.dsa_a_ranks = {};
  c.r_layers = std::nullopt;
  c.mtp_depths = 0;
  return c;
}

TEST(Nam56rPattern, ProductionExpansionEqualsSpecTable) {
  const auto r = slm::plan_nam56r_layers(slm::nam56r_pattern_config{});
  ASSERT_TRUE(r.ok()) << r.message();
  const slm::nam56r_plan& p = *r;
  EXPECT_EQ(p.depth, 52u);
  EXPECT_EQ(p.mtp_depths, 2u);
  ASSERT_EQ(p.layers.size(), 52u + 2u * 2u);
  std::string symbols;
  for (const row& want : kNam56r) {
    const slm::nam56r_layer& got = p.layers[want.number - 1];
    SCOPED_TRACE(slm::cat("layer ", want.number));
    EXPECT_EQ(got.number, want.number);
    EXPECT_EQ(got.symbol, want.symbol);
    EXPECT_EQ(got.kind, want.kind) << slm::to_string(got.kind) << " vs " << slm::to_string(want.kind);
    EXPECT_EQ(got.a_rank, want.a_rank);
    EXPECT_FALSE(got.mtp_depth.has_value());
    EXPECT_EQ(got.prefix, slm::cat("decoder.layers.", want.number - 1));
    symbols.push_back(want.symbol);
  }
  EXPECT_EQ(p.symbols, symbols);
  EXPECT_EQ(p.megatron_pattern, std::string(kMegatron52) + "/*-/*-");
  EXPECT_EQ(p.layers[0].prefix, "decoder.layers.0");
  EXPECT_EQ(p.layers[51].prefix, "decoder.layers.51");

  // The table's lists and counts.
  std::vector<std::size_t> a = numbers_of(p, k::mla);
  const std::vector<std::size_t> dsa = numbers_of(p, k::dsa);
  a.insert(a.end(), dsa.begin(), dsa.end());
  std::sort(a.begin(), a.end());
  EXPECT_EQ(a, kA);
  EXPECT_EQ(dsa, kDsa);
  EXPECT_EQ(numbers_of(p, k::mla), kMla);
  EXPECT_EQ(numbers_of(p, k::moe), kE);
  EXPECT_EQ(numbers_of(p, k::mamba3), kM);
  EXPECT_EQ(numbers_of(p, k::m2rnn), kR);
  EXPECT_EQ(kA.size() + kE.size() + kM.size() + kR.size(), 52u);

  // MTP: each depth one dense MLA sublayer and one dense MLP sublayer (§1.1, §2.7, §4.1).
  for (std::size_t d = 0; d < 2; ++d) {
    const slm::nam56r_layer& att = p.layers[52 + 2 * d];
    const slm::nam56r_layer& mlp = p.layers[52 + 2 * d + 1];
    ASSERT_TRUE(att.mtp_depth.has_value());
    ASSERT_TRUE(mlp.mtp_depth.has_value());
    EXPECT_EQ(*att.mtp_depth, d);
    EXPECT_EQ(*mlp.mtp_depth, d);
    EXPECT_EQ(att.kind, k::mla);
    EXPECT_EQ(mlp.kind, k::mlp);
    EXPECT_EQ(att.symbol, '*');
    EXPECT_EQ(mlp.symbol, '-');
    EXPECT_EQ(att.number, 1u);
    EXPECT_EQ(mlp.number, 2u);
    EXPECT_EQ(att.a_rank, no);
    EXPECT_EQ(att.prefix, slm::cat("mtp.layers.", d, ".mtp_model_layer.layers.0"));
    EXPECT_EQ(mlp.prefix, slm::cat("mtp.layers.", d, ".mtp_model_layer.layers.1"));
    EXPECT_EQ(slm::nam56r_mtp_prefix(d), slm::cat("mtp.layers.", d));
  }
  EXPECT_EQ(slm::to_string(k::dsa), "dsa");
  EXPECT_EQ(slm::to_string(k::m2rnn), "m2rnn");
}

TEST(Nam56rPattern, SpelledOutConfigAndLowerCaseGiveTheSamePlan) {
  slm::nam56r_pattern_config c;
  c.pattern = "aemeaemeaemr";
  c.depth = 52;
  c.dsa_a_ranks = {11, 1, 2, 3, 5, 6, 7, 9, 10};  // order does not matter
  c.r_layers = std::vector<std::size_t>{12, 24, 36, 48};
  c.mtp_depths = 2;
  const auto a = slm::plan_nam56r_layers(c);
  const auto b = slm::plan_nam56r_layers(slm::nam56r_pattern_config{});
  ASSERT_TRUE(a.ok()) << a.message();
  ASSERT_TRUE(b.ok()) << b.message();
  EXPECT_EQ(a->symbols, b->symbols);
  EXPECT_EQ(a->megatron_pattern, b->megatron_pattern);
  ASSERT_EQ(a->layers.size(), b->layers.size());
  for (std::size_t i = 0; i < a->layers.size(); ++i) {
    EXPECT_EQ(a->layers[i].kind, b->layers[i].kind) << i;
    EXPECT_EQ(a->layers[i].prefix, b->layers[i].prefix) << i;
    EXPECT_EQ(a->layers[i].a_rank, b->layers[i].a_rank) << i;
  }
}

TEST(Nam56rPattern, TilingWhenDepthIsNotAMultiple) {
  // The GB10 quarter profile (§1.3): the first 13 symbols, DSA on A-ranks 1,2,3.
  slm::nam56r_pattern_config c = cfg("AEMEAEMEAEMR", 13);
  c.dsa_a_ranks = {1, 2, 3};
  c.mtp_depths = 2;
  const auto r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->symbols, "AEMEAEMEAEMRA");
  EXPECT_EQ(r->megatron_pattern, "*EME*EME*EMM*/*-/*-");
  EXPECT_EQ(kinds_of(*r), "lemedemedemrd");
  EXPECT_EQ(r->layers[12].a_rank, 3u);
  EXPECT_EQ(r->layers[12].prefix, "decoder.layers.12");
  EXPECT_EQ(r->layers.size(), 13u + 4u);

  // Shorter than the pattern: its first `depth` symbols; longer: symbol[i] = P[i mod len].
  auto s = slm::expand_nam56r_symbols("AEMEAEMEAEMR", 5);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(*s, "AEMEA");
  s = slm::expand_nam56r_symbols("AEMEAEMEAEMR", 25);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(*s, "AEMEAEMEAEMRAEMEAEMEAEMRA");
  s = slm::expand_nam56r_symbols("aEm", 7);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(*s, "AEMAEMA");
  s = slm::expand_nam56r_symbols("M", 3);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(*s, "MMM");
}

TEST(Nam56rPattern, SegmentedPatternsAreConcatenated) {
  auto r = slm::plan_nam56r_layers(cfg("AEME|AEME|AEMR", 12));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->symbols, "AEMEAEMEAEMR");
  EXPECT_EQ(r->megatron_pattern, "*EME|*EME|*EMM");
  EXPECT_EQ(kinds_of(*r), "lemelemelemr");
  EXPECT_EQ(r->layers.size(), 12u);
  EXPECT_EQ(r->layers[11].prefix, "decoder.layers.11");

  // Uneven segments, lower case, and the whole NAM56R as 4 stages of 13.
  r = slm::plan_nam56r_layers(cfg("ae|MEAEm|EAEMR", 12));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->symbols, "AEMEAEMEAEMR");
  EXPECT_EQ(r->megatron_pattern, "*E|ME*EM|E*EMM");
  EXPECT_EQ(kinds_of(*r), "lemelemelemr");

  slm::nam56r_pattern_config c;
  c.pattern = "AEMEAEMEAEMRA|EMEAEMEAEMRAE|MEAEMEAEMRAEM|EAEMEAEMRAEME";
  const auto seg = slm::plan_nam56r_layers(c);
  const auto tiled = slm::plan_nam56r_layers(slm::nam56r_pattern_config{});
  ASSERT_TRUE(seg.ok()) << seg.message();
  ASSERT_TRUE(tiled.ok()) << tiled.message();
  EXPECT_EQ(seg->symbols, tiled->symbols);
  EXPECT_EQ(kinds_of(*seg), kinds_of(*tiled));

  // Segments are only concatenated: an empty one (a trailing '|') adds nothing.
  auto s = slm::expand_nam56r_symbols("AEMR|", 4);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(*s, "AEMR");
  // A segmented pattern is never tiled.
  EXPECT_TRUE(fails_with(slm::expand_nam56r_symbols("AE|MR", 8), errc::invalid_argument,
                         {"4 layers", "depth 8", "not tiled"}));
}

TEST(Nam56rPattern, RankAndLayerListsAreConfiguration) {
  // No DSA ranks: every A is dense MLA; all ranks: every A is DSA.
  slm::nam56r_pattern_config c;
  c.dsa_a_ranks = {};
  auto r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(numbers_of(*r, k::mla), kA);
  EXPECT_TRUE(numbers_of(*r, k::dsa).empty());
  c.dsa_a_ranks = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(numbers_of(*r, k::dsa), kA);
  EXPECT_TRUE(numbers_of(*r, k::mla).empty());
  // MTP attention is dense MLA whatever the DSA ranks.
  EXPECT_EQ(r->layers[52].kind, k::mla);

  // The R list picks M2RNN among the M/R layers by layer number (cppmega chooses the
  // mixer inside Megatron's M layer): an M listed becomes M2RNN, an R not listed Mamba-3.
  c = slm::nam56r_pattern_config{};
  c.r_layers = std::vector<std::size_t>{3, 24};
  r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(numbers_of(*r, k::m2rnn), (std::vector<std::size_t>{3, 24}));
  EXPECT_EQ(r->layers[2].symbol, 'M');
  EXPECT_EQ(r->layers[11].symbol, 'R');
  EXPECT_EQ(r->layers[11].kind, k::mamba3);
  EXPECT_EQ(r->megatron_pattern, std::string(kMegatron52) + "/*-/*-");  // both are Megatron M
  c.r_layers = std::vector<std::size_t>{};
  r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_TRUE(numbers_of(*r, k::m2rnn).empty());
  EXPECT_EQ(numbers_of(*r, k::mamba3).size(), 17u);

  // MTP depths: none, one.
  c = slm::nam56r_pattern_config{};
  c.mtp_depths = 0;
  r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->megatron_pattern, kMegatron52);
  EXPECT_EQ(r->layers.size(), 52u);
  c.mtp_depths = 1;
  r = slm::plan_nam56r_layers(c);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->megatron_pattern, std::string(kMegatron52) + "/*-");
  EXPECT_EQ(r->layers.size(), 54u);
}

TEST(Nam56rPattern, PatternErrors) {
  using slm::expand_nam56r_symbols;
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("", 52), errc::invalid_argument, {"empty"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("|", 1), errc::invalid_argument, {"no layer symbols"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("||", 1), errc::invalid_argument, {"no layer symbols"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEM", 0), errc::invalid_argument, {"depth", "0"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEM", slm::nam56r_max_depth + 1), errc::out_of_range,
                         {"depth", "4097"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEXM", 4), errc::parse_error,
                         {"'X'", "position 2", "\"AEXM\"", "A, E, M, R"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AE M", 4), errc::parse_error, {"' '", "position 2"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AE\tM", 4), errc::parse_error, {"0x09", "position 2"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("*EME", 4), errc::parse_error, {"'*'", "position 0", "Megatron"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEMR/*-", 4), errc::parse_error, {"'/'", "mtp_depths"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEMD", 4), errc::unsupported, {"'D'", "Gated DeltaNet"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("gAEM", 4), errc::unsupported, {"'G'", "position 0"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEME|AEME|AEMR", 13), errc::invalid_argument,
                         {"3 segments", "12 layers", "depth 13"}));
  EXPECT_TRUE(fails_with(expand_nam56r_symbols("AEME|AEME|AEMR", 11), errc::invalid_argument,
                         {"12 layers", "depth 11"}));
  // The plan reports the same errors.
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(cfg("", 4)), errc::invalid_argument, {"empty"}));
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(cfg("AEQ", 4)), errc::parse_error, {"'Q'"}));
}

TEST(Nam56rPattern, ListErrors) {
  slm::nam56r_pattern_config c;
  c.dsa_a_ranks = {1, 2, 3, 5, 6, 7, 9, 10, 11, 13};  // 13 A layers: ranks 0..12
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::out_of_range,
                         {"dsa_a_ranks", "13", "13 A layers", "0..12"}));
  c.dsa_a_ranks = {1, 2, 2};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::invalid_argument, {"dsa_a_ranks", "2", "twice"}));
  // The production ranks do not fit the quarter profile's 4 A layers.
  c = slm::nam56r_pattern_config{};
  c.depth = 13;
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::out_of_range, {"dsa_a_ranks", "5", "4 A layers"}));
  // A pattern with no A layer takes no DSA ranks.
  slm::nam56r_pattern_config m = cfg("EM", 4);
  m.dsa_a_ranks = {0};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(m), errc::out_of_range, {"dsa_a_ranks", "no A layers"}));

  c = slm::nam56r_pattern_config{};
  c.r_layers = std::vector<std::size_t>{0};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::out_of_range, {"r_layers", "0", "1..52"}));
  c.r_layers = std::vector<std::size_t>{12, 53};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::out_of_range, {"r_layers", "53", "1..52"}));
  c.r_layers = std::vector<std::size_t>{12, 12};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::invalid_argument, {"r_layers", "12", "twice"}));
  c.r_layers = std::vector<std::size_t>{12, 5};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::invalid_argument, {"r_layers", "layer 5", "'A'"}));
  c.r_layers = std::vector<std::size_t>{2};
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::invalid_argument, {"r_layers", "layer 2", "'E'"}));

  c = slm::nam56r_pattern_config{};
  c.mtp_depths = slm::nam56r_max_mtp_depths + 1;
  EXPECT_TRUE(fails_with(slm::plan_nam56r_layers(c), errc::out_of_range, {"mtp_depths"}));
}

}  // namespace
