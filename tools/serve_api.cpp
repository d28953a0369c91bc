#include "tools/serve_api.h"

#include <cmath>
#include <random>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/constrain/tools.h"
#include "tokenizer/chat.h"
#include "tokenizer/unicode.h"

namespace lilims::serve {
namespace {

using Json = nlohmann::json;

// Thrown inside prepare() only; prepare turns it into its ApiError.
struct Refusal {
  ApiError e;
};

[[noreturn]] void refuse(const std::string& message, const std::string& param = "",
                         int status = 400, const std::string& code = "") {
  ApiError e;
  e.status = status;
  e.message = message;
  e.param = param;
  e.code = code;
  throw Refusal{e};
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    default: return "a number";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const char* want, const Json& got) {
  refuse("Invalid type for '" + param + "': expected " + want + ", but got " + type_name(got) + ".",
         param, 400, "invalid_type");
}

// A field when present and not null, else nullptr.
const Json* field(const Json& body, const char* key) {
  const auto it = body.find(key);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

double number(const Json& body, const char* key, double lo, double hi, double fallback) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number()) wrong_type(key, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) {
    refuse("Invalid value for '" + std::string(key) + "': " + v->dump() + " is outside [" +
               Json(lo).dump() + ", " + Json(hi).dump() + "].",
           key, 400, "invalid_value");
  }
  return x;
}

int64_t integer(const Json& body, const char* key, int64_t lo, int64_t hi, int64_t fallback) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_number_integer()) wrong_type(key, "an integer", *v);
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > (uint64_t)INT64_MAX
                        ? INT64_MAX
                        : v->get<int64_t>();
  if (x < lo || x > hi) {
    refuse("Invalid value for '" + std::string(key) + "': " + std::to_string(x) +
               (x < lo ? " is less than the minimum of " + std::to_string(lo)
                       : " is greater than the maximum of " + std::to_string(hi)) + ".",
           key, 400, "invalid_value");
  }
  return x;
}

bool boolean(const Json& body, const char* key, bool fallback) {
  const Json* v = field(body, key);
  if (!v) return fallback;
  if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
  return v->get<bool>();
}

// A message's content: a string, or an array of text parts.
std::string content_text(const Json& c, const std::string& param) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) wrong_type(param, "a string or an array of content parts", c);
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    const Json& part = c[i];
    const std::string pp = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) wrong_type(pp, "an object", part);
    const Json* type = field(part, "type");
    if (!type || !type->is_string() || type->get<std::string>() != "text") {
      refuse("Only content parts of type 'text' are supported.", pp + ".type");
    }
    const Json* text = field(part, "text");
    if (!text || !text->is_string()) wrong_type(pp + ".text", "a string", text ? *text : Json());
    out += text->get<std::string>();
  }
  return out;
}

std::string checked_utf8(std::string s, const std::string& param) {
  if (!tok::utf8_is_valid(s)) refuse("'" + param + "' is not valid UTF-8.", param);
  return s;
}

// The OpenAI sampling fields, with llama-server's defaults where OpenAI's
// would be unlike what a small model needs (top-k 40, min-p 0.05).
void read_sampling(const Json& body, int32_t n_vocab, runtime::SamplingParams& s) {
  s.temperature = (float)number(body, "temperature", 0.0, 2.0, 0.8);
  s.top_p = (float)number(body, "top_p", 0.0, 1.0, 0.95);
  if (s.top_p <= 0.0f) s.top_p = 1e-6f;  // OpenAI allows 0: only the most likely token
  s.top_k = (int32_t)integer(body, "top_k", 0, INT32_MAX, 40);
  s.min_p = (float)number(body, "min_p", 0.0, 1.0, 0.05);
  s.frequency_penalty = (float)number(body, "frequency_penalty", -2.0, 2.0, 0.0);
  s.presence_penalty = (float)number(body, "presence_penalty", -2.0, 2.0, 0.0);
  s.repeat_penalty = (float)number(body, "repeat_penalty", 1e-3, 100.0, 1.0);
  const Json* seed = field(body, "seed");
  if (seed) {
    if (!seed->is_number_integer()) wrong_type("seed", "an integer", *seed);
    s.seed = seed->is_number_unsigned() ? seed->get<uint64_t>() : (uint64_t)seed->get<int64_t>();
  } else {
    std::random_device rd;
    s.seed = ((uint64_t)rd() << 32) ^ rd();
  }
  if (const Json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) wrong_type("logit_bias", "an object", *lb);
    for (const auto& [k, v] : lb->items()) {
      char* end = nullptr;
      const long id = std::strtol(k.c_str(), &end, 10);
      if (k.empty() || *end || id < 0 || id > INT32_MAX) refuse("logit_bias keys must be token ids.", "logit_bias");
      if (!v.is_number()) wrong_type("logit_bias." + k, "a number", v);
      const double b = v.get<double>();
      if (!(b >= -100 && b <= 100)) refuse("logit_bias values must be in [-100, 100].", "logit_bias." + k);
      s.logit_bias.push_back({(int32_t)id, b <= -100 ? -INFINITY : (float)b});
      if (id >= n_vocab) refuse("logit_bias: token id " + k + " is outside the vocabulary.", "logit_bias");
    }
  }
}

void read_common(const Json& body, const runtime::Model& model, const ServerInfo& info, Prepared& p,
                 int64_t default_max) {
  // llama-server's extension: the end-of-generation tokens are banned, so
  // an answer runs to max_tokens (benchmarks).
  if (boolean(body, "ignore_eos", false)) {
    const tok::Tokenizer& tk = model.tokenizer();
    for (int32_t id = 0; id < model.hparams().n_vocab; ++id) {
      if (tk.is_eog(id)) p.opt.sampling.logit_bias.push_back({id, -INFINITY});
    }
  }
  if (const Json* m = field(body, "model")) {
    if (!m->is_string()) wrong_type("model", "a string", *m);
    p.model = m->get<std::string>();
    if (p.model != info.model_id) {
      refuse("The model '" + p.model + "' does not exist; this server serves '" + info.model_id + "'.",
             "model", 404, "model_not_found");
    }
  } else {
    p.model = info.model_id;
  }
  p.stream = boolean(body, "stream", false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    p.include_usage = boolean(*so, "include_usage", false);
  }
  if (integer(body, "n", 1, 1, 1) != 1) refuse("Only n = 1 is supported.", "n");
  read_sampling(body, model.hparams().n_vocab, p.opt.sampling);
  int64_t max_tokens = integer(body, "max_tokens", 1, INT32_MAX, default_max);
  max_tokens = integer(body, "max_completion_tokens", 1, INT32_MAX, max_tokens);
  p.opt.max_tokens = (int32_t)max_tokens;  // 0: until the end or the context is full
  if (const Json* stop = field(body, "stop")) {
    if (stop->is_string()) {
      p.opt.stop.push_back(checked_utf8(stop->get<std::string>(), "stop"));
    } else if (stop->is_array()) {
      if (stop->size() > 4) refuse("'stop' takes at most 4 sequences.", "stop");
      for (size_t i = 0; i < stop->size(); ++i) {
        const std::string param = "stop[" + std::to_string(i) + "]";
        if (!(*stop)[i].is_string()) wrong_type(param, "a string", (*stop)[i]);
        p.opt.stop.push_back(checked_utf8((*stop)[i].get<std::string>(), param));
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *stop);
    }
    for (const std::string& s : p.opt.stop) {
      if (s.empty()) refuse("Stop sequences must not be empty.", "stop");
    }
  }
}

void read_response_format(const Json& body, const runtime::Model& model, Prepared& p) {
  const Json* rf = field(body, "response_format");
  if (!rf) return;
  if (!rf->is_object()) wrong_type("response_format", "an object", *rf);
  const Json* type = field(*rf, "type");
  if (!type || !type->is_string()) wrong_type("response_format.type", "a string", type ? *type : Json());
  const std::string t = type->get<std::string>();
  if (t == "text") return;
  if (t == "json_object") {
    p.opt.json = true;
  } else if (t == "json_schema") {
    const Json* js = field(*rf, "json_schema");
    if (!js || !js->is_object()) wrong_type("response_format.json_schema", "an object", js ? *js : Json());
    const Json* schema = field(*js, "schema");
    if (!schema) {
      p.opt.json = true;  // no schema: any JSON object
    } else {
      if (!schema->is_object() && !schema->is_boolean()) {
        wrong_type("response_format.json_schema.schema", "an object", *schema);
      }
      p.opt.json_schema = schema->dump();
      try {
        model.schema_cache().get(p.opt.json_schema);
      } catch (const Error& e) {
        refuse(std::string("Invalid schema for response_format: ") + e.what(),
               "response_format.json_schema.schema", 400, "invalid_json_schema");
      }
    }
  } else {
    refuse("Invalid value for 'response_format.type': '" + t +
               "'; supported: 'text', 'json_object', 'json_schema'.",
           "response_format.type", 400, "invalid_value");
  }
  if (!p.opt.stop.empty()) {
    refuse("'stop' does not apply with a JSON response_format (the answer ends when the value closes).",
           "stop");
  }
}

// tools + tool_choice: the system text that describes them and the
// constraint the answer is held to.  Returns the text the prompt ends with
// (a required call's opening mark) and appends the description to `system`.
std::string read_tools(const Json& body, const runtime::Model& model, Prepared& p, std::string& system) {
  const Json* tools = field(body, "tools");
  const Json* choice = field(body, "tool_choice");
  if (!tools) {
    if (choice && !(choice->is_string() && choice->get<std::string>() == "none")) {
      refuse("'tool_choice' is only allowed when 'tools' are given.", "tool_choice");
    }
    return "";
  }
  if (!tools->is_array()) wrong_type("tools", "an array", *tools);
  if (tools->empty()) refuse("'tools' must not be empty.", "tools");
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    const std::string param = "tools[" + std::to_string(i) + "]";
    if (!t.is_object()) wrong_type(param, "an object", t);
    const Json* type = field(t, "type");
    if (type && (!type->is_string() || type->get<std::string>() != "function")) {
      refuse("Only tools of type 'function' are supported.", param + ".type");
    }
    const Json* f = field(t, "function");
    if (!f || !f->is_object()) wrong_type(param + ".function", "an object", f ? *f : Json());
    const Json* params = field(*f, "parameters");
    if (params && !params->is_object()) wrong_type(param + ".function.parameters", "an object", *params);
  }
  std::string mode = "auto", named;
  if (choice) {
    if (choice->is_string()) {
      mode = choice->get<std::string>();
      if (mode != "auto" && mode != "none" && mode != "required") {
        refuse("Invalid value for 'tool_choice': '" + mode + "'; supported: 'none', 'auto', "
               "'required' or a named function.", "tool_choice", 400, "invalid_value");
      }
    } else if (choice->is_object()) {
      const Json* f = field(*choice, "function");
      const Json* name = f && f->is_object() ? field(*f, "name") : nullptr;
      if (!name || !name->is_string()) wrong_type("tool_choice.function.name", "a string", name ? *name : Json());
      mode = "required";
      named = name->get<std::string>();
    } else {
      wrong_type("tool_choice", "a string or an object", *choice);
    }
  }
  if (mode == "none") return "";
  if (p.opt.json || !p.opt.json_schema.empty()) {
    refuse("'response_format' and 'tools' cannot constrain one answer together.", "response_format");
  }
  if (!p.opt.stop.empty()) refuse("'stop' does not apply with tools.", "stop");
  std::vector<runtime::Tool> list;
  try {
    list = runtime::parse_tools(tools->dump());
  } catch (const Error& e) {
    refuse(std::string("Invalid tools: ") + e.what(), "tools");
  }
  if (!named.empty()) {
    std::vector<runtime::Tool> one;
    for (const runtime::Tool& t : list) {
      if (t.name == named) one.push_back(t);
    }
    if (one.empty()) refuse("'tool_choice' names '" + named + "', which is not among the tools.", "tool_choice");
    list = one;
  }
  p.tools = true;
  p.tool_format = model.tool_format();
  runtime::ToolPrompt tp;
  try {
    tp = runtime::tool_prompt(p.tool_format, list, mode == "auto");
    model.schema_cache().get(tp.schema);
  } catch (const Error& e) {
    refuse(std::string("Invalid tools: ") + e.what(), "tools");
  }
  p.opt.json_schema = tp.schema;
  p.opt.constraint_close = tp.close;
  system = system.empty() ? tp.system : system + "\n\n" + tp.system;
  if (mode == "auto") {
    p.opt.constraint_trigger = tp.trigger;
    return "";
  }
  return tp.trigger;
}

void check_fits(const Prepared& p, const ServerInfo& info) {
  if ((int64_t)p.prompt.size() >= (int64_t)info.n_ctx) {
    refuse("This model's maximum context length is " + std::to_string(info.n_ctx) +
               " tokens. However, your prompt has " + std::to_string(p.prompt.size()) +
               " tokens, which leaves no room for an answer.",
           "messages", 400, "context_length_exceeded");
  }
  if (p.prompt.empty()) refuse("The prompt is empty.", "prompt");
}

void prepare_chat(const Json& body, const runtime::Model& model, const ServerInfo& info, Prepared& p) {
  read_common(body, model, info, p, 0);
  read_response_format(body, model, p);
  const Json* msgs = field(body, "messages");
  if (!msgs) refuse("Missing required parameter: 'messages'.", "messages", 400, "missing_required_parameter");
  if (!msgs->is_array()) wrong_type("messages", "an array", *msgs);
  if (msgs->empty()) refuse("'messages' must not be empty.", "messages");
  std::vector<tok::ChatMessage> conv;
  std::string system;
  for (size_t i = 0; i < msgs->size(); ++i) {
    const Json& m = (*msgs)[i];
    const std::string param = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(param, "an object", m);
    const Json* role = field(m, "role");
    if (!role) refuse("Missing required parameter: '" + param + ".role'.", param + ".role");
    if (!role->is_string()) wrong_type(param + ".role", "a string", *role);
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool") {
      refuse("Invalid value for '" + param + ".role': '" + r +
                 "'; supported: 'system', 'developer', 'user', 'assistant', 'tool'.",
             param + ".role", 400, "invalid_value");
    }
    const auto c = m.find("content");
    if (c == m.end() && r != "assistant") {
      refuse("Missing required parameter: '" + param + ".content'.", param + ".content");
    }
    std::string text = c == m.end() ? "" : content_text(*c, param + ".content");
    // An earlier call of the assistant's, written back as JSON text.
    if (const Json* calls = field(m, "tool_calls")) {
      if (!calls->is_array()) wrong_type(param + ".tool_calls", "an array", *calls);
      for (const Json& call : *calls) {
        const Json* f = call.is_object() ? field(call, "function") : nullptr;
        if (!f || !f->is_object()) wrong_type(param + ".tool_calls[].function", "an object", f ? *f : Json());
        Json one = Json::object();
        if (const Json* n = field(*f, "name")) one["name"] = *n;
        if (const Json* a = field(*f, "arguments")) {
          one["arguments"] = a->is_string() ? Json::parse(a->get<std::string>(), nullptr, false) : *a;
          if (one["arguments"].is_discarded()) one["arguments"] = *a;
        }
        text += (text.empty() ? "" : "\n") + one.dump();
      }
    }
    text = checked_utf8(std::move(text), param + ".content");
    if (r == "system" && conv.empty() && system.empty()) {
      system = text;
      continue;
    }
    conv.push_back({r, text});
  }
  const std::string opening = read_tools(body, model, p, system);
  if (!system.empty()) conv.insert(conv.begin(), {"system", system});
  const std::string tmpl = model.chat_template();
  const tok::Tokenizer& tk = model.tokenizer();
  if (tmpl.empty()) {
    // No template lilims knows: the turns as plain lines.
    std::string text;
    for (const tok::ChatMessage& m : conv) text += m.role + ": " + m.content + "\n";
    text += "assistant:" + opening;
    p.prompt = tk.encode(text, true, false);
  } else {
    std::vector<tok::ChatSegment> segs = tok::chat_template_segments(tmpl, conv, true);
    if (!opening.empty()) segs.push_back({opening, true});
    p.prompt = tok::encode_chat_segments(tk, segs, true, false);
  }
  check_fits(p, info);
}

void prepare_completions(const Json& body, const runtime::Model& model, const ServerInfo& info,
                         Prepared& p) {
  read_common(body, model, info, p, 16);
  read_response_format(body, model, p);
  if (boolean(body, "echo", false)) refuse("'echo' is not supported.", "echo");
  if (field(body, "suffix")) refuse("'suffix' is not supported.", "suffix");
  const Json* prompt = field(body, "prompt");
  if (!prompt) refuse("Missing required parameter: 'prompt'.", "prompt", 400, "missing_required_parameter");
  const tok::Tokenizer& tk = model.tokenizer();
  const int32_t n_vocab = model.hparams().n_vocab;
  const auto from_ids = [&](const Json& a) {
    std::vector<int32_t> ids;
    for (const Json& v : a) {
      if (!v.is_number_integer()) wrong_type("prompt", "a string or an array of token ids", v);
      const int64_t id = v.get<int64_t>();
      if (id < 0 || id >= n_vocab) refuse("Token id " + std::to_string(id) + " is outside the vocabulary.", "prompt");
      ids.push_back((int32_t)id);
    }
    return ids;
  };
  if (prompt->is_string()) {
    p.prompt = tk.encode(checked_utf8(prompt->get<std::string>(), "prompt"), true, true);
  } else if (prompt->is_array() && prompt->size() == 1 && (*prompt)[0].is_string()) {
    p.prompt = tk.encode(checked_utf8((*prompt)[0].get<std::string>(), "prompt"), true, true);
  } else if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_number_integer()) {
    p.prompt = from_ids(*prompt);
  } else if (prompt->is_array() && prompt->size() > 1) {
    refuse("Only one prompt per request is supported.", "prompt");
  } else {
    wrong_type("prompt", "a string or an array of token ids", *prompt);
  }
  check_fits(p, info);
}

Json usage_of(const runtime::GenerateResult& r) {
  return Json{{"prompt_tokens", r.n_prompt_tokens},
              {"completion_tokens", (int64_t)r.tokens.size()},
              {"total_tokens", r.n_prompt_tokens + (int64_t)r.tokens.size()},
              {"prompt_tokens_details", {{"cached_tokens", r.n_reused_tokens}}}};
}

Json calls_json(const std::vector<runtime::ToolCall>& calls, const std::string& id_base, bool with_index) {
  Json a = Json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    Json c = {{"id", "call_" + id_base + "_" + std::to_string(i)},
              {"type", "function"},
              {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (with_index) c["index"] = i;
    a.push_back(c);
  }
  return a;
}

Json nullable(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

}  // namespace

std::string error_json(const ApiError& e) {
  return Json{{"error",
               {{"message", e.message}, {"type", e.type}, {"param", nullable(e.param)}, {"code", nullable(e.code)}}}}
      .dump();
}

ApiError engine_error(lilims_status status, const std::string& message) {
  ApiError e;
  e.message = message;
  switch (status) {
    case LILIMS_ERR_CONTEXT_FULL:
      e.code = "context_length_exceeded";
      break;
    case LILIMS_ERR_INVALID_ARGUMENT:
    case LILIMS_ERR_UNSUPPORTED:
      e.code = "invalid_value";
      break;
    default:
      e.status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

bool prepare(Endpoint endpoint, const runtime::Model& model, const ServerInfo& info,
             const std::string& body, Prepared& out, ApiError& err) {
  out = Prepared();
  out.endpoint = endpoint;
  try {
    const Json j = Json::parse(body, nullptr, false);
    if (j.is_discarded()) {
      refuse("We could not parse the JSON body of your request. The body must be valid JSON "
             "(https://platform.openai.com/docs/api-reference).", "", 400, "invalid_json");
    }
    if (!j.is_object()) refuse("The request body must be a JSON object.", "", 400, "invalid_json");
    if (endpoint == Endpoint::chat) {
      prepare_chat(j, model, info, out);
    } else {
      prepare_completions(j, model, info, out);
    }
    return true;
  } catch (const Refusal& r) {
    err = r.e;
  } catch (const Error& e) {
    err = engine_error(e.status(), e.what());
  } catch (const std::exception& e) {
    err = ApiError{400, "invalid_request_error", std::string("Invalid request: ") + e.what(), "", ""};
  }
  return false;
}

Answer make_answer(const Prepared& p, const runtime::GenerateResult& r) {
  Answer a;
  a.content = r.text;
  switch (r.stop) {
    case runtime::StopReason::max_tokens:
    case runtime::StopReason::context_full: a.finish_reason = "length"; break;
    default: a.finish_reason = "stop"; break;
  }
  if (p.tools && (r.value_offset >= 0 || r.constraint_triggered)) {
    try {
      a.calls = runtime::parse_tool_calls(p.tool_format, r.text);
    } catch (const Error&) {
      a.calls.clear();  // an unfinished call (length): the text stays as it is
    }
    if (!a.calls.empty()) {
      a.content = r.value_offset > 0 ? r.text.substr(0, (size_t)r.value_offset) : "";
      // The trigger's text ends the content that precedes the value.
      if (p.opt.constraint_trigger.size() <= a.content.size() &&
          a.content.compare(a.content.size() - p.opt.constraint_trigger.size(), std::string::npos,
                            p.opt.constraint_trigger) == 0) {
        a.content.resize(a.content.size() - p.opt.constraint_trigger.size());
      }
      a.finish_reason = "tool_calls";
    } else if (r.value_offset >= 0 && r.stop == runtime::StopReason::end_of_generation) {
      a.content.clear();  // a required answer that named no tool (an empty list)
    }
  }
  return a;
}

std::string response_json(const Prepared& p, const runtime::GenerateResult& r, const Answer& a,
                          const std::string& id, int64_t created) {
  Json choice;
  if (p.endpoint == Endpoint::chat) {
    Json msg = {{"role", "assistant"}, {"content", a.calls.empty() || !a.content.empty() ? Json(a.content) : Json(nullptr)}};
    if (!a.calls.empty()) msg["tool_calls"] = calls_json(a.calls, id, false);
    choice = {{"index", 0}, {"message", msg}, {"logprobs", nullptr}, {"finish_reason", a.finish_reason}};
  } else {
    choice = {{"index", 0}, {"text", a.content}, {"logprobs", nullptr}, {"finish_reason", a.finish_reason}};
  }
  return Json{{"id", id},
              {"object", p.endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
              {"created", created},
              {"model", p.model},
              {"system_fingerprint", "lilims"},
              {"choices", Json::array({choice})},
              {"usage", usage_of(r)}}
      .dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string chunk_json(const Prepared& p, const std::string& id, int64_t created, bool first,
                       const std::string& text, const std::vector<runtime::ToolCall>* calls,
                       const std::string& finish_reason) {
  Json choice;
  if (p.endpoint == Endpoint::chat) {
    Json delta = Json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && !calls)) delta["content"] = text;
    if (calls && !calls->empty()) delta["tool_calls"] = calls_json(*calls, id, true);
    choice = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullable(finish_reason)}};
  } else {
    choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", nullable(finish_reason)}};
  }
  Json j = {{"id", id},
            {"object", p.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", p.model},
            {"system_fingerprint", "lilims"},
            {"choices", Json::array({choice})}};
  if (p.include_usage) j["usage"] = nullptr;
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string usage_chunk_json(const Prepared& p, const std::string& id, int64_t created,
                             const runtime::GenerateResult& r) {
  return Json{{"id", id},
              {"object", p.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created},
              {"model", p.model},
              {"system_fingerprint", "lilims"},
              {"choices", Json::array()},
              {"usage", usage_of(r)}}
      .dump();
}

std::string models_json(const ServerInfo& info) {
  return Json{{"object", "list"},
              {"data", Json::array({{{"id", info.model_id},
                                     {"object", "model"},
                                     {"created", info.created},
                                     {"owned_by", "lilims"},
                                     {"context_length", info.n_ctx}}})}}
      .dump();
}

}  // namespace lilims::serve
