// Scalar reference kernels of the K-quant weights: Q4_K and Q5_K x Q8_1,
// Q6_K x Q8_0, the oracle of their SIMD variants (formulas in
// kernels/ref/matmul_ref.h).  Weights in their GGUF layout only (the
// K-quants are never repacked), blocks copied out of the row since a
// mapping holds them at any address.
#include <cstring>
#include <type_traits>

#include "base/fp16.h"
#include "kernels/ref/matmul_ref.h"
#include "quant/dequant_ref.h"

namespace lilims::kernels {
namespace {

using quant::BlockQ4_K;
using quant::BlockQ5_K;
using quant::BlockQ6_K;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::kBlockK;

template <class Block>
Block load_block(const void* base, size_t row_bytes, int64_t row, int64_t b) {
  Block out;
  std::memcpy(&out, static_cast<const uint8_t*>(base) + (size_t)row * row_bytes + (size_t)b * sizeof(Block),
              sizeof(Block));
  return out;
}

// Q4_K (qh nullptr) or Q5_K, sub-block j (elements 32 j .. 32 j + 31):
// the integer dot of its quants with an activation block's.
int32_t dot_q4_5_k(const uint8_t* qs, const uint8_t* qh, int j, const int8_t* a) {
  int32_t s = 0;
  for (int l = 0; l < 32; ++l) {  // low (j even) or high nibbles of qs[32 (j / 2) + l]
    int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0f;
    if (qh) q |= ((qh[l] >> j) & 1) << 4;
    s += q * a[l];
  }
  return s;
}

// Q6_K, elements 32 j .. 32 j + 31: scale_2j * dot(q - 32, a) over the first
// 16 plus scale_2j+1 * that over the second.
int32_t dot_q6_k(const BlockQ6_K& w, int j, const int8_t* a) {
  int32_t sumi = 0;
  for (int half = 0; half < 2; ++half) {
    const int s = 2 * j + half;  // sub-block of 16
    int32_t t = 0;
    for (int i = 16 * s; i < 16 * s + 16; ++i) {
      // e = 128 h + 32 k + l: low bits in ql[64 h + 32 (k % 2) + l] (nibble k / 2),
      // high bits 2k..2k+1 of qh[32 h + l].
      const int h = i / 128, k = (i % 128) / 32, l = i % 32;
      const int lo = (w.ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0f;
      const int hi = (w.qh[32 * h + l] >> (2 * k)) & 3;
      t += ((lo | hi << 4) - 32) * a[i - 32 * j];
    }
    sumi += w.scales[s] * t;
  }
  return sumi;
}

template <class Block>
void gemm_k(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride, int64_t n,
            float* y, int64_t ldy) {
  using Act = std::conditional_t<std::is_same_v<Block, BlockQ6_K>, BlockQ8_0, BlockQ8_1>;
  const int64_t nb = W.cols / kBlockK;
  const size_t row_bytes = (size_t)nb * sizeof(Block);
  for (int64_t t = 0; t < n; ++t) {      // token
    for (int64_t r = r0; r < r1; ++r) {  // output row
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const Block w = load_block<Block>(W.data, row_bytes, r, b);
        const float dw = fp16_to_fp32(w.d);
        for (int j = 0; j < 8; ++j) {  // activation block 8 b + j
          const Act a = load_block<Act>(x, x_stride, t, 8 * b + j);
          const float da = fp16_to_fp32(a.d);
          if constexpr (std::is_same_v<Block, BlockQ6_K>) {
            acc += (dw * da) * (float)dot_q6_k(w, j, a.q);
          } else {
            const uint8_t* qh = nullptr;
            if constexpr (std::is_same_v<Block, BlockQ5_K>) qh = w.qh;
            int sc, m;
            quant::k_scale_min(w.scales, j, &sc, &m);
            acc += (dw * da) * (float)(sc * dot_q4_5_k(w.qs, qh, j, a.q));
            acc -= (fp16_to_fp32(w.dmin) * (float)m) * fp16_to_fp32(a.s);
          }
        }
      }
      y[t * ldy + r] = acc;
    }
  }
}

}  // namespace

void q4_k_q8_1_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_k<BlockQ4_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q5_k_q8_1_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_k<BlockQ5_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q6_k_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_k<BlockQ6_K>(W, r0, r1, x, x_stride, n, y, ldy);
}

}  // namespace lilims::kernels
