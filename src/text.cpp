// src/text.cpp - the compiled library's text unit: tokenizers, the regex engine, Unicode, detokenizer, sampling and stop strings.
// Defines, once, what the headers below only declare in compiled mode (slm/core/build_mode.hpp).
#define SLM_UNIT_TEXT 1

#include "slm/text/unicode.hpp"
#include "slm/text/regex.hpp"
#include "slm/text/text_ops.hpp"
#include "slm/text/bpe.hpp"
#include "slm/text/tokenizer.hpp"
#include "slm/text/detokenizer.hpp"
#include "slm/models/nam56r/text.hpp"
#include "slm/generate/sampling.hpp"
#include "slm/text/stop_strings.hpp"
#include "slm/generate/generator.hpp"
#include "slm/generate/scoring.hpp"
#include "slm/generate/throughput.hpp"
#include "slm/generate/completion.hpp"
