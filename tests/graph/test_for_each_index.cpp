// for_each_index (base/for_each_index.h), the short-lived threads that
// quantize a model's tensors: every index exactly once for every count and
// thread count (up to 16 threads on however many cores), with random delays
// injected into the work so the threads interleave differently each round;
// the first exception comes back once every thread has stopped, and no
// index starts after it.  Runs under ThreadSanitizer in scripts/test.sh.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "base/for_each_index.h"

namespace lilims {
namespace {

// 0-200 us for about one index in four, from a per-call seed.
struct Delays {
  explicit Delays(uint32_t seed) : us(1024) {
    std::mt19937 rng(seed);
    for (int& u : us) u = rng() % 4 == 0 ? static_cast<int>(rng() % 200) : 0;
  }
  void at(size_t i) const {
    if (const int u = us[i % us.size()]) std::this_thread::sleep_for(std::chrono::microseconds(u));
  }
  std::vector<int> us;
};

TEST(ForEachIndex, EveryIndexOnceForEveryCountAndThreadCount) {
  uint32_t seed = 1;
  for (const size_t n : {0, 1, 2, 3, 5, 16, 17, 100, 1000}) {
    for (const int threads : {-1, 0, 1, 2, 3, 4, 8, 16}) {
      const Delays delays(seed++);
      std::unique_ptr<std::atomic<int>[]> runs(new std::atomic<int>[n + 1]);
      for (size_t i = 0; i <= n; ++i) runs[i] = 0;
      std::atomic<int> concurrent{0}, most{0};
      for_each_index(n, threads, [&](size_t i) {
        const int now = ++concurrent;
        for (int m = most.load(); now > m && !most.compare_exchange_weak(m, now);) {
        }
        delays.at(i);
        runs[std::min(i, n)]++;
        --concurrent;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(runs[i].load(), 1) << "n " << n << " threads " << threads << " index " << i;
      EXPECT_EQ(runs[n].load(), 0) << "an index past n ran; n " << n << " threads " << threads;
      EXPECT_LE(most.load(), std::max(1, threads)) << "n " << n;
    }
  }
}

// Work that writes its own slot and reads nothing shared: what requantize
// does with its rows; ThreadSanitizer checks that the results are seen by
// the caller after the call (the joins order them).
TEST(ForEachIndex, ResultsAreVisibleToTheCaller) {
  for (int round = 0; round < 50; ++round) {
    std::vector<uint64_t> out(257, 0);
    const Delays delays(1000 + round);
    for_each_index(out.size(), 2 + round % 7, [&](size_t i) {
      delays.at(i);
      out[i] = i * i + 1;
    });
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], i * i + 1) << "round " << round;
  }
}

// Two indices throw; every index after them sleeps, so running them all
// would take far longer than stopping does (20000 x >= 20 us over at most 16
// threads): once the failure is recorded no index starts, and well under
// half of them run even with the thrower descheduled for milliseconds.
TEST(ForEachIndex, FirstExceptionComesBackAndStopsTheRest) {
  for (const int threads : {1, 2, 3, 8, 16}) {
    for (int round = 0; round < 5; ++round) {
      const size_t n = 20000, bad = 37 + 13 * round;
      std::unique_ptr<std::atomic<int>[]> runs(new std::atomic<int>[n]);
      for (size_t i = 0; i < n; ++i) runs[i] = 0;
      std::atomic<int> started{0};
      try {
        for_each_index(n, threads, [&](size_t i) {
          started++;
          runs[i]++;
          if (i == bad || i == bad + 1) throw std::runtime_error("index " + std::to_string(i));
          if (i > bad) std::this_thread::sleep_for(std::chrono::microseconds(20));
        });
        ADD_FAILURE() << "nothing thrown, threads " << threads;
      } catch (const std::runtime_error& e) {
        const std::string what = e.what();
        EXPECT_TRUE(what == "index " + std::to_string(bad) || what == "index " + std::to_string(bad + 1))
            << what;
      }
      for (size_t i = 0; i < n; ++i) ASSERT_LE(runs[i].load(), 1) << "index " << i;
      EXPECT_LT(started.load(), static_cast<int>(n / 2)) << "threads " << threads;
      if (threads == 1) {  // in order: everything before the throw, nothing after
        EXPECT_EQ(started.load(), static_cast<int>(bad + 1));
        for (size_t i = 0; i <= bad; ++i) ASSERT_EQ(runs[i].load(), 1) << "index " << i;
      }
    }
  }
}

}  // namespace
}  // namespace lilims
