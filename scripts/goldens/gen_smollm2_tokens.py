#!/usr/bin/env python3
"""Golden token ids for SmolLM2 from the Hugging Face `tokenizers` library.

SmolLM2's tokenizer.json is not available offline, so the reference is
rebuilt from the GGUF's own vocabulary and merges with the pieces that
tokenizer.json names: model BPE (no byte fallback, no unk), pre-tokenizer
Sequence[Digits(individual_digits=True), ByteLevel(add_prefix_space=False,
use_regex=True)], decoder ByteLevel, and the added (special) tokens.

Rerun:
  pip install tokenizers gguf
  python3 scripts/goldens/gen_smollm2_tokens.py \
      ~/.cache/lilims/models/SmolLM2-135M-Instruct.Q4_1.gguf > tests/data/smollm2_tokens.json

Each case is {"text", "ids"}: ids = encode(text, add_special_tokens=False).
HF always matches added tokens in text, so lilims is compared with
parse_special = true.
"""
import json
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

CORPUS = [
    "Hello world",
    " Hello, world! How are you today?",
    "The quick brown fox jumps over the lazy dog.",
    "I've been told he's there; we'll see. They'd say 'RE you sure?' DON'T",
    "1234567890 3.14159 1,000,000 2024-06-14 0x1F",
    "    leading spaces and trailing   ",
    "tabs\tand\nnewlines\r\n\n\n  mixed \t\n",
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "int main() { printf(\"%d\\n\", 42); return 0; }",
    "Äpfel, Straße, naïve café, Cửa Việt, Ångström",
    "нещо на Български, Привет мир",
    "我想在apple工作1314151天～ 日本語のテキスト 한국어 텍스트",
    "مرحبا بالعالم",
    "🚀 (normal) 😶\u200d🌫️ emoji ✅ 🦙🦙 👍🏽",
    "!!!!!!?????......------=======```````\"\"\"\"",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text with <|endoftext|> inside and <|im_end|>",
    "   ",
    "\n",
    "a",
    "",
    "https://example.com/path?query=1&b=2#frag",
    "{\"action\":\"open_app\",\"app\":\"camera\"}",
    "ﬁ ligature, ½ fraction, ² superscript, Ⅻ roman",
    "e\u0301 combining, \u00a0nbsp, \u2003em space, \u3000ideographic",
]


def main():
    path = sys.argv[1]
    r = gguf.GGUFReader(path)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    ttype = r.fields["tokenizer.ggml.token_type"]
    types = [int(ttype.parts[i][0]) for i in ttype.data]
    vocab = {t: i for i, t in enumerate(tokens)}

    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False)
                            for i, t in enumerate(types) if t == 3])

    cases = []
    for text in CORPUS:
        ids = tok.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids})
    source = "HF tokenizers %s, vocab/merges from %s" % (
        __import__("tokenizers").__version__, path.split("/")[-1])
    out = sys.stdout
    out.write('{"source": %s,\n "cases": [\n' % json.dumps(source))
    out.write(",\n".join("  " + json.dumps(c, ensure_ascii=False) for c in cases))
    out.write("\n ]}\n")


if __name__ == "__main__":
    main()
