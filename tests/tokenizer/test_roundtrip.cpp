// The round-trip property decode(encode(s)) == s on seeded random valid
// UTF-8 (the same property tests/fuzz/fuzz_tokenizer.cpp explores), for
// vocabularies that can represent every character: byte-level BPE and
// SentencePiece with byte fallback.  SentencePiece only without parse_special:
// a text fragment after a special token gets its own U+2581 prefix (as in
// llama.cpp and HF's legacy Llama tokenizer), which decode keeps as a space.
// Also: no crash on random bytes.
#include <gtest/gtest.h>

#include <random>

#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "test_util.h"

namespace {

using lilims::tok::Tokenizer;

// Random text biased towards what tokenizers find tricky: spaces and
// newlines in runs, digits, apostrophes, punctuation, accents, CJK, emoji,
// ZWJ sequences, and text that looks like special tokens.
std::string random_text(std::mt19937& rng) {
  static const char* kAtoms[] = {
      " ", "  ", "\n", "\t", "\r\n", "a", "Z", "the", " word", "'s", "'LL", "0", "42", "1234567",
      ".", ",", "!!", "?", "(", ")", "{", "}", "\"", "`", "$", "+", "<", "=", "|", "~", "_",
      "é", "Ä", "ß", "ñ", "Ж", "щ", "Ω", "ά", "ħ", "日", "本", "語", "我", "한", "국", "ア", "ひ",
      "ก", "ع", "ש", "ह", "ि", "🦙", "🚀", "😶", "\u200d", "🌫️", "👍🏽", "🇫🇷", "½", "²", "Ⅻ", "ﬁ",
      "\u00a0", "\u2003", "\u3000", "\u200b", "\u0301", "<s>", "</s>", "<|im_start|>", "<|endoftext|>",
      "\xEF\xBF\xBD", "\x7f", "\x01",
  };
  std::uniform_int_distribution<int> len(0, 24);
  std::uniform_int_distribution<size_t> pick(0, std::size(kAtoms) - 1);
  std::uniform_int_distribution<uint32_t> cp(0x20, 0x2FFFF);
  std::string s;
  const int n = len(rng);
  for (int i = 0; i < n; ++i) {
    if (rng() % 8 == 0) {
      uint32_t c = cp(rng);
      if (c >= 0xD800 && c < 0xE000) c = 'x';
      lilims::tok::utf8_append(s, c);
    } else {
      s += kAtoms[pick(rng)];
    }
  }
  return s;
}

void check_roundtrip(const std::string& path, int n_strings) {
  LILIMS_REQUIRE_FILE(path, "see ../shared/data/SOURCES.md or tests/test_util.h");
  auto f = lilims::gguf::File::open(path);
  auto tok = Tokenizer::from_gguf(*f);
  // Falcon's vocabulary lacks some byte tokens (see covers_all_bytes); the
  // generator below never produces those bytes, so the property still holds.
  const uint32_t seed = 1234;
  std::mt19937 rng(seed);
  int failures = 0;
  for (int i = 0; i < n_strings && failures < 5; ++i) {
    const std::string s = random_text(rng);
    for (bool special : {false, true}) {
      if (special && tok->vocab_type() == lilims::tok::VocabType::kSpm) continue;
      const auto ids = tok->encode(s, false, special);
      const std::string back = tok->decode(ids);
      if (back != s) {
        ++failures;
        ADD_FAILURE() << "seed " << seed << " string #" << i << " parse_special " << special
                      << ": '" << s << "' decodes to '" << back << "'";
      }
    }
  }
  // Arbitrary bytes: never a crash, always valid UTF-8 out.
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < n_strings / 4; ++i) {
    std::string s(rng() % 16, '\0');
    for (char& c : s) c = static_cast<char>(byte(rng));
    const auto ids = tok->encode(s, true, true);
    EXPECT_TRUE(lilims::tok::utf8_is_valid(tok->decode(ids))) << "seed " << seed << " bytes #" << i;
  }
}

TEST(RoundTrip, LlamaSpm) { check_roundtrip(lilims::test::shared_data("vocab/ggml-vocab-llama-spm.gguf"), 3000); }
TEST(RoundTrip, Gpt2) { check_roundtrip(lilims::test::shared_data("vocab/ggml-vocab-gpt-2.gguf"), 3000); }
TEST(RoundTrip, DeepseekLlm) { check_roundtrip(lilims::test::shared_data("vocab/ggml-vocab-deepseek-llm.gguf"), 2000); }
TEST(RoundTrip, Falcon) { check_roundtrip(lilims::test::shared_data("vocab/ggml-vocab-falcon.gguf"), 2000); }
TEST(RoundTrip, Mpt) { check_roundtrip(lilims::test::shared_data("vocab/ggml-vocab-mpt.gguf"), 2000); }
TEST(RoundTrip, CoversAllBytes) {
  for (const char* name : {"llama-spm", "gpt-2", "deepseek-llm", "falcon", "starcoder"}) {
    const std::string path = lilims::test::shared_data(std::string("vocab/ggml-vocab-") + name + ".gguf");
    LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
    auto f = lilims::gguf::File::open(path);
    const bool want = std::string(name) != "falcon" && std::string(name) != "starcoder";
    EXPECT_EQ(Tokenizer::from_gguf(*f)->covers_all_bytes(), want) << name;
  }
}
TEST(RoundTrip, SmolLM2) { check_roundtrip(lilims::test::smollm2_path(), 3000); }

}  // namespace
