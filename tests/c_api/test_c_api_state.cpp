// Truncating a session, reading its tokens, and saving / restoring its state
// through the public header only: capacity rules, statuses and messages, a
// refused state that leaves the session as it was, busy sessions.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "lilims/lilims.h"
#include "test_util.h"

namespace {

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

#define REQUIRE_STORIES() \
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md")

struct Fixture {
  lilims_model* model = nullptr;
  std::vector<lilims_session*> sessions;
  ~Fixture() {
    for (lilims_session* s : sessions) lilims_session_free(s);
    lilims_model_free(model);
  }
  lilims_session* session(int32_t n_ctx = 128) {
    lilims_session_params sp = lilims_session_default_params();
    sp.n_ctx = n_ctx;
    sp.n_threads = 1;
    lilims_session* s = nullptr;
    EXPECT_EQ(lilims_session_create(model, &sp, &s), LILIMS_OK) << lilims_last_error();
    sessions.push_back(s);
    return s;
  }
};

void open(Fixture& f, const std::string& path) {
  ASSERT_EQ(lilims_model_open(path.c_str(), nullptr, &f.model), LILIMS_OK) << lilims_last_error();
}

std::vector<lilims_token> tokens_of(const lilims_session* s) {
  size_t n = 0;
  lilims_session_tokens(s, nullptr, 0, &n);  // the count only
  std::vector<lilims_token> t(n);
  EXPECT_EQ(lilims_session_tokens(s, t.data(), t.size(), &n), LILIMS_OK) << lilims_last_error();
  return t;
}

std::vector<float> logits_of(const lilims_session* s, int32_t n_vocab) {
  const float* l = lilims_session_logits(s);
  return l ? std::vector<float>(l, l + n_vocab) : std::vector<float>();
}

std::vector<uint8_t> save(lilims_session* s) {
  size_t need = 0;
  EXPECT_EQ(lilims_session_state_size(s, &need), LILIMS_OK) << lilims_last_error();
  std::vector<uint8_t> b(need);
  size_t written = 0;
  EXPECT_EQ(lilims_session_save_state(s, b.data(), b.size(), &written), LILIMS_OK)
      << lilims_last_error();
  EXPECT_EQ(written, need);
  return b;
}

int32_t n_vocab_of(const lilims_model* m) {
  lilims_model_info info;
  info.struct_size = sizeof info;
  EXPECT_EQ(lilims_model_get_info(m, &info), LILIMS_OK);
  return info.n_vocab;
}

TEST(CApiState, TruncateAndTokens) {
  REQUIRE_STORIES();
  Fixture f;
  open(f, stories_path());
  lilims_session* s = f.session();
  const lilims_token ids[] = {1, 400, 401, 402, 403};
  ASSERT_EQ(lilims_session_eval(s, ids, 5), LILIMS_OK);
  EXPECT_EQ(tokens_of(s), std::vector<lilims_token>(ids, ids + 5));

  // The capacity rule of lilims_tokenize.
  size_t n = 0;
  lilims_token small[4] = {0, 0, 0, 0};
  EXPECT_EQ(lilims_session_tokens(s, small, 4, &n), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(lilims_session_tokens(s, nullptr, 8, &n), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_tokens(s, small, 4, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_tokens(nullptr, small, 4, &n), LILIMS_ERR_INVALID_ARGUMENT);

  // Out of range: refused, nothing changes.
  EXPECT_EQ(lilims_session_truncate(s, 6), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(lilims_last_error()).rfind("[session]", 0), 0u) << lilims_last_error();
  EXPECT_EQ(lilims_session_truncate(s, -1), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_truncate(nullptr, 1), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_n_past(s), 5);
  EXPECT_NE(lilims_session_logits(s), nullptr);

  EXPECT_EQ(lilims_session_truncate(s, 5), LILIMS_OK);  // keeping everything is allowed
  ASSERT_EQ(lilims_session_truncate(s, 2), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(lilims_session_n_past(s), 2);
  EXPECT_EQ(lilims_session_logits(s), nullptr);  // until the next eval
  EXPECT_EQ(tokens_of(s), (std::vector<lilims_token>{1, 400}));

  // Continuing after a truncate computes what a fresh session computes.
  const lilims_token rest[] = {500, 501};
  ASSERT_EQ(lilims_session_eval(s, rest, 2), LILIMS_OK);
  lilims_session* fresh = f.session();
  const lilims_token all[] = {1, 400, 500, 501};
  ASSERT_EQ(lilims_session_eval(fresh, all, 4), LILIMS_OK);
  const int32_t n_vocab = n_vocab_of(f.model);
  EXPECT_EQ(logits_of(s, n_vocab), logits_of(fresh, n_vocab));
  ASSERT_EQ(lilims_session_truncate(s, 0), LILIMS_OK);
  EXPECT_EQ(lilims_session_n_past(s), 0);
}

TEST(CApiState, BufferAndFileRoundTrip) {
  REQUIRE_STORIES();
  Fixture f;
  open(f, stories_path());
  const int32_t n_vocab = n_vocab_of(f.model);
  lilims_session* a = f.session(128);
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 8;
  gp.sampling.temperature = 0.0f;
  ASSERT_EQ(lilims_generate(a, "Once upon a time", &gp, nullptr), LILIMS_OK) << lilims_last_error();

  // Size query with a NULL buffer, then a buffer one byte short.
  size_t need = 0, written = 0;
  EXPECT_EQ(lilims_session_save_state(a, nullptr, 0, &written), LILIMS_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(lilims_session_state_size(a, &need), LILIMS_OK);
  EXPECT_EQ(written, need);
  std::vector<uint8_t> short_buf(need - 1);
  EXPECT_EQ(lilims_session_save_state(a, short_buf.data(), short_buf.size(), &written),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_save_state(a, nullptr, 16, &written), LILIMS_ERR_INVALID_ARGUMENT);

  const std::vector<uint8_t> st = save(a);
  const std::string path = ::lilims::test::temp_path("c_api_state.bin");
  ASSERT_EQ(lilims_session_save_state_file(a, path.c_str()), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(lilims::test::read_file(path), std::string(st.begin(), st.end()));

  lilims_session* from_buf = f.session(64);
  lilims_session* from_file = f.session(256);
  ASSERT_EQ(lilims_session_load_state(from_buf, st.data(), st.size()), LILIMS_OK) << lilims_last_error();
  ASSERT_EQ(lilims_session_load_state_file(from_file, path.c_str()), LILIMS_OK) << lilims_last_error();
  std::remove(path.c_str());
  for (lilims_session* b : {from_buf, from_file}) {
    EXPECT_EQ(tokens_of(b), tokens_of(a));
    EXPECT_EQ(logits_of(b, n_vocab), logits_of(a, n_vocab));
  }
  // The three continue alike: generate with an empty prompt goes on from
  // the restored logits.
  std::string out[3];
  lilims_session* all[3] = {a, from_buf, from_file};
  for (int i = 0; i < 3; ++i) {
    gp.max_tokens = 12;
    gp.user_data = &out[i];
    gp.on_token = [](void* ud, lilims_token, const char* text, size_t len) {
      static_cast<std::string*>(ud)->append(text, len);
      return 0;
    };
    ASSERT_EQ(lilims_generate(all[i], "", &gp, nullptr), LILIMS_OK) << lilims_last_error();
  }
  EXPECT_FALSE(out[0].empty());
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(out[2], out[0]);
}

TEST(CApiState, RefusedStatesLeaveTheSessionAsItWas) {
  REQUIRE_STORIES();
  Fixture f;
  open(f, stories_path());
  const int32_t n_vocab = n_vocab_of(f.model);
  lilims_session* src = f.session(128);
  std::vector<lilims_token> ids{1};
  for (int i = 1; i < 40; ++i) ids.push_back(300 + i);
  ASSERT_EQ(lilims_session_eval(src, ids.data(), ids.size()), LILIMS_OK);
  const std::vector<uint8_t> st = save(src);

  lilims_session* s = f.session(32);  // too small for the 40 tokens
  const lilims_token mine[] = {1, 20, 21};
  ASSERT_EQ(lilims_session_eval(s, mine, 3), LILIMS_OK);
  const std::vector<float> before = logits_of(s, n_vocab);
  const auto expect_refused = [&](const std::vector<uint8_t>& bytes, lilims_status want,
                                  const char* why) {
    EXPECT_EQ(lilims_session_load_state(s, bytes.data(), bytes.size()), want) << why;
    EXPECT_EQ(std::string(lilims_last_error()).rfind("[state]", 0), 0u) << lilims_last_error();
    EXPECT_EQ(tokens_of(s), std::vector<lilims_token>(mine, mine + 3)) << why;
    EXPECT_EQ(logits_of(s, n_vocab), before) << why;
  };
  expect_refused(st, LILIMS_ERR_CONTEXT_FULL, "40 tokens in a context of 32");
  std::vector<uint8_t> bad = st;
  bad[bad.size() / 2] ^= 1;
  expect_refused(bad, LILIMS_ERR_BAD_FORMAT, "a flipped bit in the rows");
  expect_refused(std::vector<uint8_t>(st.begin(), st.end() - 1), LILIMS_ERR_BAD_FORMAT, "truncated");
  bad = st;
  bad[8] = 9;
  expect_refused(bad, LILIMS_ERR_UNSUPPORTED, "format version 9");

  EXPECT_EQ(lilims_session_load_state(s, nullptr, 4), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_load_state(nullptr, st.data(), st.size()), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_load_state_file(s, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_save_state_file(s, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_load_state_file(s, (::lilims::test::temp_path("no_such.bin")).c_str()),
            LILIMS_ERR_IO);
  EXPECT_EQ(lilims_session_n_past(s), 3);
}

TEST(CApiState, StateOfAnotherModelIsRefused) {
  REQUIRE_STORIES();
  Fixture stories, tiny;
  open(stories, stories_path());
  open(tiny, lilims::test::source_path("tests/data/tiny/llama.gguf"));
  lilims_session* a = stories.session();
  const lilims_token ids[] = {1, 400, 401};
  ASSERT_EQ(lilims_session_eval(a, ids, 3), LILIMS_OK);
  const std::vector<uint8_t> st = save(a);
  lilims_session* b = tiny.session();
  EXPECT_EQ(lilims_session_load_state(b, st.data(), st.size()), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("another model"), std::string::npos)
      << lilims_last_error();
  EXPECT_EQ(lilims_session_n_past(b), 0);
}

struct Reentry {
  lilims_session* session = nullptr;
  std::vector<uint8_t> state;
  std::string path;
  std::vector<lilims_status> seen;
};

// Calls into the session it is generating for: each must be refused as busy.
int call_back_in(void* ud, lilims_token, const char*, size_t) {
  auto* r = static_cast<Reentry*>(ud);
  if (!r->seen.empty()) return 0;
  size_t n = 0;
  lilims_token t[256];
  std::vector<uint8_t> buf(r->state.size() * 2);
  r->seen.push_back(lilims_session_truncate(r->session, 1));
  r->seen.push_back(lilims_session_tokens(r->session, t, 256, &n));
  r->seen.push_back(lilims_session_state_size(r->session, &n));
  r->seen.push_back(lilims_session_save_state(r->session, buf.data(), buf.size(), &n));
  r->seen.push_back(lilims_session_load_state(r->session, r->state.data(), r->state.size()));
  r->seen.push_back(lilims_session_save_state_file(r->session, r->path.c_str()));
  r->seen.push_back(lilims_session_load_state_file(r->session, r->path.c_str()));
  return 0;
}

TEST(CApiState, BusySession) {
  REQUIRE_STORIES();
  Fixture f;
  open(f, stories_path());
  Reentry r;
  r.session = f.session();
  const lilims_token ids[] = {1, 400};
  ASSERT_EQ(lilims_session_eval(r.session, ids, 2), LILIMS_OK);
  r.state = save(r.session);
  r.path = ::lilims::test::temp_path("c_api_state_busy.bin");
  ASSERT_EQ(lilims_session_save_state_file(r.session, r.path.c_str()), LILIMS_OK);
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 3;
  gp.sampling.temperature = 0.0f;
  gp.on_token = call_back_in;
  gp.user_data = &r;
  ASSERT_EQ(lilims_generate(r.session, " a", &gp, nullptr), LILIMS_OK) << lilims_last_error();
  ASSERT_EQ(r.seen.size(), 7u);
  for (size_t i = 0; i < r.seen.size(); ++i) EXPECT_EQ(r.seen[i], LILIMS_ERR_BUSY) << "call " << i;
  EXPECT_EQ(lilims::test::read_file(r.path), std::string(r.state.begin(), r.state.end()));
  std::remove(r.path.c_str());
}

}  // namespace
