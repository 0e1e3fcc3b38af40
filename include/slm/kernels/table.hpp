// slm/kernels/table.hpp - the kernel table: the kernels that multiply a weight format at an
// activation precision on an instruction set, as one kernel_row (kernels/kernel_row.hpp).
//
//   find_kernels(format, activation precision, isa) -> kernel_row
//
//   activations  formats             scalar      avx2        avx512                    neon
//   f32          every               reference   avx2        avx512                    neon
//   bf16         nvfp4 mxfp4 bf16    f32 row of the isa, x rounded to bf16 first;
//                                    avx512 with AVX512_BF16: avx512_bf16 (vdpbf16ps);
//                                    and AMX-BF16: amx_bf16 (its GEMM on tiles)
//   int8         nvfp4 mxfp4         w4a8 reference; avx2 (and avx512 without VNNI): avx2_int8;
//                                    avx512 with VNNI: avx512_vnni; and AMX-INT8: amx_int8
//                                    (its GEMM on tiles)
//   bf16 / int8  the other formats   the f32 row (their products stay exact)
//
// kernels/matmul.hpp is the one driver that runs a row. The rows are built by the isa's own
// file (reference_row, avx2_row, avx512_row, ...), so a new isa is a file of kernels, its
// row function, and one case here.
#pragma once
#include "slm/core/build_mode.hpp"

#include "slm/core/cpu.hpp"
#include "slm/formats/weights.hpp"
#include "slm/kernels/amx.hpp"
#include "slm/kernels/amx_int8.hpp"
#include "slm/kernels/avx2.hpp"
#include "slm/kernels/avx2_int8.hpp"
#include "slm/kernels/avx512.hpp"
#include "slm/kernels/avx512_bf16.hpp"
#include "slm/kernels/avx512_vnni.hpp"
#include "slm/kernels/kernel_row.hpp"
#include "slm/kernels/neon.hpp"
#include "slm/kernels/reference.hpp"

namespace slm {

// The activation precision a product with a weight of format f runs at, given the
// precision chosen for packed 4-bit weights and the one chosen for bf16 weights: `packed`
// for NVFP4/MXFP4, bf16 for bf16 weights when `dense` asks for it (the host's opt-in: f32,
// exact, unless it does; int8 has no bf16-weight kernels and means f32 there), f32 (exact)
// for every other format. The layers (product_precision, layers/linear.hpp) and the format
// policies (formats/policies.hpp) both ask here, so they run the same numerics.
constexpr activation_precision default_activations(weight_format f,
                                                   activation_precision packed = activation_precision::bf16,
                                                   activation_precision dense = activation_precision::f32) noexcept {
  if (f == weight_format::nvfp4 || f == weight_format::mxfp4) return packed;
  return f == weight_format::bf16 && dense == activation_precision::bf16 ? activation_precision::bf16
                                                                         : activation_precision::f32;
}

namespace detail::mm {
// `which` resolves to AVX-512, this CPU runs it, and it has the extension `has`.
inline bool avx512_with(isa which, bool cpu_features::*has) noexcept {
#ifdef SLM_X86
  return resolve_isa(which) == isa::avx512 && isa_supported(isa::avx512, host_cpu()) && host_cpu().*has;
#else
  (void)which;
  (void)has;
  return false;
#endif
}
}  // namespace detail::mm

// Whether bf16 activations run the vdpbf16ps kernels for `which` on this CPU (for nvfp4,
// mxfp4 and bf16 weights); otherwise the f32 kernels run on rounded activations.
inline bool bf16_activations_accelerated(isa which = isa::best) noexcept {
  return detail::mm::avx512_with(which, &cpu_features::avx512bf16);
}

// Whether the bf16-activation GEMM (prefill) runs on AMX-BF16 tiles for `which` on this CPU
// and process (kernels/amx.hpp); the GEMV stays vdpbf16ps.
inline bool amx_bf16_accelerated(isa which = isa::best) noexcept {
  return bf16_activations_accelerated(which) && host_cpu().amx_bf16 && amx_usable();
}

// Whether int8 activations (W4A8) run the AVX-512 VNNI kernels for `which` on this CPU.
inline bool w4a8_vnni(isa which = isa::best) noexcept {
  return detail::mm::avx512_with(which, &cpu_features::avx512vnni);
}

// Whether the int8-activation (W4A8) GEMM (prefill) runs on AMX-INT8 tiles for `which` on
// this CPU and process (kernels/amx_int8.hpp); the GEMV stays VNNI.
inline bool amx_int8_accelerated(isa which = isa::best) noexcept {
  return w4a8_vnni(which) && host_cpu().amx_int8 && amx_usable();
}

// Whether int8 activations (W4A8) run SIMD kernels for `which` on this CPU: AVX-512 VNNI,
// or the AVX2 ones (kernels/avx2_int8.hpp) on AVX2 and on AVX-512 without VNNI; otherwise
// the scalar W4A8 reference runs.
inline bool w4a8_accelerated(isa which = isa::best) noexcept {
#ifdef SLM_X86
  const isa r = resolve_isa(which);
  return (r == isa::avx2 || r == isa::avx512) && isa_supported(r, host_cpu());
#else
  (void)which;
  return false;
#endif
}

namespace detail::mm {

// The row for (f, act, which); `which` is resolved (not isa::best). An isa this build has
// no kernels for gets the reference. The rows are built once, on first use, into an
// immutable table (a function-local static: initialised once, thread-safe), so a call
// costs an index, not a search: decode runs hundreds of small products per token.
const kernel_row& find_kernels(weight_format f, activation_precision act, isa which) noexcept;

#if SLM_DEFINE_KERNELS
SLM_INLINE kernel_row f32_row(weight_format f, isa which) noexcept {
  switch (which) {
#ifdef SLM_X86
    case isa::avx512: return avx512_row(f);
    case isa::avx2: return avx2_row(f);
#endif
#ifdef SLM_NEON
    case isa::neon: return neon_row(f);
#endif
    default: break;
  }
  (void)f;
  return reference_row();
}

SLM_INLINE kernel_row build_row(weight_format f, activation_precision act, isa which) noexcept {
  const bool fp4 = f == weight_format::nvfp4 || f == weight_format::mxfp4;
  if (act == activation_precision::int8 && fp4) {
#ifdef SLM_X86
    if (amx_int8_accelerated(which)) return amx8::amx_int8_row(f);
    if (w4a8_vnni(which)) return w4a8::vnni_row(f);
    if (w4a8_accelerated(which)) return w4a8::avx2_int8_row(f);
#endif
    return w4a8::reference_row();
  }
  if (act == activation_precision::bf16 && (fp4 || f == weight_format::bf16)) {
#ifdef SLM_X86
    if (amx_bf16_accelerated(which)) return amx::amx_bf16_row(f);
    if (bf16_activations_accelerated(which)) return a16::avx512_bf16_row(f);
#endif
    kernel_row k = f32_row(f, which);
    k.round_bf16 = true;
    return k;
  }
  return f32_row(f, which);
}

inline constexpr std::size_t n_formats = 6, n_precisions = 3, n_isas = 5;  // the enums' sizes

SLM_INLINE const kernel_row& find_kernels(weight_format f, activation_precision act, isa which) noexcept {
  struct table {
    kernel_row rows[n_formats][n_precisions][n_isas];
  };
  static const table t = [] {
    table b;
    for (std::size_t i = 0; i < n_formats; ++i)
      for (std::size_t a = 0; a < n_precisions; ++a)
        for (std::size_t j = 0; j < n_isas; ++j)
          b.rows[i][a][j] = build_row(static_cast<weight_format>(i), static_cast<activation_precision>(a),
                                      static_cast<isa>(j));
    return b;
  }();
  const auto i = static_cast<std::size_t>(f), a = static_cast<std::size_t>(act), j = static_cast<std::size_t>(which);
  return t.rows[i < n_formats ? i : 0][a < n_precisions ? a : 0][j < n_isas ? j : 0];
}
#endif  // SLM_DEFINE_KERNELS

}  // namespace detail::mm

}  // namespace slm
