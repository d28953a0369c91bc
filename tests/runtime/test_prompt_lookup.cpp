// Prompt-lookup decoding (GenerateOptions::n_draft): drafts verified in one
// block must leave generation exactly as plain decoding makes it.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "test_util.h"

using namespace lilims;

namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

runtime::SessionOptions opts(int32_t n_ctx) {
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 2;
  return so;
}

// Largest |block - one at a time| over every position's logits, for a block
// of `draft` after `prompt`, evaluated as_decode or as a prefill block.
float block_vs_steps(const runtime::Model& model, const std::string& prompt,
                     const std::vector<int32_t>& draft, bool as_decode) {
  const std::vector<int32_t> p = model.tokenizer().encode(prompt, true, false);
  runtime::Session blk(model, opts(256)), step(model, opts(256));
  blk.eval(p);
  step.eval(p);
  std::vector<float> all;
  if (as_decode) {
    blk.eval_all_logits_as_decode(draft, all);
  } else {
    blk.eval_all_logits(draft, all);
  }
  const size_t nv = (size_t)model.hparams().n_vocab;
  float worst = 0.0f;
  for (size_t t = 0; t < draft.size(); ++t) {
    step.eval({draft[t]});
    for (size_t v = 0; v < nv; ++v) worst = std::max(worst, std::fabs(all[t * nv + v] - step.logits()[v]));
  }
  return worst;
}

}  // namespace

// The decode path of attention (heads as vector lanes) sums in another order
// than a prefill block's query tiles: on SmolLM2 a block's logits differ from
// one token at a time by up to ~0.6.  Verification must not.
TEST(PromptLookup, AsDecodeBlockIsBitIdenticalToSteps) {
  std::vector<int32_t> draft;
  for (int i = 0; i < 8; ++i) draft.push_back(100 + 37 * i);
  for (const std::string& path : {stories_path(), test::smollm2_path()}) {
    LILIMS_REQUIRE_FILE(path, "stories260K: ../shared/data, see SOURCES.md; SmolLM2: scripts/fetch_model.sh");
    auto model = runtime::Model::open(path);
    EXPECT_EQ(block_vs_steps(*model, "Once upon a time there was a little", draft, true), 0.0f)
        << path;
  }
}
