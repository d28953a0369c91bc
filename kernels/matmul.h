// Block-quantized matmul: y = W x for llama-family weights.
//
// Weights stay in their GGUF bytes (layout kLayoutGguf, zero-copy) or are
// repacked at load (quant/repack.h) into kLayoutX4: groups of 4 rows whose
// blocks sit side by side, quants interleaved 8 bytes per row, so one 32-byte
// AVX2 register or one 16-byte NEON register holds 2-4 rows of one column
// chunk and needs no shuffle; or, where the AVX-512 VNNI kernels run, into
// kLayoutX16: groups of 16 rows, quants interleaved 4 bytes per row, one
// row per 32-bit lane of a 64-byte register.  Activations are quantized on the fly to Q8_0
// (for Q8_0/Q4_0/Q5_0 weights) or Q8_1 (for Q4_1), once per matmul.  Q5_0
// is repacked into kLayoutX16 only, and read in its GGUF layout elsewhere.
//
// Every kernel is listed once in kernels/matmul_kernels.inc; that list feeds
// the dispatch table (matmul_dispatch.cpp), tests/kernels and bench/kernels.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/memory_info.h"
#include "kernels/cpu.h"
#include "quant/quant.h"
#include "quant/repack.h"

namespace lilims::kernels {

constexpr int kLayoutGguf = quant::kLayoutGguf;  // GGUF row-major blocks
constexpr int kLayoutX4 = quant::kLayoutX4;      // 4-row interleaved groups (quant/repack.h)
constexpr int kLayoutX16 = quant::kLayoutX16;    // 16-row interleaved groups (quant/repack.h)
constexpr int kLayoutAny = -1;                   // a kernel that reads every layout (the references)

// Repacked weight bytes, left uninitialised (repacking writes every byte,
// and zeroing hundreds of MB first cost a fifth of a large model's load):
// a block of their own, or a slice of a WeightArena's block, which the slice
// keeps alive.  Copies share the bytes, which nothing changes once packed.
class ByteBuffer {
 public:
  ByteBuffer() = default;
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  const uint8_t* begin() const { return data_; }
  const uint8_t* end() const { return data_ + size_; }
  friend bool operator==(const ByteBuffer& a, const ByteBuffer& b);
  friend bool operator!=(const ByteBuffer& a, const ByteBuffer& b) { return !(a == b); }

 private:
  friend class WeightArena;
  std::shared_ptr<uint8_t> owner_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Where a model's repacked weights go: a few large blocks (kChunkBytes),
// aligned to and advised as huge pages (base/memory_info.h: allocate_large),
// the weights one after the other in load order.  A decode step streams
// them all, and on 4 KiB pages a small model's 1 MB matrices cost a TLB
// miss every 4 KiB.  A weight larger than a quarter of a chunk gets a block
// of its own (huge pages too, from 2 MiB).  Not thread-safe: one loader.
class WeightArena {
 public:
  static constexpr size_t kChunkBytes = size_t(32) << 20;
  // n bytes (n > 0), 64-byte aligned; throws std::bad_alloc.
  ByteBuffer take(size_t n);
  // Without an arena: a block of its own.
  static ByteBuffer own(size_t n);

 private:
  std::shared_ptr<uint8_t> chunk_;
  size_t used_ = 0;
};

struct PackedWeight {  // a weight matrix ready for the kernels
  quant::Type type;
  int64_t rows = 0, cols = 0;    // y = W x: rows outputs, cols (=K) inputs
  const void* data = nullptr;    // GGUF layout (into the mapping) or into `storage` when repacked
  int layout = 0;                // kLayoutGguf, kLayoutX4 or kLayoutX16
  ByteBuffer storage;            // the repacked bytes (empty when not repacked)
};

// Wraps (allow_repack = false, or preferred_layout(type) is kLayoutGguf:
// F32/F16, the K-quants, any type under the ref ISA) or repacks (into
// preferred_layout(type): Q8_0/Q4_0/Q4_1 into kLayoutX16 where the AVX-512
// VNNI kernels run, else kLayoutX4; Q5_0 only into kLayoutX16) a row-major
// GGUF matrix.  `data` must outlive the result when not repacked.
// cols must be a multiple of 32 for the block types.  Throws lilims::Error.
//
// When repacking, source_done (if set) is told about each slice of the source
// bytes once it is copied, so a loader can let the file's pages go as it
// goes instead of holding the source and the copy whole at once.  Slices
// are repacked on up to n_threads threads (for_each_index; the bytes do
// not depend on it), so source_done may be called from several at once.
struct SourceDone {
  void (*fn)(void* user, const void* bytes, size_t n) = nullptr;
  void* user = nullptr;
};
// The repacked bytes come from `arena` when one is given, else a block of
// their own.
PackedWeight pack_weight(quant::Type type, const void* data, int64_t rows, int64_t cols,
                         bool allow_repack, SourceDone source_done = {}, int n_threads = 1,
                         WeightArena* arena = nullptr);

// Several row-major GGUF matrices of one type and width stacked into one
// weight (rows of parts[0], then parts[1], ...), packed as pack_weight would
// pack their concatenation, without building the concatenation: each part is
// repacked straight into its groups.  A kernel then computes every row of
// the stack exactly as it computes that row of its own part.  Only when
// can_stack says so; throws lilims::Error otherwise.
struct WeightPart {
  const void* data = nullptr;  // rows x cols, GGUF row-major
  int64_t rows = 0;
  SourceDone source_done;      // as pack_weight's, for this part's bytes
};
// True when pack_weight would repack `type` (allow_repack, a repackable
// type, an ISA with interleaved kernels) and every part but the last has a
// whole number of the layout's row groups, so that no group mixes parts.  A
// weight left in the GGUF layout is read in place from the file; stacking
// it would take a heap copy of what the mapping already holds.
bool can_stack(quant::Type type, const std::vector<WeightPart>& parts, bool allow_repack);
PackedWeight pack_stacked(quant::Type type, const std::vector<WeightPart>& parts, int64_t cols,
                          int n_threads = 1, WeightArena* arena = nullptr);

// --- kernels -------------------------------------------------------------

// The CPU feature a kernel needs beyond its Isa.
enum class Feature { none, avx2, avx512vnni, neon, dotprod, i8mm };
bool feature_available(Feature f);
const char* feature_name(Feature f);  // "avx512vnni", ...

// Activation format a weight type is multiplied with (quant::traits(weight
// type).act_type): Q8_0/Q4_0/Q5_0 -> Q8_0 blocks, Q4_1 -> Q8_1 blocks, F16/F32 ->
// F32 rows.
quant::Type act_type(quant::Type weight_type);
// Bytes of one activation row of k elements in that format.
size_t act_row_bytes(quant::Type weight_type, int64_t k);

// Quantizes one row of k floats (k % 32 == 0) into blocks (BlockQ8_0 / BlockQ8_1)
// by the one Q8 rule of quant/quantize.h.  Every variant gives bit-identical
// output to the __ref one, which is that rule.
using QuantizeRowFn = void (*)(const float* x, void* y, int64_t k);

// Y[j * ldy + r] = dot(row r of W, activation row j), for r in [r0, r1) and
// j in [0, n).  x: n activation rows of x_stride bytes (act_type(W.type)).
// r0 must be a multiple of the layout's group (4 for kLayoutX4, 16 for
// kLayoutX16); r1 <= W.rows (a partial group at
// the end is handled: its padding rows are read, never written).
using MatmulKernelFn = void (*)(const PackedWeight& W, int64_t r0, int64_t r1, const void* x,
                                size_t x_stride, int64_t n, float* y, int64_t ldy);

struct MatmulKernel {
  const char* name;      // e.g. "q4_0_q8_0_gemm_x4__avx2"
  quant::Type wtype;     // weight type
  int layout;            // weight layout it reads (kLayoutAny: every one)
  Isa isa;               // the path it belongs to
  Feature needs;         // CPU feature it needs
  MatmulKernelFn fn;
  bool keeps;            // see matmul_kernels.inc and kept_at_load
};

struct QuantizeKernel {
  const char* name;   // e.g. "quantize_row_q8_0__avx2"
  quant::Type type;   // Q8_0 or Q8_1
  Isa isa;
  Feature needs;
  QuantizeRowFn fn;
};

// Every kernel this build contains (runnable or not on this CPU).
const std::vector<MatmulKernel>& matmul_kernels();
const std::vector<QuantizeKernel>& quantize_kernels();

// The layout pack_weight repacks a type into (kLayoutGguf when it does
// not): the layout of the kernel select_matmul_kernel picks for the type on
// this CPU and active ISA (the ref kernels, which read every layout, read
// the GGUF one).
int preferred_layout(quant::Type type);

// The best kernel of a path for a weight (type, layout) on this CPU; falls
// back to the ref kernel, which reads every layout.
const MatmulKernel& select_matmul_kernel(Isa isa, quant::Type wtype, int layout);
// Whether a weight of `type` is kept as it is at load on this CPU and
// active ISA (false for a type with no kernel at all: Q2_K, BF16, ...).
// True for the kernel types the loader has no conversion for; for the
// others (their traits' load_as is another type: Q5_0 -> Q8_0) only when
// the kernel that would run it (select_matmul_kernel on preferred_layout)
// is marked `keeps` in matmul_kernels.inc: measured no slower than the
// converted type's kernels.  Q5_0 is kept where the AVX-512 VNNI kernels
// run; on AVX2-only and NEON CPUs it becomes Q8_0 at load.
bool kept_at_load(quant::Type type);
// nullptr for F32/F16 weights (no activation quantization).
const QuantizeKernel* select_quantize_kernel(Isa isa, quant::Type wtype);

}  // namespace lilims::kernels
