// Memory for one sequence's KV cache that follows the tokens in it.
//
// The whole context is reserved as address space up front, so rows never
// move and forward() allocates nothing, but a page becomes resident only
// when a row in it is first written: a session at -c 8192 costs what its
// tokens cost, not 8192 positions.  release_from() hands the pages of
// dropped positions back to the system, so a long chat followed by a reset
// does not keep its peak.  Where anonymous mappings are not available the
// storage is a zeroed heap block (calloc, which large allocators also map
// lazily) and release_from() keeps the pages.
//
// Layout: K then V, each (n_layer, n_heads, n_ctx, head_bytes), head_bytes
// = row_bytes / n_heads: a kv head's rows of one layer are contiguous, so
// attention, which reads one kv head's rows in position order, streams
// through memory instead of striding over the other heads.  A token writes
// one row per head and layer, so each head's pages fill from the front as
// positions grow.  Rows past the positions written read as zero (or stale
// after a release: callers never read a row before writing it).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lilims::graph {

class KvStorage {
 public:
  // Throws lilims::Error (LILIMS_ERR_OUT_OF_MEMORY) when the address space
  // cannot be reserved.
  // row_bytes: one position of one layer, all heads (a multiple of n_heads).
  KvStorage(int n_layer, int32_t n_ctx, size_t row_bytes, int n_heads = 1);
  ~KvStorage();
  KvStorage(const KvStorage&) = delete;
  KvStorage& operator=(const KvStorage&) = delete;

  // Bytes K and V take together once every position is written, in 64
  // bits (a 32-bit build must refuse what it cannot address) and saturating
  // at UINT64_MAX rather than wrapping to a small size.
  static uint64_t bytes_for(int n_layer, int32_t n_ctx, size_t row_bytes);
  size_t bytes() const { return bytes_; }

  // Head 0, position 0 of `layer`; head h's rows start h * head_stride()
  // bytes further, head_bytes() apart.
  uint8_t* k(int layer) { return base_ + (size_t)layer * layer_bytes_; }
  uint8_t* v(int layer) { return base_ + half_ + (size_t)layer * layer_bytes_; }
  size_t head_bytes() const { return head_bytes_; }
  size_t head_stride() const { return head_stride_; }

  // Positions [0, n) may hold data (the caller has written or will write
  // them); release_from() only does work when positions past its argument
  // were marked.
  void mark_used(int32_t n) {
    if (n > used_) used_ = n;
  }
  // Returns to the system every page that holds only positions >= n_keep.
  void release_from(int32_t n_keep);
  // Bytes of the pages holding the positions marked used: what is resident
  // now, at most (a page two heads or layers share counts twice).  The heap fallback
  // cannot tell and answers bytes().
  uint64_t resident_bytes() const;

 private:
  uint8_t* base_ = nullptr;
  size_t bytes_ = 0, half_ = 0, layer_bytes_ = 0, head_bytes_ = 0, head_stride_ = 0;
  int n_layer_ = 0, n_heads_ = 1;
  int32_t used_ = 0;
  bool mapped_ = false;  // an anonymous mapping (else calloc)
};

}  // namespace lilims::graph
