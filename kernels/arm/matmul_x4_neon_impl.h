// Shared body of the NEON matmul kernels on 4-row interleaved weights
// (kLayoutX4, quant/repack.h).  Included by matmul_gemm_x4_neon*.cpp only:
// each includes it into its own translation unit, compiled with its own
// -march, and instantiates it with its block dot product:
//   DotNeon     baseline: SMULL/SMLAL 8x8 -> int16, SADALP -> int32
// and, for the +dotprod / +i8mm kernels, the 1-token tile Tile1Sdot below
// (their multi-token tiles read interleaved activations:
// matmul_x4_neon_act4.h).
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
#include "kernels/mca_marker.h"
#include "quant/repack.h"

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

// Q4_1: unsigned nibbles.
inline void unpack_q4_1(const uint8_t* qs, int8x16_t w01[4], int8x16_t w23[4]) {
  const uint8x16_t lo = vdupq_n_u8(0x0f);
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
}

// Q4_0, stored XOR 0x88 (quant/repack.h): a nibble is the 4-bit two's
// complement of q - 8, so shifting it to the top of the byte and back
// arithmetically gives q - 8.
inline void unpack_q4_0(const uint8_t* qs, int8x16_t w01[4], int8x16_t w23[4]) {
  static_assert(quant::kQ4_0X4Xor == 0x88, "the NEON kernels read Q4_0 stored XOR 0x88");
  int8x16_t v[4];
  for (int i = 0; i < 4; ++i) v[i] = vld1q_s8(reinterpret_cast<const int8_t*>(qs) + 16 * i);
  w01[0] = vshrq_n_s8(vshlq_n_s8(v[0], 4), 4);  // k 0..7
  w23[0] = vshrq_n_s8(vshlq_n_s8(v[1], 4), 4);
  w01[1] = vshrq_n_s8(vshlq_n_s8(v[2], 4), 4);  // k 8..15
  w23[1] = vshrq_n_s8(vshlq_n_s8(v[3], 4), 4);
  w01[2] = vshrq_n_s8(v[0], 4);  // k 16..23
  w23[2] = vshrq_n_s8(v[1], 4);
  w01[3] = vshrq_n_s8(v[2], 4);  // k 24..31
  w23[3] = vshrq_n_s8(v[3], 4);
}

template <>
struct X4<Type::Q4_0> {
  using Blk = quant::BlockQ4_0x4;
  static constexpr bool kHasMin = false, kSmall = true;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static inline void unpack(const Blk* b, int8x16_t w01[4], int8x16_t w23[4]) {
    unpack_q4_0(b->qs, w01, w23);
  }
};

template <>
struct X4<Type::Q4_1> {
  using Blk = quant::BlockQ4_1x4;
  static constexpr bool kHasMin = true, kSmall = true;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_1), kActQ = 4;
  static inline void unpack(const Blk* b, int8x16_t w01[4], int8x16_t w23[4]) {
    unpack_q4_1(b->qs, w01, w23);
  }
};

// One block column of a group as SDOT / SMMLA operands (w01[c], w23[c] as
// for unpack), each weight multiplied by 2^kShift.  Q4_0 (stored XOR 0x88)
// gives 16 * (q - 8) with one instruction per register: a shift left by 4
// (low nibbles) or a mask (high ones) leaves the nibble's two's complement
// in the top half of the byte; the 16 is undone for free, and exactly (the
// sum is a multiple of 16), by the fixed-point int -> float conversion.
// |16 (q - 8) * a| <= 128 * 127: SDOT / SMMLA's int32 sums cannot overflow.
// Q8_0 and Q4_1 are unpack's values (kShift 0).
template <Type WT>
struct Operands {
  static constexpr int kShift = 0;
  static inline void load(const typename X4<WT>::Blk* b, int8x16_t w01[4], int8x16_t w23[4]) {
    X4<WT>::unpack(b, w01, w23);
  }
};
template <>
struct Operands<Type::Q4_0> {
  static constexpr int kShift = 4;
  static inline void load(const quant::BlockQ4_0x4* b, int8x16_t w01[4], int8x16_t w23[4]) {
    const int8x16_t hi = vdupq_n_s8((int8_t)0xf0);
    int8x16_t v[4];
    for (int i = 0; i < 4; ++i) v[i] = vld1q_s8(reinterpret_cast<const int8_t*>(b->qs) + 16 * i);
    w01[0] = vshlq_n_s8(v[0], 4);  // k 0..7
    w23[0] = vshlq_n_s8(v[1], 4);
    w01[1] = vshlq_n_s8(v[2], 4);  // k 8..15
    w23[1] = vshlq_n_s8(v[3], 4);
    w01[2] = vandq_s8(v[0], hi);  // k 16..23
    w23[2] = vandq_s8(v[1], hi);
    w01[3] = vandq_s8(v[2], hi);  // k 24..31
    w23[3] = vandq_s8(v[3], hi);
  }
};

// float(sum) / 2^kShift, exactly (one rounding of the true sum).
template <int kShift>
inline float32x4_t to_f32(int32x4_t v) {
  if constexpr (kShift == 0) {
    return vcvtq_f32_s32(v);
  } else {
    return vcvtq_n_f32_s32(v, kShift);
  }
}

inline float f16_to_f32(const uint8_t* p) {
  __fp16 h;
  std::memcpy(&h, p, 2);
  return (float)h;
}

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

// Only where arm_neon.h declares SDOT: in the CMake build the +dotprod and
// +i8mm files (an older clang declares it only under the flag); in the
// Swift package's every file, as its clang declares the intrinsics with
// target attributes (kernels/isa_target.h).
#if defined(__ARM_FEATURE_DOTPROD) || defined(LILIMS_KERNELS_BY_ARCH)
// The 1-token (decode) tile of the +dotprod / +i8mm kernels: G (1 to 3)
// groups of 4 rows x 1 token.  Each 8-byte activation chunk is copied into
// both halves of a register, so SDOT against w01[c] = (r0 8 bytes, r1 8
// bytes) gives (r0 k0-3, r0 k4-7, r1 k0-3, r1 k4-7) partial sums; ADDP folds
// them.  The groups share the activation registers and scale.
template <Type WT>
struct Tile1Sdot {
  using P = X4<WT>;
  using Blk = typename P::Blk;

  // ac[c] = activation chunk c (elements 8c..8c+7) in both halves.  Two
  // 16-byte loads and a DUP per chunk: the empty asm keeps GCC from turning
  // them into four 8-byte loads, each still followed by its DUP.
  static inline void load_act(const uint8_t* a, int8x16_t ac[4]) {
    const int8_t* q = reinterpret_cast<const int8_t*>(a + P::kActQ);
    int64x2_t q01 = vreinterpretq_s64_s8(vld1q_s8(q)), q23 = vreinterpretq_s64_s8(vld1q_s8(q + 16));
    __asm__("" : "+w"(q01), "+w"(q23));
    ac[0] = vreinterpretq_s8_s64(vdupq_laneq_s64(q01, 0));
    ac[1] = vreinterpretq_s8_s64(vdupq_laneq_s64(q01, 1));
    ac[2] = vreinterpretq_s8_s64(vdupq_laneq_s64(q23, 0));
    ac[3] = vreinterpretq_s8_s64(vdupq_laneq_s64(q23, 1));
  }

  // acc += float(isum) * dw * da: block w's integer sums for rows 0..3
  // scaled; Q4_1's min term (mw * activation block a's s) goes to accm.
  static inline void scale(const Blk* w, const uint8_t* a, int32x4_t isum, float da,
                           float32x4_t& acc, float32x4_t& accm) {
    const float32x4_t sum = to_f32<Operands<WT>::kShift>(isum);
    // FMLA by element: the by-vector form is the slower one on Apple cores.
    acc = vfmaq_n_f32(acc, vmulq_f32(sum, f16x4(w->d)), da);
    if constexpr (P::kHasMin) accm = vfmaq_n_f32(accm, f16x4(w->m), f16_to_f32(a + 2));
  }

  // acc += rows 0..3 of block w times activation block a (chunks ac, scale
  // da), sums cleared per block.
  static inline void block(const Blk* w, const uint8_t* a, const int8x16_t ac[4], float da,
                           float32x4_t& acc, float32x4_t& accm) {
    int8x16_t w01[4], w23[4];
    Operands<WT>::load(w, w01, w23);
    int32x4_t s01 = vdupq_n_s32(0), s23 = vdupq_n_s32(0);
    for (int c = 0; c < 4; ++c) s01 = vdotq_s32(s01, w01[c], ac[c]);
    for (int c = 0; c < 4; ++c) s23 = vdotq_s32(s23, w23[c], ac[c]);
    scale(w, a, vpaddq_s32(s01, s23), da, acc, accm);
  }

  static inline void store(float32x4_t acc, float* y, int rows) {
    float v[4];
    vst1q_f32(v, acc);
    for (int r = 0; r < rows; ++r) y[r] = v[r];
  }

  // g[i] = group i's blocks; rows[i] = its rows to write (row0 + 4 i ...).
  template <int G>
  static void run(const Blk* const g0[G], int64_t nb, const uint8_t* a, float* y, int64_t row0,
                  const int rows[G]) {
    if constexpr (G == 1) {
      run_one(g0[0], nb, a, y + row0, rows[0]);
    } else {
      const Blk* g[G];
      float32x4_t acc[G], accm[G];
      for (int i = 0; i < G; ++i) g[i] = g0[i], acc[i] = accm[i] = vdupq_n_f32(0.0f);
      for (int64_t b = 0; b < nb; ++b, a += P::kActBlock) {
        LILIMS_MCA_LOOP("tile", 4 * G, 1, 1);
        int8x16_t ac[4];
        load_act(a, ac);
        const float da = f16_to_f32(a);
        for (int i = 0; i < G; ++i) block(g[i] + b, a, ac, da, acc[i], accm[i]);
      }
      for (int i = 0; i < G; ++i) {
        store(P::kHasMin ? vaddq_f32(acc[i], accm[i]) : acc[i], y + row0 + 4 * i, rows[i]);
      }
    }
  }

  // One group alone (a row range of <= 4 rows): two block columns per
  // iteration, so the loop control is spread over two blocks, each column
  // into its own fp32 accumulators; an odd last block after.  The int32
  // SDOT sums are not cleared per block: s01 and s23 run on over the whole
  // row (modulo 2^32: SDOT and SUB wrap), and a block's sum is the
  // difference of two consecutive totals ADDP(s01, s23), one SUB instead
  // of two register clears.  That is exact: the difference is the block's
  // sum modulo 2^32, and |block sum| <= 32 * 128 * 128 < 2^31.  The SDOTs,
  // ADDP and SUB are one asm statement so that the register allocator sees
  // them tied as written; from intrinsics GCC 12 adds register-to-register
  // moves to this loop (one or more per block, on the vector pipes that
  // bound it).
  // Returns the new total; *isum = total - prev.
  static inline int32x4_t running_dot(int32x4_t& s01, int32x4_t& s23, const int8x16_t w01[4],
                                      const int8x16_t w23[4], const int8x16_t ac[4],
                                      int32x4_t prev, int32x4_t* isum) {
    int32x4_t total, d;
    __asm__(
        "sdot %[s01].4s, %[w0].16b, %[a0].16b\n\t"
        "sdot %[s23].4s, %[v0].16b, %[a0].16b\n\t"
        "sdot %[s01].4s, %[w1].16b, %[a1].16b\n\t"
        "sdot %[s23].4s, %[v1].16b, %[a1].16b\n\t"
        "sdot %[s01].4s, %[w2].16b, %[a2].16b\n\t"
        "sdot %[s23].4s, %[v2].16b, %[a2].16b\n\t"
        "sdot %[s01].4s, %[w3].16b, %[a3].16b\n\t"
        "sdot %[s23].4s, %[v3].16b, %[a3].16b\n\t"
        "addp %[t].4s, %[s01].4s, %[s23].4s\n\t"
        "sub %[d].4s, %[t].4s, %[p].4s"
        : [s01] "+w"(s01), [s23] "+w"(s23), [t] "=&w"(total), [d] "=&w"(d)
        : [w0] "w"(w01[0]), [w1] "w"(w01[1]), [w2] "w"(w01[2]), [w3] "w"(w01[3]),
          [v0] "w"(w23[0]), [v1] "w"(w23[1]), [v2] "w"(w23[2]), [v3] "w"(w23[3]),
          [a0] "w"(ac[0]), [a1] "w"(ac[1]), [a2] "w"(ac[2]), [a3] "w"(ac[3]), [p] "w"(prev));
    *isum = d;
    return total;
  }

  // One block of run_one: acc += block w times activation block a; returns
  // the new running total.
  static inline int32x4_t running_block(const Blk* w, const uint8_t* a, int32x4_t& s01,
                                        int32x4_t& s23, int32x4_t prev, float32x4_t& acc,
                                        float32x4_t& accm) {
    int8x16_t ac[4], w01[4], w23[4];
    load_act(a, ac);
    Operands<WT>::load(w, w01, w23);
    int32x4_t isum;
    const int32x4_t total = running_dot(s01, s23, w01, w23, ac, prev, &isum);
    scale(w, a, isum, f16_to_f32(a), acc, accm);
    return total;
  }

  static void run_one(const Blk* g, int64_t nb, const uint8_t* a, float* y, int rows) {
    float32x4_t acc0 = vdupq_n_f32(0.0f), acc1 = acc0, accm0 = acc0, accm1 = acc0;
    int32x4_t s01 = vdupq_n_s32(0), s23 = s01, prev = s01;
    const Blk* const end = g + (nb & ~int64_t{1});
    for (; g != end; g += 2, a += 2 * P::kActBlock) {
      LILIMS_MCA_LOOP("tile", 4, 1, 2);
      const int32x4_t t0 = running_block(g, a, s01, s23, prev, acc0, accm0);
      prev = running_block(g + 1, a + P::kActBlock, s01, s23, t0, acc1, accm1);
    }
    if (nb & 1) running_block(g, a, s01, s23, prev, acc0, accm0);
    float32x4_t acc = vaddq_f32(acc0, acc1);
    if constexpr (P::kHasMin) acc = vaddq_f32(acc, vaddq_f32(accm0, accm1));
    store(acc, y, rows);
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
    LILIMS_MCA_LOOP("tile", 4, T, 1);
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
