// XXH3, the 64- and 128-bit hashes of xxHash, written from the algorithm's
// specification (xxHash's doc/xxhash_spec.md) so that no build of lilims
// needs xxhash.h.  The values are libxxhash's bit for bit --
// xxh3_64(p, n, seed) == XXH3_64bits_withSeed(p, n, seed),
// xxh3_128(p, n, seed) == XXH3_128bits_withSeed(p, n, seed), and a stream's
// digests equal the one-shot hashes of everything it was given -- because
// files hold them: a session state's checksum and model fingerprint
// (runtime/kv_state.h) and a manifest's hashes (runtime/manifest.h).
// tests/base/test_xxh3.cpp checks every length to 2 KB, seeds, and streams
// split at random against libxxhash.
//
// The code is portable scalar C++ (the accumulator loop vectorizes where the
// compiler can); inputs are read as little-endian, as every target is.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lilims {

// XXH128_hash_t's halves.  The canonical text (XXH128_canonicalFromHash) is
// `high` then `low`, each big-endian.
struct Hash128 {
  uint64_t low = 0, high = 0;
};

uint64_t xxh3_64(const void* data, size_t n, uint64_t seed = 0);
Hash128 xxh3_128(const void* data, size_t n, uint64_t seed = 0);

// The same hashes over input given in pieces: update() any number of times,
// then digest_64() / digest_128() (either or both; the stream can go on).
class Xxh3Stream {
 public:
  explicit Xxh3Stream(uint64_t seed = 0);
  void update(const void* data, size_t n);
  uint64_t digest_64() const;
  Hash128 digest_128() const;

 private:
  static constexpr size_t kBuffer = 256;  // 4 stripes of 64 bytes

  void consume(const uint8_t* p, size_t stripes);
  // The accumulators after the buffered tail, as a one-shot hash of the
  // whole input leaves them before its final merge.
  void finish(uint64_t acc[8]) const;

  uint64_t seed_;
  uint64_t total_ = 0;       // bytes given so far
  uint64_t acc_[8];          // over every stripe consumed
  size_t block_stripes_ = 0; // stripes consumed into the current 1 KB block
  size_t buffered_ = 0;      // bytes in buffer_, not consumed yet
  uint8_t buffer_[kBuffer];
  uint8_t before_[64];       // the 64 bytes consumed last: the final stripe
                             // reaches back into them when buffer_ holds < 64
  uint8_t secret_[192];      // derived from the seed, for inputs over 240 bytes
};

}  // namespace lilims
