#include "models/weight_convert.h"

#include "quant/quant.h"
#include "quant/quantize.h"

namespace lilims::models {

std::vector<uint8_t> convert_for_kernels(const quant::TypeTraits& src, const uint8_t* data, int64_t rows,
                                         int64_t cols) {
  const quant::Type to = src.load_as;
  const size_t src_row = quant::row_bytes(src.type, cols);
  const size_t dst_row = quant::row_bytes(to, cols);
  std::vector<uint8_t> bytes(dst_row * (size_t)rows);
  std::vector<float> row((size_t)cols);
  for (int64_t r = 0; r < rows; ++r) {
    if (src.transcode) {
      src.transcode(data + (size_t)r * src_row, bytes.data() + (size_t)r * dst_row, cols);
      continue;
    }
    src.to_float(data + (size_t)r * src_row, row.data(), cols);
    quant::quantize_row(to, row.data(), bytes.data() + (size_t)r * dst_row, cols, quant::QuantMethod::plain);
  }
  return bytes;
}

}  // namespace lilims::models
