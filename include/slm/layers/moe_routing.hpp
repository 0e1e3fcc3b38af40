// slm/layers/moe_routing.hpp - the routing methods of a mixture-of-experts layer, as a
// config names them (the layer's policies are in layers/moe.hpp; models/hf/config.hpp
// reads which one a checkpoint uses).
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>

namespace slm {

enum class router_kind : std::uint8_t {
  softmax_topk,     // softmax over all experts, then top-k (Qwen-MoE, Mixtral)
  sigmoid_grouped,  // sigmoid scores, + correction bias for selection, group-limited top-k (DeepSeek-V3)
};

}  // namespace slm
