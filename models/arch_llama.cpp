// Llama (and the models laid out like it: SmolLM2, TinyLlama, Llama 3.x):
// x += attn(rmsnorm(x)); x += w_down(silu(w_gate h) * w_up h), h = rmsnorm(x).
#include "models/arch_support.h"

namespace lilims::models {
namespace {

void read(Reader&, HParams&) {}

void load(Reader& r, Model& m) {
  const HParams& hp = m.hp;
  for (int l = 0; l < hp.n_layer; ++l) {
    read_llama_block(r, m, m.layers[(size_t)l], "blk." + std::to_string(l) + ".", false);
  }
  // Llama 3's frequency scaling, as the converter stores it.
  if (r.has_tensor("rope_freqs.weight")) m.rope_factors_long = r.vector("rope_freqs.weight", hp.n_rot / 2);
}

}  // namespace

// llama and the families built like it: pre-norm attention and SwiGLU MLP.
void llama_layer(LayerGraph& lg, int l) {
  graph::Graph& g = lg.g;
  const Layer& L = lg.m.layers[(size_t)l];
  const float eps = lg.m.hp.norm_eps;
  const int x = lg.s.x;
  const int a = attention(lg, l, g.rms_norm(x, L.attn_norm.w, eps, at("attn_norm", l)));
  g.add(x, a, x);
  const int f = swiglu_mlp(lg, l, g.rms_norm(x, L.ffn_norm.w, eps, at("ffn_norm", l)));
  g.add(x, f, x);
}

extern const ArchDesc kArchLlama = {
    Arch::llama, "llama", {"LlamaForCausalLM"},
    /*rope_neox=*/false, /*layer_norm=*/false, read, load, llama_layer, "",
};

}  // namespace lilims::models
