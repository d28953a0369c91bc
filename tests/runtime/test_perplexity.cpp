// Perplexity of SmolLM2-135M-Instruct on tests/data/ppl_text.txt against
// llama.cpp's llama-perplexity on the same GGUF and text
// (tests/data/smollm2_ppl_llamacpp.json, made by
// scripts/goldens/run_llamacpp_perplexity.py; llama.cpp version inside).
// Agreement within 0.5% at CTX 512, 1024 and 2048, as the issue asks: the
// per-token differences (Q8 activation rounding, see
// test_smollm2_llamacpp.cpp) average out over thousands of scored tokens.
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/eval/perplexity.h"
#include "test_util.h"

namespace lilims {
namespace {

class PerplexityVsLlamaCpp : public ::testing::TestWithParam<int> {};

TEST_P(PerplexityVsLlamaCpp, WithinHalfAPercent) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  const int n_ctx = GetParam();
  const auto golden = nlohmann::json::parse(
      test::read_file(test::source_path("tests/data/smollm2_ppl_llamacpp.json")));
  double want = 0.0;
  int want_chunks = 0;
  for (const auto& r : golden["results"]) {
    if (r["n_ctx"].get<int>() == n_ctx) {
      want = r["ppl"].get<double>();
      want_chunks = r["n_chunks"].get<int>();
    }
  }
  ASSERT_GT(want, 0.0) << "no llama.cpp figure for CTX " << n_ctx;

  static std::unique_ptr<runtime::Model> model = runtime::Model::open(test::smollm2_path());
  std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  if (!text.empty() && text.back() == '\n') text.pop_back();  // as llama-perplexity reads -f
  const auto tokens = model->tokenizer().encode(text, true, false);
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  so.n_batch = 128;
  runtime::Session session(*model, so);
  const runtime::PerplexityResult r = runtime::perplexity(session, tokens, n_ctx);
  EXPECT_EQ(r.n_chunks, want_chunks);
  EXPECT_EQ(r.n_scored, (int64_t)want_chunks * (n_ctx - 1 - n_ctx / 2));
  const double rel = std::fabs(r.ppl - want) / want;
  std::printf("CTX %d: lilims ppl %.4f, llama.cpp %.4f, difference %.3f%%\n", n_ctx, r.ppl, want,
              100.0 * rel);
  EXPECT_LT(rel, 0.005);
}

INSTANTIATE_TEST_SUITE_P(Ctx, PerplexityVsLlamaCpp, ::testing::Values(512, 1024, 2048));

}  // namespace
}  // namespace lilims
