#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/fp16.h"

namespace lilims::quant {
namespace {

// Squared error of one block against x, measured on what the block actually
// dequantizes to (the scalar oracle), so fp16 rounding of d/m is counted.
double block_sse(Type t, const void* block, const float* x) {
  float y[kBlock];
  traits(t).to_float(block, y, kBlock);
  double e = 0;
  for (int j = 0; j < kBlock; ++j) {
    const double diff = static_cast<double>(x[j]) - y[j];
    e += diff * diff;
  }
  return e;
}

int clampi(long v, int lo, int hi) { return static_cast<int>(std::min<long>(hi, std::max<long>(lo, v))); }

// --- plain: GGML's reference rounding -------------------------------------

void plain_q4_0(const float* x, BlockQ4_0& b) {
  float amax = 0, max = 0;  // max: the value of largest magnitude, with its sign
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8;
  const float id = d != 0 ? 1 / d : 0;
  b.d = fp32_to_fp16(d);
  for (int j = 0; j < kBlock / 2; ++j) {
    const uint8_t lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f))));
    const uint8_t hi = static_cast<uint8_t>(
        std::min(15, static_cast<int>(static_cast<int8_t>(x[j + kBlock / 2] * id + 8.5f))));
    b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

void plain_q4_1(const float* x, BlockQ4_1& b) {
  float min = x[0], max = x[0];
  for (int j = 1; j < kBlock; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float d = (max - min) / 15;
  const float id = d != 0 ? 1 / d : 0;
  b.d = fp32_to_fp16(d);
  b.m = fp32_to_fp16(min);
  for (int j = 0; j < kBlock / 2; ++j) {
    const uint8_t lo = static_cast<uint8_t>(
        std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f))));
    const uint8_t hi = static_cast<uint8_t>(
        std::min(15, static_cast<int>(static_cast<int8_t>((x[j + kBlock / 2] - min) * id + 0.5f))));
    b.qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// --- search ------------------------------------------------------------------

void encode(float d, const int* q, BlockQ8_0& b) {
  b.d = fp32_to_fp16(d);
  for (int j = 0; j < kBlock; ++j) b.q[j] = static_cast<int8_t>(q[j]);
}
void encode(float d, const int* q, BlockQ4_0& b) {  // q in [-8, 7]
  b.d = fp32_to_fp16(d);
  for (int j = 0; j < kBlock / 2; ++j) {
    b.qs[j] = static_cast<uint8_t>((q[j] + 8) | ((q[j + kBlock / 2] + 8) << 4));
  }
}

// Symmetric formats (x ~ d * q, q in [qmin, qmax]).  Candidates map the
// value of largest magnitude to the level qmin - delta or qmax + delta,
// delta in [-1, 2] by 0.1 (beyond the end clips it, short of it leaves
// levels unused); each candidate's levels get the least-squares scale
// sum(x q) / sum(q q), then are re-rounded with it and refitted once more.
template <typename Block>
void search_symmetric(const float* x, int qmin, int qmax, Type t, Block& best) {
  double best_err = block_sse(t, &best, x);  // `best` holds the plain block
  float amax = 0, max = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  if (amax == 0 || !std::isfinite(amax)) return;
  int q[kBlock];
  auto levels = [&](float d) {
    const float id = 1 / d;
    for (int j = 0; j < kBlock; ++j) q[j] = clampi(std::lround(x[j] * id), qmin, qmax);
  };
  auto lsq = [&]() -> float {
    double xq = 0, qq = 0;
    for (int j = 0; j < kBlock; ++j) {
      xq += static_cast<double>(x[j]) * q[j];
      qq += static_cast<double>(q[j]) * q[j];
    }
    return qq > 0 ? static_cast<float>(xq / qq) : 0.0f;
  };
  auto consider = [&](float d) {
    Block b;
    encode(d, q, b);
    const double e = block_sse(t, &b, x);
    if (e < best_err) {
      best_err = e;
      best = b;
    }
  };
  for (int end = 0; end < 2; ++end) {
    for (int k = -10; k <= 20; ++k) {
      const float c = (end == 0 ? qmin : qmax) + (end == 0 ? -0.1f : 0.1f) * k;
      if (std::fabs(c) < 0.5f) continue;
      levels(max / c);
      for (int it = 0; it < 2; ++it) {
        const float d = lsq();
        if (d == 0) break;
        consider(d);
        const float d16 = fp16_to_fp32(fp32_to_fp16(d));  // re-round with the stored scale
        levels(d16 != 0 ? d16 : d);
      }
    }
  }
}

// Q4_1 (x ~ d * q + m, q in [0, 15]): candidate ranges [lo, hi] trimmed by
// up to 10% at either end; each is refined by alternating re-rounding and a
// joint least-squares fit of (d, m) for the levels.
void search_q4_1(const float* x, BlockQ4_1& best) {
  double best_err = block_sse(Type::Q4_1, &best, x);
  float min = x[0], max = x[0];
  for (int j = 1; j < kBlock; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float range = max - min;
  if (range == 0 || !std::isfinite(range)) return;
  int q[kBlock];
  auto levels = [&](float d, float m) {
    const float id = 1 / d;
    for (int j = 0; j < kBlock; ++j) q[j] = clampi(std::lround((x[j] - m) * id), 0, 15);
  };
  auto consider = [&](float d, float m) {
    BlockQ4_1 b;
    b.d = fp32_to_fp16(d);
    b.m = fp32_to_fp16(m);
    for (int j = 0; j < kBlock / 2; ++j) {
      b.qs[j] = static_cast<uint8_t>(q[j] | (q[j + kBlock / 2] << 4));
    }
    const double e = block_sse(Type::Q4_1, &b, x);
    if (e < best_err) {
      best_err = e;
      best = b;
    }
  };
  for (int a = 0; a <= 4; ++a) {
    for (int c = 0; c <= 4; ++c) {
      const float lo = min + 0.025f * a * range, hi = max - 0.025f * c * range;
      float d = (hi - lo) / 15, m = lo;
      for (int it = 0; it < 3 && d > 0; ++it) {
        levels(d, m);
        double s_qq = 0, s_q = 0, s_xq = 0, s_x = 0;
        for (int j = 0; j < kBlock; ++j) {
          s_qq += static_cast<double>(q[j]) * q[j];
          s_q += q[j];
          s_xq += static_cast<double>(x[j]) * q[j];
          s_x += x[j];
        }
        const double det = s_qq * kBlock - s_q * s_q;
        if (det <= 0) break;  // all levels equal: nothing to fit
        d = static_cast<float>((kBlock * s_xq - s_q * s_x) / det);
        m = static_cast<float>((s_qq * s_x - s_q * s_xq) / det);
        consider(d, m);
      }
    }
  }
}

}  // namespace

float quantize_block_q8(const float* x, int8_t* q, int* sum) {
  float amax = 0.0f;
  for (int j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int s = 0;
  for (int j = 0; j < kBlock; ++j) {
    q[j] = static_cast<int8_t>(std::roundf(x[j] * id));
    s += q[j];
  }
  if (sum) *sum = s;
  return d;
}

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n, QuantMethod method) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    y[i].d = fp32_to_fp16(quantize_block_q8(x + i * kBlock, y[i].q));
    if (method == QuantMethod::search) search_symmetric(x + i * kBlock, -127, 127, Type::Q8_0, y[i]);
  }
}

void quantize_row_q8_1(const float* x, BlockQ8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    int sum = 0;
    const float d = quantize_block_q8(x + i * kBlock, y[i].q, &sum);
    y[i].d = fp32_to_fp16(d);
    y[i].s = fp32_to_fp16(d * static_cast<float>(sum));
  }
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, QuantMethod method) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    plain_q4_0(x + i * kBlock, y[i]);
    if (method == QuantMethod::search) search_symmetric(x + i * kBlock, -8, 7, Type::Q4_0, y[i]);
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, QuantMethod method) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    plain_q4_1(x + i * kBlock, y[i]);
    if (method == QuantMethod::search) search_q4_1(x + i * kBlock, y[i]);
  }
}

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

bool quantize_row(Type type, const float* src, void* dst, int64_t n, QuantMethod method) {
  const TypeTraits& t = traits(type);
  if (t.type != type || !t.weight) return false;
  t.from_float(src, dst, n, method);
  return true;
}

}  // namespace lilims::quant
