# Sourced by bench/mca_neon.sh and bench/mca_llamacpp_neon.sh; they set $mca
# (the llvm-mca binary) and $tmp (a scratch directory) first.

# llvm-mca cycles per iteration of region $1 on cpu $2; llvm-mca's diagnostics
# go to stderr, and any error stops the script.
mca_cycles() {
  local out err rc
  out=$("$mca" -mtriple=aarch64 -mcpu="$2" -mattr=+dotprod,+i8mm -iterations=100 "$1" 2> "$tmp/mca.err") && rc=0 || rc=$?
  err=$(cat "$tmp/mca.err")
  if [ -n "$err" ]; then echo "llvm-mca ($2, $1):" >&2; head -n 40 <<< "$err" >&2; fi
  if [ $rc -ne 0 ] || grep -q 'error' <<< "$err"; then echo "llvm-mca failed on $1" >&2; exit 1; fi
  awk '/^Total Cycles:/ { print $3 / 100 }' <<< "$out"
}
