#!/usr/bin/env python3
"""Reference llama-bench figures for SmolLM2-135M-Instruct Q4_1 (peer benchmark, not a golden).

Rerun (from the repo root; ~1-2 min):
    scripts/build_llamacpp.sh /work/llamacpp-build        # once
    python3 scripts/goldens/run_llamabench_reference.py \
        [--bin /work/llamacpp-build/bin/llama-bench] \
        [--model ~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf] \
        [--out tests/data/llamabench_smollm2_reference.json]

Runs `llama-bench -m MODEL -p 512 -n 64 -t 1,2 -r 5 -o json` once and stores its
JSON output verbatim under "llama_bench", with the date, command and a summary.
"""

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="/work/llamacpp-build/bin/llama-bench")
    ap.add_argument("--model", default=os.path.expanduser(
        "~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--out", default="tests/data/llamabench_smollm2_reference.json")
    args = ap.parse_args()

    cmd = [args.bin, "-m", args.model, "-p", "512", "-n", "64", "-t", "1,2", "-r", "5",
           "-o", "json"]
    print("running:", " ".join(cmd), file=sys.stderr)
    load_before = os.getloadavg()
    p = subprocess.run(cmd, capture_output=True, text=True, check=True)
    load_after = os.getloadavg()
    bench = json.loads(p.stdout)

    cpu = ""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    summary = []
    for r in bench:
        test = f"pp{r['n_prompt']}" if r.get("n_gen", 0) == 0 else f"tg{r['n_gen']}"
        summary.append({"test": test, "threads": r["n_threads"],
                        "avg_ts": round(r["avg_ts"], 2), "stddev_ts": round(r["stddev_ts"], 2)})
        print(f"{test} t={r['n_threads']}: {r['avg_ts']:.2f} +/- {r['stddev_ts']:.2f} tok/s",
              file=sys.stderr)

    out = {
        "note": "Reference figure for the peer benchmark, NOT a test golden. Measured "
                "once on a shared 2-core machine (other engineers' builds may have been "
                "running; see loadavg_*: a load above 2 means the 2 cores were already "
                "busy), so treat the numbers as indicative only. Under such load the "
                "2-thread figures suffer most (llama.cpp's OpenMP threads wait on each "
                "other when one of them loses its core); rerun on an idle machine before "
                "drawing conclusions.",
        "date_utc": datetime.datetime.now(datetime.timezone.utc)
        .replace(microsecond=0).isoformat(),
        "command": " ".join(cmd),
        "machine": {"cpu": cpu, "nproc": os.cpu_count(), "arch": platform.machine()},
        "loadavg_1_5_15_before": [round(x, 2) for x in load_before],
        "loadavg_1_5_15_after": [round(x, 2) for x in load_after],
        "summary_tokens_per_s": summary,
        "llama_bench": bench,
    }
    with open(args.out, "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
