// synthetic_checkpoint - a Hugging Face checkpoint with random bf16 weights at a real
// model's dimensions, for figures that need a model of real size without a download
// (bench/README.md: "The quantizer"). Today one shape, Llama-3.2-1B's:
//
//   build/bin/synthetic_checkpoint OUT_DIR [--layers N]     (default N = 16, the model's)
//
// hidden 2048, intermediate 8192, 32 heads and 8 KV heads of 64, vocab 128256, tied
// embeddings: 1.24 B parameters, 2.47 GB at 16 layers. Weights are N(0, 0.02) and norms
// 1 + N(0, 0.02), from a fixed seed, so two runs with the same standard library write the
// same bytes (std::normal_distribution's algorithm is the library's own). The file is
// streamed through slm's safetensors writer (one tensor in memory at a time) and appears
// only when complete.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "slm/core/numeric.hpp"
#include "slm/io/atomic_file.hpp"
#include "slm/io/json.hpp"
#include "slm/io/safetensors.hpp"

namespace {

int fail(const slm::status& s) {
  std::fprintf(stderr, "synthetic_checkpoint: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: synthetic_checkpoint OUT_DIR [--layers N]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  std::size_t layers = 16;
  for (int i = 2; i + 1 < argc; i += 2)
    if (std::string_view(argv[i]) == "--layers") layers = std::strtoul(argv[i + 1], nullptr, 10);
  if (layers == 0 || layers > 64) {
    std::fprintf(stderr, "synthetic_checkpoint: --layers must be 1..64\n");
    return 2;
  }
  constexpr std::size_t d = 2048, ff = 8192, heads = 32, kv_heads = 8, hd = 64, vocab = 128256;

  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return fail(slm::make_error(slm::errc::io_error, "cannot create ", out.string(), ": ", ec.message()));
  auto config = slm::json::parse(slm::cat(
      R"({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": )", d,
      R"(, "intermediate_size": )", ff, R"(, "num_hidden_layers": )", layers, R"(, "num_attention_heads": )", heads,
      R"(, "num_key_value_heads": )", kv_heads, R"(, "head_dim": )", hd, R"(, "vocab_size": )", vocab,
      R"(, "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": true,)",
      R"( "max_position_embeddings": 131072, "hidden_act": "silu", "torch_dtype": "bfloat16"})"));
  if (!config.ok()) return fail(config.error());
  const std::string text = slm::json::dump(*config);
  if (auto s = slm::write_file_atomically(out / "config.json", std::as_bytes(std::span(text.data(), text.size())));
      !s.ok())
    return fail(s);

  struct item {
    std::string name;
    std::size_t rows, cols;  // cols == 0: a norm's vector of `rows`
  };
  std::vector<item> items{{"model.embed_tokens.weight", vocab, d}, {"model.norm.weight", d, 0}};
  for (std::size_t i = 0; i < layers; ++i) {
    const std::string p = slm::cat("model.layers.", i, ".");
    items.push_back({p + "input_layernorm.weight", d, 0});
    items.push_back({p + "post_attention_layernorm.weight", d, 0});
    items.push_back({p + "self_attn.q_proj.weight", heads * hd, d});
    items.push_back({p + "self_attn.k_proj.weight", kv_heads * hd, d});
    items.push_back({p + "self_attn.v_proj.weight", kv_heads * hd, d});
    items.push_back({p + "self_attn.o_proj.weight", d, heads * hd});
    items.push_back({p + "mlp.gate_proj.weight", ff, d});
    items.push_back({p + "mlp.up_proj.weight", ff, d});
    items.push_back({p + "mlp.down_proj.weight", d, ff});
  }
  slm::safetensors::writer w;
  for (const item& t : items) {
    const slm::shape s = t.cols ? slm::shape{static_cast<std::int64_t>(t.rows), static_cast<std::int64_t>(t.cols)}
                                : slm::shape{static_cast<std::int64_t>(t.rows)};
    if (auto st = w.plan(t.name, slm::dtype::bf16, s); !st.ok()) return fail(st);
  }
  auto stream = w.begin_stream(out / "model.safetensors");
  if (!stream.ok()) return fail(stream.error());
  // The writer takes the tensors in its file order; each is generated when its turn comes,
  // from a generator seeded by its name, so the bytes do not depend on that order.
  std::vector<std::uint16_t> buf;
  while (!stream->done()) {
    const std::string name(stream->next_name());
    const item* t = nullptr;
    for (const item& x : items)
      if (x.name == name) t = &x;
    if (!t) return fail(slm::make_error(slm::errc::not_found, "the writer asks for an unknown tensor ", name));
    std::seed_seq seed(name.begin(), name.end());
    std::mt19937_64 g(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    buf.resize(t->cols ? t->rows * t->cols : t->rows);
    for (std::uint16_t& v : buf) v = slm::f32_to_bf16(t->cols ? nd(g) : 1.0f + nd(g));
    if (auto s = stream->append(name, std::as_bytes(std::span(buf))); !s.ok()) return fail(s);
  }
  if (auto s = stream->finish(); !s.ok()) return fail(s);
  std::printf("wrote %s: %zu layers at Llama-3.2-1B's dimensions, random bf16\n", out.string().c_str(), layers);
  return 0;
}
