// The rest of the generation loop: logit bias and frequency / presence
// penalties (against a hand-computed distribution), both context-full
// policies at the boundary of a tiny context (stories260K), prompt-prefix
// reuse against a fresh evaluation, and the per-call statistics.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/sampling.h"
#include "test_util.h"

namespace lilims {
namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

#define REQUIRE_STORIES() \
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md")

// Draws n tokens from `s` and returns each token's share.
std::map<int32_t, double> shares(runtime::Sampler& s, const std::vector<float>& logits, int n) {
  std::map<int32_t, double> count;
  for (int i = 0; i < n; ++i) count[s.sample(logits.data(), (int32_t)logits.size(), {})] += 1.0 / n;
  return count;
}

TEST(SamplingPenalties, MatchAHandComputedDistribution) {
  runtime::SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 1234;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  p.logit_bias = {{0, 2.0f}, {4, -INFINITY}, {3, 0.25f}, {3, 0.25f}};
  runtime::Sampler s(p);
  s.accept(2);
  s.accept(2);
  s.accept(1);
  const std::vector<float> logits = {1.0f, 2.0f, 3.0f, 0.0f, 9.0f};
  // By hand: token 0: 1 + 2 = 3; token 1: 2 - 1 * 0.5 - 0.25 = 1.25;
  // token 2: 3 - 2 * 0.5 - 0.25 = 1.75; token 3: 0 + 0.5 = 0.5; token 4 banned.
  const double adj[4] = {3.0, 1.25, 1.75, 0.5};
  double z = 0;
  for (double a : adj) z += std::exp(a);
  const int n = 40000;
  const auto got = shares(s, logits, n);
  EXPECT_EQ(got.count(4), 0u) << "a banned token was drawn";
  for (int t = 0; t < 4; ++t) {
    const double want = std::exp(adj[t]) / z;
    // Five standard deviations of a share over n seeded draws.
    const double tol = 5 * std::sqrt(want * (1 - want) / n);
    EXPECT_NEAR(got.count(t) ? got.at(t) : 0.0, want, tol) << "token " << t << ", seed " << p.seed;
  }
}

TEST(SamplingPenalties, CountOnlyAcceptedTokensAndChangeGreedy) {
  runtime::SamplingParams p;  // greedy
  p.presence_penalty = 1.5f;
  runtime::Sampler s(p);
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f};
  // The tokens `recent` holds (the prompt) do not count.
  EXPECT_EQ(s.sample(logits.data(), 3, {1, 1, 1}), 1);
  s.accept(1);
  EXPECT_EQ(s.sample(logits.data(), 3, {}), 2);  // 2 - 1.5 < 1
  runtime::SamplingParams f;
  f.frequency_penalty = 0.6f;
  runtime::Sampler t(f);
  t.accept(1);
  EXPECT_EQ(t.sample(logits.data(), 3, {}), 1);  // 2 - 0.6 > 1
  t.accept(1);
  EXPECT_EQ(t.sample(logits.data(), 3, {}), 2);  // 2 - 1.2 < 1
}

TEST(SamplingPenalties, BadValuesRefused) {
  runtime::SamplingParams p;
  p.frequency_penalty = NAN;
  EXPECT_THROW(runtime::Sampler{p}, Error);
  p.frequency_penalty = 0;
  p.presence_penalty = INFINITY;
  EXPECT_THROW(runtime::Sampler{p}, Error);
  auto status = [](const std::vector<std::pair<int32_t, float>>& b, int32_t n_vocab) {
    try {
      runtime::check_logit_bias(b, n_vocab);
      return LILIMS_OK;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("[sampling] "), std::string::npos) << e.what();
      return e.status();
    }
  };
  EXPECT_EQ(status({{3, -INFINITY}, {0, 1.0f}}, 4), LILIMS_OK);
  EXPECT_EQ(status({{4, 1.0f}}, 4), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status({{-1, 1.0f}}, 4), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status({{1, NAN}}, 4), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status({{1, INFINITY}}, 4), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status({{0, -INFINITY}, {1, -INFINITY}}, 2), LILIMS_ERR_INVALID_ARGUMENT);
}

runtime::SessionOptions tiny(int32_t n_ctx) {
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 1;
  return so;
}

TEST(LogitBiasGenerate, ABanChangesTheGreedyToken) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, tiny(64));
  runtime::GenerateOptions go;
  go.max_tokens = 1;
  const int32_t first = s.generate_tokens({1}, go).tokens.at(0);
  // What greedy picks once `first` is gone: the runner-up of the BOS logits.
  runtime::Session b(*model, tiny(64));
  b.eval({1});
  std::vector<float> l = b.logits();
  l[(size_t)first] = -INFINITY;
  const int32_t runner_up = runtime::argmax(l.data(), (int32_t)l.size());
  runtime::Session c(*model, tiny(64));
  go.sampling.logit_bias = {{first, -INFINITY}};
  const runtime::GenerateResult r = c.generate_tokens({1}, go);
  ASSERT_EQ(r.tokens.size(), 1u);
  EXPECT_NE(r.tokens[0], first);
  EXPECT_EQ(r.tokens[0], runner_up);
  // Out of the vocabulary, or NaN: refused before the prompt is evaluated.
  runtime::Session d(*model, tiny(64));
  for (const auto& bad : std::vector<std::pair<int32_t, float>>{{512, 1.0f}, {3, NAN}}) {
    go.sampling.logit_bias = {bad};
    try {
      d.generate_tokens({1}, go);
      ADD_FAILURE() << "bias (" << bad.first << ", " << bad.second << ") was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT) << e.what();
    }
    EXPECT_EQ(d.n_past(), 0);
  }
}

TEST(ContextPolicy, StopEndsAtExactlyTheContext) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, tiny(32));
  runtime::GenerateOptions go;
  go.max_tokens = 100;
  const runtime::GenerateResult r = s.generate_tokens({1}, go);
  EXPECT_EQ(r.stop, runtime::StopReason::context_full);
  EXPECT_EQ(s.n_past(), 32);
  // Every position holds a token, and the last token made is the 33rd.
  EXPECT_EQ(r.tokens.size(), 32u);
  EXPECT_EQ(r.n_shifts, 0);
}

// With a prompt of P = n_keep tokens, the first shift happens when the
// context of 32 is full, at generated token 32 - P: P kept, d = (32 - P) / 2
// dropped, the 32 - P - d after them and the new token evaluated again at
// positions P onwards.
TEST(ContextPolicy, ShiftContinuesWithTheLogitsOfTheKeptSequence) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  const std::vector<int32_t> prompt = model->tokenizer().encode("Once upon", true, false);
  const size_t P = prompt.size(), d = (32 - P) / 2, again = 32 - P - d + 1;
  ASSERT_GE(d, 8u);
  runtime::Session s(*model, tiny(32));
  runtime::GenerateOptions go;
  go.max_tokens = (int32_t)(32 - P + 1 + 6);  // six more after the shift, fewer than a second needs
  go.context_policy = runtime::ContextPolicy::shift;
  go.n_keep = (int32_t)P;
  const runtime::GenerateResult r = s.generate_tokens(prompt, go);
  ASSERT_EQ(r.stop, runtime::StopReason::max_tokens);
  ASSERT_EQ(r.tokens.size(), (size_t)go.max_tokens);
  EXPECT_EQ(r.n_shifts, 1);
  // The sequence the session holds: the prompt, then the generated tokens from d on.
  std::vector<int32_t> want = prompt;
  want.insert(want.end(), r.tokens.begin() + (ptrdiff_t)d, r.tokens.end());
  ASSERT_EQ(s.tokens(), want);
  ASSERT_EQ(s.n_past(), (int32_t)(P + again + 6));

  // A fresh session fed the kept sequence in the same blocks (the prompt,
  // the tokens the shift evaluated again, then one token at a time) runs
  // the same arithmetic: the logits must be bit-identical.
  runtime::Session f(*model, tiny(32));
  f.eval(prompt);
  f.eval(std::vector<int32_t>(want.begin() + (ptrdiff_t)P, want.begin() + (ptrdiff_t)(P + again)));
  for (size_t i = P + again; i < want.size(); ++i) f.eval({want[i]});
  ASSERT_EQ(f.logits().size(), s.logits().size());
  for (size_t v = 0; v < f.logits().size(); ++v) {
    ASSERT_EQ(f.logits()[v], s.logits()[v]) << "token " << v;
  }
  // Fed as one block, the products are summed in another order (GEMM tiles
  // instead of a matvec): PrefillEqualsStepByStep's bound of 1e-3 applies.
  runtime::Session g(*model, tiny(32));
  g.eval(want);
  for (size_t v = 0; v < g.logits().size(); ++v) {
    ASSERT_NEAR(g.logits()[v], s.logits()[v], 1e-3f) << "token " << v;
  }
}

TEST(ContextPolicy, ShiftKeepsBosByDefaultAndGoesOn) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, tiny(32));
  runtime::GenerateOptions go;
  go.max_tokens = 100;
  go.context_policy = runtime::ContextPolicy::shift;
  const runtime::GenerateResult r = s.generate_tokens({1}, go);
  EXPECT_EQ(r.stop, runtime::StopReason::max_tokens);
  EXPECT_EQ(r.tokens.size(), 100u);
  EXPECT_GE(r.n_shifts, 3);
  EXPECT_EQ(s.tokens().at(0), 1);
  EXPECT_LE(s.n_past(), 32);
  // Too many tokens kept to shift anything: refused up front.
  runtime::Session t(*model, tiny(32));
  go.n_keep = 31;
  EXPECT_THROW(t.generate_tokens({1}, go), Error);
  EXPECT_EQ(t.n_past(), 0);
}

// The second turn reuses what the first left in the cache and evaluates
// only the rest; a fresh session fed the same blocks gives identical logits.
TEST(PrefixReuse, SecondTurnEvaluatesOnlyNewTokens) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  const tok::Tokenizer& tk = model->tokenizer();
  runtime::Session s(*model, tiny(128));
  runtime::GenerateOptions go;
  go.max_tokens = 6;
  const std::vector<int32_t> turn1 = tk.encode("Once upon a time", true, false);
  const runtime::GenerateResult r1 = s.generate_reusing_prefix(turn1, go);
  EXPECT_EQ(r1.n_reused_tokens, 0);
  std::vector<int32_t> held = turn1;
  held.insert(held.end(), r1.tokens.begin(), r1.tokens.end());
  ASSERT_EQ(s.tokens(), held);
  // Turn 2: what the session holds, minus its last token, plus new text.
  std::vector<int32_t> turn2(held.begin(), held.end() - 1);
  const std::vector<int32_t> more = tk.encode(" Lily saw a big dog.", false, false);
  turn2.insert(turn2.end(), more.begin(), more.end());
  go.max_tokens = 1;
  const runtime::GenerateResult r2 = s.generate_reusing_prefix(turn2, go);
  EXPECT_EQ(r2.n_prompt_tokens, (int32_t)turn2.size());
  EXPECT_EQ(r2.n_reused_tokens, (int32_t)held.size() - 1);
  EXPECT_GT(r2.prompt_tokens_per_second(), 0.0);

  runtime::Session f(*model, tiny(128));
  f.eval(turn1);
  for (size_t i = turn1.size(); i + 1 < held.size(); ++i) f.eval({held[i]});
  f.eval(more);
  f.eval({r2.tokens.at(0)});
  for (size_t v = 0; v < f.logits().size(); ++v) {
    ASSERT_EQ(f.logits()[v], s.logits()[v]) << "token " << v;
  }
  // The whole prompt as one block: another summation order (see above).
  runtime::Session g(*model, tiny(128));
  const runtime::GenerateResult rg = g.generate_tokens(turn2, go);
  EXPECT_EQ(rg.tokens, r2.tokens);
  EXPECT_EQ(rg.n_reused_tokens, 0);
  for (size_t v = 0; v < g.logits().size(); ++v) {
    ASSERT_NEAR(g.logits()[v], s.logits()[v], 1e-3f) << "token " << v;
  }
}

TEST(GenerateStats, TimesRatesAndPeakMemory) {
  REQUIRE_STORIES();
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, tiny(64));
  runtime::GenerateOptions go;
  go.max_tokens = 8;
  const runtime::GenerateResult r = s.generate_tokens({1, 300, 301}, go);
  ASSERT_EQ(r.tokens.size(), 8u);
  EXPECT_GE(r.first_token_seconds, r.prompt_seconds);
  EXPECT_GT(r.decode_tokens_per_second(), 0.0);
  EXPECT_DOUBLE_EQ(r.decode_tokens_per_second(), 7 / r.generate_seconds);
  EXPECT_DOUBLE_EQ(r.prompt_tokens_per_second(), 3 / r.prompt_seconds);
#if defined(__linux__) || defined(__APPLE__)
  // At least the model's weights and the cache are resident.
  EXPECT_GT(r.peak_resident_bytes, 1u << 20);
#endif
}

}  // namespace
}  // namespace lilims
