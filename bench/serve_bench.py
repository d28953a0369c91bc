#!/usr/bin/env python3
"""Throughput of an OpenAI-compatible server under concurrent streams.

For each concurrency N (default 1, 2, 4, 8) the server is started with N
sequence slots, then N clients at once each stream one /v1/completions
request: a prompt of --prompt-tokens random token ids (different for every
request and run, so no prompt cache helps) and --gen-tokens tokens with the
end of generation banned (ignore_eos), greedy.  Per request: time to first
token (request sent -> first streamed text) and its decode rate (tokens after
the first / time after the first).  Reported: aggregate decode tokens/s (the
sum of the requests' decode rates), mean and max TTFT, and the wall time of
the round.  Each N runs --rounds times after one warm-up round; the median
round is reported.

  bench/serve_bench.py --lilims build/lilims -m MODEL.gguf
  bench/serve_bench.py --llama-server /tmp/llama-server-build/bin/llama-server -m MODEL.gguf
"""
import argparse
import http.client
import json
import random
import re
import statistics
import subprocess
import sys
import threading
import time


def start(args, n):
    ctx = args.prompt_tokens + args.gen_tokens + 64
    if args.lilims:
        cmd = [args.lilims, "serve", "-m", args.model, "--port", "0", "--parallel", str(n), "-c", str(ctx),
               "-t", str(args.threads), "--queue", "64"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        line = proc.stderr.readline()
        m = re.search(r"listening on http://[\d.]+:(\d+)", line)
        if not m:
            proc.kill()
            sys.exit("lilims serve did not start: " + line)
        port = int(m.group(1))
    else:
        port = args.port
        # llama-server's -c is shared by its slots.
        cmd = [args.llama_server, "-m", args.model, "--port", str(port), "--host", "127.0.0.1", "-np", str(n),
               "-c", str(ctx * n), "-t", str(args.threads), "-tb", str(args.threads), "--no-webui",
               "-cb", "--cache-reuse", "0"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    threading.Thread(target=proc.stderr.read, daemon=True).start()
    for _ in range(600):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return proc, port
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    sys.exit("the server did not become healthy: " + " ".join(cmd))


def one(port, prompt, n_gen, out):
    body = json.dumps({"prompt": prompt, "max_tokens": n_gen, "temperature": 0, "stream": True,
                       "ignore_eos": True, "stream_options": {"include_usage": True}})
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.perf_counter()
    c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    chunks = 0
    usage = None
    buf = b""
    while True:
        data = r.read1(65536) if hasattr(r, "read1") else r.read(1)
        if not data:
            break
        buf += data
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            if not ev.startswith(b"data: "):
                continue
            payload = ev[6:]
            if payload == b"[DONE]":
                continue
            j = json.loads(payload)
            if j.get("usage"):
                usage = j["usage"]
            for ch in j.get("choices", []):
                if ch.get("text"):
                    chunks += 1
                    if first is None:
                        first = time.perf_counter()
    end = time.perf_counter()
    n = usage["completion_tokens"] if usage else chunks
    out.append({"ttft": first - t0, "decode_tps": (n - 1) / (end - first) if n > 1 else 0.0, "n": n,
                "end": end, "t0": t0})


def round_(port, n, args, rng):
    results, threads = [], []
    for _ in range(n):
        prompt = [rng.randrange(1000, 20000) for _ in range(args.prompt_tokens)]
        threads.append(threading.Thread(target=one, args=(port, prompt, args.gen_tokens, results)))
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"agg_decode_tps": sum(r["decode_tps"] for r in results),
            "ttft_mean": statistics.mean(r["ttft"] for r in results),
            "ttft_max": max(r["ttft"] for r in results),
            "tokens": sum(r["n"] for r in results), "wall": wall}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--lilims")
    ap.add_argument("--llama-server")
    ap.add_argument("--port", type=int, default=18080, help="llama-server's port")
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-n", "--concurrency", default="1,2,4,8")
    ap.add_argument("--prompt-tokens", type=int, default=256)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="one JSON line per concurrency")
    args = ap.parse_args()
    if bool(args.lilims) == bool(args.llama_server):
        ap.error("give --lilims or --llama-server")
    name = "lilims serve" if args.lilims else "llama-server"
    rng = random.Random(1234)
    if not args.json:
        print(f"{name}: {args.prompt_tokens}-token prompts, {args.gen_tokens} tokens each, -t {args.threads}, "
              f"median of {args.rounds} rounds")
        print(f"{'streams':>7} {'agg decode t/s':>15} {'TTFT mean ms':>13} {'TTFT max ms':>12} {'round s':>8}")
    for n in [int(x) for x in args.concurrency.split(",")]:
        proc, port = start(args, n)
        try:
            round_(port, n, args, rng)  # warm-up
            rounds = sorted((round_(port, n, args, rng) for _ in range(args.rounds)),
                            key=lambda r: r["agg_decode_tps"])
            r = rounds[len(rounds) // 2]
            if args.json:
                print(json.dumps(dict(server=name, streams=n, **r)))
            else:
                print(f"{n:>7} {r['agg_decode_tps']:>15.1f} {r['ttft_mean'] * 1e3:>13.0f} "
                      f"{r['ttft_max'] * 1e3:>12.0f} {r['wall']:>8.2f}")
            sys.stdout.flush()
        finally:
            proc.terminate()
            proc.wait(timeout=60)


if __name__ == "__main__":
    main()
