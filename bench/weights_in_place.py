#!/usr/bin/env python3
"""A plain GGUF against the same model laid out for this CPU's kernels
(`lilims quantize IN OUT TYPE --layout native`), side by side: load time,
RssAnon / RssFile after the load and after the row, prefill and decode t/s
(bench/README.md, "Weights read in place").

Rounds alternate the two files (plain, laid out, plain, ...) so a busy
machine slows both alike; each round is one `lilims bench --json` process per
file and thread count, and the table gives the medians over rounds of each
process's median.

    python3 bench/weights_in_place.py MODEL.gguf TYPE [--lilims build/lilims]
        [-p 512] [-n 64] [-t 1,2] [-r 5] [--rounds 3] [--laid OUT.gguf]
    python3 bench/weights_in_place.py MODEL.gguf TYPE -p 16 -n 256 -t 2 -r 1   # RSS after 256 tokens

TYPE is the file's own type (Q4_1 for SmolLM2-135M-Instruct.Q4_1.gguf): only
the layout changes.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def bench(lilims, model, threads, a):
    cmd = [lilims, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-t", str(threads), "-r", str(a.r), "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("type")
    ap.add_argument("--lilims", default="build/lilims")
    ap.add_argument("--laid", help="where to write the laid-out file (default: a temp file)")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()

    laid = a.laid or os.path.join(tempfile.mkdtemp(), "laid_out.gguf")
    subprocess.run([a.lilims, "quantize", a.model, laid, a.type, "--layout", "native", "--no-progress"], check=True)
    files = {"plain": a.model, "laid out": laid}
    keys = ["load_ms", "rss_anon_load_mb", "rss_file_load_mb", "rss_anon_mb", "rss_file_mb", "pp_tps", "tg_tps"]
    print(f"model {a.model}, -p {a.p} -n {a.n} -r {a.r}, {a.rounds} rounds, medians over rounds")
    print()
    print("| file | threads | load ms | RssAnon / RssFile MB after load | after the row | prefill t/s | decode t/s |"
          " copied MB |")
    print("| --- | ---: | ---: | --- | --- | ---: | ---: | ---: |")
    ratios = []
    for t in [int(x) for x in a.t.split(",")]:
        runs = {name: [] for name in files}
        for _ in range(a.rounds):
            for name, path in files.items():
                runs[name].append(bench(a.lilims, path, t, a))
        med = {}
        for name, rows in runs.items():
            m = {k: statistics.median(r[k] for r in rows) for k in keys}
            med[name] = m
            copied = rows[0]["weight_bytes_copied"] / 1e6
            print(f"| {name} | {t} | {m['load_ms']:.0f} | {m['rss_anon_load_mb']:.1f} / {m['rss_file_load_mb']:.1f} |"
                  f" {m['rss_anon_mb']:.1f} / {m['rss_file_mb']:.1f} | {m['pp_tps']:.1f} | {m['tg_tps']:.1f} |"
                  f" {copied:.1f} |")
        ratios.append((t, med["laid out"]["pp_tps"] / med["plain"]["pp_tps"],
                       med["laid out"]["tg_tps"] / med["plain"]["tg_tps"]))
    print()
    for t, pp, tg in ratios:
        print(f"{t} threads: laid out / plain: prefill {pp:.3f}, decode {tg:.3f}")
    if not a.laid:
        os.remove(laid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
