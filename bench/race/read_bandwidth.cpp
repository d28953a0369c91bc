// read_bandwidth: the DRAM read bandwidth a decode step can hope for, in
// GB/s, printed alone on stdout (bench/race.sh divides by it).
//
//   read_bandwidth [-t THREADS] [--mib SIZE] [-r REPS]
//
// Decode reads every weight once per token and writes almost nothing, so
// the roofline is a read-only stream, not STREAM's triad (whose writes cost
// read-for-ownership traffic too).  The buffer (default 512 MiB, far past any
// L3) is summed as 64-bit integers, which the compiler may reorder and
// vectorise, split into contiguous chunks over the same graph::ThreadPool
// the runtime decodes with; median of REPS passes after one warm-up.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "graph/thread_pool.h"

namespace {

uint64_t sum_words(const uint64_t* p, int64_t n) {
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) s0 += p[i], s1 += p[i + 1], s2 += p[i + 2], s3 += p[i + 3];
  for (; i < n; ++i) s0 += p[i];
  return s0 + s1 + s2 + s3;
}

int usage() {
  std::fprintf(stderr, "usage: read_bandwidth [-t THREADS 1..256] [--mib 64..16384] [-r 1..100]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  long threads = 1, mib = 512, reps = 7;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    char* end = nullptr;
    const long v = std::strtol(argv[++i], &end, 10);
    if (*end) return usage();
    if (a == "-t") threads = v;
    else if (a == "--mib") mib = v;
    else if (a == "-r") reps = v;
    else return usage();
  }
  if (threads < 1 || threads > 256 || mib < 64 || mib > 16384 || reps < 1 || reps > 100) {
    return usage();
  }
  const int64_t n = (int64_t)mib * (1 << 20) / 8;
  std::unique_ptr<uint64_t[]> buf(new uint64_t[(size_t)n]);
  // Written once: untouched pages would all map the zero page and read from cache.
  for (int64_t i = 0; i < n; ++i) buf[i] = (uint64_t)i * 0x9E3779B97F4A7C15ULL;

  lilims::graph::ThreadPool pool((int)threads);
  const int64_t n_chunks = threads * 16;
  const int64_t chunk = (n + n_chunks - 1) / n_chunks;
  std::vector<uint64_t> partial((size_t)n_chunks);
  auto pass = [&] {
    pool.parallel_for(n_chunks, [&](int64_t c, int) {
      const int64_t lo = c * chunk, hi = std::min(n, lo + chunk);
      partial[(size_t)c] = lo < hi ? sum_words(buf.get() + lo, hi - lo) : 0;
    });
  };
  pass();
  std::vector<double> gbps;
  uint64_t check = 0;
  for (long r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pass();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    gbps.push_back((double)n * 8 / s / 1e9);
    for (uint64_t p : partial) check += p;
  }
  std::sort(gbps.begin(), gbps.end());
  std::printf("%.2f\n", gbps[gbps.size() / 2]);
  // The sums must be used, or the reads could be dropped.
  std::fprintf(stderr, "read_bandwidth: %ld threads, %ld MiB, median of %ld (checksum %llx)\n",
               threads, mib, reps, (unsigned long long)check);
  return 0;
}
