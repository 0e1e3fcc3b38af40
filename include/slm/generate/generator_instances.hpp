// slm/generate/generator_instances.hpp - compiled mode: the generators the library compiles once.
//
// generator<Session> (generate/generator.hpp) is a template over the session type. In compiled mode
// the library instantiates it for its own sessions, each in the unit of its model
// (src/decoder.cpp, src/nam56r.cpp), and a host file that uses one declares it
// `extern template` instead of compiling it again. The declaration needs both headers,
// so this file has no include guard: generate/generator.hpp and each model header include it at
// their end, and whichever of a pair comes second makes the declaration.
#include "slm/core/build_mode.hpp"

#if SLM_COMPILED && defined(SLM_GENERATE_HPP_INCLUDED)
#if defined(SLM_MODEL_HPP_INCLUDED) && !SLM_UNIT_DECODER && !defined(SLM_GENERATOR_MODEL_DECLARED)
#define SLM_GENERATOR_MODEL_DECLARED 1
namespace slm {
extern template class generator<model::session>;
}
#endif
#if defined(SLM_NAM56R_HPP_INCLUDED) && !SLM_UNIT_NAM56R && !defined(SLM_GENERATOR_NAM56R_DECLARED)
#define SLM_GENERATOR_NAM56R_DECLARED 1
namespace slm {
extern template class generator<nam56r_model::session>;
}
#endif
#if defined(SLM_NANOCHAT_HPP_INCLUDED) && !SLM_UNIT_NAM56R && !defined(SLM_GENERATOR_NANOCHAT_DECLARED)
#define SLM_GENERATOR_NANOCHAT_DECLARED 1
namespace slm {
extern template class generator<nanochat_model::session>;
}
#endif
#endif
