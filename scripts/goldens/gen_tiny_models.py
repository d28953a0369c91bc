#!/usr/bin/env python3
"""Tiny random-weight llama, Phi-2 and Phi-3 models, their GGUFs and golden logits.

Rerun (from the repo root; about a minute on the 2-core machine, most of it importing torch):

    pip install -r scripts/goldens/requirements-tiny-models.txt
    python3 scripts/goldens/gen_tiny_models.py            # writes tests/data/tiny/*.gguf, goldens.json
    python3 scripts/goldens/gen_tiny_models.py --verify   # checks the committed files, writes nothing

Pinned versions (requirements-tiny-models.txt): torch 2.15.0, transformers 5.23.0, gguf 0.19.0,
sentencepiece 0.2.3, numpy 2.4.6. The output is deterministic for these versions: the weights come
from seeded torch generators and the goldens are computed in float64.

What it does
- Builds LlamaForCausalLM, PhiForCausalLM (Phi-2) and Phi3ForCausalLM with tiny but complete
  shapes (hidden 64, 4 heads of 16, 2 layers, vocab 512 = the stories260K tok512 SentencePiece
  vocabulary) and seeded random weights. Every 2-D weight is rounded to float16 before anything is
  computed, so the F16 tensors in the GGUF are the model exactly; 1-D tensors (norms, biases, rope
  factors) are F32 values, also stored exactly. This is the layout llama.cpp's converter writes
  with --outtype f16 (2-D tensors F16, 1-D tensors F32).
- Exports each to GGUF with the tensor names and metadata keys llama.cpp's converter
  (convert_hf_to_gguf.py, conversion/{llama,phi}.py, gguf-py) writes for these architectures; see
  export_gguf() for every layout decision.
- Runs HF transformers, the independent implementation, in float64 on a fixed 100-token prompt and
  its prefixes of 1, 7, 20 and 40 tokens, and stores full-vocabulary logits at chosen positions in
  goldens.json, with the fp32 model's deviation from them (for deriving test tolerances).

float64 in transformers: model.double() alone is not enough. HF computes three things in float32
whatever the model dtype: RMSNorm (casts to float32), the RoPE angles (position * inv_freq in
float32) and the eager attention softmax (dtype=torch.float32). The golden run replaces those three
pieces with float64 versions (Fp64RmsNorm, Fp64Rope, attention_fp64 below); everything else (block
wiring, masks, GQA, biases, activations) is HF's own code. goldens.json records how far HF's
unpatched float64 run is from the patched one.

--verify checks the committed files three ways, each to the goldens' 9 significant digits: (1) it
reads each GGUF back with gguf's GGUFReader, rebuilds the HF model from the GGUF metadata and
tensors alone (undoing the llama Q/K permutation) and runs it; (2) it runs tiny_numpy_forward.py,
a float64 NumPy forward pass written from the GGUF's own conventions, not from HF's code; (3) it
reruns the generation and compares the logits and the re-exported GGUF's sha256 with the committed
ones. (1) and (2) prove the layout conversion. Exit status 1 on any mismatch.
"""

import argparse
import copy
import hashlib
import json
import math
import os
import re
import sys
import tempfile

import numpy as np
import sentencepiece as spm
import torch
import transformers
from torch import nn
from transformers import (LlamaConfig, LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, PhiConfig,
                          PhiForCausalLM)
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.modeling_utils import AttentionInterface

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tiny_numpy_forward  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_OUT = os.path.join(REPO, "tests", "data", "tiny")
DEFAULT_TOKENIZER = "/work/shared/data/stories260K/tok512.model"

VOCAB = 512
HIDDEN = 64
N_HEAD = 4
N_LAYER = 2
CTX = 128
ROPE_THETA = 10000.0
BOS, EOS, UNK = 1, 2, 0

# The prompt: BOS and the first 99 tok512 ids of this text; shorter prompts are its prefixes.
PROMPT_TEXT = ("Once upon a time, there was a little fox named Pip. Pip lived in a big green forest "
               "near a river. Every morning he ran to the water to see the fish jump. One day, Pip "
               "found a shiny red ball under a tree. He wanted to play with it, but the ball rolled "
               "into the river. Pip was sad.")
PROMPT_LENGTHS = [1, 7, 20, 40, 100]
# Positions whose logits are stored, per prompt length: first, around the phi3 sliding window (16)
# and the long-rope original context (32), and last.
POSITIONS = {1: [0], 7: [0, 3, 6], 20: [0, 15, 16, 19], 40: [0, 15, 16, 31, 32, 39],
             100: [0, 15, 16, 31, 32, 63, 99]}

PHI3_SLIDING_WINDOW = 16
PHI3_ORIG_CTX = 32
# Exactly representable in float32, so the F32 tensors in the GGUF hold the very values HF uses.
PHI3_SHORT_FACTOR = [1.0, 1.0625, 1.125, 1.1875, 1.25, 1.375, 1.5, 1.625]
PHI3_LONG_FACTOR = [1.0, 1.5, 2.25, 3.0, 4.0, 5.5, 7.0, 8.0]

# Scalars the GGUF stores as float32 are float32 values here too, so that the goldens are the
# model the file describes to the last bit (the attn_factor rounding alone moves logits by 2e-7).
EPS = float(np.float32(1e-5))
PHI3_ATTN_FACTOR = float(np.float32(
    math.sqrt(1 + math.log(CTX / PHI3_ORIG_CTX) / math.log(PHI3_ORIG_CTX))))

SEEDS = {"llama": 9001, "phi2": 9002, "phi3": 9003}
WEIGHT_STD = 0.1      # projections and embeddings
HEAD_STD = 0.25       # LM head: logits spread over a few units, not flat
NORM_STD = 0.1        # norm gains are 1 + N(0, NORM_STD)
BIAS_STD = 0.05


def make_config(arch):
    common = dict(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=N_LAYER,
                  num_attention_heads=N_HEAD, max_position_embeddings=CTX, bos_token_id=BOS,
                  eos_token_id=EOS, pad_token_id=None, tie_word_embeddings=False)
    if arch == "llama":
        return LlamaConfig(**common, num_key_value_heads=2, intermediate_size=128, rms_norm_eps=EPS,
                           hidden_act="silu", rope_theta=ROPE_THETA)
    if arch == "phi2":
        # llama.cpp's converter writes phi2.feed_forward_length = 4 * n_embd and
        # head_count_kv = head_count whatever config.json says, so the model must have exactly
        # that (as the real Phi-2 has); it also writes no rope.freq_base (llama.cpp's default 10000).
        # partial_rotary_factor 0.4 as in Phi-2: 0.4 * 16 = 6 rotated dims per head.
        return PhiConfig(**common, num_key_value_heads=N_HEAD, intermediate_size=4 * HIDDEN,
                         layer_norm_eps=EPS, hidden_act="gelu_new", partial_rotary_factor=0.4,
                         rope_theta=ROPE_THETA, qk_layernorm=False)
    if arch == "phi3":
        return Phi3Config(**common, num_key_value_heads=2, intermediate_size=128, rms_norm_eps=EPS,
                          hidden_act="silu", sliding_window=PHI3_SLIDING_WINDOW,
                          original_max_position_embeddings=PHI3_ORIG_CTX,
                          rope_scaling={"type": "longrope", "short_factor": PHI3_SHORT_FACTOR,
                                        "long_factor": PHI3_LONG_FACTOR, "rope_theta": ROPE_THETA,
                                        "attention_factor": PHI3_ATTN_FACTOR})
    raise ValueError(arch)


MODEL_CLASSES = {"llama": LlamaForCausalLM, "phi2": PhiForCausalLM, "phi3": Phi3ForCausalLM}


def build_model(arch):
    """The HF model with seeded weights; 2-D weights rounded to float16 values."""
    cfg = make_config(arch)
    model = MODEL_CLASSES[arch](cfg).float().eval()
    gen = torch.Generator().manual_seed(SEEDS[arch])
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 2:
                std = HEAD_STD if name == "lm_head.weight" else WEIGHT_STD
                p.copy_((noise * std).half().float())
            elif name.endswith("bias"):
                p.copy_(noise * BIAS_STD)
            else:
                p.copy_(1.0 + noise * NORM_STD)
    return model


# ---------------------------------------------------------------------------------------------
# float64 replacements for the three places where HF computes in float32 regardless of dtype.

class Fp64RmsNorm(nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Fp64Rope(nn.Module):
    """cos/sin tables in float64. For longrope, factors='auto' picks the set the way HF does
    (long when the largest position + 1 exceeds original_max_position_embeddings, for every
    position of the call); 'short' / 'long' force one."""

    def __init__(self, cfg, factors="auto"):
        super().__init__()
        rp = cfg.rope_parameters
        head_dim = cfg.hidden_size // cfg.num_attention_heads
        self.dim = int(head_dim * rp.get("partial_rotary_factor", 1.0))
        exponent = torch.arange(0, self.dim, 2, dtype=torch.float64) / self.dim
        base_inv = 1.0 / (rp["rope_theta"] ** exponent)
        self.longrope = rp["rope_type"] == "longrope"
        self.factors = factors
        self.scale = 1.0
        if self.longrope:
            self.orig = rp["original_max_position_embeddings"]
            self.inv_short = base_inv / torch.tensor(rp["short_factor"], dtype=torch.float64)
            self.inv_long = base_inv / torch.tensor(rp["long_factor"], dtype=torch.float64)
            self.scale = rp.get("attention_factor")
            if self.scale is None:
                ratio = cfg.max_position_embeddings / self.orig
                self.scale = math.sqrt(1 + math.log(ratio) / math.log(self.orig)) if ratio > 1 else 1.0
        else:
            self.inv = base_inv

    def inv_freq(self, n_positions):
        if not self.longrope:
            return self.inv
        use_long = self.factors == "long" or (self.factors == "auto" and n_positions > self.orig)
        return self.inv_long if use_long else self.inv_short

    def forward(self, x, position_ids):
        pos = position_ids.to(torch.float64)
        freqs = pos[..., None] * self.inv_freq(int(position_ids.max()) + 1)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.scale).to(x.dtype), (emb.sin() * self.scale).to(x.dtype)


def attention_fp64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    rep = module.num_key_value_groups  # query head h reads kv head h // rep, as HF's repeat_kv
    key = key.repeat_interleave(rep, dim=1)
    value = value.repeat_interleave(rep, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        scores = scores + attention_mask[:, :, :, : key.shape[-2]]
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, value).transpose(1, 2).contiguous(), probs


AttentionInterface.register("lilims_fp64", attention_fp64)
AttentionMaskInterface.register("lilims_fp64", eager_mask)  # additive 0 / dtype-min mask


def to_fp64(model, factors="auto"):
    """A float64 copy of model with the three float32 spots replaced."""
    m = fresh_like(model, torch.float64)
    m.config._attn_implementation = "lilims_fp64"
    for name, mod in list(m.named_modules()):
        if type(mod).__name__.endswith("RMSNorm"):
            parent = m.get_submodule(name.rsplit(".", 1)[0]) if "." in name else m
            setattr(parent, name.rsplit(".", 1)[-1],
                    Fp64RmsNorm(mod.weight, mod.variance_epsilon))
    m.model.rotary_emb = Fp64Rope(m.config, factors)
    return m


def arch_of(model):
    return {"llama": "llama", "phi": "phi2", "phi3": "phi3"}[model.config.model_type]


def fresh_like(model, dtype):
    """A copy of model in dtype, with its own config (HF writes the attention choice into it)."""
    m = MODEL_CLASSES[arch_of(model)](copy.deepcopy(model.config)).to(dtype).eval()
    m.load_state_dict({k: v.to(dtype) for k, v in model.state_dict().items()})
    return m


def force_hf_long_factors(model):
    """Makes HF's own (float32) longrope use the long factors at every length."""
    rot = model.model.rotary_emb
    inv_long, _ = ROPE_INIT_FUNCTIONS["longrope"](model.config, None, seq_len=PHI3_ORIG_CTX + 1)
    rot.original_inv_freq = inv_long
    rot.inv_freq = inv_long


def logits_at(model, ids, positions):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    return out[positions].to(torch.float64).numpy()


# ---------------------------------------------------------------------------------------------
# GGUF export.

def llama_permute(w, n_head):
    """llama.cpp's converter reorders each head's Q/K rows from HF's rotate-half layout (pairs
    (i, i + d/2)) to adjacent pairs (2i, 2i + 1), because llama.cpp's llama uses the "normal" RoPE
    on consecutive values: GGUF row 2i = HF row i, GGUF row 2i+1 = HF row i + d/2, per head."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w, n_head):
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_tensors(arch, model):
    """(gguf name, HF name, transform) for every tensor, in the converter's naming."""
    cfg = model.config
    permute_q = ("permute", cfg.num_attention_heads)
    permute_k = ("permute", cfg.num_key_value_heads)
    out = [("token_embd.weight", "model.embed_tokens.weight", None)]
    for b in range(cfg.num_hidden_layers):
        hf = f"model.layers.{b}."
        g = f"blk.{b}."
        if arch == "llama":
            out += [(g + "attn_norm.weight", hf + "input_layernorm.weight", None),
                    (g + "attn_q.weight", hf + "self_attn.q_proj.weight", permute_q),
                    (g + "attn_k.weight", hf + "self_attn.k_proj.weight", permute_k),
                    (g + "attn_v.weight", hf + "self_attn.v_proj.weight", None),
                    (g + "attn_output.weight", hf + "self_attn.o_proj.weight", None),
                    (g + "ffn_norm.weight", hf + "post_attention_layernorm.weight", None),
                    (g + "ffn_gate.weight", hf + "mlp.gate_proj.weight", None),
                    (g + "ffn_up.weight", hf + "mlp.up_proj.weight", None),
                    (g + "ffn_down.weight", hf + "mlp.down_proj.weight", None)]
        elif arch == "phi2":
            # HF-format Phi-2 has separate q/k/v projections; the converter maps them one to one
            # (attn_q/attn_k/attn_v); it writes a fused attn_qkv only for the original
            # "transformer.h.N.mixer.Wqkv" checkpoints. llama.cpp's phi2 loads either.
            for t in ("weight", "bias"):
                out += [(g + f"attn_norm.{t}", hf + f"input_layernorm.{t}", None),
                        (g + f"attn_q.{t}", hf + f"self_attn.q_proj.{t}", None),
                        (g + f"attn_k.{t}", hf + f"self_attn.k_proj.{t}", None),
                        (g + f"attn_v.{t}", hf + f"self_attn.v_proj.{t}", None),
                        (g + f"attn_output.{t}", hf + f"self_attn.dense.{t}", None),
                        (g + f"ffn_up.{t}", hf + f"mlp.fc1.{t}", None),
                        (g + f"ffn_down.{t}", hf + f"mlp.fc2.{t}", None)]
        else:
            # qkv_proj rows are [Q (n_head*d); K (n_kv*d); V (n_kv*d)] and gate_up_proj rows are
            # [gate (n_ff); up (n_ff)]: written as they are, which is the order llama.cpp's phi3
            # splits them in (swiglu: silu(first half) * second half).
            out += [(g + "attn_norm.weight", hf + "input_layernorm.weight", None),
                    (g + "attn_qkv.weight", hf + "self_attn.qkv_proj.weight", None),
                    (g + "attn_output.weight", hf + "self_attn.o_proj.weight", None),
                    (g + "ffn_norm.weight", hf + "post_attention_layernorm.weight", None),
                    (g + "ffn_up.weight", hf + "mlp.gate_up_proj.weight", None),
                    (g + "ffn_down.weight", hf + "mlp.down_proj.weight", None)]
    if arch == "phi2":
        out += [("output_norm.weight", "model.final_layernorm.weight", None),
                ("output_norm.bias", "model.final_layernorm.bias", None),
                ("output.weight", "lm_head.weight", None),
                ("output.bias", "lm_head.bias", None)]
    else:
        out += [("output_norm.weight", "model.norm.weight", None),
                ("output.weight", "lm_head.weight", None)]
    return out


def export_gguf(arch, model, sp, path):
    cfg = model.config
    w = gguf.GGUFWriter(path, arch)  # writes general.architecture = arch
    # Not "phi3" or "phi-3": llama.cpp then expects Phi-3's <|endoftext|> token in the vocabulary.
    w.add_name("lilims tiny random " + {"llama": "Llama", "phi2": "Phi 2", "phi3": "Phi 3"}[arch])
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    n_head = cfg.num_attention_heads
    head_dim = cfg.hidden_size // n_head
    rp = cfg.rope_parameters
    n_rot = int(rp.get("partial_rotary_factor", 1.0) * cfg.hidden_size) // n_head
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(n_head)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(n_rot)
    if arch == "llama":
        w.add_rope_freq_base(rp["rope_theta"])
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        w.add_vocab_size(cfg.vocab_size)
        assert n_rot == head_dim
    elif arch == "phi2":
        w.add_layer_norm_eps(cfg.layer_norm_eps)
    else:
        w.add_rope_freq_base(rp["rope_theta"])
        w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
        w.add_rope_scaling_orig_ctx_len(rp["original_max_position_embeddings"])
        w.add_sliding_window(cfg.sliding_window)
        # The converter derives attn_factor from the context ratio (ignoring config.json's
        # attention_factor); the model above uses the same value rounded to float32.
        ratio = cfg.max_position_embeddings / rp["original_max_position_embeddings"]
        attn_factor = math.sqrt(1 + math.log(ratio) / math.log(rp["original_max_position_embeddings"]))
        assert float(np.float32(attn_factor)) == rp["attention_factor"]
        w.add_rope_scaling_attn_factors(attn_factor)

    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i).encode("utf-8"))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(gguf.TokenType.UNKNOWN)
        elif sp.is_control(i):
            types.append(gguf.TokenType.CONTROL)
        elif sp.is_unused(i):
            types.append(gguf.TokenType.UNUSED)
        elif sp.is_byte(i):
            types.append(gguf.TokenType.BYTE)
        else:
            types.append(gguf.TokenType.NORMAL)
    w.add_tokenizer_model("llama")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(EOS)
    w.add_unk_token_id(UNK)
    # The converter forces add_bos_token false for phi2; the others follow the tokenizer (BOS on).
    w.add_add_bos_token(arch != "phi2")
    w.add_add_eos_token(False)

    state = model.state_dict()
    for gname, hname, transform in gguf_tensors(arch, model):
        t = state[hname].detach().to(torch.float32)
        if transform is not None:
            t = llama_permute(t, transform[1])
        a = t.numpy()
        w.add_tensor(gname, a.astype(np.float16) if a.ndim == 2 else a)
    if arch == "phi3":
        w.add_tensor("rope_factors_long.weight", np.array(rp["long_factor"], dtype=np.float32))
        w.add_tensor("rope_factors_short.weight", np.array(rp["short_factor"], dtype=np.float32))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# ---------------------------------------------------------------------------------------------
# GGUF -> HF, from the file alone (for --verify).

def field(reader, key):
    f = reader.get_field(key)
    if f is None:
        raise KeyError(f"[gen_tiny_models] {key} missing")
    return f.contents()


def model_from_gguf(path):
    r = gguf.GGUFReader(path)
    arch = field(r, "general.architecture")
    key = lambda k: field(r, f"{arch}.{k}")  # noqa: E731
    n_embd, n_head = key("embedding_length"), key("attention.head_count")
    head_dim = n_embd // n_head
    tensors = {t.name: torch.from_numpy(np.array(t.data, dtype=np.float32)) for t in r.tensors}
    vocab = tensors["token_embd.weight"].shape[0]
    common = dict(vocab_size=vocab, hidden_size=n_embd, num_hidden_layers=key("block_count"),
                  num_attention_heads=n_head, num_key_value_heads=key("attention.head_count_kv"),
                  intermediate_size=key("feed_forward_length"),
                  max_position_embeddings=key("context_length"), bos_token_id=BOS,
                  eos_token_id=EOS, pad_token_id=None, tie_word_embeddings=False)
    n_rot = key("rope.dimension_count")
    if arch == "llama":
        cfg = LlamaConfig(**common, rms_norm_eps=key("attention.layer_norm_rms_epsilon"),
                          rope_theta=key("rope.freq_base"), hidden_act="silu")
    elif arch == "phi2":
        cfg = PhiConfig(**common, layer_norm_eps=key("attention.layer_norm_epsilon"),
                        partial_rotary_factor=n_rot / head_dim, rope_theta=10000.0,
                        hidden_act="gelu_new")
    elif arch == "phi3":
        assert n_rot == head_dim
        orig = key("rope.scaling.original_context_length")
        cfg = Phi3Config(**common, rms_norm_eps=key("attention.layer_norm_rms_epsilon"),
                         hidden_act="silu", sliding_window=key("attention.sliding_window"),
                         original_max_position_embeddings=orig,
                         rope_scaling={"type": "longrope", "rope_theta": key("rope.freq_base"),
                                       "short_factor": tensors["rope_factors_short.weight"].tolist(),
                                       "long_factor": tensors["rope_factors_long.weight"].tolist(),
                                       "attention_factor": key("rope.scaling.attn_factor")})
    else:
        raise ValueError(arch)
    model = MODEL_CLASSES[arch](cfg).float().eval()
    state = {}
    for gname, hname, transform in gguf_tensors(arch, model):
        t = tensors[gname]
        if transform is not None:
            t = llama_unpermute(t, transform[1])
        state[hname] = t
    model.load_state_dict(state, strict=True)
    return arch, model


# ---------------------------------------------------------------------------------------------

def prompt_ids(sp):
    ids = [BOS] + sp.encode(PROMPT_TEXT)[: max(PROMPT_LENGTHS) - 1]
    assert len(ids) == max(PROMPT_LENGTHS)
    return ids


def cases_for(arch):
    """(n_tokens, rope factor mode) pairs. For phi3 'auto' is HF's rule (short up to 32 tokens,
    long beyond); the prompts that fit the original context are also run with the long factors,
    which is what llama.cpp uses for every position once its context exceeds 32."""
    modes = [(n, "auto") for n in PROMPT_LENGTHS]
    if arch == "phi3":
        modes += [(n, "long") for n in PROMPT_LENGTHS if n <= PHI3_ORIG_CTX]
    return modes


def factors_used(arch, n, mode):
    if arch != "phi3":
        return None
    if mode == "long" or n > PHI3_ORIG_CTX:
        return "long"
    return "short"


def golden_cases(arch, model, ids):
    """Logits of the float64 run, and the deviations of HF's fp32 and unpatched fp64 runs."""
    out = []
    for n, mode in cases_for(arch):
        pos = POSITIONS[n]
        gold = logits_at(to_fp64(model, mode), ids[:n], pos)
        m32 = fresh_like(model, torch.float32)
        m64_plain = fresh_like(model, torch.float64)
        if mode == "long":
            force_hf_long_factors(m32)
            force_hf_long_factors(m64_plain)
        d32 = np.abs(logits_at(m32, ids[:n], pos) - gold)
        d64 = np.abs(logits_at(m64_plain, ids[:n], pos) - gold)
        out.append({
            "n_tokens": n,
            "rope_factors": factors_used(arch, n, mode),
            "positions": pos,
            "argmax": [int(np.argmax(row)) for row in gold],
            "fp32_max_abs_dev": float(d32.max()),
            "fp32_max_abs_dev_by_position": [float(x) for x in d32.max(axis=1)],
            "hf_unpatched_fp64_max_abs_dev": float(d64.max()),
            "logits": [[float(f"{v:.9g}") for v in row] for row in gold],
        })
    return out


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def config_summary(arch, model):
    c = model.config.to_dict()
    keep = ["model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
            "rms_norm_eps", "layer_norm_eps", "hidden_act", "sliding_window",
            "original_max_position_embeddings", "rope_parameters", "tie_word_embeddings",
            "attention_bias", "mlp_bias"]
    return {k: c[k] for k in keep if k in c and c[k] is not None}


NOTES = {
    "llama": "LlamaForCausalLM, GQA 4 query / 2 kv heads, SwiGLU, RMSNorm, full rotary. In the "
             "GGUF attn_q/attn_k rows are permuted per head (GGUF row 2i = HF row i, row 2i+1 = "
             "HF row i + head_dim/2) so that llama's RoPE rotates adjacent pairs, as llama.cpp's "
             "converter does.",
    "phi2": "PhiForCausalLM (Phi-2): one LayerNorm (with bias) feeds attention and the MLP in "
            "parallel, h = x + attn + mlp; biases on every projection and on the LM head; GELU "
            "tanh approximation (gelu_new); partial NeoX-style rotary on the first 6 of 16 dims "
            "(rotate-half pairs (i, i+3)); MHA (4 kv heads). Separate attn_q/attn_k/attn_v, "
            "not permuted.",
    "phi3": "Phi3ForCausalLM: fused attn_qkv [Q;K;V] (4 q heads, 2 kv heads), fused ffn_up "
            "[gate;up] with SwiGLU, RMSNorm, full NeoX-style rotary (not permuted). Sliding "
            "window 16: query q attends keys k with q - 16 < k <= q. LongRoPE: inv_freq[i] = "
            "theta^(-2i/16) / factor[i], cos and sin multiplied by attn_factor = "
            "sqrt(1 + ln(128/32) / ln(32)) for both factor sets; rope_factors 'short' or 'long' "
            "for every position of a case (HF: long when the prompt is longer than 32).",
}


def generate(out_dir, sp):
    os.makedirs(out_dir, exist_ok=True)
    ids = prompt_ids(sp)
    doc = {
        "generator": "scripts/goldens/gen_tiny_models.py",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__, "gguf": "0.19.0", "sentencepiece": spm.__version__},
        "reference": "HF transformers in float64 (RMSNorm, RoPE tables and attention softmax "
                     "patched to float64); logits stored to 9 significant digits",
        "fp32_reference": "the same HF model in float32, unpatched, default attention (sdpa); "
                          "fp32_max_abs_dev = max |fp32 - golden| over the stored positions",
        "prompt": {"text": PROMPT_TEXT, "token_ids": ids, "lengths": PROMPT_LENGTHS,
                   "note": "each case's prompt is token_ids[:n_tokens]; BOS = 1"},
        "models": {},
    }
    for arch in ("llama", "phi2", "phi3"):
        model = build_model(arch)
        path = os.path.join(out_dir, f"{arch}.gguf")
        export_gguf(arch, model, sp, path)
        doc["models"][arch] = {
            "gguf": f"{arch}.gguf",
            "gguf_sha256": sha256(path),
            "gguf_bytes": os.path.getsize(path),
            "seed": SEEDS[arch],
            "hf_config": config_summary(arch, model),
            "notes": NOTES[arch],
            "cases": golden_cases(arch, model, ids),
        }
        worst = max(c["fp32_max_abs_dev"] for c in doc["models"][arch]["cases"])
        print(f"{arch}: {os.path.getsize(path)} bytes, fp32 max |dev| {worst:.3g}", file=sys.stderr)
    # One logits row per line: readable structure without a line per float.
    text = json.dumps(doc, indent=1)
    text = re.sub(r"\[\s+(-?[0-9][^\[\]]*?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(os.path.join(out_dir, "goldens.json"), "w") as f:
        f.write(text + "\n")


def verify(out_dir, sp):
    with open(os.path.join(out_dir, "goldens.json")) as f:
        doc = json.load(f)
    ids = prompt_ids(sp)
    assert doc["prompt"]["token_ids"] == ids, "prompt ids changed"
    ok = True
    for arch, entry in doc["models"].items():
        path = os.path.join(out_dir, entry["gguf"])
        got_arch, from_file = model_from_gguf(path)
        assert got_arch == arch
        fresh = build_model(arch)
        plain = tiny_numpy_forward.GgufModel(path)
        worst = {"gguf->HF": 0.0, "gguf->numpy": 0.0, "fresh HF": 0.0}
        for case in entry["cases"]:
            n = case["n_tokens"]
            mode = "long" if (arch == "phi3" and case["rope_factors"] == "long") else "auto"
            gold = np.array(case["logits"])
            pos = case["positions"]
            got = {"gguf->HF": logits_at(to_fp64(from_file, mode), ids[:n], pos),
                   "gguf->numpy": tiny_numpy_forward.forward(plain, ids[:n], mode)[pos],
                   "fresh HF": logits_at(to_fp64(fresh, mode), ids[:n], pos)}
            for k, v in got.items():
                worst[k] = max(worst[k], float(np.abs(v - gold).max()))
        # The goldens are rounded to 9 significant digits; logits are below 10 in magnitude.
        with tempfile.TemporaryDirectory() as tmp:
            export_gguf(arch, fresh, sp, os.path.join(tmp, "fresh.gguf"))
            fresh_sha = sha256(os.path.join(tmp, "fresh.gguf"))
        same_file = sha256(path) == entry["gguf_sha256"] == fresh_sha
        good = max(worst.values()) < 1e-8 and same_file
        ok &= good
        devs = ", ".join(f"{k} {v:.3g}" for k, v in worst.items())
        print(f"{arch}: max |x - golden|: {devs}; sha256 committed/recorded/re-exported "
              f"{'equal' if same_file else 'DIFFER'}"
              f" -> {'ok' if good else 'FAIL'}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=DEFAULT_OUT)
    ap.add_argument("--tokenizer", default=DEFAULT_TOKENIZER, help="stories260K tok512.model")
    ap.add_argument("--verify", action="store_true", help="check the files in --out-dir")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the same summation order on every machine
    sp = spm.SentencePieceProcessor(model_file=args.tokenizer)
    if sp.vocab_size() != VOCAB:
        sys.exit(f"[gen_tiny_models] {args.tokenizer}: vocab {sp.vocab_size()}, expected {VOCAB}")
    if args.verify:
        sys.exit(0 if verify(args.out_dir, sp) else 1)
    generate(args.out_dir, sp)


if __name__ == "__main__":
    main()
