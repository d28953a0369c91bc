#!/usr/bin/env bash
# Builds the README's Swift example, taken from the README's own text, as a
# program that depends on bindings/swift, so that the two cannot drift.
#   scripts/test_swift_readme.sh [BUILD_DIR]   (default build; liblilims.a built there)
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(cd "${1:-build}" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/Sources/ReadmeExample"
awk '/<!-- readme-swift-example/ {f = 1; next} f && /^```swift$/ {g = 1; next} g && /^```$/ {exit} g' \
  README.md >"$work/Sources/ReadmeExample/main.swift"
if [ ! -s "$work/Sources/ReadmeExample/main.swift" ]; then
  echo "FAIL README: no Swift example after the readme-swift-example marker" >&2
  exit 1
fi
cat >"$work/Package.swift" <<SWIFT
// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "ReadmeExample",
  dependencies: [.package(path: "$PWD/bindings/swift")],
  targets: [.executableTarget(name: "ReadmeExample", dependencies: [.product(name: "Lilims", package: "swift")])]
)
SWIFT
swift build --package-path "$work" -Xlinker -L"$build"
echo "ok   README Swift example builds"
