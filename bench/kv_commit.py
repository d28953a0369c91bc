#!/usr/bin/env python3
"""Sync against async KV commits, side by side (bench/README.md, "KV commit
modes"): prefill and decode t/s of `lilims bench --kv-commit sync` and
`--kv-commit async` on the same model, per thread count, optionally with a
busy core (a process spinning on one core for the whole row).

Rounds alternate the two modes (sync, async, sync, ...) so a busy machine
slows both alike; each round is one `lilims bench --json` process per mode,
and the table gives the medians over rounds of each process's median, and
async / sync.

    python3 bench/kv_commit.py MODEL.gguf [MODEL2.gguf ...] [--lilims build/lilims]
        [-p 256] [-n 64] [-t 1,2] [-r 5] [--rounds 3] [--busy]
"""
import argparse
import json
import multiprocessing
import os
import statistics
import subprocess


def bench(lilims, model, threads, commit, a):
    cmd = [lilims, "bench", "-m", model, "-p", str(a.p), "-n", str(a.n), "-t", str(threads), "-r", str(a.r),
           "--kv-commit", commit, "--json"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def spin(stop):
    while not stop.is_set():
        for _ in range(100000):
            pass


def rows(a, model, busy):
    out = []
    for t in [int(x) for x in a.t.split(",")]:
        stop = multiprocessing.Event()
        spinner = None
        if busy:
            spinner = multiprocessing.Process(target=spin, args=(stop,), daemon=True)
            spinner.start()
        try:
            runs = {"sync": [], "async": []}
            for _ in range(a.rounds):
                for commit in runs:
                    runs[commit].append(bench(a.lilims, model, t, commit, a))
        finally:
            if spinner:
                stop.set()
                spinner.join()
        med = {c: {k: statistics.median(r[k] for r in rs) for k in ("pp_tps", "tg_tps")} for c, rs in runs.items()}
        out.append((t, med, runs["sync"][0]["isa"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--lilims", default="build/lilims")
    ap.add_argument("-p", type=int, default=256)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-t", default="1,2")
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--busy", action="store_true", help="also each row with one core kept busy")
    a = ap.parse_args()

    print(f"-p {a.p} -n {a.n} -r {a.r}, {a.rounds} rounds alternating the modes, medians over rounds")
    print()
    print("| model | threads | other load | prefill sync | async | async/sync | decode sync | async | async/sync |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for model in a.models:
        for busy in ([False, True] if a.busy else [False]):
            for t, med, isa in rows(a, model, busy):
                s, y = med["sync"], med["async"]
                print(f"| {os.path.basename(model)} ({isa}) | {t} | {'one core busy' if busy else 'none'} | "
                      f"{s['pp_tps']:.1f} | {y['pp_tps']:.1f} | {y['pp_tps'] / s['pp_tps']:.3f} | "
                      f"{s['tg_tps']:.1f} | {y['tg_tps']:.1f} | {y['tg_tps'] / s['tg_tps']:.3f} |", flush=True)


if __name__ == "__main__":
    main()
