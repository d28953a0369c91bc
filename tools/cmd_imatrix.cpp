// lilims imatrix: per matmul weight, the mean squared activation of each
// input column over a text (models/imatrix.h), for `lilims quantize
// --imatrix`.
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/memory_info.h"
#include "models/imatrix.h"
#include "runtime/engine.h"
#include "runtime/eval/imatrix.h"
#include "tools/cli.h"
#include "tools/common.h"
#include "tools/progress.h"

namespace {

using namespace lilims;

void usage(FILE* out) {
  std::fprintf(out,
               "usage: lilims imatrix [-m] MODEL.gguf -f TEXT -o OUT.imatrix [-c CTX] [--chunks N]\n"
               "       [-t THREADS] [--no-progress]\n"
               "The text's tokens in chunks of CTX (default 512) tokens, each from an empty cache\n"
               "(as perplexity splits them); for every matmul weight, the mean over all positions\n"
               "of each input column's squared activation is written to OUT (format:\n"
               "models/imatrix.h).  `lilims quantize ... --imatrix OUT` weights the quantizers'\n"
               "squared error by it.  Progress on stderr; nothing on stdout.\n");
}

int imatrix_main(int argc, char** argv) {
  tools::CommonArgs common;
  common.n_ctx = 512;
  std::string text_path, out_path;
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
      } else if (a == "-o" || a == "--output") {
        out_path = next();
      } else if (a == "--chunks") {
        max_chunks = cli::parse_int("--chunks", next(), -1, INT32_MAX);
      } else if (a == "--no-progress") {
        progress = false;
      } else if (a == "-h" || a == "--help") {
        usage(stdout);
        return 0;
      } else if (!a.empty() && a[0] != '-' && common.model_path.empty()) {
        common.model_path = a;
      } else {
        throw std::invalid_argument("unknown option '" + a + "'");
      }
    }
    if (text_path.empty()) throw std::invalid_argument("a text file is needed (-f FILE)");
    if (out_path.empty()) throw std::invalid_argument("an output file is needed (-o FILE)");
  } catch (const std::invalid_argument& e) {
    cli::fail("imatrix", e.what());
    usage(stderr);
    return 2;
  }
  try {
    const std::string text = tools::read_scored_text(text_path);
    auto model = tools::open_model(common);
    const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
    runtime::ImatrixOptions opt;
    opt.n_ctx = common.n_ctx;
    opt.max_chunks = (int32_t)max_chunks;
    opt.n_threads = threads_or_cores(common.n_threads);
    tools::ProgressLine line("imatrix", progress);
    const models::Imatrix m = runtime::collect_imatrix(
        *model, tokens, opt, [&](int32_t done, int32_t n) { line.update((uint64_t)done, (uint64_t)n, ""); });
    line.finish();
    models::write_imatrix(out_path, m);
    if (progress) {
      std::fprintf(stderr, "imatrix: %zu weights over %d chunks of %d tokens written to %s\n",
                   m.entries.size(), m.n_chunks, m.n_ctx, out_path.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("imatrix", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(imatrix, "imatrix", "importance matrix of a model on a text, for quantize --imatrix",
                        imatrix_main);
