// The matmul entry point of the graph executor: quantizes the activations
// once (split over the pool when there are several tokens), then splits the
// output into (row chunk, token chunk) tasks over the pool.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/thread_pool.h"
#include "kernels/cpu.h"
#include "kernels/matmul.h"

namespace lilims::graph {

struct MatmulScratch {  // reused across calls: no allocation in steady state
  std::vector<uint8_t> act;  // quantized activations (n rows of act_row_bytes)
};

// Y (n x W.rows, row stride ldy floats) = X (n x W.cols, row stride ldx) * W^T,
// on all pool threads, using the active ISA.
void matmul(const kernels::PackedWeight& W, const float* X, int64_t ldx, int64_t n, float* Y,
            int64_t ldy, ThreadPool& pool, MatmulScratch& scratch);

// Same with a forced path (Isa::ref runs the scalar integer kernels; a path
// this CPU cannot run falls back to ref kernel by kernel).
void matmul_isa(kernels::Isa isa, const kernels::PackedWeight& W, const float* X, int64_t ldx,
                int64_t n, float* Y, int64_t ldy, ThreadPool& pool, MatmulScratch& scratch);

// fp32 oracle: dequantize + fp32 dot, no activation quantization.
void matmul_f32_oracle(const kernels::PackedWeight& W, const float* X, int64_t ldx, int64_t n,
                       float* Y, int64_t ldy, ThreadPool& pool, MatmulScratch& scratch);

}  // namespace lilims::graph
