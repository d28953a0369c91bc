// The graph a model builder emits and the planner lays out: tensors that are
// (rows, cols) float activations of the block being run (rows = its tokens,
// at most the plan's batch size; cols fixed), and nodes, each one op over
// them.  The graph knows ops and tensors, not model names.
//
// Execution is split into chunks, as a Neural Engine model is: chunk 0
// embeds the tokens and builds the RoPE tables; each block chunk runs a few
// transformer layers, whose new K/V rows go to staging tensors and are
// committed into the cache after the chunk (graph/kv_cache.h); the head
// chunk selects the rows whose logits are wanted and runs the final norm and
// the LM head.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/ref/ops_ref.h"

namespace lilims::graph {

enum class Storage : uint8_t {
  arena,     // planned into the arena by liveness
  staged_k,  // the new K rows of `layer` (kv_dim cols), kept until committed
  staged_v,  // the new V rows of `layer`
  logits,    // the caller's logits buffer
};

struct Tensor {
  std::string name;
  int64_t cols = 0;
  Storage storage = Storage::arena;
  int layer = -1;        // staged_k / staged_v
  int view_of = -1;      // a view: cols [col0, col0 + cols) of tensor view_of
  int64_t col0 = 0;
};

enum class Op : uint8_t {
  embed,        // out[t] = row tokens[t] of w (dequantized)
  rope_table,   // out = cos, b = sin of each row's position: (rows, n_rot / 2), by the node's
                // rope parameters (a model may have several tables: Gemma 3's local and
                // global layers rotate with different bases)
  rms_norm,     // out = rmsnorm(a) * norm_w
  layer_norm,   // out = layernorm(a) * norm_w + norm_b
  matmul,       // out = a W^T (+ bias)
  rope,         // a rotated in place by the tables b (cos), c (sin)
  copy,         // out = a (e.g. K/V views of a fused projection into staging)
  attention,    // out = attention of queries a over layer's cache and its staged rows, scaled
                // by the node's scale, over its window of keys (0: all)
  swiglu,       // out = silu(a) * b
  gelu,         // out = gelu(a) (tanh form)
  add,          // out = a + b
  select_rows,  // out = the rows of a whose logits are wanted (all, or the last); every
                // later node runs on that many rows
  // Encoder graphs (no KV cache: ModelShape::n_layer == 0; Executor::encode):
  input,        // out = the caller's rows (encode's input)
  add_table,    // out = a + table: row t of a plus row t of a constant (rows, cols) table
  self_attention,  // out = attention of queries a over keys b and values c, every row
                   // seeing every row of the block (not causal)
  quick_gelu,   // out = a * sigmoid(1.702 a)
  gelu_erf,     // out = gelu(a) (erf form)
  drop_rows,    // out = a without its first `first_row` rows; every later node runs on
                // that many fewer rows
  lora,         // out += s * B (A a) for each adapter the executor holds for lora_slot (none:
                // nothing); out is the output (or a view of it) of the matmul of a; without
                // a (the token embedding's), A a is the row of A for each row's token
  head_norm,    // a = rmsnorm of each head_dim piece of a (in place) * norm_w (head_dim)
  geglu,        // out = gelu(a) * b (tanh form)
  scale,        // a *= scale (in place)
  softcap,      // a = scale * tanh(a / scale) (in place)
};
// The last op, for tables indexed by op.
constexpr int kOpCount = (int)Op::softcap + 1;
const char* op_name(Op op);
// Whether row t of the op's output depends on row t of its inputs alone.
// The executor runs consecutive row-wise nodes of a chunk as one job, each
// task taking all of them for its rows; the planner keeps every tensor such
// a run touches alive for the whole run (a task may write a row of one
// while another task still reads its rows of a tensor that dies in it).
bool row_wise(Op op);

struct Node {
  Op op = Op::embed;
  int out = -1, a = -1, b = -1, c = -1;
  const kernels::PackedWeight* w = nullptr;  // matmul, embed (GGUF or a repacked layout)
  const float* bias = nullptr;               // matmul: (w->rows) or null
  const float* norm_w = nullptr;             // norms: (cols)
  const float* norm_b = nullptr;             // layer_norm: (cols)
  float eps = 0.0f;
  int layer = -1;                            // attention
  int n_heads = 0;                           // rope, head_norm: heads in a's rows
  float scale = 0.0f;                        // attention, self_attention: the score scale;
                                             // scale: the factor; softcap: the cap
  int32_t window = 0;                        // attention: sliding window (0 = none)
  kernels::RopeParams rope;                  // rope_table
  const float* table = nullptr;              // add_table: (table_rows, cols)
  int64_t table_rows = 0;
  int first_row = 0;                         // drop_rows
  int lora_slot = -1;                        // lora: index into Graph::lora_targets()
};

// A weight that adapters may adapt: a lora node's base weight name (as the
// model file names it) and its (n_out, n_in) shape.
struct LoraTarget {
  std::string name;
  int64_t n_in = 0, n_out = 0;
};

enum class ChunkKind : uint8_t { embed, blocks, head };

struct Chunk {
  ChunkKind kind;
  int node_begin = 0, node_end = 0;  // nodes [begin, end)
  int layer_begin = 0, layer_end = 0;  // blocks: the layers it runs
};

// What the attention and RoPE nodes of the graph share (what differs from
// layer to layer, window, scale and RoPE base, the nodes carry).  An encoder
// graph (a vision tower) has n_layer = 0: no KV cache, its attention is
// self_attention within the block; n_head and head_dim describe that, and
// n_vocab is the width of its output rows.
struct ModelShape {
  int n_layer = 0;  // layers with a KV cache
  int n_head = 0, n_head_kv = 0, head_dim = 0;
  int n_rot = 0;
  bool rope_neox = false;
  int64_t n_vocab = 0;
  int64_t kv_dim() const { return (int64_t)n_head_kv * head_dim; }
};

class Graph {
 public:
  explicit Graph(const ModelShape& shape) : shape_(shape) {}

  // Tensors.
  int tensor(const std::string& name, int64_t cols);
  int view(int of, int64_t col0, int64_t cols, const std::string& name);
  int staged(Storage which, int layer);  // staged_k / staged_v of a layer
  int logits();                          // the caller's buffer (n_vocab cols)

  // Chunks: every node belongs to the chunk begun last.
  void begin_chunk(ChunkKind kind, int layer_begin = 0, int layer_end = 0);

  // Nodes; each returns its output tensor.
  void embed(const kernels::PackedWeight& table, int out);
  // p.freq_factors point into the model, which outlives the graph.
  void rope_table(int cos, int sin, const kernels::RopeParams& p);
  int rms_norm(int a, const std::vector<float>& w, float eps, const std::string& name);
  int layer_norm(int a, const std::vector<float>& w, const std::vector<float>& b, float eps,
                 const std::string& name);
  void matmul(const kernels::PackedWeight& w, const std::vector<float>& bias, int a, int out);
  int matmul(const kernels::PackedWeight& w, const std::vector<float>& bias, int a,
             const std::string& name);
  void rope(int a, int n_heads, int cos, int sin);
  void copy(int a, int out);
  // Scores scaled by `scale`; a query at position p sees keys p - window < k
  // <= p (window 0: every earlier key).
  int attention(int q, int layer, float scale, int32_t window, const std::string& name);
  int swiglu(int gate, int up, const std::string& name);
  int gelu(int a, const std::string& name);
  int geglu(int gate, int up, const std::string& name);
  void add(int a, int b, int out);
  // In place: RMSNorm of each of a's n_heads heads (w: head_dim), a *= s,
  // a = cap tanh(a / cap).
  void head_norm(int a, int n_heads, const std::vector<float>& w, float eps);
  void scale(int a, float s);
  void softcap(int a, float cap);
  int select_rows(int a, const std::string& name);
  // Encoder graphs.
  int input(int64_t cols, const std::string& name);
  // table: (table_rows, cols(a)) floats, at least as many rows as the block.
  int add_table(int a, const std::vector<float>& table, const std::string& name);
  int self_attention(int q, int k, int v, float scale, const std::string& name);
  int quick_gelu(int a, const std::string& name);
  int gelu_erf(int a, const std::string& name);
  int drop_rows(int a, int first_row, const std::string& name);
  // Adapters of the weight `name` (n_out = cols(out) rows, n_in = cols(a)
  // columns) add their term to out, the output of that weight's matmul of a.
  void lora(int a, int out, const std::string& name);
  // The same for the embedding table `name` of n_rows rows, whose lookup
  // wrote out: A a is then A's row for each row's token.
  void lora_embedding(int out, const std::string& name, int64_t n_rows);

  const ModelShape& shape() const { return shape_; }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  const std::vector<LoraTarget>& lora_targets() const { return lora_targets_; }
  // The tensor whose storage a (view) tensor uses.
  int root(int t) const;
  // Throws lilims::Error unless the graph is complete and consistent: every
  // node in a chunk, inputs defined before use, widths that agree, chunks in
  // the order embed, blocks..., head, each layer's staged rows written once
  // in its own chunk; an encoder graph stages nothing and has no KV attention.
  void validate() const;

 private:
  Node& push(Op op, int out, int a = -1, int b = -1, int c = -1);
  int64_t cols(int t) const { return tensors_[(size_t)t].cols; }

  ModelShape shape_;
  std::vector<Tensor> tensors_;
  std::vector<Node> nodes_;
  std::vector<Chunk> chunks_;
  std::vector<LoraTarget> lora_targets_;
};

}  // namespace lilims::graph
