import CLilims

/// The type of a session's KV cache entries.
public enum KVCacheType: Int32, Sendable {
  case f16 = 0
  /// Half the memory of f16; needs a head size that is a multiple of 32.
  case q8_0 = 1
}

/// How a step's new K/V rows reach the cache (lilims_kv_commit); both give
/// the same logits.
public enum KVCommit: Int32, Sendable {
  /// lilims' default: `sync`, as neither mode was measured no slower on
  /// every row (bench/README.md, "KV commit modes, sync against async").
  case automatic = 0
  /// Written by the chunk that computed them.
  case sync = 1
  /// Written by a worker while the next chunk runs.
  case async = 2
}

/// How a session is made (lilims_session_params); the defaults are lilims'.
public struct SessionOptions: Sendable {
  // Each starts as lilims' default: init reads them from
  // lilims_session_default_params through `fields`.
  /// Context length in tokens.  0: the model's trained context when the
  /// session fits `memoryBudget` (or the memory available), else the
  /// largest power of two below it that fits, down to 256.
  public var contextLength = 0
  /// 0: every core.
  public var threads = 0
  /// Accept a context longer than the model was trained for.
  public var allowContextBeyondTrained = false
  /// Bytes the session may take beyond its model
  /// (`Model.sessionMemoryEstimate`); 0: what the machine has available.
  public var memoryBudget: UInt64 = 0
  /// Tokens per prefill block; 0: lilims' default (256, less when memory is short).
  public var batchSize = 0
  public var kvCacheType = KVCacheType.f16
  /// Transformer blocks per execution chunk; 0: lilims' default (3).
  public var chunkLayers = 0
  public var kvCommit = KVCommit.automatic

  public init(contextLength: Int = 0, threads: Int = 0) {
    CField.load(Self.fields, into: &self, from: lilims_session_default_params())
    self.contextLength = contextLength
    self.threads = threads
  }

  var cParams: lilims_session_params {
    var p = lilims_session_default_params()
    CField.store(Self.fields, from: self, into: &p)
    return p
  }

  /// Each option and the field of lilims_session_params it stands for.
  private static var fields: [CField<SessionOptions, lilims_session_params>] {
    [
      .int(\.contextLength, \.n_ctx),
      .int(\.threads, \.n_threads),
      .flag(\.allowContextBeyondTrained, \.allow_ctx_beyond_train),
      .same(\.memoryBudget, \.memory_budget),
      .int(\.batchSize, \.n_batch),
      .raw(\.kvCacheType, \.kv_type, unknown: .f16),
      .int(\.chunkLayers, \.chunk_layers),
      .raw(\.kvCommit, \.kv_commit, unknown: .automatic),
    ]
  }
}

/// One option and the C params field it stands for, both ways: options
/// start from lilims' defaults (`load`) and are passed as params (`store`).
struct CField<Options, Params> {
  let load: (inout Options, Params) -> Void
  let store: (Options, inout Params) -> Void

  static func load(_ fields: [CField], into options: inout Options, from params: Params) {
    for field in fields { field.load(&options, params) }
  }

  static func store(_ fields: [CField], from options: Options, into params: inout Params) {
    for field in fields { field.store(options, &params) }
  }

  /// The same type on both sides.
  static func same<T>(_ option: WritableKeyPath<Options, T>, _ field: WritableKeyPath<Params, T>)
    -> CField
  {
    CField(load: { $0[keyPath: option] = $1[keyPath: field] },
           store: { $1[keyPath: field] = $0[keyPath: option] })
  }

  /// An Int passed as an int32_t, clamped to its range.
  static func int(_ option: WritableKeyPath<Options, Int>, _ field: WritableKeyPath<Params, Int32>)
    -> CField
  {
    CField(load: { $0[keyPath: option] = Int($1[keyPath: field]) },
           store: { $1[keyPath: field] = Int32(clamping: $0[keyPath: option]) })
  }

  /// A Bool passed as an int32_t: nonzero is true, true is 1.
  static func flag(_ option: WritableKeyPath<Options, Bool>,
                   _ field: WritableKeyPath<Params, Int32>) -> CField
  {
    CField(load: { $0[keyPath: option] = $1[keyPath: field] != 0 },
           store: { $1[keyPath: field] = $0[keyPath: option] ? 1 : 0 })
  }

  /// An enum passed as its raw value; a value Swift does not know loads as `unknown`.
  static func raw<T: RawRepresentable>(_ option: WritableKeyPath<Options, T>,
                                       _ field: WritableKeyPath<Params, T.RawValue>,
                                       unknown: T) -> CField
  {
    CField(load: { $0[keyPath: option] = T(rawValue: $1[keyPath: field]) ?? unknown },
           store: { $1[keyPath: field] = $0[keyPath: option].rawValue })
  }
}

/// A function the model may call (lilims_tool).
public struct Tool: Sendable {
  public var name: String
  public var description: String?
  /// A JSON Schema (an object) of the arguments, as JSON text; nil: none.
  public var parameters: String?

  public init(name: String, description: String? = nil, parameters: String? = nil) {
    self.name = name
    self.description = description
    self.parameters = parameters
  }
}

/// How a model family describes tools and writes its calls
/// (lilims_tool_format; README, "Tool formats").
public enum ToolFormat: Int32, Sendable {
  /// lilims' own: the answer is {"name", "arguments"} alone.
  case generic = 0
  /// Qwen2 / Qwen2.5 / Hermes: <tool_call>{"name", "arguments"}</tool_call>.
  case hermes
  /// SmolLM2: <tool_call>[{"name", "arguments"}, ...]</tool_call>.
  case smollm2
  /// Llama 3.1 / 3.2 JSON: {"name", "parameters"}.
  case llama3
  /// Phi-4-mini: <|tool_call|>[...]<|/tool_call|>.
  case phi4
}

/// Whether an answer with tools must be a call.
public enum ToolChoice: Int32, Sendable {
  /// The answer is a call; the prompt ends with the format's opening mark.
  case required = 0
  /// Text, or a call after the format's opening mark.
  case auto
}

/// A call the model made: the tool's name and its arguments as JSON text.
public struct ToolCall: Sendable, Equatable {
  public let name: String
  /// A JSON object (compact).
  public let arguments: String

  /// The calls `text` (a generated answer in `format`) makes; empty for
  /// plain text.  Throws `.badFormat` when a call does not parse.
  public static func parse(_ text: String, format: ToolFormat) throws -> [ToolCall] {
    var utf8 = Array(text.utf8)
    let json = try utf8.withUnsafeMutableBufferPointer { buffer in
      try buffer.withMemoryRebound(to: CChar.self) { chars in
        try readString { lilims_parse_tool_calls(format.rawValue, chars.baseAddress, chars.count, $0, $1, &$2) }
      }
    }
    return try splitCalls(json)
  }
}

/// [{"name": "...", "arguments": {...}}, ...] as lilims_parse_tool_calls writes it
/// (compact; the name a JSON string) into calls, without Foundation's JSON.
func splitCalls(_ json: String) throws -> [ToolCall] {
  let bytes = Array(json.utf8)
  var calls: [ToolCall] = []
  var i = 0
  func expect(_ s: String) throws {
    let want = Array(s.utf8)
    guard i + want.count <= bytes.count, Array(bytes[i..<i + want.count]) == want else {
      throw LilimsError(LILIMS_ERR_BAD_FORMAT)
    }
    i += want.count
  }
  // A JSON string starting at i, decoded (its escapes as JSON defines them).
  func string() throws -> String {
    try expect("\"")
    var out: [UInt8] = []
    while i < bytes.count && bytes[i] != UInt8(ascii: "\"") {
      if bytes[i] == UInt8(ascii: "\\") && i + 1 < bytes.count {
        i += 1
        switch bytes[i] {
        case UInt8(ascii: "n"): out.append(10)
        case UInt8(ascii: "t"): out.append(9)
        case UInt8(ascii: "r"): out.append(13)
        case UInt8(ascii: "b"): out.append(8)
        case UInt8(ascii: "f"): out.append(12)
        case UInt8(ascii: "u"):
          guard i + 4 < bytes.count, let v = UInt32(String(decoding: bytes[i + 1...i + 4], as: UTF8.self), radix: 16),
            let scalar = Unicode.Scalar(v)
          else { throw LilimsError(LILIMS_ERR_BAD_FORMAT) }
          out.append(contentsOf: Array(String(Character(scalar)).utf8))
          i += 4
        default: out.append(bytes[i])
        }
      } else {
        out.append(bytes[i])
      }
      i += 1
    }
    try expect("\"")
    return String(decoding: out, as: UTF8.self)
  }
  // The JSON value starting at i (an object): its text, by bracket depth.
  func value() throws -> String {
    let start = i
    var depth = 0
    var inString = false
    var escaped = false
    while i < bytes.count {
      let c = bytes[i]
      i += 1
      if inString {
        if escaped { escaped = false } else if c == UInt8(ascii: "\\") { escaped = true } else if c == UInt8(ascii: "\"") { inString = false }
        continue
      }
      if c == UInt8(ascii: "\"") { inString = true }
      if c == UInt8(ascii: "{") || c == UInt8(ascii: "[") { depth += 1 }
      if c == UInt8(ascii: "}") || c == UInt8(ascii: "]") {
        depth -= 1
        if depth == 0 { return String(decoding: bytes[start..<i], as: UTF8.self) }
      }
    }
    throw LilimsError(LILIMS_ERR_BAD_FORMAT)
  }
  try expect("[")
  while i < bytes.count && bytes[i] != UInt8(ascii: "]") {
    if !calls.isEmpty { try expect(",") }
    try expect("{\"name\":")
    let name = try string()
    try expect(",\"arguments\":")
    let arguments = try value()
    try expect("}")
    calls.append(ToolCall(name: name, arguments: arguments))
  }
  try expect("]")
  return calls
}

/// What generation does when the context is full.
public enum ContextPolicy: Sendable, Equatable {
  /// Stop (`StopReason.contextFull`).
  case stop
  /// Keep the first `keep` tokens (nil: the BOS token when the sequence
  /// starts with one), forget the older half of the rest and go on.
  case shift(keep: Int? = nil)
}

/// Sampling and stopping (lilims_generate_params); the defaults are lilims'.
public struct GenerateOptions: Sendable {
  // Each starts as lilims' default: init reads those of the C params from
  // lilims_generate_default_params through `fields`.
  /// Stop after this many new tokens; 0 or less: at the end of generation
  /// or when the context is full.
  public var maxTokens = 0
  public var temperature: Float = 0  // 0: greedy
  public var topK = 0  // 0: off
  public var topP: Float = 1  // 1: off
  public var minP: Float = 0  // 0: off
  public var repeatPenalty: Float = 1  // 1: off
  public var repeatLastN = 0
  /// OpenAI's penalties over the tokens generated in this call; 0: off.
  public var frequencyPenalty: Float = 0
  public var presencePenalty: Float = 0
  /// Added to a token's logit before anything else; -infinity bans it.
  public var logitBias: [Token: Float] = [:]
  public var seed: UInt64 = 0
  /// Generation ends when the text contains one of these; neither it nor
  /// what follows is streamed.
  public var stop: [String] = []
  /// The output is one strictly valid JSON object; generation ends when it closes.
  public var jsonObject = false
  /// A JSON Schema (JSON text) the output is one valid value of.
  public var jsonSchema: String? = nil
  /// Non-empty: the output is {"name": <a tool>, "arguments": <its arguments>}.
  /// Describe the tools to the model with `toolsPrompt(_:)`.
  public var tools: [Tool] = []
  /// With `tools`: the format of the call (`Model.toolFormat` is the
  /// model's own) and whether the answer must be one.
  public var toolFormat = ToolFormat.generic
  public var toolChoice = ToolChoice.required
  public var contextPolicy = ContextPolicy.stop
  /// The prompt is the whole sequence the session should hold (a chat
  /// rendered anew each turn): the part of it already in the session is kept
  /// and only the rest is evaluated (`GenerationStatistics.reusedTokens`).
  public var reusePrefix = false
  /// Add BOS when the session is empty and the model asks for it.
  public var addBos = true
  /// Special-token text in a prompt ("<|im_start|>") becomes special tokens.
  public var parseSpecial = true
  /// With `jsonSchema` or `tools`: where the schema allows only certain
  /// bytes next, append the tokenizer's tokens for them without sampling
  /// (`GenerationStatistics.forcedTokens`).  The output is valid either
  /// way; its tokens (so its text) may differ from decoding without it.
  public var jumpForward = true
  /// Prompt-lookup decoding: draft up to this many tokens (at most 64) from
  /// an earlier occurrence of the latest tokens in the prompt and output,
  /// and verify them in one block.  The output is the same as with 0 (off)
  /// for every sampling setting; faster when the answer copies the prompt.
  public var draftTokens = 0
  /// A lazy constraint, with `jsonObject`, `jsonSchema` or `tools`: free
  /// text until the output spells this (a special token counts as its text,
  /// so "<tool_call>" may be one token), then one value
  /// (`GenerationStatistics.constraintTriggered`, `valueOffset`).  nil: the
  /// value starts at once.
  public var constraintTrigger: String? = nil
  /// Text appended after the value ("</tool_call>"), streamed, not evaluated.
  public var constraintClose: String? = nil

  public init() {
    CField.load(Self.fields, into: &self, from: lilims_generate_default_params())
  }

  /// Each option held in lilims_generate_params itself (the ones held
  /// behind pointers are CGenerateParams' to pass) and its field.
  fileprivate static var fields: [CField<GenerateOptions, lilims_generate_params>] {
    [
      .int(\.maxTokens, \.max_tokens),
      .same(\.temperature, \.sampling.temperature),
      .int(\.topK, \.sampling.top_k),
      .same(\.topP, \.sampling.top_p),
      .same(\.minP, \.sampling.min_p),
      .same(\.repeatPenalty, \.sampling.repeat_penalty),
      .int(\.repeatLastN, \.sampling.repeat_last_n),
      .same(\.seed, \.sampling.seed),
      .same(\.frequencyPenalty, \.frequency_penalty),
      .same(\.presencePenalty, \.presence_penalty),
      .flag(\.jsonObject, \.json_object),
      .flag(\.addBos, \.add_bos),
      .flag(\.parseSpecial, \.parse_special),
      .flag(\.reusePrefix, \.reuse_prefix),
      .flag(\.jumpForward, \.jump_forward),
      .int(\.draftTokens, \.n_draft),
      .raw(\.toolFormat, \.tool_format, unknown: .generic),
      .raw(\.toolChoice, \.tool_choice, unknown: .required),
      CField(
        load: { o, p in
          o.contextPolicy = p.context_policy == Int32(LILIMS_CONTEXT_SHIFT.rawValue)
            ? .shift(keep: p.n_keep < 0 ? nil : Int(p.n_keep)) : .stop
        },
        store: { o, p in
          switch o.contextPolicy {
          case .stop:
            p.context_policy = Int32(LILIMS_CONTEXT_STOP.rawValue)
          case .shift(let keep):
            p.context_policy = Int32(LILIMS_CONTEXT_SHIFT.rawValue)
            p.n_keep = Int32(clamping: keep ?? -1)
          }
        }),
    ]
  }
}

/// Why a generation ended (lilims_generate_stats.stop_reason).
public enum StopReason: Int32, Sendable {
  case maxTokens = 0, endOfGeneration, callback, contextFull, cancelled, stopString
}

/// Figures of one generation (lilims_generate_stats).
public struct GenerationStatistics: Sendable {
  public let promptTokens: Int
  public let generatedTokens: Int
  public let reusedTokens: Int
  public let contextShifts: Int
  public let stopReason: StopReason
  public let promptSeconds: Double
  public let generateSeconds: Double
  /// From the call's start to the first token sampled.
  public let timeToFirstToken: Double
  public let promptTokensPerSecond: Double
  public let decodeTokensPerSecond: Double
  public let maskSeconds: Double
  /// The process's peak resident memory when the call ended; 0 when unknown.
  public let peakResidentBytes: UInt64
  /// `jumpForward`: tokens appended without sampling (part of `generatedTokens`).
  public let forcedTokens: Int
  /// `draftTokens`: tokens drafted and evaluated for verification.
  public let draftedTokens: Int
  /// `draftTokens`: drafted tokens kept (part of `generatedTokens`).
  public let acceptedTokens: Int
  /// `constraintTrigger`: whether the output spelled it.
  public let constraintTriggered: Bool
  /// With a schema, tools or `jsonObject`: the UTF-8 byte offset in the text
  /// where the value starts (0 without a trigger); nil when none started.
  public let valueOffset: Int?

  init(_ s: lilims_generate_stats) {
    promptTokens = Int(s.n_prompt_tokens)
    generatedTokens = Int(s.n_generated_tokens)
    reusedTokens = Int(s.n_reused_tokens)
    contextShifts = Int(s.n_context_shifts)
    stopReason = StopReason(rawValue: s.stop_reason) ?? .maxTokens
    promptSeconds = s.prompt_seconds
    generateSeconds = s.generate_seconds
    timeToFirstToken = s.first_token_seconds
    promptTokensPerSecond = s.prompt_tokens_per_second
    decodeTokensPerSecond = s.decode_tokens_per_second
    maskSeconds = s.mask_seconds
    peakResidentBytes = s.peak_resident_bytes
    forcedTokens = Int(s.n_forced_tokens)
    draftedTokens = Int(s.n_drafted_tokens)
    acceptedTokens = Int(s.n_accepted_tokens)
    constraintTriggered = s.constraint_triggered != 0
    valueOffset = s.value_offset < 0 ? nil : Int(s.value_offset)
  }
}

/// What a session and its model hold in memory (lilims_memory_report).
public struct MemoryReport: Sendable {
  /// Weights read in place from the file's mapping or the caller's buffer.
  public let weightsMapped: UInt64
  /// Weights on lilims' heap: repacked copies, the file when read.
  public let weightsCopied: UInt64
  public let kvResident: UInt64
  public let kvFull: UInt64
  public let scratch: UInt64
  public let host: UInt64
  public let total: UInt64

  init(_ r: lilims_memory_report) {
    weightsMapped = r.weights_mapped
    weightsCopied = r.weights_copied
    kvResident = r.kv_resident
    kvFull = r.kv_full
    scratch = r.scratch
    host = r.host
    total = r.total
  }
}

/// The system prompt lilims uses to describe tools to a model whose chat
/// template has no tool syntax of its own.
public func toolsPrompt(_ tools: [Tool]) throws -> String {
  let owned = CTools(tools)
  return try withExtendedLifetime(owned) {
    try readString { lilims_tools_prompt(owned.tools, owned.tools.count, $0, $1, &$2) }
  }
}

/// The system prompt describing `tools` in `format`; `allowText`: the
/// answer may be plain text (`ToolChoice.auto`).
public func toolsPrompt(_ tools: [Tool], format: ToolFormat, allowText: Bool = false) throws -> String {
  let owned = CTools(tools)
  return try withExtendedLifetime(owned) {
    try readString {
      lilims_tools_prompt_format(format.rawValue, owned.tools, owned.tools.count, allowText ? 1 : 0, $0, $1, &$2)
    }
  }
}

/// A String copied into C memory that lives as long as this object.
final class CString {
  let pointer: UnsafeMutablePointer<CChar>

  init(_ string: String) {
    let utf8 = Array(string.utf8CString)
    pointer = UnsafeMutablePointer<CChar>.allocate(capacity: utf8.count)
    pointer.initialize(from: utf8, count: utf8.count)
  }

  deinit { pointer.deallocate() }
}

/// lilims_tool entries and the strings they point to.
final class CTools {
  private let strings: [CString?]
  let tools: [lilims_tool]

  init(_ list: [Tool]) {
    let strings = list.flatMap {
      [CString($0.name), $0.description.map(CString.init), $0.parameters.map(CString.init)]
    }
    self.strings = strings
    tools = (0..<list.count).map {
      lilims_tool(name: strings[3 * $0]!.pointer, description: strings[3 * $0 + 1]?.pointer,
                  parameters: strings[3 * $0 + 2]?.pointer)
    }
  }
}

/// lilims_chat_message entries and the strings they point to.
final class CChat {
  private let strings: [CString]
  let messages: [lilims_chat_message]

  init(_ list: [ChatMessage]) {
    let strings = list.flatMap { [CString($0.role), CString($0.content)] }
    self.strings = strings
    messages = (0..<list.count).map {
      lilims_chat_message(role: strings[2 * $0].pointer, content: strings[2 * $0 + 1].pointer)
    }
  }
}

/// lilims_generate_params and everything its pointers reach, alive as long
/// as this object.
final class CGenerateParams {
  var params: lilims_generate_params
  private let stopStrings: [CString]
  private let stopPointers: [UnsafePointer<CChar>?]
  private let schema: CString?
  private let trigger: CString?
  private let close: CString?
  private let tools: CTools
  private let bias: [lilims_logit_bias]

  init(_ o: GenerateOptions) {
    var p = lilims_generate_default_params()
    CField.store(GenerateOptions.fields, from: o, into: &p)
    stopStrings = o.stop.map(CString.init)
    stopPointers = stopStrings.map { UnsafePointer($0.pointer) }
    schema = o.jsonSchema.map(CString.init)
    trigger = o.constraintTrigger.map(CString.init)
    close = o.constraintClose.map(CString.init)
    tools = CTools(o.tools)
    bias = o.logitBias.sorted { $0.key < $1.key }.map { lilims_logit_bias(token: $0.key, bias: $0.value) }
    params = p
  }

  /// Runs `body` with params pointing into this object's storage.
  func withParams<R>(_ body: (inout lilims_generate_params) -> R) -> R {
    stopPointers.withUnsafeBufferPointer { stop in
      tools.tools.withUnsafeBufferPointer { tools in
        bias.withUnsafeBufferPointer { bias in
          var p = params
          p.stop = stop.isEmpty ? nil : stop.baseAddress
          p.n_stop = stop.count
          p.json_schema = schema.map { UnsafePointer($0.pointer) }
          p.constraint_trigger = trigger.map { UnsafePointer($0.pointer) }
          p.constraint_close = close.map { UnsafePointer($0.pointer) }
          p.tools = tools.isEmpty ? nil : tools.baseAddress
          p.n_tools = tools.count
          p.logit_bias = bias.isEmpty ? nil : bias.baseAddress
          p.n_logit_bias = bias.count
          return withExtendedLifetime(self) { body(&p) }
        }
      }
    }
  }
}
