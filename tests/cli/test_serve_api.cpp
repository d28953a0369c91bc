// `lilims serve`'s request checks and response bodies without HTTP
// (tools/serve_api.h): every refusal is an OpenAI error object with the
// right status, code and param; accepted requests become the prompt and
// options the engine runs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/engine.h"
#include "test_util.h"
#include "tokenizer/chat.h"
#include "tools/serve_api.h"

namespace lilims {
namespace {

using Json = nlohmann::json;

class ServeApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (test::file_exists(test::smollm2_path())) model_ = runtime::Model::open(test::smollm2_path()).release();
  }
  static void TearDownTestSuite() {
    delete model_;
    model_ = nullptr;
  }
  void SetUp() override {
    if (!model_) GTEST_SKIP() << "missing " << test::smollm2_path() << " (scripts/fetch_model.sh)";
    info_.model_id = "smol";
    info_.n_ctx = 256;
  }
  // The refusal of `body` (fails the test when it is accepted).
  serve::ApiError refused(const std::string& body, serve::Endpoint ep = serve::Endpoint::chat) {
    serve::Prepared p;
    serve::ApiError e;
    EXPECT_FALSE(serve::prepare(ep, *model_, info_, body, p, e)) << body;
    const Json j = Json::parse(serve::error_json(e));
    EXPECT_TRUE(j.at("error").at("message").is_string());
    EXPECT_TRUE(j.at("error").at("type").is_string());
    return e;
  }
  serve::Prepared accepted(const std::string& body, serve::Endpoint ep = serve::Endpoint::chat) {
    serve::Prepared p;
    serve::ApiError e;
    EXPECT_TRUE(serve::prepare(ep, *model_, info_, body, p, e)) << body << ": " << e.message;
    return p;
  }
  static runtime::Model* model_;
  serve::ServerInfo info_;
};
runtime::Model* ServeApi::model_ = nullptr;

const char* kHi = R"({"messages":[{"role":"user","content":"hi"}]})";

std::string with(const std::string& field_json) {
  return std::string(R"({"messages":[{"role":"user","content":"hi"}],)") + field_json + "}";
}

TEST_F(ServeApi, MalformedBodies) {
  for (const char* body : {"", "{", "{\"messages\": [}", "[1,2]", "\"text\"", "null", "{\"a\":1}}"}) {
    const serve::ApiError e = refused(body);
    EXPECT_EQ(e.status, 400);
  }
  EXPECT_EQ(refused("{").code, "invalid_json");
  EXPECT_EQ(refused("[1]").code, "invalid_json");
  EXPECT_EQ(refused("{}").param, "messages");
  EXPECT_EQ(refused("{\"messages\":[]}").param, "messages");
  // Bytes that are not UTF-8 in a message.
  EXPECT_EQ(refused(std::string("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}")).status, 400);
}

TEST_F(ServeApi, FieldsOfTheWrongType) {
  const std::pair<const char*, const char*> cases[] = {
      {"temperature", "\"hot\""}, {"top_p", "[1]"},      {"max_tokens", "\"5\""},
      {"max_tokens", "2.5"},      {"max_completion_tokens", "{}"}, {"stream", "1"},
      {"stop", "5"},              {"stop", "[1]"},      {"seed", "1.5"},
      {"n", "\"1\""},             {"tools", "{}"},      {"tool_choice", "5"},
      {"response_format", "\"json\""}, {"logit_bias", "[]"}, {"stream_options", "true"},
      {"model", "7"},             {"frequency_penalty", "\"x\""}};
  for (const auto& [field, value] : cases) {
    const serve::ApiError e = refused(with("\"" + std::string(field) + "\":" + value));
    EXPECT_EQ(e.status, 400) << field;
    EXPECT_EQ(e.param.rfind(field, 0), 0u) << field << " -> " << e.param;
  }
  EXPECT_EQ(refused(R"({"messages":[{"role":5,"content":"hi"}]})").param, "messages[0].role");
  EXPECT_EQ(refused(R"({"messages":[{"role":"user","content":5}]})").param, "messages[0].content");
  EXPECT_EQ(refused(R"({"messages":[{"role":"user"}]})").param, "messages[0].content");
  EXPECT_EQ(refused(R"({"messages":["hi"]})").param, "messages[0]");
  EXPECT_EQ(refused(R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})").status, 400);
}

TEST_F(ServeApi, ValuesOutOfRange) {
  for (const char* f : {R"("max_tokens":-1)", R"("max_tokens":0)", R"("max_completion_tokens":-7)",
                        R"("temperature":-0.1)", R"("temperature":2.5)", R"("top_p":1.01)", R"("n":2)",
                        R"("frequency_penalty":3)", R"("stop":["a","b","c","d","e"])", R"("stop":"")",
                        R"("logit_bias":{"x":1})", R"("logit_bias":{"5":500})",
                        R"("max_tokens":99999999999999999999)"}) {
    const serve::ApiError e = refused(with(f));
    EXPECT_EQ(e.status, 400) << f;
  }
  EXPECT_EQ(refused(with(R"("max_tokens":-1)")).code, "invalid_value");
  EXPECT_EQ(refused(with(R"("max_tokens":-1)")).param, "max_tokens");
}

TEST_F(ServeApi, UnknownModelIs404) {
  const serve::ApiError e = refused(with(R"("model":"gpt-4o")"));
  EXPECT_EQ(e.status, 404);
  EXPECT_EQ(e.code, "model_not_found");
  EXPECT_EQ(accepted(with(R"("model":"smol")")).model, "smol");
  EXPECT_EQ(accepted(kHi).model, "smol");
}

TEST_F(ServeApi, SchemasAndTools) {
  EXPECT_EQ(refused(with(R"("response_format":{"type":"json_schema","json_schema":{"schema":{"type":"nonsense"}}})")).code,
            "invalid_json_schema");
  EXPECT_EQ(refused(with(R"("response_format":{"type":"yaml"})")).param, "response_format.type");
  EXPECT_EQ(refused(with(R"("response_format":{"type":"json_object"},"stop":"x")")).param, "stop");
  const serve::Prepared js =
      accepted(with(R"("response_format":{"type":"json_schema","json_schema":{"name":"p","schema":{"type":"object","properties":{"a":{"type":"integer"}}}}})"));
  EXPECT_EQ(Json::parse(js.opt.json_schema)["properties"]["a"]["type"], "integer");
  EXPECT_TRUE(accepted(with(R"("response_format":{"type":"json_object"})")).opt.json);

  const std::string tools =
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}])";
  const serve::Prepared autop = accepted(with(tools));
  EXPECT_TRUE(autop.tools);
  EXPECT_FALSE(autop.opt.constraint_trigger.empty());  // auto: text until the call's mark
  const serve::Prepared req = accepted(with(tools + R"(,"tool_choice":"required")"));
  EXPECT_TRUE(req.opt.constraint_trigger.empty());  // required: the prompt ends with the mark
  EXPECT_GT(req.prompt.size(), autop.prompt.size());
  EXPECT_FALSE(accepted(with(tools + R"(,"tool_choice":"none")")).tools);
  EXPECT_TRUE(accepted(with(tools + R"(,"tool_choice":{"type":"function","function":{"name":"f"}})")).tools);
  EXPECT_EQ(refused(with(tools + R"(,"tool_choice":{"type":"function","function":{"name":"g"}})")).param, "tool_choice");
  EXPECT_EQ(refused(with(R"("tool_choice":"required")")).param, "tool_choice");
  EXPECT_EQ(refused(with(R"("tools":[{"type":"function","function":{"parameters":{}}}])")).param, "tools");
  EXPECT_EQ(refused(with(R"("tools":[{"type":"retrieval"}])")).param, "tools[0].type");
  EXPECT_EQ(refused(with(tools + R"(,"response_format":{"type":"json_object"})")).param, "response_format");
}

TEST_F(ServeApi, PromptIsTheChatTemplatesRendering) {
  const serve::Prepared p = accepted(
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":[{"type":"text","text":"Hello"}]}],"max_tokens":7,"stop":["\n"],"seed":3,"temperature":0})");
  const std::vector<int32_t> want = tok::encode_chat(model_->tokenizer(), model_->chat_template(),
                                                     {{"system", "Be brief."}, {"user", "Hello"}}, true, true);
  EXPECT_EQ(p.prompt, want);
  EXPECT_EQ(p.opt.max_tokens, 7);
  EXPECT_EQ(p.opt.stop, std::vector<std::string>{"\n"});
  EXPECT_EQ(p.opt.sampling.seed, 3u);
  EXPECT_EQ(p.opt.sampling.temperature, 0.0f);
  EXPECT_EQ(accepted(kHi).opt.max_tokens, 0);  // chat: until the end or a full context
  EXPECT_EQ(accepted(with(R"("max_tokens":9,"max_completion_tokens":5)")).opt.max_tokens, 5);
  // developer is system; tool answers and earlier calls are accepted.
  accepted(R"({"messages":[{"role":"developer","content":"x"},{"role":"user","content":"q"},
              {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}}]},
              {"role":"tool","tool_call_id":"c","content":"3"}]})");
}

TEST_F(ServeApi, PromptLongerThanTheContext) {
  std::string words;
  for (int i = 0; i < 400; ++i) words += "hello ";
  const serve::ApiError e = refused(R"({"messages":[{"role":"user","content":")" + words + "\"}]}");
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.code, "context_length_exceeded");
  EXPECT_EQ(refused("{\"prompt\":\"" + words + "\"}", serve::Endpoint::completions).code,
            "context_length_exceeded");
}

TEST_F(ServeApi, Completions) {
  const serve::Prepared p = accepted(R"({"prompt":"Once upon","max_tokens":3})", serve::Endpoint::completions);
  EXPECT_EQ(p.prompt, model_->tokenizer().encode("Once upon", true, true));
  EXPECT_EQ(accepted(R"({"prompt":"x"})", serve::Endpoint::completions).opt.max_tokens, 16);
  EXPECT_EQ(accepted(R"({"prompt":[1,2,3]})", serve::Endpoint::completions).prompt, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(refused(R"({"prompt":[1,-2]})", serve::Endpoint::completions).param, "prompt");
  EXPECT_EQ(refused(R"({"prompt":5})", serve::Endpoint::completions).param, "prompt");
  EXPECT_EQ(refused(R"({"prompt":["a","b"]})", serve::Endpoint::completions).param, "prompt");
  EXPECT_EQ(refused(R"({})", serve::Endpoint::completions).param, "prompt");
}

TEST_F(ServeApi, ResponsesAndChunks) {
  serve::Prepared p = accepted(kHi);
  runtime::GenerateResult r;
  r.text = "Hello!";
  r.tokens = {1, 2};
  r.n_prompt_tokens = 10;
  r.n_reused_tokens = 4;
  r.stop = runtime::StopReason::end_of_generation;
  const serve::Answer a = serve::make_answer(p, r);
  EXPECT_EQ(a.finish_reason, "stop");
  const Json j = Json::parse(serve::response_json(p, r, a, "chatcmpl-1", 5));
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "Hello!");
  EXPECT_EQ(j["usage"]["total_tokens"], 12);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 4);
  r.stop = runtime::StopReason::max_tokens;
  EXPECT_EQ(serve::make_answer(p, r).finish_reason, "length");
  const Json c = Json::parse(serve::chunk_json(p, "chatcmpl-1", 5, true, "", nullptr, ""));
  EXPECT_EQ(c["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  // A required call parsed into tool_calls.
  serve::Prepared t = accepted(with(
      R"("tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"x":{"type":"integer"}}}}}],"tool_choice":"required")"));
  runtime::GenerateResult call;
  call.text = R"([{"name": "f", "arguments": {"x": 3}}]</tool_call>)";
  call.value_offset = 0;
  call.stop = runtime::StopReason::end_of_generation;
  if (t.tool_format != runtime::ToolFormat::smollm2) call.text = R"({"name": "f", "arguments": {"x": 3}})";
  const serve::Answer ca = serve::make_answer(t, call);
  ASSERT_EQ(ca.calls.size(), 1u);
  EXPECT_EQ(ca.calls[0].name, "f");
  EXPECT_EQ(Json::parse(ca.calls[0].arguments)["x"], 3);
  EXPECT_EQ(ca.finish_reason, "tool_calls");
  const Json tj = Json::parse(serve::response_json(t, call, ca, "chatcmpl-2", 5));
  EXPECT_TRUE(tj["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(tj["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  // The error body.
  const Json e = Json::parse(serve::error_json({429, "rate_limit_error", "busy", "", "rate_limit_exceeded"}));
  EXPECT_TRUE(e["error"]["param"].is_null());
  EXPECT_EQ(e["error"]["code"], "rate_limit_exceeded");
}

}  // namespace
}  // namespace lilims
