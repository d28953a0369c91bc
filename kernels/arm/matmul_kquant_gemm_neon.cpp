// Q4_K, Q5_K and Q6_K x Q8_K, plain NEON (kernels/arm/matmul_kquant_neon_impl.h):
// the int8 products through vmull_s8 / vmlal_high_s8 (two per int16 lane)
// and vpaddlq_s16 into int32.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
#include "kernels/arm/matmul_kquant_neon_impl.h"

namespace lilims::kernels {
namespace {

struct DotNeon {
  static int32x4_t dot16(int8x16_t q, int8x16_t a) {
    return vpaddlq_s16(vmlal_high_s8(vmull_s8(vget_low_s8(q), vget_low_s8(a)), q, a));
  }
  static int32x4_t dot32(int8x16_t q0, int8x16_t q1, int8x16_t a0, int8x16_t a1) {
    return vpadalq_s16(dot16(q0, a0), vmlal_high_s8(vmull_s8(vget_low_s8(q1), vget_low_s8(a1)), q1, a1));
  }
};

}  // namespace

void q4_k_q8_1_gemm__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
                          int64_t n, float* y, int64_t ldy) {
  kquant_neon::gemm<DotNeon, quant::BlockQ4_K>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q5_k_q8_1_gemm__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
                          int64_t n, float* y, int64_t ldy) {
  kquant_neon::gemm<DotNeon, quant::BlockQ5_K>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q6_k_q8_0_gemm__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
                          int64_t n, float* y, int64_t ldy) {
  kquant_neon::gemm<DotNeon, quant::BlockQ6_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
#endif  // LILIMS_HAVE_NEON
