// src/kernels.cpp - the compiled library's kernels unit: the matrix kernels for every format and ISA, dequantizers, quantizers, converters and probes.
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_KERNELS 1

#include "slm/kernels/matmul.hpp"
#include "slm/formats/dequantize.hpp"
#include "slm/formats/quantize.hpp"
#include "slm/formats/convert.hpp"
#include "slm/formats/policies.hpp"
#include "slm/layers/linear.hpp"
#include "slm/kernels/probes.hpp"
#include "slm/kernels/kernel_bench.hpp"
