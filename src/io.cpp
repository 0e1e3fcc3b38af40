// src/io.cpp - the compiled library's io unit: JSON, safetensors, mapped files, checkpoints and configs.
// Defines, once, what the headers below only declare in compiled mode (slm/build_mode.hpp).
#define SLM_UNIT_IO 1

#include "slm/json.hpp"
#include "slm/atomic_file.hpp"
#include "slm/mapped_file.hpp"
#include "slm/safetensors.hpp"
#include "slm/checkpoint.hpp"
#include "slm/model_config.hpp"
#include "slm/quant_config.hpp"
#include "slm/session_file.hpp"
#include "slm/tensor.hpp"
#include "slm/parallel.hpp"
#include "slm/rope.hpp"
