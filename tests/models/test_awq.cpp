// Activation-aware column scaling (models/awq.h): the scales' form, the
// output error they exist to lower, alpha 0 leaving the quantization as it
// was bit for bit, and the fold leaving the float model's logits as they
// were.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "models/awq.h"
#include "models/gguf.h"
#include "models/requantize.h"
#include "quant/quant.h"
#include "quant/quantize.h"
#include "runtime/engine.h"
#include "runtime/eval/imatrix.h"
#include "test_util.h"

namespace lilims {
namespace {

using gguf::File;
using gguf::RequantizeOptions;
using gguf::SecondMoments;
using gguf::Writer;
using quant::Type;

// m samples of n inputs: a few strong shared directions plus noise, and
// every 16th column an outlier channel 20x larger (as a norm's output has).
std::vector<float> outlier_inputs(std::mt19937& rng, int m, int n) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  const int k = 4;
  std::vector<float> dirs((size_t)k * n);
  for (float& v : dirs) v = g(rng);
  std::vector<float> x((size_t)m * n);
  for (int t = 0; t < m; ++t) {
    float z[k];
    for (float& v : z) v = g(rng);
    for (int j = 0; j < n; ++j) {
      float v = 0.3f * g(rng);
      for (int i = 0; i < k; ++i) v += z[i] * dirs[(size_t)i * n + j];
      x[(size_t)t * n + j] = (j % 16 == 3 ? 20.0f : 1.0f) * v;
    }
  }
  return x;
}

// E[x x^T], full, in float.
std::vector<float> moments_of(const std::vector<float>& x, int m, int n) {
  std::vector<double> h((size_t)n * n, 0.0);
  for (int t = 0; t < m; ++t) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < n; ++j) h[(size_t)i * n + j] += (double)x[(size_t)t * n + i] * x[(size_t)t * n + j];
    }
  }
  std::vector<float> out(h.size());
  for (size_t k = 0; k < h.size(); ++k) out[k] = (float)(h[k] / m);
  return out;
}

// The error the inputs themselves see: sum over rows and samples of
// ((w - y) . x)^2 / m, y the row quantized after scaling by s, then unscaled.
double direct_error(Type type, const std::vector<float>& w, int rows, int n, const std::vector<float>& x, int m,
                    const std::vector<float>& s, const std::vector<float>& imp_unscaled) {
  const quant::TypeTraits& tt = quant::traits(type);
  std::vector<uint8_t> q((size_t)n / tt.block_size * tt.block_bytes);
  std::vector<float> v(n), y(n), imp(n);
  for (int j = 0; j < n; ++j) imp[j] = imp_unscaled[j] / (s[j] * s[j]);
  double total = 0;
  for (int r = 0; r < rows; ++r) {
    const float* wr = w.data() + (size_t)r * n;
    for (int j = 0; j < n; ++j) v[j] = wr[j] * s[j];
    quant::quantize_row_weighted(type, v.data(), q.data(), n, imp.data());
    tt.to_float(q.data(), y.data(), n);
    for (int t = 0; t < m; ++t) {
      double d = 0;
      for (int j = 0; j < n; ++j) d += ((double)wr[j] - (double)y[j] / s[j]) * x[(size_t)t * n + j];
      total += d * d;
    }
  }
  return total / m;
}

TEST(Awq, ScalesForm) {
  const std::vector<float> diag = {1.0f, 4.0f, 16.0f, 0.0f, 64.0f};
  for (float v : models::awq_scales(diag.data(), 5, 0.0)) EXPECT_EQ(v, 1.0f);
  // alpha 1: s ~ rms (1, 2, 4, 1 for the dead column, 8) over sqrt(1 * 8).
  const std::vector<float> s = models::awq_scales(diag.data(), 5, 1.0);
  const float want[5] = {1.0f, 2.0f, 4.0f, 1.0f, 8.0f};
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(s[j], want[j] / std::sqrt(8.0f), 1e-6f) << j;
  // alpha 0.5: the square root of those.
  const std::vector<float> h = models::awq_scales(diag.data(), 5, 0.5);
  for (int j = 0; j < 5; ++j) EXPECT_NEAR(h[j], std::sqrt(want[j] / std::sqrt(8.0f)), 1e-6f) << j;
}

// On inputs with outlier channels the best alpha on the grid lowers the
// output error well below alpha 0's (the quantity awq_error computes is
// checked against the samples themselves).
TEST(Awq, ScalingLowersOutputError) {
  std::mt19937 rng(7);
  const int n = 128, m = 2048, rows = 24;
  const std::vector<float> x = outlier_inputs(rng, m, n);
  const std::vector<float> h = moments_of(x, m, n);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> w((size_t)rows * n);
  for (float& v : w) v = 0.05f * g(rng);
  std::vector<const float*> r;
  for (int i = 0; i < rows; ++i) r.push_back(w.data() + (size_t)i * n);
  std::vector<float> diag(n);
  for (int j = 0; j < n; ++j) diag[j] = h[(size_t)j * n + j];
  for (Type type : {Type::Q4_0}) {
    const double e0 = models::awq_error(type, r, n, h.data(), nullptr);
    double best = e0;
    for (double alpha = 0.1; alpha < 1.05; alpha += 0.1) {
      const std::vector<float> s = models::awq_scales(diag.data(), n, alpha);
      const double e = models::awq_error(type, r, n, h.data(), s.data());
      // H-weighted error = the error over the samples (float rounding of H
      // and of the sums: 1e-4 relative).
      EXPECT_NEAR(e, direct_error(type, w, rows, n, x, m, s, diag), 1e-4 * e) << alpha;
      best = std::min(best, e);
    }
    EXPECT_EQ(e0, models::awq_error(type, r, n, h.data(), std::vector<float>(n, 1.0f).data()));
    std::printf("%s: best / alpha 0 = %.3f\n", quant::traits(type).name, best / e0);
    // Measured 0.58x.
    EXPECT_LT(best, 0.7 * e0) << quant::traits(type).name;
  }
}

// A llama model (stories260K) in F32 and its second moments over a text.
struct Fixture {
  std::string f32_path;
  SecondMoments moments;
};

std::string stories() { return test::shared_data("stories260K/stories260K.gguf"); }

void make_fixture(Fixture* fx) {
  const std::string path = stories();
  auto src = File::open(path);
  fx->f32_path = test::temp_path("f32.gguf");
  gguf::requantize(*src, Type::F32).write(fx->f32_path);
  auto model = runtime::Model::open(fx->f32_path);
  const std::vector<int32_t> tokens = model->tokenizer().encode(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she saw a big red ball under a tree and ran to get it. Her mom said it was time to go "
      "home, so Lily gave the ball to a boy who was sad. The boy smiled and said thank you.",
      true, false);
  runtime::ImatrixOptions io;
  io.n_ctx = 32;
  io.max_chunks = 2;
  io.second_moments = true;
  fx->moments = runtime::calibrate(*model, tokens, io).moments;
}

TEST(Awq, AlphaZeroIsNoScalingBitForBit) {
  LILIMS_REQUIRE_FILE(stories(), "karpathy/tinyllamas stories260K via llama.cpp, see SOURCES.md");
  Fixture fx;
  make_fixture(&fx);
  auto f = File::open(fx.f32_path);
  RequantizeOptions opt;
  opt.second_moments = &fx.moments;
  const std::vector<uint8_t> plain = gguf::requantize(*f, Type::Q4_0, opt).to_bytes();
  const std::vector<double> zero = {0.0};
  opt.activation_scaling = true;
  opt.scaling_grid = &zero;
  std::map<std::string, double> alphas;
  opt.scaling_alphas = &alphas;
  EXPECT_TRUE(gguf::requantize(*f, Type::Q4_0, opt).to_bytes() == plain);
  EXPECT_EQ(alphas.size(), 10u);  // 5 layers, 2 groups each
  opt.scaling_grid = nullptr;
  alphas.clear();
  EXPECT_FALSE(gguf::requantize(*f, Type::Q4_0, opt).to_bytes() == plain);
  int scaled = 0;
  for (const auto& [name, alpha] : alphas) scaled += alpha > 0.0;
  EXPECT_GT(scaled, 0);
  std::remove(fx.f32_path.c_str());
}

// The folded float model computes the unscaled one's logits: written in
// F32 (the fold's groups scored as Q4_0), every position's logits agree to
// 1e-4 relative to the largest (measured 8e-6: the products w s and g / s
// each round once in float).
TEST(Awq, FoldKeepsTheFloatModel) {
  LILIMS_REQUIRE_FILE(stories(), "karpathy/tinyllamas stories260K via llama.cpp, see SOURCES.md");
  Fixture fx;
  make_fixture(&fx);
  auto f = File::open(fx.f32_path);
  const models::AwqFold fold =
      models::awq_fold(*f, fx.moments, [](const std::string&) { return Type::Q4_0; });
  ASSERT_FALSE(fold.tensors.empty());
  Writer w;
  for (const gguf::KeyValue& kv : f->metadata()) w.add(kv.key, kv.value);
  for (const gguf::TensorInfo& t : f->tensors()) {
    const auto it = fold.tensors.find(t.name);
    if (it == fold.tensors.end()) {
      w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
    } else {
      ASSERT_EQ(t.type, 0u);
      ASSERT_EQ(it->second.size(), t.n_elements);
      EXPECT_NE(std::memcmp(it->second.data(), t.data, t.n_bytes), 0) << t.name;
      w.add_tensor(t.name, t.ne, 0, it->second.data(), it->second.size() * sizeof(float));
    }
  }
  const std::string folded_path = test::temp_path("folded.gguf");
  w.write(folded_path);
  auto a = runtime::Model::open(fx.f32_path);
  auto b = runtime::Model::open(folded_path);
  const std::vector<int32_t> tokens = a->tokenizer().encode("The cat sat on the mat and looked at the bird.", true, false);
  runtime::SessionOptions so;
  so.n_ctx = 64;
  std::vector<float> la, lb;
  runtime::Session sa(*a, so), sb(*b, so);
  sa.eval_all_logits(tokens, la);
  sb.eval_all_logits(tokens, lb);
  ASSERT_EQ(la.size(), lb.size());
  float amax = 0, dmax = 0;
  for (size_t i = 0; i < la.size(); ++i) {
    amax = std::max(amax, std::fabs(la[i]));
    dmax = std::max(dmax, std::fabs(la[i] - lb[i]));
  }
  std::printf("fold: max |logit| %.4f, max difference %.3g\n", amax, dmax);
  EXPECT_LE(dmax, 1e-4f * amax);
  std::remove(folded_path.c_str());
  std::remove(fx.f32_path.c_str());
}

}  // namespace
}  // namespace lilims
