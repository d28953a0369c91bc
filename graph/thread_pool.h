// A persistent pool of n threads (the caller is thread 0, n - 1 workers)
// for the executor and the kernels.  parallel_for hands out tasks through
// an atomic counter and returns when every task is done (that return is the
// barrier).  The barrier counts finished tasks, not threads: a worker that
// the OS has not scheduled yet (a busy phone, a shared machine) holds up
// nothing, since the caller takes all the tasks it did not claim; a late
// worker finds its job gone and goes back to waiting.  Workers spin a short while on a generation counter before
// sleeping on a condition variable, so back-to-back calls of a token step
// (tens of microseconds apart) do not pay a futex wake-up each, and an idle
// pool does not burn a core.  No allocation per call: the callable is passed
// by reference through a function pointer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace lilims::graph {

class ThreadPool {
 public:
  // n_threads >= 1 (values < 1 mean 1), including the calling thread.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Runs fn(task, thread) for task in [0, n_tasks) on all threads; thread is
  // in [0, size()).  Not reentrant: one parallel_for at a time per pool.
  template <class F>
  void parallel_for(int64_t n_tasks, F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run(n_tasks, [](void* ctx, int64_t task, int thread) { (*static_cast<Fn*>(ctx))(task, thread); },
        const_cast<void*>(static_cast<const void*>(&fn)));
  }
  void parallel_for(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn) {
    run(n_tasks, [](void* ctx, int64_t task, int thread) {
          (*static_cast<const std::function<void(int64_t, int)>*>(ctx))(task, thread);
        }, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t task, int thread);
  void run(int64_t n_tasks, Trampoline call, void* ctx);
  void worker(int thread);
  void work(int thread, uint32_t generation);

  int n_threads_;
  std::vector<std::thread> threads_;
  // The job of the current generation.
  Trampoline call_ = nullptr;
  void* ctx_ = nullptr;
  std::atomic<int64_t> n_tasks_{0};
  // (generation << 32) | next task to hand out: a claim is only valid for
  // the generation it was made in.
  alignas(64) std::atomic<uint64_t> next_{0};
  alignas(64) std::atomic<int64_t> done_tasks_{0};  // finished tasks of this generation
  alignas(64) std::atomic<uint32_t> generation_{0};
  std::atomic<int> caller_sleeping_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<int> sleepers_{0};
};

}  // namespace lilims::graph
