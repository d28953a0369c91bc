#!/usr/bin/env python3
"""Golden token ids for Gemma 3's tokenizer from llama.cpp's `llama-tokenize`.

Gemma 3 270M's GGUF (scripts/fetch_gemma.sh) carries a 262,144-token
SentencePiece vocabulary (tokenizer.ggml.model "llama", byte fallback,
add_space_prefix false, add_bos true, user-defined tokens for runs of
newlines, spaces and tabs and for HTML tags).  llama-tokenize loads the
vocabulary only and prints the ids of the text it reads on stdin.

Rerun (from the repo root):
  scripts/fetch_gemma.sh
  scripts/build_llamacpp.sh                     # builds llama-tokenize among others
  python3 scripts/goldens/gen_gemma3_tokens.py \
      [--model ~/.cache/lilims/models/gemma-3-270m-q4_k_m.gguf] \
      [--bin "$(scripts/build_llamacpp.sh --print-dir)/bin/llama-tokenize"] \
      > tests/data/gemma3_tokens.json

Each case is {"text", "ids", "ids_literal"}: ids = llama-tokenize --no-bos
(special tokens in the text parsed), ids_literal = --no-bos
--no-parse-special.  "with_bos" cases are tokenized as llama-tokenize does by
default: BOS added because the vocabulary asks for it.  Read by
tests/tokenizer/test_gemma3.cpp.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _llamacpp_common import LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, sha256_file  # noqa: E402

CORPUS = [
    # plain text
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "I've been told he's there; we'll see. They'd say 'RE you sure?' DON'T",
    "1234567890 3.14159 1,000,000 2024-06-14 0x1F",
    "a",
    "",
    # leading, trailing and repeated spaces (runs of 2..31 spaces are user-defined tokens)
    " Hello",
    "  Hello",
    "   leading three",
    "trailing   ",
    "a  b   c    d     e",
    " ",
    " " * 40,
    "x" + " " * 33 + "y",
    # newlines and tabs (runs of them are user-defined tokens too)
    "\n",
    "line one\nline two",
    "a\n\n\nb",
    "\n" * 35,
    "\r\n windows\r\n",
    "\tindented\n\t\ttwice",
    "tabs\tand\nnewlines\r\n\n\n  mixed \t\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    # unicode
    "Äpfel, Straße, naïve café, Cửa Việt, Ångström",
    "нещо на Български, Привет мир",
    "我想在apple工作1314151天～ 日本語のテキスト 한국어 텍스트",
    "مرحبا بالعالم",
    "🚀 (normal) 😶\u200d🌫️ emoji ✅ 🦙🦙 👍🏽",
    "e\u0301 combining, \u00a0nbsp, \u2003em space, \u3000ideographic",
    "ﬁ ligature, ½ fraction, ² superscript, Ⅻ roman",
    # characters the vocabulary may lack: byte fallback
    "\U00010400\U0001D11E\uE000\U000E0041 rare",
    "ctrl \x01\x02\x7f\x1b[0m",
    "\U0001FAE8\U0001FABF\U00013000",
    # markup and code
    "<table><tr><td>cell</td></tr></table>",
    "<b>bold</b> and <s>strike</s>",
    "https://example.com/path?query=1&b=2#frag",
    "{\"action\":\"open_app\",\"app\":\"camera\"}",
    # special tokens
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after bos",
    "text <eos> more",
    "<end_of_turn>",
    "<start_of_image> [multimodal] <end_of_image>",
    "<unused0><mask><pad>",
]

WITH_BOS = [
    "Hello world",
    "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
    "",
]


def tokenize(bin_path, model, text, *flags):
    r = subprocess.run([bin_path, "-m", model, "--stdin", "--no-escape", "--ids", "--log-disable", *flags],
                       input=text.encode("utf-8"), capture_output=True, check=True)
    line = r.stdout.decode("utf-8").strip().splitlines()[-1]
    return json.loads(line)


def main():
    home = os.path.expanduser("~")
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.join(
        os.environ.get("LILIMS_MODEL_DIR", os.path.join(home, ".cache/lilims/models")),
        "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--bin", default=None, help="llama-tokenize (default: scripts/build_llamacpp.sh's)")
    args = ap.parse_args()
    if args.bin is None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        d = subprocess.run([os.path.join(root, "scripts/build_llamacpp.sh"), "--print-dir"],
                           capture_output=True, text=True, check=True).stdout.strip()
        args.bin = os.path.join(d, "bin/llama-tokenize")

    cases = []
    for text in CORPUS:
        cases.append({"text": text,
                      "ids": tokenize(args.bin, args.model, text, "--no-bos"),
                      "ids_literal": tokenize(args.bin, args.model, text, "--no-bos", "--no-parse-special")})
    with_bos = [{"text": t, "ids": tokenize(args.bin, args.model, t)} for t in WITH_BOS]

    source = {
        "tool": "llama-tokenize, llama.cpp@%s (llama-cpp-python %s sdist)" % (
            LLAMA_CPP_COMMIT[:9], LLAMA_CPP_PYTHON_VERSION),
        "model": os.path.basename(args.model),
        "model_sha256": sha256_file(args.model),
        "script": "scripts/goldens/gen_gemma3_tokens.py",
    }
    out = sys.stdout
    out.write('{"source": %s,\n "cases": [\n' % json.dumps(source))
    out.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
    out.write('\n ],\n "with_bos": [\n')
    out.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in with_bos))
    out.write("\n ]}\n")


if __name__ == "__main__":
    main()
