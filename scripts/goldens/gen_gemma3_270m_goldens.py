#!/usr/bin/env python3
"""llama.cpp's greedy continuations, logits, perplexity and token ids for the real Gemma 3 270M
(Q4_K_M) -> tests/data/gemma3_270m_llamacpp.json.

Rerun (from the repo root; scripts/fetch_gemma.sh first; the llama.cpp build of
scripts/build_llamacpp.sh with llama-perplexity, llama-completion and llama-tokenize, and g++;
~5 minutes on the 2-core machine, most of it llama-perplexity):

    LLAMACPP_TARGETS="llama-perplexity llama-completion llama-tokenize" scripts/build_llamacpp.sh
    python3 scripts/goldens/gen_gemma3_270m_goldens.py [--build-dir DIR] [--model GGUF]

What it records, all raw text (no chat template):
- per prompt, llamacpp_family_logits.cpp (compiled against the build; the prompt tokenized by
  llama.cpp with BOS, one batch, 2 threads, n_ctx 512, KV F16 and flash attention at llama.cpp's
  defaults): the prompt ids, the last prompt position's top-20 logits, 16 greedy ids with the
  runner-up and the top-2 margin before each step (not stopping at end-of-generation tokens);
  and llama-completion's greedy text for the same prompt (--temp 0 --top-k 1 -n 16 -no-cnv),
  with whether it equals the dumper's text (llama-completion stops at end-of-generation);
- llama-perplexity -c 512 on tests/data/ppl_text.txt, all chunks the text holds: the command,
  llama.cpp's running estimate after each chunk, each chunk's own perplexity derived from the
  running estimates (every chunk scores the same number of tokens, n_ctx / 2), the final PPL and
  its +/- estimate;
- llama-tokenize's ids (BOS added as the vocabulary says, special tokens parsed) for a few
  strings, one chat-formatted.
"""

import argparse
import json
import math
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from _llamacpp_common import LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, sha256_file  # noqa: E402
from gen_family_models import write_json  # noqa: E402
from gen_lora_goldens import default_build_dir, ppl_complete, run  # noqa: E402
from run_family_llamacpp import build_dumper, dump  # noqa: E402

DEFAULT_MODEL = os.path.expanduser("~/.cache/lilims/models/gemma-3-270m-q4_k_m.gguf")
OUT = os.path.join(REPO, "tests", "data", "gemma3_270m_llamacpp.json")
TEXT = "tests/data/ppl_text.txt"
PROMPTS = ["The capital of France is", "Once upon a time", "def fibonacci(n):",
           "The three primary colors are", "1, 2, 3, 4, 5,"]
N_GEN = 16
N_CTX = 512
THREADS = 2
PPL_ARGS = ["-c", "512", "-t", str(THREADS)]
TOKENIZE_TEXTS = [
    "The capital of France is",
    "Hello, world!",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "Digits 1234567 and 3.14159; caf\u00e9 na\u00efve \u65e5\u672c",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
]


def completion(bin_dir, model, prompt):
    args = ["-p", prompt, "-n", str(N_GEN), "--temp", "0", "--top-k", "1", "--seed", "1",
            "-t", str(THREADS), "-c", str(N_CTX), "-no-cnv", "--no-display-prompt",
            "--no-warmup"]
    raw, _, _ = run([os.path.join(bin_dir, "llama-completion"), "-m", model, *args], stdin="",
                    complete=lambda raw, out, err: raw.endswith(b"\n\n"))
    return {"command": " ".join(["llama-completion", "-m", "GEMMA",
                                 *[json.dumps(x) if x == prompt else x for x in args]]),
            # llama-completion ends its output with an empty line of its own
            "text": raw.decode(errors="replace")[:-2] if raw.endswith(b"\n\n") else raw.decode()}


def perplexity(bin_dir, model):
    cmd = [os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", TEXT, *PPL_ARGS]
    _, out_text, err_text = run(cmd, complete=ppl_complete)
    log = out_text + err_text
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+), batch_size=(\d+), "
                  r"n_seq=(\d+)", log)
    running = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out_text)]
    # running[i] = exp(mean NLL over chunks 0..i), each chunk scoring n_ctx/2 tokens
    chunk = []
    for i, r in enumerate(running):
        prev = (i * math.log(running[i - 1])) if i else 0.0
        chunk.append(float(f"{math.exp((i + 1) * math.log(r) - prev):.6g}"))
    return {"command": " ".join(["llama-perplexity", "-m", "GEMMA", "-f", TEXT, *PPL_ARGS]),
            "n_chunks": int(c.group(1)), "n_ctx": int(c.group(2)), "batch_size": int(c.group(3)),
            "n_seq": int(c.group(4)), "ppl": float(m.group(1)), "ppl_pm": float(m.group(2)),
            "running_estimates": running,
            "chunk_ppl_derived": chunk,
            "note": "running_estimates are llama.cpp's printed values (4-5 decimals); "
                    "chunk_ppl_derived[i] = exp((i+1) ln r[i] - i ln r[i-1]), hence only as "
                    "precise as those printed values"}


def tokenize(bin_dir, model, text):
    _, out, _ = run([os.path.join(bin_dir, "llama-tokenize"), "-m", model, "-p", text, "--ids",
                     "--log-disable"])
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", help="llama.cpp build (default: build_llamacpp.sh --print-dir)")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    args = ap.parse_args()
    build_dir = args.build_dir or default_build_dir()
    bin_dir = os.path.join(build_dir, "bin")
    doc = {
        "generator": "scripts/goldens/gen_gemma3_270m_goldens.py",
        "model": "gemma-3-270m-q4_k_m.gguf (scripts/fetch_gemma.sh); GEMMA in the commands",
        "model_sha256": sha256_file(args.model),
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_cpp_python_sdist": LLAMA_CPP_PYTHON_VERSION,
        "build": os.path.basename(build_dir) + " (GGML_NATIVE on, scripts/build_llamacpp.sh)",
        "dumper": "scripts/goldens/llamacpp_family_logits.cpp MODEL 512 2 text 16 0: prompt "
                  "tokenized by llama.cpp (BOS added, specials not parsed), one batch, KV F16, "
                  "flash attention at llama.cpp's default; top20 at the last prompt position; "
                  "greedy_top2_margins[i] = logit[greedy_ids[i]] - logit[runner-up] before step i",
        "prompts": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        dumper = os.path.join(tmp, "llamacpp_family_logits")
        build_dumper(build_dir, dumper)
        for prompt in PROMPTS:
            d = dump(dumper, args.model, prompt, N_CTX, THREADS, "text", N_GEN, False)
            d.pop("rows")
            comp = completion(bin_dir, args.model, prompt)
            comp["equals_dumper_text_prefix"] = d["greedy_text"].startswith(comp["text"])
            doc["prompts"].append({"prompt": prompt, **d, "llama_completion": comp})
            print(f"{prompt!r}: {d['greedy_text']!r} (completion {comp['text']!r}), min margin "
                  f"{min(d['greedy_top2_margins']):.3g}", file=sys.stderr)
    doc["tokenize"] = {
        "command": "llama-tokenize -m GEMMA -p TEXT --ids --log-disable (BOS added as the "
                   "vocabulary says, special tokens parsed)",
        "cases": [{"text": t, "ids": tokenize(bin_dir, args.model, t)} for t in TOKENIZE_TEXTS]}
    doc["perplexity"] = perplexity(bin_dir, args.model)
    print(f"ppl {doc['perplexity']['ppl']} +/- {doc['perplexity']['ppl_pm']} over "
          f"{doc['perplexity']['n_chunks']} chunks", file=sys.stderr)
    write_json(doc, OUT)


if __name__ == "__main__":
    main()
