// Pre-tokenizers of byte-level BPE vocabularies, written by hand (no regex
// engine).  Each reproduces the split the model's Hugging Face tokenizer.json
// makes: a sequence of Split(pattern, behavior = Isolated) passes, where every
// pass cuts each piece of the previous pass into its leftmost-first,
// non-overlapping matches and the gaps between them.  The patterns are quoted
// beside their matchers in pretokenize.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace lilims::tok {

enum class PreTokenizer {
  kNone,           // the whole text is one piece
  kGpt2,           // gpt-2, phi-2, mpt, olmo, jais, ...
  kLlama3,         // llama-bpe, dbrx, falcon3, ... (digits in groups of up to 3)
  kQwen2,          // qwen2 (llama3's pattern with single digits)
  kDigitsGpt2,     // starcoder, refact, smollm, command-r, ...: \p{N} isolated, then gpt-2
  kDeepseekLlm,
  kDeepseekCoder,
  kFalcon,
  kGpt4o,          // gpt-4o, llama4 (o200k: words split at ASCII case changes, digits in 1-3)
  kDefault,        // llama.cpp's split for a byte-level BPE of no known pre-tokenizer
};

// A GGUF tokenizer.ggml.pre value as llama.cpp reads it (llama-vocab.cpp):
// the split, and the two settings that come with some names.
struct PreTokenizerSpec {
  PreTokenizer split;
  bool ignore_merges;  // a piece that is a token is taken whole (llama3's family)
  bool add_bos;        // BOS when the file has no tokenizer.ggml.add_bos_token
};
// Maps every name llama.cpp gives one of the splits above; false if unknown.
// An absent key reads as "default".  Lists the accepted names with
// pre_tokenizer_names().
bool pre_tokenizer_from_name(const std::string& name, PreTokenizerSpec* out);
const std::vector<std::string>& pre_tokenizer_names();
// The name llama.cpp gives it in tokenizer.ggml.pre (one of several for a
// shared split); pre_tokenizer_from_name maps it back.  nullptr for kNone,
// which has no name there.
const char* pre_tokenizer_name(PreTokenizer type);

// Splits valid UTF-8 text into pieces; appends their [begin, end) byte
// offsets to *pieces (empty text gives no pieces).
void pre_tokenize(PreTokenizer type, std::string_view text,
                  std::vector<std::pair<uint32_t, uint32_t>>* pieces);

}  // namespace lilims::tok
