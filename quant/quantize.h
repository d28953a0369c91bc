// Weight quantizers: float rows to GGUF block formats (scalar).
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
// Q8_0 levels stay in [-127, 127] (kernels may rely on the symmetric range).
// Quantizing a format is for weights, at conversion time: speed is secondary.
#pragma once

#include <cstdint>

#include "quant/quant.h"

namespace lilims::quant {

enum class QuantMethod { plain, search };

// src: n floats; dst: the row in `type`'s layout (row_bytes(type, n) bytes).
// n must be a multiple of the type's block size.  Types: F32, F16, Q4_0,
// Q4_1, Q8_0 (F32/F16 ignore the method).  Returns false for another type.
bool quantize_row(Type type, const float* src, void* dst, int64_t n,
                  QuantMethod method = QuantMethod::plain);

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n, QuantMethod method);
void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, QuantMethod method);
void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, QuantMethod method);
void quantize_row_f16(const float* x, uint16_t* y, int64_t n);

}  // namespace lilims::quant
