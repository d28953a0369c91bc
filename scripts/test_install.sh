#!/usr/bin/env bash
# Installs lilims into a temporary prefix and builds a program against the
# installed tree the ways an app would: CMake find_package from a C-only
# project, pkg-config with plain cc, and the module map from swiftc (when
# `swift` is on PATH).  Each build runs on stories260K and must print what
# `lilims run` prints for the same greedy prompt.  Then the README's C
# example is compiled from the README itself and run.  The installed
# archive exports only lilims' own symbols (scripts/check_symbols.sh).
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
scripts/check_symbols.sh "$libdir/liblilims.a"

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

# The README's C example, compiled from the README's own text with the
# README's own `cc` line, so that the two cannot drift.
readme=$work/readme
mkdir -p "$readme"
awk '/<!-- readme-c-example/ {f = 1; next} f && /^```c$/ {g = 1; next} g && /^```$/ {exit} g' \
  README.md >"$readme/example.c"
awk '/<!-- readme-c-build/ {f = 1; next} f && /^```sh$/ {g = 1; next} g && /^```$/ {exit} g' \
  README.md | grep '^cc ' >"$readme/build.sh" || true
if [ ! -s "$readme/example.c" ] || [ ! -s "$readme/build.sh" ]; then
  echo "FAIL README: no C example or no cc line between the readme-c-* markers" >&2
  exit 1
fi
(cd "$readme" && PREFIX=$prefix sh -e build.sh)
cc -std=c99 -pedantic -Wall -Wextra -Werror -fsyntax-only -I"$prefix/include" "$readme/example.c"
# stories260K has no chat template: the example must say so and fail.
if "$readme/example" "$model" "open the camera" >/dev/null 2>"$readme/err" ||
   ! grep -q '^chat template: \[chat_tokenize\]' "$readme/err"; then
  echo "FAIL README example on stories260K: expected the missing-template error, got:" >&2
  cat "$readme/err" >&2
  exit 1
fi
smollm2=${LILIMS_MODEL:-${LILIMS_MODEL_DIR:-$HOME/.cache/lilims/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ -f "$smollm2" ]; then
  out=$("$readme/example" "$smollm2" "open the camera" 2>/dev/null)
  case $out in
    "{"*"}") echo "ok   README C example (JSON call: $(printf '%s' "$out" | tr -s ' \n' ' '))" ;;
    *) printf 'FAIL README C example: not a JSON object: %s\n' "$out" >&2; exit 1 ;;
  esac
elif [ -n "${LILIMS_REQUIRE_DATA:-}" ]; then
  echo "missing $smollm2 (scripts/fetch_model.sh)" >&2
  exit 1
else
  echo "ok   README C example (built; SmolLM2 absent, run on stories260K only)"
fi
