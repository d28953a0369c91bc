// Q8_0 x Q8_0, Q4_0 x Q8_0, Q5_0 x Q8_0 and Q4_1 x Q8_1 matmul on 16-row interleaved
// weights (kLayoutX16, quant/repack.h), AVX-512 VNNI.  Built with
// -mavx512f -mavx512bw -mavx512vl -mavx512vnni (and the AVX2 flags).
//
// One 64-byte load holds 4 quant bytes of each of 16 rows, one row per
// 32-bit lane, so vpdpbusd (unsigned x signed bytes, 4 products summed into
// each int32 lane) against 4 activation bytes broadcast to every lane adds
// one step of all 16 rows' block dot products at once; a block is 8 such
// steps and its int32 lanes are the 16 rows' exact block dots, with no
// horizontal sum.  The weight side is unsigned:
//   Q4_0, Q4_1: the nibbles (0..15) as they are; vector i < 4 holds the low
//     nibbles of chunk i (elements 4i..4i+3), vector 4 + i the high ones
//     (elements 16+4i..), so vector v always meets activation bytes 4v..4v+3.
//   Q8_0: stored as q + 128 (repack XORs 0x80).
//   Q5_0: Q4_0's nibble vectors, each OR'd with its fifth bits (0..31): the
//     block's first vector holds the 16 rows' qh words, one per lane; the 4
//     bits of qh a vector needs, shifted down, index a 16-entry table
//     (vpermd) of the 4 bytes with 0x10 where a bit is set.
// The offsets become one per-(token, block) integer started in the
// accumulator: Q4_0 -8 * sum(a), Q5_0 -16 * sum(a), Q8_0 -128 * sum(a),
// decoded once per call
// into a small table (ActInfo), like the activation scale.  Then one
// convert and one FMA per block and token apply dw (16 rows) * da, and
// Q4_1 adds mw * s (the Q8_1 block's d * sum(q)) with one more FMA.
// No overflow: |sum| <= 32 * 255 * 128 + 128 * 32 * 127 < 2^21 per block.
//
// Tiles: 1 group (16 rows) x up to 8 tokens (the 8 unpacked weight vectors
// stay in registers for all of them, the activation bytes are broadcast
// from memory), tails of 1-7 tokens; decode (1 token) streams one group
// after the other, Q4 with a software prefetch 4 KiB ahead (measured on
// Zen 4, quiet: 5-25% faster than none on DRAM-sized TinyLlama/SmolLM2
// matrices, 2 and 8 KiB slower than 4; Q8_0 is faster without).
// Contract: see kernels::MatmulKernelFn.  Unaligned loads only; reads the
// padding rows of a partial last group, writes rows < r1 only.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX512VNNI)  // empty on other architectures
LILIMS_TARGET_AVX512VNNI_BEGIN
// GCC 12's _mm512_undefined_ps (behind _mm512_cvtepi32_ps / _mm512_cvtph_ps)
// initialises a variable from itself, which -Wmaybe-uninitialized reports at
// every use under -O3.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul.h"
#include "kernels/mca_marker.h"
#include "kernels/x86/token_chunks.h"
#include "quant/repack.h"

namespace lilims::kernels {
namespace {

using quant::Type;

// Per (token, block) values decoded once per call.
struct ActInfo {
  float d;          // fp32 activation scale
  union {
    int32_t corr;   // Q4_0: -8 * sum(q); Q8_0: -128 * sum(q)
    float s;        // Q4_1: fp32(s) = d * sum(q) as the Q8_1 block stores it
  };
};
static_assert(sizeof(ActInfo) == 8, "ActInfo is 8 bytes");

template <Type WT>
struct X16;

template <>
struct X16<Type::Q8_0> {
  using Blk = quant::BlockQ8_0x16;
  static constexpr bool kQ4 = false, kHasMin = false;
  static constexpr int32_t kOffset = -128;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr size_t kPrefetchBytes = 0;
};

template <>
struct X16<Type::Q4_0> {
  using Blk = quant::BlockQ4_0x16;
  static constexpr bool kQ4 = true, kHasMin = false;
  static constexpr int32_t kOffset = -8;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr size_t kPrefetchBytes = 4096;
};

template <>
struct X16<Type::Q5_0> {
  using Blk = quant::BlockQ5_0x16;
  static constexpr bool kQ4 = false, kHasMin = false;
  static constexpr int32_t kOffset = -16;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr size_t kPrefetchBytes = 4096;  // as Q4_0's (not measured apart)
};

template <>
struct X16<Type::Q4_1> {
  using Blk = quant::BlockQ4_1x16;
  static constexpr bool kQ4 = true, kHasMin = true;
  static constexpr int32_t kOffset = 0;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_1), kActQ = 4;
  static constexpr size_t kPrefetchBytes = 4096;
};

inline float load_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m512 load_f16x16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline __m512i bcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// The 8 unsigned weight vectors of one group block; vector v meets
// activation bytes 4v..4v+3.
template <Type WT>
inline void unpack(const typename X16<WT>::Blk* b, __m512i w[8]) {
  if constexpr (WT == Type::Q5_0) {
    // Entry i: byte k = 0x10 when bit k of i is set (k < 4).
    const __m512i spread = _mm512_setr_epi32(
        0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010, 0x00101000,
        0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010, 0x10100000, 0x10100010,
        0x10101000, 0x10101010);
    const __m512i lo = _mm512_set1_epi8(0x0f);
    const __m512i qh = _mm512_loadu_si512(b->qh);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(b->qs + 64 * c);
      // vpermd reads the low 4 bits of each index lane: bits 4c..4c+3 of qh
      // (elements 4c..) and 16+4c.. (elements 16+4c..).
      const __m512i h_lo = _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, 4 * c), spread);
      const __m512i h_hi = _mm512_permutexvar_epi32(_mm512_srli_epi32(qh, 16 + 4 * c), spread);
      w[c] = _mm512_or_si512(_mm512_and_si512(v, lo), h_lo);
      w[4 + c] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(v, 4), lo), h_hi);
    }
  } else if constexpr (X16<WT>::kQ4) {
    const __m512i lo = _mm512_set1_epi8(0x0f);
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(b->qs + 64 * c);
      w[c] = _mm512_and_si512(v, lo);
      w[4 + c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo);
    }
  } else {
    for (int c = 0; c < 8; ++c) w[c] = _mm512_loadu_si512(b->qs + 64 * c);
  }
}

// Decodes the ActInfo of n tokens x nb blocks (row j at info + j * nb).
template <Type WT>
void act_info(const uint8_t* x, size_t x_stride, int64_t n, int64_t nb, ActInfo* info) {
  using P = X16<WT>;
  const __m256i ones = _mm256_set1_epi8(1);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* xr = x + j * x_stride;
    ActInfo* o = info + j * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* ab = xr + b * P::kActBlock;
      o[b].d = load_f16(ab);
      if constexpr (P::kHasMin) {
        o[b].s = load_f16(ab + 2);
      } else {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + P::kActQ));
        const __m256i s8 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, q);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        o[b].corr = P::kOffset * _mm_cvtsi128_si32(s4);
      }
    }
  }
}

// One group (16 rows from row0; rows >= r1 computed, not stored) x T
// tokens.  info: ActInfo of the T tokens (token stride nb).
template <Type WT, int T>
void tile(const typename X16<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t x_stride,
          const ActInfo* info, float* y, int64_t ldy, int64_t row0, int64_t r1) {
  using P = X16<WT>;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    LILIMS_MCA_LOOP("x16", 16, T, 1);
    const typename P::Blk* blk = g + b;
    if (T == 1 && P::kPrefetchBytes > 0) {
      const char* ahead = reinterpret_cast<const char*>(blk) + P::kPrefetchBytes;
      for (size_t off = 0; off < sizeof(typename P::Blk); off += 64) {
        _mm_prefetch(ahead + off, _MM_HINT_T0);
      }
    }
    __m512i w[8];
    unpack<WT>(blk, w);
    const __m512 dw = load_f16x16(blk->d);
    __m512 mw;
    if constexpr (P::kHasMin) mw = load_f16x16(blk->m);
    // Unrolled so that acc[] stays in registers (GCC keeps a rolled T = 8
    // loop's accumulators on the stack).
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const int8_t* aq = reinterpret_cast<const int8_t*>(x + t * x_stride + b * P::kActBlock + P::kActQ);
      const ActInfo& ai = info[t * nb + b];
      __m512i isum = P::kHasMin ? _mm512_setzero_si512() : _mm512_set1_epi32(ai.corr);
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) isum = _mm512_dpbusd_epi32(isum, w[v], bcast4(aq + 4 * v));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(ai.d)), acc[t]);
      if constexpr (P::kHasMin) acc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(ai.s), acc[t]);
    }
  }
  const int valid = (int)(r1 - row0 < 16 ? r1 - row0 : 16);
  const __mmask16 keep = (__mmask16)((1u << valid) - 1u);
  for (int t = 0; t < T; ++t) {
    float* out = y + t * ldy + row0;
    if (valid == 16) {
      _mm512_storeu_ps(out, acc[t]);
    } else {
      _mm512_mask_storeu_ps(out, keep, acc[t]);
    }
  }
}

constexpr int kTile = 8;

// Rows [r0, r1) x m tokens: per group, tiles of kTile tokens then the tail.
template <Type WT>
void rows_x_tokens(const typename X16<WT>::Blk* base, int64_t nb, int64_t r0, int64_t r1,
                   const uint8_t* x, size_t x_stride, int64_t m, const ActInfo* info, float* y,
                   int64_t ldy) {
  for (int64_t row0 = r0; row0 < r1; row0 += 16) {
    const typename X16<WT>::Blk* g = base + (row0 / 16) * nb;
    int64_t j = 0;
    for (; j + kTile <= m; j += kTile) {
      tile<WT, kTile>(g, nb, x + j * x_stride, x_stride, info + j * nb, y + j * ldy, ldy, row0, r1);
    }
    const uint8_t* xt = x + j * x_stride;
    const ActInfo* it = info + j * nb;
    float* yt = y + j * ldy;
    switch (m - j) {
      case 7: tile<WT, 7>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      case 6: tile<WT, 6>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      case 5: tile<WT, 5>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      case 4: tile<WT, 4>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      case 3: tile<WT, 3>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      case 2: tile<WT, 2>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      case 1: tile<WT, 1>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
      default: break;
    }
  }
}

template <Type WT>
void gemm_x16(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
              int64_t n, float* y, int64_t ldy) {
  using Blk = typename X16<WT>::Blk;
  const int64_t nb = W.cols / quant::kBlock;
  const Blk* base = static_cast<const Blk*>(W.data);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const auto decode = [&](int64_t j0, int64_t m, ActInfo* info) {
    act_info<WT>(xb + j0 * x_stride, x_stride, m, nb, info);
  };
  for_token_chunks<ActInfo>(n, nb, kTile, decode, [&](int64_t j0, int64_t m, const ActInfo* info) {
    rows_x_tokens<WT>(base, nb, r0, r1, xb + j0 * x_stride, x_stride, m, info, y + j0 * ldy, ldy);
  });
}

}  // namespace

void q8_0_q8_0_gemm_x16__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                    size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x16<Type::Q8_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_0_q8_0_gemm_x16__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                    size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x16<Type::Q4_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q5_0_q8_0_gemm_x16__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                    size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x16<Type::Q5_0>(W, r0, r1, x, x_stride, n, y, ldy);
}
void q4_1_q8_1_gemm_x16__avx512vnni(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                    size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_x16<Type::Q4_1>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX512VNNI_END
#endif  // LILIMS_HAVE_AVX512VNNI
