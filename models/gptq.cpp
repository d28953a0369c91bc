#include "models/gptq.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "kernels/ops.h"
#include "quant/quantize.h"

namespace lilims::models {
namespace {

using quant::kBlock;
using quant::round_clamp;
using quant::Type;

// In place on the lower triangle of s (n x n row-major, holding H):
// H = R R^T with R upper triangular, found from the last column back (the
// Cholesky factorisation with rows and columns reversed); s's lower
// triangle then holds R^T.  Since H^-1 = R^-T R^-1, U = R^-1 is the upper
// factor with U^T U = H^-1.  False when a pivot is not positive.
bool reverse_cholesky(float* s, int64_t n, const kernels::OpsTable& ops) {
  for (int64_t j = n - 1; j >= 0; --j) {
    float* sj = s + j * n;
    if (!(sj[j] > 0.0f)) return false;
    const float d = std::sqrt(sj[j]);
    sj[j] = d;
    const float inv = 1.0f / d;
    for (int64_t k = 0; k < j; ++k) sj[k] *= inv;  // R_kj
    // The leading j x j block loses column j's outer product.
    for (int64_t i = 0; i < j; ++i) ops.axpy(-sj[i], sj, s + i * n, i + 1);
  }
  return true;
}

// U = R^-1, R_ik = s[k][i] (k >= i): row by row from the last,
// U_i = -(1 / R_ii) sum_{k > i} R_ik U_k, U_ii = 1 / R_ii.
void upper_inverse(const float* s, int64_t n, float* u, const kernels::OpsTable& ops) {
  std::fill(u, u + n * n, 0.0f);
  for (int64_t i = n - 1; i >= 0; --i) {
    float* ui = u + i * n;
    for (int64_t k = i + 1; k < n; ++k) ops.axpy(s[k * n + i], u + k * n + k, ui + k, n - k);
    const float inv = 1.0f / s[i * n + i];
    for (int64_t j = i + 1; j < n; ++j) ui[j] *= -inv;
    ui[i] = inv;
  }
}

// A block's scale, minimum and level range, as the block dequantizes them.
struct Grid {
  float d = 0, m = 0;
  int lo = 0, hi = 0;
  int level(float x) const { return d != 0 ? round_clamp((x - m) / d, lo, hi) : std::max(lo, 0); }
  float value(int q) const { return d * static_cast<float>(q) + m; }
};

Grid grid_of(Type type, const void* block) {
  const quant::BlockLevels& levels = quant::traits(type).levels;
  Grid g;
  levels.scale_min(block, &g.d, &g.m);
  g.lo = levels.lo;
  g.hi = levels.hi;
  return g;
}

}  // namespace

GptqFactor gptq_factor(const float* h, int64_t n) {
  if (n < 1) throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gptq] the matrix needs at least one column");
  GptqFactor f;
  f.n = n;
  f.diag.resize((size_t)n);
  double mean_diag = 0;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      if (!std::isfinite(h[i * n + j])) {
        throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gptq] the second-moment matrix holds a non-finite value at (" +
                                                     std::to_string(i) + ", " + std::to_string(j) + ")");
      }
    }
    f.diag[(size_t)i] = h[i * n + i];
    mean_diag += h[i * n + i];
  }
  mean_diag /= (double)n;
  if (!(mean_diag > 0)) mean_diag = 1.0;  // nothing seen: the identity's scale
  const kernels::OpsTable& ops = kernels::ops();
  std::vector<float> s((size_t)(n * n));
  for (double lambda = 0.01;; lambda *= 10) {
    f.damping = lambda * mean_diag;
    for (int64_t i = 0; i < n; ++i) {
      std::copy(h + i * n, h + i * n + i + 1, s.data() + i * n);
      s[(size_t)(i * n + i)] += (float)f.damping;
    }
    if (reverse_cholesky(s.data(), n, ops)) break;
    if (lambda > 1e3) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gptq] the second-moment matrix is not positive semi-definite");
    }
  }
  f.u.resize((size_t)(n * n));
  upper_inverse(s.data(), n, f.u.data(), ops);
  return f;
}

bool quantize_row_gptq(Type type, const float* src, void* dst, int64_t n, const GptqFactor& f,
                       float* scratch) {
  if (!quant::can_quantize(type, quant::kQuantGptq)) {
    return quant::quantize_row(type, src, dst, n, quant::QuantMethod::search);
  }
  if (n != f.n || n % kBlock != 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[gptq] a row of " + std::to_string(n) +
                                                 " columns against a factor of " + std::to_string(f.n));
  }
  const kernels::OpsTable& ops = kernels::ops();
  const size_t block_bytes = quant::traits(type).block_bytes;
  float* w = scratch;
  std::copy(src, src + n, w);
  auto* out = static_cast<uint8_t*>(dst);
  float err[kBlock];
  int q[kBlock];
  for (int64_t j0 = 0; j0 < n; j0 += kBlock) {
    void* block = out + (size_t)(j0 / kBlock) * block_bytes;
    quant::quantize_row_weighted(type, w + j0, block, kBlock, f.diag.data() + j0);
    const Grid g = grid_of(type, block);
    for (int j = 0; j < kBlock; ++j) {
      const int64_t c = j0 + j;
      const float* uc = f.u.data() + c * n;
      q[j] = g.level(w[c]);
      err[j] = (w[c] - g.value(q[j])) / uc[c];
      for (int k = j + 1; k < kBlock; ++k) w[j0 + k] -= err[j] * uc[j0 + k];
    }
    quant::set_block_levels(type, block, q);
    // The block's errors onto every later column at once.
    if (j0 + kBlock < n) {
      for (int j = 0; j < kBlock; ++j) {
        ops.axpy(-err[j], f.u.data() + (j0 + j) * n + j0 + kBlock, w + j0 + kBlock, n - j0 - kBlock);
      }
    }
  }
  return true;
}

}  // namespace lilims::models
