#!/usr/bin/env python3
"""Golden token ids for special tokens that strip whitespace (lstrip/rstrip),
from the Hugging Face `tokenizers` library.

The vocabulary is GPT-2's (../shared/data/vocab/ggml-vocab-gpt-2.gguf: its
tokens and merges), byte-level BPE as GPT-2's tokenizer.json has it, plus
added special tokens in the style of Phi-3's tokenizer.json: the chat
markers strip the whitespace after them (rstrip), <|endoftext|> strips
nothing, and <mask> strips the whitespace before it (lstrip, as BERT-style
mask tokens do).  The test builds the same tokenizer in lilims (from a
tokenizer.json and from a GGUF whose general.name makes llama.cpp give the
special tokens RSTRIP) and compares.

Rerun:
  pip install tokenizers gguf
  python3 scripts/goldens/gen_token_attr_goldens.py \
      ../shared/data/vocab/ggml-vocab-gpt-2.gguf > tests/data/token_attr_goldens.json

Each case is {"text", "ids"}: ids = encode(text, add_special_tokens=False);
HF always matches added tokens in text, so lilims uses parse_special = true.
Only ASCII whitespace is used next to the tokens: llama.cpp strips what C's
isspace() accepts, HF strips Unicode whitespace.
"""
import json
import sys

import gguf
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

ADDED = [
    # content, special, lstrip, rstrip
    ("<|user|>", True, False, True),
    ("<|assistant|>", True, False, True),
    ("<|end|>", True, False, True),
    ("<mask>", True, True, False),
]

CASES = [
    "<|user|>\nHello there<|end|>\n<|assistant|>\n Hi!",
    "<|user|>   spaced   out   <|end|>",
    "<|user|>\n\n\t two lines\r\n<|end|>\r\n<|assistant|>",
    "no markers at all\n ",
    "<|endoftext|> keeps its space<|endoftext|>\n",
    "<|user|><|end|> <|assistant|>  <|endoftext|>  end",
    "word <|user|> word",
    "fill the    <mask> here",
    "<mask>\n<mask> a \n<mask>",
    "a <mask><|user|>  b",
]


def field(reader, name):
    f = reader.fields[name]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def main():
    reader = gguf.GGUFReader(sys.argv[1])
    tokens = field(reader, "tokenizer.ggml.tokens")
    merges = field(reader, "tokenizer.ggml.merges")
    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    added = []
    for content, special, lstrip, rstrip in ADDED:
        tok.add_special_tokens([AddedToken(content, special=special, lstrip=lstrip, rstrip=rstrip,
                                           normalized=False)])
        added.append({"id": tok.token_to_id(content), "content": content, "special": special,
                      "lstrip": lstrip, "rstrip": rstrip})
    cases = [{"text": t, "ids": tok.encode(t, add_special_tokens=False).ids} for t in CASES]
    json.dump({"source": "HF tokenizers " + __import__("tokenizers").__version__ +
               " over ggml-vocab-gpt-2.gguf; scripts/goldens/gen_token_attr_goldens.py",
               "added_tokens": added, "cases": cases}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
