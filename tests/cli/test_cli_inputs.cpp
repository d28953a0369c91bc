// Inputs a command line must survive: paths that are directories, FIFOs or
// devices, empty paths, control bytes in names, integers out of range.
// Every one ends in a one-line error and a non-zero exit, never a hang, an
// uncaught exception or a wrapped value.
#include <sys/stat.h>

#include <cstdio>

#include "cli_util.h"
#include "tokenizer/tokenizer.h"

namespace lilims::test::cli {
namespace {

using Args = std::vector<std::string>;

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom)

// A FIFO nobody writes to: opening it for reading blocks forever unless the
// opener refuses it first.
std::string make_fifo(const std::string& name) {
  const std::string p = tmp_path(name);
  std::remove(p.c_str());
  EXPECT_EQ(mkfifo(p.c_str(), 0600), 0) << p;
  return p;
}

constexpr double kShort = 30.0;  // seconds; a blocked open shows as a timeout

TEST(CliFiles, TextFileThatIsADirectory) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf(), dir = tmp_dir();
  expect_failure(run({"run", "-m", m, "-f", dir, "-n", "1"}, "", kShort), "run", dir);
  expect_failure(run({"tokenize", "-m", m, "-f", dir}, "", kShort), "tokenize", dir);
  expect_failure(run({"perplexity", "-m", m, "-f", dir}, "", kShort), "perplexity", dir);
}

TEST(CliFiles, TextFileThatIsAFifoOrADevice) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  for (const std::string& p : {make_fifo("prompt.fifo"), std::string("/dev/zero"), std::string("/dev/null")}) {
    SCOPED_TRACE(p);
    expect_failure(run({"run", "-m", m, "-f", p, "-n", "1"}, "", kShort), "run", "not a regular file");
    expect_failure(run({"tokenize", "-m", m, "-f", p}, "", kShort), "tokenize", "not a regular file");
    expect_failure(run({"perplexity", "-m", m, "-f", p}, "", kShort), "perplexity",
                   "not a regular file");
  }
}

TEST(CliFiles, ConvertInputThatIsNotARegularFile) {
  const std::string out = tmp_path("converted.gguf");
  for (const std::string& p : {make_fifo("ckpt.fifo"), std::string("/dev/zero")}) {
    SCOPED_TRACE(p);
    expect_failure(run({"convert", p, out}, "", kShort), "convert", "not a regular file");
  }
  // A directory is a Hugging Face model directory to convert.
  expect_failure(run({"convert", tmp_dir(), out}, "", kShort), "convert", "has no config.json");
}

TEST(CliFiles, ModelThatIsAFifoOrADevice) {
  for (const std::string& p : {make_fifo("model.fifo"), std::string("/dev/zero"), std::string("/dev/null")}) {
    SCOPED_TRACE(p);
    expect_failure(run({"run", "-m", p, "-p", "hi", "-n", "1"}, "", kShort), "run", "not a regular file");
    expect_failure(run({"tokenize", "-m", p, "hi"}, "", kShort), "tokenize", "not a regular file");
    expect_failure(run({"inspect", p}, "", kShort), "inspect", "not a regular file");
  }
}

TEST(CliFiles, EmptyModelPathIsAnError) {
  for (const Args& a : {Args{"run", "-m", "", "-p", "hi", "-n", "1"}, Args{"chat", "-m", ""},
                        Args{"perplexity", "-m", "", "-f", "/etc/hostname"},
                        Args{"tokenize", "-m", "", "hi"}, Args{"detokenize", "-m", "", "1"}}) {
    SCOPED_TRACE(a[0]);
    const Result r = run(a, "hi\n", kShort);
    expect_failure(r, a[0], "empty", false);
  }
}

// Keys and tensor names are as hostile as values: a terminal escape in
// either must be printed escaped.
TEST(CliFiles, InspectEscapesKeysAndTensorNames) {
  REQUIRE_STORIES();
  const std::string p = write_variant(stories_gguf(), "escapes.gguf", [](auto& kv, auto& ts) {
    gguf::KeyValue extra = kv.front();
    extra.key = "evil\x1b[2Jkey\nnext";
    kv.push_back(extra);
    ts.back().name = "tensor\x1b]0;title\x07\rname";
  });
  const Result r = run({"inspect", p}, "", kShort);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\x07'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('\r'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("evil\\x1b[2Jkey\\nnext"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensor\\x1b]0;title\\x07\\x0dname"), std::string::npos) << r.out;
}

// stories260K with its vocabulary cut to 500 of the embedding's 512 rows:
// the model could sample an id the tokenizer cannot decode.
TEST(CliFiles, VocabularyShorterThanTheEmbedding) {
  REQUIRE_STORIES();
  auto f = gguf::File::open(stories_gguf());
  auto tok = tok::Tokenizer::from_gguf(*f);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int32_t id = 0; id < 500; ++id) {
    tokens.push_back(tok->token_text(id));
    scores.push_back(0.0f);
    types.push_back(tok->token_type(id));
  }
  gguf::Writer w;
  for (const auto& kv : f->metadata()) {
    if (kv.key.rfind("tokenizer.ggml.", 0) == 0 && kv.key != "tokenizer.ggml.model") continue;
    w.add(kv.key, kv.value);
  }
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_f32_array("tokenizer.ggml.scores", scores);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  for (const auto& t : f->tensors()) w.add_tensor(t.name, t.ne, t.type, t.data, t.n_bytes);
  const std::string p = tmp_path("short_vocab.gguf");
  w.write(p);
  expect_failure(run({"run", "-m", p, "-p", "hi", "-n", "4", "-t", "1"}, "", kShort), "run",
                 "tokenizer.ggml.tokens has 500 tokens");
}

// ---- integer options ----------------------------------------------------------

TEST(CliIntegers, OutOfRangeIsAUsageError) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  struct Case {
    Args args;
    const char* flag;
  };
  const std::vector<Case> cases = {
      {{"run", "-m", m, "-p", "hi", "-n", "4294967296"}, "-n"},
      {{"run", "-m", m, "-p", "hi", "-n", "-2"}, "-n"},
      {{"run", "-m", m, "-p", "hi", "-c", "4294967297"}, "-c"},
      {{"run", "-m", m, "-p", "hi", "-c", "-5"}, "-c"},
      {{"run", "-m", m, "-p", "hi", "-t", "4294967297"}, "-t"},
      {{"run", "-m", m, "-p", "hi", "--top-k", "4294967336"}, "--top-k"},
      {{"run", "-m", m, "-p", "hi", "--top-k", "-1"}, "--top-k"},
      {{"run", "-m", m, "-p", "hi", "--repeat-last-n", "4294967360"}, "--repeat-last-n"},
      {{"run", "-m", m, "-p", "hi", "--seed", "-1"}, "--seed"},
      {{"run", "-m", m, "-p", "hi", "--seed", "18446744073709551616"}, "--seed"},
      {{"run", "-m", m, "-p", "hi", "--seed", "12abc"}, "--seed"},
      {{"run", "-m", m, "-p", "hi", "--seed", " 5"}, "--seed"},
      {{"run", "-m", m, "-p", "hi", "-n", "+"}, "-n"},
      {{"chat", "-m", m, "-n", "4294967296"}, "-n"},
      {{"perplexity", "-m", m, "-f", "/etc/hostname", "--chunks", "4294967297"}, "--chunks"},
      {{"perplexity", "-m", m, "-f", "/etc/hostname", "-c", "4294967297"}, "-c"},
      {{"detokenize", "-m", m, "4294967297"}, "ID"},
      {{"detokenize", "-m", m, "-1"}, "ID"},
  };
  for (const Case& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += a + " ";
    SCOPED_TRACE(joined);
    const Result r = run(c.args, "", kShort);
    expect_failure(r, c.args[0], c.flag, false);
  }
}

TEST(CliIntegers, SeedTakesTheWholeUint64Range) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  for (const char* seed : {"0", "18446744073709551615", "9223372036854775808"}) {
    SCOPED_TRACE(seed);
    const Result r = run({"run", "-m", m, "-p", "hi", "-n", "4", "-t", "1", "--temp", "1",
                          "--seed", seed, "-q"}, "", kShort);
    EXPECT_EQ(r.exit_code, 0) << r.describe();
  }
  // Different seeds near the top of the range are different seeds, not one
  // clamped value.
  auto out = [&](const char* seed) {
    return run({"run", "-m", m, "-p", "Once", "-n", "24", "-t", "1", "--temp", "1.5", "--seed",
                seed, "-q"}, "", kShort).out;
  };
  EXPECT_NE(out("18446744073709551615"), out("18446744073709551614"));
}

}  // namespace
}  // namespace lilims::test::cli
