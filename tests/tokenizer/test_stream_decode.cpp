// Streaming decode: emoji and CJK split across byte-fallback tokens must
// come out only as whole characters; invalid UTF-8 (from the token stream or
// the input text) never crashes and follows the stated U+FFFD rule.
#include <gtest/gtest.h>

#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "test_util.h"

namespace {

using lilims::tok::StreamDecoder;
using lilims::tok::Tokenizer;

std::unique_ptr<Tokenizer> load(const std::string& rel) {
  auto f = lilims::gguf::File::open(lilims::test::shared_data(rel));
  return Tokenizer::from_gguf(*f);
}

TEST(StreamDecoder, HoldsBackSplitCharacters) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-llama-spm.gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  auto tok = load("vocab/ggml-vocab-llama-spm.gguf");
  // 🦙 and 😶‍🌫️ are not Llama 2 pieces: they become <0xNN> byte tokens.
  const std::string text = "Llamas 🦙 and 😶‍🌫️, 我想在apple工作 ☕ done";
  const auto ids = tok->encode(text, false, false);
  int byte_tokens = 0;
  StreamDecoder dec(*tok);
  std::string streamed;
  for (int32_t id : ids) {
    byte_tokens += tok->token_type(id) == lilims::tok::kTokenByte;
    const std::string piece = dec.push(id);
    EXPECT_TRUE(lilims::tok::utf8_is_valid(piece)) << "token " << id;
    streamed += piece;
  }
  streamed += dec.flush();
  EXPECT_GE(byte_tokens, 8);
  EXPECT_EQ(streamed, " " + text);  // pieces keep SentencePiece's prefix space
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(StreamDecoder, EmitsNothingUntilTheCharacterCompletes) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-llama-spm.gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  auto tok = load("vocab/ggml-vocab-llama-spm.gguf");
  auto byte = [&](int b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    return tok->find_token(name);
  };
  StreamDecoder dec(*tok);
  // U+1F999 🦙 = F0 9F A6 99
  EXPECT_EQ(dec.push(byte(0xF0)), "");
  EXPECT_EQ(dec.push(byte(0x9F)), "");
  EXPECT_EQ(dec.push(byte(0xA6)), "");
  EXPECT_EQ(dec.push(byte(0x99)), "\xF0\x9F\xA6\x99");
  // A byte that can never start a character comes out as U+FFFD at once.
  EXPECT_EQ(dec.push(byte(0xFF)), "\xEF\xBF\xBD");
  // A truncated sequence followed by ASCII: U+FFFD, then the ASCII.
  EXPECT_EQ(dec.push(byte(0xE6)), "");
  EXPECT_EQ(dec.push(byte(0x41)), "\xEF\xBF\xBD" "A");
  // Impossible prefixes (overlong E0 80, surrogate ED A0) are not held back.
  EXPECT_EQ(dec.push(byte(0xE0)), "");
  EXPECT_EQ(dec.push(byte(0x80)), "\xEF\xBF\xBD\xEF\xBF\xBD");
  // Whatever is pending at the end is flushed, each byte as U+FFFD.
  EXPECT_EQ(dec.push(byte(0xE4)), "");
  EXPECT_EQ(dec.push(byte(0xB8)), "");
  EXPECT_EQ(dec.flush(), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(dec.flush(), "");
}

TEST(StreamDecoder, ByteLevelBpe) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-gpt-2.gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  auto tok = load("vocab/ggml-vocab-gpt-2.gguf");
  const std::string text = "emoji 🚀😶‍🌫️ and CJK 日本語のテキスト 한국어";
  const auto ids = tok->encode(text, false, false);
  StreamDecoder dec(*tok);
  std::string streamed;
  int empty_pushes = 0;
  for (int32_t id : ids) {
    const std::string piece = dec.push(id);
    EXPECT_TRUE(lilims::tok::utf8_is_valid(piece));
    empty_pushes += piece.empty();
    streamed += piece;
  }
  streamed += dec.flush();
  EXPECT_GT(empty_pushes, 0);  // some tokens carried only part of a character
  EXPECT_EQ(streamed, text);
}

TEST(InvalidUtf8, EachInvalidByteBecomesReplacementCharacter) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-gpt-2.gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  for (const char* rel : {"vocab/ggml-vocab-gpt-2.gguf", "vocab/ggml-vocab-llama-spm.gguf",
                          "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-bert-bge.gguf"}) {
    auto tok = load(rel);
    const std::vector<std::string> bad = {
        "\xFF", "abc\xC3", "\xC3(", "\xE2\x82", "\xED\xA0\x80 surrogate", "\xC0\xAF overlong",
        "\xF4\x90\x80\x80 too big", "\x80\x80\x80", std::string("nul\0inside", 10),
        "ok \xF0\x9F\x98 trunc 4"};
    for (const std::string& s : bad) {
      const std::string clean = lilims::tok::utf8_sanitize(s);
      EXPECT_TRUE(lilims::tok::utf8_is_valid(clean));
      const auto ids = tok->encode(s, true, true);
      EXPECT_EQ(ids, tok->encode(clean, true, true)) << rel;
      if (tok->vocab_type() == lilims::tok::VocabType::kBpe) {
        EXPECT_EQ(tok->decode(ids), clean);
      }
    }
  }
  EXPECT_EQ(lilims::tok::utf8_sanitize("a\xFF" "b\xE2\x82"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD");
}

}  // namespace

namespace {

// StarCoder's vocabulary has no token for the byte 0xF1, which HF (and
// lilims) drop when encoding: U+6CB2C (F1 AC AC AC) leaves three orphan
// continuation bytes.  A model can emit such tokens too.  decode() must
// still return valid UTF-8, each invalid byte as U+FFFD (as streaming does,
// and as HF's byte-level decoder does).  Found by fuzz_tokenizer.
TEST(InvalidUtf8, DecodeOfOrphanBytesIsValidUtf8) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-starcoder.gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  auto tok = load("vocab/ggml-vocab-starcoder.gguf");
  const std::string text = "a\xf1\xac\xac\xac" "b";
  ASSERT_TRUE(lilims::tok::utf8_is_valid(text));
  const std::vector<int32_t> ids = tok->encode(text, false, false);
  const std::string out = tok->decode(ids);
  EXPECT_TRUE(lilims::tok::utf8_is_valid(out)) << out;
  const std::string three = "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd" "b";
  ASSERT_GE(out.size(), three.size());
  EXPECT_EQ(out.substr(out.size() - three.size()), three) << out;
}

}  // namespace
