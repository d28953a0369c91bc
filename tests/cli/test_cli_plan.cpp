// `lilims inspect --plan`: the plan of a session, and its memory figure
// against what a real run takes.
#include <cstdlib>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

// The byte count of a "  ROW   N bytes  ..." line of the plan, or 0.
uint64_t plan_figure(const std::string& plan, const std::string& row) {
  const size_t at = plan.find("\n  " + row + " ");
  if (at == std::string::npos) return 0;
  const size_t digits = plan.find_first_of("0123456789", at + 3 + row.size());
  return digits == std::string::npos ? 0 : std::strtoull(plan.c_str() + digits, nullptr, 10);
}

TEST(CliPlan, ChunksAndBuffersOfEachArchitecture) {
  for (const char* arch : {"llama", "phi2", "phi3"}) {
    const Result r = run({"inspect", source_path(std::string("tests/data/tiny/") + arch + ".gguf"),
                          "--plan", "-c", "64", "--chunk-layers", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_NE(r.out.find(std::string("(") + arch + ", 2 layers)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" 0 embed"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" 1 blocks 0..0"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" 2 blocks 1..1"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(" 3 head"), std::string::npos) << r.out;
    // 2 layers x 2 (K, V) x 64 positions x 32 kv dims (phi2: 64) x 2 bytes
    const uint64_t kv = plan_figure(r.out, "KV cache (full context)");
    EXPECT_EQ(kv, std::string(arch) == "phi2" ? 32768u : 16384u) << r.out;
    EXPECT_GT(plan_figure(r.out, "arena"), 0u);
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
  const Result bad = run({"inspect", source_path("tests/data/tiny/llama.gguf"), "--plan",
                          "--chunk-layers", "0"});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
}

// The planned peak against the peak RSS of a run that fills a 2048-token
// context of SmolLM2: within 10%.  The plan counts the weights (repacked
// copies, mapped bytes), every embedding row a context can touch when they
// are read from the file (two pages a row, an upper bound; SmolLM2's tied
// rows come from the repacked copy), the file's metadata, the tokenizer,
// the KV cache full, the arena and scratch; not the program itself (a few
// MiB of code and libc) nor the rounding of huge-page blocks (measured
// -6.8%).
TEST(CliPlan, SmolLM2PlannedPeakMatchesMeasuredRss) {
  const std::string model = test::smollm2_path();
  if (!test::file_exists(model)) GTEST_SKIP() << model << " is absent (scripts/fetch_model.sh)";
  std::string text = read_file(source_path("tests/data/ppl_text.txt")).substr(0, 9300);
  const std::string prompt = tmp_path("prompt_2k.txt");
  write_bytes(prompt, text);
  const Result plan = run({"inspect", model, "--plan", "-c", "2048", "-t", "2"});
  ASSERT_EQ(plan.exit_code, 0) << plan.describe();
  const double planned = (double)plan_figure(plan.out, "peak total") / 1024.0;
  // 2009 prompt tokens + 39 generated: every position of the context.
  const Result r = run({"run", "-m", model, "--raw", "-f", prompt, "-c", "2048", "-n", "39", "-t",
                        "2", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const double measured = (double)r.max_rss_kb;
  std::printf("[ SmolLM2 -c 2048 ] planned peak %.1f MiB, measured peak RSS %.1f MiB (%+.1f%%)\n",
              planned / 1024, measured / 1024, 100.0 * (planned - measured) / measured);
  EXPECT_NEAR(planned, measured, 0.10 * measured);
}

}  // namespace
}  // namespace lilims::test::cli
