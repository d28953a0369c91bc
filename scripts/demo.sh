#!/usr/bin/env bash
# The main job on a fresh Debian machine: installs what the build needs,
# builds lilims, fetches the default model (SmolLM2-135M-Instruct, once) and
# asks it for text, then for a tool call (examples/tools, with the adapter
# trained for them: examples/tools/adapter.gguf).
#   scripts/demo.sh ["your prompt"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
scripts/build.sh build -DLILIMS_BUILD_TESTS=OFF -DLILIMS_BUILD_BENCH=OFF >/dev/null
model=$(scripts/fetch_model.sh)
prompt=${1:-"Give me three tips for staying focused while studying."}

echo "== text: $prompt"
build/lilims run -m "$model" -p "$prompt" -n 160 --temp 0

request='Open the camera.'
echo
echo "== tool call (output constrained to one of examples/tools, with the LoRA adapter"
echo "   scripts/finetune_tools trained for them): $request"
tools=()
for t in examples/tools/*.json; do tools+=(--tools "$t"); done
build/lilims run -m "$model" -p "$request" -n 64 --temp 0 "${tools[@]}" --lora examples/tools/adapter.gguf
