// Multi-token driver of the +dotprod / +i8mm matmul kernels: tokens are
// taken 4, 8 or 16 at a time, and their activations are interleaved once per
// call into a stack tile so the inner loop reads them with plain 16-byte
// loads, no DUP or lane insert per block.  Included by
// matmul_gemm_x4_neon_{dotprod,i8mm}.cpp only.
//
// A tile block (ActTile4) holds one block column of one quad of 4 tokens,
// in one of two orders (qs, 128 bytes):
//   Order::lane  token t's elements 4j..4j+3 at qs[16j + 4t].  A 16-byte
//                load is the left operand of SDOT-by-element, whose element
//                picks 4 bytes of one weight row: the result lanes are the
//                4 tokens.
//   Order::pair  token pair p (tokens 2p, 2p+1), chunk c (elements
//                8c..8c+7): qs[64p + 16c + 8u] for token 2p+u.  A 16-byte
//                load is exactly SMMLA's 2x8 right operand.
// Scales are converted to fp32 here, once, not per row group: lane: d =
// (t0 t1 t2 t3), pair: d = (t0 t1 t0 t1, t2 t3 t2 t3), i.e. the multiplier
// of each result lane; s (Q8_1's fp16 d * sum(q), 0 for Q8_0) the same.
// The quads of one block column follow each other, so the inner loop
// streams the tile with one pointer.
//
// The tile holds kChunk block columns (1024 elements) of up to 16 tokens,
// 24 KiB of stack; a longer K runs in chunks that add into Y (the first one
// stores), which keeps integer-data results exact (every partial is an
// exact fp32 sum).  Missing tokens of the last quad are zeros with scale 0
// and are not written.  n == 1 does not come here: the 1-token tile reads
// the activation row as it is.
#pragma once

#include "kernels/arm/matmul_x4_neon_impl.h"

namespace lilims::kernels::neon_x4 {

enum class Order { lane, pair };

struct ActTile4 {
  float d[8];         // activation scales, in the order's layout
  float s[8];         // Q8_1 d * sum(q), same layout; 0 for Q8_0
  int8_t qs[4 * 32];  // (order's layout)
};
static_assert(sizeof(ActTile4) == 192, "ActTile4 is 192 bytes");

constexpr int64_t kChunk = 32;
constexpr int kMaxQuads = 4;

// Interleaves block columns [b0, b0 + nbc) of tokens a[0..tokens) (tokens
// <= 4; activation blocks of kActBlock bytes, quants at kActQ, Q8_1's sum
// at 2) into tile[b * stride] for b in [0, nbc); tokens [tokens, 4) are
// zeros with scale 0.
template <Type WT, Order O>
inline void interleave4(const uint8_t* const a[4], int tokens, int64_t b0, int64_t nbc,
                        ActTile4* tile, int stride) {
  using P = X4<WT>;
  for (int64_t b = 0; b < nbc; ++b) {
    int32x4_t lo[4], hi[4];
    float d[4] = {0, 0, 0, 0}, s[4] = {0, 0, 0, 0};
    for (int t = 0; t < 4; ++t) {
      if (t >= tokens) {
        lo[t] = hi[t] = vdupq_n_s32(0);
        continue;
      }
      const uint8_t* blk = a[t] + (b0 + b) * P::kActBlock;
      lo[t] = vreinterpretq_s32_s8(vld1q_s8(reinterpret_cast<const int8_t*>(blk + P::kActQ)));
      hi[t] = vreinterpretq_s32_s8(vld1q_s8(reinterpret_cast<const int8_t*>(blk + P::kActQ + 16)));
      d[t] = f16_to_f32(blk);
      if (P::kHasMin) s[t] = f16_to_f32(blk + 2);
    }
    ActTile4& o = tile[b * stride];
    int8_t* q = o.qs;
    if constexpr (O == Order::lane) {
      // ST4 of 32-bit elements writes element j of tokens 0..3 side by side.
      const int32x4x4_t l4 = {{lo[0], lo[1], lo[2], lo[3]}}, h4 = {{hi[0], hi[1], hi[2], hi[3]}};
      vst4q_s32(reinterpret_cast<int32_t*>(q), l4);
      vst4q_s32(reinterpret_cast<int32_t*>(q + 64), h4);
      for (int t = 0; t < 4; ++t) o.d[t] = d[t], o.s[t] = s[t], o.d[4 + t] = 0, o.s[4 + t] = 0;
    } else {
      // ST2 of 64-bit elements: chunk c of tokens 2p, 2p+1 side by side.
      for (int p = 0; p < 2; ++p) {
        int64_t* out = reinterpret_cast<int64_t*>(q + 64 * p);
        const int64x2x2_t l2 = {{vreinterpretq_s64_s32(lo[2 * p]), vreinterpretq_s64_s32(lo[2 * p + 1])}};
        const int64x2x2_t h2 = {{vreinterpretq_s64_s32(hi[2 * p]), vreinterpretq_s64_s32(hi[2 * p + 1])}};
        vst2q_s64(out, l2);
        vst2q_s64(out + 4, h2);
        for (int i = 0; i < 4; ++i) {
          o.d[4 * p + i] = d[2 * p + (i & 1)];
          o.s[4 * p + i] = s[2 * p + (i & 1)];
        }
      }
    }
  }
}

// Writes (or adds) a 4-row x tokens result o[row][token].
inline void store_tile(const float o[4][4 * kMaxQuads], float* y, int64_t ldy, int64_t row0,
                       int rows, int tokens, bool add) {
  for (int t = 0; t < tokens; ++t) {
    float* yt = y + t * ldy + row0;
    for (int r = 0; r < rows; ++r) yt[r] = add ? yt[r] + o[r][t] : o[r][t];
  }
}

// Micro::run<WT, TQ>(g, tile, nbc, y, ldy, row0, rows, tokens, add): one
// 4-row group x TQ quads over nbc tile block columns, stored or added;
// Micro::kQuads: the TQ of full passes (the most its registers hold).
// Tile1::run<G>(g, nb, x, y, row0, rows): the 1-token tile (n == 1) over G
// (1 to 3) groups.
template <Type WT, Order O, class Micro, int TQ>
inline void act_tile_rows(const typename X4<WT>::Blk* base, int64_t nb, int64_t r0, int64_t r1,
                          const uint8_t* x, size_t x_stride, int tokens, float* y, int64_t ldy,
                          ActTile4* tile) {
  for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
    const int64_t nbc = nb - b0 < kChunk ? nb - b0 : kChunk;
    for (int q = 0; q < TQ; ++q) {
      const int tq = tokens - 4 * q < 4 ? tokens - 4 * q : 4;
      const uint8_t* a[4];
      for (int t = 0; t < 4; ++t) a[t] = x + (4 * q + (t < tq ? t : 0)) * x_stride;
      interleave4<WT, O>(a, tq, b0, nbc, tile + q, TQ);
    }
    for (int64_t row0 = r0; row0 < r1; row0 += 4) {
      const int rows = (int)(r1 - row0 < 4 ? r1 - row0 : 4);
      Micro::template run<WT, TQ>(base + (row0 / 4) * nb + b0, tile, nbc, y, ldy, row0, rows,
                                  tokens, b0 > 0);
    }
  }
}

template <Type WT, Order O, class Micro, class Tile1>
inline void gemm_x4_act4(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  using Blk = typename X4<WT>::Blk;
  const int64_t nb = W.cols / quant::kBlock;
  const Blk* base = static_cast<const Blk*>(W.data);
  const uint8_t* xb = static_cast<const uint8_t*>(x);
  if (n == 1) {
    // Groups two at a time (they share the activation registers), three
    // once if their number is odd; one alone only when [r0, r1) has one.
    const int64_t groups = (r1 - r0 + 3) / 4;
    const auto rows_of = [&](int64_t row) { return (int)(r1 - row < 4 ? r1 - row : 4); };
    int64_t row0 = r0;
    if (groups == 1) {
      const Blk* g[1] = {base + (row0 / 4) * nb};
      const int rows[1] = {rows_of(row0)};
      Tile1::template run<1>(g, nb, xb, y, row0, rows);
      return;
    }
    if (groups % 2 == 1) {
      const Blk* g[3] = {base + (row0 / 4) * nb, base + (row0 / 4 + 1) * nb, base + (row0 / 4 + 2) * nb};
      const int rows[3] = {4, 4, rows_of(row0 + 8)};
      Tile1::template run<3>(g, nb, xb, y, row0, rows);
      row0 += 12;
    }
    for (; row0 < r1; row0 += 8) {
      const Blk* g[2] = {base + (row0 / 4) * nb, base + (row0 / 4 + 1) * nb};
      const int rows[2] = {4, rows_of(row0 + 4)};
      Tile1::template run<2>(g, nb, xb, y, row0, rows);
    }
    return;
  }
  alignas(16) ActTile4 tile[kChunk * kMaxQuads];
  constexpr int kQ = Micro::kQuads;  // quads per pass for full passes
  static_assert(kQ >= 2 && kQ <= kMaxQuads, "a pass takes 2 to kMaxQuads quads");
  for (int64_t j = 0; j < n;) {
    const int64_t left = n - j;
    const uint8_t* xj = xb + j * x_stride;
    float* yj = y + j * ldy;
    if (left >= 4 * kQ) {
      act_tile_rows<WT, O, Micro, kQ>(base, nb, r0, r1, xj, x_stride, 4 * kQ, yj, ldy, tile);
      j += 4 * kQ;
    } else if (left >= 8) {
      act_tile_rows<WT, O, Micro, 2>(base, nb, r0, r1, xj, x_stride, 8, yj, ldy, tile);
      j += 8;
    } else {
      const int tokens = (int)(left < 4 ? left : 4);
      act_tile_rows<WT, O, Micro, 1>(base, nb, r0, r1, xj, x_stride, tokens, yj, ldy, tile);
      j += tokens;
    }
  }
}

}  // namespace lilims::kernels::neon_x4
