#!/usr/bin/env bash
# Sets up, builds and runs every test: the release build, the same suite
# under AddressSanitizer + UndefinedBehaviorSanitizer, a short libFuzzer run,
# and the NEON kernels cross-built for aarch64 and run under qemu.  Needs ../shared beside the repo.
#   scripts/test.sh            everything (what CI runs)
#   LILIMS_SKIP_ASAN=1 / LILIMS_SKIP_FUZZ=1 / LILIMS_SKIP_CROSS=1 to leave a part out
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc 2>/dev/null || echo 2)
export LILIMS_REQUIRE_DATA=${LILIMS_REQUIRE_DATA:-1}

scripts/setup_deps.sh
scripts/fetch_model.sh >/dev/null

echo "== release build and tests"
scripts/build.sh build -DLILIMS_WERROR=ON -DLILIMS_BUILD_TESTS=ON -DLILIMS_BUILD_BENCH=ON -DLILIMS_BUILD_TOOLS=ON
ctest --test-dir build -j"$jobs" --output-on-failure --no-tests=error --timeout 1200

if [ -z "${LILIMS_SKIP_ASAN:-}" ]; then
  echo "== ASan + UBSan build and tests"
  scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLILIMS_SANITIZE=address,undefined \
    -DLILIMS_BUILD_BENCH=OFF -DLILIMS_BUILD_TESTS=ON -DLILIMS_BUILD_TOOLS=ON -DLILIMS_WERROR=ON
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan -j"$jobs" --output-on-failure --no-tests=error --timeout 1800 \
      -E "SmolLM2VsLlamaCpp.*/(ref|oracle)|IsaAgreement|PerplexityVsLlamaCpp"  # slow, numerics-only: release run covers them
fi

if [ -z "${LILIMS_SKIP_FUZZ:-}" ]; then
  echo "== libFuzzer: GGUF reader and tokenizers, 20 s each over tests/fuzz/corpus"
  scripts/fuzz.sh --ci
fi

if [ -z "${LILIMS_SKIP_CROSS:-}" ] && [ -x scripts/cross_test.sh ]; then
  echo "== aarch64 (NEON) kernels under qemu"
  scripts/cross_test.sh
fi
echo "== all tests passed"
