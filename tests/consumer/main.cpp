// A host program: writes a safetensors file in memory and reads it back through slm.
#include <cstdio>
#include <vector>

#include <slm/io/safetensors.hpp>
#include <slm/version.hpp>

int main() {
  const std::vector<float> w = {1.0f, -2.5f, 0.125f, 3.0f, 0.0f, 7.75f};
  slm::safetensors::writer out;
  if (!out.add("w", slm::tensor_view(slm::dtype::f32, slm::shape{2, 3}, w.data()))) return 1;
  auto bytes = out.serialize();
  if (!bytes) return 1;
  auto f = slm::safetensors::file::from_memory(*bytes);
  if (!f) return std::fprintf(stderr, "%s\n", f.error().to_string().c_str()), 1;
  auto t = f->tensor("w");
  std::vector<float> back(6);
  if (!t || !t->to_f32(back)) return 1;
  if (back != w) return 1;
  std::printf("consumer OK: slm %s, %s %s\n", slm::version_string, "w", t->shape().to_string().c_str());
  return 0;
}
