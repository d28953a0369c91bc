#!/usr/bin/env bash
# Configures and builds lilims.  scripts/build.sh [BUILD_DIR] [extra cmake args...]
# LILIMS_TARGETS="a b" builds only those targets.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
if [ -n "${LILIMS_TARGETS:-}" ]; then
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$jobs" --target $LILIMS_TARGETS
else
  cmake --build "$dir" -j"$jobs"
fi
