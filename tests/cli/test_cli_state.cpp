// `lilims run --save-state / --load-state`: a generation split in two runs
// through a saved state prints what one run prints; a bad state file is an
// error that names the problem, with nothing on stdout.
#include "cli_util.h"

namespace lilims::test::cli {
namespace {

using Args = std::vector<std::string>;

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom)

Result run_ok(const Args& a) {
  const Result r = run(a);
  expect_no_crash(r);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  return r;
}

// llama2.c's 200 greedy tokens from BOS, made 120 + 80 across two
// processes: the second starts from the first's state with an empty prompt.
TEST(CliState, GreedyTextContinuesAcrossRuns) {
  REQUIRE_STORIES();
  const std::string state = tmp_path("split.state");
  const Result a = run_ok({"run", "-m", stories_gguf(), "-p", "", "-n", "120", "--temp", "0",
                           "-t", "1", "--save-state", state});
  EXPECT_NE(a.err.find("[lilims] state: 121 tokens saved to " + state), std::string::npos) << a.err;
  const Result b = run_ok({"run", "-m", stories_gguf(), "-p", "", "-n", "80", "--temp", "0",
                           "-t", "1", "--load-state", state});
  EXPECT_NE(b.err.find("[lilims] state: 121 tokens loaded from " + state), std::string::npos) << b.err;
  const std::string want = read_file(shared_data("stories260K/expected_stdout_test_all.txt"));
  ASSERT_FALSE(a.out.empty());
  ASSERT_EQ(a.out.back(), '\n');
  EXPECT_EQ(a.out.substr(0, a.out.size() - 1) + b.out, want + "\n");
}

// -n 0 evaluates the prompt and saves it: a later run from that state
// prints what one run over the whole prompt prints.
TEST(CliState, PromptSavedWithoutGenerating) {
  REQUIRE_STORIES();
  const std::string state = tmp_path("prompt.state");
  const Result saved = run_ok({"run", "-m", stories_gguf(), "-p", "Once upon a time", "-n", "0",
                               "-t", "1", "-q", "--save-state", state});
  EXPECT_EQ(saved.out, "");
  EXPECT_EQ(saved.err, "");
  const Result whole = run_ok({"run", "-m", stories_gguf(), "-p", "Once upon a time, there",
                               "-n", "30", "--temp", "0", "-t", "1", "-q"});
  const Result resumed = run_ok({"run", "-m", stories_gguf(), "-p", ", there", "-n", "30",
                                 "--temp", "0", "-t", "1", "-q", "--load-state", state});
  EXPECT_GT(whole.out.size(), 10u);
  EXPECT_EQ(resumed.out, whole.out);
}

TEST(CliState, BadStatesAreErrors) {
  REQUIRE_STORIES();
  const Args base = {"run", "-m", stories_gguf(), "-p", "x", "-n", "4", "-t", "1"};
  const auto with = [&](Args extra) {
    Args a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return run(a);
  };
  expect_failure(with({"--load-state", tmp_path("missing.state")}), "run", "missing.state");
  const std::string state = tmp_path("good.state");
  ASSERT_EQ(with({"-q", "--save-state", state}).exit_code, 0);
  std::string bytes = read_file(state);
  ASSERT_GT(bytes.size(), 200u);
  bytes[150] ^= 1;
  write_bytes(tmp_path("corrupt.state"), bytes);
  expect_failure(with({"--load-state", tmp_path("corrupt.state")}), "run", "corrupt");
  write_bytes(tmp_path("cut.state"), bytes.substr(0, 100));
  expect_failure(with({"--load-state", tmp_path("cut.state")}), "run", "truncated");
  expect_failure(with({"--load-state", state, "--kv-type", "f32"}), "run", "KV cache");
  expect_failure(with({"--load-state", state, "-m", source_path("tests/data/tiny/llama.gguf")}),
                 "run", "another model");
  // The text is out before the save fails: the exit status tells.
  const Result unsaved = with({"-q", "--save-state", tmp_path("no_such_dir/x.state")});
  expect_no_crash(unsaved);
  EXPECT_NE(unsaved.exit_code, 0) << unsaved.describe();
  EXPECT_EQ(first_line(unsaved.err).rfind("lilims run: [state] cannot create", 0), 0u)
      << unsaved.describe();
}

// A chat turn after --load-state is the next user turn of the loaded
// conversation: the same output as the whole conversation given at once,
// written out from the template by hand (SmolLM2's chatml with its default
// system turn; the first answer as the first run printed it).
//   On the scalar path (--exec ref): the fast path's attention sums a
// decode step's scores in another order than a prompt's, so the loaded
// conversation (its answer decoded token by token) and the whole one
// (evaluated as one prompt) differ by rounding, which a greedy near-tie can
// turn into another word; the scalar path computes every query row the same
// way however the tokens arrive.
TEST(CliState, ChatTurnContinuesTheLoadedConversation) {
  LILIMS_REQUIRE_FILE(smollm2_path(), kSmolFrom);
  const std::string state = tmp_path("chat.state");
  const Result a = run_ok({"run", "-m", smollm2_path(), "-p", "What is the capital of France?",
                           "-n", "12", "--temp", "0", "-t", "2", "-q", "--exec", "ref",
                           "--save-state", state});
  ASSERT_FALSE(a.out.empty());
  const std::string answer = a.out.substr(0, a.out.size() - 1);
  const Result b = run_ok({"run", "-m", smollm2_path(), "-p", "And of Italy?", "-n", "8", "--temp",
                           "0", "-t", "2", "-q", "--exec", "ref", "--load-state", state});
  const std::string whole =
      "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
      "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
      "<|im_start|>assistant\n" + answer + "<|im_end|>\n<|im_start|>user\nAnd of Italy?<|im_end|>\n"
      "<|im_start|>assistant\n";
  const Result c = run_ok({"run", "-m", smollm2_path(), "--raw", "-p", whole, "-n", "8", "--temp",
                           "0", "-t", "2", "-q", "--exec", "ref"});
  EXPECT_EQ(b.out, c.out) << b.describe() << c.describe();
  // A new system turn cannot join a loaded conversation: said, and ignored.
  const Result d = run_ok({"run", "-m", smollm2_path(), "-p", "And of Italy?", "-n", "8", "--temp",
                           "0", "-t", "2", "-q", "--exec", "ref", "--load-state", state,
                           "--system", "Be terse."});
  EXPECT_EQ(d.out, b.out);
  EXPECT_NE(d.err.find("is the loaded one"), std::string::npos) << d.err;
}

}  // namespace
}  // namespace lilims::test::cli
