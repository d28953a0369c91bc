#!/usr/bin/env bash
# Static throughput of llama.cpp's NEON matmul inner loops with llvm-mca, for
# the table beside lilims' (bench/mca_neon.sh).
#
# llama.cpp's ggml-cpu/arch/arm/{quants.c,repack.cpp} are taken from the
# pinned llama-cpp-python sdist (the unpacked cache of
# scripts/build_llamacpp.sh, else `pip download` into a temp dir, sha256
# checked), compiled unmodified in a temp dir with the same cross compiler
# and flags as lilims' NEON files (-O3, -march=armv8.2-a+dotprod, and
# +dotprod+i8mm), and never copied into this repository.
#
# Regions (bench/mca_loops.awk): in each function below, every innermost loop
# (label .. last backward branch to it, loop control included) that does int8
# multiply-adds.  Its work is counted from the instructions themselves: 32
# multiply-adds = one 32-weight block of one row for one token (SDOT 16,
# SMMLA 32), so cycles per block = llvm-mca cycles per iteration / (MACs /
# 32), the same measure as lilims' table.  Hand-encoded ".inst" instructions
# of the inline-asm GEMMs are analysed as the instruction in their comment,
# and each such pair is re-assembled with llvm-mc and checked.
#   dotprod build: ggml_vec_dot_{q8_0_q8_0,q4_0_q8_0,q4_1_q8_1} (1 row x 1
#     token, SDOT), ggml_gemv_{q8_0,q4_0}_{4x4,4x8}_q8_0 (4 rows x 1 token),
#     ggml_gemm_{q8_0,q4_0}_4x4_q8_0 (4 rows x 4 tokens; q4_0 also 16 tokens)
#   i8mm build: the SMMLA loops of the three vec_dots (2 rows x 2 tokens) and
#     ggml_gemm_{q8_0,q4_0}_4x8_q8_0 (4 x 4; q4_0 also 4 x 16)
# (q4_0 8x8 exists only for SVE; llama.cpp has no repacked Q4_1.)
#
# Usage: bench/mca_llamacpp_neon.sh [llvm-mca binary]
#   LLAMACPP_SRC  llama.cpp source root (default: the sdist, bench/mca_common.sh)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mca=${1:-$(command -v llvm-mca || command -v llvm-mca-14)}
mc=${LLVM_MC:-$(command -v llvm-mc || command -v llvm-mc-14)}
cc=${CC_AARCH64:-aarch64-linux-gnu-gcc}
cxx=${CXX_AARCH64:-aarch64-linux-gnu-g++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# shellcheck source=bench/mca_common.sh
source "$root/bench/mca_common.sh"
llamacpp_source
src=$llamacpp_src
arm=$src/ggml/src/ggml-cpu/arch/arm
inc=(-I"$src/ggml/include" -I"$src/ggml/src" -I"$src/ggml/src/ggml-cpu")
echo "compiler: $("$cc" --version | head -1); llvm-mca: $("$mca" --version | grep -i 'version' | head -1 | sed 's/^ *//')" >&2

fns_dotprod='ggml_vec_dot_q8_0_q8_0 ggml_vec_dot_q4_0_q8_0 ggml_vec_dot_q4_1_q8_1
  ggml_gemv_q8_0_4x4_q8_0 ggml_gemv_q8_0_4x8_q8_0 ggml_gemv_q4_0_4x4_q8_0 ggml_gemv_q4_0_4x8_q8_0
  ggml_gemm_q8_0_4x4_q8_0 ggml_gemm_q4_0_4x4_q8_0'
fns_i8mm='ggml_vec_dot_q8_0_q8_0 ggml_vec_dot_q4_0_q8_0 ggml_vec_dot_q4_1_q8_1
  ggml_gemm_q8_0_4x8_q8_0 ggml_gemm_q4_0_4x8_q8_0'

# Re-assembles the decoded comment of every ".inst" and compares encodings.
check_inst() {
  local list=$1
  [ -s "$list" ] || return 0
  sort -u "$list" > "$list.u"
  cut -f2 "$list.u" > "$list.asm"
  "$mc" -triple=aarch64 -mattr=+dotprod,+i8mm -show-encoding < "$list.asm" 2> "$list.err" |
    awk '/encoding:/ { s = $0; sub(/.*\[/, "", s); sub(/\].*/, "", s); n = split(s, b, ",");
                       h = ""; for (i = n; i >= 1; i--) { x = b[i]; sub(/^0x/, "", x); h = h x }; print "0x" h }' \
    > "$list.enc"
  if [ -s "$list.err" ]; then cat "$list.err" >&2; echo "llvm-mc rejected a decoded .inst" >&2; exit 1; fi
  if ! paste <(cut -f1 "$list.u" | tr 'A-F' 'a-f') "$list.enc" | awk -F'\t' '$1 != $2 { print "mismatch: " $0; bad = 1 } END { exit bad }' >&2; then
    echo ".inst encodings do not match their comments" >&2; exit 1
  fi
}

printf "| build | function | loop (dot) | blocks/iter | apple-a14 cyc/iter | a14 cyc/block | cortex-a76 cyc/iter | a76 cyc/block |\n"
printf "|---|---|---|---|---|---|---|---|\n"
for build in dotprod i8mm; do
  if [ $build = dotprod ]; then march=armv8.2-a+dotprod; fns=$fns_dotprod; dot=sdot
  else march=armv8.2-a+dotprod+i8mm; fns=$fns_i8mm; dot=smmla; fi
  "$cc" -O3 -DNDEBUG -march=$march "${inc[@]}" -S -o "$tmp/quants.$build.s" "$arm/quants.c"
  "$cxx" -std=c++17 -O3 -DNDEBUG -march=$march "${inc[@]}" -S -o "$tmp/repack.$build.s" "$arm/repack.cpp"
  mkdir -p "$tmp/$build"
  for f in quants repack; do
    awk -v dir="$tmp/$build" -v base=$f -f "$root/bench/mca_loops.awk" "$tmp/$f.$build.s"
    check_inst "$tmp/$build/$f.inst"
  done
  for fn in $fns; do
    found=0
    while IFS=$'\t' read -r f k name first last macs fwd tag; do
      [ "$name" = "$fn" ] && [ "$macs" -gt 0 ] || continue
      region=$tmp/$build/$f.$k.s
      grep -qw "$dot" "$region" || continue
      found=1
      [ $((macs % 32)) -eq 0 ] || { echo "$fn loop $k: $macs multiply-adds is not whole blocks" >&2; exit 1; }
      [ "$fwd" -eq 0 ] || echo "note: $fn loop $k has $fwd forward branch(es) inside; llvm-mca runs them as straight-line code" >&2
      blocks=$((macs / 32))
      row="| $build | $fn | $f.s lines $first-$last ($dot) | $blocks"
      for cpu in apple-a14 cortex-a76; do
        cyc=$(mca_cycles "$region" $cpu)
        [ -n "$cyc" ] || { echo "no cycle count for $fn loop $k on $cpu" >&2; exit 1; }
        row="$row | $cyc | $(awk -v c="$cyc" -v b="$blocks" 'BEGIN { printf "%.2f", c / b }')"
      done
      echo "$row |"
    done < <(for f in quants repack; do sed "s/^/$f\t/" "$tmp/$build/$f.index"; done)
    [ $found = 1 ] || { echo "no $dot loop found in $fn ($build build)" >&2; exit 1; }
  done
done
