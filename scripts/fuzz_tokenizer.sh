#!/bin/sh
# Fuzzes the tokenizers for SECONDS (default 60) with libFuzzer + ASan/UBSan.
#   scripts/fuzz_tokenizer.sh [SECONDS]
# Needs clang and its libFuzzer runtime (Debian: apt-get install -y clang
# libclang-rt-14-dev).  Builds in build-fuzz/ (clang, LILIMS_FUZZ=ON,
# liblilims instrumented with -fsanitize=fuzzer-no-link); the corpus grows
# in build-fuzz/fuzz-corpus/, crashes land in build-fuzz/.
set -eu
SECONDS_TO_RUN=${1:-60}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LILIMS_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
CC=${CC:-clang}
CXX=${CXX:-clang++}
command -v "$CXX" >/dev/null || { echo "fuzz_tokenizer.sh: $CXX not found (apt-get install -y clang libclang-rt-14-dev)" >&2; exit 1; }
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLILIMS_FUZZ=ON -DLILIMS_SANITIZE=address,undefined \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DLILIMS_BUILD_BENCH=OFF -DLILIMS_BUILD_TOOLS=OFF
cmake --build "$BUILD" -j2 --target fuzz_tokenizer
mkdir -p "$BUILD/fuzz-corpus"
# Seeds: the llama.cpp test strings, one file each, behind a vocabulary byte.
SEEDS="$ROOT/../shared/data/vocab/ggml-vocab-gpt-2.gguf.inp"
if [ -f "$SEEDS" ] && [ -z "$(ls -A "$BUILD/fuzz-corpus")" ]; then
  python3 - "$SEEDS" "$BUILD/fuzz-corpus" <<'PY'
import sys
tests = open(sys.argv[1], "rb").read().split(b"\n__ggml_vocab_test__\n")
for i, t in enumerate(tests):
    for v in range(7):
        open("%s/seed_%02d_%d" % (sys.argv[2], i, v), "wb").write(bytes([v]) + t)
PY
fi
cd "$BUILD"
exec ./tests/fuzz/fuzz_tokenizer -max_total_time="$SECONDS_TO_RUN" -max_len=512 -timeout=10 fuzz-corpus
