// src/io.cpp - the compiled library's io unit: JSON, safetensors, mapped files, checkpoints and configs.
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_IO 1

#include "slm/io/json.hpp"
#include "slm/io/atomic_file.hpp"
#include "slm/io/mapped_file.hpp"
#include "slm/io/safetensors.hpp"
#include "slm/io/checkpoint.hpp"
#include "slm/io/checkpoint_weights.hpp"
#include "slm/io/documents.hpp"
#include "slm/io/shaped_tensor.hpp"
#include "slm/io/config_reader.hpp"
#include "slm/models/hf/config.hpp"
#include "slm/formats/quant_config.hpp"
#include "slm/io/session_file.hpp"
#include "slm/core/tensor.hpp"
#include "slm/core/parallel.hpp"
