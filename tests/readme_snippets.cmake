# ctest driver: every ```cpp block of README.md compiles as written, warning-free under
# the strict flags a careful host uses (-Wall -Wextra -Wpedantic -Wshadow -Wconversion,
# -Werror; unused names aside, since a snippet shows calls, not a program).
#   cmake -DCXX=<compiler> -DREADME=README.md -DINCLUDE_DIR=include -DWORK_DIR=<dir> -P readme_snippets.cmake
#
# Each block becomes the body of main() in a file of its own: its #include lines go above
# main, the rest inside. A block shows calls on objects the reader already has; those are
# given by an HTML comment on the line right before the block (invisible on GitHub):
#   <!-- snippet context: slm::thread_pool& pool = ...; std::vector<float> x; -->
# whose code goes first in main(). A block with no #include line continues the tour, so it
# gets <slm/slm.hpp>. Compiled with -fsyntax-only against the declarations (SLM_COMPILED_LIB):
# what is checked is the API the text shows; the bodies have their own warning checks.
cmake_minimum_required(VERSION 3.20)
foreach(v CXX README INCLUDE_DIR WORK_DIR)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "readme_snippets.cmake needs -D${v}=...")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
file(READ ${README} text)  # one string: a list would split the code at its semicolons

set(count 0)
set(failures "")
while(TRUE)
  string(FIND "${text}" "\n```cpp\n" open)
  if(open EQUAL -1)
    break()
  endif()
  math(EXPR count "${count} + 1")
  # The line before the fence: a context comment, or not.
  string(SUBSTRING "${text}" 0 ${open} before)
  set(context "")
  if(before MATCHES "\n<!-- snippet context: ([^\n]*) -->$")
    set(context "${CMAKE_MATCH_1}")
  endif()
  math(EXPR from "${open} + 8")
  string(SUBSTRING "${text}" ${from} -1 text)
  string(FIND "${text}" "\n```" close)
  if(close EQUAL -1)
    message(FATAL_ERROR "README.md: C++ block ${count} is not closed")
  endif()
  string(SUBSTRING "${text}" 0 ${close} block)
  string(SUBSTRING "${text}" ${close} -1 text)
  string(REGEX MATCHALL "#include[^\n]*" includes "${block}")
  string(REGEX REPLACE "#include[^\n]*\n?" "" body "${block}")
  list(JOIN includes "\n" includes)
  if(includes STREQUAL "")
    set(includes "#include <slm/slm.hpp>")
  endif()
  set(src ${WORK_DIR}/snippet_${count}.cpp)
  file(WRITE ${src} "// README.md, C++ block ${count}\n${includes}\n#include <cstdio>\n#include <string>\n#include <string_view>\n#include <vector>\n\nint main() {\n${context}\n${body}\n  return 0;\n}\n")
  execute_process(
    COMMAND ${CXX} -std=c++20 -fsyntax-only -DSLM_COMPILED_LIB=1 -I${INCLUDE_DIR}
            -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror
            -Wno-unused-variable -Wno-unused-parameter -Wno-unused-but-set-variable ${src}
    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(APPEND failures "\n--- README.md C++ block ${count} (${src}) does not compile:\n${err}")
  endif()
endwhile()

if(count LESS 5)
  message(FATAL_ERROR "found ${count} C++ blocks in ${README}; expected at least 5 (is the README's fence still ```cpp?)")
endif()
if(failures)
  message(FATAL_ERROR "${failures}")
endif()
message(STATUS "${count} C++ blocks of README.md compile as written")
