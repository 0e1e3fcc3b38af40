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
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(run_output "${out}" PARENT_SCOPE)
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} -G ${GENERATOR}
    -DCMAKE_TOOLCHAIN_FILE=${SOURCE_DIR}/cmake/aarch64-linux-gnu.cmake -DSLM_QEMU_AARCH64=${QEMU}
    -DCMAKE_BUILD_TYPE=Release -DSLM_GTEST_FROM_SOURCE=ON -DSLM_BUILD_EXAMPLES=OFF -DSLM_BUILD_BENCH=OFF
    -DSLM_INSTALL=OFF -DSLM_GOLDEN_DIR=${GOLDEN_DIR})
set(targets "")
foreach(t ${TESTS})
  list(APPEND targets test_${t})
endforeach()
run(${CMAKE_COMMAND} --build ${BUILD_DIR} --parallel 2 --target ${targets})
foreach(t ${TESTS})
  set(defaults neon)
  if(t STREQUAL "matmul")
    list(APPEND defaults scalar)
  endif()
  foreach(want ${defaults})
    run(${CMAKE_COMMAND} -E env SLM_ISA=${want} ${QEMU} ${BUILD_DIR}/tests/test_${t})
    if(t STREQUAL "matmul" AND NOT run_output MATCHES "isas: scalar neon \\(default ${want}\\)")
      message(FATAL_ERROR "test_matmul under qemu-aarch64 did not report 'isas: scalar neon (default ${want})'")
    endif()
  endforeach()
endforeach()
