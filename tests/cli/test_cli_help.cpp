// `--help` of every command (stdout, exit 0, nothing on stderr), `run
// --help` against the options the README documents, and the llama.cpp-style
// aliases -s and --ctx-size.
#if defined(__GNUC__) && !defined(__clang__)
// libstdc++ 12's <regex> trips -Wmaybe-uninitialized under
// -fsanitize=address (a false positive inside its NFA states).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cli_util.h"

namespace {

using namespace lilims::test;
using namespace lilims::test::cli;

// The commands `lilims help` lists ("  NAME   summary" lines after "commands:").
std::vector<std::string> listed_commands() {
  const Result help = run({"help"});
  EXPECT_EQ(help.exit_code, 0) << help.describe();
  std::vector<std::string> names;
  std::istringstream in(help.out.substr(help.out.find("commands:")));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) {
    std::istringstream words(line);
    std::string name;
    words >> name;
    names.push_back(name);
  }
  return names;
}

TEST(CliHelp, EveryCommandOnStdoutWithExitZero) {
  const std::vector<std::string> names = listed_commands();
  ASSERT_GE(names.size(), 9u);
  for (const std::string& name : names) {
    for (const char* flag : {"--help", "-h"}) {
      const Result r = run({name, flag});
      EXPECT_EQ(r.exit_code, 0) << name << " " << flag << "\n" << r.describe();
      EXPECT_EQ(r.err, "") << name << " " << flag;
      EXPECT_EQ(r.out.rfind("usage: lilims " + name, 0), 0u) << name << " " << flag << "\n"
                                                             << r.describe();
    }
  }
}

// Whether `flag` appears in text as a whole option name.
bool mentions(const std::string& text, const std::string& flag) {
  const std::regex re("(^|[\\s,/\\[])" + flag + "($|[^a-z0-9-])");
  return std::regex_search(text, re);
}

TEST(CliHelp, RunListsEveryOptionTheReadmeDocuments) {
  const std::string readme = read_file(source_path("README.md"));
  std::set<std::string> flags;
  // The "`run` options: ..." paragraph: each option in backquotes.
  const size_t start = readme.find("`run` options:");
  ASSERT_NE(start, std::string::npos) << "README.md has no \"`run` options:\" paragraph";
  const std::string para = readme.substr(start, readme.find("\n\n", start) - start);
  const std::regex quoted("`(--?[a-z][a-z0-9-]*)");
  for (std::sregex_iterator it(para.begin(), para.end(), quoted), end; it != end; ++it) {
    flags.insert((*it)[1]);
  }
  // And the example command lines, `build/lilims run ...`.
  std::istringstream lines(readme);
  const std::regex option("\\s(--?[a-z][a-z0-9-]*)");
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("build/lilims run ", 0) != 0) continue;
    const std::string cmd = line.substr(0, line.find('#'));
    for (std::sregex_iterator it(cmd.begin(), cmd.end(), option), end; it != end; ++it) {
      flags.insert((*it)[1]);
    }
  }
  ASSERT_GE(flags.size(), 20u);  // the parse found the paragraph's options

  const Result help = run({"run", "--help"});
  ASSERT_EQ(help.exit_code, 0) << help.describe();
  for (const std::string& flag : flags) {
    EXPECT_TRUE(mentions(help.out, flag)) << "README documents " << flag
                                          << " for `lilims run`; --help does not list it";
  }
}

TEST(CliRun, SeedAndCtxSizeAliases) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see SOURCES.md");
  const std::vector<std::string> base = {"run", "-m", stories_gguf(), "--raw", "-p", "Once",
                                         "-n", "100", "--temp", "1", "-q"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
    return r.out;
  };
  EXPECT_EQ(with({"-s", "7"}), with({"--seed", "7"}));
  EXPECT_NE(with({"-s", "7"}), with({"-s", "8"}));
  // A 16-token context ends the text early, as -c 16 does.
  const std::string short_ctx = with({"-s", "7", "--ctx-size", "16"});
  EXPECT_EQ(short_ctx, with({"-s", "7", "-c", "16"}));
  EXPECT_LT(short_ctx.size(), with({"-s", "7", "-c", "256"}).size());
  const Result bad = run({"run", "-m", stories_gguf(), "-p", "hi", "-s", "x"});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
  EXPECT_NE(bad.err.find("--seed"), std::string::npos) << bad.err;
}

}  // namespace
