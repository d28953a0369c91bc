// Scalar reference versions of the non-matmul ops of a llama layer: the
// oracle every SIMD variant is tested against.  Plain loops, no tricks.
#pragma once

#include <cstdint>

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

}  // namespace lilims::kernels
