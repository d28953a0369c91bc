// Q4_K, Q5_K x Q8_1 and Q6_K x Q8_0 matmul, AVX2 (kernels/x86/matmul_kquant_x86.h):
// a 32-element block's dot through maddubs (unsigned weight quants x signed
// activations, two products per int16) and madd into int32 lanes.  Built
// with -mavx2 -mfma -mf16c.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include "kernels/x86/matmul_kquant_x86.h"

namespace lilims::kernels {
namespace {

struct DotAvx2 {
  using Q6Scale = __m256i;  // int16 [scale_2j x 8 | scale_2j+1 x 8]
  static Q6Scale q6_scale(int8_t s0, int8_t s1) {
    return _mm256_setr_m128i(_mm_set1_epi16(s0), _mm_set1_epi16(s1));
  }
  static __m256i dot(__m256i q, __m256i a) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, a), _mm256_set1_epi16(1));
  }
  // int16 pair i holds elements 2i, 2i + 1: pairs 0-7 (the low 128 bits) are
  // the first 16-block, 8-15 the second.
  static __m256i dot_q6(__m256i q, __m256i a, Q6Scale s) {
    const __m256i qa = _mm256_maddubs_epi16(q, a);
    const __m256i a32 = _mm256_slli_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), a), 5);
    return _mm256_madd_epi16(_mm256_sub_epi16(qa, a32), s);
  }
};

}  // namespace

void q4_k_q8_1_gemm__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
                          int64_t n, float* y, int64_t ldy) {
  kquant_x86::gemm<DotAvx2, quant::BlockQ4_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q5_k_q8_1_gemm__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
                          int64_t n, float* y, int64_t ldy) {
  kquant_x86::gemm<DotAvx2, quant::BlockQ5_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q6_k_q8_0_gemm__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
                          int64_t n, float* y, int64_t ldy) {
  kquant_x86::gemm<DotAvx2, quant::BlockQ6_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
