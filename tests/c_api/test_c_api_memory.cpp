// Session memory and settings through the public header: the budget, the
// estimate query, the default context under a budget, the resident-memory
// report, and n_batch / kv_type / chunk_layers / kv_commit.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api_ptr.h"
#include "lilims/lilims.h"
#include "test_util.h"

namespace {

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

using lilims::test::ModelPtr;
using lilims::test::SessionPtr;

ModelPtr open(const std::string& path, int use_mmap = 1) {
  lilims_model_params mp = lilims_model_default_params();
  mp.use_mmap = use_mmap;
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(path.c_str(), &mp, &m), LILIMS_OK) << lilims_last_error();
  return ModelPtr(m);
}

lilims_session_params params(int32_t n_ctx) {
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = n_ctx;
  sp.n_threads = 1;
  return sp;
}

uint64_t estimate(lilims_model* m, const lilims_session_params& sp) {
  uint64_t bytes = 0;
  EXPECT_EQ(lilims_session_memory_estimate(m, &sp, &bytes), LILIMS_OK) << lilims_last_error();
  return bytes;
}

int32_t n_ctx_train(lilims_model* m) {
  lilims_model_info info;
  info.struct_size = sizeof info;
  EXPECT_EQ(lilims_model_get_info(m, &info), LILIMS_OK);
  return info.n_ctx_train;
}

// Greedy tokens after a prompt, for settings that must not change them.
std::vector<lilims_token> greedy(lilims_model* m, const lilims_session_params& sp) {
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  if (!s) return {};
  SessionPtr session(s);
  std::vector<lilims_token> out;
  lilims_generate_params gp = lilims_generate_default_params();
  gp.max_tokens = 24;
  gp.sampling.temperature = 0.0f;
  gp.user_data = &out;
  gp.on_token = [](void* ud, lilims_token t, const char*, size_t) {
    static_cast<std::vector<lilims_token>*>(ud)->push_back(t);
    return 0;
  };
  EXPECT_EQ(lilims_generate(s, "Once upon a time, a little cat named Tom saw", &gp, nullptr),
            LILIMS_OK)
      << lilims_last_error();
  return out;
}

// The budget refuses a session that would exceed it with the figure it
// needs: the same the estimate query returns.
TEST(CApiMemory, SessionBudget) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  ModelPtr m = open(path);
  ASSERT_TRUE(m);
  lilims_session_params sp = params(2048);
  // A fixed block: the default one shrinks to fit a budget
  // (SessionMemory.DefaultBlockShrinksBeforeTheContext).
  sp.n_batch = 64;
  const uint64_t need = estimate(m.get(), sp);
  ASSERT_GT(need, 0u);
  sp.memory_budget = need - 1;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(s, nullptr);
  const std::string err = lilims_last_error();
  EXPECT_NE(err.find("a context of 2048 tokens needs " + std::to_string(need) + " bytes"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("over the memory budget of " + std::to_string(need - 1)), std::string::npos)
      << err;
  sp.memory_budget = need;
  ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK) << lilims_last_error();
  lilims_session_free(s);
}

// n_ctx 0 is the trained context when it fits; under a budget, the largest
// power of two that fits.
TEST(CApiMemory, DefaultContextFollowsTheBudget) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  ModelPtr m = open(path);
  ASSERT_TRUE(m);
  const int32_t train = n_ctx_train(m.get());
  ASSERT_EQ(train, 8192);
  lilims_session* s = nullptr;
  lilims_session_params sp = params(0);
  ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(lilims_session_n_ctx(s), train);
  lilims_session_free(s);

  sp.n_batch = 64;  // a fixed block, as in SessionBudget
  lilims_session_params at = params(2048);
  at.n_batch = 64;
  const uint64_t need_2048 = estimate(m.get(), at);
  at.n_ctx = 4096;
  const uint64_t need_4096 = estimate(m.get(), at);
  ASSERT_LT(need_2048, need_4096);
  for (uint64_t budget : {need_2048, need_4096 - 1}) {
    sp.memory_budget = budget;
    EXPECT_EQ(estimate(m.get(), sp), need_2048) << "the estimate resolves n_ctx 0 as create does";
    ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK) << lilims_last_error();
    EXPECT_EQ(lilims_session_n_ctx(s), 2048) << "budget " << budget;
    lilims_session_free(s);
  }
  // Not even the smallest default context fits: refused with its figure.
  at.n_ctx = 256;
  const uint64_t need_256 = estimate(m.get(), at);
  sp.memory_budget = need_256 - 1;
  EXPECT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::string(lilims_last_error())
                .find("a context of 256 tokens needs " + std::to_string(need_256)),
            std::string::npos)
      << lilims_last_error();
}

// Resident KV pages follow the tokens and go back on reset; the parts add
// up; a mapped model's weights are mapped, a read one's copied.
TEST(CApiMemory, Report) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  for (int mmap : {1, 0}) {
    SCOPED_TRACE("use_mmap " + std::to_string(mmap));
    ModelPtr m = open(stories_path(), mmap);
    ASSERT_TRUE(m);
    lilims_session* s = nullptr;
    const lilims_session_params sp = params(512);
    ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK) << lilims_last_error();
    SessionPtr session(s);
    lilims_memory_report r;
    std::memset(&r, 0, sizeof r);
    EXPECT_EQ(lilims_session_memory(s, &r), LILIMS_ERR_INVALID_ARGUMENT);  // struct_size unset
    r.struct_size = sizeof r;
    ASSERT_EQ(lilims_session_memory(s, &r), LILIMS_OK) << lilims_last_error();
    EXPECT_EQ(r.kv_resident, 0u);
    EXPECT_GT(r.kv_full, 0u);
    EXPECT_GT(r.scratch, 0u);
    EXPECT_GT(r.host, 0u);
    EXPECT_EQ(r.scratch + r.kv_full, estimate(m.get(), sp));
    if (mmap) {
      EXPECT_GT(r.weights_mapped, 0u);
    } else {
      EXPECT_EQ(r.weights_mapped, 0u);
      EXPECT_GE(r.weights_copied, lilims::test::read_file(stories_path()).size());
    }
    std::vector<lilims_token> ids(300, 100);
    ASSERT_EQ(lilims_session_eval(s, ids.data(), ids.size()), LILIMS_OK) << lilims_last_error();
    lilims_memory_report after = r;
    ASSERT_EQ(lilims_session_memory(s, &after), LILIMS_OK);
    EXPECT_GT(after.kv_resident, 0u);
    EXPECT_LE(after.kv_resident, after.kv_full);
    EXPECT_GE(after.kv_resident, after.kv_full * 300 / 512);
    EXPECT_EQ(after.total, after.weights_mapped + after.weights_copied + after.kv_resident +
                               after.scratch + after.host);
    ASSERT_EQ(lilims_session_reset(s), LILIMS_OK);
    ASSERT_EQ(lilims_session_memory(s, &after), LILIMS_OK);
    EXPECT_EQ(after.kv_resident, 0u);
  }
}

// Q8_0 entries take about half the F16 cache (34 bytes per 32 values
// against 64); an unknown type is refused.
TEST(CApiMemory, KvType) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  ModelPtr m = open(path);
  ASSERT_TRUE(m);
  lilims_session_params sp = params(1024);
  const uint64_t f16 = estimate(m.get(), sp);
  lilims_session* s = nullptr;
  ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK);
  lilims_memory_report r16;
  r16.struct_size = sizeof r16;
  ASSERT_EQ(lilims_session_memory(s, &r16), LILIMS_OK);
  lilims_session_free(s);

  sp.kv_type = LILIMS_KV_Q8_0;
  const uint64_t q8 = estimate(m.get(), sp);
  EXPECT_LT(q8, f16);
  ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK) << lilims_last_error();
  lilims_memory_report r8;
  r8.struct_size = sizeof r8;
  ASSERT_EQ(lilims_session_memory(s, &r8), LILIMS_OK);
  EXPECT_EQ(r8.kv_full, r16.kv_full / 64 * 34);
  lilims_session_free(s);

  sp.kv_type = 7;
  uint64_t bytes = 0;
  EXPECT_EQ(lilims_session_memory_estimate(m.get(), &sp, &bytes), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("kv_type 7"), std::string::npos)
      << lilims_last_error();
}

// A prefill block of 1 and one-layer chunks change the plan (its memory)
// but not the greedy tokens; negative values are refused.
TEST(CApiMemory, BatchAndChunks) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  ModelPtr m = open(stories_path());
  ASSERT_TRUE(m);
  const lilims_session_params base = params(256);
  const std::vector<lilims_token> want = greedy(m.get(), base);
  ASSERT_EQ(want.size(), 24u);
  const uint64_t base_bytes = estimate(m.get(), base);

  lilims_session_params b1 = base;
  b1.n_batch = 1;
  EXPECT_LT(estimate(m.get(), b1), base_bytes) << "a block of 1 needs less scratch";
  EXPECT_EQ(greedy(m.get(), b1), want);

  lilims_session_params c1 = base;
  c1.chunk_layers = 1;
  EXPECT_LT(estimate(m.get(), c1), base_bytes) << "one-layer chunks stage fewer K/V rows";
  EXPECT_EQ(greedy(m.get(), c1), want);

  // Async commits write the same rows as sync ones (DESIGN.md): the same tokens.
  for (int32_t commit : {LILIMS_KV_COMMIT_SYNC, LILIMS_KV_COMMIT_ASYNC}) {
    lilims_session_params k = c1;
    k.kv_commit = commit;
    EXPECT_EQ(greedy(m.get(), k), want) << "kv_commit " << commit;
  }

  for (auto set : {+[](lilims_session_params& p) { p.n_batch = -1; },
                   +[](lilims_session_params& p) { p.chunk_layers = -2; },
                   +[](lilims_session_params& p) { p.kv_commit = 3; },
                   +[](lilims_session_params& p) { p.kv_commit = -1; }}) {
    lilims_session_params bad = base;
    set(bad);
    lilims_session* s = nullptr;
    EXPECT_EQ(lilims_session_create(m.get(), &bad, &s), LILIMS_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(s, nullptr);
  }
}

// A caller built against 0.1.0's header passes the shorter struct: the
// appended fields take their defaults, whatever lies beyond it.
TEST(CApiMemory, OldStructSizeKeepsDefaults) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  ModelPtr m = open(stories_path());
  ASSERT_TRUE(m);
  lilims_session_params sp = params(128);
  sp.struct_size = offsetof(lilims_session_params, memory_budget);
  sp.memory_budget = 1;  // not read
  sp.kv_type = 99;       // not read
  sp.kv_commit = 99;     // not read
  lilims_session* s = nullptr;
  ASSERT_EQ(lilims_session_create(m.get(), &sp, &s), LILIMS_OK) << lilims_last_error();
  lilims_session_free(s);

  lilims_model_params mp = lilims_model_default_params();
  mp.struct_size = offsetof(lilims_model_params, progress);
  mp.memory_budget = 1;
  lilims_model* m2 = nullptr;
  ASSERT_EQ(lilims_model_open(stories_path().c_str(), &mp, &m2), LILIMS_OK) << lilims_last_error();
  lilims_model_free(m2);
}

}  // namespace
