#!/usr/bin/env bash
# The include directions of DESIGN.md's layers, checked over the sources: a
# folder may include only the folders listed for it (quotes includes of the
# form "folder/..."; system headers are not checked).  Exit 1 naming each
# include that crosses a line.
#   scripts/check_layers.sh [REPO_ROOT]
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

# folder: the folders its files may include (itself always).
rules=(
  "base: lilims"
  "quant: base"
  "tokenizer: base"
  "kernels: base quant"
  "graph: base quant kernels"
  "models: base quant kernels graph tokenizer"
  "runtime/constrain: base tokenizer"
  "runtime/eval: base quant kernels graph tokenizer models runtime"
  "runtime/capi: base quant kernels graph tokenizer models runtime lilims"
  "runtime: base quant kernels graph tokenizer models lilims"
)

status=0
checked=0
for rule in "${rules[@]}"; do
  dir=${rule%%:*}
  allowed="$dir ${rule#*:}"
  # Files of the folder itself, not of a room listed apart.
  files=$(find "$dir" -type f \( -name '*.h' -o -name '*.cpp' -o -name '*.inc' \) |
    while read -r f; do
      own=$dir
      for other in "${rules[@]}"; do
        d=${other%%:*}
        case "$f" in "$d"/*) [ ${#d} -gt ${#own} ] && own=$d ;; esac
      done
      [ "$own" = "$dir" ] && echo "$f"
    done)
  for f in $files; do
    checked=$((checked + 1))
    while IFS= read -r inc; do
      ok=0
      for a in $allowed; do
        case "$inc" in "$a"/*) ok=1 ;; esac
      done
      # runtime's own files may include its rooms' headers, not the C API's.
      if [ "$dir" = runtime ]; then
        case "$inc" in runtime/capi/*) ok=0 ;; runtime/*) ok=1 ;; esac
      fi
      if [ $ok = 0 ]; then
        echo "FAIL $f includes \"$inc\": $dir/ may include only: $allowed" >&2
        status=1
      fi
    done < <(sed -n 's/^#include "\([^"]*\)".*/\1/p' "$f")
  done
done
[ $checked -gt 100 ] || { echo "FAIL only $checked files checked: is this the repository root?" >&2; exit 1; }
[ $status = 0 ] && echo "ok   $checked files keep DESIGN.md's include directions"
exit $status
