#!/usr/bin/env bash
# End-to-end decode and prompt speed of `lilims run` on the default model,
# median of N runs per thread count, and llama.cpp's llama-bench on the same
# GGUF in the same session when LLAMA_BENCH points to it (scripts/build_llamacpp.sh
# builds one).  The machine is shared: compare ratios from one run of this script.
#   bench/e2e.sh [N=5] [BUILD_DIR=build]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
build=${2:-build}
model=${LILIMS_MODEL:-$(scripts/fetch_model.sh)}
prompt="Write a short story about a robot who learns to paint."
echo "model: $model"
echo "load: $(uptime | sed 's/.*load average: //')"
for t in 1 2; do
  pp=(); tg=()
  for i in $(seq "$n"); do
    line=$("$build/lilims" run -m "$model" -p "$prompt" -n 128 --temp 0 -t "$t" 2>&1 >/dev/null | grep '^\[lilims\]')
    pp+=("$(echo "$line" | sed -E 's/.*prompt: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) t\/s\).*/\1/')")
    tg+=("$(echo "$line" | sed -E 's/.*generated: [0-9]+ tokens in [0-9.]+ s \(([0-9.]+) t\/s\).*/\1/')")
  done
  med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
  echo "lilims  threads=$t  prompt(~50 tok) $(med "${pp[@]}") t/s  decode(128) $(med "${tg[@]}") t/s  (median of $n)"
done
if [ -n "${LLAMA_BENCH:-}" ] && [ -x "$LLAMA_BENCH" ]; then
  "$LLAMA_BENCH" -m "$model" -p 64 -n 128 -t 1,2 -r "$n" 2>/dev/null | grep -E "^\|"
fi
echo "load: $(uptime | sed 's/.*load average: //')"
