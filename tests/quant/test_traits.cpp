// One traits entry per format: its facts agree with the block structs, the
// repacking, the kernels' activation formats and the GGUF writer, which all
// read them from quant::traits().
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "models/gguf.h"
#include "models/requantize.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "quant/repack.h"

namespace lilims::quant {
namespace {

const Type kAll[] = {Type::F32,  Type::F16,  Type::Q4_0, Type::Q4_1, Type::Q5_0,
                     Type::Q8_0, Type::Q8_1, Type::Q4_K, Type::Q5_K, Type::Q6_K};
bool k_quant_weight(Type t) { return t == Type::Q4_K || t == Type::Q5_K || t == Type::Q6_K; }

TEST(quant_traits, EveryTypeHasItsOwnEntry) {
  for (Type t : kAll) {
    const TypeTraits& tr = traits(t);
    EXPECT_EQ(t, tr.type) << tr.name;
    EXPECT_STREQ(ggml_type_name((uint32_t)t), tr.name);
    ASSERT_NE(nullptr, tr.to_float) << tr.name;
    // The K-quants are read, not written (no quantizer, no file type).
    EXPECT_EQ(k_quant_weight(t), tr.from_float == nullptr) << tr.name;
    EXPECT_EQ(tr.weight ? &tr : nullptr, type_traits((uint32_t)t)) << tr.name;
  }
  EXPECT_EQ(nullptr, type_traits((uint32_t)Type::Q8_1));  // activations only
  EXPECT_EQ(nullptr, type_traits(15));                      // Q8_K: not a lilims type
  EXPECT_EQ(nullptr, type_traits(11));                      // Q3_K: dequantized, no kernel
}

TEST(quant_traits, BlockGeometryMatchesTheStructs) {
  EXPECT_EQ(sizeof(BlockQ8_0), traits(Type::Q8_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_0), traits(Type::Q4_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ4_1), traits(Type::Q4_1).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_0), traits(Type::Q5_0).block_bytes);
  EXPECT_EQ(sizeof(BlockQ8_1), traits(Type::Q8_1).block_bytes);
  EXPECT_EQ(offsetof(BlockQ8_0, q), traits(Type::Q8_0).scale_bytes);
  EXPECT_EQ(offsetof(BlockQ4_0, qs), traits(Type::Q4_0).scale_bytes);
  EXPECT_EQ(offsetof(BlockQ4_1, qs), traits(Type::Q4_1).scale_bytes);
  EXPECT_EQ(offsetof(BlockQ5_0, qh), traits(Type::Q5_0).scale_bytes);
  EXPECT_EQ(offsetof(BlockQ8_1, q), traits(Type::Q8_1).scale_bytes);
  EXPECT_EQ(sizeof(BlockQ4_K), traits(Type::Q4_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ5_K), traits(Type::Q5_K).block_bytes);
  EXPECT_EQ(sizeof(BlockQ6_K), traits(Type::Q6_K).block_bytes);
  EXPECT_EQ(256, traits(Type::Q4_K).block_size);
  EXPECT_EQ(256, traits(Type::Q6_K).block_size);
  for (Type t : kAll) EXPECT_EQ(3 * traits(t).block_bytes, row_bytes(t, 3 * traits(t).block_size));
}

TEST(quant_traits, KernelsAndRepackReadTheTraits) {
  for (Type t : kAll) {
    const TypeTraits& tr = traits(t);
    EXPECT_EQ(tr.act_type, kernels::act_type(t)) << tr.name;
    EXPECT_EQ(row_bytes(tr.act_type, 96), kernels::act_row_bytes(t, 96)) << tr.name;
    EXPECT_EQ(tr.repack == Repack::x4, repackable_x4(t)) << tr.name;
    EXPECT_EQ(tr.repack != Repack::none, repackable(t, kLayoutX16)) << tr.name;
    // Rows 5 -> two 4-row groups; a group's block column holds 4 blocks.
    EXPECT_EQ(tr.repack == Repack::x4 ? 2 * 2 * 4 * tr.block_bytes : 0, repacked_bytes(t, kLayoutX4, 5, 64))
        << tr.name;
  }
  EXPECT_EQ(Type::Q8_1, kernels::act_type(Type::Q4_1));
  EXPECT_EQ(Type::Q8_0, kernels::act_type(Type::Q4_0));
  EXPECT_EQ(Type::Q8_0, kernels::act_type(Type::Q5_0));
  EXPECT_EQ(Type::Q8_1, kernels::act_type(Type::Q4_K));
  EXPECT_EQ(Type::Q8_1, kernels::act_type(Type::Q5_K));
  EXPECT_EQ(Type::Q8_0, kernels::act_type(Type::Q6_K));
  EXPECT_EQ(Type::F32, kernels::act_type(Type::F16));
}

TEST(quant_traits, FileTypesAndNames) {
  const std::pair<Type, int> ftypes[] = {
      {Type::F32, 0}, {Type::F16, 1}, {Type::Q4_0, 2}, {Type::Q4_1, 3}, {Type::Q5_0, 8}, {Type::Q8_0, 7},
      {Type::Q8_1, -1}, {Type::Q4_K, -1}, {Type::Q6_K, -1}};
  for (auto [t, f] : ftypes) {
    EXPECT_EQ(f, traits(t).file_type) << traits(t).name;
    EXPECT_EQ(f, gguf::file_type_of(t)) << traits(t).name;
  }
  ASSERT_NE(nullptr, type_traits_by_name("q4_1"));
  EXPECT_EQ(Type::Q4_1, type_traits_by_name("q4_1")->type);
  EXPECT_EQ(Type::F16, type_traits_by_name("F16")->type);
  EXPECT_EQ(nullptr, type_traits_by_name("Q8_1"));  // not a weight type
  EXPECT_EQ(nullptr, type_traits_by_name("Q4_"));
  EXPECT_EQ(nullptr, type_traits_by_name("Q4_00"));
}

// from_float then to_float stays within half a quantization step of the
// block's range (plus fp16 rounding of the scale), for every format.
TEST(quant_traits, FromFloatToFloatRoundTrip) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(128);
  for (float& v : x) v = nd(rng);
  for (Type t : kAll) {
    if (!traits(t).from_float) continue;  // the K-quants: read, never written
    const TypeTraits& tr = traits(t);
    std::vector<uint8_t> q(row_bytes(t, 128));
    std::vector<float> y(128);
    tr.from_float(x.data(), q.data(), 128, QuantMethod::plain);
    tr.to_float(q.data(), y.data(), 128);
    for (int b = 0; b < 4; ++b) {
      float lo = x[32 * b], hi = lo;
      for (int j = 0; j < 32; ++j) lo = std::min(lo, x[32 * b + j]), hi = std::max(hi, x[32 * b + j]);
      const float amax = std::max(std::fabs(lo), std::fabs(hi));
      // Half a step: Q8 amax/127 / 2, Q4_1 range/15 / 2, F16 2^-11 relative;
      // Q4_0 maps the largest magnitude to -8, so the other sign's end may
      // clip at +7: a whole step amax/8; Q5_0 likewise at -16 / +15, amax/16.
      const float step = t == Type::F32    ? 0.0f
                         : t == Type::F16  ? amax / 1024
                         : t == Type::Q4_1 ? (hi - lo) / 15
                         : t == Type::Q4_0 ? 2 * amax / 8
                         : t == Type::Q5_0 ? 2 * amax / 16
                                           : amax / 127;
      for (int j = 0; j < 32; ++j) {
        const int i = 32 * b + j;
        EXPECT_LE(std::fabs(x[i] - y[i]), step * 0.5f * 1.01f + amax * 1e-3f) << tr.name << " i=" << i;
      }
    }
  }
}

}  // namespace
}  // namespace lilims::quant
