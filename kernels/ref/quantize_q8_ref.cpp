#include "kernels/ref/quantize_q8_ref.h"

#include "quant/quantize.h"

namespace lilims::kernels {

void quantize_row_q8_0__ref(const float* x, void* y, int64_t k) {
  quant::quantize_row_q8_0(x, static_cast<quant::BlockQ8_0*>(y), k, quant::QuantMethod::plain);
}

void quantize_row_q8_1__ref(const float* x, void* y, int64_t k) {
  quant::quantize_row_q8_1(x, static_cast<quant::BlockQ8_1*>(y), k);
}

}  // namespace lilims::kernels
