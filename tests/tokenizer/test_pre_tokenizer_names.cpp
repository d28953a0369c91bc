// Every tokenizer.ggml.pre value lilims accepts splits text as llama.cpp
// splits it for that name: GPT-2's vocabulary with only the name changed,
// against llama-tokenize's ids for the same probes
// (scripts/goldens/gen_pre_tokenizer_ids.py ->
// tests/data/tokenizer_families/pre_tokenizers.json), BOS by default where
// llama.cpp adds one when the file does not say; an unknown name is refused.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/gguf.h"
#include "models/vocab_gguf.h"
#include "tokenizer/pretokenize.h"
#include "tokenizer/tokenizer.h"
#include "test_util.h"

namespace lilims::tok {
namespace {

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

class PreTokenizerNames : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = test::shared_data("vocab/ggml-vocab-gpt-2.gguf");
    LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/, see ../shared/data/SOURCES.md");
    vocab_ = models::vocab_from_gguf(*gguf::File::open(path));
    golden_ = nlohmann::json::parse(
        test::read_file(test::source_path("tests/data/tokenizer_families/pre_tokenizers.json")));
  }
  Vocab vocab_;
  nlohmann::json golden_;
};

TEST_F(PreTokenizerNames, EveryNameSplitsAsLlamaCppDoes) {
  const auto& probes = golden_["probes"];
  size_t checked = 0;
  for (const auto& [name, entry] : golden_["names"].items()) {
    SCOPED_TRACE("tokenizer.ggml.pre '" + name + "'");
    Vocab v = vocab_;
    v.pre = name;  // "" : the key absent
    v.add_bos.reset();
    std::unique_ptr<Tokenizer> tok;
    ASSERT_NO_THROW(tok = Tokenizer::from_vocab(v));
    const auto& want = golden_["splits"][entry["split"].get<size_t>()];
    for (size_t i = 0; i < probes.size(); ++i) {
      const std::string text = probes[i];
      EXPECT_EQ(ids_str(tok->encode(text, false, false)), ids_str(want[i].get<std::vector<int32_t>>()))
          << "probe " << i << ": '" << text << "'";
    }
    EXPECT_EQ(tok->add_bos(), entry["adds_bos"].get<bool>());
    ++checked;
  }
  // Every name lilims accepts but the two llama.cpp does not know, and the absent key.
  EXPECT_EQ(checked, pre_tokenizer_names().size() - 2 + 1);
  for (const std::string& name : pre_tokenizer_names()) {
    if (name == "gpt2" || name == "gpt-neox") continue;
    EXPECT_TRUE(golden_["names"].contains(name)) << name;
  }
}

// The splits are not all alike: each golden split differs from every other
// on some probe (so a name mapped to the wrong one would fail above).
TEST_F(PreTokenizerNames, SplitsAreDistinct) {
  const auto& splits = golden_["splits"];
  EXPECT_EQ(splits.size(), 9u);
  for (size_t a = 0; a < splits.size(); ++a) {
    for (size_t b = a + 1; b < splits.size(); ++b) EXPECT_NE(splits[a], splits[b]) << a << " " << b;
  }
}

// Each name maps back from the name pre_tokenizer_name gives its split.
TEST(PreTokenizerName, RoundTrips) {
  for (const std::string& name : pre_tokenizer_names()) {
    PreTokenizerSpec spec{};
    ASSERT_TRUE(pre_tokenizer_from_name(name, &spec)) << name;
    const char* canonical = pre_tokenizer_name(spec.split);
    ASSERT_NE(canonical, nullptr) << name;
    PreTokenizerSpec back{};
    ASSERT_TRUE(pre_tokenizer_from_name(canonical, &back));
    EXPECT_EQ(back.split, spec.split) << name;
  }
}

TEST(PreTokenizerName, UnknownIsRefused) {
  Vocab v;
  v.model = "gpt2";
  v.tokens = {"a", "b", "ab"};
  v.merges = {"a b"};
  for (const char* name : {"made-up-pre", "qwen35", "tekken", "jais-2", "Phi-2"}) {
    v.pre = name;
    try {
      Tokenizer::from_vocab(v);
      ADD_FAILURE() << name << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_UNSUPPORTED);
      EXPECT_NE(std::string(e.what()).find("[tokenizer] unsupported pre-tokenizer '" + std::string(name) +
                                           "' (tokenizer.ggml.pre)"),
                std::string::npos)
          << e.what();
    }
  }
  // SentencePiece files carry "default" or nothing, and llama.cpp reads no
  // pre-tokenizer for them: any value loads.
  v.model = "llama";
  v.merges.clear();
  v.pre = "made-up-pre";
  EXPECT_NO_THROW(Tokenizer::from_vocab(v));
}

}  // namespace
}  // namespace lilims::tok
