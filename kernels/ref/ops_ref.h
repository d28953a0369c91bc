// Scalar reference versions of the non-matmul ops of a llama layer: the
// oracle every SIMD variant is tested against.  Plain loops, no tricks;
// transcendental functions are evaluated in double and rounded once.
// The dispatch table (kernels/ops.h) holds these for Isa::ref.
#pragma once

#include <cstdint>

#include "kernels/ref/quantize_q8_ref.h"

namespace lilims::kernels {

// y[i] = x[i] / sqrt(mean(x^2) + eps) * w[i], i < n.  y may alias x.
void rmsnorm_f32__ref(const float* x, const float* w, float* y, int64_t n, float eps);

// cos/sin tables for one position: theta_i = pos * base^(-2i/n_rot), i < n_rot/2.
void rope_table_f32__ref(int32_t pos, int n_rot, float freq_base, float* cos_out,
                         float* sin_out);

// Rotates, in place, the first n_rot dims of each of n_heads heads of x
// (x: (n_heads, head_dim)).  adjacent: pairs (2i, 2i+1) as llama GGUFs store
// Q/K; otherwise pairs (i, i + n_rot/2) as NeoX/phi.
void rope_f32__ref(float* x, int n_heads, int head_dim, int n_rot, const float* cos_t,
                   const float* sin_t, bool adjacent);

// x = softmax(x) over n elements, max-subtracted.
void softmax_f32__ref(float* x, int64_t n);

// out[i] = silu(gate[i]) * up[i]
void swiglu_f32__ref(const float* gate, const float* up, float* out, int64_t n);

// One query token attending to positions [0, n_kv) of a cache.
// q: (n_head, head_dim); k, v: (n_kv, n_head_kv, head_dim) f32, row stride
// kv_stride floats per position; out: (n_head, head_dim).
// Query head h reads kv head h / (n_head / n_head_kv).  scratch: n_kv floats.
void attention_f32__ref(const float* q, const float* k, const float* v, int64_t kv_stride,
                        int n_kv, int n_head, int n_head_kv, int head_dim, float scale,
                        float* scratch, float* out);

// --- norms -----------------------------------------------------------------

// x[i] += delta[i]; y = rmsnorm(x).  The residual add fused with the norm.
void add_rmsnorm_f32__ref(float* x, const float* delta, const float* w, float* y, int64_t n,
                          float eps);
// y[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i] (biased variance, phi2).
void layernorm_f32__ref(const float* x, const float* w, const float* b, float* y, int64_t n,
                        float eps);
// x[i] += delta[i]; y = layernorm(x).
void add_layernorm_f32__ref(float* x, const float* delta, const float* w, const float* b,
                            float* y, int64_t n, float eps);

// --- RoPE tables ------------------------------------------------------------

// How the rotation angles of one position are made:
//   theta_i = pos * freq_scale * base^(-2i/n_rot) / freq_factors[i],  i < n_rot/2
//   cos_i = attn_factor * cos(theta_i), sin_i = attn_factor * sin(theta_i).
struct RopeParams {
  int n_rot = 0;                        // rotated dims per head (phi2: 32 of 80)
  float freq_base = 10000.0f;           // rope_theta
  float freq_scale = 1.0f;              // linear position interpolation (1 = off)
  const float* freq_factors = nullptr;  // n_rot/2 divisors, nullptr = all 1: Llama 3
                                        // (rope_llama3_freq_factors, or a GGUF's
                                        // rope_freqs.weight), Phi-3 longrope short/long
  float attn_factor = 1.0f;             // Phi-3 longrope: rope_longrope_attn_factor
};

// Llama 3 frequency scaling (rope_scaling.rope_type = "llama3") as per-dim
// divisors: wavelengths above original_max_pos / low_freq_factor are divided
// by factor, below original_max_pos / high_freq_factor kept, and blended
// smoothly in between.  factors: n_rot/2.
void rope_llama3_freq_factors(int n_rot, float freq_base, float factor, float low_freq_factor,
                              float high_freq_factor, int32_t original_max_pos, float* factors);
// Phi-3 longrope / su attention factor: sqrt(1 + ln(s) / ln(original_max_pos))
// with s = max_pos / original_max_pos, 1 when s <= 1.
float rope_longrope_attn_factor(int32_t max_pos, int32_t original_max_pos);
// cos/sin tables (n_rot/2 each) of one position, computed in double; built
// once per position and shared by every layer and head.
void rope_table_f32(const RopeParams& p, int32_t pos, float* cos_out, float* sin_out);
// The same for n_pos consecutive positions: cos_out/sin_out (n_pos, n_rot/2).
void rope_tables_f32(const RopeParams& p, int32_t pos0, int n_pos, float* cos_out,
                     float* sin_out);

// --- activations and element-wise ------------------------------------------

// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   (GELU, tanh form)
void gelu_f32__ref(const float* x, float* y, int64_t n);
// y = 0.5 x (1 + erf(x / sqrt(2)))                        (GELU, exact form)
void gelu_erf_f32__ref(const float* x, float* y, int64_t n);
// y = x / (1 + exp(-1.702 x))                            (CLIP's quick GELU)
void quick_gelu_f32__ref(const float* x, float* y, int64_t n);
// y = x / (1 + exp(-x))
void silu_f32__ref(const float* x, float* y, int64_t n);
void axpy_f32__ref(float a, const float* x, float* y, int64_t n);
// y[j * ldy + c] += sum_k t[j * ldt + k] * B[k][c]: OpsTable::lora_add.
void lora_add_q8_0__ref(const void* b, int32_t rank, int64_t w, const float* t, int64_t ldt,
                         int32_t n, float* y, int64_t ldy);
void add_f32__ref(const float* a, const float* b, float* y, int64_t n);
void mul_f32__ref(const float* a, const float* b, float* y, int64_t n);

// --- conversions -------------------------------------------------------------

// base/fp16.h applied element by element.
void fp32_to_fp16__ref(const float* x, uint16_t* y, int64_t n);
void fp16_to_fp32__ref(const uint16_t* x, float* y, int64_t n);
// quantize_row_q8_0__ref (the Q8 rule for KV-cache rows): quantize_q8_ref.h.

}  // namespace lilims::kernels
