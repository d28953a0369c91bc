#!/usr/bin/env bash
# Builds liblilims.a for iOS devices, the iOS simulator and macOS, and joins
# them into Lilims.xcframework: a static library per platform with lilims.h
# and the module map (Swift: `import CLilims`).  Beside it, OUT_DIR/lilims-binary
# is a Swift package of the Swift API (library Lilims) over that archive,
# its manifest the README's (section "Swift", "Prebuilt").  Needs macOS with
# Xcode and CMake, Ninja and nlohmann-json (e.g. from Homebrew).
#   scripts/build_apple.sh [OUT_DIR]      (default build-apple)
# An app then depends on the package OUT_DIR/lilims-binary, or, for the C
# API alone, adds OUT_DIR/Lilims.xcframework to its target and links libc++
# (Other Linker Flags: -lc++).  The package in the repository's root builds
# the same library from source instead.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-apple}
if [ "$(uname -s)" != Darwin ] || ! command -v xcodebuild >/dev/null; then
  echo "build_apple.sh needs macOS with Xcode (xcodebuild); nothing built" >&2
  exit 1
fi
jobs=$(sysctl -n hw.ncpu)

# build PLATFORM ARCH: one static library, installed into $out/PLATFORM-ARCH.
build() {
  local dir=$out/$1-$2
  cmake -S . -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/ios.toolchain.cmake" \
    -DLILIMS_APPLE_PLATFORM="$1" -DLILIMS_APPLE_ARCH="$2" \
    -DLILIMS_BUILD_TESTS=OFF -DLILIMS_BUILD_TOOLS=OFF -DLILIMS_BUILD_BENCH=OFF >/dev/null
  cmake --build "$dir/build" -j"$jobs" --target lilims
  cmake --install "$dir/build" --prefix "$dir/install" >/dev/null
}

# universal PLATFORM ARCH...: one library with every architecture's slice.
universal() {
  local platform=$1
  shift
  mkdir -p "$out/$platform/lib"
  local libs=()
  for arch in "$@"; do libs+=("$out/$platform-$arch/install/lib/liblilims.a"); done
  lipo -create "${libs[@]}" -output "$out/$platform/lib/liblilims.a"
  rm -rf "$out/$platform/include"
  cp -R "$out/$platform-$1/install/include" "$out/$platform/include"
}

build iphoneos arm64
build iphonesimulator arm64
build iphonesimulator x86_64
build macosx arm64
build macosx x86_64
universal iphoneos arm64
universal iphonesimulator arm64 x86_64
universal macosx arm64 x86_64

rm -rf "$out/Lilims.xcframework"
args=()
for platform in iphoneos iphonesimulator macosx; do
  # The headers folder's contents become the framework's Headers: lilims.h
  # beside module.modulemap, as the map expects.
  args+=(-library "$out/$platform/lib/liblilims.a" -headers "$out/$platform/include/lilims")
done
xcodebuild -create-xcframework "${args[@]}" -output "$out/Lilims.xcframework"

# The package over the archive: the README's manifest, the Swift sources.
pkg=$out/lilims-binary
rm -rf "$pkg"
mkdir -p "$pkg/Sources"
awk '/<!-- readme-swift-binary/ {f = 1; next} f && /^```swift$/ {g = 1; next} g && /^```$/ {exit} g' \
  README.md >"$pkg/Package.swift"
[ -s "$pkg/Package.swift" ] || { echo "README: no manifest after readme-swift-binary" >&2; exit 1; }
cp -R "$out/Lilims.xcframework" "$pkg/Lilims.xcframework"
cp -R bindings/swift/Sources/Lilims "$pkg/Sources/Lilims"
swift build --package-path "$pkg"
echo "$out/Lilims.xcframework"
echo "$pkg"
