// Where the tests find their models, and helpers they share.
import Foundation
import XCTest

@testable import Lilims

let environment = ProcessInfo.processInfo.environment

/// ../shared/data beside the repository (LILIMS_SHARED_DATA_DIR overrides).
func sharedData(_ relative: String) -> String {
  if let dir = environment["LILIMS_SHARED_DATA_DIR"] { return dir + "/" + relative }
  return repoFile("../shared/data/" + relative)
}

/// A file of the repository's own (tests/data/...).
func repoFile(_ relative: String) -> String {
  URL(fileURLWithPath: #filePath).deletingLastPathComponent()  // LilimsTests
    .deletingLastPathComponent().deletingLastPathComponent()  // Tests, swift
    .deletingLastPathComponent().deletingLastPathComponent()  // bindings, repo
    .appendingPathComponent(relative).path
}

func smolLM2Path() -> String {
  if let path = environment["LILIMS_MODEL"] { return path }
  let dir = environment["LILIMS_MODEL_DIR"] ?? (NSHomeDirectory() + "/.cache/lilims/models")
  return dir + "/SmolLM2-135M-Instruct.Q4_1.gguf"
}

func require(_ path: String, from source: String) throws {
  if FileManager.default.fileExists(atPath: path) { return }
  let message = "missing \(path) (\(source))"
  if environment["LILIMS_REQUIRE_DATA"] != nil {
    XCTFail(message)
    throw XCTSkip(message)
  }
  throw XCTSkip(message)
}

func collect(_ stream: AsyncThrowingStream<String, Error>) async throws -> String {
  var text = ""
  for try await piece in stream { text += piece }
  return text
}

func greedy(_ maxTokens: Int) -> GenerateOptions {
  var options = GenerateOptions()
  options.maxTokens = maxTokens
  options.temperature = 0
  return options
}

