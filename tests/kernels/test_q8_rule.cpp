// The one Q8 rule (quant/quantize.h): every way a float row becomes Q8_0 or
// Q8_1 blocks (the weight quantizer, the activation quantizers of the matmul
// list, the ops tables' quantize_row_q8_0 used by the KV cache) gives the
// bytes of the scalar definition, bit for bit, over edge sizes, exact ties
// and misaligned pointers.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "matmul_test_util.h"
#include "quant/quantize.h"

namespace lilims {
namespace {

using quant::Type;

// The scalar definition, in the format `t` (Q8_0 or Q8_1).  Q8_1 carries
// the Q8_0 block's d and q plus s = fp16(d * sum(q)), with d before its fp16
// rounding recomputed from the same amax.
std::vector<uint8_t> scalar_q8(Type t, const float* x, int64_t k) {
  std::vector<uint8_t> q8(quant::row_bytes(Type::Q8_0, k));
  q8.reserve(q8.size() + 1);  // k = 0: not a null pointer
  EXPECT_TRUE(quant::quantize_row(Type::Q8_0, x, q8.data(), k, quant::QuantMethod::plain));
  if (t == Type::Q8_0) return q8;
  std::vector<uint8_t> out(quant::row_bytes(Type::Q8_1, k));
  for (int64_t b = 0; b < k / 32; ++b) {
    const uint8_t* in = q8.data() + 34 * b;
    uint8_t* o = out.data() + 36 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[32 * b + j]));
    int sum = 0;
    for (int j = 0; j < 32; ++j) sum += (int8_t)in[2 + j];
    const uint16_t s = fp32_to_fp16(amax / 127.0f * (float)sum);
    std::memcpy(o, in, 2);
    std::memcpy(o + 2, &s, 2);
    std::memcpy(o + 4, in + 2, 32);
  }
  return out;
}

// Seeded rows whose blocks hit the rule's edges: zeros, exact ties
// (x * id = n + 0.5 with id exact: amax = 127 * 2^e), values just off a tie,
// one huge value, and plain Gaussian blocks.
std::vector<float> edge_row(int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> level(-127, 126), exp2(-8, 8);
  std::vector<float> x((size_t)k);
  for (int64_t b = 0; b < k / 32; ++b) {
    float* xb = x.data() + 32 * b;
    const float scale = std::ldexp(1.0f, exp2(rng));
    switch (b % 5) {
      case 0:
        for (int j = 0; j < 32; ++j) xb[j] = nd(rng);
        break;
      case 1:
        for (int j = 0; j < 32; ++j) xb[j] = 0.0f;
        break;
      case 2:  // every element a tie
      case 3:  // ties and near-ties
        for (int j = 0; j < 32; ++j) {
          float v = ((float)level(rng) + 0.5f) * scale;
          if (b % 5 == 3 && j % 3 == 1) v = std::nextafter(v, j % 2 ? 1e30f : -1e30f);
          xb[j] = v;
        }
        xb[(b * 7) % 32] = (b % 2 ? -127.0f : 127.0f) * scale;  // amax: id = 1 / scale exactly
        break;
      case 4:
        for (int j = 0; j < 32; ++j) xb[j] = nd(rng) * 1e-3f;
        xb[5] = 3.0e4f;
        break;
    }
  }
  return x;
}

const int64_t kSizes[] = {0, 32, 64, 96, 32 * 7, 32 * 31, 32 * 128 + 32};

TEST(q8_rule, TiesRoundHalfAwayFromZero) {
  // amax 127 -> d = 1, id = 1: q is round(x) directly.
  float x[32] = {127.0f, 0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 126.5f, -126.5f, 0.49999997f};
  const int8_t want[10] = {127, 1, -1, 2, -2, 3, -3, 127, -127, 0};
  std::vector<uint8_t> got = scalar_q8(Type::Q8_0, x, 32);
  for (int j = 0; j < 10; ++j) EXPECT_EQ(want[j], (int8_t)got[2 + j]) << "x = " << x[j];
  for (const kernels::QuantizeKernel& q : kernels::quantize_kernels()) {
    if (!kernels::feature_available(q.needs)) continue;
    std::vector<uint8_t> y(quant::row_bytes(q.type, 32));
    q.fn(x, y.data(), 32);
    const size_t at = q.type == Type::Q8_1 ? 4 : 2;
    for (int j = 0; j < 10; ++j) EXPECT_EQ(want[j], (int8_t)y[at + j]) << q.name << " x = " << x[j];
  }
}

class q8_rule_kernel : public testing::TestWithParam<size_t> {};

TEST_P(q8_rule_kernel, BitExactWithScalarDefinition) {
  const kernels::QuantizeKernel& q = kernels::quantize_kernels()[GetParam()];
  if (!kernels::feature_available(q.needs)) {
    GTEST_SKIP() << "skipped: CPU lacks " << kernels::feature_name(q.needs) << " (" << q.name << ")";
  }
  for (int64_t k : kSizes) {
    const uint64_t seed = test::base_seed() + 1000 + (uint64_t)k;
    std::vector<float> row = edge_row(k, seed);
    row.reserve(row.size() + 1);  // k = 0: a valid pointer to no elements, not null
    std::vector<float> shifted(row.size() + 1);  // input one float off its alignment
    std::copy(row.begin(), row.end(), shifted.begin() + 1);
    const std::vector<uint8_t> want = scalar_q8(q.type, row.data(), k);
    std::vector<uint8_t> got(want.size() + 2, 0xAB);  // output 2 bytes off
    q.fn(shifted.data() + 1, got.data() + 2, k);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin() + 2))
        << q.name << " k=" << k << " seed=" << seed;
    EXPECT_EQ(0xAB, got[0]);  // nothing written before y
  }
}

INSTANTIATE_TEST_SUITE_P(All, q8_rule_kernel,
                         testing::Range<size_t>(0, kernels::quantize_kernels().size()),
                         [](const testing::TestParamInfo<size_t>& i) {
                           return std::string(kernels::quantize_kernels()[i.param].name);
                         });

class q8_rule_ops : public testing::TestWithParam<kernels::Isa> {};

TEST_P(q8_rule_ops, KvQuantizerBitExactWithScalarDefinition) {
  const kernels::Isa isa = GetParam();
  if (!kernels::ops_isa_built(isa)) GTEST_SKIP() << kernels::isa_name(isa) << ": not in this build";
  if (!kernels::ops_isa_runnable(isa)) GTEST_SKIP() << kernels::isa_name(isa) << ": this CPU lacks it";
  const kernels::OpsTable& ops = kernels::ops_table(isa);
  for (int64_t k : kSizes) {
    const uint64_t seed = test::base_seed() + 2000 + (uint64_t)k;
    std::vector<float> row = edge_row(k, seed);
    row.reserve(row.size() + 1);  // k = 0: a valid pointer to no elements, not null
    const std::vector<uint8_t> want = scalar_q8(Type::Q8_0, row.data(), k);
    std::vector<uint8_t> got(want.size() + 1);
    ops.quantize_row_q8_0(row.data(), got.data(), k);
    ASSERT_TRUE(std::equal(want.begin(), want.end(), got.begin()))
        << ops.name << " k=" << k << " seed=" << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(All, q8_rule_ops,
                         testing::Values(kernels::Isa::ref, kernels::Isa::avx2, kernels::Isa::neon),
                         [](const testing::TestParamInfo<kernels::Isa>& i) {
                           return std::string(kernels::isa_name(i.param));
                         });

}  // namespace
}  // namespace lilims
