import CLilims
import Dispatch

#if canImport(FoundationEssentials)
  import FoundationEssentials
#else
  import Foundation
#endif

/// One message of a conversation; the model's chat template formats it.
public struct ChatMessage: Sendable {
  public var role: String  // "system", "user", "assistant"
  public var content: String

  public init(role: String, content: String) {
    self.role = role
    self.content = content
  }
}

/// A piece of a generation's stream: text as it comes, then the figures.
public enum GenerationEvent: Sendable {
  /// Newly generated text, whole UTF-8 characters.
  case text(String)
  /// The last event of a generation that ran to its end.
  case finished(GenerationStatistics)
}

/// A conversation with a model: its KV cache holds every token so far, and
/// each generation continues after them.  Calls on one session run one at a
/// time, in the order they were made, on a queue of the session's own:
/// lilims blocks for a whole generation, which must not hold a thread of
/// Swift's cooperative pool.
public final class Session: @unchecked Sendable {
  public let model: Model
  let handle: OpaquePointer
  private let queue = DispatchQueue(label: "lilims.session")
  private var statistics: GenerationStatistics?  // touched on queue only

  /// Fails with `LilimsError.Code.outOfMemory`, before allocating, when the
  /// KV cache and scratch exceed `options.memoryBudget` (or the memory
  /// available); the message gives the bytes needed.
  public init(model: Model, options: SessionOptions) throws {
    var params = options.cParams
    var created: OpaquePointer?
    let status = lilims_session_create(model.handle, &params, &created)
    guard status == LILIMS_OK, let created else { throw LilimsError(status) }
    self.model = model
    handle = created
  }

  /// contextLength 0: the model's trained context when its KV cache fits
  /// the memory available, else the largest power of two that does;
  /// threads 0: every core.
  public convenience init(model: Model, contextLength: Int = 0, threads: Int = 0) throws {
    try self.init(model: model,
                  options: SessionOptions(contextLength: contextLength, threads: threads))
  }

  deinit { lilims_session_free(handle) }

  public var contextLength: Int { Int(lilims_session_n_ctx(handle)) }

  /// Tokens in the session once the calls made before this one are done.
  public var tokenCount: Int { queue.sync { Int(lilims_session_n_past(handle)) } }

  /// The tokens the session holds, oldest first.
  public var tokens: [Token] {
    get throws {
      try queue.sync {
        try readArray { buffer, capacity, count in
          lilims_session_tokens(handle, buffer, capacity, &count)
        }
      }
    }
  }

  /// The logits after the last evaluated token (one per vocabulary entry),
  /// once the calls made before this one are done; nil before any
  /// evaluation and after `truncate(keeping:)` until the next one.
  public var logits: [Float]? {
    queue.sync {
      guard let values = lilims_session_logits(handle) else { return nil }
      return Array(UnsafeBufferPointer(start: values, count: model.info.vocabularySize))
    }
  }

  /// The figures of the last generation that ran to its end (after the calls
  /// made before this one).
  public var lastStatistics: GenerationStatistics? { queue.sync { statistics } }

  /// What the session and its model hold in memory now.
  public func memoryReport() throws -> MemoryReport {
    try queue.sync {
      var raw = lilims_memory_report()
      raw.struct_size = MemoryLayout<lilims_memory_report>.size
      try check(lilims_session_memory(handle, &raw))
      return MemoryReport(raw)
    }
  }

  /// The adapters every later evaluation applies, each with its scale (the
  /// adapter's alpha / rank comes on top, as llama.cpp applies it); an empty
  /// list removes them.  A list other than the current one forgets the
  /// session's tokens (their KV rows were computed with the old list); the
  /// same list keeps them.  Runs after the calls made before this one.
  public func setAdapters(_ adapters: [(adapter: Adapter, scale: Float)]) throws {
    let handles: [OpaquePointer?] = adapters.map { $0.adapter.handle }
    let scales = adapters.map { $0.scale }
    try queue.sync {
      try handles.withUnsafeBufferPointer { h in
        try scales.withUnsafeBufferPointer { s in
          try check(lilims_session_set_adapters(handle, h.baseAddress, s.baseAddress, h.count))
        }
      }
    }
  }

  /// Forgets every token, after the calls made before this one.
  public func reset() throws {
    try queue.sync { try check(lilims_session_reset(handle)) }
  }

  /// Keeps the first `count` tokens and forgets the rest.
  public func truncate(keeping count: Int) throws {
    try queue.sync { try check(lilims_session_truncate(handle, Int32(clamping: count))) }
  }

  /// Runs the model over `tokens`, appended after the session's.
  public func evaluate(_ tokens: [Token]) throws {
    try queue.sync { try check(lilims_session_eval(handle, tokens, tokens.count)) }
  }

  /// Evaluates a picture after the session's tokens and returns the
  /// positions it took: RGB8 pixels, row y starting at byte `y * stride` of
  /// `rgb` (nil: rows packed, `3 * width`), resized and cropped as CLIP's
  /// processor does, encoded by `projector` and run as the next positions.
  /// Evaluate the text before the picture first (`evaluate`), and go on with
  /// `generate` and the text after it.  Throws `.invalidArgument` for a
  /// zero size, a stride shorter than a row, `rgb` shorter than the rows it
  /// must hold, or a projector made for another model; `.contextFull`, with
  /// nothing evaluated, when the picture does not fit.  A saved state keeps
  /// the picture's rows; a context shift may not move them.
  @discardableResult
  public func evaluateImage(rgb: [UInt8], width: Int, height: Int, stride: Int? = nil,
                            projector: Projector) throws -> Int
  {
    try rgb.withUnsafeBytes { pixels in
      try evaluateImage(pixels: pixels, width: width, height: height, stride: stride,
                        projector: projector)
    }
  }

  /// As `evaluateImage(rgb:...)`, from pixels the caller holds (a camera
  /// frame's buffer), read during the call only.
  @discardableResult
  public func evaluateImage(pixels: UnsafeRawBufferPointer, width: Int, height: Int,
                            stride: Int? = nil, projector: Projector) throws -> Int
  {
    let rowBytes = 3 * max(width, 0)
    let stride = stride ?? rowBytes
    guard width > 0, height > 0, stride >= rowBytes else {
      throw LilimsError(.invalidArgument,
                        "[evaluateImage] \(width)x\(height) pixels with a stride of \(stride) bytes: "
                          + "the sides must be positive and the stride at least 3 * width")
    }
    // lilims reads rows up to the last pixel of the last row: they must lie in the buffer.
    let (rows, overflow) = stride.multipliedReportingOverflow(by: height - 1)
    guard !overflow, rows <= pixels.count - rowBytes, let base = pixels.baseAddress else {
      throw LilimsError(.invalidArgument,
                        "[evaluateImage] \(pixels.count) bytes hold fewer than \(height) rows of "
                          + "\(width) pixels at a stride of \(stride)")
    }
    return try queue.sync {
      var positions: Int32 = 0
      try check(lilims_session_eval_image(handle, projector.handle,
                                          base.assumingMemoryBound(to: UInt8.self),
                                          Int32(clamping: width), Int32(clamping: height), stride,
                                          &positions))
      return Int(positions)
    }
  }

  /// The session's tokens, KV cache rows and last logits, to resume later
  /// (in this process or another) with `loadState`.
  public func saveState() throws -> Data {
    try queue.sync {
      var size = 0
      try check(lilims_session_state_size(handle, &size))
      var data = Data(count: size)
      var written = 0
      let status = data.withUnsafeMutableBytes {
        lilims_session_save_state(handle, $0.baseAddress, $0.count, &written)
      }
      try check(status)
      return data.prefix(written)
    }
  }

  /// Replaces everything the session holds with a saved state; a refused
  /// state (another model, corrupt, too long) leaves the session as it was.
  public func loadState(_ state: Data) throws {
    try queue.sync {
      let status = state.withUnsafeBytes {
        lilims_session_load_state(handle, $0.baseAddress, $0.count)
      }
      try check(status)
    }
  }

  /// Saves the state to a file (written beside it, then renamed over it).
  public func saveState(toFile path: String) throws {
    try queue.sync { try check(lilims_session_save_state_file(handle, path)) }
  }

  public func loadState(fromFile path: String) throws {
    try queue.sync { try check(lilims_session_load_state_file(handle, path)) }
  }

  /// Appends `prompt` (raw text, no chat template) and streams the text
  /// generated after it, whole UTF-8 characters at a time.  Cancelling the
  /// task that iterates the stream (or dropping the stream) stops the
  /// generation; the tokens made until then stay in the session.
  public func generate(prompt: String, options: GenerateOptions = GenerateOptions())
    -> AsyncThrowingStream<String, Error>
  {
    stream(options, text) { _ in prompt }
  }

  /// Appends the conversation, formatted by the model's chat template with the
  /// opening of the assistant's turn, and streams the answer.  Only the
  /// template's own markers become special tokens, never text in a message.
  public func generate(messages: [ChatMessage], options: GenerateOptions = GenerateOptions())
    -> AsyncThrowingStream<String, Error>
  {
    stream(options, text) { handle in
      try Session.evalChat(handle: handle, model: self.model, messages: messages,
                           addBos: options.addBos)
      return ""  // generate continues after the evaluated conversation
    }
  }

  /// As `generate(prompt:options:)`, with the figures as the last event.
  public func generateEvents(prompt: String, options: GenerateOptions = GenerateOptions())
    -> AsyncThrowingStream<GenerationEvent, Error>
  {
    stream(options, { $0 }) { _ in prompt }
  }

  /// As `generate(messages:options:)`, with the figures as the last event.
  public func generateEvents(messages: [ChatMessage], options: GenerateOptions = GenerateOptions())
    -> AsyncThrowingStream<GenerationEvent, Error>
  {
    stream(options, { $0 }) { handle in
      try Session.evalChat(handle: handle, model: self.model, messages: messages,
                           addBos: options.addBos)
      return ""
    }
  }

  private static func evalChat(handle: OpaquePointer, model: Model, messages: [ChatMessage],
                               addBos: Bool) throws {
    let tokens = try model.tokenize(messages: messages, addBos: addBos)
    try check(lilims_session_eval(handle, tokens, tokens.count))
  }

  /// Runs `prepare` (which returns the prompt) then lilims_generate on the
  /// session's queue, handing each event `transform` keeps to the stream.
  private func stream<T: Sendable>(
    _ options: GenerateOptions, _ transform: @escaping @Sendable (GenerationEvent) -> T?,
    prepare: @escaping @Sendable (OpaquePointer) throws -> String
  ) -> AsyncThrowingStream<T, Error> {
    let (events, continuation) = AsyncThrowingStream<GenerationEvent, Error>.makeStream()
    let control = Generation(session: handle, continuation: continuation)
    continuation.onTermination = { termination in
      if case .cancelled = termination { control.cancel() }
    }
    // Holds the session (self) until its call returns.
    queue.async { [self] in
      guard control.start() else {
        continuation.finish()
        return
      }
      do {
        let prompt = try prepare(handle)
        let owned = CGenerateParams(options)
        var stats = lilims_generate_stats()
        stats.struct_size = MemoryLayout<lilims_generate_stats>.size
        let status = owned.withParams { params in
          params.user_data = Unmanaged.passUnretained(control).toOpaque()
          params.on_token = { userData, _, text, length in
            let control = Unmanaged<Generation>.fromOpaque(userData!).takeUnretainedValue()
            if length == 0 { return 0 }
            let piece = String(decoding: UnsafeRawBufferPointer(start: text, count: length),
                               as: UTF8.self)
            // Nobody reads the stream any more: stop generating.
            if case .terminated = control.continuation.yield(.text(piece)) { return 1 }
            return 0
          }
          return withExtendedLifetime(control) { lilims_generate(handle, prompt, &params, &stats) }
        }
        control.end()
        try check(status)
        let figures = GenerationStatistics(stats)
        statistics = figures
        continuation.yield(.finished(figures))
        continuation.finish()
      } catch {
        control.end()
        continuation.finish(throwing: error)
      }
    }
    // Pieces already buffered would be handed out after the consuming task
    // was cancelled, while generation ran on: each request checks first.
    let consumer = Consumer(events.makeAsyncIterator(), control)
    return AsyncThrowingStream {
      while true {
        if Task.isCancelled {
          consumer.control.cancel()
          return nil
        }
        guard let event = try await consumer.next() else { return nil }
        if let item = transform(event) { return item }
      }
    }
  }
}

private let text: @Sendable (GenerationEvent) -> String? = { event in
  if case .text(let piece) = event { return piece }
  return nil
}

/// The stream handed out reads the pieces through this; once that stream is
/// dropped, so is this, and the generation stops.
private final class Consumer: @unchecked Sendable {
  private var pieces: AsyncThrowingStream<GenerationEvent, Error>.Iterator
  let control: Generation

  init(_ pieces: AsyncThrowingStream<GenerationEvent, Error>.Iterator, _ control: Generation) {
    self.pieces = pieces
    self.control = control
  }

  deinit { control.cancel() }

  func next() async throws -> GenerationEvent? { try await pieces.next() }
}

/// One generation's link between its stream and the session: a cancel of the
/// stream reaches lilims_session_cancel only while this generation runs, so
/// it can never stop a later call on the same session.
private final class Generation: @unchecked Sendable {
  let continuation: AsyncThrowingStream<GenerationEvent, Error>.Continuation
  private let session: OpaquePointer
  private let lock = DispatchQueue(label: "lilims.generation")
  private var running = false
  private var cancelled = false

  init(session: OpaquePointer, continuation: AsyncThrowingStream<GenerationEvent, Error>.Continuation) {
    self.session = session
    self.continuation = continuation
  }

  /// False when the stream was cancelled before the call could start.
  func start() -> Bool {
    lock.sync {
      running = !cancelled
      return running
    }
  }

  func end() { lock.sync { running = false } }

  /// Stops the call if it runs, keeps it from starting if not, and ends the
  /// stream, so that the next piece's yield tells the call to stop too.
  func cancel() {
    lock.sync {
      cancelled = true
      if running { lilims_session_cancel(session) }
    }
    continuation.finish()
  }
}
