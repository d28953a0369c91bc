#!/usr/bin/env bash
# Static throughput of the NEON matmul inner loops with llvm-mca.
# Compiles kernels/arm/matmul_gemm_x4_neon*.cpp with the cross compiler and
# the flags of the cross build (-O3, the file's -march) plus
# -DLILIMS_MCA_MARKERS, which puts "// LLVM-MCA-BEGIN/END" asm comments
# around one block column of the tile loop (kernels/arm/matmul_x4_neon_impl.h).
# Every marked region (one per template instance: weight type x token tile)
# goes to llvm-mca for apple-a14 and cortex-a76; the table gives cycles per
# iteration and per 32-weight block (iteration = 4 rows x T tokens blocks).
# Usage: bench/mca_neon.sh [llvm-mca binary]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mca=${1:-$(command -v llvm-mca || command -v llvm-mca-14)}
cxx=${CXX_AARCH64:-aarch64-linux-gnu-g++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

declare -A march=(
  [matmul_gemm_x4_neon]=armv8-a
  [matmul_gemm_x4_neon_dotprod]=armv8.2-a+dotprod
  [matmul_gemm_x4_neon_i8mm]=armv8.2-a+dotprod+i8mm)

printf "| variant | instance (function) | blocks/iter | apple-a14 cyc/iter | a14 cyc/block | cortex-a76 cyc/iter | a76 cyc/block |\n"
printf "|---|---|---|---|---|---|---|\n"
for f in matmul_gemm_x4_neon matmul_gemm_x4_neon_dotprod matmul_gemm_x4_neon_i8mm; do
  "$cxx" -std=c++17 -O3 -DNDEBUG -march="${march[$f]}" -DLILIMS_MCA_MARKERS -I"$root" \
    -S -o "$tmp/$f.s" "$root/kernels/arm/$f.cpp"
  # Split into regions; remember the (demangled) function each one is in.
  awk -v dir="$tmp" -v base="$f" '
    /^_Z[^ ]*:$/ { fn = substr($0, 1, length($0) - 1) }
    /LLVM-MCA-BEGIN/ {
      n++; out = dir "/" base "." n ".s"; print fn > (out ".fn")
      t = $0; sub(/.*tokens=#?/, "", t); print $(NF-1) " " t > (out ".tag"); inside = 1; next
    }
    /LLVM-MCA-END/ { inside = 0; close(out); next }
    inside && $0 !~ /^[ \t]*(\.|#|\/\/)/ && $0 !~ /^[.A-Za-z0-9_]+:/ { print > out }
  ' "$tmp/$f.s"
  for region in $(ls "$tmp/$f".*.s 2>/dev/null); do
    [ -f "$region" ] || continue
    fn=$(c++filt < "$region.fn")
    case "$fn" in *q8_0_q8_0*) wt=Q8_0 ;; *q4_0_q8_0*) wt=Q4_0 ;; *q4_1_q8_1*) wt=Q4_1 ;; *"Type)8,"*) wt=Q8_0 ;; *"Type)2,"*) wt=Q4_0 ;; *"Type)3,"*) wt=Q4_1 ;; *) wt=? ;; esac
    read -r kind t < "$region.tag"
    blocks=$((4 * t))
    row="| ${f#matmul_gemm_x4_} | $wt $kind x ${t} tokens | $blocks"
    for cpu in apple-a14 cortex-a76; do
      cyc=$("$mca" -mtriple=aarch64 -mcpu=$cpu -mattr=+dotprod,+i8mm -iterations=100 "$region" 2>/dev/null |
            awk '/^Total Cycles:/ { print $3 / 100 }')
      if [ -n "$cyc" ]; then
        row="$row | $cyc | $(awk -v c="$cyc" -v b="$blocks" 'BEGIN { printf "%.2f", c / b }')"
      else
        row="$row | n/a | n/a"
      fi
    done
    echo "$row |"
  done
done
