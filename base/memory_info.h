// What the machine can give this process, asked in one place so that a
// platform with a better answer (Apple's os_proc_available_memory, Android's
// ActivityManager limits) changes this file only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lilims {

// Bytes this process can still commit without the system having to swap or
// kill something: Linux's MemAvailable (lowered by a cgroup limit when one
// is set), else the physical memory size.  0 when nothing can be learnt,
// which callers read as "do not know", not as "no memory".
uint64_t available_memory_bytes();

// The most memory this process has had resident at once since it started
// (Linux's VmHWM, getrusage's ru_maxrss): it never goes down, and covers
// the whole process, the mapped model weights included.  0 when unknown.
uint64_t peak_resident_bytes();

// n when it is positive, else one per hardware thread (at least 1): what a
// thread count of 0 means in the load and session options.
int threads_or_cores(int n);

// Memory for large arrays that a decode step streams through once per
// token (repacked weights).  From kHugePageBytes up, the block is aligned to
// that size and, on Linux, advised as transparent huge pages (the default
// "madvise" mode grants them only on request), so the stream misses the TLB
// once per 2 MiB instead of once per 4 KiB page.  Smaller blocks come from
// operator new.  Throws std::bad_alloc; free_large takes the same size.
constexpr size_t kHugePageBytes = size_t(2) << 20;
void* allocate_large(size_t bytes);
void free_large(void* p, size_t bytes) noexcept;

// Bytes a std::string takes: the object, and its heap buffer once the text
// outgrows the in-object buffer (15 characters in libstdc++ and libc++'s
// 64-bit layouts, give or take; an estimate, not an allocator's figure).
inline size_t string_bytes(const std::string& s) {
  return sizeof(std::string) + (s.capacity() > 15 ? s.capacity() + 1 : 0);
}

}  // namespace lilims
