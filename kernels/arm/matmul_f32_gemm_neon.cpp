// F32 x F32 and F16 x F32 matmul on GGUF row-major weights, baseline NEON.
// Tile: 4 rows x 2 tokens, 8 FMA chains; K % 4 tails in scalar code.
// Contract: see kernels::MatmulKernelFn.
#include "kernels/isa_target.h"
#if defined(LILIMS_HAVE_NEON)  // empty on other architectures
#include <arm_neon.h>

#include <cstring>

#include "kernels/matmul.h"

namespace lilims::kernels {
namespace {

struct F32W {
  using T = float;
  static float32x4_t load4(const float* p) { return vld1q_f32(p); }
  static float load1(const float* p) { return *p; }
};
struct F16W {
  using T = uint16_t;
  static float32x4_t load4(const uint16_t* p) {
    uint16x4_t h;
    std::memcpy(&h, p, 8);
    return vcvt_f32_f16(vreinterpret_f16_u16(h));
  }
  static float load1(const uint16_t* p) {
    uint16x4_t h = vdup_n_u16(0);
    std::memcpy(&h, p, 2);
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(h)), 0);
  }
};

template <class WL, int R, int T>
void tile(const typename WL::T* w, int64_t K, const float* const* xs, float* y, int64_t ldy,
          int64_t row0) {
  float32x4_t acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = vdupq_n_f32(0.0f);
  int64_t k = 0;
  for (; k + 4 <= K; k += 4) {
    float32x4_t xv[T];
    for (int t = 0; t < T; ++t) xv[t] = vld1q_f32(xs[t] + k);
    for (int r = 0; r < R; ++r) {
      const float32x4_t wv = WL::load4(w + (row0 + r) * K + k);
      for (int t = 0; t < T; ++t) acc[r][t] = vfmaq_f32(acc[r][t], wv, xv[t]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) {
      float s = vaddvq_f32(acc[r][t]);
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

void f32_f32_gemm__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                        size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<F32W>(W, r0, r1, x, x_stride, n, y, ldy);
}
void f16_f32_gemm__neon(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                        size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm<F16W>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
#endif  // LILIMS_HAVE_NEON
