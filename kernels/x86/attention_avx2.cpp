// Fused attention over an F16 / Q8_0 / F32 KV cache, AVX2+FMA+F16C.
//
// One pass over the cache with an online softmax (flash style).  The rows
// of work are (query token, query head) pairs of one kv group; up to
// kAttnRows of them form a tile that walks the union of their visible key
// ranges in blocks of kAttnKeys positions.  Each K and V block is converted
// to f32 once into scratch and shared by every row of the tile, so the
// grouped-query heads and the query tokens of a prefill block read a cache
// row once per tile.  Per row and block: scores (2 rows x 4 keys register
// tiles), masking to the row's [lo, hi], running max m and sum l, acc =
// acc * exp(m_old - m_new) + sum_j p_j V_j; at the end out = acc / l.
//
// Decode (one query row) takes decode_group instead: the heads of a kv
// group as vector lanes, F16 K/V read straight from the cache (see there).
//
// Head dims 64/80/96/128 are compiled with the dim as a constant; any other
// multiple of 8 takes the generic instantiation, anything else the ref.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/ref/attention_ref.h"
#include "kernels/x86/ops_avx2.h"
#include "kernels/x86/vec_avx2.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

using detail::kAttnKeys;
using detail::kAttnRows;
constexpr int kPrefetchBlocks = 3;  // how far ahead the cache rows are prefetched
constexpr int kDecodeMinHeads = 6;  // decode_group from this many heads of a group
// and head dims from this (tiny heads gain nothing from it; with them the
// stories260K test of prefill == step-by-step logits (1e-3) saw 1.05e-3 from
// the decode path's other summation order)
constexpr int kDecodeMinDim = 32;

// Cache rows [p0, p0 + nk) of kv head g to f32 rows of d floats in dst.
void load_block(const AttentionArgs& a, const void* base, int64_t p0, int nk, int g, int d,
                float* dst) {
  const uint8_t* src = static_cast<const uint8_t*>(base) + p0 * a.kv_stride_bytes;
  switch (a.kv_type) {
    case quant::Type::F16:
      src += (int64_t)g * d * 2;
      for (int j = 0; j < nk; ++j, src += a.kv_stride_bytes, dst += d) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
        for (int c = 0; c < d; c += 8) {
          _mm256_store_ps(dst + c, _mm256_cvtph_ps(_mm_loadu_si128(
                                       reinterpret_cast<const __m128i*>(h + c))));
        }
      }
      break;
    case quant::Type::Q8_0:
      src += (int64_t)g * (d / quant::kBlock) * sizeof(quant::BlockQ8_0);
      for (int j = 0; j < nk; ++j, src += a.kv_stride_bytes, dst += d) {
        const quant::BlockQ8_0* b = reinterpret_cast<const quant::BlockQ8_0*>(src);
        for (int blk = 0; blk < d / quant::kBlock; ++blk) {
          const __m256 s = _mm256_set1_ps(_cvtsh_ss(b[blk].d));
          for (int k = 0; k < 4; ++k) {
            const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[blk].q + 8 * k));
            _mm256_store_ps(dst + blk * quant::kBlock + 8 * k,
                            _mm256_mul_ps(s, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
          }
        }
      }
      break;
    default:  // F32
      src += (int64_t)g * d * 4;
      for (int j = 0; j < nk; ++j, src += a.kv_stride_bytes, dst += d) {
        std::memcpy(dst, src, (size_t)d * 4);
      }
  }
}

// Prefetches the cache rows [p0, p0 + nk) of kv head g: issued one block
// ahead, so the strided rows (one head's slice of each position) are in
// cache when load_block converts them instead of costing a miss each.
void prefetch_block(const AttentionArgs& a, const void* base, int64_t p0, int nk, int g, int d) {
  const int64_t head_bytes = (int64_t)quant::row_bytes(a.kv_type, d);
  const uint8_t* row = static_cast<const uint8_t*>(base) + p0 * a.kv_stride_bytes + g * head_bytes;
  for (int j = 0; j < nk; ++j, row += a.kv_stride_bytes) {
    for (int64_t o = 0; o < head_bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(row + o), _MM_HINT_T0);
  }
}

// Sums of four accumulators as one __m128 (a, b, c, d).
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// s[j] = q . K[j] for j < nk4 (a multiple of 4), one query row.
template <int D>
void scores_1(const float* q, const float* kb, int nk4, int d_rt, float* s) {
  const int d = D ? D : d_rt;
  for (int j = 0; j < nk4; j += 4) {
    const float* k0 = kb + (int64_t)j * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) {
      const __m256 qv = _mm256_loadu_ps(q + c);
      a0 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + c), a0);
      a1 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + d + c), a1);
      a2 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + 2 * d + c), a2);
      a3 = _mm256_fmadd_ps(qv, _mm256_load_ps(k0 + 3 * d + c), a3);
    }
    _mm_store_ps(s + j, hsum4(a0, a1, a2, a3));
  }
}

// The same for two query rows at once (K loads shared).
template <int D>
void scores_2(const float* q0, const float* q1, const float* kb, int nk4, int d_rt, float* s0,
              float* s1) {
  const int d = D ? D : d_rt;
  for (int j = 0; j < nk4; j += 4) {
    const float* k0 = kb + (int64_t)j * d;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    __m256 b0 = _mm256_setzero_ps(), b1 = _mm256_setzero_ps();
    __m256 b2 = _mm256_setzero_ps(), b3 = _mm256_setzero_ps();
    for (int c = 0; c < d; c += 8) {
      const __m256 qa = _mm256_loadu_ps(q0 + c), qb = _mm256_loadu_ps(q1 + c);
      const __m256 k0v = _mm256_load_ps(k0 + c), k1v = _mm256_load_ps(k0 + d + c);
      const __m256 k2v = _mm256_load_ps(k0 + 2 * d + c), k3v = _mm256_load_ps(k0 + 3 * d + c);
      a0 = _mm256_fmadd_ps(qa, k0v, a0);
      a1 = _mm256_fmadd_ps(qa, k1v, a1);
      a2 = _mm256_fmadd_ps(qa, k2v, a2);
      a3 = _mm256_fmadd_ps(qa, k3v, a3);
      b0 = _mm256_fmadd_ps(qb, k0v, b0);
      b1 = _mm256_fmadd_ps(qb, k1v, b1);
      b2 = _mm256_fmadd_ps(qb, k2v, b2);
      b3 = _mm256_fmadd_ps(qb, k3v, b3);
    }
    _mm_store_ps(s0 + j, hsum4(a0, a1, a2, a3));
    _mm_store_ps(s1 + j, hsum4(b0, b1, b2, b3));
  }
}

// acc[0, NV*8) = acc * corr + sum_{j < nk} p[j] * V[j][0, NV*8)  (V rows d apart)
template <int NV, int PS = 1>
inline void pv_chunk(float* acc, __m256 corr, const float* p, const float* v, int nk, int d) {
  __m256 r[NV];
  for (int k = 0; k < NV; ++k) r[k] = _mm256_mul_ps(_mm256_load_ps(acc + 8 * k), corr);
  for (int j = 0; j < nk; ++j, v += d) {
    const __m256 pj = _mm256_broadcast_ss(p + j * PS);
    for (int k = 0; k < NV; ++k) r[k] = _mm256_fmadd_ps(pj, _mm256_load_ps(v + 8 * k), r[k]);
  }
  for (int k = 0; k < NV; ++k) _mm256_store_ps(acc + 8 * k, r[k]);
}

template <int D, int PS = 1>
void pv_row(float* acc, float corr, const float* p, const float* vb, int nk, int d_rt) {
  const int d = D ? D : d_rt;
  const __m256 vc = _mm256_set1_ps(corr);
  int c = 0;
  for (; c + 64 <= d; c += 64) pv_chunk<8, PS>(acc + c, vc, p, vb + c, nk, d);
  switch ((d - c) / 8) {
    case 1: pv_chunk<1, PS>(acc + c, vc, p, vb + c, nk, d); break;
    case 2: pv_chunk<2, PS>(acc + c, vc, p, vb + c, nk, d); break;
    case 3: pv_chunk<3, PS>(acc + c, vc, p, vb + c, nk, d); break;
    case 4: pv_chunk<4, PS>(acc + c, vc, p, vb + c, nk, d); break;
    case 5: pv_chunk<5, PS>(acc + c, vc, p, vb + c, nk, d); break;
    case 6: pv_chunk<6, PS>(acc + c, vc, p, vb + c, nk, d); break;
    case 7: pv_chunk<7, PS>(acc + c, vc, p, vb + c, nk, d); break;
    default: break;
  }
}

// Two rows at once, sharing the V loads: accA/accB[0, NV*8) likewise.
template <int NV, int PS = 1>
inline void pv_chunk2(float* acc_a, float* acc_b, __m256 corr_a, __m256 corr_b,
                      const float* pa, const float* pb, const float* v, int nk, int d) {
  __m256 ra[NV], rb[NV];
  for (int k = 0; k < NV; ++k) {
    ra[k] = _mm256_mul_ps(_mm256_load_ps(acc_a + 8 * k), corr_a);
    rb[k] = _mm256_mul_ps(_mm256_load_ps(acc_b + 8 * k), corr_b);
  }
  for (int j = 0; j < nk; ++j, v += d) {
    const __m256 pja = _mm256_broadcast_ss(pa + j * PS), pjb = _mm256_broadcast_ss(pb + j * PS);
    for (int k = 0; k < NV; ++k) {
      const __m256 vv = _mm256_load_ps(v + 8 * k);
      ra[k] = _mm256_fmadd_ps(pja, vv, ra[k]);
      rb[k] = _mm256_fmadd_ps(pjb, vv, rb[k]);
    }
  }
  for (int k = 0; k < NV; ++k) {
    _mm256_store_ps(acc_a + 8 * k, ra[k]);
    _mm256_store_ps(acc_b + 8 * k, rb[k]);
  }
}

template <int D, int PS = 1>
void pv_rows2(float* acc_a, float* acc_b, float corr_a, float corr_b, const float* pa,
              const float* pb, const float* vb, int nk, int d_rt) {
  const int d = D ? D : d_rt;
  const __m256 ca = _mm256_set1_ps(corr_a), cb = _mm256_set1_ps(corr_b);
  int c = 0;
  for (; c + 32 <= d; c += 32) pv_chunk2<4, PS>(acc_a + c, acc_b + c, ca, cb, pa, pb, vb + c, nk, d);
  if (c + 16 <= d) {
    pv_chunk2<2, PS>(acc_a + c, acc_b + c, ca, cb, pa, pb, vb + c, nk, d);
    c += 16;
  }
  if (c + 8 <= d) pv_chunk2<1, PS>(acc_a + c, acc_b + c, ca, cb, pa, pb, vb + c, nk, d);
}

struct Row {
  const float* q;
  float* out;
  int64_t lo, hi;  // visible cache positions, inclusive
};

template <int D>
void attention_tile(const AttentionArgs& a, int g, const Row* rows, int nr, float* kv,
                    float* acc, float* s, float* m, float* l) {
  const int d = D ? D : a.head_dim;
  int64_t t_lo = rows[0].lo, t_hi = rows[0].hi;
  for (int r = 1; r < nr; ++r) {
    t_lo = std::min(t_lo, rows[r].lo);
    t_hi = std::max(t_hi, rows[r].hi);
  }
  for (int r = 0; r < nr; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
    std::memset(acc + (int64_t)r * d, 0, (size_t)d * 4);
  }
  const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  const __m256 vscale = _mm256_set1_ps(a.scale);
  bool active[kAttnRows];
  float corr[kAttnRows];
  for (int64_t kb = t_lo; kb <= t_hi; kb += kAttnKeys) {
    const int nk = (int)std::min<int64_t>(kAttnKeys, t_hi - kb + 1);
    const int nk4 = (nk + 3) & ~3;
    // Prefetch kPrefetchBlocks ahead (the first blocks of a tile up front).
    for (int64_t pb = kb == t_lo ? kb : kb + kPrefetchBlocks * kAttnKeys;
         pb <= std::min<int64_t>(t_hi, kb + kPrefetchBlocks * kAttnKeys); pb += kAttnKeys) {
      const int nk_p = (int)std::min<int64_t>(kAttnKeys, t_hi - pb + 1);
      prefetch_block(a, a.k, pb, nk_p, g, d);
      prefetch_block(a, a.v, pb, nk_p, g, d);
    }
    load_block(a, a.k, kb, nk, g, d, kv);
    if (nk < nk4) std::memset(kv + (int64_t)nk * d, 0, (size_t)(nk4 - nk) * d * 4);
    for (int r = 0; r < nr; ++r) active[r] = rows[r].lo < kb + nk && rows[r].hi >= kb;
    // Scores, two rows at a time where both are active.
    for (int r = 0; r < nr;) {
      if (!active[r]) {
        ++r;
        continue;
      }
      if (r + 1 < nr && active[r + 1]) {
        scores_2<D>(rows[r].q, rows[r + 1].q, kv, nk4, d, s + r * kAttnKeys,
                    s + (r + 1) * kAttnKeys);
        r += 2;
      } else {
        scores_1<D>(rows[r].q, kv, nk4, d, s + r * kAttnKeys);
        r += 1;
      }
    }
    // Online softmax update per row: mask, block max, p = exp(s - m_new).
    for (int r = 0; r < nr; ++r) {
      if (!active[r]) continue;
      float* sr = s + r * kAttnKeys;
      const __m256i jlo = _mm256_set1_epi32((int)std::max<int64_t>(rows[r].lo - kb, 0));
      const __m256i jhi = _mm256_set1_epi32((int)std::min<int64_t>(rows[r].hi - kb, nk - 1));
      __m256 mx = ninf;
      for (int j = 0; j < nk4; j += 8) {
        const __m256i jj = _mm256_add_epi32(iota, _mm256_set1_epi32(j));
        const __m256i bad = _mm256_or_si256(_mm256_cmpgt_epi32(jlo, jj),
                                            _mm256_cmpgt_epi32(jj, jhi));
        const __m256 v = _mm256_blendv_ps(_mm256_mul_ps(_mm256_load_ps(sr + j), vscale), ninf,
                                          _mm256_castsi256_ps(bad));
        _mm256_store_ps(sr + j, v);
        mx = _mm256_max_ps(mx, v);
      }
      const float m_new = std::max(m[r], avx2::hmax(mx));
      const __m256 vm = _mm256_set1_ps(m_new);
      __m256 sum = _mm256_setzero_ps();
      for (int j = 0; j < nk4; j += 8) {
        const __m256 p = avx2::exp_ps(_mm256_sub_ps(_mm256_load_ps(sr + j), vm));
        _mm256_store_ps(sr + j, p);
        sum = _mm256_add_ps(sum, p);
      }
      corr[r] = m[r] == -INFINITY ? 0.0f : std::exp(m[r] - m_new);
      l[r] = l[r] * corr[r] + avx2::hsum(sum);
      m[r] = m_new;
    }
    load_block(a, a.v, kb, nk, g, d, kv);
    for (int r = 0; r < nr;) {
      if (!active[r]) {
        ++r;
      } else if (r + 1 < nr && active[r + 1]) {
        pv_rows2<D>(acc + (int64_t)r * d, acc + (int64_t)(r + 1) * d, corr[r], corr[r + 1],
                    s + r * kAttnKeys, s + (r + 1) * kAttnKeys, kv, nk, d);
        r += 2;
      } else {
        pv_row<D>(acc + (int64_t)r * d, corr[r], s + r * kAttnKeys, kv, nk, d);
        r += 1;
      }
    }
  }
  for (int r = 0; r < nr; ++r) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    const __m256 vi = _mm256_set1_ps(inv);
    for (int c = 0; c < d; c += 8) {
      _mm256_storeu_ps(rows[r].out + c, _mm256_mul_ps(_mm256_load_ps(acc + (int64_t)r * d + c), vi));
    }
  }
}

// Decode (one query row) of nh heads (nh <= 8) of kv group g (F16 cache: NH ==
// nh, 2 or more; else NH == 8, nh >= kDecodeMinHeads):
// the heads are the 8 lanes of one vector.  Q is transposed once into qt
// (d, 8) (lanes >= nh zero), so the scores of a key for every head are
// sum_c qt[c] * K[j][c] with K[j][c] broadcast: 8-key tiles of 8
// independent FMA chains, no horizontal sums.  The online softmax (max,
// exp, sums, rescale factors) runs on those head vectors, once per key for
// all heads; PV then takes the heads in pairs (V loads shared) with the
// weights read at stride 8.
template <int D, int NH>
void decode_group(const AttentionArgs& a, int g, int nh, const Row& row, float* kv,
                  float* acc, float* qt, float* s) {
  const int d = D ? D : a.head_dim;
  alignas(32) float l_arr[8], corr_arr[8];
  // F16 K: the scores come straight from the cache rows (F16C conversion
  // inside the dot products, no f32 pass): qt then holds the 8 q rows
  // (zero rows past nh) and each key's 8 dot products are reduced at once.
  const bool k_f16 = a.kv_type == quant::Type::F16;
  if (k_f16) {
    for (int h = 0; h < 8; ++h) {
      if (h < nh) {
        std::memcpy(qt + (int64_t)h * d, row.q + (int64_t)h * d, (size_t)d * 4);
      } else {
        std::memset(qt + (int64_t)h * d, 0, (size_t)d * 4);
      }
    }
  } else {
    for (int c = 0; c < d; ++c) {
      for (int h = 0; h < 8; ++h) qt[c * 8 + h] = h < nh ? row.q[(int64_t)h * d + c] : 0.0f;
    }
  }
  std::memset(acc, 0, (size_t)nh * d * 4);
  __m256 m = _mm256_set1_ps(-INFINITY), l = _mm256_setzero_ps();
  const __m256 vscale = _mm256_set1_ps(a.scale);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  const int64_t pf_ahead = (int64_t)kPrefetchBlocks * kAttnKeys;
  for (int64_t kb = row.lo; kb <= row.hi; kb += kAttnKeys) {
    const int nk = (int)std::min<int64_t>(kAttnKeys, row.hi - kb + 1);
    const int nk8 = (nk + 7) & ~7;
    for (int64_t pb = kb == row.lo ? kb : kb + pf_ahead;
         pb <= std::min<int64_t>(row.hi, kb + pf_ahead); pb += kAttnKeys) {
      const int nk_p = (int)std::min<int64_t>(kAttnKeys, row.hi - pb + 1);
      prefetch_block(a, a.k, pb, nk_p, g, d);
      prefetch_block(a, a.v, pb, nk_p, g, d);
    }
    __m256 mx = ninf;
    if (k_f16) {
      const uint8_t* krow = static_cast<const uint8_t*>(a.k) + kb * a.kv_stride_bytes +
                            (int64_t)g * d * 2;
      for (int j = 0; j < nk; ++j, krow += a.kv_stride_bytes) {
        const uint16_t* kh = reinterpret_cast<const uint16_t*>(krow);
        __m256 ah[8];
        for (int h = 0; h < 8; ++h) ah[h] = _mm256_setzero_ps();
        for (int c = 0; c < d; c += 8) {
          const __m256 kc =
              _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kh + c)));
          for (int h = 0; h < NH; ++h) {
            ah[h] = _mm256_fmadd_ps(_mm256_load_ps(qt + (int64_t)h * d + c), kc, ah[h]);
          }
        }
        const __m256 a0 = ah[0], a1 = ah[1], a2 = ah[2], a3 = ah[3];
        const __m256 a4 = ah[4], a5 = ah[5], a6 = ah[6], a7 = ah[7];
        // (a0 .. a7) -> one vector of their 8 sums, lane h = head h.
        const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
        const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a4, a5), _mm256_hadd_ps(a6, a7));
        const __m256 sum8 = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                          _mm256_permute2f128_ps(u0, u1, 0x31));
        const __m256 v = _mm256_mul_ps(sum8, vscale);
        _mm256_store_ps(s + j * 8, v);
        mx = _mm256_max_ps(mx, v);
      }
    }
    if (!k_f16) load_block(a, a.k, kb, nk, g, d, kv);
    if (!k_f16 && nk < nk8) std::memset(kv + (int64_t)nk * d, 0, (size_t)(nk8 - nk) * d * 4);
    for (int j = 0; j < (k_f16 ? 0 : nk8); j += 8) {
      const float* k0 = kv + (int64_t)j * d;
      __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps();
      __m256 s3 = _mm256_setzero_ps(), s4 = _mm256_setzero_ps(), s5 = _mm256_setzero_ps();
      __m256 s6 = _mm256_setzero_ps(), s7 = _mm256_setzero_ps();
      for (int c = 0; c < d; ++c) {
        const __m256 qv = _mm256_load_ps(qt + c * 8);
        s0 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + c), s0);
        s1 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + d + c), s1);
        s2 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + 2 * d + c), s2);
        s3 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + 3 * d + c), s3);
        s4 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + 4 * d + c), s4);
        s5 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + 5 * d + c), s5);
        s6 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + 6 * d + c), s6);
        s7 = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + 7 * d + c), s7);
      }
      float* sj = s + j * 8;
      const __m256 sv[8] = {s0, s1, s2, s3, s4, s5, s6, s7};
      for (int t = 0; t < 8; ++t) {
        const __m256 v = j + t < nk ? _mm256_mul_ps(sv[t], vscale) : ninf;
        _mm256_store_ps(sj + t * 8, v);
        mx = _mm256_max_ps(mx, v);
      }
    }
    const __m256 m_new = _mm256_max_ps(m, mx);
    const __m256 corr = avx2::exp_ps(_mm256_sub_ps(m, m_new));  // 0 on the first block
    m = m_new;
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nk; ++j) {
      const __m256 p = avx2::exp_ps(_mm256_sub_ps(_mm256_load_ps(s + j * 8), m_new));
      _mm256_store_ps(s + j * 8, p);
      sum = _mm256_add_ps(sum, p);
    }
    l = _mm256_fmadd_ps(l, corr, sum);
    _mm256_store_ps(corr_arr, corr);
    if (k_f16) {
      // F16 V likewise straight from the cache: per 8 dims, the 8 heads'
      // accumulators in registers, each V chunk converted once for all.
      const uint8_t* vrow0 = static_cast<const uint8_t*>(a.v) + kb * a.kv_stride_bytes +
                             (int64_t)g * d * 2;
      for (int c = 0; c < d; c += 8) {
        __m256 r[NH];
        for (int h = 0; h < NH; ++h) {
          r[h] = _mm256_mul_ps(_mm256_load_ps(acc + (int64_t)h * d + c),
                               _mm256_broadcast_ss(corr_arr + h));
        }
        const uint8_t* vr = vrow0 + (int64_t)c * 2;
        for (int j = 0; j < nk; ++j, vr += a.kv_stride_bytes) {
          const __m256 vv = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(vr)));
          const float* pj = s + j * 8;
          for (int h = 0; h < NH; ++h) r[h] = _mm256_fmadd_ps(_mm256_broadcast_ss(pj + h), vv, r[h]);
        }
        for (int h = 0; h < NH; ++h) _mm256_store_ps(acc + (int64_t)h * d + c, r[h]);
      }
      continue;
    }
    load_block(a, a.v, kb, nk, g, d, kv);
    int h = 0;
    for (; h + 1 < nh; h += 2) {
      pv_rows2<D, 8>(acc + (int64_t)h * d, acc + (int64_t)(h + 1) * d, corr_arr[h],
                     corr_arr[h + 1], s + h, s + h + 1, kv, nk, d);
    }
    if (h < nh) pv_row<D, 8>(acc + (int64_t)h * d, corr_arr[h], s + h, kv, nk, d);
  }
  _mm256_store_ps(l_arr, l);
  for (int h = 0; h < nh; ++h) {
    const __m256 vi = _mm256_set1_ps(1.0f / l_arr[h]);
    float* out = row.out + (int64_t)h * d;
    for (int c = 0; c < d; c += 8) {
      _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_load_ps(acc + (int64_t)h * d + c), vi));
    }
  }
}

template <int D>
void attention_impl(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  const int d = D ? D : a.head_dim;
  const int group = a.n_head / a.n_head_kv;
  // Scratch, 32-byte aligned: K/V block (kAttnKeys, d), acc (kAttnRows, d),
  // scores (kAttnRows, kAttnKeys), m and l (kAttnRows).
  float* base = reinterpret_cast<float*>(((uintptr_t)scratch + 31) & ~(uintptr_t)31);
  float* kv = base;
  float* acc = kv + (int64_t)kAttnKeys * d;
  float* s = acc + (int64_t)kAttnRows * d;
  float* m = s + kAttnRows * kAttnKeys;
  float* l = m + kAttnRows;
  Row rows[kAttnRows];
  for (int g = head_begin / group; g * group < head_end; ++g) {
    const int h0 = std::max(head_begin, g * group), h1 = std::min(head_end, (g + 1) * group);
    const int nh = h1 - h0;
    // Decode: the group's heads as vector lanes (decode_group): any group of
    // 2+ heads with an F16 cache (no f32 pass, per-head FMAs only), 6+ heads
    // otherwise (the broadcast-K scores would leave too many lanes idle).
    const bool f16 = a.kv_type == quant::Type::F16;
    if (a.n_q == 1 && nh >= (f16 ? 2 : kDecodeMinHeads) && a.pos0 >= 0 && d >= kDecodeMinDim) {
      Row row;
      row.q = a.q + (int64_t)h0 * d;
      row.out = a.out + (int64_t)h0 * d;
      row.hi = a.pos0;
      row.lo = a.window > 0 ? std::max<int64_t>(0, row.hi - a.window + 1) : 0;
      for (int hb = 0; hb < nh; hb += 8) {  // groups of more than 8 heads: 8 at a time
        const int n8 = std::min(8, nh - hb);
        Row r8 = row;
        r8.q += (int64_t)hb * d;
        r8.out += (int64_t)hb * d;
        float* qt = acc + (int64_t)8 * d;
        if (f16 && n8 >= 2) {  // K and V straight from the cache: any group size
          switch (n8) {
            case 2: decode_group<D, 2>(a, g, n8, r8, kv, acc, qt, s); break;
            case 3: decode_group<D, 3>(a, g, n8, r8, kv, acc, qt, s); break;
            case 4: decode_group<D, 4>(a, g, n8, r8, kv, acc, qt, s); break;
            case 5: decode_group<D, 5>(a, g, n8, r8, kv, acc, qt, s); break;
            case 6: decode_group<D, 6>(a, g, n8, r8, kv, acc, qt, s); break;
            case 7: decode_group<D, 7>(a, g, n8, r8, kv, acc, qt, s); break;
            default: decode_group<D, 8>(a, g, n8, r8, kv, acc, qt, s); break;
          }
        } else if (!f16 && n8 >= kDecodeMinHeads) {
          decode_group<D, 8>(a, g, n8, r8, kv, acc, qt, s);
        } else {  // the rest of a group of more than 8: rows tiles
          Row rs[8];
          for (int h = 0; h < n8; ++h) {
            rs[h] = r8;
            rs[h].q += (int64_t)h * d;
            rs[h].out += (int64_t)h * d;
          }
          attention_tile<D>(a, g, rs, n8, kv, acc, s, m, l);
        }
      }
      continue;
    }
    const int64_t n_rows = (int64_t)a.n_q * nh;  // row r: query r / nh, head h0 + r % nh
    for (int64_t r0 = 0; r0 < n_rows; r0 += kAttnRows) {
      const int nr = (int)std::min<int64_t>(kAttnRows, n_rows - r0);
      int n_live = 0;
      for (int r = 0; r < nr; ++r) {
        const int64_t i = (r0 + r) / nh;
        const int h = h0 + (int)((r0 + r) % nh);
        Row row;
        row.q = a.q + i * a.q_stride + (int64_t)h * d;
        row.out = a.out + i * a.out_stride + (int64_t)h * d;
        row.hi = (int64_t)a.pos0 + i;
        row.lo = a.window > 0 ? std::max<int64_t>(0, row.hi - a.window + 1) : 0;
        if (row.hi < 0) {  // sees nothing
          std::memset(row.out, 0, (size_t)d * 4);
          continue;
        }
        rows[n_live++] = row;
      }
      if (n_live > 0) attention_tile<D>(a, g, rows, n_live, kv, acc, s, m, l);
    }
  }
}

}  // namespace

void attention__avx2(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  if (a.head_dim % 8 != 0 || (a.kv_type == quant::Type::Q8_0 && a.head_dim % quant::kBlock)) {
    attention__ref(a, head_begin, head_end, scratch);
    return;
  }
  switch (a.head_dim) {
    case 64: attention_impl<64>(a, head_begin, head_end, scratch); break;
    case 80: attention_impl<80>(a, head_begin, head_end, scratch); break;
    case 96: attention_impl<96>(a, head_begin, head_end, scratch); break;
    case 128: attention_impl<128>(a, head_begin, head_end, scratch); break;
    default: attention_impl<0>(a, head_begin, head_end, scratch); break;
  }
}

}  // namespace lilims::kernels
