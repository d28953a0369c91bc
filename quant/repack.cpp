#include "quant/repack.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace lilims::quant {
namespace {

struct Interleave {
  int rows;   // G
  int chunk;  // C
};

Interleave interleave(int layout) {
  return layout == kLayoutX16 ? Interleave{16, 4} : Interleave{4, 8};
}

// The XOR applied to a type's quant bytes in a layout.
uint8_t quant_xor(Type type, int layout) {
  if (layout == kLayoutX4 && type == Type::Q4_0) return kQ4_0X4Xor;
  if (layout == kLayoutX16 && type == Type::Q8_0) return kQ8_0X16Xor;
  return 0;
}

// Quant bytes per row per block.
size_t quant_bytes(Type type) { return traits(type).block_bytes - traits(type).scale_bytes; }

}  // namespace

bool repackable_x4(Type type) { return traits(type).repack == Repack::x4; }

bool repackable(Type type, int layout) {
  const Repack r = traits(type).repack;
  return (layout == kLayoutX4 && r == Repack::x4) ||
         (layout == kLayoutX16 && (r == Repack::x4 || r == Repack::x16));
}

int layout_group_rows(int layout) {
  return layout == kLayoutGguf ? 1 : interleave(layout).rows;
}

size_t repacked_bytes(Type type, int layout, int64_t rows, int64_t cols) {
  if (!repackable(type, layout)) return 0;
  const int64_t g = interleave(layout).rows;
  return (size_t)((rows + g - 1) / g) * (size_t)(cols / kBlock) * (size_t)g * traits(type).block_bytes;
}

namespace {

// One row's quant bytes of one block into its group: chunk c of the row goes
// to chunk slot c * G + r, each byte XORed with x.  C (the chunk) is a
// compile-time 4 or 8, so a chunk moves as one word.
template <int C>
void put_chunks(const uint8_t* q, int n_chunks, int g_rows, int r, uint8_t x, uint8_t* qs) {
  using Word = std::conditional_t<C == 4, uint32_t, uint64_t>;
  const Word xw = static_cast<Word>(0x0101010101010101ull) * x;
  for (int c = 0; c < n_chunks; ++c) {
    Word v;
    std::memcpy(&v, q + c * C, C);
    v ^= xw;
    std::memcpy(qs + (size_t)(c * g_rows + r) * C, &v, C);
  }
}

}  // namespace

void repack(Type type, int layout, const void* src, int64_t rows, int64_t cols, void* dst) {
  const Interleave il = interleave(layout);
  const int64_t nb = cols / kBlock;
  const size_t src_block = traits(type).block_bytes;
  const size_t gbytes = (size_t)il.rows * src_block;
  const int n_chunks = (int)quant_bytes(type) / il.chunk;
  const int n_scales = (int)(traits(type).scale_bytes / 2);  // d (and m) per row
  const uint8_t x = quant_xor(type, layout);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < (rows + il.rows - 1) / il.rows; ++g) {
    const int in_group = (int)std::min<int64_t>(il.rows, rows - g * il.rows);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = d + (size_t)(g * nb + b) * gbytes;
      if (in_group < il.rows) std::memset(out, 0, gbytes);  // padding rows stay zero
      uint8_t* qs = out + 2 * il.rows * n_scales;
      for (int r = 0; r < in_group; ++r) {
        const uint8_t* blk = s + (size_t)(g * il.rows + r) * nb * src_block + (size_t)b * src_block;
        // Scales: d at 0 (and m at 2 for Q4_1) of the GGUF block.
        std::memcpy(out + 2 * r, blk, 2);
        if (n_scales == 2) std::memcpy(out + 2 * il.rows + 2 * r, blk + 2, 2);
        const uint8_t* q = blk + 2 * n_scales;
        if (il.chunk == 4) {
          put_chunks<4>(q, n_chunks, il.rows, r, x, qs);
        } else {
          put_chunks<8>(q, n_chunks, il.rows, r, x, qs);
        }
      }
    }
  }
}

void block_from_packed(Type type, int layout, const void* packed, int64_t cols, int64_t row,
                       int64_t b, void* out) {
  const Interleave il = interleave(layout);
  const int64_t nb = cols / kBlock;
  const size_t gbytes = (size_t)il.rows * traits(type).block_bytes;
  const uint8_t* in = static_cast<const uint8_t*>(packed) + (size_t)((row / il.rows) * nb + b) * gbytes;
  const int r = (int)(row % il.rows);
  const int n_scales = (int)(traits(type).scale_bytes / 2);
  const int n_chunks = (int)quant_bytes(type) / il.chunk;
  const uint8_t x = quant_xor(type, layout);
  uint8_t* o = static_cast<uint8_t*>(out);
  std::memcpy(o, in + 2 * r, 2);
  if (n_scales == 2) std::memcpy(o + 2, in + 2 * il.rows + 2 * r, 2);
  const uint8_t* qs = in + 2 * il.rows * n_scales;
  for (int c = 0; c < n_chunks; ++c) {
    const uint8_t* q = qs + (size_t)(c * il.rows + r) * il.chunk;
    for (int i = 0; i < il.chunk; ++i) o[2 * n_scales + c * il.chunk + i] = q[i] ^ x;
  }
}

void row_to_float(Type type, int layout, const void* packed, int64_t cols, int64_t row, float* out) {
  const TypeTraits& t = traits(type);
  if (layout == kLayoutGguf) {
    t.to_float(static_cast<const uint8_t*>(packed) + row_bytes(type, cols) * (size_t)row, out, cols);
    return;
  }
  alignas(16) uint8_t blk[64];
  static_assert(sizeof(BlockQ8_0) <= sizeof blk && sizeof(BlockQ5_0) <= sizeof blk, "a block fits");
  for (int64_t b = 0; b < cols / kBlock; ++b) {
    block_from_packed(type, layout, packed, cols, row, b, blk);
    t.to_float(blk, out + b * kBlock, kBlock);
  }
}

}  // namespace lilims::quant
