// The conversion a load applies to a weight of a type no kernel of the CPU
// reads as it is (Q4_K, Q5_K, Q6_K, Q2_K, IQ4_NL, BF16 ...; Q5_0 without
// the AVX-512 VNNI kernel): each row transcoded, or dequantized and
// quantized again with GGML's plain rounding, into the kernel type its
// traits' load_as names.  The loader (models/arch_support.h)
// and `lilims quantize --layout` (models/layout_file.cpp) both use it, so a
// file laid out once holds the bytes a plain file's load would make.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace lilims::models {

// rows x cols elements of src's type at `data` (GGUF rows) as load_as rows.
// cols must be a whole number of blocks of both types (checked by the
// caller, who names the tensor).  A block that holds a value that is not
// finite (a NaN or infinite fp16 scale, or a BF16 infinity) throws
// lilims::Error LILIMS_ERR_BAD_FORMAT naming tensor `name`, the row and the
// block: a community file with such a block would otherwise run to NaN
// logits with no word of why.
std::vector<uint8_t> convert_for_kernels(const quant::TypeTraits& src, const uint8_t* data, int64_t rows,
                                         int64_t cols, const std::string& name);

}  // namespace lilims::models
