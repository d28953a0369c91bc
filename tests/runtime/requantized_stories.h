// stories260K (F32 in the file) re-quantized in memory with GGML's plain
// rounding, with optional per-tensor types: the small model the runtime's
// layout and fusion tests load in each weight type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/gguf.h"
#include "models/requantize.h"
#include "test_util.h"

namespace lilims::test {

inline std::string stories_path() { return shared_data("stories260K/stories260K.gguf"); }

inline std::vector<uint8_t> stories_as(quant::Type type, const std::vector<gguf::TensorTypeRule>& rules = {}) {
  auto f = gguf::File::open(stories_path());
  gguf::RequantizeOptions ro;
  ro.method = quant::QuantMethod::plain;
  ro.tensor_types = rules;
  return gguf::requantize(*f, type, ro).to_bytes();
}

}  // namespace lilims::test
