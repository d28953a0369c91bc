// Q4_K, Q5_K and Q6_K x Q8_K, NEON with dotprod (kernels/arm/matmul_kquant_neon_impl.h):
// 16 int8 products per sdot into 4 int32 lanes.  Built with
// -march=armv8.2-a+dotprod.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
LILIMS_TARGET_DOTPROD_BEGIN
#include "kernels/arm/matmul_kquant_neon_impl.h"

namespace lilims::kernels {
namespace {

struct DotSdot {
  static int32x4_t dot16(int8x16_t q, int8x16_t a) { return vdotq_s32(vdupq_n_s32(0), q, a); }
  static int32x4_t dot32(int8x16_t q0, int8x16_t q1, int8x16_t a0, int8x16_t a1) {
    return vdotq_s32(vdotq_s32(vdupq_n_s32(0), q0, a0), q1, a1);
  }
};

}  // namespace

void q4_k_q8_1_gemm__neon_dotprod(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  kquant_neon::gemm<DotSdot, quant::BlockQ4_K>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q5_k_q8_1_gemm__neon_dotprod(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  kquant_neon::gemm<DotSdot, quant::BlockQ5_K>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q6_k_q8_0_gemm__neon_dotprod(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  kquant_neon::gemm<DotSdot, quant::BlockQ6_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_DOTPROD_END
#endif  // LILIMS_HAVE_NEON
