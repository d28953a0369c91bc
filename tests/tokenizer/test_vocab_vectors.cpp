// Every vector of every llama.cpp vocab test file (../shared/data/vocab,
// from ggml-org/llama.cpp models/, produced by the original Hugging Face
// tokenizers) must be reproduced exactly: encode(text, add_bos = false,
// parse_special = false).  One test per vocab file; a vocabulary type lilims
// cannot load is a failure, not a skip.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/error.h"
#include "models/gguf.h"
#include "tokenizer/tokenizer.h"
#include "vocab_vectors.h"

namespace {

using lilims::tok::Tokenizer;

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += " " + std::to_string(id);
  return s;
}

void check_vectors(const std::string& path, const std::string& vectors_path);

void check_vocab(const std::string& name) {
  const std::string path = lilims::test::shared_data("vocab/ggml-vocab-" + name + ".gguf");
  LILIMS_REQUIRE_FILE(path, "ggml-org/llama.cpp models/, see ../shared/data/SOURCES.md");
  check_vectors(path, path);
}

// A vocabulary whose .gguf is too large for ../shared/data (its .inp/.out
// are there): read from $LILIMS_LLAMACPP_VOCAB_DIR, e.g. the models/ folder of
// the llama.cpp source scripts/build_llamacpp.sh unpacks
// ($(scripts/build_llamacpp.sh --print-dir)/_src/llama_cpp_python-*/vendor/llama.cpp/models);
// skipped without it.
void check_large_vocab(const std::string& name) {
  const std::string file = "ggml-vocab-" + name + ".gguf";
  const char* dir = std::getenv("LILIMS_LLAMACPP_VOCAB_DIR");
  const std::string path = std::string(dir ? dir : "") + "/" + file;
  if (!dir || !lilims::test::file_exists(path)) {
    GTEST_SKIP() << file << " is not in ../shared/data; set LILIMS_LLAMACPP_VOCAB_DIR to llama.cpp's models/";
  }
  check_vectors(path, lilims::test::shared_data("vocab/" + file));
}

void check_vectors(const std::string& path, const std::string& vectors_path) {
  std::string err;
  const auto vectors = lilims::test::read_vocab_vectors(vectors_path, &err);
  ASSERT_TRUE(err.empty()) << err;
  ASSERT_GE(vectors.size(), 40u);
  std::unique_ptr<Tokenizer> tok;
  try {
    auto f = lilims::gguf::File::open(path);
    tok = Tokenizer::from_gguf(*f);
  } catch (const lilims::Error& e) {
    FAIL() << "cannot load " << path << ": " << e.what();
  }
  int failures = 0;
  for (const auto& v : vectors) {
    const std::vector<int32_t> got = tok->encode(v.text, false, false);
    EXPECT_EQ(ids_str(got), ids_str(v.ids)) << "text: '" << v.text << "'";
    failures += got != v.ids;
  }
  EXPECT_EQ(failures, 0) << failures << " of " << vectors.size() << " vectors differ";
}

}  // namespace

TEST(VocabVectors, LlamaSpm) { check_vocab("llama-spm"); }
TEST(VocabVectors, Phi3) { check_vocab("phi-3"); }
TEST(VocabVectors, Gpt2) { check_vocab("gpt-2"); }
TEST(VocabVectors, Starcoder) { check_vocab("starcoder"); }
TEST(VocabVectors, DeepseekCoder) { check_vocab("deepseek-coder"); }
TEST(VocabVectors, DeepseekLlm) { check_vocab("deepseek-llm"); }
TEST(VocabVectors, Falcon) { check_vocab("falcon"); }
TEST(VocabVectors, Mpt) { check_vocab("mpt"); }
TEST(VocabVectors, Refact) { check_vocab("refact"); }
TEST(VocabVectors, BertBge) { check_vocab("bert-bge"); }
TEST(VocabVectors, LlamaBpe) { check_large_vocab("llama-bpe"); }
TEST(VocabVectors, Qwen2) { check_large_vocab("qwen2"); }
TEST(VocabVectors, CommandR) { check_large_vocab("command-r"); }
