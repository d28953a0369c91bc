// Gemma 3 (text): embeddings scaled by sqrt(n_embd); RMSNorm before and
// after both the attention and the MLP; per-head RMSNorm of Q and K; a GeGLU
// MLP (tanh GELU); local layers attend over a sliding window with their own
// RoPE base, global ones over everything with the file's base, in the
// pattern llama.cpp derives (every 6th layer global unless the file says
// otherwise); scores scaled by 1 / sqrt(key_length).  The converter stores
// the norms' weights as 1 + w, so they are plain RMSNorms here.
#include <cmath>

#include "models/arch_support.h"

namespace lilims::models {
namespace {

void read(Reader& r, HParams& hp) {
  const gguf::File& f = r.file();
  hp.sliding_window = r.int_or("attention.sliding_window", 0, hp.n_ctx_train, 0);
  if (hp.sliding_window > 0) {
    hp.swa_layers.assign((size_t)hp.n_layer, 0);
    const gguf::Value* pat = f.find(r.key("attention.sliding_window_pattern"));
    if (pat && pat->type == gguf::ValueType::ARRAY) {
      // One flag per layer: true = sliding window.
      if (pat->size() != (size_t)hp.n_layer) {
        bad(LILIMS_ERR_BAD_FORMAT, r.key("attention.sliding_window_pattern") + " has " +
                                       std::to_string(pat->size()) + " entries for " +
                                       std::to_string(hp.n_layer) + " blocks");
      }
      for (int l = 0; l < hp.n_layer; ++l) {
        const gguf::Value v = pat->at((size_t)l);
        if (!v.is_integer()) bad(LILIMS_ERR_BAD_FORMAT, r.key("attention.sliding_window_pattern") + " must hold booleans");
        hp.swa_layers[(size_t)l] = v.u != 0;
      }
    } else {
      // Every n-th layer global: layer l is local when l % n < n - 1.
      const int n = r.int_or("attention.sliding_window_pattern", 0, hp.n_layer, 6);
      for (int l = 0; l < hp.n_layer; ++l) hp.swa_layers[(size_t)l] = n == 0 || l % n < n - 1;
    }
    hp.rope_freq_base_swa = r.positive_float_or("rope.freq_base_swa", 10000.0, 1e12);
  }
  hp.final_softcap = r.nonnegative_float_or("final_logit_softcapping", 0.0, 1e6);
  hp.attn_scale = 1.0f / std::sqrt((float)hp.head_dim);
  hp.embd_scale = std::sqrt((float)hp.n_embd);
}

void load(Reader& r, Model& m) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd;
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.rms_norm(p + "attn_norm", d);
    read_qkv(r, m, L, p, false);
    L.attn_q_norm = r.rms_norm(p + "attn_q_norm", hp.head_dim);
    L.attn_k_norm = r.rms_norm(p + "attn_k_norm", hp.head_dim);
    L.wo = r.weight(p + "attn_output.weight", d, hp.q_dim());
    L.post_attn_norm = r.rms_norm(p + "post_attention_norm", d);
    L.ffn_norm = r.rms_norm(p + "ffn_norm", d);
    read_gated_ffn(r, m, L, p);
    L.post_ffn_norm = r.rms_norm(p + "post_ffw_norm", d);
  }
}

void layer(LayerGraph& lg, int l) {
  graph::Graph& g = lg.g;
  const Layer& L = lg.m.layers[(size_t)l];
  const float eps = lg.m.hp.norm_eps;
  const int x = lg.s.x;
  const int a = attention(lg, l, g.rms_norm(x, L.attn_norm.w, eps, at("attn_norm", l)));
  g.add(x, g.rms_norm(a, L.post_attn_norm.w, eps, at("attn_post_norm", l)), x);
  const int f = geglu_mlp(lg, l, g.rms_norm(x, L.ffn_norm.w, eps, at("ffn_norm", l)));
  g.add(x, g.rms_norm(f, L.post_ffn_norm.w, eps, at("ffn_post_norm", l)), x);
}

}  // namespace

extern const ArchDesc kArchGemma3 = {
    Arch::gemma3, "gemma3", {"Gemma3ForCausalLM"}, /*rope_neox=*/true, /*layer_norm=*/false, read, load, layer,
    "gemma",
};

}  // namespace lilims::models
