#!/usr/bin/env python3
"""lilims against llama.cpp, side by side, on the same GGUF files.

For each model shape and weight type, random-weight models made by
bench/race/gen_random_gguf (cached in ~/.cache/lilims/bench-models), this
runs `lilims bench` and llama.cpp's `llama-bench` alternately (lilims, llama,
lilims, llama, ... so both see the same load drift), each with one timed run
after its own warm-up, with the same threads and lengths:
  prefill: lilims -p P; llama-bench -p P -n 0
  decode:  lilims -n N after the P-token prompt; llama-bench -p 0 -n N -d P
and measures the read bandwidth (bench/race/read_bandwidth, same threads)
just before each case.  One row per case: both medians, the ratio
lilims / llama.cpp, and decode as a share of the read roofline
(decode_weight_bytes per token x tokens/s / read bandwidth).

  bench/race.py [--shapes smollm2,tinyllama] [--types q4_0,q4_1,q8_0,f16]
                [-t 2] [-p 512] [-n 64] [-r 3] [--load] [--real] [--gemma]
                [--build-dir build-race] [--llama-bench PATH] [--jsonl OUT]

--load keeps one core busy with a competing process (a shell busy loop at
the default nice level) for the whole run, and kills it at the end.
--real adds the real SmolLM2-135M-Instruct Q4_1 (scripts/fetch_model.sh);
--gemma the real Gemma 3 270M Q4_K_M (scripts/fetch_gemma.sh; lilims
re-quantizes its K-quant tensors at load).  --shapes '' leaves the random
models out.
llama.cpp comes from scripts/build_llamacpp.sh (built on first use, ~10-20
min on 2 cores, outside the repo); lilims is built in --build-dir.
Phi-3 shapes run in llama.cpp only: lilims has no phi3 builder yet, and its
rows say "lilims: unsupported arch".

Only the standard library: this is a bench script, not part of the tests.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("LILIMS_SHARED_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
LLAMA2_VOCAB = os.path.join(SHARED, "tiny-gguf", "llama-2-tiny-random.gguf")
SHAPE_FILES = {"smollm2": "smollm2-135m", "tinyllama": "tinyllama-1.1b", "phi3": "phi3-mini"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(cmd, check=True, **kw):
    return subprocess.run(cmd, check=check, text=True, capture_output=True, **kw)


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return os.uname().machine


def build_lilims(build_dir):
    env = dict(os.environ)
    launcher = []
    if subprocess.run(["which", "ccache"], capture_output=True).returncode == 0:
        launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
        # An existing build dir keeps its options (it must be Release with the bench and tools).
        run(["cmake", "-S", REPO, "-B", build_dir, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             "-DLILIMS_BUILD_TOOLS=ON", "-DLILIMS_BUILD_BENCH=ON", "-DLILIMS_BUILD_TESTS=OFF"]
            + launcher, env=env)
    run(["cmake", "--build", build_dir, "-j2", "--target", "lilims_cli", "gen_random_gguf",
         "read_bandwidth"], env=env)


def llama_bench_path(arg):
    if arg:
        return arg
    script = os.path.join(REPO, "scripts", "build_llamacpp.sh")
    d = run(["bash", script, "--print-dir"]).stdout.strip()
    exe = os.path.join(d, "bin", "llama-bench")
    if not os.path.exists(exe):
        log(f"building llama.cpp into {d} (scripts/build_llamacpp.sh, ~10-20 min)")
        env = dict(os.environ, LLAMACPP_TARGETS="llama-bench")
        subprocess.run(["nice", "-n", "10", "bash", script], check=True, env=env,
                       stdout=sys.stderr)
    return exe


def model_file(models_dir, build_dir, shape, wtype):
    path = os.path.join(models_dir, f"{SHAPE_FILES[shape]}-random.{wtype}.gguf")
    if os.path.exists(path):
        return path
    if shape == "smollm2":
        vocab = run(["bash", os.path.join(REPO, "scripts", "fetch_model.sh")]).stdout.strip()
    else:
        vocab = LLAMA2_VOCAB
    log(f"generating {path}")
    os.makedirs(models_dir, exist_ok=True)
    run([os.path.join(build_dir, "bench", "race", "gen_random_gguf"), "--shape", shape, "--type",
         wtype, "--vocab-from", vocab, "-o", path])
    return path


def read_bandwidth(build_dir, threads):
    out = run([os.path.join(build_dir, "bench", "race", "read_bandwidth"), "-t", str(threads)])
    return float(out.stdout.strip())


def lilims_once(build_dir, model, threads, p, n):
    """(pp t/s, tg t/s, decode_weight_bytes), or None with the error for a model lilims cannot run."""
    r = run([os.path.join(build_dir, "lilims"), "bench", "-m", model, "-p", str(p), "-n", str(n),
             "-t", str(threads), "-r", "1", "--json"], check=False)
    if r.returncode != 0:
        return None, r.stderr.strip()
    j = json.loads(r.stdout.splitlines()[0])
    return (j["pp_tps"], j["tg_tps"], j["decode_weight_bytes"]), ""


def llama_once(exe, model, threads, p, n):
    """(pp t/s, tg t/s) from llama-bench, prefill at depth 0 and decode at depth p."""
    out = {}
    for key, args in (("pp", ["-p", str(p), "-n", "0"]), ("tg", ["-p", "0", "-n", str(n), "-d", str(p)])):
        r = run([exe, "-m", model, "-t", str(threads), "-r", "1", "-o", "jsonl"] + args)
        rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
        out[key] = statistics.median(rows[0]["samples_ts"])
    return out["pp"], out["tg"]


class BusyCore:
    """A competing process that keeps one core busy while the rows run."""

    def __init__(self):
        self.proc = None

    def __enter__(self):
        self.proc = subprocess.Popen(["nice", "-n", "0", "sh", "-c", "while :; do :; done"],
                                     start_new_session=True)
        log(f"competing load: pid {self.proc.pid} spinning on one core")
        return self

    def __exit__(self, *exc):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def fmt(x, spec=".1f"):
    return "-" if x is None else format(x, spec)


def case_row(args, exe, label, model, threads):
    bw = read_bandwidth(args.build_dir, threads)
    lil_pp, lil_tg, llm_pp, llm_tg = [], [], [], []
    wbytes, err = None, ""
    for rep in range(args.r):
        if not err:
            res, err = lilims_once(args.build_dir, model, threads, args.p, args.n)
            if res:
                lil_pp.append(res[0]), lil_tg.append(res[1])
                wbytes = res[2]
        pp, tg = llama_once(exe, model, threads, args.p, args.n)
        llm_pp.append(pp), llm_tg.append(tg)
    bw_after = read_bandwidth(args.build_dir, threads)
    row = {
        "model": label, "file": model, "threads": threads, "n_prompt": args.p, "n_gen": args.n,
        "runs": args.r, "load": "one core busy" if args.load else "none",
        "read_gbps": statistics.median([bw, bw_after]),
        "llama_pp_tps": statistics.median(llm_pp), "llama_tg_tps": statistics.median(llm_tg),
        "lilims_pp_tps": statistics.median(lil_pp) if lil_pp else None,
        "lilims_tg_tps": statistics.median(lil_tg) if lil_tg else None,
        "decode_weight_bytes": wbytes,
    }
    if err:
        row["lilims_error"] = "unsupported arch" if re.search(r"architecture|unsupported", err) else err
    return row


def print_header():
    print("| model | thr | prefill t/s lilims | llama.cpp | ratio | decode t/s lilims | llama.cpp | ratio "
          "| read GB/s | decode % roofline lilims | llama.cpp |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def print_row(row):
    lil_pp, lil_tg = row["lilims_pp_tps"], row["lilims_tg_tps"]
    if lil_pp is None:
        note = "lilims: " + row.get("lilims_error", "failed")
        print(f"| {row['model']} | {row['threads']} | {note} | {row['llama_pp_tps']:.1f} | - | - | "
              f"{row['llama_tg_tps']:.1f} | - | {row['read_gbps']:.1f} | - | - |", flush=True)
        return
    wb, bw = row["decode_weight_bytes"], row["read_gbps"] * 1e9
    roof = lambda tps: 100.0 * tps * wb / bw
    print(f"| {row['model']} | {row['threads']} | {lil_pp:.1f} | {row['llama_pp_tps']:.1f} | "
          f"{lil_pp / row['llama_pp_tps']:.2f}x | {lil_tg:.1f} | {row['llama_tg_tps']:.1f} | "
          f"{lil_tg / row['llama_tg_tps']:.2f}x | {row['read_gbps']:.1f} | {roof(lil_tg):.0f}% | "
          f"{roof(row['llama_tg_tps']):.0f}% |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="smollm2,tinyllama")
    ap.add_argument("--types", default="q4_0,q4_1,q8_0,f16")
    ap.add_argument("-t", default="2", help="thread counts, comma-separated")
    ap.add_argument("-p", type=int, default=512)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3, help="alternated runs per tool and case")
    ap.add_argument("--load", action="store_true", help="keep one core busy meanwhile")
    ap.add_argument("--real", action="store_true", help="add the real SmolLM2-135M-Instruct Q4_1")
    ap.add_argument("--gemma", action="store_true", help="add the real Gemma 3 270M Q4_K_M")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build-race"))
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/lilims/bench-models"))
    ap.add_argument("--llama-bench", default="")
    ap.add_argument("--jsonl", default="", help="also append every row as JSON to this file")
    args = ap.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    types = [t for t in args.types.split(",") if t]
    threads = [int(t) for t in args.t.split(",")]
    if any(s not in SHAPE_FILES for s in shapes) or any(t not in ("f16", "q8_0", "q4_0", "q4_1") for t in types):
        ap.error("shapes: smollm2, tinyllama, phi3; types: f16, q8_0, q4_0, q4_1")
    if args.p < 1 or args.n < 1 or args.r < 1 or any(t < 1 for t in threads):
        ap.error("-p, -n, -r and -t must be positive")

    build_lilims(args.build_dir)
    exe = llama_bench_path(args.llama_bench)
    cases = []
    if args.real:
        real = run(["bash", os.path.join(REPO, "scripts", "fetch_model.sh")]).stdout.strip()
        cases.append(("SmolLM2-135M-Instruct Q4_1 (real)", real))
    if args.gemma:
        gemma = run(["bash", os.path.join(REPO, "scripts", "fetch_gemma.sh")]).stdout.strip()
        cases.append(("Gemma 3 270M Q4_K_M (real)", gemma))
    for shape in shapes:
        for wtype in types:
            cases.append((f"{SHAPE_FILES[shape]} {wtype.upper()}",
                          model_file(args.models_dir, args.build_dir, shape, wtype)))

    info = os.path.join(os.path.dirname(os.path.dirname(exe)), "BUILD_INFO.txt")
    commit = ""
    if os.path.exists(info):
        m = re.search(r"llama.cpp commit: (\w+)", open(info).read())
        commit = m.group(1)[:7] if m else ""
    print(f"CPU: {cpu_name()}, {os.cpu_count()} cores; llama.cpp {commit} ({exe})")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at start "
          f"{os.getloadavg()[0]:.1f}; prefill {args.p} tokens, decode {args.n} after {args.p}; "
          f"median of {args.r} alternated runs; competing load: {'one core busy' if args.load else 'none'}")
    print()
    print_header()

    def all_rows():
        for label, model in cases:
            for t in threads:
                row = case_row(args, exe, label, model, t)
                print_row(row)
                if args.jsonl:
                    with open(args.jsonl, "a") as f:
                        f.write(json.dumps(row) + "\n")

    if args.load:
        with BusyCore():
            all_rows()
    else:
        all_rows()
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
