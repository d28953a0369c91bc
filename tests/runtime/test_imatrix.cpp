// lilims imatrix (runtime/eval/imatrix.h) on stories260K: every matmul weight has
// an entry averaging every position, and layer 0's Q/K/V entry equals the
// mean squared input computed here from the GGUF alone (token embedding ->
// RMSNorm * attn_norm): the observer sees exactly the matmul inputs.
#include <algorithm>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "models/gguf.h"
#include "models/imatrix.h"
#include "runtime/engine.h"
#include "runtime/eval/imatrix.h"
#include "test_util.h"

namespace lilims {
namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

// Layer 0's Q/K/V input for the first n_chunks chunks of n_ctx tokens, in
// double, from the GGUF alone: each position's token (BOS first when the
// tokenizer adds one) -> its embedding row (F32 in this file) -> RMSNorm *
// attn_norm.  One row of 64 values per position.
std::vector<std::vector<double>> layer0_inputs(const runtime::Model& model,
                                               const std::vector<int32_t>& tokens, int n_chunks,
                                               int n_ctx) {
  auto f = gguf::File::open(stories_path());
  const gguf::TensorInfo& embd = f->require_tensor("token_embd.weight");
  EXPECT_EQ(embd.type, 0u);
  const float* E = reinterpret_cast<const float*>(embd.data);
  const float* g = reinterpret_cast<const float*>(f->require_tensor("blk.0.attn_norm.weight").data);
  const int64_t d = 64;
  const double eps = model.hparams().norm_eps;
  std::vector<std::vector<double>> rows;
  for (int c = 0; c < n_chunks; ++c) {
    for (int p = 0; p < n_ctx; ++p) {
      int32_t tok = tokens[(size_t)c * n_ctx + p];
      if (p == 0 && model.tokenizer().add_bos()) tok = model.tokenizer().bos();
      const float* x = E + (int64_t)tok * d;
      double ss = 0;
      for (int64_t j = 0; j < d; ++j) ss += (double)x[j] * x[j];
      const double inv = 1.0 / std::sqrt(ss / d + eps);
      std::vector<double> y((size_t)d);
      for (int64_t j = 0; j < d; ++j) y[(size_t)j] = x[j] * inv * g[j];
      rows.push_back(std::move(y));
    }
  }
  return rows;
}

TEST(Imatrix, Stories260kLayer0MatchesTheEmbeddingsNorm) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
  runtime::ImatrixOptions opt;
  opt.n_ctx = 64;
  opt.max_chunks = 3;
  opt.n_threads = 2;
  opt.n_batch = 16;  // several blocks per chunk
  const models::Imatrix m = runtime::collect_imatrix(*model, tokens, opt);
  EXPECT_EQ(m.n_ctx, 64);
  EXPECT_EQ(m.n_chunks, 3);
  // 5 layers x (q, k, v, o, gate, up, down) + output.
  ASSERT_EQ(m.entries.size(), 36u);
  for (const auto& [name, e] : m.entries) EXPECT_EQ(e.n_rows, 3 * 64) << name;
  EXPECT_EQ(m.entries.at("blk.0.ffn_down.weight").mean_sq.size(), 172u);
  EXPECT_EQ(m.entries.at("output.weight").mean_sq.size(), 64u);

  // Independent: the mean square of each column of layer 0's input.
  const int64_t d = 64;
  std::vector<double> want((size_t)d, 0.0);
  const auto rows = layer0_inputs(*model, tokens, 3, 64);
  for (const std::vector<double>& y : rows) {
    for (int64_t j = 0; j < d; ++j) want[(size_t)j] += y[(size_t)j] * y[(size_t)j] / (double)rows.size();
  }
  for (const char* name : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight"}) {
    const std::vector<float>& got = m.entries.at(name).mean_sq;
    for (int64_t j = 0; j < d; ++j) {
      // float RMSNorm vs this double one: ~1e-6 relative per element, 2e-6 squared.
      EXPECT_NEAR(got[(size_t)j], want[(size_t)j], 1e-5 * want[(size_t)j] + 1e-12)
          << name << " column " << j;
    }
  }
}

// The second moments E[x x^T] (runtime::calibrate): layer 0's Q/K/V input
// again from the GGUF alone, now as outer products; weights that read one
// input share one matrix, and its diagonal is the imatrix's entry.
TEST(Imatrix, Stories260kSecondMomentsOfLayer0) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
  runtime::ImatrixOptions opt;
  opt.n_ctx = 64;
  opt.max_chunks = 2;
  opt.n_threads = 3;
  opt.n_batch = 16;
  opt.second_moments = true;
  const runtime::Calibration cal = runtime::calibrate(*model, tokens, opt);
  ASSERT_EQ(cal.moments.size(), 36u);
  for (int l = 0; l < 5; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    EXPECT_EQ(cal.moments.at(p + "attn_q.weight"), cal.moments.at(p + "attn_k.weight"));
    EXPECT_EQ(cal.moments.at(p + "attn_q.weight"), cal.moments.at(p + "attn_v.weight"));
    EXPECT_EQ(cal.moments.at(p + "ffn_gate.weight"), cal.moments.at(p + "ffn_up.weight"));
    EXPECT_NE(cal.moments.at(p + "attn_q.weight"), cal.moments.at(p + "attn_output.weight"));
    EXPECT_NE(cal.moments.at(p + "attn_q.weight"), cal.moments.at(p + "ffn_gate.weight"));
    EXPECT_EQ(cal.moments.at(p + "ffn_down.weight")->size(), 172u * 172u);
  }
  for (const auto& [name, m] : cal.moments) {
    const std::vector<float>& diag = cal.imatrix.entries.at(name).mean_sq;
    const size_t n = diag.size();
    ASSERT_EQ(m->size(), n * n) << name;
    for (size_t j = 0; j < n; ++j) {
      // float sums vs the imatrix's double ones over 128 rows: 128 u relative.
      EXPECT_NEAR((*m)[j * n + j], diag[j], 128 * 6e-8 * diag[j] + 1e-12) << name << " column " << j;
    }
  }

  const int64_t d = 64;
  std::vector<double> want((size_t)(d * d), 0.0);
  const auto rows = layer0_inputs(*model, tokens, 2, 64);
  for (const std::vector<double>& y : rows) {
    for (int64_t i = 0; i < d; ++i) {
      for (int64_t j = 0; j < d; ++j) {
        want[(size_t)(i * d + j)] += y[(size_t)i] * y[(size_t)j] / (double)rows.size();
      }
    }
  }
  const std::vector<float>& got = *cal.moments.at("blk.0.attn_q.weight");
  double scale = 0;
  for (int64_t j = 0; j < d; ++j) scale = std::max(scale, want[(size_t)(j * d + j)]);
  for (int64_t i = 0; i < d; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      // Only the lower triangle is kept.  float RMSNorm (~1e-6 relative per
      // element) and 128 float additions: 1e-5 of the largest entry.
      EXPECT_NEAR(got[(size_t)(i * d + j)], want[(size_t)(i * d + j)], 1e-5 * scale) << i << ", " << j;
    }
  }
}

TEST(Imatrix, RefusesATextShorterThanAChunk) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see its SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  runtime::ImatrixOptions opt;
  opt.n_ctx = 64;
  try {
    runtime::collect_imatrix(*model, std::vector<int32_t>(63, 5), opt);
    FAIL() << "accepted 63 tokens";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("[imatrix] the text has 63 tokens"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace lilims
