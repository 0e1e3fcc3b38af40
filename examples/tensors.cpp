// A tour of the foundation API: open a checkpoint, look at one tensor, decode it to
// float, and write it back out as a new safetensors file.
//
//   example_tensors MODEL_DIR TENSOR_NAME OUT.safetensors
#include <cmath>
#include <cstdio>
#include <vector>

#include "slm/slm.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL_DIR TENSOR_NAME OUT.safetensors\n", argv[0]);
    return 2;
  }
  // Maps every shard and validates every header; no tensor data is read yet.
  slm::result<slm::checkpoint> ck = slm::checkpoint::open(argv[1]);
  if (!ck) {
    std::fprintf(stderr, "error: %s\n", ck.error().to_string().c_str());
    return 1;
  }
  std::printf("%s: model_type %.*s, %zu tensors\n", argv[1], static_cast<int>(ck->model_type().size()),
              ck->model_type().data(), ck->size());

  slm::result<slm::tensor_view> w = ck->tensor(argv[2]);  // a view into the mapping
  if (!w) {
    std::fprintf(stderr, "error: %s\n", w.error().to_string().c_str());
    return 1;
  }
  std::printf("%s: %.*s %s\n", argv[2], static_cast<int>(slm::safetensors_name(w->type()).size()),
              slm::safetensors_name(w->type()).data(), w->shape().to_string().c_str());

  std::vector<float> values(static_cast<std::size_t>(w->numel()));
  if (auto s = w->to_f32(values); !s) {  // any dtype, any alignment
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    return 1;
  }
  double sum_sq = 0;
  for (float v : values) sum_sq += static_cast<double>(v) * v;
  std::printf("rms %.6g over %zu values\n", std::sqrt(sum_sq / static_cast<double>(values.size() ? values.size() : 1)),
              values.size());

  slm::safetensors::writer out;
  out.set_metadata("source", argv[1]);
  const slm::tensor_view as_f32(slm::dtype::f32, w->shape(), values.data());
  if (auto s = out.add(argv[2], as_f32); !s) return std::fprintf(stderr, "error: %s\n", s.to_string().c_str()), 1;
  if (auto s = out.write(argv[3]); !s) return std::fprintf(stderr, "error: %s\n", s.to_string().c_str()), 1;
  std::printf("wrote %s\n", argv[3]);
  return 0;
}
