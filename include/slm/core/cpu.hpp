// slm/core/cpu.hpp - runtime CPU feature detection and instruction-set selection.
//
// The kernels in kernels/matmul.hpp are compiled for several instruction sets inside one
// translation unit (GCC/Clang `__attribute__((target(...)))`), so a host built without
// -march=native still gets the AVX2 and AVX-512 paths; which one runs is decided here,
// at run time. On AArch64 (little-endian, GCC/Clang) the NEON kernels (kernels/neon.hpp)
// are plain ARMv8.0-A Advanced SIMD, which every AArch64 CPU has.
//
//   cpu_features detect_cpu_features()  what this CPU and OS support (cpuid + xgetbv on
//                                       x86: a feature counts only when the OS saves
//                                       the register state it needs, XCR0).
//   const cpu_features& host_cpu()      the same, detected once (function-local static,
//                                       thread-safe initialisation, never written after).
//   bool amx_usable()                   AMX tiles usable by this process: the CPU has
//                                       them, the OS saves their state (XCR0), and on Linux
//                                       the process holds the permission, which the first
//                                       call asks for (arch_prctl; see the function).
//   isa                                 a kernel family: scalar, avx2 (AVX2+FMA+F16C),
//                                       avx512 (F+BW+VL, plus VNNI/BF16 where present),
//                                       neon (AArch64 Advanced SIMD; only there).
//   resolve_isa(requested)              isa::best -> the best the CPU has, unless the
//                                       environment variable SLM_ISA
//                                       (scalar|avx2|avx512|neon)
//                                       asks for less (read once, cached like host_cpu).
//                                       An explicit request the CPU cannot run returns
//                                       isa::best's "none": see isa_supported().
//
// Overrides for tests: pass an explicit isa to matmul() (every kernel family the CPU
// supports can be forced this way), or set SLM_ISA before the process starts.
// There is no mutable global state.
#pragma once
#include "slm/core/build_mode.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define SLM_X86 1
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

// The NEON kernels: AArch64, little-endian (they reinterpret byte vectors as wider
// lanes), GCC or Clang.
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(__ARM_BIG_ENDIAN) && (defined(__GNUC__) || defined(__clang__))
#define SLM_NEON 1
#endif

namespace slm {

struct cpu_features {
  // x86
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512dq = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512vbmi = false;
  bool avxvnni = false;
  bool amx_bf16 = false;  // AMX-TILE + AMX-BF16, tile state enabled in XCR0 (see amx_usable())
  bool amx_int8 = false;  // AMX-TILE + AMX-INT8, likewise
  // arm
  bool neon = false;
};

namespace detail {
#ifdef SLM_X86
inline std::uint64_t xgetbv0() noexcept {
  std::uint32_t lo = 0, hi = 0;
  __asm__ __volatile__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}
#endif
}  // namespace detail

// What this CPU (and its OS) supports. Pure apart from reading the CPU.
inline cpu_features detect_cpu_features() noexcept {
  cpu_features f;
#ifdef SLM_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return f;
  const unsigned max_leaf = a;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse42 = (c >> 20) & 1u;
  const bool osxsave = (c >> 27) & 1u;
  const bool cpu_avx = (c >> 28) & 1u;
  const bool cpu_fma = (c >> 12) & 1u;
  const bool cpu_f16c = (c >> 29) & 1u;
  std::uint64_t xcr0 = 0;
  if (osxsave) xcr0 = detail::xgetbv0();
  const bool os_avx = (xcr0 & 0x6u) == 0x6u;        // XMM and YMM state
  const bool os_avx512 = (xcr0 & 0xE6u) == 0xE6u;   // + opmask, ZMM_Hi256, Hi16_ZMM
  f.avx = cpu_avx && os_avx;
  f.fma = f.avx && cpu_fma;
  f.f16c = f.avx && cpu_f16c;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    const unsigned leaf7_edx = d;
    f.avx2 = f.avx && ((b >> 5) & 1u);
    f.avx512f = os_avx512 && ((b >> 16) & 1u);
    f.avx512dq = f.avx512f && ((b >> 17) & 1u);
    f.avx512bw = f.avx512f && ((b >> 30) & 1u);
    f.avx512vl = f.avx512f && ((b >> 31) & 1u);
    f.avx512vbmi = f.avx512f && ((c >> 1) & 1u);
    f.avx512vnni = f.avx512f && ((c >> 11) & 1u);
    const unsigned sub_leaves = a;
    if (sub_leaves >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avxvnni = f.avx && ((a >> 4) & 1u);
      f.avx512bf16 = f.avx512f && ((a >> 5) & 1u);
    }
    // Leaf 7.0 EDX: AMX-BF16 bit 22, AMX-TILE bit 24, AMX-INT8 bit 25; XCR0 bits 17-18:
    // XTILECFG, XTILEDATA.
    const bool os_amx = (xcr0 & 0x60000u) == 0x60000u;
    const bool tiles = f.avx512f && os_amx && ((leaf7_edx >> 24) & 1u);
    f.amx_bf16 = tiles && ((leaf7_edx >> 22) & 1u);
    f.amx_int8 = tiles && ((leaf7_edx >> 25) & 1u);
  }
#elif defined(__aarch64__) || defined(__ARM_NEON)
  f.neon = true;  // mandatory in AArch64
#endif
  return f;
}

// Detected once per process; immutable afterwards.
inline const cpu_features& host_cpu() noexcept {
  static const cpu_features f = detect_cpu_features();
  return f;
}

// Whether this process may use AMX tiles (the kernels of kernels/amx.hpp, AMX-BF16, and
// kernels/amx_int8.hpp, AMX-INT8; each also checks its own feature). Linux keeps
// the 8 KiB of tile data out of a process's saved state until the process asks for it
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the first call asks, once. The
// grant is process-wide, for every thread, and changes nothing else: a thread's tile state
// is saved only after it has used the tiles. The kernel refuses the request when a thread's
// alternate signal stack is too small for the larger signal frame; then this is false and
// the AVX-512 kernels run. Elsewhere than Linux, false: no AMX kernels.
inline bool amx_usable() noexcept {
#if defined(SLM_X86) && defined(__linux__) && defined(SYS_arch_prctl)
  static const bool granted = [] {
    if (!host_cpu().amx_bf16 && !host_cpu().amx_int8) return false;
    constexpr long req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
    return syscall(SYS_arch_prctl, req_xcomp_perm, xfeature_xtiledata) == 0;
  }();
  return granted;
#else
  return false;
#endif
}

// Kernel families, in increasing order of capability on x86 (neon is the only family
// besides scalar on AArch64, and unavailable elsewhere).
enum class isa : std::uint8_t { best, scalar, avx2, avx512, neon };

constexpr std::string_view to_string(isa i) noexcept {
  switch (i) {
    case isa::best: return "best";
    case isa::scalar: return "scalar";
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
    case isa::neon: return "neon";
  }
  return "?";
}

// Can `f` run the kernels of family `i`? (isa::best: always.)
constexpr bool isa_supported(isa i, const cpu_features& f) noexcept {
  switch (i) {
    case isa::best: case isa::scalar: return true;
#ifdef SLM_X86
    case isa::avx2: return f.avx2 && f.fma && f.f16c;
    case isa::avx512: return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c;
#else
    case isa::avx2: case isa::avx512: return false;
#endif
#ifdef SLM_NEON
    case isa::neon: return f.neon;
#else
    case isa::neon: return false;
#endif
  }
  return false;
}

constexpr isa best_isa(const cpu_features& f) noexcept {
  if (isa_supported(isa::neon, f)) return isa::neon;
  if (isa_supported(isa::avx512, f)) return isa::avx512;
  if (isa_supported(isa::avx2, f)) return isa::avx2;
  return isa::scalar;
}

// "scalar" / "avx2" / "avx512" / "neon" -> that isa; anything else -> isa::best.
constexpr isa isa_from_string(std::string_view s) noexcept {
  if (s == "scalar") return isa::scalar;
  if (s == "avx2") return isa::avx2;
  if (s == "avx512") return isa::avx512;
  if (s == "neon") return isa::neon;
  return isa::best;
}

// The best family this host can run, capped by SLM_ISA if set (read once).
inline isa default_isa() noexcept {
  static const isa chosen = [] {
    const isa best = best_isa(host_cpu());
    const char* env = std::getenv("SLM_ISA");
    if (!env) return best;
    const isa want = isa_from_string(std::string_view(env, std::strlen(env)));
    if (want == isa::best || !isa_supported(want, host_cpu())) return best;
    return static_cast<std::uint8_t>(want) < static_cast<std::uint8_t>(best) ? want : best;
  }();
  return chosen;
}

// isa::best -> default_isa(); anything else is returned as is (check isa_supported).
inline isa resolve_isa(isa requested) noexcept {
  return requested == isa::best ? default_isa() : requested;
}

}  // namespace slm
