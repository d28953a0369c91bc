// One table of format facts (quant/quant.cpp: kTraits): its entries agree
// with the block structs, with GGML's names and ids, with what each entry's
// own quantizer writes and dequantizer reads, with the repacking and the
// pre-laid ids, with the kernel list and with each other (a quantizer for
// every quantizable type, a kernel type behind every load conversion, a
// repacker behind every layout a kernel reads).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_test_util.h"  // tests/kernels: base_seed
#include "kernels/ops.h"
#include "models/requantize.h"
#include "quant/dequant_ref.h"
#include "quant/prelaid.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "quant/repack.h"

namespace lilims::quant {
namespace {

const Type kAll[] = {Type::F32,  Type::F16,  Type::Q4_0, Type::Q4_1, Type::Q5_0,
                     Type::Q5_1, Type::Q8_0, Type::Q8_1, Type::Q2_K, Type::Q3_K,
                     Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::IQ4_NL, Type::BF16};

uint32_t id_of(Type t) { return static_cast<uint32_t>(t); }

// n_blocks random blocks of `t` whose scales are finite (random bytes there
// could give NaNs, which compare unequal to themselves): every 16-bit word
// a format reads as fp16 or bf16 sits at an even offset of its block (every
// block_bytes is even), so clearing bit 14 of every word keeps those below
// 2; an F32's bit 30 likewise.
std::vector<uint8_t> random_blocks(const TypeTraits& t, size_t n_blocks, std::mt19937& rng) {
  std::vector<uint8_t> b(n_blocks * t.block_bytes);
  for (uint8_t& v : b) v = static_cast<uint8_t>(rng());
  const size_t word = t.type == Type::F32 ? 4 : 2;
  for (size_t i = 0; i + word <= b.size(); i += word) b[i + word - 1] &= 0xbf;
  return b;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(quant_traits, EveryEnumeratorHasItsOwnEntry) {
  std::set<uint32_t> ids;
  uint32_t last = 0;
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(t.name);
    EXPECT_EQ(&t, &traits(t.type));
    EXPECT_TRUE(ids.insert(id_of(t.type)).second);
    EXPECT_TRUE(ids.size() == 1 || id_of(t.type) > last) << "the table is in type id order";
    last = id_of(t.type);
  }
  EXPECT_EQ(ids.size(), sizeof kAll / sizeof kAll[0]);
  for (Type t : kAll) EXPECT_EQ(1u, ids.count(id_of(t))) << id_of(t);
}

TEST(quant_traits, NamesAndIdsRoundTrip) {
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(t.name);
    EXPECT_STREQ(ggml_type_name(id_of(t.type)), t.name);
    EXPECT_EQ(t.kernels ? &t : nullptr, type_traits(id_of(t.type)));
    EXPECT_EQ(t.in_files ? &t : nullptr, readable_traits(id_of(t.type)));
    // By name: the kernel types, in any case.
    std::string lower = t.name;
    for (char& c : lower) c = (char)std::tolower((unsigned char)c);
    EXPECT_EQ(t.kernels ? &t : nullptr, type_traits_by_name(t.name));
    EXPECT_EQ(t.kernels ? &t : nullptr, type_traits_by_name(lower));
  }
  // GGML's other names, and nothing for what GGML does not know.
  EXPECT_STREQ("Q8_K", ggml_type_name(15));
  EXPECT_STREQ("IQ2_XXS", ggml_type_name(16));
  EXPECT_STREQ("MXFP4", ggml_type_name(39));
  EXPECT_STREQ("an unknown type", ggml_type_name(40));
  EXPECT_EQ(nullptr, type_traits(15));      // Q8_K: not a lilims type
  EXPECT_EQ(nullptr, type_traits(11));      // Q3_K: dequantized, no kernel
  EXPECT_EQ(nullptr, readable_traits(16));  // IQ2_XXS: not even that
  EXPECT_EQ(nullptr, type_traits_by_name("Q8_1"));  // activations only
  EXPECT_EQ(nullptr, type_traits_by_name("Q4_"));
  EXPECT_EQ(nullptr, type_traits_by_name("Q4_00"));
}

TEST(quant_traits, BlockGeometryMatchesTheStructs) {
  // (type, sizeof its block struct, offset of its quants: 0 where not repacked)
  const struct {
    Type type;
    size_t bytes, quants;
  } kStructs[] = {
      {Type::Q4_0, sizeof(BlockQ4_0), offsetof(BlockQ4_0, qs)},
      {Type::Q4_1, sizeof(BlockQ4_1), offsetof(BlockQ4_1, qs)},
      {Type::Q5_0, sizeof(BlockQ5_0), offsetof(BlockQ5_0, qh)},
      {Type::Q5_1, sizeof(BlockQ5_1), 0},
      {Type::Q8_0, sizeof(BlockQ8_0), offsetof(BlockQ8_0, q)},
      {Type::Q8_1, sizeof(BlockQ8_1), offsetof(BlockQ8_1, q)},
      {Type::Q2_K, sizeof(BlockQ2_K), 0},
      {Type::Q3_K, sizeof(BlockQ3_K), 0},
      {Type::Q4_K, sizeof(BlockQ4_K), 0},
      {Type::Q5_K, sizeof(BlockQ5_K), 0},
      {Type::Q6_K, sizeof(BlockQ6_K), 0},
      {Type::IQ4_NL, sizeof(BlockIQ4_NL), 0},
  };
  for (const auto& s : kStructs) {
    EXPECT_EQ(s.bytes, traits(s.type).block_bytes) << traits(s.type).name;
    EXPECT_EQ(s.quants, traits(s.type).scale_bytes) << traits(s.type).name;
  }
  for (Type t : {Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K}) {
    EXPECT_EQ(kBlockK, traits(t).block_size) << traits(t).name;
  }
  for (const TypeTraits& t : all_traits()) {
    EXPECT_EQ(3 * t.block_bytes, row_bytes(t.type, 3 * t.block_size)) << t.name;
  }
}

// Each entry's dequantizer reads exactly block_bytes per block: two blocks
// at once give what each gives on its own, copied out at the stride the
// table says (a block_bytes off by any amount shifts the second block).
TEST(quant_traits, DequantizerReadsBlockBytesPerBlock) {
  const uint32_t seed = (uint32_t)test::base_seed();
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(std::string(t.name) + " seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    const std::vector<uint8_t> two = random_blocks(t, 2, rng);
    std::vector<float> both(2 * (size_t)t.block_size), each(2 * (size_t)t.block_size);
    t.to_float(two.data(), both.data(), 2 * t.block_size);
    for (int b = 0; b < 2; ++b) {
      const std::vector<uint8_t> one(two.begin() + (long)(b * t.block_bytes),
                                     two.begin() + (long)((b + 1) * t.block_bytes));
      t.to_float(one.data(), each.data() + b * t.block_size, t.block_size);
    }
    EXPECT_TRUE(same_bits(both, each));
    for (float v : both) ASSERT_TRUE(std::isfinite(v)) << "random_blocks made a non-finite block";
  }
}

// Each quantizer writes every byte of block_bytes per block and none past
// them, block by block: the bytes do not depend on what the buffer held,
// the bytes after the row keep theirs, and two blocks at once are each
// block quantized on its own.
TEST(quant_traits, QuantizersWriteBlockBytesPerBlock) {
  const uint32_t seed = (uint32_t)test::base_seed();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(std::string(t.name) + " seed " + std::to_string(seed));
    std::vector<float> x(2 * (size_t)t.block_size), importance(x.size());
    for (float& v : x) v = nd(rng);
    for (float& v : importance) v = std::fabs(nd(rng)) + 0.1f;
    const size_t n = 2 * t.block_bytes;
    struct Writer {
      const char* what;
      bool per_block;  // each block from its own floats (Q4_0's search weighs by the whole row)
      std::function<void(const float*, void*, int64_t)> write;
    };
    std::vector<Writer> writers;
    if (t.from_float) {
      writers.push_back({"plain", true, [&t](const float* s, void* d, int64_t k) {
                           t.from_float(s, d, k, QuantMethod::plain);
                         }});
      writers.push_back({"search", false, [&t](const float* s, void* d, int64_t k) {
                           t.from_float(s, d, k, QuantMethod::search);
                         }});
    }
    if (t.from_float_weighted) {
      writers.push_back({"weighted", true, [&t, &x, &importance](const float* s, void* d, int64_t k) {
                           t.from_float_weighted(s, d, k, importance.data() + (s - x.data()));
                         }});
    }
    for (const Writer& w : writers) {
      SCOPED_TRACE(w.what);
      std::vector<uint8_t> a(n + 16, 0xa5), b(n + 16, 0x5a), each(n + 16, 0x5a);
      w.write(x.data(), a.data(), 2 * t.block_size);
      w.write(x.data(), b.data(), 2 * t.block_size);
      EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n)) << "a byte of the row is not written";
      for (size_t i = n; i < n + 16; ++i) ASSERT_EQ(0xa5, a[i]) << "wrote past the row";
      if (!w.per_block) continue;
      for (int k = 0; k < 2; ++k) {
        w.write(x.data() + k * t.block_size, each.data() + k * t.block_bytes, t.block_size);
      }
      EXPECT_EQ(0, std::memcmp(b.data(), each.data(), n + 16)) << "blocks are not block_bytes apart";
    }
  }
}

// from_float then to_float stays within half a quantization step of the
// block's range (plus fp16 rounding of the scale), for every format
// lilims writes.
TEST(quant_traits, FromFloatToFloatRoundTrip) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(128);
  for (float& v : x) v = nd(rng);
  for (const TypeTraits& tr : all_traits()) {
    if (!tr.from_float) continue;  // read, never written
    const Type t = tr.type;
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

// The quantizers each entry offers are there, and fit together: every
// quantizable type has a quantizer and a file type, the weighted search
// behind the imatrix and AWQ, levels behind GPTQ.
TEST(quant_traits, EveryQuantizerItOffersIsThere) {
  std::set<int> file_types;
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(t.name);
    const bool plain = t.quantizers & kQuantPlain, imatrix = t.quantizers & kQuantImatrix;
    EXPECT_EQ(plain, t.file_type >= 0);
    if (plain) {
      EXPECT_NE(nullptr, t.from_float);
      EXPECT_TRUE(t.kernels && t.in_files);  // a file lilims writes, it can run
      EXPECT_TRUE(file_types.insert(t.file_type).second) << "file type " << t.file_type << " twice";
      EXPECT_EQ(t.file_type, gguf::file_type_of(t.type));
    }
    EXPECT_EQ(imatrix, t.from_float_weighted != nullptr);
    EXPECT_TRUE(!imatrix || plain);
    EXPECT_TRUE(!(t.quantizers & kQuantAwq) || imatrix);  // AWQ's scale search runs the weighted search
    if (t.quantizers & kQuantGptq) {
      EXPECT_TRUE(imatrix);  // GPTQ starts each block from the weighted search
      EXPECT_EQ(kBlock, t.block_size);  // models/gptq.cpp works in blocks of 32
      ASSERT_NE(nullptr, t.levels.set);
      ASSERT_NE(nullptr, t.levels.scale_min);
      EXPECT_LT(t.levels.lo, t.levels.hi);
    } else {
      EXPECT_EQ(nullptr, t.levels.set);
    }
    EXPECT_EQ(0u, t.quantizers & ~(unsigned)(kQuantPlain | kQuantImatrix | kQuantAwq | kQuantGptq));
  }
  // What `lilims quantize` offers today.
  EXPECT_TRUE(can_quantize(Type::Q5_0, kQuantPlain));
  EXPECT_FALSE(can_quantize(Type::Q5_0, kQuantGptq));
  EXPECT_FALSE(can_quantize(Type::Q4_K, kQuantPlain));
  for (Type t : {Type::Q4_0, Type::Q4_1, Type::Q8_0}) {
    EXPECT_TRUE(can_quantize(t, kQuantGptq) && can_quantize(t, kQuantAwq)) << traits(t).name;
  }
}

// A block's levels, written into a block the quantizer made, dequantize to
// d * q + m with the d and m the entry's scale_min reads.
TEST(quant_traits, LevelsAreWhatTheDequantizerReads) {
  const uint32_t seed = (uint32_t)test::base_seed();
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (const TypeTraits& t : all_traits()) {
    if (!t.levels.set) continue;
    SCOPED_TRACE(std::string(t.name) + " seed " + std::to_string(seed));
    std::vector<float> x((size_t)t.block_size), y(x.size());
    for (float& v : x) v = nd(rng);
    std::vector<uint8_t> block(t.block_bytes);
    t.from_float(x.data(), block.data(), t.block_size, QuantMethod::plain);
    std::vector<int> q(x.size());
    std::uniform_int_distribution<int> level(t.levels.lo, t.levels.hi);
    for (int& v : q) v = level(rng);
    q[0] = t.levels.lo;
    q[1] = t.levels.hi;
    t.levels.set(block.data(), q.data());
    float d = 0, m = 0;
    t.levels.scale_min(block.data(), &d, &m);
    t.to_float(block.data(), y.data(), t.block_size);
    // (within 4 ulp: d * q + m may be one fused rounding on one side)
    for (size_t j = 0; j < q.size(); ++j) EXPECT_FLOAT_EQ(y[j], d * (float)q[j] + m) << "element " << j;
  }
}

// The kernel types: their activation format is one the kernels quantize
// rows to (or floats), and every kernel type has kernels, the reference one
// at least.
TEST(quant_traits, KernelTypesHaveKernelsAndActivations) {
  std::set<Type> with_kernel;
  for (const kernels::MatmulKernel& k : kernels::matmul_kernels()) {
    SCOPED_TRACE(k.name);
    ASSERT_TRUE(traits(k.wtype).kernels);
    if (k.isa == kernels::Isa::ref) with_kernel.insert(k.wtype);
    // Every layout a kernel reads, its weight type's traits hold it in:
    // repack() (and the pre-laid ids) can make it.
    if (k.layout != kernels::kLayoutAny) {
      ASSERT_TRUE(k.layout >= 0 && k.layout < kLayoutCount);
      EXPECT_TRUE(traits(k.wtype).packing[k.layout].holds);
    }
  }
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(t.name);
    if (t.kernels) {
      EXPECT_TRUE(t.in_files);
      EXPECT_EQ(1u, with_kernel.count(t.type)) << "no reference kernel";
      const TypeTraits& a = traits(t.act_type);
      EXPECT_EQ(t.act_type, kernels::act_type(t.type));
      EXPECT_EQ(row_bytes(t.act_type, 256), kernels::act_row_bytes(t.type, 256));
      if (a.block_size > 1) {
        EXPECT_NE(nullptr, kernels::select_quantize_kernel(kernels::Isa::ref, t.type));
        EXPECT_EQ(0, t.block_size % a.block_size);
      } else {
        EXPECT_EQ(Type::F32, t.act_type);
      }
    } else {
      EXPECT_EQ(0u, with_kernel.count(t.type));
      EXPECT_EQ(0u, t.quantizers);
    }
  }
  EXPECT_EQ(Type::Q8_1, kernels::act_type(Type::Q4_1));
  EXPECT_EQ(Type::Q8_0, kernels::act_type(Type::Q4_0));
  EXPECT_EQ(Type::Q8_0, kernels::act_type(Type::Q5_0));
  EXPECT_EQ(Type::Q8_1, kernels::act_type(Type::Q4_K));
  EXPECT_EQ(Type::Q8_0, kernels::act_type(Type::Q6_K));
  EXPECT_EQ(Type::F32, kernels::act_type(Type::F16));
}

// What a load converts a type to is a kernel type it can quantize to, with
// no further conversion; a readable type without kernels has one.
TEST(quant_traits, EveryLoadConversionEndsAtAKernelType) {
  for (const TypeTraits& t : all_traits()) {
    SCOPED_TRACE(t.name);
    if (!t.in_files) continue;
    const TypeTraits& to = traits(t.load_as);
    EXPECT_TRUE(t.kernels || t.load_as != t.type) << "readable, but neither run nor converted";
    if (t.load_as == t.type) {
      EXPECT_EQ(nullptr, t.transcode);
      EXPECT_TRUE(kernels::kept_at_load(t.type));
      continue;
    }
    EXPECT_TRUE(to.kernels);
    EXPECT_TRUE(to.quantizers & kQuantPlain);
    EXPECT_EQ(to.load_as, to.type);
    EXPECT_TRUE(t.kernels || !kernels::kept_at_load(t.type));
  }
  EXPECT_EQ(Type::Q4_1, traits(Type::Q4_K).load_as);
  EXPECT_EQ(Type::Q8_0, traits(Type::Q5_0).load_as);
}

// Every layout a format names: its block fits the layout's chunks and the
// repacking's buffers, repack() and block_from_packed() give back its GGUF
// blocks (a partial group included), and it has a pre-laid id that names it.
TEST(quant_traits, EveryLayoutNamedHasARepacker) {
  const uint32_t seed = (uint32_t)test::base_seed();
  for (const TypeTraits& t : all_traits()) {
    EXPECT_TRUE(t.packing[kLayoutGguf].holds) << t.name;
    for (int layout = kLayoutGguf + 1; layout < kLayoutCount; ++layout) {
      const LayoutTraits& lt = layout_traits(layout);
      SCOPED_TRACE(std::string(t.name) + " in " + lt.name + ", seed " + std::to_string(seed));
      ASSERT_EQ(layout, lt.layout);
      EXPECT_EQ(t.packing[layout].holds, repackable(t.type, layout));
      if (!t.packing[layout].holds) {
        EXPECT_EQ(0u, repacked_bytes(t.type, layout, 5, 64));
        continue;
      }
      ASSERT_TRUE(t.kernels);
      ASSERT_TRUE(t.scale_bytes == 2 || t.scale_bytes == 4) << "d, or d and m: what repack() gathers";
      ASSERT_EQ(0u, (t.block_bytes - t.scale_bytes) % (size_t)lt.chunk_bytes);
      ASSERT_LE(t.block_bytes, kMaxPackedBlockBytes);
      std::mt19937 rng(seed);
      const int64_t rows = lt.group_rows + 3, cols = 3 * t.block_size;
      const std::vector<uint8_t> g = random_blocks(t, (size_t)(rows * 3), rng);
      std::vector<uint8_t> p(repacked_bytes(t.type, layout, rows, cols));
      ASSERT_EQ(p.size(), 2 * (size_t)lt.group_rows * 3 * t.block_bytes);
      repack(t.type, layout, g.data(), rows, cols, p.data());
      std::vector<uint8_t> blk(t.block_bytes);
      std::vector<float> want((size_t)cols), got((size_t)cols);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < 3; ++b) {
          block_from_packed(t.type, layout, p.data(), cols, r, b, blk.data());
          ASSERT_EQ(0, std::memcmp(blk.data(), g.data() + (size_t)(r * 3 + b) * t.block_bytes, t.block_bytes))
              << "row " << r << " block " << b;
        }
        t.to_float(g.data() + (size_t)(r * 3) * t.block_bytes, want.data(), cols);
        row_to_float(t.type, layout, p.data(), cols, r, got.data());
        ASSERT_TRUE(same_bits(want, got)) << "row " << r;
      }
      // Both variants of the bytes, where x86 and aarch64 builds XOR them
      // differently, have ids; the names say type, layout and variant.
      for (bool arm : {false, true}) {
        const PrelaidType pl = prelaid_for(t.type, layout, arm);
        const uint32_t id = prelaid_type_id(pl);
        PrelaidType back;
        ASSERT_TRUE(prelaid_type(id, &back));
        EXPECT_EQ(t.type, back.type);
        EXPECT_EQ(layout, back.layout);
        EXPECT_EQ(pl.arm_variant, back.arm_variant);
        EXPECT_EQ(arm && variant_xor(t.type, layout) != 0, back.arm_variant);
        EXPECT_EQ(std::string(t.name) + lt.name + (back.arm_variant ? "a" : ""), prelaid_type_name(id));
      }
#if defined(__aarch64__)
      EXPECT_EQ(t.packing[layout].quant_xor_arm, packed_xor(t.type, layout));
#else
      EXPECT_EQ(t.packing[layout].quant_xor, packed_xor(t.type, layout));
#endif
    }
  }
  EXPECT_EQ(kQ4_0X4Xor, packed_xor(Type::Q4_0, kLayoutX4));
  EXPECT_EQ(kQ8_0X16Xor, packed_xor(Type::Q8_0, kLayoutX16));
  EXPECT_FALSE(repackable(Type::Q5_0, kLayoutX4));
  EXPECT_TRUE(repackable(Type::Q5_0, kLayoutX16));
}

// The KV cache types: formats the kernels read, rows of whole blocks for
// the head sizes models use, attention_head_bytes its row.
TEST(quant_traits, KvCacheTypes) {
  std::set<Type> kv;
  for (const TypeTraits& t : all_traits()) {
    if (!t.kv) continue;
    kv.insert(t.type);
    EXPECT_TRUE(t.kernels && t.in_files) << t.name;
    EXPECT_EQ(0, 64 % t.block_size) << t.name;
    EXPECT_EQ((int64_t)row_bytes(t.type, 64), kernels::attention_head_bytes(t.type, 64)) << t.name;
  }
  EXPECT_EQ((std::set<Type>{Type::F32, Type::F16, Type::Q8_0}), kv);
}

}  // namespace
}  // namespace lilims::quant
