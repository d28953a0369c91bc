import CLilims
import Dispatch

/// A lilims call that failed: its status and lilims' own message, which
/// names the area first ("[gguf] tensor blk.0.ffn_down.weight has type ...").
public struct LilimsError: Error, Equatable, Sendable, CustomStringConvertible {
  public enum Code: Int, Sendable {
    case invalidArgument = 1, io, badFormat, unsupported, missing, outOfMemory, contextFull,
      cancelled, internalError, busy

    /// lilims' name of the status ("invalid_argument", "busy", ...).
    public var statusName: String {
      String(cString: lilims_status_name(lilims_status(rawValue: UInt32(rawValue))))
    }
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

  /// An error found on the Swift side, before any lilims call.
  init(_ code: Code, _ message: String) {
    self.code = code
    self.message = message
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

/// The library version and the kernel path in use ("0.1.0 (isa: avx2)").
public func lilimsVersionString() -> String { String(cString: lilims_version_string()) }

/// The ABI version of the library linked in; a program built against this
/// package's header expects `Int(LILIMS_ABI_VERSION)`.
public func lilimsABIVersion() -> Int { Int(lilims_abi_version()) }

/// The level of a report of the library's (lilims_log_level).
public enum LogLevel: Int, Sendable, Comparable {
  case debug = 0, info, warn, error

  public static func < (a: LogLevel, b: LogLevel) -> Bool { a.rawValue < b.rawValue }
}

/// Sends the library's reports at `minLevel` and above to `handler`, for
/// the whole process: one line each, starting with the area
/// ("[model_open] ..."), on the thread that made the report.  nil (the
/// default) drops them.  A report under way as the handler changes may
/// still reach the previous one.
public func setLogHandler(minLevel: LogLevel = .info,
                          _ handler: (@Sendable (LogLevel, String) -> Void)?) {
  logSink.set(handler)
  guard handler != nil else {
    lilims_set_log_callback(nil, nil, LILIMS_LOG_DEBUG)
    return
  }
  lilims_set_log_callback(
    { _, level, message in
      logSink.report(LogLevel(rawValue: Int(level.rawValue)) ?? .error,
                     message.map { String(cString: $0) } ?? "")
    }, nil, lilims_log_level(rawValue: UInt32(minLevel.rawValue)))
}

/// The handler the C callback reaches; lives as long as the process, so a
/// report that races a change never reaches freed memory.
private final class LogSink: @unchecked Sendable {
  private let lock = DispatchQueue(label: "lilims.log")
  private var handler: (@Sendable (LogLevel, String) -> Void)?

  func set(_ new: (@Sendable (LogLevel, String) -> Void)?) { lock.sync { handler = new } }

  func report(_ level: LogLevel, _ message: String) {
    lock.sync { handler }?(level, message)
  }
}

private let logSink = LogSink()
