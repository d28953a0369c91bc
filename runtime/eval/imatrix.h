// `lilims imatrix`: the importance matrix of a model on a text
// (models/imatrix.h).  The text's tokens are split into chunks of n_ctx as
// perplexity() splits them (each from an empty cache, its first token
// replaced by BOS when the vocabulary adds BOS); every matmul's input rows
// are accumulated, all positions of every chunk (the LM head's too: with
// tied embeddings its entry is token_embd.weight's).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "models/imatrix.h"
#include "models/requantize.h"
#include "runtime/engine.h"

namespace lilims::runtime {

struct ImatrixOptions {
  int32_t n_ctx = 512;
  int32_t max_chunks = 0;  // <= 0: all
  int n_threads = 1;
  int32_t n_batch = 64;
  // Also the second moments E[x x^T] of each matmul's input (n_cols^2
  // floats per distinct input), for models::quantize_row_gptq.
  bool second_moments = false;
};

struct Calibration {
  models::Imatrix imatrix;
  // By weight name, (n_cols, n_cols) row-major, the lower triangle (j <= i)
  // filled; weights that read the same input (attn_q, attn_k and attn_v;
  // ffn_gate and ffn_up) share one matrix.  Empty unless asked for.
  gguf::SecondMoments moments;
};

// Throws LILIMS_ERR_INVALID_ARGUMENT when the text holds fewer than n_ctx
// tokens.  on_chunk (optional) sees (chunks done, chunks).
Calibration calibrate(const Model& model, const std::vector<int32_t>& tokens, const ImatrixOptions& opt,
                      const std::function<void(int32_t, int32_t)>& on_chunk = {});
models::Imatrix collect_imatrix(const Model& model, const std::vector<int32_t>& tokens,
                                const ImatrixOptions& opt,
                                const std::function<void(int32_t, int32_t)>& on_chunk = {});

}  // namespace lilims::runtime
