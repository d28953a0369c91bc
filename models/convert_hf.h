// Hugging Face model directories (config.json, safetensors, tokenizer.json or
// Gemma's tokenizer.model) to GGUF, laid out as llama.cpp's
// convert_hf_to_gguf.py lays them out for the classes models/arch.h lists:
// LlamaForCausalLM ("llama", also Llama 3's rope_type "llama3", whose
// frequency factors become rope_freqs.weight), Qwen2ForCausalLM ("qwen2"),
// Qwen3ForCausalLM ("qwen3"), Gemma3ForCausalLM ("gemma3": norms stored as
// 1 + w, a SentencePiece vocabulary), PhiForCausalLM ("phi2") and
// Phi3ForCausalLM ("phi3"): the same tensor names, metadata keys and, for
// llama, the same per-head reordering of attn_q/attn_k rows (HF's
// rotate-half pairs (i, i + d/2) become adjacent pairs (2i, 2i + 1), the
// pairs llama's RoPE turns).  config.json is read in both transformers 4.x
// spellings (rope_theta, rope_scaling, rope_local_base_freq,
// sliding_window_pattern) and 5.x ones (rope_parameters, per layer type for
// Gemma 3, and layer_types).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "quant/quant.h"

namespace lilims::models {

struct HfConvertOptions {
  // F32: every tensor F32.  F16 (llama.cpp's default --outtype): 2-D weights
  // F16, 1-D tensors F32.  Q8_0/Q4_0/Q4_1: 2-D weights whose rows split into
  // blocks in that type (as `lilims quantize` from the F32 values), 1-D F32.
  quant::Type type = quant::Type::F16;
  std::string name;  // general.name; empty: the directory's name
  // Called as tensors are read, then again as they are quantized:
  // (done, total, what).
  std::function<void(size_t, size_t, const std::string&)> progress;
};

// Throws lilims::Error (messages start "[convert]", or "[safetensors]" for
// a corrupt checkpoint): LILIMS_ERR_MISSING for a missing config.json,
// tokenizer file, checkpoint, weight or required hyperparameter (naming it);
// LILIMS_ERR_UNSUPPORTED for an architecture, a tensor, a dtype, a RoPE
// scaling or a setting it does not know (naming the config.json key);
// LILIMS_ERR_BAD_FORMAT for inconsistent shapes (layer_types that do not fit
// num_hidden_layers, ...) or malformed files.  Facts the GGUF cannot carry (see add_hf_tokenizer) are
// appended to *notes when it is not null.
gguf::Writer convert_hf_dir(const std::string& dir, const HfConvertOptions& opt = {},
                            std::vector<std::string>* notes = nullptr);

// Where convert_hf_dir puts one HF weight, for converters of other files
// named after the same model's modules (LoRA adapters: convert_peft.h).
struct HfWeightName {
  std::string gguf;  // "blk.3.attn_q.weight"
  // rope_q / rope_k: llama's q_proj / k_proj, whose rows convert_hf_dir
  // reorders with permute_rope_rows over attention.head_count (q) or
  // attention.head_count_kv (k) heads.
  enum class Rows { as_is, rope_q, rope_k } rows = Rows::as_is;
};
// The GGUF name of HF tensor `hf` ("model.layers.3.self_attn.q_proj.weight")
// in a model of GGUF architecture `arch` ("llama", "qwen3", ...); false
// when convert_hf_dir has none for it.  The block number is not checked.
bool hf_weight_gguf_name(const std::string& arch, const std::string& hf, HfWeightName* out);

// The rows of w (rows, cols) as llama's RoPE wants them: HF rows (i, i + d/2)
// of each of the n_head heads (d = rows / n_head) become rows (2i, 2i + 1).
// Throws LILIMS_ERR_BAD_FORMAT naming `name` when the rows do not split into
// n_head heads of an even size.
std::vector<float> permute_rope_rows(const std::vector<float>& w, uint64_t rows, uint64_t cols,
                                     int64_t n_head, const std::string& name);

// tokenizer.model (SentencePiece) as the tokenizer.ggml.* keys llama.cpp's
// converter writes for it: model "llama", pre "default", every piece with
// its score and type (USER_DEFINED pieces as NORMAL, as llama.cpp), ids up
// to n_vocab without a piece as "[PAD<id>]" UNUSED; added_tokens.json and
// tokenizer_config.json's added_tokens_decoder (score -1000, CONTROL when
// special); bos/eos/unk/sep/pad/cls/mask ids, add_bos/add_eos and the chat
// template.  `out` must hold general.name and general.architecture already
// (see add_hf_tokenizer's notes on strip flags).  Returns the token count.
// Throws LILIMS_ERR_MISSING without tokenizer.model, LILIMS_ERR_BAD_FORMAT
// for a malformed one (the byte offset named).  models/convert_hf_spm.cpp.
int64_t add_sentencepiece_tokenizer(const std::string& dir, int64_t n_vocab, gguf::Writer* out,
                                    std::vector<std::string>* notes);

}  // namespace lilims::models
