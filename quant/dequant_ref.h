// Reference dequantizers for the GGML types lilims reads but has no
// kernels for (Q5_1, IQ4_NL, Q2_K, Q3_K, BF16, as community GGUFs ship
// them) and for the K-quant kernel types (Q4_K, Q5_K, Q6_K).  A model in a
// type without kernels is dequantized and re-quantized to a kernel type
// (its traits' load_as, quant/quant.cpp says why that one) when it loads
// (models/load.cpp) or once by `lilims quantize`; so is a kernel type on a
// CPU where its kernels are slower than the converted type's
// (kernels::kept_at_load).
//
// Block layouts are GGML's byte for byte (each struct below has its size
// asserted).  Every value is d * q (+ min) computed in float: the products of
// an fp16 scale (11 significant bits) by the small integer scales and quants
// are exact in float, so each element comes from at most one rounding (the
// final product or the final add of the min) and equals the correctly rounded
// exact value.  Any implementation doing float arithmetic agrees bit for bit
// (tests/quant/test_dequant_ref.cpp checks gguf-py's output with 0 ulp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/quant.h"

namespace lilims::quant {

// Each block struct below says its element formula (x[e] for e in the block;
// d, dmin and m are fp16) and where element e's bits are, and asserts its size.

// Q5_1, 32 elements in 24 bytes (6 bits each): x[e] = d * q + m, q 0..31 in
// the bits of Q5_0 (quant/quant.h: BlockQ5_0, a kernel type).
struct BlockQ5_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qh[4];
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");

// IQ4_NL, 32 elements in 18 bytes (4.5 bits each): x[e] = d * kIq4nlValues[q],
// q 0..15 the nibble of qs in Q4_0's order.
struct BlockIQ4_NL {
  uint16_t d;
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block is 18 bytes");
extern const int8_t kIq4nlValues[16];

// Q2_K, 256 elements in 84 bytes (2.625 bits each), 16 sub-blocks of 16:
// x[e] = d * scale[s] * q - dmin * min[s] with s = e / 16, scales[s] =
// scale[s] (low nibble) | min[s] (high nibble), q 0..3.  For e = 128 * h +
// 32 * k + l (l < 32), q is bits 2k..2k+1 of qs[32 * h + l].
struct BlockQ2_K {
  uint8_t scales[kBlockK / 16];
  uint8_t qs[kBlockK / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");

// Q3_K, 256 elements in 110 bytes (3.4375 bits each), 16 sub-blocks of 16:
// x[e] = d * scale[s] * (q - (hbit ? 0 : 4)) with s = e / 16, scale[s] a
// 6-bit value minus 32 packed in 12 bytes (q3_k_scale in dequant_ref.cpp),
// q 0..3 in qs as in Q2_K, and hbit bit e / 32 of hmask[e % 32].
struct BlockQ3_K {
  uint8_t hmask[kBlockK / 8];
  uint8_t qs[kBlockK / 4];
  uint8_t scales[12];
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");

// Q4_K/Q5_K's (scale, min) pair j (0..7) from the 12 scale bytes.
void k_scale_min(const uint8_t* scales, int j, int* scale, int* min);

// The scalar dequantizers (their traits' to_float).
void q5_1_to_float(const void* src, float* dst, int64_t n);
void iq4_nl_to_float(const void* src, float* dst, int64_t n);
void q2_k_to_float(const void* src, float* dst, int64_t n);
void q3_k_to_float(const void* src, float* dst, int64_t n);
void q4_k_to_float(const void* src, float* dst, int64_t n);
void q5_k_to_float(const void* src, float* dst, int64_t n);
void q6_k_to_float(const void* src, float* dst, int64_t n);
void bf16_to_float(const void* src, float* dst, int64_t n);

// Q4_K -> Q4_1, sub-block by sub-block: a Q4_K sub-block of 32 is
// (d * scale) * q - (dmin * min) with q in 0..15, a Q4_1 block exactly, with
// its scale and min rounded to fp16 (relative error at most 2^-11 each).
// Q4_K's traits' transcode.
void transcode_q4_k_to_q4_1(const void* src, void* dst, int64_t n);

}  // namespace lilims::quant
