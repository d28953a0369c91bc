#include "runtime/constrain/json_schema.h"

#include <cmath>
#include <map>
#include <set>

#include "base/error.h"
#include "base/nlohmann_json.h"

namespace lilims::runtime {
namespace {

using Json = nlohmann::ordered_json;

constexpr int64_t kMaxMagnitude = 999999999999999;  // 15 digits: exact in a double
constexpr int kMaxStringChars = 512;
constexpr int kMaxArrayUnroll = 1024;
constexpr int kMaxSchemaDepth = 128;

const char* const kNumberPattern =
    "^-?(0|[1-9][0-9]{0,14})(\\.[0-9]{1,15})?([eE][+-]?[0-9]{1,2})?$";
const char* const kFraction = "^\\.[0-9]{1,15}$";

// RFC 3339 spellings.  Dates stop at the 28th of February (leap days need
// the year); times have no leap second.
#define LILIMS_DATE \
  "[0-9]{4}-((0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])|(0[13-9]|1[0-2])-(29|30)|(0[13578]|1[02])-31)"
#define LILIMS_TIME \
  "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
const std::map<std::string, std::string> kFormats = {
    {"date", "^" LILIMS_DATE "$"},
    {"time", "^" LILIMS_TIME "$"},
    {"date-time", "^" LILIMS_DATE "T" LILIMS_TIME "$"},
    {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
    {"email",
     "^[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*@[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?"
     "(\\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)+$"},
};
#undef LILIMS_DATE
#undef LILIMS_TIME

// The type each constraining keyword belongs to.
const std::map<std::string, std::string> kFamily = {
    {"properties", "object"},      {"required", "object"},         {"additionalProperties", "object"},
    {"items", "array"},            {"prefixItems", "array"},       {"minItems", "array"},
    {"maxItems", "array"},         {"minLength", "string"},        {"maxLength", "string"},
    {"pattern", "string"},         {"format", "string"},           {"minimum", "number"},
    {"maximum", "number"},         {"exclusiveMinimum", "number"}, {"exclusiveMaximum", "number"},
};
const std::set<std::string> kAnnotations = {
    "title",   "description", "$schema",  "$id",     "$comment", "default",
    "examples", "deprecated", "readOnly", "writeOnly", "$defs",  "definitions"};
const std::set<std::string> kCombinators = {"enum", "const", "anyOf", "oneOf", "$ref"};
const std::set<std::string> kTypes = {"object", "array",   "string", "integer",
                                      "number", "boolean", "null"};

class Compiler {
 public:
  explicit Compiler(const Json& root) : root_(root) {}

  Grammar run() {
    g_.root_rule = g_.add_rule();
    rules_[&root_] = g_.root_rule;
    const int32_t end = value(g_.rule_start[0], root_, "#", true);
    g_.nodes[(size_t)end].end = true;
    if (!g_.trim()) fail("#", "no value satisfies the schema");
    return std::move(g_);
  }

 private:
  [[noreturn]] static void fail(const std::string& where, const std::string& what) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[json-schema] " + where + ": " + what);
  }

  void eps(int32_t from, int32_t to) { g_.nodes[(size_t)from].eps.push_back(to); }
  int32_t lit(int32_t from, std::string_view s) { return grammar_literal(g_, from, s); }
  int32_t opt_space(int32_t from) {
    const int32_t end = g_.add_node();
    eps(from, end);
    eps(lit(from, " "), end);
    return end;
  }
  int32_t dead() { return g_.add_node(); }  // an end nothing reaches; trim() drops it

  int64_t count(const Json& s, const char* key, int64_t dflt, const std::string& where) {
    const auto it = s.find(key);
    if (it == s.end()) return dflt;
    if (!it->is_number_integer() || it->get<int64_t>() < 0) {
      fail(where, std::string("'") + key + "' must be a non-negative integer");
    }
    return it->get<int64_t>();
  }

  // Checks every keyword of a schema object; returns the types it may take
  // (empty: any JSON value).
  std::vector<std::string> keywords(const Json& s, const std::string& where) {
    std::vector<std::string> types;
    std::set<std::string> families;
    bool combinator = false, constraint = false;
    for (auto it = s.begin(); it != s.end(); ++it) {
      const std::string& k = it.key();
      if (kAnnotations.count(k)) continue;
      if (kCombinators.count(k)) {
        combinator = true;
      } else if (kFamily.count(k)) {
        families.insert(kFamily.at(k));
        constraint = true;
      } else if (k != "type") {
        fail(where, "unsupported keyword '" + k + "'");
      }
    }
    int n_comb = 0;
    for (const char* k : {"enum", "const", "anyOf", "oneOf", "$ref"}) n_comb += s.contains(k);
    if (n_comb > 1) fail(where, "enum, const, anyOf, oneOf and $ref cannot be combined here");
    if (combinator && constraint) {
      fail(where, "'" + *families.begin() +
                      "' keywords beside enum, const, anyOf, oneOf or $ref are unsupported");
    }
    if (const auto t = s.find("type"); t != s.end()) {
      if ((s.contains("anyOf") || s.contains("oneOf") || s.contains("$ref"))) {
        fail(where, "'type' beside anyOf, oneOf or $ref is unsupported");
      }
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const Json& x : *t) {
          if (!x.is_string()) fail(where, "'type' must be a string or an array of strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        fail(where, "'type' must be a string or an array of strings");
      }
      for (const std::string& ty : types) {
        if (!kTypes.count(ty)) fail(where, "unknown type '" + ty + "'");
      }
      for (const std::string& f : families) {
        bool applies = false;
        for (const std::string& ty : types) {
          applies |= ty == f || (f == "number" && ty == "integer");
        }
        if (!applies) fail(where, "'" + f + "' keywords do not apply to the type given");
      }
    } else if (families.size() > 1) {
      fail(where, "keywords of several types without a 'type'");
    } else if (families.size() == 1) {
      types.push_back(*families.begin());
    }
    return types;
  }

  static bool has_type(const Json& v, const std::string& t) {
    if (t == "object") return v.is_object();
    if (t == "array") return v.is_array();
    if (t == "string") return v.is_string();
    if (t == "integer") {
      return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
    }
    if (t == "number") return v.is_number();
    if (t == "boolean") return v.is_boolean();
    return v.is_null();
  }

  // A value for schema s; containers become calls to a rule of their own
  // unless `inline_containers` (the body of that rule).
  int32_t value(int32_t from, const Json& s, const std::string& where, bool inline_containers) {
    // Compilation recurses with the schema's nesting: bound it, not the stack.
    struct Depth {
      int& d;
      explicit Depth(int& x) : d(++x) {}
      ~Depth() { --d; }
    } depth(depth_);
    if (depth_ > kMaxSchemaDepth) fail(where, "schemas nested deeper than " + std::to_string(kMaxSchemaDepth));
    if (s.is_boolean()) return s.get<bool>() ? call_any(from) : dead();
    if (!s.is_object()) fail(where, "a schema must be an object or a boolean");
    const std::vector<std::string> types = keywords(s, where);
    if (const auto r = s.find("$ref"); r != s.end()) {
      if (!r->is_string()) fail(where, "'$ref' must be a string");
      return call_rule(from, resolve(r->get<std::string>(), where), r->get<std::string>());
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      const auto a = s.find(key);
      if (a == s.end()) continue;
      if (!a->is_array() || a->empty()) fail(where, std::string("'") + key + "' must be a non-empty array");
      const int32_t end = g_.add_node();
      for (size_t i = 0; i < a->size(); ++i) {
        eps(value(from, (*a)[i], where + "/" + key + "/" + std::to_string(i), inline_containers),
            end);
      }
      return end;
    }
    if (s.contains("enum") || s.contains("const")) {
      std::vector<const Json*> vals;
      if (const auto c = s.find("const"); c != s.end()) {
        vals.push_back(&*c);
      } else {
        const Json& e = s.at("enum");
        if (!e.is_array() || e.empty()) fail(where, "'enum' must be a non-empty array");
        for (const Json& v : e) vals.push_back(&v);
      }
      const int32_t end = g_.add_node();
      for (const Json* v : vals) {
        bool ok = types.empty();
        for (const std::string& t : types) ok |= has_type(*v, t);
        if (ok) eps(lit(from, v->dump()), end);
      }
      return end;
    }
    if (types.empty()) return call_any(from);
    if (!inline_containers) {
      for (const std::string& t : types) {
        if (t == "object" || t == "array") return call_rule(from, s, where);
      }
    }
    const int32_t end = g_.add_node();
    for (const std::string& t : types) eps(typed(from, t, s, where), end);
    return end;
  }

  int32_t typed(int32_t from, const std::string& t, const Json& s, const std::string& where) {
    if (t == "object") return object(from, s, where);
    if (t == "array") return array(from, s, where);
    if (t == "string") return string(from, s, where);
    if (t == "integer" || t == "number") return number(from, s, where, t == "integer");
    if (t == "boolean") {
      const int32_t end = g_.add_node();
      eps(lit(from, "true"), end);
      eps(lit(from, "false"), end);
      return end;
    }
    return lit(from, "null");
  }

  const Json& resolve(const std::string& ref, const std::string& where) {
    if (ref.empty() || ref[0] != '#') fail(where, "only local $ref (\"#...\") is supported: " + ref);
    try {
      return root_.at(Json::json_pointer(ref.substr(1)));
    } catch (const std::exception&) {
      fail(where, "$ref " + ref + " points nowhere in the schema");
    }
  }

  int32_t call_rule(int32_t from, const Json& s, const std::string& where) {
    int32_t rule;
    if (const auto it = rules_.find(&s); it != rules_.end()) {
      rule = it->second;
    } else {
      rule = g_.add_rule();
      rules_[&s] = rule;  // before the body: the body may refer to itself
      const int32_t end = value(g_.rule_start[(size_t)rule], s, where, true);
      g_.nodes[(size_t)end].end = true;
    }
    const int32_t to = g_.add_node();
    g_.nodes[(size_t)from].calls.push_back({rule, to});
    return to;
  }

  // Any JSON value (a schema that says nothing, or true).
  int32_t call_any(int32_t from) {
    if (any_rule_ < 0) {
      any_rule_ = g_.add_rule();
      const int32_t start = g_.rule_start[(size_t)any_rule_];
      const int32_t end = g_.add_node();
      g_.nodes[(size_t)end].end = true;
      const auto member = [&](int32_t n) {  // "key": value
        n = lit(free_string(n, 0, -1), ":");
        return call_any(opt_space(n));
      };
      const int32_t obj = lit(start, "{");
      eps(lit(obj, "}"), end);
      const int32_t m = member(obj);
      eps(member(opt_space(lit(m, ","))), m);
      eps(lit(m, "}"), end);
      const int32_t arr = lit(start, "[");
      eps(lit(arr, "]"), end);
      const int32_t item = call_any(arr);
      eps(call_any(opt_space(lit(item, ","))), item);
      eps(lit(item, "]"), end);
      eps(free_string(start, 0, -1), end);
      eps(grammar_pattern(g_, start, kNumberPattern, "#"), end);
      for (const char* l : {"true", "false", "null"}) eps(lit(start, l), end);
    }
    const int32_t to = g_.add_node();
    g_.nodes[(size_t)from].calls.push_back({any_rule_, to});
    return to;
  }

  int32_t object(int32_t from, const Json& s, const std::string& where) {
    static const Json kEmpty = Json::object();
    const Json& props = s.contains("properties") ? s.at("properties") : kEmpty;
    if (!props.is_object()) fail(where, "'properties' must be an object");
    std::set<std::string> required;
    if (const auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) fail(where, "'required' must be an array of strings");
      for (const Json& k : *r) {
        if (!k.is_string()) fail(where, "'required' must be an array of strings");
        if (!props.contains(k.get<std::string>())) {
          fail(where, "required property '" + k.get<std::string>() +
                          "' is not in 'properties' (only listed properties are generated)");
        }
        required.insert(k.get<std::string>());
      }
    }
    if (const auto a = s.find("additionalProperties"); a != s.end() && !(a->is_boolean() && !a->get<bool>())) {
      fail(where, "'additionalProperties' other than false is unsupported");
    }
    // Two lanes: before any property (no comma yet) and after one.
    int32_t lane0 = lit(from, "{"), lane1 = -1;
    for (auto it = props.begin(); it != props.end(); ++it) {
      const std::string key = Json(it.key()).dump() + ":";
      const int32_t colon = g_.add_node();
      if (lane0 >= 0) eps(lit(lane0, key), colon);
      if (lane1 >= 0) eps(lit(opt_space(lit(lane1, ",")), key), colon);
      const int32_t after = value(opt_space(colon), it.value(), where + "/properties/" + it.key(), false);
      if (required.count(it.key())) {
        lane0 = -1;
        lane1 = after;
      } else {
        if (lane1 >= 0) eps(lane1, after);
        lane1 = after;
        if (lane0 >= 0) {
          const int32_t skip = g_.add_node();
          eps(lane0, skip);
          lane0 = skip;
        }
      }
    }
    const int32_t end = g_.add_node();
    if (lane0 >= 0) eps(lit(lane0, "}"), end);
    if (lane1 >= 0) eps(lit(lane1, "}"), end);
    return end;
  }

  int32_t array(int32_t from, const Json& s, const std::string& where) {
    static const Json kEmpty = Json::array();
    static const Json kAny = Json::object();
    const Json& prefix = s.contains("prefixItems") ? s.at("prefixItems") : kEmpty;
    if (!prefix.is_array()) fail(where, "'prefixItems' must be an array");
    const Json* items = &kAny;
    int64_t max = count(s, "maxItems", -1, where);
    const int64_t min = count(s, "minItems", 0, where);
    if (const auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) fail(where, "'items' as an array (draft 4 tuples) is unsupported; use prefixItems");
      if (it->is_boolean() && !it->get<bool>()) {
        max = max < 0 ? (int64_t)prefix.size() : std::min<int64_t>(max, (int64_t)prefix.size());
      }
      items = &*it;
    }
    if (max >= 0 && min > max) return dead();
    int64_t unroll = std::max<int64_t>((int64_t)prefix.size(), min);
    if (max >= 0) unroll = max;
    if (max < 0 && unroll == 0) unroll = 1;
    if (unroll > kMaxArrayUnroll) {
      if (std::max<int64_t>((int64_t)prefix.size(), min) > kMaxArrayUnroll) {
        fail(where, "more than " + std::to_string(kMaxArrayUnroll) + " required items are unsupported");
      }
      unroll = kMaxArrayUnroll;  // fewer items than maxItems allows: still valid
      max = unroll;
    }
    const int32_t end = g_.add_node();
    const auto close = [&](int32_t n) { g_.nodes[(size_t)n].bytes.push_back({']', ']', end}); };
    int32_t cur = lit(from, "[");
    for (int64_t j = 0; j < unroll; ++j) {
      if (j >= min) close(cur);
      const bool pre = j < (int64_t)prefix.size();
      const std::string w = pre ? where + "/prefixItems/" + std::to_string(j) : where + "/items";
      const int32_t x = j == 0 ? cur : opt_space(lit(cur, ","));
      cur = value(x, pre ? prefix[(size_t)j] : *items, w, false);
    }
    if (max < 0) {
      eps(value(opt_space(lit(cur, ",")), *items, where + "/items", false), cur);
    }
    close(cur);
    return end;
  }

  // A JSON string of min..max characters (max < 0: no limit).
  int32_t free_string(int32_t from, int64_t min, int64_t max) {
    Grammar::CharRun run;
    run.min = min;
    run.bounded = max >= 0;
    int32_t n = lit(from, "\"");
    for (int64_t i = 0; i < min; ++i) {
      run.nodes.push_back(n);
      n = grammar_json_string_char(g_, n);
    }
    if (max < 0) {
      const int32_t loop = g_.add_node();
      eps(n, loop);
      eps(grammar_json_string_char(g_, loop), loop);
      n = loop;
      run.loop = loop;
    } else {
      const int32_t end = g_.add_node();
      for (int64_t i = min; i < max; ++i) {
        run.nodes.push_back(n);
        eps(n, end);
        n = grammar_json_string_char(g_, n);
      }
      run.nodes.push_back(n);
      eps(n, end);
      n = end;
    }
    const int32_t after = lit(n, "\"");
    run.after = after;
    g_.char_runs.push_back(std::move(run));
    return after;
  }

  int32_t string(int32_t from, const Json& s, const std::string& where) {
    const int64_t min = count(s, "minLength", 0, where);
    int64_t max = count(s, "maxLength", -1, where);
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    std::string pattern;
    if (const auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) fail(where, "'format' must be a string");
      const auto known = kFormats.find(f->get<std::string>());
      if (known == kFormats.end()) fail(where, "unsupported format '" + f->get<std::string>() + "'");
      pattern = known->second;
      if (s.contains("pattern")) fail(where, "'pattern' beside 'format' is unsupported");
    } else if (const auto p = s.find("pattern"); p != s.end()) {
      if (!p->is_string()) fail(where, "'pattern' must be a string");
      pattern = p->get<std::string>();
    }
    if (!pattern.empty() || s.contains("pattern")) {
      if (lengths) fail(where, "minLength/maxLength beside 'pattern' or 'format' is unsupported");
      return lit(grammar_pattern(g_, lit(from, "\""), pattern, where), "\"");
    }
    if (max >= 0 && min > max) return dead();
    if (min > kMaxStringChars) {
      fail(where, "minLength above " + std::to_string(kMaxStringChars) + " is unsupported");
    }
    if (max > kMaxStringChars) max = kMaxStringChars;
    return free_string(from, min, max);
  }

  void any_digits(int32_t from, size_t k, int32_t end) {
    for (; k > 1; --k) from = grammar_byte_range(g_, from, '0', '9');
    if (k == 1) {
      g_.nodes[(size_t)from].bytes.push_back({'0', '9', end});
    } else {
      eps(from, end);
    }
  }

  // Digit strings between a and b, both of the same length.
  void same_length(int32_t from, const std::string& a, const std::string& b, int32_t end) {
    if (a.empty()) return eps(from, end);
    const std::string ra = a.substr(1), rb = b.substr(1);
    if (a[0] == b[0]) return same_length(grammar_byte_range(g_, from, (uint8_t)a[0], (uint8_t)a[0]), ra, rb, end);
    if (ra == std::string(ra.size(), '0') && rb == std::string(rb.size(), '9')) {
      return any_digits(grammar_byte_range(g_, from, (uint8_t)a[0], (uint8_t)b[0]), ra.size(), end);
    }
    same_length(grammar_byte_range(g_, from, (uint8_t)a[0], (uint8_t)a[0]), ra, std::string(ra.size(), '9'), end);
    if (a[0] + 1 <= b[0] - 1) {
      any_digits(grammar_byte_range(g_, from, (uint8_t)(a[0] + 1), (uint8_t)(b[0] - 1)), ra.size(), end);
    }
    same_length(grammar_byte_range(g_, from, (uint8_t)b[0], (uint8_t)b[0]), std::string(rb.size(), '0'), rb, end);
  }

  // Non-negative integers in [lo, hi] without leading zeros.
  int32_t uint_range(int32_t from, int64_t lo, int64_t hi) {
    const int32_t end = g_.add_node();
    int64_t p = 1;  // 10^(d-1)
    for (size_t d = 1; d <= 15; ++d, p *= 10) {
      const int64_t a = std::max(lo, d == 1 ? 0 : p), b = std::min(hi, p * 10 - 1);
      if (a <= b) same_length(from, std::to_string(a), std::to_string(b), end);
    }
    return end;
  }

  int32_t int_range(int32_t from, int64_t lo, int64_t hi) {
    const int32_t end = g_.add_node();
    if (lo <= -1) eps(uint_range(lit(from, "-"), std::max<int64_t>(1, -hi), -lo), end);
    if (hi >= 0) eps(uint_range(from, std::max<int64_t>(0, lo), hi), end);
    return end;
  }

  static int64_t clamp(double v) {
    if (v > (double)kMaxMagnitude) return kMaxMagnitude;
    if (v < -(double)kMaxMagnitude) return -kMaxMagnitude;
    return (int64_t)v;
  }

  int32_t number(int32_t from, const Json& s, const std::string& where, bool integer) {
    double lo = -INFINITY, hi = INFINITY;
    bool lo_ex = false, hi_ex = false;
    const auto bound = [&](const char* key, bool upper, bool exclusive) {
      const auto it = s.find(key);
      if (it == s.end()) return;
      if (!it->is_number()) fail(where, std::string("'") + key + "' must be a number");
      const double v = it->get<double>();
      if (upper ? (v < hi || (v == hi && exclusive)) : (v > lo || (v == lo && exclusive))) {
        (upper ? hi : lo) = v;
        (upper ? hi_ex : lo_ex) = exclusive;
      }
    };
    bound("minimum", false, false);
    bound("exclusiveMinimum", false, true);
    bound("maximum", true, false);
    bound("exclusiveMaximum", true, true);
    const bool bounded = std::isfinite(lo) || std::isfinite(hi);
    if (!integer && !bounded) return grammar_pattern(g_, from, kNumberPattern, where);
    // Integers in range.
    const int64_t L = std::isfinite(lo) ? clamp(lo_ex ? std::floor(lo) + 1 : std::ceil(lo)) : -kMaxMagnitude;
    const int64_t H = std::isfinite(hi) ? clamp(hi_ex ? std::ceil(hi) - 1 : std::floor(hi)) : kMaxMagnitude;
    const int32_t end = g_.add_node();
    if (L <= H) eps(int_range(from, L, H), end);
    if (integer) return end;
    // I.f (0 <= f < 1) stays in range when lo <= I and I + 1 <= hi; -I.f when
    // -hi <= I (strictly under an exclusive bound) and I + 1 <= -lo.
    const int64_t pos_lo = std::max<int64_t>(0, L);
    const int64_t pos_hi = std::isfinite(hi) ? clamp(std::floor(hi) - 1) : kMaxMagnitude;
    if (pos_lo <= pos_hi) eps(grammar_pattern(g_, uint_range(from, pos_lo, pos_hi), kFraction, where), end);
    const int64_t neg_lo = std::isfinite(hi) ? std::max<int64_t>(0, clamp(hi_ex ? std::floor(-hi) + 1 : std::ceil(-hi))) : 0;
    const int64_t neg_hi = std::isfinite(lo) ? clamp(std::floor(-lo) - 1) : kMaxMagnitude;
    if (neg_lo <= neg_hi) {
      eps(grammar_pattern(g_, uint_range(lit(from, "-"), neg_lo, neg_hi), kFraction, where), end);
    }
    return end;
  }

  const Json& root_;
  Grammar g_;
  std::map<const Json*, int32_t> rules_;
  int32_t any_rule_ = -1;
  int depth_ = 0;
};

Json parse(std::string_view text) {
  try {
    return Json::parse(text);
  } catch (const std::exception& e) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, std::string("[json-schema] malformed schema: ") + e.what());
  }
}

}  // namespace

std::string canonical_json_schema(std::string_view schema_text) { return parse(schema_text).dump(); }

Grammar compile_json_schema(std::string_view schema_text) {
  const Json root = parse(schema_text);
  if (!root.is_object() && !root.is_boolean()) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[json-schema] #: a schema must be an object or a boolean");
  }
  return Compiler(root).run();
}

}  // namespace lilims::runtime
