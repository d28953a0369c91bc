#include "base/memory_info.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <new>
#include <thread>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/resource.h>
#include <unistd.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lilims {
namespace {

// The first unsigned number in `path` after `key` (key "" = the file's start),
// times `scale`; false when the file, the key or the number is missing (a
// cgroup's "max" has no number: no limit).
bool read_number(const char* path, const char* key, uint64_t scale, uint64_t& out) {
  std::FILE* f = std::fopen(path, "r");
  if (!f) return false;
  char line[256];
  bool found = false;
  while (std::fgets(line, sizeof line, f)) {
    const size_t n = std::strlen(key);
    if (std::strncmp(line, key, n) != 0) continue;
    unsigned long long v = 0;
    if (std::sscanf(line + n, " %llu", &v) == 1) {
      out = (uint64_t)v * scale;
      found = true;
    }
    break;
  }
  std::fclose(f);
  return found;
}

// A container's memory limit (cgroup v2, then v1).  Only the limit: what
// the group uses includes page cache the kernel would reclaim, so limit minus
// usage would refuse contexts that fit.
bool cgroup_limit(uint64_t& out) {
  return read_number("/sys/fs/cgroup/memory.max", "", 1, out) ||
         read_number("/sys/fs/cgroup/memory/memory.limit_in_bytes", "", 1, out);
}

uint64_t physical_memory_bytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) return (uint64_t)pages * (uint64_t)page;
#endif
  return 0;
}

}  // namespace

uint64_t available_memory_bytes() {
  uint64_t avail = 0;
  if (!read_number("/proc/meminfo", "MemAvailable:", 1024, avail)) avail = physical_memory_bytes();
  uint64_t limit = 0;
  if (cgroup_limit(limit) && limit > 0) avail = avail ? std::min(avail, limit) : limit;
  return avail;
}

uint64_t peak_resident_bytes() {
#if defined(__unix__) || defined(__APPLE__)
  struct rusage ru;
  if (getrusage(RUSAGE_SELF, &ru) == 0 && ru.ru_maxrss > 0) {
#if defined(__APPLE__)
    return (uint64_t)ru.ru_maxrss;  // bytes there
#else
    return (uint64_t)ru.ru_maxrss * 1024;  // KiB on Linux and the BSDs
#endif
  }
#endif
  return 0;
}

int threads_or_cores(int n) {
  return n > 0 ? n : (int)std::max(1u, std::thread::hardware_concurrency());
}

void* allocate_large(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  void* p = ::operator new(bytes, std::align_val_t(kHugePageBytes));
#if defined(MADV_HUGEPAGE)
  // Advice only: a kernel without THP, or one that refuses, leaves small pages.
  madvise(p, bytes / kHugePageBytes * kHugePageBytes, MADV_HUGEPAGE);
#endif
  return p;
}

void free_large(void* p, size_t bytes) noexcept {
  if (!p) return;
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
  } else {
    ::operator delete(p, std::align_val_t(kHugePageBytes));
  }
}

}  // namespace lilims
