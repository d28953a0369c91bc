// Decode throughput of a batch of sequences in one forward pass per step
// (runtime/batch.h), without the server around it.
//   bench_batch MODEL.gguf [THREADS] [SEQUENCES,...] [TOKENS] [REPEATS]
// Each sequence reads a different 16-token prompt, then decodes TOKENS
// tokens greedily with the end of generation banned; the two first steps
// (the prompts, the first tokens) are left out.  Prints ms per step and
// aggregate tokens/s, the median of REPEATS runs per batch size.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/batch.h"

using namespace lilims;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_batch MODEL.gguf [THREADS] [SEQUENCES,...] [TOKENS] [REPEATS]\n");
    return 2;
  }
  try {
    auto model = runtime::Model::open(argv[1]);
    const int threads = argc > 2 ? std::atoi(argv[2]) : 1;
    std::vector<int> sizes;
    std::stringstream list(argc > 3 ? argv[3] : "1,2,4,8");
    for (std::string item; std::getline(list, item, ',');) sizes.push_back(std::atoi(item.c_str()));
    const int tokens = argc > 4 ? std::atoi(argv[4]) : 128;
    const int repeats = argc > 5 ? std::atoi(argv[5]) : 3;
    runtime::GenerateOptions opt;
    opt.max_tokens = tokens + 1;
    for (int32_t id = 0; id < model->hparams().n_vocab; ++id) {
      if (model->tokenizer().is_eog(id)) opt.sampling.logit_bias.push_back({id, -INFINITY});
    }
    std::printf("%-9s %-12s %-14s (threads %d, %d tokens, median of %d)\n", "sequences", "ms/step",
                "aggregate t/s", threads, tokens, repeats);
    for (int n : sizes) {
      std::vector<double> ms;
      for (int rep = 0; rep < repeats; ++rep) {
        runtime::BatchOptions bo;
        bo.n_ctx = 64 + tokens;
        bo.n_seq = n;
        bo.n_threads = threads;
        runtime::Batch batch(*model, bo);
        for (int i = 0; i < n; ++i) {
          std::vector<int32_t> prompt;
          for (int k = 0; k < 16; ++k) prompt.push_back(1000 + 37 * k + 101 * i);
          batch.add(prompt, opt, nullptr);
        }
        batch.step();
        batch.step();
        const auto t0 = std::chrono::steady_clock::now();
        int steps = 0;
        while (batch.n_active() > 0) {
          batch.step();
          ++steps;
        }
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
                     steps);
      }
      std::sort(ms.begin(), ms.end());
      const double m = ms[ms.size() / 2];
      std::printf("%-9d %-12.2f %-14.1f\n", n, m, n * 1e3 / m);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_batch: %s\n", e.what());
    return 1;
  }
}
