# ctest driver: a host compiled as C++17 gets one clear error from slm, not pages of
# template errors (slm/core/build_mode.hpp).
#   cmake -DCXX=... -DINCLUDE_DIR=... -DSOURCE=... -P cxx17_host.cmake
foreach(v CXX INCLUDE_DIR SOURCE)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "cxx17_host.cmake needs -D${v}=...")
  endif()
endforeach()
execute_process(COMMAND ${CXX} -std=c++17 -fsyntax-only -I${INCLUDE_DIR} ${SOURCE}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "a C++17 host compiled")
endif()
string(REGEX MATCHALL "error:" errors "${out}${err}")
list(LENGTH errors n)
if(NOT "${err}" MATCHES "slm needs C\\+\\+20: compile with -std=c\\+\\+20" OR NOT n EQUAL 1)
  message(FATAL_ERROR "expected one error naming C++20, got ${n}:\n${err}")
endif()
message(STATUS "one error: ${err}")
