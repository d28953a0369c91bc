import CLilims
import Dispatch

/// One message of a conversation; the model's chat template formats it.
public struct ChatMessage: Sendable {
  public var role: String  // "system", "user", "assistant"
  public var content: String

  public init(role: String, content: String) {
    self.role = role
    self.content = content
  }
}

/// Sampling and stopping (lilims_generate_params); the defaults are lilims'.
public struct GenerateOptions: Sendable {
  /// Stop after this many new tokens; 0 or less: at the end of generation
  /// or when the context is full.
  public var maxTokens: Int
  public var temperature: Float  // 0: greedy
  public var topK: Int  // 0: off
  public var topP: Float  // 1: off
  public var minP: Float  // 0: off
  public var repeatPenalty: Float  // 1: off
  public var repeatLastN: Int
  public var seed: UInt64
  /// The output is one strictly valid JSON object; generation ends when it closes.
  public var jsonObject: Bool
  /// Add BOS when the session is empty and the model asks for it.
  public var addBos: Bool
  /// Special-token text in a prompt ("<|im_start|>") becomes special tokens.
  public var parseSpecial: Bool

  public init() {
    let d = lilims_generate_default_params()
    maxTokens = Int(d.max_tokens)
    temperature = d.sampling.temperature
    topK = Int(d.sampling.top_k)
    topP = d.sampling.top_p
    minP = d.sampling.min_p
    repeatPenalty = d.sampling.repeat_penalty
    repeatLastN = Int(d.sampling.repeat_last_n)
    seed = d.sampling.seed
    jsonObject = d.json_object != 0
    addBos = d.add_bos != 0
    parseSpecial = d.parse_special != 0
  }

  var cParams: lilims_generate_params {
    var p = lilims_generate_default_params()
    p.max_tokens = Int32(clamping: maxTokens)
    p.sampling.temperature = temperature
    p.sampling.top_k = Int32(clamping: topK)
    p.sampling.top_p = topP
    p.sampling.min_p = minP
    p.sampling.repeat_penalty = repeatPenalty
    p.sampling.repeat_last_n = Int32(clamping: repeatLastN)
    p.sampling.seed = seed
    p.json_object = jsonObject ? 1 : 0
    p.add_bos = addBos ? 1 : 0
    p.parse_special = parseSpecial ? 1 : 0
    return p
  }
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

  /// contextLength 0: the model's trained context when its KV cache fits
  /// the memory available, else the largest power of two that does;
  /// threads 0: every core.
  public init(model: Model, contextLength: Int = 0, threads: Int = 0) throws {
    var params = lilims_session_default_params()
    params.n_ctx = Int32(clamping: contextLength)
    params.n_threads = Int32(clamping: threads)
    var created: OpaquePointer?
    let status = lilims_session_create(model.handle, &params, &created)
    guard status == LILIMS_OK, let created else { throw LilimsError(status) }
    self.model = model
    handle = created
  }

  deinit { lilims_session_free(handle) }

  public var contextLength: Int { Int(lilims_session_n_ctx(handle)) }

  /// Tokens in the session once the calls made before this one are done.
  public var tokenCount: Int { queue.sync { Int(lilims_session_n_past(handle)) } }

  /// Forgets every token, after the calls made before this one.
  public func reset() throws {
    try queue.sync { try check(lilims_session_reset(handle)) }
  }

  /// Appends `prompt` (raw text, no chat template) and streams the text
  /// generated after it, whole UTF-8 characters at a time.  Cancelling the
  /// task that iterates the stream (or dropping the stream) stops the
  /// generation; the tokens made until then stay in the session.
  public func generate(prompt: String, options: GenerateOptions = GenerateOptions())
    -> AsyncThrowingStream<String, Error>
  {
    stream(options) { _ in prompt }
  }

  /// Appends the conversation, formatted by the model's chat template with the
  /// opening of the assistant's turn, and streams the answer.  Only the
  /// template's own markers become special tokens, never text in a message.
  public func generate(messages: [ChatMessage], options: GenerateOptions = GenerateOptions())
    -> AsyncThrowingStream<String, Error>
  {
    stream(options) { handle in
      try Session.evalChat(handle: handle, model: self.model.handle, messages: messages,
                           addBos: options.addBos)
      return ""  // generate continues after the evaluated conversation
    }
  }

  private static func evalChat(handle: OpaquePointer, model: OpaquePointer,
                               messages: [ChatMessage], addBos: Bool) throws {
    // lilims reads the strings during the call only.
    let strings = messages.flatMap { [$0.role, $0.content] }.map { CString($0) }
    let cMessages = (0..<messages.count).map {
      lilims_chat_message(role: strings[2 * $0].pointer, content: strings[2 * $0 + 1].pointer)
    }
    try withExtendedLifetime(strings) {
      var count = 0
      let sizeStatus = lilims_chat_tokenize(model, nil, cMessages, cMessages.count, 1,
                                            addBos ? 1 : 0, 0, nil, 0, &count)
      // A NULL buffer asks for the size: "too small" is the expected answer.
      if sizeStatus != LILIMS_OK && count == 0 { throw LilimsError(sizeStatus) }
      var tokens = [lilims_token](repeating: 0, count: count)
      try check(lilims_chat_tokenize(model, nil, cMessages, cMessages.count, 1, addBos ? 1 : 0, 0,
                                     &tokens, tokens.count, &count))
      try check(lilims_session_eval(handle, tokens, count))
    }
  }

  /// Runs `prepare` (which returns the prompt) then lilims_generate on the
  /// session's queue, yielding each piece of text to the stream.
  private func stream(_ options: GenerateOptions,
                      prepare: @escaping @Sendable (OpaquePointer) throws -> String)
    -> AsyncThrowingStream<String, Error>
  {
    let (pieces, continuation) = AsyncThrowingStream<String, Error>.makeStream()
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
        var params = options.cParams
        params.user_data = Unmanaged.passUnretained(control).toOpaque()
        params.on_token = { userData, _, text, length in
          let control = Unmanaged<Generation>.fromOpaque(userData!).takeUnretainedValue()
          if length == 0 { return 0 }
          let piece = String(decoding: UnsafeRawBufferPointer(start: text, count: length),
                             as: UTF8.self)
          // Nobody reads the stream any more: stop generating.
          if case .terminated = control.continuation.yield(piece) { return 1 }
          return 0
        }
        let status = withExtendedLifetime(control) {
          lilims_generate(handle, prompt, &params, nil)
        }
        control.end()
        try check(status)
        continuation.finish()
      } catch {
        control.end()
        continuation.finish(throwing: error)
      }
    }
    // Pieces already buffered would be handed out after the consuming task
    // was cancelled, while generation ran on: each request checks first.
    let consumer = Consumer(pieces.makeAsyncIterator(), control)
    return AsyncThrowingStream {
      if Task.isCancelled {
        consumer.control.cancel()
        return nil
      }
      return try await consumer.next()
    }
  }
}

/// The stream handed out reads the pieces through this; once that stream is
/// dropped, so is this, and the generation stops.
private final class Consumer: @unchecked Sendable {
  private var pieces: AsyncThrowingStream<String, Error>.Iterator
  let control: Generation

  init(_ pieces: AsyncThrowingStream<String, Error>.Iterator, _ control: Generation) {
    self.pieces = pieces
    self.control = control
  }

  deinit { control.cancel() }

  func next() async throws -> String? { try await pieces.next() }
}

/// One generation's link between its stream and the session: a cancel of the
/// stream reaches lilims_session_cancel only while this generation runs, so
/// it can never stop a later call on the same session.
private final class Generation: @unchecked Sendable {
  let continuation: AsyncThrowingStream<String, Error>.Continuation
  private let session: OpaquePointer
  private let lock = DispatchQueue(label: "lilims.generation")
  private var running = false
  private var cancelled = false

  init(session: OpaquePointer, continuation: AsyncThrowingStream<String, Error>.Continuation) {
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

/// A String copied into C memory that lives as long as this object.
private final class CString {
  let pointer: UnsafeMutablePointer<CChar>

  init(_ string: String) {
    let utf8 = Array(string.utf8CString)
    pointer = UnsafeMutablePointer<CChar>.allocate(capacity: utf8.count)
    pointer.initialize(from: utf8, count: utf8.count)
  }

  deinit { pointer.deallocate() }
}
