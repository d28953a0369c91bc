// The `lilims` command line as a user and a script see it: the built binary
// is run with stdout and stderr captured separately.  stdout must carry only
// the product (generated text, ids, JSON); diagnostics go to stderr; every
// error is a nonzero exit, empty stdout and a message naming the problem.
//
// References: stories260K's greedy output is llama2.c's own
// (expected_stdout_test_all.txt, see ../shared/data/SOURCES.md); SmolLM2's
// prompt token ids are llama.cpp's (tests/data/smollm2_llamacpp_goldens.json).
// SmolLM2 runs use -t 1 and short generations: on a loaded 2-core machine a
// second thread only adds waiting, and the whole binary should stay ~1 min.
#include <nlohmann/json.hpp>

#include <sstream>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

using Args = std::vector<std::string>;

std::string expected_stories_stdout() {
  return read_file(shared_data("stories260K/expected_stdout_test_all.txt")) + "\n";
}

#define REQUIRE_STORIES() LILIMS_REQUIRE_FILE(stories_gguf(), kStoriesFrom)
#define REQUIRE_SMOL() LILIMS_REQUIRE_FILE(smollm2_path(), kSmolFrom)

// ---- stories260K greedy against llama2.c ------------------------------------

class CliStoriesGreedy : public ::testing::TestWithParam<Args> {};

TEST_P(CliStoriesGreedy, StdoutIsExactlyLlama2cOutput) {
  REQUIRE_STORIES();
  Args a = {"run", "-m", stories_gguf(), "-p", "", "-n", "200", "--temp", "0"};
  a.insert(a.end(), GetParam().begin(), GetParam().end());
  const Result r = run(a);
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, expected_stories_stdout()) << r.describe();
  EXPECT_NE(r.err.find("200 tokens"), std::string::npos) << "statistics on stderr: " << r.err;
}

const Args kGreedyPaths[] = {{}, {"--exec", "ref"}, {"--exec", "oracle"}, {"-t", "1"},
                             {"-t", "1", "--no-mmap", "--kv-type", "f32"}};
std::string greedy_path_name(const ::testing::TestParamInfo<Args>& info) {
  static const char* const names[] = {"fast", "ref", "oracle", "one_thread", "no_mmap_f32_kv"};
  return names[info.index];
}
INSTANTIATE_TEST_SUITE_P(Paths, CliStoriesGreedy, ::testing::ValuesIn(kGreedyPaths),
                         greedy_path_name);

TEST(CliRun, QuietLeavesStderrEmpty) {
  REQUIRE_STORIES();
  const Result r = run({"run", "-m", stories_gguf(), "-p", "", "-n", "200", "--temp", "0",
                        "-t", "1", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.out, expected_stories_stdout());
  EXPECT_EQ(r.err, "");
}

TEST(CliRun, PromptFromFile) {
  REQUIRE_STORIES();
  const std::string p = tmp_path("prompt.txt");
  write_bytes(p, "Once upon a time");
  const Result a = run({"run", "-m", stories_gguf(), "-f", p, "-n", "20", "-t", "1", "-q"});
  const Result b =
      run({"run", "-m", stories_gguf(), "-p", "Once upon a time", "-n", "20", "-t", "1", "-q"});
  ASSERT_EQ(a.exit_code, 0) << a.describe();
  ASSERT_EQ(b.exit_code, 0) << b.describe();
  EXPECT_EQ(a.out, b.out);
  EXPECT_GT(a.out.size(), 1u);
}

// ---- convert, then run: the same output --------------------------------------

TEST(CliConvert, Llama2cCheckpointRunsIdentically) {
  REQUIRE_STORIES();
  LILIMS_REQUIRE_FILE(stories_dir() + "/stories260K.bin", kStoriesFrom);
  const std::string out = tmp_path("converted.gguf");
  const Result c = run({"convert", stories_dir() + "/stories260K.bin", out, "--tokenizer",
                        stories_dir() + "/tok512.bin"});
  expect_no_crash(c);
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  EXPECT_EQ(c.out, "") << "convert writes its report to stderr";
  for (const Args& extra : {Args{"-t", "1"}, Args{"--exec", "ref", "-t", "1"}, Args{}}) {
    Args a = {"run", "-m", out, "-p", "", "-n", "200", "--temp", "0", "-q"};
    a.insert(a.end(), extra.begin(), extra.end());
    const Result r = run(a);
    ASSERT_EQ(r.exit_code, 0) << r.describe();
    EXPECT_EQ(r.out, expected_stories_stdout()) << r.describe();
  }
  const Result i = run({"inspect", out});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_NE(i.out.find("tokenizer.ggml.tokens"), std::string::npos);
}

TEST(CliConvert, Errors) {
  REQUIRE_STORIES();
  expect_failure(run({"convert", tmp_path("nope.bin"), tmp_path("x.gguf")}), "convert", "nope.bin");
  const std::string cut = write_truncated(stories_dir() + "/stories260K.bin", 5000, "cut.bin");
  expect_failure(run({"convert", cut, tmp_path("x.gguf")}), "convert", "truncated");
  expect_failure(run({"convert", stories_gguf(), tmp_path("x.gguf")}), "convert",
                 "not a llama2.c checkpoint");
  // Found only when writing, after the conversion's progress lines: without them
  // the error is the one line.
  expect_failure(run({"convert", stories_dir() + "/stories260K.bin",
                      tmp_path("no/such/dir/x.gguf"), "--no-progress"}),
                 "convert", "no/such/dir/x.gguf");
  expect_failure(run({"convert", stories_dir() + "/stories260K.bin"}), "convert", "OUT.gguf");
  EXPECT_FALSE(file_exists(tmp_path("x.gguf")));
}

// ---- quantize -----------------------------------------------------------------

TEST(CliQuantize, Q8_0RunsAndBadTypeFails) {
  REQUIRE_STORIES();
  const std::string q = tmp_path("q8.gguf");
  const Result w = run({"quantize", stories_gguf(), q, "q8_0"});
  ASSERT_EQ(w.exit_code, 0) << w.describe();
  EXPECT_EQ(w.out, "");
  const Result r = run({"run", "-m", q, "-p", "Once upon a time", "-n", "16", "-t", "1", "-q"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_GT(r.out.size(), 1u);

  const std::string bad = tmp_path("bad.gguf");
  expect_failure(run({"quantize", stories_gguf(), bad, "Q5_K"}), "quantize", "Q5_K");
  expect_failure(run({"quantize", stories_gguf(), bad, "Q4"}), "quantize", "'Q4'");
  expect_failure(run({"quantize", stories_gguf(), bad}), "quantize", "TYPE");
  expect_failure(run({"quantize", stories_gguf(), bad, "Q8_0", "--method", "fancy"}), "quantize",
                 "fancy");
  expect_failure(run({"quantize", write_unreadable_type_model(), bad, "Q8_0"}), "quantize", "IQ2_XXS");
  expect_failure(run({"quantize", write_truncated(stories_gguf(), 5000, "cut.gguf"), bad, "Q8_0"}),
                 "quantize", "[gguf]");
  EXPECT_FALSE(file_exists(bad)) << "a failed quantize leaves no output file";
}

// ---- tokenize / detokenize ----------------------------------------------------

std::vector<int32_t> parse_ids(const std::string& line) {
  std::istringstream in(line);
  std::vector<int32_t> ids;
  int32_t v;
  while (in >> v) ids.push_back(v);
  return ids;
}

std::string ids_text(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s;
}

std::vector<int32_t> tokenize_ids(const std::string& model, const Args& flags,
                                  const std::string& text) {
  Args a = {"tokenize", "-m", model, "--ids"};
  a.insert(a.end(), flags.begin(), flags.end());
  a.push_back(text);
  const Result r = run(a);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(count_lines(r.out), 1u) << r.describe();
  return parse_ids(r.out);
}

std::string detokenize(const std::string& model, const std::vector<int32_t>& ids) {
  Args a = {"detokenize", "-m", model};
  for (int32_t id : ids) a.push_back(std::to_string(id));
  const Result r = run(a);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.back(), '\n');
  return r.out.substr(0, r.out.size() - 1);
}

const char* const kRoundTripTexts[] = {
    "Once upon a time, there was a little girl named Lily.",
    "Hello world\nsecond line\twith a tab",
    "Caf\xc3\xa9 na\xc3\xafve \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e \xf0\x9f\x99\x82!",
    "  leading spaces and trailing  ",
    "a",
};

TEST(CliTokenize, Stories260KFlagsAndRoundTrip) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  const auto with_bos = tokenize_ids(m, {}, "Hello world");
  const auto no_bos = tokenize_ids(m, {"--no-bos"}, "Hello world");
  ASSERT_FALSE(no_bos.empty());
  ASSERT_EQ(with_bos.size(), no_bos.size() + 1);
  EXPECT_EQ(with_bos[0], 1) << "llama2.c vocabularies add BOS (1)";
  EXPECT_EQ(std::vector<int32_t>(with_bos.begin() + 1, with_bos.end()), no_bos);
  // stories260K has no special tokens beyond <s>/</s>: --parse-special parses "<s>".
  const auto special = tokenize_ids(m, {"--no-bos", "--parse-special"}, "<s>Hi</s>");
  ASSERT_GE(special.size(), 3u);
  EXPECT_EQ(special.front(), 1);
  EXPECT_EQ(special.back(), 2);
  const auto plain = tokenize_ids(m, {"--no-bos"}, "<s>Hi</s>");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0) << ids_text(plain);

  for (const char* text : kRoundTripTexts) {
    const std::string t = text;
    if (t[0] == ' ') continue;  // SentencePiece's add_space_prefix: a leading space is not kept
    EXPECT_EQ(detokenize(m, tokenize_ids(m, {"--no-bos"}, t)), t);
    EXPECT_EQ(detokenize(m, tokenize_ids(m, {}, t)), t) << "a leading BOS decodes to nothing";
  }
  // llama2.c's greedy ids (BOS + 200) decode to llama2.c's text.
  const auto greedy = parse_ids(read_file(stories_dir() + "/derived_greedy_token_ids.txt"));
  ASSERT_EQ(greedy.size(), 201u);
  EXPECT_EQ(detokenize(m, greedy), read_file(stories_dir() + "/expected_stdout_test_all.txt"));
}

TEST(CliTokenize, FileAndPieceListing) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  const std::string text = "One day, Lily met a cat.\nThe cat said \"hi\" to her.\n";
  const std::string f = tmp_path("text.txt");
  write_bytes(f, text);
  const Result from_file = run({"tokenize", "-m", m, "--ids", "-f", f});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.describe();
  EXPECT_EQ(parse_ids(from_file.out), tokenize_ids(m, {}, text));
  // Default listing: one "ID 'piece'" line per token, in order.
  const Result listing = run({"tokenize", "-m", m, "-f", f});
  ASSERT_EQ(listing.exit_code, 0) << listing.describe();
  const auto ids = tokenize_ids(m, {}, text);
  ASSERT_EQ(count_lines(listing.out), ids.size()) << listing.out;
  std::istringstream in(listing.out);
  std::string line;
  for (size_t k = 0; std::getline(in, line); ++k) {
    EXPECT_EQ(line.rfind(std::to_string(ids[k]) + " '", 0), 0u) << line;
    EXPECT_EQ(line.back(), '\'') << line;
  }
  EXPECT_NE(listing.out.find("'\\n'"), std::string::npos) << "a newline piece is escaped";
}

TEST(CliTokenize, Errors) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  expect_failure(run({"tokenize", "-m", m}), "tokenize", "TEXT");
  expect_failure(run({"tokenize", "-m", m, "--bogus", "x"}), "tokenize", "--bogus");
  expect_failure(run({"tokenize", "-m", m, "-f", tmp_path("none.txt")}), "tokenize", "none.txt");
  expect_failure(run({"tokenize", "-m", tmp_path("none.gguf"), "x"}), "tokenize", "none.gguf");
  expect_failure(run({"detokenize", "-m", m, "99999"}), "detokenize", "99999");
  expect_failure(run({"detokenize", "-m", m, "-5"}), "detokenize", "-5");
  expect_failure(run({"detokenize", "-m", m, "12x"}), "detokenize", "12x");
  expect_failure(run({"detokenize", "-m", write_truncated(m, 3000, "cut.gguf"), "1"}),
                 "detokenize", "[gguf]");
}

TEST(CliTokenize, SmolLM2MatchesLlamaCppAndRoundTrips) {
  REQUIRE_SMOL();
  const std::string m = smollm2_path();
  const auto goldens =
      nlohmann::json::parse(read_file(source_path("tests/data/smollm2_llamacpp_goldens.json")));
  ASSERT_FALSE(goldens["prompts"].empty());
  for (const auto& p : goldens["prompts"]) {
    const std::string text = p["text"];
    const std::vector<int32_t> want = p["token_ids"];
    Args flags;
    if (p["parse_special"].get<bool>()) flags.push_back("--parse-special");
    if (!p["add_bos"].get<bool>()) flags.push_back("--no-bos");
    EXPECT_EQ(tokenize_ids(m, flags, text), want) << "prompt " << p["name"];
    EXPECT_EQ(detokenize(m, want), text) << "prompt " << p["name"];
  }
  // The model asks for no BOS: --no-bos changes nothing.
  EXPECT_EQ(tokenize_ids(m, {}, "Hello world"), tokenize_ids(m, {"--no-bos"}, "Hello world"));
  // Special-token text is one token only with --parse-special.
  const std::string chat = "<|im_start|>user\nhi<|im_end|>\n";
  const auto special = tokenize_ids(m, {"--parse-special"}, chat);
  const auto plain = tokenize_ids(m, {}, chat);
  ASSERT_FALSE(special.empty());
  EXPECT_EQ(special.front(), 1) << ids_text(special);
  EXPECT_EQ(std::count(special.begin(), special.end(), 2), 1) << ids_text(special);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 1), 0) << ids_text(plain);
  EXPECT_GT(plain.size(), special.size());
  EXPECT_EQ(detokenize(m, plain), chat);
  for (const char* text : kRoundTripTexts) {
    EXPECT_EQ(detokenize(m, tokenize_ids(m, {}, text)), text);
  }
  const std::string f = tmp_path("smol.txt");
  write_bytes(f, chat);
  const Result from_file = run({"tokenize", "-m", m, "--ids", "--parse-special", "-f", f});
  ASSERT_EQ(from_file.exit_code, 0) << from_file.describe();
  EXPECT_EQ(parse_ids(from_file.out), special);
}

// ---- SmolLM2: chat template, --raw, --json, chat -------------------------------

const char kFunctionPrompt[] =
    "Turn the request into a JSON function call with the keys \"action\" and \"app\". "
    "Request: open the camera";

void expect_json_object(const Result& r) {
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    FAIL() << "stdout is not one JSON value: " << e.what() << "\n" << r.describe();
  }
  EXPECT_TRUE(j.is_object()) << r.out;
}

TEST(CliSmolLM2, JsonGreedy) {
  REQUIRE_SMOL();
  expect_json_object(run({"run", "-m", smollm2_path(), "-p", kFunctionPrompt, "--json", "-n",
                          "64", "--temp", "0", "-t", "1"}));
}

// Small caps: one JSON object on stdout and exit 0, or nothing on stdout and
// a non-zero exit with the reason on stderr.
TEST(CliSmolLM2, JsonAtSmallCaps) {
  REQUIRE_SMOL();
  for (const char* n : {"0", "1", "2", "5", "9"}) {
    const Result r = run({"run", "-m", smollm2_path(), "-p", kFunctionPrompt, "--json", "-n", n,
                          "--temp", "0", "-t", "1", "-q"});
    expect_no_crash(r);
    if (r.exit_code != 0) {
      EXPECT_EQ(r.out, "") << "-n " << n << ": " << r.describe();
      EXPECT_NE(r.err, "") << "-n " << n;
      continue;
    }
    SCOPED_TRACE(std::string("-n ") + n);
    expect_json_object(r);
  }
}

class CliSmolLM2JsonSampled : public ::testing::TestWithParam<int> {};

TEST_P(CliSmolLM2JsonSampled, AlwaysOneJsonObject) {
  REQUIRE_SMOL();
  expect_json_object(run({"run", "-m", smollm2_path(), "-p", kFunctionPrompt, "--json", "-n",
                          "64", "--temp", "0.8", "--seed", std::to_string(GetParam()), "-t",
                          "1", "-q"}));
}

INSTANTIATE_TEST_SUITE_P(Seeds, CliSmolLM2JsonSampled, ::testing::Values(1, 2, 3, 4, 5));

TEST(CliSmolLM2, ChatTemplateAnswer) {
  REQUIRE_SMOL();
  const Result r = run({"run", "-m", smollm2_path(), "-p", "What is the capital of France?",
                        "-n", "16", "--temp", "0", "-t", "1"});
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  ASSERT_GE(r.out.size(), 2u) << r.describe();
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_TRUE(valid_utf8(r.out)) << r.out;
  EXPECT_EQ(r.out.find("<|im_"), std::string::npos) << "template tokens leaked: " << r.out;
  // 37 prompt tokens: SmolLM2's template adds its default system turn (as llama.cpp's golden).
  EXPECT_NE(r.err.find("prompt: 37 tokens"), std::string::npos) << r.err;

  const Result s = run({"run", "-m", smollm2_path(), "--system", "Answer in one word.", "-p",
                        "What is the capital of France?", "-n", "8", "--temp", "0", "-t", "1",
                        "-q"});
  ASSERT_EQ(s.exit_code, 0) << s.describe();
  EXPECT_GE(s.out.size(), 2u) << s.describe();
}

TEST(CliSmolLM2, RawPrompt) {
  REQUIRE_SMOL();
  const Result r = run({"run", "-m", smollm2_path(), "--raw", "-p", "The capital of France is",
                        "-n", "8", "--temp", "0", "-t", "1"});
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_GE(r.out.size(), 2u) << r.describe();
  EXPECT_NE(r.err.find("prompt: 5 tokens"), std::string::npos) << "no template: " << r.err;
}

TEST(CliSmolLM2, ChatTwoTurns) {
  REQUIRE_SMOL();
  const Result r = run({"chat", "-m", smollm2_path(), "-n", "16", "--temp", "0", "-t", "1"},
                       "What is 2+2?\nAnd what is the capital of France?\n");
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  std::istringstream in(r.out);
  std::vector<std::string> answers;
  for (std::string line; std::getline(in, line);) answers.push_back(line);
  // With at most 16 tokens an answer can still hold a newline; at least two
  // non-empty lines, and the stream ends with the second answer's newline.
  ASSERT_GE(answers.size(), 2u) << r.describe();
  EXPECT_FALSE(answers.front().empty()) << r.describe();
  EXPECT_FALSE(answers.back().empty()) << r.describe();
  EXPECT_TRUE(valid_utf8(r.out));
  // EOF at once: no turn, no output.
  const Result none = run({"chat", "-m", smollm2_path(), "-t", "1"});
  EXPECT_EQ(none.exit_code, 0) << none.describe();
  EXPECT_EQ(none.out, "");
}

TEST(CliSmolLM2, InvalidUtf8Prompt) {
  REQUIRE_SMOL();
  const Result r = run({"run", "-m", smollm2_path(), "-p", "\xff\xfe bad \xc3 \xed\xa0\x80 end",
                        "-n", "8", "--temp", "0", "-t", "1", "-q"});
  expect_no_crash(r);
  if (r.exit_code == 0) {
    EXPECT_TRUE(valid_utf8(r.out)) << r.out;
  } else {
    expect_failure(r, "run", "UTF-8");
  }
}

// ---- errors ---------------------------------------------------------------------

TEST(CliErrors, Usage) {
  REQUIRE_STORIES();
  const std::string m = stories_gguf();
  expect_failure(run({"run", "-m", m}), "run", "prompt", false);
  expect_failure(run({"run", "-m", m, "-p", "hi", "--bogus"}), "run", "--bogus", false);
  expect_failure(run({"run", "-m", m, "-p", "hi", "-n", "abc"}), "run", "abc", false);
  expect_failure(run({"run", "-m", m, "-p", "hi", "-n"}), "run", "-n", false);
  expect_failure(run({"run", "-m", m, "-p", "hi", "-t", "0"}), "run", "-t", false);
  expect_failure(run({"run", "-m", m, "-p", "hi", "--temp", "warm"}), "run", "warm", false);
  expect_failure(run({"run", "-m", m, "-p", "hi", "--exec", "gpu"}), "run", "--exec", false);
  expect_failure(run({"chat", "-m", m, "--bogus"}), "chat", "--bogus", false);
  expect_failure(run({"inspect", "--bogus"}), "inspect", "--bogus");
  const Result none = run({});
  EXPECT_EQ(none.exit_code, 2) << none.describe();
  EXPECT_EQ(none.out, "");
  EXPECT_NE(none.err.find("usage"), std::string::npos);
  const Result unknown = run({"frobnicate"});
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_EQ(unknown.out, "");
  EXPECT_NE(first_line(unknown.err).find("frobnicate"), std::string::npos) << unknown.err;
  const Result help = run({"help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("run"), std::string::npos);
  const Result version = run({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_EQ(version.out.rfind("lilims 0.", 0), 0u) << version.out;
}

TEST(CliErrors, MissingModelFile) {
  const std::string p = tmp_path("does_not_exist.gguf");
  expect_failure(run({"run", "-m", p, "-p", "hi"}), "run", "does_not_exist.gguf");
  expect_failure(run({"inspect", p}), "inspect", "does_not_exist.gguf");
  expect_failure(run({"run", "-m", tmp_dir(), "-p", "hi"}), "run", tmp_dir());
  const std::string empty = tmp_path("empty.gguf");
  write_bytes(empty, "");
  expect_failure(run({"run", "-m", empty, "-p", "hi"}), "run", "[gguf]");
  REQUIRE_STORIES();
  expect_failure(run({"run", "-m", stories_dir() + "/stories260K.bin", "-p", "hi"}), "run",
                 "magic");
  expect_failure(run({"chat", "-m", stories_gguf()}, "hi\n"), "chat", "template");
}

TEST(CliErrors, TruncatedModel) {
  REQUIRE_STORIES();
  for (size_t len : truncation_lengths(stories_gguf())) {
    SCOPED_TRACE("cut at " + std::to_string(len));
    const std::string p = write_truncated(stories_gguf(), len, "cut.gguf");
    const Result r = run({"run", "-m", p, "-p", "hi", "-n", "4", "-t", "1"});
    expect_failure(r, "run", "[gguf]");
    const Result i = run({"inspect", p});
    expect_failure(i, "inspect", "[gguf]");
    // Say what is wrong with the file, not only that something is.
    const std::string msg = first_line(r.err);
    EXPECT_TRUE(msg.find("truncated") != std::string::npos ||
                msg.find("cannot fit") != std::string::npos ||
                msg.find("past the end") != std::string::npos ||
                msg.find("left") != std::string::npos)
        << msg;
  }
}

TEST(CliErrors, UnsupportedTensorType) {
  REQUIRE_STORIES();
  const std::string p = write_unreadable_type_model();
  expect_failure(run({"run", "-m", p, "-p", "hi", "-t", "1"}), "run", "IQ2_XXS");
  // The file itself is valid: inspect lists it and says it cannot read it.
  const Result i = run({"inspect", p});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_NE(i.out.find("IQ2_XXS"), std::string::npos);
  EXPECT_NE(i.out.find("cannot read"), std::string::npos) << i.out;
}

TEST(CliErrors, UnsupportedArchitecture) {
  REQUIRE_STORIES();
  const std::string p = write_unsupported_arch_model();
  expect_failure(run({"run", "-m", p, "-p", "hi", "-t", "1"}), "run", "mamba");
  const Result i = run({"inspect", p});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_NE(i.out.find("\"mamba\""), std::string::npos);
}

TEST(CliErrors, MissingTensorOrKey) {
  REQUIRE_STORIES();
  expect_failure(run({"run", "-m", write_without_tensor("blk.3.attn_k.weight"), "-p", "hi"}),
                 "run", "blk.3.attn_k.weight");
  expect_failure(run({"run", "-m", write_without_key("llama.block_count"), "-p", "hi"}), "run",
                 "llama.block_count");
}

TEST(CliErrors, PromptLongerThanContext) {
  REQUIRE_STORIES();
  std::string prompt;
  for (int k = 0; k < 20; ++k) prompt += "Once upon a time there was a cat. ";
  const Result r = run({"run", "-m", stories_gguf(), "-c", "16", "-p", prompt, "-t", "1"});
  expect_failure(r, "run", "fit");
  EXPECT_NE(first_line(r.err).find("16"), std::string::npos) << "names the context size";
}

// stories260K was trained for 2048 positions: -c 2049 needs
// --ctx-beyond-train, and a context whose KV cache no machine holds is
// refused before anything is allocated.
TEST(CliErrors, ContextBeyondTrainingOrMemory) {
  REQUIRE_STORIES();
  expect_failure(run({"run", "-m", stories_gguf(), "-c", "2049", "-p", "hi", "-n", "4", "-t", "1"}),
                 "run", "--ctx-beyond-train");
  const Result ok = run({"run", "-m", stories_gguf(), "-c", "2049", "--ctx-beyond-train", "-p",
                         "hi", "-n", "4", "-t", "1", "-q"});
  EXPECT_EQ(ok.exit_code, 0) << ok.describe();
  EXPECT_FALSE(ok.out.empty()) << ok.describe();
  // Past the CLI's range (2^20) -c is a usage error even with the opt-in;
  // within it, a KV cache beyond the memory available is refused before
  // allocating (SessionMemory.CApiOptInAndOutOfMemory: stories260K's 640
  // bytes per position never exceed this machine's memory at 2^20).
  const Result big = run({"run", "-m", stories_gguf(), "-c", "2147483647", "--ctx-beyond-train",
                          "-p", "hi", "-n", "4", "-t", "1"});
  expect_failure(big, "run", "1048576");
}

TEST(CliErrors, InvalidUtf8PromptStories) {
  REQUIRE_STORIES();
  for (const std::string p : {"\xff\xfe", "caf\xc3", "\xc0\xaf overlong",
                              "\xed\xa0\x80 surrogate"}) {
    const Result r = run({"run", "-m", stories_gguf(), "-p", p, "-n", "8", "-t", "1", "-q"});
    expect_no_crash(r);
    if (r.exit_code == 0) {
      EXPECT_TRUE(valid_utf8(r.out)) << r.out;
    } else {
      expect_failure(r, "run", "UTF-8");
    }
    const Result t = run({"tokenize", "-m", stories_gguf(), "--ids", p});
    expect_no_crash(t);
  }
}

// A tensor in a type lilims has no kernel for (Q5_1 here) is re-quantized at
// load: the run works, the one-line notice goes to stderr, never stdout.
TEST(CliRequantized, RunInspectQuantizeAQ5_1Model) {
  REQUIRE_STORIES();
  const std::string p = write_variant(stories_gguf(), "q5_1.gguf", [](auto&, std::vector<EditableTensor>& ts) {
    for (auto& t : ts) {
      if (t.name != "blk.0.attn_q.weight") continue;
      std::vector<uint8_t> b(64 * 2 * 24);  // 64 rows of two 24-byte Q5_1 blocks
      for (size_t i = 0; i < b.size(); ++i) b[i] = (uint8_t)(i * 37 + 11);
      for (size_t k = 0; k < b.size(); k += 24) {
        b[k] = 0x1f, b[k + 1] = 0x20;  // d = fp16 0.0081
        b[k + 2] = 0, b[k + 3] = 0;    // m = 0
      }
      t = {t.name, {64, 64}, 7u, b};
    }
  });
  const Result r = run({"run", "-m", p, "-p", "Once", "-n", "4", "-t", "1", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_NE(r.err.find("lilims: [model] re-quantized 1 tensors"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 Q5_1 -> Q8_0"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("re-quantized"), std::string::npos) << r.out;
  const Result i = run({"inspect", p});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_NE(i.out.find("re-quantized at load (1 Q5_1 -> Q8_0)"), std::string::npos) << i.out;
  const std::string q = tmp_path("from_q5_1.gguf");
  const Result c = run({"quantize", p, q, "Q8_0", "--no-progress"});
  ASSERT_EQ(c.exit_code, 0) << c.describe();
  const Result again = run({"run", "-m", q, "-p", "Once", "-n", "4", "-t", "1", "--temp", "0"});
  ASSERT_EQ(again.exit_code, 0) << again.describe();
  EXPECT_EQ(again.err.find("re-quantized"), std::string::npos) << again.err;
}

// A Q5_0 tensor has kernels: it loads as it is, with no notice.
TEST(CliRequantized, Q5_0IsKeptAtLoad) {
  REQUIRE_STORIES();
  const std::string p = write_variant(stories_gguf(), "q5_0.gguf", [](auto&, std::vector<EditableTensor>& ts) {
    for (auto& t : ts) {
      if (t.name != "blk.0.attn_q.weight") continue;
      std::vector<uint8_t> b(64 * 2 * 22);  // 64 rows of two 22-byte Q5_0 blocks
      for (size_t i = 0; i < b.size(); ++i) b[i] = (uint8_t)(i * 37 + 11);
      for (size_t k = 0; k < b.size(); k += 22) b[k] = 0x1f, b[k + 1] = 0x20;  // d = fp16 0.0081
      t = {t.name, {64, 64}, 6u, b};
    }
  });
  const Result r = run({"run", "-m", p, "-p", "Once", "-n", "4", "-t", "1", "--temp", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_EQ(r.err.find("re-quantized"), std::string::npos) << r.err;
  const Result i = run({"inspect", p});
  ASSERT_EQ(i.exit_code, 0) << i.describe();
  EXPECT_EQ(i.out.find("re-quantized"), std::string::npos) << i.out;
}

}  // namespace
}  // namespace lilims::test::cli

