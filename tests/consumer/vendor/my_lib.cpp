#include "my_lib.hpp"

std::string my::describe() { return std::string("my_lib on slm ") + slm::version_string; }
