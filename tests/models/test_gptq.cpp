// Error-compensated quantization (models/gptq.h): the factor's defining
// identity, the degenerate case without correlations, and the output error
// it exists to lower.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "models/gptq.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace lilims {
namespace {

constexpr double kU = 5.9604644775390625e-8;  // float unit roundoff

// m samples of n correlated inputs: x = z M, z standard normal, M a random
// mixing with a decaying spectrum (like activations: a few strong
// directions), plus `dead` columns that are always 0.
std::vector<float> correlated_inputs(std::mt19937& rng, int m, int n, int dead) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> mix((size_t)n * n);
  for (int i = 0; i < n; ++i) {
    const float s = 1.0f / (1.0f + 0.1f * (float)i);
    for (int j = 0; j < n; ++j) mix[(size_t)i * n + j] = s * g(rng);
  }
  std::vector<float> x((size_t)m * n, 0.0f), z(n);
  for (int t = 0; t < m; ++t) {
    for (float& v : z) v = g(rng);
    for (int i = 0; i < n; ++i) {
      const float zi = z[i];
      for (int j = 0; j < n; ++j) x[(size_t)t * n + j] += zi * mix[(size_t)i * n + j];
    }
    for (int j = n - dead; j < n; ++j) x[(size_t)t * n + j] = 0.0f;
  }
  return x;
}

// H = E[x x^T], full (both triangles), in float as calibrate() keeps it.
std::vector<float> second_moments(const std::vector<float>& x, int m, int n) {
  std::vector<double> h((size_t)n * n, 0.0);
  for (int t = 0; t < m; ++t) {
    const float* r = x.data() + (size_t)t * n;
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) h[(size_t)i * n + j] += (double)r[i] * r[j];
    }
  }
  std::vector<float> out(h.size());
  for (size_t k = 0; k < h.size(); ++k) out[k] = (float)(h[k] / m);
  return out;
}

// (w - y)^T H (w - y): the row's mean squared output error over the inputs.
double output_error(const std::vector<float>& h, const float* w, const float* y, int n) {
  double e = 0;
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int j = 0; j < n; ++j) s += (double)h[(size_t)i * n + j] * ((double)w[j] - y[j]);
    e += ((double)w[i] - y[i]) * s;
  }
  return e;
}

std::vector<float> dequantized(quant::Type type, const std::vector<uint8_t>& row, int n) {
  std::vector<float> y(n);
  quant::traits(type).to_float(row.data(), y.data(), n);
  return y;
}

// U^T U (H + damping I) = I: the identity the factor is defined by, checked
// in double.  The factorisation and inversion run in float: the worst-case
// analysis bounds the residual by a multiple of n u kappa, kappa =
// (lambda_max + damping) / damping (lambda_max by power iteration); what is
// measured is ~0.1 u kappa (n = 160: 1.0e-5 at kappa 1.9e3), so the test
// asserts 2 sqrt(n) u kappa, which a wrong factor (e.g. an undamped or
// transposed one) misses by orders of magnitude.
TEST(Gptq, FactorInvertsTheDampedMoments) {
  std::mt19937 rng(7);
  for (const int n : {1, 32, 96, 160}) {
    for (const int dead : {0, 3}) {
      if (dead >= n) continue;
      const int m = 3 * n + 20;
      const std::vector<float> x = correlated_inputs(rng, m, n, dead);
      const std::vector<float> h = second_moments(x, m, n);
      const models::GptqFactor f = models::gptq_factor(h.data(), n);
      ASSERT_EQ(f.n, n);
      ASSERT_GT(f.damping, 0.0);
      std::vector<double> a((size_t)n * n);
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) a[(size_t)i * n + j] = h[(size_t)i * n + j] + (i == j ? f.damping : 0.0);
        EXPECT_EQ(f.diag[(size_t)i], h[(size_t)i * n + i]);
        for (int j = 0; j < i; ++j) ASSERT_EQ(f.u[(size_t)i * n + j], 0.0f) << "U is upper triangular";
        ASSERT_GT(f.u[(size_t)i * n + i], 0.0f);
      }
      // lambda_max of the damped matrix.
      std::vector<double> v(n, 1.0), av(n);
      double lmax = 0;
      for (int it = 0; it < 200; ++it) {
        double norm = 0;
        for (int i = 0; i < n; ++i) {
          av[i] = 0;
          for (int j = 0; j < n; ++j) av[i] += a[(size_t)i * n + j] * v[j];
          norm += av[i] * av[i];
        }
        lmax = std::sqrt(norm);
        for (int i = 0; i < n; ++i) v[i] = av[i] / lmax;
      }
      const double kappa = lmax / f.damping;
      // U^T U A, column by column.
      double worst = 0;
      std::vector<double> ua(n);
      for (int c = 0; c < n; ++c) {
        for (int i = 0; i < n; ++i) {  // (U A)_ic
          double s = 0;
          for (int k = i; k < n; ++k) s += (double)f.u[(size_t)i * n + k] * a[(size_t)k * n + c];
          ua[i] = s;
        }
        for (int r = 0; r < n; ++r) {  // (U^T (U A))_rc
          double s = 0;
          for (int i = 0; i <= r; ++i) s += (double)f.u[(size_t)i * n + r] * ua[i];
          worst = std::max(worst, std::fabs(s - (r == c ? 1.0 : 0.0)));
        }
      }
      const double bound = 2.0 * std::sqrt((double)n) * kU * kappa;
      std::printf("n %d dead %d: kappa %.3g, max |U^T U A - I| %.3g (bound %.3g)\n", n, dead, kappa, worst,
                  bound);
      EXPECT_LE(worst, bound) << "n " << n << " dead " << dead;
    }
  }
}

// Diagonal moments: U is diagonal, no error moves to another column, and
// each block keeps the weighted search's scale (and minimum) and rounds
// every value to its nearest level, so its weighted squared error is at
// most the search's, block by block.
TEST(Gptq, DiagonalMomentsRoundEachBlockAtLeastAsWellAsTheSearch) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uni(0.01f, 4.0f);
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int n = 256;
  for (const quant::Type type : {quant::Type::Q4_0, quant::Type::Q4_1, quant::Type::Q8_0}) {
    const size_t row_bytes = quant::row_bytes(type, n);
    int better = 0;
    for (int r = 0; r < 200; ++r) {
      std::vector<float> h((size_t)n * n, 0.0f), w(n), scratch(n);
      for (int i = 0; i < n; ++i) h[(size_t)i * n + i] = uni(rng);
      for (float& v : w) v = g(rng) * (r % 3 == 0 ? 0.02f : 1.0f);
      const models::GptqFactor f = models::gptq_factor(h.data(), n);
      std::vector<uint8_t> a(row_bytes), b(row_bytes);
      ASSERT_TRUE(models::quantize_row_gptq(type, w.data(), a.data(), n, f, scratch.data()));
      ASSERT_TRUE(quant::quantize_row_weighted(type, w.data(), b.data(), n, f.diag.data()));
      const std::vector<float> ya = dequantized(type, a, n), yb = dequantized(type, b, n);
      const size_t block_bytes = quant::traits(type).block_bytes;
      for (int k = 0; k < n / quant::kBlock; ++k) {
        double ea = 0, eb = 0;
        for (int j = k * quant::kBlock; j < (k + 1) * quant::kBlock; ++j) {
          ea += (double)f.diag[j] * ((double)w[j] - ya[j]) * ((double)w[j] - ya[j]);
          eb += (double)f.diag[j] * ((double)w[j] - yb[j]) * ((double)w[j] - yb[j]);
        }
        ASSERT_LE(ea, eb) << quant::traits(type).name << " row " << r << " block " << k;
        better += ea < eb;
        // The scale (and Q4_1's minimum) is the search's: the first bytes.
        const size_t scale_bytes = type == quant::Type::Q4_1 ? 4 : 2;
        ASSERT_EQ(0, std::memcmp(a.data() + k * block_bytes, b.data() + k * block_bytes, scale_bytes));
      }
    }
    std::printf("%s: %d blocks of %d strictly better than the search's levels\n", quant::traits(type).name,
                better, 200 * n / quant::kBlock);
  }
}

// The point of it: on correlated inputs the output error (w - y)^T H
// (w - y), summed over rows, falls well below the weighted search's (which
// sees only H's diagonal).  Measured with this seed: Q4_0 0.26x, Q4_1
// 0.32x, Q8_0 0.27x, no row worse; the test asserts < 0.6x for each format
// and no more than a tenth of the rows worse.
TEST(Gptq, LowersTheOutputErrorOnCorrelatedInputs) {
  std::mt19937 rng(5);
  const int n = 128, m = 1000, rows = 64;
  const std::vector<float> x = correlated_inputs(rng, m, n, 2);
  const std::vector<float> h = second_moments(x, m, n);
  const models::GptqFactor f = models::gptq_factor(h.data(), n);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (const quant::Type type : {quant::Type::Q4_0, quant::Type::Q4_1, quant::Type::Q8_0}) {
    const size_t row_bytes = quant::row_bytes(type, n);
    double sum_gptq = 0, sum_search = 0;
    int worse = 0;
    for (int r = 0; r < rows; ++r) {
      std::vector<float> w(n), scratch(n);
      for (float& v : w) v = g(rng);
      std::vector<uint8_t> a(row_bytes), b(row_bytes);
      ASSERT_TRUE(models::quantize_row_gptq(type, w.data(), a.data(), n, f, scratch.data()));
      ASSERT_TRUE(quant::quantize_row_weighted(type, w.data(), b.data(), n, f.diag.data()));
      const double ea = output_error(h, w.data(), dequantized(type, a, n).data(), n);
      const double eb = output_error(h, w.data(), dequantized(type, b, n).data(), n);
      sum_gptq += ea;
      sum_search += eb;
      worse += ea > eb;
    }
    const double ratio = sum_gptq / sum_search;
    std::printf("%s: output error %.4g vs the weighted search's %.4g (%.2fx), %d of %d rows worse\n",
                quant::traits(type).name, sum_gptq, sum_search, ratio, worse, rows);
    EXPECT_LT(ratio, 0.6) << quant::traits(type).name;
    EXPECT_LE(worse, rows / 10) << quant::traits(type).name;
  }
}

TEST(Gptq, RefusesWhatItCannotUse) {
  std::vector<float> h(64 * 64, 0.0f), w(64, 1.0f), scratch(64);
  for (int i = 0; i < 64; ++i) h[(size_t)i * 64 + i] = 1.0f;
  const models::GptqFactor f = models::gptq_factor(h.data(), 64);
  std::vector<uint8_t> out(quant::row_bytes(quant::Type::Q4_0, 96));
  std::vector<float> w96(96, 1.0f), s96(96);
  EXPECT_THROW(models::quantize_row_gptq(quant::Type::Q4_0, w96.data(), out.data(), 96, f, s96.data()),
               Error);
  h[5 * 64 + 2] = NAN;
  EXPECT_THROW(models::gptq_factor(h.data(), 64), Error);
  EXPECT_THROW(models::gptq_factor(h.data(), 0), Error);
  // A zero matrix (no input seen): the identity's factor, a row still rounds.
  std::vector<float> zero(32 * 32, 0.0f), w32(32, 0.5f), s32(32);
  const models::GptqFactor fz = models::gptq_factor(zero.data(), 32);
  std::vector<uint8_t> q(quant::row_bytes(quant::Type::Q4_0, 32));
  ASSERT_TRUE(models::quantize_row_gptq(quant::Type::Q4_0, w32.data(), q.data(), 32, fz, s32.data()));
  const std::vector<float> y = dequantized(quant::Type::Q4_0, q, 32);
  for (float v : y) EXPECT_NEAR(v, 0.5f, 0.5f / 8);
}

}  // namespace
}  // namespace lilims
