// What a session costs in memory: the KV cache is resident only for the
// tokens in it and given back on reset; a context beyond the model's
// training length needs an explicit opt-in; a context the machine cannot
// hold is refused, before anything is allocated, with LILIMS_ERR_OUT_OF_MEMORY.
#include <unistd.h>

#include <limits>
#include <string>

#include "base/error.h"
#include "base/memory_info.h"
#include "lilims/lilims.h"
#include "memory_util.h"
#include "runtime/engine.h"
#include "test_util.h"

namespace lilims {
namespace {

std::string stories_path() { return test::shared_data("stories260K/stories260K.gguf"); }

std::vector<int32_t> some_tokens(int n, int32_t n_vocab) {
  std::vector<int32_t> t((size_t)n);
  for (int i = 0; i < n; ++i) t[(size_t)i] = (int32_t)((1000 + 37 * (int64_t)i) % n_vocab);
  return t;
}

// K and V of one position over all layers in F16, from the hyperparameters:
// 2 * n_layer * n_head_kv * head_dim * 2 bytes (23040 for SmolLM2-135M).
int64_t kv_bytes_per_position(const models::HParams& hp) {
  return (int64_t)2 * hp.n_layer * hp.n_head_kv * hp.head_dim * 2;
}

TEST(SessionMemory, KvCacheIsResidentOnlyForItsTokensAndGivenBackOnReset) {
  LILIMS_REQUIRE_FILE(test::smollm2_path(), "scripts/fetch_model.sh fetches it");
  LILIMS_REQUIRE_RSS();
  auto model = runtime::Model::open(test::smollm2_path());
  const models::HParams& hp = model->hparams();
  const int32_t n_vocab = hp.n_vocab;
  runtime::SessionOptions so;
  so.n_threads = 2;
  // Warm up: a first forward pass allocates what any session's would
  // (thread stacks, allocator arenas), so that what follows is the session's.
  {
    so.n_ctx = 256;
    runtime::Session warm(*model, so);
    warm.eval(some_tokens(64, n_vocab));
  }
  so.n_ctx = 8192;
  const int64_t per_pos = kv_bytes_per_position(hp), page = (int64_t)sysconf(_SC_PAGESIZE);
  const int64_t full_kv = per_pos * so.n_ctx;
  // Everything but the KV cache: one block's activations, attention and
  // matmul scratch, logits (session_memory_estimate without the cache).
  const int64_t scratch = (int64_t)runtime::session_memory_estimate(*model, so) - full_kv;
  ASSERT_GT(scratch, 0);
  // Allocator bookkeeping, /proc reads, page rounding of the scratch buffers.
  const int64_t slack = 1 << 20;
  // Each (layer, K|V) region of the cache may hold one page that is only
  // partly the tokens' rows at each end.
  const int64_t region_pages = (int64_t)2 * hp.n_layer * 2 * page;

  const int64_t r0 = test::rss_anon_bytes();
  runtime::Session s(*model, so);
  const int64_t r1 = test::rss_anon_bytes();
  std::printf("n_ctx %d: full KV cache %lld bytes, scratch %lld; resident after creation +%lld\n",
              so.n_ctx, (long long)full_kv, (long long)scratch, (long long)(r1 - r0));
  EXPECT_LE(r1 - r0, scratch + slack) << "creating the session made its cache resident";

  const std::vector<int32_t> first = some_tokens(64, n_vocab);
  s.eval(first);
  const std::vector<float> logits_64 = s.logits();
  const int64_t r2 = test::rss_anon_bytes();
  std::printf("after 64 tokens: +%lld (the tokens' K/V rows: %lld)\n", (long long)(r2 - r0),
              (long long)(64 * per_pos));
  EXPECT_LE(r2 - r0, scratch + 64 * per_pos + region_pages + slack);

  std::vector<int32_t> more = some_tokens(512, n_vocab);
  more.erase(more.begin(), more.begin() + 64);
  s.eval(more);
  const int64_t r3 = test::rss_anon_bytes();
  s.reset();
  const int64_t r4 = test::rss_anon_bytes();
  std::printf("after 512 tokens: +%lld; after reset: +%lld\n", (long long)(r3 - r0),
              (long long)(r4 - r0));
  EXPECT_GE(r3 - r4, 512 * per_pos - region_pages) << "reset kept the cache's pages";

  // The pages come back as zeros; the rows are written again before any
  // read, so the same tokens give the same logits.
  s.eval(first);
  ASSERT_EQ(s.logits().size(), logits_64.size());
  for (size_t i = 0; i < logits_64.size(); ++i) {
    ASSERT_EQ(s.logits()[i], logits_64[i]) << "logit " << i << " differs after reset";
  }
}

TEST(SessionMemory, TruncateReleasesPagesAndKeepsThePrefix) {
  const std::string path = stories_path();
  LILIMS_REQUIRE_FILE(path, "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(path);
  runtime::SessionOptions so;
  so.n_ctx = 1024;
  so.n_threads = 1;
  const std::vector<int32_t> t = some_tokens(600, model->hparams().n_vocab);
  runtime::Session a(*model, so);
  a.eval(t);
  const std::vector<float> want = a.logits();
  // Dropping 580 positions frees whole pages of every layer's rows; the
  // first 20 stay and the rest is recomputed into the released pages.
  a.truncate(20);
  a.eval(std::vector<int32_t>(t.begin() + 20, t.end()));
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(a.logits()[i], want[i]) << "logit " << i << " differs after truncate";
  }
}

TEST(SessionMemory, ContextBeyondTrainingNeedsOptIn) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const int32_t train = model->hparams().n_ctx_train;
  runtime::SessionOptions so;
  so.n_threads = 1;
  so.n_ctx = train;
  EXPECT_EQ(runtime::Session(*model, so).n_ctx(), train);
  so.n_ctx = train + 1;
  try {
    runtime::Session s(*model, so);
    FAIL() << "n_ctx " << so.n_ctx << " above the training context " << train << " was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_INVALID_ARGUMENT);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[session]", 0), 0u) << msg;
    EXPECT_NE(msg.find("allow_ctx_beyond_train"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--ctx-beyond-train"), std::string::npos) << msg;
  }
  so.allow_ctx_beyond_train = true;
  runtime::Session s(*model, so);
  EXPECT_EQ(s.n_ctx(), train + 1);
  s.eval(some_tokens(8, model->hparams().n_vocab));
}

TEST(SessionMemory, ContextBeyondMemoryIsRefusedBeforeAllocating) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  runtime::SessionOptions so;
  so.n_threads = 1;
  so.allow_ctx_beyond_train = true;
  // 2^31 - 1 positions of even this tiny model's K/V (640 bytes each) are
  // 1.4 TB: more than any machine running the tests has.
  so.n_ctx = std::numeric_limits<int32_t>::max();
  const uint64_t need = runtime::session_memory_estimate(*model, so);
  EXPECT_GE(need, (uint64_t)kv_bytes_per_position(model->hparams()) * (uint64_t)so.n_ctx);
  const int64_t r0 = test::rss_anon_bytes();
  try {
    runtime::Session s(*model, so);
    FAIL() << "a context needing " << need << " bytes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), LILIMS_ERR_OUT_OF_MEMORY) << e.what();
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("[session]", 0), 0u) << msg;
    EXPECT_NE(msg.find(std::to_string(need) + " bytes"), std::string::npos) << msg;
    EXPECT_NE(msg.find("available"), std::string::npos) << msg;
  }
  if (r0 >= 0) {
    EXPECT_LT(test::rss_anon_bytes() - r0, 1 << 20) << "the refusal allocated";
  }

  // The estimate grows by the KV bytes of a position per position (plus
  // the reference attention's per-thread scores row, 4 bytes a position,
  // once that row is larger than the SIMD tiles' scratch: from 2048
  // positions at this model's head dim of 8).
  so.n_ctx = 2048;
  const uint64_t e1 = runtime::session_memory_estimate(*model, so);
  so.n_ctx = 4096;
  const uint64_t e2 = runtime::session_memory_estimate(*model, so);
  EXPECT_EQ(e2 - e1, 2048u * ((uint64_t)kv_bytes_per_position(model->hparams()) + 4));
  EXPECT_GT(available_memory_bytes(), 0u) << "no memory figure on this system";
}

// The default prefill block is the largest of 256, 128 and 64 rows that
// leaves the session within its budget at its context, so a tight budget
// costs prompt speed before it costs context.
TEST(SessionMemory, DefaultBlockShrinksBeforeTheContext) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  auto model = runtime::Model::open(stories_path());
  const int32_t n_train = model->hparams().n_ctx_train;
  runtime::SessionOptions so;
  so.n_threads = 1;
  so.allow_ctx_beyond_train = true;
  so.n_ctx = 1024;
  auto block_of = [&](const runtime::SessionOptions& o) {
    runtime::Session s(*model, o);
    return s.executor().plan().opt.n_batch;
  };
  EXPECT_EQ(block_of(so), runtime::kMaxDefaultBatch);  // no budget: what the machine has
  uint64_t need[3];
  const int32_t blocks[3] = {64, 128, 256};
  for (int i = 0; i < 3; ++i) {
    runtime::SessionOptions o = so;
    o.n_batch = blocks[i];
    need[i] = runtime::session_memory_estimate(*model, o);
    if (i > 0) {
      EXPECT_GT(need[i], need[i - 1]) << "a block of " << blocks[i];
    }
  }
  for (int i = 0; i < 3; ++i) {
    for (uint64_t budget : {need[i], i < 2 ? need[i + 1] - 1 : need[i] + 4096}) {
      runtime::SessionOptions o = so;
      o.memory_budget = budget;
      EXPECT_EQ(block_of(o), blocks[i]) << "budget " << budget;
      EXPECT_EQ(runtime::session_memory_estimate(*model, o), need[i]) << "budget " << budget;
    }
  }
  // The context is resolved first, with the smallest block: a budget that
  // holds the training context only with 64 rows keeps that context.
  runtime::SessionOptions o = so;
  o.n_ctx = n_train;
  o.n_batch = runtime::kMinDefaultBatch;
  const uint64_t at_train = runtime::session_memory_estimate(*model, o);
  o.n_batch = 0;
  o.n_ctx = 0;
  o.memory_budget = at_train;
  runtime::Session s(*model, o);
  EXPECT_EQ(s.executor().plan().opt.n_ctx, n_train);
  EXPECT_EQ(s.executor().plan().opt.n_batch, std::min(runtime::kMinDefaultBatch, n_train));
}

// The model's estimate, made from the parsed file before any weight is
// read, bounds what the loaded model takes: weights (mapped and heap) and
// host structures, read or mapped, repacked or not.
TEST(SessionMemory, ModelEstimateBoundsTheLoadedModel) {
  for (const std::string& path : {stories_path(), test::smollm2_path()}) {
    LILIMS_REQUIRE_FILE(path, "stories260K: ../shared/data; SmolLM2: scripts/fetch_model.sh");
    for (bool mmap : {true, false}) {
      for (bool repack : {true, false}) {
        SCOPED_TRACE(path + (mmap ? " mapped" : " read") + (repack ? " repacked" : ""));
        runtime::ModelOptions mo;
        mo.use_mmap = mmap;
        mo.repack = repack;
        gguf::OpenOptions go;
        go.use_mmap = mmap;
        const uint64_t estimate = runtime::model_memory_estimate(*gguf::File::open(path, go), mo);
        auto model = runtime::Model::open(path, mo);
        const graph::ModelMemory mm = model->memory(model->hparams().n_ctx_train);
        const uint64_t image = model->weights().file->file_size();
        // The image holds every weight; a read one stays whole beside the repacked copies.
        const uint64_t weights = mmap ? std::max<uint64_t>(image, mm.weights_mapped + mm.weights_heap)
                                      : image + mm.weights_heap;
        EXPECT_GE(estimate, weights + mm.host) << "host " << mm.host;
        // and not by a wide margin: the tokenizer bound is within a few times what it takes
        EXPECT_LE(estimate, weights + 8 * mm.host + (4u << 20));
      }
    }
  }
}

TEST(SessionMemory, CApiOptInAndOutOfMemory) {
  LILIMS_REQUIRE_FILE(stories_path(), "../shared/data/stories260K, see SOURCES.md");
  lilims_model* model = nullptr;
  ASSERT_EQ(lilims_model_open(stories_path().c_str(), nullptr, &model), LILIMS_OK)
      << lilims_last_error();
  lilims_model_info info;
  std::memset(&info, 0, sizeof info);
  info.struct_size = sizeof info;
  ASSERT_EQ(lilims_model_get_info(model, &info), LILIMS_OK) << lilims_last_error();

  lilims_session_params sp = lilims_session_default_params();
  EXPECT_EQ(sp.allow_ctx_beyond_train, 0);
  sp.n_threads = 1;
  sp.n_ctx = info.n_ctx_train + 1;
  lilims_session* s = nullptr;
  EXPECT_EQ(lilims_session_create(model, &sp, &s), LILIMS_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(lilims_last_error()).find("allow_ctx_beyond_train"), std::string::npos)
      << lilims_last_error();

  sp.allow_ctx_beyond_train = 1;
  ASSERT_EQ(lilims_session_create(model, &sp, &s), LILIMS_OK) << lilims_last_error();
  EXPECT_EQ(lilims_session_n_ctx(s), info.n_ctx_train + 1);
  lilims_session_free(s);
  s = nullptr;

  sp.n_ctx = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(lilims_session_create(model, &sp, &s), LILIMS_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(std::string(lilims_last_error()).find("available"), std::string::npos)
      << lilims_last_error();
  lilims_model_free(model);
}

}  // namespace
}  // namespace lilims
