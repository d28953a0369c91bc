// Q8_0 / Q8_1 rows (activations, KV-cache rows), baseline NEON.
// Bit-identical to the one scalar rule (quant::quantize_block_q8): same max,
// same scalar d and 1/d, same products, and FCVTAS rounds half away from
// zero exactly like roundf.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
#include <arm_neon.h>

#include <cstring>

#include "base/fp16.h"
#include "kernels/arm/ops_neon.h"
#include "kernels/matmul.h"

namespace lilims::kernels {
namespace {

inline float block(const float* x, int8_t* q, int* sum) {
  float32x4_t v[8];
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int i = 0; i < 8; ++i) {
    v[i] = vld1q_f32(x + 4 * i);
    m = vmaxq_f32(m, vabsq_f32(v[i]));
  }
  const float amax = vmaxvq_f32(m);
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int32x4_t s = vdupq_n_s32(0);
  int16x8_t h[4];
  for (int i = 0; i < 4; ++i) {
    const int32x4_t a = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i], id));
    const int32x4_t b = vcvtaq_s32_f32(vmulq_n_f32(v[2 * i + 1], id));
    s = vaddq_s32(s, vaddq_s32(a, b));
    h[i] = vcombine_s16(vqmovn_s32(a), vqmovn_s32(b));
  }
  vst1q_s8(q, vcombine_s8(vqmovn_s16(h[0]), vqmovn_s16(h[1])));
  vst1q_s8(q + 16, vcombine_s8(vqmovn_s16(h[2]), vqmovn_s16(h[3])));
  *sum = vaddvq_s32(s);
  return d;
}

}  // namespace

void quantize_row_q8_0__neon(const float* x, void* y, int64_t k) {
  uint8_t* out = static_cast<uint8_t*>(y);
  for (int64_t b = 0; b < k / 32; ++b, out += 34) {
    int sum;
    const float d = block(x + 32 * b, reinterpret_cast<int8_t*>(out + 2), &sum);
    const uint16_t hd = fp32_to_fp16(d);
    std::memcpy(out, &hd, 2);
  }
}

void quantize_row_q8_1__neon(const float* x, void* y, int64_t k) {
  uint8_t* out = static_cast<uint8_t*>(y);
  for (int64_t b = 0; b < k / 32; ++b, out += 36) {
    int sum;
    const float d = block(x + 32 * b, reinterpret_cast<int8_t*>(out + 4), &sum);
    const uint16_t hs[2] = {fp32_to_fp16(d), fp32_to_fp16(d * (float)sum)};
    std::memcpy(out, hs, 4);
  }
}

}  // namespace lilims::kernels
#endif  // LILIMS_HAVE_NEON
