// `lilims manifest` and `--manifest`: a manifest written by the command is
// what the library checks; a model that differs is refused with the
// difference on stderr and nothing on stdout.
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom)

TEST(CliManifest, WritesChecksAndGuardsRun) {
  REQUIRE_STORIES();
  // A copy of the model in the temporary directory, so the default output
  // (beside the model) lands there.
  const std::string model = tmp_path("manifest_model.gguf");
  write_bytes(model, read_file(stories_gguf()));
  const Result w = run({"manifest", model, "--model-version", "1.2.0"});
  ASSERT_EQ(w.exit_code, 0) << w.describe();
  EXPECT_EQ(w.out, "");
  const std::string manifest = tmp_path("manifest_model.manifest.json");
  EXPECT_NE(w.err.find("wrote " + manifest), std::string::npos) << w.err;
  const nlohmann::json j = nlohmann::json::parse(read_file(manifest));
  EXPECT_EQ(j["model_version"], "1.2.0");

  const Result to_stdout = run({"manifest", model, "--model-version", "1.2.0", "-o", "-"});
  ASSERT_EQ(to_stdout.exit_code, 0) << to_stdout.describe();
  EXPECT_EQ(to_stdout.out, read_file(manifest));
  EXPECT_EQ(to_stdout.err, "");

  const Result ok = run({"manifest", model, "--check", manifest, "--file-hash"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
  EXPECT_EQ(ok.out, "ok\n");
  const Result ran = run({"run", "-m", model, "--manifest", manifest, "--manifest-file-hash", "-p",
                          "Once", "-n", "4", "--temp", "0", "-q"});
  EXPECT_EQ(ran.exit_code, 0) << ran.describe();
  EXPECT_FALSE(ran.out.empty());

  // One byte in the middle of the file (inside a tensor: the data section
  // is most of it) changed.
  std::string bytes = read_file(model);
  bytes[bytes.size() / 2] ^= 0x40;
  write_bytes(model, bytes);
  const Result bad = run({"manifest", model, "--check", manifest});
  EXPECT_EQ(bad.exit_code, 1) << bad.describe();
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("differs from the manifest"), std::string::npos) << bad.err;
  const Result refused = run({"run", "-m", model, "--manifest", manifest, "-p", "Once", "-n", "4"});
  EXPECT_EQ(refused.exit_code, 1) << refused.describe();
  EXPECT_EQ(refused.out, "");
  EXPECT_NE(refused.err.find("[manifest]"), std::string::npos) << refused.err;
}

TEST(CliManifest, UsageErrors) {
  const Result help = run({"manifest", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("usage: lilims manifest"), std::string::npos);
  for (const std::vector<std::string>& a :
       {std::vector<std::string>{"manifest"}, {"manifest", "x.gguf", "--file-hash"},
        {"manifest", "x.gguf", "--bogus"}, {"manifest", "x.gguf", "-o"},
        {"manifest", "/nonexistent/x.gguf"}, {"run", "-p", "x", "--manifest-file-hash"}}) {
    const Result r = run(a);
    expect_no_crash(r);
    EXPECT_EQ(r.exit_code, 1) << a.back() << "\n" << r.describe();
    EXPECT_EQ(r.out, "");
  }
}

}  // namespace
}  // namespace lilims::test::cli
