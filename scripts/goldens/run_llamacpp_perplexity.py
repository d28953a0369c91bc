#!/usr/bin/env python3
"""Perplexity of SmolLM2-135M-Instruct Q4_1 on tests/data/ppl_text.txt with llama.cpp.

Rerun (from the repo root; ~2-4 min on 2 cores):
    scripts/build_llamacpp.sh /work/llamacpp-build        # once, builds llama-perplexity
    python3 scripts/goldens/run_llamacpp_perplexity.py \
        [--bin /work/llamacpp-build/bin/llama-perplexity] \
        [--model ~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--text tests/data/ppl_text.txt] [--out tests/data/smollm2_ppl_llamacpp.json]

Runs `llama-perplexity -m MODEL -f TEXT -c N -t 2` for N in 512, 1024, 2048
(default batch size), parses "Final estimate: PPL = X +/- Y" and the running
per-chunk values, and writes the JSON with the exact commands and the method
(read from tools/perplexity/perplexity.cpp of the vendored llama.cpp). The token
count is cross-checked with llama-cpp-python's tokenizer if it is installed.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import datetime

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _llamacpp_common import LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, sha256_file  # noqa: E402

CTXS = [512, 1024, 2048]
THREADS = 2

METHOD = {
    "source": "tools/perplexity/perplexity.cpp, function perplexity() (ppl_stride == 0), "
              "and llama_perplexity() (main), llama.cpp@" + LLAMA_CPP_COMMIT[:9],
    "text_loading": "-f reads the whole file as bytes and removes exactly one trailing '\\n' "
                    "if present (common/arg.cpp); no escape processing (params.escape = false).",
    "tokenization": "common_tokenize(ctx, text, add_special=true, parse_special=false): the "
                    "whole text in one call. add_special adds BOS only if the vocab's "
                    "add_bos_token is true. SmolLM2's GGUF has tokenizer.ggml.add_bos_token="
                    "false, so NO BOS is added anywhere: the tokens are exactly the "
                    "byte-level BPE of the text (special-token text, if any, not parsed).",
    "minimum_tokens": "needs n_tokens >= 2*n_ctx, else it refuses.",
    "chunks": "n_chunk = floor(n_tokens / n_ctx) non-overlapping chunks; chunk c is "
              "tokens[c*n_ctx : (c+1)*n_ctx]; the remaining tail (< n_ctx tokens) is not "
              "used. Each chunk is evaluated from an empty KV cache with positions 0..n_ctx-1.",
    "bos_replacement": "If add_bos_token is true, the FIRST token of each chunk is REPLACED "
                       "(not prepended) by BOS for evaluation (the chunk stays n_ctx long). "
                       "For SmolLM2 (add_bos_token=false) nothing is replaced: chunk tokens "
                       "are evaluated as they are.",
    "scored_tokens": "first = n_ctx/2. In each chunk, the logits at positions first .. n_ctx-2 "
                     "score the tokens at positions first+1 .. n_ctx-1: n_ctx/2 - 1 tokens per "
                     "chunk (255 at n_ctx=512, 511 at 1024, 1023 at 2048). Logits are only "
                     "requested for positions >= first; the last position's logits are unused.",
    "nll": "per scored token: nll = -(logit[tok] - max_logit - log(sum_j expf(logit_j - "
           "max_logit))), max in float, the sum of expf in double; nll summed in double "
           "over all scored tokens of all chunks.",
    "final_estimate": "PPL = exp(sum_nll / count), count = n_chunk*(n_ctx/2 - 1). "
                      "'+/-' = PPL * sqrt((mean(nll^2) - mean(nll)^2) / (count - 1)). The "
                      "running values printed as [k]x are exp(mean nll) over chunks 1..k.",
    "batching": "default -b 2048 (n_batch), -ub 512 (n_ubatch). n_parallel = max(1, "
                "n_batch/n_ctx) chunks are evaluated together as separate sequences in one "
                "llama_decode (4 at n_ctx=512, 2 at 1024, 1 at 2048), context = "
                "n_parallel*n_ctx, n_batch = min(n_batch, that); each sequence has its own "
                "positions 0..n_ctx-1 and attends only to itself, so the result equals "
                "evaluating each chunk alone, up to float rounding from the ubatch split "
                "(512-token physical batches).",
    "numerics": "KV cache F16 (default); flash attention 'auto', which on this CPU build "
                "resolves to enabled (the graph uses FLASH_ATTN_EXT; see runtime_probe); "
                "activations quantized to Q8_1 for the Q4_1 weight matmuls and to Q8_0 for "
                "the Q8_0 tied output head; no weight repacking for this model "
                "(CPU_REPACK rejects Q4_1/Q8_0 here).",
}


def tokens_count(model, text_path):
    try:
        import llama_cpp
    except ImportError:
        return None
    with open(text_path, "rb") as f:
        data = f.read()
    if data.endswith(b"\n"):
        data = data[:-1]
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    return len(llm.tokenize(data, add_bos=True, special=False))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="/work/llamacpp-build/bin/llama-perplexity")
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--text", default="tests/data/ppl_text.txt")
    ap.add_argument("--out", default="tests/data/smollm2_ppl_llamacpp.json")
    args = ap.parse_args()

    version = subprocess.run([args.bin, "--version"], capture_output=True, text=True)
    version_text = (version.stdout + version.stderr).strip()
    n_tok = tokens_count(args.model, args.text)

    # Probe (not part of the figures): one chunk with -v, to see whether flash
    # attention 'auto' resolved to the FLASH_ATTN_EXT op and whether weights were repacked.
    probe_cmd = [args.bin, "-m", args.model, "-f", args.text, "-c", "512", "-t", str(THREADS),
                 "--chunks", "1", "-v"]
    probe = subprocess.run(probe_cmd, capture_output=True, text=True)
    plog = probe.stdout + probe.stderr
    probe_info = {
        "command": " ".join(probe_cmd),
        "flash_attn_param": (re.search(r"flash_attn\s+=\s+(\S+)", plog) or [None, None])[1],
        "graph_uses_FLASH_ATTN_EXT": "(FLASH_ATTN_EXT)" in plog,
        "weights_repacked": "cannot be used with preferred buffer type CPU_REPACK" not in plog,
        "n_ubatch": int((re.search(r"n_ubatch\s+=\s+(\d+)", plog) or [0, 0])[1]),
        "kv_unified": (re.search(r"kv_unified\s+=\s+(\S+)", plog) or [None, None])[1],
    }
    print("probe:", probe_info, file=sys.stderr)

    results = []
    for c in CTXS:
        cmd = [args.bin, "-m", args.model, "-f", args.text, "-c", str(c), "-t", str(THREADS)]
        print("running:", " ".join(cmd), file=sys.stderr)
        p = subprocess.run(cmd, capture_output=True, text=True)
        log = p.stdout + p.stderr
        m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
        if p.returncode != 0 or not m:
            sys.stderr.write(log[-4000:])
            sys.exit(f"llama-perplexity failed at -c {c}")
        m2 = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), "
                       r"batch_size=(\d+), n_seq=(\d+)", log)
        running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", log)]
        n_chunk = int(m2.group(1))
        res = {
            "n_ctx": c,
            "command": " ".join(cmd),
            "ppl": float(m.group(1)),
            "ppl_plus_minus": float(m.group(2)),
            "n_chunks": n_chunk,
            "batch_size": int(m2.group(3)),
            "n_seq_per_decode": int(m2.group(4)),
            "scored_tokens": n_chunk * (c // 2 - 1),
            "running_ppl_per_chunk": running,
        }
        print(f"-c {c}: PPL = {res['ppl']} +/- {res['ppl_plus_minus']} "
              f"({n_chunk} chunks)", file=sys.stderr)
        results.append(res)

    out = {
        "description": "llama.cpp llama-perplexity on tests/data/ppl_text.txt with "
                       "SmolLM2-135M-Instruct Q4_1, to be reproduced by our perplexity tool "
                       "using the same method (see 'method').",
        "llama_cpp": {
            "llama_cpp_python_sdist": f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz",
            "commit": LLAMA_CPP_COMMIT,
            "version_output": version_text,
            "built_with": "scripts/build_llamacpp.sh (Release, GGML_NATIVE=ON)",
            "binary": args.bin,
        },
        "model": {"file": os.path.basename(args.model), "sha256": sha256_file(args.model)},
        "text": {"file": "tests/data/ppl_text.txt", "sha256": sha256_file(args.text),
                 "bytes": os.path.getsize(args.text),
                 "n_tokens_after_trailing_newline_strip": n_tok},
        "threads": THREADS,
        "generated_utc": datetime.datetime.now(datetime.timezone.utc)
        .replace(microsecond=0).isoformat(),
        "method": METHOD,
        "runtime_probe": probe_info,
        "results": results,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
