#include "quant/repack.h"

#include <cstring>

namespace lilims::quant {
namespace {

// Bytes of one block column of a 4-row group: the 4 rows' blocks, rearranged.
size_t group_block_bytes(Type type) { return 4 * traits(type).block_bytes; }

// Quant bytes per row per block (chunks of 8 bytes each).
size_t quant_bytes(Type type) { return traits(type).block_bytes - traits(type).scale_bytes; }

}  // namespace

bool repackable_x4(Type type) { return traits(type).repack == Repack::x4; }

size_t repacked_bytes_x4(Type type, int64_t rows, int64_t cols) {
  if (!repackable_x4(type)) return 0;
  return (size_t)((rows + 3) / 4) * (size_t)(cols / kBlock) * group_block_bytes(type);
}

void repack_x4(Type type, const void* src, int64_t rows, int64_t cols, void* dst) {
  const int64_t nb = cols / kBlock;
  const size_t gbytes = group_block_bytes(type);
  const size_t src_block = traits(type).block_bytes;
  const size_t qbytes = quant_bytes(type);
  const int n_scales = (int)(traits(type).scale_bytes / 2);  // d (and m) per row
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < (rows + 3) / 4; ++g) {
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = d + (size_t)(g * nb + b) * gbytes;
      std::memset(out, 0, gbytes);
      uint8_t* qs = out + 8 * n_scales;
      for (int r = 0; r < 4; ++r) {
        const int64_t row = g * 4 + r;
        if (row >= rows) break;  // padding rows stay zero
        const uint8_t* blk = s + (size_t)row * nb * src_block + (size_t)b * src_block;
        // Scales: d at 0 (and m at 2 for Q4_1) of the GGUF block.
        std::memcpy(out + 2 * r, blk, 2);
        if (n_scales == 2) std::memcpy(out + 8 + 2 * r, blk + 2, 2);
        const uint8_t* q = blk + 2 * n_scales;
        for (int c = 0; c < (int)qbytes / 8; ++c) std::memcpy(qs + (c * 4 + r) * 8, q + c * 8, 8);
        if (type == Type::Q4_0 && kQ4_0X4Xor != 0) {
          for (int c = 0; c < (int)qbytes / 8; ++c) {
            for (int i = 0; i < 8; ++i) qs[(c * 4 + r) * 8 + i] ^= kQ4_0X4Xor;
          }
        }
      }
    }
  }
}

void block_from_x4(Type type, const void* packed, int64_t cols, int64_t row, int64_t b,
                   void* out) {
  const int64_t nb = cols / kBlock;
  const uint8_t* in =
      static_cast<const uint8_t*>(packed) + (size_t)((row / 4) * nb + b) * group_block_bytes(type);
  const int r = (int)(row % 4);
  const int n_scales = (int)(traits(type).scale_bytes / 2);
  uint8_t* o = static_cast<uint8_t*>(out);
  std::memcpy(o, in + 2 * r, 2);
  if (n_scales == 2) std::memcpy(o + 2, in + 8 + 2 * r, 2);
  const uint8_t* qs = in + 8 * n_scales;
  for (int c = 0; c < (int)quant_bytes(type) / 8; ++c) {
    std::memcpy(o + 2 * n_scales + c * 8, qs + (c * 4 + r) * 8, 8);
  }
  if (type == Type::Q4_0 && kQ4_0X4Xor != 0) {
    for (size_t i = 0; i < quant_bytes(type); ++i) o[2 * n_scales + i] ^= kQ4_0X4Xor;
  }
}

}  // namespace lilims::quant
