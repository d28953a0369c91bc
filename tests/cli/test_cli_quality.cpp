// The quantization-quality commands end to end on stories260K:
// `perplexity --kl-base/--kl-ref`, `quantize --tensor-type/--imatrix` and
// `imatrix`: stdout carries only the results, errors are one line.
#if defined(__GNUC__) && !defined(__clang__)
// libstdc++ 12's <regex> trips -Wmaybe-uninitialized under
// -fsanitize=address (a false positive inside its NFA states).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

bool matches(const std::string& s, const char* re) { return std::regex_match(s, std::regex(re)); }

const std::string kText = source_path("tests/data/ppl_text.txt");

TEST(CliQuality, KlBaseThenRefPrintsTheFigures) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see its SOURCES.md");
  const std::string base = tmp_path("s.kld");
  Result r = run({"perplexity", "-m", stories_gguf(), "-f", kText, "-c", "128", "--chunks", "3",
                  "--kl-base", base, "--no-progress"});
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(matches(r.out, "ppl = [0-9.]+\n")) << r.out;
  EXPECT_EQ(r.err, "");
  // Against itself; the chunk count comes from the base.
  r = run({"perplexity", "-m", stories_gguf(), "-f", kText, "-c", "128", "--kl-ref", base, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(matches(r.out,
                      "ppl = [0-9.]+\nppl base = [0-9.]+\nkld mean = 0\\.0000(00|01) \\+/- [0-9.]+\n"
                      "kld median = [0-9.]+\nkld p99 = [0-9.]+\nkld max = [0-9.]+\n"
                      "same top token = 100\\.000 \\+/- 0\\.000 %\n"))
      << r.out;
  // Refusals.
  expect_failure(run({"perplexity", "-m", stories_gguf(), "-f", kText, "-c", "64", "--kl-ref", base}),
                 "perplexity", "was saved with CTX 128; this run uses 64");
  expect_failure(run({"perplexity", "-m", stories_gguf(), "-f", kText, "-c", "128", "--chunks", "2",
                      "--kl-ref", base}),
                 "perplexity", "holds 3 chunks; this run would score 2", false);
  expect_failure(run({"perplexity", "-m", stories_gguf(), "-f", kText, "-c", "128", "--kl-ref", kText}),
                 "perplexity", "is not a KL base file");
  expect_failure(run({"perplexity", "-m", stories_gguf(), "-f", kText, "--kl-ref", base, "--kl-base", base}),
                 "perplexity", "--kl-base and --kl-ref exclude each other", false);
  const std::string other = tmp_path("other.txt");
  write_bytes(other, "Once upon a time " + read_file(kText));
  expect_failure(run({"perplexity", "-m", stories_gguf(), "-f", other, "-c", "128", "--kl-ref", base}),
                 "perplexity", "was saved from other tokens");
}

TEST(CliQuality, ImatrixAndQuantizeOptions) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see its SOURCES.md");
  const std::string im = tmp_path("s.imatrix");
  Result r = run({"imatrix", stories_gguf(), "-f", kText, "-o", im, "-c", "128", "--chunks", "2",
                  "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "");
  const std::string out = tmp_path("q.gguf");
  r = run({"quantize", stories_gguf(), out, "Q4_0", "--imatrix", im, "--tensor-type",
           "output.weight=Q8_0", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "");
  r = run({"inspect", out});
  EXPECT_TRUE(matches(r.out, "[\\s\\S]*output\\.weight +Q8_0[\\s\\S]*")) << r.out;
  EXPECT_TRUE(matches(r.out, "[\\s\\S]*blk\\.0\\.attn_q\\.weight +Q4_0[\\s\\S]*")) << r.out;
  expect_failure(run({"quantize", stories_gguf(), out, "Q4_0", "--tensor-type", "nope.*=Q8_0"}),
                 "quantize", "matches no 2-D weight");
  expect_failure(run({"quantize", stories_gguf(), out, "Q4_0", "--tensor-type", "output.weight=Q3_K"}),
                 "quantize", "unknown type 'Q3_K'");
  expect_failure(run({"quantize", stories_gguf(), out, "Q4_0", "--imatrix", kText}), "quantize",
                 "is not an imatrix file");
  expect_failure(run({"quantize", stories_gguf(), out, "Q4_0", "--imatrix", im, "--method", "plain"}),
                 "quantize", "needs the search method");
  expect_failure(run({"imatrix", stories_gguf(), "-f", kText}), "imatrix", "an output file is needed", false);
}

// --calibrate: the error-compensated file is a Q4_0 model that runs, and
// it differs from the weighted search's (the compensation moved some
// levels); stdout stays empty.
TEST(CliQuality, QuantizeCalibrate) {
  LILIMS_REQUIRE_FILE(stories_gguf(), "../shared/data/stories260K, see its SOURCES.md");
  const std::string im = tmp_path("c.imatrix"), a = tmp_path("c_gptq.gguf"), b = tmp_path("c_search.gguf");
  Result r = run({"quantize", stories_gguf(), a, "Q4_0", "--calibrate", kText, "--calibrate-ctx", "128",
                  "--calibrate-chunks", "2", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "");
  r = run({"imatrix", stories_gguf(), "-f", kText, "-o", im, "-c", "128", "--chunks", "2", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  r = run({"quantize", stories_gguf(), b, "Q4_0", "--imatrix", im, "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(read_file(a), read_file(b));
  r = run({"inspect", a});
  EXPECT_TRUE(matches(r.out, "[\\s\\S]*blk\\.0\\.attn_output\\.weight +Q4_0[\\s\\S]*")) << r.out;
  r = run({"perplexity", "-m", a, "-f", kText, "-c", "128", "--chunks", "2", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(matches(r.out, "ppl = [0-9.]+\n")) << r.out;
  expect_failure(run({"quantize", stories_gguf(), a, "Q4_0", "--calibrate", kText, "--imatrix", im}), "quantize",
                 "--calibrate and --imatrix exclude each other", false);
  expect_failure(run({"quantize", stories_gguf(), a, "Q4_0", "--calibrate", kText, "--method", "plain"}),
                 "quantize", "needs the search method");
  expect_failure(run({"quantize", stories_gguf(), a, "Q4_0", "--calibrate", tmp_path("missing.txt")}),
                 "quantize", "missing.txt");
  expect_failure(run({"quantize", stories_gguf(), a, "Q4_0", "--calibrate", kText, "--calibrate-ctx", "100000"}),
                 "quantize", "chunk size 100000");

  // --scale-columns: a model that runs, other bytes than without; refused
  // without --calibrate.
  const std::string c = tmp_path("c_scaled.gguf");
  r = run({"quantize", stories_gguf(), c, "Q4_0", "--calibrate", kText, "--calibrate-ctx", "128",
           "--calibrate-chunks", "2", "--scale-columns", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, "");
  EXPECT_NE(read_file(c), read_file(a));
  r = run({"perplexity", "-m", c, "-f", kText, "-c", "128", "--chunks", "2", "--no-progress"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_TRUE(matches(r.out, "ppl = [0-9.]+\n")) << r.out;
  expect_failure(run({"quantize", stories_gguf(), c, "Q4_0", "--scale-columns"}), "quantize",
                 "--scale-columns needs --calibrate");
}

}  // namespace
}  // namespace lilims::test::cli
