// Progress of quantize, convert and perplexity on stderr when it is not a
// terminal (here a pipe): a first line, at most one every few seconds, a
// last line at 100%, no carriage returns; --no-progress silences it; stdout
// is unchanged.
#include <string>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

using Args = std::vector<std::string>;

// Lines of `err` that start with "<what>: [".
std::vector<std::string> progress_lines(const std::string& err, const std::string& what) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < err.size()) {
    size_t end = err.find('\n', at);
    if (end == std::string::npos) end = err.size();
    const std::string line = err.substr(at, end - at);
    if (line.rfind(what + ": [", 0) == 0) out.push_back(line);
    at = end + 1;
  }
  return out;
}

// The first report and the last (done == total, 100%) are always there.
void expect_progress(const Result& r, const std::string& what, const std::string& first,
                     const std::string& last) {
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "no live line when stderr is a pipe";
  const std::vector<std::string> lines = progress_lines(r.err, what);
  ASSERT_GE(lines.size(), 2u) << r.describe();
  EXPECT_EQ(lines.front().rfind(what + ": " + first, 0), 0u) << lines.front();
  EXPECT_EQ(lines.back().rfind(what + ": " + last, 0), 0u) << lines.back();
  EXPECT_NE(lines.back().find("100%"), std::string::npos) << lines.back();
}

TEST(CliProgress, Quantize) {
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  const size_t n = gguf::File::open(stories_gguf())->tensors().size();
  const Result r = run({"quantize", stories_gguf(), tmp_path("p.gguf"), "Q8_0"});
  EXPECT_EQ(r.out, "");
  expect_progress(r, "quantize", "[1/" + std::to_string(n) + "]",
                  "[" + std::to_string(n) + "/" + std::to_string(n) + "]");
  const Result q = run({"quantize", stories_gguf(), tmp_path("q.gguf"), "Q8_0", "--no-progress"});
  ASSERT_EQ(q.exit_code, 0) << q.describe();
  EXPECT_EQ(q.out, "");
  EXPECT_EQ(q.err, "");
  EXPECT_EQ(read_file(tmp_path("p.gguf")), read_file(tmp_path("q.gguf")));
}

TEST(CliProgress, Convert) {
  LILIMS_REQUIRE_FILE(stories_dir() + "/stories260K.bin", kStoriesFrom);
  const std::string bin = stories_dir() + "/stories260K.bin";
  const Result r = run({"convert", bin, tmp_path("c.gguf")});
  EXPECT_EQ(r.out, "");
  const size_t n = gguf::File::open(tmp_path("c.gguf"))->tensors().size();
  expect_progress(r, "convert", "[1/" + std::to_string(n) + "]",
                  "[" + std::to_string(n) + "/" + std::to_string(n) + "]");
  const Result q = run({"convert", bin, tmp_path("d.gguf"), "--no-progress"});
  ASSERT_EQ(q.exit_code, 0) << q.describe();
  EXPECT_TRUE(progress_lines(q.err, "convert").empty()) << q.err;
}

TEST(CliProgress, PerplexityKeepsStdout) {
  LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom);
  std::string text;
  for (int i = 0; i < 40; ++i) text += "Once upon a time there was a little girl named Lily. ";
  const std::string f = tmp_path("ppl.txt");
  write_bytes(f, text);
  const Args a = {"perplexity", "-m", stories_gguf(), "-f", f, "-c", "32", "--chunks", "3",
                  "-t", "1"};
  const Result r = run(a);
  expect_progress(r, "perplexity", "[1/3]", "[3/3]");
  EXPECT_EQ(r.out.rfind("ppl = ", 0), 0u) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
  Args quiet = a;
  quiet.push_back("--no-progress");
  const Result q = run(quiet);
  ASSERT_EQ(q.exit_code, 0) << q.describe();
  EXPECT_EQ(q.out, r.out);
  EXPECT_EQ(q.err.find("perplexity"), std::string::npos) << q.err;
}

}  // namespace
}  // namespace lilims::test::cli
