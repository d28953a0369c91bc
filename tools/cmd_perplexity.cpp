// lilims perplexity: the text split into non-overlapping chunks of CTX
// tokens, each evaluated from an empty cache (its first token replaced by
// BOS when the vocabulary adds BOS), the second half of each chunk scored:
// llama.cpp's llama-perplexity method, so the figures compare.  With
// --kl-base the scored positions' distributions are saved; with --kl-ref
// they are compared with a saved base (runtime/eval/kl_divergence.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/eval/kl_divergence.h"
#include "runtime/eval/perplexity.h"
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
               "       [--kl-base FILE | --kl-ref FILE] [--lora FILE] [--lora-scaled FILE:SCALE]\n"
               "Progress goes to stderr (a live line on a terminal, else a line every 5 seconds;\n"
               "--no-progress: none); the result is the line \"ppl = X\" on stdout.\n"
               "--kl-base FILE  also save the scored positions' distributions (this model is the\n"
               "                base; ~2 bytes per vocabulary entry per scored position)\n"
               "--kl-ref FILE   compare with a saved base (same text, CTX and vocabulary; the\n"
               "                chunk count defaults to the base's): after \"ppl = X\", the lines\n"
               "                \"ppl base\", \"kld mean\" (+/- its standard error), \"kld median\",\n"
               "                \"kld p99\", \"kld max\" and \"same top token\" (%%, +/- standard error)\n");
}

int perplexity_main(int argc, char** argv) {
  tools::CommonArgs common;
  common.n_ctx = 512;
  std::string text_path;
  long max_chunks = -1;
  bool progress = true;
  std::string kl_base_path, kl_ref_path;
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
      } else if (a == "--kl-base") {
        kl_base_path = next();
      } else if (a == "--kl-ref") {
        kl_ref_path = next();
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
    if (!kl_base_path.empty() && !kl_ref_path.empty()) {
      throw std::invalid_argument("--kl-base and --kl-ref exclude each other");
    }
  } catch (const std::invalid_argument& e) {
    cli::fail("perplexity", e.what());
    usage(stderr);
    return 2;
  }
  try {
    const std::string text = tools::read_scored_text(text_path);
    auto model = tools::open_model(common);
    const std::vector<int32_t> tokens = model->tokenizer().encode(text, true, false);
    const int32_t n_vocab = model->hparams().n_vocab;
    std::unique_ptr<runtime::KlBaseReader> kl_ref;
    if (!kl_ref_path.empty()) {
      kl_ref = std::make_unique<runtime::KlBaseReader>(kl_ref_path);
      const int32_t base_chunks = kl_ref->header().n_chunks;
      if (max_chunks <= 0) max_chunks = base_chunks;
      if (runtime::perplexity_chunks(tokens.size(), common.n_ctx, (int32_t)max_chunks) !=
          base_chunks) {
        throw std::invalid_argument("the KL base " + kl_ref_path + " holds " +
                                    std::to_string(base_chunks) + " chunks; this run would score " +
                                    std::to_string(runtime::perplexity_chunks(
                                        tokens.size(), common.n_ctx, (int32_t)max_chunks)));
      }
      kl_ref->check_matches(n_vocab, common.n_ctx, tokens);
    }
    runtime::Session session(*model, common.session_options(*model));
    const tools::LoadedAdapters adapters = tools::open_adapters(common, *model);
    session.set_adapters(adapters.uses);
    const int64_t n_chunks = runtime::perplexity_chunks(tokens.size(), common.n_ctx, (int32_t)max_chunks);
    std::unique_ptr<runtime::KlBaseWriter> kl_base;
    if (!kl_base_path.empty() && n_chunks >= 1) {
      runtime::KlBaseHeader h;
      h.n_vocab = n_vocab;
      h.n_ctx = common.n_ctx;
      h.n_chunks = (int32_t)n_chunks;
      h.tokens.assign(tokens.begin(), tokens.begin() + (ptrdiff_t)(n_chunks * common.n_ctx));
      kl_base = std::make_unique<runtime::KlBaseWriter>(kl_base_path, h);
    }
    runtime::KlStats kl_stats;
    runtime::ScoredPositionFn on_scored;
    if (kl_base) {
      on_scored = [&](const float* row, int32_t next) { kl_base->add(row, next); };
    } else if (kl_ref) {
      on_scored = [&](const float* row, int32_t next) { kl_stats.add(kl_ref->next(), row, next); };
    }
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
        },
        on_scored);
    line.finish();
    if (kl_base) kl_base->finish();
    std::printf("ppl = %.4f\n", r.ppl);
    if (kl_ref) {
      const runtime::KlSummary k = kl_stats.summary();
      std::printf("ppl base = %.4f\n", k.ppl_base);
      std::printf("kld mean = %.6f +/- %.6f\n", k.kld_mean, k.kld_se);
      std::printf("kld median = %.6f\n", k.kld_median);
      std::printf("kld p99 = %.6f\n", k.kld_p99);
      std::printf("kld max = %.6f\n", k.kld_max);
      std::printf("same top token = %.3f +/- %.3f %%\n", 100.0 * k.same_top, 100.0 * k.same_top_se);
    }
    if (kl_base && progress) {
      std::fprintf(stderr, "perplexity: saved %lld positions to %s\n",
                   (long long)(n_chunks * (common.n_ctx - 1 - common.n_ctx / 2)),
                   kl_base_path.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    return cli::fail("perplexity", e.what());
  }
}

}  // namespace

LILIMS_REGISTER_COMMAND(perplexity, "perplexity", "perplexity of a text, as llama-perplexity",
                        perplexity_main);
