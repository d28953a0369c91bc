#include "runtime/constrain/tools.h"

#include <set>

#include "base/error.h"
#include "base/nlohmann_json.h"

namespace lilims::runtime {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void fail(const std::string& what) {
  throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[tools] " + what);
}

Json parameters_of(const Tool& t) {
  if (t.parameters.empty()) return Json{{"type", "object"}, {"properties", Json::object()}};
  Json p;
  try {
    p = Json::parse(t.parameters);
  } catch (const std::exception& e) {
    fail("the parameters of '" + t.name + "' do not parse: " + e.what());
  }
  if (!p.is_object()) fail("the parameters of '" + t.name + "' must be a JSON Schema object");
  return p;
}

void check(const std::vector<Tool>& tools) {
  if (tools.empty()) fail("the list of tools is empty");
  std::set<std::string> names;
  for (const Tool& t : tools) {
    if (t.name.empty()) fail("a tool has no name");
    if (!names.insert(t.name).second) fail("two tools are named '" + t.name + "'");
  }
}

}  // namespace

std::vector<Tool> parse_tools(std::string_view json_text) {
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const std::exception& e) {
    fail(std::string("the tools do not parse: ") + e.what());
  }
  if (j.is_object()) j = Json::array({j});
  if (!j.is_array()) fail("the tools must be a JSON array or one tool object");
  std::vector<Tool> out;
  for (const Json& item : j) {
    const Json& f = item.is_object() && item.contains("function") ? item.at("function") : item;
    if (!f.is_object() || !f.contains("name") || !f.at("name").is_string()) {
      fail("each tool must be an object with a string \"name\"");
    }
    Tool t;
    t.name = f.at("name").get<std::string>();
    if (const auto d = f.find("description"); d != f.end()) {
      if (!d->is_string()) fail("the description of '" + t.name + "' must be a string");
      t.description = d->get<std::string>();
    }
    if (const auto p = f.find("parameters"); p != f.end()) t.parameters = p->dump();
    out.push_back(std::move(t));
  }
  check(out);
  return out;
}

std::string tools_schema(const std::vector<Tool>& tools) {
  check(tools);
  Json any = Json::array();
  for (const Tool& t : tools) {
    Json props = Json::object();
    props["name"] = Json{{"const", t.name}};
    props["arguments"] = parameters_of(t);
    any.push_back(Json{{"type", "object"},
                       {"properties", props},
                       {"required", Json::array({"name", "arguments"})},
                       {"additionalProperties", false}});
  }
  return Json{{"anyOf", any}}.dump();
}

std::string tools_system_prompt(const std::vector<Tool>& tools, const std::string& trigger) {
  check(tools);
  std::string out = "You can call these tools:\n";
  for (const Tool& t : tools) {
    Json line = Json::object();
    line["name"] = t.name;
    line["description"] = t.description;
    line["parameters"] = parameters_of(t);
    out += line.dump() + "\n";
  }
  if (trigger.empty()) {
    out += "To call a tool, answer with one JSON object: "
           "{\"name\": <the tool's name>, \"arguments\": <its arguments>}.";
  } else {
    out += "To call a tool, write " + trigger + " and then one JSON object: "
           "{\"name\": <the tool's name>, \"arguments\": <its arguments>}. "
           "When no tool fits, answer in plain text.";
  }
  return out;
}

}  // namespace lilims::runtime
