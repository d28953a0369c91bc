// The version the header announces, the library reports and CMake's
// project() declares are one; the log callback is off by default, gets the
// library's reports once set, and nothing is printed either way.
#include <cstdio>
#include <string>
#include <vector>

#include "lilims/lilims.h"
#include "test_util.h"

namespace {

TEST(Version, HeaderLibraryAndProjectAgree) {
  int major = -1, minor = -1, patch = -1;
  lilims_version(&major, &minor, &patch);
  EXPECT_EQ(major, LILIMS_VERSION_MAJOR);
  EXPECT_EQ(minor, LILIMS_VERSION_MINOR);
  EXPECT_EQ(patch, LILIMS_VERSION_PATCH);
  // CMakeLists.txt's project(VERSION): the installed package's version.
  EXPECT_EQ(major, LILIMS_PROJECT_VERSION_MAJOR);
  EXPECT_EQ(minor, LILIMS_PROJECT_VERSION_MINOR);
  EXPECT_EQ(patch, LILIMS_PROJECT_VERSION_PATCH);
  EXPECT_EQ(lilims_abi_version(), LILIMS_ABI_VERSION);
  lilims_version(nullptr, nullptr, nullptr);  // each pointer may be NULL
  const std::string v = std::to_string(major) + "." + std::to_string(minor) + "." +
                        std::to_string(patch) + " ";
  EXPECT_EQ(std::string(lilims_version_string()).rfind(v, 0), 0u) << lilims_version_string();
}

struct Report {
  lilims_log_level level;
  std::string message;
};

void collect(void* user_data, lilims_log_level level, const char* message) {
  static_cast<std::vector<Report>*>(user_data)->push_back({level, message});
}

// Opens the model, makes a session with this n_ctx and frees both.
void open_and_create(const std::string& path, int32_t n_ctx, uint64_t budget = 0) {
  lilims_model* m = nullptr;
  ASSERT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = n_ctx;
  sp.n_threads = 1;
  sp.memory_budget = budget;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  lilims_session_free(s);
  lilims_model_free(m);
}

class Log : public ::testing::Test {
 protected:
  void TearDown() override { lilims_set_log_callback(nullptr, nullptr, LILIMS_LOG_DEBUG); }
};

TEST_F(Log, OffByDefaultAndNothingPrinted) {
  const std::string path = lilims::test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data/stories260K, see SOURCES.md");
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  open_and_create(path, 0);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
}

TEST_F(Log, ReportsLoadAndSessionAtInfo) {
  const std::string path = lilims::test::shared_data("stories260K/stories260K.gguf");
  LILIMS_REQUIRE_FILE(path, "../shared/data/stories260K, see SOURCES.md");
  std::vector<Report> reports;
  lilims_set_log_callback(collect, &reports, LILIMS_LOG_INFO);
  open_and_create(path, 64);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].level, LILIMS_LOG_INFO);
  EXPECT_EQ(reports[0].message.rfind("[model_open] " + path + ": ", 0), 0u) << reports[0].message;
  EXPECT_NE(reports[0].message.find(" ms "), std::string::npos) << reports[0].message;
  EXPECT_EQ(reports[1].message, "[session_create] n_ctx 64, 1 threads");
  for (const Report& r : reports) EXPECT_EQ(r.message.find('\n'), std::string::npos);

  // Above the level of every report: nothing.  NULL: off again.
  reports.clear();
  lilims_set_log_callback(collect, &reports, LILIMS_LOG_WARN);
  open_and_create(path, 64);
  lilims_set_log_callback(nullptr, &reports, LILIMS_LOG_DEBUG);
  open_and_create(path, 64);
  EXPECT_TRUE(reports.empty()) << reports[0].message;
}

// SmolLM2 was trained on 8192 positions; n_ctx 0 under a budget that holds
// only 4096 gives 4096, which a caller who asked for "the model's context"
// should hear about.
TEST_F(Log, WarnsWhenTheDefaultContextIsLowered) {
  const std::string path = lilims::test::smollm2_path();
  LILIMS_REQUIRE_FILE(path, "scripts/fetch_model.sh");
  lilims_model* m = nullptr;
  ASSERT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = 4096;
  sp.n_threads = 1;
  uint64_t budget = 0;
  ASSERT_EQ(lilims_session_memory_estimate(m, &sp, &budget), LILIMS_OK);
  lilims_model_free(m);

  std::vector<Report> reports;
  lilims_set_log_callback(collect, &reports, LILIMS_LOG_WARN);
  open_and_create(path, 0, budget);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].level, LILIMS_LOG_WARN);
  EXPECT_EQ(reports[0].message,
            "[session_create] n_ctx 0: the context is 4096 of the model's 8192 trained "
            "tokens, as more would not fit the memory budget");
  reports.clear();
  open_and_create(path, 0);  // the whole trained context fits: nothing to say
  open_and_create(path, 4096, budget);  // asked for explicitly: nothing to say
  EXPECT_TRUE(reports.empty());
}

}  // namespace
