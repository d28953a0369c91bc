// The KV cache's staged rows: committing them inline (sync) or on the
// cache's helper thread while the next chunks run (async) must give
// bit-identical logits.  Random sleeps, yields and spins are injected before
// every commit so that the helper lags the executor by up to several chunks;
// only the fences (graph/kv_cache.h) keep the results equal, and a build with
// -DLILIMS_KV_DROP_FENCE=ON fails these tests.  CI also runs them under
// ThreadSanitizer (scripts/test.sh).
//
// Models: the tiny llama and Phi-3 (fused QKV, sliding window 16) of
// tests/data/tiny, stories260K (5 layers: chunks of 2, 2 and 1 layers) and
// SmolLM2 (30 layers in chunks of 4, Q8_0 cache; when fetched), with F32,
// F16 and Q8_0 caches; prompts of 1, 63, 64, 65 and 200 tokens in
// 64-token blocks, and a greedy generation that fills the context.
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

struct Delays {
  std::atomic<uint64_t> state{0};
  std::atomic<int> commits{0};
  static void hook(void* user, int) {
    auto* d = static_cast<Delays*>(user);
    d->commits.fetch_add(1, std::memory_order_relaxed);
    // xorshift on a shared state: the pattern differs from run to run and
    // thread to thread, which is the point.
    uint64_t x = d->state.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed);
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    switch (x % 4) {
      case 0: break;
      case 1: std::this_thread::yield(); break;
      case 2: std::this_thread::sleep_for(std::chrono::microseconds(x % 300)); break;
      default: {
        const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(x % 100);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    }
  }
};

struct ModelCase {
  const char* path;  // "SmolLM2": the real model, when fetched
  bool shared;       // ../shared/data (else the repo)
  int chunk_layers;
  quant::Type kv;
};

std::string path_of(const ModelCase& s) {
  if (std::string(s.path) == "SmolLM2") return test::smollm2_path();
  return s.shared ? test::shared_data(s.path) : test::source_path(s.path);
}

runtime::SessionOptions options(const ModelCase& s, graph::KvCommit commit, Delays* delays,
                                int threads) {
  runtime::SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 64;  // the block boundaries the prompt lengths straddle
  so.allow_ctx_beyond_train = true;  // the tiny models say 128; the arithmetic does not care
  so.n_threads = threads;
  so.chunk_layers = s.chunk_layers;
  so.kv_type = s.kv;
  so.kv_commit = commit;
  if (delays) so.commit_hook = graph::CommitHook{&Delays::hook, delays};
  return so;
}

std::vector<int32_t> prompt_of(int n, int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> ids((size_t)n);
  for (int32_t& t : ids) t = (int32_t)(3 + rng() % (uint32_t)(n_vocab - 3));
  return ids;
}

class KvCommitModes : public ::testing::TestWithParam<ModelCase> {};

TEST_P(KvCommitModes, AsyncEqualsSyncBitForBit) {
  const ModelCase s = GetParam();
  if (!test::file_exists(path_of(s))) GTEST_SKIP() << path_of(s) << " is absent (scripts/fetch_model.sh)";
  const auto model = runtime::Model::open(path_of(s));
  const int32_t n_vocab = model->hparams().n_vocab;
  for (int threads : {1, 3}) {
    for (int n : {1, 63, 64, 65, 200}) {
      const std::vector<int32_t> ids = prompt_of(n, n_vocab, 1000u + (uint32_t)n);
      std::vector<float> want, got, skipped;
      {
        runtime::Session sync(*model, options(s, graph::KvCommit::sync, nullptr, threads));
        sync.eval_all_logits(ids, want);
      }
      Delays delays;
      {
        runtime::Session async(*model, options(s, graph::KvCommit::async, &delays, threads));
        async.eval_all_logits(ids, got);
      }
      ASSERT_EQ(want.size(), got.size());
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
          << s.path << ": async differs from sync, " << n << " tokens, " << threads << " threads";
      EXPECT_GT(delays.commits.load(), 0);
      // The commit matters: without it, any prompt that spans two blocks
      // reads an empty cache and differs (so this test can fail).
      if (n > 64) {
        runtime::Session skip(*model, options(s, graph::KvCommit::skip, nullptr, threads));
        skip.eval_all_logits(ids, skipped);
        EXPECT_NE(0, std::memcmp(want.data(), skipped.data(), want.size() * sizeof(float)));
      }
    }
  }
}

TEST_P(KvCommitModes, GreedyGenerationFillingTheContextIsIdentical) {
  const ModelCase s = GetParam();
  if (!test::file_exists(path_of(s))) GTEST_SKIP() << path_of(s) << " is absent (scripts/fetch_model.sh)";
  const auto model = runtime::Model::open(path_of(s));
  const std::vector<int32_t> prompt = prompt_of(5, model->hparams().n_vocab, 7);
  auto run = [&](graph::KvCommit mode, Delays* d) {
    runtime::Session session(*model, options(s, mode, d, 2));
    runtime::GenerateOptions go;
    go.max_tokens = 0;  // until the context is full (or EOG)
    go.sampling.temperature = 0.0f;
    go.add_bos = false;
    std::vector<float> last;
    runtime::GenerateResult r = session.generate_tokens(prompt, go);
    return std::make_pair(r.tokens, session.logits());
  };
  Delays delays;
  const auto want = run(graph::KvCommit::sync, nullptr);
  const auto got = run(graph::KvCommit::async, &delays);
  EXPECT_EQ(want.first, got.first);
  ASSERT_EQ(want.second.size(), got.second.size());
  EXPECT_EQ(0, std::memcmp(want.second.data(), got.second.data(), want.second.size() * sizeof(float)));
  std::printf("[ %s ] %zu tokens generated, %d async commits\n", s.path, got.first.size(),
              delays.commits.load());
}

INSTANTIATE_TEST_SUITE_P(
    Models, KvCommitModes,
    ::testing::Values(ModelCase{"tests/data/tiny/llama.gguf", false, 1, quant::Type::F16},
                      ModelCase{"tests/data/tiny/phi3.gguf", false, 1, quant::Type::F32},
                      ModelCase{"stories260K/stories260K.gguf", true, 2, quant::Type::F16},
                      ModelCase{"SmolLM2", false, 4, quant::Type::Q8_0}),
    [](const ::testing::TestParamInfo<ModelCase>& info) {
      std::string name = info.param.path;
      name = name.substr(name.rfind('/') + 1);
      name = name.substr(0, name.find('.'));
      return name + "_chunk" + std::to_string(info.param.chunk_layers) + "_" +
             quant::ggml_type_name((uint32_t)info.param.kv);
    });

}  // namespace
}  // namespace lilims
