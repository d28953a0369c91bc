#!/usr/bin/env bash
# Installs lilims into a temporary prefix and builds a program against the
# installed tree the ways an app would: CMake find_package from a C-only
# project, pkg-config with plain cc, and the module map from swiftc (when
# `swift` is on PATH).  Each build runs on stories260K and must print what
# `lilims run` prints for the same greedy prompt.
#   scripts/test_install.sh [BUILD_DIR]   (default build; liblilims.a and the CLI built there)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
data=${LILIMS_SHARED_DATA_DIR:-$PWD/../shared/data}
model=$data/stories260K/stories260K.gguf
if [ ! -f "$model" ]; then
  echo "missing $model (../shared/data/stories260K, see its SOURCES.md)" >&2
  if [ -n "${LILIMS_REQUIRE_DATA:-}" ]; then exit 1; fi
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
pc=$(find "$prefix" -name lilims.pc 2>/dev/null || true)
[ -n "$pc" ] || { echo "cmake --install put no lilims.pc under $prefix" >&2; exit 1; }
pcdir=$(dirname "$pc")
libdir=$(dirname "$pcdir")

prompt="Once upon a time"
n=24
expected=$("$build/lilims" run -m "$model" --raw --temp 0 -n "$n" -p "$prompt" 2>/dev/null)
[ -n "$expected" ] || { echo "lilims run printed nothing" >&2; exit 1; }

# check NAME PROGRAM: runs PROGRAM on the model and compares with `lilims run`.
check() {
  local got
  got=$("$2" "$model" "$prompt" "$n")
  if [ "$got" != "$expected" ]; then
    printf 'FAIL %s:\n  got:      %s\n  expected: %s\n' "$1" "$got" "$expected" >&2
    exit 1
  fi
  echo "ok   $1"
}

consumer=tests/install/consumer
cmake -S "$consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cmake" >/dev/null
check "CMake find_package(lilims), C project" "$work/cmake/consumer"

# shellcheck disable=SC2046
cc -std=c99 -Wall -Werror -o "$work/pkgconfig" "$consumer/main.c" \
  $(PKG_CONFIG_PATH=$pcdir pkg-config --cflags --libs --static lilims)
check "pkg-config --libs --static lilims, cc" "$work/pkgconfig"

if command -v swiftc >/dev/null; then
  swiftc -I "$prefix/include/lilims" -L "$libdir" "$consumer/main.swift" \
    -o "$work/swift" -module-cache-path "$work/swift-modules"
  check "Swift, import CLilims through the module map" "$work/swift"
else
  echo "skip Swift (no swiftc on PATH)"
fi
