// Q4_K, Q5_K x Q8_1 and Q6_K x Q8_0 matmul on x86, reading the weights in
// their GGUF layout (in place in the file mapping: the K-quants are never
// repacked), shared by the AVX2 and the AVX-512 VNNI files: each includes
// this with its own Dot, the only part that differs (AVX2: maddubs + madd;
// VNNI: one vpdpbusd on 256-bit vectors).
//
// A super-block of 256 elements meets 8 activation blocks of 32; element
// block j (32 j .. 32 j + 31) is
//   Q4_K / Q5_K: sub-block j, the low (j even) or high nibbles of
//     qs[32 (j / 2) ..] (Q5_K: OR'd with bit j of qh, shifted to bit 4);
//   Q6_K: quarter j % 4 of half j / 4 (nibble and two high bits, 0..63),
//     sub-blocks 2j and 2j + 1 of 16.
// Per activation block j and token, Dot gives 8 int32 lanes of the block's
// dot product (Q6_K: already times its two 16-scales, with the - 32 offset:
// (q - 32) * a summed in int16 pairs, |.| <= 2 * 32 * 127); a transpose of
// horizontal adds turns the 8 blocks' lanes into one vector [S_0 .. S_7];
// Q4_K/Q5_K multiply it by the 6-bit scales (int32), then one convert and
// one FMA with dw * [da_0 .. da_7] per super-block and token, and Q4_K/Q5_K
// one FMA of dminw * [min_0 .. min_7] with the blocks' sa.  da and sa are
// decoded once per call into a table (token_chunks.h).
// No overflow: maddubs sums two products <= 31 * 127 (Q5_K) or 63 * 127
// (Q6_K before the offset) < 2^15; a block's int32 sum times a scale stays
// below 32 * 63 * 127 * 63 < 2^24.
// Tile: 1 row x up to 4 tokens (the row's super-block unpacked once per
// tile), rows in order, then the tail tokens one at a time.
// Contract: see kernels::MatmulKernelFn.  Unaligned loads only; reads
// nothing past the row's last super-block.
#pragma once

#include <immintrin.h>

#include <cstring>
#include <type_traits>

#include "kernels/matmul.h"
#include "kernels/mca_marker.h"
#include "kernels/x86/token_chunks.h"
#include "quant/quant.h"

namespace lilims::kernels::kquant_x86 {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::kBlockK;

inline float load_f16(const void* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// [sum of P[0]'s lanes, ..., sum of P[7]'s lanes].
inline __m256i reduce8(const __m256i P[8]) {
  const __m256i h01 = _mm256_hadd_epi32(P[0], P[1]), h23 = _mm256_hadd_epi32(P[2], P[3]);
  const __m256i h45 = _mm256_hadd_epi32(P[4], P[5]), h67 = _mm256_hadd_epi32(P[6], P[7]);
  const __m256i g0 = _mm256_hadd_epi32(h01, h23);  // [0..3 of low halves | 0..3 of high halves]
  const __m256i g1 = _mm256_hadd_epi32(h45, h67);
  return _mm256_add_epi32(_mm256_permute2x128_si256(g0, g1, 0x20), _mm256_permute2x128_si256(g0, g1, 0x31));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <class Blk>
struct Traits {
  static constexpr bool kQ6 = std::is_same_v<Blk, BlockQ6_K>;
  static constexpr bool kQ5 = std::is_same_v<Blk, BlockQ5_K>;
  static constexpr size_t kActBlock = kQ6 ? 34 : 36;  // Q8_0 / Q8_1 block bytes
  static constexpr size_t kActQ = kQ6 ? 2 : 4;        // offset of its quants
};

// One super-block of a row, unpacked: the 8 element blocks' quants and
// the scales, shared by the tile's tokens.
template <class Dot, class Blk>
struct Unpacked {
  __m256i q[8];
  __m256i sc;                 // Q4_K/Q5_K: the 8 scales as int32
  typename Dot::Q6Scale s6[8];  // Q6_K: the 16-scales of each element block
  __m256 dmins;               // Q4_K/Q5_K: dminw * min_j
  float d;

  explicit Unpacked(const Blk* w) {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    if constexpr (Traits<Blk>::kQ6) {
      d = load_f16(&w->d);
      const __m256i m2 = _mm256_set1_epi8(3);
      for (int h = 0; h < 2; ++h) {
        const __m256i l0 = load256(w->ql + 64 * h), l1 = load256(w->ql + 64 * h + 32);
        const __m256i qh = load256(w->qh + 32 * h);
        // Quarter k: nibble k / 2 of ql[64h + 32 (k % 2) + l], bits 2k..2k+1 of qh[32h + l].
        for (int k = 0; k < 4; ++k) {
          const __m256i lb = k % 2 ? l1 : l0;
          const __m256i lo = k < 2 ? _mm256_and_si256(lb, m4) : _mm256_and_si256(_mm256_srli_epi16(lb, 4), m4);
          const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m2);
          q[4 * h + k] = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
        }
      }
      for (int j = 0; j < 8; ++j) s6[j] = Dot::q6_scale(w->scales[2 * j], w->scales[2 * j + 1]);
      sc = _mm256_setzero_si256();
      dmins = _mm256_setzero_ps();
    } else {
      for (auto& s : s6) s = typename Dot::Q6Scale{};
      d = load_f16(&w->d);
      uint8_t scb[8], mnb[8];
      quant::k_scales_mins(w->scales, scb, mnb);
      sc = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scb)));
      dmins = _mm256_mul_ps(_mm256_set1_ps(load_f16(&w->dmin)),
                            _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mnb)))));
      __m256i hbits = _mm256_setzero_si256();
      if constexpr (Traits<Blk>::kQ5) hbits = load256(w->qh);
      for (int c = 0; c < 4; ++c) {
        const __m256i b = load256(w->qs + 32 * c);
        __m256i lo = _mm256_and_si256(b, m4), hi = _mm256_and_si256(_mm256_srli_epi16(b, 4), m4);
        if constexpr (Traits<Blk>::kQ5) {
          const __m256i one = _mm256_set1_epi8(1);
          lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c), one), 4));
          hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 2 * c + 1), one), 4));
        }
        q[2 * c] = lo;
        q[2 * c + 1] = hi;
      }
    }
  }
};

// The super-block's contribution for one token: a: its 8 activation blocks
// (stride kActBlock), da / sa: their decoded scales and sums.
template <class Dot, class Blk>
inline void block_x_token(const Unpacked<Dot, Blk>& u, const uint8_t* a, const float* da, const float* sa,
                          __m256& acc, __m256& accm) {
  using Tr = Traits<Blk>;
  __m256i P[8];
  for (int j = 0; j < 8; ++j) {
    const __m256i aj = load256(a + j * Tr::kActBlock + Tr::kActQ);
    if constexpr (Tr::kQ6) {
      P[j] = Dot::dot_q6(u.q[j], aj, u.s6[j]);
    } else {
      P[j] = Dot::dot(u.q[j], aj);
    }
  }
  __m256i S = reduce8(P);
  if constexpr (!Tr::kQ6) S = _mm256_mullo_epi32(S, u.sc);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S), _mm256_mul_ps(_mm256_set1_ps(u.d), _mm256_loadu_ps(da)), acc);
  if constexpr (!Tr::kQ6) accm = _mm256_fmadd_ps(u.dmins, _mm256_loadu_ps(sa), accm);
}

// Per token: d of each activation block, then (Q8_1) its s, as floats.
template <class Blk>
void decode_acts(const uint8_t* x, size_t x_stride, int64_t n, int64_t nb32, float* info) {
  using Tr = Traits<Blk>;
  for (int64_t t = 0; t < n; ++t) {
    const uint8_t* row = x + t * x_stride;
    float* o = info + t * 2 * nb32;
    for (int64_t b = 0; b < nb32; ++b) {
      o[b] = load_f16(row + b * Tr::kActBlock);
      o[nb32 + b] = Tr::kQ6 ? 0.0f : load_f16(row + b * Tr::kActBlock + 2);
    }
  }
}

template <class Dot, class Blk, int T>
inline void row_x_tokens(const Blk* wr, int64_t nb, const uint8_t* x, size_t x_stride, const float* info,
                         float* y, int64_t ldy) {
  using Tr = Traits<Blk>;
  const int64_t nb32 = nb * 8;
  __m256 acc[T], accm[T];
  for (int t = 0; t < T; ++t) acc[t] = accm[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    LILIMS_MCA_LOOP("kquant", 1, T, 1);
    const Unpacked<Dot, Blk> u(wr + b);
    for (int t = 0; t < T; ++t) {
      const float* it = info + t * 2 * nb32;
      block_x_token<Dot, Blk>(u, x + t * x_stride + 8 * b * Tr::kActBlock, it + 8 * b, it + nb32 + 8 * b,
                              acc[t], accm[t]);
    }
  }
  for (int t = 0; t < T; ++t) y[t * ldy] = hsum(_mm256_sub_ps(acc[t], accm[t]));
}

template <class Dot, class Blk>
void gemm(const PackedWeight& W, int64_t r0, int64_t r1, const void* xv, size_t x_stride, int64_t n, float* y,
          int64_t ldy) {
  const int64_t nb = W.cols / kBlockK, nb32 = nb * 8;
  const Blk* w = static_cast<const Blk*>(W.data);
  const uint8_t* x = static_cast<const uint8_t*>(xv);
  for_token_chunks<float>(
      n, 2 * nb32, 4,
      [&](int64_t j0, int64_t m, float* info) { decode_acts<Blk>(x + j0 * x_stride, x_stride, m, nb32, info); },
      [&](int64_t j0, int64_t m, const float* info) {
        int64_t j = 0;
        for (; j + 4 <= m; j += 4) {
          for (int64_t r = r0; r < r1; ++r) {
            row_x_tokens<Dot, Blk, 4>(w + r * nb, nb, x + (j0 + j) * x_stride, x_stride, info + j * 2 * nb32,
                                      y + (j0 + j) * ldy + r, ldy);
          }
        }
        for (; j < m; ++j) {
          for (int64_t r = r0; r < r1; ++r) {
            row_x_tokens<Dot, Blk, 1>(w + r * nb, nb, x + (j0 + j) * x_stride, x_stride, info + j * 2 * nb32,
                                      y + (j0 + j) * ldy + r, ldy);
          }
        }
      });
}

}  // namespace lilims::kernels::kquant_x86
