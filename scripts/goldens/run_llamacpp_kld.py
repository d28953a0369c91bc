#!/usr/bin/env python3
"""KL divergence goldens from llama.cpp's llama-perplexity --kl-divergence.

Rerun (from the repo root, with lilims built in build/; ~3-6 min on 2 cores):
    LLAMACPP_TARGETS="llama-perplexity llama-quantize llama-imatrix" scripts/build_llamacpp.sh
    python3 scripts/goldens/run_llamacpp_kld.py [--bin-dir DIR/bin] [--lilims build/lilims] \
        [--part stories260k|smollm2|all]

Two parts, each writing a small JSON:

stories260k -> tests/data/stories260k_kld_llamacpp.json
    Checks lilims' KLD arithmetic against llama.cpp's on the same files.  Base:
    /work/shared/data/stories260K/stories260K.gguf (all F32).  Compared: its
    Q8_0 and Q4_0, written by `lilims quantize IN OUT TYPE --method plain`
    (ggml's reference round-to-nearest, the bytes llama.cpp's reference
    quantizers write; ffn_down has 172 columns and stays F32).  Text:
    tests/data/ppl_text.txt, -c 256 --chunks 8 (1016 scored positions).

smollm2 -> tests/data/smollm2_kld_llamacpp.json
    What llama-quantize costs, for the quality gates.  Source: the F16 model
    `lilims quantize SmolLM2-135M-Instruct.Q4_1.gguf F16` writes (the Q4_1
    weights dequantized exactly; 1-D tensors F32).  llama-quantize F16 -> Q8_0
    and Q4_0 with its defaults (no imatrix; the tied token_embd follows the
    output-tensor rule), and Q4_0 with an imatrix (Q4_0_imatrix: llama-imatrix
    -c 512 over the text after its first 10000 bytes, past the scored tokens),
    then llama-perplexity KLD of each against the F16 on
    tests/data/ppl_text.txt, -c 512 --chunks 4 (1020 scored positions).
    The tensor types llama-quantize chose are recorded (lilims inspect).

llama-perplexity: first `-m BASE -f TEXT -c N --chunks K --kl-divergence-base
FILE`, then `-m MODEL --kl-divergence-base FILE --kl-divergence`; its
"Mean PPL(Q)", "Mean PPL(base)", "Mean KLD", "Median KLD", "99.0% KLD",
"Maximum KLD" and "Same top p" lines are parsed.  Its base file clamps
log-probabilities 16 nats below the top one and leaves those out of the KLD;
lilims keeps the whole range (runtime/eval/kl_divergence.h): the tokens left out
carry at most n_vocab * e^-16 of probability (5.7e-5 for stories260K's 512).
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _llamacpp_common import LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, sha256_file  # noqa: E402

THREADS = 2
TEXT = "tests/data/ppl_text.txt"
IMATRIX_SKIP = 10000  # bytes of TEXT before the imatrix text (past the 2048 scored-chunk tokens)


def run(cmd):
    print("running:", " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write((p.stdout + p.stderr)[-4000:])
        sys.exit(f"failed: {' '.join(cmd)}")
    return p.stdout + p.stderr


def num(pattern, log):
    m = re.search(pattern, log)
    if not m:
        sys.exit(f"pattern not found in llama-perplexity output: {pattern}")
    return float(m.group(1))


def parse_kld(log):
    f = r"(-?[0-9.]+(?:e[-+]?\d+)?)"
    return {
        "ppl": num(r"Mean PPL\(Q\)\s*:\s*" + f, log),
        "ppl_base": num(r"Mean PPL\(base\)\s*:\s*" + f, log),
        "kld_mean": num(r"Mean\s+KLD:\s*" + f, log),
        "kld_mean_se": num(r"Mean\s+KLD:\s*[-0-9.e+]+\s*±\s*" + f, log),
        "kld_median": num(r"Median\s+KLD:\s*" + f, log),
        "kld_p99": num(r"99\.0%\s+KLD:\s*" + f, log),
        "kld_max": num(r"Maximum KLD:\s*" + f, log),
        "same_top_percent": num(r"Same top p:\s*" + f, log),
        "same_top_percent_se": num(r"Same top p:\s*[0-9.]+\s*±\s*" + f, log),
    }


def tensor_types(lilims, path):
    out = run([lilims, "inspect", path])
    types = {}
    for line in out.splitlines():
        m = re.match(r"\s+(\S+\.weight)\s+(\S+)\s+\[", line)
        if m:
            types[m.group(1)] = m.group(2)
    return types


def kld_runs(ppl_bin, base, models, n_ctx, n_chunks, tmp):
    base_file = os.path.join(tmp, "base.kld")
    run([ppl_bin, "-m", base, "-f", TEXT, "-c", str(n_ctx), "--chunks", str(n_chunks),
         "-t", str(THREADS), "--kl-divergence-base", base_file])
    results = {}
    for name, path in models.items():
        cmd = [ppl_bin, "-m", path, "-f", TEXT, "-c", str(n_ctx), "--chunks", str(n_chunks),
               "-t", str(THREADS), "--kl-divergence-base", base_file, "--kl-divergence"]
        r = parse_kld(run(cmd))
        r["command"] = " ".join(os.path.basename(c) if c == path else c for c in cmd)
        r["model_sha256"] = sha256_file(path)
        results[name] = r
        print(f"{name}: {r}", file=sys.stderr)
    return results


def common_info(bin_dir):
    v = subprocess.run([os.path.join(bin_dir, "llama-perplexity"), "--version"],
                       capture_output=True, text=True)
    return {
        "llama_cpp_python_sdist": f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz",
        "commit": LLAMA_CPP_COMMIT,
        "version_output": (v.stdout + v.stderr).strip(),
        "built_with": "scripts/build_llamacpp.sh",
    }


def part_stories(args, tmp):
    base = "/work/shared/data/stories260K/stories260K.gguf"
    models = {}
    for t in ["Q8_0", "Q4_0"]:
        out = os.path.join(tmp, f"stories260K.{t}.gguf")
        run([args.lilims, "quantize", base, out, t, "--method", "plain", "--no-progress"])
        models[t] = out
    models["F32"] = base  # against itself
    n_ctx, n_chunks = 256, 8
    res = kld_runs(os.path.join(args.bin_dir, "llama-perplexity"), base, models, n_ctx, n_chunks,
                   tmp)
    return {
        "description": "llama-perplexity --kl-divergence of stories260K Q8_0/Q4_0 (lilims quantize "
                       "--method plain) and of the F32 itself against the F32 base",
        "llama_cpp": common_info(args.bin_dir),
        "base": {"file": "stories260K.gguf", "sha256": sha256_file(base)},
        "text": {"file": TEXT, "sha256": sha256_file(TEXT)},
        "n_ctx": n_ctx, "n_chunks": n_chunks, "scored_positions": n_chunks * (n_ctx - 1 - n_ctx // 2),
        "threads": THREADS,
        "generated_utc": now(),
        "results": res,
    }


def part_smollm2(args, tmp):
    src = os.path.expanduser("~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    f16 = os.path.join(tmp, "smollm2.F16.gguf")
    run([args.lilims, "quantize", src, f16, "F16", "--no-progress"])
    models, types, quantize_cmds = {}, {}, {}
    for t in ["Q8_0", "Q4_0"]:
        out = os.path.join(tmp, f"smollm2.{t}.gguf")
        run([os.path.join(args.bin_dir, "llama-quantize"), f16, out, t, str(THREADS)])
        models[t] = out
        types[t] = tensor_types(args.lilims, out)
        quantize_cmds[t] = f"llama-quantize smollm2.F16.gguf smollm2.{t}.gguf {t} {THREADS}"
    # The imatrix: the text after its first IMATRIX_SKIP bytes (the scored
    # chunks' tokens end before it).
    tail = os.path.join(tmp, "imatrix_text.txt")
    with open(TEXT, "rb") as f:
        data = f.read()[IMATRIX_SKIP:]
    with open(tail, "wb") as f:
        f.write(data)
    imx = os.path.join(tmp, "smollm2.imatrix.gguf")
    imatrix_cmd = [os.path.join(args.bin_dir, "llama-imatrix"), "-m", f16, "-f", tail, "-c", "512",
                   "-t", str(THREADS), "-o", imx, "--no-ppl"]
    run(imatrix_cmd)
    out = os.path.join(tmp, "smollm2.Q4_0_imatrix.gguf")
    run([os.path.join(args.bin_dir, "llama-quantize"), "--imatrix", imx, f16, out, "Q4_0",
         str(THREADS)])
    models["Q4_0_imatrix"] = out
    types["Q4_0_imatrix"] = tensor_types(args.lilims, out)
    quantize_cmds["Q4_0_imatrix"] = (f"llama-quantize --imatrix smollm2.imatrix.gguf smollm2.F16.gguf "
                                     f"smollm2.Q4_0_imatrix.gguf Q4_0 {THREADS}")
    n_ctx, n_chunks = 512, 4
    res = kld_runs(os.path.join(args.bin_dir, "llama-perplexity"), f16, models, n_ctx, n_chunks, tmp)
    for t in res:
        kinds = sorted(set(types[t].values()))
        target = t.split("_imatrix")[0]
        res[t]["llama_quantize_command"] = quantize_cmds[t]
        res[t]["tensor_types_used"] = kinds
        res[t]["tensors_not_of_the_type"] = {k: v for k, v in types[t].items()
                                            if v != target and v != "F32"}
    res["Q4_0_imatrix"]["imatrix_command"] = (
        f"llama-imatrix -m smollm2.F16.gguf -f TEXT_AFTER_{IMATRIX_SKIP}_BYTES -c 512 -t {THREADS} "
        "-o smollm2.imatrix.gguf --no-ppl")
    return {
        "description": "llama-quantize (defaults; Q4_0 also with an imatrix) of the F16 SmolLM2 "
                       "lilims writes, KLD against that F16 by llama-perplexity",
        "llama_cpp": common_info(args.bin_dir),
        "source": {"file": "SmolLM2-135M-Instruct.Q4_1.gguf", "sha256": sha256_file(src),
                   "f16": "lilims quantize SOURCE OUT.gguf F16", "f16_sha256": sha256_file(f16)},
        "text": {"file": TEXT, "sha256": sha256_file(TEXT)},
        "n_ctx": n_ctx, "n_chunks": n_chunks, "scored_positions": n_chunks * (n_ctx - 1 - n_ctx // 2),
        "threads": THREADS,
        "generated_utc": now(),
        "results": res,
    }


def now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    default_dir = subprocess.run(["scripts/build_llamacpp.sh", "--print-dir"], capture_output=True,
                                 text=True).stdout.strip()
    ap.add_argument("--bin-dir", default=os.path.join(default_dir, "bin"))
    ap.add_argument("--lilims", default="build/lilims")
    ap.add_argument("--part", default="all", choices=["stories260k", "smollm2", "all"])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("stories260k", "all"):
            out = part_stories(args, tmp)
            write("tests/data/stories260k_kld_llamacpp.json", out)
        if args.part in ("smollm2", "all"):
            out = part_smollm2(args, tmp)
            write("tests/data/smollm2_kld_llamacpp.json", out)


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=1)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
