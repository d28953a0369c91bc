// Importance-weighted quantization (quant::quantize_row_weighted, what
// `lilims quantize --imatrix` uses): never above plain's weighted error,
// block by block, and below the unweighted search's on the whole; clearly
// below it where the weights must matter (an outlier in a column that
// carries no weight).
#include <cmath>
#include <random>
#include <vector>

#include "quant/quantize.h"
#include "test_util.h"

namespace lilims::quant {
namespace {

constexpr uint32_t kSeed = 20261126;

std::vector<float> dequantize(Type t, const std::vector<uint8_t>& q, size_t n) {
  std::vector<float> y(n);
  traits(t).to_float(q.data(), y.data(), static_cast<int64_t>(n));
  return y;
}

// Weighted squared error of block b (32 elements).
double wsse(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& w,
            size_t b) {
  double e = 0;
  for (size_t k = b * 32; k < b * 32 + 32; ++k) e += w[k] * (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
  return e;
}

std::vector<float> quantized(Type t, const std::vector<float>& x, QuantMethod m) {
  std::vector<uint8_t> q(row_bytes(t, (int64_t)x.size()));
  EXPECT_TRUE(quantize_row(t, x.data(), q.data(), (int64_t)x.size(), m));
  return dequantize(t, q, x.size());
}

std::vector<float> weighted(Type t, const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<uint8_t> q(row_bytes(t, (int64_t)x.size()));
  EXPECT_TRUE(quantize_row_weighted(t, x.data(), q.data(), (int64_t)x.size(), w.data()));
  return dequantize(t, q, x.size());
}

class Weighted : public ::testing::TestWithParam<Type> {};

TEST_P(Weighted, NeverAbovePlainAndBelowUnweightedSearchOverall) {
  const Type t = GetParam();
  std::mt19937 rng(kSeed);
  std::normal_distribution<float> gauss(0, 1);
  std::uniform_real_distribution<float> logw(-4, 2), logs(-3, 1);
  const size_t n = 32 * 512;
  std::vector<float> x(n), w(n);
  for (size_t b = 0; b < n / 32; ++b) {
    const float scale = std::pow(10.0f, logs(rng));
    for (size_t j = 0; j < 32; ++j) {
      x[b * 32 + j] = scale * gauss(rng);
      w[b * 32 + j] = std::pow(10.0f, logw(rng));  // importances spread over 6 decades
    }
  }
  const std::vector<float> yp = quantized(t, x, QuantMethod::plain);
  const std::vector<float> ys = quantized(t, x, QuantMethod::search);
  const std::vector<float> yw = weighted(t, x, w);
  double sum_s = 0, sum_w = 0;
  for (size_t b = 0; b < n / 32; ++b) {
    const double ew = wsse(x, yw, w, b);
    ASSERT_LE(ew, wsse(x, yp, w, b)) << traits(t).name << " block " << b << ", seed " << kSeed;
    sum_s += wsse(x, ys, w, b);
    sum_w += ew;
  }
  std::printf("%s: weighted error, unweighted search %.4g, weighted search %.4g (%.1f%%)\n",
              traits(t).name, sum_s, sum_w, 100.0 * sum_w / sum_s);
  EXPECT_LT(sum_w, sum_s);  // the weights buy something on average
}

// Each block: 31 Gaussian values of importance 1 and one outlier 8x the
// block's scale in a column of importance 0.  The unweighted search must
// spend its levels on the outlier; the weighted one may clip it, so the
// error on the columns that count falls by far (measured: ~6-12x; the test
// asks for 2x).
TEST_P(Weighted, ClipsAnOutlierInAColumnWithoutWeight) {
  const Type t = GetParam();
  std::mt19937 rng(kSeed + 1);
  std::normal_distribution<float> gauss(0, 1);
  std::uniform_int_distribution<int> col(0, 31);
  const size_t n = 32 * 256;
  std::vector<float> x(n), w(n, 1.0f);
  for (size_t b = 0; b < n / 32; ++b) {
    for (size_t j = 0; j < 32; ++j) x[b * 32 + j] = gauss(rng);
    const size_t o = b * 32 + (size_t)col(rng);
    x[o] = (x[o] < 0 ? -8.0f : 8.0f);
    w[o] = 0.0f;
  }
  const std::vector<float> ys = quantized(t, x, QuantMethod::search);
  const std::vector<float> yw = weighted(t, x, w);
  double es = 0, ew = 0;
  for (size_t b = 0; b < n / 32; ++b) {
    es += wsse(x, ys, w, b);
    ew += wsse(x, yw, w, b);
  }
  std::printf("%s: error on the weighted columns, unweighted search %.4g, weighted %.4g\n",
              traits(t).name, es, ew);
  EXPECT_LT(ew, 0.5 * es) << "seed " << kSeed + 1;
}

INSTANTIATE_TEST_SUITE_P(Types, Weighted, ::testing::Values(Type::Q4_0, Type::Q4_1, Type::Q8_0),
                         [](const auto& info) { return std::string(traits(info.param).name); });

TEST(Weighted, FloatTypesIgnoreTheWeights) {
  const std::vector<float> x = {1.5f, -2.25f, 3.0f, 0.1f};
  const std::vector<float> w = {0, 0, 0, 0};
  std::vector<uint16_t> a(4), b(4);
  EXPECT_TRUE(quantize_row_weighted(Type::F16, x.data(), a.data(), 4, w.data()));
  EXPECT_TRUE(quantize_row(Type::F16, x.data(), b.data(), 4));
  EXPECT_EQ(a, b);
  EXPECT_FALSE(quantize_row_weighted(Type::Q8_1, x.data(), a.data(), 4, w.data()));
}

}  // namespace
}  // namespace lilims::quant
