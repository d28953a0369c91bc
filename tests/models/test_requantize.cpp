// gguf::requantize (`lilims quantize`) on stories260K.gguf: every type,
// reloaded, dequantized and compared with the F32 originals.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>

#include "base/error.h"
#include "models/gguf.h"
#include "models/requantize.h"
#include "test_util.h"

namespace lilims::gguf {
namespace {

using quant::Type;

std::vector<float> to_float(const TensorInfo& t) {
  std::vector<float> y(t.n_elements);
  quant::type_traits(t.type)->to_float(t.data, y.data(), static_cast<int64_t>(t.n_elements));
  return y;
}

// Per-element error bound of plain round-to-nearest for a block (derived in
// tests/quant/test_quantize.cpp): Q8_0 d/2 + 127 r(d) with d = amax/127;
// Q4_0 d + 8 r(d) with d = amax/8; Q4_1 d/2 + 15 r(d) + r(min) with
// d = range/15; F16 r(x); r(v) = max(|v| 2^-11, 2^-25) is fp16 rounding.
// The search method's block error is at most plain's, so one element's error
// is at most sqrt(32) times that bound (all the block's squared error in it).
double bound(Type t, const float* blk, int n, float x, bool search) {
  auto r = [](double v) { return std::max(std::fabs(v) / 2048, std::ldexp(1.0, -25)); };
  float amax = 0, mn = blk[0], mx = blk[0];
  for (int j = 0; j < n; ++j) {
    amax = std::max(amax, std::fabs(blk[j]));
    mn = std::min(mn, blk[j]);
    mx = std::max(mx, blk[j]);
  }
  const double slack = 1e-6 * (std::fabs(x) + amax);
  double b = 0;
  switch (t) {
    case Type::Q8_0: b = amax / 254.0 + 127 * r(amax / 127.0); break;
    case Type::Q4_0: b = amax / 8.0 + 8 * r(amax / 8.0); break;
    case Type::Q4_1: b = (mx - mn) / 30.0 + 15 * r((mx - mn) / 15.0) + r(mn); break;
    case Type::F16: return r(x);
    default: return 0;
  }
  return (search ? std::sqrt(32.0) : 1.0) * b + slack;
}

class Requantize : public ::testing::TestWithParam<std::tuple<Type, quant::QuantMethod>> {};

TEST_P(Requantize, Stories260K) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "karpathy/tinyllamas stories260K via llama.cpp, see SOURCES.md");
  const Type type = std::get<0>(GetParam());
  const bool search = std::get<1>(GetParam()) == quant::QuantMethod::search;
  auto src = File::open(path);
  RequantizeOptions opt;
  opt.method = std::get<1>(GetParam());
  size_t calls = 0;
  opt.progress = [&](size_t i, size_t n, const TensorInfo&) {
    EXPECT_EQ(i, calls++);
    EXPECT_EQ(n, 48u);
  };
  const std::vector<uint8_t> bytes = requantize(*src, type, opt).to_bytes();
  EXPECT_EQ(calls, 48u);
  auto q = File::from_bytes(bytes.data(), bytes.size());

  // Metadata: all kept, file type set, quantization version for block types.
  EXPECT_EQ(q->get_int("general.file_type"), file_type_of(type));
  EXPECT_EQ(q->get_int_or("general.quantization_version", 0), type == Type::F16 ? 0 : 2);
  for (const KeyValue& kv : src->metadata()) {
    const Value* v = q->find(kv.key);
    ASSERT_NE(v, nullptr) << kv.key;
    EXPECT_EQ(v->type, kv.value.type) << kv.key;
    EXPECT_EQ(v->size(), kv.value.size()) << kv.key;
    EXPECT_EQ(v->s, kv.value.s) << kv.key;
    EXPECT_EQ(v->u, kv.value.u) << kv.key;
  }
  ASSERT_EQ(q->tensors().size(), src->tensors().size());
  const int bs = quant::type_traits(static_cast<uint32_t>(type))->block_size;
  size_t n_quantized = 0;
  for (const TensorInfo& o : src->tensors()) {
    SCOPED_TRACE(o.name);
    const TensorInfo& t = q->require_tensor(o.name);
    EXPECT_EQ(t.ne, o.ne);
    const bool expect_quantized = o.ne.size() == 2 && o.ne[0] % bs == 0;
    EXPECT_EQ(t.type, expect_quantized ? static_cast<uint32_t>(type) : 0u);
    if (!expect_quantized) {  // F32 stays byte-equal
      ASSERT_EQ(t.n_bytes, o.n_bytes);
      EXPECT_EQ(std::memcmp(t.data, o.data, o.n_bytes), 0);
      continue;
    }
    ++n_quantized;
    const std::vector<float> x = to_float(o), y = to_float(t);
    const int blk = type == Type::F16 ? 1 : quant::kBlock;
    double err = 0, norm = 0;
    for (size_t k = 0; k < x.size(); ++k) {
      const float* b = x.data() + k / blk * blk;
      ASSERT_LE(std::fabs(double(x[k]) - y[k]), bound(type, b, blk, x[k], search))
          << "element " << k << ": " << x[k] << " -> " << y[k];
      err += (double(x[k]) - y[k]) * (double(x[k]) - y[k]);
      norm += double(x[k]) * x[k];
    }
    // Relative RMS error, as measured on random weights in test_quantize.
    const double rel = std::sqrt(err / norm);
    const double limit = type == Type::Q8_0 ? 0.01 : type == Type::F16 ? 0.0004 : 0.15;
    EXPECT_LT(rel, limit);
  }
  // ffn_down rows are 172 long: not whole 32-blocks, so they stay F32 for
  // the block types (5 of them); token_embd and output are quantized.
  EXPECT_EQ(n_quantized, type == Type::F16 ? 37u : 32u);
  EXPECT_EQ(q->require_tensor("token_embd.weight").type, static_cast<uint32_t>(type));
  EXPECT_EQ(q->require_tensor("blk.0.ffn_down.weight").type, type == Type::F16 ? 1u : 0u);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, Requantize,
    ::testing::Combine(::testing::Values(Type::Q4_0, Type::Q4_1, Type::Q8_0, Type::F16),
                       ::testing::Values(quant::QuantMethod::plain, quant::QuantMethod::search)),
    [](const auto& info) {
      return std::string(quant::type_traits(static_cast<uint32_t>(std::get<0>(info.param)))->name) +
             (std::get<1>(info.param) == quant::QuantMethod::plain ? "_plain" : "_search");
    });

// The bytes do not depend on the thread count: rows are split over threads
// and error-compensation factors are computed in parallel (one per distinct
// matrix), for every count from one to more threads than cores.  Runs under
// ThreadSanitizer in scripts/test.sh.
TEST(RequantizeThreads, BytesAreTheSameForEveryThreadCount) {
  auto src = File::open(test::source_path("tests/data/tiny/llama.gguf"));
  // A random symmetric positive definite matrix (A A^T / n + I) per 2-D
  // weight, so there are as many factorisations as weights.
  SecondMoments moments;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const TensorInfo& t : src->tensors()) {
    if (t.ne.size() != 2 || t.name.rfind("blk.", 0) != 0) continue;
    const size_t n = t.ne[0];
    std::vector<float> a(n * n), h(n * n);
    for (float& v : a) v = normal(rng);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (size_t k = 0; k < n; ++k) dot += (double)a[i * n + k] * a[j * n + k];
        h[i * n + j] = h[j * n + i] = static_cast<float>(dot / n + (i == j ? 1.0 : 0.0));
      }
    }
    moments[t.name] = std::make_shared<const std::vector<float>>(std::move(h));
  }
  ASSERT_GE(moments.size(), 4u);
  for (const bool compensated : {false, true}) {
    RequantizeOptions opt;
    if (compensated) opt.second_moments = &moments;
    std::vector<uint8_t> one;
    for (const int threads : {1, 2, 3, 8, 16}) {
      opt.n_threads = threads;
      const std::vector<uint8_t> bytes = requantize(*src, Type::Q4_0, opt).to_bytes();
      if (threads == 1) {
        one = bytes;
      } else {
        EXPECT_TRUE(bytes == one) << threads << " threads, compensated " << compensated;
      }
    }
  }
}

TEST(RequantizeErrors, UnsupportedSourceAndTarget) {
  Writer w;
  const std::vector<uint8_t> iq2(66, 0);  // IQ2_XXS: neither run nor dequantized
  w.add_tensor("blk.0.ffn_down.weight", {256, 1}, 16, iq2.data(), iq2.size());
  const std::vector<uint8_t> b = w.to_bytes();
  auto f = File::from_bytes(b.data(), b.size());
  try {
    requantize(*f, Type::Q4_0);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_UNSUPPORTED);
    EXPECT_NE(std::string(e.what()).find("IQ2_XXS"), std::string::npos);
  }
  Writer empty;
  const std::vector<uint8_t> e = empty.to_bytes();
  auto g = File::from_bytes(e.data(), e.size());
  EXPECT_THROW(requantize(*g, Type::Q8_1), Error);
}

}  // namespace
}  // namespace lilims::gguf
