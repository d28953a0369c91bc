// llama2.c checkpoints (karpathy/llama2.c run.c / export.py) to GGUF.
//
// Reads the legacy "version 0" .bin (7 int32 header, fp32 arrays; a negative
// vocab_size means the classifier is not shared) and the "version 1" fp32
// .bin ("ak42" magic, 256-byte header), plus optionally a tokenizer.bin
// (tok512.bin style: max_token_length, then score/len/bytes per token; the
// count comes from the checkpoint).  Tensor names, shapes and metadata keys
// are llama.cpp's, as in its stories260K.gguf (see LLAMA2C_NOTES.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/gguf.h"

namespace lilims::models {

struct Llama2cConfig {
  int version = 0;      // 0 (legacy) or 1 ("ak42" fp32)
  int dim = 0;          // n_embd
  int hidden_dim = 0;   // n_ff
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;
  int vocab_size = 0;   // always positive here
  int seq_len = 0;      // training context length
  bool shared_classifier = true;  // output.weight == token_embd.weight
};

struct Llama2cOptions {
  // llama.cpp writes output.weight even when the classifier is shared (a
  // copy of token_embd.weight).  By default lilims writes it only when it is
  // not shared; a reader then uses token_embd.weight for the LM head.
  bool write_tied_output = false;
  std::string name = "llama";  // general.name
  // Called after each tensor is added: (tensors done, tensors in all, its name).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

// Parses and validates the header of a checkpoint image (the whole file, so
// the size can be checked).  Throws lilims::Error LILIMS_ERR_BAD_FORMAT with
// a "[convert]" message for a truncated, oversized or implausible file.
Llama2cConfig parse_llama2c_config(const void* data, size_t size);

// Converts a checkpoint image (+ an optional tokenizer image: nullptr for none)
// into a Writer holding all tensors (F32) and metadata.
gguf::Writer convert_llama2c(const void* checkpoint, size_t checkpoint_size,
                             const void* tokenizer, size_t tokenizer_size,
                             const Llama2cOptions& opt = {});
// Same from files (LILIMS_ERR_IO when they cannot be read); tokenizer_path may
// be empty.
gguf::Writer convert_llama2c_files(const std::string& checkpoint_path,
                                   const std::string& tokenizer_path,
                                   const Llama2cOptions& opt = {});

}  // namespace lilims::models
