#!/usr/bin/env bash
# Build the llama.cpp vendored in the llama-cpp-python sdist (an independent
# reference implementation used for goldens and peer benchmarks). Nothing of
# llama.cpp is copied into this repository; the build lives outside it.
#
# Rerun:
#   scripts/build_llamacpp.sh [BUILD_DIR]
#   scripts/build_llamacpp.sh --print-dir   # print the default BUILD_DIR and exit
# BUILD_DIR defaults to ~/.cache/lilims/llamacpp-VERSION-FLAGS, FLAGS naming the
# ISA extensions it was built for (e.g. avx2-fma-f16c), so a build for one CPU is
# never reused on another.
# Environment:
#   LLAMACPP_PY_VERSION  llama-cpp-python version to fetch (default 0.3.36, which
#                        vendors ggml-org/llama.cpp@0c1e57098bba43ac29e6e3b677cdceebdd22334f)
#   LLAMACPP_SDIST       use this sdist tarball instead of downloading one
#   JOBS                 parallel compile jobs (default 2; the machine has 2 cores)
#   LLAMACPP_TARGETS     cmake targets (default: llama-bench llama-perplexity
#                        llama-simple llama-completion llama-tokenize)
#
# ISA flags: GGML_NATIVE=OFF with each extension named from /proc/cpuinfo, so the
# build records exactly what it uses: AVX/AVX2/FMA/F16C on any x86-64 that has
# them, AVX512 (F/BW/DQ/VL), AVX512_VNNI and AVX_VNNI only where the CPU shows
# them. GGML_AMX_* stay OFF always (virtual machines fault on AMX tile use even
# when cpuinfo lists it). OpenMP stays at llama.cpp's default (on).
#
# Result: BUILD_DIR/bin/{llama-bench,llama-perplexity,llama-simple,
#         llama-completion,llama-tokenize}, plus BUILD_DIR/BUILD_INFO.txt.
# llama-cli needs the server/UI build (LLAMA_BUILD_SERVER=ON) and is not built by
# default; llama-completion is the plain text-completion CLI and llama-simple
# the minimal greedy example. Takes ~10-20 min on 2 cores.
set -euo pipefail

VERSION="${LLAMACPP_PY_VERSION:-0.3.36}"
JOBS="${JOBS:-2}"
TARGETS="${LLAMACPP_TARGETS:-llama-bench llama-perplexity llama-simple llama-completion llama-tokenize}"

cpu_has() { grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -qx "$1"; }

isa_flags=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
tags=()
if [[ "$(uname -m)" == x86_64 ]]; then
  for f in avx avx2 fma f16c; do
    if cpu_has "$f"; then
      isa_flags+=("-DGGML_${f^^}=ON"); tags+=("$f")
    else
      isa_flags+=("-DGGML_${f^^}=OFF")
    fi
  done
  if cpu_has avx512f && cpu_has avx512bw && cpu_has avx512dq && cpu_has avx512vl; then
    isa_flags+=(-DGGML_AVX512=ON); tags+=(avx512)
    if cpu_has avx512_vnni; then isa_flags+=(-DGGML_AVX512_VNNI=ON); tags+=(avx512vnni); fi
    if cpu_has avx512_bf16; then isa_flags+=(-DGGML_AVX512_BF16=ON); tags+=(avx512bf16); fi
  else
    isa_flags+=(-DGGML_AVX512=OFF -DGGML_AVX512_VNNI=OFF)
  fi
  if cpu_has avx_vnni; then isa_flags+=(-DGGML_AVX_VNNI=ON); tags+=(avxvnni); fi
  if cpu_has bmi2; then isa_flags+=(-DGGML_BMI2=ON); fi
else
  # Elsewhere (aarch64) llama.cpp's own feature detection for the build host is
  # what a user of it would get.
  isa_flags=(-DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  tags+=(native-"$(uname -m)")
fi
TAG="$(IFS=-; echo "${tags[*]:-generic}")"
DEFAULT_DIR="${HOME}/.cache/lilims/llamacpp-${VERSION}-${TAG}"

if [[ "${1:-}" == --print-dir ]]; then
  echo "$DEFAULT_DIR"
  exit 0
fi
BUILD_DIR="$(realpath -m "${1:-$DEFAULT_DIR}")"

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
  "${isa_flags[@]}" \
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
  echo "cmake: Release, static libs, LLAMA_CURL=OFF, ${isa_flags[*]}"
  "$BUILD_DIR/bin/llama-bench" --version 2>&1 || true
} | tee "$BUILD_DIR/BUILD_INFO.txt"
ls -la "$BUILD_DIR/bin"
