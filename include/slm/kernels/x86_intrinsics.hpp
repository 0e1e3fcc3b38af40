// slm/kernels/x86_intrinsics.hpp - <immintrin.h> for the x86 kernels, with g++ 12's false
// "'__Y' is used uninitialized" silenced.
//
// g++ 12's AVX-512 intrinsics (_mm512_unpacklo_epi32, _mm512_shuffle_i32x4, ...) pass
// _mm512_undefined_epi32(), a self-initialised `__m512i __Y = __Y;`, as the unused merge
// source; once inlined at -O1 and above that reads as an uninitialised use (-Wuninitialized,
// -Wmaybe-uninitialized, GCC bug 105593, fixed in g++ 13), so a header-only host built with
// `-Wall -Werror` failed in kernels/amx.hpp. g++'s diagnostic pragmas apply by source
// location, so ignoring the two warnings around the include silences them inside the
// intrinsics header only; every slm line and the host's own code still get them. (Where the
// host included <immintrin.h> first, its include guard makes this a no-op.)
#pragma once

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif
#endif
