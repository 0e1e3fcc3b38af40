// slm quantize's engine: a checkpoint directory converted to ModelOpt NVFP4 / MXFP4 /
// FP8 or to BF16, checked by loading the result through the quantized-layout loader
// and comparing with the quantizer run directly on the original weights.
#include "slm/formats/convert.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <random>

#include "slm/models/hf/model.hpp"
#include "slm/models/nam56r/model.hpp"

#include "test_helpers.hpp"

using slm::dtype;
using slm::errc;
using slm_test::fails_with;
namespace st = slm::safetensors;

namespace {

struct source_model {
  std::vector<float> q_proj, down_proj;
  std::vector<std::uint16_t> embed, gate, lm_head, norm;

  explicit source_model(const std::filesystem::path& dir) {
    std::mt19937 rng(42);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    auto fill = [&](auto& v, std::size_t n) {
      v.resize(n);
      for (auto& x : v) {
        if constexpr (std::is_same_v<std::decay_t<decltype(x)>, float>) x = normal(rng);
        else x = slm::f32_to_bf16(normal(rng));
      }
    };
    fill(q_proj, 48 * 64);
    fill(down_proj, 64 * 48);
    fill(embed, 32 * 64);
    fill(gate, 4 * 64);
    fill(lm_head, 32 * 64);
    fill(norm, 64);
    st::writer w;
    w.set_metadata("format", "pt");
    EXPECT_TRUE(w.add("model.layers.0.self_attn.q_proj.weight", dtype::f32, slm::shape{48, 64}, std::as_bytes(std::span(q_proj))).ok());
    EXPECT_TRUE(w.add("model.layers.0.mlp.down_proj.weight", dtype::f32, slm::shape{64, 48}, std::as_bytes(std::span(down_proj))).ok());
    EXPECT_TRUE(w.add("model.embed_tokens.weight", dtype::bf16, slm::shape{32, 64}, std::as_bytes(std::span(embed))).ok());
    EXPECT_TRUE(w.add("model.layers.0.mlp.gate.weight", dtype::bf16, slm::shape{4, 64}, std::as_bytes(std::span(gate))).ok());
    EXPECT_TRUE(w.add("lm_head.weight", dtype::bf16, slm::shape{32, 64}, std::as_bytes(std::span(lm_head))).ok());
    EXPECT_TRUE(w.add("model.layers.0.input_layernorm.weight", dtype::bf16, slm::shape{64}, std::as_bytes(std::span(norm))).ok());
    EXPECT_TRUE(slm_test::write_file(dir / "config.json", R"({"model_type": "llama", "hidden_size": 64})"));
    EXPECT_TRUE(slm_test::write_file(dir / "tokenizer.json", R"({"model": {"type": "BPE"}})"));
    EXPECT_TRUE(w.write(dir / "model.safetensors").ok());
  }
};

slm::thread_pool make_pool() { return std::move(*slm::thread_pool::create(2)); }

}  // namespace

TEST(Convert, Nvfp4MatchesTheQuantizerAndKeepsTheRest) {
  slm_test::temp_dir in("in"), out("out");
  source_model src(in.path());
  auto pool = make_pool();
  std::vector<std::string> seen;
  slm::convert_options opt;
  auto reports = slm::convert_checkpoint(in.path(), out.path(), opt, pool,
                                         [&](const slm::tensor_report& r, std::size_t, std::size_t) { seen.push_back(r.name); });
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  EXPECT_EQ(reports->size(), 6u);
  EXPECT_EQ(seen.size(), 6u);
  EXPECT_TRUE(std::filesystem::exists(out / "tokenizer.json"));

  auto ck = slm::checkpoint::open(out.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  auto cfg = slm::quant_config::from_checkpoint(*ck);
  ASSERT_TRUE(cfg.ok());
  EXPECT_EQ(cfg->method, slm::quant_method::modelopt);
  EXPECT_EQ(cfg->algo, "NVFP4");
  EXPECT_TRUE(cfg->is_excluded("model.embed_tokens"));
  EXPECT_TRUE(cfg->is_excluded("lm_head"));
  EXPECT_TRUE(cfg->is_excluded("model.layers.0.mlp.gate"));
  EXPECT_FALSE(cfg->is_excluded("model.layers.0.self_attn.q_proj"));

  // The converted codes are exactly what the quantizer gives on the original weights.
  auto direct = slm::quantize_nvfp4(std::span<const float>(src.q_proj), 48, 64);
  ASSERT_TRUE(direct.ok());
  auto w = slm::load_linear_weight(*ck, "model.layers.0.self_attn.q_proj");
  ASSERT_TRUE(w.ok()) << w.error().message();
  ASSERT_EQ(w->format, slm::weight_format::nvfp4);
  EXPECT_EQ(w->global, direct->weight_scale_2);
  EXPECT_EQ(0, std::memcmp(w->data, direct->codes.data(), direct->codes.size()));
  EXPECT_EQ(0, std::memcmp(w->scales, direct->scales.data(), direct->scales.size()));

  // Kept tensors are byte-identical.
  auto emb = ck->tensor("model.embed_tokens.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->type(), dtype::bf16);
  EXPECT_EQ(0, std::memcmp(emb->data(), src.embed.data(), src.embed.size() * 2));
  std::size_t quantized = 0;
  double worst = 0;
  std::uint64_t bytes_in = 0, bytes_out = 0;
  for (const auto& r : *reports) {
    bytes_in += r.bytes_in, bytes_out += r.bytes_out;
    if (r.action == "nvfp4") {
      EXPECT_GT(r.rel_rms_error, 0.0);
      EXPECT_LT(r.rel_rms_error, 0.2) << r.name;  // 4-bit: about 0.1 on Gaussian weights
      EXPECT_FALSE(r.kept());
      ++quantized, worst = std::max(worst, r.rel_rms_error);
    } else {
      EXPECT_EQ(r.action.rfind("kept", 0), 0u) << r.name << ": " << r.action;
      EXPECT_TRUE(r.kept()) << r.name;
    }
  }
  // The totals `slm quantize` prints.
  const slm::convert_totals t = slm::convert_totals::of(*reports);
  EXPECT_EQ(t.tensors, 6u);
  EXPECT_EQ(t.converted, quantized);
  EXPECT_GT(t.converted, 0u);
  EXPECT_LT(t.converted, 6u);
  EXPECT_EQ(t.worst_rel_rms_error, worst);
  EXPECT_EQ(t.bytes_in, bytes_in);
  EXPECT_EQ(t.bytes_out, bytes_out);
  EXPECT_LT(t.bytes_out, t.bytes_in);
}

TEST(Convert, OtherFormats) {
  slm_test::temp_dir in("in");
  source_model src(in.path());
  auto pool = make_pool();
  for (auto f : {slm::weight_format::mxfp4, slm::weight_format::fp8_e4m3, slm::weight_format::bf16}) {
    SCOPED_TRACE(std::string(slm::to_string(f)));
    slm_test::temp_dir out(slm::to_string(f));
    slm::convert_options opt;
    opt.format = f;
    auto reports = slm::convert_checkpoint(in.path(), out.path(), opt, pool);
    ASSERT_TRUE(reports.ok()) << reports.error().message();
    auto ck = slm::checkpoint::open(out.path());
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    auto q = slm::load_linear_weight(*ck, "model.layers.0.self_attn.q_proj");
    ASSERT_TRUE(q.ok()) << q.error().message();
    EXPECT_EQ(q->format, f);
    std::vector<float> row(64);
    slm::dequantize_row(*q, 5, row);
    for (std::size_t k = 0; k < 64; ++k) {
      const float original = src.q_proj[5 * 64 + k];
      if (f == slm::weight_format::bf16) EXPECT_EQ(row[k], slm::bf16_to_f32(slm::f32_to_bf16(original)));  // RNE, exactly
      else EXPECT_NEAR(row[k], original, 0.03);
    }
    auto down = slm::load_linear_weight(*ck, "model.layers.0.mlp.down_proj");
    ASSERT_TRUE(down.ok());
    // K = 48 is not a multiple of MXFP4's block of 32: kept in F32.
    EXPECT_EQ(down->format, f == slm::weight_format::mxfp4 ? slm::weight_format::f32 : f);
  }
}

TEST(Convert, ShardedInputKeepsItsShardsAndIndex) {
  slm_test::temp_dir out("out");
  auto pool = make_pool();
  auto reports = slm::convert_checkpoint(slm_test::test_data("oracle/sharded_llama"), out.path(), {}, pool);
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  auto ck = slm::checkpoint::open(out.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->shards().size(), 5u);
  ASSERT_TRUE(std::filesystem::exists(out / "model.safetensors.index.json"));
  std::size_t quantized = 0;
  for (const auto& r : *reports) {
    if (r.action != "nvfp4") continue;
    ++quantized;
    const std::string module = r.name.substr(0, r.name.size() - 7);
    auto w = slm::load_linear_weight(*ck, module);
    ASSERT_TRUE(w.ok()) << w.error().message();
    EXPECT_EQ(w->format, slm::weight_format::nvfp4);
  }
  EXPECT_EQ(quantized, 2u * 7);  // q, k, v, o, gate, up, down in each of 2 layers
}

TEST(Convert, Errors) {
  slm_test::temp_dir in("in"), out("out");
  source_model src(in.path());
  auto pool = make_pool();
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(in.path(), in.path(), {}, pool), errc::invalid_argument, {"--out must differ"}));
  ASSERT_TRUE(slm::convert_checkpoint(in.path(), out.path(), {}, pool).ok());
  slm_test::temp_dir again("again");
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(out.path(), again.path(), {}, pool), errc::unsupported, {"already quantized"}));
  slm::cancellation cancel;
  cancel.cancel();
  slm::convert_options opt;
  opt.cancel = &cancel;
  slm_test::temp_dir cancelled("cancelled");
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(in.path(), cancelled.path(), opt, pool), errc::cancelled, {}));
  EXPECT_FALSE(std::filesystem::exists(cancelled / "model.safetensors"));
  EXPECT_FALSE(std::filesystem::exists(cancelled / "model.safetensors.tmp"));
}

// NAM56R's canonical (Megatron) names: Transformer Engine's grouped experts carry their
// index after the parameter name (`linear_fc1.weight3`) and are quantized under the same
// convention (`.weight_scale3`, `.weight_scale_23`); the keep-list holds the n-gram
// tables, the output layer, the DSA indexer and the router in high precision.
TEST(Convert, Nam56rNamesGroupedExpertsAndKeepList) {
  slm_test::temp_dir in("in"), out("out");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<std::vector<float>> data;
  st::writer w;
  auto add = [&](const std::string& name, std::int64_t r, std::int64_t c) {
    data.emplace_back(static_cast<std::size_t>(r * c));
    for (float& x : data.back()) x = normal(rng);
    ASSERT_TRUE(w.add(name, dtype::f32, slm::shape{r, c}, std::as_bytes(std::span(data.back()))).ok());
  };
  const std::string L = "decoder.layers.1.";
  add("embedding.word_embeddings.weight", 40, 32);
  add("embedding.cppmega_ngram_hash.unified_table.weight", 50, 16);
  add("embedding.cppmega_ngram_hash.out_proj.weight", 32, 64);
  add("output_layer.weight", 40, 32);
  add(L + "mlp.router.weight", 4, 32);
  add(L + "mlp.experts.linear_fc1.weight0", 48, 32);
  add(L + "mlp.experts.linear_fc1.weight1", 48, 32);
  add(L + "mlp.experts.linear_fc2.weight0", 32, 48);
  add(L + "mlp.experts.linear_fc2.weight1", 32, 48);
  add("decoder.layers.0.self_attention.core_attention.indexer.linear_wk.weight", 16, 32);
  add("decoder.layers.0.self_attention.linear_q_down_proj.weight", 16, 32);
  ASSERT_TRUE(slm_test::write_file(in / "config.json", R"({"model_type": "nam56r"})"));
  ASSERT_TRUE(w.write(in / "model.safetensors").ok());

  auto pool = make_pool();
  auto reports = slm::convert_checkpoint(in.path(), out.path(), slm::convert_options{}, pool, {});
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  std::map<std::string, std::string> action;
  for (const auto& r : *reports) action[r.name] = r.action;
  EXPECT_EQ(action["embedding.word_embeddings.weight"], "kept F32: embedding");
  EXPECT_EQ(action["embedding.cppmega_ngram_hash.unified_table.weight"], "kept F32: embedding");
  EXPECT_EQ(action["output_layer.weight"], "kept F32: output head");
  EXPECT_EQ(action[L + "mlp.router.weight"], "kept F32: router");
  EXPECT_EQ(action["decoder.layers.0.self_attention.core_attention.indexer.linear_wk.weight"], "kept F32: DSA indexer");
  EXPECT_EQ(action["decoder.layers.0.self_attention.linear_q_down_proj.weight"], "nvfp4");
  EXPECT_EQ(action[L + "mlp.experts.linear_fc1.weight1"], "nvfp4");

  auto ck = slm::checkpoint::open(out.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_TRUE(ck->find(L + "mlp.experts.linear_fc1.weight_scale1"));
  EXPECT_TRUE(ck->find(L + "mlp.experts.linear_fc1.weight_scale_21"));
  // Expert 1 reads back as the quantizer's own output for its matrix, expert 0 differs.
  auto direct = slm::quantize_nvfp4(std::span<const float>(data[6]), 48, 32);
  ASSERT_TRUE(direct.ok());
  auto e1 = slm::load_linear_weight(*ck, L + "mlp.experts.linear_fc1", "1");
  ASSERT_TRUE(e1.ok()) << e1.error().message();
  ASSERT_EQ(e1->format, slm::weight_format::nvfp4);
  EXPECT_EQ(e1->rows, 48u);
  EXPECT_EQ(e1->global, direct->weight_scale_2);
  EXPECT_EQ(0, std::memcmp(e1->data, direct->codes.data(), direct->codes.size()));
  EXPECT_TRUE(fails_with(slm::load_linear_weight(*ck, L + "mlp.experts.linear_fc1", "2"), errc::not_found,
                         {"linear_fc1.weight2"}));
  auto cfg = slm::quant_config::from_checkpoint(*ck);
  ASSERT_TRUE(cfg.ok());
  EXPECT_TRUE(cfg->is_excluded("output_layer"));
  EXPECT_FALSE(cfg->is_excluded(L + "mlp.experts.linear_fc1"));
}

// ---------------------------------------------------------------------------------
// convert_options::include (`slm quantize --include GLOB`, `--quantize-embeddings`):
// embeddings and output heads quantized on request, everything else kept as before.

namespace {

namespace fs = std::filesystem;

struct tensor_copy {
  std::string name;
  dtype type = dtype::f32;
  slm::shape shape;
  std::vector<std::byte> bytes;
};

std::vector<tensor_copy> read_tensors(const fs::path& file) {
  std::vector<tensor_copy> out;
  auto f = st::file::open(file);
  EXPECT_TRUE(f.ok()) << f.error().message();
  if (!f.ok()) return out;
  for (const st::tensor_info& t : f->tensors()) {
    const auto b = f->view(t).bytes();
    out.push_back({t.name, t.type, t.shape, std::vector<std::byte>(b.begin(), b.end())});
  }
  return out;
}

// dir/model.safetensors from `tensors`, plus every other file of `like` (config, quant config).
void write_checkpoint(const fs::path& dir, const std::vector<tensor_copy>& tensors, const fs::path& like) {
  st::writer w;
  w.set_metadata("format", "pt");
  for (const auto& t : tensors) ASSERT_TRUE(w.add(t.name, t.type, t.shape, t.bytes).ok()) << t.name;
  ASSERT_TRUE(w.write(dir / "model.safetensors").ok());
  for (const auto& de : fs::directory_iterator(like))
    if (de.path().extension() != ".safetensors") fs::copy_file(de.path(), dir / de.path().filename(), fs::copy_options::overwrite_existing);
}

// tests/data/nam56r/tiny with the n-gram tables widened from E = 4 to the real model's
// E = 16 (unified_table [130, 16], out_proj [32, 4 x 16], fresh Gaussian values of the
// original tables' RMS), so the table can be NVFP4 (K a multiple of 16).
void make_tiny_e16(const fs::path& dir) {
  const fs::path src = slm_test::test_data("nam56r/tiny");
  auto tensors = read_tensors(src / "model.safetensors");
  std::mt19937 rng(11);
  for (auto& t : tensors) {
    const bool table = t.name == "embedding.cppmega_ngram_hash.unified_table.weight";
    if (!table && t.name != "embedding.cppmega_ngram_hash.out_proj.weight") continue;
    ASSERT_EQ(t.type, dtype::bf16);
    double sq = 0;
    const std::size_t n0 = t.bytes.size() / 2;
    for (std::size_t i = 0; i < n0; ++i) {
      std::uint16_t h;
      std::memcpy(&h, t.bytes.data() + 2 * i, 2);
      sq += static_cast<double>(slm::bf16_to_f32(h)) * slm::bf16_to_f32(h);
    }
    std::normal_distribution<float> normal(0.0f, static_cast<float>(std::sqrt(sq / static_cast<double>(n0))));
    t.shape = table ? slm::shape{t.shape[0], 16} : slm::shape{t.shape[0], 64};
    t.bytes.resize(static_cast<std::size_t>(t.shape.numel()) * 2);
    for (std::size_t i = 0; i < t.bytes.size() / 2; ++i) {
      const std::uint16_t h = slm::f32_to_bf16(normal(rng));
      std::memcpy(t.bytes.data() + 2 * i, &h, 2);
    }
  }
  write_checkpoint(dir, tensors, src);
  std::string cfg;
  {
    std::ifstream f(src / "config.json");
    cfg.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  const std::string from = "\"embed_dim\": 4", to = "\"embed_dim\": 16";
  const auto at = cfg.find(from);
  ASSERT_NE(at, std::string::npos);
  cfg.replace(at, from.size(), to);
  ASSERT_TRUE(slm_test::write_file(dir / "config.json", cfg));
}

// A copy of the quantized checkpoint `q` in which each module of `modules` holds its
// dequantized NVFP4 weight as F32 (dequantize(), the reference) instead of codes + scales.
void write_dequantized_copy(const fs::path& q, const fs::path& out, const std::vector<std::string>& modules) {
  auto ck = slm::checkpoint::open(q);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  auto tensors = read_tensors(q / "model.safetensors");
  for (const std::string& m : modules) {
    auto w = slm::load_linear_weight(*ck, m);
    ASSERT_TRUE(w.ok()) << w.error().message();
    ASSERT_EQ(w->format, slm::weight_format::nvfp4) << m;
    std::vector<float> f(w->rows * w->cols);
    ASSERT_TRUE(slm::dequantize(*w, f).ok());
    std::erase_if(tensors, [&](const tensor_copy& t) { return t.name == m + ".weight_scale" || t.name == m + ".weight_scale_2"; });
    for (auto& t : tensors) {
      if (t.name != m + ".weight") continue;
      t.type = dtype::f32;
      t.shape = slm::shape{static_cast<std::int64_t>(w->rows), static_cast<std::int64_t>(w->cols)};
      const auto b = std::as_bytes(std::span(f));
      t.bytes.assign(b.begin(), b.end());
    }
  }
  write_checkpoint(out, tensors, q);
}

std::vector<float> nam56r_logits(const fs::path& dir, const std::vector<std::int32_t>& ids) {
  auto m = slm::nam56r_model::load(dir);
  EXPECT_TRUE(m.ok()) << m.error().message();
  if (!m.ok()) return {};
  auto s = m->new_session();
  slm::compute_context cx{slm_test::the_pools().p2};
  std::vector<float> out(ids.size() * m->vocab());
  auto st = s.forward(ids, ids.size(), out.data(), cx);
  EXPECT_TRUE(st.ok()) << st.message();
  return out;
}

// Mean over rows of the Pearson correlation of two [T, V] logit tensors.
double mean_row_correlation(const std::vector<float>& a, const std::vector<float>& b, std::size_t V) {
  const std::size_t T = a.size() / V;
  double sum = 0;
  for (std::size_t t = 0; t < T; ++t) {
    double ma = 0, mb = 0;
    for (std::size_t v = 0; v < V; ++v) ma += a[t * V + v], mb += b[t * V + v];
    ma /= static_cast<double>(V), mb /= static_cast<double>(V);
    double sab = 0, saa = 0, sbb = 0;
    for (std::size_t v = 0; v < V; ++v) {
      const double x = a[t * V + v] - ma, y = b[t * V + v] - mb;
      sab += x * y, saa += x * x, sbb += y * y;
    }
    sum += sab / std::sqrt(saa * sbb);
  }
  return T ? sum / static_cast<double>(T) : 0.0;
}

std::map<std::string, std::string> actions_of(const std::vector<slm::tensor_report>& reports) {
  std::map<std::string, std::string> a;
  for (const auto& r : reports) a[r.name] = r.action;
  return a;
}

}  // namespace

// The NAM56R embedding path: word embeddings, the n-gram hash table (E = 16, as the real
// model's) and the output layer quantized with the --quantize-embeddings patterns.
TEST(ConvertInclude, Nam56rEmbeddingsAndHeadToNvfp4) {
  slm_test::temp_dir src("tiny_e16"), plain("plain"), incl("incl"), deq("deq");
  make_tiny_e16(src.path());
  if (HasFatalFailure()) return;
  auto& pool = slm_test::the_pools().p2;
  auto base = slm::convert_checkpoint(src.path(), plain.path(), {}, pool);
  ASSERT_TRUE(base.ok()) << base.error().message();
  slm::convert_options opt;
  opt.include = slm::embedding_include_patterns();
  auto reports = slm::convert_checkpoint(src.path(), incl.path(), opt, pool);
  ASSERT_TRUE(reports.ok()) << reports.error().message();

  // (a) The report: the three tensors converted, nothing else changed.
  const std::vector<std::string> embeds = {"embedding.word_embeddings", "embedding.cppmega_ngram_hash.unified_table",
                                           "output_layer"};
  auto before = actions_of(*base), after = actions_of(*reports);
  for (const auto& m : embeds) {
    EXPECT_EQ(before[m + ".weight"].rfind("kept", 0), 0u) << m;
    EXPECT_EQ(after[m + ".weight"], "nvfp4") << m;
  }
  std::size_t changed = 0;
  for (const auto& [name, action] : before)
    if (after.count(name) && after[name] != action) ++changed;
  EXPECT_EQ(changed, embeds.size());
  EXPECT_EQ(after["embedding.cppmega_ngram_hash.out_proj.weight"], "kept BF16: embedding");  // not a pattern's
  // hf_quant_config.json's exclude_modules lists what stays high precision, and only that.
  for (const auto& [dir, quantized] : {std::pair{plain.path(), false}, std::pair{incl.path(), true}}) {
    auto ck = slm::checkpoint::open(dir);
    ASSERT_TRUE(ck.ok()) << ck.error().message();
    auto q = slm::quant_config::from_checkpoint(*ck);
    ASSERT_TRUE(q.ok()) << q.error().message();
    for (const auto& m : embeds)
      EXPECT_EQ(std::find(q->exclude.begin(), q->exclude.end(), m) != q->exclude.end(), !quantized) << m;
    EXPECT_NE(std::find(q->exclude.begin(), q->exclude.end(), "decoder.layers.1.mlp.router"), q->exclude.end());
  }

  // (b) The model runs; its logits stay near the model with high-precision embeddings.
  std::vector<std::int32_t> ids;
  for (std::int32_t i = 0; i < 16; ++i) ids.push_back((i * 37 + 5) % 100);
  const auto ref = nam56r_logits(plain.path(), ids), got = nam56r_logits(incl.path(), ids);
  const std::size_t m0_vocab = 100;  // config.json vocab_size
  ASSERT_EQ(got.size(), ref.size());
  for (float v : got) ASSERT_TRUE(std::isfinite(v));
  const double err = slm_test::rel_err(got.data(), ref.data(), ref.size());
  EXPECT_GT(err, 0.0);
  // Random weights, width 32, 13 layers: a 4-bit input embedding (about 10 % RMS error
  // per row) reaches every layer undamped, so the logits move about as much as they do
  // when all projections go to NVFP4 (0.72 x max|logit| in test_nam56r). Measured here:
  // 0.741 x max|logit| with all three, mean row correlation 0.923; only the head (one
  // linear map) 0.122 and 0.995; only the word embeddings 0.734 / 0.943; only the n-gram
  // table 0.643 / 0.949. A misread layout or scale gives ~0 correlation, so the bounds
  // are set between: all three < 1.0 and correlation > 0.8; the head alone < 0.25, > 0.98.
  const double corr = mean_row_correlation(got, ref, m0_vocab);
  std::printf("[ figures  ] tiny NAM56R (E = 16) NVFP4 + embeddings/head vs NVFP4: %.3e x max|logit|, mean row "
              "correlation %.3f\n", err, corr);
  EXPECT_LT(err, 1.0);
  EXPECT_GT(corr, 0.8);
  for (const auto& pat : embeds) {
    slm_test::temp_dir one("one");
    slm::convert_options o1;
    o1.include = {"*" + pat};
    ASSERT_TRUE(slm::convert_checkpoint(src.path(), one.path(), o1, pool).ok());
    const auto g1 = nam56r_logits(one.path(), ids);
    ASSERT_EQ(g1.size(), ref.size());
    const double e1 = slm_test::rel_err(g1.data(), ref.data(), ref.size()), c1 = mean_row_correlation(g1, ref, m0_vocab);
    std::printf("[ figures  ]   only %s: %.3e x max|logit|, correlation %.3f\n", pat.c_str(), e1, c1);
    EXPECT_GT(e1, 0.0) << pat;
    EXPECT_LT(e1, 1.0) << pat;
    EXPECT_GT(c1, 0.8) << pat;
    if (pat == "output_layer") {
      EXPECT_LT(e1, 0.25);
      EXPECT_GT(c1, 0.98);
    }
  }

  // Every gathered row is the dequantized NVFP4 row exactly: the model with those tables
  // stored as their F32 dequantization gives the same logits bit for bit (the head stays
  // NVFP4 in both).
  write_dequantized_copy(incl.path(), deq.path(), {embeds[0], embeds[1]});
  if (HasFatalFailure()) return;
  const auto same = nam56r_logits(deq.path(), ids);
  ASSERT_EQ(same.size(), got.size());
  EXPECT_EQ(slm_test::max_abs_diff(same.data(), got.data(), got.size()), 0.0);

  // And the n-gram table's gather directly, against dequantize() of the table.
  auto ck = slm::checkpoint::open(incl.path());
  ASSERT_TRUE(ck.ok());
  auto m = slm::nam56r_model::load(incl.path());
  ASSERT_TRUE(m.ok()) << m.error().message();
  const auto& nc = *m->config().ngram_hash;
  auto ng = slm::nam56r::load_ngram_hash(*ck, slm::nam56r::ngram_hash_prefix(), nc);
  ASSERT_TRUE(ng.ok()) << ng.error().message();
  ASSERT_EQ(ng->table.format, slm::weight_format::nvfp4);
  std::vector<float> table(ng->table.rows * ng->table.cols);
  ASSERT_TRUE(slm::dequantize(ng->table, table).ok());
  const std::size_t J = nc.num_tables(), E = nc.embed_dim;
  std::vector<float> rows(ids.size() * J * E);
  std::vector<std::int64_t> idx(ids.size() * J);
  slm::workspace ws;
  slm::ngram_history h1, h2;
  ASSERT_TRUE(ng->gather_rows(ids, h1, rows.data(), ws).ok());
  ASSERT_TRUE(ng->indices(ids, h2, idx.data()).ok());
  for (std::size_t i = 0; i < idx.size(); ++i)
    ASSERT_EQ(0, std::memcmp(rows.data() + i * E, table.data() + static_cast<std::size_t>(idx[i]) * E, E * sizeof(float))) << i;
}

// (c) An include pattern lifts only "embedding" and "output head": norms, routers, the DSA
// indexer, mHC scorers, non-2-D tensors, exclude matches and K off the block stay.
TEST(ConvertInclude, NeverNormsRoutersIndexerOrExcluded) {
  slm::convert_options opt;
  opt.include = {"*"};
  opt.exclude = {"lm_head"};
  slm::quant_config ex, in;
  ex.exclude = opt.exclude;
  in.exclude = opt.include;
  auto reason = [&](const std::string& name, std::int64_t n, std::int64_t k) {
    st::tensor_info t;
    t.name = name;
    t.type = dtype::bf16;
    t.shape = k ? slm::shape{n, k} : slm::shape{n};
    return slm::detail::keep_reason(name, t, opt, ex, in);
  };
  EXPECT_EQ(reason("model.embed_tokens.weight", 32, 64), "");
  EXPECT_EQ(reason("output_layer.weight", 32, 64), "");
  EXPECT_EQ(reason("model.embed_norm.weight", 64, 64), "norm");  // an embedding's norm is a norm
  EXPECT_EQ(reason("decoder.final_norm.weight", 64, 64), "norm");
  EXPECT_EQ(reason("mtp.layers.0.enorm.weight", 64, 64), "norm");
  EXPECT_EQ(reason("model.layers.0.input_layernorm.weight", 64, 0), "not a linear weight");
  EXPECT_EQ(reason("decoder.layers.1.mlp.router.weight", 4, 64), "router");
  EXPECT_EQ(reason("model.layers.0.mlp.gate.weight", 4, 64), "router");
  EXPECT_EQ(reason("decoder.layers.0.self_attention.core_attention.indexer.linear_wk.weight", 16, 64), "DSA indexer");
  EXPECT_EQ(reason("transformer.h.0.mhc.score.weight", 4, 64), "mHC branch scorer");
  EXPECT_EQ(reason("lm_head.weight", 32, 64), "excluded");  // exclude wins over include
  EXPECT_EQ(reason("embedding.cppmega_ngram_hash.unified_table.weight", 130, 4), "K = 4 is not a multiple of 16");
  opt.include = {"*unified_table"};
  in.exclude = opt.include;
  EXPECT_EQ(reason("embedding.word_embeddings.weight", 32, 64), "embedding");  // not matched: kept

  // The whole tiny NAM56R with include "*": every norm and router stays, and it loads.
  slm_test::temp_dir out("all");
  opt.include = {"*"};
  opt.exclude.clear();
  auto reports = slm::convert_checkpoint(slm_test::test_data("nam56r/tiny"), out.path(), opt, slm_test::the_pools().p2);
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  std::size_t norms = 0;
  for (const auto& r : *reports) {
    const bool norm = r.name.find("norm") != std::string::npos, router = r.name.find("router") != std::string::npos;
    if (norm || router || r.name.find("indexer") != std::string::npos) {
      norms += norm;
      EXPECT_EQ(r.action.rfind("kept", 0), 0u) << r.name << ": " << r.action;
    }
  }
  EXPECT_GT(norms, 10u);
  auto after = actions_of(*reports);
  EXPECT_EQ(after["embedding.word_embeddings.weight"], "nvfp4");
  EXPECT_EQ(after["embedding.cppmega_ngram_hash.out_proj.weight"], "nvfp4");
  EXPECT_EQ(after["embedding.cppmega_ngram_hash.unified_table.weight"], "kept BF16: K = 4 is not a multiple of 16");
  auto m = slm::nam56r_model::load(out.path());
  ASSERT_TRUE(m.ok()) << m.error().message();
}

// The Hugging Face path (model.embed_tokens gathered by models/hf/model.hpp, lm_head a linear):
// the llama golden checkpoint with --quantize-embeddings' patterns.
TEST(ConvertInclude, LlamaEmbedTokensAndLmHead) {
  const fs::path src = slm_test::test_data("golden/hf/llama");
  slm_test::temp_dir plain("plain"), incl("incl"), deq("deq");
  auto& pool = slm_test::the_pools().p2;
  ASSERT_TRUE(slm::convert_checkpoint(src, plain.path(), {}, pool).ok());
  slm::convert_options opt;
  opt.include = slm::embedding_include_patterns();
  auto reports = slm::convert_checkpoint(src, incl.path(), opt, pool);
  ASSERT_TRUE(reports.ok()) << reports.error().message();
  auto a = actions_of(*reports);
  EXPECT_EQ(a["model.embed_tokens.weight"], "nvfp4");
  EXPECT_EQ(a["lm_head.weight"], "nvfp4");
  EXPECT_EQ(a["model.norm.weight"].rfind("kept", 0), 0u);
  write_dequantized_copy(incl.path(), deq.path(), {"model.embed_tokens"});
  if (HasFatalFailure()) return;
  auto run = [&](const fs::path& dir) {
    auto m = slm::model::load(dir);
    EXPECT_TRUE(m.ok()) << m.error().message();
    std::vector<float> out;
    if (!m.ok()) return out;
    std::vector<std::int32_t> ids;
    for (std::int32_t i = 0; i < 16; ++i) ids.push_back((i * 53 + 7) % static_cast<std::int32_t>(m->vocab()));
    slm::compute_context cx{pool};
    out.resize(ids.size() * m->vocab());
    auto s = m->new_session();
    EXPECT_TRUE(s.forward(ids, ids.size(), out.data(), cx).ok());
    return out;
  };
  const auto ref = run(plain.path()), got = run(incl.path()), same = run(deq.path());
  ASSERT_EQ(got.size(), ref.size());
  ASSERT_EQ(same.size(), ref.size());
  const double err = slm_test::rel_err(got.data(), ref.data(), ref.size());
  std::printf("[ figures  ] llama golden NVFP4 + embed_tokens/lm_head vs NVFP4: %.3e x max|logit|\n", err);
  EXPECT_GT(err, 0.0);
  EXPECT_LT(err, 0.5);  // measured 0.167 (random weights, hidden 128); a broken layout gives O(1)
  EXPECT_EQ(slm_test::max_abs_diff(same.data(), got.data(), got.size()), 0.0);  // rows = dequantize() rows exactly
}

// The output goes to a fresh directory beside `out`, renamed into place when complete
// (issue 18). A non-empty `out` is refused without convert_options::replace and left as it
// was; the old code wrote into it, so files of an older conversion survived beside the new
// ones.
TEST(Convert, NonEmptyOutIsRefusedAndKept) {
  slm_test::temp_dir in("in"), parent("parent");
  source_model src(in.path());
  auto pool = make_pool();
  const auto out = parent / "out";
  std::filesystem::create_directories(out);
  ASSERT_TRUE(slm_test::write_file(out / "notes.txt", "mine"));
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(in.path(), out, {}, pool), errc::invalid_argument,
                         {"out", "exists and is not empty", "--force"}));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(out), std::filesystem::directory_iterator()), 1);
  EXPECT_EQ(std::filesystem::file_size(out / "notes.txt"), 4u);
  EXPECT_TRUE(slm_test::temporaries_in(parent.path()).empty());
  // A missing `out` (and its missing parents) and an empty one are fine.
  ASSERT_TRUE(slm::convert_checkpoint(in.path(), parent / "new" / "deep", {}, pool).ok());
  EXPECT_TRUE(std::filesystem::exists(parent / "new" / "deep" / "hf_quant_config.json"));
  std::filesystem::create_directories(parent / "empty");
  ASSERT_TRUE(slm::convert_checkpoint(in.path(), (parent / "empty").string() + "/", {}, pool).ok());
  EXPECT_TRUE(std::filesystem::exists(parent / "empty" / "model.safetensors"));
  EXPECT_TRUE(slm_test::temporaries_in(parent.path()).empty());
  EXPECT_TRUE(slm_test::temporaries_in(parent / "empty").empty());
}

// replace: a stale model.safetensors.index.json and shard of an older model (which the
// loader would prefer to the new model.safetensors) are gone, and the new model loads.
TEST(Convert, ReplaceLeavesNothingOfTheOldOutput) {
  slm_test::temp_dir in("in"), parent("parent");
  source_model src(in.path());
  auto pool = make_pool();
  const auto out = parent / "out";
  std::filesystem::create_directories(out);
  ASSERT_TRUE(slm_test::write_file(out / "model.safetensors.index.json",
                                   R"({"metadata": {}, "weight_map": {"model.embed_tokens.weight": "old-00001-of-00001.safetensors"}})"));
  ASSERT_TRUE(slm_test::write_file(out / "old-00001-of-00001.safetensors", "stale"));
  slm::convert_options opt;
  opt.replace = true;
  ASSERT_TRUE(slm::convert_checkpoint(in.path(), out, opt, pool).ok());
  EXPECT_FALSE(std::filesystem::exists(out / "model.safetensors.index.json"));
  EXPECT_FALSE(std::filesystem::exists(out / "old-00001-of-00001.safetensors"));
  auto ck = slm::checkpoint::open(out);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  auto q = slm::load_linear_weight(*ck, "model.layers.0.self_attn.q_proj");
  ASSERT_TRUE(q.ok()) << q.error().message();
  EXPECT_EQ(q->format, slm::weight_format::nvfp4);
  EXPECT_TRUE(slm_test::temporaries_in(parent.path()).empty());
  EXPECT_TRUE(slm_test::temporaries_in(out).empty());
  // An `out` that contains `in` is refused: replacing it would delete the input.
  const auto holder = parent / "holder";
  std::filesystem::create_directories(holder / "in");
  source_model inner(holder / "in");
  EXPECT_TRUE(fails_with(slm::convert_checkpoint(holder / "in", holder, opt, pool), errc::invalid_argument, {"lies inside --out"}));
  EXPECT_TRUE(std::filesystem::exists(holder / "in" / "model.safetensors"));
}

// A conversion that fails halfway (cancelled after the first of five shards) leaves the
// previous conversion exactly as it was: the old code had renamed the first new shard
// over the old one by then, mixing two conversions.
TEST(Convert, FailedReplaceKeepsThePreviousConversion) {
  slm_test::temp_dir parent("parent");
  auto pool = make_pool();
  const auto src = slm_test::test_data("oracle/sharded_llama");
  const auto out = parent / "out";
  slm::convert_options fp8;
  fp8.format = slm::weight_format::fp8_e4m3;
  ASSERT_TRUE(slm::convert_checkpoint(src, out, fp8, pool).ok());
  auto snapshot = [&] {
    std::map<std::string, std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(out)) {
      std::ifstream f(e.path(), std::ios::binary);
      files[e.path().filename().string()] = std::string(std::istreambuf_iterator<char>(f), {});
    }
    return files;
  };
  const auto before = snapshot();
  slm::cancellation cancel;
  slm::convert_options opt;
  opt.replace = true;
  opt.cancel = &cancel;
  std::size_t shard_tensors = 0;
  {
    auto ck = slm::checkpoint::open(src);
    ASSERT_TRUE(ck.ok());
    shard_tensors = ck->shards().front().tensors().size();
  }
  auto r = slm::convert_checkpoint(src, out, opt, pool, [&](const slm::tensor_report&, std::size_t done, std::size_t) {
    if (done == shard_tensors + 1) cancel.cancel();  // in the second shard
  });
  EXPECT_TRUE(fails_with(r, errc::cancelled, {}));
  EXPECT_TRUE(snapshot() == before);
  EXPECT_TRUE(slm_test::temporaries_in(parent.path()).empty());
}
