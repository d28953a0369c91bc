#include "models/convert_util.h"

#include <unistd.h>

#include "base/error.h"
#include "base/file.h"

namespace lilims::models::hf {

using nlohmann::json;

bool regular_file_exists(const std::string& path) {
  unsigned long long size = 0;
  try {
    ::close(open_regular_file(path, "convert", &size));
    return true;
  } catch (const Error&) {
    return false;
  }
}

json parse_json_file(const std::string& path, const char* name) {
  try {
    return json::parse(read_regular_file(path, "convert"));
  } catch (const json::exception& e) {
    throw Error(LILIMS_ERR_BAD_FORMAT, "[convert] " + std::string(name) + " is not JSON: " + e.what());
  }
}

std::string token_content(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

std::string chat_template(const std::string& dir, const json& cfg) {
  if (cfg.contains("chat_template")) {
    const json& t = cfg["chat_template"];
    if (t.is_string()) return t.get<std::string>();
    if (t.is_array()) {  // named templates: the "default" one, as llama.cpp takes it
      for (const json& e : t) {
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
            e["template"].is_string()) {
          return e["template"].get<std::string>();
        }
      }
    }
  }
  const std::string jinja = dir + "/chat_template.jinja";
  return regular_file_exists(jinja) ? read_regular_file(jinja, "convert") : "";
}

}  // namespace lilims::models::hf
