// GGUF-compatible tensor types and block formats, one traits entry each.
// The numeric values of Type are GGML's type ids as stored in GGUF files.
//
// Every fact about a format (block geometry, scalar conversions, the
// activation format its matmul takes, whether and how it is repacked, its
// GGUF file type) lives in its TypeTraits entry (quant.cpp); the rest of the
// code asks traits() instead of switching over Type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lilims::quant {

enum class Type : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q8_0 = 8,
  Q8_1 = 9,  // activation-side format (Q8 with the block sum); not a weight type here
};

constexpr int kBlock = 32;  // elements per block of every quantized type

// Q8_0: d * q[i]
struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t q[kBlock];
};
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");

// Q4_0: d * (nibble - 8); element j in the low nibble of byte j, j+16 in the high.
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");

// Q4_1: d * nibble + m; same nibble order as Q4_0.
struct BlockQ4_1 {
  uint16_t d;
  uint16_t m;
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");

// Q5_0: d * (q - 16), q 0..31; q's low 4 bits are the low nibble of qs[e]
// for e < 16, the high nibble of qs[e - 16] after (Q4_0's order), and bit 4
// is bit e of qh (a little-endian 32-bit mask, bytes: no alignment beyond 2).
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];
  uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");

// Q8_1 (activations for Q4_1 dot products): d * q[i], s = d * sum(q) in fp16.
struct BlockQ8_1 {
  uint16_t d;
  uint16_t s;
  int8_t q[kBlock];
};
static_assert(sizeof(BlockQ8_1) == 36, "Q8_1 block is 36 bytes");

// How a weight may be rearranged for the SIMD kernels (quant/repack.h).
enum class Repack : uint8_t {
  none,  // read in its GGUF layout
  x4,    // 4-row interleaved groups (kernels::kLayoutX4), or 16 (kLayoutX16)
  x16,   // 16-row groups only (kLayoutX16, where the AVX-512 VNNI kernels run)
};

// plain: GGML's reference rounding; search: least squared error per block
// (quant/quantize.h).  Formats without a choice ignore it.
enum class QuantMethod { plain, search };

struct TypeTraits {
  Type type;
  const char* name;    // GGML's name ("Q4_0")
  int block_size;      // elements per block (1 for F32/F16)
  size_t block_bytes;  // bytes per block
  // Bytes at the head of a block before its quants: the fp16 scale (and
  // min / sum), which repacking gathers per 4-row group; 0 for F32/F16.
  size_t scale_bytes;
  // Scalar reference: n elements (a multiple of block_size) to float.
  void (*to_float)(const void* src, float* dst, int64_t n);
  // Scalar reference: n floats (a multiple of block_size) into this format.
  void (*from_float)(const float* src, void* dst, int64_t n, QuantMethod method);
  Type act_type;       // the format activations are quantized to for its matmul
  Repack repack;       // the layout the kernels prefer, none if they read GGUF's
  bool weight;         // a weight type lilims reads from and writes to GGUF files
  int file_type;       // general.file_type of a model stored in it (LLAMA_FTYPE_*); -1: none
};

// The entry of a Type (every enumerator has one).
const TypeTraits& traits(Type type);
// Traits of a weight type lilims can read, or nullptr for any other GGML type
// id (Q8_1 included: it only ever holds activations).
const TypeTraits* type_traits(uint32_t ggml_type);
// The weight type named `name` (GGML's name, any case), or nullptr.
const TypeTraits* type_traits_by_name(const std::string& name);
// GGML's name for any type id ("Q6_K", "BF16", ...), "type <id>" if unknown.
const char* ggml_type_name(uint32_t ggml_type);
// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(Type type, int64_t n);

}  // namespace lilims::quant
