// swift-tools-version:6.0
// Swift over lilims' C API.  The package links the static library CMake
// builds; from the repository root:
//   scripts/build.sh build && cmake --build build --target lilims
//   swift test --package-path bindings/swift -Xlinker -L"$PWD/build"
// (an app passes the directory that holds liblilims.a the same way, or adds
// it to its target's linker search paths).
import PackageDescription

let package = Package(
  name: "Lilims",
  products: [.library(name: "Lilims", targets: ["Lilims"])],
  targets: [
    // lilims.h from the repository as the module CLilims; links liblilims.a.
    .systemLibrary(name: "CLilims", path: "Sources/CLilims"),
    .target(
      name: "Lilims",
      dependencies: ["CLilims"],
      linkerSettings: [
        // liblilims.a is C++: its runtime and libm come along.
        .linkedLibrary("stdc++", .when(platforms: [.linux])),
        .linkedLibrary("m", .when(platforms: [.linux])),
        .linkedLibrary("c++", .when(platforms: [.macOS, .iOS, .tvOS, .watchOS, .visionOS])),
      ]),
    .testTarget(name: "LilimsTests", dependencies: ["Lilims"]),
  ]
)
