# Flags for slm's own tests, examples, benchmarks and fuzzers. Nothing here reaches the
# slm target, so a host that consumes slm never inherits these choices.
add_library(slm_developer_flags INTERFACE)
if(CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(slm_developer_flags INTERFACE -Wall -Wextra -Wpedantic)
  if(SLM_NO_EXCEPTIONS)
    target_compile_options(slm_developer_flags INTERFACE -fno-exceptions -fno-rtti)
  endif()
  if(SLM_SANITIZE)
    target_compile_options(slm_developer_flags INTERFACE
      -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_link_options(slm_developer_flags INTERFACE -fsanitize=address,undefined)
  endif()
elseif(MSVC)
  target_compile_options(slm_developer_flags INTERFACE /W4 /permissive-)
endif()
