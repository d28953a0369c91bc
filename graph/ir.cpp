#include "graph/ir.h"

#include "base/error.h"
#include "quant/repack.h"

namespace lilims::graph {
namespace {

[[noreturn]] void bad(const std::string& msg) { throw Error(LILIMS_ERR_INTERNAL, "[graph] " + msg); }

// Ops that update their input in place (out = a): it must be written before.
bool in_place(Op op) {
  return op == Op::rope || op == Op::lora || op == Op::head_norm || op == Op::scale || op == Op::softcap;
}

}  // namespace

const char* op_name(Op op) {
  switch (op) {
    case Op::embed: return "embed";
    case Op::rope_table: return "rope_table";
    case Op::rms_norm: return "rms_norm";
    case Op::layer_norm: return "layer_norm";
    case Op::matmul: return "matmul";
    case Op::rope: return "rope";
    case Op::copy: return "copy";
    case Op::attention: return "attention";
    case Op::swiglu: return "swiglu";
    case Op::gelu: return "gelu";
    case Op::add: return "add";
    case Op::select_rows: return "select_rows";
    case Op::input: return "input";
    case Op::add_table: return "add_table";
    case Op::self_attention: return "self_attention";
    case Op::quick_gelu: return "quick_gelu";
    case Op::gelu_erf: return "gelu_erf";
    case Op::drop_rows: return "drop_rows";
    case Op::lora: return "lora";
    case Op::head_norm: return "head_norm";
    case Op::geglu: return "geglu";
    case Op::scale: return "scale";
    case Op::softcap: return "softcap";
  }
  return "?";
}

bool row_wise(Op op) {
  switch (op) {
    case Op::rms_norm:
    case Op::layer_norm:
    case Op::rope:
    case Op::copy:
    case Op::swiglu:
    case Op::gelu:
    case Op::add:
    case Op::quick_gelu:
    case Op::gelu_erf:
    case Op::head_norm:
    case Op::geglu:
    case Op::scale:
    case Op::softcap:
      return true;
    default:
      return false;
  }
}

int Graph::tensor(const std::string& name, int64_t n_cols) {
  if (n_cols <= 0) bad("tensor " + name + " has no columns");
  tensors_.push_back(Tensor{name, n_cols, Storage::arena, -1, -1, 0});
  return (int)tensors_.size() - 1;
}

int Graph::view(int of, int64_t col0, int64_t n_cols, const std::string& name) {
  if (of < 0 || of >= (int)tensors_.size() || col0 < 0 || n_cols <= 0 || col0 + n_cols > cols(of)) {
    bad("view " + name + " is outside its tensor");
  }
  Tensor t{name, n_cols, tensors_[(size_t)of].storage, tensors_[(size_t)of].layer, of, col0};
  tensors_.push_back(t);
  return (int)tensors_.size() - 1;
}

int Graph::staged(Storage which, int layer) {
  if (which != Storage::staged_k && which != Storage::staged_v) bad("staged() takes staged_k or staged_v");
  const std::string name = std::string(which == Storage::staged_k ? "k" : "v") + "_new." +
                           std::to_string(layer);
  tensors_.push_back(Tensor{name, shape_.kv_dim(), which, layer, -1, 0});
  return (int)tensors_.size() - 1;
}

int Graph::logits() {
  tensors_.push_back(Tensor{"logits", shape_.n_vocab, Storage::logits, -1, -1, 0});
  return (int)tensors_.size() - 1;
}

int Graph::root(int t) const {
  while (tensors_[(size_t)t].view_of >= 0) t = tensors_[(size_t)t].view_of;
  return t;
}

void Graph::begin_chunk(ChunkKind kind, int layer_begin, int layer_end) {
  if (!chunks_.empty()) chunks_.back().node_end = (int)nodes_.size();
  chunks_.push_back(Chunk{kind, (int)nodes_.size(), (int)nodes_.size(), layer_begin, layer_end});
}

Node& Graph::push(Op op, int out, int a, int b, int c) {
  if (chunks_.empty()) bad(std::string(op_name(op)) + " node outside a chunk");
  Node n;
  n.op = op;
  n.out = out;
  n.a = a;
  n.b = b;
  n.c = c;
  nodes_.push_back(n);
  chunks_.back().node_end = (int)nodes_.size();
  return nodes_.back();
}

void Graph::embed(const kernels::PackedWeight& table, int out) {
  const bool layout_ok = table.layout == kernels::kLayoutGguf ||
                         (quant::repackable(table.type, table.layout) &&
                          table.cols % quant::traits(table.type).block_size == 0);
  if (!layout_ok || table.cols != cols(out)) bad("embed: table mismatch");
  push(Op::embed, out).w = &table;
}

void Graph::rope_table(int cos, int sin, const kernels::RopeParams& p) {
  if (p.n_rot != shape_.n_rot || cols(cos) != p.n_rot / 2 || cols(sin) != p.n_rot / 2) {
    bad("rope_table: widths");
  }
  push(Op::rope_table, cos, -1, sin).rope = p;
}

int Graph::rms_norm(int a, const std::vector<float>& w, float eps, const std::string& name) {
  const int out = tensor(name, cols(a));
  if ((int64_t)w.size() != cols(a)) bad("rms_norm " + name + ": weight size");
  Node& n = push(Op::rms_norm, out, a);
  n.norm_w = w.data();
  n.eps = eps;
  return out;
}

int Graph::layer_norm(int a, const std::vector<float>& w, const std::vector<float>& b, float eps,
                      const std::string& name) {
  const int out = tensor(name, cols(a));
  if ((int64_t)w.size() != cols(a) || (int64_t)b.size() != cols(a)) bad("layer_norm " + name + ": sizes");
  Node& n = push(Op::layer_norm, out, a);
  n.norm_w = w.data();
  n.norm_b = b.data();
  n.eps = eps;
  return out;
}

void Graph::matmul(const kernels::PackedWeight& w, const std::vector<float>& bias, int a, int out) {
  if (w.cols != cols(a) || w.rows != cols(out) || (!bias.empty() && (int64_t)bias.size() != w.rows)) {
    bad("matmul into " + tensors_[(size_t)out].name + ": shapes");
  }
  Node& n = push(Op::matmul, out, a);
  n.w = &w;
  n.bias = bias.empty() ? nullptr : bias.data();
}

int Graph::matmul(const kernels::PackedWeight& w, const std::vector<float>& bias, int a,
                  const std::string& name) {
  const int out = tensor(name, w.rows);
  matmul(w, bias, a, out);
  return out;
}

void Graph::rope(int a, int n_heads, int cos, int sin) {
  if ((int64_t)n_heads * shape_.head_dim != cols(a)) bad("rope: heads do not fill the rows");
  push(Op::rope, a, a, cos, sin).n_heads = n_heads;
}

void Graph::copy(int a, int out) {
  if (cols(a) != cols(out)) bad("copy: widths differ");
  push(Op::copy, out, a);
}

int Graph::attention(int q, int layer, float scale, int32_t window, const std::string& name) {
  if (cols(q) != (int64_t)shape_.n_head * shape_.head_dim) bad("attention: query width");
  if (!(scale > 0.0f) || window < 0) bad("attention " + name + ": scale or window");
  const int out = tensor(name, cols(q));
  Node& n = push(Op::attention, out, q);
  n.layer = layer;
  n.scale = scale;
  n.window = window;
  return out;
}

int Graph::swiglu(int gate, int up, const std::string& name) {
  if (cols(gate) != cols(up)) bad("swiglu: widths differ");
  const int out = tensor(name, cols(gate));
  push(Op::swiglu, out, gate, up);
  return out;
}

int Graph::gelu(int a, const std::string& name) {
  const int out = tensor(name, cols(a));
  push(Op::gelu, out, a);
  return out;
}

int Graph::geglu(int gate, int up, const std::string& name) {
  if (cols(gate) != cols(up)) bad("geglu: widths differ");
  const int out = tensor(name, cols(gate));
  push(Op::geglu, out, gate, up);
  return out;
}

void Graph::head_norm(int a, int n_heads, const std::vector<float>& w, float eps) {
  if (n_heads <= 0 || cols(a) % n_heads != 0 || (int64_t)w.size() != cols(a) / n_heads) {
    bad("head_norm on " + tensors_[(size_t)a].name + ": sizes");
  }
  Node& n = push(Op::head_norm, a, a);
  n.n_heads = n_heads;
  n.norm_w = w.data();
  n.eps = eps;
}

void Graph::scale(int a, float s) { push(Op::scale, a, a).scale = s; }

void Graph::softcap(int a, float cap) {
  if (!(cap > 0.0f)) bad("softcap: the cap must be positive");
  push(Op::softcap, a, a).scale = cap;
}

void Graph::add(int a, int b, int out) {
  if (cols(a) != cols(b) || cols(a) != cols(out)) bad("add: widths differ");
  push(Op::add, out, a, b);
}

int Graph::select_rows(int a, const std::string& name) {
  const int out = tensor(name, cols(a));
  push(Op::select_rows, out, a);
  return out;
}

int Graph::input(int64_t n_cols, const std::string& name) {
  const int out = tensor(name, n_cols);
  push(Op::input, out);
  return out;
}

int Graph::add_table(int a, const std::vector<float>& table, const std::string& name) {
  if (table.empty() || table.size() % (size_t)cols(a) != 0) bad("add_table " + name + ": table size");
  const int out = tensor(name, cols(a));
  Node& n = push(Op::add_table, out, a);
  n.table = table.data();
  n.table_rows = (int64_t)(table.size() / (size_t)cols(a));
  return out;
}

int Graph::self_attention(int q, int k, int v, float scale, const std::string& name) {
  const int64_t width = (int64_t)shape_.n_head * shape_.head_dim;
  if (width <= 0 || cols(q) != width || cols(k) != width || cols(v) != width) {
    bad("self_attention " + name + ": widths");
  }
  const int out = tensor(name, width);
  push(Op::self_attention, out, q, k, v).scale = scale;
  return out;
}

int Graph::quick_gelu(int a, const std::string& name) {
  const int out = tensor(name, cols(a));
  push(Op::quick_gelu, out, a);
  return out;
}

int Graph::gelu_erf(int a, const std::string& name) {
  const int out = tensor(name, cols(a));
  push(Op::gelu_erf, out, a);
  return out;
}

void Graph::lora(int a, int out, const std::string& name) {
  // b = out: the node reads the matmul's output it adds to.
  push(Op::lora, out, a, out).lora_slot = (int)lora_targets_.size();
  lora_targets_.push_back(LoraTarget{name, cols(a), cols(out)});
}

void Graph::lora_embedding(int out, const std::string& name, int64_t n_rows) {
  push(Op::lora, out, -1, out).lora_slot = (int)lora_targets_.size();
  lora_targets_.push_back(LoraTarget{name, n_rows, cols(out)});
}

int Graph::drop_rows(int a, int first_row, const std::string& name) {
  if (first_row < 0) bad("drop_rows " + name + ": negative count");
  const int out = tensor(name, cols(a));
  push(Op::drop_rows, out, a).first_row = first_row;
  return out;
}

void Graph::validate() const {
  if (chunks_.size() < 3 || chunks_.front().kind != ChunkKind::embed ||
      chunks_.back().kind != ChunkKind::head) {
    bad("chunks must be embed, blocks..., head");
  }
  const bool kv = shape_.n_layer > 0;
  std::vector<char> defined(tensors_.size(), 0);
  std::vector<int> staged_by(2 * (size_t)shape_.n_layer, -1);
  int next_layer = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk& ch = chunks_[c];
    if (c > 0 && c + 1 < chunks_.size()) {
      if (ch.kind != ChunkKind::blocks || ch.layer_begin != next_layer || ch.layer_end <= ch.layer_begin) {
        bad("block chunks must cover the layers in order");
      }
      next_layer = ch.layer_end;
    }
    for (int i = ch.node_begin; i < ch.node_end; ++i) {
      const Node& n = nodes_[(size_t)i];
      if (n.op == Op::rope_table) defined[(size_t)root(n.b)] = 1;  // its second output
      for (int in : {n.a, n.b, n.c}) {
        if (in < 0 || (n.op == Op::rope_table && in == n.b)) continue;
        if (!defined[(size_t)root(in)] && !(in_place(n.op) && in == n.out)) {
          bad(std::string(op_name(n.op)) + " reads " + tensors_[(size_t)in].name + " before it is written");
        }
      }
      if (in_place(n.op) && !defined[(size_t)root(n.out)]) {
        bad(std::string(op_name(n.op)) + " on " + tensors_[(size_t)n.out].name + " before it is written");
      }
      const Tensor& out = tensors_[(size_t)n.out];
      const bool staged = out.storage == Storage::staged_k || out.storage == Storage::staged_v;
      if (!kv && (staged || n.op == Op::attention)) {
        bad(std::string(op_name(n.op)) + " into " + out.name + " needs a KV cache, which an encoder has not");
      }
      if (staged) {
        if (ch.kind != ChunkKind::blocks || out.layer < ch.layer_begin || out.layer >= ch.layer_end) {
          bad(out.name + " is written outside its layer's chunk");
        }
        int& by = staged_by[2 * (size_t)out.layer + (out.storage == Storage::staged_v)];
        if (!in_place(n.op)) {
          if (by >= 0) bad(out.name + " is written twice");
          by = i;
        }
      }
      if (n.op == Op::attention) {
        if (n.layer < ch.layer_begin || n.layer >= ch.layer_end) bad("attention outside its layer's chunk");
        if (staged_by[2 * (size_t)n.layer] < 0 || staged_by[2 * (size_t)n.layer + 1] < 0) {
          bad("attention of layer " + std::to_string(n.layer) + " before its K/V rows are staged");
        }
      }
      defined[(size_t)root(n.out)] = 1;
    }
  }
  if (kv && next_layer != shape_.n_layer) bad("the block chunks do not cover every layer");
  for (int l = 0; l < shape_.n_layer; ++l) {
    if (staged_by[2 * (size_t)l] < 0 || staged_by[2 * (size_t)l + 1] < 0) {
      bad("layer " + std::to_string(l) + " stages no K/V rows");
    }
  }
}

}  // namespace lilims::graph
