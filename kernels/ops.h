// The non-matmul ops of a llama/phi layer behind one table of function
// pointers per ISA: norms, RoPE, activations, element-wise, fp16 conversion,
// the Q8_0 row quantizer for the KV cache, and fused attention over the cache.
//
// Every entry has the signature of its scalar reference (kernels/ref/); the
// table for the running CPU is resolved once (ops()), a specific one can be
// asked for by ISA (ops_table()) so tests and benchmarks cover every variant.
//
// Contract shared by all element-wise entries: n >= 0, any alignment, no
// reads or writes past n; y may alias an input unless the entry says not.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/cpu.h"
#include "kernels/ref/ops_ref.h"  // RopeParams, the rope table builders
#include "quant/quant.h"

namespace lilims::kernels {

// Attention of n_q query tokens against a KV cache (flash style: one pass
// over the cache with an online softmax, nothing of size n_kv materialised).
struct AttentionArgs {
  // Queries: n_q rows of (n_head, head_dim) floats, q_stride floats apart.
  const float* q;
  int64_t q_stride;
  // Query i sits at absolute position pos0 + i and sees positions
  // [lo, pos0 + i], lo = window > 0 ? max(0, pos0 + i - window + 1) : 0
  // (causal; the cache must already hold those positions, own rows included,
  // unless the rows are staged: see k_new).
  int n_q;
  int32_t pos0;
  // Cache: position p, kv head g at byte offset p * kv_stride_bytes +
  // g * kv_head_stride_bytes (below), head_bytes = head_dim * elem size
  // (F32/F16) or head_dim / 32 blocks of Q8_0.  K and V share the layout
  // and the type.
  const void* k;
  const void* v;
  quant::Type kv_type;  // F16 (default), Q8_0 (head_dim % 32 == 0), F32 (tests)
  int64_t kv_stride_bytes;
  // Bytes from kv head g to g + 1; 0: head_bytes, the heads of a position
  // side by side.  The runtime's cache keeps each head's positions together
  // instead (kv_stride_bytes = head_bytes, this = the context's bytes).
  int64_t kv_head_stride_bytes;
  // Query head h reads kv head h / (n_head / n_head_kv): grouped-query heads
  // share K/V without copies.  head_dim: any multiple of 8 (64/80/96/128 fast).
  int n_head;
  int n_head_kv;
  int head_dim;
  float scale;     // usually 1/sqrt(head_dim)
  int32_t window;  // sliding window in positions, 0 = none
  // Output: n_q rows of (n_head, head_dim) floats, out_stride floats apart.
  float* out;
  int64_t out_stride;
  // Staged rows: when k_new != nullptr, positions [s0, pos0 + n_q), s0 = pos0 -
  // n_new_before, are read as F32 from k_new / v_new (row i = position s0 + i,
  // kv head g at g * head_dim floats, rows new_stride floats apart) instead of
  // the cache, which then needs only [0, s0).  n_new_before > 0 lets a caller
  // split a block's queries into tiles: a later tile's queries also see the
  // block's earlier staged rows.
  // A chunk's own K/V rows are read from there while the cache still holds
  // only what was committed before it; the staged values enter the sums
  // unrounded, as an F32 cache holding them would.
  const float* k_new;
  const float* v_new;
  int64_t new_stride;
  int32_t n_new_before;  // staged rows before pos0 (0 <= n_new_before <= pos0)
  // Partial sums over a key range (n_q == 1 only): when lse != nullptr, only
  // the visible positions in [key_lo, key_hi] enter, out holds the softmax
  // over them alone, and lse[h] (h the query head, the array indexed from
  // head 0) gets max + log(sum of exp) of their scaled scores: -inf, and out
  // 0, when the range holds no visible position.  Calls over ranges that
  // cover the visible ones combine into the full attention
  // (attention_combine).  Otherwise these three are ignored.
  int64_t key_lo, key_hi;
  float* lse;
  // Several consecutive key ranges in one call (lse set, n_q == 1): when
  // n_ranges > 1 (at most kAttnMaxSplits), range r is [key_bounds[r],
  // key_bounds[r + 1] - 1] (key_lo and key_hi are then ignored), and its
  // output and lse go to out + r * range_out_stride and lse + r *
  // range_lse_stride.  Each range's result is bit for bit what a call over
  // that range alone gives (attention_range); the kernel may read the
  // ranges' cache rows as one stream.
  int32_t n_ranges;
  const int64_t* key_bounds;
  int64_t range_out_stride, range_lse_stride;
};

// Range r of a call over several (AttentionArgs::n_ranges) as a call of its own.
inline AttentionArgs attention_range(const AttentionArgs& a, int r) {
  AttentionArgs one = a;
  one.n_ranges = 0;
  one.key_lo = a.key_bounds[r];
  one.key_hi = a.key_bounds[r + 1] - 1;
  one.out = a.out + r * a.range_out_stride;
  one.lse = a.lse ? a.lse + r * a.range_lse_stride : nullptr;
  return one;
}

// Bytes of one kv head's row in a cache of type t (a type whose traits
// have kv), and the offset of kv head g's row from its position's
// (kv_head_stride_bytes, or the rows side by side when it is 0).
inline int64_t attention_head_bytes(quant::Type t, int head_dim) {
  return (int64_t)quant::row_bytes(t, head_dim);
}
inline int64_t attention_head_offset(const AttentionArgs& a, int g) {
  return (int64_t)g * (a.kv_head_stride_bytes ? a.kv_head_stride_bytes
                                              : attention_head_bytes(a.kv_type, a.head_dim));
}

// The first position a query at position hi sees (AttentionArgs: window).
inline int64_t attention_first_key(int64_t hi, int32_t window) {
  const int64_t lo = hi - window + 1;
  return window > 0 && lo > 0 ? lo : 0;
}

// Decode over many keys is cut into key ranges ("splits") that are computed
// apart and combined: the cache rows of a kv head are then read once per
// token (by the task running their range), not once per task sharing the
// group's heads, and a few kv heads still give every thread work.  The cut
// depends only on the visible range, never on the thread count, so logits
// are the same on any number of threads.
constexpr int kAttnSplitKeys = 64;  // one split up to this many keys, then at most this many each
constexpr int kAttnMaxSplits = 8;
inline int attention_splits(int64_t n_keys) {
  const int64_t n = (n_keys + kAttnSplitKeys - 1) / kAttnSplitKeys;
  return (int)(n < 1 ? 1 : n > kAttnMaxSplits ? kAttnMaxSplits : n);
}
// Split s of n of the positions [lo, hi]: [first, last].  The splits share
// out the kAttnSplitBlock-key blocks from lo as evenly as they go, so only
// the last split ends in a short block: the SIMD attention walks keys in
// blocks of that size from a range's first key (detail::kAttnKeys), and a
// short block costs nearly a whole one.  Empty (first = last + 1) when n
// exceeds the blocks.
constexpr int kAttnSplitBlock = 32;
inline void attention_split_range(int64_t lo, int64_t hi, int s, int n, int64_t* first,
                                  int64_t* last) {
  const int64_t blocks = (hi - lo + kAttnSplitBlock) / kAttnSplitBlock;
  *first = lo + blocks * s / n * kAttnSplitBlock;
  *last = std::min(hi, lo + blocks * (s + 1) / n * kAttnSplitBlock - 1);
}
// key_bounds (AttentionArgs) of splits [s0, s1) of n of [lo, hi]: s1 - s0 +
// 1 entries, split s0 + i = [bounds[i], bounds[i + 1] - 1].
inline void attention_split_bounds(int64_t lo, int64_t hi, int s0, int s1, int n, int64_t* bounds) {
  int64_t last = 0;
  for (int s = s0; s < s1; ++s) attention_split_range(lo, hi, s, n, &bounds[s - s0], &last);
  bounds[s1 - s0] = last + 1;
}
// out (d floats) = the attention over the union of n ranges, from their
// partial outputs parts[i * stride .. + d) and lse[i * lse_stride]
// (AttentionArgs::lse), summed in order i = 0, 1, ...
void attention_combine(const float* parts, int64_t stride, const float* lse, int64_t lse_stride,
                       int n, int d, float* out);

struct OpsTable {  // one per ISA; the same signatures as the refs
  // y = x / sqrt(mean(x^2) + eps) * w
  void (*rmsnorm)(const float* x, const float* w, float* y, int64_t n, float eps);
  // x += delta; y = rmsnorm(x)  (x is the residual stream, updated in place)
  void (*add_rmsnorm)(float* x, const float* delta, const float* w, float* y, int64_t n,
                      float eps);
  // y = (x - mean) / sqrt(var + eps) * w + b
  void (*layernorm)(const float* x, const float* w, const float* b, float* y, int64_t n,
                    float eps);
  // In place on the first n_rot dims of each head of x (n_heads, head_dim);
  // cos_t/sin_t: n_rot/2 entries for this token's position (rope_table_f32).
  void (*rope)(float* x, int n_heads, int head_dim, int n_rot, const float* cos_t,
               const float* sin_t, bool adjacent);
  void (*softmax)(float* x, int64_t n);  // in place, max-subtracted
  void (*swiglu)(const float* gate, const float* up, float* out, int64_t n);  // silu(g)*u
  void (*gelu)(const float* x, float* y, int64_t n);      // tanh approximation
  void (*gelu_erf)(const float* x, float* y, int64_t n);  // exact (erf) form
  void (*add)(const float* a, const float* b, float* y, int64_t n);
  void (*mul)(const float* a, const float* b, float* y, int64_t n);
  // Bit-exact with base/fp16.h (round to nearest even, NaN as it does).
  void (*fp32_to_fp16)(const float* x, uint16_t* y, int64_t n);
  void (*fp16_to_fp32)(const uint16_t* x, float* y, int64_t n);
  // n % 32 == 0; y: n/32 BlockQ8_0, by the one Q8 rule of quant/quantize.h
  // (the same function as the matmul's Q8_0 activation quantizer).
  void (*quantize_row_q8_0)(const float* x, void* y, int64_t n);
  // Query heads [head_begin, head_end) of every query row; the caller threads
  // over head ranges (best split at kv-group boundaries, so a group's K/V
  // rows are read once) and query blocks.  scratch: attention_scratch_floats(a)
  // floats, one per thread.
  void (*attention)(const AttentionArgs& a, int head_begin, int head_end, float* scratch);
  // x += delta; y = layernorm(x)
  void (*add_layernorm)(float* x, const float* delta, const float* w, const float* b,
                        float* y, int64_t n, float eps);
  void (*silu)(const float* x, float* y, int64_t n);
  // y += a * x (x and y must not overlap); fused or not, per the ISA.
  void (*axpy)(float a, const float* x, float* y, int64_t n);
  // A LoRA adapter's B applied (graph::LoraTerm): y[j * ldy + c] +=
  // sum_k t[j * ldt + k] * B[k][c] for rows j < n and columns c < w; b holds
  // rank rows of w / 32 BlockQ8_0 (w a multiple of 32), one piece of B.  t
  // carries the adapter's scale.  Per element, the terms in order of k.
  void (*lora_add)(const void* b, int32_t rank, int64_t w, const float* t, int64_t ldt, int32_t n,
                   float* y, int64_t ldy);
  Isa isa;
  const char* name;
};

// Every entry of OpsTable with the base name of its kernels: the table of
// ISA `x` is filled as `t.FIELD = BASE__x`, so each entry is matched to its
// kernel by name, never by position, and a missing kernel fails to compile.
// The one list carries two pass-through arguments (a, b) so that the fill
// below and LILIMS_OPS_TABLE_ENTRIES(X) (X(field, base) per entry) share it.
#define LILIMS_OPS_TABLE_LIST(X, a, b)                                                    \
  X(a, b, rmsnorm, rmsnorm_f32) X(a, b, add_rmsnorm, add_rmsnorm_f32)                     \
  X(a, b, layernorm, layernorm_f32) X(a, b, rope, rope_f32) X(a, b, softmax, softmax_f32) \
  X(a, b, swiglu, swiglu_f32) X(a, b, gelu, gelu_f32) X(a, b, gelu_erf, gelu_erf_f32)     \
  X(a, b, add, add_f32) X(a, b, mul, mul_f32) X(a, b, fp32_to_fp16, fp32_to_fp16)         \
  X(a, b, fp16_to_fp32, fp16_to_fp32) X(a, b, quantize_row_q8_0, quantize_row_q8_0)       \
  X(a, b, attention, attention) X(a, b, add_layernorm, add_layernorm_f32)                 \
  X(a, b, silu, silu_f32) X(a, b, axpy, axpy_f32) X(a, b, lora_add, lora_add_q8_0)
#define LILIMS_OPS_TABLE_ENTRIES(X) LILIMS_OPS_TABLE_LIST(LILIMS_OPS_APPLY_, X, ~)
#define LILIMS_OPS_APPLY_(X, unused, field, base) X(field, base)

// Fills OpsTable t with the kernels of ISA suffix isa (ref, avx2, neon):
// LILIMS_OPS_TABLE_FILL(t, avx2) sets t.rmsnorm = rmsnorm_f32__avx2 and so on.
#define LILIMS_OPS_TABLE_FILL(t, isa) LILIMS_OPS_TABLE_LIST(LILIMS_OPS_FILL_, t, isa)
#define LILIMS_OPS_FILL_(t, isa, field, base) t.field = base##__##isa;

// Scratch floats attention needs per calling thread (any ISA).
size_t attention_scratch_floats(const AttentionArgs& a);

// The table of one ISA: ref always; avx2 / neon when this build contains
// them (ops_isa_built), else the ref table.  Whether the CPU can run it is
// ops_isa_runnable (cpu_features()).
const OpsTable& ops_table(Isa isa);
bool ops_isa_built(Isa isa);
bool ops_isa_runnable(Isa isa);
// The table for active_isa(), resolved once.
const OpsTable& ops();

namespace detail {  // the per-ISA tables, defined in kernels/{x86,arm}/
// Tiling of the SIMD attention (kernels/attention_driver.h): keys are
// processed in blocks of kAttnKeys (converted to f32 once per block and
// shared by every row of a tile), query rows (query token x head of one kv
// group) in tiles of up to kAttnRows.
constexpr int kAttnKeys = 32;
constexpr int kAttnRows = 32;
// f32 K/V block + per row (accumulator, scores, max, sum) + 32-byte alignment.
constexpr size_t attention_scratch_floats_simd(int head_dim) {
  return (size_t)kAttnKeys * head_dim + (size_t)kAttnRows * (head_dim + kAttnKeys + 2) + 16;
}
const OpsTable& ops_table_avx2();
const OpsTable& ops_table_neon();
}  // namespace detail

}  // namespace lilims::kernels
