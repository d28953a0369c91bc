// The matmul of the graph executor: quantizes the activations once (split
// over the pool when there are several tokens), then splits the output into
// (row chunk, token chunk) tasks over the pool.  The kernels are resolved
// once into a MatmulStep by the planner; the convenience entry points below
// resolve them per call (tests and benchmarks).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/thread_pool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"

namespace lilims::graph {

// How a matmul's output is cut into tasks.
struct MatmulSplit {
  int64_t row_chunk = 0, tok_chunk = 0, n_row_chunks = 0, n_tok_chunks = 0;
};
// group: the weight layout's rows per group (row chunks are multiples of it).
MatmulSplit matmul_split(int64_t rows, size_t row_bytes, int64_t n, int threads, int group);

struct MatmulStep {
  const kernels::MatmulKernel* kern = nullptr;    // null: the fp32 oracle
  const kernels::QuantizeKernel* quant = nullptr; // null: F32 activations
  size_t act_stride = 0;                          // bytes of one quantized row
  MatmulSplit decode, batch;                      // for 1 token and a full block
};

// Resolves the kernels of `isa` for W (oracle: dequantize + fp32 dot).
MatmulStep matmul_step(kernels::Isa isa, bool oracle, const kernels::PackedWeight& W,
                       int n_batch, int threads);

// Y (n x W.rows, row stride ldy floats) = X (n x W.cols, row stride ldx) * W^T.
// act: n * step.act_stride bytes when step.quant is set; act_ready: it
// already holds X quantized (the executor quantizes rows as it makes them).
void run_matmul(const MatmulStep& step, const kernels::PackedWeight& W, const float* X,
                int64_t ldx, int64_t n, float* Y, int64_t ldy, ThreadPool& pool, uint8_t* act,
                bool act_ready = false);

// Rows [j0, j1) of X (row stride ldx, W's cols columns) quantized into
// act as run_matmul reads them (step.quant must be set).
inline void quantize_rows(const MatmulStep& step, const float* X, int64_t ldx, int64_t j0,
                          int64_t j1, int64_t cols, uint8_t* act) {
  for (int64_t j = j0; j < j1; ++j) step.quant->fn(X + j * ldx, act + (size_t)j * step.act_stride, cols);
}

struct MatmulScratch {  // reused across calls
  std::vector<uint8_t> act;
};

// Resolving per call: the active ISA, a forced one (Isa::ref runs the scalar
// integer kernels; a path this CPU cannot run falls back to ref kernel by
// kernel), and the fp32 oracle.
void matmul(const kernels::PackedWeight& W, const float* X, int64_t ldx, int64_t n, float* Y,
            int64_t ldy, ThreadPool& pool, MatmulScratch& scratch);
void matmul_isa(kernels::Isa isa, const kernels::PackedWeight& W, const float* X, int64_t ldx,
                int64_t n, float* Y, int64_t ldy, ThreadPool& pool, MatmulScratch& scratch);
void matmul_f32_oracle(const kernels::PackedWeight& W, const float* X, int64_t ldx, int64_t n,
                       float* Y, int64_t ldy, ThreadPool& pool, MatmulScratch& scratch);

}  // namespace lilims::graph
