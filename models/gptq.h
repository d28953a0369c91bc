// Quantization with error compensation across columns (GPTQ: Frantar et
// al., "GPTQ: Accurate Post-Training Quantization for Generative
// Pre-trained Transformers", 2022), for the block formats.
//
// A weight row w (n columns) meets inputs x whose second moment over a text
// is H = E[x x^T] (n x n).  The output error of a quantized row y is
// (w - y)^T H (w - y); rounding column by column and moving each column's
// error onto the columns not yet rounded, along the rows of U, the upper
// Cholesky factor of H^-1 (U^T U = H^-1), makes that error smaller than
// rounding every column alone.  Per column j, in order:
//   y_j = the nearest level of j's block;  e_j = (w_j - y_j) / U_jj;
//   w_c -= e_j U_jc for every c > j.
// Blocks of 32 share a scale (and Q4_1 a minimum): when a row reaches a
// block, its scale is chosen from the columns' current values by the
// weighted search (quantize_row_weighted, weighted by H's diagonal, which
// is what `lilims imatrix` collects), then its columns are rounded one by
// one with it.  H is damped first: H + lambda * mean(diag H) * I, lambda
// 0.01 (raised tenfold until the factorisation succeeds), as the paper
// does, so that columns that never see an input keep a finite step.  The
// factorisation runs in float, as the paper's does; its loops are the ops
// table's axpy (kernels/ops.h).
#pragma once

#include <cstdint>
#include <vector>

#include "quant/quant.h"

namespace lilims::models {

struct GptqFactor {
  int64_t n = 0;
  std::vector<float> u;      // (n, n) row-major, upper triangle: U above
  std::vector<float> diag;   // (n) the undamped diagonal of H (block scale weights)
  double damping = 0.0;      // the lambda * mean(diag H) added
};

// h: (n, n) row-major, symmetric (only the lower triangle, j <= i, is
// read).  Throws lilims::Error LILIMS_ERR_INVALID_ARGUMENT for n < 1 or a
// non-finite entry.  A zero matrix (no input seen) gives the identity
// factor, so the rows are then rounded as the weighted search alone would
// round them with equal weights.
GptqFactor gptq_factor(const float* h, int64_t n);

// Quantizes one row (n floats, n a multiple of 32, n == f.n) to `type`
// (a type with quant::kQuantGptq: Q4_0, Q4_1, Q8_0; any other weight type
// is quantized by quantize_row's search); returns false for a type that is
// not a weight type.  scratch: n floats.
bool quantize_row_gptq(quant::Type type, const float* src, void* dst, int64_t n, const GptqFactor& f,
                       float* scratch);

}  // namespace lilims::models
