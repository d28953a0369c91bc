#include "models/llama_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "kernels/ops.h"

namespace lilims::models {
namespace {

const kernels::OpsTable& ops_for(ExecMode mode) {
  return mode == ExecMode::fast ? kernels::ops() : kernels::ops_table(kernels::Isa::ref);
}

// The configuration as a context runs it: checked, n_batch capped by n_ctx,
// the oracle's F32 cache.
ForwardConfig checked_config(const LlamaHParams& hp, ForwardConfig cfg) {
  if (cfg.n_ctx <= 0 || cfg.n_batch <= 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[llama] n_ctx and n_batch must be positive");
  }
  cfg.n_batch = std::min(cfg.n_batch, cfg.n_ctx);
  if (cfg.mode == ExecMode::oracle_f32) cfg.kv_type = quant::Type::F32;
  if (cfg.kv_type == quant::Type::Q8_0 && hp.head_dim % quant::kBlock != 0) {
    throw Error(LILIMS_ERR_UNSUPPORTED, "[llama] a Q8_0 KV cache needs a head dimension that is "
                                        "a multiple of 32, not " + std::to_string(hp.head_dim));
  }
  if (cfg.kv_type != quant::Type::F32 && cfg.kv_type != quant::Type::F16 &&
      cfg.kv_type != quant::Type::Q8_0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[llama] the KV cache type must be F32, F16 or Q8_0");
  }
  return cfg;
}

// Sizes of one block's activation buffers, in floats: (n_batch, ...).
struct BlockShapes {
  size_t x, xb, q, kv, att, ff, rope;
  BlockShapes(const LlamaHParams& hp, int32_t n_batch) {
    const size_t nb = (size_t)n_batch, q_dim = (size_t)hp.n_head * hp.head_dim;
    x = nb * hp.n_embd;
    xb = nb * std::max<size_t>(hp.n_embd, q_dim);
    q = nb * q_dim;
    kv = nb * hp.kv_dim();
    att = nb * q_dim;
    ff = nb * hp.n_ff;
    rope = nb * (hp.n_rot / 2);
  }
  // x, xb, q, k, v, att, gate, up, rope cos and sin
  size_t floats() const { return x + xb + q + 2 * kv + att + 2 * ff + 2 * rope; }
};

size_t attention_scratch_per_thread(const LlamaHParams& hp, const ForwardConfig& cfg) {
  kernels::AttentionArgs probe{};
  probe.n_q = cfg.n_batch;
  probe.pos0 = cfg.n_ctx - cfg.n_batch;
  probe.kv_type = cfg.kv_type;
  probe.n_head = hp.n_head;
  probe.n_head_kv = hp.n_head_kv;
  probe.head_dim = hp.head_dim;
  return kernels::attention_scratch_floats(probe);
}

}  // namespace

ContextFootprint LlamaContext::footprint(const LlamaHParams& hp, const ForwardConfig& config,
                                         int n_threads) {
  const ForwardConfig cfg = checked_config(hp, config);
  ContextFootprint f;
  f.kv_bytes =
      KvStorage::bytes_for(hp.n_layer, cfg.n_ctx, quant::row_bytes(cfg.kv_type, hp.kv_dim()));
  // Matmul activations are at most one float per input (the oracle's; Q8
  // rows take 34 bytes per 32).
  const uint64_t max_cols = (uint64_t)std::max({hp.n_embd, hp.n_ff, hp.n_head * hp.head_dim});
  f.scratch_bytes = sizeof(float) * ((uint64_t)BlockShapes(hp, cfg.n_batch).floats() +
                                     (uint64_t)attention_scratch_per_thread(hp, cfg) *
                                         (uint64_t)std::max(1, n_threads) +
                                     (uint64_t)cfg.n_batch * max_cols);
  return f;
}

LlamaContext::LlamaContext(const LlamaModel& model, const ForwardConfig& cfg,
                           graph::ThreadPool& pool)
    : model_(model), cfg_(checked_config(model.hp, cfg)), pool_(pool) {
  const LlamaHParams& hp = model.hp;
  kv_type_ = cfg_.kv_type;
  kv_row_bytes_ = quant::row_bytes(kv_type_, hp.kv_dim());
  kv_ = std::make_unique<KvStorage>(hp.n_layer, cfg_.n_ctx, kv_row_bytes_);

  const BlockShapes b(hp, cfg_.n_batch);
  x_.resize(b.x);
  xb_.resize(b.xb);
  q_.resize(b.q);
  k_.resize(b.kv);
  v_.resize(b.kv);
  att_.resize(b.att);
  gate_.resize(b.ff);
  up_.resize(b.ff);
  rope_cos_.resize(b.rope);
  rope_sin_.resize(b.rope);

  attn_scratch_per_thread_ = attention_scratch_per_thread(hp, cfg_);
  attn_scratch_.resize(attn_scratch_per_thread_ * (size_t)pool_.size());
}

void LlamaContext::matmul(const Weight& w, const float* x, int64_t n, float* y) {
  switch (cfg_.mode) {
    case ExecMode::fast:
      graph::matmul(w.packed, x, w.cols, n, y, w.rows, pool_, mm_scratch_);
      break;
    case ExecMode::ref:
      graph::matmul_isa(kernels::Isa::ref, w.packed, x, w.cols, n, y, w.rows, pool_, mm_scratch_);
      break;
    case ExecMode::oracle_f32:
      graph::matmul_f32_oracle(w.packed, x, w.cols, n, y, w.rows, pool_, mm_scratch_);
      break;
  }
}

void LlamaContext::store_kv(int layer, int32_t pos, const float* k, const float* v) {
  const kernels::OpsTable& ops = ops_for(cfg_.mode);
  const int64_t kv_dim = model_.hp.kv_dim();
  uint8_t* kd = kv_->k(layer) + (size_t)pos * kv_row_bytes_;
  uint8_t* vd = kv_->v(layer) + (size_t)pos * kv_row_bytes_;
  if (kv_type_ == quant::Type::F32) {
    std::memcpy(kd, k, (size_t)kv_dim * sizeof(float));
    std::memcpy(vd, v, (size_t)kv_dim * sizeof(float));
  } else if (kv_type_ == quant::Type::Q8_0) {
    ops.quantize_row_q8_0(k, kd, kv_dim);
    ops.quantize_row_q8_0(v, vd, kv_dim);
  } else {
    ops.fp32_to_fp16(k, reinterpret_cast<uint16_t*>(kd), kv_dim);
    ops.fp32_to_fp16(v, reinterpret_cast<uint16_t*>(vd), kv_dim);
  }
}

void LlamaContext::forward(const int32_t* tokens, int32_t n, int32_t pos0, float* logits,
                           bool all_logits) {
  if (n <= 0) return;
  if (pos0 < 0 || (int64_t)pos0 + n > cfg_.n_ctx) {
    throw Error(LILIMS_ERR_CONTEXT_FULL, "[llama] positions " + std::to_string(pos0) + ".." +
                                             std::to_string(pos0 + n - 1) +
                                             " do not fit a context of " +
                                             std::to_string(cfg_.n_ctx));
  }
  kv_->mark_used(pos0 + n);
  const int64_t n_vocab = model_.hp.n_vocab;
  for (int32_t done = 0; done < n; done += cfg_.n_batch) {
    const int32_t m = std::min(cfg_.n_batch, n - done);
    const bool last = done + m == n;
    float* out = nullptr;
    if (all_logits) {
      out = logits + (size_t)done * n_vocab;
    } else if (last) {
      out = logits;
    }
    block(tokens + done, m, pos0 + done, out, all_logits);
  }
}

// One block of m tokens through every layer.  Activations are (m, dim) rows.
void LlamaContext::block(const int32_t* tokens, int32_t m, int32_t pos0, float* logits,
                         bool all_logits) {
  const LlamaHParams& hp = model_.hp;
  const kernels::OpsTable& ops = ops_for(cfg_.mode);
  const int64_t d = hp.n_embd, q_dim = (int64_t)hp.n_head * hp.head_dim, kv_dim = hp.kv_dim();
  const int half = hp.n_rot / 2;

  for (int32_t t = 0; t < m; ++t) {
    dequantize_row(model_.tok_embd, tokens[t], &x_[(size_t)t * d]);
    kernels::rope_table_f32__ref(pos0 + t, hp.n_rot, hp.rope_freq_base,
                                 &rope_cos_[(size_t)t * half], &rope_sin_[(size_t)t * half]);
  }

  kernels::AttentionArgs args{};
  args.q = q_.data();
  args.q_stride = q_dim;
  args.n_q = m;
  args.pos0 = pos0;
  args.kv_type = kv_type_;
  args.kv_stride_bytes = (int64_t)kv_row_bytes_;
  args.n_head = hp.n_head;
  args.n_head_kv = hp.n_head_kv;
  args.head_dim = hp.head_dim;
  args.scale = 1.0f / std::sqrt((float)hp.head_dim);
  args.window = 0;
  args.out = att_.data();
  args.out_stride = q_dim;

  for (int l = 0; l < hp.n_layer; ++l) {
    const LlamaLayer& L = model_.layers[(size_t)l];
    // attention
    for (int32_t t = 0; t < m; ++t) {
      ops.rmsnorm(&x_[(size_t)t * d], L.attn_norm.data(), &xb_[(size_t)t * d], d, hp.norm_eps);
    }
    matmul(L.wq, xb_.data(), m, q_.data());
    matmul(L.wk, xb_.data(), m, k_.data());
    matmul(L.wv, xb_.data(), m, v_.data());
    for (int32_t t = 0; t < m; ++t) {
      const float* c = &rope_cos_[(size_t)t * half];
      const float* s = &rope_sin_[(size_t)t * half];
      ops.rope(&q_[(size_t)t * q_dim], hp.n_head, hp.head_dim, hp.n_rot, c, s, true);
      ops.rope(&k_[(size_t)t * kv_dim], hp.n_head_kv, hp.head_dim, hp.n_rot, c, s, true);
      store_kv(l, pos0 + t, &k_[(size_t)t * kv_dim], &v_[(size_t)t * kv_dim]);
    }
    args.k = kv_->k(l);
    args.v = kv_->v(l);
    // Tasks = (part of a kv group) x (block of query tokens): a task's heads
    // share one kv head, so the kernel reads and converts each K/V row once
    // for all of them.  Groups are split in two only when whole groups would
    // leave threads idle (e.g. 3 kv groups on 2 threads); later query blocks
    // see more keys, so they are handed out first.
    {
      const int n_thr = pool_.size(), n_kv = hp.n_head_kv, group = hp.n_head / n_kv;
      const int parts = (n_thr > 1 && n_kv % n_thr != 0 && n_kv < 2 * n_thr && group > 1) ? 2 : 1;
      const int32_t qb = m <= 32 ? m : 32;
      const int64_t n_qb = (m + qb - 1) / qb, n_units = (int64_t)n_kv * parts;
      pool_.parallel_for(n_units * n_qb, [&](int64_t task, int thread) {
        const int64_t b = n_qb - 1 - task / n_units, u = task % n_units;
        const int g = (int)(u / parts), part = (int)(u % parts);
        const int h0 = g * group + part * group / parts, h1 = g * group + (part + 1) * group / parts;
        kernels::AttentionArgs la = args;
        const int32_t t0 = (int32_t)b * qb;
        la.n_q = std::min(qb, m - t0);
        la.pos0 = pos0 + t0;
        la.q = args.q + (int64_t)t0 * args.q_stride;
        la.out = args.out + (int64_t)t0 * args.out_stride;
        ops.attention(la, h0, h1, &attn_scratch_[(size_t)thread * attn_scratch_per_thread_]);
      });
    }
    matmul(L.wo, att_.data(), m, xb_.data());
    ops.add(x_.data(), xb_.data(), x_.data(), (int64_t)m * d);

    // feed-forward: w_down(silu(w_gate x) * w_up x)
    for (int32_t t = 0; t < m; ++t) {
      ops.rmsnorm(&x_[(size_t)t * d], L.ffn_norm.data(), &xb_[(size_t)t * d], d, hp.norm_eps);
    }
    matmul(L.w_gate, xb_.data(), m, gate_.data());
    matmul(L.w_up, xb_.data(), m, up_.data());
    ops.swiglu(gate_.data(), up_.data(), gate_.data(), (int64_t)m * hp.n_ff);
    matmul(L.w_down, gate_.data(), m, xb_.data());
    ops.add(x_.data(), xb_.data(), x_.data(), (int64_t)m * d);
  }

  if (!logits) return;
  // Final norm and LM head, for every row or only the last.
  const int32_t first = all_logits ? 0 : m - 1;
  for (int32_t t = first; t < m; ++t) {
    ops.rmsnorm(&x_[(size_t)t * d], model_.output_norm.data(), &xb_[(size_t)(t - first) * d], d,
                hp.norm_eps);
  }
  matmul(model_.output, xb_.data(), m - first, logits);
}

}  // namespace lilims::models
