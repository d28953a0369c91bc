#!/usr/bin/env bash
# Installs what building and testing lilims needs on Debian 12 (idempotent).
# Needs root for apt-get (uses sudo when not root and sudo exists).
set -euo pipefail
pkgs=(cmake ninja-build g++ pkg-config nlohmann-json3-dev libxxhash-dev xxhash libeigen3-dev libopenblas-dev
      libgtest-dev libbenchmark-dev libsentencepiece-dev libpng-dev libjpeg-dev python3-pip
      libcpp-httplib-dev
      g++-aarch64-linux-gnu qemu-user llvm)
# libFuzzer (scripts/fuzz.sh) needs clang with its runtime: the Swift
# toolchain's clang has it; without that toolchain, Debian's.
if [ ! -x /opt/swift/usr/bin/clang++ ]; then pkgs+=(clang libclang-rt-14-dev); fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
# The OpenAI client that tests/cli/test_serve.py drives `lilims serve` with.
if ! python3 -c "import openai" >/dev/null 2>&1; then
  python3 -m pip install --quiet openai || python3 -m pip install --quiet --break-system-packages openai
fi
