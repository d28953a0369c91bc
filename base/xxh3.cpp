// XXH3 (base/xxh3.h), following doc/xxhash_spec.md of xxHash section by
// section: inputs of 0-16 bytes, 17-240 bytes, and longer ones in 1 KB
// blocks of 16 stripes of 64 bytes.
#include "base/xxh3.h"

#include <cstring>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "XXH3 reads its input and secret as little-endian; a big-endian target needs byte swaps here"
#endif

namespace lilims {
namespace {

constexpr uint64_t kPrime32_1 = 0x9E3779B1u;
constexpr uint64_t kPrime32_2 = 0x85EBCA77u;
constexpr uint64_t kPrime32_3 = 0xC2B2AE3Du;
constexpr uint64_t kPrime64_1 = 0x9E3779B185EBCA87ull;
constexpr uint64_t kPrime64_2 = 0xC2B2AE3D27D4EB4Full;
constexpr uint64_t kPrime64_3 = 0x165667B19E3779F9ull;
constexpr uint64_t kPrime64_4 = 0x85EBCA77C2B2AE63ull;
constexpr uint64_t kPrime64_5 = 0x27D4EB2F165667C5ull;
constexpr uint64_t kPrimeMx1 = 0x165667919E3779F9ull;
constexpr uint64_t kPrimeMx2 = 0x9FB21C651E98DF25ull;

constexpr size_t kSecretSize = 192;
constexpr size_t kStripe = 64;
constexpr size_t kStripesPerBlock = (kSecretSize - kStripe) / 8;  // 16
constexpr size_t kMidMax = 240;  // the longest input of the medium path

// The default secret.
alignas(64) constexpr uint8_t kSecret[kSecretSize] = {
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
};

uint64_t read64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
uint32_t read32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
void write64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

uint32_t bswap32(uint32_t x) { return __builtin_bswap32(x); }
uint64_t bswap64(uint64_t x) { return __builtin_bswap64(x); }
uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }
uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// The full 128-bit product of two 64-bit values, and its halves xor-ed.
unsigned __int128 mul128(uint64_t a, uint64_t b) { return (unsigned __int128)a * b; }
uint64_t mul128_fold64(uint64_t a, uint64_t b) {
  const unsigned __int128 m = mul128(a, b);
  return (uint64_t)m ^ (uint64_t)(m >> 64);
}

uint64_t avalanche(uint64_t x) {
  x ^= x >> 37;
  x *= kPrimeMx1;
  return x ^ (x >> 32);
}
uint64_t avalanche_xxh64(uint64_t x) {
  x ^= x >> 33;
  x *= kPrime64_2;
  x ^= x >> 29;
  x *= kPrime64_3;
  return x ^ (x >> 32);
}

// The secret of a seeded hash of a long input: the default one, its 24
// 64-bit words alternately plus and minus the seed.
void derive_secret(uint64_t seed, uint8_t out[kSecretSize]) {
  for (size_t i = 0; i < kSecretSize; i += 16) {
    write64(out + i, read64(kSecret + i) + seed);
    write64(out + i + 8, read64(kSecret + i + 8) - seed);
  }
}

// ---- 0 to 16 bytes (secret: the default one) ----

uint64_t hash64_0to16(const uint8_t* p, size_t n, uint64_t seed) {
  const uint8_t* s = kSecret;
  if (n > 8) {
    const uint64_t lo = (read64(s + 24) ^ read64(s + 32)) + seed;
    const uint64_t hi = (read64(s + 40) ^ read64(s + 48)) - seed;
    const uint64_t a = read64(p) ^ lo, b = read64(p + n - 8) ^ hi;
    return avalanche(n + bswap64(a) + b + mul128_fold64(a, b));
  }
  if (n >= 4) {
    const uint64_t seed2 = seed ^ ((uint64_t)bswap32((uint32_t)seed) << 32);
    const uint64_t combined = read32(p + n - 4) | ((uint64_t)read32(p) << 32);
    uint64_t v = ((read64(s + 8) ^ read64(s + 16)) - seed2) ^ combined;
    v ^= rotl64(v, 49) ^ rotl64(v, 24);
    v *= kPrimeMx2;
    v ^= (v >> 35) + n;
    v *= kPrimeMx2;
    return v ^ (v >> 28);
  }
  if (n > 0) {
    const uint32_t combined = (uint32_t)p[n - 1] | ((uint32_t)n << 8) | ((uint32_t)p[0] << 16) |
                              ((uint32_t)p[n >> 1] << 24);
    const uint64_t v = ((uint64_t)(read32(s) ^ read32(s + 4)) + seed) ^ combined;
    return avalanche_xxh64(v);
  }
  return avalanche_xxh64(seed ^ read64(s + 56) ^ read64(s + 64));
}

Hash128 hash128_0to16(const uint8_t* p, size_t n, uint64_t seed) {
  const uint8_t* s = kSecret;
  if (n > 8) {
    const uint64_t first = read64(p), last = read64(p + n - 8);
    const uint64_t v1 = ((read64(s + 32) ^ read64(s + 40)) - seed) ^ first ^ last;
    const uint64_t v2 = ((read64(s + 48) ^ read64(s + 56)) + seed) ^ last;
    const unsigned __int128 m = mul128(v1, kPrime64_1);
    uint64_t lo = (uint64_t)m + ((uint64_t)(n - 1) << 54);
    uint64_t hi = (uint64_t)(m >> 64) + ((v2 >> 32) << 32) + (uint64_t)(uint32_t)v2 * kPrime32_2;
    lo ^= bswap64(hi);
    // {lo, hi} as one 128-bit value, times PRIME64_2.
    const unsigned __int128 m2 = mul128(lo, kPrime64_2);
    lo = (uint64_t)m2;
    hi = (uint64_t)(m2 >> 64) + hi * kPrime64_2;
    return {avalanche(lo), avalanche(hi)};
  }
  if (n >= 4) {
    const uint64_t seed2 = seed ^ ((uint64_t)bswap32((uint32_t)seed) << 32);
    const uint64_t combined = read32(p) | ((uint64_t)read32(p + n - 4) << 32);
    const uint64_t v = ((read64(s + 16) ^ read64(s + 24)) + seed2) ^ combined;
    const unsigned __int128 m = mul128(v, kPrime64_1 + (n << 2));
    uint64_t hi = (uint64_t)(m >> 64), lo = (uint64_t)m;
    hi += lo << 1;
    lo ^= hi >> 3;
    lo ^= lo >> 35;
    lo *= kPrimeMx2;
    lo ^= lo >> 28;
    return {lo, avalanche(hi)};
  }
  if (n > 0) {
    const uint32_t combined = (uint32_t)p[n - 1] | ((uint32_t)n << 8) | ((uint32_t)p[0] << 16) |
                              ((uint32_t)p[n >> 1] << 24);
    const uint64_t lo = ((uint64_t)(read32(s) ^ read32(s + 4)) + seed) ^ combined;
    const uint64_t hi =
        ((uint64_t)(read32(s + 8) ^ read32(s + 12)) - seed) ^ rotl32(bswap32(combined), 13);
    return {avalanche_xxh64(lo), avalanche_xxh64(hi)};
  }
  return {avalanche_xxh64(seed ^ read64(s + 64) ^ read64(s + 72)),
          avalanche_xxh64(seed ^ read64(s + 80) ^ read64(s + 88))};
}

// ---- 17 to 240 bytes (secret: the default one) ----

// 16 bytes of input against 16 of the secret.
uint64_t mix16(const uint8_t* p, const uint8_t* s, uint64_t seed) {
  return mul128_fold64(read64(p) ^ (read64(s) + seed), read64(p + 8) ^ (read64(s + 8) - seed));
}

// XXH3-128's step over two 16-byte chunks and 32 bytes of the secret.
void mix32(uint64_t acc[2], const uint8_t* a, const uint8_t* b, const uint8_t* s, uint64_t seed) {
  acc[0] += mix16(a, s, seed);
  acc[1] += mix16(b, s + 16, seed);
  acc[0] ^= read64(b) + read64(b + 8);
  acc[1] ^= read64(a) + read64(a + 8);
}

uint64_t hash64_17to240(const uint8_t* p, size_t n, uint64_t seed) {
  const uint8_t* s = kSecret;
  uint64_t acc = n * kPrime64_1;
  if (n <= 128) {
    // Chunks from the front paired with chunks from the back.
    for (size_t i = (n - 1) / 32 + 1; i-- > 0;) {
      acc += mix16(p + 16 * i, s + 32 * i, seed);
      acc += mix16(p + n - 16 * i - 16, s + 32 * i + 16, seed);
    }
    return avalanche(acc);
  }
  for (size_t i = 0; i < 8; ++i) acc += mix16(p + 16 * i, s + 16 * i, seed);
  acc = avalanche(acc);
  for (size_t i = 8; i < n / 16; ++i) acc += mix16(p + 16 * i, s + 16 * (i - 8) + 3, seed);
  acc += mix16(p + n - 16, s + 119, seed);
  return avalanche(acc);
}

Hash128 hash128_17to240(const uint8_t* p, size_t n, uint64_t seed) {
  const uint8_t* s = kSecret;
  uint64_t acc[2] = {n * kPrime64_1, 0};
  if (n <= 128) {
    for (size_t i = (n - 1) / 32 + 1; i-- > 0;) {
      mix32(acc, p + 16 * i, p + n - 16 * i - 16, s + 32 * i, seed);
    }
  } else {
    for (size_t i = 0; i < 4; ++i) mix32(acc, p + 32 * i, p + 32 * i + 16, s + 32 * i, seed);
    acc[0] = avalanche(acc[0]);
    acc[1] = avalanche(acc[1]);
    for (size_t i = 4; i < n / 32; ++i) {
      mix32(acc, p + 32 * i, p + 32 * i + 16, s + 32 * (i - 4) + 3, seed);
    }
    // The last 32 bytes, halves swapped and the seed negated.
    mix32(acc, p + n - 16, p + n - 32, s + 103, 0 - seed);
  }
  const uint64_t lo = acc[0] + acc[1];
  const uint64_t hi = acc[0] * kPrime64_1 + acc[1] * kPrime64_4 + (n - seed) * kPrime64_2;
  return {avalanche(lo), 0 - avalanche(hi)};
}

// ---- over 240 bytes: 8 accumulators, stripes of 64 bytes ----

void init_acc(uint64_t acc[8]) {
  const uint64_t init[8] = {kPrime32_3, kPrime64_1, kPrime64_2, kPrime64_3,
                            kPrime64_4, kPrime32_2, kPrime64_5, kPrime32_1};
  std::memcpy(acc, init, sizeof init);
}

// One stripe against 64 bytes of the secret.
void accumulate(uint64_t acc[8], const uint8_t* stripe, const uint8_t* s) {
  for (size_t i = 0; i < 8; ++i) {
    const uint64_t d = read64(stripe + 8 * i);
    const uint64_t k = d ^ read64(s + 8 * i);
    acc[i ^ 1] += d;
    acc[i] += (k & 0xFFFFFFFFu) * (k >> 32);
  }
}

// After each full block that more input follows.
void scramble(uint64_t acc[8], const uint8_t* secret) {
  const uint8_t* s = secret + kSecretSize - 64;
  for (size_t i = 0; i < 8; ++i) {
    uint64_t a = acc[i];
    a ^= a >> 47;
    a ^= read64(s + 8 * i);
    acc[i] = a * kPrime32_1;
  }
}

// The final stripe: the input's last 64 bytes, at its own secret offset.
void accumulate_last(uint64_t acc[8], const uint8_t* stripe, const uint8_t* secret) {
  accumulate(acc, stripe, secret + kSecretSize - 64 - 7);
}

// Every stripe of p[0, n) but the final one, in blocks.  On a local copy of
// the accumulators: a store through `out` could alias the input (uint8_t),
// which would make the compiler reload them every stripe.
void accumulate_long(uint64_t out[8], const uint8_t* p, size_t n, const uint8_t* secret) {
  constexpr size_t kBlock = kStripe * kStripesPerBlock;
  uint64_t acc[8];
  std::memcpy(acc, out, sizeof acc);
  const size_t blocks = (n - 1) / kBlock;  // the last block, even full, is the tail's
  for (size_t b = 0; b < blocks; ++b, p += kBlock) {
    for (size_t i = 0; i < kStripesPerBlock; ++i) accumulate(acc, p + kStripe * i, secret + 8 * i);
    scramble(acc, secret);
  }
  const size_t stripes = (n - blocks * kBlock - 1) / kStripe;
  for (size_t i = 0; i < stripes; ++i) accumulate(acc, p + kStripe * i, secret + 8 * i);
  std::memcpy(out, acc, sizeof acc);
}

uint64_t merge(const uint64_t acc[8], const uint8_t* s, uint64_t init) {
  uint64_t r = init;
  for (size_t i = 0; i < 4; ++i) {
    r += mul128_fold64(acc[2 * i] ^ read64(s + 16 * i), acc[2 * i + 1] ^ read64(s + 16 * i + 8));
  }
  return avalanche(r);
}

uint64_t merge64(const uint64_t acc[8], uint64_t n, const uint8_t* secret) {
  return merge(acc, secret + 11, n * kPrime64_1);
}

Hash128 merge128(const uint64_t acc[8], uint64_t n, const uint8_t* secret) {
  return {merge(acc, secret + 11, n * kPrime64_1),
          merge(acc, secret + kSecretSize - 64 - 11, ~(n * kPrime64_2))};
}

// The accumulators of a one-shot hash of n > 240 bytes.
void hash_long(uint64_t acc[8], const uint8_t* p, size_t n, const uint8_t* secret) {
  init_acc(acc);
  accumulate_long(acc, p, n, secret);
  accumulate_last(acc, p + n - kStripe, secret);
}

// The secret of a long input: the default one for seed 0, else derived.
const uint8_t* long_secret(uint64_t seed, uint8_t buf[kSecretSize]) {
  if (seed == 0) return kSecret;
  derive_secret(seed, buf);
  return buf;
}

}  // namespace

uint64_t xxh3_64(const void* data, size_t n, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (n <= 16) return hash64_0to16(p, n, seed);
  if (n <= kMidMax) return hash64_17to240(p, n, seed);
  uint8_t buf[kSecretSize];
  const uint8_t* secret = long_secret(seed, buf);
  uint64_t acc[8];
  hash_long(acc, p, n, secret);
  return merge64(acc, n, secret);
}

Hash128 xxh3_128(const void* data, size_t n, uint64_t seed) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  if (n <= 16) return hash128_0to16(p, n, seed);
  if (n <= kMidMax) return hash128_17to240(p, n, seed);
  uint8_t buf[kSecretSize];
  const uint8_t* secret = long_secret(seed, buf);
  uint64_t acc[8];
  hash_long(acc, p, n, secret);
  return merge128(acc, n, secret);
}

// The stream consumes a stripe only once input beyond it has arrived: the
// one-shot hash leaves the final stripe (the last 64 bytes) to the end and
// scrambles after a full block only when more input follows.  So buffer_
// holds 1 to 256 bytes once anything was consumed, and digests finish from
// a copy of the accumulators.
Xxh3Stream::Xxh3Stream(uint64_t seed) : seed_(seed) {
  init_acc(acc_);
  derive_secret(seed, secret_);
}

void Xxh3Stream::consume(const uint8_t* p, size_t stripes) {
  // Local copies, as in accumulate_long.
  uint64_t acc[8];
  std::memcpy(acc, acc_, sizeof acc);
  size_t block_stripes = block_stripes_;
  for (size_t i = 0; i < stripes; ++i) {
    accumulate(acc, p + kStripe * i, secret_ + 8 * block_stripes);
    if (++block_stripes == kStripesPerBlock) {
      scramble(acc, secret_);
      block_stripes = 0;
    }
  }
  std::memcpy(acc_, acc, sizeof acc);
  block_stripes_ = block_stripes;
}

void Xxh3Stream::update(const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (buffered_ + n <= kBuffer) {
    if (n > 0) std::memcpy(buffer_ + buffered_, p, n);
    buffered_ += n;
    return;
  }
  // More than the buffer holds: what is buffered plus the first of the new
  // bytes make full stripes that input follows.
  if (buffered_ > 0) {
    const size_t fill = kBuffer - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    p += fill, n -= fill;
    consume(buffer_, kBuffer / kStripe);
    std::memcpy(before_, buffer_ + kBuffer - kStripe, kStripe);
    buffered_ = 0;
  }
  if (n > kBuffer) {
    const size_t direct = (n - 1) / kBuffer * kBuffer;  // leaves 1 to 256 bytes
    consume(p, direct / kStripe);
    std::memcpy(before_, p + direct - kStripe, kStripe);
    p += direct, n -= direct;
  }
  std::memcpy(buffer_, p, n);
  buffered_ = n;
}

void Xxh3Stream::finish(uint64_t acc[8]) const {
  std::memcpy(acc, acc_, sizeof acc_);
  size_t block_stripes = block_stripes_;
  const size_t stripes = (buffered_ - 1) / kStripe;
  for (size_t i = 0; i < stripes; ++i) {
    accumulate(acc, buffer_ + kStripe * i, secret_ + 8 * block_stripes);
    if (++block_stripes == kStripesPerBlock) {
      scramble(acc, secret_);
      block_stripes = 0;
    }
  }
  uint8_t last[kStripe];
  if (buffered_ >= kStripe) {
    std::memcpy(last, buffer_ + buffered_ - kStripe, kStripe);
  } else {
    std::memcpy(last, before_ + buffered_, kStripe - buffered_);
    std::memcpy(last + kStripe - buffered_, buffer_, buffered_);
  }
  accumulate_last(acc, last, secret_);
}

uint64_t Xxh3Stream::digest_64() const {
  if (total_ <= kBuffer) return xxh3_64(buffer_, (size_t)total_, seed_);  // nothing consumed
  uint64_t acc[8];
  finish(acc);
  return merge64(acc, total_, secret_);
}

Hash128 Xxh3Stream::digest_128() const {
  if (total_ <= kBuffer) return xxh3_128(buffer_, (size_t)total_, seed_);
  uint64_t acc[8];
  finish(acc);
  return merge128(acc, total_, secret_);
}

}  // namespace lilims
