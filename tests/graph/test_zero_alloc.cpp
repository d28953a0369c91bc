// A decode step allocates nothing: every buffer the executor touches is
// planned and allocated when the session is made.  The global operator new
// of this test binary counts allocations while a flag is up.
#include <atomic>
#include <cstdlib>
#include <new>

#include "runtime/engine.h"
#include "test_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define LILIMS_COUNTING_NEW 0  // AddressSanitizer owns operator new/delete
#else
#define LILIMS_COUNTING_NEW 1
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocs{0};

#if LILIMS_COUNTING_NEW
void* counted(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void* counted_aligned(std::size_t n, std::align_val_t a) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocs.fetch_add(1, std::memory_order_relaxed);
  const std::size_t al = (std::size_t)a;
  if (void* p = std::aligned_alloc(al, (n + al - 1) / al * al)) return p;
  throw std::bad_alloc();
}
#endif
}  // namespace

#if LILIMS_COUNTING_NEW
void* operator new(std::size_t n) { return counted(n); }
void* operator new[](std::size_t n) { return counted(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  try { return counted(n); } catch (...) { return nullptr; }
}
void* operator new(std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
  try { return counted_aligned(n, a); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete[](void* p, std::align_val_t) noexcept { std::free(p); }
#endif

namespace lilims {
namespace {

class ZeroAlloc : public ::testing::TestWithParam<graph::KvCommit> {};

TEST_P(ZeroAlloc, DecodeStepsAllocateNothing) {
  if (!LILIMS_COUNTING_NEW) GTEST_SKIP() << "AddressSanitizer replaces operator new; the release run counts";
  // phi3 also with a LoRA adapter set (tests/data/lora: every projection,
  // its file's fused QKV and gate/up): the adapters' scratch is allocated
  // when they are set.
  for (const char* rel : {"tests/data/tiny/phi3.gguf", "tests/data/tiny/phi2.gguf", "lora"}) {
    const bool lora = std::string(rel) == "lora";
    const auto model = runtime::Model::open(test::source_path(lora ? "tests/data/tiny/phi3.gguf" : rel));
    const auto adapter =
        lora ? runtime::Adapter::open(*model, test::source_path("tests/data/lora/phi3.lora.gguf")) : nullptr;
    for (int threads : {1, 2, 4}) {
      runtime::SessionOptions so;
      so.n_ctx = 128;
      so.n_threads = threads;
      so.kv_commit = GetParam();
      runtime::Session s(*model, so);
      if (adapter) s.set_adapters({{adapter.get(), 1.0f}});
      s.eval({1, 20, 30, 40, 50});  // a prefill block first
      const std::vector<int32_t> next = {77};
      s.eval(next);  // one warm-up step
      g_allocs = 0;
      g_counting = true;
      for (int i = 0; i < 60; ++i) s.eval(next);
      g_counting = false;
      EXPECT_EQ(g_allocs.load(), 0) << rel << ", " << threads << " threads: allocations in 60 decode steps";
      // The counter works: a step that must allocate is seen.
      g_allocs = 0;
      g_counting = true;
      std::vector<int32_t> grow(1000, 1);
      g_counting = false;
      EXPECT_GT(g_allocs.load(), 0);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Commit, ZeroAlloc,
                         ::testing::Values(graph::KvCommit::sync, graph::KvCommit::async),
                         [](const ::testing::TestParamInfo<graph::KvCommit>& i) {
                           return std::string(graph::kv_commit_name(i.param));
                         });

}  // namespace
}  // namespace lilims
