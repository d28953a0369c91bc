#!/usr/bin/env bash
# Jump-forward and prompt-lookup decoding on the default model: decode
# tokens/s of the output (the stats line's "generated" figure), median of N
# runs per prompt, each mode run alternately with its baseline so both see the
# same machine load.  The machine is shared: compare ratios from one run.
#   bench/speculative.sh [N=5] [BUILD_DIR=build] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
build=${2:-build}
t=${3:-2}
model=${LILIMS_MODEL:-$(scripts/fetch_model.sh)}
tools=()
for f in open_app set_timer send_message take_photo navigate; do tools+=(--tools "examples/tools/$f.json"); done
tools+=(--tool-format generic)  # the rendering the figures in bench/README were measured with
med() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# run ARGS...: prints "tokens t/s forced accepted/drafted" of one run.
run() {
  local err
  err=$("$build/lilims" run -m "$model" -t "$t" --temp 0 "$@" 2>&1 >/dev/null)
  local gen forced drafts
  gen=$(echo "$err" | grep -o 'generated: [0-9]* tokens in [0-9.]* s ([0-9.]* t/s)' | sed -E 's/generated: ([0-9]+) tokens in [0-9.]+ s \(([0-9.]+) t\/s\)/\1 \2/')
  forced=$(echo "$err" | grep -o 'jump-forward: [0-9]*' | grep -o '[0-9]*$' || echo 0)
  drafts=$(echo "$err" | grep -o 'drafts: [0-9]* of [0-9]*' | sed -E 's/drafts: ([0-9]+) of ([0-9]+)/\1\/\2/' || echo 0/0)
  echo "$gen ${forced:-0} ${drafts:-0/0}"
}
# compare LABEL "BASE ARGS" "MODE ARGS" PROMPT ARGS...
compare() {
  local label=$1 base=$2 mode=$3; shift 3
  local a=() b=() ra rb
  for _ in $(seq "$n"); do
    # shellcheck disable=SC2086
    ra=$(run "$@" $base); rb=$(run "$@" $mode)
    a+=("$(echo "$ra" | cut -d' ' -f2)"); b+=("$(echo "$rb" | cut -d' ' -f2)")
  done
  local ma mb
  ma=$(med "${a[@]}"); mb=$(med "${b[@]}")
  printf '%-34s %5s tok %7.1f t/s | %5s tok %7.1f t/s  forced %s drafts %s | x%.2f\n' "$label" \
    "$(echo "$ra" | cut -d' ' -f1)" "$ma" "$(echo "$rb" | cut -d' ' -f1)" "$mb" \
    "$(echo "$rb" | cut -d' ' -f3)" "$(echo "$rb" | cut -d' ' -f4)" "$(echo "$mb / $ma" | bc -l)"
}
echo "model: $model  threads: $t  runs: $n (median)"
echo "load: $(uptime | sed 's/.*load average: //')"
echo "== jump-forward: --tools (5 repo tools), baseline --no-jump-forward | default"
for p in "Open the camera." "Set a timer for ten minutes." "Text Bob that I am running late." \
         "Take a selfie." "Take me to the airport by bike."; do
  compare "$p" "--no-jump-forward" "" -p "$p" -n 96 "${tools[@]}"
done
echo "== prompt-lookup: baseline --draft 0 | --draft 6"
copy='Repeat the following JSON exactly: {"name": "send_message", "arguments": {"recipient": "Alice Johnson", "text": "The train from Berlin arrives at platform 4 at 18:45, see you there"}}'
summary='Summarize this paragraph in two sentences, reusing its wording: The city council met on Tuesday evening to discuss the new bike lanes on Main Street. After a long debate about parking and safety, the council voted to build protected bike lanes next spring and to add more parking near the train station.'
compare "copy JSON" "--draft 0" "--draft 6" -p "$copy" -n 128
compare "summary" "--draft 0" "--draft 6" -p "$summary" -n 128
compare "no match (story)" "--draft 0" "--draft 6" -p "Write a short story about a robot who learns to paint." -n 128
echo "load: $(uptime | sed 's/.*load average: //')"
