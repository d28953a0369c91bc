// The rest of the C API through Swift: model info, versions, status names,
// token pieces, chat templates, logits and the log handler on stories260K
// (../shared/data, see its SOURCES.md); the options' conversions to the C
// params structs.
import CLilims
import Foundation
import XCTest

@testable import Lilims

/// Collects the reports of the log handler.
final class Reports: @unchecked Sendable {
  private let lock = NSLock()
  private var values: [(LogLevel, String)] = []

  func append(_ level: LogLevel, _ message: String) { lock.withLock { values.append((level, message)) } }
  var all: [(LogLevel, String)] { lock.withLock { values } }
}

final class ModelApiTests: XCTestCase {
  private let path = sharedData("stories260K/stories260K.gguf")

  override func setUpWithError() throws {
    try require(path, from: "../shared/data/stories260K, see SOURCES.md")
  }

  /// The hyperparameters of the file's metadata (`lilims inspect` lists them).
  func testInfo() throws {
    let info = try Model(path: path).info
    XCTAssertEqual(info.embeddingLength, 64)
    XCTAssertEqual(info.headCount, 8)
    XCTAssertEqual(info.kvHeadCount, 4)
    XCTAssertEqual(info.feedForwardLength, 172)
    XCTAssertEqual(info.bosToken, 1)
    XCTAssertEqual(info.eosToken, 2)
    XCTAssertTrue(info.addsBos)
  }

  func testVersionsAndStatusNames() {
    let (major, minor, patch) = lilimsVersion()
    XCTAssertTrue(lilimsVersionString().hasPrefix("\(major).\(minor).\(patch) (isa: "),
                  lilimsVersionString())
    XCTAssertEqual(lilimsABIVersion(), Int(LILIMS_ABI_VERSION))
    XCTAssertEqual(LilimsError.Code.busy.statusName, "busy")
    XCTAssertEqual(LilimsError.Code.invalidArgument.statusName, "invalid argument")
  }

  /// The pieces of a prompt's tokens spell the prompt; a byte-fallback
  /// token's piece is its one byte.
  func testPieces() throws {
    let model = try Model(path: path)
    let ids = try model.tokenize("Once upon a time")
    let bytes = try ids.flatMap { try model.piece(of: $0) }
    XCTAssertEqual(String(decoding: bytes, as: UTF8.self), " Once upon a time")
    XCTAssertEqual(try model.piece(of: 3 + 0x41), [0x41])  // <0x41>
    XCTAssertThrowsError(try model.piece(of: 512)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument, "\(error)")
    }
  }

  /// A named template formats a conversation for a model without one of
  /// its own; tokenizing it keeps text in a message as text.
  func testChatTemplate() throws {
    let model = try Model(path: path)
    let messages = [ChatMessage(role: "user", content: "hi")]
    let text = try model.applyChatTemplate(messages, templateName: "chatml")
    XCTAssertTrue(text.hasSuffix("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), text)
    let closed = try model.applyChatTemplate(messages, templateName: "chatml",
                                             addGenerationPrompt: false)
    XCTAssertEqual(closed + "<|im_start|>assistant\n", text)
    let ids = try model.tokenize(messages: messages, templateName: "chatml", addBos: true)
    XCTAssertEqual(ids.first, model.info.bosToken)
    XCTAssertEqual(try model.detokenize(Array(ids.dropFirst())), text)
    XCTAssertThrowsError(try model.applyChatTemplate(messages)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .unsupported, "\(error)")
    }
    XCTAssertThrowsError(try model.applyChatTemplate(messages, templateName: "nope")) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument, "\(error)")
    }
  }

  /// The logits after BOS against llama.cpp's (tests/data/stories260k_llamacpp_goldens.json,
  /// scripts/goldens/gen_stories260k_goldens.py): the same top five, each
  /// within 0.05.  Both run the F32 weights with an F16 KV cache; llama.cpp's
  /// own F16 and F32 caches differ by up to 0.027 over its 32 positions.
  func testLogitsMatchLlamaCpp() throws {
    let goldens = try JSONSerialization.jsonObject(
      with: Data(contentsOf: URL(fileURLWithPath: repoFile("tests/data/stories260k_llamacpp_goldens.json"))))
      as? [String: Any]
    let positions = try XCTUnwrap(goldens?["positions"] as? [[String: Any]])
    let top = try XCTUnwrap(positions.first?["top"] as? [[Double]])

    let session = try Session(model: try Model(path: path), contextLength: 64, threads: 1)
    XCTAssertNil(session.logits, "logits before any evaluation")
    try session.evaluate([1])
    let logits = try XCTUnwrap(session.logits)
    XCTAssertEqual(logits.count, 512)
    let ours = logits.indices.sorted { logits[$0] > logits[$1] || (logits[$0] == logits[$1] && $0 < $1) }
    for (rank, entry) in top.enumerated() {
      XCTAssertEqual(ours[rank], Int(entry[0]), "rank \(rank)")
      XCTAssertEqual(Double(logits[Int(entry[0])]), entry[1], accuracy: 0.05, "token \(Int(entry[0]))")
    }
    try session.truncate(keeping: 1)
    XCTAssertNil(session.logits, "logits after a truncation")
  }

  /// Opening a model reports it at info level; above that, or without a
  /// handler, nothing reaches the handler.
  func testLogHandler() throws {
    let reports = Reports()
    setLogHandler(minLevel: .info) { reports.append($0, $1) }
    defer { setLogHandler(nil) }
    _ = try Model(path: path)
    let opened = reports.all.filter { $0.1.hasPrefix("[model_open] \(path): ") }
    XCTAssertEqual(opened.count, 1, "\(reports.all)")
    XCTAssertEqual(opened.first?.0, .info)

    setLogHandler(minLevel: .warn) { reports.append($0, $1) }
    _ = try Model(path: path)
    setLogHandler(nil)
    _ = try Model(path: path)
    XCTAssertEqual(reports.all.filter { $0.1.hasPrefix("[model_open]") }.count, 1, "\(reports.all)")
  }
}

/// The options' conversions to and from lilims' params structs.
final class OptionsTests: XCTestCase {
  /// Default options are lilims' defaults, field by field.
  func testDefaultsRoundTrip() {
    assertSameFields(
      CGenerateParams(GenerateOptions()).params, lilims_generate_default_params(),
      [\.max_tokens, \.sampling.temperature, \.sampling.top_k, \.sampling.top_p,
       \.sampling.min_p, \.sampling.repeat_penalty, \.sampling.repeat_last_n, \.sampling.seed,
       \.frequency_penalty, \.presence_penalty, \.json_object, \.add_bos, \.parse_special,
       \.reuse_prefix, \.jump_forward, \.n_draft, \.context_policy, \.n_keep])
    assertSameFields(
      SessionOptions().cParams, lilims_session_default_params(),
      [\.n_ctx, \.n_threads, \.allow_ctx_beyond_train, \.memory_budget, \.n_batch, \.kv_type,
       \.chunk_layers])
  }

  private func assertSameFields<P>(_ a: P, _ b: P, _ fields: [PartialKeyPath<P>],
                                   line: UInt = #line) {
    for field in fields {
      let value = a[keyPath: field] as? AnyHashable
      XCTAssertNotNil(value, "\(field)", line: line)
      XCTAssertEqual(value, b[keyPath: field] as? AnyHashable, "\(field)", line: line)
    }
  }

  /// Every option reaches its field; Ints beyond int32_t are clamped.
  func testOptionsReachTheirFields() {
    var o = GenerateOptions()
    o.maxTokens = Int(Int32.max) + 1
    o.temperature = 0.5
    o.topK = 7
    o.topP = 0.9
    o.minP = 0.05
    o.repeatPenalty = 1.1
    o.repeatLastN = 32
    o.seed = 42
    o.frequencyPenalty = 0.25
    o.presencePenalty = 0.75
    o.jsonObject = true
    o.addBos = false
    o.parseSpecial = false
    o.reusePrefix = true
    o.jumpForward = false
    o.draftTokens = 6
    o.contextPolicy = .shift(keep: 3)
    var p = CGenerateParams(o).params
    XCTAssertEqual(p.max_tokens, Int32.max)
    XCTAssertEqual(p.sampling.temperature, 0.5)
    XCTAssertEqual(p.sampling.top_k, 7)
    XCTAssertEqual(p.sampling.top_p, 0.9)
    XCTAssertEqual(p.sampling.min_p, 0.05)
    XCTAssertEqual(p.sampling.repeat_penalty, 1.1)
    XCTAssertEqual(p.sampling.repeat_last_n, 32)
    XCTAssertEqual(p.sampling.seed, 42)
    XCTAssertEqual(p.frequency_penalty, 0.25)
    XCTAssertEqual(p.presence_penalty, 0.75)
    XCTAssertEqual(p.json_object, 1)
    XCTAssertEqual(p.add_bos, 0)
    XCTAssertEqual(p.parse_special, 0)
    XCTAssertEqual(p.reuse_prefix, 1)
    XCTAssertEqual(p.jump_forward, 0)
    XCTAssertEqual(p.n_draft, 6)
    XCTAssertEqual(p.context_policy, Int32(LILIMS_CONTEXT_SHIFT.rawValue))
    XCTAssertEqual(p.n_keep, 3)
    o.contextPolicy = .shift()
    p = CGenerateParams(o).params
    XCTAssertEqual(p.n_keep, -1)

    var s = SessionOptions(contextLength: 512, threads: 3)
    s.allowContextBeyondTrained = true
    s.memoryBudget = 1 << 40
    s.batchSize = -5
    s.kvCacheType = .q8_0
    s.chunkLayers = 2
    let sp = s.cParams
    XCTAssertEqual(sp.n_ctx, 512)
    XCTAssertEqual(sp.n_threads, 3)
    XCTAssertEqual(sp.allow_ctx_beyond_train, 1)
    XCTAssertEqual(sp.memory_budget, 1 << 40)
    XCTAssertEqual(sp.n_batch, -5)
    XCTAssertEqual(sp.kv_type, Int32(LILIMS_KV_Q8_0.rawValue))
    XCTAssertEqual(sp.chunk_layers, 2)
  }
}
