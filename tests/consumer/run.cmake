# ctest driver: builds and runs tests/consumer against slm three ways.
#   cmake -DSLM_SOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX=... -DINSTALL_FROM=<a built slm> -P run.cmake
foreach(v SLM_SOURCE_DIR WORK_DIR GENERATOR CXX INSTALL_FROM)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "run.cmake needs -D${v}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(common -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

function(consume mode)
  set(b ${WORK_DIR}/${mode})
  run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR} -B ${b} ${common} -DSLM_CONSUME=${mode}
      -DSLM_SOURCE_DIR=${SLM_SOURCE_DIR} -DFETCHCONTENT_SOURCE_DIR_SLM=${SLM_SOURCE_DIR} ${ARGN})
  cmake_host_system_information(RESULT cores QUERY NUMBER_OF_LOGICAL_CORES)
  run(${CMAKE_COMMAND} --build ${b} --parallel ${cores})
  run(${b}/consumer)
  if(EXISTS ${b}/consumer_compiled)
    run(${b}/consumer_compiled)
    message(STATUS "${mode}: slm::compiled consumed")
  endif()
endfunction()

# add_subdirectory with SLM_COMPILED ON (the README's vendoring route to slm::compiled),
# built Debug with the library unoptimised and without debug information (-O0 for
# CMake's default -g: a sixth less compile time for the seven library units): packaging
# is what is tested, not speed or debugging.
consume(subdirectory -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-O0 -DSLM_COMPILED_OPTIMIZE=OFF)
if(NOT EXISTS ${WORK_DIR}/subdirectory/consumer_compiled)
  message(FATAL_ERROR "add_subdirectory with SLM_COMPILED ON gave no slm::compiled")
endif()
consume(fetchcontent)

# find_package after installing into a temporary prefix, as the README's route does
# (`cmake --install build --prefix ...`): this build's own install rules, slm::compiled
# included, so both installed targets are consumed without building slm again.
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${INSTALL_FROM} --prefix ${prefix})
consume(find_package -DCMAKE_PREFIX_PATH=${prefix})
if(NOT EXISTS ${WORK_DIR}/find_package/consumer_compiled)
  message(FATAL_ERROR "the installed slm has no slm::compiled")
endif()

# pkg-config, for hosts that do not use CMake, as the README writes it (`c++ $(pkg-config
# --cflags --libs slm) ...`), from a moved prefix: the .pc files locate it from where they
# are (${pcfiledir}), so a relocated install stays right.
find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  file(RENAME ${prefix} ${prefix}-moved)
  set(ENV{PKG_CONFIG_PATH} ${prefix}-moved/share/pkgconfig)
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs slm RESULT_VARIABLE rc OUTPUT_VARIABLE flags
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config cannot find slm")
  endif()
  separate_arguments(flags UNIX_COMMAND "${flags}")
  run(${CXX} ${flags} ${CMAKE_CURRENT_LIST_DIR}/main.cpp -o ${WORK_DIR}/consumer_pc)
  run(${WORK_DIR}/consumer_pc)
  # The compiled mode without CMake: the installed libslm.a through slm-compiled.pc.
  execute_process(COMMAND ${PKG_CONFIG} --cflags --libs slm-compiled RESULT_VARIABLE rc OUTPUT_VARIABLE cflags
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "pkg-config cannot find slm-compiled")
  endif()
  separate_arguments(cflags UNIX_COMMAND "${cflags}")
  # The README's order for it, `c++ ... $(pkg-config --cflags --libs slm-compiled)`: the
  # static library after the sources that need it.
  run(${CXX} ${CMAKE_CURRENT_LIST_DIR}/main.cpp -o ${WORK_DIR}/consumer_pc_compiled ${cflags})
  run(${WORK_DIR}/consumer_pc_compiled)
endif()

# The README's install route needs no build: `cmake -S . -B build` then `cmake --install
# build --prefix P` installs the headers and a header-only package even though neither
# the CLI nor libslm.a was built (issue 18: it failed, "cannot find bin/slm"). A few
# seconds: one configure, no compilation. The README's commands exactly: no options.
set(plain ${WORK_DIR}/plain)
run(${CMAKE_COMMAND} -S ${SLM_SOURCE_DIR} -B ${plain})
run(${CMAKE_COMMAND} --install ${plain} --prefix ${plain}-prefix)
foreach(f include/slm/slm.hpp include/slm/generate/generator.hpp share/cmake/slm/slmConfig.cmake
          share/cmake/slm/slmConfigVersion.cmake share/cmake/slm/slmTargets.cmake share/pkgconfig/slm.pc)
  if(NOT EXISTS ${plain}-prefix/${f})
    message(FATAL_ERROR "the install after a plain configure lacks ${f}")
  endif()
endforeach()
# Nothing names the unbuilt library: find_package and pkg-config see a header-only slm.
foreach(f share/cmake/slm/slmCompiledTargets.cmake share/pkgconfig/slm-compiled.pc)
  if(EXISTS ${plain}-prefix/${f})
    message(FATAL_ERROR "the install after a plain configure has ${f}, naming a libslm.a never built")
  endif()
endforeach()
message(STATUS "plain configure: header-only install")
