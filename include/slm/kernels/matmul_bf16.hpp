// slm/kernels/matmul_bf16.hpp - kept for one release so that old include paths still build:
// the bf16-activation path (matmul_bf16_activations): its kernels are in kernels/avx512_bf16.hpp,
// and its entry point is declared in kernels/matmul.hpp with the one driver.
#pragma once
#include "slm/kernels/matmul.hpp"  // IWYU pragma: export
