// src/models.cpp - the compiled library's models unit: any model family behind one type
// (any_model), slm::load and the generation defaults of a model directory, the logits of a
// sequence (sequence_logits), a model described without reading its weights (inspect_model),
// random checkpoints at real models' dimensions (synthetic).
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_MODELS 1

#include "slm/models/any_model.hpp"
#include "slm/models/load.hpp"
#include "slm/models/sequence_logits.hpp"
#include "slm/models/inspect.hpp"
#include "slm/models/synthetic.hpp"
