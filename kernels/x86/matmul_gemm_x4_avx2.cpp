// Q8_0 x Q8_0, Q4_0 x Q8_0 and Q4_1 x Q8_1 matmul on 4-row interleaved
// weights (kLayoutX4, quant/repack.h), AVX2.  Built with -mavx2 -mfma -mf16c.
//
// Tile: 4 weight rows x T tokens (T = 4, tails 1..3; T = 1 is the decode
// matvec).  One block column of a group is unpacked once per tile into four
// 32-byte registers, chunk c = [row0 8 | row1 8 | row2 8 | row3 8] int8
// (Q4: nibbles; Q4_0 shifted to -8..7), then for each token the matching 8
// activation bytes are broadcast to the four 64-bit lanes, so
//   maddubs(|w|, sign(a, w))  (signed x signed through the unsigned x signed
//                              instruction; Q4_1 nibbles are unsigned already)
//   madd(., 1)                -> int32 lanes (r0, r0, r1, r1, r2, r2, r3, r3)
// gives each row's exact block dot product split over two lanes; one FMA
// per block and token applies dw * da (Q4_1 one more for mw * sa / 2 per lane).
// No int16 saturation: Q8_0 |w| <= 128, |a| <= 127: 2*128*127 = 32512;
// Q4 sums of 4 maddubs: 4 * 2 * 15 * 127 = 15240.
// Contract: see kernels::MatmulKernelFn.  Unaligned loads only; reads the
// padding rows of a partial last group, writes rows < r1 only.
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul.h"
#include "quant/repack.h"

namespace lilims::kernels {
namespace {

using quant::Type;

inline __m256i bcast8(const int8_t* p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return _mm256_set1_epi64x(v);
}

inline float load_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// (d0, d1, d2, d3) fp16 -> (d0, d0, d1, d1, d2, d2, d3, d3) fp32
inline __m256 scales_x2(const uint16_t* d) {
  const __m128 v = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(d)));
  return _mm256_permutevar8x32_ps(_mm256_castps128_ps256(v),
                                  _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
}

template <Type WT>
struct X4;

template <>
struct X4<Type::Q8_0> {
  using Blk = quant::BlockQ8_0x4;
  static constexpr bool kSigned = true, kSmallProducts = false, kHasMin = false;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr int kOff[4] = {0, 8, 16, 24};  // activation offset of chunk c
  static void unpack(const Blk* b, __m256i w[4]) {
    for (int c = 0; c < 4; ++c) w[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * c));
  }
};

template <>
struct X4<Type::Q4_0> {
  using Blk = quant::BlockQ4_0x4;
  static constexpr bool kSigned = true, kSmallProducts = true, kHasMin = false;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr int kOff[4] = {0, 8, 16, 24};
  static void unpack(const Blk* b, __m256i w[4]) {
    const __m256i lo = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32));
    w[0] = _mm256_sub_epi8(_mm256_and_si256(l0, lo), eight);                         // k 0..7
    w[1] = _mm256_sub_epi8(_mm256_and_si256(l1, lo), eight);                         // k 8..15
    w[2] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(l0, 4), lo), eight);   // k 16..23
    w[3] = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(l1, 4), lo), eight);   // k 24..31
  }
};

template <>
struct X4<Type::Q4_1> {
  using Blk = quant::BlockQ4_1x4;
  static constexpr bool kSigned = false, kSmallProducts = true, kHasMin = true;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_1), kActQ = 4;
  static constexpr int kOff[4] = {0, 8, 16, 24};
  static void unpack(const Blk* b, __m256i w[4]) {
    const __m256i lo = _mm256_set1_epi8(0x0f);
    const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
    const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32));
    w[0] = _mm256_and_si256(l0, lo);
    w[1] = _mm256_and_si256(l1, lo);
    w[2] = _mm256_and_si256(_mm256_srli_epi16(l0, 4), lo);
    w[3] = _mm256_and_si256(_mm256_srli_epi16(l1, 4), lo);
  }
};

// The int32 lanes (r0, r0, r1, r1, r2, r2, r3, r3) of one block column times
// one activation block.  u: |w| (or unsigned nibbles), s: signed w.
template <Type WT>
inline __m256i block_dot(const __m256i u[4], const __m256i s[4], const int8_t* aq) {
  using P = X4<WT>;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i p[4];
  for (int c = 0; c < 4; ++c) {
    __m256i a = bcast8(aq + P::kOff[c]);
    if (P::kSigned) a = _mm256_sign_epi8(a, s[c]);
    p[c] = _mm256_maddubs_epi16(u[c], a);
  }
  if (P::kSmallProducts) {
    return _mm256_madd_epi16(
        _mm256_add_epi16(_mm256_add_epi16(p[0], p[1]), _mm256_add_epi16(p[2], p[3])), ones);
  }
  return _mm256_add_epi32(
      _mm256_add_epi32(_mm256_madd_epi16(p[0], ones), _mm256_madd_epi16(p[1], ones)),
      _mm256_add_epi32(_mm256_madd_epi16(p[2], ones), _mm256_madd_epi16(p[3], ones)));
}

// One group (4 rows starting at row0, `valid` of them written) x T tokens.
template <Type WT, int T>
void tile(const typename X4<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t x_stride,
          float* y, int64_t ldy, int64_t row0, int valid) {
  using P = X4<WT>;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i s[4], u[4];
    P::unpack(g + b, s);
    for (int c = 0; c < 4; ++c) u[c] = P::kSigned ? _mm256_sign_epi8(s[c], s[c]) : s[c];
    const __m256 dw = scales_x2(g[b].d);
    __m256 mw_half;
    if constexpr (P::kHasMin) mw_half = _mm256_mul_ps(scales_x2(g[b].m), _mm256_set1_ps(0.5f));
    for (int t = 0; t < T; ++t) {
      const uint8_t* ab = x + t * x_stride + b * P::kActBlock;
      const __m256i isum =
          block_dot<WT>(u, s, reinterpret_cast<const int8_t*>(ab + P::kActQ));
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(load_f16(ab)));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[t]);
      if constexpr (P::kHasMin) {
        acc[t] = _mm256_fmadd_ps(mw_half, _mm256_set1_ps(load_f16(ab + 2)), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float v[8];
    _mm256_store_ps(v, acc[t]);
    for (int r = 0; r < valid; ++r) y[t * ldy + row0 + r] = v[2 * r] + v[2 * r + 1];
  }
}

template <Type WT>
void gemm_x4(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
             int64_t n, float* y, int64_t ldy) {
  using Blk = typename X4<WT>::Blk;
  const int64_t nb = W.cols / quant::kBlock;
  const Blk* base = static_cast<const Blk*>(W.data);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  for (int64_t row0 = r0; row0 < r1; row0 += 4) {
    const Blk* g = base + (row0 / 4) * nb;
    const int valid = (int)(r1 - row0 < 4 ? r1 - row0 : 4);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) tile<WT, 4>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid);
    switch (n - j) {
      case 3: tile<WT, 3>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid); break;
      case 2: tile<WT, 2>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid); break;
      case 1: tile<WT, 1>(g, nb, xb + j * x_stride, x_stride, y + j * ldy, ldy, row0, valid); break;
      default: break;
    }
  }
}

}  // namespace

void q8_0_q8_0_gemm_x4__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                             size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x4<Type::Q8_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_0_q8_0_gemm_x4__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                             size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x4<Type::Q4_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_1_q8_1_gemm_x4__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                             size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x4<Type::Q4_1>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
