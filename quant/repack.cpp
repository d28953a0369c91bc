#include "quant/repack.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

namespace lilims::quant {
namespace {

const LayoutTraits kLayouts[] = {
    // layout, name, group_rows, chunk_bytes
    {kLayoutGguf, "", 1, 0},
    {kLayoutX4, "x4", 4, 8},
    {kLayoutX16, "x16", 16, 4},
};
static_assert(sizeof(kLayouts) / sizeof(kLayouts[0]) == kLayoutCount, "one entry per layout");

// Quant bytes per row per block.
size_t quant_bytes(Type type) { return traits(type).block_bytes - traits(type).scale_bytes; }

}  // namespace

const LayoutTraits& layout_traits(int layout) {
  return kLayouts[layout > 0 && layout < kLayoutCount ? layout : kLayoutGguf];
}

bool repackable(Type type, int layout) {
  return layout > kLayoutGguf && layout < kLayoutCount && traits(type).packing[layout].holds;
}

uint8_t packed_xor(Type type, int layout) {
  const Packing& p = traits(type).packing[layout_traits(layout).layout];
#if defined(__aarch64__)
  return p.quant_xor_arm;
#else
  return p.quant_xor;
#endif
}

int layout_group_rows(int layout) { return layout_traits(layout).group_rows; }

size_t repacked_bytes(Type type, int layout, int64_t rows, int64_t cols) {
  if (!repackable(type, layout)) return 0;
  const int64_t g = layout_traits(layout).group_rows;
  return (size_t)((rows + g - 1) / g) * (size_t)(cols / traits(type).block_size) * (size_t)g * traits(type).block_bytes;
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
  const LayoutTraits& il = layout_traits(layout);
  const int64_t nb = cols / traits(type).block_size;
  const size_t src_block = traits(type).block_bytes;
  const size_t gbytes = (size_t)il.group_rows * src_block;
  const int n_chunks = (int)quant_bytes(type) / il.chunk_bytes;
  const int n_scales = (int)(traits(type).scale_bytes / 2);  // d (and m) per row
  const uint8_t x = packed_xor(type, layout);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < (rows + il.group_rows - 1) / il.group_rows; ++g) {
    const int in_group = (int)std::min<int64_t>(il.group_rows, rows - g * il.group_rows);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* out = d + (size_t)(g * nb + b) * gbytes;
      if (in_group < il.group_rows) std::memset(out, 0, gbytes);  // padding rows stay zero
      uint8_t* qs = out + 2 * il.group_rows * n_scales;
      for (int r = 0; r < in_group; ++r) {
        const uint8_t* blk = s + (size_t)(g * il.group_rows + r) * nb * src_block + (size_t)b * src_block;
        // Scales: d at 0 (and m at 2 for Q4_1) of the GGUF block.
        std::memcpy(out + 2 * r, blk, 2);
        if (n_scales == 2) std::memcpy(out + 2 * il.group_rows + 2 * r, blk + 2, 2);
        const uint8_t* q = blk + 2 * n_scales;
        if (il.chunk_bytes == 4) {
          put_chunks<4>(q, n_chunks, il.group_rows, r, x, qs);
        } else {
          put_chunks<8>(q, n_chunks, il.group_rows, r, x, qs);
        }
      }
    }
  }
}

void block_from_packed(Type type, int layout, const void* packed, int64_t cols, int64_t row,
                       int64_t b, void* out) {
  const LayoutTraits& il = layout_traits(layout);
  const int64_t nb = cols / traits(type).block_size;
  const size_t gbytes = (size_t)il.group_rows * traits(type).block_bytes;
  const uint8_t* in = static_cast<const uint8_t*>(packed) + (size_t)((row / il.group_rows) * nb + b) * gbytes;
  const int r = (int)(row % il.group_rows);
  const int n_scales = (int)(traits(type).scale_bytes / 2);
  const int n_chunks = (int)quant_bytes(type) / il.chunk_bytes;
  const uint8_t x = packed_xor(type, layout);
  uint8_t* o = static_cast<uint8_t*>(out);
  std::memcpy(o, in + 2 * r, 2);
  if (n_scales == 2) std::memcpy(o + 2, in + 2 * il.group_rows + 2 * r, 2);
  const uint8_t* qs = in + 2 * il.group_rows * n_scales;
  for (int c = 0; c < n_chunks; ++c) {
    const uint8_t* q = qs + (size_t)(c * il.group_rows + r) * il.chunk_bytes;
    for (int i = 0; i < il.chunk_bytes; ++i) o[2 * n_scales + c * il.chunk_bytes + i] = q[i] ^ x;
  }
}

void row_to_float(Type type, int layout, const void* packed, int64_t cols, int64_t row, float* out) {
  const TypeTraits& t = traits(type);
  if (layout == kLayoutGguf) {
    t.to_float(static_cast<const uint8_t*>(packed) + row_bytes(type, cols) * (size_t)row, out, cols);
    return;
  }
  alignas(16) uint8_t blk[kMaxPackedBlockBytes];
  for (int64_t b = 0; b < cols / t.block_size; ++b) {
    block_from_packed(type, layout, packed, cols, row, b, blk);
    t.to_float(blk, out + b * t.block_size, t.block_size);
  }
}

}  // namespace lilims::quant
