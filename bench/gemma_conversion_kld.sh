#!/usr/bin/env bash
# What the load-time re-quantization of Gemma 3 270M Q4_K_M costs, against
# the model the file defines: its weights dequantized exactly to F32
# (`lilims quantize ... F32`; Q4_K, Q5_0, Q6_K and Q8_0 values are exact in
# F32) as the base, then KL divergence and perplexity on tests/data/
# ppl_text.txt at -c 512 of
#   lilims on the Q4_K_M file (Q4_K -> Q4_1, Q5_0 and Q6_K -> Q8_0 at load), and
#   llama.cpp on the Q4_K_M file (its K-quant kernels, Q8_K activations),
# each against its own F32 run.  Also prints both F32 perplexities (the two
# implementations on identical weights).  ~6 min on 2 cores; needs ~1.5 GB
# of free disk in $TMPDIR and the llama.cpp build of scripts/build_llamacpp.sh.
#   bench/gemma_conversion_kld.sh [CHUNKS]     (default 8)
set -euo pipefail
cd "$(dirname "$0")/.."
chunks=${1:-8}
G=$(scripts/fetch_gemma.sh)
L=$(scripts/build_llamacpp.sh --print-dir)/bin
[ -x build/lilims ] || scripts/build.sh build >/dev/null
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
text=tests/data/ppl_text.txt
build/lilims quantize "$G" "$tmp/f32.gguf" F32 --no-progress
echo "== lilims: F32 base, then the Q4_K_M file against it"
build/lilims perplexity -m "$tmp/f32.gguf" -f $text -c 512 --chunks "$chunks" -t 2 --no-progress --kl-base "$tmp/lilims.kld"
build/lilims perplexity -m "$G" -f $text -c 512 --chunks "$chunks" -t 2 --no-progress --kl-ref "$tmp/lilims.kld" 2>/dev/null
echo "== llama.cpp: F32 base, then the Q4_K_M file against it"
"$L/llama-perplexity" -m "$tmp/f32.gguf" -f $text -c 512 --chunks "$chunks" -t 2 \
  --kl-divergence-base "$tmp/llama.kld" 2>&1 | grep -E "Final estimate"
"$L/llama-perplexity" -m "$G" -f $text -c 512 --chunks "$chunks" -t 2 --kl-divergence-base "$tmp/llama.kld" \
  --kl-divergence 2>&1 | grep -E "Mean PPL|Mean +KLD|Median +KLD|99.0% +KLD|Maximum KLD|Same top p"
