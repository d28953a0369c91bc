#!/usr/bin/env bash
# The README's Swift example, taken from the README's own text, as the
# program of a package in a temporary directory that depends on this
# repository by path, the way an app would: built with no linker flags and
# run on SmolLM2, whose answer must be a JSON object (the example asks for
# one).  So the README and the package cannot drift.  Also loads the
# README's manifest of the XCFramework package (scripts/build_apple.sh
# writes it; an XCFramework itself builds only on a Mac).
#   scripts/test_swift_readme.sh
# A release build, as an app ships, sharing the repository's .build: after
# `swift test -c release` there, only the example itself compiles.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$work/Sources/ReadmeExample"
awk '/<!-- readme-swift-example/ {f = 1; next} f && /^```swift$/ {g = 1; next} g && /^```$/ {exit} g' \
  README.md >"$work/Sources/ReadmeExample/main.swift"
if [ ! -s "$work/Sources/ReadmeExample/main.swift" ]; then
  echo "FAIL README: no Swift example after the readme-swift-example marker" >&2
  exit 1
fi
# A package's identity is its folder's name for a path dependency (its
# URL's last part for a fetched one: "lilims").
identity=$(basename "$repo" | tr '[:upper:]' '[:lower:]')
cat >"$work/Package.swift" <<SWIFT
// swift-tools-version:6.0
import PackageDescription

let package = Package(
  name: "ReadmeExample",
  platforms: [.macOS(.v12), .iOS(.v15)],
  dependencies: [.package(path: "$repo")],
  targets: [
    .executableTarget(
      name: "ReadmeExample", dependencies: [.product(name: "Lilims", package: "$identity")])
  ]
)
SWIFT
build=(swift build -c release --package-path "$work" --scratch-path "$repo/.build")
"${build[@]}"
program=$("${build[@]}" --show-bin-path)/ReadmeExample
echo "ok   README Swift example builds"

mkdir "$work/binary"
awk '/<!-- readme-swift-binary/ {f = 1; next} f && /^```swift$/ {g = 1; next} g && /^```$/ {exit} g' \
  README.md >"$work/binary/Package.swift"
if [ ! -s "$work/binary/Package.swift" ] ||
   ! swift package dump-package --package-path "$work/binary" >/dev/null; then
  echo "FAIL README: the manifest after the readme-swift-binary marker does not load" >&2
  exit 1
fi
echo "ok   README XCFramework package manifest loads"

model=${LILIMS_MODEL:-${LILIMS_MODEL_DIR:-$HOME/.cache/lilims/models}/SmolLM2-135M-Instruct.Q4_1.gguf}
if [ ! -f "$model" ]; then
  echo "missing $model (scripts/fetch_model.sh)" >&2
  if [ -n "${LILIMS_REQUIRE_DATA:-}" ]; then exit 1; fi
  echo "ok   README Swift example (built; not run without SmolLM2)"
  exit 0
fi
# The example opens the model by its file name, from the directory it runs in.
mkdir "$work/run"
ln -s "$model" "$work/run/SmolLM2-135M-Instruct.Q4_1.gguf"
(cd "$work/run" && "$program") >"$work/out"
# The generated text, then a line "<decode speed> tokens/s".
text=$(sed '$d' "$work/out")
if ! tail -n 1 "$work/out" | grep -Eq '^[0-9.]+ tokens/s$' ||
   ! printf '%s' "$text" | python3 -c 'import json, sys; assert isinstance(json.load(sys.stdin), dict)'; then
  echo "FAIL README Swift example: expected a JSON object, then the tokens/s line; got:" >&2
  cat "$work/out" >&2
  exit 1
fi
echo "ok   README Swift example runs (JSON call: $(printf '%s' "$text" | tr -s ' \n' ' '))"
