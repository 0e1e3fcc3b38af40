// A host that knows its specialists writes them down as types: the attention kind with
// its RoPE pairing, the feed-forward kind with its router, the norm policy and the
// weight format are all template arguments of slm::decoder, resolved at compile time.
// load() checks the checkpoint against the composition and says which layer does not
// fit, so a wrong model directory is an error value, never a silently different model.
//
//   example_compose llama MODEL_DIR       a Llama/Qwen/Mistral-family dense specialist
//   example_compose deepseek MODEL_DIR    a DeepSeek-V3-style MLA + MoE specialist
//
// Prints the greedy continuation (8 ids) of the ids 1..10.
#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "slm/slm.hpp"

// Dense specialist: GQA with half-split RoPE, SwiGLU MLP, weighted RMSNorm, bf16 weights.
using dense_specialist = slm::decoder<slm::basic_gqa_attention<slm::rope_half_split>, slm::feed_forward,
                                      slm::rms_norm_weighted, slm::format::bf16>;

// MoE specialist: MLA with interleaved RoPE; the first layers dense, the rest MoE with
// DeepSeek's sigmoid, group-limited router (a per-layer choice between two FFN types).
using moe_specialist =
    slm::decoder<slm::basic_mla_attention<slm::rope_interleaved>,
                 slm::ffn_variant<slm::feed_forward, slm::basic_moe_ffn<slm::sigmoid_grouped_router>>>;

template <class Model>
int generate(const char* dir) {
  slm::result<Model> m = Model::load(dir);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().to_string().c_str());
    return 1;
  }
  auto pool = slm::thread_pool::create(2);
  if (!pool) return 1;
  slm::compute_context cx{*pool};
  auto session = m->new_session();  // one per thread; the model is shared and immutable
  std::vector<std::int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<float> logits(m->vocab());
  std::span<const std::int32_t> next = ids;
  std::printf("%s (%s, %zu layers):", dir, m->config().model_type.c_str(), m->config().n_layers);
  for (int i = 0; i < 8; ++i) {
    if (auto s = session.forward(next, 1, logits.data(), cx); !s) {
      std::fprintf(stderr, "\nerror: %s\n", s.to_string().c_str());
      return 1;
    }
    ids.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    next = std::span(&ids.back(), 1);
    std::printf(" %d", ids.back());
  }
  std::printf("\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s llama|deepseek MODEL_DIR\n", argv[0]);
    return 2;
  }
  const std::string_view kind = argv[1];
  if (kind == "llama") return generate<dense_specialist>(argv[2]);
  if (kind == "deepseek") return generate<moe_specialist>(argv[2]);
  std::fprintf(stderr, "unknown composition '%s'\n", argv[1]);
  return 2;
}
