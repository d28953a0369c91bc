#!/usr/bin/env python3
"""PEFT LoRA adapters of the tiny llama and Phi-3, written by PEFT itself, and their logits.

Rerun (from the repo root; ~30 s on the 2-core machine, most of it importing torch):

    pip install "torch==2.13.0+cpu" transformers==5.23.0 peft==0.21.2 safetensors==0.8.0 \
        tokenizers==0.23.3 gguf==0.19.0 sentencepiece==0.2.3 numpy==2.4.6
    python3 scripts/goldens/gen_peft_adapters.py   # writes tests/data/peft/{llama,phi3,llama_embed}/,
                                                   # tests/data/peft/goldens.json
    # check `lilims convert`'s GGUF adapters against the goldens (writes nothing):
    for a in llama phi3 llama_embed; do b=${a%_embed}; build/lilims convert tests/data/peft/$a \
        /tmp/peft/$a.gguf --base tests/data/tiny/$b.gguf; done
    python3 scripts/goldens/gen_peft_adapters.py --check-gguf /tmp/peft

Pinned versions: torch 2.13.0+cpu (the CPU-only wheel; pip must pick the "+cpu" build, so name
it), transformers 5.23.0, peft 0.21.2, safetensors 0.8.0; gen_tiny_models.py's imports want
gguf 0.19.0, sentencepiece 0.2.3, numpy 2.4.6. A rerun with these writes the same bytes (checked);
another torch may draw PEFT's seeded lora_A initialisation differently.

The adapters (r = 4, lora_alpha = 8, so PEFT's scale alpha / r = 2; dropout 0, bias "none"):
- llama/: LlamaForCausalLM from tests/data/hf/llama, target_modules q_proj, k_proj, v_proj,
  o_proj, gate_proj, up_proj, down_proj (every linear projection of the blocks).
- phi3/: Phi3ForCausalLM from tests/data/hf/phi3, target_modules qkv_proj, o_proj, gate_up_proj,
  down_proj (the fused projections of HF's Phi-3).
- llama_embed/: the llama with target_modules embed_tokens, lm_head: PEFT's Embedding LoRA
  (lora_embedding_A (r, vocab), lora_embedding_B (hidden, r)) and the LM head.
Each is get_peft_model(model, LoraConfig(...)) after torch.manual_seed(seed), so lora_A (and
lora_embedding_B) keep PEFT's own seeded initialisation; the factor PEFT initialises to zero
(lora_B, lora_embedding_A: the adapter starts as a no-op) gets seeded N(0, ZERO_INIT_STD^2)
values, else the adapter would change nothing. Saved by save_pretrained (adapter_config.json and
adapter_model.safetensors, F32: the model is loaded in float32), base_model_name_or_path set to
the repo-relative tests/data/hf/<arch> path.

goldens.json: the logits of the last position of the first N_TOKENS ids of
tests/data/tiny/goldens.json's prompt, for the base model alone and with the adapter, from
HF transformers + PEFT in float64 (gen_tiny_models.to_fp64: RMSNorm, RoPE tables and softmax in
float64; the PEFT model is the saved adapter loaded back with PeftModel.from_pretrained, not
merged). The base model is gen_tiny_models.build_model(arch): exactly the weights of
tests/data/tiny/<arch>.gguf, the file a runtime applies the converted adapter to. (For llama
these are also the weights of tests/data/hf/llama; tests/data/hf/phi3 holds them rounded to
BF16, which does not matter for the adapter's own values.) Phi-3 is stored with the short and
with the long LongRoPE factors (tests/data/tiny/SOURCE.md says why). Per case also:
fp32_max_abs_dev, how far the same PEFT run in float32 is from the golden (for tolerances), and
lora_max_abs_effect, max |logits with adapter - base logits| (what a test that forgets the
adapter would miss by).

--check-gguf DIR reads DIR/<adapter>.gguf, GGUF LoRA adapters as `lilims convert` writes them,
adds scale * B A to each adapted weight of the base GGUF as llama.cpp applies an adapter
(scale = adapter.lora.alpha / rank; W (n_out, n_in) += scale * lora_b @ lora_a, and for
token_embd (vocab, dim) += scale * lora_a @ lora_b^T, since llama.cpp gathers rows of lora_a by
token), runs tiny_numpy_forward.py (float64 NumPy, reads only GGUFs) and compares with the
goldens: a check of the converter's names, layouts, llama's Q/K row order and alpha that shares
no code with it or with PEFT. Exit status 1 when a logit is more than 1e-6 away.
"""

import argparse
import json
import os
import shutil
import sys

import numpy as np
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tiny_models as tiny  # noqa: E402

REPO = tiny.REPO
OUT = os.path.join(REPO, "tests", "data", "peft")
RANK = 4
ALPHA = 8
ZERO_INIT_STD = 0.05
N_TOKENS = 7
ADAPTERS = {
    "llama": {"hf": "llama", "seed": 9201,
              "targets": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                          "down_proj"]},
    "phi3": {"hf": "phi3", "seed": 9203,
             "targets": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"]},
    "llama_embed": {"hf": "llama", "seed": 9202, "targets": ["embed_tokens", "lm_head"]},
}


def make_adapter(name, spec):
    hf_rel = os.path.join("tests", "data", "hf", spec["hf"])
    model = AutoModelForCausalLM.from_pretrained(os.path.join(REPO, hf_rel), dtype=torch.float32)
    torch.manual_seed(spec["seed"])
    cfg = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, bias="none",
                     target_modules=spec["targets"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for pname, p in peft_model.named_parameters():
            if "lora_" in pname and not p.any():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32) * ZERO_INIT_STD)
    peft_model.peft_config["default"].base_model_name_or_path = hf_rel
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    peft_model.save_pretrained(path, safe_serialization=True)
    # The model card PEFT writes names no weights and carries no test data.
    readme = os.path.join(path, "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    # PEFT keeps target_modules as a set: sorted here, written as PEFT writes the file, so that
    # a rerun gives the same bytes whatever the string hash seed.
    cfg_path = os.path.join(path, "adapter_config.json")
    with open(cfg_path) as f:
        saved = json.load(f)
    saved["target_modules"] = sorted(saved["target_modules"])
    with open(cfg_path, "w") as f:
        f.write(json.dumps(saved, indent=2, sort_keys=True))
    return path


def with_adapter(base, path, dtype):
    m = PeftModel.from_pretrained(base, path).to(dtype).eval()
    return m


def golden_cases(arch, path, ids):
    out = []
    for factors in (["short", "long"] if arch == "phi3" else ["auto"]):
        pos = [N_TOKENS - 1]
        base = tiny.build_model(arch)
        base_gold = tiny.logits_at(tiny.to_fp64(base, factors), ids[:N_TOKENS], pos)
        lora_gold = tiny.logits_at(with_adapter(tiny.to_fp64(base, factors), path, torch.float64),
                                   ids[:N_TOKENS], pos)
        m32 = tiny.fresh_like(base, torch.float32)
        if factors == "long":
            tiny.force_hf_long_factors(m32)
        lora32 = tiny.logits_at(with_adapter(m32, path, torch.float32), ids[:N_TOKENS], pos)
        out.append({
            "n_tokens": N_TOKENS,
            "rope_factors": None if factors == "auto" else factors,
            "positions": pos,
            "fp32_max_abs_dev": float(np.abs(lora32 - lora_gold).max()),
            "lora_max_abs_effect": float(np.abs(lora_gold - base_gold).max()),
            "argmax": [int(np.argmax(row)) for row in lora_gold],
            "base_argmax": [int(np.argmax(row)) for row in base_gold],
            "logits": [[float(f"{v:.9g}") for v in row] for row in lora_gold],
            "base_logits": [[float(f"{v:.9g}") for v in row] for row in base_gold],
        })
    return out


def check_gguf(gguf_dir):
    import gguf
    import tiny_numpy_forward as tnf
    with open(os.path.join(OUT, "goldens.json")) as f:
        doc = json.load(f)
    ids = doc["token_ids"]
    worst = 0.0
    for name, a in doc["adapters"].items():
        reader = gguf.GGUFReader(os.path.join(gguf_dir, name + ".gguf"))
        alpha = float(reader.fields["adapter.lora.alpha"].contents())
        lora = {t.name: np.array(t.data, dtype=np.float64) for t in reader.tensors}
        for c in a["cases"]:
            m = tnf.GgufModel(os.path.join(REPO, a["base_gguf"]))
            n_adapted = 0
            for w in list(m.t):
                if w + ".lora_a" not in lora:
                    continue
                la, lb = lora[w + ".lora_a"], lora[w + ".lora_b"]  # numpy (rows, cols) = GGUF ne reversed
                n_adapted += 1
                if w == "token_embd.weight":
                    m.t[w] = m.t[w] + alpha / la.shape[1] * (la @ lb.T)
                else:
                    m.t[w] = m.t[w] + alpha / la.shape[0] * (lb @ la)
            assert 2 * n_adapted == len(lora), (name, n_adapted, len(lora))
            got = tnf.forward(m, ids, c["rope_factors"] or "auto")[c["positions"]]
            dev = float(np.abs(got - np.array(c["logits"])).max())
            worst = max(worst, dev)
            print(f"{name} {c['rope_factors']}: max |logit - golden| {dev:.3g} "
                  f"({n_adapted} weights adapted)")
    return 0 if worst <= 1e-6 else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check-gguf", metavar="DIR",
                    help="check converted GGUF adapters DIR/<adapter>.gguf, write nothing")
    args = ap.parse_args()
    if args.check_gguf:
        sys.exit(check_gguf(args.check_gguf))
    torch.set_num_threads(1)
    with open(os.path.join(REPO, "tests", "data", "tiny", "goldens.json")) as f:
        ids = json.load(f)["prompt"]["token_ids"]
    adapters = {}
    for name, spec in ADAPTERS.items():
        path = make_adapter(name, spec)
        arch = spec["hf"]
        adapters[name] = {
            "dir": f"tests/data/peft/{name}",
            "base_gguf": f"tests/data/tiny/{arch}.gguf",
            "target_modules": spec["targets"],
            "r": RANK, "lora_alpha": ALPHA, "scale": ALPHA / RANK,
            "cases": golden_cases(arch, path, ids),
        }
    doc = {
        "generator": "scripts/goldens/gen_peft_adapters.py",
        "reference": "HF transformers + PEFT (adapter loaded unmerged) in float64 "
                     "(gen_tiny_models.to_fp64) on the weights of base_gguf",
        "prompt": f"tests/data/tiny/goldens.json prompt.token_ids[:{N_TOKENS}]",
        "token_ids": ids[:N_TOKENS],
        "adapters": adapters,
    }
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for root, _, files in sorted(os.walk(OUT)):
        for name in sorted(files):
            p = os.path.join(root, name)
            print(f"{os.path.relpath(p, REPO)}: {os.path.getsize(p)} bytes", file=sys.stderr)
    for name, a in adapters.items():
        for c in a["cases"]:
            print(f"{name} {c['rope_factors']}: effect {c['lora_max_abs_effect']:.3g}, "
                  f"fp32 dev {c['fp32_max_abs_dev']:.3g}, argmax {c['argmax']} "
                  f"(base {c['base_argmax']})", file=sys.stderr)


if __name__ == "__main__":
    main()
