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
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void ThreadPool::work(int thread) {
  for (;;) {
    const int64_t task = next_.fetch_add(1, std::memory_order_relaxed);
    if (task >= n_tasks_) break;
    call_(ctx_, task, thread);
  }
}

void ThreadPool::run(int64_t n_tasks, Trampoline call, void* ctx) {
  if (n_tasks <= 0) return;
  if (n_threads_ == 1 || n_tasks == 1) {
    for (int64_t t = 0; t < n_tasks; ++t) call(ctx, t, 0);
    return;
  }
  call_ = call;
  ctx_ = ctx;
  n_tasks_ = n_tasks;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // The release makes the job fields above visible to workers that see
    // the new generation; the lock pairs with sleepers checking it.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_relaxed) > 0) wake_.notify_all();
  work(0);
  // Barrier: wait for the workers to finish their last task.
  for (int i = 0; pending_.load(std::memory_order_acquire) != 0; ++i) {
    if (i < kSpin) {
      LILIMS_PAUSE();
    } else {
      std::unique_lock<std::mutex> lock(mu_);
      done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
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
    work(thread);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      // Last worker out: wake the caller in case it went to sleep.
      std::lock_guard<std::mutex> lock(mu_);
      done_.notify_one();
    }
  }
}

}  // namespace lilims::graph
