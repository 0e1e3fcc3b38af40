// The unit tests' precompiled header: GoogleTest and every slm header (slm.hpp). In
// compiled mode (the default build) the heavy functions are declarations here, so the
// header is cheap to build once and each test file compiles only its own code.
#pragma once

#include <gtest/gtest.h>

#include "slm/slm.hpp"
#include "test_helpers.hpp"
