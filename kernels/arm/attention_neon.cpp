// Fused attention over an F16 / Q8_0 / F32 KV cache, NEON (aarch64 baseline).
// The algorithm of kernels/x86/attention_avx2.cpp (see its header): tiles of
// up to kAttnRows (query, head) rows of one kv group walk the keys in blocks
// of kAttnKeys converted once to f32, online softmax per row.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/arm/ops_neon.h"
#include "kernels/arm/vec_neon.h"
#include "kernels/ref/attention_ref.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

using detail::kAttnKeys;
using detail::kAttnRows;
constexpr int kPrefetchBlocks = 3;  // how far ahead the cache rows are prefetched
constexpr int kDecodeMinHeads = 3;  // decode_group from this many heads of a group
// and head dims from this (tiny heads gain nothing from it; with them the
// stories260K test of prefill == step-by-step logits (1e-3) saw 1.05e-3 from
// the decode path's other summation order)
constexpr int kDecodeMinDim = 32;

void load_block(const AttentionArgs& a, const void* base, int64_t p0, int nk, int g, int d,
                float* dst) {
  const uint8_t* src = static_cast<const uint8_t*>(base) + p0 * a.kv_stride_bytes;
  switch (a.kv_type) {
    case quant::Type::F16:
      src += (int64_t)g * d * 2;
      for (int j = 0; j < nk; ++j, src += a.kv_stride_bytes, dst += d) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
        for (int c = 0; c < d; c += 8) {
          const float16x8_t v = vreinterpretq_f16_u16(vld1q_u16(h + c));
          vst1q_f32(dst + c, vcvt_f32_f16(vget_low_f16(v)));
          vst1q_f32(dst + c + 4, vcvt_high_f32_f16(v));
        }
      }
      break;
    case quant::Type::Q8_0:
      src += (int64_t)g * (d / quant::kBlock) * sizeof(quant::BlockQ8_0);
      for (int j = 0; j < nk; ++j, src += a.kv_stride_bytes, dst += d) {
        const quant::BlockQ8_0* b = reinterpret_cast<const quant::BlockQ8_0*>(src);
        for (int blk = 0; blk < d / quant::kBlock; ++blk) {
          const float s = vgetq_lane_f32(
              vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(b[blk].d))), 0);
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
      break;
    default:  // F32
      src += (int64_t)g * d * 4;
      for (int j = 0; j < nk; ++j, src += a.kv_stride_bytes, dst += d) {
        std::memcpy(dst, src, (size_t)d * 4);
      }
  }
}

// Prefetches the cache rows [p0, p0 + nk) of kv head g: issued one block
// ahead, so the strided rows (one head's slice of each position) are in
// cache when load_block converts them instead of costing a miss each.
void prefetch_block(const AttentionArgs& a, const void* base, int64_t p0, int nk, int g, int d) {
  const int64_t head_bytes = (int64_t)quant::row_bytes(a.kv_type, d);
  const uint8_t* row = static_cast<const uint8_t*>(base) + p0 * a.kv_stride_bytes + g * head_bytes;
  for (int j = 0; j < nk; ++j, row += a.kv_stride_bytes) {
    for (int64_t o = 0; o < head_bytes; o += 64) __builtin_prefetch(row + o);
  }
}

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

struct Row {
  const float* q;
  float* out;
  int64_t lo, hi;
};

template <int D>
void attention_tile(const AttentionArgs& a, int g, const Row* rows, int nr, float* kv,
                    float* acc, float* s, float* m, float* l) {
  const int d = D ? D : a.head_dim;
  int64_t t_lo = rows[0].lo, t_hi = rows[0].hi;
  for (int r = 1; r < nr; ++r) {
    t_lo = std::min(t_lo, rows[r].lo);
    t_hi = std::max(t_hi, rows[r].hi);
  }
  for (int r = 0; r < nr; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    std::memset(acc + (int64_t)r * d, 0, (size_t)d * 4);
  }
  bool active[kAttnRows];
  float corr[kAttnRows];
  for (int64_t kb = t_lo; kb <= t_hi; kb += kAttnKeys) {
    const int nk = (int)std::min<int64_t>(kAttnKeys, t_hi - kb + 1);
    const int nk4 = (nk + 3) & ~3;
    // Prefetch kPrefetchBlocks ahead (the first blocks of a tile up front).
    for (int64_t pb = kb == t_lo ? kb : kb + kPrefetchBlocks * kAttnKeys;
         pb <= std::min<int64_t>(t_hi, kb + kPrefetchBlocks * kAttnKeys); pb += kAttnKeys) {
      const int nk_p = (int)std::min<int64_t>(kAttnKeys, t_hi - pb + 1);
      prefetch_block(a, a.k, pb, nk_p, g, d);
      prefetch_block(a, a.v, pb, nk_p, g, d);
    }
    load_block(a, a.k, kb, nk, g, d, kv);
    if (nk < nk4) std::memset(kv + (int64_t)nk * d, 0, (size_t)(nk4 - nk) * d * 4);
    for (int r = 0; r < nr; ++r) active[r] = rows[r].lo < kb + nk && rows[r].hi >= kb;
    for (int r = 0; r < nr;) {
      if (!active[r]) {
        ++r;
      } else if (r + 1 < nr && active[r + 1]) {
        scores_2<D>(rows[r].q, rows[r + 1].q, kv, nk4, d, s + r * kAttnKeys,
                    s + (r + 1) * kAttnKeys);
        r += 2;
      } else {
        scores_1<D>(rows[r].q, kv, nk4, d, s + r * kAttnKeys);
        r += 1;
      }
    }
    for (int r = 0; r < nr; ++r) {
      if (!active[r]) continue;
      float* sr = s + r * kAttnKeys;
      const int jlo = (int)std::max<int64_t>(rows[r].lo - kb, 0);
      const int jhi = (int)std::min<int64_t>(rows[r].hi - kb, nk - 1);
      float mx = -INFINITY;
      for (int j = 0; j < nk4; ++j) {
        sr[j] = j < jlo || j > jhi ? -INFINITY : sr[j] * a.scale;
        mx = std::max(mx, sr[j]);
      }
      const float m_new = std::max(m[r], mx);
      float32x4_t sum = vdupq_n_f32(0);
      for (int j = 0; j < nk4; j += 4) {
        const float32x4_t p = neon::exp_f32(vsubq_f32(vld1q_f32(sr + j), vdupq_n_f32(m_new)));
        vst1q_f32(sr + j, p);
        sum = vaddq_f32(sum, p);
      }
      corr[r] = m[r] == -INFINITY ? 0.0f : std::exp(m[r] - m_new);
      l[r] = l[r] * corr[r] + vaddvq_f32(sum);
      m[r] = m_new;
    }
    load_block(a, a.v, kb, nk, g, d, kv);
    for (int r = 0; r < nr; ++r) {
      if (active[r]) pv_row<D>(acc + (int64_t)r * d, corr[r], s + r * kAttnKeys, kv, nk, d);
    }
  }
  for (int r = 0; r < nr; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    for (int c = 0; c < d; c += 4) {
      vst1q_f32(rows[r].out + c, vmulq_n_f32(vld1q_f32(acc + (int64_t)r * d + c), inv));
    }
  }
}

// Decode (one query row) of nh heads (kDecodeMinHeads <= nh <= 8) of kv
// group g: as the AVX2 decode_group, the heads are vector lanes (NV = 1 or 2
// vectors of 4), Q transposed into qt (d, 8); scores of 4 keys by lane FMAs
// (K elements used from registers), softmax on the head vectors, PV per head
// with the weights read at stride 8.
template <int D, int NV>
void decode_group(const AttentionArgs& a, int g, int nh, const Row& row, float* kv, float* acc,
                  float* qt, float* s) {
  const int d = D ? D : a.head_dim;
  for (int c = 0; c < d; ++c) {
    for (int h = 0; h < 8; ++h) qt[c * 8 + h] = h < nh ? row.q[(int64_t)h * d + c] : 0.0f;
  }
  std::memset(acc, 0, (size_t)nh * d * 4);
  float32x4_t m[NV], l[NV];
  for (int v = 0; v < NV; ++v) {
    m[v] = vdupq_n_f32(-INFINITY);
    l[v] = vdupq_n_f32(0);
  }
  const int64_t pf_ahead = (int64_t)kPrefetchBlocks * kAttnKeys;
  for (int64_t kb = row.lo; kb <= row.hi; kb += kAttnKeys) {
    const int nk = (int)std::min<int64_t>(kAttnKeys, row.hi - kb + 1);
    const int nk4 = (nk + 3) & ~3;
    for (int64_t pb = kb == row.lo ? kb : kb + pf_ahead;
         pb <= std::min<int64_t>(row.hi, kb + pf_ahead); pb += kAttnKeys) {
      const int nk_p = (int)std::min<int64_t>(kAttnKeys, row.hi - pb + 1);
      prefetch_block(a, a.k, pb, nk_p, g, d);
      prefetch_block(a, a.v, pb, nk_p, g, d);
    }
    load_block(a, a.k, kb, nk, g, d, kv);
    if (nk < nk4) std::memset(kv + (int64_t)nk * d, 0, (size_t)(nk4 - nk) * d * 4);
    float32x4_t mx[NV];
    for (int v = 0; v < NV; ++v) mx[v] = vdupq_n_f32(-INFINITY);
    for (int j = 0; j < nk4; j += 4) {
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
          const float32x4_t x =
              j + t < nk ? vmulq_n_f32(r[t][v], a.scale) : vdupq_n_f32(-INFINITY);
          vst1q_f32(s + (j + t) * 8 + 4 * v, x);
          mx[v] = vmaxq_f32(mx[v], x);
        }
      }
    }
    float corr[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int v = 0; v < NV; ++v) {
      const float32x4_t m_new = vmaxq_f32(m[v], mx[v]);
      const float32x4_t cv = neon::exp_f32(vsubq_f32(m[v], m_new));  // 0 on the first block
      float32x4_t sum = vdupq_n_f32(0);
      for (int j = 0; j < nk; ++j) {
        const float32x4_t p = neon::exp_f32(vsubq_f32(vld1q_f32(s + j * 8 + 4 * v), m_new));
        vst1q_f32(s + j * 8 + 4 * v, p);
        sum = vaddq_f32(sum, p);
      }
      l[v] = vfmaq_f32(sum, l[v], cv);
      m[v] = m_new;
      vst1q_f32(corr + 4 * v, cv);
    }
    load_block(a, a.v, kb, nk, g, d, kv);
    for (int h = 0; h < nh; ++h) pv_row<D, 8>(acc + (int64_t)h * d, corr[h], s + h, kv, nk, d);
  }
  float lsum[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int v = 0; v < NV; ++v) vst1q_f32(lsum + 4 * v, l[v]);
  for (int h = 0; h < nh; ++h) {
    const float inv = 1.0f / lsum[h];
    float* out = row.out + (int64_t)h * d;
    for (int c = 0; c < d; c += 4) {
      vst1q_f32(out + c, vmulq_n_f32(vld1q_f32(acc + (int64_t)h * d + c), inv));
    }
  }
}

template <int D>
void attention_impl(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  const int d = D ? D : a.head_dim;
  const int group = a.n_head / a.n_head_kv;
  float* base = reinterpret_cast<float*>(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
  float* kv = base;
  float* acc = kv + (int64_t)kAttnKeys * d;
  float* s = acc + (int64_t)kAttnRows * d;
  float* m = s + kAttnRows * kAttnKeys;
  float* l = m + kAttnRows;
  Row rows[kAttnRows];
  for (int g = head_begin / group; g * group < head_end; ++g) {
    const int h0 = std::max(head_begin, g * group), h1 = std::min(head_end, (g + 1) * group);
    const int nh = h1 - h0;
    // Decode of 3+ heads of a group: heads as vector lanes (decode_group).
    if (a.n_q == 1 && nh >= kDecodeMinHeads && a.pos0 >= 0 && d >= kDecodeMinDim) {
      Row row;
      row.q = a.q + (int64_t)h0 * d;
      row.out = a.out + (int64_t)h0 * d;
      row.hi = a.pos0;
      row.lo = a.window > 0 ? std::max<int64_t>(0, row.hi - a.window + 1) : 0;
      for (int hb = 0; hb < nh; hb += 8) {  // groups of more than 8 heads: 8 at a time
        const int n8 = std::min(8, nh - hb);
        Row r8 = row;
        r8.q += (int64_t)hb * d;
        r8.out += (int64_t)hb * d;
        if (n8 > 4) {
          decode_group<D, 2>(a, g, n8, r8, kv, acc, acc + (int64_t)8 * d, s);
        } else if (n8 >= kDecodeMinHeads) {
          decode_group<D, 1>(a, g, n8, r8, kv, acc, acc + (int64_t)8 * d, s);
        } else {  // the rest of a group of more than 8: rows tiles
          Row rs[8];
          for (int h = 0; h < n8; ++h) {
            rs[h] = r8;
            rs[h].q += (int64_t)h * d;
            rs[h].out += (int64_t)h * d;
          }
          attention_tile<D>(a, g, rs, n8, kv, acc, s, m, l);
        }
      }
      continue;
    }
    const int64_t n_rows = (int64_t)a.n_q * nh;
    for (int64_t r0 = 0; r0 < n_rows; r0 += kAttnRows) {
      const int nr = (int)std::min<int64_t>(kAttnRows, n_rows - r0);
      int n_live = 0;
      for (int r = 0; r < nr; ++r) {
        const int64_t i = (r0 + r) / nh;
        const int h = h0 + (int)((r0 + r) % nh);
        Row row;
        row.q = a.q + i * a.q_stride + (int64_t)h * d;
        row.out = a.out + i * a.out_stride + (int64_t)h * d;
        row.hi = (int64_t)a.pos0 + i;
        row.lo = a.window > 0 ? std::max<int64_t>(0, row.hi - a.window + 1) : 0;
        if (row.hi < 0) {
          std::memset(row.out, 0, (size_t)d * 4);
          continue;
        }
        rows[n_live++] = row;
      }
      if (n_live > 0) attention_tile<D>(a, g, rows, n_live, kv, acc, s, m, l);
    }
  }
}

}  // namespace

void attention__neon(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  if (a.head_dim % 8 != 0 || (a.kv_type == quant::Type::Q8_0 && a.head_dim % quant::kBlock)) {
    attention__ref(a, head_begin, head_end, scratch);
    return;
  }
  switch (a.head_dim) {
    case 64: attention_impl<64>(a, head_begin, head_end, scratch); break;
    case 80: attention_impl<80>(a, head_begin, head_end, scratch); break;
    case 96: attention_impl<96>(a, head_begin, head_end, scratch); break;
    case 128: attention_impl<128>(a, head_begin, head_end, scratch); break;
    default: attention_impl<0>(a, head_begin, head_end, scratch); break;
  }
}

}  // namespace lilims::kernels
