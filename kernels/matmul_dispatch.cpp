// Matmul kernel tables (from matmul_kernels.inc), selection per ISA, and
// pack_weight.
#include <algorithm>
#include <cstring>
#include <string>

#include "base/error.h"
#include "base/for_each_index.h"
#include "base/memory_info.h"
#include "kernels/isa_target.h"  // LILIMS_HAVE_*: the kernels this build holds
#include "kernels/matmul.h"
#include "kernels/ref/matmul_ref.h"
#include "kernels/ref/quantize_q8_ref.h"
#include "quant/repack.h"

namespace lilims::kernels {

// Declarations of the SIMD kernels (the refs come from their headers).
#define LILIMS_MATMUL_KERNEL(name, wtype, layout, isa, feature, keeps)                   \
  void name(const PackedWeight& W, int64_t r0, int64_t r1, const void* x, size_t x_stride, \
            int64_t n, float* y, int64_t ldy);
#define LILIMS_QUANTIZE_KERNEL(name, type, isa, feature) void name(const float* x, void* y, int64_t k);
#include "kernels/matmul_kernels.inc"
#undef LILIMS_MATMUL_KERNEL
#undef LILIMS_QUANTIZE_KERNEL

const std::vector<MatmulKernel>& matmul_kernels() {
  static const std::vector<MatmulKernel> list = {
#define LILIMS_MATMUL_KERNEL(name, wtype, layout, isa, feature, keeps) \
  {#name, quant::Type::wtype, kLayout##layout, Isa::isa, Feature::feature, name, keeps != 0},
#define LILIMS_QUANTIZE_KERNEL(name, type, isa, feature)
#include "kernels/matmul_kernels.inc"
#undef LILIMS_MATMUL_KERNEL
#undef LILIMS_QUANTIZE_KERNEL
  };
  return list;
}

const std::vector<QuantizeKernel>& quantize_kernels() {
  static const std::vector<QuantizeKernel> list = {
#define LILIMS_MATMUL_KERNEL(name, wtype, layout, isa, feature, keeps)
#define LILIMS_QUANTIZE_KERNEL(name, type, isa, feature) \
  {#name, quant::Type::type, Isa::isa, Feature::feature, name},
#include "kernels/matmul_kernels.inc"
#undef LILIMS_MATMUL_KERNEL
#undef LILIMS_QUANTIZE_KERNEL
  };
  return list;
}

bool feature_available(Feature f) {
  const CpuFeatures& c = cpu_features();
  switch (f) {
    case Feature::none: return true;
    case Feature::avx2: return c.avx2;
    case Feature::avx512vnni: return c.avx512vnni;
    case Feature::neon: return c.neon;
    case Feature::dotprod: return c.neon && c.dotprod;
    case Feature::i8mm: return c.neon && c.dotprod && c.i8mm;
  }
  return false;
}

const char* feature_name(Feature f) {
  switch (f) {
    case Feature::none: return "none";
    case Feature::avx2: return "avx2+fma+f16c";
    case Feature::avx512vnni: return "avx512vnni";
    case Feature::neon: return "neon";
    case Feature::dotprod: return "dotprod";
    case Feature::i8mm: return "i8mm";
  }
  return "?";
}

quant::Type act_type(quant::Type wtype) { return quant::traits(wtype).act_type; }

size_t act_row_bytes(quant::Type wtype, int64_t k) {
  return quant::row_bytes(act_type(wtype), k);
}

namespace {

// Later entries of the list are the better ones of a path (neon < dotprod <
// i8mm), so the last runnable match wins.
template <class K, class Match>
const K* pick(const std::vector<K>& list, Isa isa, Match match) {
  const K* best = nullptr;
  for (const K& k : list) {
    // LILIMS_ISA=avx2 turns the AVX-512 VNNI kernels off on a CPU that has
    // them (kernels reading kLayoutGguf would otherwise still match).
    const bool on = feature_available(k.needs) && (k.needs != Feature::avx512vnni || vnni_enabled());
    if (match(k) && k.isa == isa && on) best = &k;
  }
  if (best) return best;
  for (const K& k : list) {
    if (match(k) && k.isa == Isa::ref) return &k;
  }
  return nullptr;
}

}  // namespace

const MatmulKernel& select_matmul_kernel(Isa isa, quant::Type wtype, int layout) {
  const MatmulKernel* k = pick(matmul_kernels(), isa, [&](const MatmulKernel& m) {
    return m.wtype == wtype && (m.layout == layout || m.layout == kLayoutAny);
  });
  if (!k) {
    throw Error(LILIMS_ERR_UNSUPPORTED, std::string("[matmul] no kernel for weight type ") +
                                            quant::ggml_type_name((uint32_t)wtype));
  }
  return *k;
}

const QuantizeKernel* select_quantize_kernel(Isa isa, quant::Type wtype) {
  const quant::Type a = act_type(wtype);
  if (quant::traits(a).block_size == 1) return nullptr;  // float activations
  return pick(quantize_kernels(), isa, [&](const QuantizeKernel& q) { return q.type == a; });
}

int preferred_layout(quant::Type type) {
  const MatmulKernel* k =
      pick(matmul_kernels(), active_isa(), [&](const MatmulKernel& m) { return m.wtype == type; });
  return k && k->layout != kLayoutAny ? k->layout : kLayoutGguf;
}

namespace {
// Kernels of a higher tier (a later feature of the same family) run the
// same work faster: avx2 < avx512vnni, neon < dotprod < i8mm.
int feature_tier(Feature f) {
  switch (f) {
    case Feature::none: return 0;
    case Feature::avx2: case Feature::neon: return 1;
    case Feature::avx512vnni: case Feature::dotprod: return 2;
    case Feature::i8mm: return 3;
  }
  return 0;
}
}  // namespace

bool kept_at_load(quant::Type type) {
  const quant::TypeTraits* t = quant::type_traits((uint32_t)type);
  if (!t) return false;  // no kernel at all (Q2_K, BF16, ...)
  if (t->load_as == type) return true;  // no conversion
  const MatmulKernel& k = select_matmul_kernel(active_isa(), type, preferred_layout(type));
  if (!k.keeps) return false;
  // A kernel measured no slower than the converted type's kernel of its own
  // tier may still lose to a higher tier's (an AVX2 kernel against the
  // converted type's AVX-512 VNNI one): kept only at the same tier or above.
  const MatmulKernel& c = select_matmul_kernel(active_isa(), t->load_as, preferred_layout(t->load_as));
  return feature_tier(k.needs) >= feature_tier(c.needs);
}

namespace {

void check_shape(const quant::TypeTraits* t, quant::Type type, int64_t rows, int64_t cols) {
  if (!t) {
    throw Error(LILIMS_ERR_UNSUPPORTED, std::string("[matmul] unsupported weight type ") +
                                            quant::ggml_type_name((uint32_t)type));
  }
  if (rows <= 0 || cols <= 0 || cols % t->block_size != 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT,
                "[matmul] bad weight shape " + std::to_string(rows) + " x " + std::to_string(cols) +
                    " for " + t->name);
  }
}

// n rows of one source matrix from src, repacked into dst (whole groups
// of `layout`), source_done told once they are copied.
struct Slice {
  const uint8_t* src;
  int64_t n;
  uint8_t* dst;
  SourceDone done;
};

// Cuts rows x cols GGUF bytes into slices of whole groups.
void add_slices(quant::Type type, int layout, const void* data, int64_t rows, int64_t cols,
                uint8_t* dst, SourceDone source_done, std::vector<Slice>& out) {
  constexpr int64_t kSlice = 256;  // a multiple of every layout's group
  const int64_t group = quant::layout_group_rows(layout);
  const size_t src_row = quant::row_bytes(type, cols);
  const size_t dst_group = quant::repacked_bytes(type, layout, group, cols);
  for (int64_t r0 = 0; r0 < rows; r0 += kSlice) {
    const int64_t n = std::min(kSlice, rows - r0);
    out.push_back({static_cast<const uint8_t*>(data) + (size_t)r0 * src_row, n,
                   dst + (size_t)(r0 / group) * dst_group, source_done});
  }
}

void repack_slices(quant::Type type, int layout, int64_t cols, const std::vector<Slice>& slices,
                   int n_threads) {
  const size_t src_row = quant::row_bytes(type, cols);
  for_each_index(slices.size(), n_threads, [&](size_t i) {
    const Slice& s = slices[i];
    quant::repack(type, layout, s.src, s.n, cols, s.dst);
    if (s.done.fn) s.done.fn(s.done.user, s.src, (size_t)s.n * src_row);
  });
}

}  // namespace

bool operator==(const ByteBuffer& a, const ByteBuffer& b) {
  return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_) == 0);
}

ByteBuffer WeightArena::own(size_t n) {
  ByteBuffer b;
  b.owner_ = std::shared_ptr<uint8_t>(static_cast<uint8_t*>(allocate_large(n)),
                                      [n](uint8_t* p) { free_large(p, n); });
  b.data_ = b.owner_.get();
  b.size_ = n;
  return b;
}

ByteBuffer WeightArena::take(size_t n) {
  if (n > kChunkBytes / 4) return own(n);
  size_t at = (used_ + 63) / 64 * 64;
  if (!chunk_ || at + n > kChunkBytes) {
    // The rest of the old chunk is never touched, so never resident.
    chunk_ = own(kChunkBytes).owner_;
    at = 0;
  }
  ByteBuffer b;
  b.owner_ = std::shared_ptr<uint8_t>(chunk_, chunk_.get() + at);  // keeps the chunk
  b.data_ = b.owner_.get();
  b.size_ = n;
  used_ = at + n;
  return b;
}

namespace {
ByteBuffer repacked_buffer(size_t n, WeightArena* arena) {
  return arena ? arena->take(n) : WeightArena::own(n);
}
}  // namespace

PackedWeight pack_weight(quant::Type type, const void* data, int64_t rows, int64_t cols,
                         bool allow_repack, SourceDone source_done, int n_threads,
                         WeightArena* arena) {
  check_shape(quant::type_traits((uint32_t)type), type, rows, cols);
  PackedWeight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.data = data;
  w.layout = kLayoutGguf;
  const int layout = allow_repack ? preferred_layout(type) : kLayoutGguf;
  if (layout != kLayoutGguf) {
    w.storage = repacked_buffer(quant::repacked_bytes(type, layout, rows, cols), arena);
    std::vector<Slice> slices;
    add_slices(type, layout, data, rows, cols, w.storage.data(), source_done, slices);
    repack_slices(type, layout, cols, slices, n_threads);
    w.data = w.storage.data();
    w.layout = layout;
  }
  return w;
}

bool can_stack(quant::Type type, const std::vector<WeightPart>& parts, bool allow_repack) {
  const int layout = allow_repack ? preferred_layout(type) : kLayoutGguf;
  if (layout == kLayoutGguf || parts.size() < 2) return false;
  const int64_t group = quant::layout_group_rows(layout);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i].rows % group != 0) return false;
  }
  return true;
}

PackedWeight pack_stacked(quant::Type type, const std::vector<WeightPart>& parts, int64_t cols,
                          int n_threads, WeightArena* arena) {
  const quant::TypeTraits* t = quant::type_traits((uint32_t)type);
  check_shape(t, type, 1, cols);
  if (!can_stack(type, parts, true)) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[matmul] these weights cannot be stacked into one");
  }
  int64_t rows = 0;
  for (const WeightPart& p : parts) {
    check_shape(t, type, p.rows, cols);
    rows += p.rows;
  }
  PackedWeight w;
  w.type = type;
  w.rows = rows;
  w.cols = cols;
  w.layout = preferred_layout(type);
  w.storage = repacked_buffer(quant::repacked_bytes(type, w.layout, rows, cols), arena);
  size_t at = 0;
  std::vector<Slice> slices;
  for (const WeightPart& p : parts) {
    add_slices(type, w.layout, p.data, p.rows, cols, w.storage.data() + at, p.source_done, slices);
    at += quant::repacked_bytes(type, w.layout, p.rows, cols);
  }
  repack_slices(type, w.layout, cols, slices, n_threads);
  w.data = w.storage.data();
  return w;
}

}  // namespace lilims::kernels
