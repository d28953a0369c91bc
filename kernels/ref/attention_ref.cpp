#include "kernels/ref/attention_ref.h"

#include <algorithm>
#include <cmath>
#include <cstring>


namespace lilims::kernels {

size_t attention_scratch_floats__ref(const AttentionArgs& a) {
  return 3 * (size_t)a.head_dim + (size_t)std::max(0, a.pos0 + a.n_q);
}

void attention_load_row__ref(const AttentionArgs& a, const void* base, const float* staged,
                             int64_t pos, int g, float* row) {
  const int d = a.head_dim;
  const int64_t s0 = (int64_t)a.pos0 - a.n_new_before;
  if (staged != nullptr && pos >= s0) {
    std::memcpy(row, staged + (pos - s0) * a.new_stride + (int64_t)g * d, (size_t)d * 4);
    return;
  }
  const uint8_t* p =
      static_cast<const uint8_t*>(base) + pos * a.kv_stride_bytes + attention_head_offset(a, g);
  quant::traits(a.kv_type).to_float(p, row, d);
}

void attention__ref(const AttentionArgs& a, int head_begin, int head_end, float* scratch) {
  if (a.n_ranges > 1) {
    for (int r = 0; r < a.n_ranges; ++r) {
      attention__ref(attention_range(a, r), head_begin, head_end, scratch);
    }
    return;
  }
  const int d = a.head_dim;
  const int group = a.n_head / a.n_head_kv;
  float* krow = scratch;       // (head_dim)
  float* vrow = krow + d;      // (head_dim)
  float* acc = vrow + d;       // (head_dim)
  float* scores = acc + d;     // (hi - lo + 1) <= pos0 + n_q
  for (int i = 0; i < a.n_q; ++i) {
    int64_t hi = (int64_t)a.pos0 + i;
    int64_t lo = attention_first_key(hi, a.window);
    if (a.lse) {  // partial sums over [key_lo, key_hi]
      lo = std::max(lo, a.key_lo);
      hi = std::min(hi, a.key_hi);
    }
    const int64_t n = hi - lo + 1;
    for (int h = head_begin; h < head_end; ++h) {
      const int g = h / group;
      const float* q = a.q + i * a.q_stride + (int64_t)h * d;
      float* out = a.out + i * a.out_stride + (int64_t)h * d;
      if (n <= 0) {
        std::fill(out, out + d, 0.0f);
        if (a.lse) a.lse[h] = -INFINITY;
        continue;
      }
      for (int64_t t = 0; t < n; ++t) {
        attention_load_row__ref(a, a.k, a.k_new, lo + t, g, krow);
        float s = 0.0f;
        for (int j = 0; j < d; ++j) s += q[j] * krow[j];
        scores[t] = s * a.scale;
      }
      if (a.lse) {
        const float m = *std::max_element(scores, scores + n);
        double sum = 0.0;
        for (int64_t t = 0; t < n; ++t) sum += std::exp((double)scores[t] - m);
        a.lse[h] = m + (float)std::log(sum);
      }
      softmax_f32__ref(scores, n);
      std::fill(acc, acc + d, 0.0f);
      for (int64_t t = 0; t < n; ++t) {
        attention_load_row__ref(a, a.v, a.v_new, lo + t, g, vrow);
        for (int j = 0; j < d; ++j) acc[j] += scores[t] * vrow[j];
      }
      std::copy(acc, acc + d, out);
    }
  }
}

}  // namespace lilims::kernels
