// src/kernels.cpp - the compiled library's kernels unit: the matrix kernels for every format and ISA, dequantizers, quantizers, converters and probes.
// Defines, once, what the headers below only declare in compiled mode (slm/build_mode.hpp).
#define SLM_UNIT_KERNELS 1

#include "slm/matmul.hpp"
#include "slm/matmul_w4a8.hpp"
#include "slm/matmul_bf16.hpp"
#include "slm/matmul_neon.hpp"
#include "slm/dequantize.hpp"
#include "slm/quantize.hpp"
#include "slm/convert.hpp"
#include "slm/formats.hpp"
#include "slm/linear.hpp"
#include "slm/probes.hpp"
#include "slm/kernel_bench.hpp"
