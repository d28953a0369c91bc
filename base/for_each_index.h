// for_each_index(n, n_threads, f): f(0) .. f(n - 1), each exactly once, on
// up to n_threads threads started for the call (the caller's among them),
// which take the next index as they finish one.  For coarse one-off work
// outside the executor's pool (quantizing a model's tensors); the first
// exception f throws is rethrown once every thread has stopped, and no
// index is started after it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace lilims {

template <typename F>
void for_each_index(size_t n, int n_threads, F f) {
  const size_t n_workers = std::min<size_t>(n, static_cast<size_t>(std::max(1, n_threads)));
  if (n_workers <= 1) {
    for (size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr failure;
  std::mutex failure_mutex;
  auto work = [&] {
    try {
      for (size_t i; (i = next.fetch_add(1)) < n;) f(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next.store(n);
    }
  };
  std::vector<std::thread> workers;
  workers.reserve(n_workers - 1);
  try {
    for (size_t k = 1; k < n_workers; ++k) workers.emplace_back(work);
  } catch (...) {  // no thread to be had: the ones started and this one do the work
  }
  work();
  for (std::thread& th : workers) th.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace lilims
