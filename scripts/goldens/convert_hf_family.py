#!/usr/bin/env python3
"""Runs llama.cpp's convert_hf_to_gguf.py unchanged, except for the BPE pre-tokenizer check.

    python3 scripts/goldens/convert_hf_family.py --llamacpp-src DIR --pre NAME -- HF_DIR ARGS...

The converter identifies a BPE tokenizer's pre-tokenizer by hashing the ids it gives for a fixed
text (TextModel.get_vocab_base_pre in conversion/base.py) and refuses a tokenizer it does not
know. The tiny tokenizers of gen_family_models.py have the real families' pre-tokenizer regexes
but their own 512-token vocabularies, so no hash matches: this wrapper replaces that one method
with one returning NAME, the value the converter writes for the real family ("qwen2",
"llama-bpe", "phi-2", "gpt-4o", ...). With --pre - nothing is replaced (SentencePiece vocabularies
never reach that method). Everything else, including every metadata key and tensor, is the
converter's own code, imported from DIR (its gguf-py first on the path, as the converter does).
"""

import argparse
import os
import runpy
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llamacpp-src", required=True)
    ap.add_argument("--pre", required=True, help="tokenizer.ggml.pre to write; - for no patch")
    ap.add_argument("rest", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    rest = args.rest[1:] if args.rest[:1] == ["--"] else args.rest
    script = os.path.join(args.llamacpp_src, "convert_hf_to_gguf.py")
    sys.path.insert(0, os.path.join(args.llamacpp_src, "gguf-py"))
    sys.path.insert(0, args.llamacpp_src)
    if args.pre != "-":
        from conversion.base import TextModel  # the converter's own module object

        def get_vocab_base_pre(self, tokenizer, _pre=args.pre):
            return _pre

        TextModel.get_vocab_base_pre = get_vocab_base_pre
    sys.argv = [script, *rest]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
