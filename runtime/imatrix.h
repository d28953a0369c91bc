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
#include "runtime/engine.h"

namespace lilims::runtime {

struct ImatrixOptions {
  int32_t n_ctx = 512;
  int32_t max_chunks = 0;  // <= 0: all
  int n_threads = 1;
  int32_t n_batch = 64;
};

// Throws LILIMS_ERR_INVALID_ARGUMENT when the text holds fewer than n_ctx
// tokens.  on_chunk (optional) sees (chunks done, chunks).
models::Imatrix collect_imatrix(const Model& model, const std::vector<int32_t>& tokens,
                                const ImatrixOptions& opt,
                                const std::function<void(int32_t, int32_t)>& on_chunk = {});

}  // namespace lilims::runtime
