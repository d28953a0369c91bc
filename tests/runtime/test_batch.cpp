// Many sequences in one forward pass (runtime/batch.h, graph::Executor::
// forward_batch): each row's logits bit-identical to its sequence evaluated
// alone one token at a time; sequences joining and leaving between steps;
// prompt-prefix reuse; and the engine's queue, cancels and callbacks under
// more threads than cores with injected delays (also run under TSan).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "base/error.h"
#include "runtime/batch.h"
#include "runtime/batch_engine.h"
#include "runtime/engine.h"
#include "pool_delays.h"
#include "test_util.h"

namespace lilims {
namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

// Prompts of different lengths (and one sharing another's start).
std::vector<std::vector<int32_t>> prompts_for(const runtime::Model& m) {
  const tok::Tokenizer& tk = m.tokenizer();
  return {tk.encode("Once upon a time", true, false),
          tk.encode("The little dog ran to the park and saw a big red ball", true, false),
          tk.encode("Lily", true, false),
          tk.encode("Once upon a time there was a cat", true, false)};
}

// Greedy tokens of `prompt` evaluated alone, every position as a one-token
// decode (eval_all_logits_as_decode): what a batch must reproduce exactly.
std::vector<int32_t> alone_as_decode(const runtime::Model& model, const std::vector<int32_t>& prompt,
                                     int n, int32_t n_ctx, int threads) {
  runtime::SessionOptions so;
  so.n_ctx = n_ctx;
  so.n_threads = threads;
  runtime::Session s(model, so);
  std::vector<float> logits;
  s.eval_all_logits_as_decode(prompt, logits);
  const int32_t n_vocab = model.hparams().n_vocab;
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const int32_t next = runtime::argmax(logits.data() + logits.size() - (size_t)n_vocab, n_vocab);
    if (model.tokenizer().is_eog(next)) break;
    out.push_back(next);
    s.eval_all_logits_as_decode({next}, logits);
  }
  return out;
}

// Every prompt in one forward, then 12 steps of one token per sequence
// (each taking the argmax of its own row), at 1 and 3 threads: each row's
// logits equal, bit for bit, the sequence's own as-decode evaluation.
void check_batch_forward(const std::string& path) {
  {
    auto model = runtime::Model::open(path);
    const auto prompts = prompts_for(*model);
    const int32_t n_ctx = 128;
    for (int threads : {1, 3}) {
      runtime::SessionOptions so;
      so.n_ctx = n_ctx;
      so.n_threads = threads;
      so.n_batch = 64;
      so.kv_commit = graph::KvCommit::sync;
      graph::ThreadPool pool(threads);
      runtime::PlannedSession ps = runtime::plan_session(*model, so);
      graph::Executor batch(std::move(ps.graph), std::move(ps.plan), pool);
      std::vector<std::unique_ptr<graph::KvCache>> caches;
      std::vector<std::unique_ptr<runtime::Session>> alone;
      for (size_t i = 0; i < prompts.size(); ++i) {
        caches.push_back(batch.make_sequence_cache());
        alone.push_back(std::make_unique<runtime::Session>(*model, so));
      }
      const size_t n_vocab = (size_t)model->hparams().n_vocab;
      // Step 0: every prompt at once; then 12 steps of one token each, the
      // sequences taking the argmax of their own rows.
      std::vector<std::vector<int32_t>> todo(prompts.begin(), prompts.end());
      std::vector<int32_t> pos(prompts.size(), 0);
      for (int step = 0; step < 13; ++step) {
        std::vector<int32_t> rows;
        std::vector<graph::BatchRun> runs;
        for (size_t i = 0; i < todo.size(); ++i) {
          graph::BatchRun r;
          r.kv = caches[i].get();
          r.row0 = (int32_t)rows.size();
          r.n = (int32_t)todo[i].size();
          r.pos0 = pos[i];
          rows.insert(rows.end(), todo[i].begin(), todo[i].end());
          runs.push_back(r);
        }
        std::vector<float> logits(runs.size() * n_vocab);
        batch.forward_batch(rows.data(), runs.data(), (int)runs.size(), logits.data());
        for (size_t i = 0; i < todo.size(); ++i) {
          std::vector<float> ref;
          alone[i]->eval_all_logits_as_decode(todo[i], ref);
          const float* got = logits.data() + i * n_vocab;
          ASSERT_EQ(0, std::memcmp(got, ref.data() + ref.size() - n_vocab, n_vocab * sizeof(float)))
              << path << " threads " << threads << " step " << step << " sequence " << i;
          pos[i] += (int32_t)todo[i].size();
          todo[i] = {runtime::argmax(got, (int32_t)n_vocab)};
        }
      }
    }
  }
}

TEST(BatchForward, LogitsBitIdenticalToOneSequenceAsDecodeStories260K) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  check_batch_forward(stories_path());
}

TEST(BatchForward, LogitsBitIdenticalToOneSequenceAsDecodeSmolLM2) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh");
  check_batch_forward(test::smollm2_path());
}

struct Collected {
  std::mutex mu;
  std::vector<runtime::GenerateResult> results;
  std::vector<int> calls;
};

TEST(Batch, GreedyEqualsOneSequenceAloneWithJoinsAndLeaves) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const auto prompts = prompts_for(*model);
  runtime::BatchOptions bo;
  bo.n_ctx = 128;
  bo.n_seq = 3;
  bo.n_threads = 2;
  bo.n_batch = 8;  // prompts go in pieces, beside other sequences' tokens
  runtime::Batch batch(*model, bo);
  std::vector<runtime::GenerateResult> got(prompts.size());
  std::vector<int> done_calls(prompts.size(), 0);
  const int caps[] = {20, 5, 30, 12};
  size_t next = 0;
  int steps = 0;
  while (next < prompts.size() || batch.n_active() > 0) {
    // Join whenever a slot is free (continuous batching).
    while (next < prompts.size() && batch.n_free() > 0) {
      runtime::GenerateOptions opt;
      opt.max_tokens = caps[next];
      const size_t i = next++;
      ASSERT_GE(batch.add(prompts[i], opt,
                          [&, i](runtime::GenerateResult& r, lilims_status st, const std::string& e) {
                            EXPECT_EQ(st, LILIMS_OK) << e;
                            got[i] = r;
                            ++done_calls[i];
                          }),
                0);
    }
    batch.step();
    ASSERT_LT(++steps, 1000);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(done_calls[i], 1);
    EXPECT_EQ(got[i].tokens, alone_as_decode(*model, prompts[i], caps[i], 128, 1)) << "prompt " << i;
    // A session's prompt block sums attention in another order: same greedy text here.
    runtime::SessionOptions so;
    so.n_ctx = 128;
    runtime::Session s(*model, so);
    runtime::GenerateOptions opt;
    opt.max_tokens = caps[i];
    EXPECT_EQ(got[i].text, s.generate_tokens(prompts[i], opt).text) << "prompt " << i;
  }
  // The batch was wider than one row per step.
  EXPECT_GT(batch.n_rows(), batch.n_steps());
}

TEST(Batch, ReusesTheLongestCachedPrefix) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const auto prompts = prompts_for(*model);
  runtime::BatchOptions bo;
  bo.n_ctx = 128;
  bo.n_seq = 2;
  bo.n_threads = 1;
  runtime::Batch batch(*model, bo);
  const auto run = [&](const std::vector<int32_t>& prompt) {
    runtime::GenerateResult out;
    runtime::GenerateOptions opt;
    opt.max_tokens = 8;
    batch.add(prompt, opt, [&](runtime::GenerateResult& r, lilims_status, const std::string&) { out = r; });
    while (batch.n_active() > 0) batch.step();
    return out;
  };
  const runtime::GenerateResult a = run(prompts[0]);
  EXPECT_EQ(a.n_reused_tokens, 0);
  run(prompts[2]);  // the other slot: BOS alone is no prefix worth a cached sequence
  // "Once upon a time there was a cat" starts with prompts[0]: its slot is chosen.
  const runtime::GenerateResult b = run(prompts[3]);
  EXPECT_EQ(b.n_reused_tokens, (int32_t)prompts[0].size());
  EXPECT_EQ(b.tokens, alone_as_decode(*model, prompts[3], 8, 128, 1));
  // The same prompt again: all but its last token come from the cache.
  const runtime::GenerateResult c = run(prompts[3]);
  EXPECT_EQ(c.n_reused_tokens, (int32_t)prompts[3].size() - 1);
  EXPECT_EQ(c.tokens, b.tokens);
}

TEST(Batch, SchemaAndStopStringsPerSequence) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const auto prompts = prompts_for(*model);
  runtime::BatchOptions bo;
  bo.n_ctx = 256;
  bo.n_seq = 3;
  bo.n_threads = 2;
  runtime::Batch batch(*model, bo);
  std::vector<runtime::GenerateOptions> opts(3);
  opts[0].json_schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},"age":{"type":"integer"}},"required":["name","age"]})";
  opts[0].max_tokens = 80;
  opts[1].stop = {"."};
  opts[1].max_tokens = 60;
  opts[2].json = true;
  opts[2].max_tokens = 40;
  opts[2].sampling.temperature = 0.8f;
  opts[2].sampling.seed = 7;
  std::vector<runtime::GenerateResult> got(3);
  for (int i = 0; i < 3; ++i) {
    batch.add(prompts[(size_t)i], opts[(size_t)i],
              [&, i](runtime::GenerateResult& r, lilims_status st, const std::string& e) {
                EXPECT_EQ(st, LILIMS_OK) << e;
                got[(size_t)i] = r;
              });
  }
  while (batch.n_active() > 0) batch.step();
  for (int i = 0; i < 3; ++i) {
    runtime::SessionOptions so;
    so.n_ctx = 256;
    runtime::Session s(*model, so);
    const runtime::GenerateResult ref = s.generate_tokens(prompts[(size_t)i], opts[(size_t)i]);
    EXPECT_EQ(got[(size_t)i].text, ref.text) << "sequence " << i;
    EXPECT_EQ(got[(size_t)i].stop, ref.stop) << "sequence " << i;
  }
  EXPECT_EQ(got[0].stop, runtime::StopReason::end_of_generation);
  EXPECT_EQ(got[1].text.find('.'), std::string::npos);
}

TEST(Batch, RefusesWhatItCannotRun) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  runtime::BatchOptions bo;
  bo.n_ctx = 64;
  bo.n_seq = 1;
  bo.n_threads = 1;
  runtime::Batch batch(*model, bo);
  const auto status_of = [&](const std::vector<int32_t>& prompt, const runtime::GenerateOptions& opt) {
    try {
      batch.check(prompt, opt);
      return LILIMS_OK;
    } catch (const Error& e) {
      return e.status();
    }
  };
  runtime::GenerateOptions ok;
  EXPECT_EQ(status_of({1, 2, 3}, ok), LILIMS_OK);
  EXPECT_EQ(status_of({}, ok), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(status_of(std::vector<int32_t>(65, 5), ok), LILIMS_ERR_CONTEXT_FULL);
  EXPECT_EQ(status_of({1, 99999}, ok), LILIMS_ERR_INVALID_ARGUMENT);
  runtime::GenerateOptions bad_schema;
  bad_schema.json_schema = "{\"type\": 5}";
  EXPECT_EQ(status_of({1, 2}, bad_schema), LILIMS_ERR_INVALID_ARGUMENT);
  runtime::GenerateOptions shift;
  shift.context_policy = runtime::ContextPolicy::shift;
  EXPECT_EQ(status_of({1, 2}, shift), LILIMS_ERR_INVALID_ARGUMENT);
  runtime::GenerateOptions tiny;
  tiny.json = true;
  tiny.max_tokens = 1;
  EXPECT_EQ(status_of({1, 2}, tiny), LILIMS_ERR_INVALID_ARGUMENT);
  // A full context ends a sequence (context_full), and the batch goes on.
  runtime::GenerateResult r;
  runtime::GenerateOptions opt;
  opt.max_tokens = 0;
  for (int32_t id = 0; id < model->hparams().n_vocab; ++id) {
    if (model->tokenizer().is_eog(id) || id == model->tokenizer().bos()) {
      opt.sampling.logit_bias.push_back({id, -INFINITY});
    }
  }
  batch.add(std::vector<int32_t>(60, 5), opt, [&](runtime::GenerateResult& g, lilims_status, const std::string&) { r = g; });
  while (batch.n_active() > 0) batch.step();
  EXPECT_EQ(r.stop, runtime::StopReason::context_full);
  EXPECT_EQ(r.tokens.size(), 5u);
}

// More client threads than cores, delays in the thread pool (pool_delays.h)
// and between steps, random cancels: every request's done runs once, a
// finished request's tokens equal its sequence alone, the queue refuses
// when full, and the engine shuts down with requests still queued.
TEST(BatchEngine, StressManyClientsCancelsAndAFullQueue) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const auto prompts = prompts_for(*model);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& p : prompts) expected.push_back(alone_as_decode(*model, p, 10, 128, 1));
  runtime::BatchOptions bo;
  bo.n_ctx = 128;
  bo.n_seq = 3;
  bo.n_threads = 3;
  bo.n_batch = 16;
  bo.pool_hook = graph::PoolHook{test::pool_delays, nullptr};
  std::atomic<int> refused{0}, finished{0}, cancelled{0}, mismatched{0};
  {
    auto owned = std::make_unique<runtime::BatchEngine>(*model, bo, 4);
    runtime::BatchEngine& engine = *owned;
    engine.set_step_hook([] {
      thread_local std::mt19937 rng(12345);
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 300));
    });
    const int kClients = 8, kEach = 6;
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        std::mt19937 rng((unsigned)c * 7919u + 1);
        for (int k = 0; k < kEach; ++k) {
          const size_t which = rng() % prompts.size();
          auto done = std::make_shared<std::atomic<int>>(0);
          auto tokens = std::make_shared<std::vector<int32_t>>();
          auto stop = std::make_shared<runtime::StopReason>();
          std::mutex mu;
          std::condition_variable cv;
          runtime::BatchRequest r;
          r.prompt = prompts[which];
          r.opt.max_tokens = 10;
          r.opt.on_token = [](int32_t, const std::string&) { return false; };
          r.done = [&, done, tokens, stop](runtime::GenerateResult& g, lilims_status, const std::string&) {
            std::lock_guard<std::mutex> lock(mu);
            *tokens = g.tokens;
            *stop = g.stop;
            done->fetch_add(1);
            cv.notify_one();
          };
          auto cancel = r.cancel;
          if (!engine.submit(std::move(r))) {
            ++refused;
            continue;
          }
          if (rng() % 3 == 0) {
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
            cancel->store(true);
          }
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return done->load() > 0; });
          EXPECT_EQ(done->load(), 1);
          if (*stop == runtime::StopReason::cancelled) {
            ++cancelled;
            // What came before the cancel is a prefix of the whole answer.
            if (!std::equal(tokens->begin(), tokens->end(), expected[which].begin())) ++mismatched;
          } else {
            ++finished;
            if (*tokens != expected[which]) ++mismatched;
          }
        }
      });
    }
    for (auto& t : clients) t.join();
    // Queued requests at shutdown end as cancelled, their done called.
    std::atomic<int> at_exit{0};
    for (int i = 0; i < 3; ++i) {
      runtime::BatchRequest r;
      r.prompt = prompts[0];
      r.opt.max_tokens = 50;
      r.done = [&](runtime::GenerateResult&, lilims_status, const std::string&) { ++at_exit; };
      engine.submit(std::move(r));
    }
    owned.reset();
    EXPECT_EQ(at_exit.load(), 3);
    runtime::BatchEngine none(*model, bo, 0);  // a queue of 0 refuses everything
    runtime::BatchRequest r;
    r.prompt = prompts[0];
    EXPECT_FALSE(none.submit(std::move(r)));
  }
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_GT(finished.load(), 0);
  std::printf("finished %d, cancelled %d, refused %d\n", finished.load(), cancelled.load(), refused.load());
}

}  // namespace
}  // namespace lilims
