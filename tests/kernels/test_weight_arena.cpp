// kernels::WeightArena and ByteBuffer: the repacked weights of a model share
// a few large blocks.  Slices must be aligned, disjoint and in order, keep
// their block alive after the arena is gone, and hold exactly the bytes
// pack_weight / pack_stacked write without an arena.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "matmul_test_util.h"
#include "quant/quant.h"

namespace lilims {
namespace {

using kernels::ByteBuffer;
using kernels::WeightArena;

TEST(WeightArena, SlicesAreAlignedDisjointAndInOrder) {
  std::vector<ByteBuffer> slices;
  {
    WeightArena arena;
    // Odd sizes, so that alignment is not a given; enough of them to need
    // more than one chunk.
    size_t total = 0;
    for (size_t i = 0; total < 3 * WeightArena::kChunkBytes; ++i) {
      const size_t n = 1000 + (i * 7919) % (WeightArena::kChunkBytes / 8);
      slices.push_back(arena.take(n));
      total += n;
      ASSERT_EQ(slices.back().size(), n);
      ASSERT_EQ((uintptr_t)slices.back().data() % 64, 0u) << "slice " << i;
      std::memset(slices.back().data(), (int)(i & 0xff), n);
    }
  }  // the arena is gone; the slices keep their chunks
  for (size_t i = 0; i < slices.size(); ++i) {
    const ByteBuffer& b = slices[i];
    EXPECT_TRUE(std::all_of(b.begin(), b.end(), [&](uint8_t x) { return x == (uint8_t)(i & 0xff); }))
        << "slice " << i << " was overwritten";
  }
  // In a chunk, a slice starts at or after the end of the one before.
  size_t in_order = 0;
  for (size_t i = 1; i < slices.size(); ++i) {
    const uint8_t* prev_end = slices[i - 1].end();
    const uint8_t* start = slices[i].data();
    if (start >= prev_end && start < prev_end + 64) ++in_order;
  }
  // Every slice but the first of each new chunk follows its predecessor.
  EXPECT_GE(in_order + 4, slices.size() - 1);
}

TEST(WeightArena, LargeWeightsGetTheirOwnBlock) {
  WeightArena arena;
  ByteBuffer small = arena.take(4096);
  ByteBuffer big = arena.take(WeightArena::kChunkBytes / 4 + 1);
  ByteBuffer next = arena.take(4096);
  ASSERT_EQ(big.size(), WeightArena::kChunkBytes / 4 + 1);
  // The small ones share the chunk; the big one is elsewhere.
  EXPECT_EQ(next.data(), small.data() + 4096);
  EXPECT_TRUE(big.data() + big.size() <= small.data() ||
              big.data() >= small.data() + WeightArena::kChunkBytes);
  std::memset(big.data(), 0x5a, big.size());
  EXPECT_EQ(big.data()[big.size() - 1], 0x5a);
}

TEST(WeightArena, EqualityComparesBytes) {
  ByteBuffer a = WeightArena::own(100), b = WeightArena::own(100), c = WeightArena::own(99);
  std::memset(a.data(), 1, 100);
  std::memset(b.data(), 1, 100);
  std::memset(c.data(), 1, 99);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  b.data()[99] = 2;
  EXPECT_NE(a, b);
  EXPECT_EQ(ByteBuffer{}, ByteBuffer{});
  const ByteBuffer copy = a;  // shares the bytes
  EXPECT_EQ(copy.data(), a.data());
}

TEST(WeightArena, PackingIntoTheArenaWritesTheSameBytes) {
  const int64_t rows = 80, cols = 256;
  for (quant::Type type : {quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q4_1}) {
    if (kernels::preferred_layout(type) == kernels::kLayoutGguf) {
      GTEST_SKIP() << "the ref path repacks nothing";
    }
    const size_t rb = quant::row_bytes(type, cols);
    std::mt19937_64 rng(test::base_seed() + (uint64_t)type);
    std::vector<uint8_t> src(rb * rows);
    for (uint8_t& x : src) x = (uint8_t)rng();  // repacking moves bytes; any will do

    WeightArena arena;
    const kernels::PackedWeight filler = kernels::pack_weight(type, src.data(), 16, cols, true, {}, 1, &arena);
    const kernels::PackedWeight in = kernels::pack_weight(type, src.data(), rows, cols, true, {}, 2, &arena);
    const kernels::PackedWeight own = kernels::pack_weight(type, src.data(), rows, cols, true);
    EXPECT_EQ(in.data, in.storage.data());
    EXPECT_EQ(in.storage, own.storage);
    EXPECT_GE(in.storage.data(), filler.storage.end()) << "slices of one arena overlap";

    std::vector<kernels::WeightPart> parts = {{src.data(), 32, {}}, {src.data() + 32 * rb, rows - 32, {}}};
    const kernels::PackedWeight st = kernels::pack_stacked(type, parts, cols, 2, &arena);
    EXPECT_EQ(st.storage, own.storage);
  }
}

}  // namespace
}  // namespace lilims
