// Hugging Face PEFT LoRA adapters (adapter_config.json and
// adapter_model.safetensors, as PeftModel.save_pretrained writes them) to
// llama.cpp's GGUF LoRA format, as its convert_lora_to_gguf.py writes it:
//
//   general.architecture  the base GGUF's
//   general.type          "adapter"
//   general.name          the directory's name (or the caller's)
//   adapter.type          "lora"
//   adapter.lora.alpha    float32: llama.cpp scales each weight by alpha / rank
//   W.lora_a  ne [n_in, rank]   PEFT's lora_A.weight, torch shape (rank, n_in)
//   W.lora_b  ne [rank, n_out]  PEFT's lora_B.weight, torch shape (n_out, rank)
//
// for each adapted weight W of the base (ne [n_in, n_out]), named as
// convert_hf_dir names it (the module table of convert_hf.h), in the base's
// tensor order.  llama's q_proj / k_proj B rows get convert_hf_dir's per-head
// reordering, as the base weights did (A is untouched: the reordering is of
// output rows).  The token embedding is llama.cpp's exception: its lora_a is
// PEFT's lora_embedding_A (rank, vocab) transposed, ne [rank, vocab], and its
// lora_b is lora_embedding_B (dim, rank), ne [rank, dim] (llama.cpp gathers
// rows of lora_a by token id, then multiplies by lora_b).
//
// fan_in_fan_out (GPT-2's Conv1D) changes nothing here: PEFT keeps lora_A
// (rank, in) and lora_B (out, rank) for Conv1D too and transposes only the
// product to the base weight's (in, out) layout, while GGUF weights are
// always ne [n_in, n_out].
//
// One alpha for the whole file: PEFT's scale for a module is alpha_m / r_m
// (alpha_m / sqrt(r_m) with use_rslora), with alpha_m from alpha_pattern
// and r_m from the tensors (checked against rank_pattern).  llama.cpp's is
// alpha / r_m, so the file's alpha is scale_m * r_m, which must be the same
// for every module (to 1 part in 10^6): rank_pattern alone, and use_rslora
// with one rank everywhere, convert; per-module scales that no single alpha
// gives are refused, naming two modules that disagree.
#pragma once

#include <string>
#include <vector>

#include "models/gguf.h"
#include "quant/quant.h"

namespace lilims::models {

struct PeftConvertOptions {
  // F32 (the default, as llama.cpp's converter: the values exactly) or F16
  // (round to nearest even) for every lora_a / lora_b tensor.
  quant::Type type = quant::Type::F32;
  std::string name;  // general.name; empty: the directory's name
  // The tool format the adapter was trained with (runtime/constrain/tool_format.h
  // names), written as lilims.tool_format so that lilims uses it with the
  // adapter; empty: none.  llama.cpp ignores the key.
  std::string tool_format;
  // When > 0: every module's product B A is cut to its best rank-`rank`
  // approximation (models/low_rank.h) and written at that rank, PEFT's
  // per-module scale multiplied into B and adapter.lora.alpha = rank (so
  // llama.cpp's alpha / rank is 1).  A smaller file for the same adapter,
  // up to the singular values dropped; per-module scales that no single alpha
  // gives convert too.  Every module's rank must be at least this.
  int64_t rank = 0;
};

// True when `dir` holds an adapter_config.json (a PEFT adapter directory).
bool is_peft_dir(const std::string& dir);

// Converts the adapter in `dir` for the base model in the GGUF at
// `base_path`, of which only the metadata and tensor shapes are read.
// Throws lilims::Error, messages "[convert] ..." naming the file, key,
// module or tensor:
// - LILIMS_ERR_MISSING: no adapter_config.json, no r / lora_alpha /
//   peft_type, no adapter_model.safetensors, no LoRA tensor at all, a
//   lora_A without its lora_B (or the reverse);
// - LILIMS_ERR_BAD_FORMAT: adapter_config.json not JSON or of wrong types,
//   A and B of different ranks, a rank other than r / rank_pattern's, bad
//   tensor dimensions, a corrupt safetensors file ("[safetensors] ...");
// - LILIMS_ERR_UNSUPPORTED: peft_type other than LORA; what llama.cpp's
//   format cannot express: DoRA (use_dora) and the other LoRA variants
//   (use_qalora, alora_invocation_tokens, use_bdlora, velora, monteclora,
//   arrow, kasa), lora_bias, layer_replication, target_parameters,
//   modules_to_save and trainable_token_indices (full weights, not LoRA),
//   bias != "none" with bias tensors, an init that changed the base weights
//   (pissa, olora, corda, loftq), per-module scales no single alpha gives,
//   lora_alpha 0 (llama.cpp reads alpha 0 as "no alpha": scale 1), a module
//   convert_hf.h has no GGUF name for, any other tensor (also
//   adapter_model.bin: pickles are not read);
// - LILIMS_ERR_INVALID_ARGUMENT: an adapter that does not fit the base: a
//   module whose weight the base lacks, a shape other than the base
//   weight's, a base that is itself an adapter, a type other than F32/F16,
//   opt.rank above a module's rank;
// - from gguf::File::open for an unreadable base (LILIMS_ERR_IO, ...).
// What converts but is worth saying (alpha folded from use_rslora or
// alpha_pattern, full embedding weights skipped) is appended to *notes
// when it is not null.
gguf::Writer convert_peft_dir(const std::string& dir, const std::string& base_path,
                              const PeftConvertOptions& opt = {},
                              std::vector<std::string>* notes = nullptr);

}  // namespace lilims::models
