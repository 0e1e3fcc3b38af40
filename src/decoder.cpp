// src/decoder.cpp - the compiled library's decoder unit: the config-driven decoder (slm::model) and its layers.
// Defines, once, what the headers below only declare in compiled mode (slm/build_mode.hpp).
#define SLM_UNIT_DECODER 1

#include "slm/recurrent_cache.hpp"
#include "slm/attention.hpp"
#include "slm/dsa.hpp"
#include "slm/mla.hpp"
#include "slm/mlp.hpp"
#include "slm/moe.hpp"
#include "slm/mamba2.hpp"
#include "slm/model.hpp"

#include "slm/generate.hpp"

// The generator of slm::model's session (slm/generator_instances.hpp).
template class slm::generator<slm::model::session>;
