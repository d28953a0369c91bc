#!/usr/bin/env bash
# Runs `lilims run -f LONG.txt -c 4096 -n 4 -t 2` (a ~2300-token prompt on the
# default model) RUNS times in a row while a competing process keeps a core
# busy, and counts crashes, hangs and other failures.  Exit 0 only when every
# run succeeded.  Not part of the default test run (a few minutes).
#   scripts/stress_long_prompt.sh [RUNS=50] [LILIMS=build/lilims]
# Needs the default model (scripts/fetch_model.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-50}
bin=${2:-build/lilims}
[ -x "$bin" ] || { echo "stress_long_prompt.sh: $bin not found (scripts/build.sh)" >&2; exit 2; }
tmp=$(mktemp -d)
busy_pid=""
cleanup() {
  [ -n "$busy_pid" ] && kill "$busy_pid" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

# ~2300 tokens of English text from the perplexity corpus (first 1700 words).
tr -s ' \n' ' ' < tests/data/ppl_text.txt | cut -d' ' -f1-1700 > "$tmp/long.txt"
n_tok=$("$bin" tokenize -f "$tmp/long.txt" --ids | wc -w)
echo "prompt: $n_tok tokens; $runs runs with -t 2 and a competing busy loop"

sh -c 'while :; do :; done' &
busy_pid=$!

ok=0 crash=0 hang=0 other=0
for i in $(seq 1 "$runs"); do
  timeout -s KILL 300 "$bin" run -f "$tmp/long.txt" -c 4096 -n 4 -t 2 \
    > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc -eq 0 ]; then
    ok=$((ok + 1))
  elif [ $rc -eq 137 ]; then
    hang=$((hang + 1)); echo "run $i: hang (killed after 300 s)"
  elif [ $rc -gt 128 ]; then
    crash=$((crash + 1)); echo "run $i: killed by signal $((rc - 128))"; tail -3 "$tmp/err"
  else
    other=$((other + 1)); echo "run $i: exit $rc"; tail -3 "$tmp/err"
  fi
done
echo "$ok ok, $crash crashed, $hang hung, $other failed (of $runs)"
[ $ok -eq "$runs" ]
