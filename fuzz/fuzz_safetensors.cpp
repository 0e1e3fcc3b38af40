// Fuzz target: the safetensors header parser and tensor views over hostile bytes.
// Whatever parse_header accepts must be safe to read in full.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "slm/io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  slm::safetensors::limits lim;
  lim.max_header_bytes = 1 << 20;
  auto f = slm::safetensors::file::from_memory(bytes, "fuzz", lim);
  if (!f.ok()) return 0;
  std::uint64_t covered = 0;
  for (const auto& t : f->tensors()) {
    const slm::tensor_view v = f->view(t);
    covered += v.nbytes();
    // Every accepted tensor lies inside the input.
    if (v.data() < bytes.data() || v.data() + v.nbytes() > bytes.data() + bytes.size()) __builtin_trap();
    if (t.type == slm::dtype::f6_e2m3 || t.type == slm::dtype::f6_e3m2 || t.type == slm::dtype::c64) continue;
    if (v.numel() > (1 << 20)) continue;  // zero-byte-per-element cases cannot be huge here
    std::vector<float> out(static_cast<std::size_t>(v.numel()));
    if (!v.to_f32(out).ok()) __builtin_trap();
  }
  if (covered != f->header().data_size) __builtin_trap();  // the tensors tile the data section
  return 0;
}
