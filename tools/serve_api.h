// The OpenAI-compatible API of `lilims serve` without the HTTP: request
// bodies checked and turned into what a runtime::BatchEngine runs, and the
// response, stream-chunk and error bodies.  Every function here is total:
// a bad body gives an ApiError, never an exception.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lilims/lilims.h"
#include "runtime/engine.h"
#include "runtime/constrain/tool_format.h"

namespace lilims::serve {

// OpenAI's error object: {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string type = "invalid_request_error";
  std::string message;
  std::string param;  // "" -> null
  std::string code;   // "" -> null
};
std::string error_json(const ApiError& e);

struct ServerInfo {
  std::string model_id;  // the id GET /v1/models lists; requests must name it (or omit "model")
  int32_t n_ctx = 0;     // per request
  int64_t created = 0;   // the model's "created" (seconds since the epoch)
};

enum class Endpoint { chat, completions };

// A checked request: the prompt and the options the engine runs it with,
// and what shaping the answer needs.
struct Prepared {
  Endpoint endpoint = Endpoint::chat;
  std::string model;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::vector<int32_t> prompt;
  runtime::GenerateOptions opt;
  // Tools: the answer is parsed for calls in this format.
  bool tools = false;
  runtime::ToolFormat tool_format = runtime::ToolFormat::generic;
};

// Parses and checks a body for `endpoint`: false with `err` set when it is
// refused (malformed JSON, a field of the wrong type or out of range, an
// unknown model, an invalid schema, tools that do not compile, a prompt
// that does not fit n_ctx).  What only the engine can check (room for a
// schema's value) is left to it.
bool prepare(Endpoint endpoint, const runtime::Model& model, const ServerInfo& info,
             const std::string& body, Prepared& out, ApiError& err);

// What the answer says: text, or tool calls (and the text before them).
struct Answer {
  std::string content;  // the text (before the first call when there are calls)
  std::vector<runtime::ToolCall> calls;
  std::string finish_reason;  // stop, length, tool_calls
};
Answer make_answer(const Prepared& p, const runtime::GenerateResult& r);

// Response bodies.  `id` is "chatcmpl-..." or "cmpl-...", created in seconds.
std::string response_json(const Prepared& p, const runtime::GenerateResult& r, const Answer& a,
                          const std::string& id, int64_t created);
// One server-sent event's data for a stream: a delta of text (role on the
// first chunk of a chat), tool calls, the finish reason, or the usage.
std::string chunk_json(const Prepared& p, const std::string& id, int64_t created, bool first,
                       const std::string& text, const std::vector<runtime::ToolCall>* calls,
                       const std::string& finish_reason);
std::string usage_chunk_json(const Prepared& p, const std::string& id, int64_t created,
                             const runtime::GenerateResult& r);
std::string models_json(const ServerInfo& info);

// An ApiError for a lilims::Error the engine raised while checking a request.
ApiError engine_error(lilims_status status, const std::string& message);

}  // namespace lilims::serve
