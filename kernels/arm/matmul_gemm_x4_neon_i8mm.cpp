// Q8_0 / Q4_0 / Q4_1 matmul on 4-row interleaved weights, NEON + i8mm
// (armv8.2-a+dotprod+i8mm).  Tile: 4 rows x 2 or 4 tokens; a 16-byte weight
// register is one 8-byte chunk of 2 rows, i.e. exactly the 2x8 left operand
// of SMMLA, and two tokens' matching 8 activation bytes form the right one:
//   SMMLA(acc, w01[c], (t0 | t1)) -> acc += (r0t0, r0t1, r1t0, r1t1),
// 32 MACs per instruction, 8 per block column and token pair.  Odd token
// counts finish with the SDOT tile (i8mm cores all have dotprod).
// Layout and contract: matmul_x4_neon_impl.h, kernels::MatmulKernelFn.
#include "kernels/arm/matmul_x4_neon_impl.h"

namespace lilims::kernels {
namespace {

using neon_x4::X4;
using quant::Type;

template <Type WT, int P>  // P token pairs
void mm_tile(const typename X4<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t xs, float* y,
             int64_t ldy, int64_t row0, int valid) {
  using Q = X4<WT>;
  float32x4_t acc01[P], acc23[P];  // (r0t0, r0t1, r1t0, r1t1), (r2t0, r2t1, r3t0, r3t1)
  for (int p = 0; p < P; ++p) acc01[p] = acc23[p] = vdupq_n_f32(0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    LILIMS_MCA_LOOP("mm_tile", 2 * P);
    const uint8_t* ab = x + b * Q::kActBlock;
    int8x16_t w01[4], w23[4];
    Q::unpack(g + b, w01, w23);
    const float32x4_t dw = neon_x4::f16x4(g[b].d);
    const float32x4_t dw01 = vzip1q_f32(dw, dw), dw23 = vzip2q_f32(dw, dw);  // (d0 d0 d1 d1), (d2 d2 d3 d3)
    float da[4], sa[4];
    neon_x4::act_scales<2 * P>(ab, xs, 0, da);
    if (Q::kHasMin) neon_x4::act_scales<2 * P>(ab, xs, 2, sa);
    for (int p = 0; p < P; ++p) {
      const int8_t* a0 = reinterpret_cast<const int8_t*>(ab + 2 * p * xs + Q::kActQ);
      const int8_t* a1 = reinterpret_cast<const int8_t*>(ab + (2 * p + 1) * xs + Q::kActQ);
      int32x4_t s01 = vdupq_n_s32(0), s23 = vdupq_n_s32(0);
      for (int c = 0; c < 4; ++c) {
        const int8x16_t a = vcombine_s8(vld1_s8(a0 + 8 * c), vld1_s8(a1 + 8 * c));
        s01 = vmmlaq_s32(s01, w01[c], a);
        s23 = vmmlaq_s32(s23, w23[c], a);
      }
      const float32x2_t d2 = vld1_f32(da + 2 * p);
      const float32x4_t dap = vcombine_f32(d2, d2);  // (da_t0, da_t1, da_t0, da_t1)
      acc01[p] = vfmaq_f32(acc01[p], vcvtq_f32_s32(s01), vmulq_f32(dw01, dap));
      acc23[p] = vfmaq_f32(acc23[p], vcvtq_f32_s32(s23), vmulq_f32(dw23, dap));
      if constexpr (Q::kHasMin) {
        const float32x4_t mw = neon_x4::f16x4(g[b].m);
        const float32x2_t s2 = vld1_f32(sa + 2 * p);
        const float32x4_t sap = vcombine_f32(s2, s2);
        acc01[p] = vfmaq_f32(acc01[p], vzip1q_f32(mw, mw), sap);
        acc23[p] = vfmaq_f32(acc23[p], vzip2q_f32(mw, mw), sap);
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    float v[8];
    vst1q_f32(v, acc01[p]);
    vst1q_f32(v + 4, acc23[p]);
    for (int r = 0; r < valid; ++r) {
      y[2 * p * ldy + row0 + r] = v[2 * r];
      y[(2 * p + 1) * ldy + row0 + r] = v[2 * r + 1];
    }
  }
}

template <Type WT>
struct MmTiles {
  template <int T>
  static void run(const typename X4<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t xs, float* y,
                  int64_t ldy, int64_t row0, int valid) {
    if constexpr (T == 4 || T == 2) {
      mm_tile<WT, T / 2>(g, nb, x, xs, y, ldy, row0, valid);
    } else if constexpr (T == 3) {
      mm_tile<WT, 1>(g, nb, x, xs, y, ldy, row0, valid);
      neon_x4::tile<WT, 1, neon_x4::DotSdot>(g, nb, x + 2 * xs, xs, y + 2 * ldy, ldy, row0, valid);
    } else {
      neon_x4::tile<WT, 1, neon_x4::DotSdot>(g, nb, x, xs, y, ldy, row0, valid);
    }
  }
};

}  // namespace

void q8_0_q8_0_gemm_x4__neon_i8mm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  neon_x4::gemm_x4<Type::Q8_0, MmTiles<Type::Q8_0>>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_0_q8_0_gemm_x4__neon_i8mm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  neon_x4::gemm_x4<Type::Q4_0, MmTiles<Type::Q4_0>>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_1_q8_1_gemm_x4__neon_i8mm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  neon_x4::gemm_x4<Type::Q4_1, MmTiles<Type::Q4_1>>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
