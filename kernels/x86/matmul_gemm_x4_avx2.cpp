// Q8_0 x Q8_0, Q4_0 x Q8_0 and Q4_1 x Q8_1 matmul on 4-row interleaved
// weights (kLayoutX4, quant/repack.h), AVX2.  Built with -mavx2 -mfma -mf16c.
//
// One block column of a group (4 rows) is unpacked into four 32-byte
// registers, chunk c = [row0 8 | row1 8 | row2 8 | row3 8] int8, and for each
// token the matching 8 activation bytes are broadcast to the four 64-bit
// lanes, so maddubs + madd(., 1) gives int32 lanes (r0, r0, r1, r1, r2, r2,
// r3, r3): each row's exact block dot product split over two lanes.
//   Q4_0, Q4_1: the nibbles stay unsigned (0..15), maddubs(nibbles, a)
//     directly; Q4_0's "- 8" becomes - 8 * sum(a) per block (4 * sum(a)
//     off each of the row's two lanes), the sums computed once per call.
//   Q8_0: maddubs(|w|, sign(a, w)) (signed x signed through the unsigned x
//     signed instruction).
// Then one FMA per block and token applies dw * da (Q4_1 one more,
// mw * sa / 2 per lane, into an accumulator of its own).  da (and sa / 2,
// and the Q4_0 correction) are decoded once per call into a small table
// (ActInfo), not once per row.
// No int16 saturation: Q8_0 |w| <= 128, |a| <= 127: 2*128*127 = 32512 per
// maddubs, each madd'ed on its own; Q4 sums of 4 maddubs: 4*2*15*127 = 15240.
//
// Tiles: 1 group (4 rows) x 4 tokens (weights unpacked once for 4 tokens,
// activations re-read from L1), tails of 1-3 tokens; decode is T = 1, one
// group after the other so the weights stream linearly (a 2-group tile,
// two streams, read DRAM 2x slower), Q4 with a software prefetch 8 KiB ahead.
// Contract: see kernels::MatmulKernelFn.  Unaligned loads only; reads the
// padding rows of a partial last group, writes rows < r1 only.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul.h"
#include "kernels/x86/token_chunks.h"
#include "quant/repack.h"

namespace lilims::kernels {
namespace {

using quant::Type;

// Per (token, block) values decoded once per call.
struct ActInfo {
  float d;        // fp32 activation scale
  union {
    int32_t corr; // Q4_0: -4 * sum(q), added to both lanes of a row
    float s_half; // Q4_1: fp32(s) / 2, the min term per lane
  };
};
static_assert(sizeof(ActInfo) == 8, "ActInfo is 8 bytes");

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
  static constexpr bool kQ4 = false, kHasMin = false, kCorr = false;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr int kPrefetchBytes = 0;  // measured: any prefetch (2 or 8 KiB) slowed it
  static void unpack(const Blk* b, __m256i w[4]) {
    for (int c = 0; c < 4; ++c) w[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32 * c));
  }
};

template <>
struct X4<Type::Q4_0> {
  using Blk = quant::BlockQ4_0x4;
  static constexpr bool kQ4 = true, kHasMin = false, kCorr = true;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_0), kActQ = 2;
  static constexpr int kPrefetchBytes = 8192;
};

template <>
struct X4<Type::Q4_1> {
  using Blk = quant::BlockQ4_1x4;
  static constexpr bool kQ4 = true, kHasMin = true, kCorr = false;
  static constexpr size_t kActBlock = sizeof(quant::BlockQ8_1), kActQ = 4;
  static constexpr int kPrefetchBytes = 8192;
};

// Unsigned nibbles of a Q4 group block: chunk 0/1 = low nibbles of bytes
// 0..7 / 8..15 (elements 0..7 / 8..15), chunk 2/3 = high (16..23 / 24..31).
template <class Blk>
inline void unpack_q4(const Blk* b, __m256i w[4]) {
  const __m256i lo = _mm256_set1_epi8(0x0f);
  const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
  const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs + 32));
  w[0] = _mm256_and_si256(l0, lo);
  w[1] = _mm256_and_si256(l1, lo);
  w[2] = _mm256_and_si256(_mm256_srli_epi16(l0, 4), lo);
  w[3] = _mm256_and_si256(_mm256_srli_epi16(l1, 4), lo);
}

template <Type WT>
inline void unpack(const typename X4<WT>::Blk* b, __m256i w[4]) {
  if constexpr (X4<WT>::kQ4) {
    unpack_q4(b, w);
  } else {
    X4<WT>::unpack(b, w);
  }
}

// int32 lanes (r0, r0, r1, r1, ...) of one group block (w: unpacked; for
// Q8_0 u = |w|) times one token's block, activation chunks a[4].
template <Type WT>
inline __m256i block_dot(const __m256i w[4], const __m256i u[4], const __m256i a[4]) {
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (X4<WT>::kQ4) {
    const __m256i p0 = _mm256_maddubs_epi16(w[0], a[0]);
    const __m256i p1 = _mm256_maddubs_epi16(w[1], a[1]);
    const __m256i p2 = _mm256_maddubs_epi16(w[2], a[2]);
    const __m256i p3 = _mm256_maddubs_epi16(w[3], a[3]);
    return _mm256_madd_epi16(_mm256_add_epi16(_mm256_add_epi16(p0, p1), _mm256_add_epi16(p2, p3)), ones);
  } else {
    __m256i p[4];
    for (int c = 0; c < 4; ++c) {
      p[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(u[c], _mm256_sign_epi8(a[c], w[c])), ones);
    }
    return _mm256_add_epi32(_mm256_add_epi32(p[0], p[1]), _mm256_add_epi32(p[2], p[3]));
  }
}

// Decodes the ActInfo of n tokens x nb blocks (row j at info + j * nb).
template <Type WT>
void act_info(const uint8_t* x, size_t x_stride, int64_t n, int64_t nb, ActInfo* info) {
  using P = X4<WT>;
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int64_t j = 0; j < n; ++j) {
    const uint8_t* xr = x + j * x_stride;
    ActInfo* o = info + j * nb;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* ab = xr + b * P::kActBlock;
      o[b].d = load_f16(ab);
      if constexpr (P::kCorr) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab + P::kActQ));
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
        o[b].corr = -4 * _mm_cvtsi128_si32(s4);
      } else if constexpr (P::kHasMin) {
        o[b].s_half = 0.5f * load_f16(ab + 2);
      } else {
        o[b].corr = 0;
      }
    }
  }
}

// y[t * ldy + row0 + r] for the rows < r1 of one group, from lanes
// (r0, r0, r1, r1, ...).
template <int T>
inline void store(const __m256 acc[T], float* y, int64_t ldy, int64_t row0, int64_t r1) {
  const int valid = (int)(r1 - row0 < 4 ? r1 - row0 : 4);
  for (int t = 0; t < T; ++t) {
    // (a0+a1, a2+a3, ., . | a4+a5, a6+a7, ., .) -> rows 0..3
    const __m256 h = _mm256_hadd_ps(acc[t], acc[t]);
    const __m128 rows = _mm_movelh_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    float* out = y + t * ldy + row0;
    if (valid == 4) {
      _mm_storeu_ps(out, rows);
    } else {
      alignas(16) float tmp[4];
      _mm_store_ps(tmp, rows);
      for (int r = 0; r < valid; ++r) out[r] = tmp[r];
    }
  }
}

// Block b of one group (blk) times T tokens, accumulated into acc[T] (and
// the Q4_1 min term into accm[T]).
template <Type WT, int T>
inline void block_x_tokens(const typename X4<WT>::Blk* blk, int64_t b, int64_t nb,
                           const uint8_t* x, size_t x_stride, const ActInfo* info, __m256 acc[T],
                           __m256 accm[T]) {
  using P = X4<WT>;
  __m256i w[4], u[4];
  unpack<WT>(blk, w);
  if constexpr (!P::kQ4) {
    for (int c = 0; c < 4; ++c) u[c] = _mm256_sign_epi8(w[c], w[c]);
  }
  const __m256 dw = scales_x2(blk->d);
  __m256 mw;
  if constexpr (P::kHasMin) mw = scales_x2(blk->m);
  for (int t = 0; t < T; ++t) {
    const int8_t* aq = reinterpret_cast<const int8_t*>(x + t * x_stride + b * P::kActBlock + P::kActQ);
    const ActInfo& ai = info[t * nb + b];
    __m256i a[4];
    for (int c = 0; c < 4; ++c) a[c] = bcast8(aq + 8 * c);
    __m256i isum = block_dot<WT>(w, u, a);
    if constexpr (P::kCorr) isum = _mm256_add_epi32(isum, _mm256_set1_epi32(ai.corr));
    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(dw, _mm256_broadcast_ss(&ai.d)), acc[t]);
    if constexpr (P::kHasMin) accm[t] = _mm256_fmadd_ps(mw, _mm256_broadcast_ss(&ai.s_half), accm[t]);
  }
}

// One group (4 rows from row0; rows >= r1 computed, not stored) x T tokens.
// info: ActInfo of the T tokens (token stride nb).  (Splitting T = 1 into
// even/odd block accumulators measured no faster: the loop is bound by
// vector-op throughput, not by the FMA chain.)
template <Type WT, int T>
void tile(const typename X4<WT>::Blk* g, int64_t nb, const uint8_t* x, size_t x_stride,
          const ActInfo* info, float* y, int64_t ldy, int64_t row0, int64_t r1) {
  using P = X4<WT>;
  // Decode streams one group at a time (two interleaved group streams
  // measured 2x slower from DRAM); for Q4 a software prefetch 8 KiB ahead
  // keeps more misses in flight than the hardware prefetcher alone
  // (measured better than 0 and 4 KiB); Q8_0 streams best without.
  constexpr int kPrefetch = (int)(P::kPrefetchBytes / sizeof(typename P::Blk));
  __m256 acc[T], accm[T];
  for (int t = 0; t < T; ++t) acc[t] = accm[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (T < 4 && kPrefetch > 0) _mm_prefetch(reinterpret_cast<const char*>(g + b + kPrefetch), _MM_HINT_T0);
    block_x_tokens<WT, T>(g + b, b, nb, x, x_stride, info, acc, accm);
  }
  if constexpr (P::kHasMin) {
    for (int t = 0; t < T; ++t) acc[t] = _mm256_add_ps(acc[t], accm[t]);
  }
  store<T>(acc, y, ldy, row0, r1);
}

// Rows [r0, r1) x T tokens, one group after the other.
template <Type WT, int T>
void rows_x_tokens(const typename X4<WT>::Blk* base, int64_t nb, int64_t r0, int64_t r1,
                   const uint8_t* x, size_t x_stride, const ActInfo* info, float* y, int64_t ldy) {
  for (int64_t row0 = r0; row0 < r1; row0 += 4) {
    tile<WT, T>(base + (row0 / 4) * nb, nb, x, x_stride, info, y, ldy, row0, r1);
  }
}

template <Type WT>
void gemm_x4(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
             int64_t n, float* y, int64_t ldy) {
  using Blk = typename X4<WT>::Blk;
  const int64_t nb = W.cols / quant::kBlock;
  const Blk* base = static_cast<const Blk*>(W.data);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  const auto decode = [&](int64_t j0, int64_t m, ActInfo* info) {
    act_info<WT>(xb + j0 * x_stride, x_stride, m, nb, info);
  };
  for_token_chunks<ActInfo>(n, nb, 4, decode, [&](int64_t j0, int64_t m, const ActInfo* info) {
    const uint8_t* xc = xb + j0 * x_stride;
    float* yc = y + j0 * ldy;
    switch (m) {
      case 1: rows_x_tokens<WT, 1>(base, nb, r0, r1, xc, x_stride, info, yc, ldy); return;
      case 2: rows_x_tokens<WT, 2>(base, nb, r0, r1, xc, x_stride, info, yc, ldy); return;
      case 3: rows_x_tokens<WT, 3>(base, nb, r0, r1, xc, x_stride, info, yc, ldy); return;
      default: break;
    }
    for (int64_t row0 = r0; row0 < r1; row0 += 4) {
      const Blk* g = base + (row0 / 4) * nb;
      int64_t j = 0;
      for (; j + 4 <= m; j += 4) {
        tile<WT, 4>(g, nb, xc + j * x_stride, x_stride, info + j * nb, yc + j * ldy, ldy, row0, r1);
      }
      const uint8_t* xt = xc + j * x_stride;
      const ActInfo* it = info + j * nb;
      float* yt = yc + j * ldy;
      switch (m - j) {
        case 3: tile<WT, 3>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
        case 2: tile<WT, 2>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
        case 1: tile<WT, 1>(g, nb, xt, x_stride, it, yt, ldy, row0, r1); break;
        default: break;
      }
    }
  });
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
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
