// Q4_K, Q5_K x Q8_1 and Q6_K x Q8_0 matmul, AVX-512 VNNI on 256-bit vectors
// (kernels/x86/matmul_kquant_x86.h): a 32-element block's dot is one
// vpdpbusd (unsigned weight quants x signed activations, 4 products per
// int32 lane).  Q6_K's - 32 offset is a second vpdpbusd of 32s with the
// activations, and its two 16-scales a vpmulld of the lanes (lanes 0-3 the
// first 16 elements, 4-7 the second).  Built with -mavx512f -mavx512bw
// -mavx512vl -mavx512vnni (and the AVX2 flags).
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX512VNNI)  // empty on other architectures
LILIMS_TARGET_AVX512VNNI_BEGIN
#include "kernels/x86/matmul_kquant_x86.h"

namespace lilims::kernels {
namespace {

struct DotVnni {
  using Q6Scale = __m256i;  // int32 [scale_2j x 4 | scale_2j+1 x 4]
  static Q6Scale q6_scale(int8_t s0, int8_t s1) {
    return _mm256_setr_m128i(_mm_set1_epi32(s0), _mm_set1_epi32(s1));
  }
  static __m256i dot(__m256i q, __m256i a) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, a); }
  static __m256i dot_q6(__m256i q, __m256i a, Q6Scale s) {
    const __m256i qa = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, a);
    const __m256i a32 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(32), a);
    return _mm256_mullo_epi32(_mm256_sub_epi32(qa, a32), s);
  }
};

}  // namespace

void q4_k_q8_1_gemm__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                size_t x_stride, int64_t n, float* y, int64_t ldy) {
  kquant_x86::gemm<DotVnni, quant::BlockQ4_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q5_k_q8_1_gemm__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                size_t x_stride, int64_t n, float* y, int64_t ldy) {
  kquant_x86::gemm<DotVnni, quant::BlockQ5_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q6_k_q8_0_gemm__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                size_t x_stride, int64_t n, float* y, int64_t ldy) {
  kquant_x86::gemm<DotVnni, quant::BlockQ6_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX512VNNI_END
#endif  // LILIMS_HAVE_AVX512VNNI
