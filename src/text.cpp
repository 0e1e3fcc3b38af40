// src/text.cpp - the compiled library's text unit: tokenizers, the regex engine, Unicode, detokenizer, sampling and stop strings.
// Defines, once, what the headers below only declare in compiled mode (slm/build_mode.hpp).
#define SLM_UNIT_TEXT 1

#include "slm/unicode.hpp"
#include "slm/regex.hpp"
#include "slm/text_ops.hpp"
#include "slm/bpe.hpp"
#include "slm/tokenizer.hpp"
#include "slm/detokenizer.hpp"
#include "slm/nam56r_text.hpp"
#include "slm/sampling.hpp"
#include "slm/stop_strings.hpp"
#include "slm/generate.hpp"
