# Toolchain file: cross-compile for AArch64 Linux with Debian's g++-aarch64-linux-gnu,
# statically linked so qemu-aarch64 (Debian's qemu-user) runs the binaries without an
# AArch64 sysroot. Used by tests/cross_aarch64.cmake; also usable by hand:
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static")
# Executables built here (GoogleTest discovery, ctest) run through qemu.
find_program(SLM_QEMU_AARCH64 qemu-aarch64)
if(SLM_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${SLM_QEMU_AARCH64})
endif()
# Libraries and headers come from the cross compiler's own paths, programs from the host.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
