// Weight repacking at load: GGUF row-major blocks -> row-interleaved groups
// (kernels::PackedWeight::layout).  The GGUF bytes are never modified.
//
// Layouts: rows are taken G at a time (group g = rows G*g..G*g+G-1); the
// groups follow each other, and inside a group the K/32 block columns follow
// each other, so a kernel streams one group with one pointer.  One block
// column of a group holds the G rows' scales side by side (d[G], then m[G]
// for Q4_1), then their quants in C-byte chunks, chunk-major: chunk c of row
// r at qs[(c * G + r) * C].
//   Q8_0: chunk c = elements C*c..C*c+C-1.
//   Q4_0/Q4_1: chunk c = packed bytes C*c..C*c+C-1 of the GGUF block, i.e.
//     elements C*c.. in the low nibbles and 16+C*c.. in the high.
//   Q5_0 (kLayoutX16 only): the 20 bytes after d as they are, qh then qs.
// When rows % G != 0 the last group is padded with zero blocks (scale 0),
// which kernels read but never write out.
//
// kLayoutX4: G = 4, C = 8.  A 32-byte load holds one chunk of all 4 rows
//   (AVX2), a 16-byte load one chunk of 2 rows (NEON; exactly an SMMLA
//   operand).  On aarch64 builds Q4_0 quant bytes are stored XOR kQ4_0X4Xor
//   (0x88): each nibble q becomes the 4-bit two's complement of q - 8, so
//   the NEON kernels get 16 * (q - 8) with one shift (low nibbles) or one
//   mask (high) and a signed shift gives q - 8 itself.  Elsewhere the bytes
//   are GGUF's (kQ4_0X4Xor = 0).
// kLayoutX16: G = 16, C = 4.  A 64-byte load holds one chunk of all 16 rows,
//   one row per 32-bit lane, so an unsigned x signed 4-byte dot product
//   (AVX-512 VNNI vpdpbusd) against 4 activation bytes broadcast to every
//   lane gives 16 rows at once.  Q8_0 quant bytes are stored XOR 0x80
//   (q + 128, unsigned); Q4 bytes are GGUF's.
// block_from_packed undoes the XORs; nothing else reads the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/quant.h"

namespace lilims::quant {

// A layout's geometry: G rows per group, C-byte chunks (kLayoutGguf: 1 row, no chunks).
struct LayoutTraits {
  int layout;
  const char* name;  // "x4", "x16" (pre-laid type names: "Q4_0x4"); "" for kLayoutGguf
  int group_rows;    // G
  int chunk_bytes;   // C
};
const LayoutTraits& layout_traits(int layout);

// Q4_0 quant bytes in kLayoutX4 as aarch64 builds write them: each nibble q
// becomes the 4-bit two's complement of q - 8.
constexpr uint8_t kQ4_0X4XorArm = 0x88;
#if defined(__aarch64__)
constexpr uint8_t kQ4_0X4Xor = kQ4_0X4XorArm;  // as this build writes them
#else
constexpr uint8_t kQ4_0X4Xor = 0x00;
#endif
constexpr uint8_t kQ8_0X16Xor = 0x80;
// The largest block of a format any layout holds (tests/quant/test_traits.cpp
// checks every entry against it).
constexpr size_t kMaxPackedBlockBytes = 64;

struct BlockQ8_0x4 {
  uint16_t d[4];      // fp16 scales of rows 0..3
  int8_t qs[4 * 32];  // (chunk 4, row 4, 8)
};
static_assert(sizeof(BlockQ8_0x4) == 136, "Q8_0x4 block is 136 bytes");

struct BlockQ4_0x4 {
  uint16_t d[4];
  uint8_t qs[4 * 16];  // (chunk 2, row 4, 8 bytes)
};
static_assert(sizeof(BlockQ4_0x4) == 72, "Q4_0x4 block is 72 bytes");

struct BlockQ4_1x4 {
  uint16_t d[4];
  uint16_t m[4];
  uint8_t qs[4 * 16];  // (chunk 2, row 4, 8 bytes)
};
static_assert(sizeof(BlockQ4_1x4) == 80, "Q4_1x4 block is 80 bytes");

// Q5_0 in kLayoutX16: its 20 bytes after d are 5 chunks of 4, so chunk 0
// is qh (row r's 32-bit mask at qh[r]: one row per lane of a 64-byte load)
// and chunks 1-4 the nibbles, as in BlockQ4_0x16.
struct BlockQ5_0x16 {
  uint16_t d[16];
  uint8_t qh[16 * 4];   // (row 16, 4 bytes): each row's 32 high bits, little-endian; bytes,
                        // so the block needs no more alignment than its fp16 scales
  uint8_t qs[16 * 16];  // (chunk 4, row 16, 4 bytes)
};
static_assert(sizeof(BlockQ5_0x16) == 352, "Q5_0x16 block is 352 bytes");
static_assert(alignof(BlockQ5_0x16) == 2, "Q5_0x16 blocks may start at any even address");

struct BlockQ8_0x16 {
  uint16_t d[16];
  uint8_t qs[16 * 32];  // (chunk 8, row 16, 4 bytes), q + 128
};
static_assert(sizeof(BlockQ8_0x16) == 544, "Q8_0x16 block is 544 bytes");

struct BlockQ4_0x16 {
  uint16_t d[16];
  uint8_t qs[16 * 16];  // (chunk 4, row 16, 4 bytes)
};
static_assert(sizeof(BlockQ4_0x16) == 288, "Q4_0x16 block is 288 bytes");

struct BlockQ4_1x16 {
  uint16_t d[16];
  uint16_t m[16];
  uint8_t qs[16 * 16];  // (chunk 4, row 16, 4 bytes)
};
static_assert(sizeof(BlockQ4_1x16) == 320, "Q4_1x16 block is 320 bytes");

// True when `layout` (not kLayoutGguf) holds `type` (its traits' packing):
// Q8_0, Q4_0 and Q4_1 in both, Q5_0 in kLayoutX16 only.
bool repackable(Type type, int layout);
// The XOR on `type`'s quant bytes in `layout` as this build writes them.
uint8_t packed_xor(Type type, int layout);
// Rows per group of a layout: 1 (GGUF), 4, 16.
int layout_group_rows(int layout);
// Bytes of the repacked matrix (rows rounded up to a multiple of G); 0 for a
// type that is not repacked or kLayoutGguf.  A group's block column is
// G * block_bytes.
size_t repacked_bytes(Type type, int layout, int64_t rows, int64_t cols);
// src: rows x cols GGUF row-major; dst: repacked_bytes bytes.
void repack(Type type, int layout, const void* src, int64_t rows, int64_t cols, void* dst);
// The GGUF block (BlockQ8_0 / BlockQ4_0 / BlockQ4_1) of (row, block column b)
// of a repacked matrix, copied into *out: the reference kernels read any
// layout through this.
void block_from_packed(Type type, int layout, const void* packed, int64_t cols, int64_t row,
                       int64_t b, void* out);
// Row `row` of a matrix in `layout` (kLayoutGguf or a repacked one) as cols
// floats, block by block through block_from_packed when repacked.
void row_to_float(Type type, int layout, const void* packed, int64_t cols, int64_t row, float* out);

}  // namespace lilims::quant
