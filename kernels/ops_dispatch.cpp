// The ops tables: the ref one built here from kernels/ref, the ISA ones in
// kernels/x86 and kernels/arm; which exist is decided by what the build
// compiled (kernels/ops.cmake), which runs by cpu_features().  Also the
// combination of split attention, plain C++ on every ISA.
#include <algorithm>
#include <cmath>

#include "kernels/isa_target.h"  // LILIMS_OPS_*: the tables this build holds
#include "kernels/ops.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/ops_ref.h"

namespace lilims::kernels {
namespace {

const OpsTable kOpsRef = [] {
  OpsTable t{};
  LILIMS_OPS_TABLE_FILL(t, ref)
  t.isa = Isa::ref;
  t.name = "ref";
  return t;
}();

}  // namespace

size_t attention_scratch_floats(const AttentionArgs& a) {
  return std::max(attention_scratch_floats__ref(a),
                  detail::attention_scratch_floats_simd(a.head_dim));
}

void attention_combine(const float* parts, int64_t stride, const float* lse, int64_t lse_stride,
                       int n, int d, float* out) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i) m = std::max(m, lse[i * lse_stride]);
  std::fill(out, out + d, 0.0f);
  if (m == -INFINITY) return;  // no range held a visible position
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float w = std::exp(lse[i * lse_stride] - m);
    if (w == 0.0f) continue;
    sum += w;
    const float* p = parts + i * stride;
    for (int j = 0; j < d; ++j) out[j] += w * p[j];
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < d; ++j) out[j] *= inv;
}

bool ops_isa_built(Isa isa) {
  switch (isa) {
    case Isa::ref: return true;
    case Isa::avx2:
#if defined(LILIMS_OPS_AVX2)
      return true;
#else
      return false;
#endif
    case Isa::neon:
#if defined(LILIMS_OPS_NEON)
      return true;
#else
      return false;
#endif
  }
  return false;
}

bool ops_isa_runnable(Isa isa) {
  switch (isa) {
    case Isa::ref: return true;
    case Isa::avx2: return ops_isa_built(isa) && cpu_features().avx2;
    case Isa::neon: return ops_isa_built(isa) && cpu_features().neon;
  }
  return false;
}

const OpsTable& ops_table(Isa isa) {
#if defined(LILIMS_OPS_AVX2)
  if (isa == Isa::avx2) return detail::ops_table_avx2();
#endif
#if defined(LILIMS_OPS_NEON)
  if (isa == Isa::neon) return detail::ops_table_neon();
#endif
  (void)isa;
  return kOpsRef;
}

const OpsTable& ops() {
  static const OpsTable& table = ops_table(active_isa());
  return table;
}

}  // namespace lilims::kernels
