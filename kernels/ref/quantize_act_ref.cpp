#include "kernels/ref/quantize_act_ref.h"

#include <cmath>
#include <cstring>

#include "base/fp16.h"
#include "quant/quant.h"

namespace lilims::kernels {
namespace {

// One block: returns d (float, before fp16 rounding) and the sum of q.
float quantize_block(const float* x, int8_t* q, int* sum) {
  float amax = 0.0f;
  for (int i = 0; i < quant::kBlock; ++i) amax = std::fmax(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  int s = 0;
  for (int i = 0; i < quant::kBlock; ++i) {
    q[i] = (int8_t)std::nearbyint(x[i] * id);  // default rounding: to nearest even
    s += q[i];
  }
  *sum = s;
  return d;
}

}  // namespace

void quantize_act_q8_0__ref(const float* x, void* y, int64_t k) {
  quant::BlockQ8_0* out = static_cast<quant::BlockQ8_0*>(y);
  for (int64_t b = 0; b < k / quant::kBlock; ++b) {
    int sum;
    const float d = quantize_block(x + b * quant::kBlock, out[b].q, &sum);
    out[b].d = fp32_to_fp16(d);
  }
}

void quantize_act_q8_1__ref(const float* x, void* y, int64_t k) {
  quant::BlockQ8_1* out = static_cast<quant::BlockQ8_1*>(y);
  for (int64_t b = 0; b < k / quant::kBlock; ++b) {
    int sum;
    const float d = quantize_block(x + b * quant::kBlock, out[b].q, &sum);
    out[b].d = fp32_to_fp16(d);
    out[b].s = fp32_to_fp16(d * (float)sum);
  }
}

}  // namespace lilims::kernels
