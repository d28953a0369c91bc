import CLilims

/// A multimodal projector (lilims_mmproj): a CLIP vision tower and a LLaVA
/// projector in one GGUF, as llama.cpp's tools write it, for the text model
/// it was made with.  `Session.evaluateImage` runs pictures through it; any
/// session may use it, several at once (images are encoded one at a time).
public final class Projector: @unchecked Sendable {
  let handle: OpaquePointer

  /// Throws `.io`, `.badFormat`, `.unsupported` or `.missing` for a file it
  /// cannot use (a text model instead of a projector is `.unsupported`).
  public init(path: String) throws {
    var opened: OpaquePointer?
    let status = lilims_mmproj_open(path, &opened)
    guard status == LILIMS_OK, let opened else { throw LilimsError(status) }
    handle = opened
  }

  deinit { lilims_mmproj_free(handle) }

  /// Seconds the last image took to preprocess and encode (0 before any).
  public var lastEncodeSeconds: Double { lilims_mmproj_last_encode_seconds(handle) }
}
