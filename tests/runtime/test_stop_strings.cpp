// Stop strings: the matcher alone, then through generation with stop
// strings cut from the pieces of tokens stories260K really generates (so
// the string certainly spans 2 or 3 tokens), and UTF-8 streaming with
// SmolLM2's byte-level tokens for emoji and CJK.
#include <string>
#include <vector>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/stop_strings.h"
#include "test_util.h"
#include "tokenizer/unicode.h"

namespace lilims {
namespace {

using runtime::StopStrings;

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

// The text `s` holds back: the longest proper prefix of a stop string that
// ends `text` (what StopStrings must keep when no stop string has occurred).
size_t expected_hold(const std::string& text, const std::vector<std::string>& stops) {
  size_t keep = 0;
  for (const std::string& s : stops) {
    for (size_t k = 1; k < s.size() && k <= text.size(); ++k) {
      if (text.compare(text.size() - k, k, s, 0, k) == 0) keep = std::max(keep, k);
    }
  }
  return keep;
}

TEST(StopStrings, HoldsBackOnlyWhatCouldStartAStopString) {
  StopStrings s({"World!", "xyz"});
  EXPECT_EQ(s.push("Hello Wo"), "Hello ");  // "Wo" may begin "World!"
  EXPECT_EQ(s.held(), 2u);
  EXPECT_EQ(s.push("rk"), "Work");          // it did not
  EXPECT_EQ(s.push("s x"), "s ");
  EXPECT_EQ(s.push("y"), "");
  EXPECT_FALSE(s.matched());
  EXPECT_EQ(s.flush(), "xy");               // the stream ended: released
}

TEST(StopStrings, AMatchDropsTheStopStringAndWhatFollows) {
  StopStrings s({"END"});
  EXPECT_EQ(s.push("abc E"), "abc ");
  EXPECT_EQ(s.push("NDdef"), "");
  EXPECT_TRUE(s.matched());
  EXPECT_EQ(s.flush(), "");
  EXPECT_EQ(s.push("more"), "");  // nothing after a match
}

TEST(StopStrings, TheFirstMatchToCompleteWins) {
  StopStrings s({"abcd", "bc"});
  EXPECT_EQ(s.push("xab"), "x");
  EXPECT_EQ(s.push("c"), "a");  // "bc" completes before "abcd" could
  EXPECT_TRUE(s.matched());
  // Both complete in one push: the one that starts first.
  StopStrings t({"abcd", "bc"});
  EXPECT_EQ(t.push("xabcd"), "x");
}

TEST(StopStrings, EmptyAndInvalidUtf8Refused) {
  try {
    StopStrings s({"ok", ""});
    FAIL() << "an empty stop string was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("[generate] stop string 1 is empty"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(StopStrings({std::string("\x98\x80")}), Error);  // continuation bytes only
}

// Greedy text from BOS, token by token, without stop strings.
struct Reference {
  std::vector<int32_t> tokens;
  std::vector<std::string> pieces;  // as streamed
  std::string text;
};

Reference reference_run(const runtime::Model& model, int32_t n) {
  runtime::SessionOptions so;
  so.n_ctx = 128;
  so.n_threads = 1;
  runtime::Session s(model, so);
  runtime::GenerateOptions go;
  go.max_tokens = n;
  Reference ref;
  go.on_token = [&](int32_t t, const std::string& piece) {
    if (t >= 0) ref.pieces.push_back(piece);
    return false;
  };
  const runtime::GenerateResult r = s.generate_tokens({1}, go);
  ref.tokens = r.tokens;
  ref.text = r.text;
  EXPECT_EQ(ref.pieces.size(), ref.tokens.size());
  return ref;
}

struct Streamed {
  runtime::GenerateResult result;
  std::vector<std::pair<int32_t, std::string>> calls;
};

Streamed run_with_stops(const runtime::Model& model, int32_t n,
                        const std::vector<std::string>& stops) {
  runtime::SessionOptions so;
  so.n_ctx = 128;
  so.n_threads = 1;
  runtime::Session s(model, so);
  runtime::GenerateOptions go;
  go.max_tokens = n;
  go.stop = stops;
  Streamed out;
  go.on_token = [&](int32_t t, const std::string& piece) {
    out.calls.emplace_back(t, piece);
    return false;
  };
  out.result = s.generate_tokens({1}, go);
  return out;
}

// Checks a run with `stop` against the reference: the text ends right before
// the stop string's first occurrence, and after each token the streamed text
// is the reference text so far minus only what could begin the stop string.
void check_stop(const runtime::Model& model, const Reference& ref, const std::string& stop) {
  SCOPED_TRACE("stop string '" + stop + "'");
  const size_t at = ref.text.find(stop);
  ASSERT_NE(at, std::string::npos);
  const Streamed got = run_with_stops(model, (int32_t)ref.tokens.size(), {stop});
  EXPECT_EQ(got.result.stop, runtime::StopReason::stop_string);
  EXPECT_EQ(got.result.text, ref.text.substr(0, at));
  std::string so_far, streamed;
  for (size_t i = 0; i < got.calls.size(); ++i) {
    ASSERT_EQ(got.calls[i].first, ref.tokens[i]) << "call " << i;
    so_far += ref.pieces[i];
    streamed += got.calls[i].second;
    if (so_far.find(stop) != std::string::npos) {
      EXPECT_EQ(i + 1, got.calls.size()) << "streaming went on after the stop string";
      break;
    }
    EXPECT_EQ(streamed, so_far.substr(0, so_far.size() - expected_hold(so_far, {stop})))
        << "after token " << i;
  }
  EXPECT_EQ(streamed, got.result.text);
  // The tokens that spelled the stop string are the result's last ones.
  std::string upto;
  size_t k = 0;
  while (upto.size() < at + stop.size()) upto += ref.pieces[k++];
  EXPECT_EQ(got.result.tokens.size(), k);
}

TEST(StopStringsGenerate, SpanningTwoAndThreeTokens) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const Reference ref = reference_run(*model, 40);
  ASSERT_EQ(ref.tokens.size(), 40u);
  // Two tokens: the last 2 bytes of piece k and the first 2 of piece k+1;
  // three: the last byte of piece k, all of k+1 and the first byte of k+2.
  // Pieces of at least 3 bytes so each part is a proper part of its token.
  bool two = false, three = false;
  for (size_t k = 4; k + 2 < ref.pieces.size() && !(two && three); ++k) {
    const std::string &a = ref.pieces[k], &b = ref.pieces[k + 1], &c = ref.pieces[k + 2];
    if (a.size() < 3 || b.size() < 3 || c.size() < 3) continue;
    if (!two) {
      check_stop(*model, ref, a.substr(a.size() - 2) + b.substr(0, 2));
      two = true;
    } else if (!three) {
      check_stop(*model, ref, a.substr(a.size() - 1) + b + c.substr(0, 1));
      three = true;
    }
  }
  EXPECT_TRUE(two && three) << "no run of three pieces of >= 3 bytes in: " << ref.text;
}

TEST(StopStringsGenerate, StopAtTheVeryFirstToken) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const Reference ref = reference_run(*model, 4);
  ASSERT_FALSE(ref.pieces[0].empty());
  const Streamed got = run_with_stops(*model, 4, {"zzz", ref.pieces[0]});
  EXPECT_EQ(got.result.stop, runtime::StopReason::stop_string);
  EXPECT_EQ(got.result.text, "");
  EXPECT_EQ(got.result.tokens.size(), 1u);
  for (const auto& c : got.calls) EXPECT_EQ(c.second, "") << "token " << c.first;
}

TEST(StopStringsGenerate, NoMatchReleasesEverythingAtTheEnd) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const Reference ref = reference_run(*model, 12);
  // A stop string that begins with the text's last character but never
  // completes: that character is held until the end, then flushed as -1.
  const std::string last(1, ref.text.back());
  const Streamed got = run_with_stops(*model, 12, {last + "\x01"});
  EXPECT_EQ(got.result.stop, runtime::StopReason::max_tokens);
  EXPECT_EQ(got.result.text, ref.text);
  ASSERT_FALSE(got.calls.empty());
  EXPECT_EQ(got.calls.back().first, -1);
  EXPECT_EQ(got.calls.back().second, last);
}

TEST(StopStringsGenerate, RefusedBeforeAnyWork) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  runtime::SessionOptions so;
  so.n_ctx = 64;
  so.n_threads = 1;
  runtime::Session s(*model, so);
  runtime::GenerateOptions go;
  go.max_tokens = 4;
  go.stop = {""};
  try {
    s.generate_tokens({1}, go);
    FAIL() << "an empty stop string was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
  }
  EXPECT_EQ(s.n_past(), 0);
  // With constrained output the value ends when it closes: stop strings are refused.
  go.stop = {"}"};
  go.json = true;
  go.max_tokens = 32;
  try {
    s.generate_tokens({1}, go);
    FAIL() << "stop strings were accepted with json";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("json"), std::string::npos) << e.what();
  }
  go.json = false;
  go.json_schema = R"({"type": "integer"})";
  EXPECT_THROW(s.generate_tokens({1}, go), Error);
  EXPECT_EQ(s.n_past(), 0);
}

// The streaming path generate uses (StreamDecoder, then StopStrings) over
// SmolLM2's real tokens for CJK and emoji, whose bytes its byte-level BPE
// spreads over several tokens.  The stop string "😁で" shares its first three
// bytes with "😀", which must be released whole as soon as it is complete.
TEST(StopStringsUtf8, EmojiAndCjkStreamWholeCharacters) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = runtime::Model::open(path);
  const tok::Tokenizer& tk = model->tokenizer();
  const std::string text = "猫は😀が好き😁です";
  const std::string stop = "😁で";
  const std::vector<int32_t> ids = tk.encode(text, false, false);
  // The split is certain: the emoji takes more than one token.
  ASSERT_GT(tk.encode("😀", false, false).size(), 1u);
  ASSERT_GT(ids.size(), tok::utf8_to_codepoints(text).size() / 2);
  tok::StreamDecoder dec(tk);
  StopStrings stops({stop});
  std::string streamed, decoded;
  bool emoji_seen = false;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    decoded += piece;
    const std::string out = stops.push(piece);
    EXPECT_TRUE(tok::utf8_is_valid(out)) << "token " << id << " released a split character";
    streamed += out;
    if (!emoji_seen && decoded.find("😀") != std::string::npos) {
      emoji_seen = true;
      EXPECT_EQ(streamed, decoded) << "😀 was held back though it cannot begin \"" << stop << "\"";
    }
    if (stops.matched()) break;
  }
  EXPECT_TRUE(emoji_seen);
  EXPECT_TRUE(stops.matched());
  EXPECT_EQ(streamed, "猫は😀が好き");
}

}  // namespace
}  // namespace lilims
