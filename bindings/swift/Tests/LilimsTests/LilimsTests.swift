// The Swift API on real models: stories260K (../shared/data, see its
// SOURCES.md) and SmolLM2-135M-Instruct (scripts/fetch_model.sh).  Missing
// data skips a test, or fails it when LILIMS_REQUIRE_DATA is set (as
// scripts/test.sh sets it).
import CLilims
import Foundation
import XCTest

@testable import Lilims

final class Stories260KTests: XCTestCase {
  private let path = sharedData("stories260K/stories260K.gguf")

  override func setUpWithError() throws {
    try require(path, from: "../shared/data/stories260K, see SOURCES.md")
  }

  func testInfo() throws {
    let model = try Model(path: path)
    XCTAssertEqual(model.info.architecture, "llama")
    XCTAssertEqual(model.info.vocabularySize, 512)
    XCTAssertEqual(model.info.layerCount, 5)
    XCTAssertEqual(model.info.trainedContextLength, 2048)
    XCTAssertFalse(model.info.hasChatTemplate)
    let version = lilimsVersion()
    XCTAssertEqual(version.major, Int(LILIMS_VERSION_MAJOR))
    XCTAssertEqual(version.minor, Int(LILIMS_VERSION_MINOR))
    XCTAssertEqual(lilims_abi_version(), LILIMS_ABI_VERSION)
  }

  /// From BOS alone, greedy: llama2.c's own output for 200 tokens, byte for byte.
  func testGreedyMatchesLlama2c() async throws {
    let expectedPath = sharedData("stories260K/expected_stdout_test_all.txt")
    try require(expectedPath, from: "../shared/data/stories260K, see SOURCES.md")
    let expected = try String(contentsOfFile: expectedPath, encoding: .utf8)
    let session = try Session(model: try Model(path: path), contextLength: 256, threads: 1)
    var text = try await collect(session.generate(prompt: "", options: greedy(200)))
    if text.hasPrefix(" ") { text.removeFirst() }  // llama2.c strips the space after BOS
    XCTAssertEqual(text, expected)
    XCTAssertEqual(session.tokenCount, 201)  // BOS + 200 (the last one sampled, not evaluated)
  }

  func testErrorsCarryLilimsMessages() async throws {
    XCTAssertThrowsError(try Model(path: "/nonexistent/model.gguf")) { error in
      let e = error as? LilimsError
      XCTAssertEqual(e?.code, .io)
      XCTAssertTrue(e?.message.contains("/nonexistent/model.gguf") ?? false, "\(error)")
    }
    let model = try Model(path: path)
    XCTAssertThrowsError(try Session(model: model, contextLength: 4096)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument)
      XCTAssertTrue("\(error)".hasPrefix("[session]"), "\(error)")
    }
    // No chat template in this model: the stream throws lilims' message.
    let session = try Session(model: model, contextLength: 64, threads: 1)
    do {
      _ = try await collect(session.generate(messages: [ChatMessage(role: "user", content: "hi")]))
      XCTFail("a model without a chat template answered a chat")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .unsupported)
      XCTAssertTrue(error.message.hasPrefix("[chat_tokenize]"), error.message)
    }
    // The context is full after 64 tokens: not an error, generation stops.
    _ = try await collect(session.generate(prompt: "Once", options: greedy(0)))
    XCTAssertEqual(session.tokenCount, 64)
    do {
      _ = try await collect(session.generate(prompt: " upon a time", options: greedy(4)))
      XCTFail("a prompt past the context was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .contextFull, error.message)
    }
  }

  /// Cancelling the consuming task ends the stream at once (no piece that
  /// was already buffered comes after the cancel) and stops lilims: the
  /// session keeps what was made, short of the full context, and the next
  /// generation runs normally.
  func testTaskCancellationStopsGeneration() async throws {
    let session = try Session(model: try Model(path: path), contextLength: 2048, threads: 1)
    let consumer = Task { () -> Int in
      var pieces = 0
      for try await _ in session.generate(prompt: "Once upon a time", options: greedy(0)) {
        pieces += 1
        if pieces == 3 { withUnsafeCurrentTask { $0?.cancel() } }
      }
      return pieces
    }
    let pieces = try await consumer.value
    XCTAssertEqual(pieces, 3, "pieces arrived after the task was cancelled")
    let kept = session.tokenCount  // waits for the generation to return
    XCTAssertGreaterThan(kept, 5)
    XCTAssertLessThan(kept, 2048, "generation ran on to the full context after its task was cancelled")

    // Cancelled before it asks for anything: nothing is generated.
    try session.reset()
    let early = Task { () -> Int in
      withUnsafeCurrentTask { $0?.cancel() }
      var count = 0
      for try await _ in session.generate(prompt: "Once upon a time", options: greedy(0)) { count += 1 }
      return count
    }
    let earlyPieces = try await early.value
    XCTAssertEqual(earlyPieces, 0)
    XCTAssertLessThan(session.tokenCount, 2048)

    try session.reset()
    let text = try await collect(session.generate(prompt: "Once upon a time", options: greedy(8)))
    XCTAssertFalse(text.isEmpty)
    XCTAssertEqual(session.tokenCount, 1 + 4 + 8)  // BOS, the prompt, the tokens generated
  }
}

final class SmolLM2Tests: XCTestCase {
  private let path = smolLM2Path()

  override func setUpWithError() throws {
    try require(path, from: "scripts/fetch_model.sh")
  }

  func testChatAnswer() async throws {
    let session = try Session(model: try Model(path: path), contextLength: 512)
    let text = try await collect(session.generate(
      messages: [ChatMessage(role: "user", content: "What is the capital city of France? Answer in English.")],
      options: greedy(32)))
    XCTAssertTrue(text.contains("Paris"), text)
  }

  /// json_object mode: the answer parses as one JSON object.
  func testJsonCall() async throws {
    let session = try Session(model: try Model(path: path), contextLength: 512)
    var options = greedy(64)
    options.jsonObject = true
    let text = try await collect(session.generate(
      messages: [
        ChatMessage(
          role: "system", content: "Reply with one JSON object with the keys \"action\" and \"app\"."),
        ChatMessage(role: "user", content: "open the camera"),
      ],
      options: options))
    let object = try JSONSerialization.jsonObject(with: Data(text.utf8))
    XCTAssertTrue(object is [String: Any], text)
  }
}
