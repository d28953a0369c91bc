// base/xxh3.h against libxxhash (Debian's libxxhash-dev, header-only here):
// every length from 0 to 2100 bytes (the 0-16, 17-128, 129-240 and long
// paths, block edges at 1 and 2 KB), seeds, and streams split at random
// points, for XXH3-64 and XXH3-128.  State files and manifests hold these
// values, so they must be libxxhash's bit for bit.
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "base/xxh3.h"

namespace lilims {
namespace {

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = (uint8_t)rng();
  return v;
}

// The seeds the one-shot hashes are checked with: 0 (the default secret),
// small, and ones with high bits (the derived secret's words wrap).
const uint64_t kSeeds[] = {0, 1, 0x9E3779B97F4A7C15ull, ~0ull};

TEST(Xxh3, OneShotEqualsLibxxhashAtEveryLength) {
  const uint64_t data_seed = 20240531;
  const std::vector<uint8_t> data = random_bytes(2101, data_seed);
  const uint8_t* p = data.data() + 1;  // the input need not be aligned
  for (size_t len = 0; len < data.size(); ++len) {
    for (uint64_t seed : kSeeds) {
      ASSERT_EQ(xxh3_64(p, len, seed), XXH3_64bits_withSeed(p, len, seed))
          << "length " << len << " seed " << seed << " data seed " << data_seed;
      const Hash128 got = xxh3_128(p, len, seed);
      const XXH128_hash_t want = XXH3_128bits_withSeed(p, len, seed);
      ASSERT_EQ(got.low, want.low64) << "length " << len << " seed " << seed;
      ASSERT_EQ(got.high, want.high64) << "length " << len << " seed " << seed;
    }
  }
}

TEST(Xxh3, LongInputEqualsLibxxhash) {
  const uint64_t data_seed = 7;
  const std::vector<uint8_t> data = random_bytes((3 << 20) + 123, data_seed);
  for (uint64_t seed : {0ull, 12345ull}) {
    EXPECT_EQ(xxh3_64(data.data(), data.size(), seed),
              XXH3_64bits_withSeed(data.data(), data.size(), seed));
    const Hash128 got = xxh3_128(data.data(), data.size(), seed);
    const XXH128_hash_t want = XXH3_128bits_withSeed(data.data(), data.size(), seed);
    EXPECT_EQ(got.low, want.low64);
    EXPECT_EQ(got.high, want.high64);
  }
}

// Streams split into random pieces (empty ones too) digest to the one-shot
// hash, after every piece.
TEST(Xxh3, StreamEqualsOneShot) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  const std::vector<uint8_t> data = random_bytes(20000, seed);
  for (int round = 0; round < 200; ++round) {
    const uint64_t hash_seed = round % 3 == 0 ? 0 : rng();
    const size_t total = rng() % (round < 100 ? 1100 : data.size() + 1);
    const size_t max_piece = 1 + rng() % (round % 2 ? 70 : 3000);
    Xxh3Stream stream(hash_seed);
    size_t at = 0;
    while (at < total) {
      const size_t piece = std::min<size_t>(rng() % (max_piece + 1), total - at);
      stream.update(data.data() + at, piece);
      at += piece;
      ASSERT_EQ(stream.digest_64(), XXH3_64bits_withSeed(data.data(), at, hash_seed))
          << "after " << at << " of " << total << " bytes, round " << round << " seed " << seed;
      const XXH128_hash_t want = XXH3_128bits_withSeed(data.data(), at, hash_seed);
      const Hash128 got = stream.digest_128();
      ASSERT_EQ(got.low, want.low64) << "after " << at << " bytes, round " << round << " seed " << seed;
      ASSERT_EQ(got.high, want.high64) << "after " << at << " bytes, round " << round << " seed " << seed;
    }
  }
}

TEST(Xxh3, EmptyStreamIsTheEmptyHash) {
  Xxh3Stream stream;
  EXPECT_EQ(stream.digest_64(), XXH3_64bits(nullptr, 0));
  stream.update(nullptr, 0);
  EXPECT_EQ(stream.digest_128().high, XXH3_128bits(nullptr, 0).high64);
}

}  // namespace
}  // namespace lilims
