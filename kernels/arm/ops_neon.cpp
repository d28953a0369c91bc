// NEON norms, RoPE, activations, element-wise ops and conversions (aarch64
// baseline).  The same algorithms and error bounds as kernels/x86/ops_avx2.cpp
// on 4 lanes; tails through a padded stack copy, nothing read past n.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
#include <arm_neon.h>

#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/arm/ops_neon.h"
#include "kernels/arm/vec_neon.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

using neon::exp_f32;
using neon::load_tail;
using neon::store_tail;

float sum_squares(const float* x, int64_t n) {
  float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0), a2 = vdupq_n_f32(0), a3 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const float32x4_t v0 = vld1q_f32(x + i), v1 = vld1q_f32(x + i + 4);
    const float32x4_t v2 = vld1q_f32(x + i + 8), v3 = vld1q_f32(x + i + 12);
    a0 = vfmaq_f32(a0, v0, v0);
    a1 = vfmaq_f32(a1, v1, v1);
    a2 = vfmaq_f32(a2, v2, v2);
    a3 = vfmaq_f32(a3, v3, v3);
  }
  for (; i < n; i += 4) {
    const float32x4_t v = n - i >= 4 ? vld1q_f32(x + i) : load_tail(x + i, n - i);
    a0 = vfmaq_f32(a0, v, v);
  }
  return vaddvq_f32(vaddq_f32(vaddq_f32(a0, a1), vaddq_f32(a2, a3)));
}

template <typename F>
void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, f(vld1q_f32(x + i)));
  if (i < n) store_tail(y + i, f(load_tail(x + i, n - i)), n - i);
}
template <typename F>
void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, f(vld1q_f32(a + i), vld1q_f32(b + i)));
  if (i < n) store_tail(y + i, f(load_tail(a + i, n - i), load_tail(b + i, n - i)), n - i);
}

// y = x * s * w
void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  map2(x, w, y, n, [s](float32x4_t a, float32x4_t b) { return vmulq_f32(vmulq_n_f32(a, s), b); });
}

float rms_inv(float ss, int64_t n, float eps) {
  return (float)(1.0 / std::sqrt((double)ss / (double)n + eps));
}

// x += delta; returns the sum of squares (squares) or the sum of x.
float add_in_place(float* x, const float* delta, int64_t n, bool squares) {
  float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
  const float32x4_t one = vdupq_n_f32(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t v0 = vaddq_f32(vld1q_f32(x + i), vld1q_f32(delta + i));
    const float32x4_t v1 = vaddq_f32(vld1q_f32(x + i + 4), vld1q_f32(delta + i + 4));
    vst1q_f32(x + i, v0);
    vst1q_f32(x + i + 4, v1);
    a0 = vfmaq_f32(a0, v0, squares ? v0 : one);
    a1 = vfmaq_f32(a1, v1, squares ? v1 : one);
  }
  for (; i < n; i += 4) {
    const int64_t m = n - i < 4 ? n - i : 4;
    const float32x4_t v = vaddq_f32(load_tail(x + i, m), load_tail(delta + i, m));
    store_tail(x + i, v, m);
    a0 = vfmaq_f32(a0, v, squares ? v : one);  // padded lanes are 0
  }
  return vaddvq_f32(vaddq_f32(a0, a1));
}

float sum_f32(const float* x, int64_t n) {
  float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 = vaddq_f32(a0, vld1q_f32(x + i));
    a1 = vaddq_f32(a1, vld1q_f32(x + i + 4));
  }
  for (; i < n; i += 4) a0 = vaddq_f32(a0, load_tail(x + i, n - i < 4 ? n - i : 4));
  return vaddvq_f32(vaddq_f32(a0, a1));
}

void layernorm_from_mean(const float* x, float mean, const float* w, const float* b, float* y,
                         int64_t n, float eps) {
  const float32x4_t vm = vdupq_n_f32(mean);
  float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const float32x4_t d0 = vsubq_f32(vld1q_f32(x + i), vm);
    const float32x4_t d1 = vsubq_f32(vld1q_f32(x + i + 4), vm);
    a0 = vfmaq_f32(a0, d0, d0);
    a1 = vfmaq_f32(a1, d1, d1);
  }
  for (; i < n; ++i) {
    const float d = x[i] - mean;
    a1 = vsetq_lane_f32(vgetq_lane_f32(a1, 0) + d * d, a1, 0);
  }
  const float var = vaddvq_f32(vaddq_f32(a0, a1)) / (float)n;
  const float inv = (float)(1.0 / std::sqrt((double)var + eps));
  for (i = 0; i < n; i += 4) {
    const int64_t m = n - i < 4 ? n - i : 4;
    const float32x4_t d = vmulq_n_f32(vsubq_f32(load_tail(x + i, m), vm), inv);
    store_tail(y + i, vfmaq_f32(load_tail(b + i, m), d, load_tail(w + i, m)), m);
  }
}

inline float32x4_t silu_v(float32x4_t x) {
  return vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.0f), exp_f32(vnegq_f32(x))));
}

}  // namespace

void rmsnorm_f32__neon(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n <= 0) return;
  scale_mul(x, rms_inv(sum_squares(x, n), n, eps), w, y, n);
}

void add_rmsnorm_f32__neon(float* x, const float* delta, const float* w, float* y, int64_t n,
                           float eps) {
  if (n <= 0) return;
  const float ss = add_in_place(x, delta, n, true);
  scale_mul(x, rms_inv(ss, n, eps), w, y, n);
}

void layernorm_f32__neon(const float* x, const float* w, const float* b, float* y, int64_t n,
                         float eps) {
  if (n <= 0) return;
  layernorm_from_mean(x, sum_f32(x, n) / (float)n, w, b, y, n, eps);
}

void add_layernorm_f32__neon(float* x, const float* delta, const float* w, const float* b,
                             float* y, int64_t n, float eps) {
  if (n <= 0) return;
  const float sum = add_in_place(x, delta, n, false);
  layernorm_from_mean(x, sum / (float)n, w, b, y, n, eps);
}

void rope_f32__neon(float* x, int n_heads, int head_dim, int n_rot, const float* cos_t,
                    const float* sin_t, bool adjacent) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + (int64_t)h * head_dim;
    int i = 0;
    if (adjacent) {
      // vld2 splits 4 pairs into their even and odd elements.
      for (; i + 4 <= half; i += 4) {
        const float32x4_t c = vld1q_f32(cos_t + i), s = vld1q_f32(sin_t + i);
        const float32x4x2_t v = vld2q_f32(xh + 2 * i);
        float32x4x2_t o;
        o.val[0] = vfmsq_f32(vmulq_f32(v.val[0], c), v.val[1], s);
        o.val[1] = vfmaq_f32(vmulq_f32(v.val[0], s), v.val[1], c);
        vst2q_f32(xh + 2 * i, o);
      }
      for (; i < half; ++i) {
        const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        xh[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    } else {
      for (; i + 4 <= half; i += 4) {
        const float32x4_t c = vld1q_f32(cos_t + i), s = vld1q_f32(sin_t + i);
        const float32x4_t a = vld1q_f32(xh + i), b = vld1q_f32(xh + i + half);
        vst1q_f32(xh + i, vfmsq_f32(vmulq_f32(a, c), b, s));
        vst1q_f32(xh + i + half, vfmaq_f32(vmulq_f32(a, s), b, c));
      }
      for (; i < half; ++i) {
        const float x0 = xh[i], x1 = xh[i + half];
        xh[i] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

void softmax_f32__neon(float* x, int64_t n) {
  if (n <= 0) return;
  float32x4_t mx = vdupq_n_f32(-INFINITY);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) mx = vmaxq_f32(mx, vld1q_f32(x + i));
  float m = vmaxvq_f32(mx);
  for (; i < n; ++i) m = x[i] > m ? x[i] : m;
  const float32x4_t vmax = vdupq_n_f32(m);
  float32x4_t sum = vdupq_n_f32(0);
  for (i = 0; i + 4 <= n; i += 4) {
    const float32x4_t e = exp_f32(vsubq_f32(vld1q_f32(x + i), vmax));
    vst1q_f32(x + i, e);
    sum = vaddq_f32(sum, e);
  }
  float s = vaddvq_f32(sum);
  if (i < n) {
    float t[4] = {0, 0, 0, 0};
    std::memcpy(t, x + i, (size_t)(n - i) * 4);
    float e[4];
    vst1q_f32(e, exp_f32(vsubq_f32(vld1q_f32(t), vmax)));
    for (int64_t j = 0; j < n - i; ++j) s += e[j];
    std::memcpy(x + i, e, (size_t)(n - i) * 4);
  }
  const float inv = 1.0f / s;
  map1(x, x, n, [inv](float32x4_t v) { return vmulq_n_f32(v, inv); });
}

void swiglu_f32__neon(const float* gate, const float* up, float* out, int64_t n) {
  map2(gate, up, out, n, [](float32x4_t g, float32x4_t u) { return vmulq_f32(silu_v(g), u); });
}

void silu_f32__neon(const float* x, float* y, int64_t n) { map1(x, y, n, silu_v); }

void gelu_f32__neon(const float* x, float* y, int64_t n) {
  // x / (1 + exp(-2u)), u = sqrt(2/pi) x (1 + 0.044715 x^2)
  map1(x, y, n, [](float32x4_t v) {
    const float32x4_t inner = vfmaq_n_f32(vdupq_n_f32(1.0f), vmulq_f32(v, v), 0.044715f);
    const float32x4_t m2u = vmulq_n_f32(vmulq_f32(v, inner), -2.0f * 0.7978845608028654f);
    return vdivq_f32(v, vaddq_f32(vdupq_n_f32(1.0f), exp_f32(m2u)));
  });
}

void gelu_erf_f32__neon(const float* x, float* y, int64_t n) {
  // Abramowitz & Stegun 7.1.26 for erfc(|x|/sqrt 2), as the AVX2 version.
  map1(x, y, n, [](float32x4_t v) {
    const float32x4_t z = vmulq_n_f32(vabsq_f32(v), 0.70710678118654752f);
    const float32x4_t t =
        vdivq_f32(vdupq_n_f32(1.0f), vfmaq_n_f32(vdupq_n_f32(1.0f), z, 0.3275911f));
    float32x4_t p = vdupq_n_f32(1.061405429f);
    p = vfmaq_f32(vdupq_n_f32(-1.453152027f), p, t);
    p = vfmaq_f32(vdupq_n_f32(1.421413741f), p, t);
    p = vfmaq_f32(vdupq_n_f32(-0.284496736f), p, t);
    p = vfmaq_f32(vdupq_n_f32(0.254829592f), p, t);
    p = vmulq_f32(p, t);
    const float32x4_t e = exp_f32(vnegq_f32(vmulq_f32(z, z)));
    const float32x4_t half_erfc = vmulq_n_f32(vmulq_f32(p, e), 0.5f);
    const uint32x4_t pos = vcgeq_f32(v, vdupq_n_f32(0.0f));
    return vmulq_f32(v, vbslq_f32(pos, vsubq_f32(vdupq_n_f32(1.0f), half_erfc), half_erfc));
  });
}

void add_f32__neon(const float* a, const float* b, float* y, int64_t n) {
  map2(a, b, y, n, [](float32x4_t u, float32x4_t v) { return vaddq_f32(u, v); });
}

void mul_f32__neon(const float* a, const float* b, float* y, int64_t n) {
  map2(a, b, y, n, [](float32x4_t u, float32x4_t v) { return vmulq_f32(u, v); });
}

void axpy_f32__neon(float a, const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
    vst1q_f32(y + i + 4, vfmaq_n_f32(vld1q_f32(y + i + 4), vld1q_f32(x + i + 4), a));
  }
  for (; i + 4 <= n; i += 4) vst1q_f32(y + i, vfmaq_n_f32(vld1q_f32(y + i), vld1q_f32(x + i), a));
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// As the AVX2 kernel: per 32-column block, eight accumulators over every k.
void lora_add_q8_0__neon(const void* b, int32_t rank, int64_t w, const float* t, int64_t ldt,
                         int32_t n, float* y, int64_t ldy) {
  const auto* blocks = static_cast<const quant::BlockQ8_0*>(b);
  const int64_t nb = w / quant::kBlock;
  for (int32_t j = 0; j < n; ++j) {
    const float* tj = t + j * ldt;
    for (int64_t bi = 0; bi < nb; ++bi) {
      float* out = y + j * ldy + bi * quant::kBlock;
      float32x4_t acc[8];
      for (int i = 0; i < 8; ++i) acc[i] = vld1q_f32(out + 4 * i);
      for (int32_t k = 0; k < rank; ++k) {
        const quant::BlockQ8_0& blk = blocks[(size_t)k * (size_t)nb + (size_t)bi];
        const float c = tj[k] * fp16_to_fp32(blk.d);
        const int8x16_t q0 = vld1q_s8(blk.q), q1 = vld1q_s8(blk.q + 16);
        const int16x8_t h[4] = {vmovl_s8(vget_low_s8(q0)), vmovl_s8(vget_high_s8(q0)),
                                vmovl_s8(vget_low_s8(q1)), vmovl_s8(vget_high_s8(q1))};
        for (int i = 0; i < 4; ++i) {
          acc[2 * i] = vfmaq_n_f32(acc[2 * i], vcvtq_f32_s32(vmovl_s16(vget_low_s16(h[i]))), c);
          acc[2 * i + 1] = vfmaq_n_f32(acc[2 * i + 1], vcvtq_f32_s32(vmovl_s16(vget_high_s16(h[i]))), c);
        }
      }
      for (int i = 0; i < 8; ++i) vst1q_f32(out + 4 * i, acc[i]);
    }
  }
}

void fp32_to_fp16__neon(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    // fcvtn keeps NaN payload bits that base/fp16.h drops: NaNs go the scalar way.
    if (vminvq_u32(vceqq_f32(v, v)) == 0) {
      for (int j = 0; j < 4; ++j) y[i + j] = fp32_to_fp16(x[i + j]);
      continue;
    }
    vst1_u16(y + i, vreinterpret_u16_f16(vcvt_f16_f32(v)));
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void fp16_to_fp32__neon(const uint16_t* x, float* y, int64_t n) {
  const uint16x4_t exp_mask = vdup_n_u16(0x7c00);
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint16x4_t h = vld1_u16(x + i);
    // fcvtl quiets signalling NaNs, base/fp16.h does not: inf/NaN go the scalar way.
    if (vmaxv_u16(vceq_u16(vand_u16(h, exp_mask), exp_mask))) {
      for (int j = 0; j < 4; ++j) y[i + j] = fp16_to_fp32(x[i + j]);
      continue;
    }
    vst1q_f32(y + i, vcvt_f32_f16(vreinterpret_f16_u16(h)));
  }
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

namespace detail {

const OpsTable& ops_table_neon() {
  static const OpsTable table = [] {
    OpsTable t{};
    LILIMS_OPS_TABLE_FILL(t, neon)
    t.isa = Isa::neon;
    t.name = "neon";
    return t;
  }();
  return table;
}

}  // namespace detail
}  // namespace lilims::kernels
#endif  // LILIMS_HAVE_NEON
