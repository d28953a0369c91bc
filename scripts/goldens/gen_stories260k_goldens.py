#!/usr/bin/env python3
"""Greedy decode of stories260K from BOS with llama.cpp, compared with llama2.c.

Rerun (from the repo root; a few seconds):
    pip install llama-cpp-python==0.3.36
    python3 scripts/goldens/gen_stories260k_goldens.py \
        [--model /work/shared/data/stories260K/stories260K.gguf] \
        [--reference /work/shared/data/stories260K/derived_greedy_token_ids.txt] \
        [--out tests/data/stories260k_llamacpp_goldens.json]

Feeds BOS (token 1), then one token at a time, taking the argmax each step, for
200 generated tokens (positions 0..199 produce them). Records the top-5
(id, logit) of the first 32 positions and all greedy ids, and compares the ids
with llama2.c's (derived_greedy_token_ids.txt: BOS then 200 argmax ids). It runs
twice: with llama.cpp's default F16 KV cache (the recorded golden) and with an
F32 KV cache (reported as a cross-check).
"""

import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _llamacpp_common import f32, row_stats, runtime_info, sha256_file, topk  # noqa: E402

import llama_cpp  # noqa: E402

MODEL_SHA256_PREFIX = "270cba1bd5109f42"
N_GEN = 200
N_TOP_POS = 32
TOP_K = 5
BOS = 1
GGML_TYPE_F32 = 0
GGML_TYPE_F16 = 1


def run(model, kv_type):
    llm = llama_cpp.Llama(
        model_path=model, n_ctx=512, n_batch=512, n_ubatch=512, n_threads=2,
        n_threads_batch=2, seed=1234, logits_all=True, flash_attn=False,
        type_k=kv_type, type_v=kv_type, verbose=False)
    llm.reset()
    tok = BOS
    ids, rows = [], []
    for pos in range(N_GEN):
        llm.eval([tok])
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32, copy=True)
        rows.append(row)
        tok = int(np.argmax(row))
        ids.append(tok)
    return llm, ids, rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="/work/shared/data/stories260K/stories260K.gguf")
    ap.add_argument("--reference",
                    default="/work/shared/data/stories260K/derived_greedy_token_ids.txt")
    ap.add_argument("--out", default="tests/data/stories260k_llamacpp_goldens.json")
    args = ap.parse_args()

    sha = sha256_file(args.model)
    if not sha.startswith(MODEL_SHA256_PREFIX):
        sys.exit(f"model sha256 {sha} does not start with {MODEL_SHA256_PREFIX}")

    with open(args.reference) as f:
        ref = [int(x) for x in f.read().split()]
    assert ref[0] == BOS and len(ref) == N_GEN + 1, len(ref)
    ref_ids = ref[1:]

    llm, ids, rows = run(args.model, GGML_TYPE_F16)
    _, ids32, rows32 = run(args.model, GGML_TYPE_F32)

    def first_mismatch(a, b):
        return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)

    mm = first_mismatch(ids, ref_ids)
    mm32 = first_mismatch(ids32, ref_ids)
    max_diff_kv = float(max(np.abs(a - b).max() for a, b in zip(rows, rows32)))
    margins = [float(np.sort(r)[-1] - np.sort(r)[-2]) for r in rows]
    print(f"F16 KV: matches llama2.c: {mm is None} (first mismatch {mm}); "
          f"F32 KV: {mm32 is None} (first mismatch {mm32}); "
          f"max |logit(F16 KV) - logit(F32 KV)| = {max_diff_kv:.3g}; "
          f"min top-2 margin {min(margins):.4f}", file=sys.stderr)

    out = {
        "description": (
            "stories260K (llama2.c tinyllamas model, F32 GGUF) run by llama.cpp: "
            "BOS (1) at position 0, then greedy argmax one token at a time. "
            "greedy_ids[i] is the argmax of the logits at position i (position 0 "
            "holds BOS), i.e. the token placed at position i+1. positions[i] gives "
            "the top-5 (id, logit) (logit descending, ties by id) and max/min/mean/"
            "std of the logits at position i, for i < 32."),
        "model": {
            "file": "stories260K.gguf",
            "sha256": sha,
            "source": "/work/shared/data/stories260K/stories260K.gguf (see shared/data/SOURCES.md)",
        },
        "run": {
            "tool": "llama-cpp-python Llama() API (scripts/goldens/gen_stories260k_goldens.py)",
            "n_ctx": 512, "n_batch": 512, "n_threads": 2, "seed": 1234,
            "logits_all": True, "flash_attn": False,
            "kv_cache": "F16 (llama.cpp default) for the recorded logits and ids",
            "eval": "one llama_decode per token, starting from BOS only",
            "numerics_note": "all weights are F32, so llama.cpp does F32 dot products "
                             "(no activation quantization) here; the F16 KV cache is "
                             "the only reduced-precision step.",
        },
        "llama_cpp": runtime_info(llama_cpp),
        "bos": BOS,
        "n_generated": N_GEN,
        "greedy_ids": ids,
        "greedy_text": llm.detokenize(ids).decode("utf-8", "replace"),
        "min_top2_margin": f32(min(margins)),
        "positions": [{"pos": i, "top": topk(rows[i], TOP_K), **row_stats(rows[i])}
                      for i in range(N_TOP_POS)],
        "comparison_with_llama2c": {
            "reference": "shared/data/stories260K/derived_greedy_token_ids.txt "
                         "(decodes to llama2.c's expected_stdout_test_all.txt)",
            "matches_f16_kv": mm is None,
            "first_mismatch_index_f16_kv": mm,
            "matches_f32_kv": mm32 is None,
            "first_mismatch_index_f32_kv": mm32,
            "max_abs_logit_diff_f16_vs_f32_kv": f32(max_diff_kv),
        },
    }
    with open(args.out, "w") as f:
        json.dump(out, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {args.out} ({os.path.getsize(args.out)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
