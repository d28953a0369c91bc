// lilims perplexity: the text split into non-overlapping chunks of CTX
// tokens, each evaluated from an empty cache (its first token replaced by
// BOS when the vocabulary adds BOS), the second half of each chunk scored:
// llama.cpp's llama-perplexity method, so the figures compare.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/perplexity.h"
#include "tools/cli.h"
#include "tools/common.h"
#include "tools/progress.h"

namespace {

using namespace lilims;

void usage(FILE* out) {
  std::fprintf(out,
               "usage: lilims perplexity [-m MODEL.gguf] -f TEXT [-c CTX] [-t THREADS]\n"
               "       [--chunks N] [--exec fast|ref|oracle] [--kv-type f16|q8_0|f32] [--no-mmap]\n"
               "       [--chunk-layers K] [--kv-commit sync|async] [--no-progress]\n"
               "       [--memory-budget BYTES (model and session; suffix K, M, G)]\n"
               "Progress goes to stderr (a live line on a terminal, else a line every 5 seconds;\n"
               "--no-progress: none); the result is the one line \"ppl = X\" on stdout.\n");
}

int perplexity_main(int argc, char** argv) {
  tools::CommonArgs common;
  common.n_ctx = 512;
  std::string text_path;
  long max_chunks = -1;
  bool progress = true;
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
      } else if (a == "--no-progress") {
        progress = false;
      } else if (a == "--chunks") {
        max_chunks = cli::parse_int("--chunks", next(), -1, INT32_MAX);
      } else if (a == "-h" || a == "--help") {
        usage(stdout);
        return 0;
      } else {
        throw std::invalid_argument("unknown option '" + a + "'");
      }
    }
    if (text_path.empty()) throw std::invalid_argument("a text file is needed (-f FILE)");
  } catch (const std::invalid_argument& e) {
    cli::fail("perplexity", e.what());
    usage(stderr);
    return 2;
  }
  try {
    std::string text = tools::read_text_file(text_path);
    // llama-perplexity drops exactly one trailing newline of the file.
    if (!text.empty() && text.back() == '\n') text.pop_back();
    auto model = tools::open_model(common);
    const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
    runtime::Session session(*model, common.session_options(*model));
    const int64_t whole = (int64_t)tokens.size() / common.n_ctx;
    const int64_t n_chunks = max_chunks > 0 ? std::min<int64_t>(whole, max_chunks) : whole;
    if (progress) {
      std::fprintf(stderr, "perplexity: %zu tokens, %lld chunks of %d, %d scored per chunk\n",
                   tokens.size(), (long long)n_chunks, common.n_ctx,
                   common.n_ctx - 1 - common.n_ctx / 2);
    }
    tools::ProgressLine line("perplexity", progress);
    const runtime::PerplexityResult r = runtime::perplexity(
        session, tokens, common.n_ctx, (int32_t)max_chunks,
        [&](const runtime::PerplexityResult& p) {
          char note[48];
          std::snprintf(note, sizeof note, "ppl %.4f", p.ppl);
          line.update((uint64_t)p.n_chunks, (uint64_t)n_chunks, note);
        });
    line.finish();
    std::printf("ppl = %.4f\n", r.ppl);
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("perplexity", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(perplexity, "perplexity", "perplexity of a text, as llama-perplexity",
                        perplexity_main);
