// Generation options, statistics and KV state through the Swift API.
import Foundation
import XCTest

@testable import Lilims

/// The text and the figures of one generation.
func runEvents(_ session: Session, _ prompt: String, _ options: GenerateOptions) async throws
  -> (String, GenerationStatistics)
{
  var text = ""
  var figures: GenerationStatistics?
  for try await event in session.generateEvents(prompt: prompt, options: options) {
    switch event {
    case .text(let piece):
      XCTAssertNil(figures, "text after the figures")
      text += piece
    case .finished(let stats): figures = stats
    }
  }
  return (text, try XCTUnwrap(figures, "no figures at the end of the stream"))
}

final class GenerationTests: XCTestCase {
  private let path = sharedData("stories260K/stories260K.gguf")
  private let prompt = "Once upon a time"

  override func setUpWithError() throws {
    try require(path, from: "../shared/data/stories260K, see SOURCES.md")
  }

  private func session(_ contextLength: Int = 512) throws -> Session {
    try Session(model: try Model(path: path), contextLength: contextLength, threads: 1)
  }

  func testStatistics() async throws {
    let session = try session()
    let (text, stats) = try await runEvents(session, prompt, greedy(40))
    XCTAssertFalse(text.isEmpty)
    XCTAssertEqual(stats.promptTokens, 5)  // BOS and the prompt's 4
    XCTAssertEqual(stats.generatedTokens, 40)
    XCTAssertEqual(stats.stopReason, .maxTokens)
    XCTAssertGreaterThan(stats.timeToFirstToken, 0)
    XCTAssertGreaterThan(stats.promptTokensPerSecond, 0)
    XCTAssertGreaterThan(stats.decodeTokensPerSecond, 0)
    XCTAssertGreaterThan(stats.peakResidentBytes, 0)
    XCTAssertEqual(session.lastStatistics?.generatedTokens, 40)
  }

  /// The text stops before the stop string, which is not streamed.
  func testStopStrings() async throws {
    let full = try await collect(try session().generate(prompt: prompt, options: greedy(60)))
    let words = full.split(separator: " ")
    XCTAssertGreaterThan(words.count, 6, full)
    let stop = String(words[5])
    var options = greedy(60)
    options.stop = [stop, "never in this text"]
    let (text, stats) = try await runEvents(try session(), prompt, options)
    XCTAssertEqual(stats.stopReason, .stopString)
    XCTAssertEqual(text, String(full[..<full.range(of: stop)!.lowerBound]))

    options.stop = [""]
    do {
      _ = try await runEvents(try session(), prompt, options)
      XCTFail("an empty stop string was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .invalidArgument, error.message)
    }
  }

  /// Banning the greedy first token changes the first token.
  func testLogitBias() async throws {
    let model = try Model(path: path)
    let first = try Session(model: model, contextLength: 64, threads: 1)
    _ = try await collect(first.generate(prompt: prompt, options: greedy(1)))
    let chosen = try XCTUnwrap(try first.tokens.last)

    var options = greedy(1)
    options.logitBias = [chosen: -Float.infinity]
    let second = try Session(model: model, contextLength: 64, threads: 1)
    _ = try await collect(second.generate(prompt: prompt, options: options))
    XCTAssertNotEqual(try second.tokens.last, chosen)

    options.logitBias = [Token(model.info.vocabularySize): 1]
    do {
      _ = try await collect(second.generate(prompt: "", options: options))
      XCTFail("a bias for a token outside the vocabulary was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .invalidArgument, error.message)
    }
  }

  /// A strong frequency / presence penalty keeps greedy text from repeating
  /// its tokens as it does without one.
  func testPenalties() async throws {
    let plain = try await collect(try session().generate(prompt: prompt, options: greedy(120)))
    for kind in ["frequency", "presence"] {
      var options = greedy(120)
      if kind == "frequency" { options.frequencyPenalty = 100 } else { options.presencePenalty = 100 }
      let s = try session()
      let penalised = try await collect(s.generate(prompt: prompt, options: options))
      XCTAssertNotEqual(penalised, plain, kind)
      // Every generated token is new: each one seen already was pushed far below the rest.
      let generated = try s.tokens.suffix(120)
      XCTAssertEqual(Set(generated).count, generated.count, kind)
    }
  }

  /// The same seed gives the same sample, and top-k 1 is greedy.
  func testSamplingSettings() async throws {
    var options = GenerateOptions()
    options.maxTokens = 40
    options.temperature = 1
    options.topP = 0.95
    options.seed = 1234
    let a = try await collect(try session().generate(prompt: prompt, options: options))
    let b = try await collect(try session().generate(prompt: prompt, options: options))
    XCTAssertEqual(a, b)
    options.seed = 99
    let c = try await collect(try session().generate(prompt: prompt, options: options))
    XCTAssertNotEqual(a, c)

    options.topK = 1
    let topOne = try await collect(try session().generate(prompt: prompt, options: options))
    let greedyText = try await collect(try session().generate(prompt: prompt, options: greedy(40)))
    XCTAssertEqual(topOne, greedyText)
  }

  /// A full context stops generation, or shifts it and goes on.
  func testContextPolicy() async throws {
    let (_, stopped) = try await runEvents(try session(64), prompt, greedy(100))
    XCTAssertEqual(stopped.stopReason, .contextFull)

    var options = greedy(100)
    options.contextPolicy = .shift(keep: 1)
    let s = try session(64)
    let (_, shifted) = try await runEvents(s, prompt, options)
    XCTAssertEqual(shifted.stopReason, .maxTokens)
    XCTAssertEqual(shifted.generatedTokens, 100)
    XCTAssertGreaterThan(shifted.contextShifts, 0)
    XCTAssertEqual(try s.tokens.first, s.model.info.bosToken)
  }

  /// The second turn re-sends the whole text: only the new part is evaluated.
  func testReusePrefix() async throws {
    let s = try session()
    let (answer, _) = try await runEvents(s, prompt, greedy(10))
    var options = greedy(5)
    options.reusePrefix = true
    let (_, stats) = try await runEvents(s, prompt + answer + " The end.", options)
    XCTAssertGreaterThan(stats.reusedTokens, 5)
    XCTAssertLessThan(stats.reusedTokens, stats.promptTokens)
  }

  /// Saved state resumes the same conversation in another session, through
  /// Data and through a file; truncation keeps a prefix.
  func testState() async throws {
    let model = try Model(path: path)
    let s = try Session(model: model, contextLength: 256, threads: 1)
    _ = try await collect(s.generate(prompt: prompt, options: greedy(20)))
    let tokens = try s.tokens
    XCTAssertEqual(tokens.count, s.tokenCount)
    XCTAssertEqual(tokens.first, model.info.bosToken)
    let state = try s.saveState()
    let file = NSTemporaryDirectory() + "lilims-swift-state.bin"
    defer { try? FileManager.default.removeItem(atPath: file) }
    try s.saveState(toFile: file)
    let next = try await collect(s.generate(prompt: " Then", options: greedy(20)))

    for load in ["data", "file"] {
      let resumed = try Session(model: model, contextLength: 256, threads: 1)
      if load == "data" { try resumed.loadState(state) } else { try resumed.loadState(fromFile: file) }
      XCTAssertEqual(try resumed.tokens, tokens, load)
      let text = try await collect(resumed.generate(prompt: " Then", options: greedy(20)))
      XCTAssertEqual(text, next, load)
    }

    // Truncated back to the prompt, the greedy continuation is the first one again.
    try s.truncate(keeping: 5)
    XCTAssertEqual(try s.tokens, Array(tokens.prefix(5)))
    XCTAssertThrowsError(try s.truncate(keeping: 6))

    let broken = Data(state.prefix(state.count / 2))
    XCTAssertThrowsError(try s.loadState(broken)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .badFormat, "\(error)")
    }
    XCTAssertEqual(s.tokenCount, 5, "a refused state changed the session")
  }

  /// Prompt-lookup drafts on a prompt that repeats itself: the same greedy
  /// text as without them, and some drafts kept.
  func testDrafting() async throws {
    let repeats = "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little"
    let defaults = GenerateOptions()
    XCTAssertEqual(defaults.draftTokens, 0)
    XCTAssertTrue(defaults.jumpForward)
    let (plain, plainStats) = try await runEvents(try session(256), repeats, greedy(64))
    var options = greedy(64)
    options.draftTokens = 6
    let (drafted, stats) = try await runEvents(try session(256), repeats, options)
    XCTAssertEqual(drafted, plain)
    XCTAssertEqual(stats.generatedTokens, plainStats.generatedTokens)
    XCTAssertEqual(plainStats.draftedTokens, 0)
    XCTAssertEqual(plainStats.acceptedTokens, 0)
    XCTAssertGreaterThan(stats.draftedTokens, 0)
    XCTAssertGreaterThan(stats.acceptedTokens, 0)
    XCTAssertLessThanOrEqual(stats.acceptedTokens, stats.draftedTokens)
    XCTAssertEqual(stats.forcedTokens, 0)

    options.draftTokens = -1
    do {
      _ = try await runEvents(try session(64), "Once", options)
      XCTFail("a negative draft length was accepted")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .invalidArgument, error.message)
      XCTAssertTrue(error.message.hasPrefix("[generate] n_draft"), error.message)
    }
  }

  func testTokenizer() throws {
    let model = try Model(path: path)
    let ids = try model.tokenize(prompt, addBos: true)
    XCTAssertEqual(ids.count, 5)
    XCTAssertEqual(ids.first, model.info.bosToken)
    XCTAssertEqual(try model.detokenize(Array(ids.dropFirst())), prompt)
  }
}

final class SmolLM2GenerationTests: XCTestCase {
  private let path = smolLM2Path()

  override func setUpWithError() throws {
    try require(path, from: "scripts/fetch_model.sh")
  }

  /// The answer is valid for the schema and the call names a tool.
  func testSchemaAndTools() async throws {
    let model = try Model(path: path)
    var options = greedy(48)
    options.jsonSchema = #"{"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}}, "required": ["city"]}"#
    let session = try Session(model: model, contextLength: 512)
    let text = try await collect(session.generate(
      messages: [ChatMessage(role: "user", content: "Which city is the capital of France?")],
      options: options))
    let object = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])
    XCTAssertTrue(["Paris", "Rome"].contains(object["city"] as? String ?? ""), text)

    let tools = [
      Tool(name: "open_app", description: "Opens an app",
           parameters: #"{"type": "object", "properties": {"app": {"type": "string"}}, "required": ["app"]}"#),
      Tool(name: "set_timer", parameters: #"{"type": "object", "properties": {"minutes": {"type": "integer"}}}"#),
    ]
    let system = try toolsPrompt(tools)
    XCTAssertTrue(system.contains("open_app") && system.contains("set_timer"), system)
    var toolOptions = greedy(64)
    toolOptions.tools = tools
    let call = try await collect(try Session(model: model, contextLength: 1024).generate(
      messages: [ChatMessage(role: "system", content: system),
                 ChatMessage(role: "user", content: "open the camera")],
      options: toolOptions))
    let parsed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(call.utf8)) as? [String: Any])
    XCTAssertTrue(["open_app", "set_timer"].contains(parsed["name"] as? String ?? ""), call)
    XCTAssertNotNil(parsed["arguments"] as? [String: Any], call)
  }

  /// Jump-forward appends the tokens a tool call's schema forces without
  /// sampling them; off, none are, and the call is valid either way.
  func testJumpForward() async throws {
    let model = try Model(path: path)
    let tool = Tool(
      name: "open_app", description: "Open an app on the phone.",
      parameters: #"{"type":"object","properties":{"app":{"enum":["camera","photos","maps"]}},"required":["app"],"additionalProperties":false}"#)
    var options = greedy(64)
    options.tools = [tool]
    for jump in [true, false] {
      options.jumpForward = jump
      let session = try Session(model: model, contextLength: 512, threads: 2)
      let (call, stats) = try await runEvents(
        session, "<|im_start|>user\nOpen the camera.<|im_end|>\n<|im_start|>assistant\n", options)
      let parsed = try XCTUnwrap(
        try JSONSerialization.jsonObject(with: Data(call.utf8)) as? [String: Any], call)
      XCTAssertEqual(parsed["name"] as? String, "open_app", call)
      if jump {
        XCTAssertGreaterThan(stats.forcedTokens, 3, call)
      } else {
        XCTAssertEqual(stats.forcedTokens, 0, call)
      }
      XCTAssertLessThanOrEqual(stats.forcedTokens, stats.generatedTokens)
    }
  }

  /// A lazy constraint: free text, the trigger, the call, the closing text;
  /// valueOffset says where the call starts (in UTF-8 bytes).
  func testLazyToolCall() async throws {
    let model = try Model(path: path)
    let tool = Tool(
      name: "open_app", description: "Open an app on the phone.",
      parameters: #"{"type":"object","properties":{"app":{"enum":["camera","photos","maps"]}},"required":["app"],"additionalProperties":false}"#)
    var options = greedy(64)
    options.tools = [tool]
    options.constraintTrigger = "camera"  // SmolLM2 answers "The camera is ..." here
    options.constraintClose = " (done)"
    let session = try Session(model: model, contextLength: 512, threads: 2)
    let (text, stats) = try await runEvents(
      session, "<|im_start|>user\nOpen the camera.<|im_end|>\n<|im_start|>assistant\n", options)
    XCTAssertTrue(stats.constraintTriggered, text)
    XCTAssertEqual(stats.stopReason, .endOfGeneration, text)
    let offset = try XCTUnwrap(stats.valueOffset, text)
    let bytes = Array(text.utf8)
    XCTAssertTrue(text.hasSuffix(" (done)"), text)
    let call = Data(bytes[offset..<(bytes.count - 7)])
    let parsed = try XCTUnwrap(try JSONSerialization.jsonObject(with: call) as? [String: Any], text)
    XCTAssertEqual(parsed["name"] as? String, "open_app", text)
    XCTAssertTrue(String(decoding: bytes[..<offset], as: UTF8.self).contains("camera"), text)
  }

  /// A Q8_0 KV cache takes about half the memory of F16 and still answers.
  func testQ8Cache() async throws {
    let model = try Model(path: path)
    var settings = SessionOptions(contextLength: 512)
    let f16 = try model.sessionMemoryEstimate(settings)
    settings.kvCacheType = .q8_0
    XCTAssertLessThan(try model.sessionMemoryEstimate(settings), f16)
    let session = try Session(model: model, options: settings)
    let f16Cache = try Session(model: model, contextLength: 512).memoryReport().kvFull
    XCTAssertLessThan(try session.memoryReport().kvFull, f16Cache * 6 / 10)
    let text = try await collect(session.generate(
      messages: [ChatMessage(role: "user", content: "What is the capital city of France? Answer in English.")],
      options: greedy(32)))
    XCTAssertTrue(text.contains("Paris"), text)
  }
}
