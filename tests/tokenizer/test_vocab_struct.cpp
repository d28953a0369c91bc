// Tokenizers built from a plain vocabulary description (tokenizer/vocab.h)
// with no file at all, and the layering that makes it possible: tokenizer/
// never reads GGUF (models/vocab_gguf.cpp does, into a tok::Vocab).
#include <gtest/gtest.h>

#include <dirent.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {
namespace {

TEST(vocab_struct, SentencePieceFromHandWrittenVocab) {
  Vocab v;
  v.model = "llama";
  // ids:         0        1      2       3           4    5    6           7
  v.tokens = {"<unk>", "<s>", "</s>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a", "ab"};
  v.scores = {0, 0, 0, -1, -2, -2, -0.5f, -0.1f};
  v.types = {kTokenUnknown, kTokenControl, kTokenControl, kTokenNormal,
             kTokenNormal,  kTokenNormal,  kTokenNormal,  kTokenNormal};
  auto t = Tokenizer::from_vocab(v);
  EXPECT_EQ(1, t->bos());  // SentencePiece defaults: bos 1, add_bos, a space prefix
  // "▁ab": the pair with the best score merges first, ab (-0.1) before ▁a
  // (-0.5); then ▁ + ab has no token.
  EXPECT_EQ((std::vector<int32_t>{1, 3, 7}), t->encode("ab", true, false));
  v.scores[6] = 0.0f;  // now ▁a wins, and ▁a + b has no token
  EXPECT_EQ((std::vector<int32_t>{1, 6, 5}), Tokenizer::from_vocab(v)->encode("ab", true, false));
  EXPECT_EQ("ab", t->decode({3, 7}));  // the prefix space is dropped again
}

TEST(vocab_struct, ByteLevelBpeFromHandWrittenVocab) {
  Vocab v;
  v.model = "gpt2";
  v.pre = "gpt2";
  v.tokens = {"h", "i", "\xC4\xA0", "hi", "\xC4\xA0h", "\xC4\xA0hi", "<|end|>"};
  v.types = {1, 1, 1, 1, 1, 1, kTokenControl};
  v.merges = {"\xC4\xA0 h", "h i", "\xC4\xA0h i"};  // rank order: Ġh before hi
  v.eos = 6;
  auto t = Tokenizer::from_vocab(v);
  EXPECT_EQ(-1, t->bos());
  EXPECT_EQ(6, t->eos());
  EXPECT_EQ((std::vector<int32_t>{3, 5}), t->encode("hi hi", true, false));
  EXPECT_EQ((std::vector<int32_t>{3, 6}), t->encode("hi<|end|>", false, true));
}

TEST(vocab_struct, InconsistentArraysAndUnknownModel) {
  Vocab v;
  v.model = "llama";
  v.tokens = {"a", "b"};
  v.scores = {0};
  try {
    Tokenizer::from_vocab(v);
    FAIL() << "accepted 1 score for 2 tokens";
  } catch (const Error& e) {
    EXPECT_EQ(LILIMS_ERR_BAD_FORMAT, e.status()) << e.what();
  }
  v.scores.clear();
  v.model = "unigram";
  try {
    Tokenizer::from_vocab(v);
    FAIL() << "accepted model 'unigram'";
  } catch (const Error& e) {
    EXPECT_EQ(LILIMS_ERR_UNSUPPORTED, e.status()) << e.what();
    EXPECT_NE(std::string(e.what()).find("unigram"), std::string::npos) << e.what();
  }
}

// tokenizer/ sits below models/ (../shared/DESIGN.md): none of its files may
// include a models/ header.
TEST(vocab_struct, TokenizerDoesNotIncludeModels) {
  const std::string dir = test::source_path("tokenizer");
  DIR* d = opendir(dir.c_str());
  ASSERT_NE(nullptr, d) << dir;
  int files = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() < 3 || (name.substr(name.size() - 2) != ".h" && name.substr(name.size() - 4) != ".cpp")) {
      continue;
    }
    ++files;
    const std::string text = test::read_file(dir + "/" + name);
    EXPECT_EQ(std::string::npos, text.find("#include \"models/")) << "tokenizer/" << name;
  }
  closedir(d);
  EXPECT_GT(files, 5);
}

}  // namespace
}  // namespace lilims::tok
