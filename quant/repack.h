// Weight repacking at load: GGUF row-major blocks -> 4-row interleaved
// groups (kernels::kLayoutX4).  The GGUF bytes are never modified.
//
// Layout: rows are taken 4 at a time (group g = rows 4g..4g+3); the groups
// follow each other, and inside a group the K/32 block columns follow each
// other, so a kernel streams one group with one pointer.  One block column
// of a group holds the 4 rows' scales side by side, then their quants in
// 8-byte chunks, chunk-major: chunk c of row r at qs[(c * 4 + r) * 8].
//   Q8_0: chunk c = elements 8c..8c+7 (4 chunks).
//   Q4_0/Q4_1: chunk c = packed bytes 8c..8c+7 of the GGUF block, i.e.
//     elements 8c..8c+7 in the low nibbles and 16+8c..16+8c+7 in the high.
// A 32-byte load thus holds one chunk of all 4 rows (AVX2), a 16-byte load
// one chunk of 2 rows (NEON; exactly an SMMLA operand).  When rows % 4 != 0
// the last group is padded with zero blocks (scale 0), which kernels read
// but never write out.
//   On aarch64 builds Q4_0 quant bytes are stored XOR kQ4_0X4Xor (0x88):
// each nibble q becomes the 4-bit two's complement of q - 8, so the NEON
// kernels get 16 * (q - 8) with one shift (low nibbles) or one mask (high)
// and a signed shift gives q - 8 itself.  Elsewhere the bytes are GGUF's
// (kQ4_0X4Xor = 0).  block_from_x4 undoes it; nothing else reads the bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/quant.h"

namespace lilims::quant {

#if defined(__aarch64__)
constexpr uint8_t kQ4_0X4Xor = 0x88;
#else
constexpr uint8_t kQ4_0X4Xor = 0x00;
#endif

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

// True for the types repack_x4 handles (traits(type).repack == Repack::x4:
// Q8_0, Q4_0, Q4_1).  A group's block column is 4 * block_bytes: the rows'
// scale_bytes side by side, then their quants.
bool repackable_x4(Type type);
// Bytes of the repacked matrix (rows rounded up to a multiple of 4); 0 for a
// type that is not repacked.
size_t repacked_bytes_x4(Type type, int64_t rows, int64_t cols);
// src: rows x cols GGUF row-major; dst: repacked_bytes_x4 bytes.
void repack_x4(Type type, const void* src, int64_t rows, int64_t cols, void* dst);
// The GGUF block (BlockQ8_0 / BlockQ4_0 / BlockQ4_1) of (row, block column b)
// of a repacked matrix, copied into *out: the reference kernels read any
// layout through this.
void block_from_x4(Type type, const void* packed, int64_t cols, int64_t row, int64_t b, void* out);

}  // namespace lilims::quant
