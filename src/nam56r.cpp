// src/nam56r.cpp - the compiled library's nam56r unit: the NAM56R specialist and the nanochat lineage.
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_NAM56R 1

#include "slm/layers/mamba3.hpp"
#include "slm/layers/m2rnn.hpp"
#include "slm/layers/ngram_embedding.hpp"
#include "slm/layers/structure_embedding.hpp"
#include "slm/layers/engram.hpp"
#include "slm/layers/mhc.hpp"
#include "slm/models/nam56r/bind.hpp"
#include "slm/models/nam56r/pattern.hpp"
#include "slm/models/nam56r/model.hpp"
#include "slm/models/nam56r/tensors.hpp"
#include "slm/models/nanochat/bind.hpp"
#include "slm/models/nanochat/block.hpp"
#include "slm/models/nanochat/mamba.hpp"
#include "slm/models/nanochat/model.hpp"
#include "slm/generate/speculative.hpp"
#include "slm/models/specialist.hpp"

#include "slm/generate/generator.hpp"

// The config-driven NAM56R model, every part, with its session (a member class, so
// instantiated with it; models/nam56r/model.hpp declares it extern).
template class slm::basic_nam56r_model<slm::nam56r::mixer, slm::nam56r::ffn>;

// The generators of these models' sessions (slm/generate/generator_instances.hpp).
template class slm::generator<slm::nam56r_model::session>;
template class slm::generator<slm::nanochat_model::session>;
