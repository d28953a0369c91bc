// AVX2+FMA+F16C norms, RoPE, activations, element-wise ops and conversions.
// Layout: contiguous f32 rows, any alignment (unaligned loads); tails are
// done with masked loads/stores, so nothing is read or written past n.
// Sums (norms, softmax) use float lanes, not the ref's doubles: the tests
// bound the difference by n * eps relative.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "kernels/x86/ops_avx2.h"
#include "kernels/x86/vec_avx2.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

using avx2::exp_ps;
using avx2::hmax;
using avx2::hsum;
using avx2::load_tail;
using avx2::store_tail;

// Sum of squares of x[0, n).
float sum_squares(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m256 v0 = _mm256_loadu_ps(x + i), v1 = _mm256_loadu_ps(x + i + 8);
    const __m256 v2 = _mm256_loadu_ps(x + i + 16), v3 = _mm256_loadu_ps(x + i + 24);
    a0 = _mm256_fmadd_ps(v0, v0, a0);
    a1 = _mm256_fmadd_ps(v1, v1, a1);
    a2 = _mm256_fmadd_ps(v2, v2, a2);
    a3 = _mm256_fmadd_ps(v3, v3, a3);
  }
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_fmadd_ps(v, v, a0);
  }
  if (i < n) {
    const __m256 v = load_tail(x + i, n - i);
    a1 = _mm256_fmadd_ps(v, v, a1);
  }
  return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

// y = x * s * w
void scale_mul(const float* x, float s, const float* w, float* y, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs),
                                          _mm256_loadu_ps(w + i)));
  }
  if (i < n) {
    store_tail(y + i, _mm256_mul_ps(_mm256_mul_ps(load_tail(x + i, n - i), vs),
                                    load_tail(w + i, n - i)), n - i);
  }
}

float rms_inv(float ss, int64_t n, float eps) {
  return (float)(1.0 / std::sqrt((double)ss / (double)n + eps));
}

// x += delta, returning the sum of x (after the add) when want_sum, else the
// sum of squares.
float add_in_place(float* x, const float* delta, int64_t n, bool squares) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 v0 = _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(delta + i));
    const __m256 v1 = _mm256_add_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(delta + i + 8));
    _mm256_storeu_ps(x + i, v0);
    _mm256_storeu_ps(x + i + 8, v1);
    a0 = _mm256_fmadd_ps(v0, squares ? v0 : one, a0);
    a1 = _mm256_fmadd_ps(v1, squares ? v1 : one, a1);
  }
  for (; i < n; i += 8) {
    const int64_t m = n - i < 8 ? n - i : 8;
    const __m256 v = _mm256_add_ps(load_tail(x + i, m), load_tail(delta + i, m));
    store_tail(x + i, v, m);
    a0 = _mm256_fmadd_ps(v, squares ? v : one, a0);  // masked lanes are 0
  }
  return hsum(_mm256_add_ps(a0, a1));
}

float sum_f32(const float* x, int64_t n) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm256_add_ps(a0, _mm256_loadu_ps(x + i));
    a1 = _mm256_add_ps(a1, _mm256_loadu_ps(x + i + 8));
  }
  for (; i < n; i += 8) a0 = _mm256_add_ps(a0, load_tail(x + i, n - i < 8 ? n - i : 8));
  return hsum(_mm256_add_ps(a0, a1));
}

// Second half of layernorm once the mean is known.
void layernorm_from_mean(const float* x, float mean, const float* w, const float* b, float* y,
                         int64_t n, float eps) {
  const __m256 vm = _mm256_set1_ps(mean);
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 d0 = _mm256_sub_ps(_mm256_loadu_ps(x + i), vm);
    const __m256 d1 = _mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vm);
    a0 = _mm256_fmadd_ps(d0, d0, a0);
    a1 = _mm256_fmadd_ps(d1, d1, a1);
  }
  for (; i < n; i += 8) {
    const int64_t m = n - i < 8 ? n - i : 8;
    const __m256 d = _mm256_and_ps(_mm256_sub_ps(load_tail(x + i, m), vm),
                                   _mm256_castsi256_ps(avx2::tail_mask(m)));
    a0 = _mm256_fmadd_ps(d, d, a0);
  }
  const float var = hsum(_mm256_add_ps(a0, a1)) / (float)n;
  const __m256 inv = _mm256_set1_ps((float)(1.0 / std::sqrt((double)var + eps)));
  for (i = 0; i < n; i += 8) {
    const int64_t m = n - i < 8 ? n - i : 8;
    const __m256 d = _mm256_mul_ps(_mm256_sub_ps(load_tail(x + i, m), vm), inv);
    store_tail(y + i, _mm256_fmadd_ps(d, load_tail(w + i, m), load_tail(b + i, m)), m);
  }
}

// Applies f to 8 lanes at a time over y = f(x), tail masked.
template <typename F>
void map1(const float* x, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));
  if (i < n) store_tail(y + i, f(load_tail(x + i, n - i)), n - i);
}
template <typename F>
void map2(const float* a, const float* b, float* y, int64_t n, F f) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  if (i < n) store_tail(y + i, f(load_tail(a + i, n - i), load_tail(b + i, n - i)), n - i);
}

inline __m256 silu_ps(__m256 x) {
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

}  // namespace

void rmsnorm_f32__avx2(const float* x, const float* w, float* y, int64_t n, float eps) {
  if (n <= 0) return;
  scale_mul(x, rms_inv(sum_squares(x, n), n, eps), w, y, n);
}

void add_rmsnorm_f32__avx2(float* x, const float* delta, const float* w, float* y, int64_t n,
                           float eps) {
  if (n <= 0) return;
  const float ss = add_in_place(x, delta, n, true);
  scale_mul(x, rms_inv(ss, n, eps), w, y, n);
}

void layernorm_f32__avx2(const float* x, const float* w, const float* b, float* y, int64_t n,
                         float eps) {
  if (n <= 0) return;
  layernorm_from_mean(x, sum_f32(x, n) / (float)n, w, b, y, n, eps);
}

void add_layernorm_f32__avx2(float* x, const float* delta, const float* w, const float* b,
                             float* y, int64_t n, float eps) {
  if (n <= 0) return;
  const float sum = add_in_place(x, delta, n, false);
  layernorm_from_mean(x, sum / (float)n, w, b, y, n, eps);
}

void rope_f32__avx2(float* x, int n_heads, int head_dim, int n_rot, const float* cos_t,
                    const float* sin_t, bool adjacent) {
  const int half = n_rot / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* xh = x + (int64_t)h * head_dim;
    int i = 0;
    if (adjacent) {
      // 4 pairs per vector: out = v * (c0 c0 c1 c1 ..) -/+ swap(v) * (s0 s0 ..),
      // fmaddsub subtracting in even lanes (x0 c - x1 s), adding in odd.
      for (; i + 4 <= half; i += 4) {
        const __m128 c = _mm_loadu_ps(cos_t + i), s = _mm_loadu_ps(sin_t + i);
        const __m256 cc = _mm256_set_m128(_mm_unpackhi_ps(c, c), _mm_unpacklo_ps(c, c));
        const __m256 ss = _mm256_set_m128(_mm_unpackhi_ps(s, s), _mm_unpacklo_ps(s, s));
        const __m256 v = _mm256_loadu_ps(xh + 2 * i);
        const __m256 sw = _mm256_permute_ps(v, 0xB1);
        _mm256_storeu_ps(xh + 2 * i, _mm256_fmaddsub_ps(v, cc, _mm256_mul_ps(sw, ss)));
      }
      for (; i < half; ++i) {
        const float x0 = xh[2 * i], x1 = xh[2 * i + 1];
        xh[2 * i] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[2 * i + 1] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    } else {
      for (; i + 8 <= half; i += 8) {
        const __m256 c = _mm256_loadu_ps(cos_t + i), s = _mm256_loadu_ps(sin_t + i);
        const __m256 a = _mm256_loadu_ps(xh + i), b = _mm256_loadu_ps(xh + i + half);
        _mm256_storeu_ps(xh + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(xh + i + half, _mm256_fmadd_ps(a, s, _mm256_mul_ps(b, c)));
      }
      for (; i < half; ++i) {
        const float x0 = xh[i], x1 = xh[i + half];
        xh[i] = x0 * cos_t[i] - x1 * sin_t[i];
        xh[i + half] = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

void softmax_f32__avx2(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  __m256 mx = ninf;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(x + i));
  if (i < n) {
    const __m256 m = _mm256_castsi256_ps(avx2::tail_mask(n - i));
    mx = _mm256_max_ps(mx, _mm256_blendv_ps(ninf, load_tail(x + i, n - i), m));
  }
  const __m256 vmax = _mm256_set1_ps(hmax(mx));
  __m256 sum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {
    const __m256 m = _mm256_castsi256_ps(avx2::tail_mask(n - i));
    const __m256 e = _mm256_and_ps(exp_ps(_mm256_sub_ps(load_tail(x + i, n - i), vmax)), m);
    store_tail(x + i, e, n - i);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(sum));
  map1(x, x, n, [&](__m256 v) { return _mm256_mul_ps(v, inv); });
}

void swiglu_f32__avx2(const float* gate, const float* up, float* out, int64_t n) {
  map2(gate, up, out, n, [](__m256 g, __m256 u) { return _mm256_mul_ps(silu_ps(g), u); });
}

void silu_f32__avx2(const float* x, float* y, int64_t n) { map1(x, y, n, silu_ps); }

void gelu_f32__avx2(const float* x, float* y, int64_t n) {
  // 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)), u = sqrt(2/pi) x (1 + 0.044715 x^2)
  map1(x, y, n, [](__m256 v) {
    const __m256 v2 = _mm256_mul_ps(v, v);
    const __m256 inner = _mm256_fmadd_ps(v2, _mm256_set1_ps(0.044715f), _mm256_set1_ps(1.0f));
    const __m256 m2u = _mm256_mul_ps(_mm256_mul_ps(v, inner),
                                     _mm256_set1_ps(-2.0f * 0.7978845608028654f));
    return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_ps(m2u)));
  });
}

void gelu_erf_f32__avx2(const float* x, float* y, int64_t n) {
  // erfc(z) for z = |x|/sqrt(2) >= 0 by Abramowitz & Stegun 7.1.26
  // (|error| <= 1.5e-7): t = 1/(1 + p z), erfc = t P(t) exp(-z^2).
  // gelu = x (1 - erfc/2) for x >= 0 and x erfc/2 for x < 0.
  map1(x, y, n, [](__m256 v) {
    const __m256 z = _mm256_mul_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), v),
                                   _mm256_set1_ps(0.70710678118654752f));
    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                                   _mm256_fmadd_ps(z, _mm256_set1_ps(0.3275911f),
                                                   _mm256_set1_ps(1.0f)));
    __m256 p = _mm256_set1_ps(1.061405429f);
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.453152027f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.421413741f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.284496736f));
    p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.254829592f));
    p = _mm256_mul_ps(p, t);
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_mul_ps(z, z)));
    const __m256 half_erfc = _mm256_mul_ps(_mm256_mul_ps(p, e), _mm256_set1_ps(0.5f));
    const __m256 pos = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_GE_OQ);
    const __m256 f =
        _mm256_blendv_ps(half_erfc, _mm256_sub_ps(_mm256_set1_ps(1.0f), half_erfc), pos);
    return _mm256_mul_ps(v, f);
  });
}

void add_f32__avx2(const float* a, const float* b, float* y, int64_t n) {
  map2(a, b, y, n, [](__m256 u, __m256 v) { return _mm256_add_ps(u, v); });
}

void mul_f32__avx2(const float* a, const float* b, float* y, int64_t n) {
  map2(a, b, y, n, [](__m256 u, __m256 v) { return _mm256_mul_ps(u, v); });
}

void axpy_f32__avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    _mm256_storeu_ps(y + i + 8,
                     _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8)));
  }
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
}

// Per 32-column block, four accumulators over every k: the block's int8
// values widened to floats and multiplied by t_k d_k (fused), y read and
// written once per block and row.
void lora_add_q8_0__avx2(const void* b, int32_t rank, int64_t w, const float* t, int64_t ldt,
                         int32_t n, float* y, int64_t ldy) {
  const auto* blocks = static_cast<const quant::BlockQ8_0*>(b);
  const int64_t nb = w / quant::kBlock;
  for (int32_t j = 0; j < n; ++j) {
    const float* tj = t + j * ldt;
    for (int64_t bi = 0; bi < nb; ++bi) {
      float* out = y + j * ldy + bi * quant::kBlock;
      __m256 a0 = _mm256_loadu_ps(out), a1 = _mm256_loadu_ps(out + 8);
      __m256 a2 = _mm256_loadu_ps(out + 16), a3 = _mm256_loadu_ps(out + 24);
      for (int32_t k = 0; k < rank; ++k) {
        const quant::BlockQ8_0& blk = blocks[(size_t)k * (size_t)nb + (size_t)bi];
        // The next pieces of B follow this one (graph::LoraTerm::b): ask for
        // them two pieces ahead, as a decode step streams B once.  A
        // prefetch past the end of B is harmless.
        _mm_prefetch(reinterpret_cast<const char*>(&blk) + 2 * (size_t)rank * (size_t)nb * sizeof(quant::BlockQ8_0),
                     _MM_HINT_T0);
        const __m256 c = _mm256_set1_ps(tj[k] * _cvtsh_ss(blk.d));
        const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.q));
        const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.q + 16));
        a0 = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q0)), a0);
        a1 = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q0, 8))), a1);
        a2 = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q1)), a2);
        a3 = _mm256_fmadd_ps(c, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(q1, 8))), a3);
      }
      _mm256_storeu_ps(out, a0);
      _mm256_storeu_ps(out + 8, a1);
      _mm256_storeu_ps(out + 16, a2);
      _mm256_storeu_ps(out + 24, a3);
    }
  }
}

void fp32_to_fp16__avx2(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    // F16C keeps NaN payload bits that base/fp16.h drops: NaNs go the scalar way.
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
      for (int j = 0; j < 8; ++j) y[i + j] = fp32_to_fp16(x[i + j]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void fp16_to_fp32__avx2(const uint16_t* x, float* y, int64_t n) {
  const __m128i exp_mask = _mm_set1_epi16(0x7c00);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i));
    // F16C quiets signalling NaNs, base/fp16.h does not: inf/NaN go the scalar way.
    if (_mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exp_mask), exp_mask))) {
      for (int j = 0; j < 8; ++j) y[i + j] = fp16_to_fp32(x[i + j]);
      continue;
    }
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

namespace detail {

const OpsTable& ops_table_avx2() {
  static const OpsTable table = [] {
    OpsTable t{};
    LILIMS_OPS_TABLE_FILL(t, avx2)
    t.isa = Isa::avx2;
    t.name = "avx2";
    return t;
  }();
  return table;
}

}  // namespace detail
}  // namespace lilims::kernels
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
