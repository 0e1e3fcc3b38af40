// slm/version.hpp - the library version (kept in step with CMakeLists.txt's project()).
#pragma once
#include "slm/core/build_mode.hpp"

#define SLM_VERSION_MAJOR 0
#define SLM_VERSION_MINOR 1
#define SLM_VERSION_PATCH 0
#define SLM_VERSION_STRING "0.1.0"

namespace slm {
inline constexpr int version_major = SLM_VERSION_MAJOR;
inline constexpr int version_minor = SLM_VERSION_MINOR;
inline constexpr int version_patch = SLM_VERSION_PATCH;
inline constexpr const char* version_string = SLM_VERSION_STRING;
}  // namespace slm
