// LoRA adapters through the public header: load, set on sessions, the
// session keeps what it uses alive, and misuse gets a status and a message.
// The adapter is tests/data/lora/stories260k.lora.gguf, written by gguf-py
// in llama.cpp's adapter layout (scripts/goldens/gen_lora_goldens.py).
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "c_api_ptr.h"
#include "lilims/lilims.h"
#include "test_util.h"

namespace {

using lilims::test::ModelPtr;
using lilims::test::SessionPtr;

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }
std::string adapter_path() { return lilims::test::source_path("tests/data/lora/stories260k.lora.gguf"); }

ModelPtr open_model() {
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(stories_path().c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
  return ModelPtr(m);
}

SessionPtr open_session(lilims_model* m) {
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = 64;
  sp.n_threads = 2;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  return SessionPtr(s);
}

std::vector<float> logits_after(lilims_session* s, int32_t n_vocab) {
  const lilims_token prompt[] = {1, 403, 407, 261, 164, 8};
  EXPECT_EQ(lilims_session_reset(s), LILIMS_OK);
  EXPECT_EQ(lilims_session_eval(s, prompt, 6), LILIMS_OK) << lilims_last_error();
  const float* l = lilims_session_logits(s);
  return l ? std::vector<float>(l, l + n_vocab) : std::vector<float>();
}

TEST(CApiLora, LoadSetSwitchAndFreeInAnyOrder) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  ModelPtr model = open_model();
  lilims_model_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ASSERT_EQ(lilims_model_get_info(model.get(), &info), LILIMS_OK);
  SessionPtr s = open_session(model.get());
  const std::vector<float> base = logits_after(s.get(), info.n_vocab);

  lilims_adapter* ad = nullptr;
  ASSERT_EQ(lilims_adapter_load(model.get(), adapter_path().c_str(), &ad), LILIMS_OK) << lilims_last_error();
  ASSERT_EQ(lilims_session_set_adapters(s.get(), &ad, nullptr, 1), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(lilims_session_n_past(s.get()), 0);
  EXPECT_EQ(lilims_adapter_tool_format(ad), -1);  // its file names none
  EXPECT_EQ(lilims_adapter_tool_format(nullptr), -1);
  const std::vector<float> with = logits_after(s.get(), info.n_vocab);
  EXPECT_NE(with, base);
  const float half = 0.5f;
  ASSERT_EQ(lilims_session_set_adapters(s.get(), &ad, &half, 1), LILIMS_OK);
  const std::vector<float> with_half = logits_after(s.get(), info.n_vocab);
  EXPECT_NE(with_half, with);
  ASSERT_EQ(lilims_session_set_adapters(s.get(), nullptr, nullptr, 0), LILIMS_OK);
  EXPECT_EQ(logits_after(s.get(), info.n_vocab), base);

  // Freed while a session uses it: the session keeps it.
  ASSERT_EQ(lilims_session_set_adapters(s.get(), &ad, nullptr, 1), LILIMS_OK);
  lilims_adapter_free(ad);
  EXPECT_EQ(logits_after(s.get(), info.n_vocab), with);
  model.reset();  // the session keeps the model too
  EXPECT_EQ(logits_after(s.get(), info.n_vocab), with);
}

TEST(CApiLora, MisuseIsRefusedWithAMessage) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  ModelPtr m1 = open_model(), m2 = open_model();
  lilims_adapter* ad = reinterpret_cast<lilims_adapter*>(&m1);  // must be overwritten with NULL
  EXPECT_EQ(lilims_adapter_load(nullptr, adapter_path().c_str(), &ad), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ad, nullptr);
  EXPECT_EQ(lilims_adapter_load(m1.get(), nullptr, &ad), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_adapter_load(m1.get(), adapter_path().c_str(), nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_adapter_load(m1.get(), "/nonexistent/a.gguf", &ad), LILIMS_ERR_IO);
  EXPECT_EQ(ad, nullptr);
  // A model file is not an adapter.
  EXPECT_EQ(lilims_adapter_load(m1.get(), stories_path().c_str(), &ad), LILIMS_ERR_BAD_FORMAT);
  EXPECT_NE(std::string(lilims_last_error()).find("adapter"), std::string::npos) << lilims_last_error();
  // An adapter for another architecture's weights.
  const std::string phi = lilims::test::source_path("tests/data/lora/phi3.lora.gguf");
  EXPECT_EQ(lilims_adapter_load(m1.get(), phi.c_str(), &ad), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("phi3"), std::string::npos) << lilims_last_error();

  ASSERT_EQ(lilims_adapter_load(m1.get(), adapter_path().c_str(), &ad), LILIMS_OK) << lilims_last_error();
  SessionPtr s2 = open_session(m2.get());
  EXPECT_EQ(lilims_session_set_adapters(s2.get(), &ad, nullptr, 1), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("another model"), std::string::npos) << lilims_last_error();
  EXPECT_EQ(lilims_session_set_adapters(nullptr, &ad, nullptr, 1), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_session_set_adapters(s2.get(), nullptr, nullptr, 1), LILIMS_ERR_INVALID_ARGUMENT);
  lilims_adapter* none = nullptr;
  EXPECT_EQ(lilims_session_set_adapters(s2.get(), &none, nullptr, 1), LILIMS_ERR_INVALID_ARGUMENT);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  SessionPtr s1 = open_session(m1.get());
  EXPECT_EQ(lilims_session_set_adapters(s1.get(), &ad, &nan, 1), LILIMS_ERR_INVALID_ARGUMENT);
  lilims_adapter_free(ad);
  lilims_adapter_free(nullptr);
}

}  // namespace
