#!/usr/bin/env bash
# Static throughput of lilims' NEON matmul inner loops with llvm-mca, the
# lilims side of bench/mca_llamacpp_neon.sh.
# Compiles kernels/arm/matmul_gemm_x4_neon*.cpp with the cross compiler and
# the flags of the cross build (-O3, the file's flags from
# kernels/CMakeLists.txt) plus
# -DLILIMS_MCA_MARKERS, which puts an asm comment "// LILIMS-MCA-LOOP <tile>
# rows=R tokens=T kblocks=B" at the top of each block-loop body
# (kernels/mca_marker.h, placed in kernels/arm/matmul_x4_neon_impl.h and the
# dotprod / i8mm files): the loop does R rows x T tokens x B block columns
# of K per iteration.  The region analysed is the innermost loop around
# the marker as compiled (bench/mca_loops.awk: from the loop's label to its
# back-edge, so the pointer increments, compare and branch are in), one per
# template instance (weight type x tile).  Cycles per 32-weight block =
# cycles per iteration / (R x T x B); the script checks that the loop's
# int8 multiply-adds are exactly 32 per such block.  llvm-mca's
# diagnostics are printed, and any error, a marker outside a loop or a
# multiply-add count that does not match stops the script.
# The loops analysed are those of the build with markers, which GCC may
# compile a little differently (bench/README.md: K-quant and Q5_0 loops,
# where bench/mca_kquant.sh analyses the build without them).
# Usage: bench/mca_neon.sh [llvm-mca binary]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mca=${1:-$(command -v llvm-mca || command -v llvm-mca-14)}
cxx=${CXX_AARCH64:-aarch64-linux-gnu-g++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "compiler: $("$cxx" --version | head -1); llvm-mca: $("$mca" --version | grep -i 'version' | head -1 | sed 's/^ *//')" >&2

# The per-file flags of kernels/CMakeLists.txt (GCC).
declare -A flags=(
  [matmul_gemm_x4_neon]="-march=armv8-a"
  [matmul_gemm_x4_neon_dotprod]="-march=armv8.2-a+dotprod -fno-schedule-insns"
  [matmul_gemm_x4_neon_i8mm]="-march=armv8.2-a+dotprod+i8mm -fno-schedule-insns")

# shellcheck source=bench/mca_common.sh
source "$root/bench/mca_common.sh"

printf "| variant | instance (function) | blocks/iter | apple-a14 cyc/iter | a14 cyc/block | cortex-a76 cyc/iter | a76 cyc/block |\n"
printf "|---|---|---|---|---|---|---|\n"
for f in matmul_gemm_x4_neon matmul_gemm_x4_neon_dotprod matmul_gemm_x4_neon_i8mm; do
  # shellcheck disable=SC2086  # flags: several words
  "$cxx" -std=c++17 -O3 -DNDEBUG ${flags[$f]} -DLILIMS_MCA_MARKERS -I"$root" \
    -S -o "$tmp/$f.s" "$root/kernels/arm/$f.cpp"
  awk -v dir="$tmp" -v base="$f" -f "$root/bench/mca_loops.awk" "$tmp/$f.s"
  markers=$(grep -c 'LILIMS-MCA-LOOP' "$tmp/$f.s" || true)
  found=0
  while IFS=$'\t' read -r k fn first last macs fwd tag; do
    [ "$tag" != "-" ] || continue
    case "$tag" in *,*) echo "$f: one loop holds several markers ($tag)" >&2; exit 1 ;; esac
    found=$((found + 1))
    name=$(c++filt <<< "$fn")
    case "$name" in *q8_0_q8_0*) wt=Q8_0 ;; *q4_0_q8_0*) wt=Q4_0 ;; *q4_1_q8_1*) wt=Q4_1 ;;
      *"Type)8"[,\>]*) wt=Q8_0 ;; *"Type)2"[,\>]*) wt=Q4_0 ;; *"Type)3"[,\>]*) wt=Q4_1 ;; *) wt=? ;; esac
    kind=${tag%% *}; rows=${tag##*rows=}; rows=${rows%% *}; t=${tag##*tokens=}; t=${t%% *}
    kb=${tag##*kblocks=}
    blocks=$((rows * t * kb))
    if [ "$macs" -ne $((32 * blocks)) ]; then
      echo "$f loop $k ($tag, lines $first-$last): $macs int8 multiply-adds, expected $((32 * blocks))" >&2; exit 1
    fi
    [ "$fwd" -eq 0 ] || echo "note: $f loop $k has $fwd forward branch(es) inside" >&2
    row="| ${f#matmul_gemm_x4_} | $wt $kind $rows rows x $t tokens$([ "$kb" -eq 1 ] || echo " x $kb blocks of K") | $blocks"
    for cpu in apple-a14 cortex-a76; do
      cyc=$(mca_cycles "$tmp/$f.$k.s" $cpu)
      [ -n "$cyc" ] || { echo "no cycle count for $f loop $k on $cpu" >&2; exit 1; }
      row="$row | $cyc | $(awk -v c="$cyc" -v b="$blocks" 'BEGIN { printf "%.2f", c / b }')"
    done
    echo "$row |"
  done < "$tmp/$f.index"
  if [ "$found" -ne "$markers" ]; then
    echo "$f: $markers markers in the assembly but $found found inside innermost loops" >&2; exit 1
  fi
done
