// A transformer of one of the families lilims runs (models/arch.h: llama,
// Phi-2, Phi-3, Gemma 3, Qwen2, Qwen3) as a GGUF file describes it
// (llama.cpp's tensor names and `{arch}.*` keys): hyperparameters and
// weights.  How the weights are combined is the family's graph builder's
// business; this is only what the file holds, checked.
//
// Shapes follow llama2.c's habit of saying them in comments; a weight
// "(rows, cols)" maps cols inputs to rows outputs (GGUF ne = {cols, rows}).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "models/gguf.h"
#include "quant/prelaid.h"
#include "quant/quant.h"

namespace lilims::models {

enum class Arch { llama, phi2, phi3, gemma3, qwen2, qwen3 };
// general.architecture of a family (models/arch.h has the rest of its description).
const char* arch_name(Arch a);

struct HParams {
  Arch arch = Arch::llama;
  int32_t n_vocab = 0;
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;     // dim
  int32_t n_layer = 0;
  int32_t n_head = 0;
  int32_t n_head_kv = 0;
  int32_t head_dim = 0;   // attention.key_length, else n_embd / n_head
  int32_t n_ff = 0;       // hidden_dim of the feed-forward
  int32_t n_rot = 0;      // rotary dimensions per head (<= head_dim; phi2 rotates a part)
  bool rope_neox = false; // rotate pairs (i, i + n_rot/2) (phi); else (2i, 2i+1) (llama)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f; // linear scaling (rope.scaling.type linear): 1 / factor
  float norm_eps = 1e-5f; // RMSNorm (llama, phi3) or LayerNorm (phi2) epsilon
  int32_t sliding_window = 0;   // keys q - window < k <= q; 0 = the whole context
  // Which layers use the window (and the local RoPE base): all of them when
  // empty (phi3); Gemma 3's local layers (n_layer entries).
  std::vector<uint8_t> swa_layers;
  float rope_freq_base_swa = 0.0f;  // the local layers' RoPE base (Gemma 3); 0: rope_freq_base
  int32_t rope_orig_ctx = 0;    // phi3 longrope: the context the short factors are for
  float rope_attn_factor = 1.0f;// phi3 longrope: cos/sin scale
  float attn_scale = 0.0f;      // attention score scale; 0: 1 / sqrt(head_dim)
  float embd_scale = 0.0f;      // embeddings scaled by this (Gemma: sqrt(n_embd)); 0: not
  float final_softcap = 0.0f;   // logits = c tanh(logits / c) (final_logit_softcapping); 0: not

  // Whether layer l attends over the sliding window (with the local RoPE base).
  bool is_swa(int l) const {
    return sliding_window > 0 && (swa_layers.empty() || swa_layers[(size_t)l] != 0);
  }

  int32_t kv_dim() const { return n_head_kv * head_dim; }
  int32_t q_dim() const { return n_head * head_dim; }
};

// A 2-D weight as the file holds it, and as the kernels want it.
struct Weight {
  std::string name;
  quant::Type type = quant::Type::F32;
  int64_t rows = 0, cols = 0;
  const void* data = nullptr;   // GGUF bytes (into the mapping, or into `requantized`)
  kernels::PackedWeight packed; // what the matmul kernels read (maybe repacked)
  // A weight stored in a type the load converts (one without kernels, Q5_1,
  // BF16, ..., or one this CPU runs faster converted: its traits' load_as) is
  // re-quantized at load to `type`; this holds those bytes while the kernels
  // read them (released once repacked, data then null).
  std::shared_ptr<const std::vector<uint8_t>> requantized;
  // A tensor the file holds already in a kernel layout (quant/prelaid.h):
  // `data` then points at those bytes and `type` is their block format;
  // layout kLayoutGguf for a plain tensor.
  quant::PrelaidType prelaid;
  // Why `packed.storage` or `requantized` holds a copy of the weight ("" when neither).
  std::string copy_reason;
  uint32_t file_type = 0;       // the GGML type the file stores it in
  std::vector<float> bias;      // (rows) or empty
  // A weight fused at load from several file tensors: their names, in the
  // order their rows are stacked (each keeps its own name for imatrix and
  // the like).  Empty for a weight that is one file tensor (`name`).
  std::vector<std::string> parts;
  std::vector<int64_t> part_rows;  // rows of each of `parts`
  bool present() const { return rows > 0; }
};

// A weight over a 2-D GGUF tensor's bytes as the file holds them (rows x
// cols, not yet packed for the kernels).
Weight weight_of(const gguf::TensorInfo& t, const std::string& name, int64_t rows, int64_t cols);
// What pack_weight calls as it copies a weight: gives those pages of the
// file's mapping back, so a repacked weight is not resident twice.
kernels::SourceDone drop_copied_pages(const gguf::File& f);

struct Norm {
  std::vector<float> w;  // (n_embd)
  std::vector<float> b;  // (n_embd) for LayerNorm, empty for RMSNorm
  bool present() const { return !w.empty(); }
};

struct Layer {
  Norm attn_norm;
  Norm attn_q_norm, attn_k_norm;   // (head_dim) per-head RMSNorm of Q and K (Gemma 3, Qwen3)
  Norm post_attn_norm;             // RMSNorm of the attention's output (Gemma 3)
  Norm post_ffn_norm;              // RMSNorm of the MLP's output (Gemma 3)
  // Either separate projections (llama, phi2) ...
  Weight wq;      // (n_head * head_dim, n_embd)
  Weight wk;      // (n_head_kv * head_dim, n_embd)
  Weight wv;      // (n_head_kv * head_dim, n_embd)
  // ... or one fused [Q; K; V]: (q_dim + 2 kv_dim, n_embd), as phi3 files
  // hold it, or stacked at load from attn_q, attn_k and attn_v (`parts`;
  // wq, wk and wv are then absent).
  Weight wqkv;
  Weight wo;      // (n_embd, n_head * head_dim)
  Norm ffn_norm;  // empty for phi2 (attention and MLP share attn_norm)
  Weight w_gate;  // (n_ff, n_embd)      llama2.c w1; absent for phi2, phi3
  Weight w_up;    // (n_ff, n_embd)      llama2.c w3; or [gate; up] (2 n_ff, n_embd), as
                  // phi3 files hold it or stacked at load from ffn_gate and ffn_up
                  // (`parts`; w_gate is then absent)
  Weight w_down;  // (n_embd, n_ff)      llama2.c w2

  // Every projection, present or not.
  std::array<const Weight*, 8> weights() const {
    return {&wq, &wk, &wv, &wqkv, &wo, &w_gate, &w_up, &w_down};
  }
};

struct Model {
  HParams hp;
  Weight tok_embd;                // (n_vocab, n_embd)
  std::vector<Layer> layers;
  Norm output_norm;
  Weight output;                  // (n_vocab, n_embd); tok_embd's bytes when tied
  bool tied_output = false;
  // phi3 longrope: per-dim frequency divisors (n_rot / 2), for contexts up to
  // rope_orig_ctx (short) and beyond (long).  Empty otherwise.
  std::vector<float> rope_factors_short, rope_factors_long;
  uint64_t n_params = 0;
  size_t repacked_bytes = 0;      // extra memory the kernels' layouts take
  size_t requantized_bytes = 0;   // re-quantized weights read as they are (not repacked)
  size_t n_requantized = 0;       // tensors re-quantized at load
  double repack_seconds = 0.0;
  size_t n_fused = 0;             // weights stacked at load from several tensors
  // The weight bytes the load copied into memory of its own (repacked,
  // re-quantized, or laid out again), by Weight::copy_reason: together
  // repacked_bytes + requantized_bytes.  Empty when every weight is read
  // from the file.
  std::map<std::string, uint64_t> copied;
  std::unique_ptr<gguf::File> file;  // owns the mapping every Weight points into

  // Weight bytes the kernels read from the file mapping (neither repacked
  // nor re-quantized).
  uint64_t mapped_weight_bytes() const;
};

struct LoadOptions {
  bool repack = true;  // let the matmul kernels repack weights at load
  // Stack each layer's separate Q, K, V projections (llama, phi2; biases
  // too) into one weight, and a llama layer's gate and up projections into
  // another, so each runs as one matmul (the logits do not change).  Only
  // for repacked weights of one type whose row counts are whole row groups
  // of the layout (kernels::can_stack); the others stay separate.
  bool fuse_projections = true;
  // Threads that repack the weights (the bytes do not depend on it); 0:
  // one per core of the machine (load_threads).
  int n_threads = 0;
  // Called after each tensor is read (repacked) with the fraction of the
  // file's tensor bytes done so far (nondecreasing, 1 after the last).  It
  // may throw to abandon the load: everything built so far is freed.
  std::function<void(float fraction)> progress;
};

// Builds the model from a parsed GGUF whose general.architecture is one of
// models/arch.h's families.  Throws lilims::Error: LILIMS_ERR_UNSUPPORTED for another
// architecture or an unreadable tensor type, LILIMS_ERR_MISSING for an
// absent tensor or hyperparameter, LILIMS_ERR_BAD_FORMAT for inconsistent
// shapes or hyperparameters.
std::unique_ptr<Model> load_model(std::unique_ptr<gguf::File> file, const LoadOptions& opt = {});

// The threads a load repacks on: opt.n_threads, or one per core when it is 0.
int load_threads(const LoadOptions& opt);

// What the embedding rows are read from: a tied output's repacked copy when
// there is one (the same bytes, in the kernels' layout), so that after the
// load the file's pages of token_embd are never touched again and only one
// copy of the table is resident; tok_embd's bytes otherwise.
const kernels::PackedWeight& embedding_table(const Model& m);

// Model::copied in words, largest first: "15.8 MiB: repacked into ...; 2.1
// MiB: ..." ("" when nothing was copied).
std::string describe_copies(const Model& m);

// Dequantizes row `row` of a weight (e.g. one token's embedding) into out (cols floats).
void dequantize_row(const Weight& w, int64_t row, float* out);

}  // namespace lilims::models
