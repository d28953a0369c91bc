#!/usr/bin/env bash
# The main job on a fresh Debian machine: installs what the build needs,
# builds lilims, fetches the default model (SmolLM2-135M-Instruct, once) and
# asks it for text, then for JSON.
#   scripts/demo.sh ["your prompt"]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup_deps.sh
scripts/build.sh build -DLILIMS_BUILD_TESTS=OFF -DLILIMS_BUILD_BENCH=OFF >/dev/null
model=$(scripts/fetch_model.sh)
prompt=${1:-"Give me three tips for staying focused while studying."}

echo "== text: $prompt"
build/lilims run -m "$model" -p "$prompt" -n 160 --temp 0

system='Convert the request into a JSON function call with the keys "action" and "app".'
request='I want to take a photo, open the camera'
echo
echo "== JSON (output constrained to one valid JSON object): $request"
build/lilims run -m "$model" --system "$system" -p "$request" -n 64 --temp 0 --json
