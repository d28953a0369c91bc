// Quantizers: float rows to GGUF block formats (scalar references).
//
// Two methods per format:
//  - plain: round to nearest with GGML's reference scale choice (the same
//    bytes llama.cpp's reference quantizers produce):
//      Q8_0 d = max|x| / 127;  Q4_0 d = (signed value of max |x|) / -8;
//      Q4_1 d = (max - min) / 15, m = min.
//  - search: per block, tries candidate scales around the plain one, refits
//    each by least squares (for Q4_1 scale and min jointly, iterated), and
//    keeps whichever block dequantizes with the least squared error.  The
//    plain block is one of the candidates and blocks are compared on their
//    actual dequantized values, so a block's error is never above plain.
//    Q4_0's squared errors are weighted (q4_0_search_weights: llama.cpp's
//    weighting for its searched 4-bit types), Q8_0's and Q4_1's are not.
//    Measured on SmolLM2-135M (tests/runtime/test_quality_gates.cpp): with
//    equal weights the Q4_0 search lowers the squared error but raises the
//    KL divergence from F16 above plain's (0.284 vs 0.274: it clips the
//    large values the model relies on); weighted, it falls to 0.250.
// Q8_0 levels stay in [-127, 127] (kernels may rely on the symmetric range).
// Quantizing Q4 formats is for weights, at conversion time: speed is
// secondary.
//
// Q8 rows have one rule wherever they are made: weights (plain), the
// activations of every matmul (Q8_0 and Q8_1) and the Q8_0 KV cache, in
// every ISA.  Per block of 32: amax = max|x|, d = amax / 127,
// id = d != 0 ? 1 / d : 0, q = round-half-away-from-zero(x * id), d stored
// as fp16 (Q8_1: s = fp16(d * sum(q))).  That is ggml's reference
// quantizer (roundf), i.e. the bytes llama.cpp writes into Q8_0 files, so a
// row we quantize and the same row in a llama.cpp file agree; round half to
// even (what cvtps2dq / fcvtns give for free) differs only at exact ties
// but would make weights, KV rows and activations disagree there.
// quantize_block_q8 is that definition; the SIMD kernels (kernels/*/
// quantize_q8_*.cpp) are tested bit-exact against it.  Inputs are finite
// (with a NaN or inf the ISAs may disagree on amax).
#pragma once

#include <cstdint>

#include "quant/quant.h"

namespace lilims::quant {

// src: n floats; dst: the row in `type`'s layout (row_bytes(type, n) bytes).
// n must be a multiple of the type's block size.  The types with
// kQuantPlain (F32, F16, Q4_0, Q4_1, Q5_0, Q8_0; F32/F16/Q5_0 ignore the
// method); returns false for another type.
bool quantize_row(Type type, const float* src, void* dst, int64_t n,
                  QuantMethod method = QuantMethod::plain);

// The search method minimising sum_j importance[j] * (x_j - y_j)^2 over the
// row (for Q4_0 too: the importance alone, without Q4_0's default weights,
// measured better on SmolLM2: KLD 0.135 vs 0.149 with their product) (importance: n non-negative floats, e.g. the mean squared activation
// of each input column, `lilims imatrix`).  Per block the search starts
// from the plain block, so its weighted error is never above plain's; the
// weighted fits can clip an outlier in a column that carries no weight.
// The types with kQuantImatrix (their from_float_weighted); another
// quantizable type is quantized by the unweighted search, F32/F16 ignore the
// weights; false for a type without kQuantPlain.
bool quantize_row_weighted(Type type, const float* src, void* dst, int64_t n,
                           const float* importance);

// v rounded half away from zero (as std::lround) and clamped to [lo, hi],
// a NaN to lo: the rounding of every weight quantizer here.  Without the
// library call and without branches (the search spends much of its time
// here): v clamps first, then v + 0.5 (sign of v), exact in double for a
// float, truncates.
inline int round_clamp(float v, int lo, int hi) {
  const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
  v = v > flo ? v : flo;
  v = v < fhi ? v : fhi;
  return static_cast<int>(static_cast<double>(v) + (v < 0 ? -0.5 : 0.5));
}

// The integer levels a block of `type` holds, lo <= q <= hi (its traits'
// levels): Q8_0 [-127, 127] (int8 could hold -128; the quantizers never
// write it), Q4_0 [-8, 7] (nibble - 8), Q4_1 [0, 15].  {0, 0} for a type
// without levels.
struct LevelRange {
  int lo = 0, hi = 0;
};
LevelRange level_range(Type type);

// Writes the 32 levels q (each within level_range(type)) into one block of
// `type`; its scale (and minimum) stay as they are.  A type without levels:
// nothing is written.
void set_block_levels(Type type, void* block, const int* q);

// Q4_0's search weights without an imatrix, over a row of n values:
// w[j] = sqrt(sigma2 + x[j]^2), sigma2 the mean of x^2 over the row, so
// large values weigh more but no value weighs nothing.
void q4_0_search_weights(const float* x, float* w, int64_t n);

// The Q8 rule on one block of 32: writes q[0..31] and returns d (before fp16
// rounding); *sum (if set) receives sum(q).
float quantize_block_q8(const float* x, int8_t* q, int* sum = nullptr);

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n,
                       QuantMethod method = QuantMethod::plain);
void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, QuantMethod method);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, QuantMethod method);
// The weighted searches (quantize_row_weighted; their traits' from_float_weighted).
void quantize_row_q8_0_weighted(const float* x, BlockQ8_0* y, int64_t n, const float* importance);
void quantize_row_q4_0_weighted(const float* x, BlockQ4_0* y, int64_t n, const float* importance);
void quantize_row_q4_1_weighted(const float* x, BlockQ4_1* y, int64_t n, const float* importance);
// GGML's reference Q5_0 rounding (the only method: `search` gives the same
// bytes): d = (signed value of max |x|) / -16, q = min(31, trunc(x / d + 16.5)).
void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n);
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);

}  // namespace lilims::quant
