// Tokenizer::from_hf_json: tokenizer.json files rebuilt from the vocab GGUFs
// (vocab, merges, added tokens, and the pre-tokenizer each model's
// tokenizer.json declares) must pass the same llama.cpp vectors; plus small
// hand-written SentencePiece-style and error cases.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "vocab_vectors.h"

namespace {

using nlohmann::json;
using lilims::tok::Tokenizer;

// A tokenizer.json with the vocabulary of a GGUF and the given pre-tokenizer.
std::string json_from_gguf(const lilims::gguf::File& f, const json& pre_tokenizer, bool wordpiece) {
  const lilims::gguf::Value& toks = *f.find("tokenizer.ggml.tokens");
  const lilims::gguf::Value& types = *f.find("tokenizer.ggml.token_type");
  json vocab = json::object();
  json added = json::array();
  for (size_t i = 0; i < toks.size(); ++i) {
    std::string s(toks.string_at(i));
    const int64_t type = types.at(i).i;
    if (type == 3 || type == 4) {
      added.push_back({{"id", i}, {"content", s}, {"special", type == 3}});
    }
    if (wordpiece && type != 3) {
      s = s.compare(0, 3, "\xE2\x96\x81") == 0 ? s.substr(3) : "##" + s;
    }
    vocab[s] = i;
  }
  json model = {{"type", wordpiece ? "WordPiece" : "BPE"}, {"vocab", vocab}};
  if (const auto* m = f.find("tokenizer.ggml.merges")) {
    json merges = json::array();
    for (size_t k = 0; k < m->size(); ++k) merges.push_back(std::string(m->string_at(k)));
    model["merges"] = merges;
  }
  if (wordpiece) model["unk_token"] = "[UNK]";
  json root = {{"added_tokens", added}, {"model", model}, {"pre_tokenizer", pre_tokenizer}};
  if (!wordpiece) root["decoder"] = {{"type", "ByteLevel"}};
  if (wordpiece) root["normalizer"] = {{"type", "BertNormalizer"}, {"lowercase", true}};
  return root.dump();
}

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", use_regex}};
}
json split(const std::string& re) {
  return {{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}};
}
json sequence(const std::vector<json>& steps) {
  json s = {{"type", "Sequence"}};
  s["pretokenizers"] = steps;
  return s;
}

void check(const std::string& name, const json& pre, bool wordpiece = false) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-" + name + ".gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/");
  auto f = lilims::gguf::File::open(path);
  auto tok = Tokenizer::from_hf_json(json_from_gguf(*f, pre, wordpiece));
  std::string err;
  const auto vectors = lilims::test::read_vocab_vectors(path, &err);
  ASSERT_FALSE(vectors.empty()) << err;
  for (const auto& v : vectors) EXPECT_EQ(tok->encode(v.text, false, false), v.ids) << "'" << v.text << "'";
}

const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

TEST(HfJson, Gpt2ByteLevel) { check("gpt-2", byte_level(true)); }
TEST(HfJson, Gpt2SplitPattern) { check("gpt-2", sequence({split(kGpt2Pattern), byte_level(false)})); }
TEST(HfJson, StarcoderDigits) {
  check("starcoder", sequence({{{"type", "Digits"}, {"individual_digits", true}}, byte_level(true)}));
}
TEST(HfJson, DeepseekCoder) {
  check("deepseek-coder", sequence({split("[\r\n]"), split("\\s?\\p{L}+"), split("\\s?\\p{P}+"),
                                    split("[一-龥ࠀ-一가-퟿]+"), split("\\p{N}"), byte_level(false)}));
}
TEST(HfJson, Falcon) {
  check("falcon", sequence({{{"type", "Punctuation"}, {"behavior", "contiguous"}}, byte_level(true),
                            {{"type", "Digits"}, {"individual_digits", false}},
                            split("[0-9][0-9][0-9]")}));
}
TEST(HfJson, BertWordPiece) { check("bert-bge", {{"type", "BertPreTokenizer"}}, true); }

TEST(HfJson, SentencePieceStyleBpe) {
  const json root = json::parse(R"({
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "<0x0A>": 3, "<0xC3>": 4, "<0xA9>": 5,
                        "\u2581": 6, "a": 7, "b": 8, "ab": 9, "\u2581ab": 10},
              "merges": ["a b", "\u2581 ab"]},
    "added_tokens": [{"id": 1, "content": "<s>", "special": true},
                     {"id": 2, "content": "</s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "\u2581"},
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
    "post_processor": {"type": "TemplateProcessing", "single": [
        {"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]}
  })");
  auto tok = Tokenizer::from_hf_json(root.dump());
  EXPECT_EQ(tok->bos(), 1);
  EXPECT_TRUE(tok->add_bos());
  EXPECT_EQ(tok->encode("ab", true, false), (std::vector<int32_t>{1, 10}));
  EXPECT_EQ(tok->encode("ab\n\xC3\xA9", false, false), (std::vector<int32_t>{10, 3, 4, 5}));
  EXPECT_EQ(tok->decode({1, 10, 3, 4, 5}), "ab\n\xC3\xA9");
}

// The `tokenizers` package writes every BPE option, unset ones as null
// (continuing_subword_prefix, end_of_word_suffix, unk_token, dropout).
TEST(HfJson, NullModelOptions) {
  const json root = json::parse(R"({
    "model": {"type": "BPE", "dropout": null, "unk_token": null,
              "continuing_subword_prefix": null, "end_of_word_suffix": null,
              "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"}
  })");
  auto tok = Tokenizer::from_hf_json(root.dump());
  EXPECT_EQ(tok->encode("ab", false, false), (std::vector<int32_t>{2}));
}

TEST(HfJson, Errors) {
  auto status = [](const std::string& text) {
    try {
      Tokenizer::from_hf_json(text);
    } catch (const lilims::Error& e) {
      return e.status();
    }
    return LILIMS_OK;
  };
  EXPECT_EQ(status("{not json"), LILIMS_ERR_BAD_FORMAT);
  EXPECT_EQ(status("{}"), LILIMS_ERR_BAD_FORMAT);
  EXPECT_EQ(status(R"({"model": {"type": "Unigram", "vocab": []}})"), LILIMS_ERR_UNSUPPORTED);
  EXPECT_EQ(status(R"({"model": {"type": "BPE", "vocab": {"a": "x"}}})"), LILIMS_ERR_BAD_FORMAT);
}

}  // namespace
