// `lilims run` and `lilims chat` with the generation loop's options: --stop,
// --logit-bias / -l, the penalties, --context-shift with --keep, and
// --verbose statistics on stderr with stdout unchanged.
#include <algorithm>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using namespace lilims::test;
using namespace lilims::test::cli;

std::vector<std::string> stories_run(std::vector<std::string> extra) {
  std::vector<std::string> args = {"run", "-m", stories_gguf(), "--raw", "-p", "Once",
                                   "--temp", "0", "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(CliGenerateLoop, StopStringEndsTheTextBeforeIt) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see SOURCES.md");
  const Result full = run(stories_run({"-n", "40"}));
  ASSERT_EQ(full.exit_code, 0) << full.describe();
  // A stop string across a word boundary, so across tokens.
  const size_t at = full.out.find("e girl");
  ASSERT_NE(at, std::string::npos) << full.out;
  const Result cut = run(stories_run({"-n", "40", "--stop", "zebra", "--stop", "e girl"}));
  ASSERT_EQ(cut.exit_code, 0) << cut.describe();
  EXPECT_EQ(cut.out, full.out.substr(0, at) + "\n");
  EXPECT_EQ(cut.err, "");
  const Result empty = run(stories_run({"--stop", ""}));
  EXPECT_EQ(empty.exit_code, 2) << empty.describe();
  const Result json = run(stories_run({"--json", "--stop", "}"}));
  EXPECT_EQ(json.exit_code, 2) << json.describe();
  EXPECT_NE(json.err.find("--stop"), std::string::npos) << json.err;
}

TEST(CliGenerateLoop, LogitBiasAndPenalties) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see SOURCES.md");
  const Result base = run(stories_run({"-n", "12"}));
  ASSERT_EQ(base.exit_code, 0) << base.describe();
  // Ban the token of " upon", the greedy continuation of "Once" (SentencePiece
  // gives "upon" its word-start space).
  const Result ids = run({"tokenize", "-m", stories_gguf(), "--no-bos", "--ids", "upon"});
  ASSERT_EQ(ids.exit_code, 0) << ids.describe();
  const std::string upon = first_line(ids.out);
  ASSERT_EQ(upon.find(' '), std::string::npos) << "' upon' is more than one token: " << ids.out;
  ASSERT_EQ(base.out.rfind(" upon", 0), 0u) << base.out;
  for (const char* flag : {"-l", "--logit-bias"}) {
    const Result banned = run(stories_run({"-n", "12", flag, upon + "-inf"}));
    ASSERT_EQ(banned.exit_code, 0) << banned.describe();
    EXPECT_NE(banned.out.rfind(" upon", 0), 0u) << banned.out;
    EXPECT_NE(banned.out, base.out);
  }
  const Result pen = run(stories_run({"-n", "12", "--frequency-penalty", "5",
                                      "--presence-penalty", "1"}));
  ASSERT_EQ(pen.exit_code, 0) << pen.describe();
  struct Bad {
    std::vector<std::string> args;
    int code;
    const char* says;
  } bad[] = {{{"-l", "512+1"}, 1, "outside the vocabulary"},
             {{"-l", "5+nan"}, 1, "NaN"},
             {{"-l", "5"}, 2, "expects ID+BIAS"},
             {{"-l", "x+1"}, 2, "-l"},
             {{"--frequency-penalty", "abc"}, 2, "--frequency-penalty"},
             {{"--keep", "-1"}, 2, "--keep"}};
  for (const Bad& b : bad) {
    const Result r = run(stories_run(b.args));
    EXPECT_EQ(r.exit_code, b.code) << b.args[0] << " " << b.args[1] << "\n" << r.describe();
    EXPECT_NE(r.err.find(b.says), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliGenerateLoop, ContextShiftGoesOnAndVerboseReportsIt) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see SOURCES.md");
  const Result stop = run(stories_run({"-n", "60", "-c", "32"}));
  ASSERT_EQ(stop.exit_code, 0) << stop.describe();
  EXPECT_NE(stop.err.find("context of 32 tokens is full"), std::string::npos) << stop.err;
  const Result shift = run(stories_run({"-n", "60", "-c", "32", "--context-shift", "--keep", "2"}));
  ASSERT_EQ(shift.exit_code, 0) << shift.describe();
  EXPECT_EQ(shift.err, "");
  // The same text up to the full context, then more.
  ASSERT_GT(shift.out.size(), stop.out.size());
  EXPECT_EQ(shift.out.substr(0, stop.out.size() - 1), stop.out.substr(0, stop.out.size() - 1));
  std::vector<std::string> verbose = stories_run({"-n", "60", "-c", "32", "--context-shift",
                                                  "--keep", "2", "-v"});
  verbose.erase(std::find(verbose.begin(), verbose.end(), "-q"));
  const Result v = run(verbose);
  ASSERT_EQ(v.exit_code, 0) << v.describe();
  EXPECT_EQ(v.out, shift.out);
  EXPECT_NE(v.err.find("context shifts: 2"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("time to first token"), std::string::npos) << v.err;
  EXPECT_NE(v.err.find("peak resident memory"), std::string::npos) << v.err;
}

TEST(CliGenerateLoop, ChatReusesThePrefixAndReportsItOnlyWhenVerbose) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see SOURCES.md");
  const std::vector<std::string> chat = {"chat", "-m", stories_gguf(), "--template", "chatml",
                                         "-n", "8", "--temp", "0"};
  const std::string input = "Hi\nHow are you\n";
  const Result quiet = run(chat, input);
  ASSERT_EQ(quiet.exit_code, 0) << quiet.describe();
  EXPECT_EQ(quiet.err, "");
  std::vector<std::string> args = chat;
  args.push_back("--verbose");
  const Result v = run(args, input);
  ASSERT_EQ(v.exit_code, 0) << v.describe();
  EXPECT_EQ(v.out, quiet.out);
  // Turn 1 reuses nothing; turn 2 reuses all of turn 1 (its prompt and the
  // 8 answer tokens the cache holds).
  const size_t first = v.err.find("prompt tokens reused: 0 of ");
  ASSERT_NE(first, std::string::npos) << v.err;
  const int n1 = std::stoi(v.err.substr(first + 27));
  EXPECT_NE(v.err.find("prompt tokens reused: " + std::to_string(n1 + 8) + " of "),
            std::string::npos)
      << v.err;
}

}  // namespace
