// Random matrices in GGUF block formats and error bounds for the matmul tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "quant/quant.h"

namespace lilims::test {

constexpr double kU = 1.0 / (1 << 24);  // unit roundoff of fp32 (2^-24)

// Base seed: LILIMS_TEST_SEED or a fixed default; every case mixes in its shape.
inline uint64_t base_seed() {
  const char* s = std::getenv("LILIMS_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20240611ull;
}

// A weight block or activation block decoded to integers and scales.
struct Decoded {
  float d = 0, m = 0;  // scale, and min (Q4_1) or fp16 sum field s (Q8_1)
  int q[32];
};

inline Decoded decode_block(quant::Type t, const uint8_t* p) {
  Decoded o;
  uint16_t h[2];
  std::memcpy(h, p, 4);
  o.d = fp16_to_fp32(h[0]);
  switch (t) {
    case quant::Type::Q8_0:
      for (int i = 0; i < 32; ++i) o.q[i] = (int8_t)p[2 + i];
      break;
    case quant::Type::Q8_1:
      o.m = fp16_to_fp32(h[1]);
      for (int i = 0; i < 32; ++i) o.q[i] = (int8_t)p[4 + i];
      break;
    case quant::Type::Q4_0:
      for (int i = 0; i < 16; ++i) {
        o.q[i] = (p[2 + i] & 15) - 8;
        o.q[i + 16] = (p[2 + i] >> 4) - 8;
      }
      break;
    case quant::Type::Q5_0: {
      const uint32_t qh = (uint32_t)p[2] | (uint32_t)p[3] << 8 | (uint32_t)p[4] << 16 |
                          (uint32_t)p[5] << 24;
      for (int i = 0; i < 16; ++i) {
        o.q[i] = ((p[6 + i] & 15) | (int)((qh >> i) & 1) << 4) - 16;
        o.q[i + 16] = ((p[6 + i] >> 4) | (int)((qh >> (i + 16)) & 1) << 4) - 16;
      }
      break;
    }
    case quant::Type::Q4_1:
      o.m = fp16_to_fp32(h[1]);
      for (int i = 0; i < 16; ++i) {
        o.q[i] = p[4 + i] & 15;
        o.q[i + 16] = p[4 + i] >> 4;
      }
      break;
    default: break;
  }
  return o;
}

inline size_t block_bytes(quant::Type t) {
  switch (t) {
    case quant::Type::Q8_0: return 34;
    case quant::Type::Q8_1: return 36;
    case quant::Type::Q4_0: return 18;
    case quant::Type::Q4_1: return 20;
    case quant::Type::Q5_0: return 22;
    case quant::Type::Q4_K: return 144;
    case quant::Type::Q5_K: return 176;
    case quant::Type::Q6_K: return 210;
    default: return 0;
  }
}

inline bool is_k_quant(quant::Type t) {
  return t == quant::Type::Q4_K || t == quant::Type::Q5_K || t == quant::Type::Q6_K;
}
inline int64_t block_elems(quant::Type t) { return is_k_quant(t) ? 256 : 32; }

// Element e of a K-quant super-block as (scale part, min part): the
// weight is scale_part - min_part, scale_part = d * scale * q.  Decoded here
// from the formats' descriptions (quant/quant.h), not by the kernels' code.
inline void k_element(quant::Type t, const uint8_t* b, int e, double* sp, double* mp) {
  uint16_t h[2];
  if (t == quant::Type::Q6_K) {
    std::memcpy(h, b + 208, 2);
    const int hh = e / 128, k = (e % 128) / 32, l = e % 32;
    const int lo = (b[64 * hh + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15;
    const int hi = (b[128 + 32 * hh + l] >> (2 * k)) & 3;
    *sp = (double)fp16_to_fp32(h[0]) * (int8_t)b[192 + e / 16] * ((lo | hi << 4) - 32);
    *mp = 0;
    return;
  }
  std::memcpy(h, b, 4);
  const uint8_t* sc = b + 4;
  const int j = e / 32, l = e % 32;
  int scale, min;
  if (j < 4) {
    scale = sc[j] & 63;
    min = sc[j + 4] & 63;
  } else {
    scale = (sc[j + 4] & 15) | (sc[j - 4] >> 6) << 4;
    min = (sc[j + 4] >> 4) | (sc[j] >> 6) << 4;
  }
  const uint8_t* qs = b + (t == quant::Type::Q5_K ? 48 : 16);
  int q = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 15;
  if (t == quant::Type::Q5_K) q |= ((b[16 + l] >> j) & 1) << 4;
  *sp = (double)fp16_to_fp32(h[0]) * scale * q;
  *mp = (double)fp16_to_fp32(h[1]) * min;
}



// Options of random data.  integer_scales: every d (and Q4_1 m) is 1.0 and
// Q8_1 s a small integer, so every result is an integer the kernels must
// reproduce exactly.  act_range: |activation quant| <= act_range.
struct RandOpts {
  bool integer_scales = false;
  int act_range = 127;
};

// rows x cols weights of type t, GGUF row-major bytes.
inline std::vector<uint8_t> random_weights(quant::Type t, int64_t rows, int64_t cols,
                                           std::mt19937_64& rng, const RandOpts& o) {
  std::uniform_real_distribution<float> uf(-1.0f, 1.0f), scale(0.002f, 0.05f);
  std::uniform_int_distribution<int> byte(0, 255);
  if (t == quant::Type::F32) {
    std::vector<uint8_t> out(rows * cols * 4);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float f = uf(rng);
      std::memcpy(&out[4 * i], &f, 4);
    }
    return out;
  }
  if (t == quant::Type::F16) {
    std::vector<uint8_t> out(rows * cols * 2);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const uint16_t h = fp32_to_fp16(uf(rng));
      std::memcpy(&out[2 * i], &h, 2);
    }
    return out;
  }
  const size_t bb = block_bytes(t);
  const int64_t nb = rows * cols / block_elems(t);
  std::vector<uint8_t> out(nb * bb);
  if (is_k_quant(t)) {
    // Random bytes (every 6-bit scale and min, every quant), then the fp16
    // super-block scales: d (and dmin) 1.0 for integer data.
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* p = &out[b * bb];
      for (size_t i = 0; i < bb; ++i) p[i] = (uint8_t)byte(rng);
      const uint16_t d = o.integer_scales ? 0x3c00 : fp32_to_fp16(0.02f * scale(rng));
      const uint16_t dmin = o.integer_scales ? 0x3c00 : fp32_to_fp16(0.01f * scale(rng));
      if (t == quant::Type::Q6_K) {
        std::memcpy(p + 208, &d, 2);
      } else {
        std::memcpy(p, &d, 2);
        std::memcpy(p + 2, &dmin, 2);
      }
    }
    return out;
  }
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = &out[b * bb];
    for (size_t i = 0; i < bb; ++i) p[i] = (uint8_t)byte(rng);
    const uint16_t d = o.integer_scales ? 0x3c00 : fp32_to_fp16(scale(rng));
    std::memcpy(p, &d, 2);
    if (t == quant::Type::Q4_1) {
      const uint16_t m = o.integer_scales ? 0x3c00 : fp32_to_fp16(0.1f * uf(rng));
      std::memcpy(p + 2, &m, 2);
    }
  }
  // A saturation probe: the first block all -128 (Q8_0) / nibble 0.
  if (nb > 0 && t == quant::Type::Q8_0) std::memset(&out[2], 0x80, 32);
  return out;
}

// n activation rows of k elements in format t (Q8_0/Q8_1 blocks or F32).
inline std::vector<uint8_t> random_acts(quant::Type t, int64_t n, int64_t k,
                                        std::mt19937_64& rng, const RandOpts& o) {
  std::uniform_real_distribution<float> uf(-1.0f, 1.0f), scale(0.002f, 0.05f);
  std::uniform_int_distribution<int> qd(-o.act_range, o.act_range), small(-8, 8);
  if (t == quant::Type::F32) {
    std::vector<uint8_t> out(n * k * 4);
    for (int64_t i = 0; i < n * k; ++i) {
      const float f = uf(rng);
      std::memcpy(&out[4 * i], &f, 4);
    }
    return out;
  }
  const size_t bb = block_bytes(t), off = t == quant::Type::Q8_1 ? 4 : 2;
  const int64_t nb = n * k / 32;
  std::vector<uint8_t> out(nb * bb);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = &out[b * bb];
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = qd(rng);
      p[off + i] = (uint8_t)(int8_t)q;
      sum += q;
    }
    // Saturation probe: the first block all +127 against the -128 weights.
    if (b == 0 && o.act_range == 127) {
      for (int i = 0; i < 32; ++i) p[off + i] = 127;
      sum = 127 * 32;
    }
    const float d = o.integer_scales ? 1.0f : scale(rng);
    const uint16_t hd = fp32_to_fp16(d);
    std::memcpy(p, &hd, 2);
    if (t == quant::Type::Q8_1) {
      const uint16_t hs = o.integer_scales ? fp32_to_fp16((float)small(rng))
                                           : fp32_to_fp16(fp16_to_fp32(hd) * (float)sum);
      std::memcpy(p + 2, &hs, 2);
    }
  }
  return out;
}

// sum over the reduction of |term| for output (row r, token j), the quantity
// that multiplies the unit roundoff in the error bound of a dot product.
// Quantized: terms are dw*da*w_k*a_k (bounding |dw da sumi_b| by the triangle
// inequality) and |mw sa|; float: |w_k x_k|.
inline double abs_terms(quant::Type wt, const uint8_t* wrow, const uint8_t* arow, int64_t K) {
  double s = 0;
  if (wt == quant::Type::F32 || wt == quant::Type::F16) {
    for (int64_t k = 0; k < K; ++k) {
      float w, x;
      std::memcpy(&x, arow + 4 * k, 4);
      if (wt == quant::Type::F32) {
        std::memcpy(&w, wrow + 4 * k, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, wrow + 2 * k, 2);
        w = fp16_to_fp32(h);
      }
      s += std::fabs((double)w * x);
    }
    return s;
  }
  const quant::Type at = kernels::act_type(wt);
  if (is_k_quant(wt)) {
    // Per activation block j of 32: |dw scale q| * |da qa| summed, and the
    // min term |dminw min_j| * |sa_j| (Q8_1's s).
    for (int64_t b = 0; b < K / 32; ++b) {
      const uint8_t* wb = wrow + (b / 8) * block_bytes(wt);
      const Decoded a = decode_block(at, arow + b * block_bytes(at));
      double mp = 0;
      for (int i = 0; i < 32; ++i) {
        double sp;
        k_element(wt, wb, (int)(b % 8) * 32 + i, &sp, &mp);
        s += std::fabs(sp * a.q[i] * a.d);
      }
      s += std::fabs(mp * a.m);
    }
    return s;
  }
  for (int64_t b = 0; b < K / 32; ++b) {
    const Decoded w = decode_block(wt, wrow + b * block_bytes(wt));
    const Decoded a = decode_block(at, arow + b * block_bytes(at));
    double t = 0;
    for (int i = 0; i < 32; ++i) t += std::abs(w.q[i] * a.q[i]);
    s += std::fabs((double)w.d * a.d) * t + std::fabs((double)w.m * a.m);
  }
  return s;
}

// The exact result of output (row r, token j) in double precision, from the
// blocks decoded here (not by the kernels' code): sum over blocks of
// dw * da * sum(qw * qa) (+ mw * sa for Q4_1), or sum of w_k * x_k.  Every
// product and partial sum is exact in double for the tests' data (fp16
// scales, |sumi| < 2^20, at most 2^13 blocks), so this is the true value.
inline double dot_double(quant::Type wt, const uint8_t* wrow, const uint8_t* arow, int64_t K) {
  double s = 0;
  if (wt == quant::Type::F32 || wt == quant::Type::F16) {
    for (int64_t k = 0; k < K; ++k) {
      float w, x;
      std::memcpy(&x, arow + 4 * k, 4);
      if (wt == quant::Type::F32) {
        std::memcpy(&w, wrow + 4 * k, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, wrow + 2 * k, 2);
        w = fp16_to_fp32(h);
      }
      s += (double)w * x;
    }
    return s;
  }
  const quant::Type at = kernels::act_type(wt);
  if (is_k_quant(wt)) {
    // Per activation block j: dw * da * sum(scale * q * qa) - dminw * min_j * sa_j,
    // each an exact integer times fp16 products: exact in double.
    for (int64_t b = 0; b < K / 32; ++b) {
      const uint8_t* wb = wrow + (b / 8) * block_bytes(wt);
      const Decoded a = decode_block(at, arow + b * block_bytes(at));
      double sb = 0, mp = 0;
      for (int i = 0; i < 32; ++i) {
        double sp;
        k_element(wt, wb, (int)(b % 8) * 32 + i, &sp, &mp);
        sb += sp * a.q[i];
      }
      s += sb * a.d - mp * a.m;
    }
    return s;
  }
  for (int64_t b = 0; b < K / 32; ++b) {
    const Decoded w = decode_block(wt, wrow + b * block_bytes(wt));
    const Decoded a = decode_block(at, arow + b * block_bytes(at));
    int64_t sumi = 0;
    for (int i = 0; i < 32; ++i) sumi += (int64_t)w.q[i] * a.q[i];
    s += (double)w.d * a.d * (double)sumi + (double)w.m * a.m;
  }
  return s;
}

}  // namespace lilims::test
