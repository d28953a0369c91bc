// The ISA-independent half of the fused SIMD attention (AttentionArgs,
// kernels/ops.h): tiling, key-block walk, masking bounds, online-softmax
// bookkeeping, staged rows and the choice of the decode path, written once
// and instantiated by each ISA file with its micro-kernel K.
//
// One pass over the keys with an online softmax (flash style).  The rows of
// work are (query token, query head) pairs of one kv group; up to kAttnRows
// of them form a tile that walks the union of their visible key ranges in
// blocks of kAttnKeys positions.  Each K and V block is converted to f32 once
// into scratch and shared by every row of the tile, so the grouped-query
// heads and the query tokens of a prefill block read a cache row once per
// tile.  Per row and block: scores, masking to the row's [lo, hi], running
// max m and sum l, acc = acc * exp(m_old - m_new) + sum_j p_j V_j; at the
// end out = acc / l.
//
// Decode (one query row) of enough heads of a group takes decode_group: the
// heads are vector lanes, the online softmax runs on head vectors, and a
// micro-kernel may read F16 K/V straight from the cache ("direct").
//
// A block's positions below pos0 - n_new_before come from the cache; with staged
// rows (k_new != nullptr) the ones from there on come from k_new / v_new as f32
// and the cache there is never touched, not even by a prefetch.
//
// K, the micro-kernel (see kernels/x86/attention_avx2.cpp for one), provides:
//   prefetch(p)                              one cache line
//   convert_rows(type, src, stride, n, d, dst)  F16 / Q8_0 rows -> f32 rows of d
//   scores_1<D>(q, kb, nk4, d, s), scores_2<D>(q0, q1, kb, nk4, d, s0, s1)
//                                            s[j] = q . K[j], j < nk4 (% 4 == 0)
//   mask_exp(s, nk4, jlo, jhi, scale, m_old, &sum) -> m_new
//                                            s = scale s, -inf outside [jlo, jhi],
//                                            m_new = max(m_old, max s),
//                                            s = exp(s - m_new), sum of them
//   pv_row<D, PS>(acc, corr, p, vb, nk, d), pv_rows2<D, PS>(...) for two rows
//                                            acc = acc corr + sum_j p[j PS] V[j]
//   store_scaled(out, acc, inv, d)           out = acc inv
//   decode_min_heads(type), has_direct, decode_direct(type), decode_key_tile,
//   decode_dispatch(nh, type, f)             calls f(integral_constant<NH>)
//   decode_load_q<NH>(q, nh, d, direct, qt), decode_scores<D, NH>(qt, kv, nk, d,
//   scale, s), decode_scores_direct<D, NH>(span, qt, nk, d, scale, s),
//   decode_softmax<NH>(m, l, s, nk, corr), decode_pv<D>(acc, corr, s, kv, nk,
//   nh, d), decode_pv_direct<D, NH>(span, acc, corr, s, nk, d) (the direct
//   ones only when has_direct)
//                                            scores s[j * 8 + h], head h of key j
//
// Only the ISA files include this header; everything in it is a template of
// K (whose types live in each file's anonymous namespace), so code built with
// one ISA's flags never stands in for another's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/ops.h"
#include "kernels/ref/attention_ref.h"
#include "quant/quant.h"

namespace lilims::kernels::attn {

using detail::kAttnKeys;
using detail::kAttnRows;
static_assert(kAttnSplitBlock % kAttnKeys == 0, "key ranges start on key blocks");
constexpr int kPrefetchBlocks = 3;  // how far ahead the cache rows are prefetched
// Decode path only from this head dim: tiny heads gain nothing from it, and
// with them the stories260K test of prefill == step-by-step logits (1e-3)
// saw 1.05e-3 from the decode path's other summation order.
constexpr int kDecodeMinDim = 32;

// One (query token, query head) row of a tile.
struct Row {
  const float* q;
  float* out;
  int64_t lo, hi;  // visible positions, inclusive
  float* lse = nullptr;  // partial sums: where max + log(sum) goes (AttentionArgs::lse)
};

// Positions [p0, p0 + n_cache + n_staged) of one kv head of K or V: the
// first n_cache rows in the cache, the rest in the staged rows.
struct Span {
  const uint8_t* cache;   // position p0, or null when n_cache == 0
  int64_t cache_stride;   // bytes
  int n_cache;
  const float* staged;    // position p0 + n_cache, or null when n_staged == 0
  int64_t staged_stride;  // floats
  int n_staged;
};

template <class K>
struct Driver {
  // Positions below this are read from the cache.
  static int64_t cache_end(const AttentionArgs& a) {
    return a.k_new != nullptr ? (int64_t)a.pos0 - a.n_new_before : INT64_MAX;
  }

  static Span span(const AttentionArgs& a, const void* base, const float* staged, int64_t p0,
                   int n, int g, int d) {
    Span sp;
    sp.n_cache = (int)std::clamp<int64_t>(cache_end(a) - p0, 0, n);
    sp.n_staged = n - sp.n_cache;
    sp.cache_stride = a.kv_stride_bytes;
    sp.cache = sp.n_cache == 0 ? nullptr
                               : static_cast<const uint8_t*>(base) + p0 * a.kv_stride_bytes +
                                     attention_head_offset(a, g);
    sp.staged_stride = a.new_stride;
    sp.staged = sp.n_staged == 0
                    ? nullptr
                    : staged + (p0 + sp.n_cache - cache_end(a)) * a.new_stride + (int64_t)g * d;
    return sp;
  }

  // The span's rows as f32 rows of d floats in dst.
  static void load(const AttentionArgs& a, const Span& sp, int d, float* dst) {
    if (sp.n_cache > 0) {
      if (a.kv_type == quant::Type::F32) {
        const uint8_t* src = sp.cache;
        for (int j = 0; j < sp.n_cache; ++j, src += sp.cache_stride) {
          std::memcpy(dst + (int64_t)j * d, src, (size_t)d * 4);
        }
      } else {
        K::convert_rows(a.kv_type, sp.cache, sp.cache_stride, sp.n_cache, d, dst);
      }
    }
    dst += (int64_t)sp.n_cache * d;
    for (int j = 0; j < sp.n_staged; ++j) {
      std::memcpy(dst + (int64_t)j * d, sp.staged + j * sp.staged_stride, (size_t)d * 4);
    }
  }

  // Prefetches the cache rows of [p0, p0 + n) of kv head g (issued blocks
  // ahead, so the strided rows, one head's slice of each position, are in
  // cache when load converts them instead of costing a miss each).
  static void prefetch(const AttentionArgs& a, const void* base, int64_t p0, int n, int g, int d) {
    const int64_t nc = std::min<int64_t>(n, cache_end(a) - p0);
    const int64_t hb = attention_head_bytes(a.kv_type, d);
    const uint8_t* row =
        static_cast<const uint8_t*>(base) + p0 * a.kv_stride_bytes + attention_head_offset(a, g);
    for (int64_t j = 0; j < nc; ++j, row += a.kv_stride_bytes) {
      for (int64_t o = 0; o < hb; o += 64) K::prefetch(row + o);
    }
  }

  // Prefetch for the key block at kb of [lo, hi]: kPrefetchBlocks ahead,
  // the first blocks up front.
  static void prefetch_ahead(const AttentionArgs& a, int64_t kb, int64_t lo, int64_t hi, int g,
                             int d) {
    const int64_t ahead = (int64_t)kPrefetchBlocks * kAttnKeys;
    for (int64_t pb = kb == lo ? kb : kb + ahead; pb <= std::min(hi, kb + ahead);
         pb += kAttnKeys) {
      const int n = (int)std::min<int64_t>(kAttnKeys, hi - pb + 1);
      prefetch(a, a.k, pb, n, g, d);
      prefetch(a, a.v, pb, n, g, d);
    }
  }

  template <int D>
  static void tile(const AttentionArgs& a, int g, const Row* rows, int nr, float* kv,
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
    bool active[kAttnRows];
    float corr[kAttnRows];
    for (int64_t kb = t_lo; kb <= t_hi; kb += kAttnKeys) {
      const int nk = (int)std::min<int64_t>(kAttnKeys, t_hi - kb + 1);
      const int nk4 = (nk + 3) & ~3;
      prefetch_ahead(a, kb, t_lo, t_hi, g, d);
      load(a, span(a, a.k, a.k_new, kb, nk, g, d), d, kv);
      if (nk < nk4) std::memset(kv + (int64_t)nk * d, 0, (size_t)(nk4 - nk) * d * 4);
      for (int r = 0; r < nr; ++r) active[r] = rows[r].lo < kb + nk && rows[r].hi >= kb;
      // Scores, two rows at a time where both are active (K loads shared).
      for (int r = 0; r < nr;) {
        if (!active[r]) {
          ++r;
        } else if (r + 1 < nr && active[r + 1]) {
          K::template scores_2<D>(rows[r].q, rows[r + 1].q, kv, nk4, d, s + r * kAttnKeys,
                                  s + (r + 1) * kAttnKeys);
          r += 2;
        } else {
          K::template scores_1<D>(rows[r].q, kv, nk4, d, s + r * kAttnKeys);
          r += 1;
        }
      }
      for (int r = 0; r < nr; ++r) {
        if (!active[r]) continue;
        const int jlo = (int)std::max<int64_t>(rows[r].lo - kb, 0);
        const int jhi = (int)std::min<int64_t>(rows[r].hi - kb, nk - 1);
        float sum = 0.0f;
        const float m_new = K::mask_exp(s + r * kAttnKeys, nk4, jlo, jhi, a.scale, m[r], &sum);
        corr[r] = m[r] == -INFINITY ? 0.0f : std::exp(m[r] - m_new);
        l[r] = l[r] * corr[r] + sum;
        m[r] = m_new;
      }
      load(a, span(a, a.v, a.v_new, kb, nk, g, d), d, kv);
      for (int r = 0; r < nr;) {
        if (!active[r]) {
          ++r;
        } else if (r + 1 < nr && active[r + 1]) {
          K::template pv_rows2<D>(acc + (int64_t)r * d, acc + (int64_t)(r + 1) * d, corr[r],
                                  corr[r + 1], s + r * kAttnKeys, s + (r + 1) * kAttnKeys, kv,
                                  nk, d);
          r += 2;
        } else {
          K::template pv_row<D>(acc + (int64_t)r * d, corr[r], s + r * kAttnKeys, kv, nk, d);
          r += 1;
        }
      }
    }
    for (int r = 0; r < nr; ++r) {
      K::store_scaled(rows[r].out, acc + (int64_t)r * d, l[r] > 0.0f ? 1.0f / l[r] : 0.0f, d);
      if (rows[r].lse) *rows[r].lse = l[r] > 0.0f ? m[r] + std::log(l[r]) : -INFINITY;
    }
  }

  // Decode of nh <= NH <= 8 heads of kv group g starting at rows[0].q, over
  // the key ranges of rows[0 .. nr) (consecutive, in order), each with its
  // own out / lse.  Each range starts its blocks at its own lo and its sums
  // afresh, so its result is the one a call over it alone gives; only the
  // prefetch runs on across the boundaries, one stream over all of them.
  // qt: 8 * d floats, s: kAttnKeys * 8.
  template <int D, int NH>
  static void decode_group(const AttentionArgs& a, int g, int nh, const Row* rows, int nr,
                           float* kv, float* acc, float* qt, float* s) {
    const int d = D ? D : a.head_dim;
    const bool direct = K::has_direct && K::decode_direct(a.kv_type);
    K::template decode_load_q<NH>(rows[0].q, nh, d, direct, qt);
    const int64_t stream_lo = rows[0].lo, stream_hi = rows[nr - 1].hi;
    alignas(32) float m[8], l[8], corr[8];
    for (int r = 0; r < nr; ++r) {
      const Row& row = rows[r];
      std::memset(acc, 0, (size_t)nh * d * 4);
      for (int h = 0; h < 8; ++h) {
        m[h] = -INFINITY;
        l[h] = 0.0f;
      }
      for (int64_t kb = row.lo; kb <= row.hi; kb += kAttnKeys) {
        const int nk = (int)std::min<int64_t>(kAttnKeys, row.hi - kb + 1);
        prefetch_ahead(a, kb, stream_lo, stream_hi, g, d);
        const Span ks = span(a, a.k, a.k_new, kb, nk, g, d);
        if (direct) {
          if constexpr (K::has_direct) {
            K::template decode_scores_direct<D, NH>(ks, qt, nk, d, a.scale, s);
          }
        } else {
          load(a, ks, d, kv);
          const int nkt =
              (nk + K::decode_key_tile - 1) / K::decode_key_tile * K::decode_key_tile;
          if (nk < nkt) std::memset(kv + (int64_t)nk * d, 0, (size_t)(nkt - nk) * d * 4);
          K::template decode_scores<D, NH>(qt, kv, nk, d, a.scale, s);
        }
        K::template decode_softmax<NH>(m, l, s, nk, corr);  // corr is 0 on the first block
        const Span vs = span(a, a.v, a.v_new, kb, nk, g, d);
        if (direct) {
          if constexpr (K::has_direct) {
            K::template decode_pv_direct<D, NH>(vs, acc, corr, s, nk, d);
          }
        } else {
          load(a, vs, d, kv);
          K::template decode_pv<D>(acc, corr, s, kv, nk, nh, d);
        }
      }
      for (int h = 0; h < nh; ++h) {
        K::store_scaled(row.out + (int64_t)h * d, acc + (int64_t)h * d, 1.0f / l[h], d);
        if (row.lse) row.lse[h] = m[h] + std::log(l[h]);
      }
    }
  }

  // Query i's visible positions (only those in [key_lo, key_hi] for
  // partial sums); false when there are none, after writing the empty
  // result of heads [h0, h1).
  static bool visible(const AttentionArgs& a, int64_t i, int h0, int h1, int d, Row& row) {
    row.hi = (int64_t)a.pos0 + i;
    row.lo = attention_first_key(row.hi, a.window);
    if (a.lse) {
      row.lo = std::max(row.lo, a.key_lo);
      row.hi = std::min(row.hi, a.key_hi);
    }
    if (row.hi >= row.lo) return true;
    std::memset(a.out + i * a.out_stride + (int64_t)h0 * d, 0, (size_t)(h1 - h0) * d * 4);
    if (a.lse) std::fill(a.lse + h0, a.lse + h1, -INFINITY);
    return false;
  }

  template <int D>
  static void run(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
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
    const int min_heads = K::decode_min_heads(a.kv_type);
    Row rows[kAttnRows];
    for (int g = head_begin / group; g * group < head_end; ++g) {
      const int h0 = std::max(head_begin, g * group), h1 = std::min(head_end, (g + 1) * group);
      const int nh = h1 - h0;
      if (a.n_q == 1 && nh >= min_heads && a.pos0 >= 0 && d >= kDecodeMinDim) {
        // One row per key range (a single one unless n_ranges > 1), the
        // ranges that see nothing already written empty.
        Row ranges[kAttnMaxSplits];
        int nr = 0;
        for (int r = 0; r < std::max(1, a.n_ranges); ++r) {
          const AttentionArgs ar = a.n_ranges > 1 ? attention_range(a, r) : a;
          Row row;
          if (!visible(ar, 0, h0, h1, d, row)) continue;
          row.q = a.q + (int64_t)h0 * d;
          row.out = ar.out + (int64_t)h0 * d;
          row.lse = ar.lse ? ar.lse + h0 : nullptr;
          ranges[nr++] = row;
        }
        for (int hb = 0; hb < nh && nr > 0; hb += 8) {  // groups of more than 8 heads: 8 at a time
          const int n8 = std::min(8, nh - hb);
          Row r8[kAttnMaxSplits];
          for (int r = 0; r < nr; ++r) {
            r8[r] = ranges[r];
            r8[r].q += (int64_t)hb * d;
            r8[r].out += (int64_t)hb * d;
            if (r8[r].lse) r8[r].lse += hb;
          }
          if (n8 >= min_heads) {
            K::decode_dispatch(n8, a.kv_type, [&](auto nh_c) {
              decode_group<D, decltype(nh_c)::value>(a, g, n8, r8, nr, kv, acc,
                                                     acc + (int64_t)8 * d, s);
            });
            continue;
          }
          for (int r = 0; r < nr; ++r) {  // the rest of a group of more than 8: row tiles
            Row rs[8];
            for (int h = 0; h < n8; ++h) {
              rs[h] = r8[r];
              rs[h].q += (int64_t)h * d;
              rs[h].out += (int64_t)h * d;
              if (rs[h].lse) rs[h].lse += h;
            }
            tile<D>(a, g, rs, n8, kv, acc, s, m, l);
          }
        }
        continue;
      }
      if (a.n_ranges > 1) {  // row tiles: one range at a time
        for (int r = 0; r < a.n_ranges; ++r) run<D>(attention_range(a, r), h0, h1, scratch);
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
          if (!visible(a, i, h, h + 1, d, row)) continue;  // sees nothing
          row.q = a.q + i * a.q_stride + (int64_t)h * d;
          row.out = a.out + i * a.out_stride + (int64_t)h * d;
          row.lse = a.lse ? a.lse + h : nullptr;
          rows[n_live++] = row;
        }
        if (n_live > 0) tile<D>(a, g, rows, n_live, kv, acc, s, m, l);
      }
    }
  }

  // The entry of an ISA: head dims 64/80/96/128 compiled with the dim as a
  // constant, any other multiple of 8 generic, anything else (and Q8_0 heads
  // of partial blocks) the ref.
  static void attention(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
    if (a.n_ranges > kAttnMaxSplits) {  // more than the decode path holds: one at a time
      for (int r = 0; r < a.n_ranges; ++r) {
        attention(attention_range(a, r), head_begin, head_end, scratch);
      }
      return;
    }
    if (a.head_dim % 8 != 0 || (a.kv_type == quant::Type::Q8_0 && a.head_dim % quant::kBlock)) {
      attention__ref(a, head_begin, head_end, scratch);
      return;
    }
    switch (a.head_dim) {
      case 64: run<64>(a, head_begin, head_end, scratch); break;
      case 80: run<80>(a, head_begin, head_end, scratch); break;
      case 96: run<96>(a, head_begin, head_end, scratch); break;
      case 128: run<128>(a, head_begin, head_end, scratch); break;
      default: run<0>(a, head_begin, head_end, scratch); break;
    }
  }
};

}  // namespace lilims::kernels::attn
