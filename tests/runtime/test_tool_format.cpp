// Tool formats (runtime/constrain/tool_format.h): each family's system text, marks,
// call schema and parser, and which format a chat template gets.  The
// generation side runs in tests/cli (SmolLM2 writes a call in each format).
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/constrain/json_schema.h"
#include "runtime/constrain/tool_format.h"
#include "test_util.h"

namespace lilims::runtime {
namespace {

const std::vector<Tool> kTools = {
    {"open_app", "Open an app.", R"({"type":"object","properties":{"app":{"enum":["camera","maps"]}},"required":["app"]})"},
    {"set_timer", "Start a timer.", R"({"type":"object","properties":{"seconds":{"type":"integer"}},"required":["seconds"]})"},
    {"ping", "", ""},
};

const ToolFormat kAll[] = {ToolFormat::generic, ToolFormat::hermes, ToolFormat::smollm2, ToolFormat::llama3,
                           ToolFormat::phi4};

TEST(ToolFormat, NamesRoundTrip) {
  for (ToolFormat f : kAll) EXPECT_EQ(tool_format_from_name(tool_format_name(f)), f);
  EXPECT_THROW(tool_format_from_name("qwen"), Error);
}

TEST(ToolFormat, DefaultFromTheTemplate) {
  EXPECT_EQ(default_tool_format("chatml", "{% for m in messages %}<|im_start|>..."), ToolFormat::smollm2);
  EXPECT_EQ(default_tool_format("chatml", "... <tool_call>\n{\"name\": <function-name>, ..."), ToolFormat::hermes);
  EXPECT_EQ(default_tool_format("llama3", "... <|python_tag|> ..."), ToolFormat::llama3);
  EXPECT_EQ(default_tool_format("phi3", "... <|tool|>{{ tools }}<|/tool|> ..."), ToolFormat::phi4);
  EXPECT_EQ(default_tool_format("llama3", "<|start_header_id|>"), ToolFormat::generic);
  EXPECT_EQ(default_tool_format("", ""), ToolFormat::generic);
  // The new families, by their real templates (tests/data/tokenizer_families/templates)
  // and by name alone.
  auto text = [](const char* file) {
    return test::read_file(test::source_path(std::string("tests/data/tokenizer_families/templates/") + file));
  };
  EXPECT_EQ(default_tool_format("qwen2", text("qwen2.5-instruct.jinja")), ToolFormat::hermes);
  EXPECT_EQ(default_tool_format("qwen3", text("qwen3.jinja")), ToolFormat::hermes);
  EXPECT_EQ(default_tool_format("qwen1.5", text("qwen2-instruct.jinja")), ToolFormat::hermes);
  EXPECT_EQ(default_tool_format("gemma", text("gemma-3-it.jinja")), ToolFormat::generic);
  for (const char* name : {"qwen2", "qwen3", "qwen1.5"}) EXPECT_EQ(default_tool_format(name, ""), ToolFormat::hermes);
  EXPECT_EQ(default_tool_format("gemma", ""), ToolFormat::generic);
  EXPECT_EQ(default_tool_format("chatml-plain", "{{'<|im_start|>' + m['role']}}"), ToolFormat::generic);
}

// Every format describes every tool, its schema compiles, and the answer
// its own marks and schema allow parses back to the same call.
TEST(ToolFormat, PromptSchemaAndParserAgree) {
  for (ToolFormat f : kAll) {
    for (bool allow_text : {false, true}) {
      SCOPED_TRACE(std::string(tool_format_name(f)) + (allow_text ? " auto" : " required"));
      const ToolPrompt p = tool_prompt(f, kTools, allow_text);
      for (const Tool& t : kTools) EXPECT_NE(p.system.find(t.name), std::string::npos);
      EXPECT_NO_THROW(compile_json_schema(p.schema));
      const bool list = f == ToolFormat::smollm2 || f == ToolFormat::phi4;
      const char* key = f == ToolFormat::llama3 ? "parameters" : "arguments";
      const std::string call = std::string("{\"name\": \"set_timer\", \"") + key + "\": {\"seconds\": 180}}";
      const std::string value = list ? "[" + call + ", {\"name\":\"ping\",\"" + key + "\":{}}]" : call;
      const std::string answer = "Sure. " + p.trigger + value + p.close;
      const std::vector<ToolCall> calls = parse_tool_calls(f, p.trigger.empty() ? value : std::string_view(answer));
      // A required call's text after the mark its prompt ended with: the value alone.
      EXPECT_EQ(parse_tool_calls(f, value + p.close).size(), calls.size());
      ASSERT_EQ(calls.size(), list ? 2u : 1u);
      EXPECT_EQ(calls[0].name, "set_timer");
      EXPECT_EQ(nlohmann::json::parse(calls[0].arguments), nlohmann::json::parse(R"({"seconds":180})"));
      if (list) {
        EXPECT_EQ(calls[1].name, "ping");
      }
      if (!p.trigger.empty()) {
        EXPECT_TRUE(parse_tool_calls(f, "No tool fits that.").empty());
      }
    }
  }
}

TEST(ToolFormat, MarksOfEachFamily) {
  EXPECT_EQ(tool_prompt(ToolFormat::hermes, kTools).trigger, "<tool_call>");
  EXPECT_EQ(tool_prompt(ToolFormat::hermes, kTools).close, "</tool_call>");
  EXPECT_EQ(tool_prompt(ToolFormat::smollm2, kTools).trigger, "<tool_call>");
  EXPECT_EQ(tool_prompt(ToolFormat::phi4, kTools).trigger, "<|tool_call|>");
  EXPECT_EQ(tool_prompt(ToolFormat::phi4, kTools).close, "<|/tool_call|>");
  EXPECT_EQ(tool_prompt(ToolFormat::generic, kTools).trigger, "");
  EXPECT_EQ(tool_prompt(ToolFormat::generic, kTools, true).trigger, "<tool_call>");
  EXPECT_EQ(tool_prompt(ToolFormat::llama3, kTools).trigger, "");
  EXPECT_NE(tool_prompt(ToolFormat::smollm2, kTools).system.find("<tools>[{\"name\":\"open_app\""), std::string::npos);
  EXPECT_NE(tool_prompt(ToolFormat::phi4, kTools).system.find("<|tool|>[{\"name\":\"open_app\""), std::string::npos);
}

// SmolLM2's answer when no tool fits is an empty list; its schema allows it.
TEST(ToolFormat, Smollm2MayCallNone) {
  EXPECT_TRUE(parse_tool_calls(ToolFormat::smollm2, "<tool_call>[]</tool_call>").empty());
  EXPECT_TRUE(parse_tool_calls(ToolFormat::smollm2, "[]</tool_call>").empty());
  EXPECT_NE(tool_prompt(ToolFormat::smollm2, kTools).schema.find("\"minItems\":0"), std::string::npos);
  EXPECT_NE(tool_prompt(ToolFormat::phi4, kTools).schema.find("\"minItems\":1"), std::string::npos);
}

TEST(ToolFormat, BrokenCallsAreErrors) {
  EXPECT_THROW(parse_tool_calls(ToolFormat::hermes, "<tool_call>{\"name\": </tool_call>"), Error);
  EXPECT_THROW(parse_tool_calls(ToolFormat::generic, "{\"arguments\": {}}"), Error);
  EXPECT_THROW(parse_tool_calls(ToolFormat::smollm2, "<tool_call>{\"name\":\"x\"}</tool_call>"), Error);
  EXPECT_TRUE(parse_tool_calls(ToolFormat::generic, "   ").empty());
  EXPECT_EQ(tool_calls_json(parse_tool_calls(ToolFormat::llama3, R"({"name":"a","parameters":{"x":[1,"\u00e9"]}})")),
            R"([{"name":"a","arguments":{"x":[1,"é"]}}])");
  EXPECT_THROW(tool_prompt(ToolFormat::hermes, {}), Error);
}

}  // namespace
}  // namespace lilims::runtime
