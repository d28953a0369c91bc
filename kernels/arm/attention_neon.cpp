// Fused attention over an F16 / Q8_0 / F32 KV cache (and staged F32 rows),
// NEON (aarch64 baseline): the micro-kernel of the shared driver
// (kernels/attention_driver.h, which describes the algorithm).
//
// Row tiles: scores in 2 rows x 4 keys register tiles, PV per row.  Decode
// from 3 heads of a group: the heads are the lanes of NV = 1 or 2 vectors
// of 4, Q transposed into qt (d, 8); the scores of 4 keys by lane FMAs (K
// elements used from registers), PV per head with the weights read at
// stride 8.  No direct F16 path: the f32 pass is kept.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/arm/ops_neon.h"
#include "kernels/arm/vec_neon.h"
#include "kernels/attention_driver.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

inline float32x4_t hsum4(float32x4_t a, float32x4_t b, float32x4_t c, float32x4_t d) {
  return vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d));
}

template <int D>
void scores_2(const float* q0, const float* q1, const float* kb, int nk4, int d_rt, float* s0,
              float* s1) {
  const int d = D ? D : d_rt;
  for (int j = 0; j < nk4; j += 4) {
    const float* k0 = kb + (int64_t)j * d;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0), a2 = vdupq_n_f32(0),
                a3 = vdupq_n_f32(0);
    float32x4_t b0 = vdupq_n_f32(0), b1 = vdupq_n_f32(0), b2 = vdupq_n_f32(0),
                b3 = vdupq_n_f32(0);
    for (int c = 0; c < d; c += 4) {
      const float32x4_t qa = vld1q_f32(q0 + c), qb = vld1q_f32(q1 + c);
      const float32x4_t k0v = vld1q_f32(k0 + c), k1v = vld1q_f32(k0 + d + c);
      const float32x4_t k2v = vld1q_f32(k0 + 2 * d + c), k3v = vld1q_f32(k0 + 3 * d + c);
      a0 = vfmaq_f32(a0, qa, k0v);
      a1 = vfmaq_f32(a1, qa, k1v);
      a2 = vfmaq_f32(a2, qa, k2v);
      a3 = vfmaq_f32(a3, qa, k3v);
      b0 = vfmaq_f32(b0, qb, k0v);
      b1 = vfmaq_f32(b1, qb, k1v);
      b2 = vfmaq_f32(b2, qb, k2v);
      b3 = vfmaq_f32(b3, qb, k3v);
    }
    vst1q_f32(s0 + j, hsum4(a0, a1, a2, a3));
    vst1q_f32(s1 + j, hsum4(b0, b1, b2, b3));
  }
}

template <int D>
void scores_1(const float* q, const float* kb, int nk4, int d_rt, float* s) {
  const int d = D ? D : d_rt;
  for (int j = 0; j < nk4; j += 4) {
    const float* k0 = kb + (int64_t)j * d;
    float32x4_t a0 = vdupq_n_f32(0), a1 = vdupq_n_f32(0), a2 = vdupq_n_f32(0),
                a3 = vdupq_n_f32(0);
    for (int c = 0; c < d; c += 4) {
      const float32x4_t qv = vld1q_f32(q + c);
      a0 = vfmaq_f32(a0, qv, vld1q_f32(k0 + c));
      a1 = vfmaq_f32(a1, qv, vld1q_f32(k0 + d + c));
      a2 = vfmaq_f32(a2, qv, vld1q_f32(k0 + 2 * d + c));
      a3 = vfmaq_f32(a3, qv, vld1q_f32(k0 + 3 * d + c));
    }
    vst1q_f32(s + j, hsum4(a0, a1, a2, a3));
  }
}

// acc[0, NV*4) = acc * corr + sum_{j < nk} p[j] V[j][0, NV*4)
template <int NV, int PS = 1>
inline void pv_chunk(float* acc, float corr, const float* p, const float* v, int nk, int d) {
  float32x4_t r[NV];
  for (int k = 0; k < NV; ++k) r[k] = vmulq_n_f32(vld1q_f32(acc + 4 * k), corr);
  for (int j = 0; j < nk; ++j, v += d) {
    const float pj = p[j * PS];
    for (int k = 0; k < NV; ++k) r[k] = vfmaq_n_f32(r[k], vld1q_f32(v + 4 * k), pj);
  }
  for (int k = 0; k < NV; ++k) vst1q_f32(acc + 4 * k, r[k]);
}

template <int D, int PS = 1>
void pv_row(float* acc, float corr, const float* p, const float* vb, int nk, int d_rt) {
  const int d = D ? D : d_rt;
  int c = 0;
  for (; c + 64 <= d; c += 64) pv_chunk<16, PS>(acc + c, corr, p, vb + c, nk, d);
  if (c + 32 <= d) {
    pv_chunk<8, PS>(acc + c, corr, p, vb + c, nk, d);
    c += 32;
  }
  if (c + 16 <= d) {
    pv_chunk<4, PS>(acc + c, corr, p, vb + c, nk, d);
    c += 16;
  }
  if (c + 8 <= d) {
    pv_chunk<2, PS>(acc + c, corr, p, vb + c, nk, d);
    c += 8;
  }
  if (c + 4 <= d) pv_chunk<1, PS>(acc + c, corr, p, vb + c, nk, d);
}

struct Neon {
  static void prefetch(const uint8_t* p) { __builtin_prefetch(p); }

  static void convert_rows(quant::Type t, const uint8_t* src, int64_t stride, int n, int d,
                           float* dst) {
    if (t == quant::Type::F16) {
      for (int j = 0; j < n; ++j, src += stride, dst += d) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
        for (int c = 0; c < d; c += 8) {
          const float16x8_t v = vreinterpretq_f16_u16(vld1q_u16(h + c));
          vst1q_f32(dst + c, vcvt_f32_f16(vget_low_f16(v)));
          vst1q_f32(dst + c + 4, vcvt_high_f32_f16(v));
        }
      }
      return;
    }
    for (int j = 0; j < n; ++j, src += stride, dst += d) {  // Q8_0
      const quant::BlockQ8_0* b = reinterpret_cast<const quant::BlockQ8_0*>(src);
      for (int blk = 0; blk < d / quant::kBlock; ++blk) {
        const float s = vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(b[blk].d))), 0);
        for (int k = 0; k < 2; ++k) {
          const int8x16_t q = vld1q_s8(b[blk].q + 16 * k);
          const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_s8(vget_high_s8(q));
          float* o = dst + blk * quant::kBlock + 16 * k;
          vst1q_f32(o, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s));
          vst1q_f32(o + 4, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), s));
          vst1q_f32(o + 8, vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s));
          vst1q_f32(o + 12, vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), s));
        }
      }
    }
  }

  template <int D>
  static void scores_1(const float* q, const float* kb, int nk4, int d, float* s) {
    kernels::scores_1<D>(q, kb, nk4, d, s);
  }
  template <int D>
  static void scores_2(const float* q0, const float* q1, const float* kb, int nk4, int d,
                       float* s0, float* s1) {
    kernels::scores_2<D>(q0, q1, kb, nk4, d, s0, s1);
  }

  static float mask_exp(float* sr, int nk4, int jlo, int jhi, float scale, float m_old,
                        float* sum_out) {
    float mx = -INFINITY;
    for (int j = 0; j < nk4; ++j) {
      sr[j] = j < jlo || j > jhi ? -INFINITY : sr[j] * scale;
      mx = std::max(mx, sr[j]);
    }
    const float m_new = std::max(m_old, mx);
    float32x4_t sum = vdupq_n_f32(0);
    for (int j = 0; j < nk4; j += 4) {
      const float32x4_t p = neon::exp_f32(vsubq_f32(vld1q_f32(sr + j), vdupq_n_f32(m_new)));
      vst1q_f32(sr + j, p);
      sum = vaddq_f32(sum, p);
    }
    *sum_out = vaddvq_f32(sum);
    return m_new;
  }

  template <int D, int PS = 1>
  static void pv_row(float* acc, float corr, const float* p, const float* vb, int nk, int d) {
    kernels::pv_row<D, PS>(acc, corr, p, vb, nk, d);
  }
  // Two rows one after the other: the 32 NEON registers are already full
  // with one row's 64-dim chunk.
  template <int D, int PS = 1>
  static void pv_rows2(float* acc_a, float* acc_b, float corr_a, float corr_b, const float* pa,
                       const float* pb, const float* vb, int nk, int d) {
    kernels::pv_row<D, PS>(acc_a, corr_a, pa, vb, nk, d);
    kernels::pv_row<D, PS>(acc_b, corr_b, pb, vb, nk, d);
  }

  static void store_scaled(float* out, const float* acc, float inv, int d) {
    for (int c = 0; c < d; c += 4) vst1q_f32(out + c, vmulq_n_f32(vld1q_f32(acc + c), inv));
  }

  // --- decode: the heads of a group as the lanes of NH / 4 vectors ---
  static constexpr bool has_direct = false;
  static bool decode_direct(quant::Type) { return false; }
  static int decode_min_heads(quant::Type) { return 3; }
  static constexpr int decode_key_tile = 4;
  template <class F>
  static void decode_dispatch(int nh, quant::Type, F&& f) {
    if (nh > 4) return f(std::integral_constant<int, 8>{});
    return f(std::integral_constant<int, 4>{});
  }

  template <int NH>
  static void decode_load_q(const float* q, int nh, int d, bool, float* qt) {
    for (int c = 0; c < d; ++c) {
      for (int h = 0; h < 8; ++h) qt[c * 8 + h] = h < nh ? q[(int64_t)h * d + c] : 0.0f;
    }
  }

  template <int D, int NH>
  static void decode_scores(const float* qt, const float* kv, int nk, int d_rt, float scale,
                            float* s) {
    constexpr int NV = NH / 4;
    const int d = D ? D : d_rt;
    for (int j = 0; j < nk; j += 4) {
      const float* k0 = kv + (int64_t)j * d;
      float32x4_t r[4][NV];
      for (int t = 0; t < 4; ++t) {
        for (int v = 0; v < NV; ++v) r[t][v] = vdupq_n_f32(0);
      }
      for (int c = 0; c < d; c += 4) {
        float32x4_t kt[4], q4[4][NV];
        for (int t = 0; t < 4; ++t) kt[t] = vld1q_f32(k0 + (int64_t)t * d + c);
        for (int i = 0; i < 4; ++i) {
          for (int v = 0; v < NV; ++v) q4[i][v] = vld1q_f32(qt + (c + i) * 8 + 4 * v);
        }
        for (int t = 0; t < 4; ++t) {
          for (int v = 0; v < NV; ++v) {
            r[t][v] = vfmaq_laneq_f32(r[t][v], q4[0][v], kt[t], 0);
            r[t][v] = vfmaq_laneq_f32(r[t][v], q4[1][v], kt[t], 1);
            r[t][v] = vfmaq_laneq_f32(r[t][v], q4[2][v], kt[t], 2);
            r[t][v] = vfmaq_laneq_f32(r[t][v], q4[3][v], kt[t], 3);
          }
        }
      }
      for (int t = 0; t < 4; ++t) {
        for (int v = 0; v < NV; ++v) {
          vst1q_f32(s + (j + t) * 8 + 4 * v, vmulq_n_f32(r[t][v], scale));
        }
      }
    }
  }

  template <int NH>
  static void decode_softmax(float* m_io, float* l_io, float* s, int nk, float* corr_out) {
    constexpr int NV = NH / 4;
    for (int h = NV * 4; h < 8; ++h) corr_out[h] = 0.0f;
    for (int v = 0; v < NV; ++v) {
      float32x4_t mx = vdupq_n_f32(-INFINITY);
      for (int j = 0; j < nk; ++j) mx = vmaxq_f32(mx, vld1q_f32(s + j * 8 + 4 * v));
      const float32x4_t m = vld1q_f32(m_io + 4 * v);
      const float32x4_t m_new = vmaxq_f32(m, mx);
      const float32x4_t cv = neon::exp_f32(vsubq_f32(m, m_new));
      float32x4_t sum = vdupq_n_f32(0);
      for (int j = 0; j < nk; ++j) {
        const float32x4_t p = neon::exp_f32(vsubq_f32(vld1q_f32(s + j * 8 + 4 * v), m_new));
        vst1q_f32(s + j * 8 + 4 * v, p);
        sum = vaddq_f32(sum, p);
      }
      vst1q_f32(l_io + 4 * v, vfmaq_f32(sum, vld1q_f32(l_io + 4 * v), cv));
      vst1q_f32(m_io + 4 * v, m_new);
      vst1q_f32(corr_out + 4 * v, cv);
    }
  }

  template <int D>
  static void decode_pv(float* acc, const float* corr, const float* s, const float* kv, int nk,
                        int nh, int d) {
    for (int h = 0; h < nh; ++h) {
      kernels::pv_row<D, 8>(acc + (int64_t)h * d, corr[h], s + h, kv, nk, d);
    }
  }
};

}  // namespace

void attention__neon(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  attn::Driver<Neon>::attention(a, head_begin, head_end, scratch);
}

}  // namespace lilims::kernels
#endif  // LILIMS_HAVE_NEON
