// Q8_0 / Q4_0 / Q4_1 matmul on 4-row interleaved weights, NEON + dotprod
// (armv8.2-a+dotprod).  1 token: Tile1Sdot (matmul_x4_neon_impl.h).  Several
// tokens: quads of 4 (1, 2 or 4 quads per pass over the weights) from a
// lane-ordered activation tile
// (matmul_x4_neon_act4.h): for k-quad j, a 16-byte load A_j holds the 4
// tokens' elements 4j..4j+3, and SDOT by element against w01[c] = (r0 k0-3,
// r0 k4-7, r1 k0-3, r1 k4-7) adds row r's quad times each token's:
//   s_r0 += A_2c . w01[c][0] + A_2c+1 . w01[c][1],  s_r1: elements 2 and 3,
// 8 SDOTs per chunk, 32 per block column, no DUP; s_r = (t0 t1 t2 t3) for
// row r, scaled by (da_t0..da_t3) and dw_r.  The weights of a block column
// are unpacked once for all quads.
// Layout and contract: matmul_x4_neon_impl.h, kernels::MatmulKernelFn.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
LILIMS_TARGET_DOTPROD_BEGIN
#include "kernels/arm/matmul_x4_neon_act4.h"

namespace lilims::kernels {
namespace {

using neon_x4::ActTile4;
using neon_x4::Operands;
using neon_x4::X4;
using quant::Type;

struct LaneTile {
  static constexpr int kQuads = 4;
  template <Type WT, int TQ>
  static void run(const typename X4<WT>::Blk* g, const ActTile4* a, int64_t nbc, float* y,
                  int64_t ldy, int64_t row0, int rows, int tokens, bool add) {
    constexpr int kShift = Operands<WT>::kShift;
    float32x4_t acc[TQ][4];  // acc[q][r] = row r x tokens 4q..4q+3
    for (int q = 0; q < TQ; ++q) {
      for (int r = 0; r < 4; ++r) acc[q][r] = vdupq_n_f32(0.0f);
    }
    for (int64_t b = 0; b < nbc; ++b, ++g, a += TQ) {
      LILIMS_MCA_LOOP("lane_tile", 4, 4 * TQ, 1);
      int8x16_t w01[4], w23[4];
      Operands<WT>::load(g, w01, w23);
      const float32x4_t dw = neon_x4::f16x4(g->d);
      // Unrolled: the block loop must be the innermost one (registers,
      // and bench/mca_neon.sh analyses it as such).
#pragma GCC unroll 4
      for (int q = 0; q < TQ; ++q) {
        int32x4_t s[4];
        for (int r = 0; r < 4; ++r) s[r] = vdupq_n_s32(0);
        for (int c = 0; c < 4; ++c) {
          const int8x16_t a0 = vld1q_s8(a[q].qs + 32 * c), a1 = vld1q_s8(a[q].qs + 32 * c + 16);
          s[0] = vdotq_laneq_s32(s[0], a0, w01[c], 0);
          s[0] = vdotq_laneq_s32(s[0], a1, w01[c], 1);
          s[1] = vdotq_laneq_s32(s[1], a0, w01[c], 2);
          s[1] = vdotq_laneq_s32(s[1], a1, w01[c], 3);
          s[2] = vdotq_laneq_s32(s[2], a0, w23[c], 0);
          s[2] = vdotq_laneq_s32(s[2], a1, w23[c], 1);
          s[3] = vdotq_laneq_s32(s[3], a0, w23[c], 2);
          s[3] = vdotq_laneq_s32(s[3], a1, w23[c], 3);
        }
        // acc[r] += (sum * da) * dw[r]: FMLA by element, the cheap form on
        // Apple cores.
        const float32x4_t da = vld1q_f32(a[q].d);
        acc[q][0] = vfmaq_laneq_f32(acc[q][0], vmulq_f32(neon_x4::to_f32<kShift>(s[0]), da), dw, 0);
        acc[q][1] = vfmaq_laneq_f32(acc[q][1], vmulq_f32(neon_x4::to_f32<kShift>(s[1]), da), dw, 1);
        acc[q][2] = vfmaq_laneq_f32(acc[q][2], vmulq_f32(neon_x4::to_f32<kShift>(s[2]), da), dw, 2);
        acc[q][3] = vfmaq_laneq_f32(acc[q][3], vmulq_f32(neon_x4::to_f32<kShift>(s[3]), da), dw, 3);
        if constexpr (X4<WT>::kHasMin) {
          const float32x4_t sa = vld1q_f32(a[q].s), mw = neon_x4::f16x4(g->m);
          acc[q][0] = vfmaq_laneq_f32(acc[q][0], sa, mw, 0);
          acc[q][1] = vfmaq_laneq_f32(acc[q][1], sa, mw, 1);
          acc[q][2] = vfmaq_laneq_f32(acc[q][2], sa, mw, 2);
          acc[q][3] = vfmaq_laneq_f32(acc[q][3], sa, mw, 3);
        }
      }
    }
    float o[4][4 * neon_x4::kMaxQuads];
    for (int q = 0; q < TQ; ++q) {
      for (int r = 0; r < 4; ++r) vst1q_f32(&o[r][4 * q], acc[q][r]);
    }
    neon_x4::store_tile(o, y, ldy, row0, rows, tokens, add);
  }
};

template <Type WT>
void gemm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride, int64_t n,
          float* y, int64_t ldy) {
  neon_x4::gemm_x4_act4<WT, neon_x4::Order::lane, LaneTile, neon_x4::Tile1Sdot<WT>>(
      W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace

void q8_0_q8_0_gemm_x4__neon_dotprod(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                     size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<Type::Q8_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_0_q8_0_gemm_x4__neon_dotprod(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                     size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<Type::Q4_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_1_q8_1_gemm_x4__neon_dotprod(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                     size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<Type::Q4_1>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_DOTPROD_END
#endif  // LILIMS_HAVE_NEON
