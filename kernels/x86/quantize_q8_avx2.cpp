// Q8_0 / Q8_1 rows (activations, KV-cache rows), AVX2.  Bit-identical to
// the one scalar rule (quant::quantize_block_q8): the same max (exact in any
// order), the same scalar d = amax / 127 and id = 1 / d, the same products
// x * id, rounded half away from zero like roundf.  cvtps2dq would round
// half to even, so the rounding is built from exact steps: t = trunc(s),
// s - t is exact, and t moves one away from zero where |s - t| >= 0.5.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include <immintrin.h>

#include <cstring>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/x86/ops_avx2.h"

namespace lilims::kernels {
namespace {

// Quantizes 32 floats into q; returns d, *sum = sum of q.
inline float block(const float* x, int8_t* q, int* sum) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 m = _mm256_setzero_ps();
  for (int i = 0; i < 4; ++i) {
    v[i] = _mm256_loadu_ps(x + 8 * i);
    m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const __m256 idv = _mm256_set1_ps(id);
  const __m256 half = _mm256_set1_ps(0.5f), one = _mm256_set1_ps(1.0f);
  __m256i i[4];
  for (int k = 0; k < 4; ++k) {
    const __m256 s = _mm256_mul_ps(v[k], idv);
    const __m256 t = _mm256_round_ps(s, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 up = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_sub_ps(s, t)), half, _CMP_GE_OQ);
    const __m256 away = _mm256_or_ps(_mm256_and_ps(s, sign), one);  // +-1 with the sign of s
    i[k] = _mm256_cvttps_epi32(_mm256_add_ps(t, _mm256_and_ps(up, away)));
  }
  // Sum of q (exact int32).
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(i[0], i[1]), _mm256_add_epi32(i[2], i[3]));
  __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
  s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
  *sum = _mm_cvtsi128_si32(s4);
  // int32 -> int8 (values within [-127, 127]: no saturation); packs work per
  // 128-bit lane, the permute restores element order.
  const __m256i p16a = _mm256_packs_epi32(i[0], i[1]);
  const __m256i p16b = _mm256_packs_epi32(i[2], i[3]);
  const __m256i p8 = _mm256_packs_epi16(p16a, p16b);
  const __m256i ordered = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  return d;
}

}  // namespace

void quantize_row_q8_0__avx2(const float* x, void* y, int64_t k) {
  uint8_t* out = static_cast<uint8_t*>(y);
  for (int64_t b = 0; b < k / 32; ++b, out += 34) {
    int sum;
    const float d = block(x + 32 * b, reinterpret_cast<int8_t*>(out + 2), &sum);
    const uint16_t h = fp32_to_fp16(d);
    std::memcpy(out, &h, 2);
  }
}

void quantize_row_q8_1__avx2(const float* x, void* y, int64_t k) {
  uint8_t* out = static_cast<uint8_t*>(y);
  for (int64_t b = 0; b < k / 32; ++b, out += 36) {
    int sum;
    const float d = block(x + 32 * b, reinterpret_cast<int8_t*>(out + 4), &sum);
    const uint16_t h[2] = {fp32_to_fp16(d), fp32_to_fp16(d * (float)sum)};
    std::memcpy(out, h, 4);
  }
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
