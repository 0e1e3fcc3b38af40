// Fuzz target: session::load (models/hf/model.hpp) over hostile session-state blobs, into sessions
// of three golden models that cover every decoder record kind: llama (GQA), deepseek_v32
// (MLA + DSA indexer keys) and nemotron_h (Mamba-2 with rollback history, GQA, empty
// slots), and of the tiny NAM56R model (tests/data/nam56r/tiny: MLA + DSA, Mamba-3,
// M2RNN, empty MoE slots, MTP depths, the token history; models/nam56r/model.hpp).
// Each input is tried as it is and with its total size and checksum patched to match, so
// that mutations reach the layer record parsers instead of stopping at the checksum.
// Invariants (violations trap, no abort()):
//  * a rejected blob gives an error with a message, and the session is unchanged (its
//    position, and save() gives the same bytes as before);
//  * an accepted blob gives a session at the position its header states that saves to
//    exactly the bytes loaded and can run a forward call;
//  * nothing reads out of bounds or allocates beyond the blob's size (ASan, rss limit).
// The seed corpus (corpus/session_state) holds real saves of these models.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "slm/models/hf/model.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/core/parallel.hpp"

#ifndef SLM_TEST_DATA_DIR
#error "SLM_TEST_DATA_DIR must name tests/data (fuzz/CMakeLists.txt defines it)"
#endif

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

template <class Model>
struct target {
  std::optional<Model> m;
  std::optional<typename Model::session> s;
  std::vector<std::byte> baseline;
  std::size_t pos = 0;

  target(const char* dir, slm::session_options o) {
    auto l = Model::load(std::filesystem::path(SLM_TEST_DATA_DIR) / dir);
    check(l.ok());
    m.emplace(std::move(*l));
    s.emplace(m->new_session(o));
    const std::int32_t ids[3] = {1, 2, 3};
    slm::serial_executor ex;
    slm::compute_context cx{ex};
    check(s->forward(ids, 0, nullptr, cx).ok());
    auto b = s->save();
    check(b.ok());
    baseline = std::move(*b);
    pos = s->position();
  }

  void attempt(std::span<const std::byte> blob) {
    const slm::status st = s->load(blob);
    if (!st.ok()) {
      check(!st.message().empty());
      check(s->position() == pos);
      auto b = s->save();
      check(b.ok() && *b == baseline);
      return;
    }
    check(s->position() == slm::state_format::detail::load_u64le(blob.data() + 40));
    // save(load(x)) is x, except that recurrent states beyond this session's history
    // capacity are dropped; either way it loads back and saves to itself.
    auto again = s->save();
    check(again.ok() && again->size() <= blob.size());
    if (again->size() == blob.size()) check(std::memcmp(again->data(), blob.data(), blob.size()) == 0);
    check(s->load(*again).ok());
    auto third = s->save();
    check(third.ok() && *third == *again);
    if (s->position() < s->max_tokens()) {
      const std::int32_t id = 5;
      std::vector<float> logits(m->vocab());
      slm::serial_executor ex;
      slm::compute_context cx{ex};
      (void)s->forward(std::span<const std::int32_t>(&id, 1), 1, logits.data(), cx);  // may fail; must not crash
    }
    check(s->load(baseline).ok());  // back to the baseline
    check(s->position() == pos);
  }
};

struct fixture {
  target<slm::model> llama, dsa, hybrid;
  target<slm::nam56r_model> nam56r;
  static slm::session_options with(slm::kv_dtype kv, std::size_t rollback) {
    slm::session_options o;
    o.kv = kv;
    o.rollback_tokens = rollback;
    o.max_tokens = 64;
    return o;
  }
  fixture()
      : llama("golden/hf/llama", with(slm::kv_dtype::f32, 0)),
        dsa("golden/hf/deepseek_v32", with(slm::kv_dtype::bf16, 0)),
        hybrid("golden/hf/nemotron_h", with(slm::kv_dtype::f32, 2)),
        nam56r("nam56r/tiny", with(slm::kv_dtype::f32, 2)) {}
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fixture f;
  const std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data), size);
  std::vector<std::byte> patched(raw.begin(), raw.end());
  constexpr std::size_t least = slm::state_format::header_bytes + slm::state_format::checksum_bytes;
  if (patched.size() >= least) {
    const std::uint64_t n = patched.size();
    for (std::size_t i = 0; i < 8; ++i) patched[16 + i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    const std::uint64_t sum = slm::state_format::checksum_of(std::span<const std::byte>(patched).first(n - 8));
    for (std::size_t i = 0; i < 8; ++i) patched[n - 8 + i] = static_cast<std::byte>((sum >> (8 * i)) & 0xFF);
  }
  for (target<slm::model>* t : {&f.llama, &f.dsa, &f.hybrid}) {
    t->attempt(raw);
    t->attempt(patched);
  }
  f.nam56r.attempt(raw);
  f.nam56r.attempt(patched);
  return 0;
}
