#include "kernels/ref/matmul_ref.h"

#include <cstring>
#include <vector>

#include "base/fp16.h"
#include "quant/repack.h"

namespace lilims::kernels {
namespace {

using quant::BlockQ4_0;
using quant::BlockQ4_1;
using quant::BlockQ5_0;
using quant::BlockQ8_0;
using quant::BlockQ8_1;
using quant::kBlock;

// Block b of row r of W, whatever its layout (copied: GGUF blocks may sit
// at odd addresses inside a mapping).
template <class Block>
Block weight_block(const PackedWeight& W, int64_t r, int64_t b) {
  Block out;
  if (W.layout != kLayoutGguf) {
    quant::block_from_packed(W.type, W.layout, W.data, W.cols, r, b, &out);
  } else {
    const uint8_t* row = static_cast<const uint8_t*>(W.data) + (size_t)r * (W.cols / kBlock) * sizeof(Block);
    std::memcpy(&out, row + (size_t)b * sizeof(Block), sizeof(Block));
  }
  return out;
}

template <class Block>
Block act_block(const void* x, size_t x_stride, int64_t j, int64_t b) {
  Block out;
  std::memcpy(&out, static_cast<const uint8_t*>(x) + (size_t)j * x_stride + (size_t)b * sizeof(Block),
              sizeof(Block));
  return out;
}

int32_t dot_q8_0(const BlockQ8_0& w, const BlockQ8_0& a) {
  int32_t s = 0;
  for (int i = 0; i < kBlock; ++i) s += (int32_t)w.q[i] * a.q[i];
  return s;
}

int32_t dot_q4_0(const BlockQ4_0& w, const BlockQ8_0& a) {
  int32_t s = 0;
  for (int i = 0; i < kBlock / 2; ++i) {
    s += ((w.qs[i] & 0x0f) - 8) * a.q[i];
    s += ((w.qs[i] >> 4) - 8) * a.q[i + kBlock / 2];
  }
  return s;
}

int32_t dot_q5_0(const BlockQ5_0& w, const BlockQ8_0& a) {
  const uint32_t qh = (uint32_t)w.qh[0] | (uint32_t)w.qh[1] << 8 | (uint32_t)w.qh[2] << 16 |
                      (uint32_t)w.qh[3] << 24;
  int32_t s = 0;
  for (int i = 0; i < kBlock / 2; ++i) {
    const int lo = (w.qs[i] & 0x0f) | (int)((qh >> i) & 1) << 4;
    const int hi = (w.qs[i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4;
    s += (lo - 16) * a.q[i];
    s += (hi - 16) * a.q[i + kBlock / 2];
  }
  return s;
}

int32_t dot_q4_1(const BlockQ4_1& w, const BlockQ8_1& a) {
  int32_t s = 0;
  for (int i = 0; i < kBlock / 2; ++i) {
    s += (w.qs[i] & 0x0f) * a.q[i];
    s += (w.qs[i] >> 4) * a.q[i + kBlock / 2];
  }
  return s;
}

}  // namespace

namespace {

// The weight types multiplied with Q8_0 activations: acc += d_w * d_a * dot.
template <typename WBlock, int32_t (*Dot)(const WBlock&, const BlockQ8_0&)>
void gemm_with_q8_0_acts(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  const int64_t nb = W.cols / kBlock;
  for (int64_t j = 0; j < n; ++j) {        // token
    for (int64_t r = r0; r < r1; ++r) {    // output row
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const WBlock w = weight_block<WBlock>(W, r, b);
        const BlockQ8_0 a = act_block<BlockQ8_0>(x, x_stride, j, b);
        acc += (fp16_to_fp32(w.d) * fp16_to_fp32(a.d)) * (float)Dot(w, a);
      }
      y[j * ldy + r] = acc;
    }
  }
}

}  // namespace

void q8_0_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_with_q8_0_acts<BlockQ8_0, dot_q8_0>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q4_0_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_with_q8_0_acts<BlockQ4_0, dot_q4_0>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q5_0_q8_0_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  gemm_with_q8_0_acts<BlockQ5_0, dot_q5_0>(W, r0, r1, x, x_stride, n, y, ldy);
}

void q4_1_q8_1_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                         size_t x_stride, int64_t n, float* y, int64_t ldy) {
  const int64_t nb = W.cols / kBlock;
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = r0; r < r1; ++r) {
      float acc = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        const BlockQ4_1 w = weight_block<BlockQ4_1>(W, r, b);
        const BlockQ8_1 a = act_block<BlockQ8_1>(x, x_stride, j, b);
        acc += (fp16_to_fp32(w.d) * fp16_to_fp32(a.d)) * (float)dot_q4_1(w, a) +
               fp16_to_fp32(w.m) * fp16_to_fp32(a.s);
      }
      y[j * ldy + r] = acc;
    }
  }
}

void f16_f32_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                       size_t x_stride, int64_t n, float* y, int64_t ldy) {
  const int64_t K = W.cols;
  for (int64_t j = 0; j < n; ++j) {
    const float* xj = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + j * x_stride);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = static_cast<const uint8_t*>(W.data) + (size_t)r * K * 2;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        uint16_t h;
        std::memcpy(&h, wr + 2 * k, 2);
        acc += fp16_to_fp32(h) * xj[k];
      }
      y[j * ldy + r] = acc;
    }
  }
}

void f32_f32_gemm__ref(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                       size_t x_stride, int64_t n, float* y, int64_t ldy) {
  const int64_t K = W.cols;
  for (int64_t j = 0; j < n; ++j) {
    const float* xj = reinterpret_cast<const float*>(static_cast<const uint8_t*>(x) + j * x_stride);
    for (int64_t r = r0; r < r1; ++r) {
      const uint8_t* wr = static_cast<const uint8_t*>(W.data) + (size_t)r * K * 4;
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) {
        float w;
        std::memcpy(&w, wr + 4 * k, 4);
        acc += w * xj[k];
      }
      y[j * ldy + r] = acc;
    }
  }
}

void matmul_dequant_f32__ref(const PackedWeight& W, int64_t r0, int64_t r1, const float* x,
                             int64_t ldx, int64_t n, float* y, int64_t ldy) {
  const int64_t K = W.cols;
  std::vector<float> row(K);  // (K) the dequantized weight row
  for (int64_t r = r0; r < r1; ++r) {
    quant::row_to_float(W.type, W.layout, W.data, K, r, row.data());
    for (int64_t j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k) acc += row[k] * x[j * ldx + k];
      y[j * ldy + r] = acc;
    }
  }
}

}  // namespace lilims::kernels
