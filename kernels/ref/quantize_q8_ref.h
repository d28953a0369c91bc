// Q8 rows (activations of every quantized matmul, KV-cache rows): the one
// rule of quant/quantize.h (quant::quantize_block_q8), per block of 32:
// d = max|x| / 127, q = round-half-away-from-zero(x * (1/d)) (0 when d == 0),
// d stored as fp16; Q8_1 adds s = fp16(d * sum(q)).  The SIMD variants
// (kernels/{x86,arm}/quantize_q8_*.cpp) give the same bytes for finite input.
#pragma once

#include <cstdint>

namespace lilims::kernels {

// x: (k) floats, k % 32 == 0; y: (k / 32) BlockQ8_0.
void quantize_row_q8_0__ref(const float* x, void* y, int64_t k);
// x: (k) floats, k % 32 == 0; y: (k / 32) BlockQ8_1.
void quantize_row_q8_1__ref(const float* x, void* y, int64_t k);

}  // namespace lilims::kernels
