# The folders of include/slm/ are layers (README.md, "Layout"): a header includes headers
# of its own folder and of the folders before it in LAYERS, never of a later one. So a
# layer cannot come to depend on checkpoint naming, a model family or the ensemble
# unnoticed. The exceptions are listed, each with its reason; one that no longer occurs
# fails the test too, so the list only shrinks.
#   cmake -DINCLUDE_DIR=.../include -P header_layers.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT DEFINED INCLUDE_DIR)
  message(FATAL_ERROR "header_layers.cmake needs -DINCLUDE_DIR=...")
endif()
get_filename_component(INCLUDE_DIR "${INCLUDE_DIR}" ABSOLUTE)
set(LAYERS core io text formats kernels layers generate models ensemble)
set(EXCEPTIONS
  # The format policies name the fused kernels (a policy is a format and its kernels);
  # the kernel table of issue 19 takes them into kernels/.
  "formats/policies.hpp -> kernels/matmul.hpp")

file(GLOB_RECURSE headers RELATIVE ${INCLUDE_DIR}/slm ${INCLUDE_DIR}/slm/*.hpp)
set(found "")
set(failures "")
foreach(h ${headers})
  string(REGEX MATCH "^[^/]+" folder "${h}")
  list(FIND LAYERS "${folder}" from)
  if(from EQUAL -1)
    continue()  # slm.hpp, version.hpp: the top includes everything
  endif()
  file(STRINGS ${INCLUDE_DIR}/slm/${h} lines REGEX "^#include \"slm/")
  foreach(line ${lines})
    string(REGEX REPLACE "^#include \"slm/([^\"]+)\".*" "\\1" target "${line}")
    string(REGEX MATCH "^[^/]+" to_folder "${target}")
    list(FIND LAYERS "${to_folder}" to)
    if(to GREATER from)
      set(edge "${h} -> ${target}")
      list(FIND EXCEPTIONS "${edge}" listed)
      if(listed EQUAL -1)
        string(APPEND failures "\n  ${edge} (${folder}/ may not include ${to_folder}/)")
      else()
        list(APPEND found "${edge}")
      endif()
    endif()
  endforeach()
endforeach()
foreach(e ${EXCEPTIONS})
  list(FIND found "${e}" seen)
  if(seen EQUAL -1)
    string(APPEND failures "\n  listed exception '${e}' no longer occurs: remove it from tests/header_layers.cmake")
  endif()
endforeach()
list(LENGTH headers n)
if(failures)
  message(FATAL_ERROR "include/slm layering (${LAYERS}):${failures}")
endif()
list(LENGTH EXCEPTIONS n_exc)
message(STATUS "${n} headers follow the layers ${LAYERS} (${n_exc} listed exceptions)")
