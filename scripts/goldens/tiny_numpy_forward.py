#!/usr/bin/env python3
"""A float64 NumPy forward pass that reads only a GGUF: llama, phi2 and phi3.

Written from the GGUF's tensors and metadata and the architecture descriptions, not from HF code,
as a C++ model builder must work. gen_tiny_models.py --verify runs it on tests/data/tiny/*.gguf and
checks it against the HF goldens, so it shows that the GGUF alone (with the rules spelled out
here) determines the goldens. It is a reading aid too: each block is the whole math of one
architecture.

    python3 scripts/goldens/tiny_numpy_forward.py tests/data/tiny/phi3.gguf [--factors long] 1 403 407

prints the argmax of the logits at each position of the given token ids.
"""

import argparse
import math

import numpy as np

import gguf


class GgufModel:
    """Tensors as float64 arrays in row-major (out, in) order, and the metadata."""

    def __init__(self, path):
        r = gguf.GGUFReader(path)
        self.meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
        self.arch = self.meta["general.architecture"]
        # GGUF lists dims innermost first; the reader's arrays are already (rows, cols).
        self.t = {t.name: np.array(t.data, dtype=np.float64) for t in r.tensors}

    def key(self, name, default=None):
        return self.meta.get(f"{self.arch}.{name}", default)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def silu(x):
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def rope(x, n_rot, theta, neox, mscale=1.0):
    """x: (n_tokens, n_heads, head_dim); theta: (n_tokens, n_rot / 2) angles.
    neox: rotate pairs (i, i + n_rot/2) (phi2, phi3); else adjacent pairs (2i, 2i+1) (llama in
    GGUF, whose Q/K rows the converter permuted). Dims from n_rot on pass through."""
    cos = (np.cos(theta) * mscale)[:, None, :]
    sin = (np.sin(theta) * mscale)[:, None, :]
    out = x.copy()
    half = n_rot // 2
    if neox:
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    return out


def attention(q, k, v, window=0):
    """q: (n, n_head, d), k/v: (n, n_head_kv, d). Causal; with window > 0 query i also skips keys
    j <= i - window. Query head h reads kv head h // (n_head / n_head_kv)."""
    n, n_head, d = q.shape
    group = n_head // k.shape[1]
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = j <= i
    if window > 0:
        allowed &= j > i - window
    out = np.empty_like(q)
    for h in range(n_head):
        s = q[:, h, :] @ k[:, h // group, :].T / math.sqrt(d)  # (n, n)
        s = np.where(allowed, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        out[:, h, :] = p @ v[:, h // group, :]
    return out.reshape(n, n_head * d)


def forward(m, ids, factors="auto"):
    """Logits (n_tokens, n_vocab) for ids run from position 0 in one pass.
    phi3 factors: 'short', 'long', or 'auto' = long when len(ids) > the original context."""
    t = m.t
    n = len(ids)
    n_embd = m.key("embedding_length")
    n_head = m.key("attention.head_count")
    n_head_kv = m.key("attention.head_count_kv", n_head)
    d = n_embd // n_head
    n_rot = m.key("rope.dimension_count", d)
    base = m.key("rope.freq_base", 10000.0)
    pos = np.arange(n, dtype=np.float64)[:, None]
    inv_freq = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)  # (n_rot/2,)
    mscale = 1.0
    if m.arch == "phi3" and "rope_factors_long.weight" in t:
        orig = m.key("rope.scaling.original_context_length")
        use_long = factors == "long" or (factors == "auto" and n > orig)
        inv_freq = inv_freq / t["rope_factors_long.weight" if use_long else "rope_factors_short.weight"]
        mscale = m.key("rope.scaling.attn_factor", 1.0)
    theta = pos * inv_freq  # (n, n_rot/2)
    neox = m.arch in ("phi2", "phi3")

    x = t["token_embd.weight"][ids]  # (n, n_embd)
    for b in range(m.key("block_count")):
        p = f"blk.{b}."
        if m.arch == "phi2":
            eps = m.key("attention.layer_norm_epsilon")
            h = layer_norm(x, t[p + "attn_norm.weight"], t[p + "attn_norm.bias"], eps)
            q = h @ t[p + "attn_q.weight"].T + t[p + "attn_q.bias"]
            k = h @ t[p + "attn_k.weight"].T + t[p + "attn_k.bias"]
            v = h @ t[p + "attn_v.weight"].T + t[p + "attn_v.bias"]
        else:
            eps = m.key("attention.layer_norm_rms_epsilon")
            h = rms_norm(x, t[p + "attn_norm.weight"], eps)
            if m.arch == "phi3":
                qkv = h @ t[p + "attn_qkv.weight"].T  # rows [Q; K; V]
                q, k, v = np.split(qkv, [n_head * d, (n_head + n_head_kv) * d], axis=1)
            else:
                q, k, v = (h @ t[p + f"attn_{w}.weight"].T for w in "qkv")
        q = rope(q.reshape(n, n_head, d), n_rot, theta, neox, mscale)
        k = rope(k.reshape(n, n_head_kv, d), n_rot, theta, neox, mscale)
        a = attention(q, k, v.reshape(n, n_head_kv, d), m.key("attention.sliding_window", 0))
        a = a @ t[p + "attn_output.weight"].T
        if m.arch == "phi2":
            # Parallel block: the MLP reads the same normed input as attention.
            a = a + t[p + "attn_output.bias"]
            f = gelu_tanh(h @ t[p + "ffn_up.weight"].T + t[p + "ffn_up.bias"])
            x = x + a + f @ t[p + "ffn_down.weight"].T + t[p + "ffn_down.bias"]
            continue
        x = x + a
        h = rms_norm(x, t[p + "ffn_norm.weight"], eps)
        if m.arch == "phi3":
            gate, up = np.split(h @ t[p + "ffn_up.weight"].T, 2, axis=1)  # rows [gate; up]
        else:
            gate, up = h @ t[p + "ffn_gate.weight"].T, h @ t[p + "ffn_up.weight"].T
        x = x + (silu(gate) * up) @ t[p + "ffn_down.weight"].T

    if m.arch == "phi2":
        x = layer_norm(x, t["output_norm.weight"], t["output_norm.bias"],
                       m.key("attention.layer_norm_epsilon"))
        return x @ t["output.weight"].T + t["output.bias"]
    x = rms_norm(x, t["output_norm.weight"], m.key("attention.layer_norm_rms_epsilon"))
    return x @ t["output.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("--factors", default="auto", choices=["auto", "short", "long"])
    ap.add_argument("ids", type=int, nargs="+")
    args = ap.parse_args()
    logits = forward(GgufModel(args.gguf), args.ids, args.factors)
    print(" ".join(str(int(i)) for i in logits.argmax(-1)))


if __name__ == "__main__":
    main()
