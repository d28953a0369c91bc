// Opening models (file, memory, file descriptor), load progress and its
// cancellation, memory budgets and the memory report, session settings.
import Dispatch
import Foundation
import XCTest

@testable import Lilims

/// Greedy text of `maxTokens` tokens after `prompt` on a fresh session.
func greedyText(_ model: Model, _ prompt: String, _ maxTokens: Int,
                _ settings: SessionOptions = SessionOptions(contextLength: 256, threads: 1))
  async throws -> String
{
  let session = try Session(model: model, options: settings)
  return try await collect(session.generate(prompt: prompt, options: greedy(maxTokens)))
}

/// Records the fractions a load reports.
final class Fractions: @unchecked Sendable {
  private let lock = NSLock()
  private var values: [Float] = []

  func append(_ value: Float) { lock.withLock { values.append(value) } }
  var all: [Float] { lock.withLock { values } }
}

final class LoadingTests: XCTestCase {
  private let path = sharedData("stories260K/stories260K.gguf")

  override func setUpWithError() throws {
    try require(path, from: "../shared/data/stories260K, see SOURCES.md")
  }

  /// A model read from Data, and from a range of a bigger file through its
  /// descriptor (aligned and not), generates what the file itself does.
  func testMemoryAndFileDescriptor() async throws {
    let reference = try await greedyText(try Model(path: path), "Once upon a time", 24)
    let bytes = try Data(contentsOf: URL(fileURLWithPath: path))

    let fromData = try Model(data: bytes)
    XCTAssertEqual(fromData.info.fileBytes, UInt64(bytes.count))
    let dataText = try await greedyText(fromData, "Once upon a time", 24)
    XCTAssertEqual(dataText, reference)

    // The model between 4096 (or 4099, not a multiple of 16: read, not
    // mapped) bytes of padding and a tail of junk.
    for padding in [4096, 4099] {
      let bundle = NSTemporaryDirectory() + "lilims-swift-bundle-\(padding).bin"
      defer { try? FileManager.default.removeItem(atPath: bundle) }
      var contents = Data(repeating: 0xA5, count: padding)
      contents.append(bytes)
      contents.append(Data(repeating: 0x5A, count: 1000))
      try contents.write(to: URL(fileURLWithPath: bundle))
      let handle = try XCTUnwrap(FileHandle(forReadingAtPath: bundle))
      let model = try Model(fileDescriptor: handle.fileDescriptor, offset: UInt64(padding),
                            size: UInt64(bytes.count))
      try handle.close()  // lilims does not keep the descriptor
      let fdText = try await greedyText(model, "Once upon a time", 24)
      XCTAssertEqual(fdText, reference, "padding \(padding)")
    }

    // A range that cuts the model short.
    let handle = try XCTUnwrap(FileHandle(forReadingAtPath: path))
    defer { try? handle.close() }
    XCTAssertThrowsError(try Model(fileDescriptor: handle.fileDescriptor, offset: 0,
                                   size: UInt64(bytes.count / 2))) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .badFormat, "\(error)")
    }
  }

  /// The unsafe variant reads the caller's buffer in place: the report
  /// counts its weights as mapped, not copied.
  func testUnsafeBytesAreNotCopied() throws {
    let bytes = try Data(contentsOf: URL(fileURLWithPath: path))
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
    defer { buffer.deallocate() }
    bytes.withUnsafeBytes { buffer.copyMemory(from: $0) }
    let report: MemoryReport = try {
      let model = try Model(unsafeBytes: UnsafeRawBufferPointer(buffer))
      return try Session(model: model, contextLength: 64, threads: 1).memoryReport()
    }()
    XCTAssertGreaterThan(report.weightsMapped, 0)
    XCTAssertEqual(report.total, report.weightsMapped + report.weightsCopied + report.kvResident
                   + report.scratch + report.host)
  }

  func testProgressAndAbort() throws {
    let fractions = Fractions()
    _ = try Model(path: path, options: ModelOptions(progress: { fraction in
      fractions.append(fraction)
      return true
    }))
    let seen = fractions.all
    XCTAssertGreaterThan(seen.count, 2)
    XCTAssertEqual(seen.first, 0)
    XCTAssertEqual(seen.last, 1)
    XCTAssertEqual(seen, seen.sorted(), "fractions went backwards")

    let abandoned = Fractions()
    XCTAssertThrowsError(try Model(path: path, options: ModelOptions(progress: { fraction in
      abandoned.append(fraction)
      return fraction < 0.2
    }))) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .cancelled, "\(error)")
    }
    XCTAssertLessThan(abandoned.all.last ?? 1, 1, "the load went on after false")
  }

  /// Cancelling the task that awaits `Model.load` abandons the load: the
  /// first progress report holds the load until the task is cancelled.
  func testLoadTaskCancellation() async throws {
    let started = DispatchSemaphore(value: 0)
    let cancelled = DispatchSemaphore(value: 0)
    let options = ModelOptions(progress: { _ in
      started.signal()
      cancelled.wait()
      return true
    })
    let path = self.path
    let load = Task { try await Model.load(path: path, options: options) }
    await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
      DispatchQueue.global().async {
        started.wait()
        done.resume()
      }
    }
    load.cancel()
    // Every later report must pass too, whatever the load decides.
    for _ in 0..<10_000 { cancelled.signal() }
    do {
      _ = try await load.value
      XCTFail("a cancelled load returned a model")
    } catch let error as LilimsError {
      XCTAssertEqual(error.code, .cancelled, error.message)
    }

    // Not cancelled: it loads.
    let model = try await Model.load(path: path)
    XCTAssertEqual(model.info.vocabularySize, 512)
  }

  /// A manifest `lilims manifest` wrote (tests/data/stories260k.manifest.json)
  /// is accepted at open and on an open model; copies with a tensor's hash,
  /// the file's hash or the lilims version changed are refused with the
  /// status and message the C API documents.
  func testManifest() throws {
    let good = repoFile("tests/data/stories260k.manifest.json")
    let text = try String(contentsOfFile: good, encoding: .utf8)
    for useMmap in [true, false] {
      let model = try Model(path: path, options: ModelOptions(
        useMmap: useMmap, manifestPath: good, checkManifestFileHash: true))
      XCTAssertNoThrow(try model.checkManifest(path: good, checkFileHash: true))
    }

    /// `text` with the first character after `key` replaced by a different one.
    func corrupted(_ key: String, _ name: String) throws -> String {
      let start = try XCTUnwrap(text.range(of: key), key).upperBound
      let old = text[start]
      let file = NSTemporaryDirectory() + "lilims-swift-\(name).manifest.json"
      let changed = text.replacingCharacters(in: start...start, with: old == "9" ? "8" : "9")
      try changed.write(toFile: file, atomically: true, encoding: .utf8)
      return file
    }
    let tensor = try corrupted("\"xxh3_128\": \"", "tensor")
    let wholeFile = try corrupted("\"file_xxh3_128\": \"", "file")
    let newer = try corrupted("\"requires_lilims\": \"", "newer")
    defer {
      for file in [tensor, wholeFile, newer] { try? FileManager.default.removeItem(atPath: file) }
    }

    func expect(_ code: LilimsError.Code, _ message: String, _ call: () throws -> Void) {
      XCTAssertThrowsError(try call()) { error in
        let e = error as? LilimsError
        XCTAssertEqual(e?.code, code, "\(error)")
        XCTAssertTrue(e?.message.contains(message) ?? false, "\(error)")
      }
    }
    expect(.badFormat, "tensor token_embd.weight differs from the manifest") {
      _ = try Model(path: path, options: ModelOptions(manifestPath: tensor))
    }
    // The file's hash is checked only when asked for.
    XCTAssertNoThrow(try Model(path: path, options: ModelOptions(manifestPath: wholeFile)))
    expect(.badFormat, "the file differs from the manifest") {
      _ = try Model(path: path, options: ModelOptions(manifestPath: wholeFile,
                                                      checkManifestFileHash: true))
    }
    expect(.unsupported, "needs lilims 9") {
      _ = try Model(path: path, options: ModelOptions(manifestPath: newer))
    }
    expect(.io, "/nonexistent/x.json") {
      _ = try Model(path: path, options: ModelOptions(manifestPath: "/nonexistent/x.json"))
    }

    let model = try Model(path: path)
    expect(.badFormat, "tensor token_embd.weight differs from the manifest") { try model.checkManifest(path: tensor) }
    XCTAssertNoThrow(try model.checkManifest(path: wholeFile))
    expect(.badFormat, "the file differs from the manifest") { try model.checkManifest(path: wholeFile, checkFileHash: true) }
    expect(.io, "/nonexistent/x.json") { try model.checkManifest(path: "/nonexistent/x.json") }
  }

  func testModelBudget() throws {
    let fileBytes = UInt64(try FileManager.default.attributesOfItem(atPath: path)[.size] as! Int)
    XCTAssertThrowsError(try Model(path: path, options: ModelOptions(memoryBudget: fileBytes / 2)))
    { error in
      let e = error as? LilimsError
      XCTAssertEqual(e?.code, .outOfMemory)
      XCTAssertTrue(e?.message.contains("bytes") ?? false, "\(error)")
    }
    XCTAssertNoThrow(try Model(path: path, options: ModelOptions(memoryBudget: 4 * fileBytes)))
  }

  /// A session fits a budget of exactly its estimate, not one byte less.
  func testSessionBudgetAndEstimate() throws {
    let model = try Model(path: path)
    var settings = SessionOptions(contextLength: 512, threads: 1)
    // A fixed prefill block: the default one shrinks to fit a budget.
    settings.batchSize = 64
    let estimate = try model.sessionMemoryEstimate(settings)
    XCTAssertGreaterThan(estimate, 0)
    settings.memoryBudget = estimate - 1
    XCTAssertThrowsError(try Session(model: model, options: settings)) { error in
      let e = error as? LilimsError
      XCTAssertEqual(e?.code, .outOfMemory)
      XCTAssertTrue(e?.message.contains("\(estimate)") ?? false, "\(error)")
    }
    settings.memoryBudget = estimate
    let session = try Session(model: model, options: settings)
    XCTAssertEqual(session.contextLength, 512)

    // A longer context needs more.
    settings.contextLength = 1024
    XCTAssertGreaterThan(try model.sessionMemoryEstimate(settings), estimate)
  }

  /// Mapped: the weights are read in place and only repacked copies are on
  /// the heap; read: the whole file is.  The KV cache grows with tokens.
  func testMemoryReport() async throws {
    let mapped = try Session(model: try Model(path: path), contextLength: 256, threads: 1)
    let before = try mapped.memoryReport()
    XCTAssertGreaterThan(before.weightsMapped, 0)
    XCTAssertEqual(before.kvResident, 0)
    XCTAssertGreaterThan(before.kvFull, 0)
    _ = try await collect(mapped.generate(prompt: "Once upon a time", options: greedy(100)))
    let after = try mapped.memoryReport()
    XCTAssertGreaterThan(after.kvResident, 0)
    XCTAssertLessThanOrEqual(after.kvResident, after.kvFull)

    let read = try Session(model: try Model(path: path, useMmap: false), contextLength: 256,
                           threads: 1)
    let readReport = try read.memoryReport()
    XCTAssertEqual(readReport.weightsMapped, 0)
    XCTAssertGreaterThan(readReport.weightsCopied, before.weightsCopied)
  }

  /// Batch size, chunking and thread count change how the work is cut, not
  /// the greedy text; a context beyond the trained one needs consent.
  func testSessionSettings() async throws {
    let model = try Model(path: path)
    let reference = try await greedyText(model, "Once upon a time there was", 32)
    var settings = SessionOptions(contextLength: 256, threads: 2)
    settings.batchSize = 1
    settings.chunkLayers = 1
    let session = try Session(model: model, options: settings)
    XCTAssertEqual(session.contextLength, 256)
    let text = try await collect(session.generate(prompt: "Once upon a time there was",
                                                  options: greedy(32)))
    XCTAssertEqual(text, reference)
    // Async KV commits write the same rows: the same text.
    for commit in [KVCommit.sync, .async] {
      settings.kvCommit = commit
      let s = try Session(model: model, options: settings)
      let committed = try await collect(s.generate(prompt: "Once upon a time there was", options: greedy(32)))
      XCTAssertEqual(committed, reference, "\(commit)")
    }

    var beyond = SessionOptions(contextLength: 4096, threads: 1)
    XCTAssertThrowsError(try Session(model: model, options: beyond))
    beyond.allowContextBeyondTrained = true
    XCTAssertEqual(try Session(model: model, options: beyond).contextLength, 4096)

    // stories260K's heads are 8 wide: a Q8_0 cache (blocks of 32) is refused.
    var q8 = SessionOptions(contextLength: 256, threads: 1)
    q8.kvCacheType = .q8_0
    XCTAssertThrowsError(try Session(model: model, options: q8)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .unsupported, "\(error)")
    }
  }
}
