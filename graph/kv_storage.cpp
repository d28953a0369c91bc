#include "graph/kv_storage.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <limits>
#include <string>

#include "base/error.h"

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#include <unistd.h>
#define LILIMS_KV_MMAP 1
#endif

namespace lilims::graph {
namespace {

[[noreturn]] void out_of_memory(size_t bytes, const std::string& why) {
  throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[kv_cache] cannot reserve " + std::to_string(bytes) +
                                            " bytes for the KV cache: " + why);
}

#if defined(LILIMS_KV_MMAP)
// MAP_NORESERVE: the kernel should not count the whole reservation against
// its commit limit, only the pages that get written.
#if defined(MAP_NORESERVE)
constexpr int kNoReserve = MAP_NORESERVE;
#else
constexpr int kNoReserve = 0;
#endif
// Linux frees at once with MADV_DONTNEED (the pages read as zero again);
// Darwin's MADV_DONTNEED may keep them resident, MADV_FREE gives them back.
// Either way the contents are not kept, which release_from() allows.
#if defined(__APPLE__)
constexpr int kRelease = MADV_FREE;
#else
constexpr int kRelease = MADV_DONTNEED;
#endif

uint8_t* reserve(size_t bytes, bool& mapped) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | kNoReserve,
                 -1, 0);
  if (p == MAP_FAILED) out_of_memory(bytes, std::strerror(errno));
  mapped = true;
  return static_cast<uint8_t*>(p);
}

void unreserve(uint8_t* p, size_t bytes, bool mapped) {
  if (mapped) {
    munmap(p, bytes);
  } else {
    std::free(p);
  }
}

size_t page_size() {
  const long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

// The pages that hold bytes of [begin, used) and nothing before begin or
// at or after limit (the next layer's rows may share a page with this
// layer's last).  A failed madvise only leaves memory resident, so its
// result is not an error.
void release_pages(uint8_t* begin, uint8_t* used, uint8_t* limit) {
  const uintptr_t page = page_size();
  const uintptr_t b = ((uintptr_t)begin + page - 1) / page * page;
  uintptr_t e = ((uintptr_t)used + page - 1) / page * page;
  if (e > (uintptr_t)limit) e = (uintptr_t)limit / page * page;
  if (e > b) madvise(reinterpret_cast<void*>(b), e - b, kRelease);
}
#else
uint8_t* reserve(size_t bytes, bool& mapped) {
  void* p = std::calloc(bytes, 1);
  if (!p) out_of_memory(bytes, "calloc failed");
  mapped = false;
  return static_cast<uint8_t*>(p);
}

void unreserve(uint8_t* p, size_t, bool) { std::free(p); }

void release_pages(uint8_t*, uint8_t*, uint8_t*) {}
#endif

}  // namespace

uint64_t KvStorage::bytes_for(int n_layer, int32_t n_ctx, size_t row_bytes) {
  if (n_layer <= 0 || n_ctx <= 0 || row_bytes == 0) return 0;
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  uint64_t b = 2 * (uint64_t)n_layer * (uint64_t)n_ctx;  // < 2^64: both factors < 2^31
  if ((uint64_t)row_bytes > max / b) return max;
  return b * (uint64_t)row_bytes;
}

KvStorage::KvStorage(int n_layer, int32_t n_ctx, size_t row_bytes, int n_heads)
    : n_layer_(n_layer), n_heads_(n_heads) {
  if (n_layer <= 0 || n_ctx <= 0 || row_bytes == 0 || n_heads <= 0 || row_bytes % (size_t)n_heads) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[kv_cache] empty cache shape");
  }
  head_bytes_ = row_bytes / (size_t)n_heads;
  head_stride_ = (size_t)n_ctx * head_bytes_;
  const uint64_t total = bytes_for(n_layer, n_ctx, row_bytes);
  if (total > (uint64_t)std::numeric_limits<size_t>::max() / 2) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[kv_cache] " + std::to_string(total) +
                                              " bytes for the KV cache exceed the address space");
  }
  bytes_ = (size_t)total;
  half_ = bytes_ / 2;
  layer_bytes_ = (size_t)n_ctx * row_bytes;
  base_ = reserve(bytes_, mapped_);
}

KvStorage::~KvStorage() { unreserve(base_, bytes_, mapped_); }

void KvStorage::release_from(int32_t n_keep) {
  if (n_keep < 0) n_keep = 0;
  if (n_keep >= used_) return;
  if (mapped_) {
    const size_t keep = (size_t)n_keep * head_bytes_, used = (size_t)used_ * head_bytes_;
    for (int l = 0; l < 2 * n_layer_; ++l) {
      for (int h = 0; h < n_heads_; ++h) {
        uint8_t* plane = base_ + (size_t)l * layer_bytes_ + (size_t)h * head_stride_;
        release_pages(plane + keep, plane + used, plane + head_stride_);
      }
    }
  }
  used_ = n_keep;
}

uint64_t KvStorage::resident_bytes() const {
#if defined(LILIMS_KV_MMAP)
  if (!mapped_) return bytes_;
  if (used_ == 0) return 0;
  const uintptr_t page = page_size();
  const size_t used = (size_t)used_ * head_bytes_;
  uint64_t n = 0;
  for (int l = 0; l < 2 * n_layer_; ++l) {
    for (int h = 0; h < n_heads_; ++h) {
      const uint8_t* plane = base_ + (size_t)l * layer_bytes_ + (size_t)h * head_stride_;
      const uintptr_t b = (uintptr_t)plane / page * page;
      const uintptr_t e = ((uintptr_t)(plane + used) + page - 1) / page * page;
      n += e - b;
    }
  }
  return std::min<uint64_t>(n, bytes_);
#else
  return bytes_;
#endif
}

}  // namespace lilims::graph
