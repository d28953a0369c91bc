#!/bin/sh
# Fuzzes lilims with libFuzzer + ASan/UBSan.
#   scripts/fuzz.sh TARGET SECONDS   one target (gguf, tokenizer, safetensors, schema, lora) for SECONDS
#   scripts/fuzz.sh all SECONDS      every target, one after the other, SECONDS each
#                                    (the long run: scripts/fuzz.sh all 3600)
#   scripts/fuzz.sh --ci             every target for 20 s over the committed corpus
# Needs clang with its libFuzzer runtime: $CXX, else /opt/swift/usr/bin/clang++,
# else Debian's clang (apt-get install -y clang libclang-rt-14-dev).  Builds
# in build-fuzz/ (LILIMS_FUZZ=ON, liblilims instrumented with
# -fsanitize=fuzzer-no-link).  Each run starts from tests/fuzz/corpus/TARGET
# and keeps what it finds in build-fuzz/corpus/TARGET; a crash, a timeout
# (25 s for one input, 90 s for schema) or running out of memory writes the input to
# build-fuzz/crash-*, timeout-* or oom-* and makes the script fail.  --ci never adds to the
# committed corpus.
set -eu
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${LILIMS_FUZZ_BUILD_DIR:-$ROOT/build-fuzz}
TARGETS="gguf tokenizer safetensors schema lora"

usage() {
  echo "usage: scripts/fuzz.sh (gguf|tokenizer|safetensors|schema|lora|all) SECONDS | --ci" >&2
  exit 2
}

CI=0
case "${1:-}" in
  --ci) CI=1; WHAT=all; SECS=20 ;;
  gguf|tokenizer|safetensors|schema|lora|all) WHAT=$1; SECS=${2:-}; [ -n "$SECS" ] || usage ;;
  *) usage ;;
esac
case "$SECS" in *[!0-9]*|'') usage ;; esac
[ "$WHAT" = all ] && RUN=$TARGETS || RUN=$WHAT

if [ -z "${CXX:-}" ]; then
  if [ -x /opt/swift/usr/bin/clang++ ]; then
    CC=/opt/swift/usr/bin/clang CXX=/opt/swift/usr/bin/clang++
  else
    CC=clang CXX=clang++
  fi
fi
CC=${CC:-clang}
command -v "$CXX" >/dev/null || {
  echo "fuzz.sh: $CXX not found (apt-get install -y clang libclang-rt-14-dev)" >&2
  exit 1
}

cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLILIMS_FUZZ=ON -DLILIMS_SANITIZE=address,undefined \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DLILIMS_BUILD_BENCH=OFF -DLILIMS_BUILD_TOOLS=OFF \
  -DLILIMS_BUILD_TESTS=ON >/dev/null
for t in $RUN; do
  cmake --build "$BUILD" -j2 --target "fuzz_$t"
done

status=0
for t in $RUN; do
  seeds=$ROOT/tests/fuzz/corpus/$t
  case $t in
    gguf|lora) opts="-max_len=65536 -rss_limit_mb=2048 -timeout=25" ;;
    tokenizer) opts="-max_len=512 -timeout=25" ;;
    safetensors) opts="-max_len=4096 -timeout=25" ;;
    # A schema at the grammar's size limit builds 4 M states: ~11 s under
    # ASan and libFuzzer on an idle core, three times that beside a build.
    schema) opts="-max_len=4096 -rss_limit_mb=4096 -timeout=90" ;;
  esac
  if [ "$CI" = 1 ]; then
    # A scratch corpus: the committed seeds are read, never written.
    work=$(mktemp -d)
  else
    work=$BUILD/corpus/$t
    mkdir -p "$work"
  fi
  echo "fuzz.sh: fuzz_$t for $SECS s (corpus $work, seeds $seeds)" >&2
  # shellcheck disable=SC2086
  if ! (cd "$BUILD" && "./tests/fuzz/fuzz_$t" -max_total_time="$SECS" \
          -print_final_stats=1 $opts "$work" "$seeds"); then
    echo "fuzz.sh: fuzz_$t found a problem (the input is in $BUILD/crash-*, timeout-* or oom-*)" >&2
    status=1
  fi
  [ "$CI" = 1 ] && rm -rf "$work"
done
exit $status
