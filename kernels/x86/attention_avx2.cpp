// Fused attention over an F16 / Q8_0 / F32 KV cache (and staged F32 rows),
// AVX2+FMA+F16C: the micro-kernel of the shared driver
// (kernels/attention_driver.h, which describes the algorithm).
//
// Row tiles: scores in 2 rows x 4 keys register tiles, PV over row pairs
// sharing the V loads.  Decode: the heads of a kv group are the 8 lanes of
// one vector (see decode_scores); with an F16 cache ("direct", any group of
// 2+ heads) K and V are read straight from the cache rows with F16C inside
// the dot products, no f32 pass; other caches take the broadcast-K scores
// from 6 heads (with fewer they would leave too many lanes idle).
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/attention_driver.h"
#include "kernels/x86/ops_avx2.h"
#include "kernels/x86/vec_avx2.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

// x, kept in a register: a vector that two FMAs use is loaded once.  Left
// to itself GCC folds the load into both FMAs of pv_chunk2, and its loop
// then issues 10 loads for 8 FMAs instead of 6.
inline __m256 in_register(__m256 x) {
  asm("" : "+x"(x));
  return x;
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
      const __m256 vv = in_register(_mm256_load_ps(v + 8 * k));
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

// The 8 per-head dot products of one F16 cache key row or staged f32 row
// (load8(c): its dims [c, c + 8) as f32) with the q rows in qt (8 rows of
// d, zero past the group), reduced at once into the lanes of one vector,
// scaled, stored at s.
template <int D, int NH, class Load8>
inline void score_key_8heads(const float* qt, int d_rt, __m256 vscale, Load8 load8, float* s) {
  const int d = D ? D : d_rt;
  __m256 ah[8];
  for (int h = 0; h < 8; ++h) ah[h] = _mm256_setzero_ps();
  for (int c = 0; c < d; c += 8) {
    const __m256 kc = load8(c);
    for (int h = 0; h < NH; ++h) {
      ah[h] = _mm256_fmadd_ps(_mm256_load_ps(qt + (int64_t)h * d + c), kc, ah[h]);
    }
  }
  // (ah[0] .. ah[7]) -> one vector of their 8 sums, lane h = head h.
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(ah[0], ah[1]), _mm256_hadd_ps(ah[2], ah[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(ah[4], ah[5]), _mm256_hadd_ps(ah[6], ah[7]));
  const __m256 sum8 = _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                    _mm256_permute2f128_ps(u0, u1, 0x31));
  _mm256_store_ps(s, _mm256_mul_ps(sum8, vscale));
}

// Two F16 cache key rows at once for groups of up to 4 heads: key 0's
// sums go where score_key_8heads puts heads 0..3, key 1's where it puts
// 4..7, so one reduction serves both keys and each lane is summed exactly
// as score_key_8heads sums it (the same scores, bit for bit).  Lanes past
// the group are zero.
template <int D, int NH>
inline void score_2keys_4heads(const float* qt, int d_rt, __m256 vscale, const uint16_t* k0,
                               const uint16_t* k1, float* s0, float* s1) {
  static_assert(NH <= 4, "two keys fill the 8 lanes only for groups of up to 4 heads");
  const int d = D ? D : d_rt;
  __m256 ah[8];
  for (int h = 0; h < 8; ++h) ah[h] = _mm256_setzero_ps();
  for (int c = 0; c < d; c += 8) {
    const __m256 kc0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k0 + c)));
    const __m256 kc1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(k1 + c)));
    for (int h = 0; h < NH; ++h) {
      const __m256 qv = _mm256_load_ps(qt + (int64_t)h * d + c);
      ah[h] = _mm256_fmadd_ps(qv, kc0, ah[h]);
      ah[4 + h] = _mm256_fmadd_ps(qv, kc1, ah[4 + h]);
    }
  }
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(ah[0], ah[1]), _mm256_hadd_ps(ah[2], ah[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(ah[4], ah[5]), _mm256_hadd_ps(ah[6], ah[7]));
  const __m256 sum8 = _mm256_mul_ps(_mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20),
                                                  _mm256_permute2f128_ps(u0, u1, 0x31)),
                                    vscale);
  _mm256_store_ps(s0, _mm256_zextps128_ps256(_mm256_castps256_ps128(sum8)));
  _mm256_store_ps(s1, _mm256_zextps128_ps256(_mm256_extractf128_ps(sum8, 1)));
}

inline __m256 load8_f16(const uint16_t* h) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
}

struct Avx2 {
  static void prefetch(const uint8_t* p) {
    _mm_prefetch(reinterpret_cast<const char*>(p), _MM_HINT_T0);
  }

  static void convert_rows(quant::Type t, const uint8_t* src, int64_t stride, int n, int d,
                           float* dst) {
    if (t == quant::Type::F16) {
      for (int j = 0; j < n; ++j, src += stride, dst += d) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
        for (int c = 0; c < d; c += 8) _mm256_store_ps(dst + c, load8_f16(h + c));
      }
      return;
    }
    for (int j = 0; j < n; ++j, src += stride, dst += d) {  // Q8_0
      const quant::BlockQ8_0* b = reinterpret_cast<const quant::BlockQ8_0*>(src);
      for (int blk = 0; blk < d / quant::kBlock; ++blk) {
        const __m256 sc = _mm256_set1_ps(_cvtsh_ss(b[blk].d));
        for (int k = 0; k < 4; ++k) {
          const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[blk].q + 8 * k));
          _mm256_store_ps(dst + blk * quant::kBlock + 8 * k,
                          _mm256_mul_ps(sc, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8))));
        }
      }
    }
  }

  template <int D>
  static void scores_1(const float* q, const float* kb, int nk4, int d, float* s) {
    kernels::scores_1<D>(q, kb, nk4, d, s);
  }
  template <int D>
  static void scores_2(const float* q0, const float* q1, const float* kb, int nk4, int d,
                       float* s0, float* s1) {
    kernels::scores_2<D>(q0, q1, kb, nk4, d, s0, s1);
  }

  static float mask_exp(float* sr, int nk4, int jlo_i, int jhi_i, float scale, float m_old,
                        float* sum_out) {
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    const __m256 vscale = _mm256_set1_ps(scale);
    const __m256i jlo = _mm256_set1_epi32(jlo_i), jhi = _mm256_set1_epi32(jhi_i);
    __m256 mx = ninf;
    for (int j = 0; j < nk4; j += 8) {
      const __m256i jj = _mm256_add_epi32(iota, _mm256_set1_epi32(j));
      const __m256i bad =
          _mm256_or_si256(_mm256_cmpgt_epi32(jlo, jj), _mm256_cmpgt_epi32(jj, jhi));
      const __m256 v = _mm256_blendv_ps(_mm256_mul_ps(_mm256_load_ps(sr + j), vscale), ninf,
                                        _mm256_castsi256_ps(bad));
      _mm256_store_ps(sr + j, v);
      mx = _mm256_max_ps(mx, v);
    }
    const float m_new = std::max(m_old, avx2::hmax(mx));
    const __m256 vm = _mm256_set1_ps(m_new);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nk4; j += 8) {
      const __m256 p = avx2::exp_ps(_mm256_sub_ps(_mm256_load_ps(sr + j), vm));
      _mm256_store_ps(sr + j, p);
      sum = _mm256_add_ps(sum, p);
    }
    *sum_out = avx2::hsum(sum);
    return m_new;
  }

  template <int D, int PS = 1>
  static void pv_row(float* acc, float corr, const float* p, const float* vb, int nk, int d) {
    kernels::pv_row<D, PS>(acc, corr, p, vb, nk, d);
  }
  template <int D, int PS = 1>
  static void pv_rows2(float* acc_a, float* acc_b, float corr_a, float corr_b, const float* pa,
                       const float* pb, const float* vb, int nk, int d) {
    kernels::pv_rows2<D, PS>(acc_a, acc_b, corr_a, corr_b, pa, pb, vb, nk, d);
  }

  static void store_scaled(float* out, const float* acc, float inv, int d) {
    const __m256 vi = _mm256_set1_ps(inv);
    for (int c = 0; c < d; c += 8) {
      _mm256_storeu_ps(out + c, _mm256_mul_ps(_mm256_load_ps(acc + c), vi));
    }
  }

  // --- decode: the heads of a group as the 8 lanes of a vector ---
  static constexpr bool has_direct = true;
  static bool decode_direct(quant::Type t) { return t == quant::Type::F16; }
  static int decode_min_heads(quant::Type t) { return decode_direct(t) ? 2 : 6; }
  static constexpr int decode_key_tile = 8;
  // Direct: one instantiation per group size (NH FMA chains per key);
  // broadcast-K: 8 lanes whatever the size.
  template <class F>
  static void decode_dispatch(int nh, quant::Type t, F&& f) {
    if (!decode_direct(t)) return f(std::integral_constant<int, 8>{});
    switch (nh) {
      case 2: return f(std::integral_constant<int, 2>{});
      case 3: return f(std::integral_constant<int, 3>{});
      case 4: return f(std::integral_constant<int, 4>{});
      case 5: return f(std::integral_constant<int, 5>{});
      case 6: return f(std::integral_constant<int, 6>{});
      case 7: return f(std::integral_constant<int, 7>{});
      default: return f(std::integral_constant<int, 8>{});
    }
  }

  // Direct: qt holds the 8 q rows (zero rows past nh), each key's 8 dot
  // products reduced at once.  Broadcast-K: Q transposed into qt (d, 8)
  // (lanes past nh zero), so the scores of a key for every head are
  // sum_c qt[c] * K[j][c] with K[j][c] broadcast.
  template <int NH>
  static void decode_load_q(const float* q, int nh, int d, bool direct, float* qt) {
    if (direct) {
      for (int h = 0; h < 8; ++h) {
        if (h < nh) {
          std::memcpy(qt + (int64_t)h * d, q + (int64_t)h * d, (size_t)d * 4);
        } else {
          std::memset(qt + (int64_t)h * d, 0, (size_t)d * 4);
        }
      }
      return;
    }
    for (int c = 0; c < d; ++c) {
      for (int h = 0; h < 8; ++h) qt[c * 8 + h] = h < nh ? q[(int64_t)h * d + c] : 0.0f;
    }
  }

  // Broadcast-K scores of the f32 keys kv: 8-key tiles of 8 independent FMA
  // chains, no horizontal sums.
  template <int D, int NH>
  static void decode_scores(const float* qt, const float* kv, int nk, int d_rt, float scale,
                            float* s) {
    const int d = D ? D : d_rt;
    const __m256 vscale = _mm256_set1_ps(scale);
    for (int j = 0; j < nk; j += 8) {
      const float* k0 = kv + (int64_t)j * d;
      __m256 sv[8];
      for (int t = 0; t < 8; ++t) sv[t] = _mm256_setzero_ps();
      for (int c = 0; c < d; ++c) {
        const __m256 qv = _mm256_load_ps(qt + c * 8);
        for (int t = 0; t < 8; ++t) {
          sv[t] = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(k0 + (int64_t)t * d + c), sv[t]);
        }
      }
      for (int t = 0; t < 8; ++t) _mm256_store_ps(s + (j + t) * 8, _mm256_mul_ps(sv[t], vscale));
    }
  }

  template <int D, int NH>
  static void decode_scores_direct(const attn::Span& sp, const float* qt, int nk, int d,
                                   float scale, float* s) {
    (void)nk;
    const __m256 vscale = _mm256_set1_ps(scale);
    int j = 0;
    if constexpr (NH <= 4) {
      for (; j + 1 < sp.n_cache; j += 2) {
        const uint8_t* row = sp.cache + j * sp.cache_stride;
        score_2keys_4heads<D, NH>(qt, d, vscale, reinterpret_cast<const uint16_t*>(row),
                                  reinterpret_cast<const uint16_t*>(row + sp.cache_stride),
                                  s + j * 8, s + (j + 1) * 8);
      }
    }
    for (; j < sp.n_cache; ++j) {
      const uint16_t* kh = reinterpret_cast<const uint16_t*>(sp.cache + j * sp.cache_stride);
      score_key_8heads<D, NH>(qt, d, vscale, [kh](int c) { return load8_f16(kh + c); },
                              s + j * 8);
    }
    for (int t = 0; t < sp.n_staged; ++t) {
      const float* kf = sp.staged + t * sp.staged_stride;
      score_key_8heads<D, NH>(qt, d, vscale, [kf](int c) { return _mm256_loadu_ps(kf + c); },
                              s + (sp.n_cache + t) * 8);
    }
  }

  // Online softmax on the head vectors: m, l, corr are 8 lanes in memory.
  template <int NH>
  static void decode_softmax(float* m_io, float* l_io, float* s, int nk, float* corr_out) {
    __m256 mx = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < nk; ++j) mx = _mm256_max_ps(mx, _mm256_load_ps(s + j * 8));
    const __m256 m = _mm256_load_ps(m_io);
    const __m256 m_new = _mm256_max_ps(m, mx);
    const __m256 corr = avx2::exp_ps(_mm256_sub_ps(m, m_new));
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < nk; ++j) {
      const __m256 p = avx2::exp_ps(_mm256_sub_ps(_mm256_load_ps(s + j * 8), m_new));
      _mm256_store_ps(s + j * 8, p);
      sum = _mm256_add_ps(sum, p);
    }
    _mm256_store_ps(l_io, _mm256_fmadd_ps(_mm256_load_ps(l_io), corr, sum));
    _mm256_store_ps(m_io, m_new);
    _mm256_store_ps(corr_out, corr);
  }

  // PV of the f32 values kv: heads in pairs (V loads shared), weights read
  // at stride 8.
  template <int D>
  static void decode_pv(float* acc, const float* corr, const float* s, const float* kv, int nk,
                        int nh, int d) {
    int h = 0;
    for (; h + 1 < nh; h += 2) {
      kernels::pv_rows2<D, 8>(acc + (int64_t)h * d, acc + (int64_t)(h + 1) * d, corr[h],
                              corr[h + 1], s + h, s + h + 1, kv, nk, d);
    }
    if (h < nh) kernels::pv_row<D, 8>(acc + (int64_t)h * d, corr[h], s + h, kv, nk, d);
  }

  // Direct PV: per CH x 8 dims, the heads' accumulators in registers, each
  // V chunk converted once for all of them.  CH chunks at a time so that a
  // small group still has ~8 independent FMA chains (each chain runs over
  // the block's keys, one FMA latency per key).
  template <int D, int NH>
  static void decode_pv_direct(const attn::Span& sp, float* acc, const float* corr,
                               const float* s, int nk, int d_rt) {
    (void)nk;
    const int d = D ? D : d_rt;
    constexpr int CH = NH <= 3 ? 4 : NH <= 4 ? 2 : 1;
    if (d % (8 * CH) != 0) return decode_pv_direct_ch<D, NH, 1>(sp, acc, corr, s, d);
    decode_pv_direct_ch<D, NH, CH>(sp, acc, corr, s, d);
  }
  template <int D, int NH, int CH>
  static void decode_pv_direct_ch(const attn::Span& sp, float* acc, const float* corr,
                                  const float* s, int d) {
    for (int c = 0; c < d; c += 8 * CH) {
      __m256 r[NH][CH];
      for (int h = 0; h < NH; ++h) {
        const __m256 ch = _mm256_broadcast_ss(corr + h);
        for (int k = 0; k < CH; ++k) {
          r[h][k] = _mm256_mul_ps(_mm256_load_ps(acc + (int64_t)h * d + c + 8 * k), ch);
        }
      }
      for (int j = 0; j < sp.n_cache; ++j) {
        const uint16_t* vh =
            reinterpret_cast<const uint16_t*>(sp.cache + j * sp.cache_stride + (int64_t)c * 2);
        const float* pj = s + j * 8;
        __m256 p[NH];  // NH + 1 + NH * CH <= 16 registers
        for (int h = 0; h < NH; ++h) p[h] = _mm256_broadcast_ss(pj + h);
        for (int k = 0; k < CH; ++k) {
          const __m256 vv = load8_f16(vh + 8 * k);
          for (int h = 0; h < NH; ++h) r[h][k] = _mm256_fmadd_ps(p[h], vv, r[h][k]);
        }
      }
      for (int t = 0; t < sp.n_staged; ++t) {
        const float* vf = sp.staged + t * sp.staged_stride + c;
        const float* pj = s + (sp.n_cache + t) * 8;
        __m256 p[NH];
        for (int h = 0; h < NH; ++h) p[h] = _mm256_broadcast_ss(pj + h);
        for (int k = 0; k < CH; ++k) {
          const __m256 vv = _mm256_loadu_ps(vf + 8 * k);
          for (int h = 0; h < NH; ++h) r[h][k] = _mm256_fmadd_ps(p[h], vv, r[h][k]);
        }
      }
      for (int h = 0; h < NH; ++h) {
        for (int k = 0; k < CH; ++k) _mm256_store_ps(acc + (int64_t)h * d + c + 8 * k, r[h][k]);
      }
    }
  }
};

}  // namespace

void attention__avx2(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  attn::Driver<Avx2>::attention(a, head_begin, head_end, scratch);
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
