#include "graph/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <system_error>

#include "base/error.h"

namespace lilims::graph {

const char* kv_commit_name(KvCommit c) {
  switch (c) {
    case KvCommit::sync: return "sync";
    case KvCommit::async: return "async";
    case KvCommit::skip: return "skip";
  }
  return "?";
}

namespace {

int max_chunk_layers(const KvCacheConfig& cfg) {
  int m = 0;
  for (size_t c = 0; c + 1 < cfg.chunk_begin.size(); ++c) {
    m = std::max(m, cfg.chunk_begin[c + 1] - cfg.chunk_begin[c]);
  }
  return m;
}

void check(const KvCacheConfig& cfg) {
  const quant::TypeTraits& t = quant::traits(cfg.type);
  const bool kv_type = t.kv && t.type == cfg.type;
  if (cfg.n_layer <= 0 || cfg.n_ctx <= 0 || cfg.n_batch <= 0 || cfg.kv_dim <= 0 ||
      cfg.chunk_begin.size() < 2 || cfg.chunk_begin.front() != 0 ||
      cfg.chunk_begin.back() != cfg.n_layer || !cfg.ops || cfg.n_heads <= 0 ||
      cfg.kv_dim % cfg.n_heads != 0 || (kv_type && (cfg.kv_dim / cfg.n_heads) % t.block_size != 0)) {
    throw Error(LILIMS_ERR_INTERNAL, "[kv-cache] inconsistent configuration");
  }
  if (!kv_type) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[kv-cache] the cache type must be one of " + quant::kv_type_names());
  }
}

}  // namespace

uint64_t KvCache::staging_bytes(const KvCacheConfig& cfg) {
  // 2 sets x the widest chunk's layers x (K, V) x (n_batch, kv_dim) floats
  return 2ull * (uint64_t)max_chunk_layers(cfg) * 2 * (uint64_t)cfg.n_batch * (uint64_t)cfg.kv_dim *
         sizeof(float);
}

KvCache::KvCache(const KvCacheConfig& cfg, CommitHook hook) : cfg_(cfg), hook_(hook) {
  check(cfg_);
  row_bytes_ = quant::row_bytes(cfg_.type, cfg_.kv_dim);
  max_chunk_layers_ = max_chunk_layers(cfg_);
  const int n_chunks = (int)cfg_.chunk_begin.size() - 1;
  chunk_of_layer_.resize((size_t)cfg_.n_layer);
  for (int c = 0; c < n_chunks; ++c) {
    for (int l = cfg_.chunk_begin[c]; l < cfg_.chunk_begin[c + 1]; ++l) chunk_of_layer_[(size_t)l] = c;
  }
  chunk_ticket_.assign((size_t)n_chunks, 0);
  storage_ = std::make_unique<KvStorage>(cfg_.n_layer, cfg_.n_ctx, row_bytes_, cfg_.n_heads);
  const uint64_t n_floats = staging_bytes(cfg_) / sizeof(float);
  staging_.reset(new (std::nothrow) float[n_floats]());
  if (!staging_) throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[kv-cache] no memory for the staging rows");
  if (cfg_.commit == KvCommit::async) {
    try {
      thread_ = std::thread([this] { helper(); });
    } catch (const std::system_error&) {
      throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[kv-cache] cannot start the commit thread");
    }
  }
}

KvCache::~KvCache() {
  if (thread_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_one();
    thread_.join();
  }
}

size_t KvCache::stage_offset(int layer, int kv) const {
  const int c = chunk_of_layer_[(size_t)layer];
  const size_t slot = (size_t)(c & 1) * (size_t)max_chunk_layers_ + (size_t)(layer - cfg_.chunk_begin[(size_t)c]);
  return (slot * 2 + (size_t)kv) * (size_t)cfg_.n_batch * (size_t)cfg_.kv_dim;
}

void KvCache::run(const Job& j) {
  if (hook_.fn) hook_.fn(hook_.user, j.chunk);
  convert(j.chunk, *this, 0, j.pos0, j.n);
}

void KvCache::convert(int c, const KvCache& src, int32_t row0, int32_t pos0, int32_t n) {
  const kernels::OpsTable& ops = *cfg_.ops;
  const int64_t d = cfg_.kv_dim, hd = d / cfg_.n_heads;
  const size_t hb = storage_->head_bytes();
  for (int l = cfg_.chunk_begin[(size_t)c]; l < cfg_.chunk_begin[(size_t)c + 1]; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const float* rows = src.staging_.get() + src.stage_offset(l, kv) + (int64_t)row0 * d;
      for (int h = 0; h < cfg_.n_heads; ++h) {
        const float* from = rows + h * hd;
        uint8_t* dst = head_row(l, kv, h, pos0);
        for (int32_t t = 0; t < n; ++t, from += d, dst += hb) {
          switch (cfg_.type) {
            case quant::Type::F16: ops.fp32_to_fp16(from, reinterpret_cast<uint16_t*>(dst), hd); break;
            case quant::Type::Q8_0: ops.quantize_row_q8_0(from, dst, hd); break;
            default: std::memcpy(dst, from, (size_t)hd * sizeof(float)); break;
          }
        }
      }
    }
  }
}

void KvCache::commit_from(int c, const KvCache& staged, int32_t row0, int32_t pos0, int32_t n) {
  if (n <= 0) return;
  if (staged.cfg_.kv_dim != cfg_.kv_dim || staged.cfg_.chunk_begin != cfg_.chunk_begin ||
      staged.cfg_.type != cfg_.type || row0 < 0 || row0 + n > staged.cfg_.n_batch) {
    throw Error(LILIMS_ERR_INTERNAL, "[kv-cache] commit_from: another layout or rows out of range");
  }
  sync();
  check_rows(cfg_.chunk_begin[(size_t)c], pos0, n);
  storage_->mark_used(pos0 + n);
  convert(c, staged, row0, pos0, n);
}

void KvCache::wait(uint64_t ticket) {
  if (done_.load(std::memory_order_acquire) >= ticket) return;
  for (int i = 0; i < 256; ++i) {
    if (done_.load(std::memory_order_acquire) >= ticket) return;
    std::this_thread::yield();
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return done_.load(std::memory_order_acquire) >= ticket; });
}

void KvCache::before_chunk(int c) {
#ifndef LILIMS_KV_DROP_FENCE
  wait(std::max(chunk_ticket_[(size_t)c], set_ticket_[c & 1]));
#else
  (void)c;
#endif
}

void KvCache::commit(int c, int32_t pos0, int32_t n) {
  if (cfg_.commit == KvCommit::skip || n <= 0) return;
  const Job j{c, pos0, n, ++issued_};
  chunk_ticket_[(size_t)c] = j.ticket;
  set_ticket_[c & 1] = j.ticket;
  if (cfg_.commit == KvCommit::sync) {
    run(j);
    done_.store(j.ticket, std::memory_order_release);
    return;
  }
  {
    std::unique_lock<std::mutex> lock(mu_);
    // Back-pressure only matters without the fences.
    done_cv_.wait(lock, [&] { return head_ - tail_ < (uint64_t)kRing; });
    ring_[head_ % kRing] = j;
    ++head_;
  }
  work_cv_.notify_one();
}

void KvCache::helper() {
  for (;;) {
    Job j;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || head_ != tail_; });
      if (head_ == tail_) return;  // stopping with nothing queued
      j = ring_[tail_ % kRing];
    }
    run(j);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++tail_;
      done_.store(j.ticket, std::memory_order_release);
    }
    done_cv_.notify_all();
  }
}

void KvCache::sync() { wait(issued_); }

void KvCache::check_rows(int layer, int32_t pos0, int32_t n) const {
  if (layer < 0 || layer >= cfg_.n_layer || pos0 < 0 || n < 0 || pos0 > cfg_.n_ctx - n) {
    throw Error(LILIMS_ERR_INTERNAL, "[kv-cache] rows out of range");
  }
}

void KvCache::write_rows(int layer, int kv, int32_t pos0, int32_t n, const uint8_t* rows) {
  check_rows(layer, pos0, n);
  sync();
  if (n == 0) return;
  storage_->mark_used(pos0 + n);
  const size_t hb = storage_->head_bytes();
  for (int h = 0; h < cfg_.n_heads; ++h) {
    for (int32_t t = 0; t < n; ++t) {
      std::memcpy(head_row(layer, kv, h, pos0 + t), rows + (size_t)t * row_bytes_ + (size_t)h * hb, hb);
    }
  }
}

void KvCache::read_rows(int layer, int kv, int32_t pos0, int32_t n, uint8_t* rows) const {
  check_rows(layer, pos0, n);
  const size_t hb = storage_->head_bytes();
  for (int h = 0; h < cfg_.n_heads; ++h) {
    for (int32_t t = 0; t < n; ++t) {
      std::memcpy(rows + (size_t)t * row_bytes_ + (size_t)h * hb, head_row(layer, kv, h, pos0 + t), hb);
    }
  }
}

void KvCache::release_from(int32_t n_keep) {
  sync();
  storage_->release_from(n_keep);
}

}  // namespace lilims::graph
