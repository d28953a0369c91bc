// The llama architecture as GGUF describes it (`llama.*` keys, llama.cpp's
// tensor names): hyperparameters, weights, and the forward pass.
//
// Shapes follow llama2.c's habit of saying them in comments; a weight
// "(rows, cols)" maps cols inputs to rows outputs (GGUF ne = {cols, rows}).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "models/gguf.h"
#include "quant/quant.h"

namespace lilims::models {

struct LlamaHParams {
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;     // dim
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;   // n_embd / n_head
  int32_t n_ff = 0;       // hidden_dim of the SwiGLU feed-forward
  int32_t n_rot = 0;      // rotary dimensions per head (<= head_dim)
  float rope_freq_base = 10000.0f;
  float norm_eps = 1e-5f;

  int32_t kv_dim() const { return n_head_kv * head_dim; }
};

// A 2-D weight as the file holds it, and as the kernels want it.
struct Weight {
  std::string name;
  quant::Type type = quant::Type::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;   // GGUF bytes (into the mapping)
  kernels::PackedWeight packed; // what the matmul kernels read (maybe repacked)
};

struct LlamaLayer {
  std::vector<float> attn_norm;  // (n_embd)
  Weight wq;                     // (n_head * head_dim, n_embd)
  Weight wk;                     // (n_head_kv * head_dim, n_embd)
  Weight wv;                     // (n_head_kv * head_dim, n_embd)
  Weight wo;                     // (n_embd, n_head * head_dim)
  std::vector<float> ffn_norm;   // (n_embd)
  Weight w_gate;                 // (n_ff, n_embd)   llama2.c w1
  Weight w_up;                   // (n_ff, n_embd)   llama2.c w3
  Weight w_down;                 // (n_embd, n_ff)   llama2.c w2
};

struct LlamaModel {
  LlamaHParams hp;
  Weight tok_embd;                // (n_vocab, n_embd)
  std::vector<LlamaLayer> layers;
  std::vector<float> output_norm; // (n_embd)
  Weight output;                  // (n_vocab, n_embd); tok_embd's bytes when tied
  bool tied_output = false;
  uint64_t n_params = 0;
  size_t repacked_bytes = 0;      // extra memory the kernels' layouts take
  double repack_seconds = 0.0;
  std::unique_ptr<gguf::File> file;  // owns the mapping every Weight points into
};

struct LoadOptions {
  bool repack = true;  // let the matmul kernels repack weights at load
};

// Builds the model from a parsed GGUF.  Throws lilims::Error:
// LILIMS_ERR_UNSUPPORTED for another architecture or an unreadable tensor
// type, LILIMS_ERR_MISSING for an absent tensor or hyperparameter,
// LILIMS_ERR_BAD_FORMAT for inconsistent shapes or hyperparameters.
std::unique_ptr<LlamaModel> load_llama(std::unique_ptr<gguf::File> file,
                                       const LoadOptions& opt = {});

// Dequantizes row `row` of a weight (e.g. one token's embedding) into out (cols floats).
void dequantize_row(const Weight& w, int64_t row, float* out);

}  // namespace lilims::models
