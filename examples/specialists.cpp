// Two specialists a host names as types and runs in-process:
//
//   example_specialists nam56r MODEL_DIR      a small NAM56R-like C++ specialist: the
//       AEMEAEMEAEMR hybrid of MLA / DSA attention, MoE, Mamba-3 and M2RNN, with the
//       n-gram hash embedding and MTP heads; greedy decoding with MTP self-speculation
//   example_specialists nemotron_h MODEL_DIR  a Nemotron-H-like hybrid: Mamba-2 mixers,
//       attention without RoPE, relu^2 MLPs and sigmoid-routed MoE, one filled slot per
//       layer, bf16 weights
//
// load() checks the checkpoint against the type and says which layer does not fit, so a
// wrong directory is an error value. Prints the greedy continuation (8 ids) of 1..10.
#include <algorithm>
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "slm/slm.hpp"
#include "slm/models/specialist.hpp"
#include "slm/generate/speculative.hpp"

// The C++ specialist of the ensemble, in any weight format (pass slm::format::nvfp4 to
// insist on the shipped NVFP4 weights).
using cpp_specialist =
    slm::specialist<slm::format::any, slm::pattern<"AEMEAEMEAEMR">, slm::part::mla, slm::part::dsa, slm::part::moe,
                    slm::part::mamba3, slm::part::m2rnn, slm::part::ngram_hash, slm::part::structure,
                    slm::part::mtp>;

// A Nemotron-H-like hybrid: per layer a Mamba-2 mixer, attention (no RoPE), or nothing in
// the sequence slot, and a relu^2 MLP, a MoE with sigmoid routing (Nemotron-H's latent
// MoE layers), or nothing in the channel slot; bf16 projections.
using hybrid_specialist =
    slm::decoder<slm::attention_variant<slm::basic_gqa_attention<slm::rope_by_config>, slm::mamba2_mixer, slm::no_mixer>,
                 slm::ffn_variant<slm::feed_forward, slm::basic_moe_ffn<slm::sigmoid_grouped_router>, slm::no_ffn>,
                 slm::rms_norm_weighted, slm::format::bf16>;

namespace {

void print_ids(const char* dir, std::span<const std::int32_t> ids) {
  std::printf("%s:", dir);
  for (std::int32_t id : ids) std::printf(" %d", id);
  std::printf("\n");
}

int run_cpp(const char* dir) {
  auto m = cpp_specialist::load(dir);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().to_string().c_str());
    return 1;
  }
  auto pool = slm::thread_pool::create(2);
  if (!pool) return 1;
  slm::compute_context cx{*pool};
  slm::session_options o;
  o.rollback_tokens = m->config().mtp_num_layers;  // rejected drafts are rolled back
  auto session = m->new_session(o);
  const std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  std::vector<std::int32_t> out;
  slm::speculative_stats st;
  if (auto s = slm::generate_greedy_mtp(session, prompt, 8, m->config().mtp_num_layers, m->vocab(), out, st, cx); !s) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 1;
  }
  print_ids(dir, out);
  std::printf("MTP drafts accepted: %zu of %zu\n", st.accepted, st.drafted);
  return 0;
}

int run_hybrid(const char* dir) {
  auto m = hybrid_specialist::load(dir);
  if (!m) {
    std::fprintf(stderr, "error: %s\n", m.error().to_string().c_str());
    return 1;
  }
  auto pool = slm::thread_pool::create(2);
  if (!pool) return 1;
  slm::compute_context cx{*pool};
  auto session = m->new_session();
  std::vector<std::int32_t> ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, out;
  std::vector<float> logits(m->vocab());
  std::span<const std::int32_t> next = ids;
  for (int i = 0; i < 8; ++i) {
    if (auto s = session.forward(next, 1, logits.data(), cx); !s) {
      std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
      return 1;
    }
    out.push_back(static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    next = std::span(&out.back(), 1);
  }
  print_ids(dir, out);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s nam56r|nemotron_h MODEL_DIR\n", argv[0]);
    return 2;
  }
  const std::string_view kind = argv[1];
  if (kind == "nam56r") return run_cpp(argv[2]);
  if (kind == "nemotron_h") return run_hybrid(argv[2]);
  std::fprintf(stderr, "unknown specialist '%s'\n", argv[1]);
  return 2;
}
