// One graph builder per architecture: each emits the nodes of its model from
// the hyperparameters and weights, in the spirit of llama2.c's forward(); the
// pieces the architectures share (the attention sub-block, the SwiGLU MLP)
// are shared functions.  The scalar oracle and the fast path run the same
// graph with different kernel tables (graph/plan.h).
#pragma once

#include <cstdint>

#include "graph/ir.h"
#include "graph/plan.h"
#include "models/model.h"

namespace lilims::models {

using graph::ExecMode;

struct BuildOptions {
  int32_t n_ctx = 2048;  // picks Phi-3's short or long RoPE factors
  int chunk_layers = 3;  // transformer blocks per chunk
  // A lora node after every projection's matmul (graph::Op::lora), one per
  // file tensor (a stacked weight's parts each get their own, on their rows
  // of the output), so that adapters can be set on the executor.
  bool lora = false;
};

// Throws lilims::Error (LILIMS_ERR_INVALID_ARGUMENT for chunk_layers < 1).
graph::Graph build_graph(const Model& m, const BuildOptions& opt);

// The RoPE factors a context of n_ctx uses (llama.cpp's rule for Phi-3: the
// long set whenever the context exceeds the original one), or null.
const float* rope_factors(const Model& m, int32_t n_ctx);

}  // namespace lilims::models
