# ctest driver: cross-compile the matrix-kernel tests for AArch64 with the toolchain in
# cmake/aarch64-linux-gnu.cmake (GoogleTest built from /usr/src/googletest by the cross
# compiler, everything linked -static) and run them under qemu-aarch64 with the NEON
# kernels as the default isa (SLM_ISA=neon), test_matmul once more with the scalar
# reference as the default (SLM_ISA=scalar). Either way the sweeps in test_matmul run
# every family the emulated CPU has (scalar and neon) against the exact result, over the
# full shape, misalignment and thread-count grid; SLM_ISA changes what isa::best means
# (the activation-precision fallbacks, every caller that does not choose), and the run
# checks that test_matmul reports the default it asked for.
# TESTS: the test_<name> files to build and run (default below). About 1 minute of
# tests under qemu plus the cross build on a 2-core machine.
foreach(v SOURCE_DIR BUILD_DIR GENERATOR QEMU GOLDEN_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "cross_aarch64.cmake needs -D${v}=...")
  endif()
endforeach()
if(NOT DEFINED TESTS)
  set(TESTS matmul matmul_bf16 matmul_w4a8 formats numeric)
endif()
string(REPLACE ";" "," test_set "${TESTS}")
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()
# Header-only (no slm::compiled, no precompiled header): the kernels are compiled in the
# test files themselves, as an AArch64 host that includes slm gets them.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} -G ${GENERATOR}
    -DCMAKE_TOOLCHAIN_FILE=${SOURCE_DIR}/cmake/aarch64-linux-gnu.cmake -DSLM_QEMU_AARCH64=${QEMU}
    -DCMAKE_BUILD_TYPE=Release -DSLM_GTEST_FROM_SOURCE=ON -DSLM_BUILD_EXAMPLES=OFF -DSLM_BUILD_BENCH=OFF
    -DSLM_INSTALL=OFF -DSLM_COMPILED=OFF -DSLM_TEST_PCH=OFF -DSLM_TEST_SET=${test_set} -DSLM_GOLDEN_DIR=${GOLDEN_DIR})
# The test files are grouped into executables by area (tests/CMakeLists.txt): the matrix
# kernels' files into test_kernels, numeric into test_core.
run(${CMAKE_COMMAND} --build ${BUILD_DIR} --parallel 2 --target test_kernels test_core)
# Every test with the NEON kernels as the default, then the matmul suite again with the
# scalar reference as the default.
foreach(want neon scalar)
  set(filter "*")
  if(want STREQUAL "scalar")
    set(filter "Matmul.*")
  endif()
  run(${CMAKE_COMMAND} -E env SLM_ISA=${want} ${QEMU} ${BUILD_DIR}/tests/test_kernels --gtest_filter=${filter})
  if(NOT run_output MATCHES "isas: scalar neon \\(default ${want}\\)")
    message(FATAL_ERROR "test_kernels under qemu-aarch64 did not report 'isas: scalar neon (default ${want})'")
  endif()
endforeach()
run(${CMAKE_COMMAND} -E env SLM_ISA=neon ${QEMU} ${BUILD_DIR}/tests/test_core)
