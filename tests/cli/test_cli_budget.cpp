// --memory-budget on the commands that run a model: the model and the
// session are refused, before anything large is allocated, with the bytes
// they need; a budget of exactly those bytes runs as if there were none.
#if defined(__GNUC__) && !defined(__clang__)
// libstdc++ 12's <regex> trips -Wmaybe-uninitialized under
// -fsanitize=address (a false positive inside its NFA states).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

using Args = std::vector<std::string>;

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom)

// budget nullptr: no --memory-budget; ctx "": no -c.
Args run_args(const char* budget, const std::string& ctx) {
  Args a = {"run", "-m", stories_gguf(), "--raw", "--temp", "0", "-n", "16", "-p",
            "Once upon a time", "-q"};
  if (budget) a.insert(a.end(), {"--memory-budget", budget});
  if (!ctx.empty()) a.insert(a.end(), {"-c", ctx});
  return a;
}

// The figures of "[session] the model takes M bytes and the session S more
// (T bytes in all), over the --memory-budget of B bytes".
struct Refusal {
  uint64_t model = 0, session = 0, total = 0, budget = 0;
};

Refusal session_refusal(const Result& r) {
  static const std::regex re(
      "\\[session\\] the model takes ([0-9]+) bytes and the session ([0-9]+) more \\(([0-9]+) "
      "bytes in all\\), over the --memory-budget of ([0-9]+) bytes");
  std::smatch m;
  Refusal f;
  if (!std::regex_search(r.err, m, re)) {
    ADD_FAILURE() << "no session refusal with its figures:\n" << r.describe();
    return f;
  }
  f.model = std::stoull(m[1]);
  f.session = std::stoull(m[2]);
  f.total = std::stoull(m[3]);
  f.budget = std::stoull(m[4]);
  return f;
}

TEST(CliBudget, ModelOverBudgetIsRefusedWithTheBytesNeeded) {
  REQUIRE_STORIES();
  const Result r = run(run_args("1K", ""));
  ASSERT_TRUE(r.exited()) << r.describe();
  EXPECT_NE(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(r.out.empty()) << r.describe();
  EXPECT_NE(r.err.find("[model_open]"), std::string::npos) << r.describe();
  EXPECT_TRUE(std::regex_search(r.err, std::regex("needs [0-9]+ bytes .*over the memory budget "
                                                  "of 1024 bytes")))
      << r.describe();
}

// A budget the model fits and a 2048-token session does not: refused with
// both figures; their sum as the budget runs, and prints what no budget does.
TEST(CliBudget, SessionGetsWhatTheModelLeaves) {
  REQUIRE_STORIES();
  const Result unbounded = run(run_args(nullptr, "2048"));
  ASSERT_EQ(unbounded.exit_code, 0) << unbounded.describe();
  ASSERT_FALSE(unbounded.out.empty());

  const Result small = run(run_args("1600K", "2048"));
  ASSERT_TRUE(small.exited()) << small.describe();
  EXPECT_NE(small.exit_code, 0) << small.describe();
  const Refusal f = session_refusal(small);
  EXPECT_EQ(f.budget, 1600u << 10);
  EXPECT_GT(f.model, 0u);
  EXPECT_GT(f.session, 0u);
  EXPECT_EQ(f.model + f.session, f.total);
  EXPECT_GT(f.total, f.budget);

  const Result exact = run(run_args(std::to_string(f.total).c_str(), "2048"));
  EXPECT_EQ(exact.exit_code, 0) << exact.describe();
  EXPECT_EQ(exact.out, unbounded.out);
  const Result one_less = run(run_args(std::to_string(f.total - 1).c_str(), "2048"));
  EXPECT_NE(one_less.exit_code, 0) << one_less.describe();
  EXPECT_EQ(session_refusal(one_less).total, f.total);

  // Without -c the default context shrinks to what the budget holds.
  const Result fitted = run(run_args("1600K", ""));
  EXPECT_EQ(fitted.exit_code, 0) << fitted.describe();
  EXPECT_EQ(fitted.out, unbounded.out);
}

TEST(CliBudget, SuffixesAndBadValues) {
  REQUIRE_STORIES();
  for (const char* ok : {"1G", "1g", "4096M", "8388608K", "2147483648"}) {
    const Result r = run(run_args(ok, "256"));
    EXPECT_EQ(r.exit_code, 0) << ok << "\n" << r.describe();
  }
  for (const char* bad : {"", "0", "12X", "K", "-5M", "1.5G", "20000000000G", "1 G"}) {
    const Result r = run(run_args(bad, "256"));
    ASSERT_TRUE(r.exited()) << bad << "\n" << r.describe();
    EXPECT_EQ(r.exit_code, 2) << bad << "\n" << r.describe();
    EXPECT_NE(r.err.find("--memory-budget"), std::string::npos) << bad << "\n" << r.describe();
  }
}

// perplexity, chat and bench take the flag too and refuse the same way.
TEST(CliBudget, OtherCommands) {
  REQUIRE_STORIES();
  const std::string text = tmp_path("budget.txt");
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "Once upon a time there was a little girl named Lily. ";
  }
  const std::string m = stories_gguf();
  const std::vector<std::pair<std::string, Args>> commands = {
      {"perplexity", {"perplexity", "-m", m, "-f", text, "-c", "64", "--no-progress"}},
      {"chat", {"chat", "-m", m, "--template", "chatml", "-n", "4"}},
      {"bench", {"bench", "-m", m, "-p", "16", "-n", "4", "-t", "1", "-r", "1"}},
  };
  for (const auto& [name, args] : commands) {
    Args refused = args;
    refused.insert(refused.end(), {"--memory-budget", "1K"});
    const Result r = run(refused, "hello\n");
    ASSERT_TRUE(r.exited()) << name << "\n" << r.describe();
    EXPECT_NE(r.exit_code, 0) << name << "\n" << r.describe();
    EXPECT_NE(r.err.find("over the memory budget of 1024 bytes"), std::string::npos)
        << name << "\n" << r.describe();

    Args fits = args;
    fits.insert(fits.end(), {"--memory-budget", "64M"});
    const Result ok = run(fits, "hello\n");
    EXPECT_EQ(ok.exit_code, 0) << name << "\n" << ok.describe();
  }
}

}  // namespace
}  // namespace lilims::test::cli
