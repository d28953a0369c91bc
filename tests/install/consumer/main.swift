// The same program as main.c in Swift, through the installed module map:
//   swiftc -I PREFIX/include/lilims -L PREFIX/lib main.swift
import CLilims

let args = CommandLine.arguments
guard args.count == 4, let nTokens = Int32(args[3]) else {
  fatalError("usage: consumer MODEL.gguf PROMPT N_TOKENS")
}
func fail() -> Never {
  fatalError("consumer: " + String(cString: lilims_last_error()))
}
guard lilims_abi_version() == LILIMS_ABI_VERSION else {
  fatalError("consumer: lilims.h and the library linked in differ")
}
var model: OpaquePointer?
var session: OpaquePointer?
var sp = lilims_session_default_params()
var gp = lilims_generate_default_params()
gp.max_tokens = nTokens
gp.sampling.temperature = 0
gp.on_token = { _, _, text, len in
  let bytes = UnsafeRawBufferPointer(start: text, count: len)
  print(String(decoding: bytes, as: UTF8.self), terminator: "")
  return 0
}
guard lilims_model_open(args[1], nil, &model) == LILIMS_OK,
      lilims_session_create(model, &sp, &session) == LILIMS_OK,
      lilims_generate(session, args[2], &gp, nil) == LILIMS_OK else { fail() }
print("")
lilims_session_free(session)
lilims_model_free(model)
