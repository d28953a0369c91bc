#include "quant/quant.h"

#include <cctype>
#include <cstring>

#include "base/fp16.h"
#include "quant/dequant_ref.h"
#include "quant/quantize.h"
#include "quant/repack.h"

namespace lilims::quant {
namespace {

void f32_to_float(const void* src, float* dst, int64_t n) {
  const float* s = static_cast<const float*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = s[i];
}

void f16_to_float(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(s[i]);
}

void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kBlock; ++j) dst[i * kBlock + j] = d * b[i].q[j];
  }
}

void q8_1_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ8_1* b = static_cast<const BlockQ8_1*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kBlock; ++j) dst[i * kBlock + j] = d * b[i].q[j];
  }
}

void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    for (int j = 0; j < kBlock / 2; ++j) {
      dst[i * kBlock + j] = d * ((b[i].qs[j] & 0x0f) - 8);
      dst[i * kBlock + j + kBlock / 2] = d * ((b[i].qs[j] >> 4) - 8);
    }
  }
}

void q5_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ5_0* b = static_cast<const BlockQ5_0*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i, dst += kBlock) {
    const float d = fp16_to_fp32(b[i].d);
    const uint32_t qh = (uint32_t)b[i].qh[0] | (uint32_t)b[i].qh[1] << 8 |
                        (uint32_t)b[i].qh[2] << 16 | (uint32_t)b[i].qh[3] << 24;
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0f) | (int)((qh >> j) & 1) << 4;
      const int hi = (b[i].qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
      dst[j] = d * (float)(lo - 16);
      dst[j + kBlock / 2] = d * (float)(hi - 16);
    }
  }
}

void q4_1_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_1* b = static_cast<const BlockQ4_1*>(src);
  for (int64_t i = 0; i < n / kBlock; ++i) {
    const float d = fp16_to_fp32(b[i].d);
    const float m = fp16_to_fp32(b[i].m);
    for (int j = 0; j < kBlock / 2; ++j) {
      dst[i * kBlock + j] = d * (b[i].qs[j] & 0x0f) + m;
      dst[i * kBlock + j + kBlock / 2] = d * (b[i].qs[j] >> 4) + m;
    }
  }
}

void f32_from_float(const float* x, void* y, int64_t n, QuantMethod) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}
void f16_from_float(const float* x, void* y, int64_t n, QuantMethod) {
  quantize_row_f16(x, static_cast<uint16_t*>(y), n);
}
void q8_0_from_float(const float* x, void* y, int64_t n, QuantMethod m) {
  quantize_row_q8_0(x, static_cast<BlockQ8_0*>(y), n, m);
}
void q8_1_from_float(const float* x, void* y, int64_t n, QuantMethod) {
  quantize_row_q8_1(x, static_cast<BlockQ8_1*>(y), n);
}
void q4_0_from_float(const float* x, void* y, int64_t n, QuantMethod m) {
  quantize_row_q4_0(x, static_cast<BlockQ4_0*>(y), n, m);
}
void q5_0_from_float(const float* x, void* y, int64_t n, QuantMethod) {
  quantize_row_q5_0(x, static_cast<BlockQ5_0*>(y), n);
}
void q4_1_from_float(const float* x, void* y, int64_t n, QuantMethod m) {
  quantize_row_q4_1(x, static_cast<BlockQ4_1*>(y), n, m);
}

void q8_0_from_float_weighted(const float* x, void* y, int64_t n, const float* w) {
  quantize_row_q8_0_weighted(x, static_cast<BlockQ8_0*>(y), n, w);
}
void q4_0_from_float_weighted(const float* x, void* y, int64_t n, const float* w) {
  quantize_row_q4_0_weighted(x, static_cast<BlockQ4_0*>(y), n, w);
}
void q4_1_from_float_weighted(const float* x, void* y, int64_t n, const float* w) {
  quantize_row_q4_1_weighted(x, static_cast<BlockQ4_1*>(y), n, w);
}

// Levels: Q8_0 d * q, q in [-127, 127] (int8 could hold -128; the
// quantizers never write it); Q4_0 d * q with q = nibble - 8 in [-8, 7];
// Q4_1 d * q + m with q the nibble in [0, 15].
// d of a block without a minimum.
template <class Block>
void scale_only(const void* block, float* d, float* m) {
  *d = fp16_to_fp32(static_cast<const Block*>(block)->d);
  *m = 0;
}
void q8_0_set_levels(void* block, const int* q) {
  auto* b = static_cast<BlockQ8_0*>(block);
  for (int j = 0; j < kBlock; ++j) b->q[j] = static_cast<int8_t>(q[j]);
}
void q4_0_set_levels(void* block, const int* q) {
  auto* b = static_cast<BlockQ4_0*>(block);
  for (int j = 0; j < kBlock / 2; ++j) {
    b->qs[j] = static_cast<uint8_t>((q[j] + 8) | ((q[j + kBlock / 2] + 8) << 4));
  }
}
void q4_1_scale_min(const void* block, float* d, float* m) {
  *d = fp16_to_fp32(static_cast<const BlockQ4_1*>(block)->d);
  *m = fp16_to_fp32(static_cast<const BlockQ4_1*>(block)->m);
}
void q4_1_set_levels(void* block, const int* q) {
  auto* b = static_cast<BlockQ4_1*>(block);
  for (int j = 0; j < kBlock / 2; ++j) b->qs[j] = static_cast<uint8_t>(q[j] | (q[j + kBlock / 2] << 4));
}

using ToFloat = void (*)(const void*, float*, int64_t);
using FromFloat = void (*)(const float*, void*, int64_t, QuantMethod);
using FromFloatWeighted = void (*)(const float*, void*, int64_t, const float*);
using Transcode = void (*)(const void*, void*, int64_t);

// One entry, filled by name: a format's geometry and dequantizer, then what
// else it has, each fact by the function that sets it.
struct Format {
  TypeTraits t;

  // The rest as TypeTraits' defaults say: read from files, nothing more.
  constexpr Format(Type type, const char* name, int block_size, size_t block_bytes,
                   size_t scale_bytes, ToFloat to_float)
      : t{type, name, block_size, block_bytes, scale_bytes, to_float} {
    t.load_as = type;
  }
  // The matmul kernels read it, with activations quantized to `act`.
  constexpr Format kernels(Type act) const {
    Format f = *this;
    f.t.kernels = true;
    f.t.act_type = act;
    return f;
  }
  // `layout` holds it, its quant bytes XOR x86_xor (arm_xor in aarch64 builds).
  constexpr Format packs(int layout, uint8_t x86_xor = 0, uint8_t arm_xor = 0) const {
    Format f = *this;
    f.t.packing[layout] = Packing{true, x86_xor, arm_xor};
    return f;
  }
  // Converted to `to` at load where it is not run as it is.
  constexpr Format loads_as(Type to, Transcode transcode = nullptr) const {
    Format f = *this;
    f.t.load_as = to;
    f.t.transcode = transcode;
    return f;
  }
  constexpr Format kv_cache() const {
    Format f = *this;
    f.t.kv = true;
    return f;
  }
  // Only activations are ever quantized to it: no tensor of a file holds it.
  constexpr Format activations(FromFloat from_float) const {
    Format f = *this;
    f.t.in_files = false;
    f.t.from_float = from_float;
    return f;
  }
  // A target of `lilims quantize` (kQuantPlain), stored with general.file_type file_type.
  constexpr Format writes(FromFloat from_float, int file_type) const {
    Format f = *this;
    f.t.from_float = from_float;
    f.t.quantizers |= kQuantPlain;
    f.t.file_type = file_type;
    return f;
  }
  // The imatrix-weighted search (kQuantImatrix), which AWQ's scale search
  // also runs (kQuantAwq).
  constexpr Format weighted(FromFloatWeighted from_float_weighted) const {
    Format f = *this;
    f.t.from_float_weighted = from_float_weighted;
    f.t.quantizers |= kQuantImatrix | kQuantAwq;
    return f;
  }
  // GPTQ over these levels (kQuantGptq).
  constexpr Format gptq(BlockLevels levels) const {
    Format f = *this;
    f.t.levels = levels;
    f.t.quantizers |= kQuantGptq;
    return f;
  }
  constexpr operator TypeTraits() const { return t; }
};

// The table, in type id order.
//
// file_type: llama.cpp's LLAMA_FTYPE_ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2,
// MOSTLY_Q4_1 3, MOSTLY_Q8_0 7, MOSTLY_Q5_0 8.
//
// Packing: Q8_0, Q4_0 and Q4_1 in 4- and 16-row groups; Q5_0 only in
// 16-row groups (its qh words side by side, one per 32-bit lane: quant/
// repack.h), elsewhere it is read in its GGUF layout.
//
// Quantizers: Q5_0 has GGML's plain rounding only (its search gives the
// same bytes), hence no weighted search and neither AWQ nor GPTQ.
//
// load_as, by error first, then size.  Q4_K -> Q4_1: exact up to fp16
// rounding of the scales (transcode_q4_k_to_q4_1), 5 bits per weight instead
// of 4.5.  Everything else -> Q8_0 (8.5 bits): its rounding error (at most
// 1/254 of each 32-block's largest magnitude) is far below that of the
// source formats (3 to 6 bits), so re-quantizing barely moves the weights,
// where a 4-bit kernel type would add an error as large as the source's own
// (Q2_K/Q3_K/Q6_K sub-blocks of 16 have two scales per Q4_1 block; Q5_1,
// IQ4_NL and Q6_K have more than 16 levels per block).  BF16 has 8
// significant bits; Q8_0 keeps 7-8 per element relative to the block max.
// For Q5_0 and the K-quant kernel types it is the conversion the loader
// applies only where kernels::kept_at_load says this CPU has no kernel for
// them as fast as the converted type's.
//
// The K-quants: read in place (their GGUF layout); lilims reads them but
// does not write them (no from_float, no file type).  Their activations are
// the 32-blocks the converted path uses (Q4_K/Q5_K's sub-blocks of 32 with a
// min: Q8_1; Q6_K's 16 without: Q8_0), not llama.cpp's Q8_K (one scale per
// 256): measured on Gemma 3 270M, Q8_K doubled the distance of its top-20
// logits to llama.cpp's on a code prompt (0.17 -> 0.38) where 32-blocks keep
// it.
//
// KV cache: F16 (the default), Q8_0 (head_dim a multiple of 32), F32 (tests,
// the oracle).
constexpr TypeTraits kTraits[] = {
    Format(Type::F32, "F32", 1, 4, 0, f32_to_float)
        .kernels(Type::F32).kv_cache().writes(f32_from_float, 0),
    Format(Type::F16, "F16", 1, 2, 0, f16_to_float)
        .kernels(Type::F32).kv_cache().writes(f16_from_float, 1),
    Format(Type::Q4_0, "Q4_0", kBlock, sizeof(BlockQ4_0), 2, q4_0_to_float)
        .kernels(Type::Q8_0).packs(kLayoutX4, 0, kQ4_0X4XorArm).packs(kLayoutX16)
        .writes(q4_0_from_float, 2).weighted(q4_0_from_float_weighted)
        .gptq({-8, 7, scale_only<BlockQ4_0>, q4_0_set_levels}),
    Format(Type::Q4_1, "Q4_1", kBlock, sizeof(BlockQ4_1), 4, q4_1_to_float)
        .kernels(Type::Q8_1).packs(kLayoutX4).packs(kLayoutX16)
        .writes(q4_1_from_float, 3).weighted(q4_1_from_float_weighted)
        .gptq({0, 15, q4_1_scale_min, q4_1_set_levels}),
    Format(Type::Q5_0, "Q5_0", kBlock, sizeof(BlockQ5_0), 2, q5_0_to_float)
        .kernels(Type::Q8_0).packs(kLayoutX16).loads_as(Type::Q8_0)
        .writes(q5_0_from_float, 8),
    Format(Type::Q5_1, "Q5_1", kBlock, sizeof(BlockQ5_1), 0, q5_1_to_float).loads_as(Type::Q8_0),
    Format(Type::Q8_0, "Q8_0", kBlock, sizeof(BlockQ8_0), 2, q8_0_to_float)
        .kernels(Type::Q8_0).packs(kLayoutX4).packs(kLayoutX16, kQ8_0X16Xor, kQ8_0X16Xor).kv_cache()
        .writes(q8_0_from_float, 7).weighted(q8_0_from_float_weighted)
        .gptq({-127, 127, scale_only<BlockQ8_0>, q8_0_set_levels}),
    Format(Type::Q8_1, "Q8_1", kBlock, sizeof(BlockQ8_1), 4, q8_1_to_float)
        .activations(q8_1_from_float),
    Format(Type::Q2_K, "Q2_K", kBlockK, sizeof(BlockQ2_K), 0, q2_k_to_float).loads_as(Type::Q8_0),
    Format(Type::Q3_K, "Q3_K", kBlockK, sizeof(BlockQ3_K), 0, q3_k_to_float).loads_as(Type::Q8_0),
    Format(Type::Q4_K, "Q4_K", kBlockK, sizeof(BlockQ4_K), 0, q4_k_to_float)
        .kernels(Type::Q8_1).loads_as(Type::Q4_1, transcode_q4_k_to_q4_1),
    Format(Type::Q5_K, "Q5_K", kBlockK, sizeof(BlockQ5_K), 0, q5_k_to_float)
        .kernels(Type::Q8_1).loads_as(Type::Q8_0),
    Format(Type::Q6_K, "Q6_K", kBlockK, sizeof(BlockQ6_K), 0, q6_k_to_float)
        .kernels(Type::Q8_0).loads_as(Type::Q8_0),
    Format(Type::IQ4_NL, "IQ4_NL", kBlock, sizeof(BlockIQ4_NL), 0, iq4_nl_to_float).loads_as(Type::Q8_0),
    Format(Type::BF16, "BF16", 1, 2, 0, bf16_to_float).loads_as(Type::Q8_0),
};
constexpr size_t kCount = sizeof(kTraits) / sizeof(kTraits[0]);

// Entry index by type id (-1: none), built from the table.
constexpr uint32_t kMaxId = 32;
struct Index {
  int8_t at[kMaxId];
};
constexpr Index make_index() {
  Index ix{};
  for (uint32_t id = 0; id < kMaxId; ++id) ix.at[id] = -1;
  for (size_t k = 0; k < kCount; ++k) {
    const uint32_t id = static_cast<uint32_t>(kTraits[k].type);  // an id >= kMaxId fails to compile
    ix.at[id] = static_cast<int8_t>(k);
  }
  return ix;
}
constexpr Index kIndex = make_index();

const TypeTraits* entry_of(uint32_t id) { return id < kMaxId && kIndex.at[id] >= 0 ? &kTraits[kIndex.at[id]] : nullptr; }

// GGML's names of the types lilims knows nothing of (the table names the rest).
struct OtherName {
  uint32_t id;
  const char* name;
};
const OtherName kOtherNames[] = {
    {4, "Q4_2"},       {5, "Q4_3"},        {15, "Q8_K"},       {16, "IQ2_XXS"},    {17, "IQ2_XS"},
    {18, "IQ3_XXS"},   {19, "IQ1_S"},      {21, "IQ3_S"},      {22, "IQ2_S"},      {23, "IQ4_XS"},
    {24, "I8"},        {25, "I16"},        {26, "I32"},        {27, "I64"},        {28, "F64"},
    {29, "IQ1_M"},     {31, "Q4_0_4_4"},   {32, "Q4_0_4_8"},   {33, "Q4_0_8_8"},   {34, "TQ1_0"},
    {35, "TQ2_0"},     {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"}, {39, "MXFP4"},
};

}  // namespace

const TypeTraits& traits(Type type) {
  // Every enumerator has an entry (tests/quant/test_traits.cpp checks it);
  // an out-of-range cast lands on the first.
  const TypeTraits* t = entry_of(static_cast<uint32_t>(type));
  return t ? *t : kTraits[0];
}

TraitsList all_traits() { return {kTraits, kCount}; }

const TypeTraits* type_traits(uint32_t ggml_type) {
  const TypeTraits* t = entry_of(ggml_type);
  return t && t->kernels ? t : nullptr;
}

const TypeTraits* readable_traits(uint32_t ggml_type) {
  const TypeTraits* t = entry_of(ggml_type);
  return t && t->in_files ? t : nullptr;
}

const TypeTraits* type_traits_by_name(const std::string& name) {
  for (const TypeTraits& t : kTraits) {
    if (!t.kernels || std::strlen(t.name) != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    }
    if (same) return &t;
  }
  return nullptr;
}

const char* ggml_type_name(uint32_t t) {
  if (const TypeTraits* tt = entry_of(t)) return tt->name;
  for (const OtherName& o : kOtherNames) {
    if (o.id == t) return o.name;
  }
  return "an unknown type";
}

namespace {
template <class Which>
std::string names_of(Which which) {
  std::string out;
  for (const TypeTraits& t : kTraits) {
    if (which(t)) out += (out.empty() ? "" : ", ") + std::string(t.name);
  }
  return out;
}
}  // namespace

std::string type_names(Quantizer q) {
  return names_of([q](const TypeTraits& t) { return (t.quantizers & q) != 0; });
}

std::string kv_type_names() {
  return names_of([](const TypeTraits& t) { return t.kv; });
}

size_t row_bytes(Type type, int64_t n) {
  const TypeTraits& t = traits(type);
  return (size_t)(n / t.block_size) * t.block_bytes;
}

}  // namespace lilims::quant
