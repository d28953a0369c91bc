// An independent JSON Schema validator for tests, written from the JSON
// Schema specification apart from the grammar compiler (it shares no code
// with runtime/).  Includes <regex>: a test that includes this needs the
// -Wmaybe-uninitialized pragma before any include (see below).
#pragma once

#if defined(__GNUC__) && !defined(__clang__)
// libstdc++ 12's <regex> trips -Wmaybe-uninitialized under
// -fsanitize=address (a false positive inside its NFA states).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

namespace lilims::test {

using J = nlohmann::ordered_json;

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

inline bool valid_date(const std::string& s) {
  std::smatch m;
  if (!std::regex_match(s, m, std::regex(R"((\d{4})-(\d{2})-(\d{2}))"))) return false;
  const int y = std::stoi(m[1]), mo = std::stoi(m[2]), d = std::stoi(m[3]);
  static const int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1) return false;
  return d <= kDays[mo - 1] + (mo == 2 && leap(y));
}

inline bool valid_time(const std::string& s) {
  std::smatch m;
  if (!std::regex_match(s, m, std::regex(R"((\d{2}):(\d{2}):(\d{2})(\.\d+)?(Z|z|[+-](\d{2}):(\d{2})))"))) {
    return false;
  }
  if (std::stoi(m[1]) > 23 || std::stoi(m[2]) > 59 || std::stoi(m[3]) > 60) return false;
  return !m[6].matched || (std::stoi(m[6]) <= 23 && std::stoi(m[7]) <= 59);
}

inline bool valid_format(const std::string& f, const std::string& s) {
  if (f == "date") return valid_date(s);
  if (f == "time") return valid_time(s);
  if (f == "date-time") {
    const size_t t = s.find_first_of("Tt");
    return t != std::string::npos && valid_date(s.substr(0, t)) && valid_time(s.substr(t + 1));
  }
  if (f == "uuid") return std::regex_match(s, std::regex("[0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}"));
  if (f == "email") {
    // RFC 5321 dot-atom local part and a dotted host name.
    return std::regex_match(s, std::regex(R"([!#$%&'*+/=?^_`{|}~0-9A-Za-z-]+(\.[!#$%&'*+/=?^_`{|}~0-9A-Za-z-]+)*@[0-9A-Za-z]([0-9A-Za-z-]*[0-9A-Za-z])?(\.[0-9A-Za-z]([0-9A-Za-z-]*[0-9A-Za-z])?)+)"));
  }
  return false;
}

inline bool is_type(const J& v, const std::string& t) {
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "string") return v.is_string();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && v.get<double>() == (double)(int64_t)v.get<double>());
  if (t == "number") return v.is_number();
  if (t == "boolean") return v.is_boolean();
  if (t == "null") return v.is_null();
  return false;
}

// "" when v is valid, else why not (with a JSON pointer).
inline std::string validate(const J& root, const J& s, const J& v, const std::string& at) {
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": false schema";
  if (s.contains("$ref")) return validate(root, root.at(J::json_pointer(s["$ref"].get<std::string>().substr(1))), v, at);
  for (const char* k : {"anyOf", "oneOf"}) {
    if (!s.contains(k)) continue;
    int ok = 0;
    for (const J& b : s[k]) ok += validate(root, b, v, at).empty();
    if (ok == 0 || (std::string(k) == "oneOf" && ok != 1)) return at + ": " + k + " matched " + std::to_string(ok);
  }
  if (s.contains("const") && s["const"] != v) return at + ": not the const";
  if (s.contains("enum")) {
    bool in = false;
    for (const J& e : s["enum"]) in |= e == v;
    if (!in) return at + ": not in the enum";
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_string()) ok = is_type(v, s["type"]);
    for (const J& t : s["type"]) ok |= t.is_string() && is_type(v, t);
    if (!ok) return at + ": wrong type";
  }
  if (v.is_object()) {
    const J props = s.value("properties", J::object());
    for (const J& r : s.value("required", J::array())) {
      if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
    }
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!props.contains(it.key())) {
        if (s.contains("additionalProperties") && s["additionalProperties"] == false) return at + ": extra " + it.key();
        continue;
      }
      const std::string e = validate(root, props[it.key()], it.value(), at + "/" + it.key());
      if (!e.empty()) return e;
    }
  }
  if (v.is_array()) {
    const J prefix = s.value("prefixItems", J::array());
    for (size_t i = 0; i < v.size(); ++i) {
      const J& sub = i < prefix.size() ? prefix[i] : s.value("items", J(true));
      const std::string e = validate(root, sub, v[i], at + "/" + std::to_string(i));
      if (!e.empty()) return e;
    }
    if (s.contains("minItems") && v.size() < s["minItems"].get<size_t>()) return at + ": too few items";
    if (s.contains("maxItems") && v.size() > s["maxItems"].get<size_t>()) return at + ": too many items";
  }
  if (v.is_string()) {
    const std::string str = v.get<std::string>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return at + ": too short";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return at + ": too long";
    if (s.contains("pattern") && !std::regex_search(str, std::regex(s["pattern"].get<std::string>(), std::regex::ECMAScript))) {
      return at + ": does not match the pattern";
    }
    if (s.contains("format") && !valid_format(s["format"], str)) return at + ": not a valid " + s["format"].get<std::string>();
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": not below exclusiveMaximum";
  }
  return "";
}

// Properties come in the order the schema lists them (lilims's promise,
// beyond JSON Schema's).
inline std::string check_order(const J& root, const J& s, const J& v, const std::string& at) {
  const J& sch = s.contains("$ref") ? root.at(J::json_pointer(s["$ref"].get<std::string>().substr(1))) : s;
  if (v.is_object() && sch.contains("properties")) {
    size_t last = 0;
    for (auto it = v.begin(); it != v.end(); ++it) {
      size_t pos = 0;
      for (auto p = sch["properties"].begin(); p != sch["properties"].end() && p.key() != it.key(); ++p) ++pos;
      if (pos < last) return at + ": " + it.key() + " out of order";
      last = pos;
      const std::string e = check_order(root, sch["properties"][it.key()], it.value(), at + "/" + it.key());
      if (!e.empty()) return e;
    }
  }
  if (v.is_array() && sch.contains("items")) {
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string e = check_order(root, sch["items"], v[i], at + "/" + std::to_string(i));
      if (!e.empty()) return e;
    }
  }
  return "";
}

}  // namespace lilims::test
