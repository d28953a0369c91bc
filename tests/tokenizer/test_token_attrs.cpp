// Special tokens that strip the whitespace beside them (lstrip/rstrip), as
// HF tokenizers applies them from added_tokens and llama.cpp from its
// name-keyed rules for GGUF vocabularies.  Goldens: HF tokenizers over
// GPT-2's vocabulary with Phi-3-style added tokens
// (scripts/goldens/gen_token_attr_goldens.py -> tests/data/token_attr_goldens.json).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "models/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace lilims::tok {
namespace {

using nlohmann::json;

struct Golden {
  json added;  // [{id, content, special, lstrip, rstrip}]
  std::vector<std::pair<std::string, std::vector<int32_t>>> cases;
};

Golden load_golden() {
  const json j = json::parse(test::read_file(test::source_path("tests/data/token_attr_goldens.json")));
  Golden g;
  g.added = j.at("added_tokens");
  for (const json& c : j.at("cases")) g.cases.push_back({c.at("text"), c.at("ids").get<std::vector<int32_t>>()});
  return g;
}

std::string gpt2_path() { return test::shared_data("vocab/ggml-vocab-gpt-2.gguf"); }

// GPT-2's vocabulary as a tokenizer.json, with the golden's added tokens.
std::string gpt2_json(const gguf::File& f, const json& added_tokens) {
  const gguf::Value& toks = *f.find("tokenizer.ggml.tokens");
  const gguf::Value& merges = *f.find("tokenizer.ggml.merges");
  json vocab = json::object();
  for (size_t i = 0; i < toks.size(); ++i) vocab[std::string(toks.string_at(i))] = i;
  json m = json::array();
  for (size_t k = 0; k < merges.size(); ++k) m.push_back(std::string(merges.string_at(k)));
  json added = json::array({{{"id", 50256}, {"content", "<|endoftext|>"}, {"special", true}}});
  for (const json& a : added_tokens) added.push_back(a);
  const json root = {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", m}}},
      {"added_tokens", added},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}}};
  return root.dump();
}

// GPT-2's vocabulary as a GGUF with the golden's added tokens as control
// tokens and the given general.name (llama.cpp's rules key on it).
std::unique_ptr<gguf::File> gpt2_gguf(const gguf::File& f, const json& added_tokens,
                                      const std::string& name, std::vector<uint8_t>* bytes) {
  const gguf::Value& toks = *f.find("tokenizer.ggml.tokens");
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (size_t i = 0; i < toks.size(); ++i) {
    tokens.emplace_back(toks.string_at(i));
    types.push_back(static_cast<int32_t>(f.find("tokenizer.ggml.token_type")->at(i).i));
  }
  for (const json& a : added_tokens) {
    EXPECT_EQ(a.at("id").get<size_t>(), tokens.size());
    tokens.push_back(a.at("content"));
    types.push_back(kTokenControl);
  }
  gguf::Writer w;
  for (const auto& kv : f.metadata()) w.add(kv.key, kv.value);
  w.add_string("general.name", name);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  *bytes = w.to_bytes();
  return gguf::File::from_bytes(bytes->data(), bytes->size());
}

bool has_mask(const std::string& s) { return s.find("<mask>") != std::string::npos; }

TEST(TokenAttrs, HfJsonAddedTokensMatchHfTokenizers) {
  LILIMS_REQUIRE_FILE(gpt2_path(), "ggml-org/llama.cpp models/, see SOURCES.md");
  const Golden g = load_golden();
  auto f = gguf::File::open(gpt2_path());
  auto tok = Tokenizer::from_hf_json(gpt2_json(*f, g.added));
  for (const auto& [text, ids] : g.cases) EXPECT_EQ(tok->encode(text, false, true), ids) << text;
}

// llama.cpp gives every special token but <|endoftext|> RSTRIP when the model
// is named like Phi-3: the golden's rstrip tokens agree (its <mask> strips
// on the left, which llama.cpp's Phi-3 rule does not know, so those cases
// are left out).
TEST(TokenAttrs, GgufNamedPhi3StripsAfterSpecialTokens) {
  LILIMS_REQUIRE_FILE(gpt2_path(), "ggml-org/llama.cpp models/, see SOURCES.md");
  const Golden g = load_golden();
  auto f = gguf::File::open(gpt2_path());
  std::vector<uint8_t> bytes;
  auto phi = gpt2_gguf(*f, g.added, "Phi-3-mini-4k-instruct", &bytes);
  auto tok = Tokenizer::from_gguf(*phi);
  size_t compared = 0;
  for (const auto& [text, ids] : g.cases) {
    if (has_mask(text)) continue;
    EXPECT_EQ(tok->encode(text, false, true), ids) << text;
    ++compared;
  }
  EXPECT_GE(compared, 5u);

  // Any other name keeps the whitespace: the ids differ wherever a marker
  // is followed by whitespace.
  std::vector<uint8_t> bytes2;
  auto plain = gpt2_gguf(*f, g.added, "some-model", &bytes2);
  auto tok2 = Tokenizer::from_gguf(*plain);
  EXPECT_NE(tok2->encode(g.cases[0].first, false, true), g.cases[0].second);
  EXPECT_EQ(tok2->encode("<|user|>", false, true), tok->encode("<|user|>", false, true));
}

}  // namespace
}  // namespace lilims::tok
