// The ops tables: the ref one built here from kernels/ref, the ISA ones in
// kernels/x86 and kernels/arm; which exist is decided by what the build
// compiled (kernels/ops.cmake), which runs by cpu_features().
#include <algorithm>

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
