// src/ensemble.cpp - the compiled library's ensemble unit: registry, routers, strategies and converters.
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_ENSEMBLE 1

#include "slm/ensemble/config.hpp"
#include "slm/ensemble/member.hpp"
#include "slm/ensemble/registry.hpp"
#include "slm/ensemble/router.hpp"
#include "slm/ensemble/router_rules.hpp"
#include "slm/ensemble/router_classifier.hpp"
#include "slm/ensemble/router_model.hpp"
#include "slm/ensemble/answer.hpp"
#include "slm/ensemble/mixing.hpp"
#include "slm/ensemble/cascade.hpp"
#include "slm/ensemble/vote.hpp"
#include "slm/ensemble/refine.hpp"
#include "slm/ensemble/cross_speculative.hpp"
#include "slm/ensemble/vocab_align.hpp"
#include "slm/ensemble/hidden_map.hpp"
#include "slm/ensemble/ensemble.hpp"
#include "slm/ensemble/heldout.hpp"
