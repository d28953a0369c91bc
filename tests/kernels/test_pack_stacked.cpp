// kernels::pack_stacked: weights stacked row-wise must be the bytes
// pack_weight makes of their concatenation, with each part's slices reported
// as copied; can_stack refuses parts that would share a row group and weights
// pack_weight leaves in the GGUF layout.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "kernels/matmul.h"
#include "matmul_test_util.h"
#include "quant/quant.h"
#include "quant/repack.h"

namespace lilims {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> b(n);
  for (uint8_t& x : b) x = (uint8_t)rng();
  return b;
}

// Rows of a group of the layout pack_weight repacks `type` into; 0 when it
// leaves the type in the GGUF layout (the ref path).
int64_t repack_group_rows(quant::Type type) {
  const int layout = kernels::preferred_layout(type);
  return layout == kernels::kLayoutGguf ? 0 : quant::layout_group_rows(layout);
}

// The source bytes of weights of rows[i] x cols of `type`, part i random
// from seed + i.
std::vector<std::vector<uint8_t>> random_parts(quant::Type type, const std::vector<int64_t>& rows, int64_t cols,
                                               uint64_t seed) {
  const size_t rb = quant::row_bytes(type, cols);
  std::vector<std::vector<uint8_t>> parts;
  for (size_t i = 0; i < rows.size(); ++i) parts.push_back(random_bytes(rb * (size_t)rows[i], seed + i));
  return parts;
}

// The byte ranges a SourceDone was told about.
struct Seen {
  std::vector<std::pair<const void*, size_t>> slices;
  static void fn(void* user, const void* p, size_t n) { static_cast<Seen*>(user)->slices.push_back({p, n}); }
};

TEST(PackStacked, EqualsPackingTheConcatenation) {
  const int64_t cols = 96;
  for (quant::Type type : {quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q4_1}) {
    const int64_t g = repack_group_rows(type);
    if (g == 0) GTEST_SKIP() << "the ref path repacks nothing";
    // whole groups, then a last part with a partial group (padded at the end)
    const std::vector<int64_t> rows = {4 * g, g, 2 * g + 3};
    const uint64_t seed = test::base_seed() + (uint64_t)type;
    SCOPED_TRACE(std::string(quant::traits(type).name) + " seed " + std::to_string(seed));
    const size_t rb = quant::row_bytes(type, cols);
    const std::vector<std::vector<uint8_t>> parts = random_parts(type, rows, cols, seed);
    std::vector<uint8_t> all;
    std::vector<Seen> seen(rows.size());
    std::vector<kernels::WeightPart> wp;
    for (size_t i = 0; i < rows.size(); ++i) {
      all.insert(all.end(), parts[i].begin(), parts[i].end());
      wp.push_back({parts[i].data(), rows[i], kernels::SourceDone{&Seen::fn, &seen[i]}});
    }
    ASSERT_TRUE(kernels::can_stack(type, wp, true));
    const kernels::PackedWeight s = kernels::pack_stacked(type, wp, cols);
    const kernels::PackedWeight c =
        kernels::pack_weight(type, all.data(), (int64_t)all.size() / (int64_t)rb, cols, true);
    EXPECT_EQ(s.rows, c.rows);
    EXPECT_EQ(s.layout, c.layout);
    EXPECT_EQ(s.data, s.storage.data());
    EXPECT_EQ(s.storage, c.storage);
    for (size_t i = 0; i < rows.size(); ++i) {
      size_t n = 0;
      for (const auto& [p, bytes] : seen[i].slices) {
        EXPECT_EQ(p, parts[i].data() + n) << "part " << i;
        n += bytes;
      }
      EXPECT_EQ(n, parts[i].size()) << "part " << i;
    }
  }
}

// Slices repacked on several threads: the same bytes as on one, for every
// thread count (more than the cores too), and every source byte reported
// once, from whichever thread copied it (the model load packs on one
// thread per core; under TSan in every test_runtime load).
TEST(PackStacked, ThreadsChangeNoByte) {
  const int64_t cols = 64;
  for (quant::Type type : {quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q4_1}) {
    const int64_t g = repack_group_rows(type);
    if (g == 0) GTEST_SKIP() << "the ref path repacks nothing";
    const std::vector<int64_t> rows = {64 * g, 48 * g + 5};  // slices of 256 rows, a partial group
    const std::vector<std::vector<uint8_t>> parts = random_parts(type, rows, cols, 40);
    struct Count {
      std::atomic<size_t> bytes{0};
      static void fn(void* user, const void*, size_t n) { static_cast<Count*>(user)->bytes += n; }
    };
    std::vector<uint8_t> one_w, one_s;
    for (const int threads : {1, 2, 3, 8}) {
      SCOPED_TRACE(std::string(quant::traits(type).name) + ", " + std::to_string(threads) + " threads");
      Count single, stacked[2];
      const kernels::PackedWeight w = kernels::pack_weight(
          type, parts[1].data(), rows[1], cols, true, kernels::SourceDone{&Count::fn, &single}, threads);
      const std::vector<kernels::WeightPart> wp = {
          {parts[0].data(), rows[0], kernels::SourceDone{&Count::fn, &stacked[0]}},
          {parts[1].data(), rows[1], kernels::SourceDone{&Count::fn, &stacked[1]}}};
      const kernels::PackedWeight s = kernels::pack_stacked(type, wp, cols, threads);
      EXPECT_EQ(single.bytes.load(), parts[1].size());
      EXPECT_EQ(stacked[0].bytes.load(), parts[0].size());
      EXPECT_EQ(stacked[1].bytes.load(), parts[1].size());
      const std::vector<uint8_t> wb(w.storage.begin(), w.storage.end());
      const std::vector<uint8_t> sb(s.storage.begin(), s.storage.end());
      if (threads == 1) {
        one_w = wb;
        one_s = sb;
      } else {
        EXPECT_TRUE(wb == one_w);
        EXPECT_TRUE(sb == one_s);
      }
    }
  }
}

TEST(PackStacked, RefusesPartsSharingAGroup) {
  const quant::Type type = quant::Type::Q8_0;
  const int layout = kernels::preferred_layout(type);
  std::vector<uint8_t> bytes(quant::row_bytes(type, 32) * 64);
  // parts of these row counts, all over the same bytes
  auto parts = [&](std::initializer_list<int64_t> rows) {
    std::vector<kernels::WeightPart> p;
    for (int64_t r : rows) p.push_back({bytes.data(), r, {}});
    return p;
  };
  if (layout == kernels::kLayoutGguf) {
    EXPECT_FALSE(kernels::can_stack(type, parts({16, 16}), true));
    GTEST_SKIP() << "the ref path repacks nothing";
  }
  const int64_t g = quant::layout_group_rows(layout);
  EXPECT_TRUE(kernels::can_stack(type, parts({g, 3}), true));
  EXPECT_FALSE(kernels::can_stack(type, parts({g + 2, g}), true));
  EXPECT_FALSE(kernels::can_stack(type, parts({g, g}), false));
  EXPECT_FALSE(kernels::can_stack(quant::Type::F16, parts({g, g}), true));
  EXPECT_FALSE(kernels::can_stack(type, parts({g}), true));
  try {
    kernels::pack_stacked(type, parts({g + 2, g}), 32);
    FAIL() << "stacked parts that share a group";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(e.what()).rfind("[matmul]", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace lilims
