#!/usr/bin/env python3
"""llama.cpp on the tiny family GGUFs of gen_family_models.py: adds a "llamacpp" part to
tests/data/families/goldens.json (the HF part is left as it is).

Rerun (from the repo root, after gen_family_models.py; needs the llama.cpp build of
scripts/build_llamacpp.sh with llama-perplexity, and g++; ~2 minutes):

    python3 scripts/goldens/run_family_llamacpp.py [--build-dir DIR]

For each family and each of <name>.f16.gguf / <name>.q8_0.gguf:
- llamacpp_family_logits.cpp (compiled against the build) on the family's prompt_ids from
  goldens.json: every prompt position's logits in one batch (n_ctx 128, one thread, KV cache F16
  and flash attention at llama.cpp's defaults), stored as the last position's top-20, and
  compared with the HF float64 goldens at the stored positions (max |llama.cpp - HF| and argmax
  agreement, a summary only); then 32 greedy tokens after the prompt with the top-2 margin
  before each step (not stopping at end-of-generation tokens).
- llama-perplexity -f tests/data/ppl_text.txt -c 128 -b 128 --chunks 8 -t 2: llama.cpp tokenizes
  the text itself with the GGUF's vocabulary (BOS at the start of each chunk where the vocabulary
  adds one). The command, final ppl and its +/- and the running estimate after each chunk.
"""

import argparse
import glob
import json
import os
import re
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from _llamacpp_common import (LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, f32,  # noqa: E402
                              sha256_file)
from gen_family_models import write_json  # noqa: E402
from gen_lora_goldens import default_build_dir, ppl_complete, run  # noqa: E402

FAMILIES_DIR = os.path.join(REPO, "tests", "data", "families")
TEXT = "tests/data/ppl_text.txt"
N_CTX = 128
N_GEN = 32
PPL_ARGS = ["-c", "128", "-b", "128", "--chunks", "8", "-t", "2"]


def build_dumper(build_dir, out):
    src = glob.glob(os.path.join(build_dir, "_src", "*", "vendor", "llama.cpp"))
    if not src:
        sys.exit(f"[run_family_llamacpp] no llama.cpp sources under {build_dir}/_src")
    libs = [os.path.join(build_dir, "src", "libllama.a")]
    libs += [os.path.join(build_dir, "ggml", "src", f"libggml{s}.a") for s in ("", "-cpu", "-base")]
    for lib in libs:
        if not os.path.exists(lib):
            sys.exit(f"[run_family_llamacpp] {lib} missing: build llama.cpp first")
    run(["g++", "-std=c++17", "-O1", "-I", os.path.join(src[0], "include"),
         "-I", os.path.join(src[0], "ggml", "include"),
         os.path.join(HERE, "llamacpp_family_logits.cpp"), *libs, "-fopenmp", "-lpthread",
         "-ldl", "-o", out])


def parse_dump(out):
    rows, gen, lines = {}, [], {}
    for line in out.splitlines():
        key, _, rest = line.partition(" ")
        if key == "row":
            pos, _, vals = rest.partition(" ")
            rows[int(pos)] = np.array([float(x) for x in vals.split()])
        elif key == "gen":
            t, t2, m = rest.split()
            gen.append((int(t), int(t2), float(m)))
        else:
            lines[key] = rest
    pieces = [b"" if h == "-" else bytes.fromhex(h) for h in lines["gen_pieces"].split()]
    return {
        "prompt_ids": [int(x) for x in lines["prompt_ids"].split()],
        "rows": rows,
        "top20": [[int(i), f32(float(v))] for i, v in
                  (kv.split(":") for kv in lines["top20"].split())],
        "greedy_ids": [g[0] for g in gen],
        "greedy_runner_up_ids": [g[1] for g in gen],
        "greedy_top2_margins": [f32(g[2]) for g in gen],
        "greedy_text": b"".join(pieces).decode(errors="replace"),
    }


def dump(dumper, model, stdin, n_ctx, threads, mode, n_gen, rows):
    _, out, _ = run([dumper, model, str(n_ctx), str(threads), mode, str(n_gen),
                     "1" if rows else "0"], stdin=stdin)
    return parse_dump(out)


def perplexity(bin_dir, model, args):
    cmd = [os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", TEXT, *args]
    _, out_text, err_text = run(cmd, complete=ppl_complete)
    log = out_text + err_text
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    res = {"command": " ".join(["llama-perplexity", "-m", os.path.relpath(model, REPO), "-f",
                                TEXT, *args]),
           "ppl": float(m.group(1)), "ppl_pm": float(m.group(2))}
    c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", log)
    if c:
        res["n_chunks"] = int(c.group(1))
    res["running_estimates"] = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out_text)]
    return res


def versus_hf(entry, rows):
    devs, agree = [], 0
    for p, gold in zip(entry["positions"], entry["logits"]):
        got = rows[p]
        devs.append(float(np.abs(got - np.array(gold)).max()))
        agree += int(np.argmax(got)) == int(np.argmax(gold))
    return {"max_abs_dev": f32(max(devs)), "max_abs_dev_by_position": [f32(d) for d in devs],
            "argmax_equal": f"{agree}/{len(devs)}"}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", help="llama.cpp build (default: build_llamacpp.sh --print-dir)")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    build_dir = args.build_dir or default_build_dir()
    bin_dir = os.path.join(build_dir, "bin")
    path = os.path.join(FAMILIES_DIR, "goldens.json")
    with open(path) as f:
        doc = json.load(f)
    doc["llamacpp"] = {
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_cpp_python_sdist": LLAMA_CPP_PYTHON_VERSION,
        "build": os.path.basename(build_dir) + " (GGML_NATIVE on, scripts/build_llamacpp.sh)",
        "dumper": "scripts/goldens/llamacpp_family_logits.cpp: prompt_ids as one batch, n_ctx "
                  f"{N_CTX}, 1 thread, KV F16, flash attention at llama.cpp's default; top20 at "
                  f"the last prompt position; {N_GEN} greedy steps (argmax, lowest id on a tie), "
                  "greedy_top2_margins[i] = logit gap before step i; vs_hf compares every stored "
                  "HF position",
        "perplexity": f"llama-perplexity on {TEXT} tokenized by llama.cpp with each GGUF's own "
                      f"vocabulary, {' '.join(PPL_ARGS)}",
    }
    with tempfile.TemporaryDirectory() as tmp:
        dumper = os.path.join(tmp, "llamacpp_family_logits")
        build_dumper(build_dir, dumper)
        for name, entry in doc["models"].items():
            if args.only and name not in args.only:
                continue
            res = {}
            for outtype in ("f16", "q8_0"):
                model = os.path.join(FAMILIES_DIR, f"{name}.{outtype}.gguf")
                d = dump(dumper, model, " ".join(map(str, entry["prompt_ids"])), N_CTX, 1, "ids",
                         N_GEN, True)
                assert d["prompt_ids"] == entry["prompt_ids"]
                rows = d.pop("rows")
                d.pop("prompt_ids")
                res[outtype] = {"gguf_sha256": sha256_file(model), **d,
                                "vs_hf": versus_hf(entry, rows),
                                "perplexity": perplexity(bin_dir, model, PPL_ARGS)}
                v = res[outtype]["vs_hf"]
                print(f"{name} {outtype}: vs HF max {v['max_abs_dev']:.3g}, argmax "
                      f"{v['argmax_equal']}; ppl {res[outtype]['perplexity']['ppl']}",
                      file=sys.stderr)
            entry["llamacpp"] = res
    write_json(doc, path)


if __name__ == "__main__":
    main()
