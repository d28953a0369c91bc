// NEON (aarch64 baseline) versions of the ops in kernels/ops.h; same contracts as the
// refs in kernels/ref/ops_ref.h.  Defined in kernels/arm/*_neon.cpp.
#pragma once

#include <cstdint>

#include "kernels/ops.h"

namespace lilims::kernels {

void rmsnorm_f32__neon(const float* x, const float* w, float* y, int64_t n, float eps);
void add_rmsnorm_f32__neon(float* x, const float* delta, const float* w, float* y, int64_t n,
                           float eps);
void layernorm_f32__neon(const float* x, const float* w, const float* b, float* y, int64_t n,
                         float eps);
void add_layernorm_f32__neon(float* x, const float* delta, const float* w, const float* b,
                             float* y, int64_t n, float eps);
void rope_f32__neon(float* x, int n_heads, int head_dim, int n_rot, const float* cos_t,
                    const float* sin_t, bool adjacent);
void softmax_f32__neon(float* x, int64_t n);
void swiglu_f32__neon(const float* gate, const float* up, float* out, int64_t n);
void silu_f32__neon(const float* x, float* y, int64_t n);
void axpy_f32__neon(float a, const float* x, float* y, int64_t n);
// y[j * ldy + c] += sum_k t[j * ldt + k] * B[k][c]: OpsTable::lora_add.
void lora_add_q8_0__neon(const void* b, int32_t rank, int64_t w, const float* t, int64_t ldt,
                         int32_t n, float* y, int64_t ldy);
void gelu_f32__neon(const float* x, float* y, int64_t n);
void gelu_erf_f32__neon(const float* x, float* y, int64_t n);
void add_f32__neon(const float* a, const float* b, float* y, int64_t n);
void mul_f32__neon(const float* a, const float* b, float* y, int64_t n);
void fp32_to_fp16__neon(const float* x, uint16_t* y, int64_t n);
void fp16_to_fp32__neon(const uint16_t* x, float* y, int64_t n);
// Defined with the matmul's activation quantizers (quantize_q8_neon.cpp).
void quantize_row_q8_0__neon(const float* x, void* y, int64_t n);
void quantize_row_q8_1__neon(const float* x, void* y, int64_t n);
void attention__neon(const AttentionArgs& a, int head_begin, int head_end, float* scratch);

}  // namespace lilims::kernels
