#!/usr/bin/env python3
"""Hugging Face model directories of the tiny random llama, Phi-2 and Phi-3, for `lilims convert`.

Rerun (from the repo root; pip install -r scripts/goldens/requirements-tiny-models.txt; ~10 s):

    python3 scripts/goldens/gen_hf_dirs.py     # writes tests/data/hf/{llama,phi2,phi3}/, goldens.json

The models are gen_tiny_models.build_model(arch): the same seeds, hence the same weights as
tests/data/tiny/*.gguf, saved with save_pretrained (safetensors):
- llama: one model.safetensors; 2-D weights F16 (they are F16 values already), 1-D weights F32,
  so the file holds exactly the model of tests/data/tiny/llama.gguf and of its goldens.
- phi2: the same dtypes, sharded (max_shard_size 100kB: several files and
  model.safetensors.index.json).
- phi3: every weight rounded to BF16 (norms too), one file. Its logits differ from the tiny
  goldens, so this script computes them: HF transformers in float64 (gen_tiny_models.to_fp64) on
  the BF16 values, for the tiny goldens' prompt.

The tokenizer is the same in all three: a byte-level BPE of 512 tokens (the models' vocabulary)
trained with the `tokenizers` package on tests/data/ppl_text.txt, with the pre-tokenizer of
SmolLM2 (digits split one by one, then GPT-2's byte-level regex), three special tokens
(<|endoftext|>, <|im_start|>, <|im_end|>) and a ChatML chat template. goldens.json holds the ids
HF's tokenizer gives for a few strings.
"""

import json
import os
import shutil
import sys

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_tiny_models as tiny  # noqa: E402

REPO = tiny.REPO
OUT = os.path.join(REPO, "tests", "data", "hf")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + "
                 "message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
                 "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
TOKENIZER_TEXTS = [
    "Once upon a time, there was a little fox named Pip.",
    "The GNU General Public License, version 3 (29 June 2007).",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "Digits 1234567 and 3.14159; caf\u00e9 na\u00efve \u65e5\u672c",
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
]
PHI3_CASES = [(20, [0, 15, 16, 19]), (40, [0, 16, 39])]  # (n_tokens, positions)


def train_tokenizer():
    with open(os.path.join(REPO, "tests", "data", "ppl_text.txt"), encoding="utf-8") as f:
        text = f.read()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=tiny.VOCAB, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator([text], trainer=trainer)
    assert tok.get_vocab_size() == tiny.VOCAB, tok.get_vocab_size()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|im_start|>",
                                   eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   unk_token=None, chat_template=CHAT_TEMPLATE)


def mixed_f16(model):
    """2-D weights stored as F16 (exact: build_model rounded them), 1-D ones kept F32."""
    for p in model.parameters():
        if p.dim() == 2:
            p.data = p.data.half()
    return model


def save(model, hf_tok, name, **kw):
    path = os.path.join(OUT, name)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, safe_serialization=True, **kw)
    hf_tok.save_pretrained(path)
    return path


def main():
    torch.set_num_threads(1)
    hf_tok = train_tokenizer()
    with open(os.path.join(REPO, "tests", "data", "tiny", "goldens.json")) as f:
        ids = json.load(f)["prompt"]["token_ids"]

    save(mixed_f16(tiny.build_model("llama")), hf_tok, "llama")
    save(mixed_f16(tiny.build_model("phi2")), hf_tok, "phi2", max_shard_size="100kB")
    phi3 = tiny.build_model("phi3").to(torch.bfloat16)
    save(phi3, hf_tok, "phi3")

    ref = tiny.fresh_like(phi3, torch.float32)  # the BF16 values, widened exactly
    cases = []
    for n, positions in PHI3_CASES:
        gold = tiny.logits_at(tiny.to_fp64(ref, "auto"), ids[:n], positions)
        cases.append({"n_tokens": n, "rope_factors": "short" if n <= tiny.PHI3_ORIG_CTX else "long",
                      "positions": positions,
                      "logits": [[float(f"{v:.9g}") for v in row] for row in gold]})
    doc = {
        "generator": "scripts/goldens/gen_hf_dirs.py",
        "prompt": "tests/data/tiny/goldens.json prompt.token_ids; a case runs its first n_tokens",
        "phi3_bf16": {"reference": "HF transformers float64 (gen_tiny_models.to_fp64) on the "
                                   "BF16 weights of tests/data/hf/phi3", "cases": cases},
        "tokenizer": [{"text": t, "ids": hf_tok(t, add_special_tokens=False)["input_ids"]}
                      for t in TOKENIZER_TEXTS],
        "chat_template": CHAT_TEMPLATE,
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
    }
    with open(os.path.join(OUT, "goldens.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    for root, _, files in sorted(os.walk(OUT)):
        for name in sorted(files):
            p = os.path.join(root, name)
            print(f"{os.path.relpath(p, REPO)}: {os.path.getsize(p)} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
