// KvStorage: the cache's pages become resident only when rows are written,
// release_from() gives back the pages of dropped positions and keeps the
// rest, and sizes that cannot be addressed are refused, not wrapped.
#include <unistd.h>

#include <cstring>
#include <limits>

#include "base/error.h"
#include "memory_util.h"
#include "graph/kv_storage.h"
#include "test_util.h"

namespace lilims {
namespace {

// SmolLM2-135M's shape: 30 layers, 3 kv heads x 64 dims in F16 = 384 bytes
// a row, 8192 positions: 180 MiB once full.
constexpr int kLayers = 30;
constexpr int32_t kCtx = 8192;
constexpr size_t kRow = 384;

int64_t page() { return (int64_t)sysconf(_SC_PAGESIZE); }

void fill_rows(graph::KvStorage& kv, int32_t from, int32_t to) {
  for (int l = 0; l < kLayers; ++l) {
    for (int32_t p = from; p < to; ++p) {
      std::memset(kv.k(l) + (size_t)p * kRow, 1 + (p + l) % 250, kRow);
      std::memset(kv.v(l) + (size_t)p * kRow, 2 + (p + l) % 250, kRow);
    }
  }
  kv.mark_used(to);
}

TEST(KvStorage, PagesFollowTheRowsWritten) {
  LILIMS_REQUIRE_RSS();
  const int64_t r0 = test::rss_anon_bytes();
  graph::KvStorage kv(kLayers, kCtx, kRow);
  ASSERT_EQ(kv.bytes(), 2u * kLayers * kCtx * kRow);
  const int64_t r1 = test::rss_anon_bytes();
  // Nothing written: nothing resident (64 KiB for the allocator's and
  // stdio's own bookkeeping).
  EXPECT_LT(r1 - r0, 64 << 10) << "an empty cache of " << kv.bytes() << " bytes is resident";

  // 64 positions are 64 rows in each of the 60 (layer, K|V) regions: each
  // region's rows span at most ceil(64 * 384 / page) + 1 pages (+1 when
  // they do not start on a page boundary).
  const int32_t n = 64;
  fill_rows(kv, 0, n);
  const int64_t r2 = test::rss_anon_bytes();
  const int64_t rows = (int64_t)2 * kLayers * n * kRow;
  const int64_t bound = (int64_t)2 * kLayers * ((n * (int64_t)kRow + page() - 1) / page() + 1) *
                        page() + (64 << 10);
  EXPECT_GE(r2 - r1, rows - (64 << 10));
  EXPECT_LE(r2 - r1, bound) << "64 positions made " << (r2 - r1) << " bytes resident";

  // Keeping 16 positions frees the pages that hold only positions 16..63
  // and leaves the kept rows as they were.
  kv.release_from(16);
  const int64_t r3 = test::rss_anon_bytes();
  const int64_t freed = r2 - r3;
  const int64_t dropped = (int64_t)2 * kLayers * (n - 16) * kRow;
  // Each region keeps at most one page that straddles position 16.
  EXPECT_GE(freed, dropped - (int64_t)2 * kLayers * page() - (64 << 10));
  for (int l = 0; l < kLayers; ++l) {
    for (int32_t p = 0; p < 16; ++p) {
      ASSERT_EQ(kv.k(l)[(size_t)p * kRow + kRow - 1], (uint8_t)(1 + (p + l) % 250));
      ASSERT_EQ(kv.v(l)[(size_t)p * kRow], (uint8_t)(2 + (p + l) % 250));
    }
  }
  // A reset gives back nearly all (a region's first page may hold the
  // previous region's last row).
  kv.release_from(0);
  const int64_t r4 = test::rss_anon_bytes();
  EXPECT_LE(r4 - r1, (int64_t)2 * kLayers * page() + (64 << 10));
  // Released rows can be written again.
  fill_rows(kv, 0, 8);
  EXPECT_EQ(kv.k(kLayers - 1)[7 * kRow], (uint8_t)(1 + (7 + kLayers - 1) % 250));
}

// The runtime's cache keeps each kv head's positions together (3 planes of
// 128-byte rows per layer here): the pages still follow the positions
// written, plane by plane, and a release keeps every plane's kept rows.
TEST(KvStorage, HeadPlanesFollowTheRowsWritten) {
  LILIMS_REQUIRE_RSS();
  constexpr int kHeads = 3;
  constexpr size_t kHead = kRow / kHeads;
  const int64_t r0 = test::rss_anon_bytes();
  graph::KvStorage kv(kLayers, kCtx, kRow, kHeads);
  ASSERT_EQ(kv.bytes(), 2u * kLayers * kCtx * kRow);
  ASSERT_EQ(kv.head_bytes(), kHead);
  ASSERT_EQ(kv.head_stride(), (size_t)kCtx * kHead);
  const int32_t n = 256;
  auto at = [&](uint8_t* layer, int h, int32_t p) { return layer + h * kv.head_stride() + (size_t)p * kHead; };
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      for (int32_t p = 0; p < n; ++p) {
        std::memset(at(kv.k(l), h, p), 1 + (p + l + h) % 250, kHead);
        std::memset(at(kv.v(l), h, p), 2 + (p + l + h) % 250, kHead);
      }
    }
  }
  kv.mark_used(n);
  const int64_t r1 = test::rss_anon_bytes();
  const int64_t planes = (int64_t)2 * kLayers * kHeads;
  const int64_t rows = planes * n * (int64_t)kHead;
  EXPECT_GE(r1 - r0, rows - (64 << 10));
  EXPECT_LE(r1 - r0, planes * ((n * (int64_t)kHead + page() - 1) / page() + 1) * page() + (64 << 10));
  EXPECT_LE(kv.resident_bytes(), (uint64_t)(planes * ((n * (int64_t)kHead + page() - 1) / page() + 1) * page()));
  EXPECT_GE(kv.resident_bytes(), (uint64_t)rows);
  kv.release_from(32);
  const int64_t r2 = test::rss_anon_bytes();
  // Each plane keeps at most the page that straddles position 32.
  EXPECT_GE(r1 - r2, planes * (n - 32) * (int64_t)kHead - planes * page() - (64 << 10));
  for (int l = 0; l < kLayers; ++l) {
    for (int h = 0; h < kHeads; ++h) {
      for (int32_t p = 0; p < 32; ++p) {
        ASSERT_EQ(at(kv.k(l), h, p)[kHead - 1], (uint8_t)(1 + (p + l + h) % 250));
        ASSERT_EQ(at(kv.v(l), h, p)[0], (uint8_t)(2 + (p + l + h) % 250));
      }
    }
  }
  EXPECT_THROW(graph::KvStorage(2, 16, 100, 3), Error) << "rows that do not split into whole heads";
}

TEST(KvStorage, ReleaseOfNothingAndOfMoreThanWrittenIsHarmless) {
  graph::KvStorage kv(2, 100, 64);
  kv.release_from(0);
  for (int l = 0; l < 2; ++l) std::memset(kv.k(l), 7, 64 * 10);
  kv.mark_used(10);
  kv.release_from(50);  // beyond what was written: nothing to do
  EXPECT_EQ(kv.k(1)[639], 7);
  kv.release_from(-3);  // read as 0
}

TEST(KvStorage, SizesBeyondTheAddressSpaceAreRefused) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const int32_t int_max = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(graph::KvStorage::bytes_for(4096, int_max, (size_t)1 << 40), max);
  EXPECT_EQ(graph::KvStorage::bytes_for(30, 8192, 384), 2ull * 30 * 8192 * 384);
  EXPECT_EQ(graph::KvStorage::bytes_for(0, 8192, 384), 0u);
  try {
    graph::KvStorage kv(4096, int_max, (size_t)1 << 20);
    FAIL() << "a KV cache of 2^64 bytes was reserved";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_OUT_OF_MEMORY);
    EXPECT_NE(std::string(e.what()).find("[kv_cache]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lilims
