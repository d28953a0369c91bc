// F32 x F32 and F16 x F32 matmul on GGUF row-major weights, AVX2 + FMA + F16C.
// Tile: 4 weight rows x 2 tokens, 8 independent FMA chains (Zen 3: 2 FMA
// ports x 4 cycles latency).  K tails (K % 8) are done in scalar code; rows
// and tokens not a multiple of the tile by narrower instantiations.
// Contract: see kernels::MatmulKernelFn.  Unaligned loads only.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_AVX2)  // empty on other architectures
LILIMS_TARGET_AVX2_BEGIN
#include <immintrin.h>

#include <cstring>

#include "kernels/matmul.h"

namespace lilims::kernels {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

struct F32W {
  using T = float;
  static __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
  static float load1(const float* p) { return *p; }
};
struct F16W {
  using T = uint16_t;
  static __m256 load8(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static float load1(const uint16_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
  }
};

template <class WL, int R, int T>
void tile(const typename WL::T* w, int64_t K, const float* const* xs, float* y, int64_t ldy,
          int64_t row0) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 xv[T];
    for (int t = 0; t < T; ++t) xv[t] = _mm256_loadu_ps(xs[t] + k);
    for (int r = 0; r < R; ++r) {
      const __m256 wv = WL::load8(w + (row0 + r) * K + k);
      for (int t = 0; t < T; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = hsum(acc[r][t]);
      for (int64_t kk = k; kk < K; ++kk) s += WL::load1(w + (row0 + r) * K + kk) * xs[t][kk];
      y[t * ldy + row0 + r] = s;
    }
  }
}

template <class WL, int R>
void rows(const typename WL::T* w, int64_t K, const uint8_t* x, size_t x_stride, int64_t n,
          float* y, int64_t ldy, int64_t row0) {
  int64_t j = 0;
  for (; j + 2 <= n; j += 2) {
    const float* xs[2] = {reinterpret_cast<const float*>(x + j * x_stride),
                          reinterpret_cast<const float*>(x + (j + 1) * x_stride)};
    tile<WL, R, 2>(w, K, xs, y + j * ldy, ldy, row0);
  }
  if (j < n) {
    const float* xs[1] = {reinterpret_cast<const float*>(x + j * x_stride)};
    tile<WL, R, 1>(w, K, xs, y + j * ldy, ldy, row0);
  }
}

template <class WL>
void gemm(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride,
          int64_t n, float* y, int64_t ldy) {
  const auto* w = static_cast<const typename WL::T*>(W.data);
  const auto* xb = static_cast<const uint8_t*>(x);
  int64_t r = r0;
  for (; r + 4 <= r1; r += 4) rows<WL, 4>(w, W.cols, xb, x_stride, n, y, ldy, r);
  for (; r < r1; ++r) rows<WL, 1>(w, W.cols, xb, x_stride, n, y, ldy, r);
}

}  // namespace

void f32_f32_gemm__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                        size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<F32W>(W, r0, r1, x, x_stride, n, y, ldy);
}
void f16_f32_gemm__avx2(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                        size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<F16W>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
LILIMS_TARGET_AVX2_END
#endif  // LILIMS_HAVE_AVX2
