// Re-quantization of a GGUF model, apart from the reader: it reads a
// gguf::File and emits a gguf::Writer.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "quant/quant.h"

namespace lilims::gguf {

// Re-quantization (`lilims quantize`).  Every 2-D *.weight tensor whose row
// length is a multiple of the target's block size (token_embd included) is
// dequantized to float and quantized to `type`; 1-D tensors become F32;
// anything else is copied.  All metadata is kept, general.file_type set
// (F32 0, F16 1, Q4_0 2, Q4_1 3, Q8_0 7, Q5_0 8) and, for block types,
// general.quantization_version = 2.  Sources may be in any type lilims reads,
// those it only dequantizes (Q5_1, BF16, ...: quant/quant.h's table)
// included; a 2-D weight whose rows do not split into the target's blocks
// is copied as it is.  Throws LILIMS_ERR_UNSUPPORTED for a source tensor
// lilims cannot read, LILIMS_ERR_INVALID_ARGUMENT for a target
// type other than F32/F16/Q4_0/Q4_1/Q8_0.
// Per-tensor type overrides (`--tensor-type PATTERN=TYPE`): the first rule
// whose glob matches a re-quantized tensor's whole name gives its type (F32,
// F16, Q4_0, Q4_1 or Q8_0).  requantize() throws LILIMS_ERR_INVALID_ARGUMENT
// for a rule that matches no re-quantized tensor and for a tensor whose rows
// do not split into its rule's blocks.
struct TensorTypeRule {
  std::string pattern;  // glob: '*' any run of characters, '?' one, [abc] / [0-9] / [!x] a class
  quant::Type type;
};

// Whole-name glob match (the rule above); a malformed class ('[' without
// ']') matches '[' literally.
bool glob_match(const std::string& pattern, const std::string& name);

// Parses "PATTERN=TYPE" (the last '='); throws LILIMS_ERR_INVALID_ARGUMENT
// "[quantize] ..." for a missing '=', an empty pattern or an unknown type.
TensorTypeRule parse_tensor_type_rule(const std::string& text);

// The second moments E[x x^T] of each weight's input, by tensor name:
// (n_cols, n_cols) row-major, lower triangle read (runtime::calibrate);
// weights that read the same input may share one matrix.
using SecondMoments = std::map<std::string, std::shared_ptr<const std::vector<float>>>;

struct RequantizeOptions {
  quant::QuantMethod method = quant::QuantMethod::search;
  std::vector<TensorTypeRule> tensor_types;
  // Per-column importance (imatrix) by tensor name: a tensor with an entry
  // is quantized by quant::quantize_row_weighted (the search, weighted);
  // the entry must have one value per column (LILIMS_ERR_INVALID_ARGUMENT
  // otherwise) and needs method search.  Null: none.
  const std::map<std::string, std::vector<float>>* importance = nullptr;
  // With second moments, a Q4_0 / Q4_1 / Q8_0 tensor that has an entry is
  // quantized with error compensation (quant/gptq.h; its block scales
  // weighted by the matrix's diagonal, `importance` then unused for it);
  // the entry must be (cols, cols) (LILIMS_ERR_INVALID_ARGUMENT otherwise)
  // and needs method search.  Null: none.
  const SecondMoments* second_moments = nullptr;
  // With second moments: first fold activation-aware column scales into
  // the weights that read an RMSNorm's output and into that norm
  // (models/awq.h), then quantize the scaled weights against the rescaled
  // moments.  The float model computes what it computed before.
  bool activation_scaling = false;
  // The exponents tried per group (null: 0, 0.1, .., 1).
  const std::vector<double>* scaling_grid = nullptr;
  // The alpha chosen per folded group, by norm name (filled when asked).
  std::map<std::string, double>* scaling_alphas = nullptr;
  // Rows of a tensor are quantized on this many threads (the bytes do not
  // depend on it).
  int n_threads = 1;
  // Called before each tensor (index, count, info); may be empty.
  std::function<void(size_t, size_t, const TensorInfo&)> progress;
};
Writer requantize(const File& in, quant::Type type, const RequantizeOptions& opt = {});
// general.file_type for a target type (-1 if not one of the above).
int file_type_of(quant::Type type);

}  // namespace lilims::gguf
