// Every matmul kernel of kernels/matmul_kernels.inc against the scalar
// reference, on seeded random data over edge shapes; the quantized graph
// path against the fp32 oracle; the thread pool; repacking.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "graph/matmul.h"
#include "kernels/matmul.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/quantize_q8_ref.h"
#include "matmul_test_util.h"
#include "quant/repack.h"

namespace lilims {
namespace {

using kernels::MatmulKernel;
using kernels::PackedWeight;
using quant::Type;

struct Shape {
  int64_t rows, K, n;
};

// Edge shapes: K from one block to 8192 with odd block counts, token counts
// 1, 2, 3, 7 (tails of the 4-token tiles), 64, 65, 512, rows not a multiple
// of the 4- or 16-row interleave.
const Shape kShapes[] = {
    {1, 32, 1},   {3, 32, 2},    {4, 64, 3},    {5, 96, 7},    {13, 160, 1},  {7, 1056, 2},
    {9, 8192, 1}, {6, 8192, 3},  {67, 256, 64}, {17, 288, 65}, {10, 64, 512}, {4, 32, 4},
    {8, 2048, 5}, {2, 4096, 7},
    // Token passes of 16, 8 and < 4 over K in several chunks (the NEON
    // multi-token driver interleaves 1024 elements of K at a time and adds
    // later chunks into Y); 11 rows: 3 groups, the last partial.
    {11, 2080, 27}, {12, 1056, 16},
    // 16-row groups (kLayoutX16) and the 8-token tiles of its kernels: a
    // partial third group, whole groups, tails of 1 and 7 tokens.
    {33, 544, 15}, {48, 1024, 9}, {16, 96, 8},
    // One token on a row range of one 4-row group (the NEON 1-token tile
    // takes it alone, two block columns per iteration): even and odd block
    // counts, long rows.
    {3, 96, 1}, {4, 64, 1}, {2, 1056, 1}, {4, 8224, 1}};

// The K-quants' shapes: K a multiple of 256 (1 to 16 super-blocks), the
// same token counts and row counts.
const Shape kShapesK[] = {{1, 256, 1},   {3, 256, 2},   {4, 512, 3},   {5, 768, 7},
                          {13, 1280, 1}, {7, 1024, 4},  {9, 2048, 1},  {6, 4096, 3},
                          {67, 256, 64}, {17, 512, 65}, {10, 256, 512}, {33, 768, 15},
                          {2, 1536, 5},  {4, 2304, 9}};

uint64_t case_seed(const Shape& s, int salt) {
  return test::base_seed() ^ (uint64_t)(s.rows * 1000003 + s.K * 1009 + s.n * 31 + salt);
}

std::string kernel_name(const testing::TestParamInfo<size_t>& info) {
  return kernels::matmul_kernels()[info.param].name;
}

std::vector<size_t> all_kernels() {
  std::vector<size_t> v(kernels::matmul_kernels().size());
  for (size_t i = 0; i < v.size(); ++i) v[i] = i;
  return v;
}

const MatmulKernel& ref_for(Type t) {
  for (const MatmulKernel& k : kernels::matmul_kernels()) {
    if (k.isa == kernels::Isa::ref && k.wtype == t) return k;
  }
  std::abort();
}

// A weight matrix in the layout the kernel reads, copied to an odd address
// (`misalign` bytes past a fresh allocation) to catch aligned-load bugs.
struct TestWeight {
  std::vector<uint8_t> buf;
  PackedWeight w;
};

TestWeight make_weight(Type t, const std::vector<uint8_t>& gguf, int64_t rows, int64_t cols,
                       int layout, size_t misalign) {
  TestWeight tw;
  std::vector<uint8_t> bytes = gguf;
  if (layout > kernels::kLayoutGguf) {
    bytes.assign(quant::repacked_bytes(t, layout, rows, cols), 0);
    quant::repack(t, layout, gguf.data(), rows, cols, bytes.data());
  }
  tw.buf.assign(bytes.size() + misalign, 0);
  std::memcpy(tw.buf.data() + misalign, bytes.data(), bytes.size());
  tw.w.type = t;
  tw.w.rows = rows;
  tw.w.cols = cols;
  tw.w.layout = layout < 0 ? 0 : layout;
  tw.w.data = tw.buf.data() + misalign;
  return tw;
}

class matmul_kernel : public testing::TestWithParam<size_t> {
 protected:
  void SetUp() override {
    const MatmulKernel& k = kernels::matmul_kernels()[GetParam()];
    if (!kernels::feature_available(k.needs)) {
      GTEST_SKIP() << "skipped: CPU lacks " << kernels::feature_name(k.needs) << " (" << k.name
                   << ")";
    }
  }
  const MatmulKernel& kern() const { return kernels::matmul_kernels()[GetParam()]; }
  bool quantized() const { return kern().wtype != Type::F32 && kern().wtype != Type::F16; }

  std::vector<Shape> shapes() const {
    if (test::is_k_quant(kern().wtype)) return {std::begin(kShapesK), std::end(kShapesK)};
    return {std::begin(kShapes), std::end(kShapes)};
  }

  // Runs kernel and reference on one shape; exact: integer data, results
  // must be equal; otherwise within the bound derived below.
  void check(const Shape& s, bool exact, int salt) {
    const MatmulKernel& k = kern();
    const Type wt = k.wtype, at = kernels::act_type(wt);
    const uint64_t seed = case_seed(s, salt);
    std::mt19937_64 rng(seed);
    test::RandOpts o;
    o.integer_scales = exact;
    // Integer results are exact in fp32 while every partial sum is < 2^24:
    // K * 128 * 127 < 2^24 for K <= 1024; beyond, |a| <= 7.  K-quants:
    // |scale * q| <= 63 * 31 (Q5_K; Q6_K 128 * 32), so |a| <= 3 up to
    // K = 1024, 1 up to 2048 (and larger K are not run exact).
    if (exact && s.K > 1024) o.act_range = 7;
    if (exact && test::is_k_quant(wt)) o.act_range = s.K <= 1024 ? 3 : 1;
    const std::vector<uint8_t> wg = test::random_weights(wt, s.rows, s.K, rng, o);
    const std::vector<uint8_t> ag = test::random_acts(at, s.n, s.K, rng, o);
    const size_t astride = kernels::act_row_bytes(wt, s.K);
    // Activations 2 bytes (quantized) / 1 float past an aligned start: block
    // structs hold fp16 fields, so 2-byte alignment is the kernels' contract
    // (UBSan checks it); anything coarser is not assumed.
    const size_t amis = quantized() ? 2 : 4;
    std::vector<uint8_t> abuf(ag.size() + amis);
    std::memcpy(abuf.data() + amis, ag.data(), ag.size());
    const uint8_t* act = abuf.data() + amis;

    TestWeight tw = make_weight(wt, wg, s.rows, s.K, k.layout, quantized() ? 2 : 4);
    TestWeight tr = make_weight(wt, wg, s.rows, s.K, kernels::kLayoutGguf, 0);
    // Output: ldy > rows, 1 float misaligned, a sentinel around.
    const int64_t ldy = s.rows + 3;
    const float kSentinel = 12345.0f;
    std::vector<float> yk(s.n * ldy + 1, kSentinel), yr(s.n * ldy + 1, kSentinel);
    k.fn(tw.w, 0, s.rows, act, astride, s.n, yk.data() + 1, ldy);
    ref_for(wt).fn(tr.w, 0, s.rows, act, astride, s.n, yr.data() + 1, ldy);

    SCOPED_TRACE(testing::Message() << k.name << " rows=" << s.rows << " K=" << s.K
                                    << " n=" << s.n << " seed=" << seed
                                    << (exact ? " (integer data)" : ""));
    int bad = 0;
    for (int64_t j = 0; j < s.n && bad < 5; ++j) {
      for (int64_t r = 0; r < ldy; ++r) {
        const float a = yk[1 + j * ldy + r], b = yr[1 + j * ldy + r];
        if (r >= s.rows) {  // padding of the output rows: never written
          ASSERT_EQ(a, kSentinel) << "wrote past r1 at row " << r << " token " << j;
          continue;
        }
        if (exact) {
          if (a != b) ++bad;
          EXPECT_EQ(a, b) << "row " << r << " token " << j;
          // Integer data: the reference must give the exact value itself.
          EXPECT_EQ((double)b, test::dot_double(wt, wg.data() + quant::row_bytes(wt, s.K) * r,
                                                act + astride * j, s.K))
              << "ref vs exact, row " << r << " token " << j;
          continue;
        }
        // Both compute the same sum of terms t_i (products of exact
        // integer block dots with the scales, or w_k * x_k), in different
        // orders.  Any order of summing m terms with fp32 (FMA or not) errs
        // by at most gamma_m * sum|t_i|, gamma_m ~ m*u; forming each term
        // (scale products, the fp16->fp32 conversions are exact) adds two
        // more roundings.  So |kernel - ref| <= 2 * (m + 3) * u * sum|t_i|,
        // m = K/32 (+ K/32 min terms for Q4_1) or K for float weights.
        const double terms = test::abs_terms(
            wt, wg.data() + quant::row_bytes(wt, s.K) * r, act + astride * j, s.K);
        const double m = quantized() ? 2.0 * s.K / 32 : (double)s.K;
        const double bound = 2 * (m + 3) * test::kU * terms + 1e-30;
        if (std::fabs((double)a - b) > bound) ++bad;
        EXPECT_LE(std::fabs((double)a - b), bound) << "row " << r << " token " << j << ": " << a
                                                   << " vs ref " << b;
        // The reference itself against the exact value (test::dot_double,
        // decoded independently): one fp32 sum of the same m terms, so the
        // same bound holds (it covers any order, the true sum included).
        const double exact_value = test::dot_double(
            wt, wg.data() + quant::row_bytes(wt, s.K) * r, act + astride * j, s.K);
        EXPECT_LE(std::fabs((double)b - exact_value), bound)
            << "ref vs exact, row " << r << " token " << j << ": " << b << " vs " << exact_value;
      }
    }
    ASSERT_EQ(yk[0], kSentinel) << "wrote before Y";
  }
};

TEST_P(matmul_kernel, IntegerDataIsExact) {
  if (!quantized()) GTEST_SKIP() << "float weights: no integer path";
  for (const Shape& sh : shapes()) {
    if (test::is_k_quant(kern().wtype) && sh.K > 2048) continue;
    check(sh, true, 1);
    if (HasFatalFailure()) return;
  }
}

TEST_P(matmul_kernel, MatchesRefWithinBound) {
  for (const Shape& sh : shapes()) {
    check(sh, false, 2);
    if (HasFatalFailure()) return;
  }
}

// A long row of the most extreme blocks, every scale 1: each row's block sum
// is the same (Q8_0 weights -128, Q4_0 -8, Q5_0 -16, Q4_1 15; activations
// 127) and the row has enough blocks that a running int32 sum over the row
// passes 2^31 (the NEON 1-token tile keeps one, taking each block's sum as a
// difference of totals; at Q4_0 as 16 (q - 8)).  Q8_0, Q4_0 and Q5_0 sums
// are 127 * 2^12, 127 * 2^8 and 127 * 2^9 (and any part of a block's sum a
// kernel keeps apart, 127 * 2^k too): every fp32 partial sum of them is
// exact, so the results must equal the reference.  Q4_1's 15 * 127 * 32 = 60960 is
// smaller: it needs 35231 blocks, beyond exact fp32 sums, so it is checked
// against the reference within the bound of `check`, far below the 2^32
// a wrong wrap would add.
TEST_P(matmul_kernel, LongRowOfExtremeBlocks) {
  const MatmulKernel& k = kern();
  const Type wt = k.wtype, at = kernels::act_type(wt);
  if (!quantized()) GTEST_SKIP() << "float weights: no integer sums";
  if (test::is_k_quant(wt)) {
    // Each super-block's int32 lanes start from 0 (a K-quant kernel sums a
    // row in float, super-block by super-block: nothing to wrap).
    GTEST_SKIP() << k.name << ": no sum over the row in int32";
  }
  const int64_t rows = 3, nb = wt == Type::Q4_1 ? 35231 : 4131, K = 32 * nb;
  const size_t wbb = test::block_bytes(wt), abb = test::block_bytes(at);
  std::vector<uint8_t> wg(rows * nb * wbb), ag(nb * abb);
  const uint16_t one = 0x3c00, zero = 0;  // fp16 1.0, 0.0
  for (int64_t b = 0; b < rows * nb; ++b) {
    uint8_t* p = &wg[b * wbb];
    std::memcpy(p, &one, 2);
    if (wt == Type::Q8_0) std::memset(p + 2, 0x80, 32);  // -128
    if (wt == Type::Q4_0) std::memset(p + 2, 0x00, 16);  // nibble 0: -8
    if (wt == Type::Q5_0) std::memset(p + 2, 0x00, 20);  // qh and nibbles 0: -16
    if (wt == Type::Q4_1) {
      std::memcpy(p + 2, &zero, 2);   // m = 0
      std::memset(p + 4, 0xff, 16);  // nibbles 15
    }
  }
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = &ag[b * abb];
    std::memcpy(p, &one, 2);
    if (at == Type::Q8_1) std::memcpy(p + 2, &zero, 2);
    std::memset(p + (at == Type::Q8_1 ? 4 : 2), 127, 32);
  }
  TestWeight tw = make_weight(wt, wg, rows, K, k.layout, 0);
  TestWeight tr = make_weight(wt, wg, rows, K, kernels::kLayoutGguf, 0);
  const size_t st = kernels::act_row_bytes(wt, K);
  std::vector<float> yk(rows, -1.0f), yr(rows, -1.0f);
  k.fn(tw.w, 0, rows, ag.data(), st, 1, yk.data(), rows);
  ref_for(wt).fn(tr.w, 0, rows, ag.data(), st, 1, yr.data(), rows);
  // One block's sum (every scale 1).
  const double block = (wt == Type::Q8_0   ? -128.0
                        : wt == Type::Q4_0 ? -8.0
                        : wt == Type::Q5_0 ? -16.0
                                           : 15.0) *
                       127 * 32;
  for (int64_t r = 0; r < rows; ++r) {
    if (wt == Type::Q4_1) {
      // As in `check`: 2 (m + 3) u sum|t_i|, m = 2 nb terms, sum|t_i| = nb * |block|.
      const double bound = 2 * (2.0 * nb + 3) * test::kU * nb * std::fabs(block);
      EXPECT_LE(std::fabs((double)yk[r] - yr[r]), bound) << k.name << " row " << r;
    } else {
      EXPECT_EQ(yk[r], yr[r]) << k.name << " row " << r;
      EXPECT_EQ((double)yr[r], nb * block) << "reference, row " << r;
    }
  }
}

// A row range that starts inside the matrix (r0 a multiple of the layout's
// group) and ends inside a group: only [r0, r1) may be written.
TEST_P(matmul_kernel, RowSubrange) {
  const MatmulKernel& k = kern();
  const Type wt = k.wtype;
  const int64_t g = quant::layout_group_rows(k.layout < 0 ? 0 : k.layout);
  const int64_t r0 = g == 1 ? 3 : g, r1 = r0 + g + (g == 1 ? 5 : g / 2);
  const int64_t rows = r1 + 3 + g, K = test::is_k_quant(wt) ? 512 : 96, n = 11;
  std::mt19937_64 rng(test::base_seed() + 7);
  const std::vector<uint8_t> wg = test::random_weights(wt, rows, K, rng, {});
  const std::vector<uint8_t> ag = test::random_acts(kernels::act_type(wt), n, K, rng, {});
  TestWeight tw = make_weight(wt, wg, rows, K, k.layout, 0);
  TestWeight tr = make_weight(wt, wg, rows, K, 0, 0);
  std::vector<float> yk(n * rows, -1.0f), yr(n * rows, -1.0f);
  const size_t st = kernels::act_row_bytes(wt, K);
  k.fn(tw.w, r0, r1, ag.data(), st, n, yk.data(), rows);
  ref_for(wt).fn(tr.w, r0, r1, ag.data(), st, n, yr.data(), rows);
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t r = 0; r < rows; ++r) {
      if (r < r0 || r >= r1) {
        EXPECT_EQ(yk[j * rows + r], -1.0f) << k.name << " wrote row " << r;
      } else {
        EXPECT_NEAR(yk[j * rows + r], yr[j * rows + r], 1e-4 * (1 + std::fabs(yr[j * rows + r])));
      }
    }
  }
}

// A token's outputs do not depend on the other tokens of the call (the tile
// it falls in, the tail, the token chunk): one call over n tokens equals n
// calls of one token, bit for bit.  A prompt evaluated in two pieces then
// gets the same matmul results as in one.  Not so for the aarch64 dotprod
// and i8mm kernels: their multi-token tiles sum a row's blocks in another
// order than the one-token loop, so for them the test is skipped, saying
// why (MatchesRefWithinBound bounds how far either order may move).
TEST_P(matmul_kernel, TokensAreIndependentOfTheBatch) {
  const MatmulKernel& k = kern();
  const Type wt = k.wtype;
  // (The K-quant kernels' tiles keep each token's order: they are tested.)
  if ((k.needs == kernels::Feature::dotprod || k.needs == kernels::Feature::i8mm) && !test::is_k_quant(wt)) {
    GTEST_SKIP() << k.name << ": multi-token tiles sum in another order than one token";
  }
  const bool kq = test::is_k_quant(wt);
  for (const Shape& s : {Shape{33, kq ? 768 : 544, 23}, Shape{20, kq ? 4352 : 4128, 9},
                         Shape{16, kq ? 256 : 64, 130}}) {
    std::mt19937_64 rng(case_seed(s, 5));
    const std::vector<uint8_t> wg = test::random_weights(wt, s.rows, s.K, rng, {});
    const std::vector<uint8_t> ag = test::random_acts(kernels::act_type(wt), s.n, s.K, rng, {});
    TestWeight tw = make_weight(wt, wg, s.rows, s.K, k.layout, 0);
    const size_t st = kernels::act_row_bytes(wt, s.K);
    std::vector<float> all(s.n * s.rows), one(s.n * s.rows);
    k.fn(tw.w, 0, s.rows, ag.data(), st, s.n, all.data(), s.rows);
    for (int64_t j = 0; j < s.n; ++j) {
      k.fn(tw.w, 0, s.rows, ag.data() + j * st, st, 1, one.data() + j * s.rows, s.rows);
    }
    ASSERT_EQ(0, std::memcmp(all.data(), one.data(), all.size() * sizeof(float)))
        << k.name << " rows=" << s.rows << " K=" << s.K << " n=" << s.n;
  }
}

INSTANTIATE_TEST_SUITE_P(All, matmul_kernel, testing::ValuesIn(all_kernels()), kernel_name);

// --- activation quantization ----------------------------------------------

class matmul_quantize_act : public testing::TestWithParam<size_t> {};

TEST_P(matmul_quantize_act, BitIdenticalToRef) {
  const kernels::QuantizeKernel& q = kernels::quantize_kernels()[GetParam()];
  if (!kernels::feature_available(q.needs)) {
    GTEST_SKIP() << "skipped: CPU lacks " << kernels::feature_name(q.needs) << " (" << q.name << ")";
  }
  const uint64_t seed = test::base_seed() + 99;
  std::mt19937_64 rng(seed);
  for (int64_t K : {32, 64, 96, 4128}) {
    std::vector<float> x(K + 1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(rng);
    // Edge blocks: all zeros; exact ties (x * id = k + 0.5); a huge value.
    if (K >= 96) {
      for (int i = 1; i <= 32; ++i) x[i] = 0.0f;
      for (int i = 33; i <= 64; ++i) x[i] = (float)((i % 5) - 2) * 0.5f + (i == 33 ? 127.0f : 0.0f);
      x[70] = 3.0e4f;
    }
    const size_t bytes = quant::row_bytes(q.type, K);
    std::vector<uint8_t> a(bytes + 2, 0), b(bytes, 0);
    q.fn(x.data() + 1, a.data() + 2, K);  // misaligned input, output only fp16-aligned
    (q.type == Type::Q8_1 ? kernels::quantize_row_q8_1__ref : kernels::quantize_row_q8_0__ref)(
        x.data() + 1, b.data(), K);
    ASSERT_EQ(0, std::memcmp(a.data() + 2, b.data(), bytes)) << q.name << " K=" << K << " seed=" << seed;
  }
}

INSTANTIATE_TEST_SUITE_P(All, matmul_quantize_act,
                         testing::Range<size_t>(0, kernels::quantize_kernels().size()),
                         [](const testing::TestParamInfo<size_t>& i) {
                           return std::string(kernels::quantize_kernels()[i.param].name);
                         });

// --- repacking ------------------------------------------------------------

TEST(matmul_repack, BlocksRoundTripIncludingPartialGroup) {
  for (int layout : {kernels::kLayoutX4, kernels::kLayoutX16}) {
    const int64_t G = quant::layout_group_rows(layout);
    for (Type t : {Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0}) {
      if (!quant::repackable(t, layout)) continue;  // Q5_0: kLayoutX16 only
      for (int64_t rows : {1, 4, 6, 11, 16, 23, 33}) {
        const int64_t K = 96;
        std::mt19937_64 rng(test::base_seed() + rows);
        const std::vector<uint8_t> g = test::random_weights(t, rows, K, rng, {});
        std::vector<uint8_t> p(quant::repacked_bytes(t, layout, rows, K));
        quant::repack(t, layout, g.data(), rows, K, p.data());
        // No overhead but the padding rows: a group block is G GGUF blocks.
        EXPECT_EQ(p.size(), (size_t)((rows + G - 1) / G) * G * quant::row_bytes(t, K));
        const size_t bb = test::block_bytes(t);
        std::vector<uint8_t> blk(bb);
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t b = 0; b < K / 32; ++b) {
            quant::block_from_packed(t, layout, p.data(), K, r, b, blk.data());
            ASSERT_EQ(0, std::memcmp(blk.data(), g.data() + (r * (K / 32) + b) * bb, bb))
                << quant::type_traits((uint32_t)t)->name << " layout " << layout << " row " << r
                << " block " << b;
          }
        }
      }
    }
  }
}

// kLayoutX16: chunk c (4 bytes) of row r at qs[(c * 16 + r) * 4] after the
// 16 rows' scales; Q8_0 bytes XOR 0x80 (q + 128), Q4 and Q5_0 bytes as
// GGUF's (Q5_0's chunk 0 is qh: BlockQ5_0x16::qh[4 r ..]).
TEST(matmul_repack, X16BytesAreWhereTheKernelsLoadThem) {
  EXPECT_FALSE(quant::repackable(Type::Q5_0, kernels::kLayoutX4));
  EXPECT_TRUE(quant::repackable(Type::Q5_0, kernels::kLayoutX16));
  for (Type t : {Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0}) {
    const int64_t rows = 16, K = 64;
    std::mt19937_64 rng(test::base_seed() + 41);
    const std::vector<uint8_t> g = test::random_weights(t, rows, K, rng, {});
    std::vector<uint8_t> p(quant::repacked_bytes(t, kernels::kLayoutX16, rows, K));
    quant::repack(t, kernels::kLayoutX16, g.data(), rows, K, p.data());
    const size_t bb = test::block_bytes(t), sb = quant::traits(t).scale_bytes;
    const uint8_t x = t == Type::Q8_0 ? 0x80 : 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < K / 32; ++b) {
        const uint8_t* src = g.data() + (r * (K / 32) + b) * bb;
        const uint8_t* blk = p.data() + b * 16 * bb;
        ASSERT_EQ(0, std::memcmp(blk + 2 * r, src, 2)) << "d of row " << r;
        if (sb == 4) {
          ASSERT_EQ(0, std::memcmp(blk + 32 + 2 * r, src + 2, 2)) << "m of row " << r;
        }
        const uint8_t* qs = blk + 16 * sb;
        for (size_t i = 0; i < bb - sb; ++i) {
          ASSERT_EQ(qs[(i / 4 * 16 + r) * 4 + i % 4], (uint8_t)(src[sb + i] ^ x))
              << quant::type_traits((uint32_t)t)->name << " row " << r << " block " << b
              << " byte " << i;
        }
      }
    }
  }
}

// The x4 Q4_0 bytes are GGUF's, XOR quant::kQ4_0X4Xor (0x88 on aarch64,
// where the NEON kernels unpack q - 8 with a shift; 0 elsewhere), and the
// other types' bytes are GGUF's as they are.
TEST(matmul_repack, Q4_0BytesAreXoredAsDeclared) {
#if defined(__aarch64__)
  EXPECT_EQ(quant::kQ4_0X4Xor, 0x88);
#else
  EXPECT_EQ(quant::kQ4_0X4Xor, 0x00);
#endif
  for (Type t : {Type::Q8_0, Type::Q4_0, Type::Q4_1}) {
    const int64_t rows = 4, K = 64;
    std::mt19937_64 rng(test::base_seed() + 31);
    const std::vector<uint8_t> g = test::random_weights(t, rows, K, rng, {});
    std::vector<uint8_t> p(quant::repacked_bytes(t, kernels::kLayoutX4, rows, K));
    quant::repack(t, kernels::kLayoutX4, g.data(), rows, K, p.data());
    const size_t bb = test::block_bytes(t), sb = quant::traits(t).scale_bytes;
    const uint8_t x = t == Type::Q4_0 ? quant::kQ4_0X4Xor : 0;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < K / 32; ++b) {
        const uint8_t* src = g.data() + (r * (K / 32) + b) * bb + sb;
        const uint8_t* qs = p.data() + b * 4 * bb + 4 * sb;  // one group
        for (size_t i = 0; i < bb - sb; ++i) {
          // byte i of row r: chunk i / 8 at qs[(chunk * 4 + r) * 8 + i % 8]
          ASSERT_EQ(qs[(i / 8 * 4 + r) * 8 + i % 8], (uint8_t)(src[i] ^ x))
              << quant::type_traits((uint32_t)t)->name << " row " << r << " block " << b
              << " byte " << i;
        }
      }
    }
  }
}

// --- the graph entry point --------------------------------------------------

struct GraphCase {
  Type t;
  int64_t rows, K, n;
};

// Quantized path vs the fp32 oracle.  Per block b of 32 activations with
// amax_b, Q8 rounding moves each activation by at most
//   d_b/2 + |q| * |fp16(d_b) - d_b| <= d_b * (1/2 + 127 * 2^-11),  d_b = amax_b/127,
// so |y_q - y_f| <= sum_b sum_k |w_k| * d_b * (1/2 + 127 * 2^-11)
//                 + (Q4_1) sum_b |m_b| * |d_b * sum q| * 2^-11   (s stored as fp16)
//                 + fp32 rounding of both sums, 2 * (K + 4) * u * sum |w_k| (|x_k| + d_b).
double oracle_bound(Type t, const std::vector<float>& wdeq, const std::vector<float>& mins,
                    const float* x, int64_t K) {
  const int64_t B = 32;
  const double fp16_term = 127.0 / 2048;
  double s = 0, f = 0;
  for (int64_t b = 0; b < K / B; ++b) {
    double amax = 0, sx = 0;
    for (int i = 0; i < B; ++i) amax = std::max(amax, (double)std::fabs(x[b * B + i]));
    const double d = amax / 127;
    for (int i = 0; i < B; ++i) {
      s += std::fabs(wdeq[b * B + i]) * d * (0.5 + fp16_term);
      f += std::fabs(wdeq[b * B + i]) * (std::fabs(x[b * B + i]) + d);
      sx += std::fabs(x[b * B + i]);
    }
    if (t == Type::Q4_1 || t == Type::Q4_K || t == Type::Q5_K) s += std::fabs(mins[b]) * (sx + 32 * d) / 2048;
  }
  return s + 2 * (K + 4) * test::kU * f;
}

TEST(matmul_graph, QuantizedPathVsOracleAndRef) {
  const GraphCase cases[] = {{Type::Q4_1, 67, 576, 1},  {Type::Q4_1, 13, 576, 9},
                             {Type::Q8_0, 64, 1536, 1}, {Type::Q8_0, 35, 256, 70},
                             {Type::Q4_0, 33, 2048, 2}, {Type::Q4_0, 64, 64, 130},
                             {Type::Q5_0, 37, 640, 3},  {Type::Q5_0, 20, 2048, 67},
                             {Type::Q4_K, 37, 768, 3},  {Type::Q4_K, 20, 2048, 67},
                             {Type::Q5_K, 19, 512, 5},  {Type::Q6_K, 37, 1280, 1},
                             {Type::Q6_K, 20, 256, 70},
                             {Type::F16, 19, 200, 3},   {Type::F32, 21, 136, 5}};
  for (int threads : {1, 2, 3}) {
    graph::ThreadPool pool(threads);
    graph::MatmulScratch scratch;
    for (const GraphCase& c : cases) {
      const uint64_t seed = test::base_seed() + c.rows * 7 + c.n;
      std::mt19937_64 rng(seed);
      const std::vector<uint8_t> wg = test::random_weights(c.t, c.rows, c.K, rng, {});
      std::normal_distribution<float> nd(0.0f, 1.0f);
      const int64_t ldx = c.K + 5, ldy = c.rows + 2;
      std::vector<float> x(c.n * ldx);
      for (float& v : x) v = nd(rng);
      const PackedWeight w = kernels::pack_weight(c.t, wg.data(), c.rows, c.K, true);
      std::vector<float> y(c.n * ldy, 0), yref(c.n * ldy, 0), yor(c.n * ldy, 0);
      graph::matmul(w, x.data(), ldx, c.n, y.data(), ldy, pool, scratch);
      graph::matmul_isa(kernels::Isa::ref, w, x.data(), ldx, c.n, yref.data(), ldy, pool, scratch);
      graph::matmul_f32_oracle(w, x.data(), ldx, c.n, yor.data(), ldy, pool, scratch);
      const quant::TypeTraits* tt = quant::type_traits((uint32_t)c.t);
      SCOPED_TRACE(testing::Message() << tt->name << " rows=" << c.rows << " K=" << c.K << " n="
                                      << c.n << " threads=" << threads << " seed=" << seed);
      for (int64_t r = 0; r < c.rows; ++r) {
        std::vector<float> wdeq(c.K), mins(c.K / 32, 0.0f);
        tt->to_float(wg.data() + quant::row_bytes(c.t, c.K) * r, wdeq.data(), c.K);
        if (test::is_k_quant(c.t)) {  // the min of each sub-block of 32 (0 for Q6_K)
          const uint8_t* row = wg.data() + quant::row_bytes(c.t, c.K) * r;
          for (int64_t b = 0; b < c.K / 32; ++b) {
            double sp, mp;
            test::k_element(c.t, row + (b / 8) * test::block_bytes(c.t), (int)(b % 8) * 32, &sp, &mp);
            mins[b] = (float)mp;
          }
        }
        if (c.t == Type::Q4_1) {
          for (int64_t b = 0; b < c.K / 32; ++b) {
            uint16_t h;
            std::memcpy(&h, wg.data() + quant::row_bytes(c.t, c.K) * r + b * 20 + 2, 2);
            mins[b] = fp16_to_fp32(h);
          }
        }
        for (int64_t j = 0; j < c.n; ++j) {
          const float* xj = x.data() + j * ldx;
          double bound = 0;
          if (c.t == Type::F32 || c.t == Type::F16) {
            // Same terms w_k x_k, different order: 2 * (K + 2) * u * sum|w x|.
            for (int64_t k = 0; k < c.K; ++k) bound += std::fabs(wdeq[k] * xj[k]);
            bound *= 2 * (c.K + 2) * test::kU;
          } else {
            bound = oracle_bound(c.t, wdeq, mins, xj, c.K);
          }
          ASSERT_LE(std::fabs(y[j * ldy + r] - yor[j * ldy + r]), bound) << "row " << r << " tok " << j;
          ASSERT_LE(std::fabs(yref[j * ldy + r] - yor[j * ldy + r]), bound) << "ref, row " << r;
        }
      }
    }
  }
}

// --- thread pool ------------------------------------------------------------

TEST(matmul_thread_pool, EveryTaskOnceOnValidThreads) {
  for (int threads : {1, 2, 4}) {
    graph::ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 17, 1000}) {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> bad_thread{0};
        pool.parallel_for(n, [&](int64_t task, int thread) {
          hits[task].fetch_add(1);
          if (thread < 0 || thread >= threads) bad_thread.fetch_add(1);
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "task " << i;
        ASSERT_EQ(bad_thread.load(), 0);
      }
    }
    // The std::function overload too.
    std::atomic<int64_t> sum{0};
    const std::function<void(int64_t, int)> f = [&](int64_t t, int) { sum += t; };
    pool.parallel_for(100, f);
    EXPECT_EQ(sum.load(), 4950);
  }
}

TEST(matmul_pack_weight, RepacksQuantizedTypesUnlessRef) {
  std::mt19937_64 rng(1);
  const std::vector<uint8_t> g = test::random_weights(Type::Q4_1, 10, 64, rng, {});
  const PackedWeight a = kernels::pack_weight(Type::Q4_1, g.data(), 10, 64, false);
  EXPECT_EQ(a.layout, kernels::kLayoutGguf);
  EXPECT_EQ(a.data, g.data());
  EXPECT_TRUE(a.storage.empty());
  const PackedWeight b = kernels::pack_weight(Type::Q4_1, g.data(), 10, 64, true);
  if (kernels::active_isa() != kernels::Isa::ref) {
    EXPECT_EQ(b.layout, kernels::vnni_enabled() ? kernels::kLayoutX16 : kernels::kLayoutX4);
    EXPECT_EQ(b.storage.size(), quant::repacked_bytes(Type::Q4_1, b.layout, 10, 64));
  } else {
    EXPECT_EQ(b.layout, kernels::kLayoutGguf);
  }
  EXPECT_THROW(kernels::pack_weight(Type::Q4_1, g.data(), 10, 60, true), std::exception);
}

}  // namespace
}  // namespace lilims
