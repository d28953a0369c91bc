#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/fp16.h"

namespace lilims::quant {
namespace {

// sum_j f(j) over a block in four interleaved partial sums: the same order
// wherever block errors are compared, and four independent add chains
// instead of one (the search spends its time in these sums).
template <typename F>
inline double block_sum(F f) {
  double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  for (int j = 0; j < kBlock; j += 4) {
    s0 += f(j);
    s1 += f(j + 1);
    s2 += f(j + 2);
    s3 += f(j + 3);
  }
  return (s0 + s1) + (s2 + s3);
}

// Squared error of one block against x, measured on what the block actually
// dequantizes to (the scalar oracle), so fp16 rounding of d/m is counted;
// weighted by w[j] when w is set.
double block_sse(Type t, const void* block, const float* x, const float* w = nullptr) {
  float y[kBlock];
  traits(t).to_float(block, y, kBlock);
  return block_sum([&](int j) {
    const double diff = static_cast<double>(x[j]) - y[j];
    return (w ? w[j] : 1.0) * diff * diff;
  });
}

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
  set_block_levels(Type::Q8_0, &b, q);
}
void encode(float d, const int* q, BlockQ4_0& b) {
  b.d = fp32_to_fp16(d);
  set_block_levels(Type::Q4_0, &b, q);
}

// Symmetric formats (x ~ d * q, q in level_range(t) = [qmin, qmax]).
// Candidates map the value of largest magnitude to the level qmin - delta
// or qmax + delta, delta in [-1, 2] (beyond the end clips it, short of it
// leaves levels unused); each candidate's levels get the least-squares scale
// sum(x q) / sum(q q), then are re-rounded with it and refitted once more.
// A candidate's error is computed as the block dequantizes (fp16 scale times
// level, in float), without encoding it.  With importance weights w the
// squared errors and the fits are weighted, and the sweep runs a second time
// from the largest value among the columns that carry weight (w >= 5% of the
// block's largest), so an outlier in an unweighted column may be clipped.
template <typename Block>
void search_symmetric(const float* x, Type t, Block& best, const float* w) {
  const LevelRange range = level_range(t);
  const int qmin = range.lo, qmax = range.hi;
  double best_err = block_sse(t, &best, x, w);  // `best` holds the starting block
  float amax = 0, max = 0;
  float wmax = 0;
  for (int j = 0; j < kBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
    if (w) wmax = std::max(wmax, w[j]);
  }
  if (amax == 0 || !std::isfinite(amax)) return;
  float max_w = max;
  if (w && wmax > 0) {
    float a = 0;
    for (int j = 0; j < kBlock; ++j) {
      if (w[j] >= 0.05f * wmax && std::fabs(x[j]) > a) {
        a = std::fabs(x[j]);
        max_w = x[j];
      }
    }
  }
  int q[kBlock];
  int best_q[kBlock];
  int prev_q[kBlock];
  int q_fit[kBlock];
  bool have_prev = false;
  float best_d = 0;
  bool found = false;
  auto levels = [&](float d) {
    const float id = 1 / d;
    for (int j = 0; j < kBlock; ++j) q[j] = round_clamp(x[j] * id, qmin, qmax);
  };
  auto lsq = [&]() -> float {
    const double xq = block_sum([&](int j) { return (w ? w[j] : 1.0) * x[j] * q[j]; });
    const double qq = block_sum([&](int j) { return (w ? w[j] : 1.0) * q[j] * q[j]; });
    return qq > 0 ? static_cast<float>(xq / qq) : 0.0f;
  };
  auto consider = [&](float d) {
    const float d16 = fp16_to_fp32(fp32_to_fp16(d));
    const double e = block_sum([&](int j) {
      const double diff = static_cast<double>(x[j]) - static_cast<float>(d16 * q[j]);
      return (w ? w[j] : 1.0) * diff * diff;
    });
    if (e < best_err) {
      best_err = e;
      best_d = d;
      std::memcpy(best_q, q, sizeof q);
      found = true;
    }
  };
  // With qmin == -qmax (Q8_0) the two ends mirror each other (d -> -d,
  // q -> -q dequantize alike): one end is enough.
  const int first_end = qmin == -qmax ? 1 : 0;
  // Steps of 0.1 level for Q8_0, 0.2 for the 4-bit formats (half the work;
  // measured: the same squared error to 3 digits).  For Q8_0 the 0.2 grid
  // measurably raised SmolLM2's perplexity (+0.57% vs +0.25% over
  // tests/data/ppl_text.txt), so it keeps the finer one.
  const int steps = qmax - qmin > 16 ? 10 : 5;
  const float step = 1.0f / (float)steps;
  auto sweep = [&](float top) {
    for (int end = first_end; end < 2; ++end) {
      for (int k = -steps; k <= 2 * steps; ++k) {
        const float c = (end == 0 ? qmin : qmax) + (end == 0 ? -step : step) * (float)k;
        if (std::fabs(c) < 0.5f) continue;
        levels(top / c);
        // The result depends on the levels alone: a candidate whose levels
        // equal the previous candidate's adds nothing, nor does a re-rounding
        // that leaves them as they were.
        if (have_prev && std::memcmp(q, prev_q, sizeof q) == 0) continue;
        std::memcpy(prev_q, q, sizeof q);
        have_prev = true;
        for (int it = 0; it < 2; ++it) {
          const float d = lsq();
          if (d == 0) break;
          consider(d);
          if (it == 1) break;
          const float d16 = fp16_to_fp32(fp32_to_fp16(d));  // re-round with the stored scale
          std::memcpy(q_fit, q, sizeof q);
          levels(d16 != 0 ? d16 : d);
          if (std::memcmp(q, q_fit, sizeof q) == 0) break;
        }
      }
    }
  };
  sweep(max);
  if (max_w != max && max_w != 0) sweep(max_w);
  if (found) encode(best_d, best_q, best);
}

// Q4_1 (x ~ d * q + m, q in level_range(Q4_1) = [0, 15]): candidate ranges
// [lo, hi] trimmed by up to 10% at either end; each is refined by
// alternating re-rounding and a joint least-squares fit of (d, m) for the
// levels (weighted by w when set, and then also from the range of the
// weighted columns alone).
void search_q4_1(const float* x, BlockQ4_1& best, const float* w) {
  double best_err = block_sse(Type::Q4_1, &best, x, w);
  float min = x[0], max = x[0];
  for (int j = 1; j < kBlock; ++j) {
    min = std::min(min, x[j]);
    max = std::max(max, x[j]);
  }
  const float range = max - min;
  if (range == 0 || !std::isfinite(range)) return;
  const LevelRange q_range = level_range(Type::Q4_1);
  const float steps = static_cast<float>(q_range.hi - q_range.lo);
  int q[kBlock];
  auto levels = [&](float d, float m) {
    const float id = 1 / d;
    for (int j = 0; j < kBlock; ++j) q[j] = round_clamp((x[j] - m) * id, q_range.lo, q_range.hi);
  };
  auto consider = [&](float d, float m) {
    const float d16 = fp16_to_fp32(fp32_to_fp16(d));
    const float m16 = fp16_to_fp32(fp32_to_fp16(m));
    const double e = block_sum([&](int j) {
      const double diff = static_cast<double>(x[j]) - static_cast<float>(d16 * q[j] + m16);
      return (w ? w[j] : 1.0) * diff * diff;
    });
    if (e < best_err) {
      best_err = e;
      best.d = fp32_to_fp16(d);
      best.m = fp32_to_fp16(m);
      set_block_levels(Type::Q4_1, &best, q);
    }
  };
  auto sweep = [&](float mn, float mx) {
    const float r = mx - mn;
    for (int a = 0; a <= 4; ++a) {
      for (int c = 0; c <= 4; ++c) {
        const float lo = mn + 0.025f * a * r, hi = mx - 0.025f * c * r;
        float d = (hi - lo) / steps, m = lo;
        for (int it = 0; it < 3 && d > 0; ++it) {
          levels(d, m);
          auto wt = [&](int j) { return w ? static_cast<double>(w[j]) : 1.0; };
          const double s_w = block_sum([&](int j) { return wt(j); });
          const double s_qq = block_sum([&](int j) { return wt(j) * q[j] * q[j]; });
          const double s_q = block_sum([&](int j) { return wt(j) * q[j]; });
          const double s_xq = block_sum([&](int j) { return wt(j) * x[j] * q[j]; });
          const double s_x = block_sum([&](int j) { return wt(j) * x[j]; });
          const double det = s_qq * s_w - s_q * s_q;
          if (det <= 0) break;  // all levels equal: nothing to fit
          d = static_cast<float>((s_w * s_xq - s_q * s_x) / det);
          m = static_cast<float>((s_qq * s_x - s_q * s_xq) / det);
          consider(d, m);
        }
      }
    }
  };
  sweep(min, max);
  // With weights, the range of the columns that carry weight (w >= 5% of
  // the block's largest) too, so an outlier elsewhere may be clipped.
  if (w) {
    float wmax = 0;
    for (int j = 0; j < kBlock; ++j) wmax = std::max(wmax, w[j]);
    float mn = 0, mx = 0;
    bool any = false;
    for (int j = 0; j < kBlock; ++j) {
      if (wmax > 0 && w[j] >= 0.05f * wmax) {
        mn = any ? std::min(mn, x[j]) : x[j];
        mx = any ? std::max(mx, x[j]) : x[j];
        any = true;
      }
    }
    if (any && mx > mn && (mn != min || mx != max)) sweep(mn, mx);
  }
}


// One block by the search, from the plain block (with importance weights w
// the search's errors and fits are weighted), so its (weighted) error is
// never above plain's.
template <typename Block, typename Plain, typename Search>
void searched_block(const float* x, const float* w, Block& out, Plain plain, Search search) {
  plain(x, out);
  search(x, out, w);
}

void plain_q8_0(const float* x, BlockQ8_0& b);

void search_q8_0(const float* x, BlockQ8_0& b, const float* w) { search_symmetric(x, Type::Q8_0, b, w); }
void search_q4_0(const float* x, BlockQ4_0& b, const float* w) { search_symmetric(x, Type::Q4_0, b, w); }

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

namespace {
void plain_q8_0(const float* x, BlockQ8_0& b) { b.d = fp32_to_fp16(quantize_block_q8(x, b.q)); }
}  // namespace

void quantize_row_q8_0(const float* x, BlockQ8_0* y, int64_t n, QuantMethod method) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    if (method == QuantMethod::search) {
      searched_block(x + i * kBlock, nullptr, y[i], plain_q8_0, search_q8_0);
    } else {
      plain_q8_0(x + i * kBlock, y[i]);
    }
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

LevelRange level_range(Type type) {
  const BlockLevels& l = traits(type).levels;
  return l.set ? LevelRange{l.lo, l.hi} : LevelRange{};
}

void set_block_levels(Type type, void* block, const int* q) {
  if (const auto set = traits(type).levels.set) set(block, q);
}

void q4_0_search_weights(const float* x, float* w, int64_t n) {
  double sum_x2 = 0;
  for (int64_t j = 0; j < n; ++j) sum_x2 += static_cast<double>(x[j]) * x[j];
  const float sigma2 = n > 0 ? static_cast<float>(sum_x2 / static_cast<double>(n)) : 0.0f;
  for (int64_t j = 0; j < n; ++j) w[j] = std::sqrt(sigma2 + x[j] * x[j]);
}

void quantize_row_q4_0(const float* x, BlockQ4_0* y, int64_t n, QuantMethod method) {
  if (method != QuantMethod::search) {
    for (int64_t i = 0; i < n / kBlock; ++i) plain_q4_0(x + i * kBlock, y[i]);
    return;
  }
  std::vector<float> w(static_cast<size_t>(n));
  q4_0_search_weights(x, w.data(), n);
  for (int64_t i = 0; i < n / kBlock; ++i) {
    searched_block(x + i * kBlock, w.data() + i * kBlock, y[i], plain_q4_0, search_q4_0);
  }
}

void quantize_row_q4_1(const float* x, BlockQ4_1* y, int64_t n, QuantMethod method) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    if (method == QuantMethod::search) {
      searched_block(x + i * kBlock, nullptr, y[i], plain_q4_1, search_q4_1);
    } else {
      plain_q4_1(x + i * kBlock, y[i]);
    }
  }
}

void quantize_row_q5_0(const float* x, BlockQ5_0* y, int64_t n) {
  for (int64_t i = 0; i < n / kBlock; ++i, x += kBlock) {
    float amax = 0, max = 0;  // max: the value of largest magnitude, with its sign
    for (int j = 0; j < kBlock; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -16;
    const float id = d != 0 ? 1 / d : 0;
    y[i].d = fp32_to_fp16(d);
    uint32_t qh = 0;
    for (int j = 0; j < kBlock / 2; ++j) {
      // x * id lies in [-16, 16]: + 16.5 is in [0.5, 32.5], the int8 cast truncates.
      const int lo = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
      const int hi = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + kBlock / 2] * id + 16.5f)));
      y[i].qs[j] = static_cast<uint8_t>((lo & 0x0f) | (hi & 0x0f) << 4);
      qh |= static_cast<uint32_t>(lo >> 4) << j | static_cast<uint32_t>(hi >> 4) << (j + 16);
    }
    for (int k = 0; k < 4; ++k) y[i].qh[k] = static_cast<uint8_t>(qh >> (8 * k));
  }
}

void quantize_row_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_row_q8_0_weighted(const float* x, BlockQ8_0* y, int64_t n, const float* importance) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    searched_block(x + i * kBlock, importance + i * kBlock, y[i], plain_q8_0, search_q8_0);
  }
}

void quantize_row_q4_0_weighted(const float* x, BlockQ4_0* y, int64_t n, const float* importance) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    searched_block(x + i * kBlock, importance + i * kBlock, y[i], plain_q4_0, search_q4_0);
  }
}

void quantize_row_q4_1_weighted(const float* x, BlockQ4_1* y, int64_t n, const float* importance) {
  for (int64_t i = 0; i < n / kBlock; ++i) {
    searched_block(x + i * kBlock, importance + i * kBlock, y[i], plain_q4_1, search_q4_1);
  }
}

bool quantize_row_weighted(Type type, const float* src, void* dst, int64_t n, const float* importance) {
  const TypeTraits& t = traits(type);
  if (t.type != type || !(t.quantizers & kQuantImatrix)) {
    return quantize_row(type, src, dst, n, QuantMethod::search);
  }
  t.from_float_weighted(src, dst, n, importance);
  return true;
}

bool quantize_row(Type type, const float* src, void* dst, int64_t n, QuantMethod method) {
  const TypeTraits& t = traits(type);
  if (t.type != type || !(t.quantizers & kQuantPlain)) return false;
  t.from_float(src, dst, n, method);
  return true;
}

}  // namespace lilims::quant
