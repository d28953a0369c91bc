// lilims perplexity: the text split into non-overlapping chunks of CTX
// tokens, each evaluated from an empty cache (its first token replaced by
// BOS when the vocabulary adds BOS), the second half of each chunk scored:
// llama.cpp's llama-perplexity method, so the figures compare.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "tools/cli.h"
#include "tools/common.h"

namespace {

using namespace lilims;

void usage() {
  std::fprintf(stderr,
               "usage: lilims perplexity [-m MODEL.gguf] -f TEXT [-c CTX] [-t THREADS]\n"
               "       [--chunks N] [--exec fast|ref|oracle]\n");
}

int perplexity_main(int argc, char** argv) {
  tools::CommonArgs common;
  common.n_ctx = 512;
  std::string text_path;
  long max_chunks = -1;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
        return argv[++i];
      };
      if (common.parse(a, next)) continue;
      if (a == "-f" || a == "--file") {
        text_path = next();
      } else if (a == "--chunks") {
        max_chunks = cli::parse_int("--chunks", next());
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        throw std::invalid_argument("unknown option '" + a + "'");
      }
    }
    if (text_path.empty()) throw std::invalid_argument("a text file is needed (-f FILE)");
  } catch (const std::invalid_argument& e) {
    cli::fail("perplexity", e.what());
    usage();
    return 2;
  }
  try {
    const std::string text = tools::read_text_file(text_path);
    auto model = tools::open_model(common);
    const tok::Tokenizer& tk = model->tokenizer();
    std::vector<int32_t> tokens = tk.encode(text, true, false);
    const int n_ctx = common.n_ctx;
    if (tokens.size() < 2 * (size_t)n_ctx) {
      return cli::fail("perplexity", "the text has " + std::to_string(tokens.size()) +
                                         " tokens; at least 2 * CTX = " +
                                         std::to_string(2 * n_ctx) + " are needed");
    }
    long n_chunk = (long)(tokens.size() / (size_t)n_ctx);
    if (max_chunks > 0 && max_chunks < n_chunk) n_chunk = max_chunks;
    runtime::Session session(*model, common.session_options());
    const int32_t n_vocab = model->hparams().n_vocab;
    const int first = n_ctx / 2;
    double nll = 0.0;
    long count = 0;
    std::vector<float> logits;
    std::fprintf(stderr, "perplexity: %zu tokens, %ld chunks of %d, scoring %d per chunk\n",
                 tokens.size(), n_chunk, n_ctx, n_ctx - 1 - first);
    for (long c = 0; c < n_chunk; ++c) {
      std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
      if (tk.add_bos() && tk.bos() >= 0) chunk[0] = tk.bos();
      session.reset();
      session.eval_all_logits(chunk, logits);
      // logits row j predicts token j + 1; rows first .. n_ctx - 2 are scored.
      for (int j = first; j < n_ctx - 1; ++j) {
        const float* row = &logits[(size_t)j * n_vocab];
        float mx = row[0];
        for (int v = 1; v < n_vocab; ++v) mx = std::max(mx, row[v]);
        double sum = 0.0;
        for (int v = 0; v < n_vocab; ++v) sum += std::exp((double)row[v] - mx);
        const int32_t target = tokens[(size_t)(c * n_ctx + j + 1)];
        nll += std::log(sum) - ((double)row[target] - mx);
        ++count;
      }
      std::fprintf(stderr, "[%ld] %.4f\n", c + 1, std::exp(nll / (double)count));
    }
    std::printf("ppl = %.4f\n", std::exp(nll / (double)count));
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("perplexity", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(perplexity, "perplexity", "perplexity of a text, as llama-perplexity",
                        perplexity_main);
