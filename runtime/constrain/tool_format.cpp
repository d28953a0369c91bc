#include "runtime/constrain/tool_format.h"

#include "base/error.h"
#include "base/nlohmann_json.h"

namespace lilims::runtime {
namespace {

using Json = nlohmann::ordered_json;

Json parameters_json(const Tool& t) {
  if (t.parameters.empty()) return Json{{"type", "object"}, {"properties", Json::object()}};
  return Json::parse(t.parameters);  // tools_schema checked it parses to an object
}

Json tool_json(const Tool& t) {
  return Json{{"name", t.name}, {"description", t.description}, {"parameters", parameters_json(t)}};
}

// One call of any tool: {"<name key>": <name>, "<args key>": <its arguments>}.
Json call_schema(const std::vector<Tool>& tools, const char* args_key) {
  Json any = Json::array();
  for (const Tool& t : tools) {
    Json props = Json::object();
    props["name"] = Json{{"const", t.name}};
    props[args_key] = parameters_json(t);
    any.push_back(Json{{"type", "object"},
                       {"properties", props},
                       {"required", Json::array({"name", args_key})},
                       {"additionalProperties", false}});
  }
  return Json{{"anyOf", any}};
}

// min_items 0: an empty list says that no tool fits (SmolLM2's convention).
Json list_schema(const std::vector<Tool>& tools, int min_items) {
  return Json{{"type", "array"}, {"items", call_schema(tools, "arguments")}, {"minItems", min_items}};
}

ToolCall call_of(const Json& j, const char* args_key) {
  if (!j.is_object() || !j.contains("name") || !j.at("name").is_string()) {
    throw Error(LILIMS_ERR_BAD_FORMAT, "[tools] a call without a string \"name\"");
  }
  ToolCall c;
  c.name = j.at("name").get<std::string>();
  const auto a = j.find(args_key);
  c.arguments = a == j.end() ? "{}" : a->dump();
  return c;
}

// The JSON value that starts text (after spaces); the rest may follow it.
Json leading_value(std::string_view text) {
  const size_t at = text.find_first_not_of(" \t\r\n");
  if (at == std::string_view::npos) throw Error(LILIMS_ERR_BAD_FORMAT, "[tools] an empty call");
  // nlohmann parses a whole input: find the value's end by its brackets.
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t end = at;
  for (; end < text.size(); ++end) {
    const char ch = text[end];
    if (in_string) {
      if (escaped) escaped = false;
      else if (ch == '\\') escaped = true;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    else if (ch == '{' || ch == '[') ++depth;
    else if ((ch == '}' || ch == ']') && --depth == 0) { ++end; break; }
  }
  try {
    return Json::parse(text.substr(at, end - at));
  } catch (const std::exception& e) {
    throw Error(LILIMS_ERR_BAD_FORMAT, std::string("[tools] a call that does not parse: ") + e.what());
  }
}

struct Marks {
  const char* trigger;
  const char* close;
  bool list;
  const char* args_key;
};

Marks marks_of(ToolFormat f, bool allow_text) {
  switch (f) {
    case ToolFormat::generic: return {allow_text ? "<tool_call>" : "", "", false, "arguments"};
    case ToolFormat::hermes: return {"<tool_call>", "</tool_call>", false, "arguments"};
    case ToolFormat::smollm2: return {"<tool_call>", "</tool_call>", true, "arguments"};
    case ToolFormat::llama3: return {allow_text ? "<|python_tag|>" : "", "", false, "parameters"};
    case ToolFormat::phi4: return {"<|tool_call|>", "<|/tool_call|>", true, "arguments"};
  }
  return {"", "", false, "arguments"};
}

}  // namespace

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::generic: return "generic";
    case ToolFormat::hermes: return "hermes";
    case ToolFormat::smollm2: return "smollm2";
    case ToolFormat::llama3: return "llama3";
    case ToolFormat::phi4: return "phi4";
  }
  return "?";
}

ToolFormat tool_format_from_name(std::string_view name) {
  for (ToolFormat f : {ToolFormat::generic, ToolFormat::hermes, ToolFormat::smollm2, ToolFormat::llama3,
                       ToolFormat::phi4}) {
    if (name == tool_format_name(f)) return f;
  }
  throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[tools] unknown tool format '" + std::string(name) +
                                               "' (generic, hermes, smollm2, llama3, phi4)");
}

ToolFormat default_tool_format(const std::string& template_name, const std::string& template_text) {
  if (template_text.find("<tool_call>") != std::string::npos) return ToolFormat::hermes;
  if (template_text.find("<|python_tag|>") != std::string::npos) return ToolFormat::llama3;
  if (template_text.find("<|tool|>") != std::string::npos) return ToolFormat::phi4;
  if (template_name == "chatml") return ToolFormat::smollm2;
  // Qwen's templates describe tools in Hermes' way (Qwen2.5's and Qwen3's
  // texts spell it; Qwen2 was trained on it too): also when only the name is known.
  if (template_name == "qwen2" || template_name == "qwen3" || template_name == "qwen1.5") {
    return ToolFormat::hermes;
  }
  return ToolFormat::generic;  // gemma, chatml-plain, ...: no format of their own
}

ToolPrompt tool_prompt(ToolFormat f, const std::vector<Tool>& tools, bool allow_text) {
  ToolPrompt p;
  const std::string one = tools_schema(tools);  // checks the list
  const Marks m = marks_of(f, allow_text);
  p.trigger = m.trigger;
  p.close = m.close;
  p.schema = m.list ? list_schema(tools, f == ToolFormat::smollm2 ? 0 : 1).dump()
           : f == ToolFormat::llama3 ? call_schema(tools, "parameters").dump()
                                     : one;
  switch (f) {
    case ToolFormat::generic:
      p.system = tools_system_prompt(tools, p.trigger);
      break;
    case ToolFormat::hermes: {
      std::string lines;
      for (const Tool& t : tools) lines += Json{{"type", "function"}, {"function", tool_json(t)}}.dump() + "\n";
      p.system =
          "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
          "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
          lines +
          "</tools>\n\nFor each function call, return a json object with function name and arguments "
          "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
          "\"arguments\": <args-json-object>}\n</tool_call>";
      break;
    }
    case ToolFormat::smollm2: {
      Json list = Json::array();
      for (const Tool& t : tools) list.push_back(tool_json(t));
      p.system =
          "You are an expert in composing functions. You are given a question and a set of possible "
          "functions. Based on the question, you will need to make one or more function/tool calls to "
          "achieve the purpose. If none of the functions can be used, point it out and refuse to answer. "
          "If the given question lacks the parameters required by the function, also point it out.\n\n"
          "You have access to the following tools:\n<tools>" +
          list.dump() +
          "</tools>\n\nThe output MUST strictly adhere to the following format, and NO other text MUST "
          "be included.\nThe example format is as follows. Please make sure the parameter type is "
          "correct. If no function call is needed, please make the tool calls an empty list '[]'.\n"
          "<tool_call>[\n{\"name\": \"func_name1\", \"arguments\": {\"argument1\": \"value1\", "
          "\"argument2\": \"value2\"}},\n... (more tool calls as required)\n]</tool_call>";
      break;
    }
    case ToolFormat::llama3: {
      std::string objs;
      for (const Tool& t : tools) objs += Json{{"type", "function"}, {"function", tool_json(t)}}.dump(4) + "\n\n";
      p.system =
          "Given the following functions, please respond with a JSON for a function call with its proper "
          "arguments that best answers the given prompt.\n\nRespond in the format {\"name\": function "
          "name, \"parameters\": dictionary of argument name and its value}. Do not use variables.\n\n" +
          objs;
      if (allow_text) p.system += "When no function fits, answer in plain text; else start the call with <|python_tag|>.";
      break;
    }
    case ToolFormat::phi4: {
      Json list = Json::array();
      for (const Tool& t : tools) list.push_back(tool_json(t));
      p.system = "You are a helpful assistant with some tools.<|tool|>" + list.dump() + "<|/tool|>";
      break;
    }
  }
  return p;
}

std::vector<ToolCall> parse_tool_calls(ToolFormat f, std::string_view text) {
  const Marks m = marks_of(f, true);  // with the opening mark that auto's text uses
  std::vector<ToolCall> out;
  auto take = [&](const Json& v) {
    if (m.list) {
      if (!v.is_array()) throw Error(LILIMS_ERR_BAD_FORMAT, "[tools] the calls are not a JSON list");
      for (const Json& c : v) out.push_back(call_of(c, m.args_key));
    } else {
      out.push_back(call_of(v, m.args_key));
    }
  };
  const std::string_view trigger = m.trigger;
  const size_t first = trigger.empty() ? std::string_view::npos : text.find(trigger);
  if (first == std::string_view::npos) {
    // The value alone: a required call of a format without an opening
    // mark, or the text after the mark its prompt ended with.  Else plain text.
    const size_t at = text.find_first_not_of(" \t\r\n");
    if (at != std::string_view::npos && (text[at] == '{' || text[at] == '[')) take(leading_value(text));
    return out;
  }
  for (size_t at = first; at != std::string_view::npos; at = text.find(trigger, at + 1)) {
    take(leading_value(text.substr(at + trigger.size())));
  }
  return out;
}

std::string tool_calls_json(const std::vector<ToolCall>& calls) {
  Json a = Json::array();
  for (const ToolCall& c : calls) a.push_back(Json{{"name", c.name}, {"arguments", Json::parse(c.arguments)}});
  return a.dump();
}

}  // namespace lilims::runtime
