// JSON Schema to grammar: which texts each keyword accepts and refuses, and
// the errors for malformed and unsupported schemas.
#include <gtest/gtest.h>

#include <string>

#include "base/error.h"
#include "runtime/constrain/json_schema.h"

namespace lilims::runtime {
namespace {

// Whether `text` is a complete value of the schema's grammar.
bool matches(const Grammar& g, const std::string& text) {
  GrammarMatcher m(g);
  GrammarMatcher::State s;
  return m.feed(m.start(), text, &s) && s.ended;
}

struct Case {
  const char* text;
  bool ok;
};

void expect_cases(const std::string& schema, const std::vector<Case>& cases) {
  const Grammar g = compile_json_schema(schema);
  for (const Case& c : cases) {
    EXPECT_EQ(matches(g, c.text), c.ok) << "schema " << schema << "\ntext " << c.text;
  }
}

std::string error_of(const std::string& schema) {
  try {
    compile_json_schema(schema);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  return "";
}

TEST(JsonSchema, ObjectOrderRequiredOptionalWhitespace) {
  expect_cases(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
                  "c":{"type":"boolean"}},"required":["a"],"additionalProperties":false})",
               {{R"({"a":1})", true},
                {R"({"a":1,"b":"x"})", true},
                {R"({"a": 1, "b": "x", "c": true})", true},
                {R"({"a":1,"c":false})", true},
                {R"({"b":"x","a":1})", false},  // order as given
                {R"({})", false},               // a is required
                {R"({"a":1,})", false},
                {R"({ "a":1})", false},         // no space after '{'
                {R"({"a":  1})", false},        // one space at most
                {R"({"a":01})", false},
                {R"({"a":1,"d":2})", false}});
  expect_cases(R"({"type":"object","properties":{"x":{"type":"null"},"y":{"type":"null"}}})",
               {{"{}", true}, {R"({"y":null})", true}, {R"({"x":null,"y":null})", true},
                {R"({"y":null,"x":null})", false}});
}

TEST(JsonSchema, Strings) {
  expect_cases(R"({"type":"string","minLength":2,"maxLength":3})",
               {{R"("ab")", true}, {R"("abc")", true}, {R"("a\u00e9")", true}, {"\"\xC3\xA9\xC3\xA9\"", true},
                {R"("a\n")", true}, {R"("a")", false}, {R"("abcd")", false}, {R"("a\ud800")", false},
                {"\"a\x01\"", false}, {"\"a\xC3\"", false}});
  expect_cases(R"({"type":"string"})", {{R"("")", true}, {"\"\xF0\x9F\x98\x80 \xE6\x97\xA5\"", true},
                                        {"\"\xED\xA0\x80\"", false}, {"\"\xC0\xAF\"", false}});
  expect_cases(R"({"enum":["red","green",3,null,{"x":[1,2]}]})",
               {{R"("red")", true}, {R"("green")", true}, {"3", true}, {"null", true},
                {R"({"x":[1,2]})", true}, {R"("blue")", false}, {"4", false}});
  expect_cases(R"({"const":"on"})", {{R"("on")", true}, {R"("off")", false}});
  expect_cases(R"({"type":"string","enum":["a",1]})", {{R"("a")", true}, {"1", false}});
}

TEST(JsonSchema, Patterns) {
  expect_cases(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"})",
               {{R"("AB-123")", true}, {R"("AB-12")", false}, {R"("ab-123")", false}});
  expect_cases(R"({"type":"string","pattern":"abc"})",
               {{R"("xxabcyy")", true}, {R"("abc")", true}, {R"("ab")", false}});
  expect_cases(R"({"type":"string","pattern":"^(cat|dog)s?$"})",
               {{R"("cats")", true}, {R"("dog")", true}, {R"("cow")", false}});
  expect_cases(R"({"type":"string","pattern":"^a\"b\\\\c[^x]$"})",
               {{R"("a\"b\\cy")", true}, {R"("a\"b\\cx")", false}, {"\"a\\\"b\\\\c\xC3\xA9\"", true}});
  expect_cases(R"({"type":"string","pattern":"^x{2,}y?.$"})",
               {{R"("xxz")", true}, {R"("xxxxyz")", true}, {R"("xz")", false}});
}

TEST(JsonSchema, Formats) {
  expect_cases(R"({"type":"string","format":"date"})",
               {{R"("2024-02-28")", true}, {R"("2024-12-31")", true}, {R"("2024-13-01")", false},
                {R"("2024-04-31")", false}, {R"("24-01-01")", false}});
  expect_cases(R"({"type":"string","format":"time"})",
               {{R"("12:30:00Z")", true}, {R"("23:59:59.5+01:00")", true}, {R"("24:00:00Z")", false},
                {R"("12:30:00")", false}});
  expect_cases(R"({"type":"string","format":"date-time"})",
               {{R"("2024-01-02T03:04:05-07:30")", true}, {R"("2024-01-02 03:04:05Z")", false}});
  expect_cases(R"({"type":"string","format":"uuid"})",
               {{R"("123e4567-e89b-12d3-a456-426614174000")", true},
                {R"("123e4567-e89b-12d3-a456-42661417400")", false}});
  expect_cases(R"({"type":"string","format":"email"})",
               {{R"("a.b@c.de")", true}, {R"("x_y+z@mail.example.org")", true}, {R"("a@b")", false},
                {R"(".a@b.c")", false}, {R"("a@-b.c")", false}});
}

TEST(JsonSchema, IntegerRangesExhaustive) {
  struct R {
    const char* schema;
    int lo, hi;  // inclusive
  };
  for (const R& r : {R{R"({"type":"integer","minimum":-5,"maximum":123})", -5, 123},
                     R{R"({"type":"integer","exclusiveMinimum":-5,"exclusiveMaximum":123})", -4, 122},
                     R{R"({"type":"integer","minimum":7,"maximum":7})", 7, 7},
                     R{R"({"type":"integer","minimum":-300,"maximum":-20})", -300, -20},
                     R{R"({"type":"integer","minimum":0.5,"maximum":99.5})", 1, 99},
                     R{R"({"type":"integer","minimum":10})", 10, 100000},
                     R{R"({"type":"integer","maximum":-10})", -100000, -10}}) {
    const Grammar g = compile_json_schema(r.schema);
    for (int v = -1200; v <= 1200; ++v) {
      EXPECT_EQ(matches(g, std::to_string(v)), v >= r.lo && v <= r.hi) << r.schema << " " << v;
    }
    EXPECT_FALSE(matches(g, "-0")) << r.schema;
    EXPECT_FALSE(matches(g, "007")) << r.schema;
  }
}

TEST(JsonSchema, NumbersWithBounds) {
  expect_cases(R"({"type":"number","minimum":0,"exclusiveMaximum":10})",
               {{"0", true}, {"9.5", true}, {"9.999", true}, {"5", true}, {"10", false},
                {"-0.5", false}, {"10.0", false}, {"1e3", false}});
  expect_cases(R"({"type":"number","minimum":-2.5,"maximum":-1})",
               {{"-2", true}, {"-1", true}, {"-1.5", true}, {"-1.0", true}, {"-0.5", false}, {"-3", false}});
  expect_cases(R"({"type":"number"})",
               {{"0", true}, {"-1.25e-3", true}, {"1E+10", true}, {"01", false}, {"1.", false},
                {".5", false}, {"1e", false}});
}

TEST(JsonSchema, ArraysAndTuples) {
  expect_cases(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})",
               {{"[1]", true}, {"[1,2,3]", true}, {"[1, 2]", true}, {"[]", false}, {"[1,2,3,4]", false},
                {"[1,]", false}, {"[\"a\"]", false}});
  expect_cases(R"({"type":"array","prefixItems":[{"type":"string"},{"type":"integer"}],"items":false})",
               {{R"(["a",1])", true}, {R"(["a"])", true}, {"[]", true}, {R"(["a",1,2])", false},
                {R"([1])", false}});
  expect_cases(R"({"type":"array","items":{"type":"boolean"}})",
               {{"[]", true}, {"[true,false,true,true]", true}, {"[true,1]", false}});
  expect_cases(R"({"type":"array","minItems":2})", {{R"([1,"x"])", true}, {"[{}]", false}});
}

TEST(JsonSchema, AnyOfRefsRecursionAndAnyValue) {
  expect_cases(R"({"anyOf":[{"type":"string","maxLength":1},{"type":"integer","minimum":3}]})",
               {{R"("a")", true}, {"3", true}, {"2", false}, {R"("ab")", false}});
  expect_cases(R"({"oneOf":[{"type":"null"},{"type":"boolean"}]})", {{"null", true}, {"true", true}, {"1", false}});
  expect_cases(R"({"type":["string","null"]})", {{"null", true}, {R"("x")", true}, {"1", false}});
  const std::string tree = R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},
      "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},"$ref":"#/$defs/node"})";
  expect_cases(tree, {{R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3}]})", true},
                      {R"({"v":1,"kids":[{"v":2,"kids":[{"v":4,"kids":[{"v":5}]}]}]})", true},
                      {R"({"v":1,"kids":[{"kids":[]}]})", false}});
  expect_cases(R"({"type":"object","properties":{"self":{"$ref":"#"}}})",
               {{R"({"self":{"self":{}}})", true}, {R"({"self":1})", false}});
  expect_cases("{}", {{R"({"x":[1,true,null,"s",{"y":-2.5e3}]})", true}, {"[]", true}, {"\"s\"", true},
                      {"{x:1}", false}, {"[1,]", false}});
  expect_cases("true", {{"false", true}});
}

TEST(JsonSchema, Errors) {
  struct E {
    const char* schema;
    const char* says;
  };
  for (const E& e : {E{"{", "malformed schema"},
                     E{"[1]", "must be an object or a boolean"},
                     E{R"({"allOf":[{}]})", "unsupported keyword 'allOf'"},
                     E{R"({"type":"object","patternProperties":{}})", "unsupported keyword 'patternProperties'"},
                     E{R"({"not":{}})", "unsupported keyword 'not'"},
                     E{R"({"type":"integer","multipleOf":2})", "unsupported keyword 'multipleOf'"},
                     E{R"({"type":"string","format":"ipv4"})", "unsupported format 'ipv4'"},
                     E{R"({"type":"string","pattern":"(?=a)b"})", "lookaround"},
                     E{R"({"type":"string","pattern":"(a)\\1"})", "backreferences"},
                     E{R"({"type":"string","pattern":"a^b"})", "anchors"},
                     E{R"({"type":"string","pattern":"(ab"})", "unclosed '('"},
                     E{R"({"type":"string","pattern":"a{3,1}"})", "max < min"},
                     E{R"({"type":"string","pattern":"a++"})", "may not follow another"},
                     E{R"({"type":"string","pattern":"a{2}*"})", "may not follow another"},
                     E{R"({"type":"string","pattern":"a*?{3}"})", "may not follow another"},
                     E{R"({"type":"string","pattern":"b++++++++++++++++++++++"})", "may not follow another"},
                     E{R"({"$ref":"http://example.com/s.json"})", "only local $ref"},
                     E{R"({"$ref":"#/$defs/missing"})", "points nowhere"},
                     E{R"({"type":"object","properties":{},"required":["x"]})", "required property 'x'"},
                     E{R"({"type":"object","additionalProperties":true})", "additionalProperties"},
                     E{R"({"type":"integer","minLength":2})", "do not apply"},
                     E{R"({"type":"thing"})", "unknown type 'thing'"},
                     E{R"({"enum":[]})", "non-empty array"},
                     E{R"({"type":"integer","minimum":5,"maximum":4})", "no value satisfies"},
                     E{R"({"type":"string","minLength":"2"})", "'minLength' must be a non-negative integer"},
                     E{R"({"type":"object","properties":{"a":{"type":"object","properties":{"b":{"uniqueItems":true}}}}})",
                       "#/properties/a/properties/b: unsupported keyword 'uniqueItems'"},
                     E{R"({"minLength":1,"minimum":2})", "several types"},
                     E{R"({"type":"string","pattern":"\\u00zz"})", "four hex digits"},
                     E{R"({"type":"string","pattern":"\\u12"})", "four hex digits"}}) {
    const std::string msg = error_of(e.schema);
    EXPECT_EQ(msg.rfind("[json-schema] ", 0), 0u) << e.schema << " -> " << msg;
    EXPECT_NE(msg.find(e.says), std::string::npos) << e.schema << " -> " << msg;
  }
}

TEST(JsonSchema, DeepNestingIsAnErrorNotACrash) {
  std::string schema, pattern;
  for (int i = 0; i < 2000; ++i) schema += R"({"type":"array","items":)";
  schema += "{}";
  for (int i = 0; i < 2000; ++i) schema += "}";
  EXPECT_NE(error_of(schema).find("nested deeper than"), std::string::npos);
  for (int i = 0; i < 5000; ++i) pattern += "(";
  EXPECT_NE(error_of(R"({"type":"string","pattern":")" + pattern + "\"}").find("nested deeper than"),
            std::string::npos);
}

// Counted repeats multiply when nested: each of these is a few dozen bytes
// and asked for gigabytes before every grammar state counted against the
// limit (found by tests/fuzz/fuzz_schema.cpp: a pattern's groups, and a
// bounded array of bounded strings, which are copied per item).  Each must
// be refused with the limit named; a smaller one still compiles.
TEST(JsonSchema, GrammarSizeIsBounded) {
  const std::string grouped = R"({"type":"string","pattern":"(((a{100}){100}){100}){100}"})";
  const std::string many = R"({"type":"array","items":{"type":"string","maxLength":512},"maxItems":1024})";
  for (const std::string& schema : {grouped, many}) {
    const std::string msg = error_of(schema);
    EXPECT_NE(msg.find("more than " + std::to_string(runtime::Grammar::kMaxNodes) + " states"),
              std::string::npos)
        << schema << " -> " << msg;
  }
  const runtime::Grammar g =
      runtime::compile_json_schema(R"({"type":"array","items":{"type":"string","maxLength":512},"maxItems":100})");
  EXPECT_LT(g.nodes.size(), runtime::Grammar::kMaxNodes);
  EXPECT_GT(g.nodes.size(), 1000000u);
}

TEST(JsonSchema, CanonicalTextKeepsOrderDropsWhitespace) {
  EXPECT_EQ(canonical_json_schema("{ \"b\" : 1,\n \"a\": [ 2 ] }"), R"({"b":1,"a":[2]})");
}

}  // namespace
}  // namespace lilims::runtime
