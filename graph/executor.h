// Runs a planned graph: a prompt in blocks of at most n_batch tokens, or one
// token per step, chunk by chunk on the persistent pool, over the KV cache.
// Everything it touches is allocated when it is built; forward() allocates
// nothing.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/ir.h"
#include "graph/kv_cache.h"
#include "graph/plan.h"
#include "graph/thread_pool.h"
#include "quant/quant.h"

namespace lilims::graph {

// Sees the input of every matmul before it runs: rows x w.cols floats, row
// stride lda (activation statistics for `lilims imatrix`).  Called on the
// thread that runs forward(), in graph order.
struct MatmulObserver {
  void (*fn)(void* user, const kernels::PackedWeight& w, const float* a, int64_t lda,
             int32_t rows) = nullptr;
  void* user = nullptr;
};

// One adapter's term at a lora node (Op::lora): out += scale * B (A a).
struct LoraTerm {
  const kernels::PackedWeight* a = nullptr;  // A: (rank, n_in), as the matmul kernels read it
  // Instead of a, at an embedding's lora node: A as a table (n_rows, rank),
  // row v for token v.
  const float* a_rows = nullptr;
  // B (n_out, rank) in Q8_0, its columns padded with zeros to a multiple of
  // 32, in pieces of kLoraPiece columns: piece p (columns [64p, 64p + w),
  // w = 64 but for a last piece of 32) holds rank rows of its w / 32 blocks,
  // contiguous (kernels OpsTable::lora_add), so a task reads its columns as
  // one stream.
  const void* b = nullptr;
  int32_t rank = 0;
  float scale = 0.0f;
};

constexpr int64_t kLoraPiece = 64;

// Rows [row0, row0 + n) of a batched forward: one sequence's tokens at its
// positions pos0.., attending over its own cache (which holds [0, pos0)).
struct BatchRun {
  KvCache* kv = nullptr;
  int32_t row0 = 0, n = 0, pos0 = 0;
};

class Executor {
 public:
  // Plans g for opt (throws lilims::Error for options it refuses, or
  // LILIMS_ERR_OUT_OF_MEMORY) and allocates everything.
  Executor(Graph g, const PlanOptions& opt, ThreadPool& pool, const ModelMemory& model = {},
           CommitHook hook = {});
  // Runs g with a plan already made for it (make_plan(g, ...) with
  // opt.n_threads = pool.size(); throws LILIMS_ERR_INTERNAL otherwise).
  Executor(Graph g, Plan plan, ThreadPool& pool, CommitHook hook = {});
  ~Executor();

 private:
  void allocate(CommitHook hook);

 public:

  // Runs tokens[0..n) at positions pos0..pos0+n-1 (pos0 + n <= n_ctx; the
  // cache must hold positions [0, pos0)).  logits receives n_vocab floats for
  // the last token, or for every token (n * n_vocab) when all_logits, or
  // nothing when null.  Token ids must be valid (the caller checks).
  // Commits may still run when it returns (async); anything that reads the
  // cache itself calls sync() first.
  void forward(const int32_t* tokens, int32_t n, int32_t pos0, float* logits, bool all_logits);
  // forward() with the arithmetic of running the tokens one
  // at a time: each token's logits are bit-identical to what a one-token
  // forward at its position gives.  A block's attention otherwise tiles its
  // query tokens together, summing in another order than decode's per-head
  // lanes; the matmuls already give each token the same sums either way.
  // For verifying drafted tokens (speculative decoding).
  void forward_as_decode(const int32_t* tokens, int32_t n, int32_t pos0, float* logits,
                         bool all_logits);

  // Many sequences in one block: runs[0..n_runs) cover rows [0, m) in
  // order (m = the sum of their n, at most n_batch), each its own sequence
  // with its own cache (make_sequence_cache).  Every matmul runs once over
  // all m rows; attention, RoPE and the KV commit go per run.  logits
  // receives each run's last row's (n_runs * n_vocab floats), bit-identical
  // to what forward_as_decode gives that sequence alone: matmul rows do not
  // interact, and attention takes each row as a one-token decode.  The
  // executor's own cache only stages the rows (its committed rows are left
  // alone).  Throws LILIMS_ERR_CONTEXT_FULL for a run past n_ctx.
  void forward_batch(const int32_t* tokens, const BatchRun* runs, int n_runs, float* logits);
  // A cache for one sequence of forward_batch: this executor's layout,
  // committed on the calling thread.
  std::unique_ptr<KvCache> make_sequence_cache() const;

  // The adapters' terms for each lora slot of the graph (terms[slot], slot
  // indexing Graph::lora_targets(); fewer entries than slots: none for the
  // rest), replacing those set before; empty: no adapter.  Each term's A
  // and B must match its slot's shape and outlive their use.  Allocates the
  // terms' scratch here, so forward() still allocates nothing.  Throws
  // lilims::Error (INVALID_ARGUMENT) for a shape that does not match.
  void set_lora(const std::vector<std::vector<LoraTerm>>& terms);

  // Set before forward(); an empty observer (the default) costs one branch
  // per matmul.
  void set_matmul_observer(MatmulObserver o) { observer_ = o; }

  // forward() with the rows given as embeddings instead of token ids: n rows
  // of the embedding width (an image's projected features) at positions
  // pos0.., evaluated as prefill blocks like tokens.
  void forward_embd(const float* embd, int32_t n, int32_t pos0, float* logits, bool all_logits);
  // An encoder graph (ModelShape::n_layer == 0, no KV cache): runs its n rows
  // (1 <= n <= n_batch) from input (n rows of the input node's width) in one
  // block and writes every output row to out (n_out rows of n_vocab floats,
  // n_out being n less the rows drop_rows removes).  forward() is for graphs
  // with a cache; encode() for those without.
  void encode(const float* input, int32_t n, float* out);

  const Graph& graph() const { return graph_; }
  const Plan& plan() const { return plan_; }
  int32_t n_ctx() const { return plan_.opt.n_ctx; }
  size_t kv_bytes() const { return kv_ ? kv_->bytes() : 0; }
  uint64_t kv_resident_bytes() const { return kv_ ? kv_->resident_bytes() : 0; }
  void sync() {
    if (kv_) kv_->sync();
  }
  // The sequence now keeps only positions [0, n_keep).
  void release_from(int32_t n_keep) { kv_->release_from(n_keep); }
  // The committed cache, for saving and restoring a session's state (sync()
  // before reading it).
  const KvCache& kv_cache() const { return *kv_; }
  KvCache& kv_cache() { return *kv_; }

 private:
  void block(const int32_t* tokens, int32_t m, int32_t pos0, float* logits, bool all_logits);
  void run(const Node& n, size_t index, int32_t& rows, int32_t m, int32_t pos0,
           const int32_t* tokens, bool all_logits);
  // A run of row-wise nodes [begin, end) (see run_rows); quant: the step of
  // the matmul at end, which reads the run's last output, when its
  // activations are quantized.
  struct RowRun {
    size_t end = 0;
    const MatmulStep* quant = nullptr;
  };
  void run_rows(const RowRun& run, size_t begin, int32_t rows);
  void row_op(const Node& n, int32_t t0, int32_t t1);
  void attention(const Node& n, int32_t m, int32_t pos0);
  // An attention node's arguments but for the queries' count and positions
  // (the block's staged rows rounded first).
  kernels::AttentionArgs attention_args(const Node& n, int32_t m);
  void attention_decode(const kernels::AttentionArgs& args, int32_t t0, int32_t nt);
  // attention_decode's tasks for nt query rows, row i's arguments from
  // row_args(i) (n_q 1, its own pos0, cache, staged rows and output).
  template <class RowArgs>
  void attention_rows(int32_t nt, const RowArgs& row_args);
  // forward_batch's attention: every run's rows as one-token decodes.
  void attention_batch(const Node& n, int32_t m);
  void self_attention(const Node& n, int32_t rows);
  void round_staged(int layer, int32_t m);
  // The lora nodes [first, lora_group_end_[first]), which read one input.
  void lora(size_t first, int32_t rows, const int32_t* tokens);
  static constexpr int kMaxLoraItems = 64;     // adapter terms in one group
  static constexpr int32_t kLoraDecodeRows = 4;  // up to this many rows: columns split over tasks
  static constexpr int32_t kLoraRowChunk = 16;   // else: rows per task
  float* ptr(int t) const { return base_[(size_t)t]; }
  int64_t ld(int t) const { return stride_[(size_t)t]; }

  Graph graph_;
  Plan plan_;
  ThreadPool& pool_;
  std::unique_ptr<KvCache> kv_;  // null for an encoder graph
  const float* input_ = nullptr;  // encode()'s rows, for the input node
  const float* embd_ = nullptr;   // forward_embd()'s rows, for the embed node
  const float* embd_block_ = nullptr;  // the current block's first row of embd_
  float* arena_ = nullptr;
  uint8_t* act_ = nullptr;
  float* attn_scratch_ = nullptr;
  float* attn_part_ = nullptr;  // split decode attention's partial sums
  uint8_t* round_tmp_ = nullptr;  // one K/V row in the cache type
  std::vector<float*> base_;     // per tensor: its first element (logits: set per call)
  std::vector<int64_t> stride_;  // per tensor: floats between rows
  int logits_tensor_ = -1;
  std::vector<int> logits_views_;  // the tensors whose root is the logits (their base is set per call)
  // Resolved here, not per call: the embedding table's row conversion, and Q8_0's.
  int embed_out_ = -1;  // the embed node's output tensor
  const quant::TypeTraits* q8_0_traits_ = nullptr;
  bool attention_per_token_ = false;  // set for the life of forward_as_decode
  // Set for the life of forward_batch: its runs, and each row's position.
  const BatchRun* batch_runs_ = nullptr;
  int batch_n_runs_ = 0;
  std::vector<int32_t> row_pos_;  // (n_batch)
  MatmulObserver observer_;
  std::vector<RowRun> row_runs_;  // per node; only a run's first node is looked at
  int act_ready_ = -1;  // the matmul node whose quantized activations are in act_
  struct LoraRun {
    LoraTerm term;
    MatmulStep step;  // A's kernels
  };
  std::vector<std::vector<LoraRun>> lora_;  // per lora slot
  std::vector<size_t> lora_group_end_;      // per node: one past its group when it starts one, else 0
  std::vector<size_t> slot_node_;           // per lora slot: its node
  std::vector<float> lora_t_;               // A a of a block: rows x the group's ranks
  std::vector<uint8_t> lora_act_;           // the block's activations quantized for A
};

}  // namespace lilims::graph
