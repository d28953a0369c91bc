#include "graph/executor.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>

#include "base/error.h"
#include "quant/quant.h"
#include "kernels/ref/matmul_ref.h"
#include "quant/repack.h"

namespace lilims::graph {

Executor::Executor(Graph g, const PlanOptions& opt, ThreadPool& pool, const ModelMemory& model,
                   CommitHook hook)
    : graph_(std::move(g)), pool_(pool) {
  PlanOptions o = opt;
  o.n_threads = pool.size();
  plan_ = make_plan(graph_, o, model);
  allocate(std::move(hook));
}

Executor::Executor(Graph g, Plan plan, ThreadPool& pool, CommitHook hook)
    : graph_(std::move(g)), plan_(std::move(plan)), pool_(pool) {
  if (plan_.opt.n_threads != pool.size() || plan_.offset.size() != graph_.tensors().size()) {
    throw Error(LILIMS_ERR_INTERNAL, "[executor] the plan was not made for this graph and pool");
  }
  allocate(std::move(hook));
}

void Executor::allocate(CommitHook hook) {
  if (graph_.shape().n_layer > 0) kv_ = std::make_unique<KvCache>(plan_.kv, hook);

  const uint64_t bytes = plan_.mem.arena + plan_.mem.matmul_act + plan_.mem.attn_scratch +
                        plan_.mem.round_tmp;
  auto* block = static_cast<uint8_t*>(::operator new[]((size_t)bytes + 64, std::align_val_t(64), std::nothrow));
  if (!block) throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[executor] no memory for the activation arena");
  arena_ = reinterpret_cast<float*>(block);
  act_ = block + plan_.mem.arena;
  attn_scratch_ = reinterpret_cast<float*>(act_ + plan_.mem.matmul_act);
  attn_part_ = attn_scratch_ + plan_.attn_scratch_floats * (size_t)plan_.opt.n_threads;
  round_tmp_ = act_ + plan_.mem.matmul_act + plan_.mem.attn_scratch;

  const auto& ts = graph_.tensors();
  base_.assign(ts.size(), nullptr);
  stride_.assign(ts.size(), 0);
  for (size_t t = 0; t < ts.size(); ++t) {
    const int r = graph_.root((int)t);
    const Tensor& root = ts[(size_t)r];
    int64_t col0 = 0;
    for (int v = (int)t; v != r; v = ts[(size_t)v].view_of) col0 += ts[(size_t)v].col0;
    stride_[t] = root.cols;
    float* b = nullptr;
    switch (root.storage) {
      case Storage::arena:
        if (plan_.offset[(size_t)r] >= 0) b = reinterpret_cast<float*>(block + plan_.offset[(size_t)r]);
        break;
      case Storage::staged_k: b = kv_ ? kv_->staged_k(root.layer) : nullptr; break;
      case Storage::staged_v: b = kv_ ? kv_->staged_v(root.layer) : nullptr; break;
      case Storage::logits: logits_tensor_ = r; break;
    }
    base_[t] = b ? b + col0 : nullptr;
  }
  for (size_t t = 0; t < ts.size(); ++t) {
    if (logits_tensor_ >= 0 && graph_.root((int)t) == logits_tensor_) logits_views_.push_back((int)t);
  }
  for (const Node& n : graph_.nodes()) {
    if (n.op != Op::embed) continue;
    embed_out_ = n.out;
    const quant::TypeTraits* embed_traits = quant::type_traits((uint32_t)n.w->type);
    if (!embed_traits || !embed_traits->to_float) {
      throw Error(LILIMS_ERR_UNSUPPORTED, "[executor] no row conversion for the embedding's type");
    }
  }
  q8_0_traits_ = quant::type_traits((uint32_t)quant::Type::Q8_0);

  // The groups of consecutive lora nodes that read one input.
  lora_group_end_.assign(graph_.nodes().size(), 0);
  slot_node_.assign(graph_.lora_targets().size(), 0);
  for (size_t i = 0; i < graph_.nodes().size(); ++i) {
    const Node& n = graph_.nodes()[i];
    if (n.op != Op::lora) continue;
    slot_node_[(size_t)n.lora_slot] = i;
    if (i > 0 && graph_.nodes()[i - 1].op == Op::lora && graph_.nodes()[i - 1].a == n.a) continue;
    size_t j = i + 1;
    while (j < graph_.nodes().size() && graph_.nodes()[j].op == Op::lora && graph_.nodes()[j].a == n.a) ++j;
    lora_group_end_[i] = j;
  }

  // The runs of row-wise nodes, never across a chunk's end.
  const auto& nodes = graph_.nodes();
  row_runs_.assign(nodes.size(), RowRun{});
  for (const Chunk& ch : graph_.chunks()) {
    for (size_t i = (size_t)ch.node_begin; i < (size_t)ch.node_end; ++i) {
      RowRun& rr = row_runs_[i];
      rr.end = i + 1;
      const bool starts = row_wise(nodes[i].op) &&
                          (i == (size_t)ch.node_begin || !row_wise(nodes[i - 1].op));
      if (!starts) continue;
      size_t j = i + 1;
      while (j < (size_t)ch.node_end && row_wise(nodes[j].op)) ++j;
      rr.end = j;
      if (j == (size_t)ch.node_end || nodes[j].op != Op::matmul || nodes[j].a != nodes[j - 1].out) continue;
      const MatmulStep& next = plan_.mm[j];
      if (next.kern && next.quant) rr.quant = &next;
    }
  }
}

void Executor::set_lora(const std::vector<std::vector<LoraTerm>>& terms) {
  const auto& targets = graph_.lora_targets();
  if (terms.size() > targets.size()) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[executor] adapter terms for " + std::to_string(terms.size()) +
                                                 " weights, but the graph adapts " +
                                                 std::to_string(targets.size()));
  }
  const bool fast = plan_.opt.mode == ExecMode::fast;
  const kernels::Isa isa = fast ? kernels::active_isa() : kernels::Isa::ref;
  std::vector<std::vector<LoraRun>> runs(terms.size());
  const size_t rows = (size_t)std::max(plan_.opt.n_batch, kLoraDecodeRows);
  const size_t t_rows = std::max(rows, (size_t)pool_.size() * (size_t)kLoraDecodeRows);
  size_t act_bytes = 0;
  for (size_t slot = 0; slot < terms.size(); ++slot) {
    const LoraTarget& tg = targets[slot];
    for (const LoraTerm& term : terms[slot]) {
      const bool table = graph_.nodes()[slot_node_[slot]].a < 0;
      const bool fits = term.b && term.rank > 0 &&
                        (table ? term.a_rows && !term.a
                               : term.a && !term.a_rows && term.a->rows == term.rank && term.a->cols == tg.n_in);
      if (!fits) {
        throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[executor] an adapter term for " + tg.name +
                                                     " does not match its shape");
      }
      LoraRun r{term, table ? MatmulStep{}
                            : matmul_step(isa, plan_.opt.mode == ExecMode::oracle_f32, *term.a,
                                          plan_.opt.n_batch, plan_.opt.n_threads)};
      act_bytes = std::max(act_bytes, r.step.act_stride * rows);
      runs[slot].push_back(r);
    }
  }
  // The groups' summed ranks size the t scratch.
  size_t max_sum = 0;
  const auto& nodes = graph_.nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (lora_group_end_[i] <= i) continue;
    size_t sum = 0;
    int items = 0;
    for (size_t j = i; j < lora_group_end_[i]; ++j) {
      const size_t slot = (size_t)nodes[j].lora_slot;
      if (slot >= runs.size()) continue;
      for (const LoraRun& r : runs[slot]) sum += (size_t)r.term.rank, ++items;
    }
    if (items > kMaxLoraItems) {
      throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[executor] more than " + std::to_string(kMaxLoraItems) +
                                                   " adapter terms on the weights of one input");
    }
    max_sum = std::max(max_sum, sum);
  }
  try {
    std::vector<float> t(t_rows * max_sum);
    std::vector<uint8_t> act(act_bytes);
    lora_t_.swap(t);
    lora_act_.swap(act);
  } catch (const std::bad_alloc&) {
    throw Error(LILIMS_ERR_OUT_OF_MEMORY, "[executor] no memory for the adapters' scratch");
  }
  lora_.swap(runs);
}

// A run of lora nodes that read one input (Q, K and V of a stacked
// weight; gate and up) together: t = A a with the matmul kernels, then
// t B^T added piece by piece of B (OpsTable::lora_add).  A few rows (decode)
// run on the calling thread; more (prefill) are one job on the pool whose
// tasks each take a range of rows, quantize them and do everything for them.
// The embedding's group reads A's rows for the tokens instead.
void Executor::lora(size_t first, int32_t rows, const int32_t* tokens) {
  const auto& nodes = graph_.nodes();
  const size_t end = lora_group_end_[first];
  struct Item {
    const LoraRun* run;
    float* out;
    int64_t ldo, n_out;
    size_t t_off;  // floats into a task's t scratch, per row
  };
  Item items[kMaxLoraItems];
  int n_items = 0;
  size_t sum_rank = 0;
  for (size_t i = first; i < end; ++i) {
    const Node& n = nodes[i];
    if ((size_t)n.lora_slot >= lora_.size()) continue;
    for (const LoraRun& r : lora_[(size_t)n.lora_slot]) {
      if (n_items == kMaxLoraItems) throw Error(LILIMS_ERR_INTERNAL, "[executor] too many adapter terms at once");
      items[n_items++] = {&r, ptr(n.out), ld(n.out), graph_.tensors()[(size_t)n.out].cols, sum_rank};
      sum_rank += (size_t)r.term.rank;
    }
  }
  if (n_items == 0 || rows <= 0) return;
  const Node& n0 = nodes[first];
  const kernels::OpsTable& ops = *plan_.ops;
  const int threads = pool_.size();
  // Pieces [p0, p1) of B (kLoraPiece columns each, LoraTerm::b) for rows
  // [j0, j0 + nj) of the block, whose t (scaled) starts at t.
  auto add_tb = [&](const Item& it, int64_t p0, int64_t p1, int32_t j0, int32_t nj, const float* t) {
    const LoraRun& r = *it.run;
    const size_t piece_row = sizeof(quant::BlockQ8_0) * (size_t)r.term.rank;  // per 32 columns
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c0 = p * kLoraPiece, w = std::min<int64_t>(kLoraPiece, it.n_out - c0);
      const uint8_t* piece = static_cast<const uint8_t*>(r.term.b) + (size_t)(c0 / quant::kBlock) * piece_row;
      if (w % quant::kBlock == 0) {
        ops.lora_add(piece, r.term.rank, w, t + it.t_off, (int64_t)sum_rank, nj, it.out + j0 * it.ldo + c0,
                     it.ldo);
        continue;
      }
      // The last columns of an n_out that is not a multiple of 32: the padded
      // block into zeros, then its first w columns added.
      const int64_t wp = (w + quant::kBlock - 1) / quant::kBlock * quant::kBlock;
      float tail[kLoraPiece];
      for (int32_t j = 0; j < nj; ++j) {
        std::fill(tail, tail + wp, 0.0f);
        ops.lora_add(piece, r.term.rank, wp, t + it.t_off + (size_t)j * sum_rank, (int64_t)sum_rank, 1, tail, wp);
        ops.add(it.out + (j0 + j) * it.ldo + c0, tail, it.out + (j0 + j) * it.ldo + c0, w);
      }
    }
  };

  if (n0.a < 0) {  // an embedding: A's rows for the tokens (rows given as embeddings have none)
    if (!tokens) return;
    float* t = lora_t_.data();
    for (int32_t j = 0; j < rows; ++j) {
      for (int it = 0; it < n_items; ++it) {
        const LoraTerm& term = items[it].run->term;
        const float* row = term.a_rows + (size_t)tokens[j] * (size_t)term.rank;
        float* y = t + (size_t)j * sum_rank + items[it].t_off;
        for (int32_t k = 0; k < term.rank; ++k) y[k] = term.scale * row[k];
      }
    }
    pool_.parallel_for(threads, [&](int64_t task, int) {
      for (int it = 0; it < n_items; ++it) {
        const int64_t pieces = (items[it].n_out + kLoraPiece - 1) / kLoraPiece;
        add_tb(items[it], pieces * task / threads, pieces * (task + 1) / threads, 0, rows, t);
      }
    });
    return;
  }
  const float* a = ptr(n0.a);
  const int64_t lda = ld(n0.a), n_in = graph_.tensors()[(size_t)n0.a].cols;
  const MatmulStep& st = items[0].run->step;  // every A reads the same input: one activation format
  const size_t act_stride = st.act_stride;

  // t[j][.] (rows j0.. of the task) for every item, from activation rows
  // quantized at act (or a itself for F32 A / the oracle).
  auto compute_t = [&](int32_t j0, int32_t nj, float* t) {
    for (int it = 0; it < n_items; ++it) {
      const LoraRun& r = *items[it].run;
      float* y = t + items[it].t_off;
      if (!r.step.kern) {
        kernels::matmul_dequant_f32__ref(*r.term.a, 0, r.term.rank, a + j0 * lda, lda, nj, y, (int64_t)sum_rank);
      } else if (r.step.quant) {
        r.step.kern->fn(*r.term.a, 0, r.term.rank, lora_act_.data() + (size_t)j0 * act_stride, act_stride, nj,
                        y, (int64_t)sum_rank);
      } else {
        r.step.kern->fn(*r.term.a, 0, r.term.rank, a + j0 * lda, (size_t)lda * sizeof(float), nj, y,
                        (int64_t)sum_rank);
      }
      for (int32_t j = 0; j < nj; ++j) {  // t carries the term's scale
        for (int32_t k = 0; k < r.term.rank; ++k) y[(size_t)j * sum_rank + (size_t)k] *= r.term.scale;
      }
    }
  };
  if (rows <= kLoraDecodeRows) {
    // A decode step: on the calling thread.  The group's A and B are tens of
    // KB; a pool job per group (about 120 a token for SmolLM2) cost more in
    // barriers than the second thread gave (bench/README, "LoRA adapters").
    if (st.quant) {
      for (int32_t j = 0; j < rows; ++j) st.quant->fn(a + j * lda, lora_act_.data() + (size_t)j * act_stride, n_in);
    }
    float* t = lora_t_.data();
    compute_t(0, rows, t);
    for (int it = 0; it < n_items; ++it) {
      add_tb(items[it], 0, (items[it].n_out + kLoraPiece - 1) / kLoraPiece, 0, rows, t);
    }
    return;
  }
  const int32_t chunk = kLoraRowChunk;
  pool_.parallel_for((rows + chunk - 1) / chunk, [&](int64_t task, int) {
    const int32_t j0 = (int32_t)task * chunk, nj = std::min(chunk, rows - j0);
    if (st.quant) {
      for (int32_t j = j0; j < j0 + nj; ++j) st.quant->fn(a + j * lda, lora_act_.data() + (size_t)j * act_stride, n_in);
    }
    float* t = lora_t_.data() + (size_t)j0 * sum_rank;
    compute_t(j0, nj, t);
    for (int it = 0; it < n_items; ++it) {
      add_tb(items[it], 0, (items[it].n_out + kLoraPiece - 1) / kLoraPiece, j0, nj, t);
    }
  });
}

Executor::~Executor() {
  kv_.reset();  // joins the commit thread before the staging rows go
  ::operator delete[](reinterpret_cast<uint8_t*>(arena_), std::align_val_t(64));
}

void Executor::forward(const int32_t* tokens, int32_t n, int32_t pos0, float* logits,
                       bool all_logits) {
  if (!kv_) throw Error(LILIMS_ERR_INTERNAL, "[executor] forward() on an encoder graph; use encode()");
  if (n <= 0) return;
  if (pos0 < 0 || (int64_t)pos0 + n > n_ctx()) {
    throw Error(LILIMS_ERR_CONTEXT_FULL, "[executor] positions " + std::to_string(pos0) + ".." +
                                             std::to_string(pos0 + n - 1) +
                                             " do not fit a context of " + std::to_string(n_ctx()));
  }
  kv_->mark_used(pos0 + n);
  const int64_t n_vocab = graph_.shape().n_vocab;
  const int32_t nb = plan_.opt.n_batch;
  for (int32_t done = 0; done < n; done += nb) {
    const int32_t m = std::min(nb, n - done);
    float* out = nullptr;
    if (logits && all_logits) {
      out = logits + (size_t)done * n_vocab;
    } else if (logits && done + m == n) {
      out = logits;
    }
    const int64_t width = embd_ ? graph_.tensors()[(size_t)embed_out_].cols : 0;
    embd_block_ = embd_ ? embd_ + (size_t)done * (size_t)width : nullptr;
    block(tokens ? tokens + done : nullptr, m, pos0 + done, out, all_logits);
  }
}

void Executor::forward_embd(const float* embd, int32_t n, int32_t pos0, float* logits,
                            bool all_logits) {
  if (!embd || embed_out_ < 0) {
    throw Error(LILIMS_ERR_INTERNAL, "[executor] forward_embd() without rows or an embed node");
  }
  struct Reset {
    const float*& p;
    ~Reset() { p = nullptr; }
  } reset{embd_ = embd};
  forward(nullptr, n, pos0, logits, all_logits);
}

void Executor::encode(const float* input, int32_t n, float* out) {
  if (kv_) throw Error(LILIMS_ERR_INTERNAL, "[executor] encode() on a graph with a KV cache");
  if (n < 1 || n > plan_.opt.n_batch) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[executor] " + std::to_string(n) +
                                                 " encoder rows do not fit a block of " +
                                                 std::to_string(plan_.opt.n_batch));
  }
  input_ = input;
  block(nullptr, n, 0, out, true);
  input_ = nullptr;
}

void Executor::forward_as_decode(const int32_t* tokens, int32_t n, int32_t pos0, float* logits,
                                 bool all_logits) {
  struct Flag {
    bool& f;
    ~Flag() { f = false; }
  } flag{attention_per_token_ = true};
  forward(tokens, n, pos0, logits, all_logits);
}

void Executor::block(const int32_t* tokens, int32_t m, int32_t pos0, float* logits,
                     bool all_logits) {
  for (int t : logits_views_) base_[(size_t)t] = logits;
  int32_t rows = m;
  const auto& chunks = graph_.chunks();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const Chunk& ch = chunks[c];
    if (ch.kind == ChunkKind::head && !logits) break;
    const int bc = plan_.block_chunk[c];
    if (bc >= 0) kv_->before_chunk(bc);
    for (int i = ch.node_begin; i < ch.node_end;) {
      const RowRun& rr = row_runs_[(size_t)i];
      if (rr.end > (size_t)i + 1 || rr.quant) {
        run_rows(rr, (size_t)i, rows);
        i = (int)rr.end;
        continue;
      }
      run(graph_.nodes()[(size_t)i], (size_t)i, rows, m, pos0, tokens, all_logits);
      ++i;
    }
    if (bc >= 0 && batch_runs_) {
      for (int r = 0; r < batch_n_runs_; ++r) {
        const BatchRun& br = batch_runs_[r];
        br.kv->commit_from(bc, *kv_, br.row0, br.pos0, br.n);
      }
    } else if (bc >= 0) {
      kv_->commit(bc, pos0, m);
    }
  }
}

// The staged rows become what the cache will hold (F16 or Q8_0 values, as
// floats), so attention reads the same numbers for a position whether it is
// staged or committed: a prompt gives the same logits in one block or token
// by token, and the commit's conversion of these rows is exact.
void Executor::round_staged(int layer, int32_t m) {
  const quant::Type type = kv_->type();
  if (type == quant::Type::F32) return;
  const kernels::OpsTable& ops = *plan_.ops;
  const int64_t d = graph_.shape().kv_dim();
  for (float* rows : {kv_->staged_k(layer), kv_->staged_v(layer)}) {
    for (int32_t t = 0; t < m; ++t) {
      float* row = rows + t * d;
      if (type == quant::Type::F16) {
        ops.fp32_to_fp16(row, reinterpret_cast<uint16_t*>(round_tmp_), d);
        ops.fp16_to_fp32(reinterpret_cast<const uint16_t*>(round_tmp_), row, d);
      } else {
        ops.quantize_row_q8_0(row, round_tmp_, d);
        q8_0_traits_->to_float(round_tmp_, row, d);
      }
    }
  }
}

// Rows [t0, t1) of a row-wise node: row t of its output depends on row t of
// its inputs alone.
void Executor::row_op(const Node& n, int32_t t0, int32_t t1) {
  const kernels::OpsTable& ops = *plan_.ops;
  const ModelShape& sh = graph_.shape();
  const int64_t ldo = ld(n.out), w = graph_.tensors()[(size_t)n.out].cols;
  const int64_t lda = n.a >= 0 ? ld(n.a) : 0, ldb = n.b >= 0 ? ld(n.b) : 0;
  float* out = ptr(n.out) + t0 * ldo;
  const float* a = n.a >= 0 ? ptr(n.a) + t0 * lda : nullptr;
  const float* b = n.b >= 0 ? ptr(n.b) + t0 * ldb : nullptr;
  const int32_t rows = t1 - t0;
  // Elementwise ops on contiguous tensors go to the kernel as one run.
  const bool flat = ldo == w && (n.a < 0 || lda == w) && (n.b < 0 || ldb == w);
  auto unary = [&](void (*f)(const float*, float*, int64_t)) {
    if (flat) {
      f(a, out, (int64_t)rows * w);
    } else {
      for (int32_t t = 0; t < rows; ++t) f(a + t * lda, out + t * ldo, w);
    }
  };
  auto binary = [&](void (*f)(const float*, const float*, float*, int64_t)) {
    if (flat) {
      f(a, b, out, (int64_t)rows * w);
    } else {
      for (int32_t t = 0; t < rows; ++t) f(a + t * lda, b + t * ldb, out + t * ldo, w);
    }
  };
  switch (n.op) {
    case Op::rms_norm:
      for (int32_t t = 0; t < rows; ++t) ops.rmsnorm(a + t * lda, n.norm_w, out + t * ldo, w, n.eps);
      break;
    case Op::layer_norm:
      for (int32_t t = 0; t < rows; ++t) {
        ops.layernorm(a + t * lda, n.norm_w, n.norm_b, out + t * ldo, w, n.eps);
      }
      break;
    case Op::rope: {
      const float* cos = ptr(n.b) + t0 * ld(n.b);
      const float* sin = ptr(n.c) + t0 * ld(n.c);
      for (int32_t t = 0; t < rows; ++t) {
        ops.rope(out + t * ldo, n.n_heads, sh.head_dim, sh.n_rot, cos + t * ld(n.b), sin + t * ld(n.c),
                 !sh.rope_neox);
      }
      break;
    }
    case Op::copy:
      for (int32_t t = 0; t < rows; ++t) std::memcpy(out + t * ldo, a + t * lda, (size_t)w * sizeof(float));
      break;
    case Op::swiglu: binary(ops.swiglu); break;
    case Op::gelu: unary(ops.gelu); break;
    case Op::add: binary(ops.add); break;
    case Op::quick_gelu: unary(kernels::quick_gelu_f32__ref); break;
    case Op::gelu_erf: unary(ops.gelu_erf); break;
    case Op::geglu:
      for (int32_t t = 0; t < rows; ++t) {
        ops.gelu(a + t * lda, out + t * ldo, w);
        ops.mul(out + t * ldo, b + t * ldb, out + t * ldo, w);
      }
      break;
    case Op::head_norm: {
      const int64_t d = w / n.n_heads;
      for (int32_t t = 0; t < rows; ++t) {
        for (int h = 0; h < n.n_heads; ++h) {
          float* x = out + t * ldo + h * d;
          ops.rmsnorm(x, n.norm_w, x, d, n.eps);
        }
      }
      break;
    }
    case Op::scale:
      for (int32_t t = 0; t < rows; ++t) {
        float* x = out + t * ldo;
        for (int64_t i = 0; i < w; ++i) x[i] *= n.scale;
      }
      break;
    case Op::softcap:
      for (int32_t t = 0; t < rows; ++t) {
        float* x = out + t * ldo;
        for (int64_t i = 0; i < w; ++i) x[i] = n.scale * std::tanh(x[i] / n.scale);
      }
      break;
    default: throw Error(LILIMS_ERR_INTERNAL, std::string("[executor] not a row-wise op: ") + op_name(n.op));
  }
}

// A run of row-wise nodes [begin, end) as one job over the pool, each task
// taking all of them for its rows and then quantizing its rows of the last
// output for the matmul at `end` (when run.quant is set), which then finds
// its activations ready: one barrier instead of one per node plus the
// matmul's own for the quantization.  Every row gets the arithmetic it gets
// alone, so the split changes no result.
void Executor::run_rows(const RowRun& run, size_t begin, int32_t rows) {
  const auto& nodes = graph_.nodes();
  const Node& last = nodes[run.end - 1];
  const float* x = ptr(last.out);
  const int64_t ldx = ld(last.out);
  const int64_t cols = graph_.tensors()[(size_t)last.out].cols;
  const int64_t per = std::max<int64_t>(1, rows / (4 * pool_.size()));
  pool_.parallel_for((rows + per - 1) / per, [&](int64_t task, int) {
    const int32_t t0 = (int32_t)(task * per), t1 = (int32_t)std::min<int64_t>(rows, t0 + per);
    for (size_t i = begin; i < run.end; ++i) row_op(nodes[i], t0, t1);
    if (run.quant) quantize_rows(*run.quant, x, ldx, t0, t1, cols, act_);
  });
  act_ready_ = run.quant ? (int)run.end : -1;
}

void Executor::run(const Node& n, size_t index, int32_t& rows, int32_t m, int32_t pos0,
                   const int32_t* tokens, bool all_logits) {
  float* out = ptr(n.out);
  const int64_t ldo = ld(n.out), w = graph_.tensors()[(size_t)n.out].cols;
  const float* a = n.a >= 0 ? ptr(n.a) : nullptr;
  const int64_t lda = n.a >= 0 ? ld(n.a) : 0;
  if (row_wise(n.op)) {
    row_op(n, 0, rows);
    return;
  }
  switch (n.op) {
    case Op::embed: {
      if (embd_block_) {
        for (int32_t t = 0; t < rows; ++t) {
          std::memcpy(out + t * ldo, embd_block_ + (size_t)t * (size_t)w, (size_t)w * sizeof(float));
        }
        break;
      }
      for (int32_t t = 0; t < rows; ++t) {
        quant::row_to_float(n.w->type, n.w->layout, n.w->data, n.w->cols, tokens[t], out + t * ldo);
      }
      break;
    }
    case Op::rope_table: {
      float* sin = ptr(n.b);
      for (int32_t t = 0; t < rows; ++t) {
        const int32_t pos = batch_runs_ ? row_pos_[(size_t)t] : pos0 + t;
        kernels::rope_table_f32(n.rope, pos, out + t * ldo, sin + t * ld(n.b));
      }
      break;
    }
    case Op::matmul: {
      if (observer_.fn) observer_.fn(observer_.user, *n.w, a, lda, rows);
      const bool ready = act_ready_ == (int)index;
      act_ready_ = -1;
      run_matmul(plan_.mm[index], *n.w, a, lda, rows, out, ldo, pool_, act_, ready);
      if (n.bias) {
        for (int32_t t = 0; t < rows; ++t) plan_.ops->add(out + t * ldo, n.bias, out + t * ldo, w);
      }
      break;
    }
    case Op::attention:
      if (batch_runs_) {
        attention_batch(n, m);
      } else {
        attention(n, m, pos0);
      }
      break;
    case Op::lora:
      if (lora_group_end_[index] > index) lora(index, rows, tokens);  // the rest of a group ran with its first
      break;
    case Op::select_rows:
      if (batch_runs_) {  // each run's last row
        for (int r = 0; r < batch_n_runs_; ++r) {
          const int32_t t = batch_runs_[r].row0 + batch_runs_[r].n - 1;
          std::memcpy(out + r * ldo, a + t * lda, (size_t)w * sizeof(float));
        }
        rows = batch_n_runs_;
        break;
      }
      [[fallthrough]];
    case Op::drop_rows: {
      const int32_t first = n.op == Op::drop_rows ? std::min<int32_t>(n.first_row, rows)
                            : all_logits          ? 0
                                                  : rows - 1;
      for (int32_t t = first; t < rows; ++t) {
        std::memcpy(out + (t - first) * ldo, a + t * lda, (size_t)w * sizeof(float));
      }
      rows -= first;
      break;
    }
    case Op::input:
      for (int32_t t = 0; t < rows; ++t) {
        std::memcpy(out + t * ldo, input_ + (size_t)t * (size_t)w, (size_t)w * sizeof(float));
      }
      break;
    case Op::add_table:
      if (rows > n.table_rows) {
        throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[executor] " + std::to_string(rows) +
                                                     " rows exceed the table of " +
                                                     std::to_string(n.table_rows));
      }
      for (int32_t t = 0; t < rows; ++t) plan_.ops->add(a + t * lda, n.table + t * w, out + t * ldo, w);
      break;
    case Op::self_attention:
      self_attention(n, rows);
      break;
    default:
      throw Error(LILIMS_ERR_INTERNAL, std::string("[executor] no case for ") + op_name(n.op));
  }
}

// Every query row sees every row of the block: the attention kernel's staged
// path with all rows staged (F32, no cache) and each query placed at the last
// position, so that nothing is masked.  Tasks are (query row, head).
void Executor::self_attention(const Node& n, int32_t rows) {
  const kernels::OpsTable& ops = *plan_.ops;
  const ModelShape& sh = graph_.shape();
  kernels::AttentionArgs args{};
  args.q_stride = ld(n.a);
  args.n_q = 1;
  args.pos0 = rows - 1;
  args.k = nullptr;
  args.v = nullptr;
  args.kv_type = quant::Type::F32;
  args.kv_stride_bytes = 0;
  args.n_head = sh.n_head;
  args.n_head_kv = sh.n_head;
  args.head_dim = sh.head_dim;
  args.scale = n.scale;
  args.window = 0;
  args.out_stride = ld(n.out);
  args.k_new = ptr(n.b);
  args.v_new = ptr(n.c);
  args.new_stride = ld(n.b);
  args.n_new_before = rows - 1;
  if (ld(n.b) != ld(n.c)) throw Error(LILIMS_ERR_INTERNAL, "[executor] self_attention: K and V strides differ");
  const float* q = ptr(n.a);
  float* out = ptr(n.out);
  float* scratch = attn_scratch_;
  const size_t per = plan_.attn_scratch_floats;
  pool_.parallel_for((int64_t)rows * sh.n_head, [&](int64_t task, int thread) {
    const int32_t t = (int32_t)(task / sh.n_head);
    const int h = (int)(task % sh.n_head);
    kernels::AttentionArgs la = args;
    la.q = q + (int64_t)t * args.q_stride;
    la.out = out + (int64_t)t * args.out_stride;
    ops.attention(la, h, h + 1, scratch + (size_t)thread * per);
  });
}


kernels::AttentionArgs Executor::attention_args(const Node& n, int32_t m) {
  const ModelShape& sh = graph_.shape();
  round_staged(n.layer, m);
  kernels::AttentionArgs args{};
  args.q = ptr(n.a);
  args.q_stride = ld(n.a);
  args.k = kv_->k(n.layer);
  args.v = kv_->v(n.layer);
  args.kv_type = kv_->type();
  args.kv_stride_bytes = (int64_t)kv_->head_bytes();
  args.kv_head_stride_bytes = (int64_t)kv_->head_stride();
  args.n_head = sh.n_head;
  args.n_head_kv = sh.n_head_kv;
  args.head_dim = sh.head_dim;
  args.scale = n.scale;
  args.window = n.window;
  args.out = ptr(n.out);
  args.out_stride = ld(n.out);
  args.k_new = kv_->staged_k(n.layer);
  args.v_new = kv_->staged_v(n.layer);
  args.new_stride = sh.kv_dim();
  return args;
}

void Executor::attention(const Node& n, int32_t m, int32_t pos0) {
  const kernels::OpsTable& ops = *plan_.ops;
  const ModelShape& sh = graph_.shape();
  kernels::AttentionArgs args = attention_args(n, m);
  args.n_q = m;
  args.pos0 = pos0;
  if (m == 1 || attention_per_token_) {
    for (int32_t t0 = 0; t0 < m; t0 += kAttnPartTokens) {
      attention_decode(args, t0, std::min<int32_t>(kAttnPartTokens, m - t0));
    }
    return;
  }
  // Tasks = (part of a kv group) x (block of query tokens): a task's heads
  // share one kv head, so the kernel reads and converts each K/V row once
  // for all of them.  Groups are split in two only when whole groups would
  // leave threads idle (e.g. 3 kv groups on 2 threads); later query blocks
  // see more keys, so they are handed out first.
  const int n_thr = pool_.size(), n_kv = sh.n_head_kv, group = sh.n_head / n_kv;
  const int parts = (n_thr > 1 && n_kv % n_thr != 0 && n_kv < 2 * n_thr && group > 1) ? 2 : 1;
  const int32_t qb = m <= 32 ? m : 32;
  const int64_t n_qb = (m + qb - 1) / qb, n_units = (int64_t)n_kv * parts;
  float* scratch = attn_scratch_;
  const size_t per = plan_.attn_scratch_floats;
  pool_.parallel_for(n_units * n_qb, [&](int64_t task, int thread) {
    const int64_t blk = n_qb - 1 - task / n_units, u = task % n_units;
    const int g = (int)(u / parts), part = (int)(u % parts);
    const int h0 = g * group + part * group / parts, h1 = g * group + (part + 1) * group / parts;
    kernels::AttentionArgs la = args;
    const int32_t t0 = (int32_t)blk * qb;
    la.n_q = std::min(qb, m - t0);
    la.pos0 = pos0 + t0;
    la.q = args.q + (int64_t)t0 * args.q_stride;
    la.out = args.out + (int64_t)t0 * args.out_stride;
    la.n_new_before = t0;  // the block's earlier staged rows stay visible
    ops.attention(la, h0, h1, scratch + (size_t)thread * per);
  });
}

}  // namespace lilims::graph

namespace lilims::graph {

// Query tokens [t0, t0 + nt) one at a time (n_q = 1, the decode path):
// tasks are (token, kv group, run of consecutive key ranges).  A token's
// visible keys are cut by kernels::attention_splits, which looks at nothing
// but their count, and the ranges are combined in order after the barrier:
// a token's sums are the same whichever thread ran which range, however many
// threads there are, and whether it came alone (decode) or in a block
// (forward_as_decode).  The runs are what the thread count chooses: about
// two tasks per thread, each reading one long stretch of a head's cache
// rows rather than many short ones, in one kernel call that streams its
// ranges (AttentionArgs::n_ranges).
void Executor::attention_decode(const kernels::AttentionArgs& args, int32_t t0, int32_t nt) {
  attention_rows(nt, [&](int32_t i) {
    const int32_t t = t0 + i;
    kernels::AttentionArgs la = args;
    la.n_q = 1;
    la.pos0 = args.pos0 + t;
    la.q = args.q + (int64_t)t * args.q_stride;
    la.out = args.out + (int64_t)t * args.out_stride;
    la.n_new_before = t;  // the block's earlier staged rows stay visible
    return la;
  });
}

template <class RowArgs>
void Executor::attention_rows(int32_t nt, const RowArgs& row_args) {
  const kernels::OpsTable& ops = *plan_.ops;
  const ModelShape& sh = graph_.shape();
  const int n_kv = sh.n_head_kv, group = sh.n_head / n_kv, d = sh.head_dim;
  const int want_runs = std::max(1, (2 * pool_.size() + n_kv - 1) / n_kv);
  kernels::AttentionArgs row[kAttnPartTokens];
  int64_t lo[kAttnPartTokens], hi[kAttnPartTokens];
  int splits[kAttnPartTokens], runs[kAttnPartTokens], first_task[kAttnPartTokens + 1];
  first_task[0] = 0;
  for (int32_t i = 0; i < nt; ++i) {
    row[i] = row_args(i);
    hi[i] = row[i].pos0;
    lo[i] = kernels::attention_first_key(hi[i], row[i].window);
    splits[i] = kernels::attention_splits(hi[i] - lo[i] + 1);
    runs[i] = std::min(splits[i], want_runs);
    first_task[i + 1] = first_task[i] + n_kv * runs[i];
  }
  // Partial sums of token i, split s, head h: outputs at part(i, s) + h * d,
  // lse at lse(i, s) + h.
  const int64_t per_split = (int64_t)sh.n_head * d;
  float* part = attn_part_;
  float* lse = attn_part_ + (int64_t)kAttnPartTokens * kernels::kAttnMaxSplits * per_split;
  auto part_at = [&](int32_t i, int s) {
    return part + ((int64_t)i * kernels::kAttnMaxSplits + s) * per_split;
  };
  auto lse_at = [&](int32_t i, int s) {
    return lse + ((int64_t)i * kernels::kAttnMaxSplits + s) * sh.n_head;
  };
  float* scratch = attn_scratch_;
  const size_t per = plan_.attn_scratch_floats;
  pool_.parallel_for(first_task[nt], [&](int64_t task, int thread) {
    int32_t i = 0;
    while (task >= first_task[i + 1]) ++i;
    const int u = (int)(task - first_task[i]);
    const int g = u / runs[i], r = u % runs[i];
    kernels::AttentionArgs la = row[i];
    if (splits[i] == 1) {
      ops.attention(la, g * group, (g + 1) * group, scratch + (size_t)thread * per);
      return;
    }
    // The run's ranges in one call, each with its own partial sums.
    const int s0 = r * splits[i] / runs[i], s1 = (r + 1) * splits[i] / runs[i];
    int64_t bounds[kernels::kAttnMaxSplits + 1];
    kernels::attention_split_bounds(lo[i], hi[i], s0, s1, splits[i], bounds);
    la.n_ranges = s1 - s0;
    la.key_bounds = bounds;
    la.key_lo = bounds[0];
    la.key_hi = bounds[s1 - s0] - 1;
    la.out = part_at(i, s0);
    la.lse = lse_at(i, s0);
    la.range_out_stride = per_split;
    la.range_lse_stride = sh.n_head;
    ops.attention(la, g * group, (g + 1) * group, scratch + (size_t)thread * per);
  });
  for (int32_t i = 0; i < nt; ++i) {
    if (splits[i] == 1) continue;
    float* out = row[i].out;
    for (int h = 0; h < sh.n_head; ++h) {
      kernels::attention_combine(part_at(i, 0) + (int64_t)h * d, per_split, lse_at(i, 0) + h,
                                 sh.n_head, splits[i], d, out + (int64_t)h * d);
    }
  }
}

void Executor::attention_batch(const Node& n, int32_t m) {
  kernels::AttentionArgs args = attention_args(n, m);
  args.n_q = 1;
  const float* q = args.q;
  float* out = args.out;
  const float* k_new = args.k_new;
  const float* v_new = args.v_new;
  // The run of each row, found once per layer.
  int run_of[kAttnPartTokens];
  for (int32_t t0 = 0; t0 < m; t0 += kAttnPartTokens) {
    const int32_t nt = std::min<int32_t>(kAttnPartTokens, m - t0);
    for (int32_t i = 0, r = 0; i < nt; ++i) {
      while (t0 + i >= batch_runs_[r].row0 + batch_runs_[r].n) ++r;
      run_of[i] = r;
    }
    attention_rows(nt, [&](int32_t i) {
      const int32_t t = t0 + i;
      const BatchRun& br = batch_runs_[run_of[i]];
      const int32_t j = t - br.row0;  // the row's place in its sequence's block
      kernels::AttentionArgs la = args;
      la.pos0 = br.pos0 + j;
      la.n_new_before = j;
      la.q = q + (int64_t)t * args.q_stride;
      la.out = out + (int64_t)t * args.out_stride;
      la.k = br.kv->k(n.layer);
      la.v = br.kv->v(n.layer);
      la.k_new = k_new + (int64_t)br.row0 * args.new_stride;
      la.v_new = v_new + (int64_t)br.row0 * args.new_stride;
      return la;
    });
  }
}

std::unique_ptr<KvCache> Executor::make_sequence_cache() const {
  if (!kv_) throw Error(LILIMS_ERR_INTERNAL, "[executor] an encoder graph has no KV cache");
  KvCacheConfig cfg = plan_.kv;
  cfg.commit = KvCommit::sync;
  cfg.n_batch = 1;  // its staging is unused: forward_batch stages in this executor's cache
  return std::make_unique<KvCache>(cfg);
}

void Executor::forward_batch(const int32_t* tokens, const BatchRun* runs, int n_runs, float* logits) {
  if (!kv_) throw Error(LILIMS_ERR_INTERNAL, "[executor] forward_batch() on an encoder graph");
  int32_t m = 0;
  for (int r = 0; r < n_runs; ++r) {
    const BatchRun& br = runs[r];
    if (!br.kv || br.row0 != m || br.n <= 0) {
      throw Error(LILIMS_ERR_INTERNAL, "[executor] forward_batch: runs must cover the rows in order");
    }
    if (br.pos0 < 0 || (int64_t)br.pos0 + br.n > n_ctx()) {
      throw Error(LILIMS_ERR_CONTEXT_FULL, "[executor] positions " + std::to_string(br.pos0) + ".." +
                                               std::to_string(br.pos0 + br.n - 1) +
                                               " do not fit a context of " + std::to_string(n_ctx()));
    }
    m += br.n;
  }
  if (m == 0) return;
  if (m > plan_.opt.n_batch) {
    throw Error(LILIMS_ERR_INTERNAL, "[executor] forward_batch: " + std::to_string(m) +
                                         " rows exceed the block of " + std::to_string(plan_.opt.n_batch));
  }
  row_pos_.resize((size_t)plan_.opt.n_batch);
  for (int r = 0; r < n_runs; ++r) {
    for (int32_t j = 0; j < runs[r].n; ++j) row_pos_[(size_t)(runs[r].row0 + j)] = runs[r].pos0 + j;
  }
  struct Reset {
    Executor& e;
    ~Reset() {
      e.batch_runs_ = nullptr;
      e.batch_n_runs_ = 0;
    }
  } reset{*this};
  batch_runs_ = runs;
  batch_n_runs_ = n_runs;
  embd_block_ = nullptr;
  block(tokens, m, 0, logits, false);
}

}  // namespace lilims::graph
