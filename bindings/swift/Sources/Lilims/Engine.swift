import CLilims
import Dispatch

/// How an engine is made (lilims_engine_params); the defaults are lilims'.
public struct EngineOptions: Sendable {
  /// Requests running at once, each with a KV cache of its own.
  public var sequences = 4
  /// Context per request; 0: as `SessionOptions.contextLength`.
  public var contextLength = 0
  /// 0: every core.
  public var threads = 0
  /// Rows one step evaluates at most (next tokens, then prompt blocks); 0: 128.
  public var batchSize = 0
  /// Requests that may wait for a free sequence; more are refused with
  /// `LilimsError.Code.busy`.
  public var maxQueued = 64
  public var kvCacheType = KVCacheType.f16
  /// Transformer blocks per execution chunk; 0: lilims' default (3).
  public var chunkLayers = 0
  public var allowContextBeyondTrained = false

  public init(sequences: Int = 4, contextLength: Int = 0, threads: Int = 0) {
    CField.load(Self.fields, into: &self, from: lilims_engine_default_params())
    self.sequences = sequences
    self.contextLength = contextLength
    self.threads = threads
  }

  var cParams: lilims_engine_params {
    var p = lilims_engine_default_params()
    CField.store(Self.fields, from: self, into: &p)
    return p
  }

  private static var fields: [CField<EngineOptions, lilims_engine_params>] {
    [
      .int(\.sequences, \.n_seq),
      .int(\.contextLength, \.n_ctx),
      .int(\.threads, \.n_threads),
      .int(\.batchSize, \.n_batch),
      .int(\.maxQueued, \.max_queued),
      .raw(\.kvCacheType, \.kv_type, unknown: .f16),
      .int(\.chunkLayers, \.chunk_layers),
      .flag(\.allowContextBeyondTrained, \.allow_ctx_beyond_train),
    ]
  }
}

/// How one engine request ended (lilims_engine_result).
public struct EngineResult: Sendable {
  public let requestID: UInt64
  public let text: String
  /// The generated ids, the end of generation excluded.
  public let tokens: [Token]
  public let promptTokens: Int
  /// Prompt tokens found in the sequence's cache, not evaluated again.
  public let reusedTokens: Int
  public let stopReason: StopReason
  /// From the request leaving the queue to its first token.
  public let timeToFirstToken: Double
  public let generateSeconds: Double
}

/// Many requests on one model: each step of the engine's own thread samples
/// the next token of every running request and evaluates them all in one
/// forward pass, so concurrent callers share the model's throughput (an
/// app's several chats, a server).  Every method may be called from any
/// thread or task at once.
public final class Engine: @unchecked Sendable {
  public let model: Model
  let handle: OpaquePointer

  /// Fails with `LilimsError.Code.outOfMemory` when the sequences' KV caches
  /// do not fit, `.invalidArgument` for negative options or fewer than one
  /// sequence or queue place.
  public init(model: Model, options: EngineOptions = EngineOptions()) throws {
    var params = options.cParams
    var created: OpaquePointer?
    let status = lilims_engine_create(model.handle, &params, &created)
    guard status == LILIMS_OK, let created else { throw LilimsError(status) }
    self.model = model
    handle = created
  }

  /// Cancels what is queued or running and waits for it to end (no request
  /// can be in flight here: each holds the engine until it ends).
  deinit { lilims_engine_free(handle) }

  /// Requests waiting for a free sequence, and requests running: a snapshot.
  public var queuedCount: Int { Int(lilims_engine_n_queued(handle)) }
  public var runningCount: Int { Int(lilims_engine_n_running(handle)) }

  /// Runs one request to its end: `tokens` is the whole prompt (BOS
  /// included when wanted; `Model.tokenize`), `options` as for a session but
  /// for `contextPolicy` (a request stops at a full context), `draft` and
  /// `reusePrefix` (a sequence's cached prefix is always reused).  `onText`
  /// gets each piece of text as it comes, on the engine's thread; it must
  /// not block.  Cancelling the calling task cancels the request, which then
  /// throws `LilimsError.Code.cancelled`.  `.busy` when `maxQueued` requests
  /// wait already.
  public func generate(tokens: [Token], options: GenerateOptions = GenerateOptions(),
                       onText: (@Sendable (String) -> Void)? = nil) async throws -> EngineResult
  {
    let request = EngineRequest(engine: handle, onText: onText)
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        request.continuation = continuation
        let owned = CGenerateParams(options)
        var id: UInt64 = 0
        // The request holds itself until its on_done runs.
        let user = Unmanaged.passRetained(request).toOpaque()
        let status = owned.withParams { params in
          tokens.withUnsafeBufferPointer { prompt in
            lilims_engine_submit(handle, prompt.baseAddress, prompt.count, &params,
                                 { user, _, text, length in
                                   let request = Unmanaged<EngineRequest>.fromOpaque(user!)
                                     .takeUnretainedValue()
                                   if length > 0, let onText = request.onText {
                                     onText(String(decoding: UnsafeRawBufferPointer(start: text, count: length),
                                                   as: UTF8.self))
                                   }
                                   return 0
                                 },
                                 { user, result in
                                   let request = Unmanaged<EngineRequest>.fromOpaque(user!)
                                     .takeRetainedValue()
                                   request.finish(result!.pointee)
                                 }, user, &id)
          }
        }
        if status != LILIMS_OK {
          let error = LilimsError(status)
          Unmanaged<EngineRequest>.fromOpaque(user).release()  // no callback runs
          continuation.resume(throwing: error)
          return
        }
        request.started(id)
      }
    } onCancel: {
      request.cancel()
    }
  }

  /// The conversation formatted by the model's chat template, with the
  /// opening of the assistant's turn, as the prompt.
  public func generate(messages: [ChatMessage], options: GenerateOptions = GenerateOptions(),
                       onText: (@Sendable (String) -> Void)? = nil) async throws -> EngineResult
  {
    try await generate(tokens: try model.tokenize(messages: messages, addBos: options.addBos),
                       options: options, onText: onText)
  }

  /// Raw text (no chat template) as the prompt, BOS first as `options.addBos` says.
  public func generate(prompt: String, options: GenerateOptions = GenerateOptions(),
                       onText: (@Sendable (String) -> Void)? = nil) async throws -> EngineResult
  {
    try await generate(tokens: try model.tokenize(prompt, addBos: options.addBos,
                                                  parseSpecial: options.parseSpecial),
                       options: options, onText: onText)
  }
}

/// One request's link between its caller and the engine: the id once
/// submitted, a cancel that may come before it, and the continuation its
/// on_done resumes.
private final class EngineRequest: @unchecked Sendable {
  let onText: (@Sendable (String) -> Void)?
  var continuation: CheckedContinuation<EngineResult, Error>?
  private let engine: OpaquePointer
  private let lock = DispatchQueue(label: "lilims.engine.request")
  private var id: UInt64 = 0
  private var cancelled = false
  private var ended = false

  init(engine: OpaquePointer, onText: (@Sendable (String) -> Void)?) {
    self.engine = engine
    self.onText = onText
  }

  /// The request is queued: a cancel that came first reaches it now.
  func started(_ id: UInt64) {
    let cancel: Bool = lock.sync {
      self.id = id
      return cancelled && !ended
    }
    if cancel { lilims_engine_cancel(engine, id) }
  }

  func cancel() {
    let id: UInt64 = lock.sync {
      cancelled = true
      return ended ? 0 : self.id
    }
    if id != 0 { lilims_engine_cancel(engine, id) }
  }

  /// On the engine's thread, once.
  func finish(_ r: lilims_engine_result) {
    lock.sync { ended = true }
    guard let continuation else { return }
    if r.status != LILIMS_OK {
      let code = LilimsError.Code(rawValue: Int(r.status.rawValue)) ?? .internalError
      continuation.resume(throwing: LilimsError(code, String(cString: r.error)))
      return
    }
    let text = String(decoding: UnsafeRawBufferPointer(start: r.text, count: r.text_len), as: UTF8.self)
    let tokens = r.n_tokens == 0 ? [] : Array(UnsafeBufferPointer(start: r.tokens, count: r.n_tokens))
    continuation.resume(returning: EngineResult(
      requestID: r.request_id, text: text, tokens: tokens, promptTokens: Int(r.n_prompt_tokens),
      reusedTokens: Int(r.n_reused_tokens), stopReason: StopReason(rawValue: r.stop_reason) ?? .maxTokens,
      timeToFirstToken: r.first_token_seconds, generateSeconds: r.generate_seconds))
  }
}
