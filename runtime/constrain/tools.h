// Function calling: a list of tools (name, description, JSON Schema of the
// arguments) becomes a system prompt that describes them and a schema that
// holds the answer to {"name": <one of the names>, "arguments": <that tool's
// arguments>}.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace lilims::runtime {

struct Tool {
  std::string name;
  std::string description;
  std::string parameters;  // JSON Schema of the arguments (an object); "" = no arguments
};

// One {"name", "description", "parameters"} object or a JSON array of them (the
// OpenAI-style wrapper {"type": "function", "function": {...}} is accepted
// too).  Throws LILIMS_ERR_INVALID_ARGUMENT ("[tools] ...").
std::vector<Tool> parse_tools(std::string_view json_text);

// Throws LILIMS_ERR_INVALID_ARGUMENT ("[tools] ...") for an empty list, a
// missing or repeated name, or parameters that are not a JSON object.
std::string tools_schema(const std::vector<Tool>& tools);

// The documented rendering for chat templates without a tool syntax of
// their own: a system message listing each tool as one line of JSON, then
// the answer format: the JSON object alone, or, with a trigger (a lazy
// constraint, GenerateOptions::constraint_trigger), the trigger then the
// object, or plain text when no tool fits.
std::string tools_system_prompt(const std::vector<Tool>& tools, const std::string& trigger = "");

}  // namespace lilims::runtime
