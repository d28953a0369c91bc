// A prompt evaluated in blocks: every node of a block is split over the
// pool by rows, heads or output rows, and runs of row-wise nodes (norms,
// residual adds, RoPE, SwiGLU) go as one job whose tasks also quantize their
// rows for the next matmul (graph/executor.cpp, run_rows).  Nothing of the
// split may reach the numbers: each position's logits must be the same bit
// for bit on any thread count, also when injected delays move tasks between
// threads.  The prompts span several blocks, a last partial block, and block
// sizes where the row tasks hold one row and several.
#include <cstring>
#include <string>
#include <vector>

#include "pool_delays.h"
#include "runtime/engine.h"
#include "test_util.h"

using namespace lilims;

namespace {

std::vector<float> prompt_logits(const runtime::Model& model, const std::vector<int32_t>& tokens,
                                 int threads, int32_t n_batch, graph::PoolHook hook = {}) {
  runtime::SessionOptions so;
  so.n_ctx = (int32_t)tokens.size();
  so.n_threads = threads;
  so.n_batch = n_batch;
  so.pool_hook = hook;
  runtime::Session s(model, so);
  std::vector<float> all;
  s.eval_all_logits(tokens, all);
  return all;
}

void expect_same_on_every_thread_count(const std::string& path, size_t n_tokens,
                                       const std::vector<int>& threads,
                                       const std::vector<int32_t>& batches) {
  auto model = runtime::Model::open(path);
  const std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
  ASSERT_GE(tokens.size(), n_tokens);
  tokens.resize(n_tokens);
  const size_t nv = (size_t)model->hparams().n_vocab;
  for (int32_t nb : batches) {
    const std::vector<float> one = prompt_logits(*model, tokens, 1, nb);
    ASSERT_EQ(one.size(), n_tokens * nv);
    for (int th : threads) {
      for (bool delays : {false, true}) {
        const graph::PoolHook hook = delays ? graph::PoolHook{&test::pool_delays, nullptr} : graph::PoolHook{};
        const std::vector<float> many = prompt_logits(*model, tokens, th, nb, hook);
        ASSERT_EQ(many.size(), one.size());
        for (size_t p = 0; p < n_tokens; ++p) {
          ASSERT_EQ(std::memcmp(many.data() + p * nv, one.data() + p * nv, nv * sizeof(float)), 0)
              << th << " threads" << (delays ? " with delays" : "") << " vs 1, blocks of " << nb
              << ": the logits of position " << p << " differ";
        }
      }
    }
  }
}

}  // namespace

TEST(PrefillThreads, Stories260KBlockLogitsAreTheSameOnEveryThreadCount) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data, see SOURCES.md");
  // Blocks of 64 (64 + 64 + 22 rows) and of 7 (one row per task up to 4 threads).
  expect_same_on_every_thread_count(path, 150, {2, 3, 5, 8}, {64, 7});
}

TEST(PrefillThreads, SmolLM2BlockLogitsAreTheSameOnEveryThreadCount) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  expect_same_on_every_thread_count(test::smollm2_path(), 100, {2, 3}, {64});
}
