// How a model family describes tools and writes its calls.  Each format is
// the system text that lists the tools, the marks around a call in the
// answer (a lazy constraint's trigger and closing text), the JSON Schema of
// what goes between them (one call, or a list where the format allows
// several), and the parser that turns an answer back into calls.
//
//   generic  lilims' own (runtime/constrain/tools.h): one line of JSON per tool; the
//            answer is {"name", "arguments"} alone (no marks)
//   hermes   Qwen2 / Qwen2.5 / Hermes 2 Pro: the tools as JSON lines between
//            <tools></tools>; the answer <tool_call>{"name", "arguments"}</tool_call>
//   smollm2  SmolLM2's trained function calling (its model card): the tools as
//            a JSON list between <tools></tools>; the answer
//            <tool_call>[{"name", "arguments"}, ...]</tool_call>, where an empty
//            list says that no tool fits (so a required answer may call none)
//   llama3   Llama 3.1 / 3.2 JSON tool calling: the tools as JSON objects;
//            the answer {"name", "parameters"} alone
//   phi4     Phi-4-mini: <|tool|>[...]<|/tool|> in the system turn; the answer
//            <|tool_call|>[{"name", "arguments"}, ...]<|/tool_call|>
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "runtime/constrain/tools.h"

namespace lilims::runtime {

// In the order of the C API's lilims_tool_format.
enum class ToolFormat { generic, hermes, smollm2, llama3, phi4 };

const char* tool_format_name(ToolFormat f);
// Throws LILIMS_ERR_INVALID_ARGUMENT for an unknown name.
ToolFormat tool_format_from_name(std::string_view name);

// The format a model uses by default: the one its chat template's text
// spells (<tool_call> -> hermes, <|python_tag|> -> llama3, <|tool|> -> phi4),
// else its family's by the template's name (chatml, SmolLM2's: SmolLM2's own
// format, which measured better for SmolLM2-135M-Instruct than generic on the
// held-out requests, README; qwen1.5 / qwen2 / qwen3: hermes), else generic
// (gemma and chatml-plain have no format of their own).
ToolFormat default_tool_format(const std::string& template_name, const std::string& template_text);

struct ToolPrompt {
  std::string system;    // the text for the system turn
  std::string trigger;   // what opens a call ("" : the answer is the call)
  std::string close;     // what ends it
  std::string schema;    // JSON Schema of the value after the trigger
};
// Throws as tools_schema does.  With `allow_text` a format whose calls have
// no opening mark (generic, llama3) gets one (generic's trigger rendering:
// "<tool_call>"), so that the answer may be plain text when no tool fits.
ToolPrompt tool_prompt(ToolFormat f, const std::vector<Tool>& tools, bool allow_text = false);

struct ToolCall {
  std::string name;
  std::string arguments;  // a JSON object, compact
};
// The calls an answer in format f makes: after each opening mark (auto's,
// for the formats that have none of their own), or, without a mark, the
// value the text starts with (a required call: the text after the mark its
// prompt ended with); none for plain text.  Throws LILIMS_ERR_BAD_FORMAT
// when a call's JSON does not parse or lacks a name.
std::vector<ToolCall> parse_tool_calls(ToolFormat f, std::string_view text);
// [{"name": ..., "arguments": {...}}, ...] (compact).
std::string tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace lilims::runtime
