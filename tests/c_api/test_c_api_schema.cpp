// JSON Schema and tools through the public header: the answer parses and
// names one of the tools, bad schemas and caps fail before any work, the
// parameters struct of 0.1.0's header is still accepted.
#include <cstddef>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "lilims/lilims.h"
#include "test_util.h"

namespace {

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

lilims_model* open_model(const std::string& path) {
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
  return m;
}

lilims_session* new_session(lilims_model* m, int32_t n_ctx) {
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = n_ctx;
  sp.n_threads = 1;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  return s;
}

struct Collected {
  std::string text;
};

int collect(void* ud, lilims_token, const char* text, size_t len) {
  static_cast<Collected*>(ud)->text.append(text, len);
  return 0;
}

const lilims_tool kTools[] = {
    {"open_app", "Open an app.",
     R"({"type":"object","properties":{"app":{"enum":["camera","maps","music"]}},"required":["app"]})"},
    {"set_timer", "Start a timer.",
     R"({"type":"object","properties":{"seconds":{"type":"integer","minimum":1,"maximum":3600}},"required":["seconds"]})"},
    {"take_photo", nullptr, nullptr},
};

TEST(CApiSchema, ToolCallWithSmolLM2) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  lilims_model* m = open_model(path);
  ASSERT_NE(m, nullptr);
  lilims_session* s = new_session(m, 512);
  size_t need = 0;
  ASSERT_EQ(lilims_tools_prompt(kTools, 3, nullptr, 0, &need), LILIMS_ERR_INVALID_ARGUMENT);
  std::string system(need + 1, '\0');
  ASSERT_EQ(lilims_tools_prompt(kTools, 3, &system[0], system.size(), &need), LILIMS_OK)
      << lilims_last_error();
  system.resize(need);
  EXPECT_NE(system.find("\"name\":\"set_timer\""), std::string::npos) << system;
  const lilims_chat_message msgs[] = {{"system", system.c_str()}, {"user", "Open the camera."}};
  size_t len = 0;
  lilims_chat_apply_template(m, nullptr, msgs, 2, 1, nullptr, 0, &len);
  std::string prompt(len + 1, '\0');
  ASSERT_EQ(lilims_chat_apply_template(m, nullptr, msgs, 2, 1, &prompt[0], prompt.size(), &len),
            LILIMS_OK);
  prompt.resize(len);
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 64;
  gp.sampling.temperature = 0.0f;
  gp.tools = kTools;
  gp.n_tools = 3;
  Collected col;
  gp.on_token = collect;
  gp.user_data = &col;
  lilims_generate_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  ASSERT_EQ(lilims_generate(s, prompt.c_str(), &gp, &st), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(st.stop_reason, 1) << col.text;
  EXPECT_GT(st.mask_seconds, 0.0);
  const nlohmann::json j = nlohmann::json::parse(col.text);
  ASSERT_TRUE(j.is_object()) << col.text;
  const std::string name = j.at("name").get<std::string>();
  EXPECT_TRUE(name == "open_app" || name == "set_timer" || name == "take_photo") << col.text;
  EXPECT_TRUE(j.at("arguments").is_object()) << col.text;
  std::printf("answer: %s\n", col.text.c_str());
  lilims_session_free(s);
  lilims_model_free(m);
}

// The model's own tool format (SmolLM2: a list of calls between <tool_call>
// marks): described with lilims_tools_prompt_format, the call required
// (the prompt ends with the opening mark), parsed back with
// lilims_parse_tool_calls into name and arguments.
TEST(CApiSchema, SmolLM2CallInItsOwnFormat) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  lilims_model* m = open_model(path);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(lilims_model_tool_format(m), LILIMS_TOOL_FORMAT_SMOLLM2);
  EXPECT_EQ(lilims_model_tool_format(nullptr), -1);
  size_t need = 0;
  EXPECT_EQ(lilims_tools_prompt_format(99, kTools, 3, 0, nullptr, 0, &need), LILIMS_ERR_INVALID_ARGUMENT);
  lilims_tools_prompt_format(LILIMS_TOOL_FORMAT_SMOLLM2, kTools, 3, 0, nullptr, 0, &need);
  std::string system(need + 1, '\0');
  ASSERT_EQ(lilims_tools_prompt_format(LILIMS_TOOL_FORMAT_SMOLLM2, kTools, 3, 0, &system[0], system.size(), &need),
            LILIMS_OK) << lilims_last_error();
  system.resize(need);
  EXPECT_NE(system.find("<tools>[{\"name\":\"open_app\""), std::string::npos) << system;
  const lilims_chat_message msgs[] = {{"system", system.c_str()}, {"user", "Start a timer for two minutes."}};
  size_t len = 0;
  lilims_chat_apply_template(m, nullptr, msgs, 2, 1, nullptr, 0, &len);
  std::string prompt(len + 1, '\0');
  ASSERT_EQ(lilims_chat_apply_template(m, nullptr, msgs, 2, 1, &prompt[0], prompt.size(), &len), LILIMS_OK);
  prompt.resize(len);
  lilims_session* s = new_session(m, 1024);
  lilims_generate_params gp = lilims_generate_default_params();
  EXPECT_EQ(gp.tool_format, LILIMS_TOOL_FORMAT_GENERIC);
  EXPECT_EQ(gp.tool_choice, 0);
  gp.max_tokens = 96;
  gp.tools = kTools;
  gp.n_tools = 3;
  gp.tool_format = LILIMS_TOOL_FORMAT_SMOLLM2;
  Collected col;
  gp.on_token = collect;
  gp.user_data = &col;
  lilims_generate_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  ASSERT_EQ(lilims_generate(s, prompt.c_str(), &gp, &st), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(st.stop_reason, 1) << col.text;
  EXPECT_NE(col.text.find("]</tool_call>"), std::string::npos) << col.text;
  lilims_parse_tool_calls(LILIMS_TOOL_FORMAT_SMOLLM2, col.text.data(), col.text.size(), nullptr, 0, &need);
  std::string calls(need + 1, '\0');
  ASSERT_EQ(lilims_parse_tool_calls(LILIMS_TOOL_FORMAT_SMOLLM2, col.text.data(), col.text.size(), &calls[0],
                                    calls.size(), &need), LILIMS_OK) << lilims_last_error();
  calls.resize(need);
  const nlohmann::json j = nlohmann::json::parse(calls);
  ASSERT_TRUE(j.is_array() && !j.empty()) << calls;
  // Which tool a 135M model picks is measured elsewhere (README, "Tool formats"); here:
  // a call of one of the tools, with an object of arguments.
  const std::string name = j[0].at("name").get<std::string>();
  EXPECT_TRUE(name == "open_app" || name == "set_timer" || name == "take_photo") << col.text;
  EXPECT_TRUE(j[0].at("arguments").is_object()) << col.text;
  std::printf("answer: %s -> %s\n", col.text.c_str(), calls.c_str());
  // Misuse: an unknown choice or format, a trigger of one's own with auto.
  gp.tool_choice = 2;
  EXPECT_EQ(lilims_generate(s, "", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  gp.tool_choice = 1;
  gp.constraint_trigger = "CALL:";
  EXPECT_EQ(lilims_generate(s, "", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  gp.constraint_trigger = nullptr;
  gp.tool_format = 7;
  EXPECT_EQ(lilims_generate(s, "", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  // Plain text and broken calls.
  EXPECT_EQ(lilims_parse_tool_calls(LILIMS_TOOL_FORMAT_HERMES, "No tool fits.", 13, &calls[0], calls.size(), &need),
            LILIMS_OK);
  EXPECT_EQ(std::string(calls.c_str()), "[]");
  EXPECT_EQ(lilims_parse_tool_calls(LILIMS_TOOL_FORMAT_HERMES, "<tool_call>{\"na", 15, &calls[0], calls.size(), &need),
            LILIMS_ERR_BAD_FORMAT);
  lilims_session_free(s);
  lilims_model_free(m);
}

TEST(CApiSchema, RefusedBeforeAnyWork) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  lilims_model* m = open_model(stories_path());
  ASSERT_NE(m, nullptr);
  lilims_session* s = new_session(m, 128);
  const lilims_token ids[] = {1, 400};
  ASSERT_EQ(lilims_session_eval(s, ids, 2), LILIMS_OK);
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 32;
  struct Bad {
    const char* schema;
    const char* says;
  };
  for (const Bad& b : {Bad{"{\"type\":", "[json-schema] malformed schema"},
                       Bad{R"({"type":"object","allOf":[]})", "unsupported keyword 'allOf'"},
                       Bad{"", "json_schema is empty"}}) {
    gp.json_schema = b.schema;
    EXPECT_EQ(lilims_generate(s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT) << b.schema;
    EXPECT_NE(std::string(lilims_last_error()).find(b.says), std::string::npos) << lilims_last_error();
    EXPECT_EQ(lilims_session_n_past(s), 2);
  }
  // A value of this schema needs more than 4 tokens.
  gp.json_schema = R"({"type":"object","properties":{"answer":{"type":"string"}},"required":["answer"]})";
  gp.max_tokens = 4;
  EXPECT_EQ(lilims_generate(s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("too small for a value of the schema"), std::string::npos)
      << lilims_last_error();
  EXPECT_EQ(lilims_session_n_past(s), 2);
  gp.max_tokens = 32;
  gp.json_object = 1;
  EXPECT_EQ(lilims_generate(s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("exclude each other"), std::string::npos);
  gp.json_object = 0;
  gp.json_schema = nullptr;
  gp.n_tools = 1;
  gp.tools = nullptr;
  EXPECT_EQ(lilims_generate(s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  const lilims_tool unnamed[] = {{nullptr, nullptr, nullptr}};
  gp.tools = unnamed;
  EXPECT_EQ(lilims_generate(s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("[tools] tool 0 has a NULL name"), std::string::npos);
  EXPECT_EQ(lilims_session_n_past(s), 2);
  lilims_session_free(s);
  lilims_model_free(m);
}

// The schema holds on a tiny model too: stories260K's answer still parses
// and validates (a string of digits and lowercase letters, 3 to 8 long).
TEST(CApiSchema, TinyModelKeepsTheSchema) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  lilims_model* m = open_model(stories_path());
  ASSERT_NE(m, nullptr);
  lilims_session* s = new_session(m, 256);
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 40;
  gp.sampling.temperature = 1.0f;
  gp.json_schema = R"({"type":"object","properties":{"id":{"type":"string","pattern":"^[a-z0-9]{3,8}$"},"n":{"type":"integer","minimum":-3,"maximum":3}},"required":["id","n"]})";
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    gp.sampling.seed = seed;
    Collected col;
    gp.on_token = collect;
    gp.user_data = &col;
    ASSERT_EQ(lilims_session_reset(s), LILIMS_OK);
    ASSERT_EQ(lilims_generate(s, "Once upon a time", &gp, nullptr), LILIMS_OK) << lilims_last_error();
    const nlohmann::json j = nlohmann::json::parse(col.text);
    const std::string id = j.at("id").get<std::string>();
    EXPECT_TRUE(id.size() >= 3 && id.size() <= 8) << col.text;
    for (char c : id) EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) << col.text;
    EXPECT_LE(std::abs(j.at("n").get<int>()), 3) << col.text;
  }
  lilims_session_free(s);
  lilims_model_free(m);
}

// A caller built against 0.1.0's header passes lilims_generate_params
// without json_schema and tools, and stats without mask_seconds: accepted,
// and the bytes after the struct it knew are not read.
TEST(CApiSchema, GenerateParamsFromTheOlderHeader) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  lilims_model* m = open_model(stories_path());
  ASSERT_NE(m, nullptr);
  lilims_session* s = new_session(m, 128);
  lilims_generate_params gp = lilims_generate_default_params();
  gp.struct_size = offsetof(lilims_generate_params, json_schema);
  gp.max_tokens = 4;
  gp.json_schema = "this is not read";
  gp.n_tools = 7;  // not read either
  lilims_generate_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = offsetof(lilims_generate_stats, mask_seconds);
  st.mask_seconds = -1.0;
  ASSERT_EQ(lilims_generate(s, "Once", &gp, &st), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(st.n_generated_tokens, 4);
  EXPECT_EQ(st.mask_seconds, -1.0);  // beyond the struct the caller knew: untouched
  gp.struct_size = offsetof(lilims_generate_params, json_schema) - 1;
  EXPECT_EQ(lilims_generate(s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  lilims_session_free(s);
  lilims_model_free(m);
}

}  // namespace

// A lazy constraint: free text, the trigger, then the call and the closing
// text; the stats say where the value starts.  A caller built before the
// fields existed gets the value at once, and its stats are left alone.
TEST(CApiSchema, LazyToolCallAfterText) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  lilims_model* m = open_model(path);
  ASSERT_NE(m, nullptr);
  lilims_session* s = new_session(m, 512);
  const char* prompt = "<|im_start|>user\nOpen the camera.<|im_end|>\n<|im_start|>assistant\n";
  lilims_generate_params gp = lilims_generate_default_params();
  EXPECT_EQ(gp.constraint_trigger, nullptr);
  EXPECT_EQ(gp.constraint_close, nullptr);
  gp.max_tokens = 64;
  gp.sampling.temperature = 0.0f;
  gp.tools = kTools;
  gp.n_tools = 2;
  gp.constraint_trigger = "camera";  // SmolLM2 answers "The camera is ..." here
  gp.constraint_close = "\nDone.";
  Collected c;
  gp.on_token = collect;
  gp.user_data = &c;
  lilims_generate_stats st;
  std::memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  ASSERT_EQ(lilims_generate(s, prompt, &gp, &st), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(st.constraint_triggered, 1) << c.text;
  EXPECT_EQ(st.stop_reason, 1);
  ASSERT_GT(st.value_offset, 0) << c.text;
  ASSERT_GE(c.text.size(), (size_t)st.value_offset + 6);
  EXPECT_NE(c.text.substr(0, (size_t)st.value_offset).find("camera"), std::string::npos) << c.text;
  EXPECT_EQ(c.text.substr(c.text.size() - 6), "\nDone.");
  const auto call = nlohmann::json::parse(
      c.text.substr((size_t)st.value_offset, c.text.size() - 6 - (size_t)st.value_offset));
  // Which tool the 135M model picks here is its judgement (it moves with
  // the rounding of the kernel path at hand); the value is a call of one of
  // the two tools with its required argument in range.
  if (call["name"] == "open_app") {
    EXPECT_TRUE(call["arguments"]["app"].is_string()) << c.text;
  } else {
    ASSERT_EQ(call["name"], "set_timer") << c.text;
    const int64_t sec = call["arguments"]["seconds"].get<int64_t>();
    EXPECT_TRUE(sec >= 1 && sec <= 3600) << c.text;
  }

  // Without a trigger the value starts at byte 0.
  lilims_session_reset(s);
  gp.constraint_trigger = nullptr;
  c.text.clear();
  ASSERT_EQ(lilims_generate(s, prompt, &gp, &st), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(st.constraint_triggered, 0);
  EXPECT_EQ(st.value_offset, 0);
  EXPECT_EQ(c.text.rfind("{\"name\":", 0), 0u) << c.text;

  // The older struct: the trigger is not read.
  lilims_session_reset(s);
  gp.constraint_trigger = "camera";
  gp.struct_size = offsetof(lilims_generate_params, constraint_trigger);
  c.text.clear();
  lilims_generate_stats old;
  std::memset(&old, 0x5a, sizeof old);
  old.struct_size = offsetof(lilims_generate_stats, constraint_triggered);
  ASSERT_EQ(lilims_generate(s, prompt, &gp, &old), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(c.text.rfind("{\"name\":", 0), 0u) << c.text;
  EXPECT_EQ(std::memcmp(&old.constraint_triggered, "\x5a\x5a\x5a\x5a", 4), 0);

  // A trigger without a schema is refused before any work.
  lilims_session_reset(s);
  gp.struct_size = sizeof gp;
  gp.tools = nullptr;
  gp.n_tools = 0;
  EXPECT_EQ(lilims_generate(s, prompt, &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("constraint_trigger"), std::string::npos);
  lilims_session_free(s);
  lilims_model_free(m);
}
