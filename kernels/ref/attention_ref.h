// Scalar reference of the fused attention over a KV cache (kernels/ops.h,
// AttentionArgs): for each query row and head, the visible scores, a plain
// max-subtracted softmax, then the weighted sum of V.  Two passes over the
// cache and O(n_kv) scratch: the oracle, not the fast path.
#pragma once

#include <cstddef>

#include "kernels/ops.h"

namespace lilims::kernels {

// Scratch floats attention__ref needs: 3 * head_dim + pos0 + n_q.
size_t attention_scratch_floats__ref(const AttentionArgs& a);

// Query heads [head_begin, head_end) of every query row of a.
void attention__ref(const AttentionArgs& a, int head_begin, int head_end, float* scratch);

// The K or V row of position pos, kv head g, as head_dim floats: from the
// staged rows (k_new or v_new, passed as staged) when they are set and
// pos >= pos0, else dequantized from the cache at base (a.k or a.v).
void attention_load_row__ref(const AttentionArgs& a, const void* base, const float* staged,
                             int64_t pos, int g, float* row);

}  // namespace lilims::kernels
