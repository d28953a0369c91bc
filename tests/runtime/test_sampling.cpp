#include <map>

#include "runtime/sampling.h"
#include "test_util.h"

namespace lilims::runtime {
namespace {

TEST(Sampling, GreedyPicksTheArgmaxLowestIndexOnTies) {
  const float logits[5] = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
  SamplingParams p;
  p.temperature = 0.0f;
  Sampler s(p);
  EXPECT_EQ(s.sample(logits, 5, {}), 1);
  EXPECT_EQ(argmax(logits, 5), 1);
}

TEST(Sampling, TopKOneIsGreedyAtAnyTemperature) {
  const float logits[4] = {0.0f, 1.0f, 3.0f, 2.9f};
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  Sampler s(p);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(logits, 4, {}), 2);
}

TEST(Sampling, FrequenciesFollowTheSoftmax) {
  // logits log(1), log(2), log(3): probabilities 1/6, 2/6, 3/6 at T = 1.
  const float logits[3] = {0.0f, 0.6931472f, 1.0986123f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  Sampler s(p);
  std::map<int, int> count;
  const int n = 60000;
  for (int i = 0; i < n; ++i) ++count[s.sample(logits, 3, {})];
  // Binomial standard deviation sqrt(n p (1-p)) <= 123 here: allow 5 sigma.
  EXPECT_NEAR(count[0], n / 6.0, 615);
  EXPECT_NEAR(count[1], n * 2 / 6.0, 615);
  EXPECT_NEAR(count[2], n * 3 / 6.0, 615);
}

TEST(Sampling, SeedReproducesAndTopPCuts) {
  const float logits[4] = {5.0f, 4.0f, 0.0f, -1.0f};
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.min_p = 0.0f;
  p.top_p = 0.5f;  // token 0 alone has p = e^5/(e^5+e^4+...) ~ 0.72 >= 0.5
  p.seed = 7;
  Sampler a(p), b(p);
  for (int i = 0; i < 100; ++i) {
    const int x = a.sample(logits, 4, {});
    EXPECT_EQ(x, 0);
    EXPECT_EQ(x, b.sample(logits, 4, {}));
  }
}

TEST(Sampling, RepeatPenaltyAndMask) {
  const float logits[3] = {2.0f, 1.9f, 0.0f};
  SamplingParams p;
  p.temperature = 0.0f;
  p.repeat_penalty = 1.5f;  // 2.0 / 1.5 < 1.9
  Sampler s(p);
  EXPECT_EQ(s.sample(logits, 3, {0}), 1);
  const uint8_t allowed[3] = {0, 0, 1};
  EXPECT_EQ(s.sample(logits, 3, {}, allowed), 2);
}

}  // namespace
}  // namespace lilims::runtime
