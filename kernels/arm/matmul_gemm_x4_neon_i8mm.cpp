// Q8_0 / Q4_0 / Q4_1 matmul on 4-row interleaved weights, NEON + i8mm
// (armv8.2-a+dotprod+i8mm).  1 token: the SDOT tile Tile1Sdot
// (matmul_x4_neon_impl.h; i8mm cores all have dotprod).  Several tokens:
// quads of 4 (1, 2 or 4 per pass over the weights) from a pair-ordered
// activation tile (matmul_x4_neon_act4.h).  A 16-byte weight register is one
// 8-byte chunk of 2 rows, i.e. exactly SMMLA's 2x8 left operand, and one
// plain 16-byte tile load is a token pair's matching 8 bytes, the right one:
//   SMMLA(acc, w01[c], (t0 | t1)) -> acc += (r0t0, r0t1, r1t0, r1t1),
// 32 MACs per instruction, 8 per block column and token pair.
// Layout and contract: matmul_x4_neon_impl.h, kernels::MatmulKernelFn.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
LILIMS_TARGET_I8MM_BEGIN
#include "kernels/arm/matmul_x4_neon_act4.h"

namespace lilims::kernels {
namespace {

using neon_x4::ActTile4;
using neon_x4::Operands;
using neon_x4::X4;
using quant::Type;

struct PairTile {
  static constexpr int kQuads = 4;
  template <Type WT, int TQ>
  static void run(const typename X4<WT>::Blk* g, const ActTile4* a, int64_t nbc, float* y,
                  int64_t ldy, int64_t row0, int rows, int tokens, bool add) {
    constexpr int kShift = Operands<WT>::kShift;
    constexpr int P = 2 * TQ;  // token pairs
    // acc01[p] = (r0t0, r0t1, r1t0, r1t1), acc23[p] = (r2t0, r2t1, r3t0, r3t1)
    // for tokens t0, t1 = 2p, 2p + 1.
    float32x4_t acc01[P], acc23[P];
    for (int p = 0; p < P; ++p) acc01[p] = acc23[p] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nbc; ++b, ++g, a += TQ) {
      LILIMS_MCA_LOOP("mm_tile", 4, 4 * TQ, 1);
      int8x16_t w01[4], w23[4];
      Operands<WT>::load(g, w01, w23);
      const float32x4_t dw = neon_x4::f16x4(g->d);
      const float32x4_t dw01 = vzip1q_f32(dw, dw), dw23 = vzip2q_f32(dw, dw);  // (d0 d0 d1 d1), (d2 d2 d3 d3)
      float32x4_t mw01, mw23;
      if constexpr (X4<WT>::kHasMin) {
        const float32x4_t mw = neon_x4::f16x4(g->m);
        mw01 = vzip1q_f32(mw, mw);
        mw23 = vzip2q_f32(mw, mw);
      }
      // Unrolled: the block loop must be the innermost one (registers,
      // and bench/mca_neon.sh analyses it as such).
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const ActTile4& t = a[p / 2];
        const int8_t* q = t.qs + 64 * (p % 2);
        int32x4_t s01 = vdupq_n_s32(0), s23 = vdupq_n_s32(0);
        for (int c = 0; c < 4; ++c) {
          const int8x16_t av = vld1q_s8(q + 16 * c);
          s01 = vmmlaq_s32(s01, w01[c], av);
          s23 = vmmlaq_s32(s23, w23[c], av);
        }
        const float32x4_t da = vld1q_f32(t.d + 4 * (p % 2));  // (da_t0, da_t1, da_t0, da_t1)
        acc01[p] = vfmaq_f32(acc01[p], vmulq_f32(neon_x4::to_f32<kShift>(s01), da), dw01);
        acc23[p] = vfmaq_f32(acc23[p], vmulq_f32(neon_x4::to_f32<kShift>(s23), da), dw23);
        if constexpr (X4<WT>::kHasMin) {
          const float32x4_t sa = vld1q_f32(t.s + 4 * (p % 2));
          acc01[p] = vfmaq_f32(acc01[p], mw01, sa);
          acc23[p] = vfmaq_f32(acc23[p], mw23, sa);
        }
      }
    }
    float o[4][4 * neon_x4::kMaxQuads];
    for (int p = 0; p < P; ++p) {
      float v[8];
      vst1q_f32(v, acc01[p]);
      vst1q_f32(v + 4, acc23[p]);
      for (int r = 0; r < 4; ++r) {
        o[r][2 * p] = v[2 * r];
        o[r][2 * p + 1] = v[2 * r + 1];
      }
    }
    neon_x4::store_tile(o, y, ldy, row0, rows, tokens, add);
  }
};

template <Type WT>
void gemm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride, int64_t n,
          float* y, int64_t ldy) {
  neon_x4::gemm_x4_act4<WT, neon_x4::Order::pair, PairTile, neon_x4::Tile1Sdot<WT>>(
      W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace

void q8_0_q8_0_gemm_x4__neon_i8mm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<Type::Q8_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_0_q8_0_gemm_x4__neon_i8mm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<Type::Q4_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_1_q8_1_gemm_x4__neon_i8mm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                  size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<Type::Q4_1>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_I8MM_END
#endif  // LILIMS_HAVE_NEON
