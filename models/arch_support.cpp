#include "models/arch_support.h"

#include <cmath>

namespace lilims::models {

std::string at(const char* what, int l) { return std::string(what) + "." + std::to_string(l); }

namespace {

// The lora nodes of w's matmul of `in` into `out` (when the options ask for
// them): one per file tensor, on its rows of the output.
void lora_nodes(LayerGraph& lg, const Weight& w, int in, int out) {
  if (!lg.opt.lora) return;
  if (w.parts.empty()) {
    lg.g.lora(in, out, w.name);
    return;
  }
  int64_t row0 = 0;
  for (size_t p = 0; p < w.parts.size(); ++p) {
    lg.g.lora(in, lg.g.view(out, row0, w.part_rows[p], w.parts[p] + ".out"), w.parts[p]);
    row0 += w.part_rows[p];
  }
}

}  // namespace

int projection(LayerGraph& lg, const Weight& w, int in, const std::string& name) {
  const int out = lg.g.matmul(w.packed, w.bias, in, name);
  lora_nodes(lg, w, in, out);
  return out;
}

void projection(LayerGraph& lg, const Weight& w, int in, int out) {
  lg.g.matmul(w.packed, w.bias, in, out);
  lora_nodes(lg, w, in, out);
}

int attention(LayerGraph& lg, int l, int h) {
  graph::Graph& g = lg.g;
  const HParams& hp = lg.m.hp;
  const Layer& L = lg.m.layers[(size_t)l];
  const int k = g.staged(graph::Storage::staged_k, l), v = g.staged(graph::Storage::staged_v, l);
  int q;
  if (L.wqkv.present()) {  // rows [Q; K; V]
    const int qkv = projection(lg, L.wqkv, h, at("qkv", l));
    q = g.view(qkv, 0, hp.q_dim(), at("q", l));
    g.copy(g.view(qkv, hp.q_dim(), hp.kv_dim(), at("k", l)), k);
    g.copy(g.view(qkv, hp.q_dim() + hp.kv_dim(), hp.kv_dim(), at("v", l)), v);
  } else {
    q = projection(lg, L.wq, h, at("q", l));
    projection(lg, L.wk, h, k);
    projection(lg, L.wv, h, v);
  }
  if (L.attn_q_norm.present()) g.head_norm(q, hp.n_head, L.attn_q_norm.w, hp.norm_eps);
  if (L.attn_k_norm.present()) g.head_norm(k, hp.n_head_kv, L.attn_k_norm.w, hp.norm_eps);
  const bool swa = hp.is_swa(l);
  const bool own_tables = swa && lg.s.cos_swa >= 0;
  const int cos = own_tables ? lg.s.cos_swa : lg.s.cos, sin = own_tables ? lg.s.sin_swa : lg.s.sin;
  g.rope(q, hp.n_head, cos, sin);
  g.rope(k, hp.n_head_kv, cos, sin);
  const float scale = hp.attn_scale > 0.0f ? hp.attn_scale : 1.0f / std::sqrt((float)hp.head_dim);
  const int att = g.attention(q, l, scale, swa ? hp.sliding_window : 0, at("att", l));
  return projection(lg, L.wo, att, at("att_out", l));
}

namespace {

int gated_mlp(LayerGraph& lg, int l, int h, bool gelu) {
  graph::Graph& g = lg.g;
  const Layer& L = lg.m.layers[(size_t)l];
  int gate, up;
  if (L.w_gate.present()) {
    gate = projection(lg, L.w_gate, h, at("gate", l));
    up = projection(lg, L.w_up, h, at("up", l));
  } else {
    const int64_t n_ff = lg.m.hp.n_ff;
    const int gu = projection(lg, L.w_up, h, at("gate_up", l));
    gate = g.view(gu, 0, n_ff, at("gate", l));
    up = g.view(gu, n_ff, n_ff, at("up", l));
  }
  const int act = gelu ? g.geglu(gate, up, at("geglu", l)) : g.swiglu(gate, up, at("swiglu", l));
  return projection(lg, L.w_down, act, at("ffn_out", l));
}

}  // namespace

int swiglu_mlp(LayerGraph& lg, int l, int h) { return gated_mlp(lg, l, h, false); }
int geglu_mlp(LayerGraph& lg, int l, int h) { return gated_mlp(lg, l, h, true); }

void read_qkv(Reader& r, Model& m, Layer& L, const std::string& p, bool bias) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  if (bias) {
    L.wq = r.biased_source(p + "attn_q", q, d);
    L.wk = r.biased_source(p + "attn_k", kv, d);
    L.wv = r.biased_source(p + "attn_v", kv, d);
  } else {
    L.wq = r.source(p + "attn_q.weight", q, d);
    L.wk = r.source(p + "attn_k.weight", kv, d);
    L.wv = r.source(p + "attn_v.weight", kv, d);
  }
  m.n_fused += r.stack({&L.wq, &L.wk, &L.wv}, L.wqkv);
}

void read_gated_ffn(Reader& r, Model& m, Layer& L, const std::string& p) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd;
  L.w_gate = r.source(p + "ffn_gate.weight", hp.n_ff, d);
  L.w_up = r.source(p + "ffn_up.weight", hp.n_ff, d);
  Weight gate_up;
  if (r.stack({&L.w_gate, &L.w_up}, gate_up)) {
    L.w_up = std::move(gate_up);
    ++m.n_fused;
  }
  L.w_down = r.weight(p + "ffn_down.weight", d, hp.n_ff);
}

void read_llama_block(Reader& r, Model& m, Layer& L, const std::string& p, bool qkv_bias,
                      void (*between)(Reader&, Model&, Layer&, const std::string&)) {
  const int64_t d = m.hp.n_embd;
  L.attn_norm = r.rms_norm(p + "attn_norm", d);
  read_qkv(r, m, L, p, qkv_bias);
  if (between) between(r, m, L, p);
  L.wo = r.weight(p + "attn_output.weight", d, m.hp.q_dim());
  L.ffn_norm = r.rms_norm(p + "ffn_norm", d);
  read_gated_ffn(r, m, L, p);
}

}  // namespace lilims::models
