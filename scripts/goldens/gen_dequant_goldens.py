#!/usr/bin/env python3
"""Goldens for lilims' reference dequantizers (quant/dequant_ref.cpp), from an
independent implementation: the `gguf` PyPI package's gguf.quants.dequantize.

    pip install gguf==0.19.0 numpy xxhash
    scripts/fetch_gemma.sh                          # optional: the real blocks
    python3 scripts/goldens/gen_dequant_goldens.py  # writes the two files below

tests/data/dequant_goldens.bin: for each type (Q5_0 Q5_1 Q2_K Q3_K Q4_K Q5_K
Q6_K IQ4_NL BF16) blocks of random bytes whose scale fields are set to
random finite values (so no product is NaN or inf), and, when the Gemma 3
270M Q4_K_M file is there, the first blocks of its first tensor of each
quantized type (Q4_K, Q5_0, Q6_K, Q8_0); each with gguf's floats.  Layout
(little-endian): "LDQG", u32 version 1, u32 count, then per case: u32 ggml
type, u32 elements, u32 bytes, u32 label length, label, the blocks, the
floats.

tests/data/gemma3_dequant_xxh3.json: XXH3-64 of the float32 bytes gguf
dequantizes each tensor of the Gemma file to, for a test that runs when the
file is present.
"""
import json
import os
import struct
import sys

import numpy as np
import xxhash
from gguf import GGMLQuantizationType as T, GGUFReader
from gguf.quants import dequantize, GGML_QUANT_SIZES

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
GEMMA = os.path.join(os.environ.get("LILIMS_MODEL_DIR", os.path.expanduser("~/.cache/lilims/models")),
                     "gemma-3-270m-q4_k_m.gguf")

# Byte offsets of each block's fp16 scales, which random bytes
# would otherwise fill with NaN/inf now and then.
SCALES = {
    T.Q5_0: [0], T.Q5_1: [0, 2], T.IQ4_NL: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}


def random_fp16(rng, n):
    # Magnitudes from 2^-24 (subnormal) to 2^4, both signs, some zeros.
    e = rng.uniform(-24, 4, n)
    v = (np.sign(rng.uniform(-1, 1, n)) * np.exp2(e)).astype(np.float16)
    v[rng.uniform(0, 1, n) < 0.05] = 0
    return v


def random_blocks(rng, qtype, n_blocks):
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype == T.BF16:
        bits = raw.view(np.uint16)
        bad = (bits & 0x7F80) == 0x7F80  # exponent all ones: inf or NaN
        bits[bad] &= 0xBFFF
    for off in SCALES.get(qtype, []):
        raw[:, off:off + 2] = random_fp16(rng, n_blocks).view(np.uint8).reshape(-1, 2)
    return raw


def case(qtype, label, raw):
    raw = np.ascontiguousarray(raw, dtype=np.uint8).reshape(-1)
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    floats = dequantize(raw.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
    assert floats.size == raw.size // type_size * block_size
    lab = label.encode()
    return (struct.pack("<IIII", int(qtype), floats.size, raw.size, len(lab)) + lab + raw.tobytes() +
            floats.astype("<f4").tobytes())


def main():
    rng = np.random.default_rng(13)
    cases = []
    for qtype in [T.Q5_0, T.Q5_1, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K, T.IQ4_NL, T.BF16]:
        block_size = GGML_QUANT_SIZES[qtype][0]
        n_blocks = max(4, 512 // block_size)
        cases.append(case(qtype, "random", random_blocks(rng, qtype, n_blocks)))
    hashes = None
    if os.path.exists(GEMMA):
        reader = GGUFReader(GEMMA)
        seen = set()
        hashes = {}
        for t in reader.tensors:
            qtype = t.tensor_type
            floats = dequantize(t.data, qtype).astype("<f4")
            hashes[t.name] = {"type": qtype.name, "xxh3_64": xxhash.xxh3_64_hexdigest(floats.tobytes())}
            if qtype in (T.F32, T.F16) or qtype in seen:
                continue
            seen.add(qtype)
            block_size, type_size = GGML_QUANT_SIZES[qtype]
            row = np.asarray(t.data[0]).reshape(-1)
            cases.append(case(qtype, "gemma3:" + t.name, row[:4 * type_size]))
    else:
        print(f"note: {GEMMA} missing (scripts/fetch_gemma.sh): random blocks only", file=sys.stderr)

    out = os.path.join(ROOT, "tests", "data", "dequant_goldens.bin")
    with open(out, "wb") as f:
        f.write(b"LDQG" + struct.pack("<II", 1, len(cases)) + b"".join(cases))
    print(f"wrote {out} ({len(cases)} cases)")
    if hashes is not None:
        out = os.path.join(ROOT, "tests", "data", "gemma3_dequant_xxh3.json")
        with open(out, "w") as f:
            json.dump({"file": os.path.basename(GEMMA),
                       "sha256": "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
                       "generator": "gguf.quants.dequantize (gguf 0.19.0), float32 bytes, XXH3-64",
                       "tensors": hashes}, f, indent=1, sort_keys=True)
            f.write("\n")
        print(f"wrote {out} ({len(hashes)} tensors)")


if __name__ == "__main__":
    main()
