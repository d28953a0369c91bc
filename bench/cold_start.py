#!/usr/bin/env python3
"""Load to first token, from a cold page cache: lilims against llama.cpp.

For each model this times a whole process, from its start to its exit, that
loads the GGUF, evaluates a chat prompt (SmolLM2's template around one user
question, ~40 tokens) and samples one token:
  lilims:    lilims run -m MODEL --raw -p PROMPT -n 1 --temp 0 -t T -q
  llama.cpp: llama-completion -m MODEL -p PROMPT -n 1 --temp 0 -t T -c 512
             -no-cnv --no-warmup      (its warm-up run would only add time)
Before every cold run the model file's pages are dropped from the page cache
(posix_fadvise DONTNEED on the file: no root needed, other files stay) and
the script checks with mincore, through `fincore` when util-linux has it,
that none are left.  The two programs alternate (lilims, llama.cpp, lilims,
...), so both see the same drift; each row gives the median of -r runs,
cold and warm (the file cached by the run before), and the ratio
lilims / llama.cpp of the cold medians.

  bench/cold_start.py [--models real,tinyllama-q4_0] [-t 2] [-r 5]
                      [--build-dir build-race] [--llama-completion PATH]

Models: `real` is SmolLM2-135M-Instruct Q4_1 (scripts/fetch_model.sh); SHAPE-TYPE
(e.g. tinyllama-q4_0) is bench/race.py's random-weight model of that shape,
which must exist already (run bench/race.py for it first).  llama.cpp comes
from scripts/build_llamacpp.sh, as for bench/race.py.

Only the standard library: this is a bench script, not part of the tests.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import race  # noqa: E402  (the same builds, paths and CPU name as the race)

PROMPT = ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
          "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
          "<|im_start|>assistant\n")


def drop_from_page_cache(path):
    """Drops the file's cached pages; returns how many stay resident (None: unknown)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
    r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", path],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return int(r.stdout.split()[0])


def timed(cmd):
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    ms = 1000.0 * (time.perf_counter() - t0)
    if r.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({r.returncode}): {r.stderr.strip()[-500:]}")
    return ms


def completion_path(arg):
    if arg:
        return arg
    script = os.path.join(REPO, "scripts", "build_llamacpp.sh")
    d = race.run(["bash", script, "--print-dir"]).stdout.strip()
    exe = os.path.join(d, "bin", "llama-completion")
    if not os.path.exists(exe):
        race.log(f"building llama.cpp into {d} (scripts/build_llamacpp.sh, ~10-20 min)")
        env = dict(os.environ, LLAMACPP_TARGETS="llama-completion llama-bench")
        subprocess.run(["nice", "-n", "10", "bash", script], check=True, env=env, stdout=sys.stderr)
    return exe


def model_path(name, models_dir):
    if name == "real":
        return "SmolLM2-135M-Instruct Q4_1 (real)", race.run(
            ["bash", os.path.join(REPO, "scripts", "fetch_model.sh")]).stdout.strip()
    shape, _, wtype = name.partition("-")
    if shape not in race.SHAPE_FILES or wtype not in ("f16", "q8_0", "q4_0", "q4_1"):
        raise SystemExit(f"unknown model '{name}': real, or SHAPE-TYPE as in bench/race.py")
    path = os.path.join(models_dir, f"{race.SHAPE_FILES[shape]}-random.{wtype}.gguf")
    if not os.path.exists(path):
        raise SystemExit(f"{path} is missing: bench/race.py --shapes {shape} --types {wtype} makes it")
    return f"{race.SHAPE_FILES[shape]} {wtype.upper()}", path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="real,tinyllama-q4_0")
    ap.add_argument("-t", type=int, default=2)
    ap.add_argument("-r", type=int, default=5, help="alternated runs per program, cold and warm each")
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build-race"))
    ap.add_argument("--models-dir", default=os.path.expanduser("~/.cache/lilims/bench-models"))
    ap.add_argument("--llama-completion", default="")
    args = ap.parse_args()
    if args.t < 1 or args.r < 1:
        ap.error("-t and -r must be positive")
    race.build_lilims(args.build_dir)
    exe = completion_path(args.llama_completion)
    lilims = os.path.join(args.build_dir, "lilims")
    models = [model_path(m, args.models_dir) for m in args.models.split(",") if m]

    print(f"CPU: {race.cpu_name()}, {os.cpu_count()} cores; {exe}")
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average at start "
          f"{os.getloadavg()[0]:.1f}; {args.t} threads; process start to exit, one token after "
          f"the chat prompt; median of {args.r} alternated runs")
    print()
    print("| model | file MB | cold ms lilims | llama.cpp | ratio | warm ms lilims | llama.cpp | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for label, path in models:
        cmds = {
            "lilims": [lilims, "run", "-m", path, "--raw", "-p", PROMPT, "-n", "1", "--temp", "0",
                       "-t", str(args.t), "-q"],
            "llama": [exe, "-m", path, "-p", PROMPT, "-n", "1", "--temp", "0", "-t", str(args.t),
                      "-c", "512", "-no-cnv", "--no-warmup"],
        }
        times = {(tool, kind): [] for tool in cmds for kind in ("cold", "warm")}
        for tool in cmds:  # a first run of each, untimed: binaries and libraries cached
            timed(cmds[tool])
        for _ in range(args.r):
            for tool, cmd in cmds.items():
                left = drop_from_page_cache(path)
                if left:
                    raise SystemExit(f"{left} bytes of {path} stayed in the page cache")
                times[(tool, "cold")].append(timed(cmd))
                times[(tool, "warm")].append(timed(cmd))
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"| {label} | {os.path.getsize(path) / 1e6:.0f} | {med[('lilims', 'cold')]:.0f} | "
              f"{med[('llama', 'cold')]:.0f} | {med[('lilims', 'cold')] / med[('llama', 'cold')]:.2f}x | "
              f"{med[('lilims', 'warm')]:.0f} | {med[('llama', 'warm')]:.0f} | "
              f"{med[('lilims', 'warm')] / med[('llama', 'warm')]:.2f}x |", flush=True)
    print(f"\nload average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
