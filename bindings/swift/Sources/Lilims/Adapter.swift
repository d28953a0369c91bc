import CLilims

/// A LoRA adapter read for one model (lilims_adapter_load): llama.cpp's GGUF
/// LoRA format, as `lilims convert PEFT_DIR OUT.gguf --base MODEL.gguf`
/// writes it from a Hugging Face PEFT adapter.  An adapter for another
/// architecture, or whose tensors name no weight of the model or do not fit
/// its shapes, throws (`.invalidArgument` or `.badFormat`, the message naming
/// the tensor).  Any of the model's sessions may use it, several at once;
/// a session keeps the adapters it uses alive.
public final class Adapter: @unchecked Sendable {
  public let model: Model
  let handle: OpaquePointer

  public init(model: Model, path: String) throws {
    var loaded: OpaquePointer?
    let status = lilims_adapter_load(model.handle, path, &loaded)
    guard status == LILIMS_OK, let loaded else { throw LilimsError(status) }
    self.model = model
    handle = loaded
  }

  deinit { lilims_adapter_free(handle) }

  /// The tool format the adapter was trained with, when its file says
  /// (`lilims convert PEFT_DIR --tool-format NAME`); use it for
  /// `GenerateOptions.toolFormat` and `toolsPrompt(_:format:)`.
  public var toolFormat: ToolFormat? {
    let raw = lilims_adapter_tool_format(handle)
    return raw < 0 ? nil : ToolFormat(rawValue: raw)
  }
}
