#!/usr/bin/env python3
"""Tiny random-weight Gemma 3, Qwen2, Qwen3, Llama 3, Phi-2 and Phi-3 (Phi-4-mini layout) models:
Hugging Face directories, the GGUFs llama.cpp's own converter makes of them, and float64 golden
logits from HF transformers.

Rerun (from the repo root; pip install -r scripts/goldens/requirements-tiny-models.txt protobuf;
about two minutes on the 2-core machine):

    python3 scripts/goldens/gen_family_models.py                 # hf dirs, GGUFs, goldens.json (HF part)
    python3 scripts/goldens/gen_family_models.py --stage hf      # only tests/data/families/hf/
    python3 scripts/goldens/gen_family_models.py --stage gguf    # only the GGUFs (needs the hf dirs)
    python3 scripts/goldens/gen_family_models.py --verify        # checks the committed files
    python3 scripts/goldens/run_family_llamacpp.py               # adds llama.cpp's results to goldens.json

What it makes (tests/data/families/, see SOURCE.md there for every key and tensor):
- hf/<name>/: save_pretrained of a seeded random model (config.json, model.safetensors with 2-D
  weights F16 and 1-D weights F32, exactly the values every golden uses) and its tokenizer.
  gemma3 uses the stories260K tok512 SentencePiece model (tokenizer.model) plus Gemma's
  <start_of_turn>/<end_of_turn>; the others a 512-token byte-level BPE trained with `tokenizers`
  on tests/data/ppl_text.txt with the family's own pre-tokenizer regex and special tokens.
- <name>.f16.gguf, <name>.q8_0.gguf: llama.cpp's convert_hf_to_gguf.py (the llama.cpp source of
  the reference build; its bundled gguf-py) run on hf/<name>/ with --outtype f16 / q8_0, through
  convert_hf_family.py, which only makes the BPE pre-tokenizer hash check return the name the
  converter writes for the real family (a tiny tokenizer has no known hash).
- goldens.json: HF transformers in float64 (RMSNorm, RoPE tables and the attention softmax
  patched to float64 as in gen_tiny_models.py; Gemma's (1 + w) norms, GELU-tanh, sliding-window
  masks, QK norms and biases are HF's own code), full-vocabulary logits at chosen positions of a
  fixed prompt per family, with the fp32 model's deviation.

Values chosen so the stored files are the model exactly: 2-D weights are F16 values; Gemma's
norm weights w are chosen so that 1 + w is a float32 value (the converter stores 1 + w in F32);
Llama 3's rope factors are the converter's float32 values; Phi-3's LongRoPE attention factor is
the float32 of the value the converter derives.
"""

import argparse
import copy
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import trainers
from torch import nn
from transformers import (AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig,
                          LlamaForCausalLM, Phi3Config, Phi3ForCausalLM, PhiConfig, PhiForCausalLM,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_tiny_models as tiny  # noqa: E402  (registers the "lilims_fp64" attention and mask)

REPO = tiny.REPO
OUT = os.path.join(REPO, "tests", "data", "families")
HF_OUT = os.path.join(OUT, "hf")
TOK512 = "/work/shared/data/stories260K/tok512.model"
PPL_TEXT = os.path.join(REPO, "tests", "data", "ppl_text.txt")
DEFAULT_LLAMACPP_SRC = ("/root/.cache/lilims/llamacpp-0.3.36-avx-avx2-fma-f16c-avx512-avx512vnni-"
                        "avx512bf16-avxvnni/_src/llama_cpp_python-0.3.36/vendor/llama.cpp")

FAMILIES = ["gemma3", "qwen2", "qwen3", "llama3", "phi2", "phi3"]
SEEDS = {"gemma3": 9101, "qwen2": 9102, "qwen3": 9103, "llama3": 9104, "phi2": 9105, "phi3": 9106}
BPE_VOCAB = 512
HIDDEN = 64
WEIGHT_STD = 0.1   # projections (and untied embeddings)
HEAD_STD = 0.25    # LM head, and the embedding when it is tied: logits spread over a few units
NORM_STD = 0.1     # norm gains are 1 + N(0, NORM_STD) (Gemma: w ~ N(0, NORM_STD), gain 1 + w)
BIAS_STD = 0.05
EPS = float(np.float32(1e-5))
GEMMA_EPS = float(np.float32(1e-6))

# The prompt: the first PROMPT_LEN ids each family's tokenizer gives for this text (its BOS
# first when the family adds one).
PROMPT_TEXT = tiny.PROMPT_TEXT
PROMPT_LEN = 80
# Stored positions: first, both sides of Gemma's window (8), of Phi-3's original context (32),
# and last.
POSITIONS = [0, 1, 7, 8, 9, 16, 31, 32, 33, 63, PROMPT_LEN - 1]

# --- per family ------------------------------------------------------------------------------

GEMMA_SLIDING_WINDOW = 8
PHI3_ORIG_CTX = 32
PHI3_CTX = 128
PHI3_ROT = 0.75  # Phi-4-mini: 96 of 128 dims rotated; here 12 of 16
PHI3_SHORT_FACTOR = [1.0, 1.0625, 1.125, 1.25, 1.5, 2.0]
PHI3_LONG_FACTOR = [1.0, 1.5, 2.25, 4.0, 6.0, 8.0]
PHI3_ATTN_FACTOR = float(np.float32(
    math.sqrt(1 + math.log(PHI3_CTX / PHI3_ORIG_CTX) / math.log(PHI3_ORIG_CTX))))
LLAMA3_ROPE = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8192}

# What convert_hf_family.py makes get_vocab_base_pre return: the value the converter writes for
# the real family's tokenizer (see the hashes in conversion/base.py: Qwen2.5 and Qwen3 ->
# "qwen2", Meta-Llama-3 -> "llama-bpe", microsoft/phi-2 -> "phi-2", Phi-4-mini -> "gpt-4o").
CONVERTER_PRE = {"qwen2": "qwen2", "qwen3": "qwen2", "llama3": "llama-bpe", "phi2": "phi-2",
                 "phi3": "gpt-4o"}

# general.name: the converter derives it from the directory name ("Phi3"), and llama.cpp treats
# any model whose name contains "phi3" or "phi-3" as Phi-3's SentencePiece vocabulary (it looks
# up "</s>" and fails on a BPE one). Phi-4-mini's name has neither.
MODEL_NAMES = {"phi3": "Tiny Random Phi 4 Mini Layout"}

# The families' pre-tokenizer regexes, as in their tokenizer.json files (and in llama.cpp's
# llama-vocab.cpp for the matching tokenizer.ggml.pre).
REGEX_QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
               r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
REGEX_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}"
                r"\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
REGEX_GPT4O = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
               r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+"
               r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}"
               r"\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
          "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + "
                   "message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
                   "'<|eot_id|>' }}{% endfor %}{% if add_generation_prompt %}"
                   "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
PHI4_TEMPLATE = ("{% for message in messages %}{{ '<|' + message['role'] + '|>' + "
                 "message['content'] + '<|end|>' }}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|assistant|>' }}{% endif %}")
GEMMA_TEMPLATE = ("{{ bos_token }}{% for message in messages %}{{ '<start_of_turn>' + "
                  "('model' if message['role'] == 'assistant' else message['role']) + '\\n' + "
                  "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}"
                  "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")

BPE_SPEC = {
    # specials (ids 0..), bos, eos, pad, regex (None: GPT-2's ByteLevel regex), NFC, add BOS,
    # chat template
    "qwen2": dict(specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], bos=None,
                  eos="<|im_end|>", pad="<|endoftext|>", regex=REGEX_QWEN2, nfc=True,
                  add_bos=False, template=CHATML),
    "qwen3": dict(specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"],
                  bos=None, eos="<|im_end|>", pad="<|endoftext|>", regex=REGEX_QWEN2, nfc=True,
                  add_bos=False, template=CHATML),
    "llama3": dict(specials=["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                             "<|end_header_id|>", "<|eot_id|>"],
                   bos="<|begin_of_text|>", eos="<|eot_id|>", pad=None, regex=REGEX_LLAMA3,
                   nfc=False, add_bos=True, template=LLAMA3_TEMPLATE),
    "phi2": dict(specials=["<|endoftext|>"], bos="<|endoftext|>", eos="<|endoftext|>", pad=None,
                 regex=None, nfc=False, add_bos=False, template=None),
    "phi3": dict(specials=["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
                 bos="<|endoftext|>", eos="<|end|>", pad="<|endoftext|>", regex=REGEX_GPT4O,
                 nfc=False, add_bos=False, template=PHI4_TEMPLATE),
}

TOKENIZER_TEXTS = [
    "Once upon a time, there was a little fox named Pip.",
    "The GNU General Public License, version 3 (29 June 2007).",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "Digits 1234567 and 3.14159; caf\u00e9 na\u00efve \u65e5\u672c",
]
CHAT_TEXTS = {
    "gemma3": "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "qwen2": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "qwen3": "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
    "llama3": "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
              "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "phi2": "Instruct: hi\nOutput:",
    "phi3": "<|user|>hi<|end|><|assistant|>",
}


def make_config(name, vocab, tok):
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id)
    common = dict(vocab_size=vocab, hidden_size=HIDDEN, num_attention_heads=4, **ids)
    if name == "gemma3":
        # layer_types as transformers derives them from sliding_window_pattern 6: layer 5 global.
        return Gemma3TextConfig(**common, num_key_value_heads=2, head_dim=32,
                                intermediate_size=128, num_hidden_layers=7,
                                max_position_embeddings=256, rms_norm_eps=GEMMA_EPS,
                                hidden_activation="gelu_pytorch_tanh",
                                sliding_window=GEMMA_SLIDING_WINDOW, query_pre_attn_scalar=32,
                                final_logit_softcapping=None, attn_logit_softcapping=None,
                                rope_theta=1_000_000.0, rope_local_base_freq=10_000.0,
                                tie_word_embeddings=True)
    if name == "qwen2":
        return Qwen2Config(**common, num_key_value_heads=2, intermediate_size=128,
                           num_hidden_layers=2, max_position_embeddings=256, rms_norm_eps=EPS,
                           rope_theta=1_000_000.0, tie_word_embeddings=True,
                           use_sliding_window=False)
    if name == "qwen3":
        return Qwen3Config(**common, num_key_value_heads=2, head_dim=32, intermediate_size=128,
                           num_hidden_layers=2, max_position_embeddings=256, rms_norm_eps=EPS,
                           rope_theta=1_000_000.0, tie_word_embeddings=False,
                           attention_bias=False, use_sliding_window=False)
    if name == "llama3":
        # Llama 3.2's context; HF's llama3 RoPE does not depend on it.
        return LlamaConfig(**common, num_key_value_heads=2, intermediate_size=128,
                           num_hidden_layers=2, max_position_embeddings=131072, rms_norm_eps=EPS,
                           hidden_act="silu", rope_scaling=dict(LLAMA3_ROPE),
                           tie_word_embeddings=True)
    if name == "phi2":
        # The converter writes feed_forward_length = 4 * n_embd and head_count_kv = head_count.
        return PhiConfig(**common, num_key_value_heads=4, intermediate_size=4 * HIDDEN,
                         num_hidden_layers=2, max_position_embeddings=256, layer_norm_eps=EPS,
                         hidden_act="gelu_new", partial_rotary_factor=0.4, rope_theta=10000.0,
                         qk_layernorm=False, tie_word_embeddings=False)
    if name == "phi3":
        return Phi3Config(**common, num_key_value_heads=2, intermediate_size=128,
                          num_hidden_layers=2, max_position_embeddings=PHI3_CTX,
                          original_max_position_embeddings=PHI3_ORIG_CTX, rms_norm_eps=EPS,
                          hidden_act="silu", sliding_window=None, tie_word_embeddings=True,
                          rope_scaling={"type": "longrope", "rope_theta": 10000.0,
                                        "short_factor": PHI3_SHORT_FACTOR,
                                        "long_factor": PHI3_LONG_FACTOR,
                                        "attention_factor": PHI3_ATTN_FACTOR,
                                        "partial_rotary_factor": PHI3_ROT},
                          partial_rotary_factor=PHI3_ROT)
    raise ValueError(name)


MODEL_CLASSES = {"gemma3": Gemma3ForCausalLM, "qwen2": Qwen2ForCausalLM,
                 "qwen3": Qwen3ForCausalLM, "llama3": LlamaForCausalLM, "phi2": PhiForCausalLM,
                 "phi3": Phi3ForCausalLM}
FAMILY_OF_MODEL_TYPE = {"gemma3_text": "gemma3", "qwen2": "qwen2", "qwen3": "qwen3",
                        "llama": "llama3", "phi": "phi2", "phi3": "phi3"}


def build_model(name, cfg):
    """The HF model with seeded weights (see the module docstring for the value choices)."""
    model = MODEL_CLASSES[name](cfg).float().eval()
    tied = cfg.tie_word_embeddings
    gen = torch.Generator().manual_seed(SEEDS[name])
    with torch.no_grad():
        for pname, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.dim() == 2:
                head = pname == "lm_head.weight" or (tied and pname.endswith("embed_tokens.weight"))
                p.copy_((noise * (HEAD_STD if head else WEIGHT_STD)).half().float())
            elif pname.endswith("bias"):
                p.copy_(noise * BIAS_STD)
            elif name == "gemma3":
                # Gemma3RMSNorm multiplies by (1 + w); 1 + w must be a float32 value.
                p.copy_((1.0 + noise * NORM_STD) - 1.0)
            else:
                p.copy_(1.0 + noise * NORM_STD)
    return model


def fresh_like(model, dtype):
    name = FAMILY_OF_MODEL_TYPE[model.config.model_type]
    m = MODEL_CLASSES[name](copy.deepcopy(model.config)).to(dtype).eval()
    m.load_state_dict({k: v.to(dtype) for k, v in model.state_dict().items()})
    if model.config.tie_word_embeddings:
        m.tie_weights()
    return m


# --- tokenizers ------------------------------------------------------------------------------

def train_bpe(name):
    spec = BPE_SPEC[name]
    with open(PPL_TEXT, encoding="utf-8") as f:
        text = f.read()
    tok = Tokenizer(models.BPE())
    if spec["nfc"]:
        tok.normalizer = normalizers.NFC()
    if spec["regex"] is None:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(spec["regex"]), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=BPE_VOCAB, special_tokens=spec["specials"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    assert tok.get_vocab_size() == BPE_VOCAB, tok.get_vocab_size()
    if spec["add_bos"]:
        bos = spec["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
            special_tokens=[(bos, tok.token_to_id(bos))])
    else:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=spec["bos"],
                                 eos_token=spec["eos"], pad_token=spec["pad"], unk_token=None,
                                 chat_template=spec["template"])
    return hf


def save_bpe_tokenizer(name, hf_tok, path):
    hf_tok.save_pretrained(path)
    cfg_path = os.path.join(path, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    # As the real families' files: the class the converters look at, add_bos_token explicit.
    cfg["tokenizer_class"] = "GPT2Tokenizer" if name in ("phi2", "phi3") else (
        "Qwen2Tokenizer" if name.startswith("qwen") else "PreTrainedTokenizerFast")
    cfg["add_bos_token"] = BPE_SPEC[name]["add_bos"]
    cfg["add_eos_token"] = False
    for k in ("is_local", "local_files_only"):
        cfg.pop(k, None)
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def save_gemma_tokenizer(path):
    """tok512.model as Gemma's tokenizer.model, HF's GemmaTokenizer (no dummy prefix, BOS added)
    converted from it, <mask>/<start_of_turn>/<end_of_turn> added after the 512 pieces; the
    added tokens also listed in tokenizer_config.json's added_tokens_decoder (as transformers 4
    wrote it for Gemma 3), which is where llama.cpp's converter reads them from."""
    tmp = path + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    shutil.copy(TOK512, os.path.join(tmp, "tokenizer.model"))
    with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "GemmaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "pad_token": None, "add_bos_token": True,
                   "add_eos_token": False}, f)
    tok = AutoTokenizer.from_pretrained(tmp)
    tok.add_special_tokens({"additional_special_tokens": ["<start_of_turn>", "<end_of_turn>"]})
    tok.chat_template = GEMMA_TEMPLATE
    shutil.rmtree(tmp)
    tok.save_pretrained(path)
    shutil.copy(TOK512, os.path.join(path, "tokenizer.model"))
    cfg_path = os.path.join(path, "tokenizer_config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    for k in ("is_local", "local_files_only", "vocab_file"):
        cfg.pop(k, None)
    cfg["add_bos_token"] = True
    cfg["add_eos_token"] = False
    with open(os.path.join(path, "tokenizer.json")) as f:
        added = json.load(f)["added_tokens"]
    cfg["added_tokens_decoder"] = {
        str(a["id"]): {k: a[k] for k in ("content", "lstrip", "normalized", "rstrip",
                                         "single_word", "special")} for a in added}
    with open(cfg_path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return AutoTokenizer.from_pretrained(path)


# --- float64 reference -----------------------------------------------------------------------

class Fp64GemmaRmsNorm(nn.Module):
    def __init__(self, weight, eps):
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * (1.0 + self.weight)


def llama3_factors(rp, dim):
    """The converter's rope_freqs values (conversion/llama.py), float32 like the GGUF tensor."""
    freqs = 1.0 / (rp["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old = rp["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / hi:
            out.append(1)
        elif wavelen > old / lo:
            out.append(factor)
        else:
            smooth = (old / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


class Fp64Rope(nn.Module):
    """cos/sin tables in float64, for one rope parameter set or one per Gemma layer type.
    llama3: inv_freq = theta^(-2i/d) / rope_factor[i] with the converter's float32 factors (HF's
    own llama3 formula gives the same values up to float32 rounding). longrope: HF's rule, long
    factors when the call's largest position + 1 exceeds the original context."""

    def __init__(self, cfg):
        super().__init__()
        head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        rp = cfg.rope_parameters
        self.sets = {}
        for layer_type, p in (rp.items() if "full_attention" in rp else [(None, rp)]):
            dim = int(head_dim * p.get("partial_rotary_factor", 1.0))
            inv = 1.0 / (p["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
            entry = {"inv": inv, "scale": 1.0, "long": None}
            if p["rope_type"] == "llama3":
                entry["inv"] = inv / torch.from_numpy(llama3_factors(p, dim).astype(np.float64))
            elif p["rope_type"] == "longrope":
                entry["orig"] = p["original_max_position_embeddings"]
                entry["inv"] = inv / torch.tensor(p["short_factor"], dtype=torch.float64)
                entry["long"] = inv / torch.tensor(p["long_factor"], dtype=torch.float64)
                entry["scale"] = p["attention_factor"]
            else:
                assert p["rope_type"] == "default", p
            self.sets[layer_type] = entry

    def forward(self, x, position_ids, layer_type=None):
        e = self.sets[layer_type]
        inv = e["inv"]
        if e["long"] is not None and int(position_ids.max()) + 1 > e["orig"]:
            inv = e["long"]
        freqs = position_ids.to(torch.float64)[..., None] * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * e["scale"]).to(x.dtype), (emb.sin() * e["scale"]).to(x.dtype)


def to_fp64(model):
    m = fresh_like(model, torch.float64)
    m.config._attn_implementation = "lilims_fp64"
    for name, mod in list(m.named_modules()):
        cls = type(mod).__name__
        if not cls.endswith("RMSNorm"):
            continue
        parent = m.get_submodule(name.rsplit(".", 1)[0]) if "." in name else m
        if cls == "Gemma3RMSNorm":
            new = Fp64GemmaRmsNorm(mod.weight, mod.eps)
        else:
            new = tiny.Fp64RmsNorm(mod.weight, mod.variance_epsilon)
        setattr(parent, name.rsplit(".", 1)[-1], new)
    m.model.rotary_emb = Fp64Rope(m.config)
    return m


def logits_at(model, ids, positions):
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0]
    return out[positions].to(torch.float64).numpy()


# --- stages ----------------------------------------------------------------------------------

def make_tokenizer(name, path):
    if name == "gemma3":
        return save_gemma_tokenizer(path)
    hf_tok = train_bpe(name)
    save_bpe_tokenizer(name, hf_tok, path)
    return AutoTokenizer.from_pretrained(path)


def stage_hf(name):
    path = os.path.join(HF_OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    tok = make_tokenizer(name, path)
    cfg = make_config(name, len(tok), tok)
    model = build_model(name, cfg)
    for p in model.parameters():  # F16 on disk for 2-D weights (exact), F32 for the rest
        if p.dim() == 2:
            p.data = p.data.half()
    model.save_pretrained(path, safe_serialization=True)
    return path


def load_hf(name):
    path = os.path.join(HF_OUT, name)
    tok = AutoTokenizer.from_pretrained(path)
    cls = MODEL_CLASSES[name]
    model = cls.from_pretrained(path, dtype=torch.float32).eval()
    return tok, model


def convert(name, outtype, llamacpp_src):
    out = os.path.join(OUT, f"{name}.{outtype}.gguf")
    cmd = [sys.executable, os.path.join(HERE, "convert_hf_family.py"),
           "--llamacpp-src", llamacpp_src, "--pre", CONVERTER_PRE.get(name, "-"), "--",
           os.path.join(HF_OUT, name), "--outtype", outtype, "--outfile", out]
    if name in MODEL_NAMES:
        cmd += ["--model-name", MODEL_NAMES[name]]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return out


def prompt_ids(tok):
    ids = tok(PROMPT_TEXT)["input_ids"][:PROMPT_LEN]
    assert len(ids) == PROMPT_LEN, (len(ids), PROMPT_LEN)
    return ids


def config_summary(model):
    c = model.config.to_dict()
    drop = {"architectures", "dtype", "transformers_version", "use_cache", "initializer_range",
            "output_attentions", "output_hidden_states", "return_dict", "torch_dtype"}
    return {k: v for k, v in sorted(c.items()) if k not in drop and v is not None}


def golden_entry(name, tok, model):
    ids = prompt_ids(tok)
    gold = logits_at(to_fp64(model), ids, POSITIONS)
    d32 = np.abs(logits_at(fresh_like(model, torch.float32), ids, POSITIONS) - gold)
    d64 = np.abs(logits_at(fresh_like(model, torch.float64), ids, POSITIONS) - gold)
    return {
        "hf_dir": f"hf/{name}",
        "seed": SEEDS[name],
        "hf_config": config_summary(model),
        "bos_added": bool(tok.bos_token_id is not None and ids[0] == tok.bos_token_id),
        "prompt_ids": ids,
        "positions": POSITIONS,
        "argmax": [int(np.argmax(r)) for r in gold],
        "top2_margin": [float(f"{np.sort(r)[-1] - np.sort(r)[-2]:.6g}") for r in gold],
        "fp32_max_abs_dev": float(f"{d32.max():.4g}"),
        "fp32_max_abs_dev_by_position": [float(f"{x:.4g}") for x in d32.max(axis=1)],
        "hf_unpatched_fp64_max_abs_dev": float(f"{d64.max():.4g}"),
        "logits": [[float(f"{v:.9g}") for v in row] for row in gold],
        "tokenizer": [{"text": t, "ids": tok(t, add_special_tokens=False)["input_ids"]}
                      for t in TOKENIZER_TEXTS + [CHAT_TEXTS[name]]],
    }


def write_json(doc, path):
    text = json.dumps(doc, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s+(-?[0-9][^\[\]{}\"]*?)\s+\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text)
    with open(path, "w") as f:
        f.write(text + "\n")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def stage_goldens(names):
    path = os.path.join(OUT, "goldens.json")
    doc = {}
    if os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
    doc.update({
        "generator": "scripts/goldens/gen_family_models.py (HF part), "
                     "scripts/goldens/run_family_llamacpp.py (llamacpp part)",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                     "numpy": np.__version__},
        "reference": "HF transformers in float64 (RMSNorm incl. Gemma's (1 + w), RoPE tables and "
                     "the attention softmax patched to float64); logits to 9 significant digits "
                     "at 'positions' of 'prompt_ids' (the prompt text's first ids from the "
                     "family's own tokenizer, BOS first where the tokenizer adds it)",
        "fp32_reference": "the same HF model in float32, unpatched, default attention (sdpa); "
                          "fp32_max_abs_dev = max |fp32 - golden| over the stored positions",
        "prompt_text": PROMPT_TEXT,
    })
    doc.setdefault("models", {})
    for name in names:
        tok, model = load_hf(name)
        entry = doc["models"].get(name, {})
        entry.update(golden_entry(name, tok, model))
        entry["gguf"] = {}
        for outtype in ("f16", "q8_0"):
            g = os.path.join(OUT, f"{name}.{outtype}.gguf")
            if os.path.exists(g):
                entry["gguf"][outtype] = {"file": os.path.basename(g), "sha256": sha256(g),
                                          "bytes": os.path.getsize(g)}
        doc["models"][name] = entry
        print(f"{name}: fp32 max |dev| {entry['fp32_max_abs_dev']:.3g}, unpatched fp64 "
              f"{entry['hf_unpatched_fp64_max_abs_dev']:.3g}", file=sys.stderr)
    doc["models"] = {k: doc["models"][k] for k in FAMILIES if k in doc["models"]}
    write_json(doc, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stage", choices=["all", "hf", "gguf", "goldens"], default="all")
    ap.add_argument("--only", nargs="*", default=FAMILIES, choices=FAMILIES)
    ap.add_argument("--llamacpp-src", default=DEFAULT_LLAMACPP_SRC,
                    help="llama.cpp source dir holding convert_hf_to_gguf.py and gguf-py")
    ap.add_argument("--describe", action="store_true",
                    help="print every metadata key and tensor of the GGUFs (writes nothing)")
    ap.add_argument("--verify", action="store_true",
                    help="recompute everything in a temporary copy and compare (writes nothing)")
    args = ap.parse_args()
    torch.set_num_threads(1)  # the same summation order on every machine
    if args.describe:
        for name in args.only:
            for outtype in ("f16", "q8_0"):
                path = os.path.join(OUT, f"{name}.{outtype}.gguf")
                print(f"== {os.path.relpath(path, REPO)}")
                print("\n".join(describe(path)))
        return
    if args.verify:
        sys.exit(verify(args))
    if args.stage in ("all", "hf"):
        for name in args.only:
            stage_hf(name)
    if args.stage in ("all", "gguf"):
        for name in args.only:
            for outtype in ("f16", "q8_0"):
                convert(name, outtype, args.llamacpp_src)
    if args.stage in ("all", "goldens"):
        stage_goldens(args.only)


def describe(path):
    """Every metadata key and tensor of a GGUF, as text (long arrays shortened)."""
    sys.path.insert(0, os.path.join(DEFAULT_LLAMACPP_SRC, "gguf-py"))
    import gguf
    r = gguf.GGUFReader(path)
    lines = []
    for key, f in r.fields.items():
        if key.startswith("GGUF."):
            continue
        v = f.contents()
        if isinstance(v, list) and len(v) > 8:
            v = f"[{len(v)} values: {', '.join(map(repr, v[:4]))}, ..., {', '.join(map(repr, v[-3:]))}]"
        else:
            v = repr(v)
        lines.append(f"{key} = {v}")
    for t in r.tensors:
        lines.append(f"tensor {t.name} {t.tensor_type.name} {[int(x) for x in t.shape]}")
    return lines


def verify(args):
    """Regenerates the HF directories and GGUFs in a temporary directory and compares them byte
    for byte with the committed ones, and recomputes the HF goldens (to 1e-8 relative)."""
    global OUT, HF_OUT
    import tempfile
    committed, committed_hf = OUT, HF_OUT
    with open(os.path.join(committed, "goldens.json")) as f:
        doc = json.load(f)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        OUT, HF_OUT = tmp, os.path.join(tmp, "hf")
        for name in args.only:
            stage_hf(name)
            files = sorted(os.listdir(os.path.join(HF_OUT, name)))
            same = files == sorted(os.listdir(os.path.join(committed_hf, name))) and all(
                sha256(os.path.join(HF_OUT, name, x)) == sha256(os.path.join(committed_hf, name, x))
                for x in files)
            ggufs = []
            for outtype in ("f16", "q8_0"):
                new = convert(name, outtype, args.llamacpp_src)
                ggufs.append(sha256(new) == sha256(os.path.join(committed, os.path.basename(new)))
                             == doc["models"][name]["gguf"][outtype]["sha256"])
            tok, model = load_hf(name)
            entry = doc["models"][name]
            ids_same = prompt_ids(tok) == entry["prompt_ids"]
            gold = np.array(entry["logits"])
            # the goldens hold 9 significant digits
            dev = float((np.abs(logits_at(to_fp64(model), entry["prompt_ids"], entry["positions"])
                                - gold) / np.maximum(1.0, np.abs(gold))).max())
            good = same and all(ggufs) and ids_same and dev < 1e-8
            ok &= good
            print(f"{name}: hf dir {'equal' if same else 'DIFFERS'}, GGUF f16/q8_0 "
                  f"{'equal' if all(ggufs) else 'DIFFER'}, prompt ids "
                  f"{'equal' if ids_same else 'DIFFER'}, max |logits - golden| / max(1, |golden|) "
                  f"{dev:.3g} -> "
                  f"{'ok' if good else 'FAIL'}")
    OUT, HF_OUT = committed, committed_hf
    return 0 if ok else 1


if __name__ == "__main__":
    main()
