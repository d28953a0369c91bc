#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_lora (tests/fuzz/corpus/lora/): LoRA adapters
for tests/data/tiny/llama.gguf in llama.cpp's GGUF adapter layout, written by
gguf-py's GGUFWriter (the producer llama.cpp's convert_lora_to_gguf.py uses).

Rerun from the repo root:  pip install gguf==0.19.0 numpy && python3 tests/fuzz/make_lora_corpus.py
"""
import numpy as np
import gguf

BASE = "tests/data/tiny/llama.gguf"
OUT = "tests/fuzz/corpus/lora"


def write(name, tensors, alpha=4.0, arch="llama", atype="lora"):
    w = gguf.GGUFWriter(f"{OUT}/{name}", arch)
    w.add_string("general.type", "adapter")
    w.add_string("adapter.type", atype)
    w.add_float32("adapter.lora.alpha", alpha)
    for n, v in tensors:
        w.add_tensor(n, v)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    rng = np.random.default_rng(3)
    base = gguf.GGUFReader(BASE)
    shapes = {t.name: (int(t.shape[0]), int(t.shape[1])) for t in base.tensors if len(t.shape) == 2}

    def pair(name, rank, dtype=np.float32):
        n_in, n_out = shapes[name]
        a = (rng.standard_normal((rank, n_in)) / np.sqrt(n_in)).astype(dtype)
        b = (rng.standard_normal((n_out, rank)) * 0.05).astype(dtype)
        return [(name + ".lora_a", a), (name + ".lora_b", b)]

    every = [n for n in shapes if n.startswith("blk.")]
    write("all_rank2_f32.gguf", [t for n in every for t in pair(n, 2)])
    write("some_rank3_f16.gguf", [t for n in ("blk.1.attn_q.weight", "blk.0.ffn_down.weight")
                                  for t in pair(n, 3, np.float16)], alpha=0.0)
    n_embd, n_vocab = shapes["token_embd.weight"]
    write("embedding_rank2.gguf", [("token_embd.weight.lora_a", rng.standard_normal((n_vocab, 2)).astype(np.float32)),
                                   ("token_embd.weight.lora_b",
                                    (rng.standard_normal((n_embd, 2)) * 0.05).astype(np.float32))])
    write("head_rank1.gguf", pair("output.weight", 1))


if __name__ == "__main__":
    main()
