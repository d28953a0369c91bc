// The reference dequantizers against the gguf PyPI package's
// gguf.quants.dequantize (scripts/goldens/gen_dequant_goldens.py wrote the
// goldens).  Tolerance 0: every element is one float rounding of an exact
// value (quant/dequant_ref.h says why), so the bits must match.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "models/gguf.h"
#include "quant/dequant_ref.h"
#include "quant/quant.h"
#include "test_util.h"

namespace lilims::quant {
namespace {

struct GoldenCase {
  uint32_t type = 0;
  std::string label;
  std::vector<uint8_t> blocks;
  std::vector<float> floats;
};

std::vector<GoldenCase> read_goldens() {
  const std::string bytes = test::read_file(test::source_path("tests/data/dequant_goldens.bin"));
  size_t at = 0;
  auto u32 = [&]() {
    uint32_t v = 0;
    if (at + 4 <= bytes.size()) std::memcpy(&v, bytes.data() + at, 4);
    at += 4;
    return v;
  };
  std::vector<GoldenCase> out;
  if (bytes.size() < 12 || bytes.compare(0, 4, "LDQG") != 0) return out;
  at = 4;
  if (u32() != 1) return out;
  const uint32_t n = u32();
  for (uint32_t k = 0; k < n; ++k) {
    GoldenCase c;
    c.type = u32();
    const uint32_t n_el = u32(), n_bytes = u32(), n_label = u32();
    if (at + n_label + n_bytes + 4ull * n_el > bytes.size()) return {};
    c.label = bytes.substr(at, n_label);
    at += n_label;
    c.blocks.assign(bytes.begin() + (long)at, bytes.begin() + (long)(at + n_bytes));
    at += n_bytes;
    c.floats.resize(n_el);
    std::memcpy(c.floats.data(), bytes.data() + at, 4ull * n_el);
    at += 4ull * n_el;
    out.push_back(std::move(c));
  }
  return out;
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(DequantRef, MatchesGgufPackageBitForBit) {
  const std::vector<GoldenCase> cases = read_goldens();
  ASSERT_GE(cases.size(), 9u) << "tests/data/dequant_goldens.bin missing or malformed";
  std::map<std::string, int> covered;
  for (const GoldenCase& c : cases) {
    const TypeTraits* t = readable_traits(c.type);
    ASSERT_NE(t, nullptr) << ggml_type_name(c.type);
    const TypeTraits& rt = *t;
    SCOPED_TRACE(std::string(rt.name) + " " + c.label);
    ASSERT_EQ(c.blocks.size() % rt.block_bytes, 0u);
    ASSERT_EQ(c.blocks.size() / rt.block_bytes * (size_t)rt.block_size, c.floats.size());
    std::vector<float> got(c.floats.size());
    rt.to_float(c.blocks.data(), got.data(), (int64_t)got.size());
    int mismatches = 0;
    for (size_t i = 0; i < got.size() && mismatches < 5; ++i) {
      if (bits(got[i]) != bits(c.floats[i])) {
        ++mismatches;
        ADD_FAILURE() << "element " << i << " (block " << i / (size_t)rt.block_size << "): got "
                      << got[i] << ", gguf " << c.floats[i];
      }
    }
    ++covered[rt.name];
  }
  for (const char* name : {"Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "BF16"}) {
    EXPECT_TRUE(covered.count(name)) << name << " has no golden";
  }
}

TEST(DequantRef, TraitsMatchGgmlGeometry) {
  // GGML's (block size, bytes) per type id, from its public type table.
  const struct { uint32_t id; int bs; size_t bytes; } kGgml[] = {
      {6, 32, 22}, {7, 32, 24}, {10, 256, 84}, {11, 256, 110}, {12, 256, 144},
      {13, 256, 176}, {14, 256, 210}, {20, 32, 18}, {30, 1, 2}};
  for (const auto& g : kGgml) {
    const TypeTraits* t = readable_traits(g.id);
    ASSERT_NE(t, nullptr) << g.id;
    EXPECT_STREQ(t->name, ggml_type_name(g.id));
    EXPECT_EQ(t->block_size, g.bs) << t->name;
    EXPECT_EQ(t->block_bytes, g.bytes) << t->name;
    // Each converts at load (on CPUs without a kernel as fast, for the
    // kernel types Q5_0 and the K-quants) into a kernel type.
    EXPECT_NE(static_cast<uint32_t>(t->load_as), g.id) << t->name;
    EXPECT_TRUE(traits(t->load_as).kernels) << t->name;
  }
  // Kernel types that are always kept have no conversion; types with neither
  // kernels nor a dequantizer stay unreadable.
  EXPECT_EQ(readable_traits(2)->load_as, Type::Q4_0);
  EXPECT_EQ(readable_traits(8)->load_as, Type::Q8_0);
  for (uint32_t id : {6u, 12u, 13u, 14u}) EXPECT_NE(type_traits(id), nullptr) << id;
  for (uint32_t id : {7u, 10u, 11u, 20u, 30u}) EXPECT_EQ(type_traits(id), nullptr) << id;
  EXPECT_EQ(readable_traits(16), nullptr);  // IQ2_XXS
  EXPECT_EQ(readable_traits(9), nullptr);   // Q8_1: activations only
}

// Q4_K -> Q4_1 on every Q4_K golden (random and Gemma's): each element is
// (d * scale) * q - dmin * min, now with d * scale and dmin * min rounded to
// fp16, so it moves by at most 2^-11 * (15 |d * scale| + |dmin * min|) (plus
// 2^-25 * 16 where the fp16 result is subnormal) and one float rounding.
TEST(DequantRef, Q4_KToQ4_1IsExactUpToFp16Scales) {
  int n_blocks = 0;
  for (const GoldenCase& c : read_goldens()) {
    if (c.type != 12) continue;
    SCOPED_TRACE(c.label);
    const int64_t n = (int64_t)c.floats.size();
    std::vector<BlockQ4_1> q41((size_t)n / kBlock);
    transcode_q4_k_to_q4_1(c.blocks.data(), q41.data(), n);
    std::vector<float> got((size_t)n);
    traits(Type::Q4_1).to_float(q41.data(), got.data(), n);
    for (size_t b = 0; b < q41.size(); ++b) {
      const double scale = std::fabs(fp16_to_fp32(q41[b].d)), min = std::fabs(fp16_to_fp32(q41[b].m));
      const double tol = 1.001 * 0x1p-11 * (15 * scale + min) + 16 * 0x1p-25;
      for (int j = 0; j < kBlock; ++j) {
        const size_t i = b * kBlock + (size_t)j;
        ASSERT_LE(std::fabs((double)got[i] - c.floats[i]), tol + 0x1p-23 * std::fabs(c.floats[i]))
            << "element " << i;
      }
      ++n_blocks;
    }
  }
  EXPECT_GE(n_blocks, 16);
}

std::string gemma_path() {
  const char* d = std::getenv("LILIMS_MODEL_DIR");
  const char* home = std::getenv("HOME");
  return (d ? std::string(d) : std::string(home ? home : ".") + "/.cache/lilims/models") +
         "/gemma-3-270m-q4_k_m.gguf";
}

// Every tensor of a real community Q4_K_M GGUF dequantizes to what gguf-py
// computes (XXH3-64 of the float32 bytes).  Only when the file is there: it
// is 240 MB (scripts/fetch_gemma.sh); not in LILIMS_REQUIRE_DATA's set.
TEST(GemmaFile, EveryTensorDequantizesAsGgufDoes) {
  const std::string path = gemma_path();
  if (!test::file_exists(path)) GTEST_SKIP() << "missing " << path << " (scripts/fetch_gemma.sh)";
  const nlohmann::json golden = nlohmann::json::parse(
      test::read_file(test::source_path("tests/data/gemma3_dequant_xxh3.json")));
  auto f = gguf::File::open(path);
  ASSERT_EQ(f->tensors().size(), golden["tensors"].size());
  std::vector<float> out;
  for (const gguf::TensorInfo& t : f->tensors()) {
    SCOPED_TRACE(t.name);
    const auto& g = golden["tensors"].at(t.name);
    EXPECT_EQ(g["type"].get<std::string>(), ggml_type_name(t.type));
    const TypeTraits* rt = readable_traits(t.type);
    ASSERT_NE(rt, nullptr);
    out.resize(t.n_elements);
    rt->to_float(t.data, out.data(), (int64_t)t.n_elements);
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx",
                  (unsigned long long)XXH3_64bits(out.data(), out.size() * sizeof(float)));
    EXPECT_EQ(g["xxh3_64"].get<std::string>(), hex);
  }
}

}  // namespace
}  // namespace lilims::quant
