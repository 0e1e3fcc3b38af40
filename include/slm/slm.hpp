// slm/slm.hpp - everything in one include. Each header is also self-contained.
#pragma once

#include "slm/version.hpp"
#include "slm/status.hpp"
#include "slm/dtype.hpp"
#include "slm/numeric.hpp"
#include "slm/tensor.hpp"
#include "slm/parallel.hpp"
#include "slm/json.hpp"
#include "slm/mapped_file.hpp"
#include "slm/safetensors.hpp"
#include "slm/checkpoint.hpp"
