// A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json,
// chat_template.jinja) as the tokenizer.ggml.* metadata llama.cpp's
// convert_hf_to_gguf.py writes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gguf.h"

namespace lilims::models {

struct HfTokenizerOptions {
  int64_t n_vocab = 0;    // config.json vocab_size: the token list is padded to it
  int64_t bos_id = -1;    // config.json bos_token_id / eos_token_id, used when
  int64_t eos_id = -1;    // tokenizer_config.json does not name the token
  bool force_no_bos = false;  // phi2: llama.cpp's converter writes add_bos_token false
};

// Adds to `out`:
// - byte-level BPE (a ByteLevel pre-tokenizer or decoder): tokenizer.ggml.model
//   "gpt2", tokens as stored (bytes mapped to printable code points), merges
//   "a b", pre the llama.cpp name of the split lilims recognises;
// - SentencePiece-style BPE (byte_fallback, a Metaspace or Prepend step):
//   model "llama", scores from merge ranks (an earlier merge scores higher),
//   <0xNN> tokens typed BYTE, add_space_prefix;
// then token types (added tokens: CONTROL when special, else USER_DEFINED;
// ids up to n_vocab with no token: "[PAD<id>]", UNUSED, as llama.cpp),
// bos/eos/unk/padding ids, add_bos/add_eos and tokenizer.chat_template.
// lstrip/rstrip of added tokens have no GGUF key (llama.cpp, and lilims,
// derive them from the token's text and the model's general.name and
// architecture, which `out` must hold already): each added token whose flags
// a reader of the GGUF would not reproduce is named in *notes.
// Throws lilims::Error: LILIMS_ERR_MISSING without tokenizer.json,
// LILIMS_ERR_BAD_FORMAT for malformed JSON or ids, LILIMS_ERR_UNSUPPORTED for
// a model type or pre-tokenizer lilims cannot run.
void add_hf_tokenizer(const std::string& dir, const HfTokenizerOptions& opt, gguf::Writer* out,
                      std::vector<std::string>* notes);

}  // namespace lilims::models
