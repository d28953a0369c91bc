#!/usr/bin/env bash
# Cross-builds the tests for aarch64 and runs the kernel tests under qemu on
# three CPU models so every NEON path runs:
#   max         NEON + dotprod + i8mm  (the i8mm kernels)
#   cortex-a76  NEON + dotprod         (the dotprod kernels; i8mm ones skip)
#   cortex-a53  NEON only              (the baseline kernels)
# (qemu 7.2 cannot switch dotprod/i8mm off on `max`, hence named models.)
# Attention has no dotprod/i8mm path: its tests run on cortex-a53 only, and
# only on the NEON path.  The tiny llama / Phi-2 / Phi-3 goldens through the
# chunked executor run on max.
# Usage: scripts/cross_test.sh [build dir, default build-aarch64] [-j N]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build-aarch64}
jobs=${JOBS:-2}
# Test names of the kernel (matmul_*) and ops (ops_*) suites.
filter=${LILIMS_CROSS_TEST_FILTER:-(^|/)(matmul|ops)_}

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_TOOLCHAIN_FILE="$root/cmake/aarch64-linux-gnu.cmake" \
  -DLILIMS_BUILD_TOOLS=OFF -DLILIMS_BUILD_BENCH=OFF -DLILIMS_BUILD_TESTS=ON \
  -DLILIMS_QEMU_CPU=  # empty: no -cpu flag, qemu reads QEMU_CPU (set below)
targets=()
for t in test_kernels test_ops test_tiny_goldens; do
  # grep reads the whole list: with -q it would stop at the first match and
  # ninja's SIGPIPE would fail the pipeline under pipefail (and drop the target).
  if ninja -C "$build" -t targets all 2>/dev/null | grep "^$t:" >/dev/null; then targets+=("$t"); fi
done
cmake --build "$build" -j"$jobs" --target "${targets[@]}"

status=0
for cpu in max cortex-a76 cortex-a53; do
  echo "=== qemu-aarch64 -cpu $cpu ==="
  # The scalar attention is plain C++, tested on every x86 run: here only
  # the NEON one (each takes over 30 s under qemu).
  skip="ops_attention[a-z0-9_.]*/ref( |$)"  # ctest names end "/ref  # GetParam() = ..."
  [ "$cpu" = cortex-a53 ] || skip="ops_attention"
  (cd "$build" && QEMU_CPU=$cpu ctest -R "$filter" -E "$skip" -j"$jobs" --output-on-failure) || status=1
done
if [ -z "${LILIMS_CROSS_TEST_FILTER:-}" ]; then
  echo "=== qemu-aarch64 -cpu max: tiny model goldens ==="
  (cd "$build" && QEMU_CPU=max ctest -R "TinyVsTransformers" -j"$jobs" --output-on-failure \
    --no-tests=error) || status=1
fi
exit $status
