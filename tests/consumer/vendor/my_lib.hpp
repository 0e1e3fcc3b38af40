// The vendoring library's public header: it includes slm's, so its users need slm's
// include directory, which my::my_lib carries through slm::slm.
#pragma once
#include <string>

#include <slm/version.hpp>

namespace my {
std::string describe();
inline const char* slm_version() { return slm::version_string; }
}  // namespace my
