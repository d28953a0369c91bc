// The JSON prefix recognizer against an independent JSON parser
// (nlohmann::json::accept): every prefix of a valid document is accepted,
// a text it calls complete parses, and texts the parser rejects never
// complete.
#include <algorithm>
#include <random>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "runtime/constrain/json_constraint.h"
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
                          "{\"a\":[1,]}", "{}}", "{\"a\":\"\xc0\xaf\"}", "{\"a\":-}",
                          // UTF-16 surrogates must pair up: high then low
                          "{\"a\":\"\\uD83D\"}", "{\"a\":\"\\uDE00\"}", "{\"a\":\"\\uD83D\\u0041\"}",
                          "{\"a\":\"\\uD83Dx\"}"}) {
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

// Random JSON texts the recognizer accepts whole: every kind of value,
// escapes, \u, multi-byte UTF-8 at the edges of the allowed ranges, numbers
// with fractions and exponents, whitespace runs of at most two.
class RandomJson {
 public:
  explicit RandomJson(uint32_t seed) : rng_(seed) {}

  std::string document() {
    std::string s;
    object(0, &s);
    return s;
  }

 private:
  int pick(int n) { return (int)(rng_() % (uint32_t)n); }
  void ws(std::string* s) {
    if (pick(3) == 0) *s += " \n\t\r"[pick(4)];
  }
  void object(int depth, std::string* s) {
    *s += '{';
    ws(s);
    const int n = depth > 3 ? 0 : pick(4);
    for (int i = 0; i < n; ++i) {
      if (i) { *s += ','; ws(s); }
      string(s);
      ws(s);
      *s += ':';
      ws(s);
      value(depth + 1, s);
      ws(s);
    }
    *s += '}';
  }
  void array(int depth, std::string* s) {
    *s += '[';
    ws(s);
    const int n = depth > 3 ? 0 : pick(4);
    for (int i = 0; i < n; ++i) {
      if (i) { *s += ','; ws(s); }
      value(depth + 1, s);
      ws(s);
    }
    *s += ']';
  }
  void string(std::string* s) {
    static const char* const kParts[] = {"a", "Z", " ", "\\\"", "\\\\", "\\/", "\\n", "\\u00e9",
                                         "\\uD83D\\uDE00", "é", "日", "😀", "\xED\x9F\xBF", "\xF4\x8F\xBF\xBF",
                                         "\xE0\xA0\x80", "\xF0\x90\x80\x80", "{", "]", ":"};
    *s += '"';
    for (int n = pick(4); n > 0; --n) *s += kParts[pick(sizeof kParts / sizeof kParts[0])];
    *s += '"';
  }
  void number(std::string* s) {
    if (pick(2)) *s += '-';
    if (pick(3) == 0) {
      *s += '0';
    } else {
      *s += (char)('1' + pick(9));
      for (int n = pick(3); n > 0; --n) *s += (char)('0' + pick(10));
    }
    if (pick(2)) {
      *s += '.';
      for (int n = 1 + pick(2); n > 0; --n) *s += (char)('0' + pick(10));
    }
    if (pick(2)) {
      *s += "eE"[pick(2)];
      if (pick(2)) *s += "+-"[pick(2)];
      for (int n = 1 + pick(2); n > 0; --n) *s += (char)('0' + pick(10));
    }
  }
  void value(int depth, std::string* s) {
    switch (pick(7)) {
      case 0: object(depth, s); break;
      case 1: array(depth, s); break;
      case 2: string(s); break;
      case 3: case 4: number(s); break;
      default: *s += pick(3) == 0 ? "true" : pick(2) ? "false" : "null"; break;
    }
  }
  std::mt19937 rng_;
};

// States already reached, bucketed by the bytes they accept so that the
// exact comparison runs on few candidates.
class SeenStates {
 public:
  bool insert(const JsonPrefix& p) {
    std::string key(33, '\0');
    for (int b = 0; b < 256; ++b) {
      JsonPrefix q = p;
      if (q.feed_byte((uint8_t)b)) key[(size_t)b / 8] = (char)(key[(size_t)b / 8] | 1 << (b % 8));
    }
    key[32] = p.complete() ? 1 : 0;
    std::vector<JsonPrefix>& bucket = buckets_[key];
    if (std::find(bucket.begin(), bucket.end(), p) != bucket.end()) return false;
    bucket.push_back(p);
    return true;
  }

 private:
  std::unordered_map<std::string, std::vector<JsonPrefix>> buckets_;
};

// The fewest bytes that complete `start`, by breadth-first search over every
// byte from every distinct state; -1 if none within `limit`.
int shortest_completion_bfs(const JsonPrefix& start, int limit) {
  std::vector<JsonPrefix> level{start};
  SeenStates seen;
  seen.insert(start);
  for (int d = 0; d <= limit; ++d) {
    for (const JsonPrefix& s : level) {
      if (s.complete()) return d;
    }
    std::vector<JsonPrefix> next;
    for (const JsonPrefix& s : level) {
      for (int b = 0; b < 256; ++b) {
        JsonPrefix p = s;
        if (p.feed_byte((uint8_t)b) && seen.insert(p)) next.push_back(p);
      }
    }
    level.swap(next);
  }
  return -1;
}

// For prefixes of random valid texts: the completion is the shortest one a
// byte-by-byte search finds, it closes the text into something a parser
// accepts, and it is canonical (after its first byte the rest is the
// completion), which is what lets generation close one token at a time.
TEST(JsonPrefix, CompletionIsShortestByBruteForce) {
  const uint32_t seed = 20261123;
  RandomJson gen(seed);
  int checked = 0;
  for (int doc = 0; doc < 40; ++doc) {
    const std::string d = gen.document();
    ASSERT_TRUE(nlohmann::json::accept(d)) << d;
    ASSERT_TRUE(complete_json(d)) << "seed " << seed << ": the recognizer refuses " << d;
    for (size_t cut = 0; cut <= d.size(); ++cut) {
      JsonPrefix p;
      ASSERT_TRUE(p.feed(d.substr(0, cut)));
      const std::string c = p.completion();
      ASSERT_EQ(p.min_completion(), (int)c.size());
      const std::string closed = d.substr(0, cut) + c;
      EXPECT_TRUE(complete_json(closed)) << "seed " << seed << ": " << closed;
      EXPECT_TRUE(nlohmann::json::accept(closed)) << "seed " << seed << ": " << closed;
      EXPECT_EQ(shortest_completion_bfs(p, (int)c.size()), (int)c.size())
          << "seed " << seed << ", prefix '" << d.substr(0, cut) << "', completion '" << c << "'";
      if (!c.empty()) {
        JsonPrefix next = p;
        ASSERT_TRUE(next.feed_byte((uint8_t)c[0]));
        EXPECT_EQ(next.completion(), c.substr(1)) << "seed " << seed << ": " << d.substr(0, cut);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 1000);
}

// A top-level value that is not an object: a number there ends only at a
// following byte, so it is not complete until one comes.
TEST(JsonPrefix, TopLevelNumberNeedsATerminator) {
  JsonPrefix p(false);
  ASSERT_TRUE(p.feed("12"));
  EXPECT_FALSE(p.complete());
  EXPECT_EQ(p.min_completion(), shortest_completion_bfs(p, 4));
  EXPECT_EQ(p.min_completion(), 1);
}

// The real vocabularies have a single-byte token for every byte a
// completion uses, so closing takes exactly min_completion() tokens, each of
// which lowers tokens_to_close() by one.
void check_vocabulary_closes(const std::string& path) {
  auto model = Model::open(path);
  const JsonClosers& closers = model->json_closers();
  RandomJson gen(77);
  for (int doc = 0; doc < 30; ++doc) {
    const std::string d = gen.document();
    for (size_t cut = 0; cut <= d.size(); ++cut) {
      JsonPrefix p;
      ASSERT_TRUE(p.feed(d.substr(0, cut)));
      int left = closers.tokens_to_close(p);
      ASSERT_EQ(left, p.min_completion()) << path << ": a byte of '" << p.completion()
                                          << "' has no token";
      while (!p.complete()) {
        const int32_t id = closers.byte_token((uint8_t)p.completion()[0]);
        ASSERT_GE(id, 0);
        ASSERT_TRUE(p.feed(model->pieces()[(size_t)id]));
        ASSERT_EQ(closers.tokens_to_close(p), --left);
      }
      ASSERT_EQ(left, 0);
    }
  }
}

TEST(JsonClosers, Stories260KVocabularyCloses) {
  const std::string path = test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data/stories260K, see SOURCES.md");
  check_vocabulary_closes(path);
}

TEST(JsonClosers, SmolLM2VocabularyCloses) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  check_vocabulary_closes(path);
}

TEST(JsonPrefix, WhitespaceRunsAreBounded) {
  JsonPrefix p;
  EXPECT_TRUE(p.feed("{  "));
  EXPECT_FALSE(p.feed(" "));
  EXPECT_TRUE(complete_json("{\"a\": 1}"));
}

}  // namespace
}  // namespace lilims::runtime
