// The JSON prefix recognizer against an independent JSON parser
// (nlohmann::json::accept): every prefix of a valid document is accepted,
// a text it calls complete parses, and texts the parser rejects never
// complete.
#include <random>

#include <nlohmann/json.hpp>

#include "runtime/json_constraint.h"
#include "test_util.h"

namespace lilims::runtime {
namespace {

bool complete_json(const std::string& s) {
  JsonPrefix p;
  return p.feed(s) && p.complete();
}

TEST(JsonPrefix, AcceptsEveryPrefixOfValidDocuments) {
  const std::vector<std::string> docs = {
      R"({})",
      R"({"action":"open_app","app":"camera"})",
      R"({"a": [1, -2.5e+3, 0.25, true, false, null], "b": {"c": "\u00e9\n\"x\""}})",
      R"({"emoji":"😀 日本語","n":-0,"e":1E9})",
      R"({"nested":[[[]],[{}],{"k":[{"z":0}]}]})",
  };
  for (const std::string& d : docs) {
    ASSERT_TRUE(nlohmann::json::accept(d)) << d;
    JsonPrefix p;
    for (size_t i = 0; i < d.size(); ++i) {
      ASSERT_TRUE(p.feed_byte((uint8_t)d[i])) << "rejected byte " << i << " of " << d;
      ASSERT_EQ(p.complete(), i + 1 == d.size()) << d << " at " << i;
    }
  }
}

TEST(JsonPrefix, RejectsInvalidContinuations) {
  for (const char* bad : {"[1]", "\"x\"", "{,", "{\"a\" 1}", "{\"a\":01}", "{\"a\":1.}",
                          "{\"a\":tru}", "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":1,}",
                          "{\"a\":[1,]}", "{}}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":-}"}) {
    JsonPrefix p;
    EXPECT_FALSE(p.feed(bad) && p.complete()) << bad;
    EXPECT_FALSE(nlohmann::json::accept(bad) && bad[0] == '{') << bad;
  }
}

TEST(JsonPrefix, RandomTextsAgreeWithAParser) {
  // Random walks over a JSON-ish alphabet: whenever our recognizer says a
  // text is a complete document, the independent parser must accept it.
  const std::string alphabet = "{}[]:,\"ab01-.eE+ tfrulsn\\u";
  std::mt19937 rng(20261122);
  int completes = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::string s = "{";
    JsonPrefix p;
    ASSERT_TRUE(p.feed(s));
    for (int len = 0; len < 24 && !p.complete(); ++len) {
      // pick a byte the recognizer accepts, if any of a few tries does
      for (int tries = 0; tries < 8; ++tries) {
        const char c = alphabet[rng() % alphabet.size()];
        JsonPrefix probe = p;
        if (probe.feed_byte((uint8_t)c)) {
          p = probe;
          s += c;
          break;
        }
      }
    }
    if (p.complete()) {
      ++completes;
      ASSERT_TRUE(nlohmann::json::accept(s)) << "seed 20261122, iteration " << iter << ": " << s;
    }
  }
  EXPECT_GT(completes, 100);
}

// From any prefix, min_completion() bytes chosen to lower it close the
// document, and the result parses: what generation relies on near its limit.
TEST(JsonPrefix, MinCompletionClosesEveryPrefix) {
  const std::vector<std::string> docs = {
      R"({"action":"open_app","app":"camera","args":{"flash":true,"zoom":-1.5e+2,"tags":["a\u00e9",null]}})",
      R"({"k":[[1,2],{"x":"y"}],"z":0})",
  };
  std::string closers;  // every byte, as a vocabulary with byte tokens offers
  for (int c = 1; c < 256; ++c) closers += (char)c;
  for (const std::string& d : docs) {
    for (size_t cut = 1; cut < d.size(); ++cut) {
      JsonPrefix p;
      ASSERT_TRUE(p.feed(d.substr(0, cut)));
      std::string text = d.substr(0, cut);
      const int need = p.min_completion();
      for (int step = 0; step < need; ++step) {
        bool moved = false;
        for (char c : closers) {
          JsonPrefix probe = p;
          if (probe.feed_byte((uint8_t)c) && probe.min_completion() < p.min_completion()) {
            p = probe;
            text += c;
            moved = true;
            break;
          }
        }
        ASSERT_TRUE(moved) << "stuck after " << text;
      }
      ASSERT_TRUE(p.complete()) << text;
      ASSERT_TRUE(nlohmann::json::accept(text)) << text;
    }
  }
}

TEST(JsonPrefix, WhitespaceRunsAreBounded) {
  JsonPrefix p;
  EXPECT_TRUE(p.feed("{  "));
  EXPECT_FALSE(p.feed(" "));
  EXPECT_TRUE(complete_json("{\"a\": 1}"));
}

}  // namespace
}  // namespace lilims::runtime
