// Phi-3 (and Phi-3.5, Phi-4-mini): llama's block with fused [Q; K; V] and
// [gate; up] weights, a sliding window over every layer (when the file gives
// one: 0 means none, as the converter writes for windowless models) and
// longrope factors.
#include "models/arch_support.h"

namespace lilims::models {

void llama_layer(LayerGraph& lg, int l);  // models/arch_llama.cpp

namespace {

void read(Reader& r, HParams& hp) {
  // The converter writes sliding_window = 0 for a model without one.
  hp.sliding_window = r.int_or("attention.sliding_window", 0, 1 << 24, 0);
  hp.rope_attn_factor = r.positive_float_or("rope.scaling.attn_factor", 1.0, 100.0);
}

void load(Reader& r, Model& m) {
  HParams& hp = m.hp;
  const int64_t d = hp.n_embd, q = hp.q_dim(), kv = hp.kv_dim();
  for (int l = 0; l < hp.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer& L = m.layers[(size_t)l];
    L.attn_norm = r.rms_norm(p + "attn_norm", d);
    L.wqkv = r.weight(p + "attn_qkv.weight", q + 2 * kv, d);
    L.wo = r.weight(p + "attn_output.weight", d, q);
    L.ffn_norm = r.rms_norm(p + "ffn_norm", d);
    L.w_up = r.weight(p + "ffn_up.weight", 2 * (int64_t)hp.n_ff, d);
    L.w_down = r.weight(p + "ffn_down.weight", d, hp.n_ff);
  }
  const bool has_long = r.has_tensor("rope_factors_long.weight");
  if (has_long != r.has_tensor("rope_factors_short.weight")) {
    bad(LILIMS_ERR_BAD_FORMAT, std::string("phi3 needs both rope_factors_long and rope_factors_short, or neither; ") +
                                   (has_long ? "rope_factors_short.weight" : "rope_factors_long.weight") + " is missing");
  }
  if (has_long) {
    m.rope_factors_long = r.vector("rope_factors_long.weight", hp.n_rot / 2);
    m.rope_factors_short = r.vector("rope_factors_short.weight", hp.n_rot / 2);
    hp.rope_orig_ctx = r.positive_int("rope.scaling.original_context_length", 1 << 24);
  }
}

}  // namespace

extern const ArchDesc kArchPhi3 = {
    Arch::phi3, "phi3", {"Phi3ForCausalLM"}, /*rope_neox=*/true, /*layer_norm=*/false, read, load, llama_layer, "",
};

}  // namespace lilims::models
