#include "models/builders.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "models/arch.h"
#include "models/arch_support.h"

namespace lilims::models {
namespace {

using graph::ChunkKind;
using graph::Graph;

graph::ModelShape shape_of(const Model& m) {
  const HParams& hp = m.hp;
  graph::ModelShape s;
  s.n_layer = hp.n_layer;
  s.n_head = hp.n_head;
  s.n_head_kv = hp.n_head_kv;
  s.head_dim = hp.head_dim;
  s.n_rot = hp.n_rot;
  s.rope_neox = hp.rope_neox;
  s.n_vocab = hp.n_vocab;
  return s;
}

// The RoPE of the global (or only) layers, and of the sliding-window ones.
kernels::RopeParams rope_params(const Model& m, int32_t n_ctx, bool swa) {
  const HParams& hp = m.hp;
  kernels::RopeParams p;
  p.n_rot = hp.n_rot;
  p.freq_base = hp.rope_freq_base;
  p.freq_scale = hp.rope_freq_scale;
  p.freq_factors = rope_factors(m, n_ctx);
  p.attn_factor = hp.rope_attn_factor;
  if (swa && hp.rope_freq_base_swa > 0.0f) {  // Gemma 3's local layers: their own base, unscaled
    p.freq_base = hp.rope_freq_base_swa;
    p.freq_scale = 1.0f;
  }
  return p;
}

bool same_rope(const kernels::RopeParams& a, const kernels::RopeParams& b) {
  return a.n_rot == b.n_rot && a.freq_base == b.freq_base && a.freq_scale == b.freq_scale &&
         a.freq_factors == b.freq_factors && a.attn_factor == b.attn_factor;
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
  const ArchDesc& desc = arch_desc(hp.arch);
  Graph g(shape_of(m));
  LayerGraph lg{g, opt, m, {}};
  Stream& s = lg.s;

  // chunk 0: the embedding and the RoPE tables of the block's positions
  g.begin_chunk(ChunkKind::embed);
  s.x = g.tensor("x", hp.n_embd);
  g.embed(embedding_table(m), s.x);
  if (opt.lora) g.lora_embedding(s.x, m.tok_embd.name, hp.n_vocab);
  if (hp.embd_scale > 0.0f) g.scale(s.x, hp.embd_scale);
  s.cos = g.tensor("rope_cos", hp.n_rot / 2);
  s.sin = g.tensor("rope_sin", hp.n_rot / 2);
  const kernels::RopeParams global = rope_params(m, opt.n_ctx, false);
  g.rope_table(s.cos, s.sin, global);
  bool any_swa = false;
  for (int l = 0; l < hp.n_layer; ++l) any_swa = any_swa || hp.is_swa(l);
  const kernels::RopeParams local = rope_params(m, opt.n_ctx, true);
  if (any_swa && !same_rope(global, local)) {
    s.cos_swa = g.tensor("rope_cos_swa", hp.n_rot / 2);
    s.sin_swa = g.tensor("rope_sin_swa", hp.n_rot / 2);
    g.rope_table(s.cos_swa, s.sin_swa, local);
  }

  // chunks 1..N: chunk_layers transformer blocks each
  for (int l0 = 0; l0 < hp.n_layer; l0 += opt.chunk_layers) {
    const int l1 = std::min(hp.n_layer, l0 + opt.chunk_layers);
    g.begin_chunk(ChunkKind::blocks, l0, l1);
    for (int l = l0; l < l1; ++l) desc.build_layer(lg, l);
  }

  // last chunk: the rows whose logits are wanted, final norm, LM head
  g.begin_chunk(ChunkKind::head);
  const int x = g.select_rows(s.x, "x_out");
  const int n = desc.layer_norm
                    ? g.layer_norm(x, m.output_norm.w, m.output_norm.b, hp.norm_eps, "output_norm")
                    : g.rms_norm(x, m.output_norm.w, hp.norm_eps, "output_norm");
  const int logits = g.logits();
  projection(lg, m.output, n, logits);
  if (hp.final_softcap > 0.0f) g.softcap(logits, hp.final_softcap);
  g.validate();
  return g;
}

}  // namespace lilims::models
