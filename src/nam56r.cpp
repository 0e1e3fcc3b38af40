// src/nam56r.cpp - the compiled library's nam56r unit: the NAM56R specialist and the nanochat lineage.
// Defines, once, what the headers below only declare in compiled mode (slm/build_mode.hpp).
#define SLM_UNIT_NAM56R 1

#include "slm/mamba3.hpp"
#include "slm/m2rnn.hpp"
#include "slm/ngram_embedding.hpp"
#include "slm/structure_embedding.hpp"
#include "slm/engram.hpp"
#include "slm/mhc.hpp"
#include "slm/nam56r_pattern.hpp"
#include "slm/nam56r.hpp"
#include "slm/nanochat_mamba.hpp"
#include "slm/nanochat.hpp"
#include "slm/speculative.hpp"
#include "slm/specialist.hpp"

#include "slm/generate.hpp"

// The generators of these models' sessions (slm/generator_instances.hpp).
template class slm::generator<slm::nam56r_model::session>;
template class slm::generator<slm::nanochat_model::session>;
