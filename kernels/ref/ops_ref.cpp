#include "kernels/ref/ops_ref.h"

#include <cmath>

#include "base/fp16.h"
#include "quant/quant.h"

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

void add_rmsnorm_f32__ref(float* x, const float* delta, const float* w, float* y, int64_t n,
                          float eps) {
  for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
  rmsnorm_f32__ref(x, w, y, n, eps);
}

void layernorm_f32__ref(const float* x, const float* w, const float* b, float* y, int64_t n,
                        float eps) {
  if (n <= 0) return;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / (double)n;
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += (x[i] - mean) * (x[i] - mean);
  const double inv = 1.0 / std::sqrt(ss / (double)n + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = (float)((x[i] - mean) * inv * w[i] + b[i]);
}

void add_layernorm_f32__ref(float* x, const float* delta, const float* w, const float* b,
                            float* y, int64_t n, float eps) {
  for (int64_t i = 0; i < n; ++i) x[i] += delta[i];
  layernorm_f32__ref(x, w, b, y, n, eps);
}

void rope_llama3_freq_factors(int n_rot, float freq_base, float factor, float low_freq_factor,
                              float high_freq_factor, int32_t original_max_pos,
                              float* factors) {
  const double pi = 3.14159265358979323846;
  const double low_wavelen = original_max_pos / (double)low_freq_factor;
  const double high_wavelen = original_max_pos / (double)high_freq_factor;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow((double)freq_base, -2.0 * i / n_rot);
    const double wavelen = 2.0 * pi / freq;
    if (wavelen < high_wavelen) {
      factors[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      factors[i] = factor;
    } else {  // new freq = (1 - s) freq / factor + s freq, as a divisor of freq
      const double s = (original_max_pos / wavelen - low_freq_factor) /
                       ((double)high_freq_factor - low_freq_factor);
      factors[i] = (float)(1.0 / ((1.0 - s) / factor + s));
    }
  }
}

float rope_longrope_attn_factor(int32_t max_pos, int32_t original_max_pos) {
  const double s = (double)max_pos / original_max_pos;
  if (s <= 1.0) return 1.0f;
  return (float)std::sqrt(1.0 + std::log(s) / std::log((double)original_max_pos));
}

void rope_table_f32(const RopeParams& p, int32_t pos, float* cos_out, float* sin_out) {
  for (int i = 0; i < p.n_rot / 2; ++i) {
    double theta = (double)pos * p.freq_scale * std::pow((double)p.freq_base, -2.0 * i / p.n_rot);
    if (p.freq_factors) theta /= p.freq_factors[i];
    cos_out[i] = (float)(p.attn_factor * std::cos(theta));
    sin_out[i] = (float)(p.attn_factor * std::sin(theta));
  }
}

void rope_tables_f32(const RopeParams& p, int32_t pos0, int n_pos, float* cos_out,
                     float* sin_out) {
  const int half = p.n_rot / 2;
  for (int t = 0; t < n_pos; ++t) {
    rope_table_f32(p, pos0 + t, cos_out + (int64_t)t * half, sin_out + (int64_t)t * half);
  }
}

void gelu_f32__ref(const float* x, float* y, int64_t n) {
  const double c = std::sqrt(2.0 / 3.14159265358979323846);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    // 0.5 v (1 + tanh(t)) written as v / (1 + exp(-2t)): the same function
    // without the cancellation of 1 + tanh(t) for very negative t.
    y[i] = (float)(v / (1.0 + std::exp(-2.0 * c * (v + 0.044715 * v * v * v))));
  }
}

void gelu_erf_f32__ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = (float)(0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))));
  }
}

void quick_gelu_f32__ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = (float)(v / (1.0 + std::exp(-1.702 * v)));
  }
}

void silu_f32__ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    y[i] = (float)(v / (1.0 + std::exp(-v)));
  }
}

void add_f32__ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void mul_f32__ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i];
}

void axpy_f32__ref(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// b: (rank, w / 32 blocks) of Q8_0; each element of y gets d_k * q_k * t_k
// added in order of k, as (t_k d_k) q_k.
void lora_add_q8_0__ref(const void* b, int32_t rank, int64_t w, const float* t, int64_t ldt,
                        int32_t n, float* y, int64_t ldy) {
  const auto* blocks = static_cast<const quant::BlockQ8_0*>(b);
  const int64_t nb = w / quant::kBlock;
  for (int32_t j = 0; j < n; ++j) {
    for (int64_t bi = 0; bi < nb; ++bi) {
      float* out = y + j * ldy + bi * quant::kBlock;
      for (int32_t k = 0; k < rank; ++k) {
        const quant::BlockQ8_0& blk = blocks[(size_t)k * (size_t)nb + (size_t)bi];
        const float c = t[j * ldt + k] * fp16_to_fp32(blk.d);
        for (int e = 0; e < quant::kBlock; ++e) out[e] = std::fma(c, (float)blk.q[e], out[e]);
      }
    }
  }
}

void fp32_to_fp16__ref(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void fp16_to_fp32__ref(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

}  // namespace lilims::kernels
