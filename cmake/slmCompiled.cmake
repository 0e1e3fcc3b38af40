# slm::compiled: the compiled mode (see include/slm/core/build_mode.hpp). One static library
# of a few translation units (src/<unit>.cpp), each defining once what the headers only
# declare for its users. Users get SLM_COMPILED_LIB through the target, so every file
# that links slm::compiled sees the declarations only.
add_library(slm_compiled STATIC
  src/io.cpp src/kernels.cpp src/text.cpp src/decoder.cpp src/nam56r.cpp src/models.cpp src/ensemble.cpp)
add_library(slm::compiled ALIAS slm_compiled)
set_target_properties(slm_compiled PROPERTIES OUTPUT_NAME slm EXPORT_NAME compiled POSITION_INDEPENDENT_CODE ON)
target_link_libraries(slm_compiled PUBLIC slm)
target_compile_definitions(slm_compiled PUBLIC SLM_COMPILED_LIB=1)
# The kernels are the point of the library: a Debug host still gets optimised kernels.
if(SLM_COMPILED_OPTIMIZE AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(slm_compiled PRIVATE $<$<CONFIG:Debug>:-O3>)
endif()
# In slm's own developer builds the library gets the same compile flags as the tests
# (warnings, sanitizers, -fno-exceptions), so the ASan stage checks the library's code
# too. The flags are copied, not linked, so the installed target depends on nothing.
if(TARGET slm_developer_flags)
  target_compile_options(slm_compiled PRIVATE $<TARGET_PROPERTY:slm_developer_flags,INTERFACE_COMPILE_OPTIONS>)
endif()
