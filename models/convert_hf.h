// Hugging Face model directories (config.json, safetensors, tokenizer.json)
// to GGUF, laid out as llama.cpp's convert_hf_to_gguf.py lays them out for
// LlamaForCausalLM ("llama"), PhiForCausalLM ("phi2") and Phi3ForCausalLM
// ("phi3"): the same tensor names, metadata keys and, for llama, the same
// per-head reordering of attn_q/attn_k rows (HF's rotate-half pairs (i,
// i + d/2) become adjacent pairs (2i, 2i + 1), the pairs llama's RoPE turns).
#pragma once

#include <cstddef>
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
// tokenizer.json, checkpoint or required hyperparameter;
// LILIMS_ERR_UNSUPPORTED for an architecture, a tensor, a dtype or a RoPE
// scaling it does not know; LILIMS_ERR_BAD_FORMAT for inconsistent shapes or
// malformed files.  Facts the GGUF cannot carry (see add_hf_tokenizer) are
// appended to *notes when it is not null.
gguf::Writer convert_hf_dir(const std::string& dir, const HfConvertOptions& opt = {},
                            std::vector<std::string>* notes = nullptr);

}  // namespace lilims::models
