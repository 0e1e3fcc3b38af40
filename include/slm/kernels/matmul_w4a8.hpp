// slm/kernels/matmul_w4a8.hpp - kept for one release so that old include paths still build:
// the W4A8 path (matmul_w4a8): its kernels are in kernels/avx512_vnni.hpp,
// and its entry point is declared in kernels/matmul.hpp with the one driver.
#pragma once
#include "slm/kernels/matmul.hpp"  // IWYU pragma: export
