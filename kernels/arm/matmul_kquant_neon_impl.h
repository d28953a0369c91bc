// Q4_K, Q5_K x Q8_1 and Q6_K x Q8_0 matmul on NEON, reading the weights in
// their GGUF layout (in place in the file mapping), shared by the plain
// NEON and the dotprod files: each includes this with its own Dot, the one
// primitive that differs (16 int8 x int8 products summed into 4 int32
// lanes: plain NEON vmull/vmlal + vpaddl, dotprod one sdot).
//
// A super-block of 256 elements meets 8 activation blocks of 32; element
// block j (32 j .. 32 j + 31) is
//   Q4_K / Q5_K: sub-block j, the low (j even) or high nibbles of
//     qs[32 (j / 2) ..] (Q5_K: OR'd with bit j of qh, shifted to bit 4);
//   Q6_K: quarter j % 4 of half j / 4 (nibble and two high bits, less 32:
//     -32..31), sub-blocks 2j and 2j + 1 of 16, each dot times its scale.
// Per block and token Dot gives 4 int32 lanes; pairwise adds turn 8 blocks'
// lanes into [S_0 .. S_3], [S_4 .. S_7]; Q4_K/Q5_K multiply them by the
// 6-bit scales; then a convert and an FMA with dw * da_j, and for Q4_K/Q5_K
// one FMA of dminw * min_j with the blocks' sa, per 4 blocks.
// No overflow: plain NEON adds two int8 products in int16, |q| <= 32,
// |a| <= 127; int32 lanes stay below 2^24.
// Tile: 1 row x up to 4 tokens (the row's super-block unpacked once per
// tile).  Unaligned loads only; reads nothing past the row's last
// super-block.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstring>
#include <type_traits>
#include <vector>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/mca_marker.h"
#include "quant/quant.h"

namespace lilims::kernels::kquant_neon {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::kBlockK;

inline float load_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return fp16_to_fp32(h);
}

template <class Blk>
struct Traits {
  static constexpr bool kQ6 = std::is_same_v<Blk, BlockQ6_K>;
  static constexpr bool kQ5 = std::is_same_v<Blk, BlockQ5_K>;
  static constexpr size_t kActBlock = kQ6 ? 34 : 36;  // Q8_0 / Q8_1 block bytes
  static constexpr size_t kActQ = kQ6 ? 2 : 4;
};

// One super-block of a row, unpacked for the tile's tokens.
template <class Blk>
struct Unpacked {
  int8x16_t q[8][2];  // element block j: elements 0..15, 16..31
  int32x4_t sc[2];    // Q4_K/Q5_K: scales 0-3, 4-7
  float32x4_t dmins[2];
  int32_t s6[16];     // Q6_K: the 16-scales
  float d;

  explicit Unpacked(const Blk* w) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f);
    d = load_f16(&w->d);
    if constexpr (Traits<Blk>::kQ6) {
      const uint8x16_t m2 = vdupq_n_u8(3);
      const int8x16_t off = vdupq_n_s8(32);
      for (int h = 0; h < 2; ++h) {
        uint8x16_t l[4], qh[2];
        for (int i = 0; i < 4; ++i) l[i] = vld1q_u8(w->ql + 64 * h + 16 * i);
        qh[0] = vld1q_u8(w->qh + 32 * h);
        qh[1] = vld1q_u8(w->qh + 32 * h + 16);
        for (int k = 0; k < 4; ++k) {
          // Quarter k: nibble k / 2 of ql[64h + 32 (k % 2) + l], bits 2k..2k+1 of qh[32h + l].
          for (int half = 0; half < 2; ++half) {
            const uint8x16_t lb = l[2 * (k % 2) + half];
            const uint8x16_t lo = k < 2 ? vandq_u8(lb, m4) : vshrq_n_u8(lb, 4);
            const uint8x16_t hb = vandq_u8(vshlq_u8(qh[half], vdupq_n_s8((int8_t)(-2 * k))), m2);
            q[4 * h + k][half] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hb, 4))), off);
          }
        }
      }
      for (int i = 0; i < 16; ++i) s6[i] = w->scales[i];
      sc[0] = sc[1] = vdupq_n_s32(0);
      dmins[0] = dmins[1] = vdupq_n_f32(0.0f);
    } else {
      uint8_t scb[8], mnb[8];
      quant::k_scales_mins(w->scales, scb, mnb);
      const uint16x8_t sc16 = vmovl_u8(vld1_u8(scb)), mn16 = vmovl_u8(vld1_u8(mnb));
      sc[0] = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(sc16)));
      sc[1] = vreinterpretq_s32_u32(vmovl_high_u16(sc16));
      const float dmin = load_f16(&w->dmin);
      dmins[0] = vmulq_n_f32(vcvtq_f32_u32(vmovl_u16(vget_low_u16(mn16))), dmin);
      dmins[1] = vmulq_n_f32(vcvtq_f32_u32(vmovl_high_u16(mn16)), dmin);
      for (int& s : s6) s = 0;
      uint8x16_t h0 = vdupq_n_u8(0), h1 = vdupq_n_u8(0);
      if constexpr (Traits<Blk>::kQ5) {
        h0 = vld1q_u8(w->qh);
        h1 = vld1q_u8(w->qh + 16);
      }
      const uint8x16_t one = vdupq_n_u8(1);
      for (int c = 0; c < 4; ++c) {
        const uint8x16_t b0 = vld1q_u8(w->qs + 32 * c), b1 = vld1q_u8(w->qs + 32 * c + 16);
        uint8x16_t v[4] = {vandq_u8(b0, m4), vandq_u8(b1, m4), vshrq_n_u8(b0, 4), vshrq_n_u8(b1, 4)};
        if constexpr (Traits<Blk>::kQ5) {
          // Bit 2c (2c + 1) of qh[l]: element l's fifth bit in sub-block 2c (2c + 1).
          const int8x16_t dl = vdupq_n_s8((int8_t)(-2 * c)), dh = vdupq_n_s8((int8_t)(-2 * c - 1));
          v[0] = vorrq_u8(v[0], vshlq_n_u8(vandq_u8(vshlq_u8(h0, dl), one), 4));
          v[1] = vorrq_u8(v[1], vshlq_n_u8(vandq_u8(vshlq_u8(h1, dl), one), 4));
          v[2] = vorrq_u8(v[2], vshlq_n_u8(vandq_u8(vshlq_u8(h0, dh), one), 4));
          v[3] = vorrq_u8(v[3], vshlq_n_u8(vandq_u8(vshlq_u8(h1, dh), one), 4));
        }
        for (int i = 0; i < 4; ++i) q[2 * c + i / 2][i % 2] = vreinterpretq_s8_u8(v[i]);
      }
    }
  }
};

template <class Dot, class Blk>
inline void block_x_token(const Unpacked<Blk>& u, const uint8_t* a, const float* da, const float* sa,
                          float32x4_t acc[2], float32x4_t accm[2]) {
  using Tr = Traits<Blk>;
  int32x4_t P[8];
  for (int j = 0; j < 8; ++j) {
    const int8_t* aj = reinterpret_cast<const int8_t*>(a + j * Tr::kActBlock + Tr::kActQ);
    const int8x16_t a0 = vld1q_s8(aj), a1 = vld1q_s8(aj + 16);
    if constexpr (Tr::kQ6) {
      P[j] = vmlaq_n_s32(vmulq_n_s32(Dot::dot16(u.q[j][0], a0), u.s6[2 * j]), Dot::dot16(u.q[j][1], a1),
                         u.s6[2 * j + 1]);
    } else {
      P[j] = Dot::dot32(u.q[j][0], u.q[j][1], a0, a1);
    }
  }
  for (int i = 0; i < 2; ++i) {
    int32x4_t S = vpaddq_s32(vpaddq_s32(P[4 * i], P[4 * i + 1]), vpaddq_s32(P[4 * i + 2], P[4 * i + 3]));
    if constexpr (!Tr::kQ6) S = vmulq_s32(S, u.sc[i]);
    acc[i] = vmlaq_f32(acc[i], vcvtq_f32_s32(S), vmulq_n_f32(vld1q_f32(da + 4 * i), u.d));
    if constexpr (!Tr::kQ6) accm[i] = vmlaq_f32(accm[i], u.dmins[i], vld1q_f32(sa + 4 * i));
  }
}

template <class Dot, class Blk, int T>
inline void row_x_tokens(const Blk* wr, int64_t nb, const uint8_t* x, size_t x_stride, const float* info,
                         float* y, int64_t ldy) {
  using Tr = Traits<Blk>;
  const int64_t nb32 = nb * 8;
  float32x4_t acc[T][2], accm[T][2];
  for (int t = 0; t < T; ++t) acc[t][0] = acc[t][1] = accm[t][0] = accm[t][1] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    LILIMS_MCA_LOOP("kquant", 1, T, 1);
    const Unpacked<Blk> u(wr + b);
    for (int t = 0; t < T; ++t) {
      const float* it = info + t * 2 * nb32;
      block_x_token<Dot, Blk>(u, x + t * x_stride + 8 * b * Tr::kActBlock, it + 8 * b, it + nb32 + 8 * b,
                              acc[t], accm[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    y[t * ldy] = vaddvq_f32(vsubq_f32(vaddq_f32(acc[t][0], acc[t][1]), vaddq_f32(accm[t][0], accm[t][1])));
  }
}

// Per token: d of each activation block, then (Q8_1) its s, as floats.
template <class Blk>
void decode_acts(const uint8_t* row, int64_t nb32, float* o) {
  using Tr = Traits<Blk>;
  for (int64_t b = 0; b < nb32; ++b) {
    o[b] = load_f16(row + b * Tr::kActBlock);
    o[nb32 + b] = Tr::kQ6 ? 0.0f : load_f16(row + b * Tr::kActBlock + 2);
  }
}

template <class Dot, class Blk>
void gemm(const PackedWeight& W, int64_t r0, int64_t r1, const void* xv, size_t x_stride, int64_t n, float* y,
          int64_t ldy) {
  const int64_t nb = W.cols / kBlockK, nb32 = nb * 8;
  const Blk* w = static_cast<const Blk*>(W.data);
  const uint8_t* x = static_cast<const uint8_t*>(xv);
  // The decoded scales of up to 4 tokens (a tile), on the stack for rows up
  // to 16384 elements, else on the heap.
  constexpr int64_t kStack = 4 * 2 * 512;
  float stack_info[kStack];
  std::vector<float> heap_info;
  float* info = stack_info;
  if (4 * 2 * nb32 > kStack) {
    heap_info.resize((size_t)(4 * 2 * nb32));
    info = heap_info.data();
  }
  int64_t j = 0;
  for (; j < n; j += 4) {
    const int64_t m = n - j < 4 ? n - j : 4;
    for (int64_t t = 0; t < m; ++t) decode_acts<Blk>(x + (j + t) * x_stride, nb32, info + t * 2 * nb32);
    for (int64_t r = r0; r < r1; ++r) {
      if (m == 4) {
        row_x_tokens<Dot, Blk, 4>(w + r * nb, nb, x + j * x_stride, x_stride, info, y + j * ldy + r, ldy);
      } else {
        for (int64_t t = 0; t < m; ++t) {
          row_x_tokens<Dot, Blk, 1>(w + r * nb, nb, x + (j + t) * x_stride, x_stride, info + t * 2 * nb32,
                                    y + (j + t) * ldy + r, ldy);
        }
      }
    }
  }
}

}  // namespace lilims::kernels::kquant_neon
