// llama.cpp's tokenizer test vectors (ggml-vocab-NAME.gguf.inp / .out): see
// ../shared/data/notes/LLAMACPP_TEST_NOTES.md for the format.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_util.h"

namespace lilims::test {

struct VocabVector {
  std::string text;
  std::vector<int32_t> ids;
};

// Parses NAME.inp/.out as test-tokenizer-0 does; empty on a format error.
inline std::vector<VocabVector> read_vocab_vectors(const std::string& gguf_path, std::string* error) {
  const std::string inp = read_file(gguf_path + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_file(gguf_path + ".out"));
  std::vector<VocabVector> result;
  std::string line;
  for (const std::string& t : texts) {
    if (!std::getline(out, line)) {
      *error = "fewer lines in .out than tests in .inp";
      return {};
    }
    VocabVector v{t, {}};
    std::istringstream ls(line);
    long id;
    while (ls >> id) v.ids.push_back(static_cast<int32_t>(id));
    result.push_back(std::move(v));
  }
  return result;
}

}  // namespace lilims::test
