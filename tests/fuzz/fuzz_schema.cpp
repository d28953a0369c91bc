// libFuzzer target for JSON Schema compilation and the byte grammar it
// gives.  Input: a schema text, optionally followed by a NUL byte and
// choice bytes.  For any input, compile_json_schema either returns a grammar
// or throws lilims::Error with LILIMS_ERR_INVALID_ARGUMENT: another error,
// another exception type, a crash or a hang is a bug.  When it compiles, a
// text is walked through the grammar byte by byte: while choice bytes last,
// each picks one of the bytes the grammar allows next (or ends the text
// where it may end), then the shortest way to the end (not walked when it
// is over 16 KiB).  The grammar must always leave a way to the end, and the
// text must be JSON that the independent validator of
// tests/runtime/schema_validator.h accepts for the schema, properties in the
// schema's order.  The text is also read as a tool list (runtime/constrain/tools.h):
// when it is one, its answer schema goes through the same checks.  A schema
// nlohmann::json does not parse, or a pattern std::regex does not take or
// would mishandle (any string of the schema with more than 9 digits in a row
// or more than three of * + {), skips that last check.
//
// Run: scripts/fuzz.sh schema SECONDS
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../runtime/schema_validator.h"  // first: its pragma must precede <regex>
#include "base/error.h"
#include "runtime/constrain/json_schema.h"
#include "runtime/constrain/tools.h"

namespace {

using lilims::runtime::Grammar;
using lilims::runtime::GrammarMatcher;

[[noreturn]] void violated(const std::string& what, std::string_view schema, const std::string& text) {
  std::fprintf(stderr, "fuzz_schema: property violated: %s\nschema: %.*s\ntext: %s\n", what.c_str(),
               (int)schema.size(), schema.data(), text.c_str());
  std::abort();
}

// Bytes of the longest text walked to its end.
constexpr int64_t kLongestWalk = 1 << 14;

// The walk's text, or a violation when the grammar leaves no way to the end;
// nothing when the shortest text is longer than kLongestWalk.
std::optional<std::string> walk(const Grammar& g, std::string_view schema, const uint8_t* choice,
                                size_t n_choice) {
  GrammarMatcher m(g);
  const std::vector<int32_t> dist = g.distances_to_end(nullptr, nullptr);
  GrammarMatcher::State s = m.start(), next;
  std::string text;
  size_t c = 0;
  const int64_t shortest = m.min_completion(s, dist);
  if (shortest >= Grammar::kInfinite) violated("no way to the end from the start", schema, text);
  // A schema whose shortest text is longer than any context (a pattern
  // group {100} inside {100} inside {100}) is valid, but too long to walk.
  if (shortest > kLongestWalk) return std::nullopt;
  // Each step after the choices shortens the way to the end by one byte; the
  // bound only stops a walk whose distances do not.
  for (int64_t step = 0; step <= (int64_t)n_choice + kLongestWalk; ++step) {
    if (m.min_completion(s, dist) >= Grammar::kInfinite) violated("no way to the end from here", schema, text);
    struct Option {
      uint8_t byte;
      int64_t left;
    };
    std::vector<Option> options;
    for (int b = 0; b < 256; ++b) {
      m.step(s, (uint8_t)b, &next);
      if (GrammarMatcher::dead(next)) continue;
      const int64_t l = m.min_completion(next, dist);
      if (l < Grammar::kInfinite) options.push_back({(uint8_t)b, l});
    }
    if (options.empty() && !s.ended) violated("not ended and no byte may follow", schema, text);
    if (c < n_choice) {
      const size_t k = choice[c++] % (options.size() + (s.ended ? 1 : 0));
      if (k == options.size()) return text;  // end here
      text.push_back((char)options[k].byte);
      m.step(s, options[k].byte, &next);
      s = next;
      continue;
    }
    if (s.ended) return text;
    if (c == n_choice && m.min_completion(s, dist) > kLongestWalk) return std::nullopt;
    const Option* best = &options[0];
    for (const Option& o : options) {
      if (o.left < best->left) best = &o;
    }
    text.push_back((char)best->byte);
    m.step(s, best->byte, &next);
    s = next;
  }
  violated("the shortest way to the end did not end", schema, text);
}

// A string std::regex would mishandle as a pattern: a repeat count past
// what its parser holds in a long (libstdc++ 12 multiplies without a check:
// UB, not our code's), or more than three repeats, which its backtracking
// matcher can take exponential time over.
bool std_regex_unsafe(const lilims::test::J& v) {
  if (v.is_string()) {
    int run = 0, repeats = 0;
    for (char ch : v.get<std::string>()) {
      run = ch >= '0' && ch <= '9' ? run + 1 : 0;
      repeats += ch == '*' || ch == '+' || ch == '{';
      if (run > 9 || repeats > 3) return true;
    }
    return false;
  }
  if (v.is_structured()) {
    for (const auto& item : v) {
      if (std_regex_unsafe(item)) return true;
    }
  }
  return false;
}

void check_text(std::string_view schema, const std::string& text) {
  using lilims::test::J;
  J root;
  try {
    root = J::parse(schema);
  } catch (const J::exception&) {
    return;
  }
  if (std_regex_unsafe(root)) return;
  J value;
  try {
    value = J::parse(text);
  } catch (const J::exception& e) {
    violated(std::string("the text is not JSON: ") + e.what(), schema, text);
  }
  std::string why;
  try {
    why = lilims::test::validate(root, root, value, "");
    if (why.empty()) why = lilims::test::check_order(root, root, value, "");
  } catch (const std::regex_error&) {
    return;
  } catch (const J::exception&) {
    return;  // a schema the validator reads differently (a keyword's value of another type)
  }
  if (!why.empty()) violated("the text does not validate: " + why, schema, text);
}

void compile_and_walk(std::string_view schema, const uint8_t* choice, size_t n_choice) {
  Grammar g;
  try {
    g = lilims::runtime::compile_json_schema(schema);
  } catch (const lilims::Error& e) {
    if (e.status() != LILIMS_ERR_INVALID_ARGUMENT) violated(std::string("error ") + e.what(), schema, "");
    return;
  }
  if (const std::optional<std::string> text = walk(g, schema, choice, n_choice)) check_text(schema, *text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view schema = in.substr(0, nul);
  const uint8_t* choice = nul == std::string_view::npos ? nullptr : data + nul + 1;
  const size_t n_choice = nul == std::string_view::npos ? 0 : size - nul - 1;
  compile_and_walk(schema, choice, n_choice);
  // The same text as a tool list: its answer schema must compile and walk
  // the same way.
  std::string tools;
  try {
    tools = lilims::runtime::tools_schema(lilims::runtime::parse_tools(schema));
  } catch (const lilims::Error& e) {
    if (e.status() != LILIMS_ERR_INVALID_ARGUMENT) violated(std::string("tools: error ") + e.what(), schema, "");
    return 0;
  }
  compile_and_walk(tools, choice, n_choice);
  return 0;
}
