// Laying a GGUF model's weights out for lilims' kernels once, in the file
// (`lilims quantize IN OUT TYPE --layout TARGET`): a load then reads them in
// place from a read-only mapping and copies none (quant/prelaid.h has the
// tensor types and the version key).
#pragma once

#include <map>
#include <string>

#include "models/gguf.h"

namespace lilims::gguf {

// Which CPUs a file is laid out for:
//   avx2        4-row groups (x86 with AVX2; also what AVX-512 CPUs run when
//               they lack VNNI)
//   avx512vnni  16-row groups (x86 with AVX-512 VNNI)
//   neon        4-row groups, Q4_0 nibbles as the aarch64 kernels read them
//   native      the layout this CPU's kernels read (one of the above)
//   gguf        none: plain GGUF tensors (the file llama.cpp reads)
// Returns the canonical target for a name ("native" resolved), or throws
// LILIMS_ERR_INVALID_ARGUMENT naming the choices (and for native on a CPU
// whose kernels read no interleaved layout).
std::string layout_target(const std::string& name);

// A copy of `in` whose matmul weights are stored in `target`'s layout (a
// canonical name, not gguf): every 2-D *.weight tensor of a type the layout
// holds, but token_embd.weight when the model has its own output.weight
// (the embedding is then only read row by row and stays plain).  Each
// layer's attn_q, attn_k, attn_v follow each other in that order, and
// ffn_gate then ffn_up, so a load stacks them without a copy; the data is
// aligned to quant::kPrelaidAlignment; metadata gains lilims.layout.version
// and lilims.layout.target.  A weight of a type the target has no layout
// for but a load converts (Q4_K, Q5_K, Q6_K, Q5_0 outside avx512vnni, BF16,
// ...: their traits' load_as) is converted here as a load would
// (models/weight_convert.h), bit for bit, then laid out: the file is larger
// (Q6_K 6.6 -> Q8_0 8.5 bits a weight, Q4_K 4.5 -> Q4_1 5) and its load
// copies nothing.  Throws LILIMS_ERR_UNSUPPORTED for a tensor lilims
// cannot read (already pre-laid ones included).
struct LayOutStats {
  std::map<std::string, int> converted;  // "Q6_K -> Q8_0": tensors converted
};
Writer lay_out(const File& in, const std::string& target, LayOutStats* stats = nullptr);

}  // namespace lilims::gguf
