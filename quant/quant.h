// GGUF-compatible tensor types and block formats: one table, one entry per
// format (quant.cpp: kTraits).  The numeric values of Type are GGML's type
// ids as stored in GGUF files.
//
// Every fact about a format lives in its TypeTraits entry: block geometry,
// the scalar dequantizer and quantizers, which quantizers lilims offers for
// it (plain, imatrix, AWQ, GPTQ), whether the matmul kernels read it, the
// activation format they take, the layouts it can be repacked into (and
// with which byte XOR), what a load converts it to where it is not run as it
// is, whether it can hold the KV cache, and its GGUF file type.  The rest of
// the code asks traits() instead of switching over Type; adding a format is
// one entry (plus its kernels in kernels/matmul_kernels.inc).
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
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,  // activation-side format (Q8 with the block sum); not a weight type here
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ4_NL = 20,
  BF16 = 30,
};

constexpr int kBlock = 32;    // elements per block of Q4_0/Q4_1/Q5_0/Q8_0/Q8_1
constexpr int kBlockK = 256;  // elements per super-block of the K-quants
// A type's own block size is traits(type).block_size; code that handles
// every type asks that, not these.

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

// Q4_K, 256 elements in 144 bytes (4.5 bits each), 8 sub-blocks of 32:
// x[e] = d * scale[j] * q - dmin * min[j] with j = e / 32, (scale, min) eight
// 6-bit pairs packed in 12 bytes (k_scale_min in dequant_ref.cpp), q 0..15.
// For e = 64 * c + 32 * p + l (l < 32), q is nibble p (0 low, 1 high) of
// qs[32 * c + l].
struct BlockQ4_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qs[kBlockK / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");

// Q4_K/Q5_K's 12 scale bytes -> the 8 six-bit scales and the 8 mins.  As
// little-endian words w0..w2: scales 0-3 are w0's low 6 bits per byte, mins
// 0-3 w1's; scales 4-7 are w2's low nibbles with w0's top two bits above
// them, mins 4-7 w2's high nibbles with w1's top two bits.  (Word-wide, for
// the kernels; quant/dequant_ref.cpp's k_scale_min reads the same bits one
// pair at a time.)
inline void k_scales_mins(const uint8_t* s, uint8_t scales[8], uint8_t mins[8]) {
  uint32_t w[3] = {0, 0, 0};
  for (int i = 0; i < 12; ++i) w[i / 4] |= (uint32_t)s[i] << (8 * (i % 4));
  const uint32_t m6 = 0x3f3f3f3f, m4 = 0x0f0f0f0f, m2 = 0x03030303;
  const uint32_t v[4] = {w[0] & m6, (w[2] & m4) | ((w[0] >> 6) & m2) << 4, w[1] & m6,
                         ((w[2] >> 4) & m4) | ((w[1] >> 6) & m2) << 4};
  for (int i = 0; i < 8; ++i) {
    scales[i] = (uint8_t)(v[i / 4] >> (8 * (i % 4)));
    mins[i] = (uint8_t)(v[2 + i / 4] >> (8 * (i % 4)));
  }
}

// Q5_K, 256 elements in 176 bytes (5.5 bits each): Q4_K's formula and
// scales with q 0..31, its low 4 bits in qs as in Q4_K and bit 4 bit e / 32
// of qh[e % 32].
struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kBlockK / 8];
  uint8_t qs[kBlockK / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");

// Q6_K, 256 elements in 210 bytes (6.5625 bits each), 16 sub-blocks of 16:
// x[e] = d * scales[e / 16] * (q - 32), q 0..63.  For e = 128 * h + 32 * k +
// l (l < 32), q's low 4 bits are the low (k < 2) or high (k >= 2) nibble of
// ql[64 * h + 32 * (k % 2) + l], its top 2 bits bits 2k..2k+1 of
// qh[32 * h + l].
struct BlockQ6_K {
  uint8_t ql[kBlockK / 2];
  uint8_t qh[kBlockK / 4];
  int8_t scales[kBlockK / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");

// Weight layouts: GGUF's row-major blocks, or row-interleaved groups
// (quant/repack.h describes them; repack.cpp: their geometry).
constexpr int kLayoutGguf = 0;  // GGUF row-major blocks
constexpr int kLayoutX4 = 1;    // 4-row groups, 8-byte chunks
constexpr int kLayoutX16 = 2;   // 16-row groups, 4-byte chunks
constexpr int kLayoutCount = 3;

// plain: GGML's reference rounding; search: least squared error per block
// (quant/quantize.h).  Formats without a choice ignore it.
enum class QuantMethod { plain, search };

// The quantizers lilims offers for a format (TypeTraits::quantizers, a set
// of these bits).
enum Quantizer : unsigned {
  kQuantPlain = 1u << 0,    // from_float, both methods: a target of `lilims quantize`
  kQuantImatrix = 1u << 1,  // from_float_weighted: the search weighted by input importance
  kQuantAwq = 1u << 2,      // activation-aware scales folded into the norms (models/awq.h)
  kQuantGptq = 1u << 3,     // error compensation over its levels (models/gptq.h)
};

// A block whose elements are x = d * q + m with integer levels q in
// [lo, hi] (m = 0 for the symmetric formats): what GPTQ rounds against.
struct BlockLevels {
  int lo = 0, hi = 0;
  // d and m of a block, as it dequantizes them.
  void (*scale_min)(const void* block, float* d, float* m) = nullptr;
  // Writes block_size levels q (each in [lo, hi]) into a block; d and m stay.
  void (*set)(void* block, const int* q) = nullptr;
};

// How a format sits in a layout (quant/repack.h).
struct Packing {
  bool holds = false;         // the layout can hold the format
  uint8_t quant_xor = 0;      // XOR on its quant bytes there, as x86 builds write them
  uint8_t quant_xor_arm = 0;  // and as aarch64 builds write them
};

struct TypeTraits {
  Type type;
  const char* name;    // GGML's name ("Q4_0")
  int block_size;      // elements per block (1 for F32/F16/BF16)
  size_t block_bytes;  // bytes per block
  // Bytes at the head of a block before its quants: the fp16 scale (and
  // min / sum), which repacking gathers per row group; 0 for a format that
  // is not repacked.
  size_t scale_bytes;
  // Scalar reference: n elements (a multiple of block_size) to float.
  void (*to_float)(const void* src, float* dst, int64_t n);

  // --- reading -------------------------------------------------------------
  // Tensors in GGUF files may hold it (readable_traits()); false for an
  // activation-only format.
  bool in_files = true;
  // The matmul kernels read weights of it (type_traits() returns only these).
  bool kernels = false;
  Type act_type = Type::F32;  // the format activations are quantized to for its matmul
  // By layout id; [kLayoutGguf] holds every format.
  Packing packing[kLayoutCount] = {{true, 0, 0}};
  // The kernel type a load converts it to where it is not run as it is
  // (kernels::kept_at_load); `type` itself when it always is.
  Type load_as = Type::F32;
  // When set, converts n elements straight to load_as, with less error than
  // dequantizing and quantizing again; else the load goes through floats.
  void (*transcode)(const void* src, void* dst, int64_t n) = nullptr;
  bool kv = false;  // the KV cache can be held in it (rows of head_dim elements)

  // --- writing -------------------------------------------------------------
  unsigned quantizers = 0;  // Quantizer bits
  // Scalar reference: n floats (a multiple of block_size) into this format;
  // nullptr for a format lilims reads but does not write.
  void (*from_float)(const float* src, void* dst, int64_t n, QuantMethod method) = nullptr;
  // The search weighted by importance[j] (n non-negative floats): kQuantImatrix.
  void (*from_float_weighted)(const float* src, void* dst, int64_t n, const float* importance) = nullptr;
  BlockLevels levels = {};  // kQuantGptq
  int file_type = -1;  // general.file_type of a model stored in it (LLAMA_FTYPE_*); -1: none
};

// The entry of a Type (every enumerator has one).
const TypeTraits& traits(Type type);
// Every entry, in type id order.
struct TraitsList {
  const TypeTraits* first;
  size_t size;
  const TypeTraits* begin() const { return first; }
  const TypeTraits* end() const { return first + size; }
};
TraitsList all_traits();
// Traits of a weight type the kernels run, or nullptr for any other GGML
// type id (Q8_1 included: it only ever holds activations).
const TypeTraits* type_traits(uint32_t ggml_type);
// Traits of any type lilims can read from a file (run by the kernels, or
// converted at load), or nullptr.
const TypeTraits* readable_traits(uint32_t ggml_type);
// The kernel weight type named `name` (GGML's name, any case), or nullptr.
const TypeTraits* type_traits_by_name(const std::string& name);
// GGML's name for any type id ("Q6_K", "BF16", ...), "an unknown type" if unknown.
const char* ggml_type_name(uint32_t ggml_type);
// Bytes of a row of n elements; n must be a multiple of the block size.
size_t row_bytes(Type type, int64_t n);
// The names of the types that offer quantizer q, or that can hold the KV
// cache, in table order, joined by ", " ("F32, F16, Q8_0"): the lists of
// types in messages.
std::string type_names(Quantizer q);
std::string kv_type_names();
// Whether lilims offers quantizer q (a Quantizer bit) for `type`.
inline bool can_quantize(Type type, Quantizer q) { return (traits(type).quantizers & q) != 0; }

}  // namespace lilims::quant
