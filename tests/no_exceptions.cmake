# ctest driver: configure, build and run the unit tests with -fno-exceptions -fno-rtti,
# and with SLM_USE_OPENMP=ON so the OpenMP executor is built and tested as well
# (GoogleTest itself is built from source in that mode; see tests/CMakeLists.txt).
foreach(v SOURCE_DIR BUILD_DIR GENERATOR CXX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "no_exceptions.cmake needs -D${v}=...")
  endif()
endforeach()
function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${err}")
  endif()
endfunction()
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX}
    -DCMAKE_BUILD_TYPE=Release -DSLM_NO_EXCEPTIONS=ON -DSLM_BUILD_EXAMPLES=ON -DSLM_BUILD_BENCH=OFF
    -DSLM_INSTALL=OFF -DSLM_USE_OPENMP=ON -DSLM_GOLDEN_DIR=${GOLDEN_DIR}
    # The outer build checks the headers; slm::compiled is built here without exceptions,
    # which compiles every heavy body that way.
    -DSLM_HEADER_CHECK_MODES=
    # The tests whose code paths differ most without exceptions: errors as values from the
    # parsers and loaders, allocation failure, sessions and their state, the thread pools
    # (OpenMP here), every model path, the ensemble's config and registry, and the
    # command-line program (built with the examples).
    -DSLM_TEST_SET=status,json,thread_pool,safetensors,checkpoint,quant_config,quantize,models,model_config,session_state,nam56r,nanochat,tokenizer,generate,ensemble_registry)
# As many jobs as the machine has cores: this build is most of the test command's time.
cmake_host_system_information(RESULT _cores QUERY NUMBER_OF_LOGICAL_CORES)
run(${CMAKE_COMMAND} --build ${BUILD_DIR} --parallel ${_cores})
run(${CMAKE_CTEST_COMMAND} --test-dir ${BUILD_DIR} --output-on-failure -j ${_cores} -L "unit|cli|fuzz")
