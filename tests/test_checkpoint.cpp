// Checkpoint directories: single file, sharded through an index, several files without
// an index, optional JSON files, and the ways a directory can be broken.
#include "slm/checkpoint.hpp"

#include <gtest/gtest.h>

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
