// models/low_rank.h against products whose singular value decomposition is
// known by construction: U and V from the orthonormal DCT-II basis, singular
// values chosen here, hidden behind an invertible mixing of the rank
// dimension (B = U S G, A = G^-1 V^T), so the factors given are not already
// the decomposition.  Tolerances: the factors come back as floats, so the
// rebuilt product carries relative rounding of about 1e-7 per term over r
// terms; 1e-5 of the largest entry leaves room for that and nothing else.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "models/low_rank.h"

namespace lilims::models {
namespace {

// Column k of the orthonormal DCT-II basis of length n.
std::vector<double> dct(size_t n, size_t k) {
  std::vector<double> v(n);
  const double pi = std::acos(-1.0);
  const double norm = std::sqrt((k == 0 ? 1.0 : 2.0) / static_cast<double>(n));
  for (size_t j = 0; j < n; ++j) v[j] = norm * std::cos(pi * (j + 0.5) * k / n);
  return v;
}

struct Case {
  size_t n_out, n_in, r;
  std::vector<double> s;               // singular values, in the order given
  std::vector<std::vector<double>> u;  // r columns of length n_out
  std::vector<std::vector<double>> v;  // r columns of length n_in
  std::vector<float> b, a;             // B = U S G (n_out x r), A = G^-1 V^T (r x n_in)
};

// G = P D: P a product of plane rotations of the rank dimension, D diagonal;
// G^-1 = D^-1 P^T.
Case make_case(size_t n_out, size_t n_in, const std::vector<double>& s) {
  Case c{n_out, n_in, s.size(), s, {}, {}, {}, {}};
  for (size_t k = 0; k < c.r; ++k) {
    c.u.push_back(dct(n_out, k + 1));
    c.v.push_back(dct(n_in, k + 2));
  }
  const size_t r = c.r;
  std::vector<double> p(r * r, 0.0);
  for (size_t i = 0; i < r; ++i) p[i * r + i] = 1.0;
  for (size_t i = 0; i + 1 < r; ++i) {  // rotate columns i, i + 1 by 0.3 + 0.2 i radians
    const double t = 0.3 + 0.2 * i, cs = std::cos(t), sn = std::sin(t);
    for (size_t row = 0; row < r; ++row) {
      const double x = p[row * r + i], y = p[row * r + i + 1];
      p[row * r + i] = cs * x - sn * y;
      p[row * r + i + 1] = sn * x + cs * y;
    }
  }
  std::vector<double> d(r);
  for (size_t i = 0; i < r; ++i) d[i] = 0.5 + 0.25 * static_cast<double>(i);
  c.b.assign(n_out * r, 0.0f);
  c.a.assign(r * n_in, 0.0f);
  for (size_t o = 0; o < n_out; ++o) {
    for (size_t j = 0; j < r; ++j) {  // (U S P D)[o][j]
      double x = 0.0;
      for (size_t l = 0; l < r; ++l) x += c.u[l][o] * s[l] * p[l * r + j];
      c.b[o * r + j] = static_cast<float>(x * d[j]);
    }
  }
  for (size_t j = 0; j < r; ++j) {
    for (size_t n = 0; n < n_in; ++n) {  // (D^-1 P^T V^T)[j][n]
      double x = 0.0;
      for (size_t l = 0; l < r; ++l) x += p[l * r + j] * c.v[l][n];
      c.a[j * n_in + n] = static_cast<float>(x / d[j]);
    }
  }
  return c;
}

// scale * sum over the k largest singular values of s_l u_l v_l^T.
std::vector<double> best(const Case& c, size_t k, double scale) {
  std::vector<size_t> order(c.r);
  for (size_t i = 0; i < c.r; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return c.s[x] > c.s[y]; });
  std::vector<double> w(c.n_out * c.n_in, 0.0);
  for (size_t t = 0; t < k; ++t) {
    const size_t l = order[t];
    for (size_t o = 0; o < c.n_out; ++o) {
      for (size_t n = 0; n < c.n_in; ++n) w[o * c.n_in + n] += scale * c.s[l] * c.u[l][o] * c.v[l][n];
    }
  }
  return w;
}

std::vector<double> product(const std::vector<float>& b, const std::vector<float>& a, size_t n_out,
                            size_t n_in, size_t k) {
  std::vector<double> w(n_out * n_in, 0.0);
  for (size_t o = 0; o < n_out; ++o) {
    for (size_t j = 0; j < k; ++j) {
      for (size_t n = 0; n < n_in; ++n) w[o * n_in + n] += (double)b[o * k + j] * a[j * n_in + n];
    }
  }
  return w;
}

void expect_near_all(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  double peak = 0.0, worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    peak = std::max(peak, std::fabs(want[i]));
    worst = std::max(worst, std::fabs(got[i] - want[i]));
  }
  EXPECT_LE(worst, 1e-5 * peak) << "peak " << peak;
}

TEST(LowRank, KeepsTheLargestSingularValues) {
  const std::vector<double> s = {3.0, 9.0, 0.1, 5.0, 2.0, 0.5};  // not in order
  const Case c = make_case(24, 40, s);
  const double total = 81 + 25 + 9 + 4 + 0.25 + 0.01;
  for (size_t k = 1; k <= c.r; ++k) {
    SCOPED_TRACE("k = " + std::to_string(k));
    const LowRankFactors f = truncate_lora(c.b.data(), c.a.data(), 24, 40, 6, (int64_t)k, 0.5);
    ASSERT_EQ(f.b.size(), 24 * k);
    ASSERT_EQ(f.a.size(), k * 40);
    expect_near_all(product(f.b, f.a, 24, 40, k), best(c, k, 0.5));
    const std::vector<double> sorted = {9.0, 5.0, 3.0, 2.0, 0.5, 0.1};
    ASSERT_EQ(f.singular.size(), 6u);
    for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(f.singular[i], sorted[i], 1e-5 * 9.0) << i;
    double kept = 0.0;
    for (size_t i = 0; i < k; ++i) kept += sorted[i] * sorted[i];
    EXPECT_NEAR(f.kept, kept / total, 1e-6);
    // The values split evenly: column j of B' has norm scale sqrt(s_j), row j of A' sqrt(s_j).
    for (size_t j = 0; j < k; ++j) {
      double nb = 0.0, na = 0.0;
      for (size_t o = 0; o < 24; ++o) nb += (double)f.b[o * k + j] * f.b[o * k + j];
      for (size_t n = 0; n < 40; ++n) na += (double)f.a[j * 40 + n] * f.a[j * 40 + n];
      EXPECT_NEAR(std::sqrt(nb), 0.5 * std::sqrt(sorted[j]), 1e-5);
      EXPECT_NEAR(std::sqrt(na), std::sqrt(sorted[j]), 1e-5);
    }
  }
}

TEST(LowRank, WideAndTallProducts) {
  // More outputs than inputs and the reverse; rank 1 and a rank above the
  // smaller side's half.
  for (const auto& dims : {std::vector<size_t>{200, 12}, std::vector<size_t>{12, 200}}) {
    const Case c = make_case(dims[0], dims[1], {4.0, 1.0, 7.0, 0.25, 2.5, 0.01, 6.0});
    for (int64_t k : {1, 3, 7}) {
      const LowRankFactors f = truncate_lora(c.b.data(), c.a.data(), (int64_t)dims[0], (int64_t)dims[1], 7, k, 2.0);
      expect_near_all(product(f.b, f.a, dims[0], dims[1], (size_t)k), best(c, (size_t)k, 2.0));
    }
  }
}

TEST(LowRank, DependentColumnsAndZero) {
  // Rank 2 in rank-4 factors: B's last two columns repeat its first two.
  Case c = make_case(16, 20, {6.0, 2.0, 1.0, 1.0});
  for (size_t o = 0; o < 16; ++o) {
    c.b[o * 4 + 2] = c.b[o * 4 + 0];
    c.b[o * 4 + 3] = c.b[o * 4 + 1];
  }
  const std::vector<double> full = product(c.b, c.a, 16, 20, 4);
  const LowRankFactors f = truncate_lora(c.b.data(), c.a.data(), 16, 20, 4, 2, 1.0);
  expect_near_all(product(f.b, f.a, 16, 20, 2), full);
  EXPECT_NEAR(f.kept, 1.0, 1e-9);
  EXPECT_LE(f.singular[2], 1e-5 * f.singular[0]);
  EXPECT_LE(f.singular[3], 1e-5 * f.singular[0]);

  // B = 0 (PEFT's initialisation): zero factors, kept 1.
  std::vector<float> zero(16 * 4, 0.0f);
  const LowRankFactors z = truncate_lora(zero.data(), c.a.data(), 16, 20, 4, 2, 1.0);
  EXPECT_EQ(z.kept, 1.0);
  for (float x : z.b) EXPECT_EQ(x, 0.0f);
  for (float x : z.a) EXPECT_EQ(x, 0.0f);
}

TEST(LowRank, RefusesSizesThatDoNotFit) {
  const std::vector<float> b(8, 1.0f), a(8, 1.0f);
  EXPECT_THROW(truncate_lora(b.data(), a.data(), 4, 4, 2, 3, 1.0), std::invalid_argument);
  EXPECT_THROW(truncate_lora(b.data(), a.data(), 4, 4, 2, 0, 1.0), std::invalid_argument);
  EXPECT_THROW(truncate_lora(b.data(), a.data(), 0, 4, 2, 1, 1.0), std::invalid_argument);
}

}  // namespace
}  // namespace lilims::models
