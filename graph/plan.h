// The planner: lays a graph out for one (context length, batch size,
// thread count, kernel path) before the first token.  Every arena tensor
// gets an offset by liveness, every matmul its kernels (resolved here, never
// per call) and its split across threads for a decode step and for a full
// prefill block, and the memory a session will take is known.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/kv_cache.h"
#include "graph/matmul.h"
#include "kernels/ops.h"

namespace lilims::graph {

enum class ExecMode {
  fast,       // the active ISA's kernels (Q8 activations for quantized weights), F16 KV cache
  ref,        // kernels/ref scalar kernels, same arithmetic as `fast`
  oracle_f32, // weights dequantized to fp32, fp32 activations, F32 KV cache: the numerics oracle
};
const char* exec_mode_name(ExecMode m);

struct PlanOptions {
  int32_t n_ctx = 2048;   // positions the KV cache holds
  int32_t n_batch = 256;  // tokens per prefill block (capped at n_ctx)
  int n_threads = 1;
  ExecMode mode = ExecMode::fast;
  quant::Type kv_type = quant::Type::F16;  // F16, Q8_0 (head_dim % 32 == 0) or F32; oracle: F32
  KvCommit kv_commit = KvCommit::sync;
};

// Query tokens per call of split decode attention (forward_as_decode runs
// a block this many tokens at a time).
constexpr int kAttnPartTokens = 4;

struct MemoryPlan {
  uint64_t arena = 0;          // activations of one block, by liveness
  uint64_t matmul_act = 0;     // quantized activations of the widest matmul
  uint64_t attn_scratch = 0;   // per thread x threads, and split decode's partial sums
  uint64_t staging = 0;        // staged K/V rows (2 sets)
  uint64_t round_tmp = 0;      // one K/V row in the cache type
  uint64_t kv = 0;             // the cache once every position is written
  uint64_t logits = 0;         // the session's last-token logits
  // What the model brings (graph/ does not know models; the caller says):
  uint64_t weights_mapped = 0; // weight bytes the kernels read from the file mapping
  uint64_t weights_heap = 0;   // repacked and re-quantized weight copies
  uint64_t embed_rows = 0;     // embedding rows a full context can touch (mapped pages)
  uint64_t file_header = 0;    // the file's metadata and the copied tensors' edge pages (mapped)
  uint64_t model_host = 0;     // tokenizer, vocabulary and other host structures
  // What a session adds to a loaded model (everything but the weights).
  uint64_t session() const;
  // Session plus the model: the peak once the context is full.
  uint64_t total() const;
};

struct Plan {
  PlanOptions opt;
  const kernels::OpsTable* ops = nullptr;
  std::vector<int64_t> offset;   // per tensor: byte offset of its root in the arena, or -1
  std::vector<MatmulStep> mm;    // per node: its matmul step (matmul nodes only)
  std::vector<int> block_chunk;  // per chunk: its index among the block chunks, or -1
  KvCacheConfig kv;
  size_t attn_scratch_floats = 0;  // per thread
  // Decode attention cut into key ranges (kernels::attention_splits): the
  // partial outputs and lse of up to kAttnPartTokens tokens, after the
  // per-thread scratch.
  size_t attn_part_floats = 0;
  MemoryPlan mem;

  // The plan in words: chunks and their ops, buffers, memory.
  std::string describe(const Graph& g) const;
};

struct ModelMemory {
  uint64_t weights_mapped = 0, weights_heap = 0, embed_rows = 0, file_header = 0, host = 0;
};

// Throws lilims::Error for options the graph cannot run with.
Plan make_plan(const Graph& g, const PlanOptions& opt, const ModelMemory& model = {});

}  // namespace lilims::graph
