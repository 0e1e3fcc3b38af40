# ctest driver: the README's route for a library that vendors slm and exports its own
# targets (tests/consumer/vendor), then a program that finds that library installed.
#   cmake -DSLM_SOURCE_DIR=... -DWORK_DIR=... -DGENERATOR=... -DCXX=... -P vendor.cmake
# Small: two one-line translation units that include only slm/version.hpp.
foreach(v SLM_SOURCE_DIR WORK_DIR GENERATOR CXX)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "vendor.cmake needs -D${v}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
endfunction()

# The README's lines for this route (the cmake block after "A library of yours that
# vendors slm"), comments aside, stand in vendor/CMakeLists.txt as written.
file(READ ${SLM_SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "A library of yours that vendors slm" at)
if(at LESS 0)
  message(FATAL_ERROR "README.md no longer describes the vendoring library's route")
endif()
string(SUBSTRING "${readme}" ${at} -1 readme)
string(REGEX MATCH "```cmake\n([^`]*)```" block "${readme}")
string(REGEX REPLACE "#[^\n]*\n" "" block "${CMAKE_MATCH_1}")
file(READ ${CMAKE_CURRENT_LIST_DIR}/vendor/CMakeLists.txt vendor_lists)
string(FIND "${vendor_lists}" "${block}" at)
if(block STREQUAL "" OR at LESS 0)
  message(FATAL_ERROR "vendor/CMakeLists.txt does not have the README's lines:\n${block}")
endif()

# The vendoring project as a user has it: its sources, and slm at third_party/slm.
set(src ${WORK_DIR}/my_lib)
file(COPY ${CMAKE_CURRENT_LIST_DIR}/vendor/ DESTINATION ${src} PATTERN app EXCLUDE)
file(MAKE_DIRECTORY ${src}/third_party)
file(CREATE_LINK ${SLM_SOURCE_DIR} ${src}/third_party/slm SYMBOLIC)

set(common -G ${GENERATOR} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
set(build ${WORK_DIR}/build)
set(prefix ${WORK_DIR}/prefix)
# No slm option passed: the vendoring library's export works with slm's defaults.
run(${CMAKE_COMMAND} -S ${src} -B ${build} ${common})
run(${CMAKE_COMMAND} --build ${build})
run(${CMAKE_COMMAND} --install ${build} --prefix ${prefix})

# The vendor's install carries slm's headers and package (my_libConfig.cmake finds slm
# there), and nothing of slm that the vendor did not build: no slm command, no libslm.a.
foreach(f include/my_lib.hpp include/slm/slm.hpp include/slm/version.hpp share/cmake/my_lib/my_libTargets.cmake
          share/cmake/slm/slmConfig.cmake share/cmake/slm/slmTargets.cmake share/pkgconfig/slm.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the vendoring library's install lacks ${f}")
  endif()
endforeach()
file(GLOB_RECURSE stray RELATIVE ${prefix} ${prefix}/bin/* ${prefix}/lib*/libslm* ${prefix}/share/cmake/slm/slmCompiled*
     ${prefix}/share/pkgconfig/slm-compiled.pc)
if(stray)
  message(FATAL_ERROR "the vendoring library's install has slm's tools or compiled library: ${stray}")
endif()

# A program using the installed library (and through it slm), nothing else on the path.
run(${CMAKE_COMMAND} -S ${CMAKE_CURRENT_LIST_DIR}/vendor/app -B ${WORK_DIR}/app ${common} -DCMAKE_PREFIX_PATH=${prefix})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/app)
run(${WORK_DIR}/app/my_app)

# SLM_INSTALL=OFF still means it: no install rules for slm, so the same export is refused
# (the vendor then links slm::slm PRIVATE or through $<BUILD_INTERFACE:...>).
execute_process(COMMAND ${CMAKE_COMMAND} -S ${src} -B ${build} -DSLM_INSTALL=OFF
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0 OR NOT err MATCHES "requires target \"slm\" that is not in any export set")
  message(FATAL_ERROR "with SLM_INSTALL=OFF slm still has install rules (rc ${rc}):\n${out}\n${err}")
endif()
message(STATUS "vendoring library: exported and installed with slm; SLM_INSTALL=OFF leaves slm out")
