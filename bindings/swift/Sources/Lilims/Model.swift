import CLilims

/// What a model file holds (lilims_model_info).
public struct ModelInfo: Sendable {
  public let architecture: String
  public let name: String
  public let vocabularySize: Int
  public let trainedContextLength: Int
  public let layerCount: Int
  public let embeddingLength: Int
  public let parameterCount: UInt64
  public let fileBytes: UInt64
  public let hasChatTemplate: Bool
}

/// A loaded model: weights and tokenizer, read-only, shared by any number of
/// sessions on any threads.  Its memory is released when the model and every
/// session made from it are gone.
public final class Model: @unchecked Sendable {
  let handle: OpaquePointer
  public let info: ModelInfo

  /// Opens a GGUF file; mapped rather than read unless `useMmap` is false.
  public init(path: String, useMmap: Bool = true) throws {
    var params = lilims_model_default_params()
    params.use_mmap = useMmap ? 1 : 0
    var opened: OpaquePointer?
    let status = lilims_model_open(path, &params, &opened)
    guard status == LILIMS_OK, let opened else { throw LilimsError(status) }
    handle = opened

    var raw = lilims_model_info()
    raw.struct_size = MemoryLayout<lilims_model_info>.size
    let infoStatus = lilims_model_get_info(opened, &raw)
    guard infoStatus == LILIMS_OK else {
      let error = LilimsError(infoStatus)
      lilims_model_free(opened)
      throw error
    }
    info = ModelInfo(
      architecture: string(fromTuple: &raw.architecture),
      name: string(fromTuple: &raw.name),
      vocabularySize: Int(raw.n_vocab),
      trainedContextLength: Int(raw.n_ctx_train),
      layerCount: Int(raw.n_layer),
      embeddingLength: Int(raw.n_embd),
      parameterCount: raw.n_params,
      fileBytes: raw.file_bytes,
      hasChatTemplate: raw.has_chat_template != 0)
  }

  deinit { lilims_model_free(handle) }
}

/// A NUL-terminated C char array, which Swift imports as a tuple.
private func string<T>(fromTuple tuple: inout T) -> String {
  withUnsafeBytes(of: &tuple) { bytes in
    let chars = bytes.bindMemory(to: UInt8.self)
    let end = chars.firstIndex(of: 0) ?? chars.count
    return String(decoding: UnsafeBufferPointer(rebasing: chars[..<end]), as: UTF8.self)
  }
}
