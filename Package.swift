// swift-tools-version:6.0
// lilims as a Swift package, built from source: the library's C++ (target
// CLilims, whose module is include/lilims/lilims.h, the C API) and the Swift
// API over it (target Lilims, bindings/swift).  No CMake step, no linker
// flags: `swift build` / `swift test` here; an app depends on the
// repository (.package(url:) or .package(path:)) and uses product "Lilims".
// The manifest is at the repository's root because a target's files must
// lie inside its package, and a package fetched by URL has its manifest at
// the root.  scripts/build_apple.sh builds the same library as an
// XCFramework for apps that prefer a prebuilt archive (README, "Swift").
import Foundation
import PackageDescription

// The library's folders; tools/, tests/ and bench/ are the CMake build's.
// Whole folders, so a file added to or moved between them needs no edit here.
let librarySources = ["base", "graph", "kernels", "models", "quant", "runtime", "tokenizer"]

// What else those folders hold (CMakeLists.txt, *.cmake, the *.inc lists
// that sources #include): SwiftPM would try to compile it.
let libraryNonSources: [String] = librarySources.flatMap { folder -> [String] in
  let root = Context.packageDirectory + "/" + folder
  guard let walk = FileManager.default.enumerator(atPath: root) else { return [] }
  var found: [String] = []
  while let path = walk.nextObject() as? String {
    var isFolder: ObjCBool = false
    _ = FileManager.default.fileExists(atPath: root + "/" + path, isDirectory: &isFolder)
    if !isFolder.boolValue && !path.hasSuffix(".cpp") && !path.hasSuffix(".h") {
      found.append(folder + "/" + path)
    }
  }
  return found
}

var packageDependencies: [Package.Dependency] = []
var libraryDependencies: [Target.Dependency] = []
var librarySettings: [CXXSetting] = [
  // The sources include each other from the repository's root ("kernels/cpu.h").
  .headerSearchPath("."),
  // Every file of kernels/ is compiled, for each architecture built: which
  // hold code, and their instruction sets, follow from the architecture
  // (kernels/isa_target.h) instead of CMake's per-file flags.
  .define("LILIMS_KERNELS_BY_ARCH"),
  // nlohmann::json's templates become lilims' own symbols, as in CMake
  // (tokenizer/CMakeLists.txt): an app's own copy cannot clash with them.
  .define("nlohmann", to: "lilims::nlohmann_json"),
  .define("NDEBUG", .when(configuration: .release)),
]

#if os(Linux)
// The header-only nlohmann/json from the system (Debian: nlohmann-json3-dev),
// <nlohmann/json.hpp> on the default include path.
#else
// Elsewhere (a Mac, which has no such header of its own) nlohmann/json's
// Swift package brings it: product "json", whose include path makes it
// <json.hpp> (base/nlohmann_json.h).
packageDependencies.append(.package(url: "https://github.com/nlohmann/json", from: "3.11.3"))
libraryDependencies.append(.product(name: "json", package: "json"))
librarySettings.append(.define("LILIMS_JSON_FROM_SWIFTPM"))
#endif

let package = Package(
  name: "Lilims",
  // cmake/ios.toolchain.cmake's deployment targets: the sysctl keys that
  // tell dotprod and i8mm (kernels/cpu.cpp) exist from these on.
  platforms: [.macOS(.v12), .iOS(.v15)],
  products: [.library(name: "Lilims", targets: ["Lilims"])],
  dependencies: packageDependencies,
  targets: [
    .target(
      name: "CLilims",
      dependencies: libraryDependencies,
      path: ".",
      exclude: libraryNonSources,
      sources: librarySources,
      publicHeadersPath: "include",
      cxxSettings: librarySettings),
    .target(name: "Lilims", dependencies: ["CLilims"], path: "bindings/swift/Sources/Lilims"),
    // The tests find their models as before: tests/data from the
    // repository, ../shared/data beside it, SmolLM2 in ~/.cache/lilims
    // (bindings/swift/Tests/LilimsTests/Support.swift).
    .testTarget(
      name: "LilimsTests", dependencies: ["Lilims"], path: "bindings/swift/Tests/LilimsTests"),
  ],
  cxxLanguageStandard: .cxx17
)
