// The model families lilims runs, one description each: the GGUF
// architecture name, the Hugging Face classes `lilims convert` takes for it,
// how its hyperparameters and tensors are read (beyond what every family
// shares: models/load.cpp) and how one of its blocks is built into the graph
// (models/builders.cpp does the embedding and the head).  A family is one
// file, models/arch_NAME.cpp, and its line in models/arch.cpp's table.
#pragma once

#include <string>
#include <vector>

#include "models/model.h"

namespace lilims::models {

class Reader;       // models/arch_support.h
struct LayerGraph;  // models/arch_support.h

struct ArchDesc {
  Arch arch;
  const char* name;                     // general.architecture, the `{name}.*` keys' prefix
  std::vector<std::string> hf_classes;  // config.json "architectures" entries lilims convert takes
  bool rope_neox;                       // rotate pairs (i, i + n_rot/2); else (2i, 2i+1)
  bool layer_norm;                      // LayerNorm with biases (phi2); else RMSNorm
  // Its own keys, after the ones every family reads (hp already holds those).
  void (*read_hparams)(Reader& r, HParams& hp);
  // Its layers' tensors and any extra ones (RoPE factors); the embedding and
  // the output are read by the caller.
  void (*load_layers)(Reader& r, Model& m);
  // Block l's nodes: reads lg.s.x and adds its result into it.
  void (*build_layer)(LayerGraph& lg, int l);
  // The chat template (tokenizer/chat.h) when the file carries none; "" = none.
  const char* chat_template;
};

// The family of a general.architecture value, or null.
const ArchDesc* find_arch(const std::string& gguf_name);
// The family of a Hugging Face architecture class, or null.
const ArchDesc* find_arch_by_hf_class(const std::string& hf_class);
const ArchDesc& arch_desc(Arch a);
const std::vector<const ArchDesc*>& all_archs();
// "llama, phi2, ..." for messages.
std::string arch_list();

}  // namespace lilims::models
