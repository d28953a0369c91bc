#include "runtime/eval/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"

namespace lilims::runtime {

int32_t perplexity_chunks(size_t n_tokens, int32_t n_ctx, int32_t max_chunks) {
  int32_t n_chunk = n_ctx > 0 ? (int32_t)(n_tokens / (size_t)n_ctx) : 0;
  if (max_chunks > 0) n_chunk = std::min(n_chunk, max_chunks);
  return n_chunk;
}

PerplexityResult perplexity(Session& session, const std::vector<int32_t>& tokens, int32_t n_ctx,
                            int32_t max_chunks,
                            const std::function<void(const PerplexityResult&)>& on_chunk,
                            const ScoredPositionFn& on_scored) {
  if (n_ctx < 4 || n_ctx > session.n_ctx()) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[perplexity] the chunk size " + std::to_string(n_ctx) +
                                                 " must be in 4.." + std::to_string(session.n_ctx()));
  }
  if (tokens.size() < 2 * (size_t)n_ctx) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[perplexity] the text has " + std::to_string(tokens.size()) +
                    " tokens; at least 2 * CTX = " + std::to_string(2 * n_ctx) + " are needed");
  }
  const tok::Tokenizer& tk = session.model().tokenizer();
  const int32_t n_vocab = session.model().hparams().n_vocab;
  const int32_t n_chunk = perplexity_chunks(tokens.size(), n_ctx, max_chunks);
  const int32_t first = n_ctx / 2;
  PerplexityResult r;
  double nll = 0.0;
  std::vector<float> logits;
  for (int32_t c = 0; c < n_chunk; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + (ptrdiff_t)c * n_ctx,
                               tokens.begin() + (ptrdiff_t)(c + 1) * n_ctx);
    if (tk.add_bos() && tk.bos() >= 0) chunk[0] = tk.bos();
    session.reset();
    session.eval_all_logits(chunk, logits);
    for (int32_t j = first; j < n_ctx - 1; ++j) {
      const float* row = &logits[(size_t)j * n_vocab];
      const float mx = *std::max_element(row, row + n_vocab);
      double sum = 0.0;
      for (int32_t v = 0; v < n_vocab; ++v) sum += std::exp((double)(row[v] - mx));
      const int32_t target = tokens[(size_t)c * n_ctx + j + 1];
      nll += std::log(sum) - (double)(row[target] - mx);
      if (on_scored) on_scored(row, target);
      ++r.n_scored;
    }
    r.n_chunks = c + 1;
    r.nll_mean = nll / (double)r.n_scored;
    r.ppl = std::exp(r.nll_mean);
    r.running_ppl.push_back(r.ppl);
    if (on_chunk) on_chunk(r);
  }
  session.reset();
  return r;
}

}  // namespace lilims::runtime
