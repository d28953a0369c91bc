// Q8_0 / Q4_0 / Q4_1 matmul on 4-row interleaved weights, baseline NEON
// (armv8-a: SMULL/SMLAL + SADALP).  Layout and contract: matmul_x4_neon_impl.h,
// kernels::MatmulKernelFn.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
#include "kernels/arm/matmul_x4_neon_impl.h"

namespace lilims::kernels {

using neon_x4::DotNeon;
using neon_x4::DotTiles;
using quant::Type;

void q8_0_q8_0_gemm_x4__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                             size_t x_stride, int64_t n, float* y, int64_t ldy) {
  neon_x4::gemm_x4<Type::Q8_0, DotTiles<Type::Q8_0, DotNeon>>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_0_q8_0_gemm_x4__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                             size_t x_stride, int64_t n, float* y, int64_t ldy) {
  neon_x4::gemm_x4<Type::Q4_0, DotTiles<Type::Q4_0, DotNeon>>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_1_q8_1_gemm_x4__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                             size_t x_stride, int64_t n, float* y, int64_t ldy) {
  neon_x4::gemm_x4<Type::Q4_1, DotTiles<Type::Q4_1, DotNeon>>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
#endif  // LILIMS_HAVE_NEON
