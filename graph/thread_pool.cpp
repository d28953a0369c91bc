#include "graph/thread_pool.h"

#include <algorithm>
#include <string>
#include <system_error>

#include "base/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LILIMS_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define LILIMS_PAUSE() __asm__ __volatile__("yield")
#else
#define LILIMS_PAUSE() ((void)0)
#endif

namespace lilims::graph {
namespace {
// ~20-50 us of spinning at a few ns per pause: longer than the gap between
// the matmuls of a decode step, much shorter than a scheduler tick.
constexpr int kSpin = 1 << 14;
// Task indices live in the low 32 bits of the claim counter.
constexpr uint64_t kIndexMask = 0xffffffffull;
constexpr int64_t kMaxTasksPerJob = (int64_t)kIndexMask;
// The pool whose task this thread is running, if any (nested parallel_for).
thread_local const ThreadPool* tl_in_task_of = nullptr;

struct InTask {
  const ThreadPool* saved;
  explicit InTask(const ThreadPool* p) : saved(tl_in_task_of) { tl_in_task_of = p; }
  ~InTask() { tl_in_task_of = saved; }
};
}  // namespace

ThreadPool::ThreadPool(int n_threads, PoolHook hook)
    : n_threads_(n_threads < 1 ? 1 : n_threads), hook_(hook) {
  threads_.reserve((size_t)n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) {
    try {
      threads_.emplace_back([this, t] { worker(t); });
    } catch (const std::system_error& e) {
      stop_workers();
      throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[thread_pool] could not start thread " +
                                                std::to_string(t + 1) + " of " +
                                                std::to_string(n_threads_) + ": " + e.what());
    }
  }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    // The last job's tasks are all claimed, so a worker still inside work()
    // finds nothing to claim; the new generation wakes the sleepers.
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

// Claims and runs tasks of `gen` until none are left (or the job is a newer one).
void ThreadPool::work(int thread, uint32_t gen) {
  const uint64_t tag = (uint64_t)gen << 32;
  const Job& job = jobs_[gen & 1];
  InTask in_task(this);
  for (;;) {
    uint64_t v = next_.load(std::memory_order_acquire);
    int64_t task;
    do {
      if ((v & ~kIndexMask) != tag) return;  // a newer job: ours is finished
      task = (int64_t)(v & kIndexMask);
      at(PoolPoint::worker_claiming, thread);
      // Acquiring a counter value of generation `gen` makes the slot's
      // writes for `gen` visible; a later rewrite (for gen + 2) can be read
      // here only after the counter moved on, and then the swap fails.
      if (task >= job.n_tasks.load(std::memory_order_relaxed)) return;
    } while (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire));
    // The claim succeeded on `gen`: the slot stays as it is until this task
    // is counted done.
    const int64_t n = job.n_tasks.load(std::memory_order_relaxed);
    job.call.load(std::memory_order_relaxed)(job.ctx.load(std::memory_order_relaxed),
                                             job.offset.load(std::memory_order_relaxed) + task,
                                             thread);
    at(PoolPoint::worker_finishing, thread);
    // seq_cst here and on the caller's side: a store-load handshake (either
    // the caller sees the count or this thread sees the caller asleep).
    if (done_tasks_.fetch_add(1, std::memory_order_seq_cst) + 1 >= n &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n_tasks, Trampoline call, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1 || tl_in_task_of == this) {
    for (int64_t t = 0; t < n_tasks; ++t) call(ctx, t, 0);
    return;
  }
  for (int64_t off = 0; off < n_tasks; off += kMaxTasksPerJob) {
    run_job(off, std::min(kMaxTasksPerJob, n_tasks - off), call, ctx);
  }
}

void ThreadPool::run_job(int64_t offset, int64_t n_tasks, Trampoline call, void* ctx) {
  // Only this thread writes generation_ while the pool runs.
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  Job& job = jobs_[gen & 1];
  job.call.store(call, std::memory_order_relaxed);
  job.ctx.store(ctx, std::memory_order_relaxed);
  job.offset.store(offset, std::memory_order_relaxed);
  job.n_tasks.store(n_tasks, std::memory_order_relaxed);
  // Every task of the previous job was counted, and no claim on it can
  // succeed any more, so nothing adds to this count but this job's tasks.
  done_tasks_.store(0, std::memory_order_relaxed);
  at(PoolPoint::caller_publishing, 0);
  next_.store((uint64_t)gen << 32, std::memory_order_release);
  {
    // The release publishes the job; the lock pairs with sleepers checking it.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_relaxed) > 0) wake_.notify_all();
  work(0, gen);
  at(PoolPoint::caller_waiting, 0);
  // Barrier: wait for tasks other threads claimed and are still running.
  for (int i = 0; done_tasks_.load(std::memory_order_acquire) < n_tasks; ++i) {
    if (i < kSpin) {
      LILIMS_PAUSE();
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      done_.wait(lock, [&] { return done_tasks_.load(std::memory_order_seq_cst) >= n_tasks; });
      caller_sleeping_.store(0, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::worker(int thread) {
  uint32_t seen = 0;
  for (;;) {
    uint32_t g;
    int i = 0;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++i < kSpin) {
        LILIMS_PAUSE();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1, std::memory_order_relaxed);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_relaxed);
    }
    seen = g;
    if (stop_.load()) return;
    at(PoolPoint::worker_woken, thread);
    work(thread, g);
  }
}

}  // namespace lilims::graph
