// Turning logits into the next token: greedy, or temperature with top-k,
// top-p, min-p, a repetition penalty, frequency and presence penalties and a
// logit bias, from a seeded generator so that a seed reproduces a generation.
#pragma once

#include <cstdint>
#include <functional>
#include <random>
#include <utility>
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
  // OpenAI's penalties over the tokens generated in this call (Sampler::accept
  // counts them; the prompt does not count): with c the times token j was
  // generated so far,
  //   logit[j] -= c * frequency_penalty + (c > 0 ? presence_penalty : 0).
  // 0: off; negative values favour repeats.  Must be finite.
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  // (token id, bias) added to that token's logit before the penalties; a
  // bias of -INFINITY bans the token.  Each id must be in the vocabulary
  // and each bias finite or -INFINITY (checked against the vocabulary by
  // check_logit_bias); a repeated id adds up.
  std::vector<std::pair<int32_t, float>> logit_bias;
};

// Throws LILIMS_ERR_INVALID_ARGUMENT for an id outside [0, n_vocab), a NaN or
// +INFINITY bias, or a bias that bans every token.
void check_logit_bias(const std::vector<std::pair<int32_t, float>>& bias, int32_t n_vocab);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // Picks a token from n_vocab logits (not modified).  recent: the tokens the
  // repetition penalty looks at (the last repeat_last_n are used).
  // allowed (optional, n_vocab entries): 0 excludes a token.  accept
  // (optional): a costlier test, asked lazily from the most likely token down
  // (constrained decoding).  Returns -1 when no token is acceptable.
  // The order: logit bias, repetition penalty, frequency and presence
  // penalties, then greedy or temperature, top-k, min-p, top-p.
  int32_t sample(const float* logits, int32_t n_vocab, const std::vector<int32_t>& recent,
                 const uint8_t* allowed = nullptr,
                 const std::function<bool(int32_t)>* accept = nullptr);
  // Counts a generated token for the frequency and presence penalties.
  void accept(int32_t token);

 private:
  // Checks the logit bias against the vocabulary and sums it into bias_.
  void prepare(int32_t n_vocab);

  SamplingParams p_;
  std::vector<float> bias_;      // (n_vocab) summed logit_bias; empty when there is none
  std::vector<int32_t> counts_;  // (largest id accepted + 1) times each token was accepted
  std::mt19937_64 rng_;
  std::vector<std::pair<float, int32_t>> cand_;  // reused: no allocation per token
  std::vector<std::pair<float, int32_t>> kept_;
};

// Index of the largest logit (the lowest index on ties).
int32_t argmax(const float* logits, int32_t n);

}  // namespace lilims::runtime
