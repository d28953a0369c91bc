// Decode attention over more than kernels::kAttnSplitKeys positions is cut
// into key ranges that run as separate tasks and are combined
// (graph/executor.cpp).  The cut depends on the number of visible keys
// alone, so a token's logits must not depend on the thread count: checked
// bit for bit over every position of a long prompt fed one token at a time
// (splits 1 to 8 on stories260K, 1 to 3 on SmolLM2), for thread counts
// below, at and above the machine's cores.
#include <cstring>
#include <string>
#include <vector>

#include "pool_delays.h"
#include "kernels/ops.h"
#include "runtime/engine.h"
#include "test_util.h"

using namespace lilims;

namespace {

// The logits after each token of `tokens`, fed one at a time.
std::vector<float> step_logits(const runtime::Model& model, const std::vector<int32_t>& tokens,
                               int threads, graph::PoolHook hook = {}) {
  runtime::SessionOptions so;
  so.n_ctx = (int32_t)tokens.size();
  so.n_threads = threads;
  so.pool_hook = hook;
  runtime::Session s(model, so);
  std::vector<float> all;
  for (int32_t t : tokens) {
    s.eval({t});
    all.insert(all.end(), s.logits().begin(), s.logits().end());
  }
  return all;
}

std::vector<int32_t> text_tokens(const runtime::Model& model, size_t n) {
  const std::string text = test::read_file(test::source_path("tests/data/ppl_text.txt"));
  std::vector<int32_t> t = model.tokenizer().encode(text, true, false);
  if (t.size() > n) t.resize(n);
  return t;
}

void expect_same_on_every_thread_count(const std::string& path, size_t n_tokens,
                                       const std::vector<int>& threads) {
  auto model = runtime::Model::open(path);
  const std::vector<int32_t> tokens = text_tokens(*model, n_tokens);
  ASSERT_EQ(tokens.size(), n_tokens);
  ASSERT_GT(kernels::attention_splits((int64_t)n_tokens), 1) << "the prompt must reach the cut";
  const size_t nv = (size_t)model->hparams().n_vocab;
  const std::vector<float> one = step_logits(*model, tokens, 1);
  for (int th : threads) {
    const std::vector<float> many = step_logits(*model, tokens, th);
    ASSERT_EQ(many.size(), one.size());
    for (size_t p = 0; p < n_tokens; ++p) {
      ASSERT_EQ(std::memcmp(many.data() + p * nv, one.data() + p * nv, nv * sizeof(float)), 0)
          << th << " threads vs 1: the logits after position " << p << " ("
          << kernels::attention_splits((int64_t)p + 1) << " key ranges) differ";
    }
  }
}

}  // namespace

TEST(SplitAttention, Stories260KDecodeLogitsAreTheSameOnEveryThreadCount) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data, see SOURCES.md");
  // 8 * kAttnSplitKeys + 40 positions: every split count up to the most.
  expect_same_on_every_thread_count(
      path, (size_t)kernels::kAttnMaxSplits * kernels::kAttnSplitKeys + 40, {2, 3, 4, 5, 8});
}

// With test::pool_delays, a run of key ranges also ends while another
// thread still writes its neighbours' partial sums.
TEST(SplitAttention, Stories260KDecodeLogitsAreTheSameUnderInjectedDelays) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data, see SOURCES.md");
  auto model = runtime::Model::open(path);
  // Up to 4 key ranges: 2 threads run each group's ranges as one task, 5
  // threads (more than the cores) in runs of 1 and 2.
  const size_t n = 4 * (size_t)kernels::kAttnSplitKeys + 40;
  const std::vector<int32_t> tokens = text_tokens(*model, n);
  ASSERT_EQ(tokens.size(), n);
  const size_t nv = (size_t)model->hparams().n_vocab;
  const std::vector<float> one = step_logits(*model, tokens, 1);
  for (int th : {2, 5}) {
    const std::vector<float> many = step_logits(*model, tokens, th, graph::PoolHook{&test::pool_delays, nullptr});
    ASSERT_EQ(many.size(), one.size());
    for (size_t p = 0; p < n; ++p) {
      ASSERT_EQ(std::memcmp(many.data() + p * nv, one.data() + p * nv, nv * sizeof(float)), 0)
          << th << " threads with delays vs 1: the logits after position " << p << " differ";
    }
  }
}

TEST(SplitAttention, SmolLM2DecodeLogitsAreTheSameOnEveryThreadCount) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  expect_same_on_every_thread_count(test::smollm2_path(), 3 * kernels::kAttnSplitKeys - 20, {2, 3});
}
