// `lilims convert PEFT_DIR OUT.gguf --base BASE.gguf`: the PEFT adapters of
// tests/data/peft through the command line (report on stderr, nothing on
// stdout, errors as one line), then loaded with --lora.
#include <gtest/gtest.h>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

std::string peft(const std::string& name) { return source_path("tests/data/peft/" + name); }
std::string tiny(const std::string& arch) {
  return source_path("tests/data/tiny/" + arch + ".gguf");
}

TEST(CliConvertPeft, LlamaAdapterRuns) {
  const std::string out = tmp_path("peft_llama.gguf");
  const Result c = run({"convert", peft("llama"), out, "--base", tiny("llama"), "--type", "F16"});
  expect_no_crash(c);
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_EQ(c.out, "");
  EXPECT_NE(c.err.find("lilims convert: wrote " + out), std::string::npos) << c.describe();
  const Result i = run({"inspect", out});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_NE(i.out.find("adapter.lora.alpha"), std::string::npos) << i.describe();
  EXPECT_NE(i.out.find("blk.1.ffn_down.weight.lora_b"), std::string::npos) << i.describe();
  const Result r = run({"run", "-m", tiny("llama"), "--lora", out, "--raw", "-p",
                        "Once upon a time", "-n", "4", "-t", "1", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
}

TEST(CliConvertPeft, NotesWhatItSkips) {
  const Result c =
      run({"convert", peft("llama_embed"), tmp_path("peft_embed.gguf"), "--base", tiny("llama")});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_NE(c.err.find("lilims convert: note: skipped 2 full weight(s)"), std::string::npos)
      << c.describe();
}

// --rank K: a smaller file at rank K, the note says what share of each
// product it kept, and the adapter loads and runs.
TEST(CliConvertPeft, RankCut) {
  const std::string full = tmp_path("peft_llama_r4.gguf"), cut = tmp_path("peft_llama_r2.gguf");
  ASSERT_EQ(run({"convert", peft("llama"), full, "--base", tiny("llama")}).exit_code, 0);
  const Result c = run({"convert", peft("llama"), cut, "--base", tiny("llama"), "--rank", "2"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_EQ(c.out, "");
  EXPECT_NE(c.err.find("lilims convert: note: rank 2: each product B A cut to its best rank-2 approximation, "
                       "keeping of its squared norm "),
            std::string::npos)
      << c.describe();
  EXPECT_LT(std::filesystem::file_size(cut), std::filesystem::file_size(full) * 3 / 4);
  const Result r = run({"run", "-m", tiny("llama"), "--lora", cut, "--raw", "-p", "Once upon a time", "-n", "4",
                        "-t", "1", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
}

TEST(CliConvertPeft, Errors) {
  const std::string out = tmp_path("peft_x.gguf");
  expect_failure(run({"convert", peft("llama"), out}), "convert",
                 "is a PEFT adapter (it has adapter_config.json): name the model it adapts with "
                 "--base BASE.gguf");
  expect_failure(run({"convert", peft("llama"), out, "--base", tiny("llama"), "--type", "Q8_0"}),
                 "convert", "unknown type 'Q8_0' for a PEFT adapter (F32, F16)");
  expect_failure(run({"convert", peft("llama"), out, "--base", tiny("phi3")}), "convert",
                 "has no GGUF name for architecture phi3");
  expect_failure(run({"convert", source_path("tests/data/hf/llama"), out, "--base", tiny("llama")}),
                 "convert", "--base is for PEFT adapter directories");
  expect_failure(run({"convert", peft("llama"), out, "--base"}), "convert", "--base needs a value");
  for (const char* bad : {"0", "-1", "two", "3x", ""}) {
    expect_failure(run({"convert", peft("llama"), out, "--base", tiny("llama"), "--rank", bad}), "convert",
                   "expected a whole number >= 1");
  }
  expect_failure(run({"convert", peft("llama"), out, "--base", tiny("llama"), "--rank", "5"}), "convert",
                 "--rank 5 is more than module model.layers.");
  expect_failure(run({"convert", source_path("tests/data/hf/llama"), out, "--rank", "2"}), "convert",
                 "--tool-format and --rank are for PEFT adapter directories");
  EXPECT_FALSE(file_exists(out));
}

}  // namespace
}  // namespace lilims::test::cli
