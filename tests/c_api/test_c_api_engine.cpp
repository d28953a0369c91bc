// The engine (lilims_engine_*) through the public header: greedy output
// equal to lilims_generate's on a session, clients on more threads than
// cores, cancel, a full queue, misuse, and a stress run with delays injected
// in the callbacks and between calls (run under ThreadSanitizer by
// scripts/test.sh).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "c_api_ptr.h"
#include "lilims/lilims.h"
#include "test_util.h"

namespace {

using lilims::test::greedy;
using lilims::test::ModelPtr;

std::string stories_path() { return lilims::test::shared_data("stories260K/stories260K.gguf"); }

#define REQUIRE_STORIES() \
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md")

struct EngineFree {
  void operator()(lilims_engine* e) const { lilims_engine_free(e); }
};
using EnginePtr = std::unique_ptr<lilims_engine, EngineFree>;

ModelPtr open_model(const std::string& path) {
  lilims_model* m = nullptr;
  EXPECT_EQ(lilims_model_open(path.c_str(), nullptr, &m), LILIMS_OK) << lilims_last_error();
  return ModelPtr(m);
}

EnginePtr make_engine(lilims_model* m, int32_t n_seq, int32_t max_queued, int32_t n_ctx = 128,
                      int32_t n_threads = 1) {
  lilims_engine_params ep = lilims_engine_default_params();
  ep.n_seq = n_seq;
  ep.max_queued = max_queued;
  ep.n_ctx = n_ctx;
  ep.n_threads = n_threads;
  lilims_engine* e = nullptr;
  EXPECT_EQ(lilims_engine_create(m, &ep, &e), LILIMS_OK) << lilims_last_error();
  return EnginePtr(e);
}

std::vector<lilims_token> tokenize(lilims_model* m, const std::string& text) {
  size_t n = 0;
  lilims_tokenize(m, text.c_str(), text.size(), 1, 1, nullptr, 0, &n);
  std::vector<lilims_token> ids(n);
  EXPECT_EQ(lilims_tokenize(m, text.c_str(), text.size(), 1, 1, ids.data(), ids.size(), &n), LILIMS_OK);
  return ids;
}

// What one lilims_generate call on a fresh session produced.
struct Output {
  std::string text;
  std::vector<lilims_token> tokens;
};

int collect(void* ud, lilims_token token, const char* text, size_t len) {
  auto* o = static_cast<Output*>(ud);
  o->text.append(text, len);
  if (token >= 0) o->tokens.push_back(token);
  return 0;
}

Output reference(lilims_model* m, const std::string& prompt, int32_t max_tokens, int32_t n_ctx) {
  lilims_session_params sp = lilims_session_default_params();
  sp.n_ctx = n_ctx;
  sp.n_threads = 1;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(m, &sp, &s), LILIMS_OK) << lilims_last_error();
  Output out;
  lilims_generate_params gp = greedy(max_tokens);
  gp.on_token = collect;
  gp.user_data = &out;
  EXPECT_EQ(lilims_generate(s, prompt.c_str(), &gp, nullptr), LILIMS_OK) << lilims_last_error();
  lilims_session_free(s);
  return out;
}

// One request as its callbacks saw it.  on_token and on_done run on the
// engine's thread; the test reads after wait().
struct Request {
  std::mutex mu;
  std::condition_variable cv;
  int n_done = 0;
  lilims_status status = LILIMS_OK;
  std::string error;
  std::string text;          // from on_done
  std::vector<lilims_token> tokens;
  std::string streamed;      // from on_token
  std::atomic<int> n_streamed{0};
  int32_t stop_reason = -1;
  uint64_t id_seen = 0;
  // Injected in on_token (stress and cancel tests).
  std::chrono::microseconds token_delay{0};
  int stop_after = -1;  // on_token returns nonzero at this token

  void wait() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return n_done > 0; });
  }
};

int on_token(void* ud, lilims_token, const char* text, size_t len) {
  auto* r = static_cast<Request*>(ud);
  if (r->token_delay.count() > 0) std::this_thread::sleep_for(r->token_delay);
  {
    std::lock_guard<std::mutex> lock(r->mu);
    r->streamed.append(text, len);
  }
  const int n = ++r->n_streamed;
  return r->stop_after >= 0 && n >= r->stop_after;
}

void on_done(void* ud, const lilims_engine_result* res) {
  auto* r = static_cast<Request*>(ud);
  std::lock_guard<std::mutex> lock(r->mu);
  ++r->n_done;
  r->status = res->status;
  r->error = res->error;
  r->text.assign(res->text, res->text_len);
  r->tokens.assign(res->tokens, res->tokens + res->n_tokens);
  r->stop_reason = res->stop_reason;
  r->id_seen = res->request_id;
  r->cv.notify_all();
}

uint64_t submit(lilims_engine* e, const std::vector<lilims_token>& ids, const lilims_generate_params& gp,
                Request& r, lilims_status want = LILIMS_OK) {
  uint64_t id = 0;
  EXPECT_EQ(lilims_engine_submit(e, ids.data(), ids.size(), &gp, on_token, on_done, &r, &id), want)
      << lilims_last_error();
  return id;
}

const char* kPrompts[] = {"Once upon a time", "The cat", "Lily and Ben went to the park",
                          "One day, a little bird", "Tom had a big red ball", "She"};

// Each of kPrompts tokenized, and what a session answers to it.
struct Expected {
  std::vector<std::vector<lilims_token>> prompts;
  std::vector<Output> want;
};
Expected expected_answers(lilims_model* model, int32_t max_tokens, int32_t n_ctx) {
  Expected e;
  for (const char* p : kPrompts) {
    e.want.push_back(reference(model, p, max_tokens, n_ctx));
    e.prompts.push_back(tokenize(model, p));
  }
  return e;
}

void expect_greedy_equal(const std::string& path, int32_t max_tokens, int32_t n_ctx) {
  ModelPtr model = open_model(path);
  ASSERT_TRUE(model);
  std::vector<Output> want;
  for (const char* p : kPrompts) want.push_back(reference(model.get(), p, max_tokens, n_ctx));
  EnginePtr engine = make_engine(model.get(), 3, 16, n_ctx, 2);
  ASSERT_TRUE(engine);
  std::vector<std::unique_ptr<Request>> reqs;
  std::vector<uint64_t> ids;
  const lilims_generate_params gp = greedy(max_tokens);
  for (const char* p : kPrompts) {
    reqs.push_back(std::make_unique<Request>());
    ids.push_back(submit(engine.get(), tokenize(model.get(), p), gp, *reqs.back()));
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    Request& r = *reqs[i];
    r.wait();
    EXPECT_EQ(r.status, LILIMS_OK) << r.error;
    EXPECT_EQ(r.id_seen, ids[i]);
    EXPECT_NE(ids[i], 0u);
    EXPECT_EQ(r.tokens, want[i].tokens) << "prompt " << kPrompts[i];
    EXPECT_EQ(r.text, want[i].text) << "prompt " << kPrompts[i];
    EXPECT_EQ(r.streamed, want[i].text);
  }
}

TEST(CApiEngine, GreedyEqualsGenerateStories260K) {
  REQUIRE_STORIES();
  expect_greedy_equal(stories_path(), 40, 128);
}

TEST(CApiEngine, GreedyEqualsGenerateSmolLM2) {
  LILIMS_REQUIRE_FILE(lilims::test::smollm2_path(), "scripts/fetch_model.sh");
  expect_greedy_equal(lilims::test::smollm2_path(), 16, 256);
}

// More client threads than cores, each submitting several requests and
// waiting for them: every answer equals the session's.
TEST(CApiEngine, ClientsOnManyThreads) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  constexpr int32_t kMax = 24;
  const Expected expected = expected_answers(model.get(), kMax, 128);
  const auto& prompts = expected.prompts;
  const auto& want = expected.want;
  EnginePtr engine = make_engine(model.get(), 3, 64, 128, 2);
  const int n_threads = 2 * (int)std::max(2u, std::thread::hardware_concurrency()) + 1;
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < n_threads; ++t) {
    clients.emplace_back([&, t] {
      for (int k = 0; k < 3; ++k) {
        const size_t i = (size_t)(t + k) % prompts.size();
        Request r;
        uint64_t id = 0;
        const lilims_generate_params gp = greedy(kMax);
        if (lilims_engine_submit(engine.get(), prompts[i].data(), prompts[i].size(), &gp, on_token, on_done,
                                 &r, &id) != LILIMS_OK) {
          ++failures;
          continue;
        }
        r.wait();
        if (r.status != LILIMS_OK || r.tokens != want[i].tokens || r.text != want[i].text ||
            r.id_seen != id) {
          ++failures;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(CApiEngine, CancelMidGeneration) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  EnginePtr engine = make_engine(model.get(), 2, 8);
  Request r;
  r.token_delay = std::chrono::milliseconds(2);
  const uint64_t id = submit(engine.get(), tokenize(model.get(), "Once upon a time"), greedy(0), r);
  while (r.n_streamed.load() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(lilims_engine_cancel(engine.get(), id), LILIMS_OK) << lilims_last_error();
  r.wait();
  EXPECT_EQ(r.status, LILIMS_ERR_CANCELLED);
  EXPECT_EQ(r.stop_reason, 4);
  EXPECT_NE(r.error.find("cancelled"), std::string::npos) << r.error;
  EXPECT_GE(r.tokens.size(), 3u);
  EXPECT_LT(r.tokens.size(), 120u);
  // Cancelling an ended request is accepted and does nothing.
  EXPECT_EQ(lilims_engine_cancel(engine.get(), id), LILIMS_OK);
  EXPECT_EQ(r.n_done, 1);

  // on_token's nonzero return stops a request with stop_reason 2.
  Request s;
  s.stop_after = 5;
  submit(engine.get(), tokenize(model.get(), "The cat"), greedy(0), s);
  s.wait();
  EXPECT_EQ(s.status, LILIMS_OK) << s.error;
  EXPECT_EQ(s.stop_reason, 2);
  EXPECT_EQ(s.n_streamed.load(), 5);
}

// Stop strings and a JSON Schema give what lilims_generate gives.
TEST(CApiEngine, StopStringsAndSchemaAsGenerate) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  const std::string prompt = "Once upon a time";
  const Output plain = reference(model.get(), prompt, 40, 128);
  ASSERT_GT(plain.text.size(), 20u);
  const std::string stop = plain.text.substr(12, 4);
  const char* stops[] = {stop.c_str()};
  const char* schema = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", "
                       "\"maxLength\": 8}}, \"required\": [\"name\"]}";
  std::vector<lilims_generate_params> cases(2, greedy(40));
  cases[0].stop = stops;
  cases[0].n_stop = 1;
  cases[1].json_schema = schema;
  EnginePtr engine = make_engine(model.get(), 2, 4);
  for (lilims_generate_params& gp : cases) {
    lilims_session_params sp = lilims_session_default_params();
    sp.n_ctx = 128;
    sp.n_threads = 1;
    lilims_session* s = nullptr;
    ASSERT_EQ(lilims_session_create(model.get(), &sp, &s), LILIMS_OK);
    Output want;
    gp.on_token = collect;
    gp.user_data = &want;
    ASSERT_EQ(lilims_generate(s, prompt.c_str(), &gp, nullptr), LILIMS_OK) << lilims_last_error();
    lilims_session_free(s);
    gp.on_token = nullptr;
    gp.user_data = nullptr;
    Request r;
    submit(engine.get(), tokenize(model.get(), prompt), gp, r);
    r.wait();
    EXPECT_EQ(r.status, LILIMS_OK) << r.error;
    EXPECT_EQ(r.text, want.text);
    EXPECT_EQ(r.streamed, want.text);
  }
}

// A required tool call: the answer is a call of one of the tools.
TEST(CApiEngine, ToolCall) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  const lilims_tool tools[] = {
      {"open_app", "Open an app.",
       R"({"type":"object","properties":{"app":{"enum":["camera","maps"]}},"required":["app"]})"},
      {"take_photo", nullptr, nullptr},
  };
  EnginePtr engine = make_engine(model.get(), 2, 4);
  lilims_generate_params gp = greedy(64);
  gp.tools = tools;
  gp.n_tools = 2;
  Request r;
  submit(engine.get(), tokenize(model.get(), "Once upon a time"), gp, r);
  r.wait();
  ASSERT_EQ(r.status, LILIMS_OK) << r.error;
  EXPECT_EQ(r.stop_reason, 1) << r.text;
  size_t need = 0;
  lilims_parse_tool_calls(LILIMS_TOOL_FORMAT_GENERIC, r.text.data(), r.text.size(), nullptr, 0, &need);
  std::string calls(need + 1, '\0');
  ASSERT_EQ(lilims_parse_tool_calls(LILIMS_TOOL_FORMAT_GENERIC, r.text.data(), r.text.size(), &calls[0],
                                    calls.size(), &need),
            LILIMS_OK)
      << lilims_last_error() << ": " << r.text;
  calls.resize(need);
  EXPECT_TRUE(calls.find("\"name\":\"open_app\"") != std::string::npos ||
              calls.find("\"name\":\"take_photo\"") != std::string::npos)
      << calls;
}

// A gate on_token waits at, holding the engine's only slot.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<bool> reached{false};
  std::atomic<int> n_done{0};
};

int gated_token(void* ud, lilims_token, const char*, size_t) {
  auto* g = static_cast<Gate*>(ud);
  g->reached = true;
  std::unique_lock<std::mutex> lock(g->mu);
  g->cv.wait(lock, [&] { return g->open; });
  return 0;
}

void gate_done(void* ud, const lilims_engine_result*) { ++static_cast<Gate*>(ud)->n_done; }

TEST(CApiEngine, FullQueue) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  EnginePtr engine = make_engine(model.get(), 1, 1);
  const auto ids = tokenize(model.get(), "Once upon a time");
  Gate gate;
  const lilims_generate_params gp = greedy(8);
  uint64_t first = 0;
  ASSERT_EQ(lilims_engine_submit(engine.get(), ids.data(), ids.size(), &gp, gated_token, gate_done, &gate,
                                 &first),
            LILIMS_OK)
      << lilims_last_error();
  while (!gate.reached.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The slot is busy: one request may wait, the next is refused.
  Request queued, refused;
  const uint64_t queued_id = submit(engine.get(), ids, gp, queued);
  EXPECT_EQ(lilims_engine_n_queued(engine.get()), 1);
  EXPECT_EQ(lilims_engine_n_running(engine.get()), 1);
  uint64_t refused_id = 123;
  EXPECT_EQ(lilims_engine_submit(engine.get(), ids.data(), ids.size(), &gp, on_token, on_done, &refused,
                                 &refused_id),
            LILIMS_ERR_BUSY);
  EXPECT_NE(std::string(lilims_last_error()).find("[engine_submit] the queue is full"), std::string::npos)
      << lilims_last_error();
  EXPECT_EQ(refused_id, 0u);
  // The queued request is cancelled: it ends without running.
  EXPECT_EQ(lilims_engine_cancel(engine.get(), queued_id), LILIMS_OK);
  {
    std::lock_guard<std::mutex> lock(gate.mu);
    gate.open = true;
  }
  gate.cv.notify_all();
  queued.wait();
  EXPECT_EQ(queued.status, LILIMS_ERR_CANCELLED);
  EXPECT_TRUE(queued.tokens.empty());
  EXPECT_EQ(queued.n_streamed.load(), 0);
  // The place is free again.
  Request again;
  submit(engine.get(), ids, gp, again);
  again.wait();
  EXPECT_EQ(again.status, LILIMS_OK) << again.error;
  EXPECT_EQ(gate.n_done.load(), 1);
  EXPECT_EQ(refused.n_done, 0);
}

TEST(CApiEngine, Misuse) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  lilims_engine* e = nullptr;
  EXPECT_EQ(lilims_engine_create(nullptr, nullptr, &e), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_engine_create(model.get(), nullptr, nullptr), LILIMS_ERR_INVALID_ARGUMENT);
  lilims_engine_params ep = lilims_engine_default_params();
  ep.struct_size = 0;
  EXPECT_EQ(lilims_engine_create(model.get(), &ep, &e), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("struct_size"), std::string::npos);
  EXPECT_EQ(e, nullptr);
  ep = lilims_engine_default_params();
  ep.n_seq = 0;
  EXPECT_EQ(lilims_engine_create(model.get(), &ep, &e), LILIMS_ERR_INVALID_ARGUMENT);
  ep = lilims_engine_default_params();
  ep.kv_type = 7;
  EXPECT_EQ(lilims_engine_create(model.get(), &ep, &e), LILIMS_ERR_INVALID_ARGUMENT);
  ep = lilims_engine_default_params();
  ep.max_queued = 0;
  EXPECT_EQ(lilims_engine_create(model.get(), &ep, &e), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("max_queued 0"), std::string::npos) << lilims_last_error();
  ep = lilims_engine_default_params();
  ep.n_threads = -1;
  EXPECT_EQ(lilims_engine_create(model.get(), &ep, &e), LILIMS_ERR_INVALID_ARGUMENT);
  lilims_engine_free(nullptr);
  EXPECT_EQ(lilims_engine_cancel(nullptr, 1), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_engine_n_queued(nullptr), -1);
  EXPECT_EQ(lilims_engine_n_running(nullptr), -1);

  EnginePtr engine = make_engine(model.get(), 2, 4, 64);
  const auto ids = tokenize(model.get(), "Once upon a time");
  Request r;
  uint64_t id = 99;
  lilims_generate_params gp = greedy(8);
  EXPECT_EQ(lilims_engine_submit(nullptr, ids.data(), ids.size(), &gp, nullptr, nullptr, nullptr, &id),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_engine_submit(engine.get(), nullptr, 3, &gp, nullptr, nullptr, nullptr, &id),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_engine_submit(engine.get(), ids.data(), 0, &gp, nullptr, nullptr, nullptr, &id),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(id, 0u);
  struct Bad {
    const char* what;
    lilims_generate_params gp;
    lilims_status want;
  };
  std::vector<Bad> bad;
  bad.push_back({"struct_size", greedy(8), LILIMS_ERR_INVALID_ARGUMENT});
  bad.back().gp.struct_size = 4;
  bad.push_back({"on_token", greedy(8), LILIMS_ERR_INVALID_ARGUMENT});
  bad.back().gp.on_token = collect;
  bad.push_back({"LILIMS_CONTEXT_SHIFT", greedy(8), LILIMS_ERR_INVALID_ARGUMENT});
  bad.back().gp.context_policy = LILIMS_CONTEXT_SHIFT;
  bad.push_back({"n_draft", greedy(8), LILIMS_ERR_INVALID_ARGUMENT});
  bad.back().gp.n_draft = 4;
  bad.push_back({"exclude each other", greedy(8), LILIMS_ERR_INVALID_ARGUMENT});
  bad.back().gp.json_object = 1;
  bad.back().gp.json_schema = "{\"type\": \"string\"}";
  for (Bad& b : bad) {
    EXPECT_EQ(lilims_engine_submit(engine.get(), ids.data(), ids.size(), &b.gp, on_token, on_done, &r, &id),
              b.want)
        << b.what;
    EXPECT_NE(std::string(lilims_last_error()).find(b.what), std::string::npos) << lilims_last_error();
    EXPECT_NE(std::string(lilims_last_error()).find("[engine_submit] "), std::string::npos);
  }
  const std::vector<lilims_token> outside = {1, 1 << 30};
  EXPECT_EQ(lilims_engine_submit(engine.get(), outside.data(), outside.size(), &gp, nullptr, nullptr,
                                 nullptr, &id),
            LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(lilims_last_error()).find("vocabulary"), std::string::npos) << lilims_last_error();
  const std::vector<lilims_token> long_prompt(65, ids[1]);
  EXPECT_EQ(lilims_engine_submit(engine.get(), long_prompt.data(), long_prompt.size(), &gp, nullptr,
                                 nullptr, nullptr, &id),
            LILIMS_ERR_CONTEXT_FULL);
  EXPECT_EQ(lilims_engine_cancel(engine.get(), 0), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(lilims_engine_cancel(engine.get(), 1000), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(r.n_done, 0);
  // NULL gen: the defaults; no callbacks at all is allowed.
  EXPECT_EQ(lilims_engine_submit(engine.get(), ids.data(), ids.size(), nullptr, nullptr, nullptr, nullptr,
                                 nullptr),
            LILIMS_OK)
      << lilims_last_error();
}

// Freeing an engine with requests running and queued ends each exactly once
// (running and queued ones cancelled), and the engine outlives its model's
// handle.
TEST(CApiEngine, FreeWithRequestsInFlight) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  EnginePtr engine = make_engine(model.get(), 2, 16);
  const auto ids = tokenize(model.get(), "Once upon a time");
  model.reset();
  std::vector<std::unique_ptr<Request>> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(std::make_unique<Request>());
    reqs.back()->token_delay = std::chrono::milliseconds(1);
    submit(engine.get(), ids, greedy(0), *reqs.back());
  }
  while (reqs[0]->n_streamed.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  engine.reset();
  for (auto& r : reqs) {
    EXPECT_EQ(r->n_done, 1);
    EXPECT_EQ(r->status, LILIMS_ERR_CANCELLED) << r->error;
  }
  EXPECT_GE(reqs[0]->tokens.size(), 2u);
}

// A done callback that submits the next request from the engine's thread.
struct Chain {
  lilims_engine* engine = nullptr;
  std::vector<lilims_token> prompt;
  Request next;
  lilims_status submit_status = LILIMS_ERR_INTERNAL;  // written before `submitted`
  uint64_t next_id = 0;
  std::atomic<bool> submitted{false};
};

void chain_done(void* ud, const lilims_engine_result*) {
  auto* c = static_cast<Chain*>(ud);
  const lilims_generate_params gp = greedy(16);
  c->submit_status = lilims_engine_submit(c->engine, c->prompt.data(), c->prompt.size(), &gp, on_token,
                                          on_done, &c->next, &c->next_id);
  c->submitted.store(true, std::memory_order_release);
}

int slow_token(void*, lilims_token, const char*, size_t) {
  std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return 0;
}

TEST(CApiEngine, CallbacksMayCallTheEngine) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  const Output want = reference(model.get(), "The cat", 16, 128);
  EnginePtr engine = make_engine(model.get(), 2, 4);
  Chain chain;
  chain.engine = engine.get();
  chain.prompt = tokenize(model.get(), "The cat");
  const auto ids = tokenize(model.get(), "Once upon a time");
  const lilims_generate_params gp = greedy(4);
  ASSERT_EQ(lilims_engine_submit(engine.get(), ids.data(), ids.size(), &gp, nullptr, chain_done, &chain,
                                 nullptr),
            LILIMS_OK);
  while (!chain.submitted.load(std::memory_order_acquire)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(chain.submit_status, LILIMS_OK);
  chain.next.wait();
  EXPECT_EQ(chain.next.status, LILIMS_OK) << chain.next.error;
  EXPECT_EQ(chain.next.tokens, want.tokens);
  EXPECT_EQ(chain.next.id_seen, chain.next_id);

  // While the engine is being freed, a submit from a callback is refused: the
  // request (slow, until the context is full) is still running or queued
  // when the free begins.
  Chain late;
  late.engine = engine.get();
  late.prompt = chain.prompt;
  const lilims_generate_params long_gp = greedy(0);
  ASSERT_EQ(lilims_engine_submit(engine.get(), ids.data(), ids.size(), &long_gp, slow_token, chain_done,
                                 &late, nullptr),
            LILIMS_OK);
  engine.reset();
  EXPECT_TRUE(late.submitted.load(std::memory_order_acquire));
  EXPECT_EQ(late.submit_status, LILIMS_ERR_CANCELLED);
  EXPECT_EQ(late.next_id, 0u);
  EXPECT_EQ(late.next.n_done, 0);
}

// Clients on several threads submit, cancel at random moments and wait;
// token callbacks sleep at random.  Every accepted request ends exactly
// once; those not cancelled give the session's greedy text.
TEST(CApiEngine, StressWithDelays) {
  REQUIRE_STORIES();
  ModelPtr model = open_model(stories_path());
  constexpr int32_t kMax = 12;
  const Expected expected = expected_answers(model.get(), kMax, 64);
  const auto& prompts = expected.prompts;
  const auto& want = expected.want;
  EnginePtr engine = make_engine(model.get(), 2, 4, 64, 2);
  const uint32_t seed = (uint32_t)std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::atomic<int> failures{0}, busy{0}, cancelled{0}, completed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 6; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937 rng(seed + (uint32_t)t);
      for (int k = 0; k < 6; ++k) {
        const size_t i = rng() % prompts.size();
        Request r;
        r.token_delay = std::chrono::microseconds(rng() % 800);
        uint64_t id = 0;
        const lilims_generate_params gp = greedy(kMax);
        const lilims_status st = lilims_engine_submit(engine.get(), prompts[i].data(), prompts[i].size(),
                                                      &gp, on_token, on_done, &r, &id);
        if (st == LILIMS_ERR_BUSY) {
          ++busy;
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
          continue;
        }
        if (st != LILIMS_OK) {
          ++failures;
          continue;
        }
        const bool cancel = rng() % 3 == 0;
        if (cancel) {
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
          if (lilims_engine_cancel(engine.get(), id) != LILIMS_OK) ++failures;
        }
        r.wait();
        std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a late second call would show
        std::lock_guard<std::mutex> lock(r.mu);
        if (r.n_done != 1 || r.id_seen != id) ++failures;
        if (r.status == LILIMS_ERR_CANCELLED) {
          ++cancelled;
          if (!cancel) ++failures;
        } else if (r.status != LILIMS_OK || r.tokens != want[i].tokens || r.text != want[i].text) {
          ++failures;
        } else {
          ++completed;
        }
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(completed.load(), 0);
  std::printf("stress: %d completed, %d cancelled, %d refused (queue full)\n", completed.load(),
              cancelled.load(), busy.load());
}

}  // namespace
