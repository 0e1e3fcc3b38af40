// NAM56R input-side extras: the n-gram hash embedding and the structure embedding
// (include/slm/layers/ngram_embedding.hpp, include/slm/layers/structure_embedding.hpp) against cppmega's
// own modules (tests/data/golden/nam56r/cppmega_ngram_hash__*, cppmega_structure_embedding__*).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "slm/layers/ngram_embedding.hpp"
#include "slm/layers/recurrent_cache.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/layers/structure_embedding.hpp"
#include "slm/models/nam56r/bind.hpp"
#include "test_helpers.hpp"

namespace {

using slm::ngram_hash_config;
using slm::ngram_hash_embedding;
using slm::ngram_history;
using slm::structure_embedding;
using slm::structure_embedding_config;
using slm::structure_inputs;
using slm_test::max_abs_diff;
using slm_test::rel_err;
__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

// Float outputs: torch's f32 forward against ours differs at most in the summation order
// of the out_proj / up_proj products (64 and 16 terms here, 256 and 64 in NAM56R), i.e. a
// few ulp of the largest partial sum (~1e-6 relative at worst); measured here: 0, bit
// for bit (the gathered rows are copies, and these short products happen to sum in the
// same order). 1e-4 leaves a wide margin for other compilers, SIMD widths and the longer
// NAM56R products, while a wrong index, order or scale moves the result by O(1).
constexpr double kTol = 1e-4;

struct golden {
  std::optional<slm::safetensors::file> file;

  const slm::safetensors::tensor_info* info(const std::string& n) const {
    const auto* t = file->find(n);
    EXPECT_NE(t, nullptr) << n;
    return t;
  }
  std::vector<float> f32(const std::string& n) const {
    std::vector<float> v;
    const auto* t = info(n);
    if (!t) return v;
    v.resize(static_cast<std::size_t>(t->shape.numel()));
    EXPECT_TRUE(file->view(*t).to_f32(v).ok());
    return v;
  }
  std::vector<std::int64_t> i64(const std::string& n) const {
    std::vector<std::int64_t> v;
    const auto* t = info(n);
    if (!t) return v;
    EXPECT_EQ(t->type, slm::dtype::i64) << n;
    v.resize(static_cast<std::size_t>(t->shape.numel()));
    const auto b = file->view(*t).bytes();
    EXPECT_EQ(b.size(), v.size() * 8) << n;
    std::memcpy(v.data(), b.data(), std::min(b.size(), v.size() * 8));
    return v;
  }
  std::vector<std::int32_t> i32(const std::string& n) const {
    std::vector<std::int32_t> v;
    for (std::int64_t x : i64(n)) v.push_back(static_cast<std::int32_t>(x));
    return v;
  }
  // Every tensor not named "in/..", "out/.." or "mid/..", under prefix, into a checkpoint dir.
  void write_checkpoint(const slm_test::temp_dir& dir, const std::string& prefix,
                        const std::vector<std::string>& skip = {}) const {
    slm::safetensors::writer w;
    for (const auto& t : file->tensors()) {
      if (t.name.find('/') != std::string::npos) continue;
      if (std::find(skip.begin(), skip.end(), t.name) != skip.end()) continue;
      ASSERT_TRUE(w.add(prefix + "." + t.name, t.type, t.shape, file->view(t).bytes()).ok()) << t.name;
    }
    ASSERT_TRUE(w.write(dir / "model.safetensors").ok());
    ASSERT_TRUE(slm_test::write_file(dir / "config.json", "{}"));
  }
};

golden open_golden(const char* name) {
  golden g;
  auto f = slm::safetensors::file::open(slm_test::test_data(std::string("golden/nam56r/") + name + ".safetensors"));
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (f.ok()) g.file.emplace(std::move(*f));
  return g;
}

// ---------------------------------------------------------------------------------
// N-gram hash: indices.

ngram_hash_config prod_config() {
  ngram_hash_config c;
  c.d_model = 4;
  c.embed_dim = 1;
  return c;  // orders (2, 3), 8 heads, 500000
}

// The derived buffers (prime table sizes, offsets, order per table, order mask) follow
// from the config alone, as cppmega builds them.
TEST(ngram_embedding_hash, ProdGeometryMatchesBuffers) {
  golden g = open_golden("cppmega_ngram_hash__prod_hash");
  ASSERT_TRUE(g.file);
  const ngram_hash_config c = prod_config();
  ASSERT_EQ(c.num_tables(), 16u);
  EXPECT_EQ(c.total_rows(), 7998862u);
  const auto sizes = g.i64("table_sizes_t"), offs = g.i64("table_offsets"), ord = g.i64("order_for_table"),
             mask = g.i64("order_mask");
  for (std::size_t j = 0; j < 16; ++j) {
    EXPECT_EQ(c.table_size_of(j), sizes[j]) << j;
    EXPECT_EQ(c.table_offset_of(j), offs[j]) << j;
    EXPECT_EQ(static_cast<std::int64_t>(c.order_of_table(j)), ord[j]) << j;
    for (std::size_t p = 0; p < 3; ++p) EXPECT_EQ(mask[p * 16 + j], p < c.order_of_table(j) ? 1 : 0);
  }
  // Far from the primes: table_size + j.
  ngram_hash_config s = c;
  s.table_size = 1000;
  s.num_heads = 4;
  for (std::size_t j = 0; j < 8; ++j) EXPECT_EQ(s.table_size_of(j), 1000 + static_cast<std::int64_t>(j));
}

// Indices of the production geometry, bit for bit, as one prefill and as single steps.
TEST(ngram_embedding_hash, ProdHashIndicesExact) {
  golden g = open_golden("cppmega_ngram_hash__prod_hash");
  ASSERT_TRUE(g.file);
  ngram_hash_embedding m;
  ASSERT_TRUE(m.init_hash(prod_config(), g.i64("hash_mults"), g.i64("hash_bias")).ok());
  const auto ids = g.i32("in/token_ids");  // [2, 17]
  const auto want = g.i64("out/unified_indices");  // [2, 16, 17]
  const std::size_t B = 2, T = 17, J = 16;
  ASSERT_EQ(ids.size(), B * T);
  ASSERT_EQ(want.size(), B * J * T);
  std::size_t mismatches = 0;
  for (std::size_t b = 0; b < B; ++b) {
    std::span<const std::int32_t> seq(ids.data() + b * T, T);
    std::vector<std::int64_t> got(T * J), step(T * J);
    ngram_history h;
    ASSERT_TRUE(m.indices(seq, h, got.data()).ok());
    EXPECT_EQ(h.n, T);
    ngram_history hs;
    for (std::size_t t = 0; t < T; ++t) ASSERT_TRUE(m.indices(seq.subspan(t, 1), hs, step.data() + t * J).ok());
    EXPECT_EQ(h, hs);
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t j = 0; j < J; ++j) {
        mismatches += got[t * J + j] != want[(b * J + j) * T + t];
        mismatches += step[t * J + j] != want[(b * J + j) * T + t];
      }
  }
  std::printf("[ figures  ] prod hash: %zu of %zu indices differ\n", mismatches, 2 * B * J * T);
  EXPECT_EQ(mismatches, 0u);
}

// torch int64 semantics where they matter: products wrap modulo 2^64, XOR on two's
// complement bits, remainder with the divisor's sign. Expected values by hand / __int128.
TEST(ngram_embedding_hash, IntegerSemantics) {
  EXPECT_EQ(slm::detail::ngram::floor_mod(-15, 7), 6);
  EXPECT_EQ(slm::detail::ngram::floor_mod(15, 7), 1);
  EXPECT_EQ(slm::detail::ngram::floor_mod(-14, 7), 0);
  EXPECT_EQ(slm::detail::ngram::floor_mod(INT64_MIN, 499801), static_cast<std::int64_t>(
                (static_cast<i128>(INT64_MIN) % 499801 + 499801) % 499801));
  const std::int64_t a = (std::int64_t{1} << 62) + 3, b = 3;
  const auto wrapped = static_cast<std::int64_t>(static_cast<u128>(static_cast<std::uint64_t>(a)) * 3u);
  EXPECT_EQ(slm::detail::ngram::wrap_mul(a, b), wrapped);
  EXPECT_LT(wrapped, 0);  // 3 (2^62 + 3) wraps to a negative int64

  ngram_hash_config c;
  c.d_model = 1;
  c.num_orders = 1;
  c.orders = {3};
  c.num_heads = 1;
  c.table_size = 7;  // far from the primes: P_0 = 7
  c.embed_dim = 1;
  ngram_hash_embedding m;
  const std::int64_t mults[3] = {a, 3, -1};
  const std::int64_t bias[1] = {0};
  ASSERT_TRUE(m.init_hash(c, mults, bias).ok());
  // u = (3, -5, 2): h = (a*3) ^ (-15) ^ (-2), then floor mod 7.
  const std::int64_t u[8] = {3, -5, 2, 99, 99, 99, 99, 99};
  const std::int64_t h = wrapped ^ std::int64_t{-15} ^ std::int64_t{-2};
  const std::int64_t want = static_cast<std::int64_t>((static_cast<i128>(h) % 7 + 7) % 7);
  EXPECT_EQ(m.index(0, u), want);
  // Positions past the order do not count (u[3..] = 99 above); negative token ids index in range.
  const std::array<std::int32_t, 4> ids{-7, -100000, 2147483647, -2147483647 - 1};
  std::array<std::int64_t, 4> idx{};
  ngram_history hist;
  ASSERT_TRUE(m.indices(ids, hist, idx.data()).ok());
  for (std::int64_t i : idx) {
    EXPECT_GE(i, 0);
    EXPECT_LT(i, 7);
  }
}

// ---------------------------------------------------------------------------------
// N-gram hash: the whole module from a checkpoint.

ngram_hash_config small_config() {
  ngram_hash_config c;
  c.d_model = 32;
  c.num_heads = 4;
  c.table_size = 1000;
  c.embed_dim = 8;
  return c;
}

struct ngram_fixture {
  golden g;
  std::unique_ptr<slm_test::temp_dir> dir;
  std::optional<slm::checkpoint> ck;
  std::optional<ngram_hash_embedding> m;
};

ngram_fixture make_ngram(const char* tag) {
  ngram_fixture f;
  f.g = open_golden("cppmega_ngram_hash__small_tables");
  if (!f.g.file) return f;
  f.dir = std::make_unique<slm_test::temp_dir>(tag);
  f.g.write_checkpoint(*f.dir, slm::nam56r::ngram_hash_prefix());
  auto ck = slm::checkpoint::open(f.dir->path());
  EXPECT_TRUE(ck.ok()) << ck.error().message();
  if (!ck.ok()) return f;
  f.ck.emplace(std::move(*ck));
  EXPECT_TRUE(slm::nam56r::has_ngram_hash(*f.ck, slm::nam56r::ngram_hash_prefix()));
  auto m = slm::nam56r::load_ngram_hash(*f.ck, slm::nam56r::ngram_hash_prefix(), small_config());
  EXPECT_TRUE(m.ok()) << m.error().message();
  if (m.ok()) f.m.emplace(std::move(*m));
  return f;
}

TEST(ngram_embedding_hash, GoldenSmallTables) {
  ngram_fixture f = make_ngram("small");
  ASSERT_TRUE(f.m);
  const auto& g = f.g;
  const auto ids = g.i32("in/token_ids");  // [2, 23]
  const auto want_idx = g.i64("out/unified_indices");  // [2, 8, 23]
  const auto want_rows = g.f32("mid/concat_table_rows");  // [2, 23, 64]
  const auto want_y = g.f32("out/embedding");  // [2, 23, 32]
  const std::size_t B = 2, T = 23, J = 8, JE = 64, d = 32;
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  double worst = 0;
  for (std::size_t b = 0; b < B; ++b) {
    std::span<const std::int32_t> seq(ids.data() + b * T, T);
    std::vector<std::int64_t> idx(T * J);
    ngram_history h;
    ASSERT_TRUE(f.m->indices(seq, h, idx.data()).ok());
    for (std::size_t t = 0; t < T; ++t)
      for (std::size_t j = 0; j < J; ++j) ASSERT_EQ(idx[t * J + j], want_idx[(b * J + j) * T + t]) << b << " " << t << " " << j;
    std::vector<float> rows(T * JE), y(T * d);
    ngram_history h1, h2;
    ASSERT_TRUE(f.m->gather_rows(seq, h1, rows.data(), ws).ok());
    EXPECT_EQ(max_abs_diff(rows.data(), want_rows.data() + b * T * JE, T * JE), 0.0);  // copies
    ASSERT_TRUE(f.m->forward(seq, h2, y.data(), ws, cx).ok());
    EXPECT_EQ(h2.n, T);
    worst = std::max(worst, rel_err(y.data(), want_y.data() + b * T * d, T * d));
  }
  std::printf("[ figures  ] ngram hash small_tables vs cppmega: rel err %.3g\n", worst);
  EXPECT_LE(worst, kTol);
}

// Prefill of T tokens = T one-token steps = any split, from any history; the history is a
// copyable snapshot: restoring it replays the same tokens to the same outputs.
TEST(ngram_embedding_hash, PrefillEqualsStepsAndRollback) {
  ngram_fixture f = make_ngram("steps");
  ASSERT_TRUE(f.m);
  const auto ids = f.g.i32("in/token_ids");
  const std::size_t T = 23, d = 32;
  std::span<const std::int32_t> seq(ids.data(), T);
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  std::vector<float> whole(T * d), steps(T * d), split(T * d);
  ngram_history h0;
  ASSERT_TRUE(f.m->forward(seq, h0, whole.data(), ws, cx).ok());
  ngram_history h1;
  ngram_history snap;
  for (std::size_t t = 0; t < T; ++t) {
    if (t == 10) snap = h1;  // snapshot at position 10
    ASSERT_TRUE(f.m->forward(seq.subspan(t, 1), h1, steps.data() + t * d, ws, cx).ok());
  }
  EXPECT_EQ(h0, h1);
  ngram_history h2;
  ASSERT_TRUE(f.m->forward(seq.subspan(0, 7), h2, split.data(), ws, cx).ok());
  ASSERT_TRUE(f.m->forward(seq.subspan(7), h2, split.data() + 7 * d, ws, cx).ok());
  EXPECT_EQ(h0, h2);
  const double e_steps = max_abs_diff(whole.data(), steps.data(), T * d);
  const double e_split = max_abs_diff(whole.data(), split.data(), T * d);
  std::printf("[ figures  ] ngram prefill vs steps: max abs diff %.3g, vs 7+16 split %.3g\n", e_steps, e_split);
  EXPECT_LE(rel_err(steps.data(), whole.data(), T * d), 1e-6);
  EXPECT_LE(rel_err(split.data(), whole.data(), T * d), 1e-6);

  // Rollback: restore the snapshot, feed other tokens, restore again and replay.
  EXPECT_EQ(snap.n, 10u);
  ngram_history r = snap;
  std::vector<float> tmp(3 * d), replay((T - 10) * d);
  const std::array<std::int32_t, 3> other{5, 6, 7};
  ASSERT_TRUE(f.m->forward(other, r, tmp.data(), ws, cx).ok());
  EXPECT_NE(r, h0);
  ASSERT_TRUE(r.copy_from(snap).ok());
  ASSERT_TRUE(f.m->forward(seq.subspan(10), r, replay.data(), ws, cx).ok());
  EXPECT_EQ(r, h0);
  EXPECT_LE(rel_err(replay.data(), whole.data() + 10 * d, (T - 10) * d), 1e-6);

  // add_to adds the same term.
  std::vector<float> x(T * d, 1.0f);
  ngram_history h3;
  ASSERT_TRUE(f.m->add_to(seq, h3, x.data(), ws, cx).ok());
  for (std::size_t k = 0; k < T * d; ++k) ASSERT_FLOAT_EQ(x[k], 1.0f + whole[k]);
  static_assert(std::is_trivially_copyable_v<ngram_history>);
  static_assert(slm::recurrent_state<ngram_history>);
}

TEST(ngram_embedding_hash, LoadErrors) {
  const std::string pre = slm::nam56r::ngram_hash_prefix();
  golden g = open_golden("cppmega_ngram_hash__small_tables");
  ASSERT_TRUE(g.file);
  {  // the config disagrees with the table (other table size)
    slm_test::temp_dir dir("cfg");
    g.write_checkpoint(dir, pre);
    auto ck = slm::checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok());
    ngram_hash_config c = small_config();
    c.table_size = 999;
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, pre, c), slm::errc::format_error,
                                     {"unified_table", "[8028, 8]", "[8020, 8]"}));
    c = small_config();
    c.d_model = 16;
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, pre, c), slm::errc::format_error, {"out_proj"}));
    c = small_config();
    c.num_heads = 0;
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, pre, c), slm::errc::invalid_argument,
                                     {"num_heads"}));
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, "embedding.other", small_config()),
                                     slm::errc::not_found, {"embedding.other.unified_table"}));
  }
  {  // the random integers are required
    slm_test::temp_dir dir("nomults");
    g.write_checkpoint(dir, pre, {"hash_mults"});
    auto ck = slm::checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok());
    EXPECT_FALSE(slm::nam56r::has_ngram_hash(*ck, pre));
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, pre, small_config()), slm::errc::not_found,
                                     {"hash_mults"}));
  }
  // A copy of the golden's parameters with table 1's size changed (table_sizes_t) and,
  // with float_bias, hash_bias stored as F32. The writer keeps spans: storage outlives it.
  auto write_bad = [&](const slm_test::temp_dir& dir, bool float_bias) {
    slm::safetensors::writer w;
    std::vector<std::vector<std::byte>> keep;
    keep.reserve(g.file->tensors().size());
    const std::vector<float> fb(8, 1.0f);
    for (const auto& t : g.file->tensors()) {
      if (t.name.find('/') != std::string::npos) continue;
      if (float_bias && t.name == "hash_bias") {
        ASSERT_TRUE(w.add(pre + ".hash_bias", slm::dtype::f32, t.shape, std::as_bytes(std::span(fb))).ok());
        continue;
      }
      auto bytes = g.file->view(t).bytes();
      keep.emplace_back(bytes.begin(), bytes.end());
      if (t.name == "table_sizes_t") keep.back()[8] = std::byte{0x11};  // 1001 -> 0x311 = 785
      ASSERT_TRUE(w.add(pre + "." + t.name, t.type, t.shape, keep.back()).ok());
    }
    ASSERT_TRUE(w.write(dir / "model.safetensors").ok());
    ASSERT_TRUE(slm_test::write_file(dir / "config.json", "{}"));
  };
  {  // a float where ints belong
    slm_test::temp_dir dir("bad");
    write_bad(dir, true);
    auto ck = slm::checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok());
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, pre, small_config()), slm::errc::format_error,
                                     {"hash_bias", "F32"}));
  }
  {  // a derived buffer that disagrees with the config
    slm_test::temp_dir dir("bad2");
    write_bad(dir, false);
    auto ck = slm::checkpoint::open(dir.path());
    ASSERT_TRUE(ck.ok());
    EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_ngram_hash(*ck, pre, small_config()), slm::errc::format_error,
                                     {"table_sizes_t", "holds 785 at 1", "1001"}));
  }
  // Bad arguments leave the history untouched.
  ngram_hash_embedding m;
  EXPECT_TRUE(slm_test::fails_with(m.init_hash(small_config(), std::vector<std::int64_t>(5), {}),
                                   slm::errc::invalid_argument, {"hash_mults"}));
  ASSERT_TRUE(m.init_hash(small_config(), {}, {}).ok());
  ngram_history h;
  h.prev[0] = 42;
  const std::array<std::int32_t, 2> ids{1, 2};
  EXPECT_TRUE(slm_test::fails_with(m.indices(ids, h, nullptr), slm::errc::invalid_argument, {"null"}));
  EXPECT_EQ(h.prev[0], 42);
  EXPECT_EQ(h.n, 0u);
}

// ---------------------------------------------------------------------------------
// Structure embedding.

struct struct_fixture {
  golden g;
  std::unique_ptr<slm_test::temp_dir> dir;
  std::optional<slm::checkpoint> ck;
  std::optional<structure_embedding> m;
};

structure_embedding_config struct_config(std::uint8_t active) {
  structure_embedding_config c;
  c.d_model = 24;
  c.bottleneck = 16;
  c.active = active;
  return c;  // max_ast_depth 20, max_sibling_index 10, num_node_types 64: the goldens'
}

struct_fixture make_struct(const char* name, std::uint8_t active) {
  struct_fixture f;
  f.g = open_golden(name);
  if (!f.g.file) return f;
  f.dir = std::make_unique<slm_test::temp_dir>(name);
  f.g.write_checkpoint(*f.dir, slm::nam56r::structure_prefix());
  auto ck = slm::checkpoint::open(f.dir->path());
  EXPECT_TRUE(ck.ok()) << ck.error().message();
  if (!ck.ok()) return f;
  f.ck.emplace(std::move(*ck));
  EXPECT_TRUE(slm::nam56r::has_structure_embedding(*f.ck, slm::nam56r::structure_prefix()));
  auto m = slm::nam56r::load_structure_embedding(*f.ck, slm::nam56r::structure_prefix(), struct_config(active));
  EXPECT_TRUE(m.ok()) << m.error().message();
  if (m.ok()) f.m.emplace(std::move(*m));
  return f;
}

// Runs both batch rows of a structure golden; inputs named in `given`, others missing.
double run_struct_golden(const struct_fixture& f, const std::vector<std::pair<slm::structure_component, std::string>>& given) {
  const std::size_t B = 2, T = 11, d = 24;
  std::vector<std::vector<std::int32_t>> inputs;
  for (const auto& gi : given) inputs.push_back(f.g.i32(gi.second));
  const auto want = f.g.f32("out/structure_embedding");
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  double worst = 0;
  for (std::size_t b = 0; b < B; ++b) {
    structure_inputs in;
    for (std::size_t k = 0; k < given.size(); ++k)
      in.set(given[k].first, std::span<const std::int32_t>(inputs[k].data() + b * T, T));
    std::vector<float> y(T * d);
    auto r = f.m->forward(in, T, y.data(), ws, cx);
    EXPECT_TRUE(r.ok() && *r);
    worst = std::max(worst, rel_err(y.data(), want.data() + b * T * d, T * d));
    // add_to adds the same.
    std::vector<float> x(T * d, 0.5f);
    EXPECT_TRUE(f.m->add_to(in, T, x.data(), ws, cx).ok());
    for (std::size_t k = 0; k < T * d; ++k) EXPECT_FLOAT_EQ(x[k], 0.5f + y[k]);
  }
  return worst;
}

TEST(ngram_embedding_structure, GoldenCore) {
  auto f = make_struct("cppmega_structure_embedding__core", structure_embedding_config::core);
  ASSERT_TRUE(f.m);
  EXPECT_FALSE(f.m->is_zero());
  using sc = slm::structure_component;
  const double e = run_struct_golden(f, {{sc::structure, "in/structure_ids"}, {sc::dep_level, "in/dep_levels"}});
  std::printf("[ figures  ] structure core vs cppmega: rel err %.3g\n", e);
  EXPECT_LE(e, kTol);
}

TEST(ngram_embedding_structure, GoldenAllOneMissing) {
  auto f = make_struct("cppmega_structure_embedding__all_one_missing", structure_embedding_config::all);
  ASSERT_TRUE(f.m);
  using sc = slm::structure_component;
  const double e = run_struct_golden(f, {{sc::structure, "in/structure_ids"},
                                         {sc::dep_level, "in/dep_levels"},
                                         {sc::ast_depth, "in/ast_depth_ids"},
                                         {sc::sibling_index, "in/sibling_index_ids"}});
  std::printf("[ figures  ] structure all, node types missing, vs cppmega: rel err %.3g\n", e);
  EXPECT_LE(e, kTol);
}

TEST(ngram_embedding_structure, MissingInputsAndErrors) {
  auto f = make_struct("cppmega_structure_embedding__core", structure_embedding_config::core);
  ASSERT_TRUE(f.m);
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  const std::size_t T = 4, d = 24;
  std::vector<float> y(T * d, 7.0f), x(T * d, 1.0f);
  // Every active input missing: nothing to add (cppmega's scalar 0).
  structure_inputs none;
  const std::array<std::int32_t, 4> ids{0, 3, 100, -5};
  none.set(slm::structure_component::ast_depth, ids);  // inactive in `core`: ignored
  auto r = f.m->forward(none, T, y.data(), ws, cx);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(*r);
  EXPECT_EQ(y[0], 7.0f);
  ASSERT_TRUE(f.m->add_to(none, T, x.data(), ws, cx).ok());
  EXPECT_EQ(x[0], 1.0f);
  // One given: the other contributes 0; ids clamp (100 -> 8, -5 -> 0).
  structure_inputs one;
  one.set(slm::structure_component::structure, ids);
  r = f.m->forward(one, T, y.data(), ws, cx);
  ASSERT_TRUE(r.ok() && *r);
  const std::array<std::int32_t, 4> clamped{0, 3, 8, 0};
  structure_inputs one_c;
  one_c.set(slm::structure_component::structure, clamped);
  std::vector<float> y2(T * d);
  ASSERT_TRUE(f.m->forward(one_c, T, y2.data(), ws, cx).ok());
  EXPECT_EQ(max_abs_diff(y.data(), y2.data(), T * d), 0.0);
  // By hand: up_proj (scale_0 stacked_emb[id]).
  const auto W = f.g.f32("up_proj.weight"), E = f.g.f32("stacked_emb.weight"), s = f.g.f32("component_scales");
  double worst = 0;
  for (std::size_t t = 0; t < T; ++t)
    for (std::size_t o = 0; o < d; ++o) {
      double acc = 0;
      for (std::size_t b = 0; b < 16; ++b)
        acc += double(W[o * 16 + b]) * double(s[0] * E[static_cast<std::size_t>(clamped[t]) * 16 + b]);
      worst = std::max(worst, std::fabs(acc - y[t * d + o]));
    }
  EXPECT_LE(worst, 1e-5);
  // Wrong length.
  structure_inputs bad;
  bad.set(slm::structure_component::dep_level, std::span<const std::int32_t>(ids.data(), 3));
  EXPECT_TRUE(slm_test::fails_with(f.m->forward(bad, T, y.data(), ws, cx), slm::errc::invalid_argument,
                                   {"3 ids for 4 tokens"}));
  // Wrong config against the checkpoint.
  auto c = struct_config(structure_embedding_config::all);
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_structure_embedding(*f.ck, slm::nam56r::structure_prefix(), c),
                                   slm::errc::format_error, {"stacked_emb.weight", "[25, 16]", "[119, 16]"}));
  c = struct_config(0);
  EXPECT_TRUE(slm_test::fails_with(slm::nam56r::load_structure_embedding(*f.ck, slm::nam56r::structure_prefix(), c),
                                   slm::errc::invalid_argument, {"active"}));
}

// A production checkpoint keeps the module at its zero initialisation: detected, skipped.
TEST(ngram_embedding_structure, ZeroModuleIsSkipped) {
  slm_test::temp_dir dir("zero");
  const std::string pre = slm::nam56r::structure_prefix();
  slm::safetensors::writer w;
  std::vector<float> emb(25 * 16, 0.0f), up(24 * 16, 0.0f), sc{0.5f, 0.5f};
  ASSERT_TRUE(w.add(pre + ".stacked_emb.weight", slm::dtype::f32, slm::shape{25, 16}, std::as_bytes(std::span(emb))).ok());
  ASSERT_TRUE(w.add(pre + ".up_proj.weight", slm::dtype::f32, slm::shape{24, 16}, std::as_bytes(std::span(up))).ok());
  ASSERT_TRUE(w.add(pre + ".component_scales", slm::dtype::f32, slm::shape{2}, std::as_bytes(std::span(sc))).ok());
  ASSERT_TRUE(w.write(dir / "model.safetensors").ok());
  ASSERT_TRUE(slm_test::write_file(dir / "config.json", "{}"));
  auto ck = slm::checkpoint::open(dir.path());
  ASSERT_TRUE(ck.ok());
  auto m = slm::nam56r::load_structure_embedding(*ck, pre, struct_config(structure_embedding_config::core));
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE(m->is_zero());
  const std::array<std::int32_t, 2> ids{1, 2};
  structure_inputs in;
  in.set(slm::structure_component::structure, ids);
  std::vector<float> x(2 * 24, 3.0f);
  slm::workspace ws;
  slm::compute_context cx{slm_test::the_pools().p2};
  ASSERT_TRUE(m->add_to(in, 2, x.data(), ws, cx).ok());
  for (float v : x) EXPECT_EQ(v, 3.0f);
}

}  // namespace
