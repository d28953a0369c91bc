// Scalar reference of the on-the-fly activation quantization.
//   Q8_0: per block of 32, d = max|x| / 127, q = round_half_even(x * (1/d))
//         (0 when d == 0), d stored as fp16.
//   Q8_1: the same q and d, plus s = fp16(d * sum(q)).
// SIMD variants compute the same float operations in the same order, so
// their output is bit-identical (tests check it).
#pragma once

#include <cstdint>

namespace lilims::kernels {

// x: (k) floats, k % 32 == 0; y: (k / 32) BlockQ8_0.
void quantize_act_q8_0__ref(const float* x, void* y, int64_t k);
// x: (k) floats, k % 32 == 0; y: (k / 32) BlockQ8_1.
void quantize_act_q8_1__ref(const float* x, void* y, int64_t k);

}  // namespace lilims::kernels
