#include "models/low_rank.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <string>

namespace lilims::models {
namespace {

using Columns = std::vector<std::vector<double>>;  // column j: cols[j]

double dot(const std::vector<double>& x, const std::vector<double>& y) {
  double s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i] * y[i];
  return s;
}

// X = Q R for the r columns of X (each of length m): Q's columns orthonormal
// or zero (a column dependent on the ones before it), R upper triangular,
// r x r row-major.  Two passes of modified Gram-Schmidt keep Q orthogonal to
// rounding even when X's columns are nearly dependent.
void qr(Columns* x, std::vector<double>* r_out) {
  const size_t r = x->size();
  std::vector<double>& R = *r_out;
  R.assign(r * r, 0.0);
  double largest = 0.0;
  for (const auto& c : *x) largest = std::max(largest, std::sqrt(dot(c, c)));
  for (size_t j = 0; j < r; ++j) {
    std::vector<double>& v = (*x)[j];
    for (int pass = 0; pass < 2; ++pass) {
      for (size_t i = 0; i < j; ++i) {
        const double c = dot((*x)[i], v);
        R[i * r + j] += c;
        for (size_t e = 0; e < v.size(); ++e) v[e] -= c * (*x)[i][e];
      }
    }
    const double norm = std::sqrt(dot(v, v));
    if (norm <= 1e-13 * largest || norm == 0.0) {
      std::fill(v.begin(), v.end(), 0.0);
      continue;
    }
    R[j * r + j] = norm;
    for (double& e : v) e /= norm;
  }
}

// M = U S V^T for a square n x n M (row-major), by one-sided Jacobi
// rotations of M's columns: on return w holds the columns of U S and v the
// columns of V.
void jacobi_svd(const std::vector<double>& m, size_t n, Columns* w, Columns* v) {
  w->assign(n, std::vector<double>(n));
  v->assign(n, std::vector<double>(n, 0.0));
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < n; ++i) (*w)[j][i] = m[i * n + j];
    (*v)[j][j] = 1.0;
  }
  for (int sweep = 0; sweep < 100; ++sweep) {
    bool rotated = false;
    for (size_t p = 0; p + 1 < n; ++p) {
      for (size_t q = p + 1; q < n; ++q) {
        std::vector<double>& wp = (*w)[p];
        std::vector<double>& wq = (*w)[q];
        const double alpha = dot(wp, wp), beta = dot(wq, wq), gamma = dot(wp, wq);
        if (gamma == 0.0 || std::fabs(gamma) <= 1e-15 * std::sqrt(alpha * beta)) continue;
        rotated = true;
        const double zeta = (beta - alpha) / (2.0 * gamma);
        const double t = (zeta >= 0 ? 1.0 : -1.0) / (std::fabs(zeta) + std::sqrt(1.0 + zeta * zeta));
        const double c = 1.0 / std::sqrt(1.0 + t * t), s = c * t;
        for (Columns* mat : {w, v}) {
          std::vector<double>& xp = (*mat)[p];
          std::vector<double>& xq = (*mat)[q];
          for (size_t i = 0; i < xp.size(); ++i) {
            const double a = xp[i], b = xq[i];
            xp[i] = c * a - s * b;
            xq[i] = s * a + c * b;
          }
        }
      }
    }
    if (!rotated) break;
  }
}

}  // namespace

LowRankFactors truncate_lora(const float* b, const float* a, int64_t n_out, int64_t n_in, int64_t r,
                             int64_t k, double scale) {
  if (n_out <= 0 || n_in <= 0 || r <= 0 || k <= 0 || k > r) {
    throw std::invalid_argument("truncate_lora: rank " + std::to_string(k) + " of a rank-" +
                                std::to_string(r) + " product " + std::to_string(n_out) + " x " +
                                std::to_string(n_in));
  }
  const size_t R = static_cast<size_t>(r);
  Columns qb(R, std::vector<double>(n_out)), qa(R, std::vector<double>(n_in));
  for (int64_t o = 0; o < n_out; ++o) {
    for (size_t j = 0; j < R; ++j) qb[j][o] = b[o * r + j];
  }
  for (size_t j = 0; j < R; ++j) {
    for (int64_t i = 0; i < n_in; ++i) qa[j][i] = a[j * n_in + i];
  }
  std::vector<double> rb, ra;
  qr(&qb, &rb);
  qr(&qa, &ra);
  // core = Rb Ra^T
  std::vector<double> core(R * R, 0.0);
  for (size_t i = 0; i < R; ++i) {
    for (size_t j = 0; j < R; ++j) {
      double s = 0.0;
      for (size_t l = 0; l < R; ++l) s += rb[i * R + l] * ra[j * R + l];
      core[i * R + j] = s;
    }
  }
  Columns us, v;
  jacobi_svd(core, R, &us, &v);

  LowRankFactors out;
  std::vector<size_t> order(R);
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> sigma(R);
  for (size_t j = 0; j < R; ++j) sigma[j] = std::sqrt(dot(us[j], us[j]));
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return sigma[x] > sigma[y]; });
  double total = 0.0, kept = 0.0;
  for (size_t c = 0; c < R; ++c) {
    out.singular.push_back(sigma[order[c]]);
    total += sigma[order[c]] * sigma[order[c]];
    if (c < static_cast<size_t>(k)) kept += sigma[order[c]] * sigma[order[c]];
  }
  out.kept = total > 0.0 ? kept / total : 1.0;

  out.b.assign(static_cast<size_t>(n_out * k), 0.0f);
  out.a.assign(static_cast<size_t>(k * n_in), 0.0f);
  for (int64_t c = 0; c < k; ++c) {
    const size_t j = order[c];
    if (sigma[j] == 0.0) continue;
    const double root = std::sqrt(sigma[j]);
    // Column c of Qb U: Qb times u_j = us[j] / sigma_j.
    std::vector<double> u(R);
    for (size_t i = 0; i < R; ++i) u[i] = us[j][i] / sigma[j];
    for (int64_t o = 0; o < n_out; ++o) {
      double s = 0.0;
      for (size_t i = 0; i < R; ++i) s += qb[i][o] * u[i];
      out.b[o * k + c] = static_cast<float>(scale * root * s);
    }
    for (int64_t n = 0; n < n_in; ++n) {
      double s = 0.0;
      for (size_t i = 0; i < R; ++i) s += qa[i][n] * v[j][i];
      out.a[c * n_in + n] = static_cast<float>(root * s);
    }
  }
  return out;
}

}  // namespace lilims::models
