// The engine through the Swift API: many tasks on one model, each answer
// the one a session gives alone; cancellation from the task; what a
// request may not ask for.
import Foundation
import XCTest

@testable import Lilims

final class EngineTests: XCTestCase {
  private let path = sharedData("stories260K/stories260K.gguf")

  override func setUpWithError() throws {
    try require(path, from: "../shared/data/stories260K, see SOURCES.md")
  }

  private func alone(_ model: Model, _ prompt: String, _ tokens: Int) async throws -> String {
    let session = try Session(model: model, contextLength: 256, threads: 1)
    return try await collect(session.generate(prompt: prompt, options: greedy(tokens)))
  }

  /// More tasks than sequences and than cores, some readers slow, each
  /// answer equal to a session's greedy answer for the same prompt, its
  /// pieces streamed in order, its figures filled in.
  func testTasksShareTheEngine() async throws {
    let model = try Model(path: path)
    let prompts = ["Once upon a time", "The cat", "Lily and Ben", "One day", "The sun was",
                   "There was a little", "Tom had a", "A big dog"]
    var want: [String] = []
    for p in prompts { want.append(try await alone(model, p, 24)) }
    var options = EngineOptions(sequences: 3, contextLength: 256, threads: 2)
    options.maxQueued = 16
    let engine = try Engine(model: model, options: options)
    let results = try await withThrowingTaskGroup(of: (Int, EngineResult, String).self) { group in
      for (k, p) in prompts.enumerated() {
        group.addTask {
          let streamed = Pieces()
          let r = try await engine.generate(prompt: p, options: greedy(24)) { piece in
            streamed.append(piece)
            if k % 3 == 0 { usleep(UInt32(100 * (k + 1))) }  // a slow reader holds the engine's thread
          }
          return (k, r, streamed.text)
        }
      }
      var all: [(Int, EngineResult, String)] = []
      for try await r in group { all.append(r) }
      return all
    }
    XCTAssertEqual(results.count, prompts.count)
    var ids = Set<UInt64>()
    for (k, r, streamed) in results {
      XCTAssertEqual(r.text, want[k], "prompt \(prompts[k])")
      XCTAssertEqual(streamed, r.text, "pieces of prompt \(prompts[k])")
      XCTAssertEqual(r.tokens.count, 24)
      XCTAssertEqual(r.stopReason, .maxTokens)
      XCTAssertEqual(r.promptTokens, try model.tokenize(prompts[k], addBos: true).count)
      XCTAssertGreaterThan(r.timeToFirstToken, 0)
      XCTAssertNotEqual(r.requestID, 0)
      ids.insert(r.requestID)
    }
    XCTAssertEqual(ids.count, prompts.count)
    // The counts are snapshots: a request's result comes before the engine
    // lets go of its sequence.
    let deadline = Date().addingTimeInterval(10)
    while engine.runningCount + engine.queuedCount > 0 && Date() < deadline {
      try await Task.sleep(nanoseconds: 1_000_000)
    }
    XCTAssertEqual(engine.queuedCount, 0)
    XCTAssertEqual(engine.runningCount, 0)

    // A prompt the request before left in a sequence's cache is reused.
    _ = try await engine.generate(prompt: prompts[0], options: greedy(24))
    let again = try await engine.generate(prompt: prompts[0], options: greedy(24))
    XCTAssertEqual(again.text, want[0])
    XCTAssertGreaterThan(again.reusedTokens, 0)
  }

  /// Cancelling the task ends its request with `.cancelled`, whether it
  /// waits in the queue or runs; the other requests are unharmed.
  func testCancelFromTheTask() async throws {
    let model = try Model(path: path)
    let engine = try Engine(model: model, options: EngineOptions(sequences: 1, contextLength: 256, threads: 1))
    let started = Pieces()
    // The first piece holds the engine's thread until both tasks are
    // cancelled: the first request is then running, the second queued.
    let gate = DispatchSemaphore(value: 0)
    let long = Task {
      try await engine.generate(prompt: "Once upon a time", options: greedy(200)) { piece in
        let first = started.text.isEmpty
        started.append(piece)
        if first { gate.wait() }
      }
    }
    while started.text.isEmpty { try await Task.sleep(nanoseconds: 1_000_000) }
    let queued = Task { try await engine.generate(prompt: "The cat", options: greedy(200)) }
    while engine.queuedCount == 0 { try await Task.sleep(nanoseconds: 1_000_000) }
    queued.cancel()
    long.cancel()
    gate.signal()
    for task in [long, queued] {
      do {
        let r = try await task.value
        XCTFail("ran to its end: \(r.stopReason) after \(r.tokens.count) tokens")
      } catch let error as LilimsError {
        XCTAssertEqual(error.code, .cancelled, error.message)
      }
    }
    // Cancelled before it starts.
    let early = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await engine.generate(prompt: "One day", options: greedy(200))
    }
    do {
      _ = try await early.value
      XCTFail("a request cancelled before it started ran")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .cancelled, error.message)
    }
    let after = try await engine.generate(prompt: "The cat", options: greedy(8))
    let want = try await alone(model, "The cat", 8)
    XCTAssertEqual(after.text, want)
  }

  /// The README's lines, as written there, on SmolLM2.
  func testReadmeLines() async throws {
    try require(smolLM2Path(), from: "scripts/fetch_model.sh")
    let model = try Model(path: smolLM2Path())
    let engine = try Engine(model: model, options: EngineOptions(sequences: 4))
    var reply = GenerateOptions()
    reply.maxTokens = 64
    async let a = engine.generate(messages: [ChatMessage(role: "user", content: "hi")], options: reply)
    async let b = engine.generate(messages: [ChatMessage(role: "user", content: "open the camera")],
                                  options: reply)
    let (ta, tb) = (try await a.text, try await b.text)
    XCTAssertFalse(ta.isEmpty)
    XCTAssertFalse(tb.isEmpty)
  }

  func testRefusals() async throws {
    let model = try Model(path: path)
    XCTAssertThrowsError(try Engine(model: model, options: EngineOptions(sequences: 0))) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument)
    }
    let engine = try Engine(model: model, options: EngineOptions(sequences: 1, contextLength: 64, threads: 1))
    var shift = greedy(8)
    shift.contextPolicy = .shift()
    do {
      _ = try await engine.generate(prompt: "Once", options: shift)
      XCTFail("a context shift was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .invalidArgument)
      XCTAssertTrue(error.message.contains("context_policy"), error.message)
    }
    do {
      _ = try await engine.generate(tokens: [], options: greedy(8))
      XCTFail("an empty prompt was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .invalidArgument)
    }
    do {
      _ = try await engine.generate(tokens: [Token](repeating: 1, count: 80), options: greedy(8))
      XCTFail("a prompt longer than the context was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .contextFull, error.message)
    }
    var schema = greedy(40)
    schema.jsonSchema =
      #"{"type":"object","properties":{"a":{"enum":["yes","no"]}},"required":["a"],"additionalProperties":false}"#
    let json = try await engine.generate(prompt: "Once", options: schema)
    let object = try JSONSerialization.jsonObject(with: Data(json.text.utf8)) as? [String: Any]
    XCTAssertTrue(["yes", "no"].contains(object?["a"] as? String ?? ""), json.text)
  }
}

/// Pieces streamed from the engine's thread, read by the test's task.
final class Pieces: @unchecked Sendable {
  private let lock = NSLock()
  private var pieces = ""
  func append(_ s: String) { lock.lock(); pieces += s; lock.unlock() }
  var text: String { lock.lock(); defer { lock.unlock() }; return pieces }
}
