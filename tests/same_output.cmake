# ctest driver: the README's main job three ways must print the same continuation:
# `slm run` (CLI), examples/complete.cpp built header-only, and the same file built
# against slm::compiled. The examples also print a fill-in-the-middle line after it,
# which must agree between the two builds.
#   cmake -DCLI=... -DHEADER_ONLY=... -DCOMPILED=... -DMODEL=... -P same_output.cmake
foreach(v CLI HEADER_ONLY COMPILED MODEL)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "same_output.cmake needs -D${v}=...")
  endif()
endforeach()
set(prompt "#include <vector>\n\n// Returns the sum of the elements of v.\ntemplate <typename T>\nT sum(const std::vector<T>& v) {")
execute_process(COMMAND ${CLI} run --model ${MODEL} --prompt "${prompt}" -n 100 --seed 3
                RESULT_VARIABLE rc OUTPUT_VARIABLE cli_out ERROR_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "slm run failed (${rc})")
endif()
foreach(mode HEADER_ONLY COMPILED)
  execute_process(COMMAND ${${mode}} ${MODEL} RESULT_VARIABLE rc OUTPUT_VARIABLE out_${mode} ERROR_QUIET)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${${mode}} failed (${rc})")
  endif()
  string(FIND "${out_${mode}}" "\nfim: [" at)
  if(at LESS 0)
    message(FATAL_ERROR "${${mode}} printed no fim line:\n${out_${mode}}")
  endif()
  string(SUBSTRING "${out_${mode}}" 0 ${at} text)
  if(NOT "${text}\n" STREQUAL "${cli_out}")
    message(FATAL_ERROR "${${mode}} and slm run differ:\n--- slm run\n${cli_out}\n--- ${mode}\n${text}")
  endif()
endforeach()
if(NOT out_HEADER_ONLY STREQUAL out_COMPILED)
  message(FATAL_ERROR "header-only and compiled builds differ:\n${out_HEADER_ONLY}\n---\n${out_COMPILED}")
endif()
message(STATUS "same output three ways:\n${out_COMPILED}")
