#!/usr/bin/env python3
"""Golden token ids for every tokenizer.ggml.pre value lilims accepts, from
llama.cpp's `llama-tokenize`.

GPT-2's vocabulary (ggml-vocab-gpt-2.gguf, ../shared/data/vocab) is written
again once per name with only tokenizer.ggml.pre changed (and once without the
key), and llama-tokenize encodes each probe text with it (--no-bos
--no-parse-special): the ids then differ only by the split (and by llama3's
ignore_merges) llama.cpp gives the name.  Names whose ids agree on every
probe share one entry of "splits".  "adds_bos" says whether llama-tokenize
adds BOS by default (the file has no add_bos_token key, so llama.cpp's
per-name default shows).

Rerun (from the repo root; needs `pip install gguf` and llama-tokenize from
scripts/build_llamacpp.sh):
  python3 scripts/goldens/gen_pre_tokenizer_ids.py \
      [--vocab ../shared/data/vocab/ggml-vocab-gpt-2.gguf] [--bin .../bin/llama-tokenize] \
      > tests/data/tokenizer_families/pre_tokenizers.json

Read by tests/tokenizer/test_pre_tokenizer_names.cpp.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import gguf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _llamacpp_common import LLAMA_CPP_COMMIT, LLAMA_CPP_PYTHON_VERSION, sha256_file  # noqa: E402

# The names lilims accepts (tokenizer/pretokenize.cpp), but "gpt2" and
# "gpt-neox", which llama.cpp does not know.
NAMES = [
    "default", "gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
    "jina-es", "jina-de", "jina-v2-es", "jina-v2-de", "jina-v1-en", "jina-v2-code", "roberta-bpe",
    "gigachat", "a.x-4.0", "mellum", "modern-bert",
    "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
    "jina-v5-nano", "dbrx", "smaug-bpe",
    "qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "megrez", "stablelm2", "hunyuan", "solar-open",
    "starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b", "mellum2",
    "deepseek-llm", "deepseek-coder", "falcon",
    "gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2",
]

# convert_hf_to_gguf.py's chktxt (made to tell pre-tokenizers apart), then
# shorter probes of one feature each.
PROBES = [
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 "
    "33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
    "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "Hello world",
    " Hello, world! How are you today?",
    "I've been told he's there; we'll see. THEY'D SAY 'RE you sure?' DON'T",
    "1234567890 3.14159 1,000,000 2024-06-14 0x1F",
    "$+<=>^~|` price: $1,234.56 (approx.) a+b=c <tag> x^2 ~y |z| `code`",
    "    leading spaces and trailing   ",
    "tabs\tand\nnewlines\r\n\n\n  mixed \t\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "!!!\n\n...\r\nok?)\n",
    "Äpfel, Straße, naïve café, Ångström; нещо на Български",
    "我想在apple工作1314151天～ 日本語のテキスト 한국어 텍스트 ﬁ ½ ² Ⅻ",
    "HELLOworld iPhone's McDONALD'S CamelCaseWord XMLHttpRequest I'M OK'd",
    "ÄÖÜäöü STRAßE Ñandú ÉCOLE élève e\u0301cole ǅemal Σίσυφος ΣΊΣΥΦΟΣ",
    "a/b//\n/usr/bin/\r\nx --flag=1/2 ..//\n\n",
]


def write_vocab(reader, path, pre):
    w = gguf.GGUFWriter(path, arch=reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key in ("general.architecture", "tokenizer.ggml.pre"):
            continue
        vtype = field.types[0]
        sub = field.types[1] if vtype == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(key, field.contents(), vtype, sub)
    if pre is not None:
        w.add_string("tokenizer.ggml.pre", pre)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def tokenize(bin_path, model, text, *flags):
    r = subprocess.run([bin_path, "-m", model, "--stdin", "--no-escape", "--ids", "--log-disable", *flags],
                       input=text.encode("utf-8"), capture_output=True)
    if r.returncode != 0:
        raise RuntimeError("llama-tokenize failed for %s: %s" % (model, r.stderr.decode()[-2000:]))
    return json.loads(r.stdout.decode("utf-8").strip().splitlines()[-1])


def main():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap = argparse.ArgumentParser()
    ap.add_argument("--vocab", default=os.path.join(os.path.dirname(root), "shared/data/vocab/ggml-vocab-gpt-2.gguf"))
    ap.add_argument("--bin", default=None, help="llama-tokenize (default: scripts/build_llamacpp.sh's)")
    args = ap.parse_args()
    if args.bin is None:
        d = subprocess.run([os.path.join(root, "scripts/build_llamacpp.sh"), "--print-dir"],
                           capture_output=True, text=True, check=True).stdout.strip()
        args.bin = os.path.join(d, "bin/llama-tokenize")

    reader = gguf.GGUFReader(args.vocab)
    bos = int(reader.fields["tokenizer.ggml.bos_token_id"].contents())
    splits = []  # [ids per probe]
    names = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in NAMES + [None]:
            path = os.path.join(tmp, "vocab.gguf")
            write_vocab(reader, path, name)
            ids = [tokenize(args.bin, path, p, "--no-bos", "--no-parse-special") for p in PROBES]
            adds_bos = tokenize(args.bin, path, "a")[:1] == [bos]
            if ids not in splits:
                splits.append(ids)
            names["" if name is None else name] = {"split": splits.index(ids), "adds_bos": adds_bos}
            print("%-18s split %d bos %s" % (name, splits.index(ids), adds_bos), file=sys.stderr)

    source = {
        "tool": "llama-tokenize, llama.cpp@%s (llama-cpp-python %s sdist)" % (
            LLAMA_CPP_COMMIT[:9], LLAMA_CPP_PYTHON_VERSION),
        "vocab": os.path.basename(args.vocab),
        "vocab_sha256": sha256_file(args.vocab),
        "script": "scripts/goldens/gen_pre_tokenizer_ids.py",
        "note": "names[''] is the file without tokenizer.ggml.pre",
    }
    out = sys.stdout
    out.write('{"source": %s,\n' % json.dumps(source))
    out.write(' "probes": [\n%s\n ],\n' % ",\n".join("  " + json.dumps(p, ensure_ascii=False) for p in PROBES))
    out.write(' "names": {\n%s\n },\n' % ",\n".join(
        "  %s: %s" % (json.dumps(n), json.dumps(v)) for n, v in names.items()))
    out.write(' "splits": [\n%s\n ]}\n' % ",\n".join("  " + json.dumps(s) for s in splits))


if __name__ == "__main__":
    main()
