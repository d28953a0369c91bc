#!/usr/bin/env python3
"""Cross-check tests/data/smollm2_llamacpp_goldens.json against a plain NumPy forward pass.

Rerun (from the repo root; ~1-2 min, needs the `gguf` and `numpy` PyPI packages):
    python3 scripts/goldens/numpy_reference_check.py [--simulate-q8] \
        [--model ~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--goldens tests/data/smollm2_llamacpp_goldens.json]

Dequantizes every tensor with gguf.quants (Q4_1/Q8_0 -> float), runs the llama
forward pass in float64 over each golden prompt (RMSNorm eps 1e-5, RoPE on
adjacent pairs with theta 1e5, GQA 9/3 heads, SwiGLU, tied Q8_0 output head) and
prints how far llama.cpp's recorded top-20 logits are from it and how often the
argmax agrees. With --simulate-q8 it also rounds matmul inputs to Q8 blocks of
32 (scale amax/127 in fp16) and Q/K/V to fp16, mimicking llama.cpp's CPU path.
It only prints; nothing is written. It tells how tight a tolerance against the
llama.cpp goldens can be.
"""
import argparse
import json
import os

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

E, H, KV, HD, L, EPS, THETA = 576, 9, 3, 64, 30, 1e-5, 100000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--goldens", default="tests/data/smollm2_llamacpp_goldens.json")
    ap.add_argument("--simulate-q8", action="store_true")
    args = ap.parse_args()

    W = {}
    for t in GGUFReader(args.model).tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        W[t.name] = a.reshape([int(x) for x in reversed(t.shape)]) if len(t.shape) > 1 else a.reshape(-1)

    sim = args.simulate_q8

    def q8(h):
        if not sim:
            return h
        sh = h.shape
        b = h.reshape(-1, 32).astype(np.float32)
        d = np.abs(b).max(1, keepdims=True) / 127.0
        q = np.round(np.where(d > 0, b / np.where(d > 0, d, 1), 0))
        return (q * d.astype(np.float16).astype(np.float32)).reshape(sh).astype(np.float64)

    def f16(a):
        return a.astype(np.float16).astype(np.float64) if sim else a

    def rms(x, w):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + EPS) * w

    def rope(x, pos):
        i = np.arange(HD // 2)
        ang = pos[:, None] * THETA ** (-2 * i / HD)[None, :]
        c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        out = np.empty_like(x)
        out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
        out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
        return out

    def fwd(ids):
        x = W["token_embd.weight"][ids].astype(np.float64)
        T = len(ids)
        pos = np.arange(T, dtype=np.float64)
        mask = np.triu(np.full((T, T), -np.inf), 1)[None]
        for layer in range(L):
            p = f"blk.{layer}."
            h = q8(rms(x, W[p + "attn_norm.weight"]))
            q = (h @ W[p + "attn_q.weight"].T).reshape(T, H, HD)
            k = (h @ W[p + "attn_k.weight"].T).reshape(T, KV, HD)
            v = (h @ W[p + "attn_v.weight"].T).reshape(T, KV, HD)
            q, k, v = f16(rope(q, pos)), f16(rope(k, pos)), f16(v)
            k, v = np.repeat(k, H // KV, axis=1), np.repeat(v, H // KV, axis=1)
            att = np.einsum("thd,shd->hts", q, k) / np.sqrt(HD) + mask
            att = np.exp(att - att.max(-1, keepdims=True))
            att /= att.sum(-1, keepdims=True)
            o = q8(np.einsum("hts,shd->thd", att, v).reshape(T, H * HD))
            x = x + o @ W[p + "attn_output.weight"].T
            h = q8(rms(x, W[p + "ffn_norm.weight"]))
            g, u = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
            x = x + q8((g / (1 + np.exp(-g))) * u) @ W[p + "ffn_down.weight"].T
        return q8(rms(x, W["output_norm.weight"])) @ W["token_embd.weight"].T

    golden = json.load(open(args.goldens))
    for pr in golden["prompts"]:
        ids = pr["token_ids"]
        lg = fwd(ids)
        diffs, agree = [], 0
        for p, pos in enumerate(pr["positions"]):
            got = np.array([v for _, v in pos["top"]])
            ref = np.array([lg[p, i] for i, _ in pos["top"]])
            diffs.append(np.abs(ref - got).max())
            agree += int(np.argmax(lg[p])) == pos["top"][0][0]
        last = np.argsort(-lg[-1])[:3]
        print(f"{pr['name']}: top-20 |numpy - llama.cpp| max {max(diffs):.3f} mean "
              f"{np.mean(diffs):.3f}; argmax agrees at {agree}/{len(ids)} positions; "
              f"numpy last-position top-3 {list(zip(last.tolist(), np.round(lg[-1][last], 3).tolist()))}, "
              f"llama.cpp {pr['positions'][-1]['top'][:3]}")


if __name__ == "__main__":
    main()
