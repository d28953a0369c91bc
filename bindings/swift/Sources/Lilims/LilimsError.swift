import CLilims

/// A lilims call that failed: its status and lilims' own message, which
/// names the area first ("[gguf] tensor blk.0.ffn_down.weight has type ...").
public struct LilimsError: Error, Equatable, Sendable, CustomStringConvertible {
  public enum Code: Int, Sendable {
    case invalidArgument = 1, io, badFormat, unsupported, missing, outOfMemory, contextFull,
      cancelled, internalError, busy
  }

  public let code: Code
  public let message: String

  public var description: String { message }

  /// Reads lilims_last_error(): call on the thread that made the failed call,
  /// before any other lilims call.
  init(_ status: lilims_status) {
    code = Code(rawValue: Int(status.rawValue)) ?? .internalError
    message = String(cString: lilims_last_error())
  }
}

func check(_ status: lilims_status) throws {
  if status != LILIMS_OK { throw LilimsError(status) }
}

/// The version of the lilims library linked in.
public func lilimsVersion() -> (major: Int, minor: Int, patch: Int) {
  var major: Int32 = 0
  var minor: Int32 = 0
  var patch: Int32 = 0
  lilims_version(&major, &minor, &patch)
  return (Int(major), Int(minor), Int(patch))
}
