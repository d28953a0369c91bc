// A persistent pool of n threads (the caller is thread 0, n - 1 workers)
// for the executor and the kernels.  parallel_for hands out tasks through
// an atomic counter and returns when every task is done (that return is the
// barrier).  The barrier counts finished tasks, not threads: a worker that
// the OS has not scheduled yet (a busy phone, a shared machine) holds up
// nothing, since the caller takes all the tasks it did not claim; a late
// worker finds its job gone and goes back to waiting.
//
// Why a late worker can never touch the wrong job: the claim counter holds
// (generation << 32 | next task), and each generation's job (callable,
// context, task count) lives in its own slot, jobs_[generation & 1].  A
// worker reads the counter, checks the task index against the count in that
// generation's slot, and claims with a compare-and-swap on the whole word.
// The swap succeeds only while the counter still carries that generation,
// and the caller publishes the next generation only after every task of this
// one has been counted done, so a successful claim is a task of the job it
// was checked against, and every done count belongs to the current job.  The
// slot of generation g is rewritten only for g + 2, after g + 1 has been
// published, by which time no claim on g can succeed.  (Writing the task
// count into a shared field before publishing let a worker holding the old
// counter check its exhausted index against the new job's count, claim on
// the old tag, run an out-of-range task and count it into the new job, whose
// equality barrier then never matched: the crashes and hangs of 2-thread
// runs.)  The barrier waits while done < n, so even a miscount cannot skip it.
//
// Workers spin a short while on a generation counter before sleeping on a
// condition variable, so back-to-back calls of a token step (tens of
// microseconds apart) do not pay a futex wake-up each, and an idle pool does
// not burn a core.  No allocation per call: the callable is passed by
// reference through a function pointer.
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

// Points where a test can inject delays to widen race windows.  In
// production the hook is null and costs one predictable branch per task.
enum class PoolPoint {
  caller_publishing,   // the caller, between writing a job and making it claimable
  caller_waiting,      // the caller, before it waits at the barrier
  worker_woken,        // a worker that saw a new generation
  worker_claiming,     // a worker, between reading the claim counter and claiming
  worker_finishing,    // a worker, after running a task and before counting it done
};
struct PoolHook {
  void (*fn)(void* user, PoolPoint point, int thread) = nullptr;
  void* user = nullptr;
};

class ThreadPool {
 public:
  // n_threads >= 1 (values < 1 mean 1), including the calling thread.
  explicit ThreadPool(int n_threads, PoolHook hook = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Throws lilims::Error (LILIMS_ERR_OUT_OF_MEMORY) when a thread cannot be
  // started; the threads already started are stopped and joined first.

  // Runs fn(task, thread) for task in [0, n_tasks) on all threads; thread is
  // in [0, size()).  One parallel_for at a time per pool; a parallel_for
  // called from inside one of this pool's tasks runs inline on that thread.
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

  void at(PoolPoint p, int thread) const {
    if (hook_.fn) hook_.fn(hook_.user, p, thread);
  }

  int n_threads_;
  PoolHook hook_;
  std::vector<std::thread> threads_;
  void run_job(int64_t offset, int64_t n_tasks, Trampoline call, void* ctx);
  void stop_workers();

  // A job: tasks offset + [0, n_tasks).  Atomic fields because a stale
  // worker may read a slot while the caller rewrites it; such a worker's
  // claim then fails (see the header comment).
  struct Job {
    std::atomic<Trampoline> call{nullptr};
    std::atomic<void*> ctx{nullptr};
    std::atomic<int64_t> offset{0};
    std::atomic<int64_t> n_tasks{0};
  };
  Job jobs_[2];  // jobs_[generation & 1]
  // (generation << 32) | next task to hand out.
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
