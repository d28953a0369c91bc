// Gemma 3's tokenizer (262,144-token SentencePiece vocabulary with byte
// fallback, no space prefix, user-defined tokens for runs of newlines,
// spaces and tabs) from the real Gemma 3 270M GGUF against llama.cpp's
// llama-tokenize (scripts/goldens/gen_gemma3_tokens.py ->
// tests/data/gemma3_tokens.json).  Only when the file is there: it is 240 MB
// (scripts/fetch_gemma.sh).
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "models/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

namespace {

using lilims::tok::Tokenizer;

std::string gemma_path() {
  const char* d = std::getenv("LILIMS_MODEL_DIR");
  const char* home = std::getenv("HOME");
  return (d ? std::string(d) : std::string(home ? home : ".") + "/.cache/lilims/models") +
         "/gemma-3-270m-q4_k_m.gguf";
}

class Gemma3 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!lilims::test::file_exists(gemma_path())) return;
    auto f = lilims::gguf::File::open(gemma_path());
    tok_ = Tokenizer::from_gguf(*f).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (!tok_) GTEST_SKIP() << "missing " << gemma_path() << " (scripts/fetch_gemma.sh)";
  }
  static Tokenizer* tok_;
};
Tokenizer* Gemma3::tok_ = nullptr;

const nlohmann::json& golden() {
  static const nlohmann::json g = nlohmann::json::parse(
      lilims::test::read_file(lilims::test::source_path("tests/data/gemma3_tokens.json")));
  return g;
}

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

TEST_F(Gemma3, MatchesLlamaCpp) {
  const nlohmann::json& g = golden();
  ASSERT_GE(g["cases"].size(), 40u);
  int failures = 0, n = 0;
  for (const auto& c : g["cases"]) {
    const std::string text = c["text"];
    for (bool special : {true, false}) {
      const std::vector<int32_t> want = c[special ? "ids" : "ids_literal"].get<std::vector<int32_t>>();
      const std::vector<int32_t> got = tok_->encode(text, false, special);
      EXPECT_EQ(ids_str(got), ids_str(want)) << "text: '" << text << "' parse_special " << special;
      failures += got != want;
      ++n;
    }
  }
  for (const auto& c : g["with_bos"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(ids_str(tok_->encode(text, true, true)), ids_str(want)) << "text: '" << text << "'";
  }
  EXPECT_EQ(failures, 0) << failures << " of " << n << " encodings differ";
}

// What Gemma's vocabulary round-trips: every case but those with special
// tokens parsed (their text comes back too) decodes to its text.
TEST_F(Gemma3, DecodeRoundTrips) {
  for (const auto& c : golden()["cases"]) {
    const std::string text = c["text"];
    EXPECT_EQ(tok_->decode(c["ids_literal"].get<std::vector<int32_t>>()), text);
  }
}

TEST_F(Gemma3, SpecialTokens) {
  EXPECT_EQ(tok_->n_vocab(), 262144);
  EXPECT_TRUE(tok_->add_bos());
  EXPECT_FALSE(tok_->add_eos());
  EXPECT_EQ(tok_->bos(), 2);
  EXPECT_EQ(tok_->eos(), 1);
  EXPECT_TRUE(tok_->covers_all_bytes());
  const int32_t sot = tok_->find_token("<start_of_turn>");
  const int32_t eot = tok_->find_token("<end_of_turn>");
  EXPECT_EQ(sot, 105);
  EXPECT_EQ(eot, 106);
  EXPECT_TRUE(tok_->is_eog(eot));
  EXPECT_TRUE(tok_->is_eog(1));
  EXPECT_FALSE(tok_->is_eog(sot));
  // llama.cpp makes a token spelled "</s>" an end of generation and a control
  // token (matched only with parse_special), whatever type the file gives it.
  const int32_t s_end = tok_->find_token("</s>");
  EXPECT_EQ(s_end, 212);
  EXPECT_TRUE(tok_->is_eog(s_end));
  EXPECT_TRUE(tok_->is_control(s_end));
  EXPECT_EQ(tok_->token_to_piece(tok_->find_token("\n\n")), "\n\n");
  EXPECT_EQ(tok_->token_to_piece(tok_->find_token("<0x41>")), "A");
}

// The gemma chat template tokenizes as the same text with parse_special.
TEST_F(Gemma3, ChatTemplate) {
  const std::vector<lilims::tok::ChatMessage> msgs = {
      {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Open the camera"}};
  const std::string text = lilims::tok::apply_chat_template("gemma", msgs, true);
  const auto ids = lilims::tok::encode_chat(*tok_, "gemma", msgs, true, true);
  EXPECT_EQ(ids, tok_->encode(text, true, true));
  EXPECT_EQ(ids.front(), 2);
  EXPECT_EQ(ids[1], 105);
}

}  // namespace
