#include "quant/quant.h"

#include <cctype>
#include <cstring>

#include "base/fp16.h"
#include "quant/dequant_ref.h"
#include "quant/quantize.h"

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


// file_type: llama.cpp's LLAMA_FTYPE_ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q4_0 2,
// MOSTLY_Q4_1 3, MOSTLY_Q8_0 7, MOSTLY_Q5_0 8.
// Q5_0 is repacked only into 16-row groups (its qh words side by side, one
// per 32-bit lane: quant/repack.h); elsewhere it is read in its GGUF layout.
// Only the plain rounding writes it.
const TypeTraits kTraits[] = {
    // type, name, block_size, block_bytes, scale_bytes, to_float, from_float,
    //   act_type, repack, weight, file_type
    {Type::F32, "F32", 1, 4, 0, f32_to_float, f32_from_float, Type::F32, Repack::none, true, 0},
    {Type::F16, "F16", 1, 2, 0, f16_to_float, f16_from_float, Type::F32, Repack::none, true, 1},
    {Type::Q4_0, "Q4_0", kBlock, sizeof(BlockQ4_0), 2, q4_0_to_float, q4_0_from_float, Type::Q8_0,
     Repack::x4, true, 2},
    {Type::Q4_1, "Q4_1", kBlock, sizeof(BlockQ4_1), 4, q4_1_to_float, q4_1_from_float, Type::Q8_1,
     Repack::x4, true, 3},
    {Type::Q5_0, "Q5_0", kBlock, sizeof(BlockQ5_0), 2, q5_0_to_float, q5_0_from_float, Type::Q8_0,
     Repack::x16, true, 8},
    {Type::Q8_0, "Q8_0", kBlock, sizeof(BlockQ8_0), 2, q8_0_to_float, q8_0_from_float, Type::Q8_0,
     Repack::x4, true, 7},
    {Type::Q8_1, "Q8_1", kBlock, sizeof(BlockQ8_1), 4, q8_1_to_float, q8_1_from_float, Type::Q8_1,
     Repack::none, false, -1},
    // The K-quants: read in place (their GGUF layout); lilims reads them but
    // does not write them (no from_float, no file type), and where this CPU
    // has no kernel for them as fast as the converted type's the loader
    // converts them (quant/dequant_ref.h, kernels::kept_at_load).  Their
    // activations are the 32-blocks the converted path uses (Q4_K/Q5_K's
    // sub-blocks of 32 with a min: Q8_1; Q6_K's 16 without: Q8_0), not
    // llama.cpp's Q8_K (one scale per 256): measured on Gemma 3 270M, Q8_K
    // doubled the distance of its top-20 logits to llama.cpp's on a code
    // prompt (0.17 -> 0.38) where 32-blocks keep it.
    {Type::Q4_K, "Q4_K", kBlockK, sizeof(BlockQ4_K), 0, q4_k_to_float, nullptr, Type::Q8_1,
     Repack::none, true, -1},
    {Type::Q5_K, "Q5_K", kBlockK, sizeof(BlockQ5_K), 0, q5_k_to_float, nullptr, Type::Q8_1,
     Repack::none, true, -1},
    {Type::Q6_K, "Q6_K", kBlockK, sizeof(BlockQ6_K), 0, q6_k_to_float, nullptr, Type::Q8_0,
     Repack::none, true, -1},
};

}  // namespace

const TypeTraits& traits(Type type) {
  for (const TypeTraits& t : kTraits) {
    if (t.type == type) return t;
  }
  // Every enumerator has an entry (tests/quant/test_traits.cpp checks it);
  // an out-of-range cast lands here.
  return kTraits[0];
}

const TypeTraits* type_traits(uint32_t ggml_type) {
  for (const TypeTraits& t : kTraits) {
    if (static_cast<uint32_t>(t.type) == ggml_type && t.weight) return &t;
  }
  return nullptr;
}

const TypeTraits* type_traits_by_name(const std::string& name) {
  for (const TypeTraits& t : kTraits) {
    if (!t.weight || std::strlen(t.name) != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == t.name[i];
    }
    if (same) return &t;
  }
  return nullptr;
}

const char* ggml_type_name(uint32_t t) {
  static const char* const names[] = {
      "F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0",    "Q5_1",    "Q8_0",    "Q8_1",
      "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS",  "IQ3_XXS", "IQ1_S",
      "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16", "I32",  "I64",     "F64",     "IQ1_M",
      "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8",
      "IQ4_NL_8_8", "MXFP4"};
  if (t < sizeof(names) / sizeof(names[0])) return names[t];
  return "an unknown type";
}

size_t row_bytes(Type type, int64_t n) {
  const TypeTraits& t = traits(type);
  return (size_t)(n / t.block_size) * t.block_bytes;
}

}  // namespace lilims::quant
