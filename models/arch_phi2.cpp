// Phi-2: one LayerNorm feeds attention and a GELU MLP in parallel:
// x += attn(h) + w_down(gelu(w_up h)), h = layernorm(x); biases everywhere.
#include "models/arch_support.h"

namespace lilims::models {
namespace {

void read(Reader& r, HParams& hp) {
  hp.norm_eps = r.positive_float_or("attention.layer_norm_epsilon", 1e-5, 1.0);
}

void load(Reader& r, Model& m) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.layer_norm(p + "attn_norm", d);
    // The converter writes a fused attn_qkv for the original checkpoints and
    // separate projections for HF-format ones.
    if (r.has_tensor(p + "attn_qkv.weight")) {
      L.wqkv = r.biased(p + "attn_qkv", q + 2 * kv, d);
    } else {
      read_qkv(r, m, L, p, true);
    }
    L.wo = r.biased(p + "attn_output", d, q);
    L.w_up = r.biased(p + "ffn_up", hp.n_ff, d);
    L.w_down = r.biased(p + "ffn_down", d, hp.n_ff);
  }
}

void layer(LayerGraph& lg, int l) {
  graph::Graph& g = lg.g;
  const Layer& L = lg.m.layers[(size_t)l];
  const int x = lg.s.x;
  const int h = g.layer_norm(x, L.attn_norm.w, L.attn_norm.b, lg.m.hp.norm_eps, at("attn_norm", l));
  const int a = attention(lg, l, h);
  const int up = projection(lg, L.w_up, h, at("up", l));
  const int f = projection(lg, L.w_down, g.gelu(up, at("gelu", l)), at("ffn_out", l));
  g.add(x, a, x);
  g.add(x, f, x);
}

}  // namespace

extern const ArchDesc kArchPhi2 = {
    Arch::phi2, "phi2", {"PhiForCausalLM"}, /*rope_neox=*/true, /*layer_norm=*/true, read, load, layer, "",
};

}  // namespace lilims::models
