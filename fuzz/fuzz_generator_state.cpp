// Fuzz target: generator state files (generate/generator.hpp, generator_file) over hostile bytes,
// as generator::load reads them: generator_file::parse for the golden llama model's
// logit rows, then the session's load of the blob the file carries.
// Each input is tried as it is and with its total size and checksum patched to match, so
// that mutations reach the fields after the checksum (lengths, random state, history,
// the session blob) instead of stopping at it.
// Invariants (violations trap, no abort()):
//  * a rejected file gives an error with a message;
//  * an accepted file holds a history of 1.. ids inside the vocabulary, one row of logits,
//    a non-zero random state and a session blob whose position is the history's length,
//    and writing those parts again gives exactly the bytes parsed (one encoding per state);
//  * the session loads the blob or refuses it unchanged (the last step of
//    generator::load that can fail), and a loaded session sits at the history's length;
//  * nothing reads out of bounds or allocates beyond the input's size (ASan, rss limit).
// The seed corpus (corpus/generator_state) holds real saves of generators of that model.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "slm/generate/generator.hpp"
#include "slm/models/hf/model.hpp"
#include "slm/core/parallel.hpp"

#ifndef SLM_TEST_DATA_DIR
#error "SLM_TEST_DATA_DIR must name tests/data (fuzz/CMakeLists.txt defines it)"
#endif

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

struct fixture {
  std::optional<slm::model> m;
  std::optional<slm::model::session> s;
  std::vector<std::byte> baseline;
  fixture() {
    auto l = slm::model::load(std::filesystem::path(SLM_TEST_DATA_DIR) / "golden/hf/llama");
    check(l.ok());
    m.emplace(std::move(*l));
    slm::session_options o;
    o.max_tokens = 64;
    s.emplace(m->new_session(o));
    auto b = s->save();
    check(b.ok());
    baseline = std::move(*b);
  }

  void attempt(std::span<const std::byte> bytes) {
    const std::size_t rows = m->vocab();
    auto p = slm::generator_file::parse(bytes, rows);
    if (!p.ok()) {
      check(!p.error().message().empty());
      return;
    }
    const std::size_t n = p->history.size();
    check(n >= 1 && p->logits.size() == rows);
    for (std::int32_t id : p->history) check(id >= 0 && static_cast<std::size_t>(id) < rows);
    check((p->rng[0] | p->rng[1] | p->rng[2] | p->rng[3]) != 0);
    check(slm::state_format::blob_position(p->session) == n);
    // The same parts written again (the layout generate/generator.hpp documents, encoded here
    // independently of the writer) are the same bytes.
    std::vector<std::byte> again;
    auto put = [&](const void* src, std::size_t len) {
      const auto* b = static_cast<const std::byte*>(src);
      again.insert(again.end(), b, b + len);
    };
    auto u64 = [&](std::uint64_t x) {
      for (int i = 0; i < 8; ++i) again.push_back(static_cast<std::byte>((x >> (8 * i)) & 0xFF));
    };
    put(slm::generator_file::magic, 8);
    const std::uint32_t version_and_reserved[2] = {slm::generator_file::version, 0};
    put(version_and_reserved, 8);  // little-endian hosts only (as the fuzz build is)
    u64(bytes.size());
    u64(rows);
    u64(n);
    u64(p->session.size());
    for (std::uint64_t w : p->rng) u64(w);
    put(p->history.data(), 4 * n);
    put(p->logits.data(), 4 * rows);
    put(p->session.data(), p->session.size());
    u64(slm::state_format::checksum_of(std::span<const std::byte>(again)));
    check(again.size() == bytes.size() && std::memcmp(again.data(), bytes.data(), bytes.size()) == 0);
    // generator::load's last fallible step.
    if (s->load(p->session).ok()) {
      check(s->position() == n);
      check(s->load(baseline).ok());
    } else {
      auto b = s->save();
      check(b.ok() && *b == baseline);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static fixture f;
  const std::span<const std::byte> raw(reinterpret_cast<const std::byte*>(data), size);
  f.attempt(raw);
  // Total size (bytes 16..23) and checksum (the last 8) made to match.
  constexpr std::size_t least = slm::generator_file::header_bytes + slm::state_format::checksum_bytes;
  if (size >= least) {
    std::vector<std::byte> patched(raw.begin(), raw.end());
    const std::uint64_t n = patched.size();
    for (std::size_t i = 0; i < 8; ++i) patched[16 + i] = static_cast<std::byte>((n >> (8 * i)) & 0xFF);
    const std::uint64_t sum = slm::state_format::checksum_of(std::span<const std::byte>(patched).first(n - 8));
    for (std::size_t i = 0; i < 8; ++i) patched[n - 8 + i] = static_cast<std::byte>((sum >> (8 * i)) & 0xFF);
    f.attempt(patched);
  }
  return 0;
}
