// Jump-forward and prompt-lookup decoding through the public header, and
// callers built against the header before their fields existed.
#include <cstddef>
#include <cstring>
#include <string>

#include "lilims/lilims.h"
#include "test_util.h"

namespace {

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

struct Handles {
  lilims_model* m = nullptr;
  lilims_session* s = nullptr;
  Handles(const std::string& path, int32_t n_ctx) {
    EXPECT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
    lilims_session_params sp = lilims_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 2;
    EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  }
  ~Handles() {
    lilims_session_free(s);
    lilims_model_free(m);
  }
};

int collect(void* ud, lilims_token, const char* text, size_t len) {
  static_cast<std::string*>(ud)->append(text, len);
  return 0;
}

std::string generate(const std::string& path, const char* prompt, lilims_generate_params gp,
                     lilims_generate_stats* st) {
  Handles h(path, 256);
  std::string text;
  gp.on_token = collect;
  gp.user_data = &text;
  EXPECT_EQ(lilims_generate(h.s, prompt, &gp, st), LILIMS_OK) << lilims_last_error();
  return text;
}

const char* const kRepeats =
    "Once upon a time, there was a little girl named Lily. Once upon a time, there was a little";

}  // namespace

TEST(CApiSpeculative, DraftsGiveTheSameTextAndCount) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  lilims_generate_params gp = lilims_generate_default_params();
  EXPECT_EQ(gp.n_draft, 0);
  EXPECT_EQ(gp.jump_forward, 1);
  gp.max_tokens = 64;
  gp.sampling.temperature = 0.0f;
  lilims_generate_stats plain_st, st;
  std::memset(&plain_st, 0, sizeof plain_st);
  plain_st.struct_size = sizeof plain_st;
  st = plain_st;
  const std::string plain = generate(stories_path(), kRepeats, gp, &plain_st);
  gp.n_draft = 6;
  EXPECT_EQ(generate(stories_path(), kRepeats, gp, &st), plain);
  EXPECT_EQ(st.n_generated_tokens, plain_st.n_generated_tokens);
  EXPECT_EQ(plain_st.n_drafted_tokens, 0);
  EXPECT_GT(st.n_drafted_tokens, 0);
  EXPECT_GT(st.n_accepted_tokens, 0);
  EXPECT_LE(st.n_accepted_tokens, st.n_drafted_tokens);
  EXPECT_EQ(st.n_forced_tokens, 0);

  Handles h(stories_path(), 64);
  gp.n_draft = -1;
  EXPECT_EQ(lilims_generate(h.s, "Once", &gp, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("[generate] n_draft"), std::string::npos);
}

// A caller built before jump_forward and n_draft: the defaults (on, off),
// and the stats fields it does not have are left alone.
TEST(CApiSpeculative, OlderStructsGetTheDefaults) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  lilims_tool tool{"open_app", "Open an app on the phone.",
                   R"({"type":"object","properties":{"app":{"enum":["camera","photos","maps"]}},)"
                   R"("required":["app"],"additionalProperties":false})"};
  const char* prompt =
      "<|im_start|>user\nOpen the camera.<|im_end|>\n<|im_start|>assistant\n";
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 64;
  gp.sampling.temperature = 0.0f;
  gp.tools = &tool;
  gp.n_tools = 1;
  gp.n_draft = 99;  // beyond the old struct: never read
  gp.jump_forward = 0;
  gp.struct_size = offsetof(lilims_generate_params, jump_forward);
  lilims_generate_stats st;
  std::memset(&st, 0x5a, sizeof st);
  st.struct_size = offsetof(lilims_generate_stats, n_forced_tokens);
  const std::string with = generate(path, prompt, gp, &st);
  EXPECT_EQ(std::memcmp(&st.n_forced_tokens, "\x5a\x5a\x5a\x5a", 4), 0);
  EXPECT_EQ(with.rfind("{\"name\":", 0), 0u) << with;

  gp.struct_size = sizeof gp;
  gp.n_draft = 0;
  gp.jump_forward = 1;
  lilims_generate_stats on;
  std::memset(&on, 0, sizeof on);
  on.struct_size = sizeof on;
  EXPECT_EQ(generate(path, prompt, gp, &on), with);  // the old caller got jump-forward too
  EXPECT_GT(on.n_forced_tokens, 3);
  gp.jump_forward = 0;
  lilims_generate_stats off = on;
  const std::string without = generate(path, prompt, gp, &off);
  EXPECT_EQ(off.n_forced_tokens, 0);
  EXPECT_EQ(without.rfind("{\"name\":", 0), 0u) << without;
}
