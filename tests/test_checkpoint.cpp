// Checkpoint directories: single file, sharded through an index, several files without
// an index, optional JSON files, and the ways a directory can be broken.
#include "slm/io/checkpoint.hpp"
#include "slm/io/checkpoint_weights.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <type_traits>
#include <utility>
#include <vector>

#include "test_helpers.hpp"

using slm::dtype;
using slm::errc;
using slm_test::fails_with;
using slm_test::write_file;

namespace {

// Writes a shard holding `names` (each an F32 [2] tensor with distinct values).
void write_shard(const std::filesystem::path& p, std::initializer_list<const char*> names, float base) {
  static std::vector<std::vector<float>> keep;  // the writer borrows data until write()
  slm::safetensors::writer w;
  for (const char* n : names) {
    keep.push_back({base, base + 1});
    base += 2;
    ASSERT_TRUE(w.add(n, dtype::f32, slm::shape{2}, std::as_bytes(std::span(keep.back()))).ok());
  }
  ASSERT_TRUE(w.write(p).ok());
}

constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 4})";

}  // namespace

TEST(Checkpoint, OpensGoldenLlama) {
  auto ck = slm::checkpoint::open(slm_test::test_data("golden/hf/llama"));
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->model_type(), "llama");
  EXPECT_EQ(ck->config()["num_hidden_layers"].as_int64(), 3);
  ASSERT_NE(ck->generation_config(), nullptr);
  EXPECT_EQ(ck->hf_quant_config(), nullptr);
  EXPECT_EQ(ck->quantization_config(), nullptr);
  EXPECT_FALSE(ck->has_tokenizer());
  EXPECT_EQ(ck->shards().size(), 1u);  // golden.safetensors beside it is not part of the model
  EXPECT_EQ(ck->size(), 30u);
  auto emb = ck->tensor("model.embed_tokens.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ(emb->type(), dtype::bf16);
  EXPECT_EQ(emb->shape(), (slm::shape{320, 128}));
  EXPECT_EQ(ck->data_bytes(), 500608u * 2);
  EXPECT_TRUE(fails_with(ck->tensor("lm_head.bias"), errc::not_found, {"no tensor named 'lm_head.bias'"}));
  for (std::size_t i = 1; i < ck->tensors().size(); ++i) EXPECT_LT(ck->tensors()[i - 1].name, ck->tensors()[i].name);
}

TEST(Checkpoint, ShardedThroughIndex) {
  slm_test::temp_dir d("sharded");
  ASSERT_TRUE(write_file(d / "config.json", kConfig));
  write_shard(d / "model-00001-of-00002.safetensors", {"a", "b"}, 0);
  write_shard(d / "model-00002-of-00002.safetensors", {"c", "unlisted"}, 10);
  ASSERT_TRUE(write_file(d / "model.safetensors.index.json", R"({"metadata": {"total_size": 24},
    "weight_map": {"a": "model-00001-of-00002.safetensors", "c": "model-00002-of-00002.safetensors",
                   "b": "model-00001-of-00002.safetensors"}})"));
  auto ck = slm::checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->shards().size(), 2u);
  ASSERT_EQ(ck->size(), 3u);  // "unlisted" is not in the weight_map
  EXPECT_EQ(ck->tensors()[0].name, "a");
  EXPECT_EQ(ck->tensors()[2].name, "c");
  std::vector<float> v(2);
  ASSERT_TRUE(ck->tensor("c")->to_f32(v).ok());
  EXPECT_EQ(v, (std::vector<float>{10, 11}));
  ASSERT_TRUE(ck->tensor("b")->to_f32(v).ok());
  EXPECT_EQ(v, (std::vector<float>{2, 3}));
  EXPECT_EQ(ck->find("unlisted"), nullptr);
}

TEST(Checkpoint, IndexErrors) {
  slm_test::temp_dir d("index");
  ASSERT_TRUE(write_file(d / "config.json", kConfig));
  write_shard(d / "s1.safetensors", {"a"}, 0);
  const auto index = d / "model.safetensors.index.json";

  ASSERT_TRUE(write_file(index, R"({"weight_map": {"a": "s2.safetensors"}})"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::not_found, {"s2.safetensors", "cannot open"}));

  ASSERT_TRUE(write_file(index, R"({"weight_map": {"b": "s1.safetensors"}})"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error,
                         {"tensor 'b' is mapped to s1.safetensors, which does not contain it"}));

  for (const char* evil : {"../s1.safetensors", "/etc/passwd", "sub/s1.safetensors", "..", "C:s1.safetensors"}) {
    ASSERT_TRUE(write_file(index, slm::cat(R"({"weight_map": {"a": ")", evil, R"("}})")));
    EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error,
                           {"is not a file name in the checkpoint directory"})) << evil;
  }
  ASSERT_TRUE(write_file(index, R"({"weight_map": ["a"]})"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error, {"no \"weight_map\" object"}));
  ASSERT_TRUE(write_file(index, R"({"weight_map": {"a": 1}})"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error, {"weight_map[\"a\"] is not a string"}));
  ASSERT_TRUE(write_file(index, R"({"weight_map": {"a": "s1.safetensors",})"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::parse_error,
                         {"model.safetensors.index.json", "line 1"}));
}

// A config.json under the size limit whose tree would need 20x its size (a 62 MB one
// took 3.7 GB and threw std::bad_alloc out of open()) is refused by the parse's memory
// budget, as an error naming the file.
TEST(Checkpoint, HostileConfigRefusedByMemoryBudget) {
  slm_test::temp_dir d("hostile_config");
  std::string config = R"({"model_type": "llama", "hidden_size": [)";
  while (config.size() < (1u << 20)) config += "0,";
  config += "0]}";
  ASSERT_TRUE(write_file(d / "config.json", config));
  write_shard(d / "model.safetensors", {"a"}, 0);
  slm::checkpoint_options opt;
  opt.max_json_memory = 4u << 20;
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path(), opt), errc::out_of_range,
                         {"config.json", "document needs too much memory", "max_memory 4194304"}));
  // By default the budget's share per input byte refuses it (1 MB of text, 33 MiB).
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::out_of_range,
                         {"config.json", "document needs too much memory", "32 per input byte"}));
}

TEST(Checkpoint, SeveralFilesWithoutIndex) {
  slm_test::temp_dir d("multi");
  ASSERT_TRUE(write_file(d / "config.json", kConfig));
  write_shard(d / "part-b.safetensors", {"x"}, 0);
  write_shard(d / "part-a.safetensors", {"y"}, 5);
  auto ck = slm::checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->size(), 2u);
  write_shard(d / "part-c.safetensors", {"x"}, 9);
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error,
                         {"tensor 'x' is in both", "part-b.safetensors", "part-c.safetensors"}));
}

TEST(Checkpoint, MissingPieces) {
  slm_test::temp_dir d("missing");
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d / "nope"), errc::not_found, {"nope: no such directory"}));
  ASSERT_TRUE(write_file(d / "file", "x"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d / "file"), errc::invalid_argument, {"not a directory"}));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::not_found, {"config.json", "cannot open"}));
  ASSERT_TRUE(write_file(d / "config.json", "{\"model_type\": \"llama\",\n  \"x\": [1,,2]}"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::parse_error, {"config.json", "line 2"}));
  ASSERT_TRUE(write_file(d / "config.json", "[1]"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error, {"config.json", "not a JSON object"}));
  ASSERT_TRUE(write_file(d / "config.json", kConfig));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::not_found, {"no weights"}));
  ASSERT_TRUE(write_file(d / "pytorch_model.bin", "PK"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::unsupported, {"pytorch_model.bin", "safetensors"}));
  ASSERT_TRUE(write_file(d / "model.safetensors", std::string_view("\x02\0\0\0\0\0\0\0{}", 10)));
  ASSERT_TRUE(slm::checkpoint::open(d.path()).ok());  // an empty model is still a valid file
  ASSERT_TRUE(write_file(d / "model.safetensors", std::string_view("\x09\0\0\0\0\0\0\0{}", 10)));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::format_error, {"model.safetensors", "runs past the end"}));
}

TEST(Checkpoint, OptionalJsonFiles) {
  slm_test::temp_dir d("optional");
  ASSERT_TRUE(write_file(d / "config.json",
                         R"({"model_type": "qwen3", "quantization_config": {"quant_method": "compressed-tensors"}})"));
  write_shard(d / "model.safetensors", {"w"}, 0);
  ASSERT_TRUE(write_file(d / "hf_quant_config.json", R"({"quantization": {"quant_algo": "NVFP4", "group_size": 16}})"));
  ASSERT_TRUE(write_file(d / "generation_config.json", R"({"eos_token_id": [1, 2]})"));
  ASSERT_TRUE(write_file(d / "tokenizer.json", R"({"version": "1.0", "model": {"type": "BPE"}})"));
  auto ck = slm::checkpoint::open(d.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  ASSERT_NE(ck->hf_quant_config(), nullptr);
  EXPECT_EQ((*ck->hf_quant_config())["quantization"]["quant_algo"].as_string(), "NVFP4");
  ASSERT_NE(ck->quantization_config(), nullptr);
  EXPECT_EQ((*ck->quantization_config())["quant_method"].as_string(), "compressed-tensors");
  EXPECT_EQ((*ck->generation_config())["eos_token_id"].size(), 2u);
  EXPECT_TRUE(ck->has_tokenizer());
  auto tok = ck->load_tokenizer_json();
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)["model"]["type"].as_string(), "BPE");

  ASSERT_TRUE(write_file(d / "hf_quant_config.json", "{"));
  EXPECT_TRUE(fails_with(slm::checkpoint::open(d.path()), errc::parse_error, {"hf_quant_config.json"}));
}

// The checkpoint may outlive the scope it was opened in and be moved; views stay valid.
TEST(Checkpoint, MovedCheckpointKeepsViews) {
  auto ck = slm::checkpoint::open(slm_test::test_data("golden/hf/llama"));
  ASSERT_TRUE(ck.ok());
  auto before = ck->tensor("model.norm.weight");
  ASSERT_TRUE(before.ok());
  slm::checkpoint moved = std::move(*ck);
  auto after = moved.tensor("model.norm.weight");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(before->data(), after->data());
  std::vector<float> v(128);
  ASSERT_TRUE(after->to_f32(v).ok());
}

// ---- files that are not regular, and weights that change on disk ----------------------

// A FIFO wherever a file is read is refused at once, never waited on: open() of a FIFO
// for reading blocks until a writer comes, so each load runs on a thread with a limit
// (returns_within releases a blocked reader, and the thread is joined either way).
TEST(Checkpoint, FifosAreRefusedWithoutBlocking) {
  slm_test::temp_dir d("fifo");
  const auto fifo = d / "fifo";
  ASSERT_TRUE(slm_test::make_fifo(fifo));
  using namespace std::chrono_literals;
  auto refused = [&](const auto& load, const std::vector<std::filesystem::path>& fifos) {
    slm::status st;
    const bool in_time = slm_test::returns_within(10s, fifos, [&] {
      auto r = load();
      if constexpr (std::is_same_v<std::decay_t<decltype(r)>, slm::status>) st = r;
      else st = r.ok() ? slm::status{} : r.error();
    });
    EXPECT_TRUE(in_time) << "blocked on a FIFO";
    return fails_with(st, errc::io_error, {"is not a regular file (a FIFO)"});
  };
  EXPECT_TRUE(refused([&] { return slm::read_text_file(fifo); }, {fifo}));
  EXPECT_TRUE(refused([&] { return slm::read_file_prefix(fifo, 16); }, {fifo}));
  for (slm::load_mode m : {slm::load_mode::read, slm::load_mode::map}) {
    EXPECT_TRUE(refused([&] { return slm::mapped_file::open(fifo, m); }, {fifo}));
    EXPECT_TRUE(refused([&] { return slm::safetensors::file::open(fifo, {}, m); }, {fifo}));
  }
  // Each file a checkpoint reads, a FIFO in turn (the others regular).
  for (const char* name : {"config.json", "generation_config.json", "hf_quant_config.json", "model.safetensors",
                           "model.safetensors.index.json"}) {
    slm_test::temp_dir c(name);
    if (std::string_view(name) != "config.json") {
      ASSERT_TRUE(write_file(c / "config.json", kConfig));
    }
    if (std::string_view(name) != "model.safetensors") write_shard(c / "model.safetensors", {"w"}, 0);
    ASSERT_TRUE(slm_test::make_fifo(c / name));
    EXPECT_TRUE(refused([&] { return slm::checkpoint::open(c.path()); }, {c / name})) << name;
  }
  slm_test::temp_dir t("tokenizer");
  ASSERT_TRUE(write_file(t / "config.json", kConfig));
  write_shard(t / "model.safetensors", {"w"}, 0);
  ASSERT_TRUE(slm_test::make_fifo(t / "tokenizer.json"));
  auto ck = slm::checkpoint::open(t.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_FALSE(ck->has_tokenizer());
  EXPECT_TRUE(refused([&] { return ck->load_tokenizer_json(); }, {t / "tokenizer.json"}));
}

namespace {

using slm_test::llama_copy;

std::vector<std::byte> tensor_bytes(const slm::checkpoint& ck, std::string_view name) {
  auto t = ck.tensor(name);
  EXPECT_TRUE(t.ok());
  if (!t.ok()) return {};
  return {t->bytes().begin(), t->bytes().end()};
}

}  // namespace

// The default reads the weights into private memory: truncating the file, then writing
// other bytes into it, changes nothing the checkpoint holds (mapped, the first would kill
// the process with SIGBUS on the next touch, the second change the weights).
TEST(Checkpoint, ReadWeightsAreImmuneToTheFile) {
  llama_copy m;
  std::uint64_t last_done = 0, last_total = 0;
  std::size_t calls = 0;
  slm::checkpoint_options o;
  o.progress = [&](std::uint64_t done, std::uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done, last_total = total;
    ++calls;
  };
  auto ck = slm::checkpoint::open(m.dir.path(), o);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->weights_mode(), slm::load_mode::read);
  EXPECT_EQ(ck->shards()[0].mode(), slm::load_mode::read);
  const std::uint64_t file_size = std::filesystem::file_size(m.weights());
  EXPECT_GE(calls, 1u);
  EXPECT_EQ(last_done, file_size);
  EXPECT_EQ(last_total, file_size);
  const auto before = tensor_bytes(*ck, "model.embed_tokens.weight");
  std::filesystem::resize_file(m.weights(), 0);
  EXPECT_EQ(tensor_bytes(*ck, "model.embed_tokens.weight"), before);
  ASSERT_TRUE(write_file(m.weights(), std::vector<std::byte>(static_cast<std::size_t>(file_size), std::byte{0x7f})));
  EXPECT_EQ(tensor_bytes(*ck, "model.embed_tokens.weight"), before);
  EXPECT_TRUE(ck->check_unchanged().ok());  // private bytes: nothing to check
}

// Mapped (a host's explicit choice), a change to the file since it was mapped is reported
// by check_unchanged(), which model sessions call when they are created.
TEST(Checkpoint, MappedWeightsDetectAChangedFile) {
  llama_copy m;
  slm::checkpoint_options o;
  o.weights = slm::load_mode::map;
  auto ck = slm::checkpoint::open(m.dir.path(), o);
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  EXPECT_EQ(ck->shards()[0].mode(), slm::load_mode::map);
  EXPECT_TRUE(ck->check_unchanged().ok());
  const auto id = ck->shards()[0].bytes().size();
  EXPECT_EQ(id, std::filesystem::file_size(m.weights()));

  // Grown in place (appending never faults the mapped range, so the test may do it).
  {
    std::FILE* f = std::fopen(m.weights().string().c_str(), "ab");
    ASSERT_NE(f, nullptr);
    std::fputc(0, f);
    std::fclose(f);
  }
  EXPECT_TRUE(fails_with(ck->check_unchanged(), errc::io_error, {"model.safetensors", "changed in place since it was mapped"}));
  std::filesystem::resize_file(m.weights(), id);  // the old size again, but a new modification time
  std::filesystem::last_write_time(m.weights(), std::filesystem::last_write_time(m.weights()) + std::chrono::seconds(2));
  EXPECT_TRUE(fails_with(ck->check_unchanged(), errc::io_error, {"changed in place", "reload the model"}));

  // Replaced by rename: the mapping keeps the old file, but the path names another.
  auto ck2 = slm::checkpoint::open(m.dir.path(), o);
  ASSERT_TRUE(ck2.ok());
  std::filesystem::copy_file(m.weights(), m.dir / "new.tmp");
  std::filesystem::rename(m.dir / "new.tmp", m.weights());
  EXPECT_TRUE(fails_with(ck2->check_unchanged(), errc::io_error, {"replaced by another file since it was mapped"}));
  std::filesystem::remove(m.weights());
  EXPECT_TRUE(fails_with(ck2->check_unchanged(), errc::io_error, {"removed since it was mapped"}));
}

// weight_totals (slm/io/checkpoint_weights.hpp): tensors, elements and bytes in all and per
// dtype, the same from a checkpoint as from its tensor list.
TEST(CheckpointWeights, TotalsPerDtype) {
  slm_test::temp_dir tmp("totals");
  static const std::vector<float> f(6, 1.0f);
  static const std::vector<std::uint16_t> h(8, 0);
  slm::safetensors::writer w;
  ASSERT_TRUE(w.add("a", dtype::f32, slm::shape{2, 3}, std::as_bytes(std::span(f))).ok());
  ASSERT_TRUE(w.add("b", dtype::bf16, slm::shape{8}, std::as_bytes(std::span(h))).ok());
  ASSERT_TRUE(w.add("c", dtype::f32, slm::shape{1}, std::as_bytes(std::span(f).first(1))).ok());
  ASSERT_TRUE(w.write(tmp / "model.safetensors").ok());
  ASSERT_TRUE(write_file(tmp / "config.json", std::string_view(kConfig)));
  auto ck = slm::checkpoint::open(tmp.path());
  ASSERT_TRUE(ck.ok()) << ck.error().message();
  const slm::weight_totals t = slm::weight_totals::of(*ck);
  EXPECT_EQ(t.all.tensors, 3u);
  EXPECT_EQ(t.all.elements, 15u);
  EXPECT_EQ(t.all.bytes, 6u * 4 + 8 * 2 + 4);
  ASSERT_EQ(t.by_dtype.size(), 2u);
  EXPECT_EQ(t.by_dtype.at("F32").tensors, 2u);
  EXPECT_EQ(t.by_dtype.at("F32").elements, 7u);
  EXPECT_EQ(t.by_dtype.at("F32").bytes, 28u);
  EXPECT_EQ(t.by_dtype.at("BF16").bytes, 16u);
  const slm::weight_totals u = slm::weight_totals::of(ck->shards()[0].tensors());
  EXPECT_EQ(u.all.bytes, t.all.bytes);
  EXPECT_EQ(u.by_dtype.at("BF16").elements, 8u);
}

// decode_weight_bytes: every tensor but the embedding table, routed experts at top-k / E
// (shared experts whole); without an MoE config every expert counts whole.
TEST(CheckpointWeights, DecodeBytesScaleRoutedExperts) {
  slm_test::temp_dir tmp("decode");
  static const std::vector<float> x(16, 0.5f);  // 64 bytes
  auto write = [&](const char* config) {
    slm::safetensors::writer w;
    for (const char* n : {"model.embed_tokens.weight", "model.layers.0.mlp.experts.0.up.weight",
                          "model.layers.0.mlp.experts.1.up.weight", "model.layers.0.mlp.shared_expert.up.weight",
                          "model.norm.weight", "lm_head.weight"})
      EXPECT_TRUE(w.add(n, dtype::f32, slm::shape{16}, std::as_bytes(std::span(x))).ok());
    EXPECT_TRUE(w.write(tmp / "model.safetensors").ok());
    EXPECT_TRUE(write_file(tmp / "config.json", std::string_view(config)));
    auto ck = slm::checkpoint::open(tmp.path());
    EXPECT_TRUE(ck.ok()) << ck.error().message();
    return ck.ok() ? slm::decode_weight_bytes(*ck) : 0;
  };
  // 2 routed experts of 64 bytes at top-1 of 4 experts: 2 * 64 / 4; shared, norm, head: 3 * 64.
  EXPECT_EQ(write(R"({"model_type": "x", "num_experts": 4, "num_experts_per_tok": 1})"), 32u + 192u);
  EXPECT_EQ(write(R"({"model_type": "x", "n_routed_experts": 2, "moe_router_topk": 2})"), 128u + 192u);
  EXPECT_EQ(write(kConfig), 128u + 192u);
}

// prefetch_weights reads a mapped checkpoint's pages once, reporting progress that rises to
// (total, total); weights read into memory are already there: 0 and no report.
TEST(CheckpointWeights, PrefetchMappedWeights) {
  slm_test::temp_dir tmp("prefetch");
  write_shard(tmp / "model-00001-of-00002.safetensors", {"a", "b"}, 0);
  write_shard(tmp / "model-00002-of-00002.safetensors", {"c"}, 10);
  ASSERT_TRUE(write_file(tmp / "config.json", std::string_view(kConfig)));
  slm::checkpoint_options o;
  o.weights = slm::load_mode::map;
  auto mapped = slm::checkpoint::open(tmp.path(), o);
  ASSERT_TRUE(mapped.ok()) << mapped.error().message();
  std::uint64_t shard_bytes = 0;
  for (const auto& f : mapped->shards()) shard_bytes += f.bytes().size();
  std::vector<std::pair<std::uint64_t, std::uint64_t>> calls;
  EXPECT_EQ(slm::prefetch_weights(*mapped, [&](std::uint64_t d, std::uint64_t t) { calls.emplace_back(d, t); }), shard_bytes);
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.back(), std::make_pair(shard_bytes, shard_bytes));
  for (std::size_t i = 1; i < calls.size(); ++i) {
    EXPECT_LE(calls[i - 1].first, calls[i].first);
    EXPECT_EQ(calls[i].second, shard_bytes);
  }
  EXPECT_EQ(slm::prefetch_weights(*mapped), shard_bytes);  // no callback: still read
  auto read = slm::checkpoint::open(tmp.path());
  ASSERT_TRUE(read.ok());
  calls.clear();
  EXPECT_EQ(slm::prefetch_weights(*read, [&](std::uint64_t d, std::uint64_t t) { calls.emplace_back(d, t); }), 0u);
  EXPECT_TRUE(calls.empty());
}
