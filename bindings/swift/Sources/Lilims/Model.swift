import CLilims
import Dispatch

#if canImport(FoundationEssentials)
  import FoundationEssentials  // Data, without the rest of Foundation
#else
  import Foundation
#endif

/// A token id of the model's vocabulary.
public typealias Token = Int32

/// What a model file holds (lilims_model_info).
public struct ModelInfo: Sendable {
  public let architecture: String
  public let name: String
  public let vocabularySize: Int
  public let trainedContextLength: Int
  public let layerCount: Int
  public let embeddingLength: Int
  public let headCount: Int
  /// Key/value heads (fewer than `headCount` with grouped-query attention).
  public let kvHeadCount: Int
  public let feedForwardLength: Int
  public let parameterCount: UInt64
  public let fileBytes: UInt64
  public let hasChatTemplate: Bool
  /// The tokenizer adds BOS to a prompt.
  public let addsBos: Bool
  public let bosToken: Token?
  public let eosToken: Token?
}

/// How a model is opened (lilims_model_params); the defaults are lilims'.
public struct ModelOptions: Sendable {
  /// Map the file rather than read it (ignored for a model in memory).
  public var useMmap: Bool
  /// Bytes the model may take; 0: what the machine has available.  A model
  /// whose estimate exceeds it is refused before its weights are read, with
  /// `LilimsError.Code.outOfMemory` and the bytes it needs in the message.
  public var memoryBudget: UInt64
  /// Called on the loading thread with the fraction done (0 first, 1 last,
  /// nondecreasing); returning false abandons the load, which then throws
  /// `LilimsError.Code.cancelled`.
  public var progress: (@Sendable (Float) -> Bool)?
  /// A manifest the model must match (written by `lilims manifest`), checked
  /// before the weights are read: every tensor's hash, and the whole file's
  /// when `checkManifestFileHash`.  A model that differs throws
  /// `.badFormat` naming what differs, one that needs a newer lilims
  /// `.unsupported`, an unreadable manifest `.io`.
  public var manifestPath: String?
  public var checkManifestFileHash: Bool

  public init(useMmap: Bool = true, memoryBudget: UInt64 = 0,
              progress: (@Sendable (Float) -> Bool)? = nil, manifestPath: String? = nil,
              checkManifestFileHash: Bool = false) {
    self.useMmap = useMmap
    self.memoryBudget = memoryBudget
    self.progress = progress
    self.manifestPath = manifestPath
    self.checkManifestFileHash = checkManifestFileHash
  }
}

/// A loaded model: weights and tokenizer, read-only, shared by any number of
/// sessions on any threads.  Its memory is released when the model and every
/// session made from it are gone.
public final class Model: @unchecked Sendable {
  let handle: OpaquePointer
  public let info: ModelInfo
  /// The image a model opened from memory reads in place: lilims does not
  /// copy it, so it lives as long as the model.
  private let image: ModelImage?

  /// Opens a GGUF file.
  public convenience init(path: String, options: ModelOptions = ModelOptions()) throws {
    let handle = try Model.open(options, cancel: nil) { lilims_model_open(path, &$0, &$1) }
    try self.init(handle: handle, image: nil)
  }

  /// Opens a GGUF file; mapped rather than read unless `useMmap` is false.
  public convenience init(path: String, useMmap: Bool) throws {
    try self.init(path: path, options: ModelOptions(useMmap: useMmap))
  }

  /// Opens a GGUF image held in memory.  The bytes are copied once into
  /// storage the model owns (lilims reads them in place from there, aligned
  /// as it needs), so `data` may be released as soon as this returns.
  public convenience init(data: Data, options: ModelOptions = ModelOptions()) throws {
    let image = ModelImage(copying: data)
    let handle = try Model.open(options, cancel: nil) {
      lilims_model_open_memory(image.bytes.baseAddress, image.bytes.count, &$0, &$1)
    }
    try self.init(handle: handle, image: image)
  }

  /// Opens a GGUF image in memory the caller owns, without copying it.  The
  /// bytes must stay valid and unchanged until this model and every session
  /// made from it are gone, and must start on a 16-byte boundary.
  public convenience init(unsafeBytes bytes: UnsafeRawBufferPointer,
                          options: ModelOptions = ModelOptions()) throws {
    let handle = try Model.open(options, cancel: nil) {
      lilims_model_open_memory(bytes.baseAddress, bytes.count, &$0, &$1)
    }
    try self.init(handle: handle, image: nil)
  }

  /// Opens the GGUF image at bytes `offset..<offset + size` of an open file
  /// (an Android asset, a model inside a bigger bundle); size 0: up to the end
  /// of the file.  The descriptor is not kept: close it whenever you like.
  public convenience init(fileDescriptor: Int32, offset: UInt64 = 0, size: UInt64 = 0,
                          options: ModelOptions = ModelOptions()) throws {
    let handle = try Model.open(options, cancel: nil) {
      lilims_model_open_fd(fileDescriptor, offset, size, &$0, &$1)
    }
    try self.init(handle: handle, image: nil)
  }

  /// Opens a GGUF file on a thread of its own.  Cancelling the calling task
  /// abandons the load at the next tensor and throws
  /// `LilimsError.Code.cancelled`.
  public static func load(path: String, options: ModelOptions = ModelOptions()) async throws
    -> Model
  {
    let cancel = CancelFlag()
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async {
          do {
            let handle = try Model.open(options, cancel: cancel) {
              lilims_model_open(path, &$0, &$1)
            }
            continuation.resume(returning: try Model(handle: handle, image: nil))
          } catch {
            continuation.resume(throwing: error)
          }
        }
      }
    } onCancel: {
      cancel.set()
    }
  }

  private init(handle: OpaquePointer, image: ModelImage?) throws {
    var raw = lilims_model_info()
    raw.struct_size = MemoryLayout<lilims_model_info>.size
    let infoStatus = lilims_model_get_info(handle, &raw)
    guard infoStatus == LILIMS_OK else {
      let error = LilimsError(infoStatus)
      lilims_model_free(handle)
      throw error
    }
    self.handle = handle
    self.image = image
    info = ModelInfo(
      architecture: string(fromTuple: &raw.architecture),
      name: string(fromTuple: &raw.name),
      vocabularySize: Int(raw.n_vocab),
      trainedContextLength: Int(raw.n_ctx_train),
      layerCount: Int(raw.n_layer),
      embeddingLength: Int(raw.n_embd),
      headCount: Int(raw.n_head),
      kvHeadCount: Int(raw.n_head_kv),
      feedForwardLength: Int(raw.n_ff),
      parameterCount: raw.n_params,
      fileBytes: raw.file_bytes,
      hasChatTemplate: raw.has_chat_template != 0,
      addsBos: raw.add_bos != 0,
      bosToken: raw.bos_token >= 0 ? raw.bos_token : nil,
      eosToken: raw.eos_token >= 0 ? raw.eos_token : nil)
  }

  deinit { lilims_model_free(handle) }

  /// Fills the params from `options` (the progress closure and `cancel`
  /// reach lilims through one box) and runs `open`.
  private static func open(
    _ options: ModelOptions, cancel: CancelFlag?,
    _ open: (inout lilims_model_params, inout OpaquePointer?) -> lilims_status
  ) throws -> OpaquePointer {
    var params = lilims_model_default_params()
    params.use_mmap = options.useMmap ? 1 : 0
    params.memory_budget = options.memoryBudget
    let progress = Progress(options.progress, cancel)
    if options.progress != nil || cancel != nil {
      params.progress_user_data = Unmanaged.passUnretained(progress).toOpaque()
      params.progress = { userData, fraction in
        let progress = Unmanaged<Progress>.fromOpaque(userData!).takeUnretainedValue()
        return progress.report(fraction) ? 0 : 1
      }
    }
    params.manifest_check_file_hash = options.checkManifestFileHash ? 1 : 0
    let manifest = options.manifestPath.map(CString.init)
    params.manifest_path = manifest.map { UnsafePointer($0.pointer) }
    var opened: OpaquePointer?
    let status = withExtendedLifetime((progress, manifest)) { open(&params, &opened) }
    guard status == LILIMS_OK, let opened else { throw LilimsError(status) }
    return opened
  }

  /// The bytes a session with these options would take beyond the model
  /// (KV cache at full context, scratch, logits): what its memory budget is
  /// checked against.
  /// The format the model's chat template writes tool calls in: its
  /// template's tool syntax, else its family's, else `.generic`.
  public var toolFormat: ToolFormat { ToolFormat(rawValue: lilims_model_tool_format(handle)) ?? .generic }

  public func sessionMemoryEstimate(_ options: SessionOptions = SessionOptions()) throws -> UInt64 {
    var params = options.cParams
    var bytes: UInt64 = 0
    try check(lilims_session_memory_estimate(handle, &params, &bytes))
    return bytes
  }

  /// Checks the model against a manifest as `ModelOptions.manifestPath` does
  /// at open, with the same errors; tensors the kernels repacked are read
  /// again from the file or image.
  public func checkManifest(path: String, checkFileHash: Bool = false) throws {
    try check(lilims_model_check_manifest(handle, path, checkFileHash ? 1 : 0))
  }

  /// Encodes text.  `addBos`: add BOS when the model asks for it;
  /// `parseSpecial`: special-token text ("<|im_start|>") becomes one token.
  public func tokenize(_ text: String, addBos: Bool = false, parseSpecial: Bool = false) throws
    -> [Token]
  {
    let utf8 = Array(text.utf8)
    return try readArray { buffer, capacity, count in
      lilims_tokenize(handle, utf8, utf8.count, addBos ? 1 : 0, parseSpecial ? 1 : 0, buffer,
                      capacity, &count)
    }
  }

  /// Decodes tokens to text (invalid UTF-8 becomes U+FFFD).
  public func detokenize(_ tokens: [Token]) throws -> String {
    let bytes: [CChar] = try readArray { buffer, capacity, count in
      lilims_detokenize(handle, tokens, tokens.count, buffer, capacity, &count)
    }
    return String(decoding: bytes.map { UInt8(bitPattern: $0) }, as: UTF8.self)
  }

  /// The bytes of one token's piece: a byte-fallback token is one raw byte,
  /// which may be part of a UTF-8 character.
  public func piece(of token: Token) throws -> [UInt8] {
    let bytes: [CChar] = try readArray { buffer, capacity, count in
      lilims_token_to_piece(handle, token, buffer, capacity, &count)
    }
    return bytes.map { UInt8(bitPattern: $0) }
  }

  /// The conversation formatted by the model's chat template (or the named
  /// one: "chatml", "chatml-plain", "qwen1.5", "qwen2", "qwen3", "llama2",
  /// "zephyr", "phi3", "llama3", "gemma"), with the opening
  /// of the assistant's turn when `addGenerationPrompt`.
  public func applyChatTemplate(_ messages: [ChatMessage], templateName: String? = nil,
                                addGenerationPrompt: Bool = true) throws -> String {
    let chat = CChat(messages)
    return try withExtendedLifetime(chat) {
      try readString { buffer, capacity, count in
        lilims_chat_apply_template(handle, templateName, chat.messages, chat.messages.count,
                                   addGenerationPrompt ? 1 : 0, buffer, capacity, &count)
      }
    }
  }

  /// The conversation as `applyChatTemplate` formats it, tokenized with
  /// special tokens parsed in the template's own markers only, unless
  /// `specialInMessages` (text in a message that spells one parses too).
  public func tokenize(messages: [ChatMessage], templateName: String? = nil,
                       addGenerationPrompt: Bool = true, addBos: Bool = true,
                       specialInMessages: Bool = false) throws -> [Token] {
    let chat = CChat(messages)
    return try withExtendedLifetime(chat) {
      try readArray { buffer, capacity, count in
        lilims_chat_tokenize(handle, templateName, chat.messages, chat.messages.count,
                             addGenerationPrompt ? 1 : 0, addBos ? 1 : 0,
                             specialInMessages ? 1 : 0, buffer, capacity, &count)
      }
    }
  }
}

/// Calls lilims' "capacity rule" functions twice: for the size, then the data.
func readArray<T: Numeric>(
  _ call: (UnsafeMutablePointer<T>?, Int, inout Int) -> lilims_status
) throws -> [T] {
  var count = 0
  let sizeStatus = call(nil, 0, &count)
  // A NULL buffer asks for the size: "too small" is the expected answer.
  if sizeStatus != LILIMS_OK && count == 0 { throw LilimsError(sizeStatus) }
  var items = [T](repeating: 0, count: count)
  let status = items.withUnsafeMutableBufferPointer { call($0.baseAddress, $0.count, &count) }
  try check(status)
  return Array(items[..<count])
}

/// The same for text the call NUL-terminates: the size it gives leaves the
/// NUL out, and the call needs room for it.
func readString(
  _ call: (UnsafeMutablePointer<CChar>?, Int, inout Int) -> lilims_status
) throws -> String {
  var count = 0
  let sizeStatus = call(nil, 0, &count)
  if sizeStatus != LILIMS_OK && count == 0 { throw LilimsError(sizeStatus) }
  var bytes = [CChar](repeating: 0, count: count + 1)
  let status = bytes.withUnsafeMutableBufferPointer { call($0.baseAddress, $0.count, &count) }
  try check(status)
  return String(decoding: bytes[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}

/// A model image copied into 16-byte-aligned storage, freed with the model.
private final class ModelImage: @unchecked Sendable {
  let bytes: UnsafeRawBufferPointer

  init(copying data: Data) {
    let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: max(data.count, 1),
                                                         alignment: 16)
    data.withUnsafeBytes { storage.copyMemory(from: $0) }
    bytes = UnsafeRawBufferPointer(rebasing: storage[..<data.count])
  }

  deinit { bytes.deallocate() }
}

/// Set by a task's cancellation handler, read by the loading thread.
final class CancelFlag: @unchecked Sendable {
  private let lock = DispatchQueue(label: "lilims.cancel")
  private var value = false

  func set() { lock.sync { value = true } }
  var isSet: Bool { lock.sync { value } }
}

private final class Progress {
  private let closure: (@Sendable (Float) -> Bool)?
  private let cancel: CancelFlag?

  init(_ closure: (@Sendable (Float) -> Bool)?, _ cancel: CancelFlag?) {
    self.closure = closure
    self.cancel = cancel
  }

  /// False to abandon the load.
  func report(_ fraction: Float) -> Bool {
    if cancel?.isSet == true { return false }
    return closure?(fraction) ?? true
  }
}

/// A NUL-terminated C char array, which Swift imports as a tuple.
func string<T>(fromTuple tuple: inout T) -> String {
  withUnsafeBytes(of: &tuple) { bytes in
    let chars = bytes.bindMemory(to: UInt8.self)
    let end = chars.firstIndex(of: 0) ?? chars.count
    return String(decoding: UnsafeBufferPointer(rebasing: chars[..<end]), as: UTF8.self)
  }
}
