// LoRA adapters in llama.cpp's GGUF adapter format, checked against the
// base model they are for.
//
// The file: general.type = "adapter", adapter.type = "lora",
// general.architecture = the base's, adapter.lora.alpha (float; absent or 0:
// the scale is the user's scale alone), and for each adapted weight W
// (rows n_out, cols n_in) of the base, two tensors named after it:
//   W.lora_a  ggml ne [n_in, rank]   (rank rows of n_in)
//   W.lora_b  ggml ne [rank, n_out]  (n_out rows of rank)
// so that W x becomes W x + scale * B (A x), scale = user_scale * alpha / rank
// (llama.cpp's llm_build_lora_mm).  A weight a load stacked (Q, K, V; gate and
// up) is adapted by its parts' names, each on its own rows.  The token
// embedding's pair is laid out as llama.cpp's llm_build_inp_embd reads it:
// token_embd.weight.lora_a ne [rank, n_vocab] (a row per token) and .lora_b
// ne [rank, n_embd]; each token's row gets scale * B a_row(token).  A tied LM
// head reads the table without the adapter (llama.cpp has no such case).
//
// In memory, A is held as the matmul kernels read it (Q8_0, repacked like
// the base's weights; F32 when n_in is not a multiple of 32) and B in Q8_0,
// cut into pieces of 64 output columns that each hold all rank rows of their
// columns (graph::LoraTerm::b), so that a task streams its columns: about a
// quarter of the F32 file's bytes, so that decode reads little beside the
// base.  Repacked A and B lie in one arena in the order the graph reads them
// (per weight A then B, layer by layer), so a decode step streams them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "models/gguf.h"
#include "models/model.h"

namespace lilims::models {

struct LoraWeight {
  std::string target;            // the base weight's name, e.g. "blk.3.attn_q.weight"
  int32_t rank = 0;
  int64_t n_in = 0, n_out = 0;
  bool embedding = false;        // the token embedding's: A is a_rows, n_in the vocabulary
  kernels::PackedWeight a;       // (rank, n_in)
  std::vector<float> a_rows;     // embedding: (n_vocab, rank), row v for token v
  std::vector<uint8_t> a_bytes;  // A's GGUF-layout bytes when `a` reads them in place
  kernels::ByteBuffer b;         // B in Q8_0, in graph::LoraTerm::b's pieces of columns
};

struct LoraAdapter {
  std::string arch;   // general.architecture
  std::string name;   // general.name, or empty
  float alpha = 0.0f; // adapter.lora.alpha
  std::string tool_format;  // lilims.tool_format: the tool format it was trained with, or empty
  std::vector<LoraWeight> weights;  // in the order the model's graph reads its weights
  uint64_t bytes = 0;               // memory the weights above take

  // scale * B (A x) is what adapting w with user scale `user_scale` adds.
  float scale(const LoraWeight& w, float user_scale) const {
    return alpha != 0.0f ? user_scale * alpha / (float)w.rank : user_scale;
  }
  const LoraWeight* find(const std::string& target) const;
};

// The base weights an adapter may adapt, by name: each file tensor a
// projection of the model reads (a stacked weight by its parts), with its
// shape (the token embedding's n_in is the vocabulary).
struct AdaptableWeight {
  std::string name;
  int64_t n_in = 0, n_out = 0;
  bool embedding = false;
};
std::vector<AdaptableWeight> adaptable_weights(const Model& m);

// Reads and checks an adapter for `base`.  Throws lilims::Error naming the
// key or tensor: LILIMS_ERR_BAD_FORMAT for a file that is not a LoRA adapter
// or a pair that does not fit (rank of A and B, shapes), LILIMS_ERR_INVALID_ARGUMENT
// for an adapter of another architecture or a tensor that names no weight
// of the base, LILIMS_ERR_UNSUPPORTED for a tensor type lilims cannot read,
// LILIMS_ERR_OUT_OF_MEMORY.
std::unique_ptr<LoraAdapter> load_lora(const gguf::File& file, const Model& base);

// The base file with an adapter baked in (`lilims merge-lora`): each adapted
// weight becomes W + scale B A, computed in float from the file's values
// (not from load_lora's Q8_0 / F16 copies) and written in `type` (F32, F16,
// Q8_0, Q4_0, Q4_1); every other tensor and key is copied as it is.  `model`
// is the base loaded from that file (the adapter is checked against it as
// load_lora does).  An adapted token embedding of a model whose LM head is
// tied to it is refused.  Throws lilims::Error.
gguf::Writer merge_lora(const gguf::File& base_file, const Model& model, const gguf::File& adapter,
                        float user_scale, quant::Type type);

}  // namespace lilims::models
