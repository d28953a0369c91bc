#include "models/weight_convert.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "quant/quant.h"
#include "quant/quantize.h"

namespace lilims::models {

namespace {

// The first element of row that is NaN or infinite, or -1.
int64_t first_non_finite(const float* row, int64_t n) {
  bool all = true;
  for (int64_t i = 0; i < n; ++i) all &= std::isfinite(row[i]);
  if (all) return -1;
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(row[i])) return i;
  }
  return -1;
}

}  // namespace

std::vector<uint8_t> convert_for_kernels(const quant::TypeTraits& src, const uint8_t* data, int64_t rows,
                                         int64_t cols, const std::string& name) {
  const quant::Type to = src.load_as;
  const quant::TypeTraits& dst = quant::traits(to);
  const size_t src_row = quant::row_bytes(src.type, cols);
  const size_t dst_row = quant::row_bytes(to, cols);
  std::vector<uint8_t> bytes(dst_row * (size_t)rows);
  std::vector<float> row((size_t)cols);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* out = bytes.data() + (size_t)r * dst_row;
    // The source's values (a quantizer's rounding could hide a NaN), then
    // what the kernels will read (a finite value can overflow a scale).
    int64_t bad = -1;
    if (src.transcode) {
      src.transcode(data + (size_t)r * src_row, out, cols);
    } else {
      src.to_float(data + (size_t)r * src_row, row.data(), cols);
      bad = first_non_finite(row.data(), cols);
      if (bad < 0) quant::quantize_row(to, row.data(), out, cols, quant::QuantMethod::plain);
    }
    if (bad < 0) {
      dst.to_float(out, row.data(), cols);
      bad = first_non_finite(row.data(), cols);
    }
    if (bad >= 0) {
      const int64_t block = bad / src.block_size;
      throw Error(LILIMS_ERR_BAD_FORMAT,
                  "tensor " + name + " (" + src.name + ") row " + std::to_string(r) + ", block " +
                      std::to_string(block) + ": a value that is not finite (a NaN or infinite scale, " +
                      "or a value out of range)");
    }
  }
  return bytes;
}

}  // namespace lilims::models
