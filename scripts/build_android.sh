#!/usr/bin/env bash
# Builds liblilims.a for Android (arm64-v8a by default) with the NDK's CMake
# toolchain and installs it with lilims.h, the CMake package and the
# pkg-config file.  Needs the Android NDK (r23 or later: $ANDROID_NDK or
# $ANDROID_NDK_HOME) and the host's nlohmann-json headers (the library
# uses it header-only; scripts/setup_deps.sh installs them).
#   scripts/build_android.sh [OUT_DIR] [ABI] [API_LEVEL]   (build-android arm64-v8a 24)
# Link the app's native code with OUT_DIR/install/lib/liblilims.a and the
# NDK's libc++ (c++_static or c++_shared), e.g. in CMake:
#   find_package(lilims CONFIG REQUIRED)   # CMAKE_PREFIX_PATH=OUT_DIR/install
#   target_link_libraries(app PRIVATE lilims::lilims)
# A model shipped as an uncompressed asset opens in place with
# lilims_model_open_fd(AAsset_openFileDescriptor64(...)).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-android}
abi=${2:-arm64-v8a}
api=${3:-24}
ndk=${ANDROID_NDK:-${ANDROID_NDK_HOME:-}}
if [ -z "$ndk" ] || [ ! -f "$ndk/build/cmake/android.toolchain.cmake" ]; then
  echo "build_android.sh needs the Android NDK: set ANDROID_NDK to its root; nothing built" >&2
  exit 1
fi
# The NDK's toolchain searches only its sysroot: the header-only
# dependencies come from the host (their headers are the same on every target).
cmake -S . -B "$out/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$ndk/build/cmake/android.toolchain.cmake" \
  -DANDROID_ABI="$abi" -DANDROID_PLATFORM="android-$api" -DANDROID_STL=c++_static \
  -DCMAKE_FIND_ROOT_PATH_MODE_PACKAGE=BOTH -DCMAKE_FIND_ROOT_PATH_MODE_INCLUDE=BOTH \
  -DLILIMS_BUILD_TESTS=OFF -DLILIMS_BUILD_TOOLS=OFF -DLILIMS_BUILD_BENCH=OFF >/dev/null
cmake --build "$out/build" --target lilims
cmake --install "$out/build" --prefix "$out/install" >/dev/null
scripts/check_symbols.sh "$out/install/lib/liblilims.a" "$ndk/toolchains/llvm/prebuilt/$(uname -s | tr 'A-Z' 'a-z')-x86_64/bin/llvm-nm"
ls -l "$out/install/lib/liblilims.a"
