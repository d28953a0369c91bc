// `lilims run --draft N` (prompt-lookup decoding: the same stdout, drafts
// counted on stderr) and `--no-jump-forward` with --tools.
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

TEST(CliSpeculative, DraftKeepsStdoutAndReportsDrafts) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see SOURCES.md");
  const std::vector<std::string> base = {
      "run", "-m", stories_gguf(), "--raw", "--temp", "0", "-n", "60", "-p",
      "Tom and Sam went to the park. Tom and Sam"};
  const Result plain = run(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.describe();
  EXPECT_EQ(plain.err.find("drafts:"), std::string::npos) << plain.err;
  std::vector<std::string> args = base;
  args.insert(args.end(), {"--draft", "6"});
  const Result drafted = run(args);
  ASSERT_EQ(drafted.exit_code, 0) << drafted.describe();
  EXPECT_EQ(drafted.out, plain.out);
  EXPECT_NE(drafted.err.find("drafts: "), std::string::npos) << drafted.err;
  for (const char* bad : {"65", "-1", "x"}) {
    args = base;
    args.insert(args.end(), {"--draft", bad});
    const Result r = run(args);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_NE(r.err.find("--draft"), std::string::npos) << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST(CliSpeculative, ToolsWithAndWithoutJumpForward) {
  LILIMS_REQUIRE_FILE(smollm2_path(), kSmolFrom);
  std::vector<std::string> args = {"run", "-m", smollm2_path(), "-p", "Open the camera.", "-t", "2",
                                   "--tool-format", "generic"};
  for (const char* t : {"open_app", "set_timer", "take_photo"}) {
    args.push_back("--tools");
    args.push_back(source_path("examples/tools/") + t + ".json");
  }
  const Result on = run(args);
  ASSERT_EQ(on.exit_code, 0) << on.describe();
  EXPECT_NE(on.err.find("tokens forced"), std::string::npos) << on.err;
  args.push_back("--no-jump-forward");
  const Result off = run(args);
  ASSERT_EQ(off.exit_code, 0) << off.describe();
  EXPECT_EQ(off.err.find("tokens forced"), std::string::npos) << off.err;
  for (const Result* r : {&on, &off}) {
    const nlohmann::json j = nlohmann::json::parse(r->out);
    EXPECT_TRUE(j.contains("name") && j.contains("arguments")) << r->out;
  }
}

}  // namespace
}  // namespace lilims::test::cli
