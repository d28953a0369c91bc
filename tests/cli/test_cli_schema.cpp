// `lilims run --json-schema` and `--tools`: stdout carries exactly one JSON
// value valid for the schema (or the tool call), else nothing and a one-line
// error; the README's example tool files work as written.
#include <nlohmann/json.hpp>

#include "cli_util.h"

namespace lilims::test::cli {
namespace {

#define REQUIRE_SMOL() LILIMS_REQUIRE_FILE(smollm2_path(), kSmolFrom)

std::vector<std::string> tool_args() {
  std::vector<std::string> a;
  for (const char* t : {"open_app", "set_timer", "send_message", "take_photo", "navigate"}) {
    a.push_back("--tools");
    a.push_back(source_path("examples/tools/") + t + ".json");
  }
  return a;
}

nlohmann::json parse_out(const Result& r) {
  expect_no_crash(r);
  EXPECT_EQ(r.exit_code, 0) << r.describe();
  EXPECT_FALSE(r.out.empty()) << r.describe();
  if (r.out.empty()) return nullptr;
  EXPECT_EQ(r.out.back(), '\n');
  try {
    return nlohmann::json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON value: " << e.what() << "\n" << r.describe();
    return nullptr;
  }
}

// SmolLM2's default tool format (its own): <tool_call>[calls]</tool_call>.
TEST(CliSchema, ToolsOpenTheCamera) {
  REQUIRE_SMOL();
  std::vector<std::string> args = {"run", "-m", smollm2_path(), "-p", "Open the camera.", "-t", "1", "-q"};
  for (const std::string& a : tool_args()) args.push_back(a);
  const Result r = run(args);
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const std::string open = "<tool_call>", close = "</tool_call>\n";
  ASSERT_EQ(r.out.substr(0, open.size()), open) << r.out;
  ASSERT_GE(r.out.size(), open.size() + close.size());
  EXPECT_EQ(r.out.substr(r.out.size() - close.size()), close) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(open.size(), r.out.size() - open.size() - close.size()));
  ASSERT_TRUE(j.is_array() && j.size() == 1) << r.out;
  EXPECT_EQ(j[0].at("name"), "open_app") << r.out;
  EXPECT_EQ(j[0].at("arguments").at("app"), "camera") << r.out;
}

// --tool-format generic: the object alone; a bad format or choice is a usage error.
TEST(CliSchema, ToolsInTheGenericFormat) {
  REQUIRE_SMOL();
  std::vector<std::string> args = {"run", "-m", smollm2_path(), "-p", "Set a timer for ten minutes.", "-t", "1",
                                   "-q", "--tool-format", "generic"};
  for (const std::string& a : tool_args()) args.push_back(a);
  const nlohmann::json j = parse_out(run(args));
  ASSERT_TRUE(j.is_object()) << j.dump();
  EXPECT_TRUE(j.contains("name") && j.at("arguments").is_object()) << j.dump();
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--tool-format", "qwen"},
                                              std::vector<std::string>{"--tool-choice", "maybe"}}) {
    std::vector<std::string> b = {"run", "-m", smollm2_path(), "-p", "x"};
    b.insert(b.end(), bad.begin(), bad.end());
    const Result r = run(b);
    EXPECT_EQ(r.exit_code, 2) << r.describe();
    EXPECT_TRUE(r.out.empty());
    EXPECT_NE(r.err.find(bad[0]), std::string::npos) << r.err;
  }
}

TEST(CliSchema, SchemaInlineAndFromFile) {
  REQUIRE_SMOL();
  const std::string schema =
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":20},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city","days"],"additionalProperties":false})";
  const std::string file = tmp_path("trip_schema.json");
  write_bytes(file, schema);
  for (const std::string& s : {schema, file}) {
    const nlohmann::json j = parse_out(run({"run", "-m", smollm2_path(), "-p",
                                            "A week in Lisbon, as JSON.", "--json-schema", s,
                                            "-t", "1", "-q", "-n", "48"}));
    ASSERT_TRUE(j.is_object()) << j.dump();
    EXPECT_LE(j.at("city").get<std::string>().size(), 20u);
    const int days = j.at("days").get<int>();
    EXPECT_TRUE(days >= 1 && days <= 14) << j.dump();
  }
}

TEST(CliSchema, Errors) {
  REQUIRE_SMOL();
  const std::string m = smollm2_path();
  expect_failure(run({"run", "-m", m, "-p", "x", "--json-schema", R"({"type":"object","not":{}})"}),
                 "run", "unsupported keyword 'not'");
  expect_failure(run({"run", "-m", m, "-p", "x", "--json-schema", "{\"type\":"}), "run",
                 "[json-schema] malformed schema");
  expect_failure(run({"run", "-m", m, "-p", "x", "--json-schema", tmp_path("no_such_schema.json")}),
                 "run", "no_such_schema.json");
  expect_failure(run({"run", "-m", m, "-p", "x", "--json-schema", R"({"type":"string","minLength":30})",
                      "-n", "5"}),
                 "run", "too small for a value of the schema");
  expect_failure(run({"run", "-m", m, "-p", "x", "--json", "--json-schema", "{}"}), "run",
                 "exclude each other", false);
  const std::string bad_tools = tmp_path("bad_tools.json");
  write_bytes(bad_tools, R"([{"name":"a"},{"name":"a"}])");
  expect_failure(run({"run", "-m", m, "-p", "x", "--tools", bad_tools}), "run",
                 "[tools] two tools are named 'a'");
}

// --trigger: free text, then the call; stdout carries the whole answer.
TEST(CliSchema, TriggerToolCallAfterText) {
  REQUIRE_SMOL();
  std::vector<std::string> args = {"run", "-m", smollm2_path(), "-p", "Open the camera.", "-t", "1",
                                   "-q", "--trigger", "call", "--trigger-close", " (done)",
                                   "--tool-format", "generic"};
  for (const std::string& a : tool_args()) args.push_back(a);
  const Result r = run(args);
  expect_no_crash(r);
  ASSERT_EQ(r.exit_code, 0) << r.describe();
  const size_t at = r.out.find("call{");
  ASSERT_NE(at, std::string::npos) << r.describe();
  const std::string tail = " (done)\n";
  ASSERT_GE(r.out.size(), at + 4 + tail.size());
  EXPECT_EQ(r.out.substr(r.out.size() - tail.size()), tail);
  const auto j = nlohmann::json::parse(r.out.substr(at + 4, r.out.size() - at - 4 - tail.size()));
  EXPECT_EQ(j.at("name"), "open_app") << r.out;
  // Only with a schema.
  const Result bad = run({"run", "-m", smollm2_path(), "-p", "Hi", "--trigger", "call"});
  EXPECT_EQ(bad.exit_code, 2) << bad.describe();
  EXPECT_TRUE(bad.out.empty());
  EXPECT_NE(bad.err.find("--trigger"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace lilims::test::cli
