// Many sequences, one model, one forward pass per step.  Each sequence has
// its own KV cache, positions, sampler, constraint and stop rules (a
// Generation, runtime/generation.h); a step samples the next token of every
// sequence that has logits and evaluates all of them, with a block of the
// prompt of sequences still reading theirs, as one graph::Executor::
// forward_batch: every weight is read once for all rows.  Sequences join
// (add) and leave (when they end) at step boundaries.
//
// A sequence's logits are bit-identical to those of a Session evaluating
// the same tokens with eval_all_logits_as_decode (a prompt as one-token
// steps); a Session's prompt block (eval) sums its attention in another
// order, within float rounding of these, so greedy text agrees unless two
// tokens tie within that rounding.
//
// Not thread-safe but for cancel(): one thread adds and steps.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/executor.h"
#include "lilims/lilims.h"
#include "runtime/engine.h"

namespace lilims::runtime {

struct BatchOptions {
  int32_t n_ctx = 0;      // per sequence; 0: resolve_n_ctx as a Session does
  int32_t n_seq = 4;      // sequences at once (each has its own KV cache)
  int32_t n_threads = 0;  // 0: hardware concurrency
  // Rows one step evaluates at most: every sequence's next token, then
  // prompt blocks of sequences reading theirs.
  int32_t n_batch = 128;
  quant::Type kv_type = quant::Type::F16;
  int chunk_layers = 3;
  graph::ExecMode mode = graph::ExecMode::fast;
  bool allow_ctx_beyond_train = false;
  graph::PoolHook pool_hook;  // called at the thread pool's race points (tests inject delays)
};

class Batch {
 public:
  // Throws lilims::Error as a Session would for the same options.
  Batch(const Model& model, const BatchOptions& opt);
  ~Batch();

  // What a finished sequence reports: its result, or an error that ended it
  // (status != LILIMS_OK; the result holds what was generated before).
  using Done = std::function<void(GenerateResult& r, lilims_status status, const std::string& error)>;

  // Starts a sequence for `prompt` (token ids, BOS included if wanted) in a
  // free slot: the one whose cache shares the longest prefix with it, which
  // is kept (GenerateResult::n_reused_tokens).  Returns the slot, or -1
  // when every slot is busy.  Every option is checked first (throws as
  // Session::generate does; ContextPolicy::shift and n_draft are refused).
  // opt.on_token and done run on the thread that calls step().  `cancel`
  // (may be null) is read at each step: once true the sequence ends with
  // StopReason::cancelled.
  // add's checks alone (throws what add would).
  void check(const std::vector<int32_t>& prompt, const GenerateOptions& opt) const;
  int add(const std::vector<int32_t>& prompt, const GenerateOptions& opt, Done done,
          const std::atomic<bool>* cancel = nullptr);
  // One step (see the header comment).  Returns the sequences still running.
  int step();

  int n_active() const;
  int n_free() const { return opt_.n_seq - n_active(); }
  int32_t n_ctx() const { return exec_->n_ctx(); }
  int n_seq() const { return opt_.n_seq; }
  const Model& model() const { return model_; }
  // Steps run and rows evaluated so far (rows / steps: the batch's width).
  uint64_t n_steps() const { return n_steps_; }
  uint64_t n_rows() const { return n_rows_; }

 private:
  struct Seq;
  void check_prompt(const std::vector<int32_t>& prompt, const GenerateOptions& opt) const;
  void finish(Seq& s, lilims_status status = LILIMS_OK, const std::string& error = "");
  // Samples and accepts the next token(s) of a sequence with logits; false
  // when it ended.
  bool propose(Seq& s);

  const Model& model_;
  BatchOptions opt_;
  std::unique_ptr<graph::ThreadPool> pool_;
  std::unique_ptr<graph::Executor> exec_;
  std::vector<std::unique_ptr<Seq>> seqs_;
  std::vector<int32_t> rows_;           // (n_batch) token ids of a step
  std::vector<graph::BatchRun> runs_;   // (n_seq)
  std::vector<Seq*> run_seq_;           // (n_seq) the sequence of each run
  std::vector<float> logits_;           // (n_seq, n_vocab) each run's last row
  uint64_t n_steps_ = 0, n_rows_ = 0, n_used_ = 0;
};

}  // namespace lilims::runtime
