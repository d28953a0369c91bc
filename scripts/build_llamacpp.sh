#!/usr/bin/env bash
# Build the llama.cpp vendored in the llama-cpp-python sdist (an independent
# reference implementation used for goldens and peer benchmarks). Nothing of
# llama.cpp is copied into this repository; the build lives outside it.
#
# Rerun:
#   scripts/build_llamacpp.sh [BUILD_DIR]          # default /work/llamacpp-build
# Environment:
#   LLAMACPP_PY_VERSION  llama-cpp-python version to fetch (default 0.3.36, which
#                        vendors ggml-org/llama.cpp@0c1e57098bba43ac29e6e3b677cdceebdd22334f)
#   LLAMACPP_SDIST       use this sdist tarball instead of downloading one
#   JOBS                 parallel compile jobs (default 2; the machine has 2 cores)
#   LLAMACPP_TARGETS     cmake targets (default: llama-bench llama-perplexity
#                        llama-simple llama-completion llama-tokenize)
#
# Result: BUILD_DIR/bin/{llama-bench,llama-perplexity,llama-simple,
#         llama-completion,llama-tokenize}, plus BUILD_DIR/BUILD_INFO.txt.
# llama-cli needs the server/UI build (LLAMA_BUILD_SERVER=ON) and is not built by
# default; llama-completion is the plain text-completion CLI and llama-simple
# the minimal greedy example. Takes ~10-20 min on 2 cores.
set -euo pipefail

BUILD_DIR="$(realpath -m "${1:-/work/llamacpp-build}")"
VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"
TARGETS="${LLAMACPP_TARGETS:-llama-bench llama-perplexity llama-simple llama-completion llama-tokenize}"

mkdir -p "$BUILD_DIR"
WORK="$BUILD_DIR/_src"
mkdir -p "$WORK"

SDIST="${LLAMACPP_SDIST:-}"
if [[ -z "$SDIST" ]]; then
  SDIST="$WORK/llama_cpp_python-$VERSION.tar.gz"
  if [[ ! -f "$SDIST" ]]; then
    pip download --no-binary :all: --no-deps "llama-cpp-python==$VERSION" -d "$WORK"
  fi
fi
SDIST="$(realpath "$SDIST")"
echo "sdist: $SDIST ($(sha256sum "$SDIST" | cut -d' ' -f1))"

TOP="$(basename "$SDIST" .tar.gz)"   # the sdist's top-level folder
if [[ ! -d "$WORK/$TOP/vendor/llama.cpp" ]]; then
  tar xzf "$SDIST" -C "$WORK"
fi
SRC="$WORK/$TOP/vendor/llama.cpp"

# The sdist carries a shallow git checkout of the submodule, so build-info gets the
# right short commit but build number 1 (rev-list --count of a depth-1 clone).
COMMIT="$(git -C "$SRC" rev-parse HEAD 2>/dev/null || echo unknown)"

cmake -S "$SRC" -B "$BUILD_DIR" \
  -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON \
  -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_EXAMPLES=ON \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_SERVER=OFF \
  -DBUILD_SHARED_LIBS=OFF

# shellcheck disable=SC2086
cmake --build "$BUILD_DIR" --config Release -j "$JOBS" --target $TARGETS

{
  echo "llama-cpp-python sdist: $(basename "$SDIST")"
  echo "sdist sha256: $(sha256sum "$SDIST" | cut -d' ' -f1)"
  echo "llama.cpp commit: $COMMIT"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -m), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs)"
  echo "cmake: Release, GGML_NATIVE=ON, LLAMA_CURL=OFF, static libs"
  "$BUILD_DIR/bin/llama-bench" --version 2>&1 || true
} | tee "$BUILD_DIR/BUILD_INFO.txt"
ls -la "$BUILD_DIR/bin"
