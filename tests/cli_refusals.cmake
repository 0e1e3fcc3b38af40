# ctest driver: command lines the CLI must refuse with a clear error and a failing exit
# status, where it used to go on: a misspelt option (silently ignored), integer options
# given as out-of-range floats or nan (an undefined float-to-int cast under UBSan), and
# output that cannot be written (> /dev/full: the text was lost and slm exited 0), and
# slm logits past the context.
#   cmake -DCLI=... -DMODEL=... -P cli_refusals.cmake
foreach(v CLI MODEL)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "cli_refusals.cmake needs -D${v}=...")
  endif()
endforeach()

set(failures "")
# expect(NAME RC TEXT args...): exit status RC and TEXT in stderr.
function(expect name want_rc text)
  execute_process(COMMAND ${CLI} ${ARGN} TIMEOUT 60 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(FIND "${err}" "${text}" at)
  if(NOT rc STREQUAL "${want_rc}")
    set(failures "${failures}\n${name}: exit '${rc}', expected ${want_rc}\n${err}" PARENT_SCOPE)
  elseif(at EQUAL -1)
    set(failures "${failures}\n${name}: no '${text}' in:\n${err}" PARENT_SCOPE)
  else()
    message(STATUS "${name}: ${err}")
  endif()
endfunction()

expect("misspelt option" 2 "unknown option --promt" run --model ${MODEL} --promt x)
expect("misspelt flag" 2 "unknown option --stram" run --model ${MODEL} --prompt x --stram)
expect("--top-k 1e10" 2 "--top-k needs an integer from 0" run --model ${MODEL} --prompt x --top-k 1e10)
expect("--top-k nan" 2 "--top-k needs an integer from 0" run --model ${MODEL} --prompt x --top-k nan)
expect("--repeat-last-n nan" 2 "--repeat-last-n needs an integer from -1" run --model ${MODEL} --prompt x --repeat-last-n nan)
expect("--repeat-last-n -2" 2 "--repeat-last-n needs an integer from -1" run --model ${MODEL} --prompt x --repeat-last-n -2)
# More ids than the context: refused before the [T, vocab] logits are allocated (slm logits
# sized them first, so a long --ids list could exhaust memory before the context check).
foreach(mode full incremental)
  expect("logits --mode ${mode} past the context" 1 "5 ids exceed the context of 4 tokens"
         logits --model ${MODEL} --ids 1,2,3,4,5 --ctx 4 --mode ${mode} --out ${CMAKE_CURRENT_BINARY_DIR}/never.safetensors)
endforeach()
if(EXISTS /dev/full)
  execute_process(COMMAND ${CLI} run --model ${MODEL} --prompt x -n 3 OUTPUT_FILE /dev/full TIMEOUT 60
                  RESULT_VARIABLE rc ERROR_VARIABLE err)
  if(NOT rc STREQUAL "1" OR NOT err MATCHES "cannot write the output")
    set(failures "${failures}\n> /dev/full: exit '${rc}', expected 1 and 'cannot write the output'\n${err}")
  endif()
endif()
# The options that are right still work: the same run with valid integers.
execute_process(COMMAND ${CLI} run --model ${MODEL} --prompt x -n 3 --temp 0.7 --seed 1 --top-k 40 --repeat-last-n -1
                TIMEOUT 60 RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  set(failures "${failures}\nvalid --top-k 40 --repeat-last-n -1: exit '${rc}'\n${err}")
endif()
if(failures)
  message(FATAL_ERROR "not refused as they should be:${failures}")
endif()
message(STATUS "every bad command line refused")
