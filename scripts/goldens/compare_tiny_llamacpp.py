#!/usr/bin/env python3
"""How far llama.cpp's logits are from the tiny models' HF goldens (prints only).

Rerun (from the repo root; needs a llama.cpp build from scripts/build_llamacpp.sh, g++ and the
gen_tiny_models.py requirements for tiny_numpy_forward.py):

    scripts/build_llamacpp.sh /work/llamacpp-build
    python3 scripts/goldens/compare_tiny_llamacpp.py [--build-dir /work/llamacpp-build]

Compiles llamacpp_logits.cpp against the build, runs the 100-token prompt of
tests/data/tiny/goldens.json through llama.cpp for llama.gguf, phi2.gguf and phi3.gguf (one batch,
n_ctx 128, F32 and F16 KV caches) and prints the largest |llama.cpp - golden| over the stored
positions and whether the argmax agrees. llama.cpp runs every prompt position in one context, so
for phi3 it is compared with the long-factor cases (its context is padded to 256 > 32). llama.cpp
drops phi3's sliding window, so phi3 is also compared, at all 100 positions, with
tiny_numpy_forward.py run without the window.
"""

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
TINY = os.path.join(REPO, "tests", "data", "tiny")
sys.path.insert(0, HERE)
import tiny_numpy_forward  # noqa: E402


def build_dumper(build_dir, out):
    src = glob.glob(os.path.join(build_dir, "_src", "*", "vendor", "llama.cpp"))
    if not src:
        sys.exit(f"[compare_tiny_llamacpp] no llama.cpp sources under {build_dir}/_src")
    libs = [os.path.join(build_dir, "src", "libllama.a")]
    libs += [os.path.join(build_dir, "ggml", "src", f"libggml{s}.a") for s in ("", "-cpu", "-base")]
    for lib in libs:
        if not os.path.exists(lib):
            sys.exit(f"[compare_tiny_llamacpp] {lib} missing: build llama.cpp first")
    cmd = ["g++", "-std=c++17", "-O1", "-I", os.path.join(src[0], "include"),
           "-I", os.path.join(src[0], "ggml", "include"), os.path.join(HERE, "llamacpp_logits.cpp"),
           *libs, "-fopenmp", "-lpthread", "-ldl", "-o", out]
    subprocess.run(cmd, check=True)


def run(dumper, gguf_path, ids, kv):
    res = subprocess.run([dumper, gguf_path, "128", kv], input=" ".join(map(str, ids)),
                         capture_output=True, text=True, check=True)
    return np.array([[float(x) for x in line.split()] for line in res.stdout.splitlines()])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", default="/work/llamacpp-build")
    args = ap.parse_args()
    with open(os.path.join(TINY, "goldens.json")) as f:
        doc = json.load(f)
    ids = doc["prompt"]["token_ids"]
    with tempfile.TemporaryDirectory() as tmp:
        dumper = os.path.join(tmp, "llamacpp_logits")
        build_dumper(args.build_dir, dumper)
        for arch, entry in doc["models"].items():
            path = os.path.join(TINY, entry["gguf"])
            for kv in ("f32", "f16"):
                got = run(dumper, path, ids, kv)
                rows = [(p, np.abs(got[p] - np.array(row)).max(), got[p].argmax() == np.argmax(row))
                        for case in entry["cases"] if case["rope_factors"] in (None, "long")
                        for p, row in zip(case["positions"], case["logits"])]
                early = max(d for p, d, _ in rows if p < 16)
                print(f"{arch} KV {kv}: max |llama.cpp - golden| {max(d for _, d, _ in rows):.3g} "
                      f"(positions < 16: {early:.3g}), argmax equal at "
                      f"{sum(bool(a) for _, _, a in rows)}/{len(rows)} stored positions")
                if arch == "phi3":
                    m = tiny_numpy_forward.GgufModel(path)
                    m.meta["phi3.attention.sliding_window"] = 0
                    ref = tiny_numpy_forward.forward(m, ids, "long")
                    print(f"  phi3 without its sliding window (numpy, long factors), all "
                          f"{len(ids)} positions: max {np.abs(got - ref).max():.3g}, argmax equal "
                          f"at {(got.argmax(1) == ref.argmax(1)).sum()}/{len(ids)}")


if __name__ == "__main__":
    main()
