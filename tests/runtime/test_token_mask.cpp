// The fast token mask (vocabulary trie, per-node walks kept) against brute
// force: every token's bytes fed one by one from the grammar state, on random
// walks through every schema feature, over a synthetic vocabulary and over
// SmolLM2's.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

#include "runtime/engine.h"
#include "runtime/constrain/json_schema.h"
#include "runtime/constrain/token_mask.h"
#include "runtime/constrain/tools.h"
#include "test_util.h"

namespace lilims::runtime {
namespace {

// One schema per feature, then the repo's example schemas and tools.
std::vector<std::pair<std::string, std::string>> feature_schemas() {
  std::vector<std::pair<std::string, std::string>> out = {
      {"object", R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},"required":["b"]})"},
      {"string lengths", R"({"type":"object","properties":{"s":{"type":"string","minLength":2,"maxLength":6}},"required":["s"]})"},
      {"free string", R"({"type":"string"})"},
      // Long enough for positions that share one mask (beyond the longest token).
      {"long bounded strings", R"({"type":"array","items":{"type":"string","minLength":45,"maxLength":120},"maxItems":2})"},
      {"enum/const", R"({"type":"object","properties":{"e":{"enum":["red","green",3,null,{"x":[1,2]}]},"k":{"const":"on"}},"required":["e","k"]})"},
      {"pattern", R"({"type":"object","properties":{"p":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},"q":{"type":"string","pattern":"ab+c"}},"required":["p","q"]})"},
      {"formats", R"({"type":"array","prefixItems":[{"type":"string","format":"date"},{"type":"string","format":"time"},{"type":"string","format":"date-time"},{"type":"string","format":"uuid"},{"type":"string","format":"email"}],"items":false,"minItems":5})"},
      {"integer range", R"({"type":"object","properties":{"i":{"type":"integer","minimum":-40,"maximum":1234}},"required":["i"]})"},
      {"number bounds", R"({"type":"array","items":{"type":"number","exclusiveMinimum":-2.5,"maximum":100}})"},
      {"top-level number", R"({"type":"number"})"},
      {"array", R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":4})"},
      {"anyOf", R"({"anyOf":[{"type":"object","properties":{"x":{"type":"integer"}},"required":["x"]},{"type":"object","properties":{"y":{"type":"string"}},"required":["y"]},{"type":"null"}]})"},
      {"$ref recursion", R"({"$defs":{"n":{"type":"object","properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/n"}}},"required":["v"]}},"$ref":"#/$defs/n"})"},
      {"any value", R"({})"},
      // Strings whose rule ends at the closing quote ($ref makes a rule of
      // its own), so tokens that go on after it are decided by the caller.
      {"strings ending a rule", R"({"$defs":{"s":{"type":"string","maxLength":5},"t":{"type":"string","minLength":2}},"type":"array","items":{"anyOf":[{"$ref":"#/$defs/s"},{"$ref":"#/$defs/t"}]}})"},
      {"unbounded string with a minimum", R"({"type":"object","properties":{"u":{"type":"string","minLength":3},"v":{"type":"string","maxLength":0}},"required":["u","v"]})"},
  };
  const std::string dir = test::source_path("examples");
  for (const char* f : {"schemas/event.json", "schemas/person.json", "schemas/order.json", "schemas/todo.json"}) {
    out.emplace_back(f, test::read_file(dir + "/" + f));
  }
  std::vector<Tool> tools;
  for (const char* f : {"open_app", "set_timer", "send_message", "take_photo", "navigate"}) {
    for (Tool& t : parse_tools(test::read_file(dir + "/tools/" + f + ".json"))) tools.push_back(t);
  }
  out.emplace_back("tools", tools_schema(tools));
  return out;
}

// Tokens a byte-level BPE vocabulary would have around JSON: every single
// byte, JSON punctuation runs, words with and without a leading space,
// digits, escapes and pieces of multi-byte characters.
std::vector<std::string> synthetic_vocab(uint64_t seed) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, (char)b));
  const std::vector<std::string> parts = {
      "{", "}", "[", "]", "\"", ":", ",", " ", "\":", "\",", "\"}", "{\"", "}}", "]}", "\\", "\\n",
      "\\u", "00", "e9", "D8", "true", "false", "null", "0", "1", "12", "345", "-", ".", "e", "E+",
      "name", "arguments", "open", "_app", "camera", "set", "timer", "a", "b", "c", "ab", "AB", "-1",
      "x", "y", "v", "kids", "2024", "-0", "1-", ":0", "T", "Z", "@", "mail", ".com", "red", "on",
      "\xC3\xA9", "\xC3", "\xA9", "\xE6\x97\xA5", "\xF0\x9F", "\x98\x80", "\xED\xA0", "\t", "\n"};
  std::mt19937_64 rng(seed);
  while (v.size() < 6000) {
    std::string t;
    const int n = 1 + (int)(rng() % 4);
    for (int k = 0; k < n; ++k) t += parts[rng() % parts.size()];
    v.push_back(t);
  }
  v.push_back("");  // a control token: never usable
  return v;
}

struct Stats {
  int states = 0, mismatches = 0;
  std::string first;
};

// Random walks from the start: at each state the fast mask must equal
// brute force; the next token is drawn from the allowed ones (now and then
// a single-byte one, so that walks also reach the ends of values).
void compare_walks(const std::vector<std::string>& pieces, const std::vector<bool>& usable,
                   const std::string& name, const std::string& schema_text, int walks,
                   int steps, uint64_t seed, Stats* st) {
  SchemaCache cache(pieces, usable);
  const std::shared_ptr<const CompiledSchema> compiled = cache.get(schema_text);
  const Grammar& g = compiled->grammar();
  std::vector<uint8_t> fast(pieces.size());
  for (int w = 0; w < walks; ++w) {
    std::mt19937_64 rng(seed * 1000 + (uint64_t)w);
    SchemaConstraint sc(compiled);
    GrammarMatcher ref(g);  // the test's own matcher: no trie, no node masks
    GrammarMatcher::State state = ref.start(), probe;
    std::string text;
    for (int step = 0; step < steps && !(state.ended && state.tops.empty()); ++step) {
      sc.fill_mask(fast.data());
      std::vector<int32_t> allowed, single;
      ++st->states;
      for (int32_t id = 0; id < (int32_t)pieces.size(); ++id) {
        const bool brute = usable[(size_t)id] && !pieces[(size_t)id].empty() &&
                           ref.feed(state, pieces[(size_t)id], &probe) && !GrammarMatcher::dead(probe);
        if (brute != (fast[(size_t)id] != 0)) {
          if (++st->mismatches <= 5) {
            st->first += name + " (seed " + std::to_string(seed) + ", walk " + std::to_string(w) +
                         ") after '" + text + "': token " + std::to_string(id) + " '" +
                         pieces[(size_t)id] + "' brute " + std::to_string(brute) + " fast " +
                         std::to_string(fast[(size_t)id]) + "\n";
          }
        }
        if (brute) {
          allowed.push_back(id);
          if (pieces[(size_t)id].size() == 1) single.push_back(id);
        }
      }
      if (allowed.empty()) break;
      const bool pick_single = !single.empty() && rng() % 3 == 0;
      const std::vector<int32_t>& from = pick_single ? single : allowed;
      const int32_t next = from[rng() % from.size()];
      ASSERT_TRUE(sc.advance(next));
      ASSERT_TRUE(ref.feed(state, pieces[(size_t)next], &probe));
      state = probe;
      text += pieces[(size_t)next];
    }
  }
}

TEST(TokenMask, FastEqualsBruteForceSyntheticVocab) {
  const uint64_t seed = 20261123;
  const std::vector<std::string> pieces = synthetic_vocab(seed);
  std::vector<bool> usable(pieces.size(), true);
  usable[7] = false;  // an end-of-generation token: never in the mask
  Stats st;
  for (const auto& [name, schema] : feature_schemas()) {
    compare_walks(pieces, usable, name, schema, 6, 60, seed, &st);
  }
  EXPECT_EQ(st.mismatches, 0) << st.mismatches << " mismatches over " << st.states
                              << " states:\n" << st.first;
  EXPECT_GT(st.states, 500);
}

TEST(TokenMask, FastEqualsBruteForceSmolLM2Vocab) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = Model::open(path);
  const std::vector<std::string>& pieces = model->pieces();
  std::vector<bool> usable(pieces.size());
  for (size_t id = 0; id < pieces.size(); ++id) {
    usable[id] = !pieces[id].empty() && !model->tokenizer().is_eog((int32_t)id);
  }
  Stats st;
  uint64_t seed = 11;
  for (const auto& [name, schema] : feature_schemas()) {
    compare_walks(pieces, usable, name, schema, 1, 12, seed++, &st);
  }
  EXPECT_EQ(st.mismatches, 0) << st.mismatches << " mismatches over " << st.states
                              << " states:\n" << st.first;
}

TEST(TokenMask, CacheIsKeyedByCanonicalText) {
  const std::vector<std::string> pieces = synthetic_vocab(1);
  SchemaCache cache(pieces, std::vector<bool>(pieces.size(), true));
  const auto a = cache.get(R"({"type":"object","properties":{"a":{"type":"integer"}}})");
  const auto b = cache.get("{ \"type\": \"object\",\n  \"properties\": { \"a\": { \"type\": \"integer\" } } }");
  const auto c = cache.get(R"({"properties":{"a":{"type":"integer"}},"type":"object"})");
  EXPECT_EQ(a.get(), b.get());
  EXPECT_NE(a.get(), c.get());  // key order is part of a schema (property order is)
  EXPECT_EQ(cache.size(), 2u);
}

}  // namespace
}  // namespace lilims::runtime
