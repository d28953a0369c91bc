// Weight quantizers: round trips through the scalar dequantizers
// (quant::type_traits()->to_float), error bounds derived per format, and the
// error-minimising method never worse than plain round-to-nearest.
#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/fp16.h"
#include "test_util.h"

namespace lilims::quant {
namespace {

constexpr uint32_t kSeed = 20240611;
constexpr double kHalfUlp16 = 1.0 / 2048;  // fp16 relative rounding error, 2^-11

std::vector<uint8_t> quantize(Type t, const std::vector<float>& x, QuantMethod m) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  EXPECT_TRUE(quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()), m));
  return q;
}
std::vector<float> dequantize(Type t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  type_traits(static_cast<uint32_t>(t))->to_float(q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}
// Squared error over [from, from + n), each term weighted by w[k] if w is
// not empty.
double sse(const std::vector<float>& x, const std::vector<float>& y, size_t from, size_t n,
           const std::vector<double>& w = {}) {
  double e = 0;
  for (size_t k = from; k < from + n; ++k) {
    e += (w.empty() ? 1.0 : w[k]) * (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
  }
  return e;
}

// The weights the search minimises its squared error with when x is
// quantized as one row: none (empty) except for Q4_0, whose weights are
// llama.cpp's for its searched 4-bit types, sqrt(sigma2 + x^2) with sigma2
// the mean square of the row (computed here in double, independently of
// quant::q4_0_search_weights).
std::vector<double> search_weights(Type t, const std::vector<float>& x) {
  if (t != Type::Q4_0) return {};
  double s2 = 0;
  for (float v : x) s2 += double(v) * v;
  const double sigma2 = s2 / double(x.size());
  std::vector<double> w(x.size());
  for (size_t k = 0; k < x.size(); ++k) w[k] = std::sqrt(sigma2 + double(x[k]) * x[k]);
  return w;
}

// Blocks of very different magnitudes (1e-3 .. 10), uniform or Gaussian
// inside, with an occasional outlier: what weight rows look like.
std::vector<float> random_weights(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uni(-1, 1), logscale(-3, 1);
  std::normal_distribution<float> gauss(0, 1);
  std::vector<float> x(n);
  for (size_t b = 0; b < n / kBlock; ++b) {
    const float s = std::pow(10.0f, logscale(rng));
    const bool normal = b % 2;
    for (int j = 0; j < kBlock; ++j) x[b * kBlock + j] = s * (normal ? gauss(rng) : uni(rng));
    if (b % 7 == 3) x[b * kBlock + (b % kBlock)] *= 6;  // outlier
  }
  return x;
}

// llama.cpp tests/test-quantize-fns.cpp data: 0.1 + 2 cos(i + offset).
std::vector<float> cos_data(size_t n, float offset) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = 0.1f + 2.0f * std::cos(static_cast<float>(i) + offset);
  return x;
}

// Largest error plain round-to-nearest may make on an element of a block,
// from the format's definition (d is the block scale before fp16 rounding;
// fp16 rounds a value v by r(v) = max(|v| 2^-11, 2^-25) at most (relative in
// the normal range, half the subnormal spacing below it), and the error of d
// is multiplied by the level |q|):
//   Q8_0: d = amax/127, |q| <= 127: d/2 + 127 r(d).
//   Q4_0: d = amax/8; the element at -max maps to level 8, clamped to 7,
//         so up to d; |q| <= 8: d + 8 r(d).
//   Q4_1: d = (max-min)/15, q in 0..15: d/2 + 15 r(d) + r(min).
//   F16:  r(x).
// Plus a few float ulps of the element for the arithmetic itself.
double plain_bound(Type t, const float* blk, float x) {
  float amax = 0, mn = blk[0], mx = blk[0];
  for (int j = 0; j < kBlock; ++j) {
    amax = std::max(amax, std::fabs(blk[j]));
    mn = std::min(mn, blk[j]);
    mx = std::max(mx, blk[j]);
  }
  const double slack = 4 * std::numeric_limits<float>::epsilon() * (std::fabs(x) + amax);
  auto r = [](double v) { return std::max(std::fabs(v) * kHalfUlp16, std::ldexp(1.0, -25)); };
  switch (t) {
    case Type::Q8_0: return amax / 127.0 / 2 + 127 * r(amax / 127.0) + slack;
    case Type::Q4_0: return amax / 8.0 + 8 * r(amax / 8.0) + slack;
    case Type::Q4_1: return (mx - mn) / 15.0 / 2 + 15 * r((mx - mn) / 15.0) + r(mn) + slack;
    case Type::F16: return r(x);
    default: return 0;
  }
}

const Type kTypes[] = {Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::F16};

TEST(Quantize, PlainMatchesGgmlReferenceOnKnownBlocks) {
  // x = j - 16: the value of largest magnitude is -16, so Q4_0 d = -16/-8 = 2
  // and every even x is exact; Q8_0 d = 16/127.
  std::vector<float> x(kBlock);
  for (int j = 0; j < kBlock; ++j) x[j] = static_cast<float>(j - 16);
  const auto q4 = quantize(Type::Q4_0, x, QuantMethod::plain);
  BlockQ4_0 b4;
  std::memcpy(&b4, q4.data(), sizeof b4);
  EXPECT_EQ(fp16_to_fp32(b4.d), 2.0f);
  EXPECT_EQ(b4.qs[0] & 0x0f, 0);       // -16 / 2 + 8.5 -> 0
  EXPECT_EQ(b4.qs[0] >> 4, 8);         // x[16] = 0 -> 8
  EXPECT_EQ(b4.qs[15] >> 4, 15);       // x[31] = 15 -> 7.5 + 8.5 = 16 -> clamped to 15
  const auto y4 = dequantize(Type::Q4_0, q4, kBlock);
  for (int j = 0; j < kBlock - 1; j += 2) EXPECT_EQ(y4[j], x[j]) << j;

  const auto q8 = quantize(Type::Q8_0, x, QuantMethod::plain);
  BlockQ8_0 b8;
  std::memcpy(&b8, q8.data(), sizeof b8);
  EXPECT_EQ(b8.d, fp32_to_fp16(16.0f / 127));
  EXPECT_EQ(b8.q[0], -127);
  EXPECT_EQ(b8.q[16], 0);
  EXPECT_EQ(b8.q[31], static_cast<int8_t>(std::roundf(15 * (127 / 16.0f))));

  // Q4_1 of 0..31: min 0, d = 31/15.
  for (int j = 0; j < kBlock; ++j) x[j] = static_cast<float>(j);
  const auto q41 = quantize(Type::Q4_1, x, QuantMethod::plain);
  BlockQ4_1 b41;
  std::memcpy(&b41, q41.data(), sizeof b41);
  EXPECT_EQ(b41.d, fp32_to_fp16(31.0f / 15));
  EXPECT_EQ(b41.m, fp32_to_fp16(0.0f));
  EXPECT_EQ(b41.qs[15] >> 4, 15);
}

TEST(Quantize, ZeroAndEmpty) {
  const std::vector<float> zeros(64, 0.0f);
  for (Type t : kTypes) {
    for (QuantMethod m : {QuantMethod::plain, QuantMethod::search}) {
      const auto y = dequantize(t, quantize(t, zeros, m), zeros.size());
      for (float v : y) EXPECT_EQ(v, 0.0f);
    }
    EXPECT_TRUE(quantize_row(t, nullptr, nullptr, 0));
  }
  float one = 1;
  EXPECT_FALSE(quantize_row(Type::Q8_1, &one, &one, 0));
  // F32 is a copy.
  const std::vector<float> x = cos_data(40, 0);
  EXPECT_EQ(dequantize(Type::F32, quantize(Type::F32, x, QuantMethod::plain), x.size()), x);
}

// Every element within the plain bound; the search method never worse than
// plain on any block in the error it minimises (search_weights; it keeps
// the plain block unless a candidate beats it).
void check_type(Type t, const std::vector<float>& x, const char* data_name, double* plain_rel,
                double* search_rel) {
  SCOPED_TRACE(std::string(type_traits(static_cast<uint32_t>(t))->name) + " on " + data_name);
  const auto yp = dequantize(t, quantize(t, x, QuantMethod::plain), x.size());
  const auto ys = dequantize(t, quantize(t, x, QuantMethod::search), x.size());
  const std::vector<double> w = search_weights(t, x);
  double ep = 0, es = 0, norm = 0;
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    const float* blk = x.data() + b * kBlock;
    for (int j = 0; j < kBlock; ++j) {
      const size_t k = b * kBlock + j;
      ASSERT_LE(std::fabs(double(x[k]) - yp[k]), plain_bound(t, blk, x[k]))
          << "element " << k << " x " << x[k] << " y " << yp[k];
    }
    const double bp = sse(x, yp, b * kBlock, kBlock, w), bsr = sse(x, ys, b * kBlock, kBlock, w);
    ASSERT_LE(bsr, bp) << "block " << b;
    ep += bp;
    es += bsr;
  }
  for (size_t k = 0; k < x.size(); ++k) norm += (w.empty() ? 1.0 : w[k]) * double(x[k]) * x[k];
  *plain_rel = std::sqrt(ep / norm);
  *search_rel = std::sqrt(es / norm);
  // llama.cpp's metric (sqrt of the summed squared error over n) and limit
  // 0.002 for these types, on its own data only (random weights here span
  // 1e-3..60 in magnitude, so that absolute metric would not mean much).
  if (std::string(data_name).rfind("cos", 0) == 0) {
    EXPECT_LT(std::sqrt(sse(x, yp, 0, x.size())) / x.size(), 0.002);
    EXPECT_LT(std::sqrt(sse(x, ys, 0, x.size())) / x.size(), 0.002);
  }
}

TEST(Quantize, RoundTripErrorBounds) {
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  const size_t n = 32 * 128;  // llama.cpp's test size
  const std::vector<float> rnd = random_weights(n, kSeed), c0 = cos_data(n, 0), c1 = cos_data(n, 1);
  // Relative RMS error (sqrt(SSE / sum x^2), both weighted for Q4_0)
  // expected for uniform-ish data:
  // a rounding error uniform in +-d/2 has RMS d/sqrt(12); with d = amax/127
  // (Q8_0), amax/8 (Q4_0), range/15 (Q4_1) relative to an RMS of ~amax/sqrt(3)
  // this is ~0.004, ~0.07, ~0.07.  Limits leave room for the Gaussian blocks
  // and outliers (whose other elements then use few levels).
  const struct {
    Type t;
    double limit_rel;
  } limits[] = {{Type::Q8_0, 0.01}, {Type::Q4_0, 0.15}, {Type::Q4_1, 0.15}, {Type::F16, 0.0004}};
  for (const auto& l : limits) {
    for (const auto& data : {std::make_pair("random weights", &rnd), std::make_pair("cos 0", &c0),
                             std::make_pair("cos 1", &c1)}) {
      double p = 0, s = 0;
      check_type(l.t, *data.second, data.first, &p, &s);
      EXPECT_LT(p, l.limit_rel) << data.first;
      EXPECT_LE(s, p) << data.first;
      std::printf("  %-5s %-15s relative RMS error: plain %.5f, search %.5f (%.1f%% less)\n",
                  type_traits(static_cast<uint32_t>(l.t))->name, data.first, p, s,
                  p > 0 ? 100 * (1 - s / p) : 0.0);
      // The search must actually find something: measured 7-13% lower RMS
      // error for Q8_0, 2.7-5.4% for Q4_0 (in its weighted error; GGML's
      // signed-max scale already uses the asymmetric level -8 well), 9-14%
      // for Q4_1 (fitting the min helps most); the limits leave margin.
      const double min_gain = l.t == Type::Q4_0 ? 0.02 : l.t == Type::F16 ? 0.0 : 0.05;
      EXPECT_LE(s, (1 - min_gain) * p) << data.first;
    }
  }
}

TEST(Quantize, ManySeeds) {
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const std::vector<float> x = random_weights(32 * 16, seed);
    for (Type t : kTypes) {
      double p = 0, s = 0;
      check_type(t, x, "random weights", &p, &s);
    }
  }
}

TEST(Quantize, Q4_0SearchWeightsOnAKnownRow) {
  // sigma2 = (1 + 4 + 4 + 0) / 4 = 2.25.
  const float x[4] = {1, -2, 2, 0};
  float w[4];
  q4_0_search_weights(x, w, 4);
  EXPECT_FLOAT_EQ(w[0], std::sqrt(3.25f));
  EXPECT_FLOAT_EQ(w[1], 2.5f);
  EXPECT_FLOAT_EQ(w[2], 2.5f);
  EXPECT_FLOAT_EQ(w[3], 1.5f);
}

// The Q4_0 search without an imatrix is the weighted search with those
// weights, row by row (sigma2 is the row's, not the tensor's).
TEST(Quantize, Q4_0SearchIsWeightedByItsRow) {
  const int64_t cols = 32 * 8;
  const std::vector<float> x = random_weights(static_cast<size_t>(cols) * 3, kSeed + 7);
  for (int r = 0; r < 3; ++r) {
    const float* row = x.data() + r * cols;
    std::vector<float> w(static_cast<size_t>(cols));
    q4_0_search_weights(row, w.data(), cols);
    std::vector<uint8_t> a(row_bytes(Type::Q4_0, cols)), b(a.size());
    ASSERT_TRUE(quantize_row(Type::Q4_0, row, a.data(), cols, QuantMethod::search));
    ASSERT_TRUE(quantize_row_weighted(Type::Q4_0, row, b.data(), cols, w.data()));
    EXPECT_EQ(a, b) << "row " << r;
  }
}

// The 32 levels of one block, read from its bytes as quant.h lays them out.
void block_levels(Type t, const uint8_t* block, int* q) {
  const uint8_t* qs = block + traits(t).scale_bytes;
  for (int j = 0; j < kBlock; ++j) {
    if (t == Type::Q8_0) {
      q[j] = static_cast<int8_t>(qs[j]);
    } else {  // nibbles: element j low in byte j, j + 16 high
      const int nibble = (qs[j % (kBlock / 2)] >> (j < kBlock / 2 ? 0 : 4)) & 0x0f;
      q[j] = t == Type::Q4_0 ? nibble - 8 : nibble;
    }
  }
}

// level_range(t) is what a block of t holds: with scale 1 (and minimum 0)
// every level from lo to hi dequantizes to itself, and there is none past
// either end (a nibble has 16 values; Q8_0 stays symmetric, leaving int8's
// -128 out).  Types without levels (no kQuantGptq) get {0, 0}.
TEST(Quantize, LevelRangeIsWhatABlockHolds) {
  const Type all[] = {Type::F32, Type::F16, Type::Q4_0, Type::Q4_1, Type::Q8_0, Type::Q8_1};
  for (Type t : all) {
    const TypeTraits& tr = traits(t);
    SCOPED_TRACE(tr.name);
    const LevelRange r = level_range(t);
    if (!(tr.quantizers & kQuantGptq)) {
      EXPECT_EQ(0, r.lo);
      EXPECT_EQ(0, r.hi);
      continue;
    }
    ASSERT_LT(r.lo, r.hi);
    std::vector<uint8_t> block(tr.block_bytes, 0);
    const uint16_t one = fp32_to_fp16(1.0f);
    std::memcpy(block.data(), &one, sizeof one);  // every block starts with d
    for (int first = r.lo; first <= r.hi; first += kBlock) {
      int q[kBlock], back[kBlock];
      float y[kBlock];
      for (int j = 0; j < kBlock; ++j) q[j] = std::min(first + j, r.hi);
      set_block_levels(t, block.data(), q);
      tr.to_float(block.data(), y, kBlock);
      block_levels(t, block.data(), back);
      for (int j = 0; j < kBlock; ++j) {
        ASSERT_EQ(static_cast<float>(q[j]), y[j]) << "level " << q[j];
        ASSERT_EQ(q[j], back[j]);
      }
    }
  }
  for (Type t : {Type::Q4_0, Type::Q4_1}) EXPECT_EQ(16, level_range(t).hi - level_range(t).lo + 1);
  EXPECT_EQ(127, level_range(Type::Q8_0).hi);
  EXPECT_EQ(-127, level_range(Type::Q8_0).lo);
}

// Every quantizer (plain, search, weighted search) writes levels within
// level_range, and plain reaches both ends on a block of -1 and +1 whose
// largest magnitude comes first as -1: Q4_0 then maps +1 to 8, one past
// its end, and clamps it to 7; Q8_0 maps -1 to -127, never -128.
TEST(Quantize, QuantizersStayWithinTheLevelRange) {
  SCOPED_TRACE("seed " + std::to_string(kSeed));
  const size_t n = 32 * 64;
  std::vector<float> x = random_weights(n, kSeed + 3);
  for (int j = 0; j < kBlock; ++j) x[j] = -1.0f + 2.0f * static_cast<float>(j % 2);
  std::vector<float> importance(n);
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> u(0, 1);
  for (float& v : importance) v = u(rng) * u(rng);
  const char* const kMethods[] = {"plain", "search", "weighted search"};
  for (Type t : {Type::Q8_0, Type::Q4_0, Type::Q4_1}) {
    const LevelRange r = level_range(t);
    const size_t block_bytes = traits(t).block_bytes;
    for (int method = 0; method < 3; ++method) {
      SCOPED_TRACE(std::string(traits(t).name) + " " + kMethods[method]);
      std::vector<uint8_t> row(row_bytes(t, static_cast<int64_t>(n)));
      if (method < 2) {
        ASSERT_TRUE(quantize_row(t, x.data(), row.data(), static_cast<int64_t>(n),
                                 method == 0 ? QuantMethod::plain : QuantMethod::search));
      } else {
        ASSERT_TRUE(quantize_row_weighted(t, x.data(), row.data(), static_cast<int64_t>(n), importance.data()));
      }
      for (size_t b = 0; b < n / kBlock; ++b) {
        int q[kBlock];
        block_levels(t, row.data() + b * block_bytes, q);
        const auto [lo, hi] = std::minmax_element(q, q + kBlock);
        ASSERT_GE(*lo, r.lo) << "block " << b;
        ASSERT_LE(*hi, r.hi) << "block " << b;
        if (method == 0 && b == 0) {
          EXPECT_EQ(r.lo, *lo);
          EXPECT_EQ(r.hi, *hi);
        }
      }
    }
  }
}

}  // namespace
}  // namespace lilims::quant
