#include "kernels/ref/ops_ref.h"

#include <cmath>

namespace lilims::kernels {

void rmsnorm_f32__ref(const float* x, const float* w, float* y, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += (double)x[i] * x[i];
  const float inv = (float)(1.0 / std::sqrt(ss / (double)n + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * inv * w[i];
}

void rope_table_f32__ref(int32_t pos, int n_rot, float freq_base, float* cos_out,
                         float* sin_out) {
  for (int i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow((double)freq_base, -2.0 * i / n_rot);
    const double angle = pos * freq;
    cos_out[i] = (float)std::cos(angle);
    sin_out[i] = (float)std::sin(angle);
  }
}

void rope_f32__ref(float* x, int n_heads, int head_dim, int n_rot, const float* cos_t,
                   const float* sin_t, bool adjacent) {
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + (int64_t)h * head_dim;
    for (int i = 0; i < n_rot / 2; ++i) {
      const int a = adjacent ? 2 * i : i;
      const int b = adjacent ? 2 * i + 1 : i + n_rot / 2;
      const float x0 = xh[a], x1 = xh[b];
      xh[a] = x0 * cos_t[i] - x1 * sin_t[i];
      xh[b] = x0 * sin_t[i] + x1 * cos_t[i];
    }
  }
}

void softmax_f32__ref(float* x, int64_t n) {
  if (n <= 0) return;
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void swiglu_f32__ref(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void attention_f32__ref(const float* q, const float* k, const float* v, int64_t kv_stride,
                        int n_kv, int n_head, int n_head_kv, int head_dim, float scale,
                        float* scratch, float* out) {
  const int group = n_head / n_head_kv;
  for (int h = 0; h < n_head; ++h) {
    const float* qh = q + (int64_t)h * head_dim;
    const int64_t kv_off = (int64_t)(h / group) * head_dim;
    for (int t = 0; t < n_kv; ++t) {
      const float* kt = k + t * kv_stride + kv_off;
      float s = 0.0f;
      for (int d = 0; d < head_dim; ++d) s += qh[d] * kt[d];
      scratch[t] = s * scale;
    }
    softmax_f32__ref(scratch, n_kv);
    float* oh = out + (int64_t)h * head_dim;
    for (int d = 0; d < head_dim; ++d) oh[d] = 0.0f;
    for (int t = 0; t < n_kv; ++t) {
      const float* vt = v + t * kv_stride + kv_off;
      const float p = scratch[t];
      for (int d = 0; d < head_dim; ++d) oh[d] += p * vt[d];
    }
  }
}

}  // namespace lilims::kernels
