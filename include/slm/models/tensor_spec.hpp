// slm/models/tensor_spec.hpp - one tensor of a model family's checkpoint as its training
// code saves it: name, shape, element type, and how a random stand-in is filled. A
// family's tensor list (models/hf/tensors.hpp, models/nam56r/tensors.hpp) is a list of
// these, computed from a config.json; models/synthetic.hpp writes random checkpoints from
// it, and the tests check each list against a real checkpoint of the family.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <string>
#include <vector>

#include "slm/core/dtype.hpp"

namespace slm {

struct tensor_spec {
  // weight: uniform with variance 1/fan_in (fan_in = the last dimension), so activations
  // keep their scale through the layers; ones / zeros: norms, biases, gains; values: the
  // contents are given (integer tables, and constants a family needs at a particular
  // value, such as an SSM's time-step bias, stored in `type`).
  enum class fill : std::uint8_t { weight, ones, zeros, values };

  std::string name;
  std::vector<std::int64_t> shape;
  fill init = fill::weight;
  dtype type = dtype::bf16;  // the floating type the writer chooses for weights; I64 etc. as stored
  std::vector<std::int64_t> values;  // fill::values: every element, row-major

  std::uint64_t elements() const noexcept {
    std::uint64_t n = 1;
    for (std::int64_t d : shape) n *= static_cast<std::uint64_t>(d);
    return n;
  }
};

}  // namespace slm
