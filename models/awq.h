// Activation-aware per-column scaling folded into the model (after Lin et
// al., "AWQ: Activation-aware Weight Quantization for LLM Compression and
// Acceleration", 2023), ahead of quantization.
//
// The weights that read one RMSNorm's output (attn_q/k/v read attn_norm's,
// ffn_gate/up ffn_norm's) see input column j as g_j * u_j, g the norm's
// weight.  Multiplying column j of each of them by s_j and dividing g_j by
// s_j leaves the float model's outputs as they were (the norm weight stays
// F32, so the fold is exact up to float rounding), while the quantizer now
// rounds W s: columns with a large input (s_j > 1) get a finer step
// relative to their weights.  (ffn_down's inputs, the SwiGLU product, could
// take the same through up's rows; on SmolLM2-135M Q4_0 with 8 calibration
// chunks that raised the KLD to 0.0754 from 0.0706, so it is not done.)
// Per group, s_j = r_j^alpha / sqrt(max r^alpha * min r^alpha), r_j the
// input's root mean square (sqrt of H_jj, H the
// second moments E[x x^T]); alpha is the value on a grid of 0, 0.1, .., 1
// whose quantized group has the least output error
//   sum over rows of e^T H e,  e = w - Q(w s) / s,
// Q the weighted scale search (quantize_row_weighted, weights diag H / s^2,
// what the error-compensated pass uses for its block scales), on a sample
// of each weight's rows.  alpha 0 is s = 1: the model and the moments are
// left as they were.  The scaled weights' inputs are x / s, so their
// second moments become diag(1/s) H diag(1/s), which the error-compensated
// pass (models/gptq.h) then reads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "models/requantize.h"
#include "quant/quant.h"

namespace lilims::models {

// s for one group from H's diagonal (n values) and alpha in [0, 1]; a
// column that never saw an input (H_jj 0) takes the smallest positive r.
std::vector<float> awq_scales(const float* h_diag, int64_t n, double alpha);

// The output error sum_rows e^T H e of quantizing the given rows (each n
// floats, n a multiple of the type's block) to `type` after scaling their
// columns by s (null: 1).  h: (n, n) row-major, full (both triangles).
double awq_error(quant::Type type, const std::vector<const float*>& rows, int64_t n, const float* h,
                 const float* s);

struct AwqOptions {
  std::vector<double> alphas = {0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  int64_t max_sample_rows = 96;  // rows of each weight scored per alpha (evenly spaced)
  int n_threads = 1;
};

struct AwqGroupChoice {
  std::string norm;  // e.g. blk.0.attn_norm.weight
  double alpha = 0.0;
  double error_unscaled = 0.0, error = 0.0;
};

// The folded tensors (all as float: the norms and the scaled weights, by
// name) and the moments the scaled weights read.
struct AwqFold {
  std::map<std::string, std::vector<float>> tensors;
  gguf::SecondMoments moments;  // every entry of the input, rescaled where folded
  std::vector<AwqGroupChoice> choices;
};

// The groups of a llama-style model (blk.N.attn_norm -> attn_q/k/v,
// blk.N.ffn_norm -> ffn_gate/up) whose members all have second moments
// (one shared matrix) and a norm weight of the right length.  type_of
// gives the type a weight is quantized to (its error is scored in it; a
// group whose members none go to Q4_0/Q4_1/Q8_0 is left alone).
AwqFold awq_fold(const gguf::File& in, const gguf::SecondMoments& moments,
                 const std::function<quant::Type(const std::string&)>& type_of, const AwqOptions& opt = {});

}  // namespace lilims::models
