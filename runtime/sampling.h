// Turning logits into the next token: greedy, or temperature with top-k,
// top-p, min-p and a repetition penalty, from a seeded generator so that a
// seed reproduces a generation.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <vector>

namespace lilims::runtime {

struct SamplingParams {
  float temperature = 0.0f;  // <= 0: greedy
  int32_t top_k = 40;        // <= 0: off
  float top_p = 0.95f;       // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off (llama.cpp's rule: divide positive logits, multiply negative)
  int32_t repeat_last_n = 64;
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token from n_vocab logits (not modified).  recent: the tokens the
  // repetition penalty looks at (the last repeat_last_n are used).
  // allowed (optional, n_vocab entries): 0 excludes a token.  accept
  // (optional): a costlier test, asked lazily from the most likely token down
  // (constrained decoding).  Returns -1 when no token is acceptable.
  int32_t sample(const float* logits, int32_t n_vocab, const std::vector<int32_t>& recent,
                 const uint8_t* allowed = nullptr,
                 const std::function<bool(int32_t)>* accept = nullptr);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // reused: no allocation per token
  std::vector<std::pair<float, int32_t>> kept_;
};

// Index of the largest logit (the lowest index on ties).
int32_t argmax(const float* logits, int32_t n);

}  // namespace lilims::runtime
