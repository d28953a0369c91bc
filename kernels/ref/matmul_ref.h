// Scalar reference matmul kernels: the oracle for every SIMD variant.
// Signature and contract: kernels::MatmulKernelFn (kernels/matmul.h).  They
// read any weight layout (GGUF or 4- / 16-row interleaved, via
// quant::block_from_packed) and any r0/r1.
//
// Per output, blocks b = 0..K/32-1 are accumulated in order, in fp32:
//   Q8_0, Q4_0, Q5_0 x Q8_0:   y += (dw_b * da_b) * float(sumi_b)
//   Q4_1 x Q8_1:               y += (dw_b * da_b) * float(sumi_b) + mw_b * sa_b
// where sumi_b is the exact int32 dot product of the block's integer quants
// (Q4_0: nibble - 8; Q5_0: q - 16;
// Q4_1: nibble); F32/F16 x F32: y += w_k * x_k in order.
// K-quants (matmul_kquant_ref.cpp), super-blocks of 256 in order, inside
// each the activation blocks of 32 (a = 8 per super-block) in order:
//   Q4_K, Q5_K x Q8_1: y += (dw * da_j) * float(scale_j * sumi_j)
//                           - (dminw * float(min_j)) * sa_j
//     sub-block j of 32 is activation block j; sa_j its fp16 d * sum(q)
//   Q6_K x Q8_0:       y += (dw * da_j) * float(sumi_j)
//     sumi_j = scale_2j * dot(q - 32, a, first 16) + scale_2j+1 * (second 16)
// every sumi an exact int32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/matmul.h"

namespace lilims::kernels {

void q8_0_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void q4_0_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void q5_0_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void q4_1_q8_1_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void q4_k_q8_1_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void q5_k_q8_1_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void q6_k_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy);
void f16_f32_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                       size_t x_stride, int64_t n, float* y, int64_t ldy);
void f32_f32_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                       size_t x_stride, int64_t n, float* y, int64_t ldy);

// The fp32 oracle: each weight row dequantized with quant traits (any type,
// any layout), fp32 dot with the float activations, no activation
// quantization.  x: (n, W.cols) floats with row stride ldx.
void matmul_dequant_f32__ref(const PackedWeight& W, int64_t r0, int64_t r1, const float* x,
                             int64_t ldx, int64_t n, float* y, int64_t ldy);

}  // namespace lilims::kernels
