// `lilims convert HF_DIR OUT.gguf`: the tiny Hugging Face directories of
// tests/data/hf through the command line (progress and notes on stderr,
// nothing on stdout, errors as one line), then run.
#include <gtest/gtest.h>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

std::string hf(const std::string& arch) { return source_path("tests/data/hf/" + arch); }

TEST(CliConvertHf, QuantizedLlamaRuns) {
  const std::string out = tmp_path("hf_llama_q8.gguf");
  const Result c = run({"convert", hf("llama"), out, "--type", "Q8_0"});
  expect_no_crash(c);
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_EQ(c.out, "") << "convert writes its report to stderr";
  EXPECT_NE(c.err.find("convert: [1/"), std::string::npos) << c.describe();
  EXPECT_NE(c.err.find("lilims convert: wrote " + out), std::string::npos) << c.describe();
  const Result i = run({"inspect", out});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_NE(i.out.find("blk.0.attn_q.weight"), std::string::npos);
  EXPECT_NE(i.out.find("Q8_0"), std::string::npos);
  const Result r = run({"run", "-m", out, "-p", "Once upon a time", "-n", "8", "-t", "1", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_GT(r.out.size(), 1u);
}

TEST(CliConvertHf, NotesWhatGgufCannotHold) {
  const Result c = run({"convert", hf("phi3"), tmp_path("hf_phi3.gguf"), "--no-progress"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_EQ(c.out, "");
  EXPECT_NE(c.err.find("lilims convert: note: added token '<|im_end|>' has neither lstrip nor "
                       "rstrip in tokenizer.json, but GGUF readers give it rstrip"),
            std::string::npos) << c.describe();
  const Result named = run({"convert", hf("phi3"), tmp_path("hf_phi3.gguf"), "--no-progress",
                            "--name", "tiny"});
  ASSERT_EQ(named.exit_code, 0) << named.describe();
  EXPECT_EQ(named.err.find("note:"), std::string::npos) << named.describe();
}

TEST(CliConvertHf, Errors) {
  const std::string out = tmp_path("hf_x.gguf");
  expect_failure(run({"convert", hf("llama"), out, "--type", "Q5_K"}), "convert", "'Q5_K'");
  expect_failure(run({"convert", hf("llama"), out, "--tokenizer", "t.bin"}), "convert",
                 "--tokenizer and --tied-output are for llama2.c checkpoints");
  expect_failure(run({"convert", tmp_dir(), out, "--no-progress"}), "convert", "no config.json");
  expect_failure(run({"convert", hf("llama")}), "convert", "OUT.gguf");
  EXPECT_FALSE(file_exists(out));
}

}  // namespace
}  // namespace lilims::test::cli
