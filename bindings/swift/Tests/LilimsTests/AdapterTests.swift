// LoRA adapters through Swift on stories260K (../shared/data, see its
// SOURCES.md) with tests/data/lora/stories260k.lora.gguf (written by gguf-py
// in llama.cpp's layout, scripts/goldens/gen_lora_goldens.py).
import Foundation
import XCTest

@testable import Lilims

final class AdapterTests: XCTestCase {
  private let path = sharedData("stories260K/stories260K.gguf")
  private let adapterPath = repoFile("tests/data/lora/stories260k.lora.gguf")

  override func setUpWithError() throws {
    try require(path, from: "../shared/data/stories260K, see SOURCES.md")
  }

  private func logits(_ session: Session) throws -> [Float] {
    try session.reset()
    try session.evaluate([1, 403, 407, 261])
    return try XCTUnwrap(session.logits)
  }

  func testSetSwitchAndRemove() throws {
    let model = try Model(path: path)
    let session = try Session(model: model, contextLength: 64, threads: 2)
    let base = try logits(session)
    let adapter = try Adapter(model: model, path: adapterPath)
    XCTAssertNil(adapter.toolFormat)  // its file names none
    try session.setAdapters([(adapter, 1)])
    let adapted = try logits(session)
    XCTAssertNotEqual(adapted, base)
    try session.setAdapters([(adapter, 0.5), (adapter, 0.5)])
    let halves = try logits(session)
    XCTAssertEqual(Double(zip(halves, adapted).map { abs($0 - $1) }.max() ?? 0), 0, accuracy: 1e-3)
    try session.setAdapters([])
    XCTAssertEqual(try logits(session), base)
  }

  func testRefusesAnotherModelsAdapterAndAModelFile() throws {
    let model = try Model(path: path)
    XCTAssertThrowsError(try Adapter(model: model, path: path)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .badFormat)
    }
    let other = try Model(path: path)
    let adapter = try Adapter(model: other, path: adapterPath)
    let session = try Session(model: model, contextLength: 64, threads: 1)
    XCTAssertThrowsError(try session.setAdapters([(adapter, 1)])) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument)
    }
  }
}

/// Tool formats: SmolLM2's own, a required call parsed into name and
/// arguments; the parser on the other formats' answers.
final class ToolFormatTests: XCTestCase {
  func testParseEachFormat() throws {
    XCTAssertEqual(try ToolCall.parse(#"{"name":"open_app","arguments":{"app":"camera"}}"#, format: .generic),
                   [ToolCall(name: "open_app", arguments: #"{"app":"camera"}"#)])
    XCTAssertEqual(try ToolCall.parse(#"Sure. <tool_call>{"name": "a\"b\u00e9", "arguments": {"s": "x}y"}}</tool_call>"#,
                                      format: .hermes),
                   [ToolCall(name: "a\"bé", arguments: #"{"s":"x}y"}"#)])
    XCTAssertEqual(try ToolCall.parse(#"[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"n": [1, 2]}}]</tool_call>"#,
                                      format: .smollm2).map(\.name), ["a", "b"])
    XCTAssertEqual(try ToolCall.parse(#"{"name": "a", "parameters": {"n": 1}}"#, format: .llama3),
                   [ToolCall(name: "a", arguments: #"{"n":1}"#)])
    XCTAssertEqual(try ToolCall.parse("No tool fits that.", format: .phi4), [])
    XCTAssertThrowsError(try ToolCall.parse("<tool_call>{\"na", format: .hermes))
  }

  func testSmolLM2RequiredCallInItsFormat() async throws {
    let path = smolLM2Path()
    try require(path, from: "scripts/fetch_model.sh")
    let model = try Model(path: path)
    XCTAssertEqual(model.toolFormat, .smollm2)
    let tools = [
      Tool(name: "open_app", description: "Open an app on the phone.",
           parameters: #"{"type":"object","properties":{"app":{"enum":["camera","photos","maps"]}},"required":["app"]}"#),
      Tool(name: "set_timer", description: "Start a timer.",
           parameters: #"{"type":"object","properties":{"seconds":{"type":"integer"}},"required":["seconds"]}"#),
    ]
    let system = try toolsPrompt(tools, format: .smollm2)
    XCTAssertTrue(system.contains("<tools>[{\"name\":\"open_app\""), system)
    var options = GenerateOptions()
    options.maxTokens = 96
    options.tools = tools
    options.toolFormat = .smollm2
    let text = try await collect(try Session(model: model, contextLength: 1024, threads: 2).generate(
      messages: [ChatMessage(role: "system", content: system), ChatMessage(role: "user", content: "Open the camera.")],
      options: options))
    XCTAssertTrue(text.hasSuffix("</tool_call>"), text)
    let calls = try ToolCall.parse(text, format: .smollm2)
    XCTAssertFalse(calls.isEmpty, text)
    XCTAssertTrue(["open_app", "set_timer"].contains(calls.first?.name ?? ""), text)
  }
}
