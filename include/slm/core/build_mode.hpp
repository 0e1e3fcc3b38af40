// slm/core/build_mode.hpp - header-only or compiled, and the language check. Every slm header
// includes this first.
//
// slm is header-only by default: include a header and everything it needs is compiled in
// the including file. That is simplest, and costs each file that uses a model the
// compile time of the kernels, layers and parsers it reaches.
//
// Compiled mode (SLM_COMPILED_LIB, what CMake's slm::compiled target sets): the heavy
// functions -- parsers, loaders, tokenizer, kernels and forward passes -- are compiled
// once, in the library's few translation units (src/*.cpp), and the headers only declare
// them. A host file then compiles in a few seconds, and the library's code can be built
// optimised while the host builds Debug.
//
// How a header takes part. Each heavy header belongs to one unit, compiled by
// src/<unit>.cpp, which defines SLM_UNIT_<UNIT> to 1 before including it. A
// non-template function that is only declared in compiled mode is written
//
//   status parse(std::string_view text);                     // in the class or namespace
//   ...
//   #if SLM_DEFINE_TEXT
//   SLM_INLINE status parse(std::string_view text) { ... }   // the definition
//   #endif
//
// SLM_DEFINE_<UNIT> is true in header-only mode and in that unit's own translation unit;
// SLM_INLINE is `inline` in header-only mode and nothing in compiled mode (the one
// definition lives in the library). Templates the library instantiates for the
// config-driven path (decoder<any_attention, any_ffn>) are declared `extern template`
// in compiled mode and instantiated by their unit.
#pragma once

// slm needs C++20 (concepts, std::span, designated initialisers). An older standard gets
// this one message, not pages of template errors: the include below stops the compiler.
#if (defined(_MSVC_LANG) && _MSVC_LANG < 202002L) || (!defined(_MSVC_LANG) && __cplusplus < 202002L)
#include "slm needs C++20: compile with -std=c++20 (MSVC: /std:c++20) or later"
#endif

#if defined(SLM_COMPILED_LIB)
#define SLM_COMPILED 1
#define SLM_INLINE
#else
#define SLM_COMPILED 0
#define SLM_INLINE inline
#endif

// The units of the compiled library (src/<unit>.cpp).
#ifndef SLM_UNIT_IO
#define SLM_UNIT_IO 0        // json, safetensors, checkpoint, configs, mapped files
#endif
#ifndef SLM_UNIT_KERNELS
#define SLM_UNIT_KERNELS 0   // matrix kernels for every format and ISA, quantizers, converters
#endif
#ifndef SLM_UNIT_TEXT
#define SLM_UNIT_TEXT 0      // tokenizer, regex, Unicode, detokenizer, sampling, prompts
#endif
#ifndef SLM_UNIT_DECODER
#define SLM_UNIT_DECODER 0   // the config-driven decoder (slm::model) and its layers
#endif
#ifndef SLM_UNIT_NAM56R
#define SLM_UNIT_NAM56R 0    // the NAM56R specialist and the nanochat lineage
#endif
#ifndef SLM_UNIT_MODELS
#define SLM_UNIT_MODELS 0    // any model family behind one type, slm::load, generation defaults
#endif
#ifndef SLM_UNIT_ENSEMBLE
#define SLM_UNIT_ENSEMBLE 0  // the ensemble: registry, routers, strategies, converters
#endif

#define SLM_DEFINE_IO (!SLM_COMPILED || SLM_UNIT_IO)
#define SLM_DEFINE_KERNELS (!SLM_COMPILED || SLM_UNIT_KERNELS)
#define SLM_DEFINE_TEXT (!SLM_COMPILED || SLM_UNIT_TEXT)
#define SLM_DEFINE_DECODER (!SLM_COMPILED || SLM_UNIT_DECODER)
#define SLM_DEFINE_NAM56R (!SLM_COMPILED || SLM_UNIT_NAM56R)
#define SLM_DEFINE_MODELS (!SLM_COMPILED || SLM_UNIT_MODELS)
#define SLM_DEFINE_ENSEMBLE (!SLM_COMPILED || SLM_UNIT_ENSEMBLE)
