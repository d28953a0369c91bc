// Tokenizer metadata that is well-formed GGUF but the wrong shape: element
// types the loader cannot use and ids out of range are refused with a
// message naming the key, never loaded as an empty or truncated vocabulary.
#include <string>
#include <vector>

#include "base/error.h"
#include "models/gguf.h"
#include "raw_gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {
namespace {

using test::RawGguf;

const std::vector<std::string> kTokens = {"<unk>", "<s>", "</s>", "a", "b", "\xe2\x96\x81" "a"};

// A SentencePiece vocabulary with the given extra keys appended.
RawGguf spm_base(bool with_tokens = true) {
  RawGguf g;
  g.kv_string("tokenizer.ggml.model", "llama");
  if (with_tokens) g.kv_strings("tokenizer.ggml.tokens", kTokens);
  return g;
}

std::unique_ptr<Tokenizer> load(const RawGguf& g) {
  const std::string img = g.image();
  auto f = gguf::File::from_bytes(img.data(), img.size());
  return Tokenizer::from_gguf(*f);
}

void expect_refused(const RawGguf& g, const std::string& key) {
  try {
    auto t = load(g);
    ADD_FAILURE() << "loaded a vocabulary of " << t->n_vocab() << " tokens; expected an error naming "
                  << key;
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_BAD_FORMAT) << e.what();
    EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("[tokenizer] ", 0), 0u) << e.what();
  }
}

TEST(VocabLoad, BaselineLoads) {
  RawGguf g = spm_base();
  g.kv_u32("tokenizer.ggml.bos_token_id", 1);
  auto t = load(g);
  EXPECT_EQ(t->n_vocab(), 6);
  EXPECT_EQ(t->bos(), 1);
}

TEST(VocabLoad, TokensMustBeStrings) {
  RawGguf ints = spm_base(false);
  ints.key("tokenizer.ggml.tokens", RawGguf::ARR).array_header(RawGguf::I32, 3).i32(1).i32(2).i32(3);
  expect_refused(ints, "tokenizer.ggml.tokens");

  RawGguf nested = spm_base(false);
  nested.key("tokenizer.ggml.tokens", RawGguf::ARR).array_header(RawGguf::ARR, 2);
  nested.array_header(RawGguf::STR, 1).str("a");
  nested.array_header(RawGguf::STR, 1).str("b");
  expect_refused(nested, "tokenizer.ggml.tokens");
}

TEST(VocabLoad, ScoresAndTypesMustBeNumbers) {
  RawGguf scores = spm_base();
  scores.kv_strings("tokenizer.ggml.scores", {"0", "0", "0", "0", "0", "0"});
  expect_refused(scores, "tokenizer.ggml.scores");

  RawGguf types = spm_base();
  types.key("tokenizer.ggml.token_type", RawGguf::ARR).array_header(RawGguf::F32, 6);
  for (int k = 0; k < 6; ++k) types.f32(1.0f);
  expect_refused(types, "tokenizer.ggml.token_type");

  RawGguf range = spm_base();
  range.key("tokenizer.ggml.token_type", RawGguf::ARR).array_header(RawGguf::I32, 6);
  for (int k = 0; k < 6; ++k) range.i32(k == 4 ? 257 : 1);
  expect_refused(range, "tokenizer.ggml.token_type");
}

// 2^32 + 1 used to be truncated to 1 and taken for a valid BOS id.
TEST(VocabLoad, SpecialIdsOutOfRangeAreRefused) {
  RawGguf big = spm_base();
  big.kv_u64("tokenizer.ggml.bos_token_id", (1ull << 32) + 1);
  expect_refused(big, "tokenizer.ggml.bos_token_id");

  RawGguf neg = spm_base();
  neg.key("tokenizer.ggml.eos_token_id", RawGguf::I32).i32(-7);
  expect_refused(neg, "tokenizer.ggml.eos_token_id");

  RawGguf str = spm_base();
  str.kv_string("tokenizer.ggml.unknown_token_id", "0");
  expect_refused(str, "tokenizer.ggml.unknown_token_id");
}

TEST(VocabLoad, MergesMustBeStrings) {
  RawGguf g;
  g.kv_string("tokenizer.ggml.model", "gpt2");
  g.kv_strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
  g.key("tokenizer.ggml.merges", RawGguf::ARR).array_header(RawGguf::I32, 1).i32(0);
  expect_refused(g, "tokenizer.ggml.merges");
}

}  // namespace
}  // namespace lilims::tok
