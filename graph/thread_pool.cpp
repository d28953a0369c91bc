#include "graph/thread_pool.h"

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
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads < 1 ? 1 : n_threads) {
  threads_.reserve(n_threads_ - 1);
  for (int t = 1; t < n_threads_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    next_.store(0, std::memory_order_release);  // no job: late claims fail
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

// Claims and runs tasks of `gen` until none are left (or the job is a newer one).
void ThreadPool::work(int thread, uint32_t gen) {
  const uint64_t tag = (uint64_t)gen << 32;
  for (;;) {
    uint64_t v = next_.load(std::memory_order_acquire);
    int64_t task;
    do {
      if ((v & ~0xffffffffull) != tag) return;  // a newer job: ours is finished
      task = (int64_t)(v & 0xffffffffull);
      if (task >= n_tasks_.load(std::memory_order_relaxed)) return;
    } while (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire));
    call_(ctx_, task, thread);
    // seq_cst here and on the caller's side: a store-load handshake (either
    // the caller sees the count or this thread sees the caller asleep).
    if (done_tasks_.fetch_add(1, std::memory_order_seq_cst) + 1 ==
            n_tasks_.load(std::memory_order_relaxed) &&
        caller_sleeping_.load(std::memory_order_seq_cst)) {
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run(int64_t n_tasks, Trampoline call, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) call(ctx, t, 0);
    return;
  }
  // Every task of the previous job is done, so no worker reads these now.
  call_ = call;
  ctx_ = ctx;
  n_tasks_.store(n_tasks, std::memory_order_relaxed);
  done_tasks_.store(0, std::memory_order_relaxed);
  const uint32_t gen = generation_.load(std::memory_order_relaxed) + 1;
  next_.store((uint64_t)gen << 32, std::memory_order_release);
  {
    // The release publishes the job; the lock pairs with sleepers checking it.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(gen, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_relaxed) > 0) wake_.notify_all();
  work(0, gen);
  // Barrier: wait for tasks other threads claimed and are still running.
  for (int i = 0; done_tasks_.load(std::memory_order_acquire) != n_tasks; ++i) {
    if (i < kSpin) {
      LILIMS_PAUSE();
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      caller_sleeping_.store(1, std::memory_order_seq_cst);
      done_.wait(lock, [&] { return done_tasks_.load(std::memory_order_seq_cst) == n_tasks; });
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
    work(thread, g);
  }
}

}  // namespace lilims::graph
