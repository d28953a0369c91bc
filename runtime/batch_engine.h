// A Batch (runtime/batch.h) behind a bounded queue, stepped by a thread of
// its own: any thread submits requests and cancels them; each request's
// callbacks run on the engine's thread.  What `lilims serve` runs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/batch.h"

namespace lilims::runtime {

struct BatchRequest {
  std::vector<int32_t> prompt;  // token ids, BOS included when wanted
  GenerateOptions opt;          // opt.on_token runs on the engine's thread
  // Runs on the engine's thread exactly once: when the sequence ends, when
  // the request is cancelled before it started, or when the batch refused it.
  Batch::Done done;
  // Set from any thread; the request ends (StopReason::cancelled) at the
  // next step boundary, or leaves the queue without running.
  std::shared_ptr<std::atomic<bool>> cancel = std::make_shared<std::atomic<bool>>(false);
};

class BatchEngine {
 public:
  // max_queued: requests that may wait for a free sequence slot.
  BatchEngine(const Model& model, const BatchOptions& opt, size_t max_queued);
  // Cancels every request (their done callbacks run) and joins the thread.
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Throws lilims::Error for what Batch::add would refuse (the options, a
  // prompt that does not fit the context), so that a caller can answer
  // before queueing.
  void check(const std::vector<int32_t>& prompt, const GenerateOptions& opt) const;
  // Queues a request; false (nothing queued, done not called) when
  // max_queued requests are waiting already.
  bool submit(BatchRequest r);

  size_t n_queued() const;
  int n_running() const { return running_.load(std::memory_order_relaxed); }
  int32_t n_ctx() const { return batch_->n_ctx(); }
  int n_seq() const { return batch_->n_seq(); }
  const Model& model() const { return batch_->model(); }
  // Steps and rows evaluated (see Batch).
  uint64_t n_steps() const { return steps_.load(std::memory_order_relaxed); }
  uint64_t n_rows() const { return rows_.load(std::memory_order_relaxed); }

  // Called on the engine's thread before each step (tests inject delays).
  void set_step_hook(std::function<void()> hook);

 private:
  void loop();

  std::unique_ptr<Batch> batch_;
  const size_t max_queued_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<BatchRequest> queue_;  // under mu_
  bool stop_ = false;               // under mu_
  std::function<void()> step_hook_;  // under mu_ (copied per step)
  std::atomic<int> running_{0};
  std::atomic<uint64_t> steps_{0}, rows_{0};
  std::thread thread_;
};

}  // namespace lilims::runtime
