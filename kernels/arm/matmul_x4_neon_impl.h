// Shared body of the NEON matmul kernels on 4-row interleaved weights
// (kLayoutX4, quant/repack.h).  Included by matmul_gemm_x4_neon*.cpp only:
// each includes it into its own translation unit, compiled with its own
// -march, and instantiates it with its block dot product:
//   DotNeon     baseline: SMULL/SMLAL 8x8 -> int16, SADALP -> int32
//   DotSdot     +dotprod: SDOT on (2 rows x 8) x (8 duplicated), 4 per block pair of rows
// (the +i8mm kernels use SMMLA tiles and fall back to DotSdot for odd tokens).
//
// Registers: one 16-byte load = one 8-byte chunk of 2 rows, so block
// column b of a group is w01[c], w23[c] for chunks c = 0..3 (activation
// bytes 8c..8c+7).  Integer sums are exact (int16 partials: Q8 |w*a| <= 128 *
// 127 = 16256, one product per lane before widening; Q4 at most 4 products
// of <= 15 * 127 per lane: 7620); each output accumulates
// float(sumi) * (dw * da) with one FMA per block (Q4_1: + mw * sa).
#pragma once

#include <arm_neon.h>

#include <cstring>

#include "kernels/matmul.h"
#include "quant/repack.h"

// llvm-mca marker (bench/mca_neon.sh): an empty asm comment at the top of a
// block-loop body that names the tile; the script analyses the innermost
// loop around it as compiled.  It costs nothing and survives into -S output.
#if defined(LILIMS_MCA_MARKERS)
#define LILIMS_MCA_LOOP(name, tokens) __asm__ volatile("// LILIMS-MCA-LOOP " name " tokens=%0" ::"i"(tokens))
#else
#define LILIMS_MCA_LOOP(name, tokens) ((void)0)
#endif

namespace lilims::kernels::neon_x4 {

using quant::Type;

inline float32x4_t f16x4(const uint16_t* p) {
  uint16x4_t h;
  std::memcpy(&h, p, 8);
  return vcvt_f32_f16(vreinterpret_f16_u16(h));
}

template <Type WT>
struct X4;

template <>
struct X4<Type::Q8_0> {
  using Blk = quant::BlockQ8_0x4;
  static constexpr bool kHasMin = false, kSmall = false;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static inline void unpack(const Blk* b, int8x16_t w01[4], int8x16_t w23[4]) {
    for (int c = 0; c < 4; ++c) {
      w01[c] = vld1q_s8(b->qs + 32 * c);
      w23[c] = vld1q_s8(b->qs + 32 * c + 16);
    }
  }
};

template <Type WT, bool kMinus8>
inline void unpack_q4(const uint8_t* qs, int8x16_t w01[4], int8x16_t w23[4]) {
  const uint8x16_t lo = vdupq_n_u8(0x0f);
  const int8x16_t eight = vdupq_n_s8(8);
  const uint8x16_t a = vld1q_u8(qs), b = vld1q_u8(qs + 16), c = vld1q_u8(qs + 32),
                   d = vld1q_u8(qs + 48);
  w01[0] = vreinterpretq_s8_u8(vandq_u8(a, lo));  // k 0..7
  w23[0] = vreinterpretq_s8_u8(vandq_u8(b, lo));
  w01[1] = vreinterpretq_s8_u8(vandq_u8(c, lo));  // k 8..15
  w23[1] = vreinterpretq_s8_u8(vandq_u8(d, lo));
  w01[2] = vreinterpretq_s8_u8(vshrq_n_u8(a, 4));  // k 16..23
  w23[2] = vreinterpretq_s8_u8(vshrq_n_u8(b, 4));
  w01[3] = vreinterpretq_s8_u8(vshrq_n_u8(c, 4));  // k 24..31
  w23[3] = vreinterpretq_s8_u8(vshrq_n_u8(d, 4));
  if (kMinus8) {
    for (int i = 0; i < 4; ++i) {
      w01[i] = vsubq_s8(w01[i], eight);
      w23[i] = vsubq_s8(w23[i], eight);
    }
  }
}

template <>
struct X4<Type::Q4_0> {
  using Blk = quant::BlockQ4_0x4;
  static constexpr bool kHasMin = false, kSmall = true;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static inline void unpack(const Blk* b, int8x16_t w01[4], int8x16_t w23[4]) {
    unpack_q4<Type::Q4_0, true>(b->qs, w01, w23);
  }
};

template <>
struct X4<Type::Q4_1> {
  using Blk = quant::BlockQ4_1x4;
  static constexpr bool kHasMin = true, kSmall = true;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_1), kActQ = 4;
  static inline void unpack(const Blk* b, int8x16_t w01[4], int8x16_t w23[4]) {
    unpack_q4<Type::Q4_1, false>(b->qs, w01, w23);
  }
};

// Exact int32 block dot products of rows 0..3 with one activation block.
struct DotNeon {
  template <Type WT>
  static inline int32x4_t dot(const int8x16_t w01[4], const int8x16_t w23[4], const int8_t* aq) {
    int32x4_t r[4];
    if (X4<WT>::kSmall) {
      int16x8_t p[4];
      for (int c = 0; c < 4; ++c) {
        const int8x8_t a = vld1_s8(aq + 8 * c);
        if (c == 0) {
          p[0] = vmull_s8(vget_low_s8(w01[0]), a);
          p[1] = vmull_s8(vget_high_s8(w01[0]), a);
          p[2] = vmull_s8(vget_low_s8(w23[0]), a);
          p[3] = vmull_s8(vget_high_s8(w23[0]), a);
        } else {
          p[0] = vmlal_s8(p[0], vget_low_s8(w01[c]), a);
          p[1] = vmlal_s8(p[1], vget_high_s8(w01[c]), a);
          p[2] = vmlal_s8(p[2], vget_low_s8(w23[c]), a);
          p[3] = vmlal_s8(p[3], vget_high_s8(w23[c]), a);
        }
      }
      for (int i = 0; i < 4; ++i) r[i] = vpaddlq_s16(p[i]);
    } else {
      for (int i = 0; i < 4; ++i) r[i] = vdupq_n_s32(0);
      for (int c = 0; c < 4; ++c) {
        const int8x8_t a = vld1_s8(aq + 8 * c);
        r[0] = vpadalq_s16(r[0], vmull_s8(vget_low_s8(w01[c]), a));
        r[1] = vpadalq_s16(r[1], vmull_s8(vget_high_s8(w01[c]), a));
        r[2] = vpadalq_s16(r[2], vmull_s8(vget_low_s8(w23[c]), a));
        r[3] = vpadalq_s16(r[3], vmull_s8(vget_high_s8(w23[c]), a));
      }
    }
    return vpaddq_s32(vpaddq_s32(r[0], r[1]), vpaddq_s32(r[2], r[3]));
  }
};

#if defined(__ARM_FEATURE_DOTPROD)
struct DotSdot {
  template <Type WT>
  static inline int32x4_t dot(const int8x16_t w01[4], const int8x16_t w23[4], const int8_t* aq) {
    int32x4_t s01 = vdupq_n_s32(0), s23 = vdupq_n_s32(0);
    for (int c = 0; c < 4; ++c) {
      int64_t v;
      std::memcpy(&v, aq + 8 * c, 8);
      const int8x16_t a = vreinterpretq_s8_s64(vdupq_n_s64(v));  // chunk in both halves
      s01 = vdotq_s32(s01, w01[c], a);  // (r0 k0-3, r0 k4-7, r1 k0-3, r1 k4-7)
      s23 = vdotq_s32(s23, w23[c], a);
    }
    return vpaddq_s32(s01, s23);  // (r0, r1, r2, r3)
  }
};
#endif

// Scales of T (<= 4) activation blocks at offset `off` of each, as fp32.
template <int T>
inline void act_scales(const uint8_t* x, size_t x_stride, size_t off, float out[4]) {
  uint16_t h[4] = {0, 0, 0, 0};
  for (int t = 0; t < T; ++t) std::memcpy(&h[t], x + t * x_stride + off, 2);
  vst1q_f32(out, f16x4(h));
}

// One group of 4 rows x T tokens with a per-token block dot.
template <Type WT, int T, class Dot>
inline void tile(const typename X4<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t x_stride,
                 float* y, int64_t ldy, int64_t row0, int valid) {
  using P = X4<WT>;
  float32x4_t acc[T];
  for (int t = 0; t < T; ++t) acc[t] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    LILIMS_MCA_LOOP("tile", T);
    const uint8_t* ab = x + b * P::kActBlock;
    int8x16_t w01[4], w23[4];
    P::unpack(g + b, w01, w23);
    const float32x4_t dw = f16x4(g[b].d);
    float da[4], sa[4];
    act_scales<T>(ab, x_stride, 0, da);
    if (P::kHasMin) act_scales<T>(ab, x_stride, 2, sa);
    for (int t = 0; t < T; ++t) {
      const int32x4_t isum =
          Dot::template dot<WT>(w01, w23, reinterpret_cast<const int8_t*>(ab + t * x_stride + P::kActQ));
      acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(isum), vmulq_n_f32(dw, da[t]));
      if constexpr (P::kHasMin) acc[t] = vfmaq_n_f32(acc[t], f16x4(g[b].m), sa[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float v[4];
    vst1q_f32(v, acc[t]);
    for (int r = 0; r < valid; ++r) y[t * ldy + row0 + r] = v[r];
  }
}

// The row-group / token-tile loops around a tile function
// Tile(T)(g, nb, x, x_stride, y, ldy, row0, valid) for T = 4, 3, 2, 1.
template <Type WT, class Tiles>
inline void gemm_x4(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                    size_t x_stride, int64_t n, float* y, int64_t ldy) {
  using Blk = typename X4<WT>::Blk;
  const int64_t nb = W.cols / quant::kBlock;
  const Blk* base = static_cast<const Blk*>(W.data);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t row0 = r0; row0 < r1; row0 += 4) {
    const Blk* g = base + (row0 / 4) * nb;
    const int valid = (int)(r1 - row0 < 4 ? r1 - row0 : 4);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) Tiles::template run<4>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid);
    switch (n - j) {
      case 3: Tiles::template run<3>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid); break;
      case 2: Tiles::template run<2>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid); break;
      case 1: Tiles::template run<1>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid); break;
      default: break;
    }
  }
}

template <Type WT, class Dot>
struct DotTiles {
  template <int T>
  static void run(const typename X4<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t xs, float* y,
                  int64_t ldy, int64_t row0, int valid) {
    tile<WT, T, Dot>(g, nb, x, xs, y, ldy, row0, valid);
  }
};

}  // namespace lilims::kernels::neon_x4
