#!/usr/bin/env python3
"""Random LoRA adapters in llama.cpp's GGUF format, and what llama.cpp computes with them.

Rerun (from the repo root; ~5-10 min on 2 cores after the build):

    pip install gguf==0.19.0 numpy
    LLAMACPP_TARGETS="llama-perplexity llama-simple llama-completion llama-export-lora" \\
        scripts/build_llamacpp.sh
    scripts/fetch_model.sh                       # SmolLM2-135M-Instruct.Q4_1.gguf
    python3 scripts/goldens/gen_lora_goldens.py [--build-dir DIR] [--part adapters|goldens|all]

Pinned: gguf 0.19.0 (writes the adapters), llama.cpp
0c1e57098bba43ac29e6e3b677cdceebdd22334f as vendored by llama-cpp-python 0.3.36 (the build
of scripts/build_llamacpp.sh, default dir from its --print-dir).

Part "adapters" writes tests/data/lora/*.lora.gguf (deterministic: seeded NumPy). The format,
as llama.cpp's src/llama-adapter.cpp reads it and convert_lora_to_gguf.py writes it:
general.architecture = the base's, general.type = "adapter", adapter.type = "lora",
adapter.lora.alpha (float32), and for each adapted base weight W (NumPy shape (n_out, n_in),
ggml ne [n_in, n_out]) two tensors:
    W.lora_a  NumPy (rank, n_in)   ggml ne [n_in, rank]
    W.lora_b  NumPy (n_out, rank)  ggml ne [rank, n_out]
llama.cpp's build_lora_mm computes W x + scale * B (A x) with rank = ne[0] of lora_b and
scale = user_scale * alpha / rank, or user_scale when alpha is 0.

The values: A = N(0, 1) / sqrt(n_in) (rows of about unit norm), B = N(0, 1) rescaled so that
||scale * B A||_F = REL * ||W||_F at user scale 1, W dequantized with gguf. REL per adapter
was chosen so that llama-perplexity moves by a few percent to tens of percent.

Part "goldens" writes tests/data/lora/goldens.json from the llama.cpp build, per adapter:
  - llama-perplexity on tests/data/ppl_text.txt without the adapter, with --lora FILE and with
    --lora-scaled FILE:0.5 (this version's spelling), the final estimate and its +/-, the
    exact command lines;
  - llama-completion greedy text (--temp 0 --top-k 1) for a fixed prompt, with and without
    (llama-simple, also built, takes no --lora; neither prints token ids);
  - llamacpp_lora_logits.cpp (compiled here against the build's static libraries): the
    prompt's token ids, the last position's top-20 logits and 32 greedy token ids, for a few
    prompts, with and without the adapter (and at scale 0.5 for the first prompt); the greedy
    ids are checked to detokenize to llama-completion's text;
  - for the unquantized bases: llama-export-lora's merged model and its perplexity (the
    adapter as merged weights), and the float64 NumPy forward (tiny_numpy_forward.py) with the
    adapter merged, against the dumper's top-20 (checks our reading of the format);
  - rank, alpha, the scale at user scale 1 and 0.5, the adapted tensors, file sha256.
"""

import argparse
import datetime
import glob
import json
import os
import platform
import re
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader, GGUFWriter
from gguf.quants import dequantize

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from _llamacpp_common import (LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, f32,  # noqa: E402
                              sha256_file)

OUT_DIR = os.path.join(REPO, "tests", "data", "lora")
TEXT = "tests/data/ppl_text.txt"
THREADS = 2
N_GEN = 32

LLAMA_PROJ = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
PHI3_PROJ = ["attn_qkv", "attn_output", "ffn_up", "ffn_down"]

# name, base (repo-relative, or scripts/fetch_model.sh for SmolLM2), layers (None: all), projections, rank, alpha,
# stored type, REL, seed, perplexity args, whether to check llama.cpp against the float64
# NumPy forward (unquantized bases), prompts (the first is also run at scale 0.5 and through
# llama-completion).
ADAPTERS = [
    dict(name="stories260k", base="../shared/data/stories260K/stories260K.gguf",
         layers=None, proj=LLAMA_PROJ, rank=4, alpha=8.0, dtype=np.float32, rel=0.12,
         seed=260, ppl_args=["-c", "128", "-b", "128"], numpy_check=True,
         prompts=["Once upon a time, there was a little girl named Lily.",
                  "The cat sat on the mat and",
                  "Tom and his dog went to the park. They"]),
    dict(name="smollm2", base="scripts/fetch_model.sh",
         layers=list(range(0, 30, 2)), proj=LLAMA_PROJ, rank=4, alpha=4.0, dtype=np.float16, rel=0.07,
         seed=135, ppl_args=["-c", "512", "-b", "512", "--chunks", "4"], numpy_check=False,
         prompts=["The capital of France is",
                  "Here is a short poem about the sea:\n",
                  "def fibonacci(n):"]),
    dict(name="phi3", base="tests/data/tiny/phi3.gguf",
         layers=None, proj=PHI3_PROJ, rank=2, alpha=4.0, dtype=np.float32, rel=0.8,
         seed=3, ppl_args=["-c", "128", "-b", "128"], numpy_check=True,
         prompts=["Once upon a time", "The little dog ran to the"]),
    dict(name="llama_tiny", base="tests/data/tiny/llama.gguf",
         layers=[1], proj=["attn_q", "attn_v", "ffn_down"], rank=3, alpha=0.0,
         dtype=np.float32, rel=0.8, seed=7, ppl_args=["-c", "128", "-b", "128"], numpy_check=True,
         prompts=["Once upon a time", "The little dog ran to the"]),
]


def base_path(a):
    """The base model's path; "scripts/fetch_model.sh" = the SmolLM2 file it fetches and prints
    (~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf by default)."""
    if a["base"] == "scripts/fetch_model.sh":
        if "fetched" not in a:
            p = subprocess.run([os.path.join(REPO, a["base"])], capture_output=True, text=True,
                               check=True)
            a["fetched"] = p.stdout.strip().splitlines()[-1]
        return a["fetched"]
    return os.path.join(REPO, a["base"])


def adapter_path(a):
    return os.path.join(OUT_DIR, f"{a['name']}.lora.gguf")


def scale_of(a, user_scale):
    return user_scale * a["alpha"] / a["rank"] if a["alpha"] != 0 else user_scale


def targets(a, reader):
    """Base weight names the adapter adapts, in layer then projection order."""
    n_layer = reader.fields[f"{arch_of(reader)}.block_count"].contents()
    layers = a["layers"] if a["layers"] is not None else range(n_layer)
    return [f"blk.{i}.{p}.weight" for i in layers for p in a["proj"]]


def arch_of(reader):
    return reader.fields["general.architecture"].contents()


def write_adapter(a):
    reader = GGUFReader(base_path(a))
    arch = arch_of(reader)
    tensors = {t.name: t for t in reader.tensors}
    rng = np.random.default_rng(a["seed"])
    scale = scale_of(a, 1.0)
    rank = a["rank"]
    w = GGUFWriter(adapter_path(a), arch)
    w.add_type("adapter")
    w.add_string("adapter.type", "lora")
    w.add_float32("adapter.lora.alpha", a["alpha"])
    w.add_name(f"lilims random LoRA for {os.path.basename(base_path(a))}")
    rels = []
    for name in targets(a, reader):
        t = tensors[name]
        W = dequantize(t.data, t.tensor_type).astype(np.float64)  # (n_out, n_in)
        n_out, n_in = W.shape
        A = rng.standard_normal((rank, n_in)) / np.sqrt(n_in)
        B = rng.standard_normal((n_out, rank))
        B *= a["rel"] * np.linalg.norm(W) / np.linalg.norm(scale * B @ A)
        A, B = A.astype(a["dtype"]), B.astype(a["dtype"])
        rels.append(np.linalg.norm(scale * B.astype(np.float64) @ A.astype(np.float64))
                    / np.linalg.norm(W))
        w.add_tensor(name + ".lora_a", A)
        w.add_tensor(name + ".lora_b", B)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{adapter_path(a)}: {len(rels)} weights, ||dW||/||W|| {min(rels):.4f}..{max(rels):.4f}, "
          f"{os.path.getsize(adapter_path(a))} bytes", file=sys.stderr)


# ---------------------------------------------------------------------------------------------
# llama.cpp runs

def run(cmd, stdin=None, complete=None):
    """Runs cmd; returns (stdout bytes, stdout text, stderr text). The tiny random models write
    byte tokens that are not UTF-8, so the text forms replace what does not decode.

    llama.cpp's tools print through a logger thread that this version never joins at exit
    (common_log_main() leaks it on purpose, llama.cpp issue 22142), so what it has not printed
    yet is lost: on this busy 2-core machine about half the llama-completion runs of a tiny
    model print nothing or a cut text, and llama-perplexity sometimes lacks its final estimate.
    `complete(raw, out, err)` says whether a run's output is whole; an incomplete run is
    repeated, up to 50 times."""
    for _ in range(50):
        print("running:", " ".join(cmd), file=sys.stderr)
        p = subprocess.run(cmd, capture_output=True, cwd=REPO,
                           input=None if stdin is None else stdin.encode())
        out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
        if p.returncode != 0:
            sys.stderr.write((out + err)[-4000:])
            sys.exit(f"[gen_lora_goldens] failed: {' '.join(cmd)}")
        if complete is None or complete(p.stdout, out, err):
            return p.stdout, out, err
        print("  output incomplete, running again", file=sys.stderr)
    sys.exit(f"[gen_lora_goldens] output incomplete 50 times: {' '.join(cmd)}")


def ppl_complete(raw, out, err):
    """The final estimate is printed and the running estimates reach the last chunk."""
    c = re.search(r"calculating perplexity over (\d+) chunks", err)
    return (c is not None and "Final estimate: PPL" in err
            and f"[{c.group(1)}]" in out and out.rstrip().endswith(","))


def rel(path):
    """A path as written in the json: repo-relative when in the repo or beside it
    (../shared/data), ~ for the cache."""
    path = os.path.abspath(path)
    if path.startswith(os.path.dirname(REPO) + os.sep):
        return os.path.relpath(path, REPO)
    home = os.path.expanduser("~")
    return "~" + path[len(home):] if path.startswith(home + os.sep) else path


def perplexity(bin_dir, a, lora_args, model=None, model_name=None):
    model = model or base_path(a)
    cmd = [os.path.join(bin_dir, "llama-perplexity"), "-m", model, "-f", TEXT, *a["ppl_args"],
           "-t", str(THREADS), *lora_args]
    _, out_text, err_text = run(cmd, complete=ppl_complete)
    log = out_text + err_text
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", log)
    out = {"command": " ".join(["llama-perplexity", "-m", model_name or rel(model), "-f", TEXT,
                                *a["ppl_args"], "-t", str(THREADS),
                                *[rel_arg(x) for x in lora_args]]),
           "ppl": float(m.group(1)), "ppl_pm": float(m.group(2))}
    c = re.search(r"calculating perplexity over (\d+) chunks, n_ctx=(\d+)", log)
    if c:
        out["n_chunks"] = int(c.group(1))
    # The running estimate after each chunk (stdout), for a test that runs fewer chunks.
    out["running_estimates"] = [float(x) for x in re.findall(r"\[\d+\]([0-9.]+),", out_text)]
    return out


def merged_perplexity(bin_dir, a, path, tmp):
    """llama-export-lora's merge (W + scale * B A in F32, stored as the base tensor's type if
    F32, else F16) and its perplexity: the adapter as a merged model."""
    merged = os.path.join(tmp, f"{a['name']}.merged.gguf")
    _, out, err = run([os.path.join(bin_dir, "llama-export-lora"), "-m", base_path(a),
                       "--lora", path, "-o", merged, "-t", str(THREADS)])
    scales = {float(x) for x in re.findall(r"calculated_scale=([0-9.]+)", out + err)}
    if scales != {f32(scale_of(a, 1.0))}:
        sys.exit(f"[gen_lora_goldens] llama-export-lora's scales {scales} for {a['name']}, "
                 f"expected {scale_of(a, 1.0)}")
    r = perplexity(bin_dir, a, [], merged, "MERGED")
    r["command_export"] = " ".join(["llama-export-lora", "-m", rel(base_path(a)), "--lora",
                                    rel(path), "-o", "MERGED", "-t", str(THREADS)])
    r["calculated_scale"] = scales.pop()
    return r


def rel_arg(x):
    """A command-line argument with the adapter's path made repo-relative (FILE or FILE:SCALE)."""
    path, sep, tail = x.partition(":")
    return rel(path) + sep + tail if path.endswith(".gguf") else x


def completion(bin_dir, a, prompt, lora_args):
    """llama-completion's greedy continuation (text only: it prints no token ids)."""
    model = base_path(a)
    args = ["-p", prompt, "-n", str(N_GEN), "--temp", "0", "--top-k", "1", "--seed", "1",
            "-t", str(THREADS), "-no-cnv", "--no-display-prompt", "--no-warmup"]
    raw, _, _ = run([os.path.join(bin_dir, "llama-completion"), "-m", model, *args, *lora_args],
                    stdin="", complete=lambda raw, out, err: raw.endswith(b"\n\n"))
    return raw, {"command": " ".join(["llama-completion", "-m", rel(model),
                                      *[json.dumps(x) if x == prompt else x for x in args],
                                      *[rel_arg(x) for x in lora_args]]),
                 "text": raw.decode(errors="replace")}


def build_dumper(build_dir, out):
    src = glob.glob(os.path.join(build_dir, "_src", "*", "vendor", "llama.cpp"))
    if not src:
        sys.exit(f"[gen_lora_goldens] no llama.cpp sources under {build_dir}/_src")
    libs = [os.path.join(build_dir, "src", "libllama.a")]
    libs += [os.path.join(build_dir, "ggml", "src", f"libggml{s}.a") for s in ("", "-cpu", "-base")]
    for lib in libs:
        if not os.path.exists(lib):
            sys.exit(f"[gen_lora_goldens] {lib} missing: build llama.cpp first")
    run(["g++", "-std=c++17", "-O1", "-I", os.path.join(src[0], "include"),
         "-I", os.path.join(src[0], "ggml", "include"),
         os.path.join(HERE, "llamacpp_lora_logits.cpp"), *libs, "-fopenmp", "-lpthread", "-ldl",
         "-o", out])


def dump(dumper, a, prompt, lora, user_scale, n_ctx):
    _, out, _ = run([dumper, base_path(a), str(n_ctx), DUMP_KV, lora, str(user_scale),
                     str(N_GEN)], stdin=prompt)
    lines = dict(line.split(" ", 1) if " " in line else (line, "") for line in out.splitlines())
    pieces = [b"" if h == "-" else bytes.fromhex(h) for h in lines["gen_pieces"].split()]
    return {
        "prompt_ids": [int(x) for x in lines["prompt_ids"].split()],
        "top20": [[int(i), f32(float(v))] for i, v in
                  (kv.split(":") for kv in lines["top20"].split())],
        "greedy_ids": [int(x) for x in lines["gen_ids"].split()],
        "greedy_text": b"".join(pieces).decode(errors="replace"),
        "greedy_bytes": b"".join(pieces),
        "stopped_at_eog": lines["stopped_at_eog"] == "1",
    }


DUMP_KV = "f16"   # llama.cpp's default KV cache type, as llama-perplexity and llama-completion use


def goldens(build_dir):
    bin_dir = os.path.join(build_dir, "bin")
    doc = {
        "about": "LoRA goldens from llama.cpp, made by scripts/goldens/gen_lora_goldens.py "
                 "(see tests/data/lora/SOURCE.md)",
        "llama_cpp_commit": LLAMA_CPP_COMMIT,
        "llama_cpp_python_sdist": LLAMA_CPP_PYTHON_VERSION,
        "machine": platform.machine(),
        "generated_utc": datetime.datetime.now(datetime.timezone.utc)
        .replace(microsecond=0).isoformat(),
        "scale_rule": "W x + scale * B (A x); scale = user_scale * alpha / rank, "
                      "or user_scale when alpha is 0 (rank = lora_b ne[0])",
        "perplexity_notes": f"llama-perplexity on {TEXT}, {THREADS} threads, its defaults "
                            "otherwise (F16 KV cache, flash attention auto); each chunk scores "
                            "its second half; ppl is its 'Final estimate'; merged_export_lora: "
                            "MERGED is the model llama-export-lora wrote (F32 tensors stay "
                            "F32, F16 ones are merged in F32 and stored F16)",
        "greedy_notes": f"dumper = scripts/goldens/llamacpp_lora_logits.cpp: prompt tokenized "
                        f"by llama.cpp with BOS, one batch, 1 thread, {DUMP_KV.upper()} KV "
                        f"cache; top20 = last prompt position's largest logits [id, logit]; "
                        f"greedy_ids = up to {N_GEN} argmax tokens, stopping before an "
                        f"end-of-generation token; greedy_text = their pieces (bytes that are "
                        f"not UTF-8 replaced: the ids are the golden); flash attention auto. "
                        f"llama_completion.text (first prompt) is its stdout: the same "
                        f"continuation, checked byte for byte (a <0x00> token prints nothing), "
                        f"then ' [end of text]\\n' at an end-of-generation token, then "
                        f"'\\n\\n'",
        "adapters": {},
    }
    with tempfile.TemporaryDirectory() as tmp:
        dumper = os.path.join(tmp, "llamacpp_lora_logits")
        build_dumper(build_dir, dumper)
        for a in ADAPTERS:
            path = adapter_path(a)
            reader = GGUFReader(path)
            names = [t.name[:-len(".lora_a")] for t in reader.tensors if t.name.endswith(".lora_a")]
            n_ctx = int(a["ppl_args"][a["ppl_args"].index("-c") + 1])
            e = {
                "file": rel(path), "sha256": sha256_file(path), "bytes": os.path.getsize(path),
                "base": rel(base_path(a)), "base_sha256": sha256_file(base_path(a)),
                "rank": a["rank"], "alpha": a["alpha"],
                "dtype": "F16" if a["dtype"] == np.float16 else "F32",
                "scale": scale_of(a, 1.0), "scale_at_0.5": scale_of(a, 0.5),
                "seed": a["seed"], "rel_frobenius": a["rel"], "adapted": names,
                "perplexity": {
                    "base": perplexity(bin_dir, a, []),
                    "lora": perplexity(bin_dir, a, ["--lora", path]),
                    "lora_scaled_0.5": perplexity(bin_dir, a, ["--lora-scaled", f"{path}:0.5"]),
                },
                "prompts": [],
            }
            if a["numpy_check"]:
                e["perplexity"]["merged_export_lora"] = merged_perplexity(bin_dir, a, path, tmp)
            for k, prompt in enumerate(a["prompts"]):
                case = {"prompt": prompt,
                        "base": dump(dumper, a, prompt, "-", 1.0, n_ctx),
                        "lora": dump(dumper, a, prompt, path, 1.0, n_ctx)}
                if k == 0:
                    case["lora_scaled_0.5"] = dump(dumper, a, prompt, path, 0.5, n_ctx)
                    for key, extra in (("base", []), ("lora", ["--lora", path])):
                        raw, c = completion(bin_dir, a, prompt, extra)
                        # llama-completion prints each piece with %s (a <0x00> byte token
                        # prints nothing) and ends with " [end of text]\n" at an EOG, then
                        # "\n\n".
                        want = case[key]["greedy_bytes"].replace(b"\0", b"")
                        want += b" [end of text]\n" if case[key]["stopped_at_eog"] else b""
                        if raw != want + b"\n\n":
                            sys.exit(f"[gen_lora_goldens] {a['name']} {key}: llama-completion "
                                     f"wrote {raw!r}, the dumper's greedy ids "
                                     f"{want!r}")
                        case[key]["llama_completion"] = c
                for key in ("base", "lora", "lora_scaled_0.5"):
                    if key in case:
                        assert case[key]["prompt_ids"] == case["base"]["prompt_ids"]
                        del case[key]["greedy_bytes"]
                if a["numpy_check"]:
                    case["numpy_float64_check"] = numpy_check(a, path, case)
                e["prompts"].append(case)
            doc["adapters"][a["name"]] = e
            ppl = e["perplexity"]
            print(f"{a['name']}: ppl base {ppl['base']['ppl']}, lora {ppl['lora']['ppl']}, "
                  f"lora 0.5 {ppl['lora_scaled_0.5']['ppl']}", file=sys.stderr)
    with open(os.path.join(OUT_DIR, "goldens.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def numpy_check(a, path, case):
    """|llama.cpp - float64 NumPy| over the top-20 of the last prompt position, the adapter
    merged into the weights as W + scale * B A (tiny_numpy_forward.py; unquantized bases)."""
    import tiny_numpy_forward as tnf
    ids = case["base"]["prompt_ids"]
    factors = "long"  # llama.cpp's phi3 takes the long factors whenever n_ctx > 32
    lora = {t.name: np.array(t.data, dtype=np.float64) for t in GGUFReader(path).tensors}
    out = {}
    for key, user_scale in (("base", 0.0), ("lora", 1.0), ("lora_scaled_0.5", 0.5)):
        if key not in case:
            continue
        m = tnf.GgufModel(base_path(a))
        for name in list(m.t):
            if name + ".lora_a" in lora:
                m.t[name] = m.t[name] + scale_of(a, user_scale) * (
                    lora[name + ".lora_b"] @ lora[name + ".lora_a"])
        row = tnf.forward(m, ids, factors)[-1]
        top = case[key]["top20"]
        out[key] = {"max_abs_diff_top20": f32(max(abs(row[i] - v) for i, v in top)),
                    "argmax_equal": int(np.argmax(row)) == top[0][0]}
    return out


def default_build_dir():
    return subprocess.run([os.path.join(REPO, "scripts", "build_llamacpp.sh"), "--print-dir"],
                          capture_output=True, text=True, check=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-dir", help="llama.cpp build (default: build_llamacpp.sh --print-dir)")
    ap.add_argument("--part", choices=["adapters", "goldens", "all"], default="all")
    ap.add_argument("--only", help="comma-separated adapter names (default: all)")
    args = ap.parse_args()
    if args.only:
        keep = args.only.split(",")
        ADAPTERS[:] = [a for a in ADAPTERS if a["name"] in keep]
    os.makedirs(OUT_DIR, exist_ok=True)
    if args.part in ("adapters", "all"):
        for a in ADAPTERS:
            write_adapter(a)
    if args.part in ("goldens", "all"):
        goldens(args.build_dir or default_build_dir())


if __name__ == "__main__":
    main()
