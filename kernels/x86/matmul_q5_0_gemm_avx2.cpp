// Q5_0 x Q8_0 matmul on weights in their GGUF layout (rows of 22-byte
// BlockQ5_0, read in place from the mapping), AVX2.  Built with -mavx2
// -mfma -mf16c.
//
// Where the AVX-512 VNNI kernels run, Q5_0 is repacked into 16-row groups
// (matmul_gemm_x16_avx512vnni.cpp); on AVX2 alone it stays in the file's
// bytes (zero-copy; a 22-byte block at a 2-byte-aligned offset costs only
// unaligned loads).  One row at a time, this kernel is several times slower
// than the interleaved ones (bench/kernels: gemm512 61 GOP/s against 456
// for Q8_0 x16 on SmolLM2's 1536 x 576); an x4 layout would close the gap.
//
// Per block, the 16 bytes of qs become 32 nibbles in element order (low
// nibbles: elements 0..15, high: 16..31), the 32 bits of qh a byte mask
// (byte e = 0xff when bit e is set), and w = nibble | (0xf0 where the bit is
// clear) is q - 16 as int8, in [-16, 15].  The dot product with the signed
// activations goes through the unsigned x signed maddubs as
// maddubs(|w|, sign(a, w)): |w| <= 16, |a| <= 127, so a pair is at most
// 2 * 16 * 127 = 4064, far from int16 saturation; madd(., 1) gives 8 int32
// lanes of 4 products each (|lane| <= 8128, exact in fp32), each FMA'd with
// fp32(dw) * fp32(da) into a float lane accumulator; the 8 lanes are summed
// once per output, in a fixed order.
//
// Tiles: 1 row x 4 tokens (a block unpacked once for 4 tokens, activations
// re-read from L1), tails of 1-3 tokens; every (row, token) goes through the
// same operations whatever its tile, so a token's result does not depend on
// the others in the call.  da is decoded once per call per (token, block)
// (for_token_chunks).
// Contract: see kernels::MatmulKernelFn; any r0 (layout GGUF: groups of 1).
// Unaligned loads only; reads only the blocks of rows [r0, r1), no byte past
// a block; writes rows < r1 only.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul.h"
#include "kernels/mca_marker.h"
#include "kernels/x86/token_chunks.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

constexpr size_t kWBlock = sizeof(quant::BlockQ5_0);  // 22: d, qh[4], qs[16]
constexpr size_t kABlock = sizeof(quant::BlockQ8_0);  // 34: d, q[32]

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Byte e of the result is 0xff when bit e of bits is set, else 0.
inline __m256i bytes_from_bits(uint32_t bits) {
  // Bytes 0-7 take bits' byte 0, 8-15 byte 1, 16-23 byte 2, 24-31 byte 3
  // (the shuffle works per 128-bit half; each half holds all four bytes).
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);  // byte k of 8: 1 << k
  const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
  return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

// The 32 values q - 16 of one block, int8, in element order.
inline __m256i unpack(const uint8_t* blk) {
  uint32_t qh;
  std::memcpy(&qh, blk + 2, 4);  // little-endian mask, as x86 loads it
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 6));
  const __m256i nib = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(qs, 4), qs),
                                       _mm256_set1_epi8(0x0f));
  const __m256i minus16 = _mm256_andnot_si256(bytes_from_bits(qh), _mm256_set1_epi8((char)0xf0));
  return _mm256_or_si256(nib, minus16);
}

// The 8 lanes of v summed: (0+4, 1+5, 2+6, 3+7), then pairs, then the two.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One weight row (wrow, nb blocks) x T tokens: y[t * ldy] for t < T.
// x: the T tokens' activation rows; da: their scales (token stride nb).
template <int T>
void row_x_tokens(const uint8_t* wrow, int64_t nb, const uint8_t* x, size_t x_stride,
                  const float* da, float* y, int64_t ldy) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    LILIMS_MCA_LOOP("q5_0", 1, T, 1);
    const uint8_t* blk = wrow + b * kWBlock;
    const __m256i w = unpack(blk);
    const __m256i u = _mm256_abs_epi8(w);
    const float dw = load_f16(blk);
    for (int t = 0; t < T; ++t) {
      const __m256i a = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(x + t * x_stride + b * kABlock + 2));
      const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, _mm256_sign_epi8(a, w)), ones);
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * da[t * nb + b]), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = hsum(acc[t]);
}

}  // namespace

void q5_0_q8_0_gemm__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                          size_t x_stride, int64_t n, float* y, int64_t ldy) {
  const int64_t nb = W.cols / quant::kBlock;
  const size_t row_bytes = (size_t)nb * kWBlock;
  const uint8_t* base = static_cast<const uint8_t*>(W.data);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const auto decode = [&](int64_t j0, int64_t m, float* da) {
    for (int64_t j = 0; j < m; ++j) {
      const uint8_t* xr = xb + (j0 + j) * x_stride;
      for (int64_t b = 0; b < nb; ++b) da[j * nb + b] = load_f16(xr + b * kABlock);
    }
  };
  for_token_chunks<float>(n, nb, 4, decode, [&](int64_t j0, int64_t m, const float* da) {
    const uint8_t* xc = xb + j0 * x_stride;
    float* yc = y + j0 * ldy;
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wrow = base + (size_t)r * row_bytes;
      int64_t j = 0;
      for (; j + 4 <= m; j += 4) {
        row_x_tokens<4>(wrow, nb, xc + j * x_stride, x_stride, da + j * nb, yc + j * ldy + r, ldy);
      }
      const uint8_t* xt = xc + j * x_stride;
      const float* dt = da + j * nb;
      float* yt = yc + j * ldy + r;
      switch (m - j) {
        case 3: row_x_tokens<3>(wrow, nb, xt, x_stride, dt, yt, ldy); break;
        case 2: row_x_tokens<2>(wrow, nb, xt, x_stride, dt, yt, ldy); break;
        case 1: row_x_tokens<1>(wrow, nb, xt, x_stride, dt, yt, ldy); break;
        default: break;
      }
    }
  });
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
