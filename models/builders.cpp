#include "models/builders.h"

#include <cmath>
#include <string>

#include "base/error.h"

namespace lilims::models {
namespace {

using graph::ChunkKind;
using graph::Graph;
using graph::Storage;

graph::ModelShape shape_of(const Model& m, int32_t n_ctx) {
  const HParams& hp = m.hp;
  graph::ModelShape s;
  s.n_layer = hp.n_layer;
  s.n_head = hp.n_head;
  s.n_head_kv = hp.n_head_kv;
  s.head_dim = hp.head_dim;
  s.n_rot = hp.n_rot;
  s.rope_neox = hp.rope_neox;
  s.window = hp.sliding_window;
  s.attn_scale = 1.0f / std::sqrt((float)hp.head_dim);
  s.rope.n_rot = hp.n_rot;
  s.rope.freq_base = hp.rope_freq_base;
  s.rope.freq_factors = rope_factors(m, n_ctx);
  s.rope.attn_factor = hp.rope_attn_factor;
  s.n_vocab = hp.n_vocab;
  return s;
}

std::string at(const char* what, int l) { return std::string(what) + "." + std::to_string(l); }

// The lora nodes of w's matmul of `in` into `out` (when the options ask for
// them): one per file tensor, on its rows of the output.
void lora_nodes(Graph& g, const BuildOptions& opt, const Weight& w, int in, int out) {
  if (!opt.lora) return;
  if (w.parts.empty()) {
    g.lora(in, out, w.name);
    return;
  }
  int64_t row0 = 0;
  for (size_t p = 0; p < w.parts.size(); ++p) {
    g.lora(in, g.view(out, row0, w.part_rows[p], w.parts[p] + ".out"), w.parts[p]);
    row0 += w.part_rows[p];
  }
}

// A matmul of w and its lora nodes.
int projection(Graph& g, const BuildOptions& opt, const Weight& w, int in, const std::string& name) {
  const int out = g.matmul(w.packed, w.bias, in, name);
  lora_nodes(g, opt, w, in, out);
  return out;
}
void projection(Graph& g, const BuildOptions& opt, const Weight& w, int in, int out) {
  g.matmul(w.packed, w.bias, in, out);
  lora_nodes(g, opt, w, in, out);
}

// The tensors every layer reads: the residual stream and the RoPE tables.
struct Stream {
  int x, cos, sin;
};

// Attention of layer l over h: Q, K, V (one fused projection or three), RoPE
// on Q and K, the new K/V rows staged for the cache, attention, the output
// projection.  Returns the projection's output.
int attention(Graph& g, const BuildOptions& opt, const Model& m, const Stream& s, int l, int h) {
  const HParams& hp = m.hp;
  const Layer& L = m.layers[(size_t)l];
  const int k = g.staged(Storage::staged_k, l), v = g.staged(Storage::staged_v, l);
  int q;
  if (L.wqkv.present()) {  // rows [Q; K; V]
    const int qkv = projection(g, opt, L.wqkv, h, at("qkv", l));
    q = g.view(qkv, 0, hp.q_dim(), at("q", l));
    g.copy(g.view(qkv, hp.q_dim(), hp.kv_dim(), at("k", l)), k);
    g.copy(g.view(qkv, hp.q_dim() + hp.kv_dim(), hp.kv_dim(), at("v", l)), v);
  } else {
    q = projection(g, opt, L.wq, h, at("q", l));
    projection(g, opt, L.wk, h, k);
    projection(g, opt, L.wv, h, v);
  }
  g.rope(q, hp.n_head, s.cos, s.sin);
  g.rope(k, hp.n_head_kv, s.cos, s.sin);
  const int att = g.attention(q, l, at("att", l));
  return projection(g, opt, L.wo, att, at("att_out", l));
}

// w_down(silu(gate) * up), gate and up from two weights or one [gate; up].
int swiglu_mlp(Graph& g, const BuildOptions& opt, const Model& m, int l, int h) {
  const Layer& L = m.layers[(size_t)l];
  int gate, up;
  if (L.w_gate.present()) {
    gate = projection(g, opt, L.w_gate, h, at("gate", l));
    up = projection(g, opt, L.w_up, h, at("up", l));
  } else {
    const int64_t n_ff = m.hp.n_ff;
    const int gu = projection(g, opt, L.w_up, h, at("gate_up", l));
    gate = g.view(gu, 0, n_ff, at("gate", l));
    up = g.view(gu, n_ff, n_ff, at("up", l));
  }
  const int act = g.swiglu(gate, up, at("swiglu", l));
  return projection(g, opt, L.w_down, act, at("ffn_out", l));
}

// llama and phi3: x += attn(rmsnorm(x)); x += mlp(rmsnorm(x)).
void llama_layer(Graph& g, const BuildOptions& opt, const Model& m, const Stream& s, int l) {
  const Layer& L = m.layers[(size_t)l];
  const float eps = m.hp.norm_eps;
  const int a = attention(g, opt, m, s, l, g.rms_norm(s.x, L.attn_norm.w, eps, at("attn_norm", l)));
  g.add(s.x, a, s.x);
  const int f = swiglu_mlp(g, opt, m, l, g.rms_norm(s.x, L.ffn_norm.w, eps, at("ffn_norm", l)));
  g.add(s.x, f, s.x);
}

// phi2: one LayerNorm feeds attention and a GELU MLP in parallel:
// x += attn(h) + w_down(gelu(w_up h)), h = layernorm(x).
void phi2_layer(Graph& g, const BuildOptions& opt, const Model& m, const Stream& s, int l) {
  const Layer& L = m.layers[(size_t)l];
  const int h = g.layer_norm(s.x, L.attn_norm.w, L.attn_norm.b, m.hp.norm_eps, at("attn_norm", l));
  const int a = attention(g, opt, m, s, l, h);
  const int up = projection(g, opt, L.w_up, h, at("up", l));
  const int f = projection(g, opt, L.w_down, g.gelu(up, at("gelu", l)), at("ffn_out", l));
  g.add(s.x, a, s.x);
  g.add(s.x, f, s.x);
}

}  // namespace

const float* rope_factors(const Model& m, int32_t n_ctx) {
  if (m.hp.arch == Arch::phi3 && !m.rope_factors_long.empty()) {
    return n_ctx > m.hp.rope_orig_ctx ? m.rope_factors_long.data() : m.rope_factors_short.data();
  }
  return m.rope_factors_long.empty() ? nullptr : m.rope_factors_long.data();
}

Graph build_graph(const Model& m, const BuildOptions& opt) {
  if (opt.chunk_layers < 1) {
    throw Error(LILIMS_ERR_INVALID_ARGUMENT, "[graph] chunk_layers must be at least 1");
  }
  const HParams& hp = m.hp;
  Graph g(shape_of(m, opt.n_ctx));

  // chunk 0: the embedding and the RoPE tables of the block's positions
  g.begin_chunk(ChunkKind::embed);
  Stream s{g.tensor("x", hp.n_embd), g.tensor("rope_cos", hp.n_rot / 2), g.tensor("rope_sin", hp.n_rot / 2)};
  g.embed(embedding_table(m), s.x);
  if (opt.lora) g.lora_embedding(s.x, m.tok_embd.name, hp.n_vocab);
  g.rope_table(s.cos, s.sin);

  // chunks 1..N: chunk_layers transformer blocks each
  for (int l0 = 0; l0 < hp.n_layer; l0 += opt.chunk_layers) {
    const int l1 = std::min(hp.n_layer, l0 + opt.chunk_layers);
    g.begin_chunk(ChunkKind::blocks, l0, l1);
    for (int l = l0; l < l1; ++l) {
      if (hp.arch == Arch::phi2) {
        phi2_layer(g, opt, m, s, l);
      } else {
        llama_layer(g, opt, m, s, l);
      }
    }
  }

  // last chunk: the rows whose logits are wanted, final norm, LM head
  g.begin_chunk(ChunkKind::head);
  const int x = g.select_rows(s.x, "x_out");
  const int n = hp.arch == Arch::phi2
                    ? g.layer_norm(x, m.output_norm.w, m.output_norm.b, hp.norm_eps, "output_norm")
                    : g.rms_norm(x, m.output_norm.w, hp.norm_eps, "output_norm");
  projection(g, opt, m.output, n, g.logits());
  g.validate();
  return g;
}

}  // namespace lilims::models
