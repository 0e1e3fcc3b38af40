// src/decoder.cpp - the compiled library's decoder unit: the config-driven decoder (slm::model) and its layers.
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_DECODER 1

#include "slm/layers/recurrent_cache.hpp"
#include "slm/layers/attention.hpp"
#include "slm/layers/dsa.hpp"
#include "slm/layers/mla.hpp"
#include "slm/layers/mlp.hpp"
#include "slm/layers/moe.hpp"
#include "slm/layers/mamba2.hpp"
#include "slm/models/bind.hpp"
#include "slm/models/hf/bind.hpp"
#include "slm/models/hf/model.hpp"
#include "slm/models/hf/tensors.hpp"

#include "slm/generate/generator.hpp"

// slm::model, the config-driven decoder (slm/models/hf/model.hpp), once for every file.
template class slm::decoder<slm::any_attention, slm::any_ffn>;

// The generator of slm::model's session (slm/generate/generator_instances.hpp).
template class slm::generator<slm::model::session>;
