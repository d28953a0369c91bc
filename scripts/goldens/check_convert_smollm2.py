#!/usr/bin/env python3
"""`lilims convert HF_DIR` at the scale of a real model, without downloading one (prints only).

Rebuilds a Hugging Face directory from the SmolLM2-135M-Instruct GGUF lilims uses
(~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf, scripts/fetch_model.sh): every tensor
dequantized with the gguf package and rounded to F16, attn_q/attn_k put back in HF's row order
(gen_tiny_models.llama_unpermute), config.json from the GGUF's metadata, and a tokenizer.json with
its vocabulary, merges, special tokens and SmolLM2's pre-tokenizer; tied embeddings (no
lm_head.weight), as SmolLM2's checkpoint has. Then runs `lilims convert DIR OUT.gguf --type F16`
and checks: every llama.* and tokenizer.* key equals the original's (llama.cpp's converter also
writes tokenizer.ggml.add_space_prefix false for this model, a key byte-level BPE does not use:
reported, not counted); every tensor of the output is byte for byte the one `lilims quantize
MODEL F16` writes (the same F16 values of the dequantized weights, so the Q/K permutation at
head_dim 64 with 9 query and 3 kv heads is llama.cpp's); `lilims tokenize` gives the original's ids
and greedy `lilims run` the F16 file's text.

    python3 scripts/goldens/check_convert_smollm2.py [--lilims build/lilims] [--work /tmp/x]

Needs numpy, gguf and safetensors (requirements-tiny-models.txt plus safetensors).
"""

import argparse
import json
import os
import subprocess
import sys

import numpy as np
from safetensors.numpy import save_file

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_tiny_models import llama_unpermute  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.path.expanduser("~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf")
LAYER = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
         "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
         "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj",
         "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
TOP = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
       "output.weight": "lm_head.weight"}


def fields(reader):
    return {f.name: f.contents() for f in reader.fields.values()}


def values(t):
    a = gguf.quants.dequantize(t.data, t.tensor_type)
    return np.asarray(a, dtype=np.float32).reshape([int(x) for x in reversed(t.shape)])


def hf_name(name):
    if name in TOP:
        return TOP[name]
    _, layer, kind, suffix = name.split(".")
    return f"model.layers.{layer}.{LAYER[kind]}.{suffix}"


def build_dir(reader, meta, out):
    os.makedirs(out, exist_ok=True)
    n_head, n_kv = meta["llama.attention.head_count"], meta["llama.attention.head_count_kv"]
    state = {}
    for t in reader.tensors:
        a = values(t)
        if ".attn_q." in t.name:
            a = llama_unpermute(a, n_head)
        elif ".attn_k." in t.name:
            a = llama_unpermute(a, n_kv)
        state[hf_name(t.name)] = a.astype(np.float16) if a.ndim == 2 else a
    save_file(state, os.path.join(out, "model.safetensors"))
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
           "hidden_size": meta["llama.embedding_length"],
           "intermediate_size": meta["llama.feed_forward_length"],
           "num_hidden_layers": meta["llama.block_count"], "num_attention_heads": n_head,
           "num_key_value_heads": n_kv, "max_position_embeddings": meta["llama.context_length"],
           "rms_norm_eps": float(np.float32(meta["llama.attention.layer_norm_rms_epsilon"])),
           "rope_theta": meta["llama.rope.freq_base"], "rope_scaling": None,
           "vocab_size": meta["llama.vocab_size"], "tie_word_embeddings": True,
           "bos_token_id": meta["tokenizer.ggml.bos_token_id"],
           "eos_token_id": meta["tokenizer.ggml.eos_token_id"]}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    added = [{"id": i, "content": tok, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": types[i] == 3}
             for i, tok in enumerate(tokens) if types[i] in (3, 4)]
    tj = {"version": "1.0", "added_tokens": added, "normalizer": None,
          "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
              {"type": "Digits", "individual_digits": True},
              {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
               "use_regex": True}]},
          "post_processor": None, "decoder": {"type": "ByteLevel"},
          "model": {"type": "BPE", "dropout": None, "unk_token": None,
                    "continuing_subword_prefix": None, "end_of_word_suffix": None,
                    "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                    "vocab": {tok: i for i, tok in enumerate(tokens)},
                    "merges": meta["tokenizer.ggml.merges"]}}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tj, f, ensure_ascii=False)
    name = lambda k: tokens[meta[k]]  # noqa: E731
    tc = {"bos_token": name("tokenizer.ggml.bos_token_id"),
          "eos_token": name("tokenizer.ggml.eos_token_id"),
          "pad_token": name("tokenizer.ggml.padding_token_id"),
          "unk_token": name("tokenizer.ggml.unknown_token_id"),
          "add_bos_token": meta["tokenizer.ggml.add_bos_token"],
          "chat_template": meta["tokenizer.chat_template"]}
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(tc, f, indent=1)


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lilims", default=os.path.join(REPO, "build", "lilims"))
    ap.add_argument("--work", default="/tmp/lilims_convert_smollm2")
    args = ap.parse_args()
    orig = gguf.GGUFReader(MODEL)
    meta = fields(orig)
    hf_dir, out = os.path.join(args.work, "hf"), os.path.join(args.work, "converted.gguf")
    build_dir(orig, meta, hf_dir)
    subprocess.run([args.lilims, "convert", hf_dir, out, "--type", "F16"], check=True)
    conv = gguf.GGUFReader(out)
    cmeta = fields(conv)
    ok = True
    for k, v in meta.items():
        if (k.startswith("llama.") or k.startswith("tokenizer.")) and cmeta.get(k) != v:
            print(f"key {k}: {str(cmeta.get(k))[:60]} != {str(v)[:60]}")
            ok &= k == "tokenizer.ggml.add_space_prefix"
    ref = os.path.join(args.work, "quantized_f16.gguf")
    subprocess.run([args.lilims, "quantize", MODEL, ref, "F16", "--no-progress"], check=True)
    rtensors = {t.name: t for t in gguf.GGUFReader(ref).tensors}
    names = sorted(t.name for t in conv.tensors)
    if names != sorted(rtensors):
        print("tensor names differ:", set(names) ^ set(rtensors))
        ok = False
    differ = [t.name for t in conv.tensors if t.name in rtensors and not (
        t.tensor_type == rtensors[t.name].tensor_type and
        np.array_equal(np.asarray(t.data).view(np.uint8),
                       np.asarray(rtensors[t.name].data).view(np.uint8)))]
    print(f"{len(names)} tensors; byte-equal to `lilims quantize MODEL F16`: "
          f"{len(names) - len(differ)}; differ: {differ[:5]}")
    ok &= not differ
    text = "Digits 12345, caf\u00e9 <|im_start|>user\nHi!<|im_end|>"
    tk = [run([args.lilims, "tokenize", "-m", m, "--ids", text]) for m in (MODEL, out)]
    print("tokenize:", "same" if tk[0] == tk[1] else f"DIFFER {tk}")
    ok &= tk[0] == tk[1]
    gen = [run([args.lilims, "run", "-m", m, "-p", "What is the capital of France?", "-n", "24",
                "--temp", "0", "-t", "1", "-q"]) for m in (ref, out)]
    print("greedy run:", "same" if gen[0] == gen[1] else "DIFFER", repr(gen[0]), repr(gen[1]))
    ok &= gen[0] == gen[1]
    print("ok" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
