// GGUF metadata -> tok::Vocab (the tokenizer.ggml.* keys llama.cpp's
// converter writes).
#pragma once

#include "tokenizer/vocab.h"

namespace lilims::gguf {
class File;
}

namespace lilims::models {

// Throws lilims::Error: LILIMS_ERR_MISSING (no tokenizer.ggml.model /
// tokens / merges of a BPE vocabulary), LILIMS_ERR_BAD_FORMAT (a key of the
// wrong type or an array of the wrong length; the message names the key).
// The model name and pre-tokenizer are checked by Tokenizer::from_vocab.
tok::Vocab vocab_from_gguf(const gguf::File& f);

}  // namespace lilims::models
