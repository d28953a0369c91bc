// The llama forward pass over a KV cache: a prompt of many tokens (in
// blocks of at most n_batch) or one token per step.  Written straight
// through, llama2.c style; the kernels it calls come from the dispatch
// tables, or from kernels/ref when the mode asks for the oracle.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/matmul.h"
#include "models/kv_storage.h"
#include "models/llama.h"
#include "quant/quant.h"

namespace lilims::models {

enum class ExecMode {
  fast,       // the active ISA's kernels (Q8 activations for quantized weights), F16 KV cache
  ref,        // kernels/ref scalar kernels, same arithmetic as `fast`, F16 KV cache
  oracle_f32, // weights dequantized to fp32, fp32 activations, F32 KV cache: the numerics oracle
};

struct ForwardConfig {
  ExecMode mode = ExecMode::fast;
  int32_t n_ctx = 2048;   // positions the KV cache holds
  int32_t n_batch = 64;   // tokens per block of prefill
  // KV cache element type: F16 (default), Q8_0 (head_dim % 32 == 0) or F32.
  // The oracle mode always uses F32.
  quant::Type kv_type = quant::Type::F16;
};

// What a context takes, known before it is built.
struct ContextFootprint {
  uint64_t kv_bytes = 0;       // K and V once every position is written
  uint64_t scratch_bytes = 0;  // one block's activations, RoPE rows, attention, matmul
  uint64_t total() const {  // saturating, as kv_bytes may be UINT64_MAX
    return kv_bytes > UINT64_MAX - scratch_bytes ? UINT64_MAX : kv_bytes + scratch_bytes;
  }
};

// One sequence's state: KV cache and scratch.  Allocated once; forward()
// allocates nothing.  The KV cache becomes resident as positions are
// written (models/kv_storage.h).
class LlamaContext {
 public:
  LlamaContext(const LlamaModel& model, const ForwardConfig& cfg, graph::ThreadPool& pool);

  // The memory a context for (hp, cfg) on n_threads threads takes once its
  // cache is full.  Throws lilims::Error for a configuration the
  // constructor would refuse.
  static ContextFootprint footprint(const LlamaHParams& hp, const ForwardConfig& cfg,
                                    int n_threads);

  // Runs tokens[0..n) at positions pos0..pos0+n-1 (pos0 + n <= n_ctx; the
  // cache must hold positions [0, pos0)).  logits receives n_vocab floats for
  // the last token, or for every token (n * n_vocab) when all_logits.
  // Token ids must be valid (the caller checks).
  void forward(const int32_t* tokens, int32_t n, int32_t pos0, float* logits, bool all_logits);

  int32_t n_ctx() const { return cfg_.n_ctx; }
  const ForwardConfig& config() const { return cfg_; }
  size_t kv_bytes() const { return kv_->bytes(); }
  // The sequence now keeps only positions [0, n_keep): the cache pages that
  // held nothing else go back to the system.
  void release_from(int32_t n_keep) { kv_->release_from(n_keep); }

 private:
  void block(const int32_t* tokens, int32_t n, int32_t pos0, float* logits, bool all_logits);
  void matmul(const Weight& w, const float* x, int64_t n, float* y);
  void store_kv(int layer, int32_t pos, const float* k, const float* v);

  const LlamaModel& model_;
  ForwardConfig cfg_;
  graph::ThreadPool& pool_;
  graph::MatmulScratch mm_scratch_;
  quant::Type kv_type_;
  size_t kv_row_bytes_ = 0;  // bytes of one position's K (or V) in one layer
  std::unique_ptr<KvStorage> kv_;  // K, V: (n_layer, n_ctx, n_head_kv, head_dim) of kv_type_
  // RoPE rows of the block's positions, (n_batch, n_rot / 2): computed per
  // block, as a table for the whole context would grow with n_ctx.
  std::vector<float> rope_cos_, rope_sin_;
  // scratch for one block: (n_batch, ...)
  std::vector<float> x_, xb_, q_, k_, v_, att_, gate_, up_;
  std::vector<float> attn_scratch_;  // per thread
  size_t attn_scratch_per_thread_ = 0;
};

}  // namespace lilims::models
