// A vocabulary as plain data: what a Tokenizer is built from, whatever file
// it came from.  models/vocab_gguf.cpp fills one from GGUF metadata (the
// tokenizer.ggml.* keys); a test or an app may fill one by hand.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace lilims::tok {

struct Vocab {
  // "llama" (SentencePiece BPE), "gpt2" (byte-level BPE) or "bert" (WordPiece).
  std::string model;
  // Byte-level BPE pre-tokenizer ("smollm", "llama-bpe", ...; tokenizer/
  // pretokenize.h); empty means "default".
  std::string pre;
  std::vector<std::string> tokens;  // (n_vocab) token text
  std::vector<float> scores;        // empty, or (n_vocab) SentencePiece scores
  std::vector<uint8_t> types;       // empty, or (n_vocab) TokenType
  std::vector<std::string> merges;  // byte-level BPE: "left right", in rank order

  // Special token ids: absent takes the model's default (SentencePiece: bos
  // 1, eos 2, unk 0; otherwise none); -1 means explicitly none.  Ids past
  // the vocabulary are ignored, as llama.cpp does.
  std::optional<int32_t> bos, eos, unk, eot, eom;
  // Absent: the model's default (add_bos: SentencePiece and WordPiece;
  // add_eos: WordPiece; add_space_prefix: SentencePiece).
  std::optional<bool> add_bos, add_eos, add_space_prefix;

  std::string chat_template;  // Jinja source, empty if none
  // The model's name and architecture: GGUF stores no lstrip/rstrip flags,
  // so llama.cpp's per-model rules key on these (tokenizer/tokenizer.h).
  std::string name, architecture;
};

}  // namespace lilims::tok
