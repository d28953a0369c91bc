#include "graph/matmul.h"

#include <algorithm>

#include "kernels/ref/matmul_ref.h"
#include "quant/quant.h"
#include "quant/repack.h"

namespace lilims::graph {

using kernels::PackedWeight;

// Row chunks are multiples of the layout's group (4 or 16 rows).  Decode: at least
// 4 chunks per thread and at most ~128 KiB of weights per chunk, so a thread
// the OS deschedules (a noisy neighbour) holds up at most one small chunk
// while the others take the rest.  Prefill: 32-row chunks x 64-token
// chunks, so a task's weights (32 x K) and activations (64 x K) stay in L2
// while it runs.
MatmulSplit matmul_split(int64_t rows, size_t row_bytes, int64_t n, int threads, int group) {
  MatmulSplit s;
  if (n <= 4) {
    s.row_chunk = (rows + 4 * threads - 1) / (4 * threads);
    s.row_chunk = std::min<int64_t>(s.row_chunk, (int64_t)((128u << 10) / std::max<size_t>(1, row_bytes)));
    s.row_chunk = std::max<int64_t>(16, (s.row_chunk + group - 1) / group * group);
    s.tok_chunk = n;
  } else {
    s.row_chunk = 32;
    s.tok_chunk = 64;
  }
  s.n_row_chunks = (rows + s.row_chunk - 1) / s.row_chunk;
  s.n_tok_chunks = (n + s.tok_chunk - 1) / s.tok_chunk;
  return s;
}

MatmulStep matmul_step(kernels::Isa isa, bool oracle, const PackedWeight& W, int n_batch,
                       int threads) {
  MatmulStep s;
  const size_t rb = quant::row_bytes(W.type, W.cols);
  const int group = quant::layout_group_rows(W.layout);
  s.decode = matmul_split(W.rows, rb, 1, threads, group);
  s.batch = matmul_split(W.rows, rb, n_batch, threads, group);
  if (oracle) return s;
  s.kern = &kernels::select_matmul_kernel(isa, W.type, W.layout);
  s.quant = kernels::select_quantize_kernel(isa, W.type);
  if (s.quant) s.act_stride = kernels::act_row_bytes(W.type, W.cols);
  return s;
}

void run_matmul(const MatmulStep& step, const PackedWeight& W, const float* X, int64_t ldx,
                int64_t n, float* Y, int64_t ldy, ThreadPool& pool, uint8_t* act,
                bool act_ready) {
  if (n <= 0) return;
  if (!step.kern) {  // the fp32 oracle
    const int64_t chunk = 16;
    pool.parallel_for((W.rows + chunk - 1) / chunk, [&](int64_t task, int) {
      const int64_t r0 = task * chunk, r1 = std::min(W.rows, r0 + chunk);
      kernels::matmul_dequant_f32__ref(W, r0, r1, X, ldx, n, Y, ldy);
    });
    return;
  }
  const void* a = X;
  size_t act_stride = (size_t)ldx * sizeof(float);
  if (step.quant) {
    act_stride = step.act_stride;
    if (!act_ready && n == 1) {
      quantize_rows(step, X, ldx, 0, 1, W.cols, act);  // too small to be worth a barrier
    } else if (!act_ready) {
      const int64_t per = std::max<int64_t>(1, n / (4 * pool.size()));
      pool.parallel_for((n + per - 1) / per, [&](int64_t task, int) {
        quantize_rows(step, X, ldx, task * per, std::min(n, (task + 1) * per), W.cols, act);
      });
    }
    a = act;
  }
  MatmulSplit s;
  if (n == 1) {
    s = step.decode;
  } else if (n > 4 && step.batch.tok_chunk > 4) {  // the block split, fewer token chunks
    s = step.batch;
    s.n_tok_chunks = (n + s.tok_chunk - 1) / s.tok_chunk;
  } else {
    s = matmul_split(W.rows, quant::row_bytes(W.type, W.cols), n, pool.size(),
                     quant::layout_group_rows(W.layout));
  }
  const auto* ab = static_cast<const uint8_t*>(a);
  const kernels::MatmulKernelFn fn = step.kern->fn;
  pool.parallel_for(s.n_row_chunks * s.n_tok_chunks, [&](int64_t task, int) {
    const int64_t rc = task / s.n_tok_chunks, tc = task % s.n_tok_chunks;
    const int64_t r0 = rc * s.row_chunk, r1 = std::min(W.rows, r0 + s.row_chunk);
    const int64_t j0 = tc * s.tok_chunk, j1 = std::min(n, j0 + s.tok_chunk);
    fn(W, r0, r1, ab + j0 * act_stride, act_stride, j1 - j0, Y + j0 * ldy, ldy);
  });
}

void matmul_isa(kernels::Isa isa, const PackedWeight& W, const float* X, int64_t ldx, int64_t n,
                float* Y, int64_t ldy, ThreadPool& pool, MatmulScratch& scratch) {
  if (n <= 0) return;
  const MatmulStep step = matmul_step(isa, false, W, (int)std::min<int64_t>(n, INT32_MAX), pool.size());
  if (step.quant && scratch.act.size() < step.act_stride * n) scratch.act.resize(step.act_stride * n);
  run_matmul(step, W, X, ldx, n, Y, ldy, pool, scratch.act.data());
}

void matmul(const PackedWeight& W, const float* X, int64_t ldx, int64_t n, float* Y, int64_t ldy,
            ThreadPool& pool, MatmulScratch& scratch) {
  matmul_isa(kernels::active_isa(), W, X, ldx, n, Y, ldy, pool, scratch);
}

void matmul_f32_oracle(const PackedWeight& W, const float* X, int64_t ldx, int64_t n, float* Y,
                       int64_t ldy, ThreadPool& pool, MatmulScratch&) {
  MatmulStep oracle;
  run_matmul(oracle, W, X, ldx, n, Y, ldy, pool, nullptr);
}

}  // namespace lilims::graph
