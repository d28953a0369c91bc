// Perplexity the way llama.cpp's llama-perplexity measures it, so figures
// compare: the text's tokens split into non-overlapping chunks of n_ctx
// (the tail dropped), each evaluated from an empty cache with its first
// token replaced by BOS when the vocabulary adds BOS, and the logits of
// positions n_ctx/2 .. n_ctx-2 scoring the tokens after them.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "runtime/engine.h"

namespace lilims::runtime {

struct PerplexityResult {
  double ppl = 0.0;
  double nll_mean = 0.0;
  int64_t n_scored = 0;
  int32_t n_chunks = 0;
  std::vector<double> running_ppl;  // after each chunk
};

// Called for each scored position in order with its logits (n_vocab) and
// the token that follows it (what --kl-base saves and --kl-ref compares).
using ScoredPositionFn = std::function<void(const float* logits, int32_t next_token)>;

// The number of chunks perplexity() evaluates for this many tokens.
int32_t perplexity_chunks(size_t n_tokens, int32_t n_ctx, int32_t max_chunks);

// Throws LILIMS_ERR_INVALID_ARGUMENT when there are fewer than 2 * n_ctx
// tokens.  max_chunks <= 0: all.  on_chunk (optional) sees the running result.
PerplexityResult perplexity(Session& session, const std::vector<int32_t>& tokens, int32_t n_ctx,
                            int32_t max_chunks = 0,
                            const std::function<void(const PerplexityResult&)>& on_chunk = {},
                            const ScoredPositionFn& on_scored = {});

}  // namespace lilims::runtime
