// Jump-forward (GenerateOptions::jump_forward): the bytes a schema forces
// are appended as tokens without sampling and evaluated in one block.
// SmolLM2 (byte-level BPE): stories260K's SentencePiece encoder puts a space
// before the forced bytes, so forced_tokens stops at once there.
#include <cstdio>
#include <iterator>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "runtime/engine.h"
#include "runtime/speculative.h"
#include "runtime/constrain/tools.h"
#include "test_util.h"
#include "tokenizer/chat.h"

using namespace lilims;
using J = nlohmann::json;

namespace {

const char* const kAppSchema =
    R"({"type":"object","properties":{"app":{"enum":["camera","calendar"]},)"
    R"("n":{"const":7}},"required":["app","n"],"additionalProperties":false})";

std::vector<runtime::Tool> repo_tools() {
  std::vector<runtime::Tool> tools;
  for (const char* t : {"open_app", "set_timer", "send_message", "take_photo", "navigate"}) {
    for (runtime::Tool& x : runtime::parse_tools(
             test::read_file(test::source_path(std::string("examples/tools/") + t + ".json")))) {
      tools.push_back(x);
    }
  }
  return tools;
}

}  // namespace

TEST(JumpForward, ForcedBytesFollowTheSchema) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh");
  auto model = runtime::Model::open(test::smollm2_path());
  runtime::SchemaConstraint sc(model->schema_cache().get(kAppSchema));
  // After ':' a space may follow or not: the forced run ends there.
  EXPECT_EQ(sc.forced_bytes(256), "{\"app\":");
  EXPECT_EQ(sc.forced_bytes(3), "{\"a");
  const auto feed = [&](const std::string& text) {
    for (int32_t id : model->tokenizer().encode(text, false, false)) ASSERT_TRUE(sc.advance(id)) << text;
  };
  feed("{\"app\": \"");
  EXPECT_EQ(sc.forced_bytes(256), "ca");  // camera and calendar share it
  feed("cal");
  EXPECT_EQ(sc.forced_bytes(256), "endar\",");
  feed("endar\", ");
  EXPECT_EQ(sc.forced_bytes(256), "\"n\":");
  feed("\"n\":");
  feed(" ");
  EXPECT_EQ(sc.forced_bytes(256), "7}");  // a const: to the end of the value
  // The tokens spell a prefix of the forced bytes exactly.
  runtime::SchemaConstraint fresh(model->schema_cache().get(kAppSchema));
  std::string spelled;
  for (int32_t id : runtime::forced_tokens(fresh, model->tokenizer(), model->pieces(), 256)) {
    spelled += model->pieces()[(size_t)id];
  }
  EXPECT_FALSE(spelled.empty());
  EXPECT_EQ(std::string("{\"app\":").compare(0, spelled.size(), spelled), 0) << spelled;
}

// Jump-forward changes which tokens spell the forced bytes, nothing else:
// with the same greedy choices up to a point, the first token where the two
// outputs differ is one jump-forward forced (found by replaying its output
// through forced_tokens, as the loop calls it).  Both outputs are values of
// the schema (SchemaGenerate.SmolLM2EveryOutputValidates checks them all with
// an independent validator, jump-forward on as by default).
TEST(JumpForward, SmolLM2DiffersOnlyAtForcedTokens) {
  const std::string path = test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  auto model = runtime::Model::open(path);
  runtime::SessionOptions so;
  so.n_ctx = 1024;
  so.n_threads = 2;
  const std::vector<runtime::Tool> tools = repo_tools();
  const std::string schema = runtime::tools_schema(tools);
  const char* const prompts[] = {"Open the camera.", "Set a timer for ten minutes.",
                                 "Text Bob that I am late.", "Take a selfie.",
                                 "Take me to the airport by bike."};
  int32_t forced_total = 0, identical = 0;
  for (const char* user : prompts) {
    const std::vector<int32_t> prompt = tok::encode_chat(
        model->tokenizer(), "chatml",
        {{"system", runtime::tools_system_prompt(tools)}, {"user", user}}, true, true, false);
    runtime::GenerateOptions go;
    go.json_schema = schema;
    go.max_tokens = 96;
    runtime::Session a(*model, so), b(*model, so);
    const runtime::GenerateResult jf = a.generate_tokens(prompt, go);
    go.jump_forward = false;
    const runtime::GenerateResult plain = b.generate_tokens(prompt, go);
    EXPECT_EQ(plain.n_forced, 0);
    ASSERT_EQ(jf.stop, runtime::StopReason::end_of_generation) << jf.text;
    const J v = J::parse(jf.text);
    EXPECT_TRUE(v.contains("name") && v.contains("arguments")) << jf.text;
    EXPECT_NO_THROW(J::parse(plain.text));
    // Replay: which of jf's tokens were forced.
    runtime::SchemaConstraint sc(model->schema_cache().get(schema));
    std::vector<bool> forced(jf.tokens.size(), false);
    for (size_t j = 0; j < jf.tokens.size();) {
      ASSERT_TRUE(sc.advance(jf.tokens[j++]));  // sampled
      for (int32_t f : runtime::forced_tokens(sc, model->tokenizer(), model->pieces(), 256)) {
        if (j >= jf.tokens.size() || jf.tokens[j] != f) break;
        forced[j] = true;
        ASSERT_TRUE(sc.advance(jf.tokens[j++]));
      }
    }
    int32_t n_forced = 0;
    for (bool f : forced) n_forced += f;
    EXPECT_EQ(n_forced, jf.n_forced) << user;
    forced_total += jf.n_forced;
    size_t d = 0;
    while (d < jf.tokens.size() && d < plain.tokens.size() && jf.tokens[d] == plain.tokens[d]) ++d;
    if (d == jf.tokens.size() && d == plain.tokens.size()) {
      ++identical;
    } else {
      ASSERT_LT(d, jf.tokens.size()) << user;
      EXPECT_TRUE(forced[d]) << user << ": first difference at token " << d << " which was sampled\n"
                             << jf.text << "\n" << plain.text;
    }
  }
  EXPECT_GT(forced_total, 5 * 5);
  std::printf("jump-forward: %d forced tokens, %d of %zu outputs token-identical to plain\n",
              forced_total, identical, std::size(prompts));
}

TEST(JumpForward, CapsStillClose) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh");
  auto model = runtime::Model::open(test::smollm2_path());
  // Caps from below the least that fits: a value that closes, forced or not.
  for (int32_t cap : {1, 4, 6, 7, 8, 9, 10, 12, 16, 24}) {
    runtime::SessionOptions so;
    so.n_ctx = 128;
    so.n_threads = 2;
    runtime::Session s(*model, so);
    runtime::GenerateOptions go;
    go.json_schema = kAppSchema;
    go.max_tokens = cap;
    runtime::GenerateResult r;
    try {
      r = s.generate("Pick an app: ", go);
    } catch (const Error& e) {
      EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT) << cap;
      continue;
    }
    EXPECT_EQ(r.stop, runtime::StopReason::end_of_generation) << cap;
    EXPECT_LE((int32_t)r.tokens.size(), cap);
    const J v = J::parse(r.text);
    EXPECT_EQ(v.at("n"), 7) << r.text;
    EXPECT_GT(r.n_forced, 0);
  }
}
