#include "graph/plan.h"

#include <algorithm>
#include <cstdio>

#include "base/error.h"

namespace lilims::graph {
namespace {

constexpr uint64_t kAlign = 64;

uint64_t align_up(uint64_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

uint64_t sat_add(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

std::string mib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", (double)b / (1024.0 * 1024.0));
  return buf;
}

// Offsets of the arena tensors: each (rows x cols floats) lives from the
// node that first writes it to the node that last reads it, a run of
// row-wise nodes counting as one node (the executor runs it row by row
// across tasks: graph::row_wise); tensors whose lives overlap get disjoint
// bytes.  Largest first, each at the lowest
// offset that fits (the usual greedy; optimal is NP-hard).
uint64_t assign_offsets(const Graph& g, int32_t n_batch, std::vector<int64_t>& offset) {
  const auto& ts = g.tensors();
  const auto& nodes = g.nodes();
  // step[i]: the first node of the row-wise run node i is in (itself otherwise).
  std::vector<int> step(nodes.size());
  for (const Chunk& ch : g.chunks()) {
    for (int i = ch.node_begin; i < ch.node_end; ++i) {
      const bool joins = i > ch.node_begin && row_wise(nodes[(size_t)i].op) && row_wise(nodes[(size_t)i - 1].op);
      step[(size_t)i] = joins ? step[(size_t)i - 1] : i;
    }
  }
  std::vector<int> first(ts.size(), -1), last(ts.size(), -1);
  for (int i = 0; i < (int)nodes.size(); ++i) {
    const Node& n = nodes[(size_t)i];
    for (int t : {n.out, n.a, n.b, n.c}) {
      if (t < 0) continue;
      const int r = g.root(t);
      if (first[(size_t)r] < 0) first[(size_t)r] = step[(size_t)i];
      last[(size_t)r] = i;
    }
  }
  std::vector<int> order;
  for (int t = 0; t < (int)ts.size(); ++t) {
    if (ts[(size_t)t].view_of < 0 && ts[(size_t)t].storage == Storage::arena && first[(size_t)t] >= 0) {
      order.push_back(t);
    }
  }
  auto bytes = [&](int t) { return align_up((uint64_t)n_batch * (uint64_t)ts[(size_t)t].cols * sizeof(float)); };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return bytes(a) > bytes(b); });
  offset.assign(ts.size(), -1);
  std::vector<int> placed;
  uint64_t top = 0;
  for (int t : order) {
    std::vector<std::pair<uint64_t, uint64_t>> busy;  // [begin, end) of overlapping lives
    for (int p : placed) {
      if (first[(size_t)p] <= last[(size_t)t] && first[(size_t)t] <= last[(size_t)p]) {
        busy.emplace_back((uint64_t)offset[(size_t)p], (uint64_t)offset[(size_t)p] + bytes(p));
      }
    }
    std::sort(busy.begin(), busy.end());
    uint64_t at = 0;
    for (const auto& b : busy) {
      if (at + bytes(t) <= b.first) break;
      at = std::max(at, b.second);
    }
    offset[(size_t)t] = (int64_t)at;
    top = std::max(top, at + bytes(t));
    placed.push_back(t);
  }
  for (int t = 0; t < (int)ts.size(); ++t) {
    const int r = g.root(t);
    if (t != r && offset[(size_t)r] >= 0) offset[(size_t)t] = offset[(size_t)r];
  }
  return top;
}

}  // namespace

const char* exec_mode_name(ExecMode m) {
  switch (m) {
    case ExecMode::fast: return "fast";
    case ExecMode::ref: return "ref";
    case ExecMode::oracle_f32: return "oracle";
  }
  return "?";
}

uint64_t MemoryPlan::session() const {
  uint64_t s = 0;
  for (uint64_t b : {arena, matmul_act, attn_scratch, staging, round_tmp, kv, logits}) s = sat_add(s, b);
  return s;
}

uint64_t MemoryPlan::total() const {
  uint64_t t = session();
  for (uint64_t b : {weights_mapped, weights_heap, embed_rows, file_header, model_host}) {
    t = sat_add(t, b);
  }
  return t;
}

Plan make_plan(const Graph& g, const PlanOptions& options, const ModelMemory& model) {
  g.validate();
  const ModelShape& sh = g.shape();
  Plan p;
  p.opt = options;
  PlanOptions& o = p.opt;
  if (o.n_ctx <= 0 || o.n_batch <= 0) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[plan] n_ctx and n_batch must be positive");
  }
  o.n_batch = std::min(o.n_batch, o.n_ctx);
  o.n_threads = std::max(1, o.n_threads);
  if (o.mode == ExecMode::oracle_f32) o.kv_type = quant::Type::F32;
  const quant::TypeTraits& kv = quant::traits(o.kv_type);
  if (!kv.kv || kv.type != o.kv_type) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[plan] the KV cache type must be one of " + quant::kv_type_names());
  }
  if (sh.n_layer > 0 && sh.head_dim % kv.block_size != 0) {
    throw Error(LILIMS_ERR_UNSUPPORTED, std::string("[plan] a ") + kv.name +
                                            " KV cache needs a head dimension that is a multiple of " +
                                            std::to_string(kv.block_size) + ", not " + std::to_string(sh.head_dim));
  }
  const bool fast = o.mode == ExecMode::fast;
  p.ops = fast ? &kernels::ops() : &kernels::ops_table(kernels::Isa::ref);
  const kernels::Isa isa = fast ? kernels::active_isa() : kernels::Isa::ref;

  p.mem.arena = assign_offsets(g, o.n_batch, p.offset);
  p.mm.resize(g.nodes().size());
  for (size_t i = 0; i < g.nodes().size(); ++i) {
    const Node& n = g.nodes()[i];
    if (n.op != Op::matmul) continue;
    p.mm[i] = matmul_step(isa, o.mode == ExecMode::oracle_f32, *n.w, o.n_batch, o.n_threads);
    p.mem.matmul_act = std::max<uint64_t>(p.mem.matmul_act, align_up(p.mm[i].act_stride * (uint64_t)o.n_batch));
  }

  p.block_chunk.assign(g.chunks().size(), -1);
  if (sh.n_layer > 0) {
    kernels::AttentionArgs probe{};
    probe.n_q = o.n_batch;
    probe.pos0 = o.n_ctx - o.n_batch;
    probe.kv_type = o.kv_type;
    probe.n_head = sh.n_head;
    probe.n_head_kv = sh.n_head_kv;
    probe.head_dim = sh.head_dim;
    p.attn_scratch_floats = kernels::attention_scratch_floats(probe);
    p.attn_part_floats = (size_t)kAttnPartTokens * kernels::kAttnMaxSplits * (size_t)sh.n_head *
                         (size_t)(sh.head_dim + 1);
    p.attn_part_floats = (p.attn_part_floats + 15) / 16 * 16;

    p.kv.n_layer = sh.n_layer;
    p.kv.n_ctx = o.n_ctx;
    p.kv.n_batch = o.n_batch;
    p.kv.kv_dim = sh.kv_dim();
    p.kv.n_heads = sh.n_head_kv;
    p.kv.type = o.kv_type;
    p.kv.commit = o.kv_commit;
    p.kv.ops = p.ops;
    for (size_t c = 0; c < g.chunks().size(); ++c) {
      const Chunk& ch = g.chunks()[c];
      if (ch.kind != ChunkKind::blocks) continue;
      p.block_chunk[c] = (int)p.kv.chunk_begin.size();
      p.kv.chunk_begin.push_back(ch.layer_begin);
    }
    p.kv.chunk_begin.push_back(sh.n_layer);
    p.mem.staging = KvCache::staging_bytes(p.kv);
    p.mem.round_tmp = align_up(quant::row_bytes(o.kv_type, sh.kv_dim()));
    p.mem.kv = KvStorage::bytes_for(sh.n_layer, o.n_ctx, quant::row_bytes(o.kv_type, sh.kv_dim()));
  }
  // Self-attention (encoders) runs one query row per call over the block's
  // rows, read as F32 staged rows (graph/executor.cpp).
  for (const Node& n : g.nodes()) {
    if (n.op != Op::self_attention) continue;
    kernels::AttentionArgs probe{};
    probe.n_q = 1;
    probe.pos0 = o.n_batch - 1;
    probe.kv_type = quant::Type::F32;
    probe.n_head = sh.n_head;
    probe.n_head_kv = sh.n_head;
    probe.head_dim = sh.head_dim;
    p.attn_scratch_floats = std::max(p.attn_scratch_floats, kernels::attention_scratch_floats(probe));
    break;
  }
  p.attn_scratch_floats = (p.attn_scratch_floats + 15) / 16 * 16;
  p.mem.attn_scratch =
      ((uint64_t)p.attn_scratch_floats * (uint64_t)o.n_threads + p.attn_part_floats) * sizeof(float);
  p.mem.logits = (uint64_t)sh.n_vocab * sizeof(float);
  p.mem.weights_mapped = model.weights_mapped;
  p.mem.weights_heap = model.weights_heap;
  p.mem.embed_rows = model.embed_rows;
  p.mem.file_header = model.file_header;
  p.mem.model_host = model.host;
  return p;
}

std::string Plan::describe(const Graph& g) const {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line,
                "plan: n_ctx %d, n_batch %d, %d thread(s), kernels %s (%s), KV cache %s, commit %s\n",
                opt.n_ctx, opt.n_batch, opt.n_threads, exec_mode_name(opt.mode), ops->name,
                quant::ggml_type_name((uint32_t)opt.kv_type), kv_commit_name(opt.kv_commit));
  s += line;
  s += "chunks:\n";
  for (size_t c = 0; c < g.chunks().size(); ++c) {
    const Chunk& ch = g.chunks()[c];
    std::string what = ch.kind == ChunkKind::embed ? "embed" : ch.kind == ChunkKind::head ? "head" : "blocks";
    if (ch.kind == ChunkKind::blocks) {
      what += " " + std::to_string(ch.layer_begin) + ".." + std::to_string(ch.layer_end - 1);
    }
    std::string ops_list;
    constexpr int kOps = kOpCount;
    int counts[kOps] = {0};
    for (int i = ch.node_begin; i < ch.node_end; ++i) ++counts[(int)g.nodes()[(size_t)i].op];
    for (int op = 0; op < kOps; ++op) {
      if (counts[op]) ops_list += " " + std::string(op_name((Op)op)) + " x" + std::to_string(counts[op]);
    }
    std::snprintf(line, sizeof line, "  %2zu %-14s %3d ops:", c, what.c_str(), ch.node_end - ch.node_begin);
    s += line + ops_list + "\n";
  }
  int n_arena = 0;
  for (size_t t = 0; t < g.tensors().size(); ++t) {
    n_arena += g.tensors()[t].view_of < 0 && offset[t] >= 0;
  }
  std::snprintf(line, sizeof line, "buffers: %d arena tensors in %s; %zu tensors, %zu nodes\n", n_arena,
                mib(mem.arena).c_str(), g.tensors().size(), g.nodes().size());
  s += line;
  auto row = [&](const char* name, uint64_t b) {
    std::snprintf(line, sizeof line, "  %-26s %14llu bytes  %s\n", name, (unsigned long long)b, mib(b).c_str());
    s += line;
  };
  s += "memory:\n";
  row("arena", mem.arena);
  row("matmul activations", mem.matmul_act);
  row("attention scratch", mem.attn_scratch);
  row("KV staging", mem.staging);
  row("KV cache (full context)", mem.kv);
  row("logits", mem.logits);
  row("session total", mem.session());
  row("weights mapped (file)", mem.weights_mapped);
  row("weights repacked (heap)", mem.weights_heap);
  row("embedding rows (mapped)", mem.embed_rows);
  row("file metadata (mapped)", mem.file_header);
  row("tokenizer, vocabulary", mem.model_host);
  row("peak total", mem.total());
  return s;
}

}  // namespace lilims::graph
