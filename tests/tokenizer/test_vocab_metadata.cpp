// GGUF metadata handling: unknown tokenizer models and pre-tokenizers are
// refused with a message naming them; BOS/EOS rules; byte fallback and
// <unk>; special tokens matched whole only with parse_special; the Unicode
// tables.
#include <gtest/gtest.h>

#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "test_util.h"

namespace {

using lilims::tok::Tokenizer;

// A tiny SentencePiece vocabulary: <unk> <s> </s>, byte tokens for 'a' and
// 0xC3/0xA9, and a few pieces with scores.
lilims::gguf::Writer tiny_spm() {
  lilims::gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "llama");
  const std::vector<std::string> toks = {"<unk>", "<s>", "</s>", "<0x61>", "<0xC3>", "<0xA9>",
                                         "\xE2\x96\x81", "a", "b", "ab", "\xE2\x96\x81" "ab", "<|ctl|>"};
  w.add_string_array("tokenizer.ggml.tokens", toks);
  w.add_f32_array("tokenizer.ggml.scores", {0, 0, 0, 0, 0, 0, -1, -2, -3, -4, -5, 0});
  w.add_i32_array("tokenizer.ggml.token_type", {2, 3, 3, 6, 6, 6, 1, 1, 1, 1, 1, 3});
  w.add_u32("tokenizer.ggml.bos_token_id", 1);
  w.add_u32("tokenizer.ggml.eos_token_id", 2);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  return w;
}

std::unique_ptr<Tokenizer> load(const lilims::gguf::Writer& w) {
  const auto bytes = w.to_bytes();
  auto f = lilims::gguf::File::from_bytes(bytes.data(), bytes.size());
  return Tokenizer::from_gguf(*f);
}

void expect_error(const lilims::gguf::Writer& w, lilims_status status, const std::string& needle) {
  try {
    load(w);
    ADD_FAILURE() << "no error";
  } catch (const lilims::Error& e) {
    EXPECT_EQ(e.status(), status) << e.what();
    EXPECT_NE(std::string(e.what()).find("[tokenizer]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(VocabMetadata, RefusesUnknownModelsAndPreTokenizers) {
  lilims::gguf::Writer t5;
  t5.add_string("tokenizer.ggml.model", "t5");
  t5.add_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error(t5, LILIMS_ERR_UNSUPPORTED, "'t5'");

  lilims::gguf::Writer pre;
  pre.add_string("tokenizer.ggml.model", "gpt2");
  pre.add_string("tokenizer.ggml.pre", "made-up-pre");
  pre.add_string_array("tokenizer.ggml.tokens", {"a"});
  pre.add_string_array("tokenizer.ggml.merges", {});
  expect_error(pre, LILIMS_ERR_UNSUPPORTED, "'made-up-pre'");

  lilims::gguf::Writer none;
  none.add_string("general.architecture", "llama");
  expect_error(none, LILIMS_ERR_MISSING, "tokenizer.ggml.model");

  lilims::gguf::Writer no_tokens;
  no_tokens.add_string("tokenizer.ggml.model", "llama");
  expect_error(no_tokens, LILIMS_ERR_MISSING, "tokenizer.ggml.tokens");
}

TEST(VocabMetadata, SentencePieceRules) {
  auto tok = load(tiny_spm());
  EXPECT_TRUE(tok->add_bos());  // the default for "llama" without the key
  EXPECT_FALSE(tok->add_eos());
  // " ab" -> "▁▁ab" -> ▁ + ▁ab; BOS only when both sides agree.
  EXPECT_EQ(tok->encode(" ab", true, false), (std::vector<int32_t>{1, 6, 10}));
  EXPECT_EQ(tok->encode(" ab", false, false), (std::vector<int32_t>{6, 10}));
  // 'é' (C3 A9) is not a piece: byte fallback.  'c' has no byte token: <unk>.
  EXPECT_EQ(tok->encode("ab\xC3\xA9" "c", false, false), (std::vector<int32_t>{10, 4, 5, 0}));
  EXPECT_EQ(tok->decode({1, 10, 4, 5}), "ab\xC3\xA9");
  EXPECT_EQ(tok->token_to_piece(10), " ab");
  EXPECT_EQ(tok->token_to_piece(3), "a");
  EXPECT_EQ(tok->token_to_piece(4), "\xC3");
  EXPECT_EQ(tok->token_text(10), "\xE2\x96\x81" "ab");
  // Control tokens: whole with parse_special, plain text without.
  EXPECT_EQ(tok->encode("ab<|ctl|>ab", false, true), (std::vector<int32_t>{10, 11, 10}));
  EXPECT_EQ(tok->decode({10, 11, 10}), "ab<|ctl|> ab");
  EXPECT_NE(tok->encode("ab<|ctl|>ab", false, false)[1], 11);
  EXPECT_TRUE(tok->is_control(11));
  EXPECT_TRUE(tok->is_eog(2));
  EXPECT_FALSE(tok->is_eog(11));
  EXPECT_THROW(tok->token_text(99), lilims::Error);
  EXPECT_THROW(tok->token_to_piece(-1), lilims::Error);
}

TEST(VocabMetadata, AddEosAndNoSpacePrefix) {
  auto w = tiny_spm();
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_bool("tokenizer.ggml.add_eos_token", true);
  w.add_bool("tokenizer.ggml.add_space_prefix", false);
  auto tok = load(w);
  EXPECT_FALSE(tok->add_bos());
  EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{9, 2}));
  EXPECT_EQ(tok->encode("ab", false, false), (std::vector<int32_t>{9}));
  EXPECT_EQ(tok->decode({6, 9}), " ab");  // no prefix to strip
}

TEST(VocabMetadata, LlamaSpmFile) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-llama-spm.gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  auto f = lilims::gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  EXPECT_EQ(tok->n_vocab(), 32000);
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_EQ(tok->eos(), 2);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("Hello world", true, false), (std::vector<int32_t>{1, 15043, 3186}));
  EXPECT_EQ(tok->encode("</s>", false, true), (std::vector<int32_t>{2}));
  EXPECT_NE(tok->encode("</s>", false, false), (std::vector<int32_t>{2}));
  EXPECT_EQ(tok->decode({1, 15043, 3186}), "Hello world");
}

TEST(Unicode, Categories) {
  using namespace lilims::tok;
  EXPECT_TRUE(unicode_is_letter('a'));
  EXPECT_TRUE(unicode_is_letter(0x00E9));   // é
  EXPECT_TRUE(unicode_is_letter(0x65E5));   // 日
  EXPECT_TRUE(unicode_is_number(0x00BD));   // ½ (No)
  EXPECT_TRUE(unicode_is_number(0x0663));   // Arabic-Indic 3
  EXPECT_TRUE(unicode_is_punct(0x3002));    // 。
  EXPECT_FALSE(unicode_is_punct('$'));      // Sc
  EXPECT_TRUE(unicode_category('$') & kCatSymbol);
  EXPECT_TRUE(unicode_category(0x0301) & kCatMark);
  EXPECT_TRUE(unicode_is_whitespace(0x3000));
  EXPECT_TRUE(unicode_is_whitespace(0x0085));
  EXPECT_FALSE(unicode_is_whitespace(0x200B));  // ZWSP is not White_Space
  EXPECT_EQ(unicode_category(0x10FFFF), 0);     // unassigned
  EXPECT_EQ(unicode_lower(0x00C4), "\xC3\xA4");  // Ä -> ä
  EXPECT_EQ(unicode_strip_accents(0x1EED), "u");  // ử
  EXPECT_EQ(byte_level_cp(' '), 0x120u);          // Ġ
  EXPECT_EQ(byte_level_cp('\n'), 0x10Au);         // Ċ
  EXPECT_EQ(byte_level_cp('A'), static_cast<uint32_t>('A'));
  EXPECT_STRNE(unicode_data_version(), "");
}

}  // namespace
