// The KV cache of one sequence, with the Neural Engine chunking scheme's
// staging: a block chunk writes its layers' new K/V rows as F32 into a
// staging set, its attention reads the committed cache for earlier
// positions and the staged rows for its own (rounded first to the values the
// cache will hold, graph/executor.cpp), and after the chunk the rows are
// committed (converted to the cache type and written into place) — inline
// (sync), or on a helper thread while the next chunks compute (async).
//
// Two staging sets, used by even and odd chunks.  Fences, before chunk c
// runs: (1) the last commit of chunk c is done, so its layers' cache holds
// every earlier position; (2) the last commit that read chunk c's staging
// set is done, so the set may be overwritten.  Commits run in the order
// they were issued.  Building with LILIMS_KV_DROP_FENCE removes both waits
// (tests/graph/test_kv_commit.cpp shows that the result is then wrong).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "graph/kv_storage.h"
#include "kernels/ops.h"
#include "quant/quant.h"

namespace lilims::graph {

enum class KvCommit {
  sync,   // on the calling thread right after the chunk
  async,  // on the cache's helper thread, overlapped with the next chunks
  skip,   // never (benchmarks only: the cache stays empty, results are wrong)
};
const char* kv_commit_name(KvCommit c);

// Called by whichever thread runs a commit, before it runs (tests inject delays).
struct CommitHook {
  void (*fn)(void* user, int chunk) = nullptr;
  void* user = nullptr;
};

struct KvCacheConfig {
  int n_layer = 0;
  int32_t n_ctx = 0;
  int32_t n_batch = 0;   // staged rows per layer
  int64_t kv_dim = 0;    // floats of one position's K (or V) in one layer
  int n_heads = 1;       // kv heads (kv_dim / n_heads floats each; Q8_0: whole blocks)
  quant::Type type = quant::Type::F16;  // F32, F16 or Q8_0 (kv_dim % 32 == 0)
  // Block chunks: layers [chunk_begin[c], chunk_begin[c + 1]).
  std::vector<int> chunk_begin;
  KvCommit commit = KvCommit::sync;
  const kernels::OpsTable* ops = nullptr;  // fp32_to_fp16 / quantize_row_q8_0
};

class KvCache {
 public:
  // Throws lilims::Error (LILIMS_ERR_OUT_OF_MEMORY when the address space or
  // the helper thread cannot be had).
  explicit KvCache(const KvCacheConfig& cfg, CommitHook hook = {});
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Bytes of the staging sets for cfg.
  static uint64_t staging_bytes(const KvCacheConfig& cfg);

  // Committed rows of a layer: kv head h, position p at h * head_stride() +
  // p * head_bytes() (graph/kv_storage.h).  row_bytes() is one position of
  // every head, the unit of read_rows / write_rows and of saved states.
  const uint8_t* k(int layer) const { return storage_->k(layer); }
  const uint8_t* v(int layer) const { return storage_->v(layer); }
  size_t row_bytes() const { return row_bytes_; }
  size_t head_bytes() const { return storage_->head_bytes(); }
  size_t head_stride() const { return storage_->head_stride(); }
  quant::Type type() const { return cfg_.type; }
  size_t bytes() const { return storage_->bytes(); }
  uint64_t resident_bytes() const { return storage_->resident_bytes(); }

  // Staged rows of a layer: (n_batch, kv_dim) floats.
  float* staged_k(int layer) { return staging_.get() + stage_offset(layer, 0); }
  float* staged_v(int layer) { return staging_.get() + stage_offset(layer, 1); }

  // Waits for the two fences of block chunk c (see the header comment).
  void before_chunk(int c);
  // Commits staged rows [0, n) of chunk c's layers to positions pos0.. .
  void commit(int c, int32_t pos0, int32_t n);
  // Commits rows [row0, row0 + n) of another cache's staging (the same
  // configuration; its chunk c was just computed) to this cache's positions
  // pos0.., on the calling thread: a batch of sequences stages every
  // sequence's rows in one cache and commits each to its own (graph::BatchRun).
  void commit_from(int c, const KvCache& staged, int32_t row0, int32_t pos0, int32_t n);
  // Waits for every commit issued so far.
  void sync();
  // Positions [0, n) will be written (sync() first when reading the cache elsewhere).
  void mark_used(int32_t n) { storage_->mark_used(n); }
  void release_from(int32_t n_keep);
  // Writes n rows already in the cache type (n * row_bytes() bytes) to
  // positions pos0.. of a layer's K (kv 0) or V (kv 1), after every commit
  // issued so far, so that a queued commit cannot overwrite them.  Restoring
  // a saved state goes through here: only the pages of those rows are touched.
  void write_rows(int layer, int kv, int32_t pos0, int32_t n, const uint8_t* rows);
  // The committed rows of positions pos0.. as n whole rows (n * row_bytes()
  // bytes, every head of a position together); sync() first.
  void read_rows(int layer, int kv, int32_t pos0, int32_t n, uint8_t* rows) const;

 private:
  struct Job {
    int chunk;
    int32_t pos0, n;
    uint64_t ticket;
  };
  static constexpr int kRing = 64;  // queued commits (the fences keep it at <= 2)

  size_t stage_offset(int layer, int kv) const;
  // The committed row of kv head h at position p of a layer's K (kv 0) or V (kv 1).
  uint8_t* head_row(int layer, int kv, int h, int32_t p) const {
    return (kv ? storage_->v(layer) : storage_->k(layer)) + (size_t)h * storage_->head_stride() +
           (size_t)p * storage_->head_bytes();
  }
  // Throws unless positions [pos0, pos0 + n) of the layer exist.
  void check_rows(int layer, int32_t pos0, int32_t n) const;
  void run(const Job& j);
  // Converts staged rows [row0, row0 + n) of `src` (chunk c's layers) into
  // positions pos0.. of this cache.
  void convert(int c, const KvCache& src, int32_t row0, int32_t pos0, int32_t n);
  void wait(uint64_t ticket);
  void helper();

  KvCacheConfig cfg_;
  CommitHook hook_;
  size_t row_bytes_ = 0;
  int max_chunk_layers_ = 0;
  std::vector<int> chunk_of_layer_;
  std::unique_ptr<KvStorage> storage_;
  std::unique_ptr<float[]> staging_;

  uint64_t issued_ = 0;                  // tickets handed out (caller thread only)
  std::vector<uint64_t> chunk_ticket_;   // last ticket of each chunk
  uint64_t set_ticket_[2] = {0, 0};      // last ticket that read each staging set
  std::atomic<uint64_t> done_{0};        // every ticket <= done_ has run

  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  Job ring_[kRing];
  uint64_t head_ = 0, tail_ = 0;  // under mu_
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace lilims::graph
