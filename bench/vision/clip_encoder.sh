#!/usr/bin/env bash
# Encoder time per image and peak memory of a CLIP ViT-B/16-shape vision tower
# (768 wide, 12 layers, 12 heads, ffn 3072, patch 16) with a LLaVA MLP
# projector to 2048, random weights, at 224 and 336 pixels, F16 and Q8_0
# weights, 1 and 2 threads: one JSON line per configuration, each measured in
# a process of its own (median of RUNS encodes after a warm-up).
#
#   bench/vision/clip_encoder.sh [BUILD_DIR] [RUNS]     # default: build 5
set -euo pipefail
build=${1:-build}
runs=${2:-5}
bin="$build/bench/vision/bench_clip"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for size in 224 336; do
  for type in F16 Q8_0; do
    f="$dir/vit_b16_${size}_${type}.gguf"
    "$bin" --write "$f" --size "$size" --type "$type"
    for t in 1 2; do
      "$bin" --file "$f" --threads "$t" --runs "$runs"
    done
    rm -f "$f"
  done
done
