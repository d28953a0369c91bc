// Pictures through Swift: the tiny LLaVA (tests/data/llava, made by
// scripts/goldens/gen_tiny_llava.py) evaluates RGB pixels with the same
// logits as the C API gives for the same bytes (the same code on the same
// rows: compared exactly), keeps them in a saved state, and refuses bad
// input with the C API's errors.
import CLilims
import XCTest

@testable import Lilims

final class ImageTests: XCTestCase {
  private let text = repoFile("tests/data/llava/text.gguf")
  private let mmproj = repoFile("tests/data/llava/mmproj.gguf")

  /// A 40x30 picture (a gradient with a bright square), rows `stride` bytes apart.
  private func picture(stride: Int) -> [UInt8] {
    var rgb = [UInt8](repeating: 0xEE, count: stride * 30)
    for y in 0..<30 {
      for x in 0..<40 {
        let lit = (10..<20).contains(x) && (5..<15).contains(y)
        rgb[y * stride + 3 * x] = lit ? 250 : UInt8(6 * x)
        rgb[y * stride + 3 * x + 1] = UInt8(8 * y)
        rgb[y * stride + 3 * x + 2] = lit ? 250 : 90
      }
    }
    return rgb
  }

  private func options() -> SessionOptions {
    var o = SessionOptions(contextLength: 64, threads: 2)
    o.batchSize = 8
    return o
  }

  /// The logits after "USER:" and the picture, through the C API.
  private func logitsThroughC(_ rgb: [UInt8], stride: Int, before: [Token], vocab: Int) throws -> [Float] {
    var mp = lilims_model_default_params()
    var model: OpaquePointer?
    XCTAssertEqual(lilims_model_open(text, &mp, &model), LILIMS_OK)
    defer { lilims_model_free(model) }
    var sp = options().cParams
    var session: OpaquePointer?
    XCTAssertEqual(lilims_session_create(model, &sp, &session), LILIMS_OK)
    defer { lilims_session_free(session) }
    var projector: OpaquePointer?
    XCTAssertEqual(lilims_mmproj_open(mmproj, &projector), LILIMS_OK)
    defer { lilims_mmproj_free(projector) }
    XCTAssertEqual(lilims_session_eval(session, before, before.count), LILIMS_OK)
    var positions: Int32 = 0
    XCTAssertEqual(lilims_session_eval_image(session, projector, rgb, 40, 30, stride, &positions), LILIMS_OK)
    XCTAssertEqual(positions, 16)
    return Array(UnsafeBufferPointer(start: lilims_session_logits(session), count: vocab))
  }

  func testImageLogitsMatchTheCAPI() throws {
    try require(text, from: "tests/data/llava")
    let model = try Model(path: text)
    let projector = try Projector(path: mmproj)
    let before = try model.tokenize("USER:", addBos: true)
    let want = try logitsThroughC(picture(stride: 120), stride: 120, before: before,
                                  vocab: model.info.vocabularySize)
    for stride in [120, 128] {
      let session = try Session(model: model, options: options())
      try session.evaluate(before)
      XCTAssertEqual(try session.evaluateImage(rgb: picture(stride: stride), width: 40, height: 30,
                                               stride: stride, projector: projector), 16)
      XCTAssertEqual(session.logits, want, "stride \(stride)")
      XCTAssertEqual(try session.tokens.suffix(16), Array(repeating: -1, count: 16))
    }
    XCTAssertGreaterThan(projector.lastEncodeSeconds, 0)
    // Packed rows with the stride left out, from a raw buffer.
    let session = try Session(model: model, options: options())
    try session.evaluate(before)
    try picture(stride: 120).withUnsafeBytes { pixels in
      XCTAssertEqual(try session.evaluateImage(pixels: pixels, width: 40, height: 30, projector: projector), 16)
    }
    XCTAssertEqual(session.logits, want)
  }

  /// A saved state keeps the picture's rows: loaded into a new session, the
  /// greedy answer is the same; a session of another model refuses it.
  func testStateKeepsThePicture() async throws {
    try require(text, from: "tests/data/llava")
    let model = try Model(path: text)
    let projector = try Projector(path: mmproj)
    let session = try Session(model: model, options: options())
    try session.evaluate(try model.tokenize("USER:", addBos: true))
    try session.evaluateImage(rgb: picture(stride: 120), width: 40, height: 30, projector: projector)
    let state = try session.saveState()
    let answer = try await collect(session.generate(prompt: " What?", options: greedy(6)))

    let restored = try Session(model: model, options: options())
    try restored.loadState(state)
    XCTAssertEqual(try restored.tokens.filter { $0 == -1 }.count, 16)
    let again = try await collect(restored.generate(prompt: " What?", options: greedy(6)))
    XCTAssertEqual(again, answer)

    let other = try Model(path: sharedData("tiny-gguf/llama-2-tiny-random.gguf"))
    let wrong = try Session(model: other, options: SessionOptions(contextLength: 64, threads: 1))
    XCTAssertThrowsError(try wrong.loadState(state)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument, "\(error)")
      XCTAssertTrue("\(error)".contains("another model"), "\(error)")
    }
    XCTAssertEqual(wrong.tokenCount, 0)
  }

  func testBadPicturesAreRefused() throws {
    try require(text, from: "tests/data/llava")
    let model = try Model(path: text)
    let projector = try Projector(path: mmproj)
    let session = try Session(model: model, options: options())
    let rgb = picture(stride: 120)
    let refused: [(Int, Int, Int?, [UInt8])] = [
      (0, 30, nil, rgb),  // zero width
      (40, 0, nil, rgb),  // zero height
      (40, 30, 119, rgb),  // a stride shorter than a row
      (40, 30, -3, rgb),  // a negative stride
      (40, 30, 128, rgb),  // rows past the end of the buffer
      (40, 31, nil, rgb),  // one row too many
    ]
    for (width, height, stride, pixels) in refused {
      XCTAssertThrowsError(try session.evaluateImage(rgb: pixels, width: width, height: height,
                                                     stride: stride, projector: projector)) { error in
        XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument, "\(error)")
      }
    }
    XCTAssertEqual(session.tokenCount, 0)
    // A projector made for another model: its rows are 64 wide, the model's 8.
    let other = try Model(path: sharedData("tiny-gguf/llama-2-tiny-random.gguf"))
    let wrong = try Session(model: other, options: SessionOptions(contextLength: 64, threads: 1))
    XCTAssertThrowsError(try wrong.evaluateImage(rgb: rgb, width: 40, height: 30, projector: projector)) {
      error in
      XCTAssertEqual((error as? LilimsError)?.code, .invalidArgument, "\(error)")
      XCTAssertTrue("\(error)".contains("embedding width"), "\(error)")
    }
    // A text model is not a projector.
    XCTAssertThrowsError(try Projector(path: text)) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .unsupported, "\(error)")
    }
    XCTAssertThrowsError(try Projector(path: "/nonexistent/mmproj.gguf")) { error in
      XCTAssertEqual((error as? LilimsError)?.code, .io, "\(error)")
    }
  }
}
