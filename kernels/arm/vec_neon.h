// Vector helpers shared by the NEON ops files (aarch64 baseline, 4 x f32).
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace lilims::kernels::neon {

// Tails (n < 4) go through a zero-padded stack copy: nothing is read or
// written past n.
inline float32x4_t load_tail(const float* p, int64_t n) {
  float t[4] = {0, 0, 0, 0};
  std::memcpy(t, p, (size_t)n * 4);
  return vld1q_f32(t);
}
inline void store_tail(float* p, float32x4_t v, int64_t n) {
  float t[4];
  vst1q_f32(t, v);
  std::memcpy(p, t, (size_t)n * 4);
}

// exp(x): the algorithm of the AVX2 version (kernels/x86/vec_avx2.h):
// x = n ln2 + r, |r| <= ln2/2, Taylor to r^7, 2^n in the exponent field;
// 0 below -87.3, clamped at 88.3.
inline float32x4_t exp_f32(float32x4_t x) {
  const float32x4_t lo = vdupq_n_f32(-87.3f);
  const uint32x4_t underflow = vcltq_f32(x, lo);
  const float32x4_t xc = vminq_f32(vmaxq_f32(x, lo), vdupq_n_f32(88.3f));
  const float32x4_t n = vrndnq_f32(vmulq_n_f32(xc, 1.44269504088896341f));
  float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(0.693359375f));
  r = vfmsq_f32(r, n, vdupq_n_f32(-2.12194440e-4f));
  float32x4_t p = vdupq_n_f32(1.0f / 5040);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 720), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
  p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
  const int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
  const float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
  return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), underflow));
}

}  // namespace lilims::kernels::neon
