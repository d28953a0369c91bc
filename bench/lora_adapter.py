#!/usr/bin/env python3
"""Writes a seeded random LoRA adapter for a base GGUF, in llama.cpp's GGUF
adapter format, on every 2-D blk.* weight (all seven projections of every
layer), for `lilims bench --lora` (bench/README.md, "LoRA adapters").

    pip install gguf==0.19.0 numpy
    python3 bench/lora_adapter.py BASE.gguf OUT.gguf [--rank 16] [--alpha 32] [--b-scale 0.001]
"""
import argparse

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32.0)
    ap.add_argument("--b-scale", type=float, default=0.001)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    r = gguf.GGUFReader(a.base)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    w = gguf.GGUFWriter(a.out, arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", a.alpha)
    rng = np.random.default_rng(a.seed)
    for t in r.tensors:
        if not t.name.startswith("blk.") or len(t.shape) != 2:
            continue
        n_in, n_out = int(t.shape[0]), int(t.shape[1])
        w.add_tensor(t.name + ".lora_a", (rng.standard_normal((a.rank, n_in)) / np.sqrt(n_in)).astype(np.float32))
        w.add_tensor(t.name + ".lora_b", (rng.standard_normal((n_out, a.rank)) * a.b_scale).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


if __name__ == "__main__":
    main()
