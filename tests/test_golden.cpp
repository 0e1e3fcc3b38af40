// The golden vectors made by the reference implementations: every safetensors file is
// opened, every tensor read, and names, dtypes and shapes are checked against the JSON
// note beside it. tests/data/golden holds the files the project ships; SLM_GOLDEN_DIR
// (../shared/golden in the team's checkouts) holds the full set and is checked too when
// present.
//
// Also the first oracle check of the numeric formats: ModelOpt's NVFP4 `dequantized`
// tensors must equal E2M1(code) x E4M3(block scale) x global scale, decoded by slm.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "slm/io/checkpoint.hpp"
#include "slm/core/numeric.hpp"
#include "slm/io/safetensors.hpp"
#include "test_helpers.hpp"

namespace fs = std::filesystem;
namespace st = slm::safetensors;
using slm::dtype;

namespace {

std::vector<fs::path> golden_roots() {
  std::vector<fs::path> roots = {slm_test::test_data("golden")};
  const std::string shared = SLM_GOLDEN_DIR;
  if (!shared.empty() && fs::exists(fs::path(shared) / "README.md")) roots.emplace_back(shared);
  return roots;
}

std::vector<fs::path> safetensors_under(const fs::path& root) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec))
    if (it->path().extension() == ".safetensors") out.push_back(it->path());
  std::sort(out.begin(), out.end());
  return out;
}

slm::json::value read_json(const fs::path& p) {
  auto text = slm::read_text_file(p);
  EXPECT_TRUE(text.ok()) << p;
  if (!text.ok()) return {};
  auto v = slm::json::parse(*text);
  EXPECT_TRUE(v.ok()) << p << ": " << v.error().message();
  return v.ok() ? std::move(*v) : slm::json::value{};
}

std::optional<dtype> dtype_from_torch(std::string_view s) {
  if (s == "float32") return dtype::f32;
  if (s == "int64") return dtype::i64;
  if (s == "bfloat16") return dtype::bf16;
  if (s == "float16") return dtype::f16;
  if (s == "uint8") return dtype::u8;
  return std::nullopt;
}

std::vector<std::int64_t> shape_of(const slm::json::value& arr) {
  std::vector<std::int64_t> s;
  for (const auto& d : arr.items()) s.push_back(d.as_int64().value_or(-1));
  return s;
}
std::vector<std::int64_t> shape_of(const slm::shape& sh) { return {sh.dims().begin(), sh.dims().end()}; }

// Reads every element of every tensor (so a bad offset would be caught by ASan).
void read_all(const st::file& f) {
  for (const auto& t : f.tensors()) {
    std::vector<float> v(static_cast<std::size_t>(t.shape.numel()));
    EXPECT_TRUE(f.view(t).to_f32(v).ok()) << f.name() << ": " << t.name;
  }
}

// Notes with a "tensors" map of {shape, dtype?} (mamba3/ and nam56r/).
void check_against_tensor_map(const st::file& f, const slm::json::value& note) {
  const slm::json::value& tensors = note["tensors"];
  ASSERT_TRUE(tensors.is_object()) << f.name();
  const auto default_dtype = dtype_from_torch(note["dtype"].is_string() ? note["dtype"].as_string() : "float32");
  // A repository copy may leave out tensors no test reads (debug intermediates, to keep
  // tests/data small); its note then names each one in "dropped_tensors".
  std::set<std::string> listed, dropped;
  if (note.find("dropped_tensors"))
    for (const auto& d : note["dropped_tensors"].items()) dropped.insert(std::string(d.as_string()));
  for (const auto& m : tensors.members()) {
    listed.insert(m.key);
    const st::tensor_info* t = f.find(m.key);
    if (!t && dropped.count(m.key)) continue;
    ASSERT_NE(t, nullptr) << f.name() << ": note lists '" << m.key << "' but the file lacks it";
    EXPECT_EQ(shape_of(t->shape), shape_of(m.val["shape"])) << f.name() << ": " << m.key;
    const auto want = m.val["dtype"].is_string() ? dtype_from_torch(m.val["dtype"].as_string()) : default_dtype;
    ASSERT_TRUE(want.has_value()) << m.key;
    EXPECT_EQ(t->type, *want) << f.name() << ": " << m.key;
  }
  for (const auto& t : f.tensors()) EXPECT_TRUE(listed.count(t.name)) << f.name() << ": '" << t.name << "' not in note";
}

// hf/<arch>/: golden.safetensors against golden.json + config.json; model.safetensors
// holds bf16 weights whose element count is the oracle's parameter count plus buffers.
void check_hf(const st::file& f, const fs::path& dir) {
  const auto note = read_json(dir / "golden.json");
  const auto config = read_json(dir / "config.json");
  const std::int64_t T = note["T"].as_int64().value_or(-1);
  const std::int64_t P = note["prefill"].as_int64().value_or(-1);
  const std::int64_t G = note["greedy"].as_int64().value_or(-1);
  const std::int64_t V = config["vocab_size"].as_int64().value_or(-1);
  if (fs::path(f.name()).filename() == "golden.safetensors") {
    auto expect = [&](const char* name, dtype t, std::vector<std::int64_t> shape) {
      const st::tensor_info* info = f.find(name);
      ASSERT_NE(info, nullptr) << f.name() << ": " << name;
      EXPECT_EQ(info->type, t) << name;
      EXPECT_EQ(shape_of(info->shape), shape) << f.name() << ": " << name;
    };
    expect("input_ids", dtype::i64, {T});
    expect("logits_full", dtype::f32, {T, V});
    expect("greedy_tokens", dtype::i64, {G});
    expect("greedy_tokens_cached", dtype::i64, {G});
    expect("prefill_len", dtype::i64, {1});
    // The README describes T-P+1 rows; the files hold T (rows before P-1 are the
    // prefill's own logits). Accept either, but nothing else.
    const st::tensor_info* inc = f.find("logits_incremental");
    ASSERT_NE(inc, nullptr);
    EXPECT_TRUE(shape_of(inc->shape) == (std::vector<std::int64_t>{T, V}) ||
                shape_of(inc->shape) == (std::vector<std::int64_t>{T - P + 1, V}));
    float p = 0;
    ASSERT_TRUE(f.tensor("prefill_len")->to_f32(std::span(&p, 1)).ok());
    EXPECT_EQ(p, static_cast<float>(P));
    EXPECT_EQ(f.tensors().size(), 6u);
  } else {
    std::int64_t elements = 0, buffers = 0;
    for (const auto& t : f.tensors()) {
      EXPECT_EQ(t.type, dtype::bf16) << t.name;
      elements += t.shape.numel();
      // DeepSeek-style routers keep e_score_correction_bias as a buffer, not a parameter.
      if (t.name.find("e_score_correction_bias") != std::string::npos) buffers += t.shape.numel();
    }
    EXPECT_EQ(elements - buffers, note["n_params"].as_int64().value_or(-1)) << f.name();
  }
}

// nvfp4/: the per-case layout the note describes.
void check_nvfp4(const st::file& f, const slm::json::value& note) {
  std::size_t expected = 0;
  for (const auto& c : note["cases"].members()) {
    const std::int64_t N = c.val["shape"][0].as_int64().value_or(-1), K = c.val["shape"][1].as_int64().value_or(-1);
    const std::map<std::string, std::pair<dtype, std::vector<std::int64_t>>> layout = {
        {"weight_fp32", {dtype::f32, {N, K}}},      {"weight", {dtype::u8, {N, K / 2}}},
        {"weight_scale", {dtype::f8_e4m3, {N, K / 16}}}, {"weight_scale_2", {dtype::f32, {}}},
        {"dequantized", {dtype::f32, {N, K}}},      {"x", {dtype::f32, {K}}},
        {"y", {dtype::f32, {N}}}};
    for (const auto& [suffix, want] : layout) {
      const st::tensor_info* t = f.find(c.key + "." + suffix);
      ASSERT_NE(t, nullptr) << c.key << "." << suffix;
      EXPECT_EQ(t->type, want.first) << c.key << "." << suffix;
      EXPECT_EQ(shape_of(t->shape), want.second) << c.key << "." << suffix;
      ++expected;
    }
    float g = 0;
    ASSERT_TRUE(f.tensor(c.key + ".weight_scale_2")->to_f32(std::span(&g, 1)).ok());
    EXPECT_EQ(g, static_cast<float>(c.val["gscale"].as_double())) << c.key;
  }
  EXPECT_EQ(f.tensors().size(), expected);
}

}  // namespace

TEST(Golden, EveryFileMatchesItsNote) {
  std::size_t files = 0;
  for (const fs::path& root : golden_roots()) {
    for (const fs::path& p : safetensors_under(root)) {
      SCOPED_TRACE(p.string());
      auto f = st::file::open(p);
      ASSERT_TRUE(f.ok()) << f.error().message();
      read_all(*f);
      const fs::path dir = p.parent_path();
      if (fs::exists(dir / "golden.json")) {
        check_hf(*f, dir);
      } else if (fs::exists(fs::path(p).replace_extension(".json"))) {
        const auto note = read_json(fs::path(p).replace_extension(".json"));
        if (note.find("cases")) check_nvfp4(*f, note);
        else check_against_tensor_map(*f, note);
      } else {
        ADD_FAILURE() << "no JSON note for " << p;
      }
      ++files;
    }
  }
  EXPECT_GE(files, 3u);
  if (golden_roots().size() < 2) std::printf("note: SLM_GOLDEN_DIR not present; checked tests/data only\n");
  std::printf("checked %zu golden safetensors files\n", files);
}

TEST(Golden, SharedSetIsComplete) {
  const auto roots = golden_roots();
  if (roots.size() < 2) GTEST_SKIP() << "the full golden set (../shared/golden) is not beside this checkout";
  // 9 architectures x 2 files + 8 mamba3 cases + 17 nam56r cases + 1 nvfp4 file.
  EXPECT_EQ(safetensors_under(roots[1]).size(), 9u * 2 + 8 + 17 + 1);
}

// ModelOpt's dequantization, recomputed from the stored codes with slm's decoders.
TEST(Golden, Nvfp4DequantizedFromE2M1AndE4M3) {
  auto f = st::file::open(slm_test::test_data("golden/nvfp4/nvfp4_shared.safetensors"));
  ASSERT_TRUE(f.ok()) << f.error().message();
  std::size_t checked = 0, nan_scales = 0;
  for (const char* c : {"m0", "m1", "m2", "ties"}) {
    const std::string name = c;
    auto w = f->tensor(name + ".weight");
    auto s = f->tensor(name + ".weight_scale");
    auto deq = f->tensor(name + ".dequantized");
    ASSERT_TRUE(w.ok() && s.ok() && deq.ok());
    const std::int64_t N = deq->dim(0), K = deq->dim(1);
    std::vector<float> want(static_cast<std::size_t>(N * K));
    ASSERT_TRUE(deq->to_f32(want).ok());
    float g = 0;
    ASSERT_TRUE(f->tensor(name + ".weight_scale_2")->to_f32(std::span(&g, 1)).ok());
    const auto* codes = reinterpret_cast<const std::uint8_t*>(w->data());
    const auto* scales = reinterpret_cast<const std::uint8_t*>(s->data());
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t k = 0; k < K; ++k) {
        const std::uint8_t byte = codes[n * K / 2 + k / 2];
        const float e2m1 = slm::e2m1_to_f32(k % 2 == 0 ? (byte & 0x0F) : (byte >> 4));
        const float scale = slm::e4m3_to_f32(scales[n * K / 16 + k / 16]);
        // The block's decoded scale times the global scale, then times the element:
        // the order ModelOpt's dequantize uses (checked bit for bit here).
        const float got = e2m1 * (scale * g);
        const float ref = want[static_cast<std::size_t>(n * K + k)];
        if (std::isnan(scale)) {
          ++nan_scales;
          EXPECT_TRUE(std::isnan(ref) || e2m1 == 0.0f);
          continue;
        }
        ASSERT_EQ(std::bit_cast<std::uint32_t>(got == 0.0f ? 0.0f : got),
                  std::bit_cast<std::uint32_t>(ref == 0.0f ? 0.0f : ref))
            << name << " [" << n << ", " << k << "]: code " << int(k % 2 == 0 ? (byte & 0x0F) : (byte >> 4))
            << " scale " << scale << " gscale " << g << " got " << got << " want " << ref;
        ++checked;
      }
    }
  }
  std::printf("checked %zu dequantized values bit for bit (%zu under NaN scales)\n", checked, nan_scales);
  EXPECT_EQ(checked, 64u * 256 + 96 * 512 + 7 * 1024 + 4 * 32);  // every value of the four cases
}
