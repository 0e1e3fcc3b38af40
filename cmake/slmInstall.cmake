# Install rules and package files, so that after `cmake --install` a host can write
#   find_package(slm 0.1 REQUIRED)  target_link_libraries(app PRIVATE slm::slm)
# or use pkg-config (`pkg-config --cflags slm`). The build tree is exported as well, so
# find_package also works against a build directory without installing.
include(CMakePackageConfigHelpers)

set(SLM_INSTALL_CMAKEDIR "${CMAKE_INSTALL_DATADIR}/cmake/slm" CACHE STRING
    "Where slmConfig.cmake is installed (relative to the prefix)")

install(TARGETS slm EXPORT slmTargets INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/slm DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(EXPORT slmTargets NAMESPACE slm:: DESTINATION ${SLM_INSTALL_CMAKEDIR})
export(EXPORT slmTargets NAMESPACE slm:: FILE ${PROJECT_BINARY_DIR}/slmTargets.cmake)
# slm::compiled, where it is configured: the static library (libslm.a) beside the headers,
# in an export set of its own that slmConfig.cmake includes when present. The install
# needs no build: without libslm.a (`cmake --install` after a plain configure) it is
# header-only, and the compiled target's package files are removed again.
if(TARGET slm_compiled)
  install(TARGETS slm_compiled EXPORT slmCompiledTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} OPTIONAL)
  install(EXPORT slmCompiledTargets NAMESPACE slm:: DESTINATION ${SLM_INSTALL_CMAKEDIR})
  export(EXPORT slmCompiledTargets NAMESPACE slm:: FILE ${PROJECT_BINARY_DIR}/slmCompiledTargets.cmake)
endif()

configure_package_config_file(cmake/slmConfig.cmake.in ${PROJECT_BINARY_DIR}/slmConfig.cmake
  INSTALL_DESTINATION ${SLM_INSTALL_CMAKEDIR})
# A header-only install fits any architecture; one with slm::compiled (a static library)
# only its own. Only the major version promises an API.
if(TARGET slm_compiled)
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/slmConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
else()
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/slmConfigVersion.cmake
    VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
endif()
install(FILES ${PROJECT_BINARY_DIR}/slmConfig.cmake ${PROJECT_BINARY_DIR}/slmConfigVersion.cmake
  DESTINATION ${SLM_INSTALL_CMAKEDIR})

# pkg-config: the flags a non-CMake build needs (C++20, threads, optional OpenMP). The
# files locate the prefix from where they are installed (${pcfiledir}), so an install
# with `cmake --install build --prefix P` or a moved prefix stays right.
function(slm_pc_dir var dir)
  if(IS_ABSOLUTE "${dir}")
    set(${var} "${dir}" PARENT_SCOPE)
  else()
    set(${var} "\${prefix}/${dir}" PARENT_SCOPE)
  endif()
endfunction()
if(IS_ABSOLUTE "${CMAKE_INSTALL_DATADIR}")
  set(SLM_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH _slm_pc_up "/p/${CMAKE_INSTALL_DATADIR}/pkgconfig" "/p")
  string(REGEX REPLACE "/$" "" _slm_pc_up "${_slm_pc_up}")
  set(SLM_PC_PREFIX "\${pcfiledir}/${_slm_pc_up}")
endif()
slm_pc_dir(SLM_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
slm_pc_dir(SLM_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
set(SLM_PC_CFLAGS "-std=c++20")
set(SLM_PC_LIBS "-pthread")
if(SLM_USE_OPENMP)
  string(APPEND SLM_PC_CFLAGS " -fopenmp -DSLM_USE_OPENMP=1")
  string(APPEND SLM_PC_LIBS " -fopenmp")
endif()
if(SLM_USE_XSIMD)
  string(APPEND SLM_PC_CFLAGS " -DSLM_USE_XSIMD=1")
  set(SLM_PC_REQUIRES "xsimd")
endif()
configure_file(cmake/slm.pc.in ${PROJECT_BINARY_DIR}/slm.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/slm.pc DESTINATION ${CMAKE_INSTALL_DATADIR}/pkgconfig)
# The compiled mode for builds without CMake: `pkg-config --cflags --libs slm-compiled`.
if(TARGET slm_compiled)
  configure_file(cmake/slm-compiled.pc.in ${PROJECT_BINARY_DIR}/slm-compiled.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/slm-compiled.pc DESTINATION ${CMAKE_INSTALL_DATADIR}/pkgconfig)
  # libslm.a not built: what names it would name a missing file.
  install(CODE "
    if(NOT EXISTS \"$<TARGET_FILE:slm_compiled>\")
      set(_slm_root \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}\")
      file(GLOB _slm_compiled_files \"\${_slm_root}/${SLM_INSTALL_CMAKEDIR}/slmCompiledTargets*.cmake\")
      file(REMOVE \${_slm_compiled_files} \"\${_slm_root}/${CMAKE_INSTALL_DATADIR}/pkgconfig/slm-compiled.pc\")
      message(STATUS \"slm: libslm.a is not built, so the install is header-only (no slm::compiled)\")
    endif()")
endif()
install(FILES LICENSE README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/slm)
