// Prompt-lookup decoding (GenerateOptions::n_draft): drafts verified in one
// block must leave generation exactly as plain decoding makes it.
#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "test_util.h"

using namespace lilims;

namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

runtime::SessionOptions opts(int32_t n_ctx) {
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = 2;
  return so;
}

// Largest |block - one at a time| over every position's logits, for a block
// of `draft` after `prompt`, evaluated as_decode or as a prefill block.
float block_vs_steps(const runtime::Model& model, const std::vector<int32_t>& p,
                     const std::vector<int32_t>& draft, bool as_decode) {
  runtime::Session blk(model, opts(512)), step(model, opts(512));
  blk.eval(p);
  step.eval(p);
  std::vector<float> all;
  if (as_decode) {
    blk.eval_all_logits_as_decode(draft, all);
  } else {
    blk.eval_all_logits(draft, all);
  }
  const size_t nv = (size_t)model.hparams().n_vocab;
  float worst = 0.0f;
  for (size_t t = 0; t < draft.size(); ++t) {
    step.eval({draft[t]});
    for (size_t v = 0; v < nv; ++v) worst = std::max(worst, std::fabs(all[t * nv + v] - step.logits()[v]));
  }
  return worst;
}

}  // namespace

// The decode path of attention (heads as vector lanes) sums in another order
// than a prefill block's query tiles: on SmolLM2 a block's logits differ from
// one token at a time by up to ~0.6.  Verification must not.
TEST(PromptLookup, AsDecodeBlockIsBitIdenticalToSteps) {
  std::vector<int32_t> draft;
  for (int i = 0; i < 8; ++i) draft.push_back(100 + 37 * i);
  for (const std::string& path : {stories_path(), test::smollm2_path()}) {
    LILIMS_REQUIRE_FILE(path, "stories260K: ../shared/data, see SOURCES.md; SmolLM2: scripts/fetch_model.sh");
    auto model = runtime::Model::open(path);
    const std::vector<int32_t> p =
        model->tokenizer().encode("Once upon a time there was a little", true, false);
    EXPECT_EQ(block_vs_steps(*model, p, draft, true), 0.0f) << path;
    // Past the positions where decode attention is cut into key ranges
    // (kernels::attention_splits: 3 ranges here), drafts of several of
    // forward_as_decode's 4-token rounds.
    std::vector<int32_t> long_p = model->tokenizer().encode(
        test::read_file(test::source_path("tests/data/ppl_text.txt")), true, false);
    long_p.resize(150);
    EXPECT_EQ(block_vs_steps(*model, long_p, draft, true), 0.0f) << path << ", 150-token prompt";
  }
}

namespace {

struct Outcome {
  runtime::GenerateResult r;
  std::vector<std::pair<int32_t, std::string>> streamed;
  std::vector<int32_t> session_tokens;
  std::vector<float> logits;
  bool has_logits = false;
};

Outcome run(const runtime::Model& model, const runtime::SessionOptions& so, const std::string& prompt,
        runtime::GenerateOptions go) {
  runtime::Session s(model, so);
  Outcome out;
  go.on_token = [&](int32_t t, const std::string& text) {
    out.streamed.emplace_back(t, text);
    return false;
  };
  out.r = s.generate(prompt, go);
  out.session_tokens = s.tokens();
  out.has_logits = s.has_logits();
  if (s.has_logits()) out.logits = s.logits();
  return out;
}

// Everything a caller can see is the same with drafts as without.
void expect_same(const Outcome& plain, const Outcome& drafted, const std::string& what) {
  EXPECT_EQ(drafted.r.tokens, plain.r.tokens) << what;
  EXPECT_EQ(drafted.r.text, plain.r.text) << what;
  EXPECT_EQ(drafted.r.stop, plain.r.stop) << what;
  EXPECT_EQ(drafted.r.n_shifts, plain.r.n_shifts) << what;
  EXPECT_EQ(drafted.streamed, plain.streamed) << what;
  EXPECT_EQ(drafted.session_tokens, plain.session_tokens) << what;
  ASSERT_EQ(drafted.has_logits, plain.has_logits) << what;
  EXPECT_TRUE(drafted.logits == plain.logits) << what << ": the session's last logits differ";
  EXPECT_EQ(plain.r.n_drafted, 0);
}

// Prompts whose answers repeat what came before, so drafts are made and
// both kept and rejected.
const char* const kStoryPrompts[] = {
    "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little",
    "Tom and Sam went to the park. Tom and Sam",
    "The cat sat on the mat. The dog sat on the mat. The bird sat on the",
    "One day, a big red ball",
    "Lily said, \"I want to play!\" Mom said, \"I want to",
    "the the the the",
};

}  // namespace

TEST(PromptLookup, Stories260KGreedyIdenticalOverPromptsAndCaps) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  int64_t drafted = 0, accepted = 0;
  for (const char* prompt : kStoryPrompts) {
    for (int32_t cap : {1, 2, 7, 33, 120}) {
      for (int32_t k : {1, 4, 8}) {
        runtime::GenerateOptions go;
        go.max_tokens = cap;
        const Outcome plain = run(*model, opts(256), prompt, go);
        go.n_draft = k;
        const Outcome d = run(*model, opts(256), prompt, go);
        expect_same(plain, d, std::string(prompt) + " cap " + std::to_string(cap) + " k " + std::to_string(k));
        EXPECT_LE(d.r.n_accepted, d.r.n_drafted);
        drafted += d.r.n_drafted;
        accepted += d.r.n_accepted;
      }
    }
  }
  // The drafts were exercised both ways.
  EXPECT_GT(accepted, 50);
  EXPECT_GT(drafted - accepted, 50);
}

// Sampling at temperature with penalties and a logit bias: each token is
// still drawn once, in order, from bit-identical logits.
TEST(PromptLookup, Stories260KSamplingPenaltiesBiasIdentical) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  int64_t accepted = 0;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    runtime::GenerateOptions go;
    go.max_tokens = 80;
    go.sampling.temperature = seed % 2 ? 0.7f : 1.0f;
    go.sampling.seed = seed;
    go.sampling.repeat_penalty = seed % 3 == 0 ? 1.1f : 1.0f;
    go.sampling.frequency_penalty = 0.2f;
    go.sampling.presence_penalty = 0.1f;
    go.sampling.logit_bias = {{(int32_t)(seed * 7), -INFINITY}, {(int32_t)(seed * 11), 1.5f}};
    const std::string prompt = kStoryPrompts[seed % std::size(kStoryPrompts)];
    const Outcome plain = run(*model, opts(256), prompt, go);
    go.n_draft = 5;
    const Outcome d = run(*model, opts(256), prompt, go);
    expect_same(plain, d, "seed " + std::to_string(seed));
    accepted += d.r.n_accepted;
  }
  EXPECT_GT(accepted, 0);
}

TEST(PromptLookup, Stories260KStopStringsShiftAndSecondCallIdentical) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  for (const char* prompt : kStoryPrompts) {
    runtime::GenerateOptions go;
    go.max_tokens = 100;
    go.stop = {"sat on", " the", "Lily"};
    const Outcome plain = run(*model, opts(256), prompt, go);
    go.n_draft = 6;
    expect_same(plain, run(*model, opts(256), prompt, go), std::string("stop: ") + prompt);
  }
  // A context of 48 that shifts several times while drafting.
  runtime::GenerateOptions go;
  go.max_tokens = 150;
  go.context_policy = runtime::ContextPolicy::shift;
  const Outcome plain = run(*model, opts(48), kStoryPrompts[1], go);
  EXPECT_GE(plain.r.n_shifts, 2);
  go.n_draft = 8;
  const Outcome d = run(*model, opts(48), kStoryPrompts[1], go);
  expect_same(plain, d, "shift");
  // A full context with the stop policy.
  go.context_policy = runtime::ContextPolicy::stop;
  go.n_draft = 0;
  const Outcome full = run(*model, opts(48), kStoryPrompts[0], go);
  EXPECT_EQ(full.r.stop, runtime::StopReason::context_full);
  go.n_draft = 8;
  expect_same(full, run(*model, opts(48), kStoryPrompts[0], go), "context full");

  // The session a drafted call leaves continues as the plain one does.
  runtime::Session a(*model, opts(256)), b(*model, opts(256));
  runtime::GenerateOptions g1;
  g1.max_tokens = 30;
  a.generate(kStoryPrompts[2], g1);
  g1.n_draft = 4;
  b.generate(kStoryPrompts[2], g1);
  g1.n_draft = 0;
  const runtime::GenerateResult ra = a.generate(" And then", g1);
  const runtime::GenerateResult rb = b.generate(" And then", g1);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(a.tokens(), b.tokens());
}

TEST(PromptLookup, CallbackStopAndCancelLeaveThePlainSession) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  for (int32_t stop_at : {1, 3, 9, 20}) {
    runtime::Session a(*model, opts(256)), b(*model, opts(256));
    runtime::GenerateOptions go;
    go.max_tokens = 60;
    int seen = 0;
    go.on_token = [&](int32_t, const std::string&) { return ++seen == stop_at; };
    const runtime::GenerateResult ra = a.generate(kStoryPrompts[0], go);
    seen = 0;
    go.n_draft = 6;
    const runtime::GenerateResult rb = b.generate(kStoryPrompts[0], go);
    EXPECT_EQ(ra.stop, runtime::StopReason::callback);
    EXPECT_EQ(rb.stop, runtime::StopReason::callback);
    EXPECT_EQ(ra.tokens, rb.tokens);
    EXPECT_EQ(a.tokens(), b.tokens()) << "stop at " << stop_at;
    EXPECT_TRUE(a.logits() == b.logits());
  }
  // A cancel from the callback: the tokens evaluated so far stay, as without drafts.
  runtime::Session a(*model, opts(256)), b(*model, opts(256));
  runtime::GenerateOptions go;
  go.max_tokens = 60;
  int seen = 0;
  runtime::Session* target = &a;
  go.on_token = [&](int32_t, const std::string&) {
    if (++seen == 12) target->cancel();
    return false;
  };
  const runtime::GenerateResult ra = a.generate(kStoryPrompts[0], go);
  seen = 0;
  target = &b;
  go.n_draft = 6;
  const runtime::GenerateResult rb = b.generate(kStoryPrompts[0], go);
  EXPECT_EQ(ra.stop, runtime::StopReason::cancelled);
  EXPECT_EQ(rb.stop, runtime::StopReason::cancelled);
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(a.tokens(), b.tokens());
}

TEST(PromptLookup, RefusesBadDraftLength) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  runtime::Session s(*model, opts(64));
  runtime::GenerateOptions go;
  for (int32_t k : {-1, runtime::kMaxDraft + 1}) {
    go.n_draft = k;
    EXPECT_THROW(s.generate("Once", go), Error);
    EXPECT_EQ(s.n_past(), 0);
  }
}

TEST(PromptLookup, DraftTokensTakeTheLongestNewestMatch) {
  using runtime::draft_tokens;
  // ... 1 2 3 [4 5] ... 2 3 [9] ... then 2 3: the newest match of (2, 3) wins.
  const std::vector<int32_t> seq = {1, 2, 3, 4, 5, 6, 2, 3, 9, 8, 7};
  EXPECT_EQ(draft_tokens(seq, seq.size(), {2, 3}, 4), (std::vector<int32_t>{9, 8, 7, 2}));
  // (1, 2, 3) matches only at the start: the 3-gram beats the newer 2-gram.
  EXPECT_EQ(draft_tokens(seq, seq.size(), {1, 2, 3}, 2), (std::vector<int32_t>{4, 5}));
  // The tail counts as history; one matching token is not enough.
  EXPECT_EQ(draft_tokens(seq, 0, {5, 6, 5, 6}, 3), (std::vector<int32_t>{5, 6}));
  EXPECT_TRUE(draft_tokens(seq, seq.size(), {42}, 4).empty());
  EXPECT_TRUE(draft_tokens(seq, seq.size(), {6, 7}, 4).empty());
  EXPECT_TRUE(draft_tokens(seq, seq.size(), {2, 3}, 0).empty());
}

TEST(PromptLookup, SmolLM2CopyAndSchemaIdentical) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = runtime::Model::open(path);
  const auto chat = [&](const std::string& user) {
    return "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n" + user +
           "<|im_end|>\n<|im_start|>assistant\n";
  };
  const std::string copy = chat(
      "Repeat the following JSON exactly: {\"name\": \"send_message\", \"arguments\": "
      "{\"recipient\": \"Alice\", \"text\": \"See you at the station at six\"}}");
  const std::string para = chat(
      "Summarize: The city council met on Tuesday to discuss the new bike lanes on Main Street. "
      "The council voted to build the bike lanes next spring.");
  int64_t accepted = 0;
  for (const std::string& prompt : {copy, para}) {
    for (int32_t cap : {5, 24, 64}) {
      runtime::GenerateOptions go;
      go.max_tokens = cap;
      const Outcome plain = run(*model, opts(512), prompt, go);
      go.n_draft = 6;
      const Outcome d = run(*model, opts(512), prompt, go);
      expect_same(plain, d, "cap " + std::to_string(cap));
      accepted += d.r.n_accepted;
    }
  }
  EXPECT_GT(accepted, 10);
  // The schema's mask applies at each verified position.
  const std::string schema = test::read_file(test::source_path("examples/tools/send_message.json"));
  const std::string params = nlohmann::json::parse(schema).at("parameters").dump();
  runtime::GenerateOptions go;
  go.max_tokens = 80;
  go.json_schema = params;
  go.jump_forward = false;
  const Outcome plain = run(*model, opts(512), copy, go);
  go.n_draft = 6;
  const Outcome d = run(*model, opts(512), copy, go);
  expect_same(plain, d, "schema");
  EXPECT_GT(d.r.n_accepted, 0);
}
