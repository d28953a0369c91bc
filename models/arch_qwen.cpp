// Qwen2 / Qwen2.5 (llama's block with Q, K and V biases) and Qwen3 (llama's
// block with per-head RMSNorm of Q and K, a head size of its own from
// key_length, no biases); NeoX-style RoPE.
#include "models/arch_support.h"

namespace lilims::models {

void llama_layer(LayerGraph& lg, int l);  // models/arch_llama.cpp

namespace {

void read(Reader&, HParams&) {}

void load(Reader& r, Model& m, bool qk_norm) {
  const HParams& hp = m.hp;
  const int64_t d = hp.n_embd;
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.rms_norm(p + "attn_norm", d);
    // Qwen2 has biases on Q, K and V; Qwen3 none.
    read_qkv(r, m, L, p, !qk_norm);
    if (qk_norm) {
      L.attn_q_norm = r.rms_norm(p + "attn_q_norm", hp.head_dim);
      L.attn_k_norm = r.rms_norm(p + "attn_k_norm", hp.head_dim);
    }
    L.wo = r.weight(p + "attn_output.weight", d, hp.q_dim());
    L.ffn_norm = r.rms_norm(p + "ffn_norm", d);
    read_gated_ffn(r, m, L, p);
  }
}

void load_qwen2(Reader& r, Model& m) { load(r, m, false); }
void load_qwen3(Reader& r, Model& m) { load(r, m, true); }

}  // namespace

extern const ArchDesc kArchQwen2 = {
    Arch::qwen2, "qwen2", {"Qwen2ForCausalLM"}, /*rope_neox=*/true, /*layer_norm=*/false, read, load_qwen2,
    llama_layer, "qwen2",
};

extern const ArchDesc kArchQwen3 = {
    Arch::qwen3, "qwen3", {"Qwen3ForCausalLM"}, /*rope_neox=*/true, /*layer_norm=*/false, read, load_qwen3,
    llama_layer, "qwen3",
};

}  // namespace lilims::models
