#include "runtime/batch_engine.h"

#include "base/error.h"

namespace lilims::runtime {

BatchEngine::BatchEngine(const Model& model, const BatchOptions& opt, size_t max_queued)
    : batch_(std::make_unique<Batch>(model, opt)), max_queued_(max_queued) {
  thread_ = std::thread([this] { loop(); });
}

BatchEngine::~BatchEngine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BatchEngine::check(const std::vector<int32_t>& prompt, const GenerateOptions& opt) const {
  batch_->check(prompt, opt);
}

bool BatchEngine::submit(BatchRequest r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(r));
  }
  cv_.notify_all();
  return true;
}

size_t BatchEngine::n_queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void BatchEngine::set_step_hook(std::function<void()> hook) {
  std::lock_guard<std::mutex> lock(mu_);
  step_hook_ = std::move(hook);
}

namespace {

// A request that never ran ends with an empty result.
void end_unstarted(BatchRequest& r, StopReason why, lilims_status status, const std::string& error) {
  GenerateResult res;
  res.n_prompt_tokens = (int32_t)r.prompt.size();
  res.stop = why;
  if (r.done) r.done(res, status, error);
}

}  // namespace

void BatchEngine::loop() {
  std::vector<BatchRequest> starting;
  // Requests in the batch: their cancel flags stay alive while it reads them.
  std::vector<std::shared_ptr<std::atomic<bool>>> held((size_t)batch_->n_seq());
  bool stopping = false;
  while (true) {
    std::function<void()> hook;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || batch_->n_active() > 0; });
      stopping = stop_;
      int free = batch_->n_free();
      while (!queue_.empty() && (free > 0 || stopping)) {
        starting.push_back(std::move(queue_.front()));
        queue_.pop_front();
        --free;
      }
      hook = step_hook_;
    }
    for (BatchRequest& r : starting) {
      if (stopping || r.cancel->load(std::memory_order_acquire)) {
        end_unstarted(r, StopReason::cancelled, LILIMS_OK, "");
        continue;
      }
      try {
        const int slot = batch_->add(r.prompt, r.opt, r.done, r.cancel.get());
        if (slot < 0) throw Error(LILIMS_ERR_INTERNAL, "[batch] no free slot for a queued request");
        held[(size_t)slot] = r.cancel;
      } catch (const Error& e) {
        end_unstarted(r, StopReason::max_tokens, e.status(), e.what());
      } catch (const std::exception& e) {
        end_unstarted(r, StopReason::max_tokens, LILIMS_ERR_INTERNAL, e.what());
      }
    }
    starting.clear();
    if (stopping) {
      for (auto& c : held) {
        if (c) c->store(true, std::memory_order_release);
      }
    }
    running_.store(batch_->n_active(), std::memory_order_relaxed);
    if (batch_->n_active() > 0) {
      if (hook) hook();
      batch_->step();
      steps_.store(batch_->n_steps(), std::memory_order_relaxed);
      rows_.store(batch_->n_rows(), std::memory_order_relaxed);
      running_.store(batch_->n_active(), std::memory_order_relaxed);
    }
    if (stopping && batch_->n_active() == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
    }
  }
}

}  // namespace lilims::runtime
