// The best rank-k approximation of a LoRA product B A (Eckart-Young: the k
// largest singular values of B A and their singular vectors), computed from
// the factors without forming the n_out x n_in product:
//
//   B = Qb Rb, A^T = Qa Ra            (QR, modified Gram-Schmidt, twice)
//   B A = Qb (Rb Ra^T) Qa^T           (an r x r core)
//   Rb Ra^T = U S V^T                 (one-sided Jacobi SVD)
//   B' = scale Qb U_k S_k^1/2,  A' = S_k^1/2 V_k^T Qa^T
//
// so that B' A' is scale times the best rank-k approximation of B A, with the
// singular values split evenly between the factors (their entries stay of
// like size, which F16 storage needs).  All arithmetic in double.
#pragma once

#include <cstdint>
#include <vector>

namespace lilims::models {

struct LowRankFactors {
  std::vector<float> b;  // n_out x k, row-major
  std::vector<float> a;  // k x n_in, row-major
  // The singular values of B A, largest first (r of them, zeros included).
  std::vector<double> singular;
  // The share of B A's squared Frobenius norm the k kept values hold: 1 for
  // a product of rank <= k (and for B A = 0).
  double kept = 1.0;
};

// b: n_out x r, a: r x n_in, both row-major; 1 <= k <= r.  Throws
// std::invalid_argument for sizes that do not fit.
LowRankFactors truncate_lora(const float* b, const float* a, int64_t n_out, int64_t n_in, int64_t r,
                             int64_t k, double scale);

}  // namespace lilims::models
