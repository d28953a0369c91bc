// Qwen2 / Qwen2.5 (llama's block with Q, K and V biases) and Qwen3 (llama's
// block with per-head RMSNorm of Q and K, a head size of its own from
// key_length, no biases); NeoX-style RoPE.
#include "models/arch_support.h"

namespace lilims::models {

void llama_layer(LayerGraph& lg, int l);  // models/arch_llama.cpp

namespace {

void read(Reader&, HParams&) {}

// Qwen3's per-head RMSNorm of Q and K.
void read_qk_norm(Reader& r, Model& m, Layer& L, const std::string& p) {
  L.attn_q_norm = r.rms_norm(p + "attn_q_norm", m.hp.head_dim);
  L.attn_k_norm = r.rms_norm(p + "attn_k_norm", m.hp.head_dim);
}

// Qwen2 has biases on Q, K and V; Qwen3 none, but Q/K norms.
void load_qwen2(Reader& r, Model& m) {
  for (int l = 0; l < m.hp.n_layer; ++l) {
    read_llama_block(r, m, m.layers[(size_t)l], "blk." + std::to_string(l) + ".", true);
  }
}

void load_qwen3(Reader& r, Model& m) {
  for (int l = 0; l < m.hp.n_layer; ++l) {
    read_llama_block(r, m, m.layers[(size_t)l], "blk." + std::to_string(l) + ".", false, read_qk_norm);
  }
}

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
