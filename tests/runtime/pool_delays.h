// A thread-pool hook for tests that must give the same bits under any
// timing: at a tenth of the pool's race points a thread yields, at one in
// twenty it sleeps 1-50 us, so tasks land on other threads and late workers
// find their job gone.
#pragma once

#include <chrono>
#include <random>
#include <thread>

#include "graph/thread_pool.h"

namespace lilims::test {

inline void pool_delays(void*, graph::PoolPoint, int thread) {
  thread_local std::mt19937 rng(std::random_device{}() ^ (unsigned)thread);
  const unsigned r = rng() % 100;
  if (r < 10) {
    std::this_thread::yield();
  } else if (r < 15) {
    std::this_thread::sleep_for(std::chrono::microseconds(1 + rng() % 50));
  }
}

}  // namespace lilims::test
